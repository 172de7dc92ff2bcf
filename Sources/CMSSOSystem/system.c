#define _GNU_SOURCE
#include "cmsso_system.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <linux/nsfs.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_PASSPIDFD
#define SO_PASSPIDFD 76
#endif
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
#ifndef SCM_PIDFD
#define SCM_PIDFD 0x04
#endif

int cmsso_set_not_dumpable(void) {
    return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

int cmsso_set_name(const char *name) {
    return prctl(PR_SET_NAME, name, 0, 0, 0);
}

int cmsso_pidfd_alive(int pidfd) {
    /* Signal 0 checks without signalling; it fails with ESRCH once the process has exited. */
    return syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0;
}

int cmsso_pidfd_open(int pid) {
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    return fd >= 0 ? fd : -errno;
}

static int fill_address(struct sockaddr_un *address, const char *path) {
    memset(address, 0, sizeof *address);
    address->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof address->sun_path) return -ENAMETOOLONG;
    strcpy(address->sun_path, path);
    return 0;
}

int cmsso_unix_listen(const char *path, int backlog) {
    struct sockaddr_un address;
    int status = fill_address(&address, path);
    if (status != 0) return status;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    if (bind(fd, (struct sockaddr *)&address, sizeof address) != 0 || listen(fd, backlog) != 0) {
        int error = errno;
        close(fd);
        return -error;
    }
    return fd;
}

int cmsso_unix_connect(const char *path, int timeout_ms) {
    struct sockaddr_un address;
    int status = fill_address(&address, path);
    if (status != 0) return status;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    struct timeval limit = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        int error = errno;
        close(fd);
        return -error;
    }
    return fd;
}

int cmsso_prepare_listener(int fd) {
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) return -errno;
    return 0;
}

int cmsso_accept(int listener) {
    int fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

int cmsso_pass_credentials(int fd) {
    int one = 1, zero = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0) return -errno;
    /* Off, whatever made the socket set (systemd's PassPidfd=): one would be made per read. */
    (void)setsockopt(fd, SOL_SOCKET, SO_PASSPIDFD, &zero, sizeof zero);
    return 0;
}

int cmsso_peer_pidfds(void) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return 0;
    int pidfd = -1;
    socklen_t size = sizeof pidfd;
    int works = getsockopt(pair[0], SOL_SOCKET, SO_PEERPIDFD, &pidfd, &size) == 0 && pidfd >= 0;
    if (pidfd >= 0) close(pidfd);
    close(pair[0]);
    close(pair[1]);
    return works;
}

int cmsso_unread_bytes(int fd) {
    int count = 0;
    return ioctl(fd, FIONREAD, &count) == 0 ? count : -errno;
}

int cmsso_process_image(int directory) {
    int fd = openat(directory, "pagemap", O_RDONLY | O_CLOEXEC | O_NOCTTY);
    return fd >= 0 ? fd : -errno;
}

int cmsso_same_image(int image) {
    char byte;
    return pread(image, &byte, 1, 0) < 0 && errno == EINVAL;
}

ssize_t cmsso_receive(int fd, void *buffer, size_t length, cmsso_credentials *from) {
    /* Room for the credentials, a pidfd and a few passed descriptors (all closed). */
    union {
        char bytes[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int)) + CMSG_SPACE(16 * sizeof(int))];
        struct cmsghdr align;
    } control;
    struct iovec vector = { .iov_base = buffer, .iov_len = length };
    struct msghdr message = { .msg_iov = &vector, .msg_iovlen = 1,
                              .msg_control = control.bytes, .msg_controllen = sizeof control.bytes };
    from->pid = 0;
    from->uid = (uint32_t)-1;
    from->gid = (uint32_t)-1;
    from->pidfd = -1;
    ssize_t count;
    do count = recvmsg(fd, &message, MSG_CMSG_CLOEXEC | MSG_DONTWAIT); while (count < 0 && errno == EINTR);
    if (count < 0) return -errno;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level != SOL_SOCKET) continue;
        if (header->cmsg_type == SCM_CREDENTIALS && header->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
            struct ucred credentials;
            memcpy(&credentials, CMSG_DATA(header), sizeof credentials);
            from->pid = credentials.pid;
            from->uid = credentials.uid;
            from->gid = credentials.gid;
        } else if (header->cmsg_type == SCM_PIDFD && header->cmsg_len >= CMSG_LEN(sizeof(int))) {
            int pidfd;
            memcpy(&pidfd, CMSG_DATA(header), sizeof pidfd);
            close(pidfd);
        } else if (header->cmsg_type == SCM_RIGHTS) {
            size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < count; i++) {
                int passed;
                memcpy(&passed, CMSG_DATA(header) + i * sizeof(int), sizeof passed);
                close(passed);
            }
        }
    }
    return count;
}

