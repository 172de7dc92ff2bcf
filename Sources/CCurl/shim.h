// Why this shim exists: curl_easy_setopt and curl_easy_getinfo are variadic (Swift cannot call
// them), and libcurl's callbacks are C function pointers that fill a buffer: one request, from
// options to answer, reads best as one C function.
#ifndef MSSO_CURL_SHIM_H
#define MSSO_CURL_SHIM_H

#include <curl/curl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/// What an identity provider answered: the status, the headers msso reads, the body (malloc'd,
/// at most the cap the request named; free with msso_http_answer_free).
typedef struct {
    long status;
    unsigned char *body;
    size_t length;
    size_t capacity;
    size_t cap;
    /// 1: the body (or its announced length) went over `cap`; 2: the headers went over
    /// MSSO_HTTP_HEADER_CAP. The transfer was stopped there.
    int too_large;
    /// The response headers' bytes so far: capped too (libcurl 7.88 has no total of its own).
    size_t header_bytes;
    char retry_after[64];
    char dpop_nonce[1025]; /* OpenIDProvider takes a nonce of up to 1,024 bytes */
    char location[2048];
} msso_http_answer;

/// The most a response's headers may hold, all lines together.
#define MSSO_HTTP_HEADER_CAP (64 * 1024)

static inline void msso_http_answer_free(msso_http_answer *answer) {
    free(answer->body);
    answer->body = NULL;
}

static size_t msso_http_body(char *data, size_t size, size_t count, void *context) {
    msso_http_answer *answer = context;
    size_t length = size * count;
    if (length > answer->cap - answer->length) {
        answer->too_large = 1;
        return 0; /* CURLE_WRITE_ERROR: the rest is never read */
    }
    if (answer->length + length > answer->capacity) {
        size_t capacity = answer->capacity ? answer->capacity : 4096;
        while (capacity < answer->length + length) capacity *= 2;
        if (capacity > answer->cap) capacity = answer->cap;
        unsigned char *grown = realloc(answer->body, capacity);
        if (!grown) return 0;
        answer->body = grown;
        answer->capacity = capacity;
    }
    memcpy(answer->body + answer->length, data, length);
    answer->length += length;
    return length;
}

