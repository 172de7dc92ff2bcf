/* pam_msso: the session-start side of msso. Thin by design: it asks the user's broker (mssod)
 * and talks to the user; all logic stays in the broker.
 *
 *   auth      with `login`: keeps the password the stack read, for the session's SSO login
 *   account   with `enforce`: fails unless every group's default account's SSO session is
 *             valid, as said by the installed mssod (peer.c): any other answer fails closed
 *   session   open: SSO login with the kept password (with `login`; only to the installed mssod;
 *             into the account named like the login user where the group has one, else the
 *             group's default account), then one line per account of each group saying whether
 *             its SSO session is valid, marked as the broker's word only when it is not the
 *             installed mssod; close: logout (with `logout_on_close`) of every account of the
 *             named groups (or of every group)
 *
 * Arguments: group=NAME (repeatable; none means every configured group), timeout=MS (default
 * 1000), socket=PATH (default /run/user/%u/msso/broker.sock, %u = the user's uid), mssod=PATH
 * (the installed daemon, default MSSOD_PATH: only it gets the password or is believed by
 * `enforce`), login, try_first_pass,
 * enforce, logout_on_close, quiet, debug.  See docs/GUIDE.md ("At session start") for the PAM lines.
 *
 * Everything the broker sends is checked (replies.c) before use, and shown only through say(),
 * which replaces control characters: the module runs as root in sshd or login, and the broker is
 * a process of the user. */
#include "broker.h"
#include "msso_protocol.h"
#include "peer.h"
#include "replies.h"

#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

#include <security/pam_ext.h>
#include <security/pam_modules.h>

#ifndef MSSOD_PATH
#define MSSOD_PATH "/usr/local/bin/mssod" /* the Makefile sets it from PREFIX, as `make install` installs */
#endif

#define PUBLIC __attribute__((visibility("default")))
#define MAX_GROUPS 32
#define PASSWORD_KEY "pam_msso_password"

typedef struct {
    const char *groups[MAX_GROUPS];
    int group_count;
    int timeout_ms;
    const char *socket_template;
    const char *mssod;
    int login, try_first_pass, enforce, logout_on_close, quiet, debug;
} options;

static int parse_options(pam_handle_t *pamh, int argc, const char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->timeout_ms = 1000;
    o->socket_template = "/run/user/%u/msso/broker.sock";
    o->mssod = MSSOD_PATH;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "group=", 6) == 0 && o->group_count < MAX_GROUPS) o->groups[o->group_count++] = a + 6;
        else if (strncmp(a, "timeout=", 8) == 0 && atoi(a + 8) > 0) o->timeout_ms = atoi(a + 8);
        else if (strncmp(a, "socket=", 7) == 0) o->socket_template = a + 7;
        else if (strncmp(a, "mssod=", 6) == 0) o->mssod = a + 6;
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

/* The one way text reaches the user: group names and messages come from the broker, so control
 * characters (an escape sequence could rewrite the screen or the terminal's title) become '?'. */
static void say(pam_handle_t *pamh, int style, const char *format, ...) {
    char text[2048], shown[2048];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof text, format, args);
    va_end(args);
    msso_printable(shown, sizeof shown, text);
    pam_prompt(pamh, style, NULL, "%s", shown);
}

/* A call of `method` begun, with the argument `group` when there is one. */
static json_call *begin_for_group(msso_broker *b, const char *method, const char *group) {
    json_call *call = msso_broker_begin(b, method);
    json_call_string(call, "group", group);
    return call;
}

/* The named groups' sessions (or every configured group's), each checked. On MSSO_ERROR_REPLY,
 * error->message is the broker's, for the caller to show (the caller frees `error` in any case).
 * A reply that is not a list of well-formed SessionStatus is MSSO_MALFORMED. */
static msso_status statuses(msso_broker *b, const options *o, msso_sessions *sessions, msso_reply *error) {
    sessions->count = 0;
    const int count = o->group_count ? o->group_count : 1;
    for (int i = 0; i < count; i++) {
        begin_for_group(b, MSSO_METHOD_STATUS, o->group_count ? o->groups[i] : NULL);
        msso_status status = msso_broker_call(b, error);
        if (status == MSSO_OK && msso_read_status(&error->doc, error->result, sessions) != 0) status = MSSO_MALFORMED;
        if (status != MSSO_OK) return status;
    }
    return MSSO_OK;
}

/* "14:03", the local time of `t`; "?" when there is none. */
static void clock_time(char *out, size_t size, const msso_session *s) {
    struct tm tm;
    snprintf(out, size, "?");
    if (s->has_end && localtime_r(&s->end, &tm)) strftime(out, size, "%H:%M", &tm);
}