int cmsso_peer_credentials(int fd, cmsso_credentials *peer) {
    struct ucred credentials;
    socklen_t size = sizeof credentials;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0) return -errno;
    peer->pid = credentials.pid;
    peer->uid = credentials.uid;
    peer->gid = credentials.gid;
    int pidfd = -1;
    size = sizeof pidfd;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &size) != 0) pidfd = -1;
    peer->pidfd = pidfd;
    return 0;
}

ssize_t cmsso_send(int fd, const void *buffer, size_t length) {
    ssize_t count;
    do count = send(fd, buffer, length, MSG_NOSIGNAL | MSG_DONTWAIT); while (count < 0 && errno == EINTR);
    return count >= 0 ? count : -errno;
}

int cmsso_epoll_create(void) {
    int fd = epoll_create1(EPOLL_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

int cmsso_epoll_control(int epoll, int op, int fd, uint32_t events, uint64_t token) {
    struct epoll_event event = { .events = events, .data.u64 = token };
    return epoll_ctl(epoll, op, fd, &event) == 0 ? 0 : -errno;
}

int cmsso_epoll_wait(int epoll, cmsso_event *events, int capacity, int timeout_ms) {
    struct epoll_event ready[256];
    if (capacity > 256) capacity = 256;
    int count = epoll_wait(epoll, ready, capacity, timeout_ms);
    if (count < 0) return errno == EINTR ? 0 : -errno;
    for (int i = 0; i < count; i++) {
        events[i].events = ready[i].events;
        events[i].token = ready[i].data.u64;
    }
    return count;
}

int cmsso_eventfd(void) {
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

void cmsso_eventfd_signal(int fd) {
    uint64_t one = 1;
    ssize_t ignored = write(fd, &one, sizeof one);
    (void)ignored;
}

void cmsso_eventfd_drain(int fd) {
    uint64_t count;
    ssize_t ignored = read(fd, &count, sizeof count);
    (void)ignored;
}

uint64_t cmsso_monotonic_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

static int statx_path(const char *path, struct statx *result) {
    return statx(AT_FDCWD, path, AT_STATX_DONT_SYNC, STATX_BASIC_STATS, result) == 0;
}

/* statx of /proc/PID/ns/NAME (PID 0: this process) into device and inode; 1 when read. */
static int namespace_of(int pid, const char *name, uint64_t *device, uint64_t *inode) {
    char path[64];
    struct statx result;
    if (pid > 0) snprintf(path, sizeof path, "/proc/%d/ns/%s", pid, name); else snprintf(path, sizeof path, "/proc/self/ns/%s", name);
    if (!statx_path(path, &result)) return 0;
    *device = ((uint64_t)result.stx_dev_major << 32) | result.stx_dev_minor;
    *inode = result.stx_ino;
    return 1;
}

void cmsso_process_facts_of(int pid, cmsso_process_facts *facts) {
    char path[64];
    struct statx result;
    cmsso_process_executable_of(pid, facts);
    facts->pid_namespace_ok = namespace_of(pid, "pid", &facts->pid_namespace_device, &facts->pid_namespace_inode);
    facts->user_namespace_ok = namespace_of(pid, "user", &facts->user_namespace_device, &facts->user_namespace_inode);
    if (pid > 0) snprintf(path, sizeof path, "/proc/%d/ns/mnt", pid); else strcpy(path, "/proc/self/ns/mnt");
    if (statx_path(path, &result)) {
        facts->namespace_ok = 1;
        facts->namespace_device = ((uint64_t)result.stx_dev_major << 32) | result.stx_dev_minor;
        facts->namespace_inode = result.stx_ino;
    }
    if (pid > 0) snprintf(path, sizeof path, "/proc/%d/root", pid); else strcpy(path, "/proc/self/root");
    if (statx_path(path, &result)) {
        facts->root_ok = 1;
        facts->root_device = ((uint64_t)result.stx_dev_major << 32) | result.stx_dev_minor;
        facts->root_inode = result.stx_ino;
    }
}

/* Whether two namespace descriptors (or a descriptor and /proc/self/ns/NAME) are the same namespace. */
static int same_namespace(int fd, int other) {
    struct stat a, b;
    return fd >= 0 && other >= 0 && fstat(fd, &a) == 0 && fstat(other, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* The parent of a namespace (NS_GET_PARENT; NS_GET_USERNS for a pid namespace's owner), or -1. */
static int namespace_ioctl(int fd, unsigned long request) {
    return fd >= 0 ? ioctl(fd, request) : -1;
}

int cmsso_sandbox_made_from_ours(int pid) {
    char path[64];
    int fds[7] = { -1, -1, -1, -1, -1, -1, -1 };
    enum { OUR_PID, OUR_USER, PID_NS, PID_PARENT, OWNER, OWNER_PARENT, USER_NS };
    fds[OUR_PID] = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
    fds[OUR_USER] = open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC);
    snprintf(path, sizeof path, "/proc/%d/ns/pid", pid);
    fds[PID_NS] = open(path, O_RDONLY | O_CLOEXEC);
    snprintf(path, sizeof path, "/proc/%d/ns/user", pid);
    fds[USER_NS] = open(path, O_RDONLY | O_CLOEXEC);
    fds[PID_PARENT] = namespace_ioctl(fds[PID_NS], NS_GET_PARENT);
    fds[OWNER] = namespace_ioctl(fds[PID_NS], NS_GET_USERNS);
    int made = same_namespace(fds[PID_PARENT], fds[OUR_PID]);
    if (made && !same_namespace(fds[OWNER], fds[OUR_USER])) {
        fds[OWNER_PARENT] = namespace_ioctl(fds[OWNER], NS_GET_PARENT);
        made = same_namespace(fds[OWNER_PARENT], fds[OUR_USER]);
    }
    if (made && !same_namespace(fds[USER_NS], fds[OWNER])) {
        int parent = namespace_ioctl(fds[USER_NS], NS_GET_PARENT);
        made = same_namespace(parent, fds[OWNER]);
        if (parent >= 0) close(parent);
    }
    for (int i = 0; i < 7; i++) if (fds[i] >= 0) close(fds[i]);
    return made;
}

static void executable_facts(int directory, const char *path, cmsso_process_facts *facts) {
    struct statx result;
    memset(facts, 0, sizeof *facts);
    if (statx(directory, path, AT_STATX_DONT_SYNC, STATX_BASIC_STATS, &result) == 0) {
        facts->exe_ok = 1;
        facts->exe_device = ((uint64_t)result.stx_dev_major << 32) | result.stx_dev_minor;
        facts->exe_inode = result.stx_ino;
        facts->exe_ctime_sec = result.stx_ctime.tv_sec;
        facts->exe_ctime_nsec = result.stx_ctime.tv_nsec;
        facts->exe_mtime_sec = result.stx_mtime.tv_sec;
        facts->exe_mtime_nsec = result.stx_mtime.tv_nsec;
        facts->exe_size = (int64_t)result.stx_size;
    }
}

void cmsso_process_executable_of(int pid, cmsso_process_facts *facts) {
    char path[64];
    if (pid > 0) snprintf(path, sizeof path, "/proc/%d/exe", pid); else strcpy(path, "/proc/self/exe");
    executable_facts(AT_FDCWD, path, facts);
}

int cmsso_process_directory(int pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d", pid);
    return pid > 0 ? open(path, O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
}

void cmsso_process_executable_at(int directory, cmsso_process_facts *facts) {
    executable_facts(directory, "exe", facts);
}

ssize_t cmsso_read_small_file(const char *path, char *buffer, size_t capacity) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -EINVAL;
    }
    size_t used = 0;
    while (used < capacity) {
        ssize_t count = read(fd, buffer + used, capacity - used);
        if (count < 0 && errno == EINTR) continue;
        if (count <= 0) break;
        used += (size_t)count;
    }
    char extra;
    ssize_t more = used == capacity ? read(fd, &extra, 1) : 0;
    close(fd);
    return more > 0 ? -EFBIG : (ssize_t)used;
}

void cmsso_trim_memory(void) {
    malloc_trim(0);
}

int cmsso_one_heap(void) {
    return mallopt(M_ARENA_MAX, 1);
}

extern char **environ;

/* In a child between fork and exec (async-signal-safe): every handler back to its default and
 * nothing blocked, as posix_spawn would give the program it starts. */
static void child_signals_as_new(void) {
    struct sigaction standard = { .sa_handler = SIG_DFL };
    for (int sig = 1; sig < _NSIG; sig++) sigaction(sig, &standard, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

int cmsso_spawn_alone(const char *path, int *input, int *output) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0) return -errno;
    if (pipe2(out, O_CLOEXEC) != 0) { int failed = errno; close(in[0]); close(in[1]); return -failed; }
    char *argv[] = { (char *)path, NULL };
    char *envp[] = { NULL };
    pid_t parent = getpid();
    /* Forked rather than posix_spawn'd, for PR_SET_PDEATHSIG before the exec: the program dies
     * with the thread that started it (which waits for it), even stopped before its own first
     * instruction. Every signal is blocked across the fork, so no handler of ours runs in the
     * child; between fork and exec only async-signal-safe calls (_Fork: no atfork handlers). */
    sigset_t all, before;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &before);
    pid_t child = _Fork();
    if (child == 0) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != parent) _exit(127);
        /* (A pipe end already at 0 or 1, when mssod was started without them, only loses its
         * close-on-exec: dup2 onto itself would leave it set.) */
        if ((in[0] == 0 ? fcntl(0, F_SETFD, 0) : dup2(in[0], 0)) < 0) _exit(127);
        if ((out[1] == 1 ? fcntl(1, F_SETFD, 0) : dup2(out[1], 1)) < 0) _exit(127);
        int null = open("/dev/null", O_WRONLY);
        if (null < 0 || (null != 2 && dup2(null, 2) < 0)) _exit(127);
        /* No other descriptor of ours, or no helper (a kernel before 5.9, a seccomp filter). */
        if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0) _exit(127);
        child_signals_as_new(); /* last: blocked until the descriptors are set */
        execve(path, argv, envp);
        _exit(127);
    }
    int forked = child < 0 ? errno : 0;
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    close(in[0]);
    close(out[1]);
    if (child < 0) { close(in[1]); close(out[0]); return -forked; }
    *input = in[1];
    *output = out[0];
    return child;
}

