/* Whole-process cost of a command: spawns it N times (standard input and output on /dev/null, or
 * standard input from a file), and prints the p50 wall time in ms and the peak RSS in KB of the
 * runs, as the kernel accounts them (wait4's ru_maxrss).
 *
 *   spawn RUNS [--stdin FILE] COMMAND [ARG...]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: spawn RUNS [--stdin FILE] COMMAND [ARG...]\n"); return 64; }
    int runs = atoi(argv[1]), first = 2;
    const char *input = "/dev/null";
    if (strcmp(argv[2], "--stdin") == 0) { input = argv[3]; first = 4; }
    double *times = malloc(sizeof(double) * (size_t)runs);
    long peak = 0;
    for (int i = 0; i < runs; i++) {
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, 0, input, O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
        struct timespec started, ended;
        clock_gettime(CLOCK_MONOTONIC, &started);
        pid_t pid;
        if (posix_spawnp(&pid, argv[first], &actions, NULL, argv + first, environ) != 0) { perror(argv[first]); return 1; }
        int status;
        struct rusage usage;
        wait4(pid, &status, 0, &usage);
        clock_gettime(CLOCK_MONOTONIC, &ended);
        posix_spawn_file_actions_destroy(&actions);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) { fprintf(stderr, "spawn: %s failed (status %d)\n", argv[first], status); return 1; }
        times[i] = (ended.tv_sec - started.tv_sec) * 1e3 + (ended.tv_nsec - started.tv_nsec) / 1e6;
        if (usage.ru_maxrss > peak) peak = usage.ru_maxrss;
    }
    qsort(times, (size_t)runs, sizeof(double), compare);
    printf("%.3f %ld\n", times[runs / 2], peak);
    return 0;
}
