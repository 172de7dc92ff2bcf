// Why this shim exists: the broker judges every call by the process that sent it, which takes
// recvmsg(2) with SCM_CREDENTIALS and SCM_PIDFD control messages, and pidfds, statx and epoll;
// none of these is reachable from Swift as it stands (variadic calls, CMSG_* macros, packed
// structs, constants newer than this glibc's headers). Each function is a thin wrapper that
// returns -errno on failure.
#ifndef CMSSO_SYSTEM_H
#define CMSSO_SYSTEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/// Marks the process not dumpable: no core dump, and no ptrace or /proc/PID/mem access by other
/// processes of the same user. Returns 0 on success.
int cmsso_set_not_dumpable(void);
/// Sets the calling thread's name (the process's, on the main thread): what ps, top and pgrep show.
int cmsso_set_name(const char *name);

/// 1 while the process behind `pidfd` is alive (so its pid has not been reused), else 0.
int cmsso_pidfd_alive(int pidfd);

/// pidfd_open(2): a pidfd for a process (-errno on failure).
int cmsso_pidfd_open(int pid);

// MARK: Unix sockets

/// A non-blocking listening socket bound at `path` (the caller chmods it).
int cmsso_unix_listen(const char *path, int backlog);

/// A blocking client connection to `path`, with send and receive timeouts of `timeout_ms`.
int cmsso_unix_connect(const char *path, int timeout_ms);

/// Makes a descriptor non-blocking and close-on-exec (a listening socket systemd passed).
int cmsso_prepare_listener(int fd);

/// accept4(2), non-blocking and close-on-exec.
int cmsso_accept(int listener);

/// Asks the kernel to attach the sender's credentials (SO_PASSCRED) to every read, and no pidfd
/// (SO_PASSPIDFD off: a connection is spoken for by the process that opened it, whose pidfd the
/// connection holds; see docs/ARCHITECTURE.md). 0, or -errno.
int cmsso_pass_credentials(int fd);

/// Whether the kernel gives a connection's peer as a pidfd (SO_PEERPIDFD, Linux >= 6.5): 1 or 0.
int cmsso_peer_pidfds(void);

/// Who sent some bytes, as the kernel attached it to them (`pidfd` -1), or who connected
/// (`cmsso_peer_credentials`: `pidfd` -1 where the kernel has no SO_PEERPIDFD).
typedef struct {
    int32_t pid;
    uint32_t uid;
    uint32_t gid;
    int32_t pidfd;
} cmsso_credentials;

/// Reads what one sender wrote (the kernel never merges two writers' bytes into one read once
/// SO_PASSCRED is on) and who that was. Descriptors passed with SCM_RIGHTS are closed at once:
/// nobody may make the daemon hold descriptors (a pidfd too, had one been attached). 0 at end of
/// stream, -errno on failure.
ssize_t cmsso_receive(int fd, void *buffer, size_t length, cmsso_credentials *from);

/// Bytes sent on a connection and not yet read (FIONREAD), or -errno.
int cmsso_unread_bytes(int fd);

/// The address space a process runs in now, as a descriptor (its `pagemap`, opened through its
/// /proc `directory`; the kernel lets the process's own user open it while the process is
/// dumpable), or -errno. An exec gives the process a new one and ends this one, as its exit does.
int cmsso_process_image(int directory);

/// 1 while the address space `image` names is in use (the process has not exec'd or ended since
/// the descriptor was opened), else 0. A one-byte read: the kernel refuses it as misaligned
/// (EINVAL) only after finding the address space in use, and reads nothing from one that ended,
/// without walking or locking the process's memory, which a caller could stall.
int cmsso_same_image(int image);

/// The peer as of connect: SO_PEERCRED and, where the kernel has it, SO_PEERPIDFD.
int cmsso_peer_credentials(int fd, cmsso_credentials *peer);

/// send(2) that never raises SIGPIPE and never blocks.
ssize_t cmsso_send(int fd, const void *buffer, size_t length);

// MARK: epoll and wake-ups

typedef struct {
    uint32_t events;
    uint64_t token;
} cmsso_event;

#define CMSSO_READABLE 0x001u   /* EPOLLIN */
#define CMSSO_WRITABLE 0x004u   /* EPOLLOUT */
#define CMSSO_ERROR    0x008u   /* EPOLLERR */
#define CMSSO_HANGUP   0x010u   /* EPOLLHUP */

