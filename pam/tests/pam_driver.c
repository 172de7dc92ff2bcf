/* A PAM application for tests: loads the real pam_msso through libpam with a private config
 * directory (pam_start_confdir), answers prompts with a given password, and prints every message
 * and result. `--cycles N` repeats pam_start/…/pam_end N times and reports memory, as sudo, gdm
 * and polkit do in one long-lived process.
 *
 *   pam_driver CONFDIR SERVICE USER [--password PW] [--cycles N] ACTION…
 *   ACTION: authenticate | acct_mgmt | open_session | close_session */
#include <security/pam_appl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *password = "";
static int quiet_messages = 0;

static int converse(int n, const struct pam_message **messages, struct pam_response **responses, void *data) {
    (void)data;
    struct pam_response *out = calloc((size_t)n, sizeof *out);
    if (!out) return PAM_BUF_ERR;
    for (int i = 0; i < n; i++) {
        const struct pam_message *m = messages[i];
        if (m->msg_style == PAM_PROMPT_ECHO_OFF || m->msg_style == PAM_PROMPT_ECHO_ON) {
            out[i].resp = strdup(password);
        } else if (!quiet_messages) {
            printf("%s: %s\n", m->msg_style == PAM_ERROR_MSG ? "error" : "info", m->msg);
        }
    }
    *responses = out;
    return PAM_SUCCESS;
}

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) kb = atol(line + 6);
    if (f) fclose(f);
    return kb;
}

static int run(const char *confdir, const char *service, const char *user, char **actions, int count, int report) {
    struct pam_conv conversation = { converse, NULL };
    pam_handle_t *pamh = NULL;
    int rc = pam_start_confdir(service, user, &conversation, confdir, &pamh);
    if (rc != PAM_SUCCESS) {
        printf("pam_start: %s\n", pam_strerror(pamh, rc));
        return 1;
    }
    for (int i = 0; i < count; i++) {
        struct timespec start, end;
        clock_gettime(CLOCK_MONOTONIC, &start);
        const char *a = actions[i];
        if (strcmp(a, "authenticate") == 0) rc = pam_authenticate(pamh, 0);
        else if (strcmp(a, "acct_mgmt") == 0) rc = pam_acct_mgmt(pamh, 0);
        else if (strcmp(a, "open_session") == 0) rc = pam_open_session(pamh, 0);
        else if (strcmp(a, "close_session") == 0) rc = pam_close_session(pamh, 0);
        else { printf("unknown action %s\n", a); return 2; }
        clock_gettime(CLOCK_MONOTONIC, &end);
        if (report)
            printf("%s: %s (%d) in %ld ms\n", a, pam_strerror(pamh, rc), rc,
                   (end.tv_sec - start.tv_sec) * 1000 + (end.tv_nsec - start.tv_nsec) / 1000000);
    }
    pam_end(pamh, rc);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s CONFDIR SERVICE USER [--password PW] [--cycles N] ACTION...\n", argv[0]);
        return 2;
    }
    int i = 4, cycles = 0;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--password") == 0 && i + 1 < argc) password = argv[++i];
        else if (strcmp(argv[i], "--cycles") == 0 && i + 1 < argc) cycles = atoi(argv[++i]);
        else break;
    }
    if (!cycles) return run(argv[1], argv[2], argv[3], argv + i, argc - i, 1);
    quiet_messages = 1;
    long warm = 0;
    for (int c = 1; c <= cycles; c++) {
        if (run(argv[1], argv[2], argv[3], argv + i, argc - i, 0) != 0) return 1;
        if (c == 50) warm = rss_kb();
    }
    printf("cycles=%d rss_kb_after_50=%ld rss_kb_end=%ld\n", cycles, warm, rss_kb());
    return 0;
}
