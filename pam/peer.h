/* Whether the process behind the broker's socket is the installed mssod, checked before the
 * module gives it the user's login password.
 *
 * What this stops: malware running as the user that stops mssod and listens on its socket (or
 * runs some other program there), or starts mssod with code of its own preloaded (LD_*, GCONV_PATH,
 * GIO modules, a Swift backtracer setting), under a debugger, or in a mount namespace or root of
 * its own where "mssod" is a file it chose. What it does not stop: code that gets into a genuine
 * mssod without leaving a trace in these places (a tracer that attached before mssod made itself
 * non-dumpable and has detached; a preloaded library that overwrote its own environment strings;
 * a listening socket shared with another process before mssod took it over), nor root. See
 * docs/SECURITY.md. */
#ifndef MSSO_PAM_PEER_H
#define MSSO_PAM_PEER_H

#include <stddef.h>

/* 0 when the peer of the connected socket `fd` is the mssod installed at `mssod`; else -1, with a
 * sentence for the user in `why` (e.g. "the program behind the broker's socket is not …"). */
int msso_verify_peer(int fd, const char *mssod, char *why, size_t size);

#endif
