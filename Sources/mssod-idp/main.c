// mssod-idp: one HTTP request to an identity provider, made for mssod through the system's
// libcurl, in a process of its own.
//
// Why a process: libcurl brings the TLS library, and with it libcrypto (for libssh2), p11-kit and
// a dozen others, about 4.7 MB resident that mssod would carry all day for a few requests an hour;
// and the code that parses what an IdP sends then runs apart from the tokens of every other group.
// mssod starts this program for each request (IdPHTTP.swift), with an empty environment, writes
// the request on its standard input and reads the answer on its standard output; it kills it when
// the request is cancelled or overruns its deadline. Installed mode 0711 (execute, not read), the
// kernel makes it non-dumpable from its first instruction, so another program of the user can
// neither trace it nor open its memory before it has made itself so (below).
//
// Both directions are a list of fields, each a 4-byte big-endian length and that many bytes:
//   request: url, method ("GET" or "POST"), proxy ("": none), CA file ("": the system's store),
//            timeout in ms, connect timeout in ms, body, rescue key ("": none), rescue tag, then
//            each header line "Name: value"
//   answer:  outcome ("ok", "timeout", "too-large", "headers-too-large", or "tls" or "error"
//            and libcurl's sentence), status (for "timeout" too: "0" when none came), Retry-After,
//            DPoP-Nonce, Location, body
// The rules each request follows are in perform() below.
//
// A request with a rescue key (a refresh, whose answer the IdP commits as it sends it: the refresh
// token it rotates is good once) must not lose its answer when mssod dies or stops before storing
// it. So it does not die with mssod and ignores the stop signals a unit's or a terminal's end
// sends (it ends at its own deadline all the same), and before it answers it keeps a 200 answer in
// the kernel keyring (the persistent keyring msso's kernel store uses) as a "user" key of that
// name: the tag, a line feed, the body. mssod removes it once it has stored the answer, and reads
// it when it finds it after a restart. While the request is under way the key says so (the tag and
// this process's pid, no body): a mssod started meanwhile waits for the answer instead of spending
// the same refresh token again.
#define _GNU_SOURCE
#include <curl/curl.h>
#include "cmsso_system.h"
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

/// The most an IdP answer's body may hold (IdPHTTP.maximumBody).
#define BODY_CAP (256 * 1024)
/// The most its headers may hold, all lines together.
#define HEADER_CAP (64 * 1024)
/// The most a request may hold, all fields together, and how many headers.
#define REQUEST_CAP (1024 * 1024)
#define HEADERS_MAX 64

typedef struct {
    long status;
    unsigned char *body;
    size_t length, capacity;
    /// 1: the body (or its announced length) went over BODY_CAP; 2: the headers over HEADER_CAP.
    int too_large;
    size_t header_bytes;
    char retry_after[64];
    char dpop_nonce[1025]; /* mssod takes a nonce of up to 1,024 bytes */
    char location[2048];
} answer_t;

static size_t on_body(char *data, size_t size, size_t count, void *context) {
    answer_t *answer = context;
    size_t length = size * count;
    if (length > BODY_CAP - answer->length) {
        answer->too_large = 1;
        return 0; /* CURLE_WRITE_ERROR: the rest is never read */
    }
    if (answer->length + length > answer->capacity) {
        size_t capacity = answer->capacity ? answer->capacity : 4096;
        while (capacity < answer->length + length) capacity *= 2;
        if (capacity > BODY_CAP) capacity = BODY_CAP;
        unsigned char *grown = realloc(answer->body, capacity);
        if (!grown) return 0;
        answer->body = grown;
        answer->capacity = capacity;
    }
    memcpy(answer->body + answer->length, data, length);
    answer->length += length;
    return length;
}

