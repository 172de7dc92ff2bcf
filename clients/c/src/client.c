/* libmsso: one connection to mssod, calls made one at a time (docs/PROTOCOL.md). */
#define _GNU_SOURCE
#include "../msso.h"
#include "json.h"
#include "sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define PUBLIC __attribute__((visibility("default")))

#define DEFAULT_TIMEOUT_MS 20000
/* The account a client acts as unless msso_set_account says otherwise (as the msso command reads it). */
#define MSSO_ACCOUNT_ENV "MSSO_ACCOUNT"
/* A connection not read for this long is checked before a call is written on it: the daemon may
 * have closed it (idle for 10 minutes, or restarted), and a call sent into a closed connection
 * would fail where a new connection would not. */
#define QUIET_MS 1000
/* Signals read while a call waits, kept for msso_next_event. Past this many unread, or this many
 * bytes of their frames (4,096 frames of 64 KiB would be 256 MiB), the connection is closed, as the
 * daemon closes a subscriber that stops reading: subscribe again. The Python and Go libraries
 * keep the same bounds. */
#define MAX_QUEUED 4096
#define MAX_QUEUED_BYTES (1 << 20)
/* Room for the biggest frame plus what one read may bring after it. */
#define IN_CAPACITY (MSSO_MAX_FRAME + 4 + 4096)
#define OUT_CAPACITY (MSSO_MAX_FRAME + 4)
/* SO_RCVTIMEO's timer may fire late: by two ticks (rounded up to ticks, 20 ms at 100 Hz), and a
 * long one by up to an eighth more (the kernel's timer wheel is coarser for later timers). */
#define TICKS_MS 20

typedef struct queued {
    struct queued *next;
    size_t bytes; /* its frame's */
    msso_event event;
} queued;

struct msso_client {
    int fd;     /* the connection, -1 when there is none */
    int events; /* msso_events_fd's epoll descriptor (the socket and `wake`), -1 until asked for */
    int wake;   /* an eventfd, readable while events are queued */
    pid_t pid;  /* the process that opened `fd`: a forked child opens its own */
    long wait_ms; /* the socket's SO_RCVTIMEO (-1: none, it waits for ever) */
    char *path;
    int timeout_ms;
    uint32_t serial; /* the last one used; counted up, 0 skipped */
    unsigned char *in; /* bytes read and not yet handled: never a whole frame between calls */
    size_t in_length;
    char *out; /* the frame being sent: wiped once sent */
    json_doc doc;
    queued *head, *tail;
    size_t queued_count, queued_bytes;
    int subscribed;  /* this connection has a subscription */
    int subscribing; /* a subscribe call waits for its answer: its signals may come first */
    int lost;       /* a subscription ended with its connection: msso_next_event says so, once */
    msso_error lost_error;
    int has_stray; /* an error with serial 0 came: why the daemon is about to close the connection */
    msso_error stray;
    long last_read_ms;
    char *daemon;
    char *executable;
    char *account; /* msso_set_account's, else $MSSO_ACCOUNT's; NULL: the daemon's choice */
};

/* -- errors ---------------------------------------------------------------------------------- */

#define ERROR_ROW_(id, name, status) { name, status },
static const struct {
    const char *name;
    int status;
} errors[] = { { "", 0 }, MSSO_ERRORS(ERROR_ROW_) };

#define STATE_NAME_(id, name) name,
static const char *const states[] = { MSSO_SESSION_STATES(STATE_NAME_) };
#define SIGNAL_NAME_(id, name) name,
static const char *const signals[] = { MSSO_SIGNALS(SIGNAL_NAME_) };

PUBLIC const char *msso_error_name(msso_code code) {
    return (unsigned)code < MSSO_CODE_COUNT_ ? errors[code].name : "";
}

PUBLIC int msso_exit_status(msso_code code) {
    return (unsigned)code < MSSO_CODE_COUNT_ ? errors[code].status : errors[MSSO_E_INTERNAL].status;
}

PUBLIC const char *msso_state_name(msso_state state) {
    return state >= 0 && (size_t)state < sizeof states / sizeof *states ? states[state] : "";
}

/* Cuts `text` (NUL-terminated) so that it does not end inside a UTF-8 sequence. */
static void cut_at_character(char *text) {
    size_t length = strlen(text), start = length;
    while (start > 0 && length - start < 4 && ((unsigned char)text[start - 1] & 0xC0) == 0x80) start--;
    if (start == 0 || !((unsigned char)text[start - 1] & 0x80)) return; /* ends in ASCII */
    start--;
    if (!json_valid_utf8(text + start, length - start)) text[start] = '\0';
}

static void set_error(msso_error *err, msso_code code, const char *format, ...) __attribute__((format(printf, 3, 4)));
static void set_error(msso_error *err, msso_code code, const char *format, ...) {
    if (!err) return;
    err->code = code;
    err->exit_status = msso_exit_status(code);
    snprintf(err->name, sizeof err->name, "%s", msso_error_name(code));
    va_list args;
    va_start(args, format);
    vsnprintf(err->message, sizeof err->message, format, args);
    va_end(args);
    cut_at_character(err->message);
}

static void clear_error(msso_error *err) {
    if (err) {
        err->code = MSSO_OK;
        err->exit_status = 0;
        err->name[0] = err->message[0] = '\0';
    }
}

