#include "peer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

__attribute__((format(printf, 3, 4))) static int fail(char *why, size_t size, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(why, size, format, args);
    va_end(args);
    return -1;
}

/* Whether the process still runs: then every /proc/PID read above was about it, not about a
 * process that took its pid after it exited. */
static int still_alive(int pidfd) {
    return pidfd < 0 || syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0;
}

/* Whether only root can change what is at `path`: it belongs to root and is not writable by
 * group or others, unless it is a sticky directory (such as /tmp: there only an entry's owner may
 * replace the entry). */
static int root_owned(const char *path, int directory) {
    struct stat st;
    if (lstat(path, &st) != 0 || st.st_uid != 0) return 0;
    return !(st.st_mode & (S_IWGRP | S_IWOTH)) || (directory && S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX));
}

/* Only root can change the file at `path`: the file and every directory above it are root's
 * alone. The path must be canonical (absolute, no symbolic link, no "." or ".."), so that what is
 * checked is what stat() reaches. */
static int root_only(const char *path) {
    char resolved[PATH_MAX], prefix[PATH_MAX];
    if (!realpath(path, resolved) || strcmp(resolved, path) != 0 || !root_owned("/", 1)) return -1;
    size_t length = strlen(path);
    for (size_t end = 1; end < length; end++) {
        if (path[end] != '/') continue;
        memcpy(prefix, path, end);
        prefix[end] = '\0';
        if (!root_owned(prefix, 1)) return -1;
    }
    return root_owned(path, 0) ? 0 : -1;
}

/* Whether two paths reach the same file (magic /proc links included). */
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static int proc_path(char *out, size_t size, pid_t pid, const char *entry) {
    return snprintf(out, size, "/proc/%d/%s", (int)pid, entry) < (int)size ? 0 : -1;
}

/* Whether a file in /proc/PID is the same as in /proc/self: the executable, a namespace, the root
 * directory. */
static int same_as_mine(pid_t pid, const char *entry) {
    char theirs[64], mine[64];
    return proc_path(theirs, sizeof theirs, pid, entry) == 0 && snprintf(mine, sizeof mine, "/proc/self/%s", entry) > 0 &&
           same_file(theirs, mine);
}

/* Whether one environment entry could have loaded code into mssod at start: the dynamic loader's
 * LD_*, iconv's GCONV_PATH, GIO's module paths, or a Swift backtracer setting other than the one
 * mssod sets itself (the backtracer can be told to run a program). `entry` may be cut short at
 * `size` bytes (`cut`). */
static int loads_code(const char *entry, int cut) {
    static const char *const names[] = { "GCONV_PATH=", "GIO_EXTRA_MODULES=", "GIO_MODULE_DIR=" };
    if (strncmp(entry, "LD_", 3) == 0) return 1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strncmp(entry, names[i], strlen(names[i])) == 0) return 1;
    return strncmp(entry, "SWIFT_BACKTRACE=", 16) == 0 && (cut || strcmp(entry, "SWIFT_BACKTRACE=enable=no") != 0);
}

/* The start of one environment entry, read byte by byte: only the first bytes of an entry matter,
 * and an environment can be megabytes long. */
typedef struct {
    char entry[64];
    size_t used;
    int cut; /* the entry was longer than what was kept */
} entry_reader;

/* Takes one byte; 1 when it ended an entry that loads code (which then stays in the reader). */
static int feed(entry_reader *r, char byte) {
    if (byte != '\0') {
        if (r->used + 1 < sizeof r->entry) r->entry[r->used++] = byte;
        else r->cut = 1;
        return 0;
    }
    r->entry[r->used] = '\0';
    if (loads_code(r->entry, r->cut)) return 1;
    r->used = 0, r->cut = 0;
    return 0;
}

/* The first entry of /proc/PID/environ that loads code, into `found` (its name only); 1 when
 * there is one, 0 when none, -1 when the file cannot be read. */
