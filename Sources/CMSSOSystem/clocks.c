// The pool's timers thread waits here: for deadlines on the monotonic clock (the pool's own
// timeouts), and for a session window's end, which is on two clocks at once: the wall clock, which
// the window is stored in and which can jump, and the boot clock, which measures elapsed time and
// counts a suspend (docs/ARCHITECTURE.md, "Two clocks").
#define _GNU_SOURCE
#include "cmsso_system.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static uint64_t read_clock(clockid_t clock) {
    struct timespec now;
    clock_gettime(clock, &now);
    return now.tv_sec < 0 ? 0 : (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

uint64_t cmsso_boottime_ns(void) { return read_clock(CLOCK_BOOTTIME); }
uint64_t cmsso_realtime_ns(void) { return read_clock(CLOCK_REALTIME); }

int cmsso_clock_waiter_open(cmsso_clock_waiter *waiter) {
    waiter->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    waiter->wall = timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC);
    waiter->elapsed = timerfd_create(CLOCK_BOOTTIME, TFD_NONBLOCK | TFD_CLOEXEC);
    if (waiter->wake >= 0 && waiter->wall >= 0 && waiter->elapsed >= 0) return 0;
    int error = errno;
    if (waiter->wake >= 0) close(waiter->wake);
    if (waiter->wall >= 0) close(waiter->wall);
    if (waiter->elapsed >= 0) close(waiter->elapsed);
    return -error;
}

void cmsso_clock_waiter_wake(const cmsso_clock_waiter *waiter) {
    uint64_t one = 1;
    ssize_t ignored = write(waiter->wake, &one, sizeof one);
    (void)ignored;
}

static struct timespec timespec_of(uint64_t ns) {
    return (struct timespec){ .tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u) };
}

int cmsso_clock_waiter_wait(const cmsso_clock_waiter *waiter, uint64_t monotonic, uint64_t elapsed, uint64_t wall) {
    // The wall deadline is absolute, so the kernel keeps it whatever the clock does (a jump past
    // it fires it), and TFD_TIMER_CANCEL_ON_SET wakes us when the clock is set at all. A set
    // between the caller's reading and this arming would be missed, so the clock is read again
    // after it.
    struct itimerspec at = { 0 };
    int flags = 0;
    if (wall != UINT64_MAX) {
        at.it_value = timespec_of(wall > 0 ? wall : 1); // 0 would disarm it
        flags = TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET;
    }
    if (timerfd_settime(waiter->wall, flags, &at, NULL) != 0) return -errno;
    if (wall != UINT64_MAX && cmsso_realtime_ns() >= wall) return 0;

    // Relative: the same deadline (a relative timer on CLOCK_BOOTTIME counts a suspend too), and
    // what libfaketime, which the tests preload, passes through unchanged: it converts every
    // absolute timerfd time as if it were on the wall clock.
    struct itimerspec after = { 0 };
    if (elapsed != UINT64_MAX) {
        uint64_t now = cmsso_boottime_ns();
        if (elapsed <= now) return 0;
        after.it_value = timespec_of(elapsed - now);
    }
    if (timerfd_settime(waiter->elapsed, 0, &after, NULL) != 0) return -errno;

    int timeout = -1;
    if (monotonic != UINT64_MAX) {
        uint64_t now = cmsso_monotonic_ns();
        if (monotonic <= now) return 0;
        uint64_t ms = (monotonic - now + 999999u) / 1000000u; // rounded up: never wakes early
        timeout = ms > INT_MAX ? INT_MAX : (int)ms;
    }
    struct pollfd fds[3] = {
        { .fd = waiter->wake, .events = POLLIN },
        { .fd = waiter->wall, .events = POLLIN },
        { .fd = waiter->elapsed, .events = POLLIN },
    };
    if (poll(fds, 3, timeout) < 0 && errno != EINTR) return -errno;
    // Drained, whatever each says: the wall timer's read fails with ECANCELED after a set, which
    // is all it has to say; the caller reads the clocks and arms again.
    uint64_t count;
    for (int i = 0; i < 3; i++) {
        if (fds[i].revents) {
            ssize_t ignored = read(fds[i].fd, &count, sizeof count);
            (void)ignored;
        }
    }
    return 0;
}
