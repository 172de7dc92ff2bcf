/* The JSON libmsso reads and writes: the daemon's frames (a strict reader that checks every byte)
 * and the calls (a writer into a bounded buffer). Internal: nothing here is exported. The PAM
 * module (pam/) compiles this file into pam_msso.so too, hidden there as well: C has this one
 * JSON reader and writer. */
#ifndef MSSO_JSON_H
#define MSSO_JSON_H

#include <stddef.h>
#include <stdint.h>

/* Deeper nesting is refused: no reply of the protocol comes close, and the reader's stack is
 * this big. */
#define JSON_MAX_DEPTH 32

typedef enum { JSON_OBJECT, JSON_ARRAY, JSON_STRING, JSON_NUMBER, JSON_TRUE, JSON_FALSE, JSON_NULL } json_type;

/* One value of a parsed text. Containers are followed by their contents (an object's as key,
 * value, key, value…); `next` is the index just past the value and everything inside it. */
typedef struct {
    uint8_t type;
    uint8_t escaped; /* a string with a backslash in it */
    uint32_t start;  /* a string's first byte after the quote; otherwise the value's first byte */
    uint32_t end;    /* a string's closing quote; otherwise just past the value */
    uint32_t next;
} json_token;

typedef struct {
    const char *text;
    json_token *tokens;
    uint32_t count;
    uint32_t capacity;
} json_doc;

/* Parses `length` bytes (at most MSSO_MAX_FRAME) as one JSON object with nothing after it but
 * white space: RFC 8259, strings in valid UTF-8 (no overlong forms, surrogates or lone surrogate
 * escapes), no NUL in any string (C could not tell it from the end), at most JSON_MAX_DEPTH
 * levels. 0 on success (the tokens refer to `text`, which must outlive their use), -1 when the
 * text is not that, -2 when memory ran out. */
int json_parse(json_doc *doc, const char *text, size_t length);
/* Frees the tokens (a doc is reused from frame to frame). */
void json_doc_free(json_doc *doc);

/* The value at `key` of the object at `object`, or -1 when absent (the first, if repeated). */
long json_get(const json_doc *doc, uint32_t object, const char *key);
/* The same, but -2 when the key is there more than once: readers that must not guess which of two
 * values a writer meant (the PAM module) refuse the message. */
long json_get_unique(const json_doc *doc, uint32_t object, const char *key);
/* Whether the token at `index` is of `type` (index -1: absent, never of any type). */
int json_is(const json_doc *doc, long index, json_type type);

/* A string token unescaped into a new NUL-terminated buffer of at most `max` bytes; NULL when too
 * long or out of memory. Free with free() (or wipe first: it may be a token). */
char *json_string(const json_doc *doc, uint32_t index, size_t max);
/* A string token unescaped into `out` (`size` bytes, NUL included); -1 when it does not fit. */
int json_string_into(const json_doc *doc, uint32_t index, char *out, size_t size);
/* Whether a string token equals `text`. */
int json_string_equals(const json_doc *doc, uint32_t index, const char *text);
/* A number token as a double: -1 when not finite as a double. */
int json_number(const json_doc *doc, uint32_t index, double *out);
/* A number token that is a whole number from 0 to `max`, written without fraction or exponent. */
int json_unsigned(const json_doc *doc, uint32_t index, uint64_t max, uint64_t *out);

/* Whether `length` bytes at `text` are valid UTF-8 (RFC 3629: no overlong forms, no surrogates). */
int json_valid_utf8(const char *text, size_t length);

/* The writer: appends to a buffer of fixed capacity; any overflow or invalid string marks it
 * failed, and everything after is ignored. */
typedef struct {
    char *data;
    size_t length;
    size_t capacity;
    int failed; /* JSON_TOO_LONG or JSON_NOT_UTF8 */
} json_out;

enum { JSON_TOO_LONG = 1, JSON_NOT_UTF8 = 2 };

void json_raw(json_out *out, const char *text, size_t length);
/* A string value, escaped; the text must be valid UTF-8 (a NUL in it is escaped as \u0000). */
void json_quoted(json_out *out, const char *text, size_t length);
void json_cstring(json_out *out, const char *text);
void json_uint(json_out *out, uint64_t value);
/* `"key":` (the key is one of ours: plain ASCII). */
void json_key(json_out *out, const char *key);

/* A call's frame, written in place: the length, then
 * {"type":"call","serial":N,"method":"M","args":{…}} (docs/PROTOCOL.md). The arguments are written
 * with json_call_field and the writer above, or the shorthands below. */
typedef struct {
    json_out json;
    int fields; /* arguments written so far */
} json_call;

/* Starts the frame in `buffer` (`capacity` bytes: MSSO_MAX_FRAME + 4 for any call). */
void json_call_begin(json_call *call, char *buffer, size_t capacity, uint32_t serial, const char *method);
/* `"key":`, after a comma from the second argument on: the value follows. */
void json_call_field(json_call *call, const char *key);
/* A string argument; nothing when `value` is NULL. */
void json_call_string(json_call *call, const char *key, const char *value);
void json_call_true(json_call *call, const char *key);
/* Closes the frame and writes its length in front: 0, and the frame is json.data, json.length
 * bytes; or JSON_TOO_LONG or JSON_NOT_UTF8, and there is nothing to send. Either way the caller
 * wipes the buffer when done with it (explicit_bzero): the call may hold a password. */
int json_call_end(json_call *call);

#endif
