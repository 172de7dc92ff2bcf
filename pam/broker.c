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

/* Closes the call begun and sends it, then wipes it: the serialized call may hold the user's
 * password. MSSO_OK, MSSO_UNSENDABLE (nothing sent) or MSSO_UNREACHABLE. */
static msso_status send_call(msso_broker *b) {
    int ended = json_call_end(&b->call);
    msso_status status = b->serial == 0 ? MSSO_UNREACHABLE /* no random serial could be drawn */
                         : ended != 0   ? MSSO_UNSENDABLE
                         : write_all(b, b->call.json.data, b->call.json.length) == 0 ? MSSO_OK : MSSO_UNREACHABLE;
    explicit_bzero(b->call.json.data, b->call.json.length);
    return status;
}

/* Wipes and frees the frame a reply holds (a reply may echo nothing secret, but frames are wiped
 * anyway). */
static void forget_frame(msso_reply *reply) {
    if (reply->text) explicit_bzero(reply->text, reply->length);
    free(reply->text);
    reply->text = NULL;
    reply->length = 0;
}

void msso_reply_free(msso_reply *reply) {
    forget_frame(reply);
    json_doc_free(&reply->doc);
}

/* The next message, parsed into `reply` (its last message forgotten): MSSO_OK; MSSO_UNREACHABLE
 * when the connection closed (a truncated frame included), time ran out, or memory did;
 * MSSO_MALFORMED for an oversized frame or one that is not a JSON object in UTF-8 (json.h: RFC 8259
 * throughout, no NUL in a string, at most 32 levels). */
static msso_status receive_message(msso_broker *b, msso_reply *reply) {
    forget_frame(reply);
    uint32_t header;
    if (read_all(b, &header, 4) != 0) return MSSO_UNREACHABLE;
    uint32_t len = ntohl(header);
    if (len > MSSO_MAX_FRAME) return MSSO_MALFORMED; /* checked before allocating */
    if (!(reply->text = malloc(len + 1))) return MSSO_UNREACHABLE;
    reply->length = len;
    if (read_all(b, reply->text, len) != 0) return MSSO_UNREACHABLE;
    reply->text[len] = '\0';
    int parsed = json_parse(&reply->doc, reply->text, len);
    return parsed == 0 ? MSSO_OK : parsed == -2 ? MSSO_UNREACHABLE : MSSO_MALFORMED;
}

/* The type of a message from the broker (into `type`), or -1 when it is not a message of the
 * protocol. A reply or an error must carry a serial (an integer from 0 to 2^32-1); a reply an
 * object `result`; an error a string `error` and a string `message` short enough to show (copied
 * into reply->message). Other types (signals) are skipped by the caller, so only their `type` is
 * checked. No key of the message may be there twice. */
static int message_type(msso_reply *reply, char type[17], uint64_t *serial) {
    const json_doc *doc = &reply->doc;
    char name[65];
    if (msso_get_string(doc, 0, "type", 16, type) != 1) return -1;
    int is_reply = strcmp(type, "reply") == 0, is_error = strcmp(type, "error") == 0;
    if (!is_reply && !is_error) return 0;
    long at = json_get_unique(doc, 0, "serial");
    if (!json_is(doc, at, JSON_NUMBER) || json_unsigned(doc, (uint32_t)at, UINT32_MAX, serial) != 0) return -1;
    if (is_reply) {
        long result = json_get_unique(doc, 0, "result");
        if (!json_is(doc, result, JSON_OBJECT)) return -1;
        reply->result = (uint32_t)result;
        return 0;
    }
    return msso_get_string(doc, 0, "error", 64, name) == 1 &&
           msso_get_string(doc, 0, "message", MSSO_MAX_MESSAGE, reply->message) == 1 ? 0 : -1;
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

    b->out = malloc(MSSO_MAX_FRAME + 4);
    if (!b->out) goto fail;
    json_call *hello = msso_broker_begin(b, MSSO_METHOD_HELLO);
    json_call_field(hello, "version");
    json_uint(&hello->json, MSSO_PROTOCOL_VERSION);
    json_call_string(hello, "client", "pam_msso");
    msso_reply reply = { 0 };
    msso_status said = msso_broker_call(b, &reply);
    msso_reply_free(&reply);
    if (said != MSSO_OK) {
        msso_broker_close(b);
        return said == MSSO_MALFORMED ? MSSO_MALFORMED : MSSO_UNREACHABLE;
    }
    return MSSO_OK;
fail:
    msso_broker_close(b);
    return MSSO_UNREACHABLE;
}

json_call *msso_broker_begin(msso_broker *b, const char *method) {
    /* A serial nobody can guess: an answer must have been written after the call was sent (a
     * process that wrote answers in advance, then exec'd the genuine mssod, would otherwise pass
     * the check of the writer; pam_msso.c, broker_trusted). 0 is for errors about no call, and
     * here for none drawn (msso_broker_call then sends nothing). */
    unsigned serial = 0, drawn;
    while (serial == 0 && getrandom(&drawn, sizeof drawn, 0) == (ssize_t)sizeof drawn) serial = drawn;
    b->serial = serial;
    json_call_begin(&b->call, b->out, MSSO_MAX_FRAME + 4, serial, method);
    return &b->call;
}

msso_status msso_broker_call(msso_broker *b, msso_reply *reply) {
    reply->message[0] = '\0';
    msso_status sent = send_call(b);
    if (sent != MSSO_OK) return sent;

    for (;;) { /* skip signals; the answer carries our serial */
        msso_status status = receive_message(b, reply);
        if (status != MSSO_OK) return status;
        char type[17];
        uint64_t number = UINT64_MAX;
        if (message_type(reply, type, &number) != 0) return MSSO_MALFORMED;
        int is_reply = strcmp(type, "reply") == 0, is_error = strcmp(type, "error") == 0;
        if (is_reply && number == b->serial) return MSSO_OK;
        if (is_error && (number == b->serial || number == 0)) return MSSO_ERROR_REPLY;
        /* An answer to a call this module never made: written in advance, or by someone else. */
        if (is_reply || is_error) return MSSO_MALFORMED;
    }
}

void msso_broker_close(msso_broker *b) {
    if (b->out) {
        explicit_bzero(b->out, MSSO_MAX_FRAME + 4);
        free(b->out);
    }
    b->out = NULL;
    if (b->fd >= 0) close(b->fd);
    if (b->writer_pidfd >= 0) close(b->writer_pidfd);
    b->fd = -1;
    b->writer_pidfd = -1;
}
