/* The library's own parts, without a daemon: the JSON reader (every rule of RFC 8259 it holds a
 * frame to, and a mutation run: hostile bytes must never crash it, which `make check` runs under
 * AddressSanitizer and UndefinedBehaviorSanitizer), the writer, SHA-256, base64 and the waits'
 * deadlines. Exit status 0
 * when all pass; each failure is printed. */
#define _GNU_SOURCE
#include "../src/json.c"
#include "../src/sha256.c"
#include "../src/client.c"

#include <stdio.h>
#include <stdlib.h>

#include "check.h"

static int parses(const char *text) {
    json_doc doc = { 0 };
    int result = json_parse(&doc, text, strlen(text));
    json_doc_free(&doc);
    return result == 0;
}

static void valid_and_invalid(void) {
    const char *valid[] = {
        "{}", " {\"a\" : 1 } \n", "{\"a\":[1,-2.5e3,0,true,false,null,\"x\",{},[]]}", "{\"\":\"\"}",
        "{\"a\":\"\\u00e9\\ud83d\\ude00\\n\\\"\\\\\\/\\b\\f\\r\\t\"}", "{\"a\":1,\"a\":2}", "{\"é\":\"😀\"}",
        "{\"a\":-0}", "{\"a\":1E+2}", "{\"a\":1e-2}",
    };
    const char *invalid[] = {
        "", " ", "[]", "\"x\"", "1", "null", "{", "}", "{\"a\":1}x", "{\"a\":1}{}", "{\"a\":1,}", "{\"a\" 1}",
        "{\"a\":}", "{a:1}", "{'a':1}", "{\"a\":01}", "{\"a\":1.}", "{\"a\":.5}", "{\"a\":-}", "{\"a\":+1}",
        "{\"a\":1e}", "{\"a\":tru}", "{\"a\":nul}", "{\"a\":1true}", "{\"a\":\"x\"\"y\"}", "{\"a\":[1,]}", "{\"a\":[1 2]}",
        "{\"a\":[1,2}", "{\"a\":1}}", "{\"a\":\"\\u0000\"}", "{\"a\":\"\\ud800\"}", "{\"a\":\"\\udc00\"}",
        "{\"a\":\"\\ud800\\u0041\"}", "{\"a\":\"\\u12\"}", "{\"a\":\"\\x\"}", "{\"a\":\"tab\there\"}", "{\"a\":\"",
        "{\"a\":\"\xC0\xAF\"}", "{\"a\":\"\xED\xA0\x80\"}", "{\"a\":\"\xF4\x90\x80\x80\"}", "{\"a\":\"\xE2\x82\"}",
        "{\"a\":\"\x80\"}", "{\"a\":\"\xFF\"}", "{\"\xC3\":1}", "{\"a\":NaN}", "{\"a\":Infinity}", "{\"a\":1}\x01",
    };
    for (size_t i = 0; i < sizeof valid / sizeof *valid; i++)
        if (!parses(valid[i])) fprintf(stderr, "refused valid: %s\n", valid[i]), failures++;
    for (size_t i = 0; i < sizeof invalid / sizeof *invalid; i++)
        if (parses(invalid[i])) fprintf(stderr, "accepted invalid: %s\n", invalid[i]), failures++;
    /* A NUL byte inside the text is not JSON either. */
    json_doc doc = { 0 };
    CHECK(json_parse(&doc, "{\"a\":\"x\0y\"}", 11) == -1);
    CHECK(json_parse(&doc, "{\"a\":1}\0", 8) == -1);
    json_doc_free(&doc);
}

static void depth(void) {
    char text[256];
    for (int levels = 30; levels <= 34; levels++) {
        size_t at = 0;
        text[at++] = '{', text[at++] = '"', text[at++] = 'a', text[at++] = '"', text[at++] = ':';
        for (int i = 1; i < levels; i++) text[at++] = '[';
        for (int i = 1; i < levels; i++) text[at++] = ']';
        text[at++] = '}';
        text[at] = '\0';
        CHECK(parses(text) == (levels <= JSON_MAX_DEPTH));
    }
    /* Far deeper than the cap: refused at the cap, with no recursion to exhaust. */
    size_t size = 1000000;
    char *deep = malloc(size + 8);
    memcpy(deep, "{\"a\":", 5);
    memset(deep + 5, '[', size);
    deep[size + 5] = '\0';
    CHECK(!parses(deep));
    free(deep);
}

