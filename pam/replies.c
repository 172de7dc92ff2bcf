#include "replies.h"

#include <string.h>

/* 9999-12-31 23:59:59 UTC: any later time (1e17, say) makes localtime_r fail. */
#define MSSO_LATEST_TIME 253402300799.0

/* Every member is looked up with json_get_unique: a key there twice (-2) is malformed, since which
 * of its two values the broker meant cannot be known. */

int msso_get_string(const json_doc *doc, uint32_t object, const char *key, size_t max, char *out) {
    long at = json_get_unique(doc, object, key);
    if (at == -1) return 0;
    if (!json_is(doc, at, JSON_STRING)) return -1; /* null included */
    return json_string_into(doc, (uint32_t)at, out, max + 1) == 0 ? 1 : -1;
}

/* A time at `key`: 1 (and *out) when it is a finite number of seconds between 1970 and 9999, 0
 * when absent, -1 otherwise (1e400 is a number to JSON: json_number refuses what is not finite). */
static int get_time(const json_doc *doc, uint32_t object, const char *key, time_t *out) {
    long at = json_get_unique(doc, object, key);
    double seconds;
    if (at == -1) return 0;
    if (!json_is(doc, at, JSON_NUMBER) || json_number(doc, (uint32_t)at, &seconds) != 0) return -1;
    if (seconds < 0 || seconds > MSSO_LATEST_TIME) return -1;
    *out = (time_t)seconds;
    return 1;
}

/* An optional flag (`admin`, `isDefault`: a broker from before it existed sends none): absent
 * means false; anything but true or false is malformed. */
static int get_flag(const json_doc *doc, uint32_t object, const char *key, int *flag) {
    long at = json_get_unique(doc, object, key);
    *flag = json_is(doc, at, JSON_TRUE);
    return at == -1 || json_is(doc, at, JSON_TRUE) || json_is(doc, at, JSON_FALSE) ? 0 : -1;
}

int msso_account_valid(const char *name) {
    size_t length = strlen(name);
    if (length < 1 || length > MSSO_MAX_ACCOUNT) return 0;
    for (size_t i = 0; i < length; i++) {
        unsigned char c = (unsigned char)name[i];
        int alphanumeric = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alphanumeric && (i == 0 || !strchr(".-_@+", c))) return 0; /* strchr: c is never NUL here */
    }
    return 1;
}

/* `account` is optional (a broker from before accounts: its one session is the group's default
 * account's, and "" says so); when given, a name the broker's rule allows. */
static int get_account(const json_doc *doc, uint32_t object, char *account) {
    int found = msso_get_string(doc, object, "account", MSSO_MAX_ACCOUNT, account);
    if (found == 0) account[0] = '\0';
    return found == 0 || (found == 1 && msso_account_valid(account)) ? 0 : -1;
}

static int read_state(const json_doc *doc, uint32_t object, msso_state *state) {
#define STATE_ROW_(id, name) { name, MSSO_##id },
    static const struct { const char *name; msso_state state; } states[] = { MSSO_SESSION_STATES(STATE_ROW_) };
#undef STATE_ROW_
    char name[17];
    if (msso_get_string(doc, object, "state", 16, name) != 1) return -1;
    for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) {
        if (strcmp(name, states[i].name) == 0) {
            *state = states[i].state;
            return 0;
        }
    }
    return -1; /* a state this module does not know cannot be described to the user */
}

/* The fields the module does not use are checked all the same: a broker that sends a malformed
 * value anywhere is not one to trust with the rest. */
static int unused_fields_valid(const json_doc *doc, uint32_t object) {
    char text[MSSO_MAX_MESSAGE + 1];
    time_t time;
    return msso_get_string(doc, object, "issuer", MSSO_MAX_MESSAGE, text) >= 0 &&
           msso_get_string(doc, object, "username", MSSO_MAX_MESSAGE, text) >= 0 &&
           get_time(doc, object, "loggedInAt", &time) >= 0 && get_time(doc, object, "sessionMaxAt", &time) >= 0 &&
           get_time(doc, object, "accessTokenExpiresAt", &time) >= 0;
}

static int read_session(const json_doc *doc, uint32_t object, msso_session *session) {
    if (!json_is(doc, object, JSON_OBJECT)) return -1;
    if (msso_get_string(doc, object, "group", MSSO_MAX_NAME, session->group) != 1 || !session->group[0]) return -1;
    if (read_state(doc, object, &session->state) != 0 || get_flag(doc, object, "admin", &session->admin) != 0) return -1;
    if (get_account(doc, object, session->account) != 0 || get_flag(doc, object, "isDefault", &session->is_default) != 0) return -1;
    int has_end = get_time(doc, object, "sessionExpiresAt", &session->end);
    if (has_end < 0 || !unused_fields_valid(doc, object)) return -1;
    session->has_end = has_end;
    return 0;
}

int msso_read_status(const json_doc *doc, uint32_t result, msso_sessions *sessions) {
    long groups = json_is(doc, result, JSON_OBJECT) ? json_get_unique(doc, result, "groups") : -1;
    if (!json_is(doc, groups, JSON_ARRAY)) return -1;
    size_t count = 0;
    for (uint32_t i = (uint32_t)groups + 1; i < doc->tokens[groups].next; i = doc->tokens[i].next) {
        /* Read in place; counted only once all are read: a malformed entry leaves nothing behind. */
        if (count == MSSO_MAX_SESSIONS - sessions->count) return -1;
        if (read_session(doc, i, &sessions->items[sessions->count + count]) != 0) return -1;
        count++;
    }
    sessions->count += count;
    return 0;
}

/* The length (1 to 4) of the valid UTF-8 sequence at `s`, with its code point; 0 when it is not
 * one (overlong, surrogate, out of range, cut short: a NUL is never a continuation byte). */
static size_t utf8_decode(const unsigned char *s, unsigned *code) {
    size_t length;
    unsigned least;
    if (s[0] < 0x80) length = 1, *code = s[0], least = 0;
    else if ((s[0] & 0xE0) == 0xC0) length = 2, *code = s[0] & 0x1F, least = 0x80;
    else if ((s[0] & 0xF0) == 0xE0) length = 3, *code = s[0] & 0x0F, least = 0x800;
    else if ((s[0] & 0xF8) == 0xF0) length = 4, *code = s[0] & 0x07, least = 0x10000;
    else return 0;
    for (size_t i = 1; i < length; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        *code = *code << 6 | (s[i] & 0x3F);
    }
    if (*code < least || *code > 0x10FFFF || (*code >= 0xD800 && *code <= 0xDFFF)) return 0;
    return length;
}

/* C0 (ESC, CR, BEL…), DEL and C1 (U+009B is CSI to many terminals). */
static int is_control(unsigned code) {
    return code < 0x20 || (code >= 0x7F && code <= 0x9F);
}

void msso_printable(char *out, size_t size, const char *text) {
    const unsigned char *s = (const unsigned char *)text;
    size_t used = 0;
    if (size == 0) return;
    while (*s) {
        unsigned code = 0;
        size_t length = utf8_decode(s, &code);
        int keep = length > 0 && !is_control(code);
        size_t width = keep ? length : 1;
        if (used + width >= size) break;
        if (keep) memcpy(out + used, s, length);
        else out[used] = '?';
        used += width;
        s += length ? length : 1;
    }
    out[used] = '\0';
}
