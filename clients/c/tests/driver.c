/* The test driver of libmsso (Tests/e2e/test_c_library.py): reads commands from standard input,
 * one per line, fields separated by tabs, runs each on one msso_client, and answers each with one
 * line of JSON on standard output: {"ok": true, …} or {"ok": false, "code", "name", "exitStatus",
 * "message"}. A login's prompt comes first as a line of its own, {"prompt": {…}}.
 *
 *   connect [PATH]            status [GROUP]      check [GROUP]      extend [GROUP]
 *   login-password GROUP|- USER PASSWORD          login-device GROUP|-    login-browser GROUP|-
 *   logout GROUP|-|all        sign METHOD URL [group=G] [nonce=N] [header=NAME:VALUE]… [body=TEXT]
 *   token [group=G] [resource=URL] [renew]        subscribe [GROUP]…  next TIMEOUT-MS
 *   poll TIMEOUT-MS (the events descriptor)       call METHOD [ARGS-JSON]    timeout MS
 *   fork-sign URL (a forked child signs)          errors (the table)   pid    close
 *   account [NAME|-] (msso_set_account; none: only say which, msso_account)
 */
#define _GNU_SOURCE
#include "msso.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static msso_client *client;

static void quoted(const char *text) {
    if (!text) {
        fputs("null", stdout);
        return;
    }
    putchar('"');
    for (const unsigned char *s = (const unsigned char *)text; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if (*s < 0x20) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

static void number(double value) {
    printf("%.6f", value);
}

static void session(const msso_session *s) {
    printf("{\"group\":");
    quoted(s->group);
    printf(",\"state\":");
    quoted(msso_state_name(s->state));
    printf(",\"issuer\":");
    quoted(s->issuer);
    printf(",\"username\":");
    quoted(s->username);
    printf(",\"loggedInAt\":");
    number(s->logged_in_at);
    printf(",\"sessionExpiresAt\":");
    number(s->session_expires_at);
    printf(",\"sessionMaxAt\":");
    number(s->session_max_at);
    printf(",\"accessTokenExpiresAt\":");
    number(s->access_token_expires_at);
    printf(",\"admin\":%s,\"locked\":%s}", s->admin ? "true" : "false", s->locked ? "true" : "false");
}

static void failed(const msso_error *err) {
    printf("{\"ok\":false,\"code\":%d,\"name\":", err->code);
    quoted(err->name);
    printf(",\"exitStatus\":%d,\"message\":", err->exit_status);
    quoted(err->message);
    printf("}\n");
}

static void prompted(const msso_prompt *p, void *context) {
    printf("{\"prompt\":{\"flow\":");
    quoted(context);
    printf(",\"url\":");
    quoted(p->url);
    printf(",\"urlComplete\":");
    quoted(p->url_complete);
    printf(",\"userCode\":");
    quoted(p->user_code);
    printf(",\"expiresAt\":");
    number(p->expires_at);
    printf(",\"joined\":%s}}\n", p->joined ? "true" : "false");
    fflush(stdout);
}

static const char *group_of(const char *field) {
    return field && strcmp(field, "-") != 0 ? field : NULL;
}

/* The value of `key=` among the fields, or NULL. */
static const char *option(char **fields, int count, const char *key) {
    size_t length = strlen(key);
    for (int i = 0; i < count; i++)
        if (strncmp(fields[i], key, length) == 0 && fields[i][length] == '=') return fields[i] + length + 1;
    return NULL;
}

static int sign(char **f, int n, msso_error *err) {
    msso_header headers[16];
    size_t count = 0;
    for (int i = 3; i < n && count < 16; i++) {
        if (strncmp(f[i], "header=", 7) != 0) continue;
        char *colon = strchr(f[i] + 7, ':');
        if (!colon) continue;
        *colon = '\0';
        headers[count++] = (msso_header){ f[i] + 7, colon + 1 + (colon[1] == ' ') };
    }
    const char *body = option(f + 3, n - 3, "body");
    msso_request request = { .method = f[1], .url = f[2], .headers = headers, .header_count = count, .body = body,
                             .body_length = body ? strlen(body) : 0, .group = option(f + 3, n - 3, "group"),
                             .dpop_nonce = option(f + 3, n - 3, "nonce") };
    msso_headers signed_headers;
    if (msso_sign(client, &request, &signed_headers, err) != 0) return -1;
    printf("{\"ok\":true,\"headers\":[");
    for (size_t i = 0; i < signed_headers.count; i++) {
        printf(i ? ",[" : "[");
        quoted(signed_headers.items[i].name);
        putchar(',');
        quoted(signed_headers.items[i].value);
        putchar(']');
    }
    printf("]}\n");
    msso_headers_free(&signed_headers);
    return 0;
}

static int event(int timeout, msso_error *err) {
    msso_event e;
    int got = msso_next_event(client, timeout, &e, err);
    if (got < 0) return -1;
    if (got == 0) {
        printf("{\"ok\":true,\"event\":null}\n");
        return 0;
    }
    printf("{\"ok\":true,\"event\":{\"signal\":%d,\"name\":", e.signal);
    quoted(e.name);
    printf(",\"status\":");
    session(&e.status);
    printf("}}\n");
    msso_event_free(&e);
    return 0;
}

static int run(char **f, int n, msso_error *err) {
    const char *verb = f[0], *arg = n > 1 ? f[1] : NULL;
    if (strcmp(verb, "connect") == 0) {
        msso_close(client);
        if (!(client = msso_connect(arg, err))) return -1;
        printf("{\"ok\":true,\"daemon\":");
        quoted(msso_daemon(client));
        printf(",\"executable\":");
        quoted(msso_peer_executable(client));
        printf("}\n");
    } else if (strcmp(verb, "status") == 0) {
        msso_sessions all;
        if (msso_status(client, group_of(arg), &all, err) != 0) return -1;
        printf("{\"ok\":true,\"locked\":%s,\"sessions\":[", all.locked ? "true" : "false");
        for (size_t i = 0; i < all.count; i++) {
            if (i) putchar(',');
            session(&all.items[i]);
        }
        printf("]}\n");
        msso_sessions_free(&all);
    } else if (strcmp(verb, "check") == 0 || strcmp(verb, "extend") == 0 || strncmp(verb, "login-", 6) == 0) {
        msso_session s;
        int done;
        if (strcmp(verb, "check") == 0) done = msso_check(client, group_of(arg), &s, err);
        else if (strcmp(verb, "extend") == 0) done = msso_extend(client, group_of(arg), &s, err);
        else if (strcmp(verb, "login-device") == 0) done = msso_login_device(client, group_of(arg), prompted, "device", &s, err);
        else if (strcmp(verb, "login-browser") == 0) done = msso_login_browser(client, group_of(arg), prompted, "browser", &s, err);
        else if (strcmp(verb, "login-password") == 0 && n == 4) {
            done = msso_login_password(client, group_of(arg), f[2], f[3], strlen(f[3]), &s, err);
            explicit_bzero(f[3], strlen(f[3])); /* the caller wipes its buffer */
        } else return 1;
        if (done != 0) return -1;
        printf("{\"ok\":true,\"session\":");
        session(&s);
        printf("}\n");
        msso_session_free(&s);
    } else if (strcmp(verb, "logout") == 0) {
        msso_logout_result r;
        int all = arg && strcmp(arg, "all") == 0;
        if (msso_logout(client, all ? NULL : group_of(arg), all, &r, err) != 0) return -1;
        printf("{\"ok\":true,\"loggedOut\":[");
        for (size_t i = 0; i < r.logged_out_count; i++) {
            if (i) putchar(',');
            quoted(r.logged_out[i]);
        }
        printf("],\"revoked\":%d,\"notRevoked\":%zu}\n", r.revoked, r.not_revoked_count);
        msso_logout_result_free(&r);
    } else if (strcmp(verb, "sign") == 0 && n >= 3) {
        return sign(f, n, err);
    } else if (strcmp(verb, "token") == 0) {
        msso_access_token t;
        int renew = 0;
        for (int i = 1; i < n; i++) renew |= strcmp(f[i], "renew") == 0;
        if (msso_token(client, option(f + 1, n - 1, "group"), option(f + 1, n - 1, "resource"), renew, &t, err) != 0) return -1;
        printf("{\"ok\":true,\"accessToken\":");
        quoted(t.access_token);
        printf(",\"header\":");
        quoted(t.header);
        printf(",\"expiresAt\":");
        number(t.expires_at);
        printf("}\n");
        msso_access_token_free(&t);
    } else if (strcmp(verb, "subscribe") == 0) {
        if (msso_subscribe(client, n > 1 ? (const char *const *)f + 1 : NULL, (size_t)(n - 1), err) != 0) return -1;
        printf("{\"ok\":true}\n");
    } else if (strcmp(verb, "next") == 0 && arg) {
        return event(atoi(arg), err);
    } else if (strcmp(verb, "poll") == 0 && arg) {
        int fd = msso_events_fd(client, err);
        if (fd < 0) return -1;
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int ready = poll(&p, 1, atoi(arg));
        printf("{\"ok\":true,\"readable\":%s,\"fd\":%d}\n", ready == 1 && (p.revents & POLLIN) ? "true" : "false", fd);
    } else if (strcmp(verb, "call") == 0 && arg) {
        char *result;
        if (msso_call(client, arg, n > 2 ? f[2] : NULL, &result, err) != 0) return -1;
        printf("{\"ok\":true,\"result\":%s}\n", result);
        msso_string_free(result);
    } else if (strcmp(verb, "account") == 0) {
        if (arg && msso_set_account(client, group_of(arg), err) != 0) return -1;
        printf("{\"ok\":true,\"account\":");
        quoted(msso_account(client));
        printf("}\n");
    } else if (strcmp(verb, "timeout") == 0 && arg) {
        msso_set_timeout(client, atoi(arg));
        printf("{\"ok\":true}\n");
    } else if (strcmp(verb, "fork-sign") == 0 && arg) {
        /* Three lines: the child's sign, the child's pid, the parent's. */
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            char *fields[] = { "sign", "GET", (char *)arg };
            msso_error child_err;
            if (sign(fields, 3, &child_err) != 0) failed(&child_err);
            printf("{\"child\":%d}\n", getpid());
            fflush(stdout);
            _exit(0);
        }
        int status;
        waitpid(child, &status, 0);
        printf("{\"ok\":true,\"parent\":%d}\n", getpid());
    } else if (strcmp(verb, "errors") == 0) {
        printf("{\"ok\":true,\"errors\":[");
        for (int code = 1; code < MSSO_CODE_COUNT_; code++)
            printf("%s[%d,\"%s\",%d]", code > 1 ? "," : "", code, msso_error_name(code), msso_exit_status(code));
        printf("],\"ok_name\":\"%s\",\"ok_status\":%d,\"out_of_range\":[\"%s\",%d]}\n", msso_error_name(MSSO_OK),
               msso_exit_status(MSSO_OK), msso_error_name(MSSO_CODE_COUNT_), msso_exit_status(MSSO_CODE_COUNT_));
    } else if (strcmp(verb, "pid") == 0) {
        printf("{\"ok\":true,\"pid\":%d}\n", getpid());
    } else if (strcmp(verb, "close") == 0) {
        msso_close(client);
        client = NULL;
        printf("{\"ok\":true}\n");
    } else {
        return 1;
    }
    return 0;
}

int main(void) {
    char *line = NULL;
    size_t size = 0;
    ssize_t length;
    while ((length = getline(&line, &size, stdin)) > 0) {
        if (line[length - 1] == '\n') line[--length] = '\0';
        char *fields[64];
        int n = 0;
        for (char *field = strtok(line, "\t"); field && n < 64; field = strtok(NULL, "\t")) fields[n++] = field;
        if (n == 0) continue;
        msso_error err;
        int done = run(fields, n, &err);
        if (done < 0) failed(&err);
        else if (done > 0) printf("{\"ok\":false,\"usage\":true}\n");
        explicit_bzero(line, (size_t)length);
        fflush(stdout);
    }
    free(line);
    msso_close(client);
    return 0;
}
