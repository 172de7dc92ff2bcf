#include "replies.h"

#include <math.h>
#include <string.h>

/* 9999-12-31 23:59:59 UTC: any later time (1e17, say) makes localtime_r fail. */
#define MSSO_LATEST_TIME 253402300799.0

int msso_get_string(json_object *object, const char *key, size_t max, const char **out) {
    json_object *value;
    if (!json_object_object_get_ex(object, key, &value)) return 0;
    if (!json_object_is_type(value, json_type_string)) return -1; /* null included */
    const char *text = json_object_get_string(value);
    size_t length = (size_t)json_object_get_string_len(value);
    /* "\u0000" decodes to a NUL: C would see a shorter, different string than the broker sent. */
    if (length > max || strlen(text) != length) return -1;
    *out = text;
    return 1;
}

/* A time at `key`: 1 (and *out) when it is a finite number of seconds between 1970 and 9999, 0
 * when absent, -1 otherwise (json-c reads NaN, Infinity and 1e400 as doubles). */
static int get_time(json_object *object, const char *key, time_t *out) {
    json_object *value;
    if (!json_object_object_get_ex(object, key, &value)) return 0;
    if (!json_object_is_type(value, json_type_int) && !json_object_is_type(value, json_type_double)) return -1;
    double seconds = json_object_get_double(value);
    if (!isfinite(seconds) || seconds < 0 || seconds > MSSO_LATEST_TIME) return -1;
    *out = (time_t)seconds;
    return 1;
}

/* `admin` is optional (a broker from before it existed): absent means not the admin's. */
static int get_admin(json_object *object, int *admin) {
    json_object *value;
    *admin = 0;
    if (!json_object_object_get_ex(object, "admin", &value)) return 0;
    if (!json_object_is_type(value, json_type_boolean)) return -1;
    *admin = json_object_get_boolean(value);
    return 0;
}

static int read_state(json_object *object, msso_state *state) {
#define STATE_ROW_(id, name) { name, MSSO_##id },
    static const struct { const char *name; msso_state state; } states[] = { MSSO_SESSION_STATES(STATE_ROW_) };
#undef STATE_ROW_
    const char *name;
    if (msso_get_string(object, "state", 16, &name) != 1) return -1;
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
static int unused_fields_valid(json_object *object) {
    const char *text;
    time_t time;
    return msso_get_string(object, "issuer", MSSO_MAX_MESSAGE, &text) >= 0 &&
           msso_get_string(object, "username", MSSO_MAX_MESSAGE, &text) >= 0 && get_time(object, "loggedInAt", &time) >= 0 &&
           get_time(object, "sessionMaxAt", &time) >= 0 && get_time(object, "accessTokenExpiresAt", &time) >= 0;
}

static int read_session(json_object *object, msso_session *session) {
    const char *group;
    if (!json_object_is_type(object, json_type_object)) return -1;
    if (msso_get_string(object, "group", MSSO_MAX_NAME, &group) != 1 || !*group) return -1;
    if (read_state(object, &session->state) != 0 || get_admin(object, &session->admin) != 0) return -1;
    int has_end = get_time(object, "sessionExpiresAt", &session->end);
    if (has_end < 0 || !unused_fields_valid(object)) return -1;
    session->has_end = has_end;
    memcpy(session->group, group, strlen(group) + 1); /* fits: at most MSSO_MAX_NAME bytes */
    return 0;
}

int msso_read_status(json_object *result, msso_sessions *sessions) {
    json_object *groups;
    if (!json_object_object_get_ex(result, "groups", &groups) || !json_object_is_type(groups, json_type_array)) return -1;
    size_t count = json_object_array_length(groups);
    if (count > MSSO_MAX_SESSIONS - sessions->count) return -1;
    for (size_t i = 0; i < count; i++)
        if (read_session(json_object_array_get_idx(groups, i), &sessions->items[sessions->count + i]) != 0) return -1;
    sessions->count += count; /* only now: a malformed entry leaves nothing half-read behind */
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
