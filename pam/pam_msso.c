/* pam_msso: the session-start side of msso. Thin by design: it asks the user's broker (mssod)
 * and talks to the user; all logic stays in the broker.
 *
 *   auth      with `login`: keeps the password the stack read, for the session's SSO login
 *   account   with `enforce`: fails unless every group's SSO session is valid
 *   session   open: SSO login with the kept password (with `login`), then one line per group
 *             saying whether the SSO session is valid; close: logout (with `logout_on_close`)
 *
 * Arguments: group=NAME (repeatable; none means every configured group), timeout=MS (default
 * 1000), socket=PATH (default /run/user/%u/msso/broker.sock, %u = the user's uid), login,
 * try_first_pass, enforce, logout_on_close, quiet, debug.  See the README for the PAM lines. */
#include "broker.h"

#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

#include <security/pam_ext.h>
#include <security/pam_modules.h>

#define PUBLIC __attribute__((visibility("default")))
#define MAX_GROUPS 32
#define PASSWORD_KEY "pam_msso_password"

typedef struct {
    const char *groups[MAX_GROUPS];
    int group_count;
    int timeout_ms;
    const char *socket_template;
    int login, try_first_pass, enforce, logout_on_close, quiet, debug;
} options;

static int parse_options(pam_handle_t *pamh, int argc, const char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->timeout_ms = 1000;
    o->socket_template = "/run/user/%u/msso/broker.sock";
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "group=", 6) == 0 && o->group_count < MAX_GROUPS) o->groups[o->group_count++] = a + 6;
        else if (strncmp(a, "timeout=", 8) == 0 && atoi(a + 8) > 0) o->timeout_ms = atoi(a + 8);
        else if (strncmp(a, "socket=", 7) == 0) o->socket_template = a + 7;
        else if (strcmp(a, "login") == 0) o->login = 1;
        else if (strcmp(a, "try_first_pass") == 0) o->try_first_pass = 1;
        else if (strcmp(a, "use_first_pass") == 0) o->try_first_pass = 0;
        else if (strcmp(a, "enforce") == 0) o->enforce = 1;
        else if (strcmp(a, "logout_on_close") == 0) o->logout_on_close = 1;
        else if (strcmp(a, "quiet") == 0) o->quiet = 1;
        else if (strcmp(a, "debug") == 0) o->debug = 1;
        else pam_syslog(pamh, LOG_ERR, "unknown or invalid argument: %s", a);
    }
    return 0;
}

/* The user's uid and broker socket path. */
static int locate(pam_handle_t *pamh, const options *o, uid_t *uid, char *path, size_t size) {
    const char *user = NULL;
    if (pam_get_user(pamh, &user, NULL) != PAM_SUCCESS || !user) return -1;
    struct passwd *pw = getpwnam(user);
    if (!pw) return -1;
    *uid = pw->pw_uid;
    char uid_text[16];
    snprintf(uid_text, sizeof uid_text, "%u", (unsigned)pw->pw_uid);
    size_t used = 0;
    for (const char *t = o->socket_template; *t && used + 16 < size; t++) {
        if (t[0] == '%' && t[1] == 'u') {
            used += (size_t)snprintf(path + used, size - used, "%s", uid_text);
            t++;
        } else {
            path[used++] = *t;
        }
    }
    path[used] = '\0';
    return 0;
}

static msso_status open_broker(pam_handle_t *pamh, const options *o, msso_broker *b) {
    uid_t uid;
    char path[256];
    if (locate(pamh, o, &uid, path, sizeof path) != 0) return MSSO_UNREACHABLE;
    msso_status status = msso_broker_open(b, path, uid, o->timeout_ms);
    if (status != MSSO_OK && o->debug) pam_syslog(pamh, LOG_DEBUG, "no broker of uid %u at %s", (unsigned)uid, path);
    return status;
}

static void say(pam_handle_t *pamh, int style, const char *format, ...) {
    char text[512];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof text, format, args);
    va_end(args);
    pam_prompt(pamh, style, NULL, "%s", text);
}

static const char *field(json_object *object, const char *key) {
    json_object *value;
    return json_object_object_get_ex(object, key, &value) ? json_object_get_string(value) : NULL;
}

