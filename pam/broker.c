#include "broker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MSSO_MAX_FRAME 65536 /* the protocol's cap, in both directions */

static long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Waits for `events` on the socket within what is left of the budget. */
static int wait_for(msso_broker *b, short events) {
    long left = b->deadline_ms - now_ms();
    if (left <= 0) return -1;
    struct pollfd p = { .fd = b->fd, .events = events };
    int n;
    do n = poll(&p, 1, (int)left); while (n < 0 && errno == EINTR);
    return n == 1 && (p.revents & events) ? 0 : -1;
}

static int write_all(msso_broker *b, const void *data, size_t len) {
    const char *p = data;
    while (len > 0) {
        if (wait_for(b, POLLOUT) != 0) return -1;
        ssize_t n = send(b->fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int read_all(msso_broker *b, void *data, size_t len) {
    char *p = data;
    while (len > 0) {
        if (wait_for(b, POLLIN) != 0) return -1;
        ssize_t n = recv(b->fd, p, len, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int send_message(msso_broker *b, json_object *message) {
    size_t len;
    const char *text = json_object_to_json_string_length(message, JSON_C_TO_STRING_PLAIN, &len);
    if (len > MSSO_MAX_FRAME) return -1;
    uint32_t header = htonl((uint32_t)len);
    int sent = write_all(b, &header, 4) == 0 && write_all(b, text, len) == 0 ? 0 : -1;
    /* The serialized call may hold the user's password: wipe json-c's copy of it. */
    explicit_bzero((char *)text, len);
    return sent;
}

/* The next message, or NULL (closed, oversized, malformed, or out of time). */
static json_object *receive_message(msso_broker *b) {
    uint32_t header;
    if (read_all(b, &header, 4) != 0) return NULL;
    uint32_t len = ntohl(header);
    if (len > MSSO_MAX_FRAME) return NULL; /* checked before allocating */
    char *text = malloc(len + 1);
    if (!text) return NULL;
    json_object *message = NULL;
    if (read_all(b, text, len) == 0) {
        text[len] = '\0';
        message = json_tokener_parse(text);
    }
    explicit_bzero(text, len); /* a reply may echo nothing secret, but frames are wiped anyway */
    free(text);
    return message;
}

msso_status msso_broker_open(msso_broker *b, const char *path, uid_t uid, int timeout_ms) {
    memset(b, 0, sizeof *b);
    b->fd = -1;
    b->timeout_ms = timeout_ms;
    b->deadline_ms = now_ms() + timeout_ms;

    /* The socket file must be the user's: never talk to one another user planted. */
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != uid) return MSSO_UNREACHABLE;

    struct sockaddr_un address = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof address.sun_path) return MSSO_UNREACHABLE;
    strcpy(address.sun_path, path);
    b->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (b->fd < 0) return MSSO_UNREACHABLE;
    if (connect(b->fd, (struct sockaddr *)&address, sizeof address) != 0) {
        if (errno != EINPROGRESS && errno != EAGAIN) goto fail;
        int error = 0;
        socklen_t size = sizeof error;
        if (wait_for(b, POLLOUT) != 0 || getsockopt(b->fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0 || error) goto fail;
    }
    /* And the process behind it must be the user's too (the file's owner can differ from the
     * listener's if the directory was tampered with). */
    struct ucred peer;
    socklen_t size = sizeof peer;
    if (getsockopt(b->fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 || peer.uid != uid) goto fail;

    json_object *args = json_object_new_object();
    json_object_object_add(args, "version", json_object_new_int(1));
    json_object_object_add(args, "client", json_object_new_string("pam_msso"));
    json_object *result = NULL;
    if (msso_broker_call(b, "hello", args, &result) != MSSO_OK) {
        json_object_put(result);
        goto fail;
    }
    json_object_put(result);
    return MSSO_OK;
fail:
    msso_broker_close(b);
    return MSSO_UNREACHABLE;
}

msso_status msso_broker_call(msso_broker *b, const char *method, json_object *args, json_object **result) {
    *result = NULL;
    unsigned serial = ++b->serial;
    json_object *call = json_object_new_object();
    json_object_object_add(call, "type", json_object_new_string("call"));
    json_object_object_add(call, "serial", json_object_new_int64(serial));
    json_object_object_add(call, "method", json_object_new_string(method));
    json_object_object_add(call, "args", args);
    int sent = send_message(b, call);
    json_object_put(call);
    if (sent != 0) return MSSO_UNREACHABLE;

    for (;;) { /* skip signals; the answer carries our serial */
        json_object *message = receive_message(b);
        if (!message) return MSSO_UNREACHABLE;
        json_object *type, *number;
        const char *kind = json_object_object_get_ex(message, "type", &type) ? json_object_get_string(type) : "";
        int ours = json_object_object_get_ex(message, "serial", &number) && json_object_get_int64(number) == serial;
        if (ours && strcmp(kind, "reply") == 0) {
            json_object *value;
            if (json_object_object_get_ex(message, "result", &value)) *result = json_object_get(value);
            json_object_put(message);
            return *result ? MSSO_OK : MSSO_UNREACHABLE;
        }
        if (strcmp(kind, "error") == 0 && (ours || json_object_get_int64(number) == 0)) {
            *result = message;
            return MSSO_ERROR_REPLY;
        }
        json_object_put(message);
    }
}

void msso_broker_close(msso_broker *b) {
    if (b->fd >= 0) close(b->fd);
    b->fd = -1;
}
