/* What the PAM module takes from the broker's replies, checked byte by byte. The module runs as
 * root inside sshd or login: a reply of the wrong type, size or range must never crash it
 * (localtime_r fails past year 2^31), and no byte the broker sends may reach the user's terminal
 * as a control sequence. The frames are parsed by libmsso's reader (json.h), which holds them to
 * RFC 8259 and UTF-8 before anything here looks at them. */
#ifndef MSSO_PAM_REPLIES_H
#define MSSO_PAM_REPLIES_H

#include "msso_protocol.h"

#include "json.h"

#include <stddef.h>
#include <time.h>

#define MSSO_MAX_NAME 255     /* bytes in a group name */
#define MSSO_MAX_ACCOUNT 64   /* bytes in an account's name (the broker's rule: AccountName.swift) */
#define MSSO_MAX_MESSAGE 1024 /* bytes in a message for the user (and in any other string) */
#define MSSO_MAX_SESSIONS 64  /* sessions (every account of every group) in all the status replies of one PAM call */
#define MSSO_DEFAULT_ACCOUNT "default" /* the account a login names none of makes (AccountName.defaultName) */

/* MSSO_VALID, MSSO_EXPIRED, MSSO_NOT_LOGGED_IN, MSSO_CORRUPT: the protocol's states (msso_protocol.h). */
#define MSSO_STATE_ENUM_(id, name) MSSO_##id,
typedef enum { MSSO_SESSION_STATES(MSSO_STATE_ENUM_) } msso_state;
#undef MSSO_STATE_ENUM_

/* One SessionStatus (docs/PROTOCOL.md), as far as the module uses it: one account of a group. */
typedef struct {
    char group[MSSO_MAX_NAME + 1]; /* raw: sent back to the broker; shown only through msso_printable */
    /* The account, a name msso_account_valid holds to the broker's rule (so safe to show and to
     * send back); "" from a broker without accounts, whose one session per group is the default's. */
    char account[MSSO_MAX_ACCOUNT + 1];
    int is_default; /* the account a call naming none gets (`isDefault`) */
    msso_state state;
    int admin;   /* defined by the administrator: the only groups that may get the login password */
    int has_end; /* sessionExpiresAt was given */
    time_t end;
} msso_session;

typedef struct {
    msso_session items[MSSO_MAX_SESSIONS];
    size_t count;
} msso_sessions;

/* The string at `key` of the object at `object`: 1 (and its text in `out`, which has room for
 * `max` + 1 bytes) when it is a string of at most `max` bytes (the reader refuses a NUL in one), 0
 * when the key is absent, -1 when it is anything else or the key is there twice. */
int msso_get_string(const json_doc *doc, uint32_t object, const char *key, size_t max, char *out);

/* Whether `name` may name an account, as the broker's rule says: 1 to 64 ASCII letters, digits,
 * `.`, `_`, `-`, `@` or `+`, beginning with a letter or digit. */
int msso_account_valid(const char *name);

/* Appends the sessions of a `status` result ({"groups": [SessionStatus, …]}) at `result`. Returns
 * 0, or -1 and appends nothing when any part is malformed (a key twice included) or they would
 * exceed MSSO_MAX_SESSIONS. */
int msso_read_status(const json_doc *doc, uint32_t result, msso_sessions *sessions);

/* Copies `text` into `out` (always terminated, cut at a character boundary) with every control
 * character (C0, DEL, C1: ESC included, so no escape sequence survives) and every byte that is
 * not valid UTF-8 replaced by '?'. */
void msso_printable(char *out, size_t size, const char *text);

#endif