static void values(void) {
    const char *text = "{\"s\":\"a\\u00e9\\ud83d\\ude00\\n\",\"n\":1745000000.123456,\"big\":1e400,\"tiny\":1e-400,"
                       "\"u\":4294967295,\"over\":4294967296,\"f\":1.0,\"neg\":-1,\"k\\u0065y\":[true],\"d\":0.1,\"e\":-2.5E-3}";
    json_doc doc = { 0 };
    CHECK(json_parse(&doc, text, strlen(text)) == 0);
    long s = json_get(&doc, 0, "s");
    char *value = json_string(&doc, (uint32_t)s, 100);
    CHECK(value && strcmp(value, "a\xC3\xA9\xF0\x9F\x98\x80\n") == 0);
    free(value);
    CHECK(json_string(&doc, (uint32_t)s, 3) == NULL); /* over `max` */
    char small[4];
    CHECK(json_string_into(&doc, (uint32_t)s, small, sizeof small) == -1);
    CHECK(json_get(&doc, 0, "key") >= 0 && json_is(&doc, json_get(&doc, 0, "key"), JSON_ARRAY)); /* an escaped key */
    CHECK(json_get(&doc, 0, "missing") == -1 && !json_is(&doc, -1, JSON_NULL));
    double number;
    CHECK(json_number(&doc, (uint32_t)json_get(&doc, 0, "n"), &number) == 0 && fabs(number - 1745000000.123456) < 1e-6);
    CHECK(json_number(&doc, (uint32_t)json_get(&doc, 0, "big"), &number) == -1);
    CHECK(json_number(&doc, (uint32_t)json_get(&doc, 0, "tiny"), &number) == 0 && number == 0);
    CHECK(json_number(&doc, (uint32_t)json_get(&doc, 0, "d"), &number) == 0 && number == 0.1);
    CHECK(json_number(&doc, (uint32_t)json_get(&doc, 0, "e"), &number) == 0 && number == -2.5e-3);
    uint64_t whole;
    CHECK(json_unsigned(&doc, (uint32_t)json_get(&doc, 0, "u"), UINT32_MAX, &whole) == 0 && whole == UINT32_MAX);
    CHECK(json_unsigned(&doc, (uint32_t)json_get(&doc, 0, "over"), UINT32_MAX, &whole) == -1);
    CHECK(json_unsigned(&doc, (uint32_t)json_get(&doc, 0, "f"), UINT32_MAX, &whole) == -1);
    CHECK(json_unsigned(&doc, (uint32_t)json_get(&doc, 0, "neg"), UINT32_MAX, &whole) == -1);
    json_doc_free(&doc);
}

static void writer(void) {
    char buffer[64];
    json_out out = { .data = buffer, .capacity = sizeof buffer };
    json_quoted(&out, "a\"b\\c\n\x01\x1f\xC3\xA9", 10);
    static const char expected[] = "\"a\\\"b\\\\c\\u000a\\u0001\\u001f\xC3\xA9\"";
    CHECK(!out.failed && out.length == sizeof expected - 1 && memcmp(buffer, expected, sizeof expected - 1) == 0);
    json_quoted(&out, "\xC0\xAF", 2);
    CHECK(out.failed == JSON_NOT_UTF8);
    json_out full = { .data = buffer, .capacity = 8 };
    json_cstring(&full, "123456789");
    CHECK(full.failed == JSON_TOO_LONG && full.length <= 8);
    json_out numbers = { .data = buffer, .capacity = sizeof buffer };
    json_uint(&numbers, 0);
    json_raw(&numbers, ",", 1);
    json_uint(&numbers, UINT64_MAX);
    CHECK(numbers.length == 22 && memcmp(buffer, "0,18446744073709551615", 22) == 0);
    /* What the writer writes, the reader reads back. */
    char text[64];
    json_out round = { .data = text, .capacity = sizeof text };
    json_raw(&round, "{", 1);
    json_key(&round, "k");
    json_quoted(&round, "x\0y\"\xE2\x82\xAC", 7);
    json_raw(&round, "}", 1);
    json_doc doc = { 0 };
    CHECK(json_parse(&doc, text, round.length) == -1); /* the NUL, escaped as \u0000, is refused on reading */
    json_doc_free(&doc);
}