/// Keeps the value of a header line `Name: value` in `into` when the line is that header's and
/// the value fits; a longer one is dropped (as if not sent).
static void keep(const char *line, size_t length, const char *name, char *into, size_t size) {
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

static size_t on_header(char *line, size_t size, size_t count, void *context) {
    answer_t *answer = context;
    size_t length = size * count;
    answer->header_bytes += length;
    if (answer->header_bytes > HEADER_CAP) { /* libcurl 7.88 has no cap of its own */
        answer->too_large = 2;
        return 0;
    }
    if (length >= 5 && strncmp(line, "HTTP/", 5) == 0) /* a new response, after a 1xx */
        answer->retry_after[0] = answer->dpop_nonce[0] = answer->location[0] = 0;
    keep(line, length, "Retry-After", answer->retry_after, sizeof answer->retry_after);
    keep(line, length, "DPoP-Nonce", answer->dpop_nonce, sizeof answer->dpop_nonce);
    keep(line, length, "Location", answer->location, sizeof answer->location);
    return length;
}

// MARK: The two pipes

static int read_fully(int fd, void *into, size_t length) {
    for (size_t done = 0; done < length;) {
        ssize_t count = read(fd, (char *)into + done, length - done);
        if (count <= 0) return done == 0 && count == 0 ? 0 : -1; /* 0: the end, between fields */
        done += (size_t)count;
    }
    return 1;
}

static int write_fully(int fd, const void *bytes, size_t length) {
    for (size_t done = 0; done < length;) {
        ssize_t count = write(fd, (const char *)bytes + done, length - done);
        if (count <= 0) return -1;
        done += (size_t)count;
    }
    return 0;
}

static void put(const void *bytes, size_t length) {
    unsigned char head[4] = {length >> 24, length >> 16, length >> 8, length};
    if (write_fully(1, head, 4) != 0 || write_fully(1, bytes, length) != 0) _exit(1); /* mssod is gone */
}

static void put_text(const char *text) { put(text, strlen(text)); }

/// Answers that the request could not be made, and why.
static _Noreturn void refuse(const char *why) {
    put_text("error");
    put_text(why);
    _exit(0);
}

/// The fields before the headers.
#define FIXED_FIELDS 9

typedef struct {
    char *fields[FIXED_FIELDS + HEADERS_MAX]; /* NUL-terminated copies */
    size_t lengths[FIXED_FIELDS + HEADERS_MAX];
    size_t count;
} request_t;

/// Reads the request whole (its fields until the end of input), within its caps.
static void read_request(request_t *request) {
    size_t total = 0;
    for (;;) {
        unsigned char head[4];
        int got = read_fully(0, head, 4);
        if (got == 0) return;
        if (got < 0) refuse("the request was cut short");
        size_t length = (size_t)head[0] << 24 | (size_t)head[1] << 16 | (size_t)head[2] << 8 | head[3];
        if (request->count == sizeof request->fields / sizeof *request->fields) refuse("the request has too many headers");
        if (length > REQUEST_CAP - total) refuse("the request is too large");
        total += length;
        char *field = malloc(length + 1);
        if (!field) refuse("out of memory");
        if (length && read_fully(0, field, length) != 1) refuse("the request was cut short");
        field[length] = 0;
        request->fields[request->count] = field;
        request->lengths[request->count++] = length;
    }
}

/// A field that must be text: no NUL inside (libcurl takes C strings).
static const char *text(const request_t *request, size_t index) {
    if (strlen(request->fields[index]) != request->lengths[index]) refuse("a field of the request holds a NUL byte");
    return request->fields[index];
}

static long milliseconds(const request_t *request, size_t index) {
    char *end;
    long value = strtol(text(request, index), &end, 10);
    if (*end || end == request->fields[index] || value < 1 || value > 86400L * 1000) refuse("a timeout of the request is not a number of milliseconds");
    return value;
}

// MARK: The request

/// Makes the request: HTTP/1.1 over http or https only, no redirect followed, no proxy but the
/// one named (libcurl's reading of the environment is switched off too, though it is empty), TLS
/// verified against the system's store or the CA file alone, nothing decompressed, the whole
/// exchange within the timeout, no connection or TLS session kept (the process ends with it).
static CURLcode perform(const request_t *request, answer_t *answer) {
    const char *url = text(request, 0), *method = text(request, 1), *proxy = text(request, 2), *ca_file = text(request, 3);
    long timeout = milliseconds(request, 4), connect = milliseconds(request, 5);
    int post = strcmp(method, "POST") == 0;
    if (!post && strcmp(method, "GET") != 0) refuse("the request's method is neither GET nor POST");
    struct curl_slist *headers = NULL;
    for (size_t i = FIXED_FIELDS; i < request->count; i++) {
        const char *line = text(request, i);
        if (strpbrk(line, "\r\n")) refuse("a header line of the request holds a line break");
        if (!(headers = curl_slist_append(headers, line))) refuse("out of memory");
    }
    /* Never wait for an IdP's 100-continue (libcurl asks for one before a large body). */
    if (!(headers = curl_slist_append(headers, "Expect:"))) refuse("out of memory");
    CURL *easy = curl_easy_init();
    if (!easy) refuse("libcurl could not make a handle");
    CURLcode set = CURLE_OK;
#define SET(option, value) if (set == CURLE_OK) set = curl_easy_setopt(easy, option, value)
    SET(CURLOPT_URL, url);
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_FOLLOWLOCATION, 0L);
    SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_PROXY, proxy);
    SET(CURLOPT_NOPROXY, "");
    SET(CURLOPT_SSL_VERIFYPEER, 1L);
    SET(CURLOPT_SSL_VERIFYHOST, 2L);
    if (*ca_file) {
        SET(CURLOPT_CAINFO, ca_file);
        SET(CURLOPT_CAPATH, (char *)NULL);
    }
    SET(CURLOPT_TIMEOUT_MS, timeout);
    SET(CURLOPT_CONNECTTIMEOUT_MS, connect < timeout ? connect : timeout);
    SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)BODY_CAP);
    /* A name lookup the IdP's DNS drags out is not waited for at the deadline: the process ends. */
    SET(CURLOPT_QUICK_EXIT, 1L);
    SET(CURLOPT_HTTPHEADER, headers);
    if (post) {
        SET(CURLOPT_POST, 1L);
        SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)request->lengths[6]);
        SET(CURLOPT_POSTFIELDS, request->fields[6]);
    }
    SET(CURLOPT_WRITEFUNCTION, on_body);
    SET(CURLOPT_WRITEDATA, answer);
    SET(CURLOPT_HEADERFUNCTION, on_header);
    SET(CURLOPT_HEADERDATA, answer);
