/* The transport floor: a Unix-socket server with no broker code. For every frame it reads (4-byte
 * big-endian length, then the payload) it writes back one canned frame, the size of the real reply
 * being measured (its payload is read from a file), so that a client does the same work with it
 * as with the broker: encode, send, receive, decode.
 *
 * With --identify it also does, per frame, the kernel work by which mssod learns who sent a call
 * (docs/SECURITY.md): the frame read with recvmsg carrying SCM_CREDENTIALS and SCM_PIDFD, the
 * pidfd's inode (fstat), the sender's executable (statx of /proc/PID/exe), the pidfd checked
 * alive, and closed. That floor contains the cost of per-call identity and none of the broker.
 *
 *   echo [--identify] SOCKET REPLY-PAYLOAD-FILE
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef SO_PASSPIDFD
#define SO_PASSPIDFD 76
#endif
#ifndef SCM_PIDFD
#define SCM_PIDFD 0x04
#endif

static char *reply;
static size_t reply_length;
static int identify;

/* What mssod does with each read before it looks at the bytes; returns -1 on a read without a
 * live sender. */
static int identify_sender(int fd, void *buffer, size_t length) {
    union { char bytes[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } control;
    struct iovec vector = { .iov_base = buffer, .iov_len = length };
    struct msghdr message = { .msg_iov = &vector, .msg_iovlen = 1, .msg_control = control.bytes, .msg_controllen = sizeof control.bytes };
    ssize_t count = recvmsg(fd, &message, MSG_CMSG_CLOEXEC);
    if (count <= 0) return -1;
    int pid = 0, pidfd = -1;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_type == SCM_CREDENTIALS) { struct ucred c; memcpy(&c, CMSG_DATA(header), sizeof c); pid = c.pid; }
        if (header->cmsg_type == SCM_PIDFD) memcpy(&pidfd, CMSG_DATA(header), sizeof pidfd);
    }
    if (pidfd < 0) return -1;
    struct stat process;
    struct statx executable;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/exe", pid);
    int alive = fstat(pidfd, &process) == 0
        && statx(AT_FDCWD, path, AT_STATX_DONT_SYNC, STATX_BASIC_STATS, &executable) == 0
        && syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0;
    close(pidfd);
    return alive ? (int)count : -1;
}

static int read_all(int fd, void *buffer, size_t length) {
    char *p = buffer;
    while (length > 0) {
        ssize_t n = identify ? identify_sender(fd, p, length) : read(fd, p, length);
        if (n <= 0) return -1;
        p += n;
        length -= (size_t)n;
    }
    return 0;
}

static void *serve(void *argument) {
    int fd = (int)(long)argument;
    static __thread char payload[65536];
    unsigned char header[4];
    while (read_all(fd, header, 4) == 0) {
        size_t length = (size_t)header[0] << 24 | (size_t)header[1] << 16 | (size_t)header[2] << 8 | header[3];
        if (length > sizeof payload || read_all(fd, payload, length) != 0) break;
        if (write(fd, reply, reply_length) != (ssize_t)reply_length) break;
    }
    close(fd);
    return NULL;
}

int main(int argc, char **argv) {
    identify = argc == 4 && strcmp(argv[1], "--identify") == 0;
    argv += identify;
    argc -= identify;
    if (argc != 3) { fprintf(stderr, "usage: echo [--identify] SOCKET REPLY-PAYLOAD-FILE\n"); return 64; }
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
    if (identify && (setsockopt(listener, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0
                     || setsockopt(listener, SOL_SOCKET, SO_PASSPIDFD, &one, sizeof one) != 0)) { perror("SO_PASSPIDFD"); return 1; }
    for (;;) {
        int fd = accept(listener, NULL, NULL);
        if (fd < 0) continue;
        pthread_t thread;
        pthread_create(&thread, NULL, serve, (void *)(long)fd);
        pthread_detach(thread);
    }
}