/* A key there twice: json_get takes the first, json_get_unique refuses (an escaped spelling is the
 * same key). */
static void keys_given_twice(void) {
    static const char text[] = "{\"a\":1,\"b\":{\"a\":2},\"c\":[],\"\\u0061\":3}";
    json_doc doc = { 0 };
    CHECK(json_parse(&doc, text, sizeof text - 1) == 0);
    long first = json_get(&doc, 0, "a"), b = json_get(&doc, 0, "b");
    CHECK(json_is(&doc, first, JSON_NUMBER) && doc.text[doc.tokens[first].start] == '1');
    CHECK(json_get_unique(&doc, 0, "a") == -2);
    CHECK(json_get_unique(&doc, 0, "b") == b && json_get_unique(&doc, 0, "c") == json_get(&doc, 0, "c"));
    CHECK(json_get_unique(&doc, 0, "d") == -1 && json_get_unique(&doc, (uint32_t)json_get(&doc, 0, "c"), "a") == -1);
    CHECK(json_is(&doc, json_get_unique(&doc, (uint32_t)b, "a"), JSON_NUMBER)); /* the inner "a" is another object's */
    json_doc_free(&doc);
}

/* A call's frame: the length, then the envelope and the arguments; nothing to send when an argument
 * is not UTF-8 or the frame would not fit. */
static void call_frames(void) {
    char buffer[128];
    json_call call;
    json_call_begin(&call, buffer, sizeof buffer, 4294967295u, "logout");
    json_call_string(&call, "group", "g");
    json_call_string(&call, "absent", NULL);
    json_call_true(&call, "all");
    CHECK(json_call_end(&call) == 0);
    static const char expected[] = "{\"type\":\"call\",\"serial\":4294967295,\"method\":\"logout\",\"args\":{\"group\":\"g\",\"all\":true}}";
    CHECK(call.json.length == 4 + sizeof expected - 1 && memcmp(buffer + 4, expected, sizeof expected - 1) == 0);
    CHECK(buffer[0] == 0 && buffer[1] == 0 && buffer[2] == 0 && buffer[3] == (char)(sizeof expected - 1));
    json_call_begin(&call, buffer, sizeof buffer, 1, "ping");
    CHECK(json_call_end(&call) == 0 && call.json.length == 4 + 52 && memcmp(buffer + 4 + 49, "{}}", 3) == 0);
    json_call_begin(&call, buffer, sizeof buffer, 1, "login");
    json_call_string(&call, "password", "\xff");
    CHECK(json_call_end(&call) == JSON_NOT_UTF8);
    json_call_begin(&call, buffer, sizeof buffer, 1, "login");
    json_call_string(&call, "password", "0123456789012345678901234567890123456789012345678901234567890123456789");
    CHECK(json_call_end(&call) == JSON_TOO_LONG);
}

static void hashing(void) {
    static const struct { size_t length; const char *digest; } vectors[] = {
        { 0, "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=" },   { 55, "n0OQ+NMMLdkuyfCVtl4rmumwqSWlJY4kHJ8ekQ9zQxg=" },
        { 56, "s1Q5pKxvCUi21vnjxq8PX1kM4g8b3nCQ73lwaG7Gc4o=" },  { 64, "/+BU/nrgy23GXDr5th1SCfQ5hR20PQulmXM33xVGaOs=" },
        { 119, "MeulHDE6XAgiat8Y1KNZz9/Y0ugWsT9K+VL36mWE3Ps=" }, { 1000000, "zcduXJkU+5KBocfihNc+Z/GAmkiklyAOBG05zMcRLNA=" },
    };
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    for (size_t i = 0; i < sizeof vectors / sizeof *vectors; i++) {
        unsigned char digest[32];
        char encoded[45];
        sha256(a, vectors[i].length, digest);
        base64(digest, 32, encoded);
        if (strcmp(encoded, vectors[i].digest) != 0) fprintf(stderr, "sha256 of %zu bytes: %s\n", vectors[i].length, encoded), failures++;
    }
    free(a);
    unsigned char digest[32];
    char encoded[45];
    sha256("abc", 3, digest);
    base64(digest, 32, encoded);
    CHECK(strcmp(encoded, "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=") == 0);
    char short_ones[8];
    base64((const unsigned char *)"f", 1, short_ones);
    CHECK(strcmp(short_ones, "Zg==") == 0);
    base64((const unsigned char *)"fo", 2, short_ones);
    CHECK(strcmp(short_ones, "Zm8=") == 0);
}

