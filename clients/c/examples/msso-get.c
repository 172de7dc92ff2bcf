/* msso-get: sends one HTTP request signed by the user's msso broker and prints the answer's body.
 * Whatever the group's signing profile (bearer, DPoP, RFC 9421), the code is the same; a
 * resource server that asks for a DPoP nonce (401 with DPoP-Nonce, RFC 9449 §9) gets the request
 * signed once more with it.
 *
 *   msso-get [--group G] [--method M] [--data BODY] [--header 'Name: value']… http://HOST[:PORT]/PATH
 *
 * Plain http only, HTTP/1.1 with Connection: close and no chunked bodies: an example of the
 * library, not an HTTP client (the README shows libcurl for https). Exit status: msso's for a
 * broker error (2 not logged in, 7 forbidden, …; README, "Exit status"), 22 for an HTTP answer of
 * 400 or more (as curl --fail), 69 when the server cannot be reached, 64 for bad arguments. */
#define _GNU_SOURCE
#include "msso.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_ANSWER (1 << 20)

typedef struct {
    int status;
    char nonce[600]; /* the server's DPoP-Nonce, or "" (the broker takes at most 512 bytes) */
    char *body;
} answer;

static int usage(void) {
    fprintf(stderr, "usage: msso-get [--group G] [--method M] [--data BODY] [--header 'Name: value']... http://HOST[:PORT]/PATH\n");
    return 64;
}

/* Sends the request and reads the whole answer: 0, or -1 when the server cannot be reached. */
static int exchange(const char *host, const char *port, const char *request, size_t length, answer *out) {
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *found;
    if (getaddrinfo(host, port, &hints, &found) != 0) return -1;
    int fd = -1;
    for (struct addrinfo *a = found; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(found);
    if (fd < 0) return -1;
    char *data = malloc(MAX_ANSWER + 1);
    size_t used = 0;
    ssize_t n = data && send(fd, request, length, MSG_NOSIGNAL) == (ssize_t)length ? 1 : -1;
    while (n > 0 && used < MAX_ANSWER)
        if ((n = recv(fd, data + used, MAX_ANSWER - used, 0)) > 0) used += (size_t)n;
    close(fd);
    if (n < 0 || !data) {
        free(data);
        return -1;
    }
    data[used] = '\0';
    char *end = strstr(data, "\r\n\r\n");
    if (sscanf(data, "HTTP/%*s %d", &out->status) != 1 || !end) {
        free(data);
        return -1;
    }
    *end = '\0';
    out->nonce[0] = '\0';
    for (char *line = strstr(data, "\r\n"); line; line = strstr(line + 2, "\r\n"))
        if (strncasecmp(line + 2, "DPoP-Nonce:", 11) == 0) sscanf(line + 13, " %599[^\r]", out->nonce);
    out->body = data;
    memmove(data, end + 4, used - (size_t)(end + 4 - data) + 1);
    return 0;
}

int main(int argc, char **argv) {
    const char *group = NULL, *method = "GET", *data = NULL, *url = NULL;
    msso_header headers[16];
    size_t header_count = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--group") == 0 && i + 1 < argc) group = argv[++i];
        else if (strcmp(argv[i], "--method") == 0 && i + 1 < argc) method = argv[++i];
        else if (strcmp(argv[i], "--data") == 0 && i + 1 < argc) data = argv[++i];
        else if (strcmp(argv[i], "--header") == 0 && i + 1 < argc && header_count < 16) {
            char *colon = strchr(argv[++i], ':');
            if (!colon) return usage();
            *colon = '\0';
            headers[header_count++] = (msso_header){ argv[i], colon + 1 + strspn(colon + 1, " ") };
        } else if (argv[i][0] != '-' && !url) url = argv[i];
        else return usage();
    }
    char host[256], port[8] = "80", path[2048] = "/";
    if (!url || sscanf(url, "http://%255[^:/]:%7[0-9]%2047s", host, port, path) < 2) {
        if (!url || sscanf(url, "http://%255[^:/]%2047s", host, path) < 1) return usage();
    }
    if (data && strcmp(method, "GET") == 0) method = "POST";

    msso_error err;
    msso_client *broker = msso_connect(NULL, &err);
    if (!broker) {
        fprintf(stderr, "msso-get: %s\n", err.message);
        return err.exit_status;
    }
    /* The request's own headers go to `sign` too: an RFC 9421 profile covers Content-Type. The
     * body goes as its SHA-256 only. */
    msso_request request = { .method = method, .url = url, .headers = headers, .header_count = header_count,
                             .body = data, .body_length = data ? strlen(data) : 0, .group = group };
    answer got = { 0 };
    int status = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        msso_headers signed_headers;
        if (msso_sign(broker, &request, &signed_headers, &err) != 0) {
            fprintf(stderr, "msso-get: %s\n", err.message);
            status = err.exit_status;
            break;
        }
        char *text = NULL;
        size_t length = 0;
        FILE *out = open_memstream(&text, &length);
        fprintf(out, "%s %s HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\n", method, path, host, port);
        for (size_t i = 0; i < header_count; i++) fprintf(out, "%s: %s\r\n", headers[i].name, headers[i].value);
        for (size_t i = 0; i < signed_headers.count; i++)
            fprintf(out, "%s: %s\r\n", signed_headers.items[i].name, signed_headers.items[i].value);
        fprintf(out, "Content-Length: %zu\r\n\r\n%s", data ? strlen(data) : 0, data ? data : "");
        fclose(out);
        msso_headers_free(&signed_headers); /* wiped: the request text still holds them */
        free(got.body);
        got.body = NULL;
        int sent = exchange(host, port, text, length, &got);
        explicit_bzero(text, length);
        free(text);
        if (sent != 0) {
            fprintf(stderr, "msso-get: no answer from %s:%s\n", host, port);
            status = 69;
            break;
        }
        /* RFC 9449 §9: the server wants its nonce in the proof. The broker keeps it for the next
         * requests to this origin, so this costs one 401 per origin, not one per request. */
        if (got.status == 401 && got.nonce[0] && attempt == 0) {
            request.dpop_nonce = got.nonce;
            continue;
        }
        fputs(got.body, stdout);
        status = got.status >= 400 ? 22 : 0;
        break;
    }
    free(got.body);
    msso_close(broker);
    return status;
}
