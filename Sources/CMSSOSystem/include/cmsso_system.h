// Why this shim exists: prctl(2) is variadic, and variadic C functions cannot be called from Swift.
#ifndef CMSSO_SYSTEM_H
#define CMSSO_SYSTEM_H

/// Marks the process not dumpable: no core dump, and no ptrace or /proc/PID/mem access by other
/// processes of the same user. Returns 0 on success.
int cmsso_set_not_dumpable(void);

#endif