/* Mutations of real replies: flipped, inserted, deleted and truncated bytes. Whatever the reader
 * makes of them, every accessor must stay within the text. */
static void mutations(void) {
    const char *seeds[] = {
        "{\"type\":\"reply\",\"serial\":7,\"result\":{\"headers\":[[\"Authorization\",\"Bearer eyJ\\u00e9\"]]}}",
        "{\"type\":\"signal\",\"signal\":\"LoggedOut\",\"group\":\"g\",\"status\":{\"group\":\"g\",\"state\":\"notLoggedIn\","
        "\"sessionExpiresAt\":1745000000.5,\"admin\":true}}",
        "{\"type\":\"error\",\"serial\":0,\"error\":\"Busy\",\"message\":\"too many \\ud83d\\ude00\"}",
    };
    const char bytes[] = "{}[]\",:\\u0123456789.eE+-tfnrl \x80\xC3\xED\xF4\xFF\x00";
    unsigned seed = 12345;
    char text[512];
    json_doc doc = { 0 };
    long accepted = 0;
    for (int round = 0; round < 300000; round++) {
        const char *from = seeds[round % 3];
        size_t length = strlen(from);
        memcpy(text, from, length);
        for (int edits = 1 + (int)((seed = seed * 1103515245 + 12345) >> 16) % 4; edits > 0; edits--) {
            seed = seed * 1103515245 + 12345;
            size_t at = (seed >> 8) % (length + 1);
            char c = bytes[(seed >> 20) % (sizeof bytes - 1)];
            switch ((seed >> 4) % 4) {
            case 0: if (at < length) text[at] = c; break;
            case 1: if (length < sizeof text - 1) { memmove(text + at + 1, text + at, length - at); text[at] = c; length++; } break;
            case 2: if (at < length) { memmove(text + at, text + at + 1, length - at - 1); length--; } break;
            case 3: length = at; break;
            }
        }
        if (json_parse(&doc, text, length) != 0) continue;
        accepted++;
        for (uint32_t i = 0; i < doc.count; i++) { /* every accessor on every token */
            json_token *t = &doc.tokens[i];
            CHECK(t->start <= t->end && t->end <= length && t->next > i && t->next <= doc.count);
            double number;
            uint64_t whole;
            char small[16];
            if (t->type == JSON_STRING) {
                free(json_string(&doc, i, 1000));
                json_string_into(&doc, i, small, sizeof small);
                json_string_equals(&doc, i, "type");
                CHECK(json_valid_utf8(text + t->start, t->end - t->start));
            } else if (t->type == JSON_NUMBER) {
                json_number(&doc, i, &number);
                json_unsigned(&doc, i, UINT32_MAX, &whole);
            } else if (t->type == JSON_OBJECT) {
                json_get(&doc, i, "serial");
            }
        }
    }
    json_doc_free(&doc);
    CHECK(accepted > 1000); /* the run reached past the first byte */
}

/* The reader and the writer look at eight bytes at a time where a string is plain: every byte
 * that is not (a control character, a quote, a backslash, a UTF-8 sequence, an invalid byte) at
 * every position of strings of 1 to 24 bytes, so that it falls at each offset within a word and
 * across words, against what a byte at a time gives. */
