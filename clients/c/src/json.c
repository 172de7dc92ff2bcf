#include "json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* -- UTF-8 ------------------------------------------------------------------------------------- */

/* The length (1 to 4) of the valid UTF-8 sequence at `s` (with `left` bytes available), or 0. */
static size_t utf8_sequence(const unsigned char *s, size_t left) {
    unsigned code, least;
    size_t length;
    if (s[0] < 0x80) return 1;
    if ((s[0] & 0xE0) == 0xC0) length = 2, code = s[0] & 0x1F, least = 0x80;
    else if ((s[0] & 0xF0) == 0xE0) length = 3, code = s[0] & 0x0F, least = 0x800;
    else if ((s[0] & 0xF8) == 0xF0) length = 4, code = s[0] & 0x07, least = 0x10000;
    else return 0;
    if (length > left) return 0;
    for (size_t i = 1; i < length; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        code = code << 6 | (s[i] & 0x3F);
    }
    if (code < least || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
    return length;
}

/* Eight bytes at a time (SWAR): a frame is mostly a token's plain ASCII, which a byte loop with
 * its branches crosses at several times the cost. */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

static uint64_t load8(const unsigned char *s) {
    uint64_t word;
    memcpy(&word, s, sizeof word);
    return word;
}

/* Nonzero when one of the eight bytes is not plain inside a JSON string: a control character, '"',
 * a backslash or a byte of a multibyte sequence. Exact for the lowest such byte (no borrow reaches
 * it), so zero means all eight are plain. */
static uint64_t not_plain(uint64_t word) {
    return ((word - 0x20 * ONES) | ((word ^ 0x22 * ONES) - ONES) | ((word ^ 0x5C * ONES) - ONES) | word) & HIGHS;
}

int json_valid_utf8(const char *text, size_t length) {
    const unsigned char *s = (const unsigned char *)text;
    size_t at = 0;
    while (at < length) {
        if (length - at >= 8 && !(load8(s + at) & HIGHS)) {
            at += 8;
            continue;
        }
        if (s[at] < 0x80) {
            at++;
            continue;
        }
        size_t n = utf8_sequence(s + at, length - at);
        if (n == 0) return 0;
        at += n;
    }
    return 1;
}

/* -- the reader ------------------------------------------------------------------------------ */

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The four hex digits at `s` (which has `left` bytes), or -1. */
static long hex4(const char *s, size_t left) {
    if (left < 4) return -1;
    long value = 0;
    for (int i = 0; i < 4; i++) {
        int digit = hex_value(s[i]);
        if (digit < 0) return -1;
        value = value << 4 | digit;
    }
    return value;
}

/* Checks the string whose opening quote is at `*at`; leaves `*at` just past the closing quote.
 * Returns 0, or -1 when it is not a valid string. */
static int scan_string(const char *text, size_t length, size_t *at, int *escaped) {
    const unsigned char *s = (const unsigned char *)text;
    size_t i = *at + 1;
    *escaped = 0;
    while (i < length) {
        if (length - i >= 8 && !not_plain(load8(s + i))) {
            i += 8;
            continue;
        }
        unsigned char c = s[i];
        if (c == '"') {
            *at = i + 1;
            return 0;
        }
        if (c < 0x20) return -1; /* a raw control character: JSON wants it escaped */
        if (c == '\\') {
            *escaped = 1;
            if (i + 1 >= length) return -1;
            char e = text[i + 1];
            if (e == 'u') {
                long code = hex4(text + i + 2, length - i - 2);
                if (code <= 0) return -1; /* not hex, or \u0000 (see json_parse) */
                i += 6;
                if (code >= 0xDC00 && code <= 0xDFFF) return -1; /* a low surrogate alone */
                if (code >= 0xD800 && code <= 0xDBFF) {          /* must be followed by its low half */
                    if (i + 1 >= length || text[i] != '\\' || text[i + 1] != 'u') return -1;
                    long low = hex4(text + i + 2, length - i - 2);
                    if (low < 0xDC00 || low > 0xDFFF) return -1;
                    i += 6;
                }
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == '\0') return -1;
            i += 2;
            continue;
        }
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n = utf8_sequence(s + i, length - i);
        if (n == 0) return -1;
        i += n;
    }
    return -1; /* no closing quote */
}

/* Checks the number at `*at` (RFC 8259's grammar) and leaves `*at` just past it. */
static int scan_number(const char *s, size_t length, size_t *at) {
    size_t i = *at;
    if (i < length && s[i] == '-') i++;
    if (i >= length) return -1;
    if (s[i] == '0') i++;
    else if (s[i] >= '1' && s[i] <= '9')
        while (i < length && s[i] >= '0' && s[i] <= '9') i++;
    else return -1;
    if (i < length && s[i] == '.') {
        i++;
        if (i >= length || s[i] < '0' || s[i] > '9') return -1;
        while (i < length && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < length && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < length && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= length || s[i] < '0' || s[i] > '9') return -1;
        while (i < length && s[i] >= '0' && s[i] <= '9') i++;
    }
    *at = i;
    return 0;
}

static long add_token(json_doc *doc, json_type type, size_t start) {
    if (doc->count == doc->capacity) {
        uint32_t capacity = doc->capacity ? doc->capacity * 2 : 64;
        json_token *grown = realloc(doc->tokens, capacity * sizeof *grown);
        if (!grown) return -1;
        doc->tokens = grown;
        doc->capacity = capacity;
    }
    json_token *t = &doc->tokens[doc->count];
    *t = (json_token){ .type = (uint8_t)type, .start = (uint32_t)start, .end = (uint32_t)start, .next = doc->count + 1 };
    return doc->count++;
}

static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Iterative, with an explicit stack of open containers capped at JSON_MAX_DEPTH: no recursion
 * for a hostile frame to exhaust. */
int json_parse(json_doc *doc, const char *text, size_t length) {
    uint32_t open[JSON_MAX_DEPTH];
    int depth = 0;
    /* What may come next: a value; an object's key (or its end, right after '{'); the ':' after a
     * key; a ',' or the end of the container after a value; nothing (the top object is done). */
    enum { VALUE, VALUE_OR_END, KEY, KEY_OR_END, COLON, NEXT, DONE } want = VALUE;
    size_t i = 0;
    doc->text = text;
    doc->count = 0;
    if (length > UINT32_MAX - 1) return -1;
    for (;;) {
        while (i < length && is_space(text[i])) i++;
        if (i == length) break;
        char c = text[i];
        if (want == DONE) return -1;
        if (want == COLON) {
            if (c != ':') return -1;
            i++;
            want = VALUE;
            continue;
        }
        if (want == NEXT || ((want == VALUE_OR_END || want == KEY_OR_END) && (c == ']' || c == '}'))) {
            json_token *container = &doc->tokens[open[depth - 1]];
            int in_object = container->type == JSON_OBJECT;
            if (c == ',' && want == NEXT) {
                i++;
                want = in_object ? KEY : VALUE;
                continue;
            }
            if (c != (in_object ? '}' : ']')) return -1;
            i++;
            container->end = (uint32_t)i;
            container->next = doc->count;
            depth--;
            want = depth ? NEXT : DONE;
            continue;
        }
        if (want == KEY || want == KEY_OR_END) {
            if (c != '"') return -1;
            int escaped;
            size_t start = i;
            if (scan_string(text, length, &i, &escaped) != 0) return -1;
            long t = add_token(doc, JSON_STRING, start + 1);
            if (t < 0) return -2;
            doc->tokens[t].end = (uint32_t)(i - 1);
            doc->tokens[t].escaped = (uint8_t)escaped;
            want = COLON;
            continue;
        }
        /* A value. The top one must be an object. */
        if (depth == 0 && c != '{') return -1;
        if (c == '{' || c == '[') {
            if (depth == JSON_MAX_DEPTH) return -1;
            long t = add_token(doc, c == '{' ? JSON_OBJECT : JSON_ARRAY, i);
            if (t < 0) return -2;
            open[depth++] = (uint32_t)t;
            i++;
            want = c == '{' ? KEY_OR_END : VALUE_OR_END;
            continue;
        }
        long t;
        size_t start = i;
        if (c == '"') {
            int escaped;
            if (scan_string(text, length, &i, &escaped) != 0) return -1;
            if ((t = add_token(doc, JSON_STRING, start + 1)) < 0) return -2;
            doc->tokens[t].end = (uint32_t)(i - 1);
            doc->tokens[t].escaped = (uint8_t)escaped;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            if (scan_number(text, length, &i) != 0) return -1;
            if ((t = add_token(doc, JSON_NUMBER, start)) < 0) return -2;
            doc->tokens[t].end = (uint32_t)i;
        } else {
            static const struct { const char *word; json_type type; } literals[] = {
                { "true", JSON_TRUE }, { "false", JSON_FALSE }, { "null", JSON_NULL } };
            size_t k = 0;
            while (k < 3 && !(length - i >= strlen(literals[k].word) && memcmp(text + i, literals[k].word, strlen(literals[k].word)) == 0)) k++;
            if (k == 3) return -1;
            i += strlen(literals[k].word);
            if ((t = add_token(doc, literals[k].type, start)) < 0) return -2;
            doc->tokens[t].end = (uint32_t)i;
        }
        /* A number or a literal must end at a delimiter, not run into the next value ("1true"). */
        if (i < length && !is_space(text[i]) && text[i] != ',' && text[i] != ']' && text[i] != '}') return -1;
        want = NEXT;
    }
    return want == DONE ? 0 : -1;
}

void json_doc_free(json_doc *doc) {
    free(doc->tokens);
    doc->tokens = NULL;
    doc->count = doc->capacity = 0;
}

int json_is(const json_doc *doc, long index, json_type type) {
    return index >= 0 && (uint32_t)index < doc->count && doc->tokens[index].type == type;
}

/* Unescapes a string token into `out`, which has room for the token's raw length (unescaping
 * never makes a string longer). Returns the length. Escapes were checked by the parser. */
static size_t unescape(const json_doc *doc, const json_token *t, char *out) {
    const char *s = doc->text + t->start;
    size_t length = t->end - t->start;
    if (!t->escaped) {
        memcpy(out, s, length);
        return length;
    }
    size_t used = 0;
    for (size_t i = 0; i < length;) {
        if (s[i] != '\\') {
            out[used++] = s[i++];
            continue;
        }
        char e = s[i + 1];
        if (e != 'u') {
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            out[used++] = to[strchr(from, e) - from];
            i += 2;
            continue;
        }
        unsigned long code = (unsigned long)hex4(s + i + 2, 4);
        i += 6;
        if (code >= 0xD800 && code <= 0xDBFF) {
            code = 0x10000 + ((code - 0xD800) << 10) + ((unsigned long)hex4(s + i + 2, 4) - 0xDC00);
            i += 6;
        }
        if (code < 0x80) {
            out[used++] = (char)code;
        } else if (code < 0x800) {
            out[used++] = (char)(0xC0 | code >> 6);
            out[used++] = (char)(0x80 | (code & 0x3F));
        } else if (code < 0x10000) {
            out[used++] = (char)(0xE0 | code >> 12);
            out[used++] = (char)(0x80 | (code >> 6 & 0x3F));
            out[used++] = (char)(0x80 | (code & 0x3F));
        } else {
            out[used++] = (char)(0xF0 | code >> 18);
            out[used++] = (char)(0x80 | (code >> 12 & 0x3F));
            out[used++] = (char)(0x80 | (code >> 6 & 0x3F));
            out[used++] = (char)(0x80 | (code & 0x3F));
        }
    }
    return used;
}

char *json_string(const json_doc *doc, uint32_t index, size_t max) {
    const json_token *t = &doc->tokens[index];
    size_t raw = t->end - t->start;
    char *out = malloc(raw + 1);
    if (!out) return NULL;
    size_t length = unescape(doc, t, out);
    out[length] = '\0';
    if (length > max) {
        free(out);
        return NULL;
    }
    return out;
}

int json_string_into(const json_doc *doc, uint32_t index, char *out, size_t size) {
    const json_token *t = &doc->tokens[index];
    size_t raw = t->end - t->start;
    if (raw < size) {
        out[unescape(doc, t, out)] = '\0';
        return 0;
    }
    char *copy = json_string(doc, index, size - 1); /* escapes may make it fit */
    if (!copy) return -1;
    memcpy(out, copy, strlen(copy) + 1);
    free(copy);
    return 0;
}

int json_string_equals(const json_doc *doc, uint32_t index, const char *text) {
    const json_token *t = &doc->tokens[index];
    size_t length = strlen(text), raw = t->end - t->start;
    if (!t->escaped) return raw == length && memcmp(doc->text + t->start, text, length) == 0;
    char buffer[256];
    if (raw >= sizeof buffer) return 0; /* none of the names we look for is that long */
    size_t n = unescape(doc, t, buffer);
    return n == length && memcmp(buffer, text, length) == 0;
}

long json_get(const json_doc *doc, uint32_t object, const char *key) {
    if (!json_is(doc, object, JSON_OBJECT)) return -1;
    for (uint32_t i = object + 1; i < doc->tokens[object].next; i = doc->tokens[i + 1].next)
        if (json_string_equals(doc, i, key)) return i + 1;
    return -1;
}

long json_get_unique(const json_doc *doc, uint32_t object, const char *key) {
    long found = json_get(doc, object, key);
    if (found < 0) return found;
    for (uint32_t i = doc->tokens[found].next; i < doc->tokens[object].next; i = doc->tokens[i + 1].next)
        if (json_string_equals(doc, i, key)) return -2;
    return found;
}

/* Powers of ten a double holds exactly: a mantissa of up to 19 digits times one of these is one
 * correctly rounded operation, and times (or over) a few of them within an ulp or two, which is
 * all a time in seconds needs. strtod would follow the program's locale (a decimal comma). */
static const double exact_powers[] = { 1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                       1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22 };

int json_number(const json_doc *doc, uint32_t index, double *out) {
    const json_token *t = &doc->tokens[index];
    const char *s = doc->text + t->start, *end = doc->text + t->end;
    int negative = *s == '-';
    if (negative) s++;
    uint64_t mantissa = 0;
    long exponent = 0;
    int digits = 0;
    for (; s < end && *s >= '0' && *s <= '9'; s++) {
        if (digits < 19) {
            mantissa = mantissa * 10 + (uint64_t)(*s - '0');
            if (mantissa) digits++;
        } else {
            exponent++; /* digits past 19 only scale what was read */
        }
    }
    if (s < end && *s == '.') {
        for (s++; s < end && *s >= '0' && *s <= '9'; s++) {
            if (digits < 19) {
                mantissa = mantissa * 10 + (uint64_t)(*s - '0');
                if (mantissa) digits++;
                exponent--;
            }
        }
    }
    if (s < end && (*s == 'e' || *s == 'E')) {
        s++;
        int minus = *s == '-';
        if (*s == '-' || *s == '+') s++;
        long e = 0;
        for (; s < end; s++)
            if (e < 100000) e = e * 10 + (*s - '0'); /* far past any double: the value is 0 or infinite */
        exponent += minus ? -e : e;
    }
    double value = (double)mantissa;
    for (long left = exponent; left > 0 && value != 0 && isfinite(value); left -= 22) value *= exact_powers[left > 22 ? 22 : left];
    for (long left = -exponent; left > 0 && value != 0; left -= 22) value /= exact_powers[left > 22 ? 22 : left];
    if (!isfinite(value)) return -1;
    *out = negative ? -value : value;
    return 0;
}

int json_unsigned(const json_doc *doc, uint32_t index, uint64_t max, uint64_t *out) {
    const json_token *t = &doc->tokens[index];
    if (t->type != JSON_NUMBER) return -1;
    uint64_t value = 0;
    for (uint32_t i = t->start; i < t->end; i++) {
        char c = doc->text[i];
        if (c < '0' || c > '9') return -1; /* a sign, a fraction or an exponent */
        if (value > (max - (uint64_t)(c - '0')) / 10) return -1;
        value = value * 10 + (uint64_t)(c - '0');
    }
    *out = value;
    return 0;
}

/* -- the writer -------------------------------------------------------------------------------- */

void json_raw(json_out *out, const char *text, size_t length) {
    if (out->failed) return;
    if (length > out->capacity - out->length) {
        out->failed = JSON_TOO_LONG;
        return;
    }
    memcpy(out->data + out->length, text, length);
    out->length += length;
}

void json_quoted(json_out *out, const char *text, size_t length) {
    if (!json_valid_utf8(text, length)) {
        out->failed = out->failed ? out->failed : JSON_NOT_UTF8;
        return;
    }
    json_raw(out, "\"", 1);
    size_t plain = 0; /* copied in runs, not byte by byte */
    for (size_t i = 0; i < length; i++) {
        while (length - i >= 8 && !not_plain(load8((const unsigned char *)text + i))) i += 8;
        if (i == length) break;
        unsigned char c = (unsigned char)text[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        json_raw(out, text + plain, i - plain);
        plain = i + 1;
        char escape[7];
        if (c == '"' || c == '\\') {
            escape[0] = '\\', escape[1] = (char)c;
            json_raw(out, escape, 2);
        } else {
            static const char hex[] = "0123456789abcdef";
            memcpy(escape, "\\u00", 4);
            escape[4] = hex[c >> 4], escape[5] = hex[c & 15];
            json_raw(out, escape, 6);
        }
    }
    json_raw(out, text + plain, length - plain);
    json_raw(out, "\"", 1);
}

void json_cstring(json_out *out, const char *text) {
    json_quoted(out, text, strlen(text));
}

void json_uint(json_out *out, uint64_t value) {
    char digits[24];
    size_t at = sizeof digits;
    do digits[--at] = (char)('0' + value % 10); while (value /= 10);
    json_raw(out, digits + at, sizeof digits - at);
}

void json_key(json_out *out, const char *key) {
    json_raw(out, "\"", 1);
    json_raw(out, key, strlen(key));
    json_raw(out, "\":", 2);
}

/* -- the call frame ---------------------------------------------------------------------------- */

void json_call_begin(json_call *call, char *buffer, size_t capacity, uint32_t serial, const char *method) {
    *call = (json_call){ .json = { .data = buffer, .capacity = capacity } };
    static const char start[] = "\0\0\0\0{\"type\":\"call\",\"serial\":", then[] = ",\"method\":", args[] = ",\"args\":{";
    json_raw(&call->json, start, sizeof start - 1);
    json_uint(&call->json, serial);
    json_raw(&call->json, then, sizeof then - 1);
    json_cstring(&call->json, method);
    json_raw(&call->json, args, sizeof args - 1);
}

void json_call_field(json_call *call, const char *key) {
    if (call->fields++) json_raw(&call->json, ",", 1);
    json_key(&call->json, key);
}

void json_call_string(json_call *call, const char *key, const char *value) {
    if (!value) return;
    json_call_field(call, key);
    json_cstring(&call->json, value);
}

void json_call_true(json_call *call, const char *key) {
    json_call_field(call, key);
    json_raw(&call->json, "true", 4);
}

int json_call_end(json_call *call) {
    json_raw(&call->json, "}}", 2);
    if (call->json.failed) return call->json.failed;
    uint32_t length = (uint32_t)call->json.length - 4;
    unsigned char *p = (unsigned char *)call->json.data;
    p[0] = (unsigned char)(length >> 24), p[1] = (unsigned char)(length >> 16), p[2] = (unsigned char)(length >> 8), p[3] = (unsigned char)length;
    return 0;
}