int cmsso_epoll_create(void);
/// op: 1 add, 2 delete, 3 modify (EPOLL_CTL_*).
int cmsso_epoll_control(int epoll, int op, int fd, uint32_t events, uint64_t token);
int cmsso_epoll_wait(int epoll, cmsso_event *events, int capacity, int timeout_ms);

int cmsso_eventfd(void);
void cmsso_eventfd_signal(int fd);
void cmsso_eventfd_drain(int fd);

/// CLOCK_MONOTONIC in nanoseconds.
uint64_t cmsso_monotonic_ns(void);

// MARK: Waiting on three clocks (clocks.c)

/// CLOCK_BOOTTIME in nanoseconds: elapsed time, a suspend included, never set.
uint64_t cmsso_boottime_ns(void);
/// CLOCK_REALTIME (the wall clock, which can be set) in nanoseconds since 1970; 0 before it.
uint64_t cmsso_realtime_ns(void);

/// What the pool's timers thread waits on: `wake`, an eventfd written when its timers change, and
/// a timerfd for each clock a deadline may be on besides CLOCK_MONOTONIC (poll's own timeout).
typedef struct {
    int wake;
    int wall;
    int elapsed;
} cmsso_clock_waiter;

/// Opens the waiter's descriptors (non-blocking, close-on-exec): 0, or -errno with none left open.
int cmsso_clock_waiter_open(cmsso_clock_waiter *waiter);
/// Ends a wait in progress (or the next one, at once).
void cmsso_clock_waiter_wake(const cmsso_clock_waiter *waiter);
/// Waits until the waiter is woken, CLOCK_MONOTONIC reads `monotonic`, CLOCK_BOOTTIME reads
/// `elapsed`, or CLOCK_REALTIME reads `wall` or is set (by hand, by NTP stepping it, at a resume
/// from suspend), in nanoseconds, UINT64_MAX for no deadline on that clock. It may return for
/// nothing: the caller reads the clocks again. 0, or -errno when a timer could not be armed.
int cmsso_clock_waiter_wait(const cmsso_clock_waiter *waiter, uint64_t monotonic, uint64_t elapsed, uint64_t wall);

// MARK: What the kernel says about a process

/// Facts about a process that change when it execs or moves to another namespace, read without
/// touching the files' own file systems (statx AT_STATX_DONT_SYNC: a FUSE file system of the
/// caller's cannot stall the daemon). Each `*_ok` is 0 when that fact could not be read.
typedef struct {
    int exe_ok;
    uint64_t exe_device, exe_inode;
    int64_t exe_ctime_sec, exe_ctime_nsec;
    int64_t exe_size;
    int64_t exe_mtime_sec, exe_mtime_nsec;
    int namespace_ok;
    uint64_t namespace_device, namespace_inode;
    int root_ok;
    uint64_t root_device, root_inode;
    /* The pid and user namespaces: a process's pid namespace never changes; who may name it in
     * SCM_CREDENTIALS depends on it (see Callers.swift). */
    int pid_namespace_ok;
    uint64_t pid_namespace_device, pid_namespace_inode;
    int user_namespace_ok;
    uint64_t user_namespace_device, user_namespace_inode;
} cmsso_process_facts;

/// `pid` 0 means this process.
void cmsso_process_facts_of(int pid, cmsso_process_facts *facts);
/// 1 when `pid`'s namespaces are a sandbox made directly from this process's, as bubblewrap makes
/// one for Flatpak: its pid namespace a child of ours, owned by our user namespace or a child of
/// it, and its user namespace that owner or a child of it (`--disable-userns` nests one more).
/// 0 otherwise: among others, namespaces nested inside ones another process of the user made.
int cmsso_sandbox_made_from_ours(int pid);
/* The executable's part of the facts only (one statx): enough, per call, for a process already known. */
void cmsso_process_executable_of(int pid, cmsso_process_facts *facts);
/* /proc/PID opened (O_PATH), or -1. Once its process is gone (a zombie, or reaped, its pid
 * perhaps another process's), nothing is found through it: its `exe` names no file. */
int cmsso_process_directory(int pid);
/* The same as cmsso_process_executable_of, through a directory from cmsso_process_directory: the
 * path walk to /proc/PID saved, and `exe_ok` 0 once that process is gone. */
void cmsso_process_executable_at(int directory, cmsso_process_facts *facts);

