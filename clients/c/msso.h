/* libmsso: the C client of msso's broker, mssod (docs/PROTOCOL.md). A small synchronous API:
 * each call sends one request on the client's Unix socket and waits for its answer.
 *
 *     msso_error err;
 *     msso_client *broker = msso_connect(NULL, &err);     // $MSSO_SOCKET or the user's broker
 *     msso_request request = { .method = "GET", .url = "https://api.example.com/items" };
 *     msso_headers headers;
 *     if (!broker || msso_sign(broker, &request, &headers, &err) != 0) {
 *         fprintf(stderr, "my-app: %s\n", err.message);   // the daemon's sentence for the user
 *         return err.exit_status;                         // as the msso command exits
 *     }
 *     for (size_t i = 0; i < headers.count; i++) add_header(headers.items[i].name, headers.items[i].value);
 *     msso_headers_free(&headers);                        // wiped: they carry the token
 *     msso_close(broker);
 *
 * Every function that can fail returns 0 on success and -1 on failure (msso_connect: NULL), and
 * then fills *err (which may be NULL). Results are the caller's, freed with their _free function,
 * which wipes what may be secret (explicit_bzero) and leaves the struct zeroed; freeing a zeroed
 * result is harmless. Strings the daemon sent are valid UTF-8 without NUL, as sent: replace
 * control characters before showing them on a terminal.
 *
 * Threads: one msso_client must not be used by two threads at once (give each thread its own, or
 * hold a lock around the calls); distinct clients share nothing. The library has no global state.
 * A forked child may go on using its parent's client: its next call opens a connection of its own
 * (the parent's subscription stays with the parent). Descriptors are close-on-exec.
 *
 * Man page: libmsso(3). */
#ifndef MSSO_H
#define MSSO_H

#include <stddef.h>

#include "msso_protocol.h"

