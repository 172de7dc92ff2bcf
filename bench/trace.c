/* Lists the functions a program runs, for the link order of mssod (bench/order.py, `make order`).
 *
 *   trace FUNCTIONS HITS -- PROGRAM ARGS...
 *
 * FUNCTIONS holds one hexadecimal address per line: the start of each function, as the executable's
 * symbol table gives it. The program is started under ptrace; before its first instruction an int3
 * is written on the first byte of every listed function, and each is put back at its first hit, so
 * a function costs one trap however often it runs. When the program exits, HITS gets the addresses
 * that were hit. Threads and forked children are followed (a child's copy of the code is mended in
 * that child); SIGTERM, SIGINT and SIGHUP are passed on to the program.
 *
 * A sampling profiler would miss what runs once (start-up, a login), which is exactly what stays
 * resident. valgrind could not run mssod when every call carried an SCM_PIDFD (it dropped it); mssod
 * now takes the pidfd once, at accept (SO_PEERPIDFD), and whether valgrind runs it is untried.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

static unsigned long *addresses; /* sorted */
static unsigned char *original, *hit;
static size_t count;
static pid_t program;

static long find(unsigned long address) {
    size_t low = 0, high = count;
    while (low < high) {
        size_t middle = (low + high) / 2;
        if (addresses[middle] < address) low = middle + 1; else high = middle;
    }
    return low < count && addresses[low] == address ? (long)low : -1;
}

static int compare(const void *a, const void *b) {
    unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;
    return x < y ? -1 : x > y;
}

static void pass_on(int signal) { kill(program, signal); }

/* Where the executable was loaded: the start of its mapping at file offset 0. */
static unsigned long load_bias(pid_t pid, const char *executable) {
    char path[64], line[PATH_MAX + 256], file[PATH_MAX];
    snprintf(path, sizeof path, "/proc/%d/maps", pid);
    FILE *maps = fopen(path, "r");
    unsigned long start, offset, bias = 0;
    while (maps && fgets(line, sizeof line, maps)) {
        if (sscanf(line, "%lx-%*x %*s %lx %*s %*s %4095s", &start, &offset, file) == 3 && offset == 0
            && strcmp(file, executable) == 0) { bias = start; break; }
    }
    if (maps) fclose(maps);
    return bias;
}

static void poke(pid_t pid, unsigned long address, unsigned char byte) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/mem", pid);
    int memory = open(path, O_RDWR);
    if (memory < 0 || pwrite(memory, &byte, 1, (off_t)address) != 1) { perror("trace: cannot write the program's code"); exit(1); }
    close(memory);
}

int main(int argc, char **argv) {
    if (argc < 5 || strcmp(argv[3], "--") != 0) { fprintf(stderr, "usage: trace FUNCTIONS HITS -- PROGRAM ARGS...\n"); return 64; }
    FILE *list = fopen(argv[1], "r");
    if (!list) { perror(argv[1]); return 1; }
    size_t capacity = 1024;
    addresses = malloc(capacity * sizeof *addresses);
    unsigned long address;
    while (fscanf(list, "%lx", &address) == 1) {
        if (count == capacity) addresses = realloc(addresses, (capacity *= 2) * sizeof *addresses);
        addresses[count++] = address;
    }
    fclose(list);
    qsort(addresses, count, sizeof *addresses, compare);
    original = malloc(count);
    hit = calloc(count, 1);
    char *executable = realpath(argv[4], NULL);
    if (!executable) { perror(argv[4]); return 1; }

    program = fork();
    if (program == 0) {
        ptrace(PTRACE_TRACEME, 0, 0, 0);
        execv(argv[4], argv + 4);
        _exit(127);
    }
    int status;
    if (waitpid(program, &status, 0) != program || !WIFSTOPPED(status)) { fprintf(stderr, "trace: the program did not start\n"); return 1; }
    unsigned long bias = load_bias(program, executable);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/mem", program);
    int memory = open(path, O_RDWR);
    const unsigned char int3 = 0xcc;
    for (size_t i = 0; i < count; i++) {
        if (pread(memory, &original[i], 1, (off_t)(bias + addresses[i])) != 1
            || pwrite(memory, &int3, 1, (off_t)(bias + addresses[i])) != 1) { perror("trace: cannot set a breakpoint"); return 1; }
    }
    close(memory);
    ptrace(PTRACE_SETOPTIONS, program, 0, PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK
                                           | PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL);
    signal(SIGTERM, pass_on);
    signal(SIGINT, pass_on);
    signal(SIGHUP, pass_on);
    ptrace(PTRACE_CONT, program, 0, 0);

    size_t hits = 0;
    for (;;) {
        pid_t thread = waitpid(-1, &status, __WALL);
        if (thread < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (WIFEXITED(status) || WIFSIGNALED(status)) {
            if (thread == program) break;
            continue;
        }
        int signal = WSTOPSIG(status), event = status >> 16;
        if (event == PTRACE_EVENT_EXEC && thread != program) { ptrace(PTRACE_DETACH, thread, 0, 0); continue; } /* another program */
        if (event != 0 || signal == SIGSTOP) { ptrace(PTRACE_CONT, thread, 0, 0); continue; } /* a new thread or child */
        if (signal == SIGTRAP) {
            struct user_regs_struct registers;
            ptrace(PTRACE_GETREGS, thread, 0, &registers);
            long i = find(registers.rip - 1 - bias);
            if (i >= 0) {
                poke(thread, registers.rip - 1, original[i]); /* idempotent: another thread may have trapped here too */
                if (!hit[i]) { hit[i] = 1; hits++; }
                registers.rip -= 1;
                ptrace(PTRACE_SETREGS, thread, 0, &registers);
                ptrace(PTRACE_CONT, thread, 0, 0);
                continue;
            }
        }
        ptrace(PTRACE_CONT, thread, 0, signal);
    }
    FILE *out = fopen(argv[2], "w");
    if (!out) { perror(argv[2]); return 1; }
    for (size_t i = 0; i < count; i++) if (hit[i]) fprintf(out, "%lx\n", addresses[i]);
    fclose(out);
    fprintf(stderr, "trace: %zu of %zu functions ran\n", hits, count);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