/// Keeps `value` of a header line `Name: value` in `into` when the line is that header's and the
/// value fits; a longer one is dropped (it is then as if not sent).
static void msso_http_keep(const char *line, size_t length, const char *name, char *into, size_t size) {
    size_t named = strlen(name);
    if (length <= named || line[named] != ':' || strncasecmp(line, name, named) != 0) return;
    const char *value = line + named + 1;
    const char *end = line + length;
    while (value < end && (*value == ' ' || *value == '\t')) value++;
    while (end > value && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t')) end--;
    if ((size_t)(end - value) >= size) return;
    memcpy(into, value, (size_t)(end - value));
    into[end - value] = 0;
}

static size_t msso_http_header(char *line, size_t size, size_t count, void *context) {
    msso_http_answer *answer = context;
    size_t length = size * count;
    answer->header_bytes += length;
    if (answer->header_bytes > MSSO_HTTP_HEADER_CAP) {
        answer->too_large = 2;
        return 0; /* CURLE_WRITE_ERROR */
    }
    if (length >= 5 && strncmp(line, "HTTP/", 5) == 0) {
        /* A new response (after a 1xx): forget the last one's headers. */
        answer->retry_after[0] = answer->dpop_nonce[0] = answer->location[0] = 0;
    }
    msso_http_keep(line, length, "Retry-After", answer->retry_after, sizeof answer->retry_after);
    msso_http_keep(line, length, "DPoP-Nonce", answer->dpop_nonce, sizeof answer->dpop_nonce);
    msso_http_keep(line, length, "Location", answer->location, sizeof answer->location);
    return length;
}

/// Ends the transfer when *cancelled turns non-zero (checked about once a second, and whenever data moves).
static int msso_http_progress(void *cancelled, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
    (void)a; (void)b; (void)c; (void)d;
    return __atomic_load_n((const int *)cancelled, __ATOMIC_RELAXED) != 0;
}

static inline void msso_http_cancel(int *cancelled) { __atomic_store_n(cancelled, 1, __ATOMIC_RELAXED); }

/// One request on `easy` (a handle whose connections may be reused), every option set anew:
/// HTTP/1.1 over http or https only, no redirect followed, no proxy but `proxy` ("" for none,
/// whatever the environment says), TLS verified against the system's store or `ca_file` alone,
/// nothing decompressed, the whole exchange within `timeout_ms`. `headers`: "Name: value" lines.
static inline CURLcode msso_http_perform(CURL *easy, const char *url, int post, const char *const *headers, size_t header_count,
                                         const unsigned char *body, size_t body_length, const char *proxy, const char *ca_file,
                                         long timeout_ms, long connect_timeout_ms, int *cancelled, msso_http_answer *answer) {
    curl_easy_reset(easy); /* keeps its connections */
    struct curl_slist *list = NULL;
    for (size_t i = 0; i < header_count; i++) {
        struct curl_slist *more = curl_slist_append(list, headers[i]);
        if (!more) { curl_slist_free_all(list); return CURLE_OUT_OF_MEMORY; }
        list = more;
    }
    /* Never wait for an IdP's 100-continue (libcurl asks for one before a large body). */
    struct curl_slist *more = curl_slist_append(list, "Expect:");
    if (!more) { curl_slist_free_all(list); return CURLE_OUT_OF_MEMORY; }
    list = more;
    CURLcode set = CURLE_OK;
#define MSSO_SET(option, value) if (set == CURLE_OK) set = curl_easy_setopt(easy, option, value)
    MSSO_SET(CURLOPT_URL, url);
    MSSO_SET(CURLOPT_PROTOCOLS_STR, "http,https");
    MSSO_SET(CURLOPT_FOLLOWLOCATION, 0L);
    MSSO_SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    MSSO_SET(CURLOPT_NOSIGNAL, 1L);
    MSSO_SET(CURLOPT_PROXY, proxy);
    MSSO_SET(CURLOPT_NOPROXY, "");
    MSSO_SET(CURLOPT_SSL_VERIFYPEER, 1L);
    MSSO_SET(CURLOPT_SSL_VERIFYHOST, 2L);
    if (ca_file) {
        MSSO_SET(CURLOPT_CAINFO, ca_file);
        MSSO_SET(CURLOPT_CAPATH, (char *)NULL);
    }
    MSSO_SET(CURLOPT_TIMEOUT_MS, timeout_ms);
    MSSO_SET(CURLOPT_CONNECTTIMEOUT_MS, connect_timeout_ms);
    MSSO_SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)answer->cap);
    /* A name lookup the IdP's own DNS drags out is not waited for when the deadline (or a
       cancel) ends the transfer: the resolver's thread is left to finish alone. */
    MSSO_SET(CURLOPT_QUICK_EXIT, 1L);
    /* Kept connections are reused by the CA file's path, not its contents: none older than 5
       minutes, and no TLS session resumed (a resumed session would skip the certificate). */
    MSSO_SET(CURLOPT_MAXLIFETIME_CONN, 300L);
    MSSO_SET(CURLOPT_SSL_SESSIONID_CACHE, 0L);
    MSSO_SET(CURLOPT_HTTPHEADER, list);
    if (post) {
        MSSO_SET(CURLOPT_POST, 1L);
        MSSO_SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_length);
        MSSO_SET(CURLOPT_POSTFIELDS, body ? (const char *)body : "");
    }
    MSSO_SET(CURLOPT_WRITEFUNCTION, msso_http_body);
    MSSO_SET(CURLOPT_WRITEDATA, answer);
    MSSO_SET(CURLOPT_HEADERFUNCTION, msso_http_header);
    MSSO_SET(CURLOPT_HEADERDATA, answer);
    MSSO_SET(CURLOPT_XFERINFOFUNCTION, msso_http_progress);
    MSSO_SET(CURLOPT_XFERINFODATA, cancelled);
    MSSO_SET(CURLOPT_NOPROGRESS, 0L);
#undef MSSO_SET
    CURLcode done = set == CURLE_OK ? curl_easy_perform(easy) : set;
    if (done == CURLE_FILESIZE_EXCEEDED) answer->too_large = 1;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &answer->status);
    curl_easy_reset(easy); /* no pointer into this call's memory stays with a kept handle */
    curl_slist_free_all(list);
    return done;
}

#endif