static json_object *group_args(const char *group) {
    json_object *args = json_object_new_object();
    if (group) json_object_object_add(args, "group", json_object_new_string(group));
    return args;
}

/* The named groups' sessions (or every configured group's), as an array of SessionStatus. */
static msso_status statuses(msso_broker *b, const options *o, json_object **out) {
    *out = json_object_new_array();
    const int count = o->group_count ? o->group_count : 1;
    for (int i = 0; i < count; i++) {
        json_object *result = NULL;
        msso_status status = msso_broker_call(b, "status", group_args(o->group_count ? o->groups[i] : NULL), &result);
        json_object *groups;
        if (status == MSSO_OK && json_object_object_get_ex(result, "groups", &groups)) {
            for (size_t j = 0; j < json_object_array_length(groups); j++)
                json_object_array_add(*out, json_object_get(json_object_array_get_idx(groups, j)));
            json_object_put(result);
        } else {
            json_object_put(*out);
            *out = result; /* the error, for the caller to show */
            return status == MSSO_OK ? MSSO_UNREACHABLE : status;
        }
    }
    return MSSO_OK;
}

/* One line for a group's SSO session, in the user's words. */
static void tell(pam_handle_t *pamh, const options *o, json_object *session) {
    const char *group = field(session, "group"), *state = field(session, "state");
    json_object *end;
    char until[32] = "?";
    if (json_object_object_get_ex(session, "sessionExpiresAt", &end)) {
        time_t t = (time_t)json_object_get_double(end);
        struct tm tm;
        strftime(until, sizeof until, "%H:%M", localtime_r(&t, &tm));
    }
    if (state && strcmp(state, "valid") == 0) {
        if (!o->quiet) say(pamh, PAM_TEXT_INFO, "SSO %s: valid until %s.", group, until);
    } else if (state && strcmp(state, "expired") == 0) {
        say(pamh, PAM_TEXT_INFO, "SSO %s: expired at %s; run `msso login --group %s`.", group, until, group);
    } else {
        say(pamh, PAM_TEXT_INFO, "SSO %s: not logged in; run `msso login --group %s`.", group, group);
    }
}

static void cleanup_password(pam_handle_t *pamh, void *data, int error_status) {
    (void)pamh;
    (void)error_status;
    if (data) {
        explicit_bzero(data, strlen(data));
        free(data);
    }
}

/* Logs the user in to each group with the password kept at auth, then forgets the password. */
static void login_with_kept_password(pam_handle_t *pamh, const options *o, msso_broker *b) {
    const void *data = NULL;
    if (pam_get_data(pamh, PASSWORD_KEY, &data) != PAM_SUCCESS || !data) return;
    const char *user = NULL;
    pam_get_user(pamh, &user, NULL);
    json_object *sessions = NULL;
    if (statuses(b, o, &sessions) == MSSO_OK) {
        for (size_t i = 0; i < json_object_array_length(sessions); i++) {
            const char *group = field(json_object_array_get_idx(sessions, i), "group");
            json_object *args = group_args(group);
            json_object *password = json_object_new_string(data);
            json_object_object_add(args, "flow", json_object_new_string("password"));
            json_object_object_add(args, "username", json_object_new_string(user));
            json_object_object_add(args, "password", json_object_get(password));
            json_object *result = NULL;
            msso_status status = msso_broker_call(b, "login", args, &result);
            if (status == MSSO_ERROR_REPLY) say(pamh, PAM_ERROR_MSG, "SSO %s: login failed: %s", group, field(result, "message"));
            else if (status != MSSO_OK) say(pamh, PAM_ERROR_MSG, "SSO %s: login failed: the broker did not answer in time.", group);
            explicit_bzero((char *)json_object_get_string(password), strlen(data));
            json_object_put(password);
            json_object_put(result);
        }
    }
    json_object_put(sessions);
    pam_set_data(pamh, PASSWORD_KEY, NULL, NULL); /* replacing runs the cleanup: wiped and freed */
}