int cmsso_open_in_browser(const char *opener, const char *url) {
    if (access(opener, X_OK) != 0) return -errno;
    char *argv[] = { (char *)opener, (char *)url, NULL };
    /* The exec's failure comes back through a pipe that closes on a successful exec. */
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) return -errno;
    /* Forked twice: the opener's parent exits at once and is reaped here, so the opener (and a
     * browser it becomes) is the child of init or of the session's subreaper, and no thread of
     * ours waits for it. Every signal is blocked across the forks, so no handler of ours runs in
     * a child; the opener gets every handler reset and an empty mask, as posix_spawn would give
     * it. Between fork and exec only async-signal-safe calls (_Fork, not fork: no atfork
     * handlers), for the caller may have many threads. */
    sigset_t all, before;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &before);
    pid_t child = _Fork();
    if (child == 0) {
        close(report[0]);
        pid_t opened = _Fork();
        if (opened == 0) {
            child_signals_as_new();
            int null = open("/dev/null", O_WRONLY);
            if (null >= 0) { dup2(null, 1); dup2(null, 2); if (null > 2) close(null); }
            execve(opener, argv, environ);
            int failed = errno;
            (void)!write(report[1], &failed, sizeof failed);
            _exit(127);
        }
        _exit(opened < 0 ? 1 : 0);
    }
    int forked = child < 0 ? errno : 0;
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    close(report[1]);
    if (child < 0) { close(report[0]); return -forked; }
    int status = 0;
    while (waitpid(child, &status, 0) < 0) {
        if (errno != EINTR) { int failed = errno; close(report[0]); return -failed; }
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) { close(report[0]); return -EAGAIN; }
    /* End of file: the opener runs (the pipe closed on its exec). Else exec's errno. */
    int failed = 0;
    ssize_t got;
    do { got = read(report[0], &failed, sizeof failed); } while (got < 0 && errno == EINTR);
    close(report[0]);
    return got == (ssize_t)sizeof failed ? -failed : 0;
}