#ifdef __cplusplus
extern "C" {
#endif

/* -- errors ---------------------------------------------------------------------------------- */

#define MSSO_ERROR_ENUM_(id, name, status) MSSO_E_##id,
/* MSSO_OK, then one code per error name of the protocol: MSSO_E_NOT_LOGGED_IN, MSSO_E_EXPIRED, …
 * (msso_protocol.h's MSSO_ERRORS, in its order). */
typedef enum msso_code { MSSO_OK = 0, MSSO_ERRORS(MSSO_ERROR_ENUM_) MSSO_CODE_COUNT_ } msso_code;
#undef MSSO_ERROR_ENUM_

#define MSSO_ERROR_NAME_SIZE 32
#define MSSO_ERROR_MESSAGE_SIZE 1024

typedef struct msso_error {
    msso_code code; /* branch on this */
    /* What the msso command exits with for this error (1 expired, 2 not logged in, 3 broker
     * unreachable, 7 forbidden, …: README, "Exit status"); 0 for MSSO_OK. */
    int exit_status;
    /* The protocol's name ("NotLoggedIn"). A name this library does not know (a newer daemon's)
     * is kept as sent, with the code and exit status of Internal. */
    char name[MSSO_ERROR_NAME_SIZE];
    /* A sentence for the user: the daemon's, which says what to do and never holds a secret, or
     * the library's own for what it finds itself (no broker, a call too big, …). Cut at a
     * character boundary when longer. */
    char message[MSSO_ERROR_MESSAGE_SIZE];
} msso_error;

/* "NotLoggedIn" for MSSO_E_NOT_LOGGED_IN; "" for MSSO_OK and codes out of range. */
const char *msso_error_name(msso_code code);
/* The msso command's exit status for the code (70, Internal's, out of range). */
int msso_exit_status(msso_code code);

/* -- connecting -------------------------------------------------------------------------------- */

typedef struct msso_client msso_client;

/* Connects to the broker at `socket_path`, or when NULL at $MSSO_SOCKET, else
 * $XDG_RUNTIME_DIR/msso/broker.sock, else /run/user/UID/msso/broker.sock, and says hello. Refuses a
 * socket served by a process of another user. The connection is opened again by the next call
 * when it was lost (mssod closes idle ones after 10 minutes, or was restarted). */
msso_client *msso_connect(const char *socket_path, msso_error *err);

/* Closes the connection and frees everything the client holds, wiped. NULL is ignored. */
void msso_close(msso_client *client);

/* How long each call may take, connecting included (default 20000 ms; negative: no limit).
 * Logins that wait for the user (device, browser) wait as long as the daemon lets them. */
void msso_set_timeout(msso_client *client, int milliseconds);

/* The account of each group the client's calls act as (`msso login --account NAME`): check,
 * extend, the logins, logout (not `all`), sign, token and subscribe name it; status lists every
 * account whatever it is (as `msso status` does). msso_connect takes $MSSO_ACCOUNT (none when unset
 * or empty: the daemon's choice, the program's registration's `account`, else the group's default
 * account). `account` NULL: none from now on. A name that cannot be an account (1 to 64 ASCII
 * letters, digits, `.`, `_`, `-`, `@`, `+`, beginning with a letter or digit) is BadRequest, and
 * the client's account stays as it was. (Symbol version MSSO_0.1.) */
int msso_set_account(msso_client *client, const char *account, msso_error *err);
/* The client's account, or NULL when it names none. Valid until msso_set_account or msso_close. */
const char *msso_account(const msso_client *client);

/* From the last hello: the daemon's name and version ("mssod 0.2.0"), and the executable the
 * daemon sees behind this process (what an app registration must name), or NULL when the kernel
 * would not say. Valid until the next call or msso_close. */
const char *msso_daemon(const msso_client *client);
const char *msso_peer_executable(const msso_client *client);

/* -- sessions ---------------------------------------------------------------------------------- */

#define MSSO_STATE_ENUM_(id, name) MSSO_STATE_##id,
/* MSSO_STATE_VALID (sign works), _EXPIRED, _NOT_LOGGED_IN, _CORRUPT; _UNKNOWN for a state this
 * library does not know. */
typedef enum msso_state { MSSO_STATE_UNKNOWN = -1, MSSO_SESSION_STATES(MSSO_STATE_ENUM_) } msso_state;
#undef MSSO_STATE_ENUM_

/* One group's SSO session (SessionStatus): the session of the client's account (msso_set_account),
 * or, in msso_status, of each account of the group in turn (their names are in the JSON of
 * msso_call(client, "status", …): this struct keeps its layout). Times are seconds since the Unix
 * epoch, 0 when not given. */
typedef struct msso_session {
    char *group;
    msso_state state;
    char *issuer;   /* the identity provider, or NULL */
    char *username; /* who logged in, or NULL */
    double logged_in_at;
    double session_expires_at;       /* the end of the sliding window (msso_extend moves it) */
    double session_max_at;           /* the window never passes this */
    double access_token_expires_at;
    int admin;  /* 1 when the administrator defined the group */
    int locked; /* 1 while the broker is locked: nothing signs until `msso unlock` */
} msso_session;

typedef struct msso_sessions {
    msso_session *items;
    size_t count;
    int locked;       /* the broker is locked */
    double locked_at; /* since when, or 0 */
} msso_sessions;

/* "valid", … for a state; "" for MSSO_STATE_UNKNOWN. */
const char *msso_state_name(msso_state state);

/* `group` NULL everywhere below: the only configured group (or the only one the program is
 * registered for). A missing or expired session is a state, not an error, for status and check. */
int msso_status(msso_client *client, const char *group, msso_sessions *out, msso_error *err);
int msso_check(msso_client *client, const char *group, msso_session *out, msso_error *err);
/* Slides the session window (call it while the user is active). `out` may be NULL. */
int msso_extend(msso_client *client, const char *group, msso_session *out, msso_error *err);

void msso_session_free(msso_session *session);
void msso_sessions_free(msso_sessions *sessions);

/* -- logging in and out ---------------------------------------------------------------------- */

/* The password grant. The password is read from `password` (`length` bytes, UTF-8), copied only
 * into the frame sent, which is wiped at once: the caller wipes its own buffer. `out` may be NULL. */
int msso_login_password(msso_client *client, const char *group, const char *username, const char *password,
                        size_t length, msso_session *out, msso_error *err);

/* What a device or browser login asks the user to do, given to a callback while the login waits.
 * Valid during the callback only, which must not call the library with the same client (the
 * login's call is still reading its connection). */
typedef struct msso_prompt {
    const char *url;          /* device: the verification address; browser: the address to open */
    const char *url_complete; /* device: the address with the code in it, when the IdP gives one; else NULL */
    const char *user_code;    /* device: the code to enter there; browser: NULL */
    double expires_at;        /* when the code (or the wait for the browser) ends */
    /* 1 when another login of the group was already waiting for the user: its code was shown
     * (its browser window may be open) to whoever started it; show it, do not open another. */
    int joined;
} msso_prompt;
typedef void (*msso_prompt_fn)(const msso_prompt *prompt, void *context);

/* The device grant (RFC 8628): `on_prompt` shows the address and code; returns once the user
 * approved (MSSO_E_LOGIN_DENIED when they denied, or the code expired). */
int msso_login_device(msso_client *client, const char *group, msso_prompt_fn on_prompt, void *context,
                      msso_session *out, msso_error *err);
/* The authorization code grant in a browser on this machine: `on_prompt` opens (or shows) the
 * address; returns once the browser came back. */
int msso_login_browser(msso_client *client, const char *group, msso_prompt_fn on_prompt, void *context,
                       msso_session *out, msso_error *err);

/* A session ended whose tokens the identity provider still honours (it offers no revocation,
 * refused, or did not answer). */
typedef struct msso_not_revoked {
    char *group;
    char *reason;                   /* a sentence */
    double access_token_expires_at; /* until when the last access token works there, or 0 */
    int refresh_token;              /* 1 when a refresh token stays valid there too */
} msso_not_revoked;

typedef struct msso_logout_result {
    char **logged_out; /* the groups whose session this ended */
    size_t logged_out_count;
    int revoked; /* 1: the provider forgot every ended session's tokens; 0: see not_revoked; -1: nothing ended */
    msso_not_revoked *not_revoked;
    size_t not_revoked_count;
} msso_logout_result;

/* Ends the group's session for every app (`all`: every group the program may use; then `group`
 * must be NULL). `out` may be NULL. */
int msso_logout(msso_client *client, const char *group, int all, msso_logout_result *out, msso_error *err);
void msso_logout_result_free(msso_logout_result *result);

/* -- signing ----------------------------------------------------------------------------------- */

typedef struct msso_header {
    const char *name;
    const char *value;
} msso_header;

/* The request to authenticate. */
typedef struct msso_request {
    const char *method; /* "GET" */
    const char *url;    /* the absolute URL it goes to */
    /* Headers the request already has that a signing profile may cover (RFC 9421: content-type);
     * nothing else needs to cross the socket. */
    const msso_header *headers;
    size_t header_count;
    /* The body, hashed here: only its SHA-256 goes to the daemon (bodySHA256), for the profiles
     * that cover it. NULL (or length 0): none. */
    const void *body;
    size_t body_length;
    /* Or the body's SHA-256 in standard base64, when you hashed it yourself (a streamed body). */
    const char *body_sha256;
    const char *group;      /* NULL: the default group */
    const char *dpop_nonce; /* a resource server's DPoP-Nonce (RFC 9449), after its 401; else NULL */
} msso_request;

typedef struct msso_headers {
    msso_header *items; /* add these to the request */
    size_t count;
} msso_headers;

/* The headers that authenticate the request, per the group's signing profile: bearer,
 * header:NAME, DPoP (RFC 9449), RFC 9421 signatures. */
int msso_sign(msso_client *client, const msso_request *request, msso_headers *out, msso_error *err);
void msso_headers_free(msso_headers *headers);

typedef struct msso_access_token {
    char *access_token;
    char *header;      /* "Bearer" (send `Authorization: Bearer TOKEN`), or a header:NAME profile's NAME */
    double expires_at;
} msso_access_token;

/* The access token itself, for a program that cannot have each request signed (bearer groups
 * only). `resource`: the URL it will be sent to (a group naming `resources` requires it), or NULL.
 * `renew`: refresh it first (a server refused it). */
int msso_token(msso_client *client, const char *group, const char *resource, int renew, msso_access_token *out,
               msso_error *err);
void msso_access_token_free(msso_access_token *token);

/* -- events ------------------------------------------------------------------------------------ */

#define MSSO_SIGNAL_ENUM_(id, name) MSSO_SIGNAL_##id,
/* MSSO_SIGNAL_LOGGED_IN, _EXTENDED, _LOGGED_OUT, _EXPIRING, _EXPIRED (and the login prompts,
 * which go to the prompt callbacks instead); _UNKNOWN for a newer daemon's. */
typedef enum msso_signal { MSSO_SIGNAL_UNKNOWN = -1, MSSO_SIGNALS(MSSO_SIGNAL_ENUM_) } msso_signal;
#undef MSSO_SIGNAL_ENUM_

typedef struct msso_event {
    msso_signal signal;
    char name[MSSO_ERROR_NAME_SIZE]; /* the signal's name, as sent */
    msso_session status;             /* the group's session after the event; status.group is the group */
} msso_event;

/* Asks for the signals of `groups` (`count` names), or of every group the program may use when
 * `groups` is NULL. Subscriptions add up, and last as long as the connection. */
int msso_subscribe(msso_client *client, const char *const *groups, size_t count, msso_error *err);

/* A descriptor to poll (POLLIN) in the caller's own loop: readable while an event waits, read
 * from the socket or already read by a call meanwhile. Stays the same when the connection is
 * opened again (after a fork, the child gets a new one). Owned by the client; do not read it. */
int msso_events_fd(msso_client *client, msso_error *err);

/* The next event: 1 and *out; 0 when none came within `timeout_ms` (0: do not wait; negative:
 * wait for ever); -1 and *err when the connection was lost (subscribe again: the next call
 * reconnects) or the client is not subscribed. Events are kept only once subscribed, at most
 * 4,096 unread (1 MiB of their frames): past that the connection is closed, and this gives the
 * ones kept, then -1 (BrokerUnreachable) saying so. */
int msso_next_event(msso_client *client, int timeout_ms, msso_event *out, msso_error *err);
void msso_event_free(msso_event *event);

/* -- any method ------------------------------------------------------------------------------ */

/* Calls `method` with `args` (a JSON object, or NULL for {}) and returns its result as JSON
 * (*result, a NUL-terminated string freed with msso_string_free; NULL allowed). For methods the
 * functions above do not cover: ping, lock, unlock, …; and for a newer daemon's. */
int msso_call(msso_client *client, const char *method, const char *args, char **result, msso_error *err);
void msso_string_free(char *string);

#ifdef __cplusplus
}
#endif

#endif
