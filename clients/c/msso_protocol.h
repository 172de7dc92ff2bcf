/* The constants of the msso wire protocol (docs/PROTOCOL.md), for C: the one C copy of them.
 * libmsso (msso.h) and the PAM module (pam/) both take them from here. The version, the frame cap,
 * the method names and the lists of names (session states, signals, errors with their exit
 * statuses) are generated from protocol/names.json by scripts/generate-names; the socket's address
 * is written here by hand.
 *
 * The lists of names are X-macros: each user names its own identifiers, e.g.
 *     #define STATE_ENUM(id, name) MSSO_STATE_##id,
 *     enum { MSSO_SESSION_STATES(STATE_ENUM) };
 * Nothing here allocates or declares a function: it is safe to include anywhere. */
#ifndef MSSO_PROTOCOL_H
#define MSSO_PROTOCOL_H

/* BEGIN GENERATED constants: by scripts/generate-names from protocol/names.json; do not edit */
/* The version of the protocol this code speaks: a client names it in `hello`, and a daemon
 * refuses a version it does not speak (UnsupportedVersion). */
#define MSSO_PROTOCOL_VERSION 1

/* The largest payload of one frame, in bytes, in both directions (the 4-byte length prefix not
 * counted): far above any real message. A frame announcing more ends the connection before any
 * of it is read. */
#define MSSO_MAX_FRAME 65536

/* The methods, by name. */
#define MSSO_METHOD_HELLO "hello"
#define MSSO_METHOD_PING "ping"
#define MSSO_METHOD_LOGIN "login"
#define MSSO_METHOD_EXTEND "extend"
#define MSSO_METHOD_LOGOUT "logout"
#define MSSO_METHOD_STATUS "status"
#define MSSO_METHOD_CHECK "check"
#define MSSO_METHOD_SIGN "sign"
#define MSSO_METHOD_TOKEN "token"
#define MSSO_METHOD_SUBSCRIBE "subscribe"
#define MSSO_METHOD_APPS "apps"
#define MSSO_METHOD_AUDIT "audit"
#define MSSO_METHOD_KEYS "keys"
#define MSSO_METHOD_LOCK "lock"
#define MSSO_METHOD_UNLOCK "unlock"
#define MSSO_METHOD_DIAGNOSE "diagnose"
#define MSSO_METHOD_FORWARD "forward"
/* END GENERATED constants */

/* Where the broker listens: $MSSO_SOCKET, else $XDG_RUNTIME_DIR/MSSO_SOCKET_NAME, else
 * /run/user/UID/MSSO_SOCKET_NAME. */
#define MSSO_SOCKET_ENV "MSSO_SOCKET"
#define MSSO_SOCKET_NAME "msso/broker.sock"

/* BEGIN GENERATED names: by scripts/generate-names from protocol/names.json; do not edit */
/* A session's `state` (SessionStatus): X(ID, "name"). */
#define MSSO_SESSION_STATES(X)      \
    X(VALID, "valid")               \
    X(EXPIRED, "expired")           \
    X(NOT_LOGGED_IN, "notLoggedIn") \
    X(CORRUPT, "corrupt")

/* The signals: X(ID, "name"). */
#define MSSO_SIGNALS(X)                \
    X(LOGGED_IN, "LoggedIn")           \
    X(EXTENDED, "Extended")            \
    X(LOGGED_OUT, "LoggedOut")         \
    X(EXPIRING, "Expiring")            \
    X(EXPIRED, "Expired")              \
    X(DEVICE_PROMPT, "DevicePrompt")   \
    X(BROWSER_PROMPT, "BrowserPrompt")

/* The error names, each with the exit status the msso command gives it: X(ID, "Name", status).
 * BrokerUnreachable is the clients' own (nothing answers on the socket); the daemon never sends
 * it. A name not listed here is to be treated as Internal. Append only: libmsso's error codes
 * (msso.h) follow this order. */
#define MSSO_ERRORS(X)                               \
    X(NOT_LOGGED_IN, "NotLoggedIn", 2)               \
    X(EXPIRED, "Expired", 1)                         \
    X(CORRUPT, "Corrupt", 4)                         \
    X(BUSY, "Busy", 3)                               \
    X(TIMED_OUT, "TimedOut", 3)                      \
    X(KEYRING_LOCKED, "KeyringLocked", 4)            \
    X(KEYRING_UNAVAILABLE, "KeyringUnavailable", 4)  \
    X(LOCKED, "Locked", 8)                           \
    X(IDP_UNAVAILABLE, "IdPUnavailable", 5)          \
    X(INVALID_CREDENTIALS, "InvalidCredentials", 6)  \
    X(LOGIN_DENIED, "LoginDenied", 6)                \
    X(FORBIDDEN, "Forbidden", 7)                     \
    X(RESOURCE_FORBIDDEN, "ResourceForbidden", 7)    \
    X(NOT_ENTITLED, "NotEntitled", 7)                \
    X(UNKNOWN_GROUP, "UnknownGroup", 64)             \
    X(UNKNOWN_METHOD, "UnknownMethod", 64)           \
    X(BAD_REQUEST, "BadRequest", 64)                 \
    X(UNSUPPORTED_VERSION, "UnsupportedVersion", 64) \
    X(CONFIG_INVALID, "ConfigInvalid", 78)           \
    X(BROKER_UNREACHABLE, "BrokerUnreachable", 3)    \
    X(INTERNAL, "Internal", 70)                      \
    X(RESOURCE_REFUSED, "ResourceRefused", 6)
/* END GENERATED names */

#endif