static int environment_loading_code(pid_t pid, char *found, size_t size) {
    char path[64], buffer[4096];
    entry_reader reader = { .used = 0 };
    int result = 0;
    if (proc_path(path, sizeof path, pid, "environ") != 0) return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    while (result == 0) {
        ssize_t n = read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) result = -1;
        else if (n == 0) { /* the end: a last entry without its NUL counts too */
            result = reader.used > 0 && feed(&reader, '\0');
            break;
        }
        for (ssize_t i = 0; i < n && result == 0; i++) result = feed(&reader, buffer[i]);
    }
    close(fd);
    if (result == 1) snprintf(found, size, "%.*s", (int)strcspn(reader.entry, "="), reader.entry);
    return result;
}

/* The TracerPid of /proc/PID/status: 0 when no debugger is attached, -1 when unreadable. */
static long tracer_of(pid_t pid) {
    char path[64], line[256];
    long tracer = -1;
    if (proc_path(path, sizeof path, pid, "status") != 0) return -1;
    FILE *status = fopen(path, "re");
    if (!status) return -1;
    while (fgets(line, sizeof line, status))
        if (strncmp(line, "TracerPid:", 10) == 0) tracer = strtol(line + 10, NULL, 10);
    fclose(status);
    return tracer;
}

/* The checks themselves, on a pinned process; the caller checks it is still alive after. */
static int check_process(pid_t pid, const char *mssod, char *why, size_t size) {
    char exe[64], name[64];
    if (access(mssod, F_OK) != 0) return fail(why, size, "there is no %s", mssod);
    if (root_only(mssod) != 0)
        return fail(why, size, "%s is not an absolute path (without symbolic links) to a file only root can change", mssod);
    struct stat st;
    if (proc_path(exe, sizeof exe, pid, "exe") != 0 || stat(exe, &st) != 0) /* not root's to read, or gone */
        return fail(why, size, "the broker's process cannot be examined (that takes root)");
    if (!same_file(exe, mssod)) return fail(why, size, "the program behind the broker's socket is not %s", mssod);
    if (!same_as_mine(pid, "ns/mnt") || !same_as_mine(pid, "root"))
        return fail(why, size, "the broker runs in a mount namespace or root directory of its own");
    /* The pid itself is only as good as the pid namespace it lives in. The kernel lets a sender
     * name any process of its own pid namespace (or below) in SCM_CREDENTIALS when it holds
     * CAP_SYS_ADMIN over the user namespace owning that pid namespace, and derives SCM_PIDFD from
     * the pid named: any user gets that with `unshare -U -r -p -f`, runs the real mssod as its
     * child and names it. A process of the module's own pid namespace cannot be named so: that
     * takes CAP_SYS_ADMIN over the namespace's owner, which for the host's pid namespace is the
     * initial user namespace (root), and a forger in a namespace below sees no process above it. */
    if (!same_as_mine(pid, "ns/pid")) return fail(why, size, "the broker runs in a PID namespace of its own");
    /* And in a user namespace the user made, the user holds every capability over mssod, which is
     * then no longer protected by being non-dumpable: it can be traced (and its memory read) as
     * soon as this check is over. */
    if (!same_as_mine(pid, "ns/user")) return fail(why, size, "the broker runs in a user namespace of its own");
    int loaded = environment_loading_code(pid, name, sizeof name);
    if (loaded != 0)
        return loaded > 0 ? fail(why, size, "the broker was started with %s set", name)
                          : fail(why, size, "the broker's environment cannot be read");
    long tracer = tracer_of(pid);
    if (tracer != 0)
        return tracer > 0 ? fail(why, size, "a debugger (pid %ld) is attached to the broker", tracer)
                          : fail(why, size, "the broker's status cannot be read");
    return 0;
}

int msso_verify_peer(pid_t pid, int pidfd, const char *mssod, char *why, size_t size) {
    if (pid < 0) return fail(why, size, "the broker's answers came from more than one process, or from another user's");
    if (pid == 0) return fail(why, size, "the broker's process cannot be identified");
    /* Without SCM_PIDFD (before Linux 6.5) the pid alone came with the answers: pinned from now on
     * only, so a broker that exited and whose pid was reused in between would be mistaken for the
     * new process. */
    int opened = pidfd < 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
    int verified = check_process(pid, mssod, why, size);
    if (verified == 0 && !still_alive(pidfd >= 0 ? pidfd : opened))
        verified = fail(why, size, "the broker's process exited during the check");
    if (opened >= 0) close(opened);
    return verified;
}