/* Whether the session is of the account named "default" (or of a broker without accounts): it is
 * named by its group alone, as `msso status` names it. */
static int unnamed_account(const msso_session *s) {
    return !s->account[0] || strcmp(s->account, MSSO_DEFAULT_ACCOUNT) == 0;
}

/* One line for one account of a group, in the user's words: the group's name, and the account's
 * unless it is the unnamed one ("G (account admin)", "G (account work, the default)"), with the
 * command's arguments that name it ("--group G --account admin"). */
static void tell(pam_handle_t *pamh, const options *o, const msso_session *s) {
    char until[32], name[MSSO_MAX_NAME + MSSO_MAX_ACCOUNT + 32], which[MSSO_MAX_NAME + MSSO_MAX_ACCOUNT + 32];
    clock_time(until, sizeof until, s);
    const char *g = s->group;
    if (unnamed_account(s)) {
        snprintf(name, sizeof name, "%s", g);
        snprintf(which, sizeof which, "--group %s", g);
    } else {
        snprintf(name, sizeof name, "%s (account %s%s)", g, s->account, s->is_default ? ", the default" : "");
        snprintf(which, sizeof which, "--group %s --account %s", g, s->account);
    }
    switch (s->state) {
    case MSSO_VALID:
        if (!o->quiet) say(pamh, PAM_TEXT_INFO, "SSO %s: valid until %s.", name, until);
        break;
    case MSSO_EXPIRED:
        say(pamh, PAM_TEXT_INFO, "SSO %s: expired at %s; run `msso login %s`.", name, until, which);
        break;
    case MSSO_CORRUPT:
        say(pamh, PAM_TEXT_INFO, "SSO %s: the stored SSO credential is damaged; run `msso logout %s`.", name, which);
        break;
    case MSSO_NOT_LOGGED_IN:
        say(pamh, PAM_TEXT_INFO, "SSO %s: not logged in; run `msso login %s`.", name, which);
        break;
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

/* Logs `user` in to `group` with the password (password grant), written straight into the call's
 * frame, which is wiped once sent (broker.c): into `account` when one is given, else into the
 * group's default account (the call names none). */
static void login_one(pam_handle_t *pamh, msso_broker *b, const char *group, const char *account, const char *user,
                      const char *password) {
    char name[MSSO_MAX_NAME + MSSO_MAX_ACCOUNT + 16];
    if (account) snprintf(name, sizeof name, "%s (account %s)", group, account);
    else snprintf(name, sizeof name, "%s", group);
    json_call *call = begin_for_group(b, MSSO_METHOD_LOGIN, group);
    if (account) json_call_string(call, "account", account);
    json_call_string(call, "flow", "password");
    json_call_string(call, "username", user);
    json_call_string(call, "password", password);
    msso_reply reply = { 0 };
    msso_status status = msso_broker_call(b, &reply);
    if (status == MSSO_ERROR_REPLY) say(pamh, PAM_ERROR_MSG, "SSO %s: login failed: %s", name, reply.message);
    else if (status == MSSO_UNSENDABLE) say(pamh, PAM_ERROR_MSG, "SSO %s: login failed: the user name or password is not UTF-8 text.", name);
    else if (status != MSSO_OK) say(pamh, PAM_ERROR_MSG, "SSO %s: login failed: the broker did not answer in time.", name);
    msso_reply_free(&reply);
}

static int any_admin_group(const msso_sessions *sessions) {
    for (size_t i = 0; i < sessions->count; i++)
        if (sessions->items[i].admin) return 1;
    return 0;
}

/* Whether an entry before the `i`th is of the same group (a group is logged in to once). */
static int group_seen_before(const msso_sessions *sessions, size_t i) {
    for (size_t j = 0; j < i; j++)
        if (strcmp(sessions->items[j].group, sessions->items[i].group) == 0) return 1;
    return 0;
}

/* Whether the group has an account named `name` (one the broker listed, so a valid name). */
static int group_has_account(const msso_sessions *sessions, const char *group, const char *name) {
    for (size_t i = 0; i < sessions->count; i++)
        if (strcmp(sessions->items[i].group, group) == 0 && strcmp(sessions->items[i].account, name) == 0) return 1;
    return 0;
}

/* Whether every byte read from the broker so far was written by the installed mssod (peer.c says
 * what that stops, and what not). If not, `why` says why, and so does syslog. Called after the
 * last read it vouches for.
 *
 * The check sees the writer as it is now, not as it was when it wrote: a process can write its
 * replies, then exec the genuine mssod before the check, while a child of it keeps the connection
 * to read the password. So the process checked must answer once more (a ping) after the check, and
 * be checked again, alive: mssod answers only connections it accepted, and a process that was
 * mssod at the first check is still mssod (exec does not turn it back into anything else). */
static int broker_trusted(pam_handle_t *pamh, const options *o, msso_broker *b, char *why, size_t size) {
    char shown[512];
    pid_t checked = b->writer;
    int trusted = msso_verify_peer(b->writer, b->writer_pidfd, o->mssod, why, size) == 0;
    if (trusted) {
        json_call_string(msso_broker_begin(b, MSSO_METHOD_PING), "data", "pam_msso");
        msso_reply reply = { 0 };
        msso_status answered = msso_broker_call(b, &reply);
        msso_reply_free(&reply);
        if (answered != MSSO_OK || b->writer != checked) {
            snprintf(why, size, "the broker's process did not answer again once checked");
            trusted = 0;
        } else {
            trusted = msso_verify_peer(b->writer, b->writer_pidfd, o->mssod, why, size) == 0;
        }
    }
    if (trusted) return 1;
    msso_printable(shown, sizeof shown, why);
    pam_syslog(pamh, LOG_WARNING, "the broker of uid %u is not the installed mssod: %s", (unsigned)b->uid, shown);
    return 0;
}

/* Logs the user in with the password kept at auth, then forgets the password. Only groups the
 * administrator defined get it: a group from the user's own config.toml names an issuer that
 * whoever can write that file (malware of the user included) chose. Others are skipped silently
 * (the broker refuses them to root too). Only the installed mssod gets it: 1 when the module said
 * it would not send it, and why. */
static int login_with_kept_password(pam_handle_t *pamh, const options *o, msso_broker *b) {
    const void *data = NULL;
    const char *user = NULL;
    char why[512];
    int refused = 0;
    if (pam_get_data(pamh, PASSWORD_KEY, &data) != PAM_SUCCESS || !data) return 0;
    msso_sessions sessions;
    msso_reply error = { 0 };
    if (pam_get_user(pamh, &user, NULL) == PAM_SUCCESS && user && statuses(b, o, &sessions, &error) == MSSO_OK &&
        any_admin_group(&sessions)) {
        refused = !broker_trusted(pamh, o, b, why, sizeof why);
        if (refused) say(pamh, PAM_ERROR_MSG, "SSO: not sending your password: %s", why);
        /* Once per group: into the account named like the login user when the group has one (a
         * user name that is no account name matches none), else into its default account. */
        for (size_t i = 0; i < sessions.count && !refused; i++) {
            const msso_session *s = &sessions.items[i];
            if (!s->admin || group_seen_before(&sessions, i)) continue;
            login_one(pamh, b, s->group, user[0] && group_has_account(&sessions, s->group, user) ? user : NULL, user, data);
        }
    }
    msso_reply_free(&error);
    pam_set_data(pamh, PASSWORD_KEY, NULL, NULL); /* replacing runs the cleanup: wiped and freed */
    return refused;
}

/* Whether the account phase judges the `i`th session: each group's default account (the session
 * every app gets that names no account), or every session of a group the broker named no default
 * for (a broker without accounts, whose one session is the default's; or one that named none,
 * which then fails closed). The group's other accounts are shown at session start, never judged. */
static int judged(const msso_sessions *sessions, size_t i) {
    const msso_session *s = &sessions->items[i];
    if (s->is_default) return 1;
    for (size_t j = 0; j < sessions->count; j++)
        if (sessions->items[j].is_default && strcmp(sessions->items[j].group, s->group) == 0) return 0;
    return 1;
}

/* PAM's answer for the account phase, from the sessions judged: all valid, or the worst of them. */
static int account_code(const msso_sessions *sessions) {
    int code = PAM_SUCCESS;
    for (size_t i = 0; i < sessions->count; i++) {
        if (!judged(sessions, i)) continue;
        msso_state state = sessions->items[i].state;
        if (state == MSSO_EXPIRED && code == PAM_SUCCESS) code = PAM_ACCT_EXPIRED;
        else if (state != MSSO_VALID && state != MSSO_EXPIRED) code = PAM_PERM_DENIED;
    }
    return code;
}

static void say_unreachable(pam_handle_t *pamh, int enforcing) {
    say(pamh, enforcing ? PAM_ERROR_MSG : PAM_TEXT_INFO,
        "SSO: the credential broker is not reachable, so the SSO session could not be checked.");
}

/* Session open and account: the common path. Returns the PAM code for the account phase. What
 * the broker answered is believed only from the installed mssod: the account phase (`enforce`)
 * fails closed on anyone else's answer, as on no answer; session open, which only informs, shows
 * it followed by a line saying whose word it is. */
static int check_sessions(pam_handle_t *pamh, const options *o, int enforcing) {
    msso_broker b;
    if (open_broker(pamh, o, &b) != MSSO_OK) {
        say_unreachable(pamh, enforcing);
        return PAM_AUTHINFO_UNAVAIL;
    }
    int refused = o->login && login_with_kept_password(pamh, o, &b);
    msso_sessions sessions;
    msso_reply error = { 0 };
    msso_status status = statuses(&b, o, &sessions, &error);
    char why[512];
    int answered = status == MSSO_OK || status == MSSO_ERROR_REPLY;
    int trusted = answered && broker_trusted(pamh, o, &b, why, sizeof why);
    int code = PAM_AUTHINFO_UNAVAIL;
    if (answered && !trusted && enforcing) {
        say(pamh, PAM_ERROR_MSG, "SSO: not trusting the broker's answer: %s", why);
    } else if (status == MSSO_ERROR_REPLY) {
        say(pamh, enforcing ? PAM_ERROR_MSG : PAM_TEXT_INFO, "SSO: %s", error.message);
    } else if (status == MSSO_UNSENDABLE) {
        pam_syslog(pamh, LOG_ERR, "a group= argument is not UTF-8 text");
        say_unreachable(pamh, enforcing);
    } else if (status == MSSO_MALFORMED) {
        if (o->debug) pam_syslog(pamh, LOG_DEBUG, "the broker's reply is not the protocol");
        say_unreachable(pamh, enforcing);
    } else if (status != MSSO_OK) {
        say(pamh, PAM_TEXT_INFO, "SSO: the credential broker did not answer in time.");
    } else {
        for (size_t i = 0; i < sessions.count; i++) tell(pamh, o, &sessions.items[i]);
        code = account_code(&sessions);
    }
    if (answered && !trusted && !enforcing) {
        if (refused) say(pamh, PAM_TEXT_INFO, "SSO: the state shown comes from that unverified broker.");
        else say(pamh, PAM_TEXT_INFO, "SSO: the state shown comes from an unverified broker: %s", why);
    }
    msso_reply_free(&error);
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

/* Logs out every account of `group` that the broker lists (a logout names one account, and `all`
 * would end every group's, not only this one's); the group's default account alone when the list
 * cannot be read. How many logouts were answered. */
static int logout_group(msso_broker *b, const char *group, msso_reply *reply) {
    msso_sessions sessions;
    sessions.count = 0;
    begin_for_group(b, MSSO_METHOD_STATUS, group);
    if (msso_broker_call(b, reply) != MSSO_OK || msso_read_status(&reply->doc, reply->result, &sessions) != 0) sessions.count = 0;
    int done = 0;
    for (size_t i = 0; i < sessions.count; i++) {
        if (strcmp(sessions.items[i].group, group) != 0) continue; /* (a status of one group lists that group's alone) */
        json_call *call = begin_for_group(b, MSSO_METHOD_LOGOUT, group);
        if (sessions.items[i].account[0]) json_call_string(call, "account", sessions.items[i].account);
        done += msso_broker_call(b, reply) == MSSO_OK;
    }
    if (done == 0) { /* nothing listed, or nothing answered: the group's default account, as a logout naming none */
        begin_for_group(b, MSSO_METHOD_LOGOUT, group);
        done += msso_broker_call(b, reply) == MSSO_OK;
    }
    return done;
}

PUBLIC int pam_sm_close_session(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)flags;
    options o;
    parse_options(pamh, argc, argv, &o);
    if (!o.logout_on_close) return PAM_IGNORE;
    msso_broker b;
    if (open_broker(pamh, &o, &b) != MSSO_OK) return PAM_SUCCESS;
    int done = 0;
    msso_reply reply = { 0 };
    if (o.group_count == 0) {
        json_call_true(begin_for_group(&b, MSSO_METHOD_LOGOUT, NULL), "all"); /* every account of every group */
        done += msso_broker_call(&b, &reply) == MSSO_OK;
    }
    for (int i = 0; i < o.group_count; i++) done += logout_group(&b, o.groups[i], &reply);
    msso_reply_free(&reply);
    char why[512];
    if (done && !broker_trusted(pamh, &o, &b, why, sizeof why))
        say(pamh, PAM_TEXT_INFO, "SSO: the logout was answered by an unverified broker: %s", why);
    else if (done && !o.quiet)
        say(pamh, PAM_TEXT_INFO, "SSO: logged out.");
    msso_broker_close(&b);
    return PAM_SUCCESS;
}
