/* The transport floor: a Unix-socket server with no broker code. For every frame it reads (4-byte
 * big-endian length, then the payload) it writes back one canned frame, the size of the real reply
 * being measured (its payload is read from a file), so that a client does the same work with it
 * as with the broker: encode, send, receive, decode.
 *
 * With --identify it also does, per frame, the kernel work by which mssod learns who sent a call
 * (docs/ARCHITECTURE.md): the connecting process's pid, pidfd, /proc directory and address space
 * taken at accept (SO_PEERCRED, SO_PEERPIDFD, the directory opened while the pidfd says it lives,
 * its `pagemap`), then per read: recvmsg carrying SCM_CREDENTIALS, its pid compared with the
 * connection's, its address space checked to be the one it had (no exec since), the executable
 * (statx of `exe` in that directory, which also fails once the process is gone). That floor
 * contains the cost of per-call identity and none of the broker.
 *
 * It serves each client on a thread of its own; with --one-thread, all of them on one thread
 * waiting in epoll, as mssod's reactor does: what one thread can answer is the ceiling of mssod's
 * throughput while it answers every call on one.
 *
 *   echo [--identify] [--one-thread] SOCKET REPLY-PAYLOAD-FILE
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

static char *reply;
static size_t reply_length;
static int identify;

/* What mssod does with each read before it looks at the bytes; returns -1 on a read that is not
 * the connection's live process's. */
static int identify_sender(int fd, int connected_pid, int directory, int image, void *buffer, size_t length) {
    union { char bytes[CMSG_SPACE(sizeof(struct ucred))]; struct cmsghdr align; } control;
    struct iovec vector = { .iov_base = buffer, .iov_len = length };
    struct msghdr message = { .msg_iov = &vector, .msg_iovlen = 1, .msg_control = control.bytes, .msg_controllen = sizeof control.bytes };
    ssize_t count = recvmsg(fd, &message, MSG_CMSG_CLOEXEC);
    if (count <= 0) return -1;
    int pid = 0;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_type == SCM_CREDENTIALS) { struct ucred c; memcpy(&c, CMSG_DATA(header), sizeof c); pid = c.pid; }
    }
    if (directory < 0 || pid != connected_pid) return -1;
    char byte; /* its address space still the one it had at accept: no exec since (see mssod) */
    if (image >= 0 && !(pread(image, &byte, 1, 0) < 0 && errno == EINVAL)) return -1;
    struct statx executable;
    return statx(directory, "exe", AT_STATX_DONT_SYNC, STATX_BASIC_STATS, &executable) == 0 ? (int)count : -1;
}

/* One client's bytes: what has arrived of its frames. */
struct peer {
    int fd;
    int pid, pidfd, directory, image; /* the connecting process (with --identify) */
    size_t held;
    char buffer[65536 + 4];
};

/* Reads as mssod does: as much as has arrived, one recvmsg (with --identify, one identity) per read,
 * then one reply per whole frame in the buffer. Returns -1 when the peer is done. */
static int answer(struct peer *peer) {
    ssize_t count = identify ? identify_sender(peer->fd, peer->pid, peer->directory, peer->image, peer->buffer + peer->held, sizeof peer->buffer - peer->held)
                             : read(peer->fd, peer->buffer + peer->held, sizeof peer->buffer - peer->held);
    if (count <= 0) return -1;
    peer->held += (size_t)count;
    size_t start = 0;
    while (peer->held - start >= 4) {
        unsigned char *header = (unsigned char *)peer->buffer + start;
        size_t length = (size_t)header[0] << 24 | (size_t)header[1] << 16 | (size_t)header[2] << 8 | header[3];
        if (length > sizeof peer->buffer - 4) return -1;
        if (peer->held - start < 4 + length) break;
        if (write(peer->fd, reply, reply_length) != (ssize_t)reply_length) return -1;
        start += 4 + length;
    }
    memmove(peer->buffer, peer->buffer + start, peer->held - start);
    peer->held -= start;
    return 0;
}