static void eight_at_a_time(void) {
    static const char *const special[] = { "\x00", "\x01", "\x1f", "\"", "\\", "\x7f", "\xC3\xA9", "\xE2\x82\xAC", "\x80", "\xff", "\xC3" };
    static const size_t sizes[] = { 1, 1, 1, 1, 1, 1, 2, 3, 1, 1, 1 };
    for (size_t kind = 0; kind < sizeof sizes / sizeof sizes[0]; kind++) {
        for (size_t length = sizes[kind]; length <= 24; length++) {
            for (size_t at = 0; at + sizes[kind] <= length; at++) {
                char text[32];
                memset(text, 'a', length);
                memcpy(text + at, special[kind], sizes[kind]);
                /* The reference: byte by byte. */
                char expected[256];
                size_t e = 0;
                int utf8 = json_valid_utf8(text, length);
                expected[e++] = '"';
                for (size_t i = 0; i < length; i++) {
                    unsigned char c = (unsigned char)text[i];
                    if (c == '"' || c == '\\') { expected[e++] = '\\'; expected[e++] = (char)c; }
                    else if (c < 0x20) e += (size_t)sprintf(expected + e, "\\u%04x", c);
                    else expected[e++] = (char)c;
                }
                expected[e++] = '"';
                int valid = kind < 8; /* a lone continuation, 0xff, a cut sequence: not UTF-8 */
                CHECK(utf8 == valid);
                char buffer[256];
                json_out out = { .data = buffer, .capacity = sizeof buffer };
                json_quoted(&out, text, length);
                if (!valid) {
                    CHECK(out.failed == JSON_NOT_UTF8);
                    continue;
                }
                CHECK(!out.failed && out.length == e && memcmp(buffer, expected, e) == 0);
                /* Read back (a NUL is refused on reading, by design). */
                char object[300];
                int n = snprintf(object, sizeof object, "{\"k\":%.*s}", (int)out.length, buffer);
                json_doc doc = { 0 };
                int parsed = json_parse(&doc, object, (size_t)n);
                if (kind == 0) CHECK(parsed == -1);
                else {
                    char back[64];
                    long k = json_get(&doc, 0, "k");
                    CHECK(parsed == 0 && k >= 0 && json_string_into(&doc, (uint32_t)k, back, sizeof back) == 0 &&
                          strlen(back) == length && memcmp(back, text, length) == 0);
                }
                json_doc_free(&doc);
                /* A raw special byte inside a string on reading: a control character, or the
                 * string's end at a quote, or an escape at a backslash. */
                if (kind <= 2) {
                    char raw_text[64];
                    memcpy(raw_text, "{\"k\":\"", 6);
                    memcpy(raw_text + 6, text, length);
                    memcpy(raw_text + 6 + length, "\"}", 2);
                    json_doc raw = { 0 };
                    CHECK(json_parse(&raw, raw_text, 8 + length) == -1);
                    json_doc_free(&raw);
                }
            }
        }
    }
}

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* A call with a timeout of N ms gives up no sooner than N ms after it started, wherever in a
 * millisecond it started (a deadline counted from a rounded-down "now" came up to 1 ms early). A
 * read from a socket nobody writes on, as a call waiting for a silent daemon does. */
static void deadlines_are_never_early(void) {
    int ends[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, ends) == 0);
    msso_client c = { .fd = ends[0], .events = -1, .wake = -1, .wait_ms = -1 };
    c.in = malloc(IN_CAPACITY);
    int early = 0;
    /* 1-4 ms are polled at once; 25-45 ms wait in a blocking recv first, then poll the rest. */
    for (int round = 0; round < 60; round++) {
        int milliseconds = round % 2 ? 1 + round % 4 : 25 + round % 21;
        long long started = now_ns();
        CHECK(read_some(&c, deadline_after(milliseconds)) == 0);
        if (now_ns() - started < milliseconds * 1000000LL) early++;
    }
    CHECK(early == 0);
    free(c.in);
    close(ends[0]);
    close(ends[1]);
}

/* The names msso_set_account takes are AccountName.isValid's (Sources/MSSOProtocol/AccountName.swift). */
static void account_names(void) {
    const char *valid[] = { "a", "admin", "0", "alice@example.com", "a.b_c-d+e", "Z9" };
    const char *invalid[] = { "", "-admin", ".a", "@a", "+a", "_a", "a b", "a/b", "a\tb", "caf\xc3\xa9", "a:b" };
    for (size_t i = 0; i < sizeof valid / sizeof *valid; i++) CHECK(account_name_valid(valid[i]));
    for (size_t i = 0; i < sizeof invalid / sizeof *invalid; i++) CHECK(!account_name_valid(invalid[i]));
    char name[66];
    memset(name, 'a', 65);
    name[65] = '\0';
    CHECK(!account_name_valid(name));
    name[64] = '\0';
    CHECK(account_name_valid(name));
}

int main(void) {
    eight_at_a_time();
    valid_and_invalid();
    depth();
    values();
    writer();
    keys_given_twice();
    call_frames();
    hashing();
    mutations();
    deadlines_are_never_early();
    account_names();
    if (failures) fprintf(stderr, "%d failed\n", failures);
    else printf("libmsso unit tests: all passed\n");
    return failures != 0;
}