/// Reads at most `capacity` bytes of a regular file, never following a final symbolic link and
/// never waiting on a FIFO. Returns the bytes read (the file may be longer) or -errno; -EFBIG
/// when the file holds more than `capacity` bytes.
ssize_t cmsso_read_small_file(const char *path, char *buffer, size_t capacity);

/// The program that opens an address in the desktop's browser.
#define CMSSO_BROWSER_OPENER "/usr/bin/xdg-open"

/// Opens `url` with `opener` (CMSSO_BROWSER_OPENER; the tests give another), its output discarded,
/// detached: it is not the caller's child, nothing is left to reap. Returns 0 once it is started,
/// else -errno. One definition for the login command and the notifier.
int cmsso_open_in_browser(const char *opener, const char *url);

/// Starts `path` with no argument but its name, an empty environment, a pipe as its standard
/// input (our end in *input) and one as its standard output (ours in *output, both close-on-exec),
/// /dev/null as its standard error, no other descriptor of ours, every signal at its default and
/// none blocked, and SIGKILL when the calling thread ends (PR_SET_PDEATHSIG, set before the
/// exec). Exit status 127: it could not be started. Returns its pid, or -errno (then no
/// descriptor is left open).
int cmsso_spawn_alone(const char *path, int *input, int *output);

/// malloc_trim(0): gives freed heap memory back to the system after a flood.
void cmsso_trim_memory(void);

/// mallopt(M_ARENA_MAX, 1): every thread allocates from the one heap (returns 1 on success).
int cmsso_one_heap(void);

// MARK: Loopback TCP

/// The uid owning the client end of a TCP connection accepted on this machine's loopback: the
/// socket bound at `peer_address`:`peer_port` connected to `local_address`:`local_port`
/// (addresses and ports in host byte order). Why: the browser login's redirect listener on
/// 127.0.0.1 is reachable by every user of the machine, and TCP says nothing of the peer; the
/// kernel's socket table does. Asked with one exact sock_diag lookup (NETLINK_INET_DIAG), else
/// by reading /proc/net/tcp's uid column. Returns 0 and sets `uid`; -ENOENT when no such open
/// socket exists (the peer is gone, or it is a closing one whose owner the kernel forgot);
/// another -errno when neither way could be used.
int cmsso_loopback_peer_uid(uint32_t peer_address, uint16_t peer_port, uint32_t local_address, uint16_t local_port,
                            uint32_t *uid);


// MARK: The kernel's key retention service (keyrings(7))

/// The keyring msso keeps its items in when there is no Secret Service: the user's persistent
/// keyring (it outlives the user's last process for /proc/sys/kernel/keys/persistent_keyring_expiry
/// seconds after its last use, never a reboot), else, in a kernel without persistent keyrings, the
/// user keyring (it lives while the user has processes). Either is linked into this process's
/// keyring, which makes its items ours to read (the kernel lets a process of the same uid that
/// does not hold the keyring see an item's name, not its content). Asked again on every use: that
/// also restarts the persistent keyring's expiry. Returns its serial, or -errno; sets `persistent`
/// either way (0 only in a kernel without persistent keyrings).
int32_t cmsso_keys_home(int *persistent);

/// The "user" key named `description` in `keyring` (or a keyring linked in it): its serial, 0
/// when there is none, or -errno.
int32_t cmsso_keys_find(int32_t keyring, const char *description);

/// Reads a key's payload: its length (which may exceed `capacity`: call again with more room),
/// or -errno.
long cmsso_keys_read(int32_t key, char *buffer, size_t capacity);

/// Adds the "user" key `description` to `keyring`, or replaces the payload of the one there (in
/// one step: a reader sees the old payload or the new). Its serial, or -errno (-EDQUOT: the
/// user's key quota, /proc/sys/kernel/keys/maxbytes and maxkeys, is full).
int32_t cmsso_keys_write(int32_t keyring, const char *description, const void *payload, size_t length);

/// Removes a key from `keyring` and invalidates it (its payload is gone at once, wherever else
/// it was linked). 0 or -errno.
int cmsso_keys_delete(int32_t keyring, int32_t key);

/// The serials of the keys linked in `keyring`, at most `capacity`: how many it holds (more than
/// `capacity` when they did not all fit), or -errno.
long cmsso_keys_list(int32_t keyring, int32_t *serials, size_t capacity);

/// A key's "type;uid;gid;perm;description", NUL-terminated, in `buffer`: its length with the
/// NUL, or -errno.
long cmsso_keys_describe(int32_t key, char *buffer, size_t capacity);

#endif
