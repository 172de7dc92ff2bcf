/* libmsso's bearer `sign` as an app makes it (clients/c): msso_sign, then msso_headers_free, on one
 * connection, again and again; what it measures is the C library's whole call beside the C floor
 * (load.c against echo.c: the transport with no JSON work at all).
 *
 *   libsign SOCKET CALLS GROUP URL      p50 and p99 of sequential calls (µs)
 */
#define _GNU_SOURCE
#include "msso.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: libsign SOCKET CALLS GROUP URL\n");
        return 64;
    }
    int calls = atoi(argv[2]);
    msso_error err;
    msso_client *broker = msso_connect(argv[1], &err);
    msso_request request = { .method = "GET", .url = argv[4], .group = argv[3] };
    msso_headers headers;
    double *times = malloc(sizeof(double) * (size_t)calls);
    for (int i = -calls / 10; broker && i < calls; i++) { /* the first tenth warms up */
        double started = now_us();
        if (msso_sign(broker, &request, &headers, &err) != 0) break;
        msso_headers_free(&headers);
        if (i >= 0) times[i] = now_us() - started;
        if (i == calls - 1) {
            qsort(times, (size_t)calls, sizeof(double), compare);
            printf("%.1f %.1f\n", times[calls / 2], times[calls * 99 / 100]);
            return 0;
        }
    }
    fprintf(stderr, "libsign: %s\n", err.message);
    return 1;
}
