/* A client with no JSON work of its own: it sends one pre-encoded call frame again and again and
 * reads each answer frame whole, so what it measures is the transport plus the server's own cost.
 *
 *   load latency  SOCKET CALLS CALL-FRAME-FILE            p50 and p99 of sequential calls (µs)
 *   load throughput SOCKET CLIENTS SECONDS CALL-FRAME-FILE  calls a second, one connection per client
 *   load hold     SOCKET CONNECTIONS                      open that many greeted connections, wait on stdin
 *
 * Each connection first says hello (the broker requires it; the echo server answers anything).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static const char *path;
static char call[65536 + 4];
static size_t call_length;
static atomic_long completed;
static atomic_int stop;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

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

/* One round trip: the call out, one whole frame back (signals are not expected here). */
static int round_trip(int fd, const char *frame, size_t length) {
    static __thread char answer[65536];
    unsigned char header[4];
    if (write(fd, frame, length) != (ssize_t)length || read_all(fd, header, 4) != 0) return -1;
    size_t size = (size_t)header[0] << 24 | (size_t)header[1] << 16 | (size_t)header[2] << 8 | header[3];
    return size <= sizeof answer ? read_all(fd, answer, size) : -1;
}

static int connect_greeted(void) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un address = { .sun_family = AF_UNIX };
    strncpy(address.sun_path, path, sizeof address.sun_path - 1);
    if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) { close(fd); return -1; }
    static const char hello[] = "{\"type\":\"call\",\"serial\":1,\"method\":\"hello\",\"args\":{\"version\":1,\"client\":\"bench\"}}";
    char frame[256];
    size_t length = sizeof hello - 1;
    frame[0] = 0; frame[1] = 0; frame[2] = (char)(length >> 8); frame[3] = (char)length;
    memcpy(frame + 4, hello, length);
    if (round_trip(fd, frame, length + 4) != 0) { close(fd); return -1; }
    return fd;
}

static void load_call(const char *file) {
    FILE *f = fopen(file, "rb");
    if (!f) { perror(file); exit(1); }
    call_length = fread(call, 1, sizeof call, f);
    fclose(f);
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void *worker(void *unused) {
    (void)unused;
    int fd = connect_greeted();
    if (fd < 0) { fprintf(stderr, "load: cannot connect to %s\n", path); exit(1); }
    while (!atomic_load(&stop)) {
        if (round_trip(fd, call, call_length) != 0) { fprintf(stderr, "load: connection lost\n"); exit(1); }
        atomic_fetch_add(&completed, 1);
    }
    close(fd);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: see the comment in bench/load.c\n"); return 64; }
    path = argv[2];
    if (strcmp(argv[1], "latency") == 0 && argc == 5) {
        int calls = atoi(argv[3]);
        load_call(argv[4]);
        int fd = connect_greeted();
        if (fd < 0) { fprintf(stderr, "load: cannot connect\n"); return 1; }
        for (int i = 0; i < calls / 10; i++) round_trip(fd, call, call_length); /* warm up */
        double *times = malloc(sizeof(double) * (size_t)calls);
        for (int i = 0; i < calls; i++) {
            double started = now_us();
            if (round_trip(fd, call, call_length) != 0) { fprintf(stderr, "load: connection lost\n"); return 1; }
            times[i] = now_us() - started;
        }
        qsort(times, (size_t)calls, sizeof(double), compare);
        printf("%.1f %.1f\n", times[calls / 2], times[calls * 99 / 100]);
    } else if (strcmp(argv[1], "throughput") == 0 && argc == 6) {
        int clients = atoi(argv[3]);
        double seconds = atof(argv[4]);
        load_call(argv[5]);
        pthread_t threads[256];
        for (int i = 0; i < clients && i < 256; i++) pthread_create(&threads[i], NULL, worker, NULL);
        usleep(200000);
        long before = atomic_load(&completed);
        double started = now_us();
        usleep((useconds_t)(seconds * 1e6));
        long done = atomic_load(&completed) - before;
        double took = (now_us() - started) / 1e6;
        atomic_store(&stop, 1);
        for (int i = 0; i < clients && i < 256; i++) pthread_join(threads[i], NULL);
        printf("%.0f\n", done / took);
    } else if (strcmp(argv[1], "hold") == 0) {
        int connections = atoi(argv[3]);
        for (int i = 0; i < connections; i++) {
            if (connect_greeted() < 0) { fprintf(stderr, "load: connection %d refused\n", i); return 1; }
        }
        printf("%d\n", connections);
        fflush(stdout);
        char byte;
        while (read(0, &byte, 1) > 0) {}
    } else {
        fprintf(stderr, "usage: see the comment in bench/load.c\n");
        return 64;
    }
    return 0;
}