/* An error message from the daemon: its name and sentence. */
static void daemon_error(msso_error *err, const json_doc *doc, uint32_t name, uint32_t message) {
    if (!err) return;
    msso_code code = MSSO_E_INTERNAL;
    for (size_t i = 1; i < MSSO_CODE_COUNT_; i++)
        if (json_string_equals(doc, name, errors[i].name)) code = (msso_code)i;
    set_error(err, code, "%s", "");
    /* A newer daemon's name is kept as sent, when it is a plain name that fits. */
    char sent[MSSO_ERROR_NAME_SIZE];
    if (code == MSSO_E_INTERNAL && json_string_into(doc, name, sent, sizeof sent) == 0 && sent[0] &&
        strspn(sent, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") == strlen(sent))
        memcpy(err->name, sent, sizeof sent);
    char *text = json_string(doc, message, MSSO_MAX_FRAME);
    if (text) {
        snprintf(err->message, sizeof err->message, "%s", text);
        cut_at_character(err->message);
        free(text);
    }
}

/* -- the process ------------------------------------------------------------------------------ */

/* getpid() is a system call (glibc keeps no copy), and every call asks whether the process forked.
 * Its answer is kept in a page the kernel zeroes in a forked child (MADV_WIPEONFORK, however the
 * child was made): a child finds 0 and asks again. Without that page (Linux before 4.14),
 * getpid() each time. The page is mapped once, by whichever thread gets there first, and stays
 * (unmapped at exit it could fault a thread still in a call). */
static pid_t no_page;
static pid_t *pid_page;

static pid_t *own_pid_page(void) {
    pid_t *page = __atomic_load_n(&pid_page, __ATOMIC_ACQUIRE);
    if (page) return page;
    page = &no_page;
#ifdef MADV_WIPEONFORK
    void *mapped = mmap(NULL, sizeof(pid_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped != MAP_FAILED && madvise(mapped, sizeof(pid_t), MADV_WIPEONFORK) == 0) page = mapped;
    else if (mapped != MAP_FAILED) munmap(mapped, sizeof(pid_t));
#endif
    pid_t *expected = NULL;
    if (!__atomic_compare_exchange_n(&pid_page, &expected, page, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        if (page != &no_page) munmap(page, sizeof(pid_t)); /* another thread's came first */
        page = expected;
    }
    return page;
}

static pid_t own_pid(void) {
    pid_t *page = own_pid_page();
    if (page == &no_page) return getpid();
    pid_t pid = __atomic_load_n(page, __ATOMIC_RELAXED);
    if (pid == 0) __atomic_store_n(page, pid = getpid(), __ATOMIC_RELAXED);
    return pid;
}

/* -- time and the socket --------------------------------------------------------------------- */

static long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

/* -1: no deadline. It counts from the next whole millisecond, so that `now_ms` (which rounds
 * down) reaches it no sooner than `milliseconds` after now: a call never gives up early. */
static long deadline_after(int milliseconds) {
    return milliseconds < 0 ? -1 : now_ms() + 1 + milliseconds;
}

/* Waits until `fd` has `events` or the deadline passes: 1, 0 (time is up) or -1. */
static int wait_for(int fd, short events, long deadline) {
    for (;;) {
        long left = deadline < 0 ? -1 : deadline - now_ms();
        if (deadline >= 0 && left < 0) left = 0;
        struct pollfd p = { .fd = fd, .events = events };
        int n = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        if (n == 0) {
            if (deadline >= 0 && now_ms() >= deadline) return 0;
            continue;
        }
        return 1; /* readable, writable, or hung up: the next read or write says which */
    }
}

static void wipe_free(char *text) {
    if (text) {
        explicit_bzero(text, strlen(text));
        free(text);
    }
}

/* -- the queue of events ----------------------------------------------------------------------- */

static void wake_set(msso_client *c, int on) {
    if (c->wake < 0) return;
    uint64_t value = 1;
    if (on) {
        if (write(c->wake, &value, sizeof value) < 0) { /* already set (counter full): nothing to do */ }
    } else if (read(c->wake, &value, sizeof value) < 0) { /* already clear */ }
}

static void free_queue(msso_client *c) {
    while (c->head) {
        queued *next = c->head->next;
        msso_event_free(&c->head->event);
        free(c->head);
        c->head = next;
    }
    c->tail = NULL;
    if (c->queued_count) wake_set(c, 0);
    c->queued_count = c->queued_bytes = 0;
}

/* -- the connection ---------------------------------------------------------------------------- */

static void close_connection(msso_client *c, const msso_error *why) {
    if (c->fd < 0) return;
    if (c->events >= 0) epoll_ctl(c->events, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    explicit_bzero(c->in, c->in_length);
    c->in_length = 0;
    if (c->subscribed) {
        c->lost = 1;
        if (why) c->lost_error = *why;
        else set_error(&c->lost_error, MSSO_E_BROKER_UNREACHABLE, "the connection to the msso broker was lost; subscribe again");
    }
    c->subscribed = 0;
    c->has_stray = 0;
}

/* Why a connection ended: the daemon's word when it said (Busy, TimedOut…), else "lost". */
static void connection_lost(msso_client *c, msso_error *err) {
    msso_error why;
    if (c->has_stray) why = c->stray;
    else set_error(&why, MSSO_E_BROKER_UNREACHABLE, "the connection to the msso broker was lost; is mssod still running?");
    close_connection(c, &why);
    if (err) *err = why;
}

/* The broker broke the protocol: the stream cannot be trusted any more. */
static void protocol_error(msso_client *c, msso_error *err, const char *what) {
    msso_error why;
    set_error(&why, MSSO_E_INTERNAL, "the msso broker sent %s: not the protocol (docs/PROTOCOL.md)", what);
    close_connection(c, &why);
    if (err) *err = why;
}

/* The process forked: this child must not write on its parent's connection (their frames would
 * interleave), nor touch the parent's epoll set, which it shares. It drops its copies. */
static void forget_after_fork(msso_client *c) {
    if (c->pid == own_pid()) return;
    if (c->events >= 0) close(c->events);
    if (c->wake >= 0) close(c->wake);
    c->events = c->wake = -1;
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    free_queue(c);
    explicit_bzero(c->in, c->in_length);
    c->in_length = 0;
    if (c->subscribed) {
        c->lost = 1;
        set_error(&c->lost_error, MSSO_E_BROKER_UNREACHABLE, "the process forked: the subscription stayed with the parent");
    }
    c->subscribed = c->has_stray = 0;
    c->pid = own_pid();
}

/* Lets a blocking recv wait `milliseconds` (more than 0) at most, or for ever (-1): 0, or -1 when
 * it cannot. Set only when that changes by more than the time a call takes to come back to it:
 * each call's wait starts from its timeout, less the millisecond that may have passed. */
static int wait_at_most(msso_client *c, long milliseconds) {
    if (milliseconds < 0 ? c->wait_ms < 0
                         : c->wait_ms >= 0 && c->wait_ms <= milliseconds && c->wait_ms >= milliseconds - milliseconds / 16 - 1)
        return 0;
    struct timeval t = { 0 }; /* zero: no limit */
    if (milliseconds > 0) t = (struct timeval){ .tv_sec = milliseconds / 1000, .tv_usec = milliseconds % 1000 * 1000 };
    if (setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t) != 0) return -1;
    c->wait_ms = milliseconds;
    return 0;
}

/* Reads what the socket has (waiting until the deadline): 1, 0 (time is up) or -1 (closed).
 * It waits in a blocking recv, woken by the answer itself: one system call where a
 * non-blocking recv, poll and recv again take three. SO_RCVTIMEO is set short of the deadline by
 * what its timer may be late; the last of the wait, if it comes to that, is polled (to the
 * millisecond) as before. */
static int read_some(msso_client *c, long deadline) {
    for (;;) {
        long left = deadline < 0 ? -1 : deadline - now_ms();
        if (deadline >= 0 && left < 0) left = 0;
        long wait = left < 0 ? -1 : left - left / 8 - TICKS_MS;
        int block = (left < 0 || wait > 0) && wait_at_most(c, wait) == 0;
        ssize_t n = recv(c->fd, c->in + c->in_length, IN_CAPACITY - c->in_length, block ? 0 : MSG_DONTWAIT);
        if (n > 0) {
            c->in_length += (size_t)n;
            c->last_read_ms = now_ms();
            return 1;
        }
        if (n == 0) return -1;
        if (errno == EINTR) continue;
        if (errno != EAGAIN) return -1;
        if (block) continue; /* its SO_RCVTIMEO passed: the deadline is near */
        if (left == 0) return 0;
        int ready = wait_for(c->fd, POLLIN, deadline);
        if (ready <= 0) return ready;
    }
}

/* Sends the whole frame: 0, -1 (failed, or time ran out, after part of it), or -2 (the
 * connection was already closed: nothing of it was sent). */
static int send_all(msso_client *c, const char *data, size_t length, long deadline) {
    size_t sent = 0;
    while (sent < length) {
        ssize_t n = send(c->fd, data + sent, length - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) {
            if (wait_for(c->fd, POLLOUT, deadline) <= 0) return -1;
            continue;
        }
        return sent == 0 && n < 0 && (errno == EPIPE || errno == ECONNRESET) ? -2 : -1;
    }
    return 0;
}

/* -- reading the daemon's values ------------------------------------------------------------ */

/* Readers return 0, -1 when the value is not what the protocol says (the caller closes the
 * connection), or -2 when memory ran out. */
enum { MALFORMED = -1, NO_MEMORY = -2 };

/* An optional string at `key`: 0 (and *out, NULL when absent or null), or an error. */
static int optional_string(const json_doc *doc, uint32_t object, const char *key, char **out) {
    long at = json_get(doc, object, key);
    *out = NULL;
    if (at < 0 || json_is(doc, at, JSON_NULL)) return 0;
    if (!json_is(doc, at, JSON_STRING)) return MALFORMED;
    return (*out = json_string(doc, (uint32_t)at, MSSO_MAX_FRAME)) ? 0 : NO_MEMORY;
}

static int required_string(const json_doc *doc, uint32_t object, const char *key, char **out) {
    long at = json_get(doc, object, key);
    *out = NULL;
    if (!json_is(doc, at, JSON_STRING)) return MALFORMED;
    return (*out = json_string(doc, (uint32_t)at, MSSO_MAX_FRAME)) ? 0 : NO_MEMORY;
}

/* An optional number (a time): 0 when absent or null. */
static int optional_number(const json_doc *doc, uint32_t object, const char *key, double *out) {
    long at = json_get(doc, object, key);
    *out = 0;
    if (at < 0 || json_is(doc, at, JSON_NULL)) return 0;
    if (!json_is(doc, at, JSON_NUMBER) || json_number(doc, (uint32_t)at, out) != 0) return MALFORMED;
    return 0;
}

static int optional_bool(const json_doc *doc, uint32_t object, const char *key, int *out) {
    long at = json_get(doc, object, key);
    *out = 0;
    if (at < 0 || json_is(doc, at, JSON_NULL)) return 0;
    if (json_is(doc, at, JSON_TRUE)) *out = 1;
    else if (!json_is(doc, at, JSON_FALSE)) return MALFORMED;
    return 0;
}

/* The first error of several reads, or 0. */
static int first(const int *results, size_t count) {
    for (size_t i = 0; i < count; i++)
        if (results[i]) return results[i];
    return 0;
}
#define FIRST(...) first((const int[]){ __VA_ARGS__ }, sizeof((const int[]){ __VA_ARGS__ }) / sizeof(int))

static int read_session(const json_doc *doc, uint32_t at, msso_session *s) {
    memset(s, 0, sizeof *s);
    s->state = MSSO_STATE_UNKNOWN;
    if (!json_is(doc, at, JSON_OBJECT)) return MALFORMED;
    long state = json_get(doc, at, "state");
    if (!json_is(doc, state, JSON_STRING)) return MALFORMED;
    for (size_t i = 0; i < sizeof states / sizeof *states; i++)
        if (json_string_equals(doc, (uint32_t)state, states[i])) s->state = (msso_state)i;
    int result = FIRST(required_string(doc, at, "group", &s->group), optional_string(doc, at, "issuer", &s->issuer),
                       optional_string(doc, at, "username", &s->username),
                       optional_number(doc, at, "loggedInAt", &s->logged_in_at),
                       optional_number(doc, at, "sessionExpiresAt", &s->session_expires_at),
                       optional_number(doc, at, "sessionMaxAt", &s->session_max_at),
                       optional_number(doc, at, "accessTokenExpiresAt", &s->access_token_expires_at),
                       optional_bool(doc, at, "admin", &s->admin), optional_bool(doc, at, "locked", &s->locked));
    if (result) msso_session_free(s);
    return result;
}

/* The elements of the array at `key`: its index, and *count; -1 when it is not an array. */
static long array_at(const json_doc *doc, uint32_t object, const char *key, size_t *count) {
    long at = json_get(doc, object, key);
    if (!json_is(doc, at, JSON_ARRAY)) return -1;
    *count = 0;
    for (uint32_t i = (uint32_t)at + 1; i < doc->tokens[at].next; i = doc->tokens[i].next) (*count)++;
    return at;
}

typedef int (*reader)(msso_client *c, const json_doc *doc, uint32_t result, void *out);

static int read_one_session(msso_client *c, const json_doc *doc, uint32_t result, void *out) {
    (void)c;
    msso_session ignored, *s = out ? out : &ignored;
    int read = read_session(doc, result, s);
    if (!out && read == 0) msso_session_free(&ignored);
    return read;
}

static int read_sessions(msso_client *c, const json_doc *doc, uint32_t result, void *out) {
    (void)c;
    msso_sessions *s = out;
    size_t count;
    memset(s, 0, sizeof *s);
    long groups = json_is(doc, result, JSON_OBJECT) ? array_at(doc, result, "groups", &count) : -1;
    if (groups < 0) return MALFORMED;
    if (count && !(s->items = calloc(count, sizeof *s->items))) return NO_MEMORY;
    int read = FIRST(optional_bool(doc, result, "locked", &s->locked), optional_number(doc, result, "lockedAt", &s->locked_at));
    for (uint32_t i = (uint32_t)groups + 1; !read && i < doc->tokens[groups].next; i = doc->tokens[i].next) {
        read = read_session(doc, i, &s->items[s->count]);
        if (!read) s->count++;
    }
    if (read) msso_sessions_free(s);
    return read;
}

static int read_headers(msso_client *c, const json_doc *doc, uint32_t result, void *out) {
    (void)c;
    msso_headers *h = out;
    size_t count;
    memset(h, 0, sizeof *h);
    long list = json_is(doc, result, JSON_OBJECT) ? array_at(doc, result, "headers", &count) : -1;
    if (list < 0) return MALFORMED;
    if (count && !(h->items = calloc(count, sizeof *h->items))) return NO_MEMORY;
    int read = 0;
    for (uint32_t i = (uint32_t)list + 1; !read && i < doc->tokens[list].next; i = doc->tokens[i].next) {
        /* [name, value]: an array of exactly two strings */
        if (!json_is(doc, i, JSON_ARRAY) || doc->tokens[i].next != i + 3 || !json_is(doc, i + 1, JSON_STRING) ||
            !json_is(doc, i + 2, JSON_STRING)) {
            read = MALFORMED;
            break;
        }
        char *name = json_string(doc, i + 1, MSSO_MAX_FRAME), *value = json_string(doc, i + 2, MSSO_MAX_FRAME);
        if (!name || !value) {
            free(name);
            wipe_free(value);
            read = NO_MEMORY;
            break;
        }
        h->items[h->count++] = (msso_header){ name, value };
    }
    if (read) msso_headers_free(h);
    return read;
}

static int read_token(msso_client *c, const json_doc *doc, uint32_t result, void *out) {
    (void)c;
    msso_access_token *t = out;
    memset(t, 0, sizeof *t);
    if (!json_is(doc, result, JSON_OBJECT)) return MALFORMED;
    long expires = json_get(doc, result, "expiresAt");
    int read = FIRST(required_string(doc, result, "accessToken", &t->access_token),
                     required_string(doc, result, "header", &t->header),
                     json_is(doc, expires, JSON_NUMBER) && json_number(doc, (uint32_t)expires, &t->expires_at) == 0 ? 0 : MALFORMED);
    if (read) msso_access_token_free(t);
    return read;
}

static int read_logout(msso_client *c, const json_doc *doc, uint32_t result, void *out) {
    (void)c;
    msso_logout_result ignored, *r = out ? out : &ignored;
    size_t count, others = 0;
    memset(r, 0, sizeof *r);
    long ended = json_is(doc, result, JSON_OBJECT) ? array_at(doc, result, "loggedOut", &count) : -1;
    if (ended < 0) return MALFORMED;
    long kept = json_get(doc, result, "notRevoked");
    if (kept >= 0 && !json_is(doc, kept, JSON_NULL) && array_at(doc, result, "notRevoked", &others) < 0) return MALFORMED;
    int read = 0;
    if ((count && !(r->logged_out = calloc(count, sizeof *r->logged_out))) ||
        (others && !(r->not_revoked = calloc(others, sizeof *r->not_revoked))))
        read = NO_MEMORY;
    for (uint32_t i = (uint32_t)ended + 1; !read && i < doc->tokens[ended].next; i = doc->tokens[i].next) {
        if (!json_is(doc, i, JSON_STRING)) read = MALFORMED;
        else if (!(r->logged_out[r->logged_out_count] = json_string(doc, i, MSSO_MAX_FRAME))) read = NO_MEMORY;
        else r->logged_out_count++;
    }
    for (uint32_t i = (uint32_t)kept + 1; !read && others && i < doc->tokens[kept].next; i = doc->tokens[i].next) {
        msso_not_revoked *n = &r->not_revoked[r->not_revoked_count++];
        long refresh = json_is(doc, i, JSON_OBJECT) ? json_get(doc, i, "refreshToken") : -1;
        read = FIRST(json_is(doc, i, JSON_OBJECT) ? 0 : MALFORMED, required_string(doc, i, "group", &n->group),
                     required_string(doc, i, "reason", &n->reason),
                     optional_number(doc, i, "accessTokenExpiresAt", &n->access_token_expires_at),
                     json_is(doc, refresh, JSON_TRUE) || json_is(doc, refresh, JSON_FALSE) ? 0 : MALFORMED);
        n->refresh_token = json_is(doc, refresh, JSON_TRUE);
    }
    long revoked = json_get(doc, result, "revoked");
    r->revoked = -1;
    if (!read && revoked >= 0 && !json_is(doc, revoked, JSON_NULL)) {
        if (json_is(doc, revoked, JSON_TRUE)) r->revoked = 1;
        else if (json_is(doc, revoked, JSON_FALSE)) r->revoked = 0;
        else read = MALFORMED;
    }
    if (read || !out) msso_logout_result_free(r);
    return read;
}

static int read_group_list(msso_client *c, const json_doc *doc, uint32_t result, void *out) {
    (void)c, (void)out;
    size_t count;
    long groups = json_is(doc, result, JSON_OBJECT) ? array_at(doc, result, "groups", &count) : -1;
    if (groups < 0) return MALFORMED;
    for (uint32_t i = (uint32_t)groups + 1; i < doc->tokens[groups].next; i = doc->tokens[i].next)
        if (!json_is(doc, i, JSON_STRING)) return MALFORMED;
    return 0;
}

static int read_hello(msso_client *c, const json_doc *doc, uint32_t result, void *out) {
    (void)out;
    uint64_t number;
    long version = json_is(doc, result, JSON_OBJECT) ? json_get(doc, result, "version") : -1;
    long peer = json_get(doc, result, "peer");
    if (!json_is(doc, version, JSON_NUMBER) || json_unsigned(doc, (uint32_t)version, UINT32_MAX, &number) != 0) return MALFORMED;
    if (!json_is(doc, peer, JSON_OBJECT)) return MALFORMED;
    long uid = json_get(doc, (uint32_t)peer, "uid"), pid = json_get(doc, (uint32_t)peer, "pid");
    if (!json_is(doc, uid, JSON_NUMBER) || json_unsigned(doc, (uint32_t)uid, UINT32_MAX, &number) != 0 ||
        !json_is(doc, pid, JSON_NUMBER) || json_unsigned(doc, (uint32_t)pid, UINT32_MAX, &number) != 0)
        return MALFORMED;
    char *daemon, *executable;
    int read = FIRST(required_string(doc, result, "daemon", &daemon), optional_string(doc, (uint32_t)peer, "executable", &executable));
    if (read) {
        free(daemon);
        free(executable);
        return read;
    }
    free(c->daemon);
    free(c->executable);
    c->daemon = daemon;
    c->executable = executable;
    return 0;
}

/* msso_call's: the result's JSON text, as sent. */
static int read_raw(msso_client *c, const json_doc *doc, uint32_t result, void *out) {
    (void)c;
    if (!out) return 0;
    const json_token *t = &doc->tokens[result];
    size_t start = t->start - (t->type == JSON_STRING), end = t->end + (t->type == JSON_STRING);
    char *text = malloc(end - start + 1);
    if (!text) return NO_MEMORY;
    memcpy(text, doc->text + start, end - start);
    text[end - start] = '\0';
    *(char **)out = text;
    return 0;
}

/* A DevicePrompt's `prompt` or a BrowserPrompt's `browser`, given to the login's callback. */
static int give_prompt(const json_doc *doc, uint32_t message, int device, msso_prompt_fn on_prompt, void *context) {
    long at = json_get(doc, message, device ? "prompt" : "browser");
    if (!json_is(doc, at, JSON_OBJECT)) return MALFORMED;
    msso_prompt prompt = { 0 };
    char *url = NULL, *complete = NULL, *code = NULL;
    long expires = json_get(doc, (uint32_t)at, "expiresAt");
    int read = FIRST(required_string(doc, (uint32_t)at, device ? "verificationURI" : "url", &url),
                     device ? optional_string(doc, (uint32_t)at, "verificationURIComplete", &complete) : 0,
                     device ? required_string(doc, (uint32_t)at, "userCode", &code) : 0,
                     json_is(doc, expires, JSON_NUMBER) && json_number(doc, (uint32_t)expires, &prompt.expires_at) == 0 ? 0 : MALFORMED,
                     optional_bool(doc, message, "joined", &prompt.joined));
    if (!read && on_prompt) {
        prompt.url = url, prompt.url_complete = complete, prompt.user_code = code;
        on_prompt(&prompt, context);
    }
    free(url);
    free(complete);
    free(code);
    return read;
}

static int queue_event(msso_client *c, const json_doc *doc, uint32_t message, uint32_t name, size_t bytes) {
    queued *q = calloc(1, sizeof *q);
    if (!q) return NO_MEMORY;
    q->bytes = bytes;
    msso_event *e = &q->event;
    e->signal = MSSO_SIGNAL_UNKNOWN;
    for (size_t i = 0; i < sizeof signals / sizeof *signals; i++)
        if (json_string_equals(doc, name, signals[i])) e->signal = (msso_signal)i;
    if (json_string_into(doc, name, e->name, sizeof e->name) != 0) e->name[0] = '\0';
    long status = json_get(doc, message, "status");
    e->status.state = MSSO_STATE_UNKNOWN; /* when the signal carries no status */
    int read = json_is(doc, status, JSON_OBJECT) ? read_session(doc, (uint32_t)status, &e->status)
                                                  : required_string(doc, message, "group", &e->status.group);
    if (read) {
        free(q);
        return read;
    }
    if (c->tail) c->tail->next = q;
    else c->head = q;
    c->tail = q;
    c->queued_bytes += bytes;
    if (c->queued_count++ == 0) wake_set(c, 1);
    return 0;
}

/* -- messages ---------------------------------------------------------------------------------- */

/* What the call being answered wants: its serial (0: none), how to read its result, and its
 * login's prompt callback. */
typedef struct {
    uint32_t serial;
    reader read;
    void *out;
    msso_prompt_fn on_prompt;
    void *context;
} pending;

enum { NOT_OURS = 0, ANSWERED = 1, REFUSED = 2, BROKEN = -1 };

/* Handles one frame's payload: an answer to the pending call (ANSWERED: read into its output;
 * REFUSED: its error in *err), anything else (NOT_OURS: a signal queued, a prompt given, a late
 * answer to a call that timed out skipped), or BROKEN (not the protocol: the connection is
 * closed, *err says why). */
static int handle_frame(msso_client *c, const char *payload, size_t length, const pending *p, msso_error *err) {
    json_doc *doc = &c->doc;
    int parsed = json_parse(doc, payload, length);
    if (parsed == -2) {
        protocol_error(c, err, "a frame too big for the memory left"); /* the stream cannot be followed */
        return BROKEN;
    }
    if (parsed != 0) {
        protocol_error(c, err, "a frame that is not a JSON object in UTF-8");
        return BROKEN;
    }
    long type = json_get(doc, 0, "type");
    if (!json_is(doc, type, JSON_STRING)) {
        protocol_error(c, err, "a message without a type");
        return BROKEN;
    }
    int reply = json_string_equals(doc, (uint32_t)type, "reply"), error = json_string_equals(doc, (uint32_t)type, "error");
    if (reply || error) {
        uint64_t serial;
        long at = json_get(doc, 0, "serial"), result = reply ? json_get(doc, 0, "result") : -1;
        long name = error ? json_get(doc, 0, "error") : -1, message = error ? json_get(doc, 0, "message") : -1;
        if (!json_is(doc, at, JSON_NUMBER) || json_unsigned(doc, (uint32_t)at, UINT32_MAX, &serial) != 0 ||
            (reply && result < 0) || (error && (!json_is(doc, name, JSON_STRING) || !json_is(doc, message, JSON_STRING)))) {
            protocol_error(c, err, reply ? "a reply without a serial or a result" : "an error without a serial, a name or a message");
            return BROKEN;
        }
        if (error && serial == 0) { /* why the connection is about to close (or a complaint about a frame) */
            daemon_error(&c->stray, doc, (uint32_t)name, (uint32_t)message);
            c->has_stray = 1;
            return NOT_OURS;
        }
        if (p->serial == 0 || serial != p->serial) return NOT_OURS;
        if (error) {
            daemon_error(err, doc, (uint32_t)name, (uint32_t)message);
            return REFUSED;
        }
        int read = p->read ? p->read(c, doc, (uint32_t)result, p->out) : 0;
        if (read == NO_MEMORY) {
            set_error(err, MSSO_E_INTERNAL, "out of memory reading the msso broker's answer");
            return REFUSED;
        }
        if (read != 0) {
            protocol_error(c, err, "an answer whose result is not what the protocol says");
            return BROKEN;
        }
        return ANSWERED;
    }
    if (json_string_equals(doc, (uint32_t)type, "signal")) {
        long name = json_get(doc, 0, "signal"), group = json_get(doc, 0, "group");
        if (!json_is(doc, name, JSON_STRING) || !json_is(doc, group, JSON_STRING)) {
            protocol_error(c, err, "a signal without a name or a group");
            return BROKEN;
        }
        int device = json_string_equals(doc, (uint32_t)name, "DevicePrompt");
        int read = 0;
        if (device || json_string_equals(doc, (uint32_t)name, "BrowserPrompt")) {
            uint64_t serial;
            long at = json_get(doc, 0, "serial");
            if (!json_is(doc, at, JSON_NUMBER) || json_unsigned(doc, (uint32_t)at, UINT32_MAX, &serial) != 0) read = MALFORMED;
            else if (p->serial && serial == p->serial) read = give_prompt(doc, 0, device, p->on_prompt, p->context);
        } else if (!c->subscribed && !c->subscribing) {
            /* Nobody asked for it: dropped, so that a broker pushing signals makes us hold nothing. */
        } else if (c->queued_count == MAX_QUEUED || c->queued_bytes + length > MAX_QUEUED_BYTES) {
            msso_error why;
            set_error(&why, MSSO_E_BROKER_UNREACHABLE, "more than %d events (or %d KiB of them) were left unread: the "
                      "connection was closed; read them as they come, and subscribe again", MAX_QUEUED, MAX_QUEUED_BYTES / 1024);
            close_connection(c, &why);
            if (err) *err = why;
            return BROKEN;
        } else {
            read = queue_event(c, doc, 0, (uint32_t)name, length);
        }
        if (read == MALFORMED) {
            protocol_error(c, err, "a signal that is not what the protocol says");
            return BROKEN;
        }
        return NOT_OURS; /* (an event lost for want of memory is lost) */
    }
    return NOT_OURS; /* a type of a newer protocol: ignored, like unknown keys */
}

/* Drops the first `length` bytes of the input, wiping them (they may have held a token). */
static void consume(msso_client *c, size_t length) {
    if (length == 0) return;
    memmove(c->in, c->in + length, c->in_length - length);
    explicit_bzero(c->in + c->in_length - length, length);
    c->in_length -= length;
}

static uint32_t frame_length(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Handles every whole frame in the input, stopping after the answer to `p` when it is there:
 * that answer's outcome (ANSWERED, REFUSED), NOT_OURS when it was not there, or BROKEN. */
static int handle_input(msso_client *c, const pending *p, msso_error *err) {
    size_t at = 0;
    int outcome = NOT_OURS;
    while (outcome == NOT_OURS && c->in_length - at >= 4) {
        uint32_t length = frame_length(c->in + at);
        if (length > MSSO_MAX_FRAME) {
            protocol_error(c, err, "a frame over the protocol's 65536 bytes");
            return BROKEN;
        }
        if (c->in_length - at - 4 < length) break;
        outcome = handle_frame(c, (const char *)c->in + at + 4, length, p, err);
        if (outcome == BROKEN) return BROKEN; /* the input is gone with the connection */
        at += 4 + length;
    }
    consume(c, at);
    return outcome;
}

/* Waits for the answer to `p`, handling whatever comes before it: 0, -1 (and *err), or -2 when
 * the daemon closed the connection for idleness (TimedOut) as the call arrived: it never read the
 * call (a connection with a call running is not idle), so the call may be sent again. */
static int await_answer(msso_client *c, const pending *p, const char *method, long deadline, msso_error *err) {
    for (;;) {
        int outcome = handle_input(c, p, err);
        if (outcome == ANSWERED || outcome == REFUSED) {
            /* Signals that came with the answer go to the queue now, so that the events
             * descriptor says they are there (it cannot see into this buffer). */
            pending none = { 0 };
            msso_error ignored;
            handle_input(c, &none, &ignored);
            return outcome == ANSWERED ? 0 : -1;
        }
        if (outcome == BROKEN) return -1;
        int read = read_some(c, deadline);
        if (read == 0) {
            /* The connection stays: a late answer will be skipped by its serial. */
            set_error(err, MSSO_E_BROKER_UNREACHABLE, "the msso broker did not answer %s in time (%s); is mssod stuck? "
                      "`systemctl --user restart msso.service`", method, c->path);
            return -1;
        }
        if (read < 0) {
            int idle = c->has_stray && c->stray.code == MSSO_E_TIMED_OUT;
            connection_lost(c, err);
            return idle ? -2 : -1;
        }
    }
}

/* -- calls --------------------------------------------------------------------------------------- */

/* A call's frame (json.h writes it), and what an error about it names. */
typedef struct {
    json_call call;
    uint32_t serial;
    const char *method;
} frame;

static void frame_begin(msso_client *c, frame *f, char *buffer, size_t capacity, const char *method) {
    if (++c->serial == 0) c->serial = 1; /* 0 means "no call" */
    f->serial = c->serial;
    f->method = method;
    json_call_begin(&f->call, buffer, capacity, f->serial, method);
}

/* Closes the frame and sends it, then wipes it (it may hold a password): 0, or -1 and *err.
 * Nothing sent and the connection found closed: *retry (the caller connects and sends again). */
static int send_frame(msso_client *c, frame *f, long deadline, int *retry, msso_error *err) {
    *retry = 0;
    int ended = json_call_end(&f->call), result = -1;
    if (ended == JSON_TOO_LONG) {
        set_error(err, MSSO_E_BAD_REQUEST, "the %s call is over the protocol's limit of %d bytes", f->method, MSSO_MAX_FRAME);
    } else if (ended == JSON_NOT_UTF8) {
        set_error(err, MSSO_E_BAD_REQUEST, "an argument of %s is not valid UTF-8", f->method);
    } else {
        int sent = send_all(c, f->call.json.data, f->call.json.length, deadline);
        if (sent == 0) result = 0;
        else if (sent == -2) *retry = 1;
        else connection_lost(c, err);
    }
    explicit_bzero(f->call.json.data, f->call.json.length);
    return result;
}

static const char *program_label(void) {
    const char *name = program_invocation_short_name;
    return name && *name && strlen(name) < 64 && json_valid_utf8(name, strlen(name)) ? name : "libmsso";
}
/* Whether this process is in the machine's own user namespace: root's exemption is the real
 * root's, not that of a user in a namespace of their own (`unshare -r`). */
static int initial_user_namespace(void) {
    char map[128] = {0};
    FILE *file = fopen("/proc/self/uid_map", "re");
    if (!file) return 0;
    size_t count = fread(map, 1, sizeof map - 1, file);
    fclose(file);
    unsigned long inside, outside, length;
    int fields = 0;
    if (count > 0 && sscanf(map, " %lu %lu %lu %n", &inside, &outside, &length, &fields) == 3)
        return inside == 0 && outside == 0 && length == 4294967295UL && map[fields] == 0;
    return 0;
}


/* Connects and says hello. */
static int open_connection(msso_client *c, msso_error *err) {
    long deadline = deadline_after(c->timeout_ms);
    struct sockaddr_un address = { .sun_family = AF_UNIX };
    if (strlen(c->path) >= sizeof address.sun_path) {
        set_error(err, MSSO_E_BROKER_UNREACHABLE, "the msso broker's socket path is too long for a Unix socket: %s", c->path);
        return -1;
    }
    memcpy(address.sun_path, c->path, strlen(c->path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        set_error(err, MSSO_E_BROKER_UNREACHABLE, "no socket to reach the msso broker: %s", strerror(errno));
        return -1;
    }
    int connected = connect(fd, (struct sockaddr *)&address, sizeof address);
    if (connected != 0 && (errno == EAGAIN || errno == EINPROGRESS)) { /* its backlog is full: wait */
        int error = 0;
        socklen_t size = sizeof error;
        int ready = wait_for(fd, POLLOUT, deadline);
        if (ready == 0) {
            close(fd);
            set_error(err, MSSO_E_BROKER_UNREACHABLE, "the msso broker did not accept the connection in time (%s); is mssod "
                      "stuck? `systemctl --user restart msso.service`", c->path);
            return -1;
        }
        if (ready < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
        errno = error;
        connected = error ? -1 : 0;
    }
    if (connected != 0) {
        int error = errno;
        close(fd);
        if (error == EACCES || error == EPERM)
            set_error(err, MSSO_E_BROKER_UNREACHABLE, "no permission to talk to the msso broker at %s: it is another user's", c->path);
        else if (error == ENOENT || error == ECONNREFUSED || error == ENOTDIR)
            set_error(err, MSSO_E_BROKER_UNREACHABLE, "the msso broker is not running (nothing answers on %s); start it with "
                      "`systemctl --user start msso.socket` or `mssod`", c->path);
        else
            set_error(err, MSSO_E_BROKER_UNREACHABLE, "cannot reach the msso broker at %s: %s", c->path, strerror(error));
        return -1;
    }
    /* The process behind the socket must be this user's (or the caller is root, who may address
     * any user's broker): a socket another user planted would read the calls (a password login's
     * password among them). */
    struct ucred peer = {0};
    socklen_t size = sizeof peer;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 ||
        (peer.uid != geteuid() && !(geteuid() == 0 && initial_user_namespace()))) {
        close(fd);
        set_error(err, MSSO_E_BROKER_UNREACHABLE, "the msso broker at %s runs as another user (uid %u): not talking to it",
                  c->path, (unsigned)peer.uid);
        return -1;
    }
    /* Blocking from here on: read_some waits in recv; sends and quick looks say MSG_DONTWAIT. */
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int error = errno;
        close(fd);
        set_error(err, MSSO_E_BROKER_UNREACHABLE, "cannot use the connection to the msso broker at %s: %s", c->path, strerror(error));
        return -1;
    }
    c->fd = fd;
    c->pid = own_pid();
    c->wait_ms = -1;
    c->has_stray = 0;
    c->last_read_ms = now_ms();
    if (c->events >= 0) {
        struct epoll_event watch = { .events = EPOLLIN };
        epoll_ctl(c->events, EPOLL_CTL_ADD, fd, &watch);
    }

    char buffer[512];
    frame f;
    int retry;
    frame_begin(c, &f, buffer, sizeof buffer, MSSO_METHOD_HELLO);
    json_call_field(&f.call, "version");
    json_uint(&f.call.json, MSSO_PROTOCOL_VERSION);
    json_call_string(&f.call, "client", program_label());
    pending p = { .serial = f.serial, .read = read_hello };
    if (send_frame(c, &f, deadline, &retry, err) != 0) {
        if (retry) connection_lost(c, err); /* closed at once: Busy, or another user's */
        return -1;
    }
    if (await_answer(c, &p, MSSO_METHOD_HELLO, deadline, err) != 0) { /* (a hello is never idle) */
        close_connection(c, NULL);
        return -1;
    }
    return 0;
}

/* A connection for the next call: the current one unless it was closed, or belongs to the
 * parent of this process. */
static int ensure_connected(msso_client *c, msso_error *err) {
    forget_after_fork(c);
    if (c->fd >= 0 && now_ms() - c->last_read_ms > QUIET_MS) {
        /* Read what came meanwhile: the daemon's goodbye (TimedOut) and its end, or signals. */
        pending none = { 0 };
        int read;
        while (c->fd >= 0 && (read = read_some(c, 0)) != 0) {
            if (read < 0) close_connection(c, NULL);
            else handle_input(c, &none, NULL);
        }
    }
    return c->fd >= 0 ? 0 : open_connection(c, err);
}

static int begin(msso_client *c, frame *f, const char *method, msso_error *err) {
    clear_error(err);
    if (!c) {
        set_error(err, MSSO_E_BAD_REQUEST, "no msso client");
        return -1;
    }
    if (ensure_connected(c, err) != 0) return -1;
    frame_begin(c, f, c->out, OUT_CAPACITY, method);
    return 0;
}

/* Sends the call and waits for its answer (without a deadline when `on_prompt` is given: a login
 * that waits for the user, which the daemon bounds): 0, -1, or -2 when it was never read (the
 * connection had ended, or ended for idleness as the call came) and may be sent again. */
static int finish(msso_client *c, frame *f, reader read, void *out, msso_prompt_fn on_prompt, void *context, msso_error *err) {
    long deadline = deadline_after(on_prompt ? -1 : c->timeout_ms);
    int retry, subscribe = strcmp(f->method, MSSO_METHOD_SUBSCRIBE) == 0;
    if (send_frame(c, f, deadline, &retry, err) != 0) {
        if (!retry) return -1;
        /* The connection had ended before the call left (the daemon restarted, say): nothing of
         * it was sent, so the caller builds it again (the frame was wiped) for a new connection. */
        set_error(err, MSSO_E_BROKER_UNREACHABLE, "the connection to the msso broker was lost; is mssod still running?");
        close_connection(c, NULL);
        return -2;
    }
    pending p = { .serial = f->serial, .read = read, .out = out, .on_prompt = on_prompt, .context = context };
    c->subscribing = subscribe; /* (await_answer queues the signals that come with the answer) */
    int answered = await_answer(c, &p, f->method, deadline, err);
    c->subscribing = 0;
    if (answered == -2) return -2;
    if (answered == 0 && subscribe) c->subscribed = 1;
    return answered;
}

/* Each verb builds its frame in a function of its own, so that a call the daemon never read (its
 * connection had ended, or ended for idleness as it came) is built and sent once more, on a new
 * connection. */
typedef void (*arguments)(frame *f, const void *values);

/* `as_account`: the call is about one session, of the client's account when it has one. */
static int call(msso_client *c, const char *method, arguments write, const void *values, int as_account, reader read,
                void *out, msso_prompt_fn on_prompt, void *context, msso_error *err) {
    for (int attempt = 0;; attempt++) {
        frame f;
        if (begin(c, &f, method, err) != 0) return -1;
        if (write) write(&f, values);
        if (as_account) json_call_string(&f.call, "account", c->account);
        int done = finish(c, &f, read, out, on_prompt, context, err);
        if (done != -2 || attempt == 1) return done == 0 ? 0 : -1;
    }
}

/* -- the API ---------------------------------------------------------------------------------- */

static char *default_path(void) {
    const char *explicit = secure_getenv(MSSO_SOCKET_ENV), *runtime = secure_getenv("XDG_RUNTIME_DIR");
    char *path = NULL;
    if (explicit && *explicit) path = strdup(explicit);
    else if (runtime && *runtime) {
        if (asprintf(&path, "%s/%s", runtime, MSSO_SOCKET_NAME) < 0) path = NULL;
    } else if (asprintf(&path, "/run/user/%u/%s", (unsigned)getuid(), MSSO_SOCKET_NAME) < 0) {
        path = NULL;
    }
    return path;
}

PUBLIC msso_client *msso_connect(const char *socket_path, msso_error *err) {
    clear_error(err);
    msso_client *c = calloc(1, sizeof *c);
    const char *account = secure_getenv(MSSO_ACCOUNT_ENV);
    if (c) {
        c->fd = c->events = c->wake = -1;
        c->timeout_ms = DEFAULT_TIMEOUT_MS;
        c->path = socket_path ? strdup(socket_path) : default_path();
        c->in = malloc(IN_CAPACITY);
        c->out = malloc(OUT_CAPACITY);
        c->account = account && *account ? strdup(account) : NULL;
    }
    if (!c || !c->path || !c->in || !c->out || (account && *account && !c->account)) {
        set_error(err, MSSO_E_INTERNAL, "out of memory");
        msso_close(c);
        return NULL;
    }
    if (open_connection(c, err) != 0) {
        msso_close(c);
        return NULL;
    }
    return c;
}

PUBLIC void msso_close(msso_client *c) {
    if (!c) return;
    forget_after_fork(c); /* a forked child's copies: the parent's epoll set and eventfd are left alone */
    close_connection(c, NULL);
    free_queue(c);
    if (c->events >= 0) close(c->events);
    if (c->wake >= 0) close(c->wake);
    if (c->in) explicit_bzero(c->in, IN_CAPACITY);
    if (c->out) explicit_bzero(c->out, OUT_CAPACITY);
    free(c->in);
    free(c->out);
    free(c->path);
    free(c->daemon);
    free(c->executable);
    free(c->account);
    json_doc_free(&c->doc);
    free(c);
}

PUBLIC void msso_set_timeout(msso_client *c, int milliseconds) {
    if (c) c->timeout_ms = milliseconds;
}

/* AccountName.isValid (Sources/MSSOProtocol/AccountName.swift): 1 to 64 ASCII letters, digits,
 * `.`, `_`, `-`, `@` and `+`, beginning with a letter or digit. */
static int account_name_valid(const char *name) {
    size_t length = strlen(name);
    if (length < 1 || length > 64) return 0;
    for (size_t i = 0; i < length; i++) {
        unsigned char b = (unsigned char)name[i];
        int alphanumeric = (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9');
        if (!alphanumeric && (i == 0 || (b != '.' && b != '_' && b != '-' && b != '@' && b != '+'))) return 0;
    }
    return 1;
}

PUBLIC int msso_set_account(msso_client *c, const char *account, msso_error *err) {
    clear_error(err);
    if (!c) {
        set_error(err, MSSO_E_BAD_REQUEST, "no msso client");
        return -1;
    }
    if (account && !account_name_valid(account)) {
        set_error(err, MSSO_E_BAD_REQUEST, "that cannot name an account: use 1 to 64 letters, digits, `.`, `_`, `-`, `@` or `+`, "
                                           "beginning with a letter or digit");
        return -1;
    }
    char *copy = account ? strdup(account) : NULL;
    if (account && !copy) {
        set_error(err, MSSO_E_INTERNAL, "out of memory");
        return -1;
    }
    free(c->account);
    c->account = copy;
    return 0;
}

PUBLIC const char *msso_account(const msso_client *c) {
    return c ? c->account : NULL;
}

PUBLIC const char *msso_daemon(const msso_client *c) {
    return c && c->daemon ? c->daemon : "";
}

PUBLIC const char *msso_peer_executable(const msso_client *c) {
    return c ? c->executable : NULL;
}

static void group_arguments(frame *f, const void *group) {
    json_call_string(&f->call, "group", group);
}

PUBLIC int msso_status(msso_client *c, const char *group, msso_sessions *out, msso_error *err) {
    if (out) memset(out, 0, sizeof *out);
    msso_sessions ignored;
    /* Every account of the group (of every group), as `msso status` lists them: not the client's alone. */
    int done = call(c, MSSO_METHOD_STATUS, group_arguments, group, 0, read_sessions, out ? out : &ignored, NULL, NULL, err);
    if (done == 0 && !out) msso_sessions_free(&ignored);
    return done;
}

PUBLIC int msso_check(msso_client *c, const char *group, msso_session *out, msso_error *err) {
    if (out) memset(out, 0, sizeof *out);
    return call(c, MSSO_METHOD_CHECK, group_arguments, group, 1, read_one_session, out, NULL, NULL, err);
}

PUBLIC int msso_extend(msso_client *c, const char *group, msso_session *out, msso_error *err) {
    if (out) memset(out, 0, sizeof *out);
    return call(c, MSSO_METHOD_EXTEND, group_arguments, group, 1, read_one_session, out, NULL, NULL, err);
}

typedef struct {
    const char *group, *username, *password;
    size_t length;
} password_login;

static void password_arguments(frame *f, const void *values) {
    const password_login *login = values;
    json_call_string(&f->call, "group", login->group);
    json_call_string(&f->call, "flow", "password");
    json_call_string(&f->call, "username", login->username);
    json_call_field(&f->call, "password");
    json_quoted(&f->call.json, login->password, login->length);
}

PUBLIC int msso_login_password(msso_client *c, const char *group, const char *username, const char *password, size_t length,
                               msso_session *out, msso_error *err) {
    if (out) memset(out, 0, sizeof *out);
    if (!username || !password) {
        clear_error(err);
        set_error(err, MSSO_E_BAD_REQUEST, "a password login needs a username and a password");
        return -1;
    }
    password_login login = { group, username, password, length };
    return call(c, MSSO_METHOD_LOGIN, password_arguments, &login, 1, read_one_session, out, NULL, NULL, err);
}

static void device_arguments(frame *f, const void *group) {
    json_call_string(&f->call, "group", group);
    json_call_string(&f->call, "flow", "device");
}

static void browser_arguments(frame *f, const void *group) {
    json_call_string(&f->call, "group", group);
    json_call_string(&f->call, "flow", "browser");
}

/* The daemon waits for the user; without a callback nobody would see what to do. */
static void nobody_told(const msso_prompt *prompt, void *context) {
    (void)prompt, (void)context;
}

PUBLIC int msso_login_device(msso_client *c, const char *group, msso_prompt_fn on_prompt, void *context, msso_session *out,
                             msso_error *err) {
    if (out) memset(out, 0, sizeof *out);
    return call(c, MSSO_METHOD_LOGIN, device_arguments, group, 1, read_one_session, out, on_prompt ? on_prompt : nobody_told,
                context, err);
}

PUBLIC int msso_login_browser(msso_client *c, const char *group, msso_prompt_fn on_prompt, void *context, msso_session *out,
                              msso_error *err) {
    if (out) memset(out, 0, sizeof *out);
    return call(c, MSSO_METHOD_LOGIN, browser_arguments, group, 1, read_one_session, out, on_prompt ? on_prompt : nobody_told,
                context, err);
}

typedef struct {
    const char *group;
    int all;
} logout_values;

static void logout_arguments(frame *f, const void *values) {
    const logout_values *v = values;
    if (v->all) json_call_true(&f->call, "all");
    else json_call_string(&f->call, "group", v->group);
}

PUBLIC int msso_logout(msso_client *c, const char *group, int all, msso_logout_result *out, msso_error *err) {
    if (out) memset(out, 0, sizeof *out);
    if (all && group) {
        clear_error(err);
        set_error(err, MSSO_E_BAD_REQUEST, "logout: give a group or all, not both");
        return -1;
    }
    logout_values v = { group, all };
    return call(c, MSSO_METHOD_LOGOUT, logout_arguments, &v, !all, read_logout, out, NULL, NULL, err);
}

static void sign_arguments(frame *f, const void *values) {
    const msso_request *r = values;
    json_call_string(&f->call, "group", r->group);
    json_call_string(&f->call, "method", r->method);
    json_call_string(&f->call, "url", r->url);
    if (r->header_count) {
        json_call_field(&f->call, "headers");
        json_raw(&f->call.json, "[", 1);
        for (size_t i = 0; i < r->header_count; i++) {
            json_raw(&f->call.json, i ? ",[" : "[", i ? 2 : 1);
            json_cstring(&f->call.json, r->headers[i].name ? r->headers[i].name : "");
            json_raw(&f->call.json, ",", 1);
            json_cstring(&f->call.json, r->headers[i].value ? r->headers[i].value : "");
            json_raw(&f->call.json, "]", 1);
        }
        json_raw(&f->call.json, "]", 1);
    }
    if (r->body_sha256) {
        json_call_string(&f->call, "bodySHA256", r->body_sha256);
    } else if (r->body && r->body_length) {
        unsigned char digest[32];
        char encoded[45];
        sha256(r->body, r->body_length, digest);
        base64(digest, sizeof digest, encoded);
        json_call_string(&f->call, "bodySHA256", encoded);
    }
    json_call_string(&f->call, "dpopNonce", r->dpop_nonce);
}

PUBLIC int msso_sign(msso_client *c, const msso_request *request, msso_headers *out, msso_error *err) {
    if (out) memset(out, 0, sizeof *out);
    if (!request || !request->method || !request->url || !out || (request->header_count && !request->headers)) {
        clear_error(err);
        set_error(err, MSSO_E_BAD_REQUEST, "sign needs a request with a method and a url, and somewhere to put the headers");
        return -1;
    }
    return call(c, MSSO_METHOD_SIGN, sign_arguments, request, 1, read_headers, out, NULL, NULL, err);
}

typedef struct {
    const char *group, *resource;
    int renew;
} token_values;

static void token_arguments(frame *f, const void *values) {
    const token_values *v = values;
    json_call_string(&f->call, "group", v->group);
    if (v->renew) json_call_true(&f->call, "renew");
    json_call_string(&f->call, "resource", v->resource);
}

PUBLIC int msso_token(msso_client *c, const char *group, const char *resource, int renew, msso_access_token *out,
                      msso_error *err) {
    if (out) memset(out, 0, sizeof *out);
    if (!out) {
        clear_error(err);
        set_error(err, MSSO_E_BAD_REQUEST, "token needs somewhere to put the token");
        return -1;
    }
    token_values v = { group, resource, renew };
    return call(c, MSSO_METHOD_TOKEN, token_arguments, &v, 1, read_token, out, NULL, NULL, err);
}

typedef struct {
    const char *const *groups;
    size_t count;
} group_list;

static void subscribe_arguments(frame *f, const void *values) {
    const group_list *list = values;
    if (!list->groups) return;
    json_call_field(&f->call, "groups");
    json_raw(&f->call.json, "[", 1);
    for (size_t i = 0; i < list->count; i++) {
        if (i) json_raw(&f->call.json, ",", 1);
        json_cstring(&f->call.json, list->groups[i] ? list->groups[i] : "");
    }
    json_raw(&f->call.json, "]", 1);
}

PUBLIC int msso_subscribe(msso_client *c, const char *const *groups, size_t count, msso_error *err) {
    group_list list = { groups, count };
    return call(c, MSSO_METHOD_SUBSCRIBE, subscribe_arguments, &list, 1, read_group_list, NULL, NULL, NULL, err);
}

PUBLIC int msso_events_fd(msso_client *c, msso_error *err) {
    clear_error(err);
    if (!c) {
        set_error(err, MSSO_E_BAD_REQUEST, "no msso client");
        return -1;
    }
    forget_after_fork(c);
    if (c->events >= 0) return c->events;
    c->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    c->events = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event watch = { .events = EPOLLIN };
    if (c->wake < 0 || c->events < 0 || epoll_ctl(c->events, EPOLL_CTL_ADD, c->wake, &watch) != 0 ||
        (c->fd >= 0 && epoll_ctl(c->events, EPOLL_CTL_ADD, c->fd, &watch) != 0)) {
        set_error(err, MSSO_E_INTERNAL, "no descriptor for events: %s", strerror(errno));
        if (c->wake >= 0) close(c->wake);
        if (c->events >= 0) close(c->events);
        c->wake = c->events = -1;
        return -1;
    }
    if (c->queued_count) wake_set(c, 1);
    return c->events;
}

PUBLIC int msso_next_event(msso_client *c, int timeout_ms, msso_event *out, msso_error *err) {
    clear_error(err);
    if (out) memset(out, 0, sizeof *out);
    if (!c || !out) {
        set_error(err, MSSO_E_BAD_REQUEST, "next_event needs a client and somewhere to put the event");
        return -1;
    }
    forget_after_fork(c);
    long deadline = deadline_after(timeout_ms);
    for (;;) {
        if (c->head) { /* what came before the connection ended comes first */
            queued *q = c->head;
            *out = q->event;
            c->head = q->next;
            if (!c->head) c->tail = NULL;
            c->queued_bytes -= q->bytes;
            free(q);
            if (--c->queued_count == 0) wake_set(c, 0);
            return 1;
        }
        if (c->lost) {
            c->lost = 0;
            if (err) *err = c->lost_error;
            return -1;
        }
        if (c->fd < 0 || !c->subscribed) {
            set_error(err, MSSO_E_BROKER_UNREACHABLE, "not subscribed to any events: call msso_subscribe first");
            return -1;
        }
        pending none = { 0 };
        if (handle_input(c, &none, err) == BROKEN) continue; /* reported through c->lost */
        if (c->head) continue;
        int read = read_some(c, deadline);
        if (read == 0) return 0;
        if (read < 0) connection_lost(c, NULL);
    }
}

PUBLIC int msso_call(msso_client *c, const char *method, const char *args, char **result, msso_error *err);

typedef struct {
    const char *text;
    size_t length;
} raw_arguments;

static void raw_object_arguments(frame *f, const void *values) {
    const raw_arguments *raw = values;
    /* The object's members, without its braces: finish() closes the object it opened. */
    const char *open = memchr(raw->text, '{', raw->length), *close = raw->text + raw->length;
    while (close > open && *--close != '}') {}
    json_raw(&f->call.json, open + 1, (size_t)(close - open - 1));
    f->call.fields = 1;
}

PUBLIC int msso_call(msso_client *c, const char *method, const char *args, char **result, msso_error *err) {
    if (result) *result = NULL;
    clear_error(err);
    if (!c || !method || !json_valid_utf8(method, strlen(method))) {
        set_error(err, MSSO_E_BAD_REQUEST, "call needs a client and a method name");
        return -1;
    }
    raw_arguments raw = { args ? args : "{}", strlen(args ? args : "{}") };
    json_doc doc = { 0 };
    int parsed = json_parse(&doc, raw.text, raw.length);
    json_doc_free(&doc);
    if (parsed != 0) {
        set_error(err, MSSO_E_BAD_REQUEST, "the arguments of %s are not a JSON object", method);
        return -1;
    }
    return call(c, method, raw_object_arguments, &raw, 0, read_raw, result, NULL, NULL, err);
}

/* -- freeing ------------------------------------------------------------------------------------ */

PUBLIC void msso_session_free(msso_session *s) {
    if (!s) return;
    free(s->group);
    free(s->issuer);
    free(s->username);
    memset(s, 0, sizeof *s);
}

PUBLIC void msso_sessions_free(msso_sessions *s) {
    if (!s) return;
    for (size_t i = 0; i < s->count; i++) msso_session_free(&s->items[i]);
    free(s->items);
    memset(s, 0, sizeof *s);
}

PUBLIC void msso_logout_result_free(msso_logout_result *r) {
    if (!r) return;
    for (size_t i = 0; i < r->logged_out_count; i++) free(r->logged_out[i]);
    for (size_t i = 0; i < r->not_revoked_count; i++) {
        free(r->not_revoked[i].group);
        free(r->not_revoked[i].reason);
    }
    free(r->logged_out);
    free(r->not_revoked);
    memset(r, 0, sizeof *r);
}

PUBLIC void msso_headers_free(msso_headers *h) {
    if (!h) return;
    for (size_t i = 0; i < h->count; i++) {
        wipe_free((char *)h->items[i].name);
        wipe_free((char *)h->items[i].value);
    }
    free(h->items);
    memset(h, 0, sizeof *h);
}

PUBLIC void msso_access_token_free(msso_access_token *t) {
    if (!t) return;
    wipe_free(t->access_token);
    free(t->header);
    memset(t, 0, sizeof *t);
}

PUBLIC void msso_event_free(msso_event *e) {
    if (!e) return;
    msso_session_free(&e->status);
    memset(e, 0, sizeof *e);
}

PUBLIC void msso_string_free(char *text) {
    wipe_free(text);
}