/* Session open and account: the common path. Returns the PAM code for the account phase. */
static int check_sessions(pam_handle_t *pamh, const options *o, int enforcing) {
    msso_broker b;
    if (open_broker(pamh, o, &b) != MSSO_OK) {
        say(pamh, enforcing ? PAM_ERROR_MSG : PAM_TEXT_INFO,
            "SSO: the credential broker is not reachable, so the SSO session could not be checked.");
        return PAM_AUTHINFO_UNAVAIL;
    }
    if (o->login) login_with_kept_password(pamh, o, &b);
    json_object *sessions = NULL;
    msso_status status = statuses(&b, o, &sessions);
    int code = PAM_SUCCESS;
    if (status == MSSO_ERROR_REPLY) {
        say(pamh, enforcing ? PAM_ERROR_MSG : PAM_TEXT_INFO, "SSO: %s", field(sessions, "message"));
        code = PAM_AUTHINFO_UNAVAIL;
    } else if (status != MSSO_OK) {
        say(pamh, PAM_TEXT_INFO, "SSO: the credential broker did not answer in time.");
        code = PAM_AUTHINFO_UNAVAIL;
    } else {
        for (size_t i = 0; i < json_object_array_length(sessions); i++) {
            json_object *session = json_object_array_get_idx(sessions, i);
            tell(pamh, o, session);
            const char *state = field(session, "state");
            if (state && strcmp(state, "expired") == 0 && code == PAM_SUCCESS) code = PAM_ACCT_EXPIRED;
            else if (!state || strcmp(state, "valid") != 0) code = PAM_PERM_DENIED;
        }
    }
    json_object_put(sessions);
    msso_broker_close(&b);
    return code;
}

PUBLIC int pam_sm_authenticate(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)flags;
    options o;
    parse_options(pamh, argc, argv, &o);
    if (!o.login) return PAM_IGNORE;
    const void *item = NULL;
    pam_get_item(pamh, PAM_AUTHTOK, &item);
    const char *password = item;
    char *typed = NULL;
    /* try_first_pass: the stack kept no password (some modules do not publish it), so ask. */
    if ((!password || !*password) && o.try_first_pass && pam_prompt(pamh, PAM_PROMPT_ECHO_OFF, &typed, "Password: ") == PAM_SUCCESS)
        password = typed;
    if (password && *password) {
        char *kept = strdup(password);
        if (kept) pam_set_data(pamh, PASSWORD_KEY, kept, cleanup_password);
    }
    if (typed) {
        explicit_bzero(typed, strlen(typed));
        free(typed);
    }
    return PAM_IGNORE; /* this module never decides authentication */
}

PUBLIC int pam_sm_setcred(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)pamh, (void)flags, (void)argc, (void)argv;
    return PAM_IGNORE;
}

PUBLIC int pam_sm_acct_mgmt(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)flags;
    options o;
    parse_options(pamh, argc, argv, &o);
    if (!o.enforce) return PAM_IGNORE;
    /* Fails closed: a broker that cannot answer does not vouch for anything. */
    return check_sessions(pamh, &o, 1);
}

PUBLIC int pam_sm_open_session(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)flags;
    options o;
    parse_options(pamh, argc, argv, &o);
    check_sessions(pamh, &o, 0);
    return PAM_SUCCESS; /* telling, never blocking: `enforce` in the account phase blocks */
}

PUBLIC int pam_sm_close_session(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)flags;
    options o;
    parse_options(pamh, argc, argv, &o);
    if (!o.logout_on_close) return PAM_IGNORE;
    msso_broker b;
    if (open_broker(pamh, &o, &b) != MSSO_OK) return PAM_SUCCESS;
    json_object *args = json_object_new_object();
    if (o.group_count == 0) json_object_object_add(args, "all", json_object_new_boolean(1));
    for (int i = 0; i < (o.group_count ? o.group_count : 1); i++) {
        json_object *result = NULL;
        json_object *call_args = o.group_count ? group_args(o.groups[i]) : json_object_get(args);
        if (msso_broker_call(&b, "logout", call_args, &result) == MSSO_OK && !o.quiet)
            say(pamh, PAM_TEXT_INFO, "SSO: logged out.");
        json_object_put(result);
    }
    json_object_put(args);
    msso_broker_close(&b);
    return PAM_SUCCESS;
}
