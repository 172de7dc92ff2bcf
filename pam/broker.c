#include "broker.h"
#include "msso_protocol.h" /* the frame cap, the version, the method names: libmsso's (clients/c) */
#include "replies.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_PASSPIDFD /* Linux 6.5; newer than Debian 12's headers */
#define SO_PASSPIDFD 76
#endif
#ifndef SCM_PIDFD
#define SCM_PIDFD 0x04
#endif

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

/* Descriptors the broker sent along (SCM_RIGHTS) would stay open in sshd: close them. */
static void close_passed(struct cmsghdr *header) {
    size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; i++) {
        int fd;
        memcpy(&fd, CMSG_DATA(header) + i * sizeof fd, sizeof fd);
        close(fd);
    }
}

/* Notes which process wrote the bytes just received. The kernel attaches the sender's pid and uid
 * (and a pidfd) to what each process writes, and never returns two senders' bytes in one read, so
 * the password can go to the process that answered, whoever set up the listening socket (systemd,
 * with socket activation; or a process that kept a copy of the listener for itself). */
static void note_writer(msso_broker *b, struct msghdr *message) {
    pid_t pid = 0;
    int pidfd = -1;
    for (struct cmsghdr *h = CMSG_FIRSTHDR(message); h; h = CMSG_NXTHDR(message, h)) {
        if (h->cmsg_level != SOL_SOCKET) continue;
        if (h->cmsg_type == SCM_CREDENTIALS && h->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
            struct ucred sender;
            memcpy(&sender, CMSG_DATA(h), sizeof sender);
            pid = sender.uid == b->uid ? sender.pid : 0;
        } else if (h->cmsg_type == SCM_PIDFD && h->cmsg_len >= CMSG_LEN(sizeof(int))) {
            if (pidfd >= 0) close(pidfd);
            memcpy(&pidfd, CMSG_DATA(h), sizeof pidfd);
        } else if (h->cmsg_type == SCM_RIGHTS) {
            close_passed(h);
        }
    }
    if (message->msg_flags & MSG_CTRUNC) pid = 0; /* something was cut off: trust none of it */
    if (b->writer == 0 && pid > 0) {
        b->writer = pid;
        b->writer_pidfd = pidfd;
        pidfd = -1;
    } else if (pid != b->writer) {
        b->writer = -1;
    }
    if (pidfd >= 0) close(pidfd);
}

/* recv, noting the sender (see note_writer). */
static ssize_t receive_some(msso_broker *b, void *data, size_t len) {
    union {
        struct cmsghdr align;
        char buffer[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int)) + CMSG_SPACE(16 * sizeof(int))];
    } control;
    struct iovec io = { .iov_base = data, .iov_len = len };
    struct msghdr message = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = &control, .msg_controllen = sizeof control };
    ssize_t n = recvmsg(b->fd, &message, MSG_CMSG_CLOEXEC);
    if (n > 0) note_writer(b, &message);
    return n;
}

