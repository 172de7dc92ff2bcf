/* Whether the process that answers on the broker's socket is the installed mssod, checked before
 * the module gives it the user's login password. That process is the one that wrote the broker's
 * replies (broker.c), not the one that set up the listening socket (SO_PEERCRED, SO_PEERPIDFD):
 * with socket activation that is systemd; and a process that listens, keeps the listener in a
 * child, then execs the real mssod would pass every check below while its child accepts.
 *
 * What this stops: malware running as the user that stops mssod and listens on its socket (or
 * runs some other program there), or starts mssod with code of its own preloaded (LD_*, GCONV_PATH,
 * GIO modules, a Swift backtracer setting), under a debugger, in a mount namespace or root of its
 * own where "mssod" is a file it chose, or in a user namespace of its own (where the user may trace
 * it); and malware that forges the writer's credentials from a pid namespace of its own, naming a
 * genuine mssod there (the kernel lets it: see peer.c). A process that writes the replies and
 * then execs mssod before the check passes it: the caller makes the process checked answer once
 * more (pam_msso.c, broker_trusted). What it does not stop: code that gets into a genuine
 * mssod without leaving a trace in these places (a tracer that attached before mssod made itself
 * non-dumpable and has detached; a preloaded library that overwrote its own environment strings),
 * nor root. See docs/SECURITY.md. */
#ifndef MSSO_PAM_PEER_H
#define MSSO_PAM_PEER_H

#include <stddef.h>
#include <sys/types.h>

/* 0 when process `pid` (pinned by `pidfd`, or -1: see peer.c) is the mssod installed at `mssod`;
 * else -1, with a sentence for the user in `why` (e.g. "the program behind the broker's socket
 * is not …"). A pid of 0 or -1 (broker.c's "unknown" and "several") fails. */
int msso_verify_peer(pid_t pid, int pidfd, const char *mssod, char *why, size_t size);

#endif