#undef SET
    /* An option refused: a libcurl older than 7.87 (QUICK_EXIT), which mssod cannot use safely. */
    if (set != CURLE_OK) refuse("the system's libcurl is too old for msso (it needs 7.87 or later)");
    CURLcode done = curl_easy_perform(easy);
    if (done == CURLE_FILESIZE_EXCEEDED) answer->too_large = 1;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &answer->status);
    return done;
}

/// The kernel keyring msso keeps its items in (the kernel store's), or 0 where there is none.
static int32_t keys_home(void) {
    int persistent;
    int32_t home = cmsso_keys_home(&persistent);
    return home > 0 ? home : 0;
}

/// Says, under the rescue key, that this process is spending the refresh token: the tag, a space,
/// this pid, a line feed and nothing more. A mssod started meanwhile waits for the answer that
/// replaces it rather than spend the same token again (the IdP would end the session).
static void announce(const request_t *request) {
    const char *key = text(request, 7), *tag = text(request, 8);
    char line[512];
    int length = snprintf(line, sizeof line, "%s %ld\n", tag, (long)getpid());
    int32_t home = keys_home();
    if (home && length > 0 && (size_t)length < sizeof line) cmsso_keys_write(home, key, line, (size_t)length);
}

/// Keeps a 200 answer where a later mssod finds it (see the top of this file), in place of the
/// announcement; any other outcome takes the announcement back. Best effort: a full key quota or
/// a kernel without keyrings leaves it to mssod alone.
static void rescue(const request_t *request, const answer_t *answer, int answered) {
    const char *key = text(request, 7), *tag = text(request, 8);
    int32_t home = keys_home();
    if (!home) return;
    size_t tagged = request->lengths[8] + 1 + answer->length;
    if (!answered || answer->status != 200 || !answer->length || tagged > 32767 /* a "user" key's most */) {
        int32_t announced = cmsso_keys_find(home, key);
        if (announced > 0) cmsso_keys_delete(home, announced);
        return;
    }
    char *payload = malloc(tagged);
    if (!payload) return;
    memcpy(payload, tag, request->lengths[8]);
    payload[request->lengths[8]] = '\n';
    memcpy(payload + request->lengths[8] + 1, answer->body, answer->length);
    cmsso_keys_write(home, key, payload, tagged);
    explicit_bzero(payload, tagged);
    free(payload);
}

int main(void) {
    /* Before anything is read: no core dump, no tracing or reading of this process's memory by
       another program of the user (installed execute-only, the kernel did so already at exec),
       and no life after mssod's (until the request says it has an answer to keep). */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0});
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (isatty(0)) {
        fprintf(stderr, "mssod-idp: makes one request to an identity provider for mssod, which starts it; it is not for use by hand\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);

    request_t request = {0};
    read_request(&request);
    if (request.count < FIXED_FIELDS) refuse("the request is incomplete");
    int kept = *text(&request, 7) != 0;
    if (kept) {
        /* Its answer outlives mssod (see the top of this file): announced first, so that no mssod
           started after a death of this one's can miss it. Its deadline still ends it. */
        announce(&request);
        prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
        signal(SIGTERM, SIG_IGN);
        signal(SIGINT, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) refuse("libcurl could not be initialised");
    answer_t answer = {0};
    CURLcode done = perform(&request, &answer);
    if (kept) rescue(&request, &answer, done == CURLE_OK && !answer.too_large);
    /* A secret of the request (a password, a client secret, a refresh token) is not kept longer
       than it must be. */
    for (size_t i = 0; i < request.count; i++) explicit_bzero(request.fields[i], request.lengths[i]);

    if (answer.too_large == 1) put_text("too-large");
    else if (answer.too_large == 2) put_text("headers-too-large");
    else if (done == CURLE_OPERATION_TIMEDOUT) {
        char status[24];
        snprintf(status, sizeof status, "%ld", answer.status); /* whether it had begun to answer */
        put_text("timeout");
        put_text(status);
    } else if (done != CURLE_OK) {
        /* The IdP's certificate (or TLS) failed: not the network's fault, and said apart. */
        int tls = done == CURLE_PEER_FAILED_VERIFICATION || done == CURLE_SSL_CACERT_BADFILE ||
                  done == CURLE_SSL_CERTPROBLEM || done == CURLE_SSL_ISSUER_ERROR;
        put_text(tls ? "tls" : "error");
        put_text(curl_easy_strerror(done));
    } else {
        char status[24];
        snprintf(status, sizeof status, "%ld", answer.status);
        put_text("ok");
        put_text(status);
        put_text(answer.retry_after);
        put_text(answer.dpop_nonce);
        put_text(answer.location);
        put(answer.body ? answer.body : (unsigned char *)"", answer.length);
    }
    explicit_bzero(answer.body, answer.length);
    _exit(0); /* nothing to clean up: the process ends here */
}