static struct peer *accept_peer(int listener) {
    int fd = accept(listener, NULL, NULL);
    if (fd < 0) return NULL;
    struct peer *peer = calloc(1, sizeof *peer);
    peer->fd = fd;
    peer->pidfd = peer->directory = peer->image = -1;
    if (identify) {
        struct ucred credentials;
        socklen_t size = sizeof credentials;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &size) == 0) peer->pid = credentials.pid;
        size = sizeof peer->pidfd;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &peer->pidfd, &size) != 0) peer->pidfd = -1;
        char path[64];
        snprintf(path, sizeof path, "/proc/%d", peer->pid);
        if (peer->pidfd >= 0 && (peer->directory = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC)) >= 0
            && syscall(SYS_pidfd_send_signal, peer->pidfd, 0, NULL, 0) != 0) {
            close(peer->directory);
            peer->directory = -1;
        }
        if (peer->directory >= 0) peer->image = openat(peer->directory, "pagemap", O_RDONLY | O_CLOEXEC);
    }
    return peer;
}

static void hang_up(struct peer *peer) {
    close(peer->fd);
    if (peer->pidfd >= 0) close(peer->pidfd);
    if (peer->directory >= 0) close(peer->directory);
    if (peer->image >= 0) close(peer->image);
    free(peer);
}

/* A thread per client, blocked in its read: the least work between a frame and its reply. */
static void *serve(void *argument) {
    struct peer *peer = argument;
    while (answer(peer) == 0) {}
    hang_up(peer);
    return NULL;
}

/* --one-thread: every client on one thread waiting in epoll, as mssod's one reactor is. */
static void serve_all(int listener) {
    int epoll = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event event = { .events = EPOLLIN, .data.ptr = NULL };
    epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &event);
    for (;;) {
        struct epoll_event ready[64];
        int count = epoll_wait(epoll, ready, 64, -1);
        for (int i = 0; i < count; i++) {
            struct peer *peer = ready[i].data.ptr;
            if (peer == NULL) {
                if ((peer = accept_peer(listener)) == NULL) continue;
                struct epoll_event readable = { .events = EPOLLIN, .data.ptr = peer };
                epoll_ctl(epoll, EPOLL_CTL_ADD, peer->fd, &readable);
            } else if (answer(peer) != 0) {
                hang_up(peer); /* closing the descriptor takes it out of the epoll set */
            }
        }
    }
}

int main(int argc, char **argv) {
    int one_thread = 0;
    for (; argc > 1 && strncmp(argv[1], "--", 2) == 0; argc--, argv++) {
        if (strcmp(argv[1], "--identify") == 0) identify = 1;
        else if (strcmp(argv[1], "--one-thread") == 0) one_thread = 1;
        else argc = 0;
    }
    if (argc != 3) { fprintf(stderr, "usage: echo [--identify] [--one-thread] SOCKET REPLY-PAYLOAD-FILE\n"); return 64; }
    FILE *file = fopen(argv[2], "rb");
    if (!file) { perror(argv[2]); return 1; }
    char body[65536];
    size_t length = fread(body, 1, sizeof body, file);
    fclose(file);
    reply_length = length + 4;
    reply = malloc(reply_length);
    reply[0] = (char)(length >> 24); reply[1] = (char)(length >> 16); reply[2] = (char)(length >> 8); reply[3] = (char)length;
    memcpy(reply + 4, body, length);

    int listener = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un address = { .sun_family = AF_UNIX };
    strncpy(address.sun_path, argv[1], sizeof address.sun_path - 1);
    unlink(argv[1]);
    if (bind(listener, (struct sockaddr *)&address, sizeof address) != 0 || listen(listener, 1024) != 0) { perror("listen"); return 1; }
    int one = 1;
    if (identify && setsockopt(listener, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0) { perror("SO_PASSCRED"); return 1; }
    if (one_thread) serve_all(listener);
    for (;;) {
        struct peer *peer = accept_peer(listener);
        if (peer == NULL) continue;
        pthread_t thread;
        pthread_create(&thread, NULL, serve, peer);
        pthread_detach(thread);
    }
}
