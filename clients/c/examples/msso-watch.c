/* msso-watch: prints the SSO events of the user's groups as they happen, one line each, from a
 * poll(2) loop: what an app with an event loop of its own does (GLib, libuv, epoll: watch
 * msso_events_fd for input).
 *
 *   msso-watch [--count N] [GROUP]…     (no group: every group the program may use)
 *
 * Lines: `LoggedOut com.example.suite notLoggedIn`. It ends after N events, or with the broker's
 * sentence (and msso's exit status) when the connection is lost. */
#include "msso.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Names come from configuration files and identity providers: shown with control characters as
 * '?', so that none reaches the terminal as an escape sequence. */
static void show(const char *text) {
    for (const unsigned char *s = (const unsigned char *)text; *s; s++) {
        int c1 = s[0] == 0xC2 && s[1] >= 0x80 && s[1] <= 0x9F; /* U+0080 to U+009F */
        putchar(*s < 0x20 || *s == 0x7F || c1 ? '?' : *s);
        s += c1;
    }
}

int main(int argc, char **argv) {
    long count = -1;
    const char *groups[64];
    size_t group_count = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) count = atol(argv[++i]);
        else if (group_count < 64) groups[group_count++] = argv[i];
    }
    msso_error err;
    msso_client *broker = msso_connect(NULL, &err);
    if (!broker || msso_subscribe(broker, group_count ? groups : NULL, group_count, &err) != 0) {
        fprintf(stderr, "msso-watch: %s\n", err.message);
        return err.exit_status;
    }
    struct pollfd watch = { .fd = msso_events_fd(broker, &err), .events = POLLIN };
    if (watch.fd < 0) {
        fprintf(stderr, "msso-watch: %s\n", err.message);
        return err.exit_status;
    }
    /* Said once subscribed, so that whoever started it knows nothing is missed from here on. */
    printf("watching\n");
    fflush(stdout);
    while (count != 0) {
        if (poll(&watch, 1, -1) < 0) continue; /* a signal: poll again */
        msso_event event;
        int got;
        /* Every event that is there, then back to poll. */
        while (count != 0 && (got = msso_next_event(broker, 0, &event, &err)) == 1) {
            show(event.name);
            putchar(' ');
            show(event.status.group);
            printf(" %s\n", msso_state_name(event.status.state));
            fflush(stdout);
            msso_event_free(&event);
            if (count > 0) count--;
        }
        if (count != 0 && got < 0) {
            fprintf(stderr, "msso-watch: %s\n", err.message);
            msso_close(broker);
            return err.exit_status;
        }
    }
    msso_close(broker);
    return 0;
}