static int read_all(msso_broker *b, void *data, size_t len) {
    char *p = data;
    while (len > 0) {
        if (wait_for(b, POLLIN) != 0) return -1;
        ssize_t n = receive_some(b, p, len);
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

/* One JSON value in valid UTF-8, parsed strictly (nothing after it, no single quotes). */
static json_object *parse(const char *text, size_t len) {
    json_tokener *tokener = json_tokener_new();
    if (!tokener) return NULL;
    json_tokener_set_flags(tokener, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *value = json_tokener_parse_ex(tokener, text, (int)len);
    if (value && json_tokener_get_error(tokener) != json_tokener_success) {
        json_object_put(value);
        value = NULL;
    }
    json_tokener_free(tokener);
    return value;
}

/* The next message: MSSO_OK and *message; MSSO_UNREACHABLE when the connection closed (a
 * truncated frame included) or time ran out; MSSO_MALFORMED for an oversized frame or one that is
 * not JSON. */
static msso_status receive_message(msso_broker *b, json_object **message) {
    *message = NULL;
    uint32_t header;
    if (read_all(b, &header, 4) != 0) return MSSO_UNREACHABLE;
    uint32_t len = ntohl(header);
    if (len > MSSO_MAX_FRAME) return MSSO_MALFORMED; /* checked before allocating */
    char *text = malloc(len + 1);
    if (!text) return MSSO_UNREACHABLE;
    msso_status status = MSSO_UNREACHABLE;
    if (read_all(b, text, len) == 0) {
        text[len] = '\0';
        *message = parse(text, len);
        status = *message ? MSSO_OK : MSSO_MALFORMED;
    }
    explicit_bzero(text, len); /* a reply may echo nothing secret, but frames are wiped anyway */
    free(text);
    return status;
}

/* The type of a message from the broker, or NULL when it is not a message of the protocol. A
 * reply or an error must carry a serial (an integer from 0 to 2^32-1); a reply an object
 * `result`; an error a string `error` and a string `message` short enough to show. Other types
 * (signals) are skipped by the caller, so only their `type` is checked. */
static const char *message_type(json_object *message, int64_t *serial) {
    const char *type, *text;
    json_object *value;
    if (!json_object_is_type(message, json_type_object) || msso_get_string(message, "type", 16, &type) != 1) return NULL;
    int reply = strcmp(type, "reply") == 0, error = strcmp(type, "error") == 0;
    if (!reply && !error) return type;
    if (!json_object_object_get_ex(message, "serial", &value) || !json_object_is_type(value, json_type_int)) return NULL;
    *serial = json_object_get_int64(value); /* json-c saturates what does not fit */
    if (*serial < 0 || *serial > UINT32_MAX) return NULL;
    if (reply) return json_object_object_get_ex(message, "result", &value) && json_object_is_type(value, json_type_object) ? type : NULL;
    return msso_get_string(message, "error", 64, &text) == 1 && msso_get_string(message, "message", MSSO_MAX_MESSAGE, &text) == 1 ? type : NULL;
}

msso_status msso_broker_open(msso_broker *b, const char *path, uid_t uid, int timeout_ms) {
    memset(b, 0, sizeof *b);
    b->fd = -1;
    b->writer_pidfd = -1;
    b->uid = uid;
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
    /* Senders' credentials with every byte received (note_writer); a pidfd too where the kernel
     * has SO_PASSPIDFD (6.5), which peer.c then does without. */
    int one = 1;
    if (setsockopt(b->fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0) goto fail;
    setsockopt(b->fd, SOL_SOCKET, SO_PASSPIDFD, &one, sizeof one);
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
    json_object_object_add(args, "version", json_object_new_int(MSSO_PROTOCOL_VERSION));
    json_object_object_add(args, "client", json_object_new_string("pam_msso"));
    json_object *result = NULL;
    msso_status said = msso_broker_call(b, MSSO_METHOD_HELLO, args, &result);
    if (said != MSSO_OK) {
        json_object_put(result);
        msso_broker_close(b);
        return said == MSSO_MALFORMED ? MSSO_MALFORMED : MSSO_UNREACHABLE;
    }
    json_object_put(result);
    return MSSO_OK;
fail:
    msso_broker_close(b);
    return MSSO_UNREACHABLE;
}

msso_status msso_broker_call(msso_broker *b, const char *method, json_object *args, json_object **result) {
    *result = NULL;
    /* A serial nobody can guess: an answer must have been written after the call was sent (a
     * process that wrote answers in advance, then exec'd the genuine mssod, would otherwise pass
     * the check of the writer; pam_msso.c, broker_trusted). 0 is for errors about no call. */
    unsigned serial = 0;
    while (serial == 0)
        if (getrandom(&serial, sizeof serial, 0) != (ssize_t)sizeof serial) return MSSO_UNREACHABLE;
    b->serial = serial;
    json_object *call = json_object_new_object();
    json_object_object_add(call, "type", json_object_new_string("call"));
    json_object_object_add(call, "serial", json_object_new_int64(serial));
    json_object_object_add(call, "method", json_object_new_string(method));
    json_object_object_add(call, "args", args);
    int sent = send_message(b, call);
    json_object_put(call);
    if (sent != 0) return MSSO_UNREACHABLE;

    for (;;) { /* skip signals; the answer carries our serial */
        json_object *message = NULL;
        msso_status status = receive_message(b, &message);
        if (status != MSSO_OK) return status;
        int64_t number = -1;
        const char *type = message_type(message, &number);
        if (!type) {
            json_object_put(message);
            return MSSO_MALFORMED;
        }
        if (strcmp(type, "reply") == 0 && number == serial) {
            json_object *value = NULL;
            json_object_object_get_ex(message, "result", &value); /* there: checked by message_type */
            *result = json_object_get(value);
            json_object_put(message);
            return MSSO_OK;
        }
        if (strcmp(type, "error") == 0 && (number == serial || number == 0)) {
            *result = message;
            return MSSO_ERROR_REPLY;
        }
        json_object_put(message);
        /* An answer to a call this module never made: written in advance, or by someone else. */
        if (strcmp(type, "reply") == 0 || strcmp(type, "error") == 0) return MSSO_MALFORMED;
    }
}

void msso_broker_close(msso_broker *b) {
    if (b->fd >= 0) close(b->fd);
    if (b->writer_pidfd >= 0) close(b->writer_pidfd);
    b->fd = -1;
    b->writer_pidfd = -1;
}
