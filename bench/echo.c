/* The transport floor: a Unix-socket server with no broker code. For every frame it reads (4-byte
 * big-endian length, then the payload) it writes back one canned frame, the size of the real reply
 * being measured (its payload is read from a file), so that a client does the same work with it
 * as with the broker: encode, send, receive, decode.
 *
 *   echo SOCKET REPLY-PAYLOAD-FILE
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static char *reply;
static size_t reply_length;

static int read_all(int fd, void *buffer, size_t length) {
    char *p = buffer;
    while (length > 0) {
        ssize_t n = read(fd, p, length);
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
    if (argc != 3) { fprintf(stderr, "usage: echo SOCKET REPLY-PAYLOAD-FILE\n"); return 64; }
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
    for (;;) {
        int fd = accept(listener, NULL, NULL);
        if (fd < 0) continue;
        pthread_t thread;
        pthread_create(&thread, NULL, serve, (void *)(long)fd);
        pthread_detach(thread);
    }
}
