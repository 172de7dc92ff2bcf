// Why this shim exists: prctl(2) and syscall(2) are variadic, and variadic C functions cannot be
// called from Swift; SO_PEERPIDFD is newer than this glibc's headers.
#ifndef CMSSO_SYSTEM_H
#define CMSSO_SYSTEM_H

/// Marks the process not dumpable: no core dump, and no ptrace or /proc/PID/mem access by other
/// processes of the same user. Returns 0 on success.
int cmsso_set_not_dumpable(void);

/// getsockopt's SO_PEERPIDFD (Linux 6.5): a pidfd for the peer of a Unix socket.
#define CMSSO_SO_PEERPIDFD 77

/// 1 while the process behind `pidfd` is alive (so its pid has not been reused), else 0.
int cmsso_pidfd_alive(int pidfd);

/// pidfd_open(2): a pidfd for a process of ours (-1 on failure).
int cmsso_pidfd_open(int pid);

#endif
