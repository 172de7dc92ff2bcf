#include "cmsso_system.h"
#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int cmsso_set_not_dumpable(void) {
    return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

int cmsso_pidfd_alive(int pidfd) {
    /* Signal 0 checks without signalling; it fails with ESRCH once the process has exited. */
    return syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0;
}

int cmsso_pidfd_open(int pid) {
    return (int)syscall(SYS_pidfd_open, pid, 0);
}
