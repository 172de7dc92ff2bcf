/* The module's reading of the broker, without libpam or a daemon: broker.c and replies.c as they are,
 * over a socketpair whose other end plays a hostile broker (frames written in advance; the serials
 * the module draws are fixed here, so that a reply can name them). Every reply that is not the
 * protocol must be refused (MSSO_MALFORMED, or a status that reads as malformed), an honest one
 * read to the byte, and the call the module writes must be the JSON it means, wiped once sent.
 * `make check` runs it under AddressSanitizer and UndefinedBehaviorSanitizer. Exit status 0 when
 * all pass; each failure is printed. */
#include <string.h>
#include <sys/random.h>

#define SERIAL 7
static ssize_t fixed_serial(void *buffer, size_t length, unsigned int flags) {
    (void)flags;
    unsigned serial = SERIAL;
    memcpy(buffer, &serial, length < sizeof serial ? length : sizeof serial);
    return (ssize_t)length;
}
#define getrandom fixed_serial
#include "../broker.c"
#undef getrandom
#include "../replies.c"

#include <stdio.h>

#include "../../clients/c/tests/check.h"

/* A broker connection as msso_broker_open leaves it (hello said), and the broker's end in *peer. */
static msso_broker connected(int *peer) {
    int ends[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) abort();
    int size = 1 << 20;
    setsockopt(ends[1], SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    setsockopt(ends[0], SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    *peer = ends[1];
    msso_broker b = { .fd = ends[0], .writer_pidfd = -1, .uid = getuid(), .timeout_ms = 2000 };
    b.deadline_ms = now_ms() + b.timeout_ms;
    if (!(b.out = malloc(MSSO_MAX_FRAME + 4))) abort();
    return b;
}

/* The broker's side: one frame of `length` bytes (a length prefix, then the bytes). */
static void send_frame(int peer, const char *text, size_t length) {
    uint32_t header = htonl((uint32_t)length);
    if (write(peer, &header, 4) != 4 || write(peer, text, length) != (ssize_t)length) abort();
}

static void send_text(int peer, const char *text) {
    send_frame(peer, text, strlen(text));
}

/* What the module sent: the frame's payload, NUL-terminated ("" when nothing). */
static void received(int peer, char *out, size_t size) {
    uint32_t header;
    out[0] = '\0';
    if (recv(peer, &header, 4, MSG_DONTWAIT) != 4) return;
    size_t length = ntohl(header);
    if (length >= size || recv(peer, out, length, MSG_DONTWAIT) != (ssize_t)length) abort();
    out[length] = '\0';
}

/* The outcome of one `status` call answered by `frames` (written in advance, each a NUL-terminated
 * payload), and the sessions it read. */
static msso_status status_answered_by(const char *const *frames, size_t count, msso_sessions *sessions) {
    int peer;
    msso_broker b = connected(&peer);
    for (size_t i = 0; i < count; i++) send_text(peer, frames[i]);
    msso_reply reply = { 0 };
    msso_broker_begin(&b, MSSO_METHOD_STATUS);
    msso_status status = msso_broker_call(&b, &reply);
    sessions->count = 0;
    if (status == MSSO_OK && msso_read_status(&reply.doc, reply.result, sessions) != 0) status = MSSO_MALFORMED;
    msso_reply_free(&reply);
    msso_broker_close(&b);
    close(peer);
    return status;
}

static msso_status status_answered(const char *frame) {
    msso_sessions sessions;
    return status_answered_by(&frame, 1, &sessions);
}

/* A status reply whose result is `result`. */
static char *status_reply(const char *result) {
    static char text[MSSO_MAX_FRAME + 1];
    snprintf(text, sizeof text, "{\"type\":\"reply\",\"serial\":%d,\"result\":%s}", SERIAL, result);
    return text;
}

/* A status reply with the one session `session`, whose `%s` is `value`. */
static char *with_session(const char *session, const char *value) {
    static char result[4096];
    snprintf(result, sizeof result, "{\"groups\":[{%s}]}", session);
    char *with = strstr(result, "%s");
    if (with && strlen(result) + strlen(value) < sizeof result) {
        memmove(with + strlen(value), with + 2, strlen(with + 2) + 1);
        memcpy(with, value, strlen(value));
    }
    return status_reply(result);
}

/* Tests/e2e/fake_broker.py's hostile replies, at the level of the frame, and the keys given twice
 * that json-c used to read as their last value: each is no broker. */
static void hostile_replies_are_refused(void) {
    static char long_group[400], long_message[1200], many[8192], deep[MSSO_MAX_FRAME], long_account[100], longest_account[100];
    snprintf(long_group, sizeof long_group, "\"%0256d\"", 0);
    snprintf(long_account, sizeof long_account, "\"account\":\"a%064d\"", 0);
    snprintf(longest_account, sizeof longest_account, "\"account\":\"a%063d\"", 0);
    snprintf(long_message, sizeof long_message, "{\"type\":\"error\",\"serial\":%d,\"error\":\"Internal\",\"message\":\"%01025d\"}", SERIAL, 0);
    size_t at = (size_t)snprintf(many, sizeof many, "{\"groups\":[");
    for (int i = 0; i < 65; i++) at += (size_t)snprintf(many + at, sizeof many - at, "%s{\"group\":\"g%d\",\"state\":\"valid\"}", i ? "," : "", i);
    snprintf(many + at, sizeof many - at, "]}");
    at = (size_t)snprintf(deep, sizeof deep, "{\"type\":\"reply\",\"serial\":%d,\"result\":{\"groups\":[],\"x\":", SERIAL);
    memset(deep + at, '[', 30000);
    memset(deep + at + 30000, ']', 30000);
    memcpy(deep + at + 60000, "}}", 3);

    const char *envelopes[] = {
        "{\"type\":\"reply\",\"serial\":7,\"result\":[1,2]}", "{\"type\":\"reply\",\"serial\":7,\"result\":null}",
        "{\"type\":null,\"serial\":7,\"result\":{\"groups\":[]}}", "{\"type\":5,\"serial\":7,\"result\":{\"groups\":[]}}",
        "{\"type\":\"reply\",\"serial\":\"7\",\"result\":{}}", "{\"type\":\"reply\",\"serial\":1180591620717411303424,\"result\":{}}",
        "{\"type\":\"reply\",\"serial\":-7,\"result\":{}}", "{\"type\":\"reply\",\"serial\":7.0,\"result\":{}}",
        "{\"type\":\"reply\",\"serial\":7e0,\"result\":{}}", "{\"type\":\"reply\",\"result\":{}}",
        "{\"type\":\"reply\",\"serial\":8,\"result\":{\"groups\":[]}}", /* an answer to a call never made */
        "{\"type\":\"error\",\"serial\":7,\"error\":\"Internal\"}", "{\"type\":\"error\",\"serial\":7,\"error\":\"Internal\",\"message\":null}",
        long_message, "\x1b[2J not json", "{\"type\":\"reply\",\"serial\":7,\"result\":{\"groups\":[]}} {}",
        "{\"type\":\"reply\",\"serial\":7,\"result\":{\"groups\":[{\"group\":\"\xff\x1b\",\"state\":\"valid\"}]}}",
        "{\"type\":\"reply\",\"serial\":7,\"result\":{\"groups\":[{\"group\":\"g\",\"state\":\"valid\",\"sessionExpiresAt\":NaN}]}}",
        deep,
        /* Keys given twice. */
        "{\"type\":\"reply\",\"serial\":7,\"serial\":7,\"result\":{\"groups\":[]}}",
        "{\"type\":\"reply\",\"type\":\"reply\",\"serial\":7,\"result\":{\"groups\":[]}}",
        "{\"type\":\"reply\",\"serial\":7,\"result\":{\"groups\":[]},\"result\":{\"groups\":[]}}",
        "{\"type\":\"reply\",\"serial\":7,\"result\":{\"groups\":[],\"groups\":[]}}",
        "{\"type\":\"error\",\"serial\":7,\"error\":\"Internal\",\"message\":\"a\",\"message\":\"b\"}",
    };
    for (size_t i = 0; i < sizeof envelopes / sizeof *envelopes; i++)
        if (status_answered(envelopes[i]) != MSSO_MALFORMED) fprintf(stderr, "not refused: %.200s\n", envelopes[i]), failures++;

    const char *results[] = { "{\"groups\":5}", "{\"groups\":null}", "{\"groups\":{\"group\":\"x\"}}", "{\"groups\":[\"valid\"]}", many };
    for (size_t i = 0; i < sizeof results / sizeof *results; i++)
        if (status_answered(status_reply(results[i])) != MSSO_MALFORMED) fprintf(stderr, "not refused: %.200s\n", results[i]), failures++;

    /* Each session's `%s` replaced by a value it must not hold: the group's, the state's, the others'. */
    const char *group = "\"group\":%s,\"state\":\"valid\"", *state = "\"group\":\"g\",\"state\":%s",
               *other = "\"group\":\"g\",\"state\":\"valid\",%s";
    const struct { const char *session, *value; } sessions[] = {
        { group, "null" }, { group, "7" }, { group, "\"\"" }, { group, long_group }, { group, "\"a\\u0000b\"" },
        { group, "[\"g\"]" }, { state, "null" }, { state, "\"compromised\"" }, { state, "\"Valid\"" },
        { other, "\"admin\":\"yes\"" }, { other, "\"admin\":null" }, { other, "\"username\":5" }, { other, "\"issuer\":null" },
        { other, "\"sessionExpiresAt\":1e17" }, { other, "\"sessionExpiresAt\":-1" }, { other, "\"sessionExpiresAt\":\"14:03\"" },
        { other, "\"sessionExpiresAt\":1e400" }, { other, "\"sessionMaxAt\":-Infinity" }, { other, "\"loggedInAt\":true" },
        /* Keys given twice (the reader's first would be one value, json-c's last the other). */
        { other, "\"group\":\"h\"" }, { other, "\"gr\\u006fup\":\"g\"" }, { other, "\"state\":\"expired\"" },
        { other, "\"admin\":true,\"admin\":false" }, { other, "\"sessionExpiresAt\":1795001800,\"sessionExpiresAt\":1795001801" },
        { other, "\"username\":\"a\",\"username\":\"b\"" },
        /* Accounts: a name outside the broker's rule (AccountName.swift), a flag that is no flag. */
        { other, "\"account\":5" }, { other, "\"account\":null" }, { other, "\"account\":\"\"" }, { other, long_account },
        { other, "\"account\":\"a b\"" }, { other, "\"account\":\"-rf\"" }, { other, "\"account\":\".x\"" },
        { other, "\"account\":\"a/b\"" }, { other, "\"account\":\"a\\u001b[2J\"" }, { other, "\"account\":\"\\u00e9\"" },
        { other, "\"account\":\"a\\u001fb\"" }, { other, "\"account\":[\"admin\"]" }, { other, "\"isDefault\":\"yes\"" },
        { other, "\"isDefault\":null" }, { other, "\"isDefault\":1" }, { other, "\"account\":\"a\",\"account\":\"b\"" },
        { other, "\"isDefault\":true,\"isDefault\":false" },
    };
    for (size_t i = 0; i < sizeof sessions / sizeof *sessions; i++) {
        char *reply = with_session(sessions[i].session, sessions[i].value);
        if (status_answered(reply) != MSSO_MALFORMED) fprintf(stderr, "not refused: %s\n", reply), failures++;
    }
    /* The same sessions with a value they may hold are read (the cases above fail for their value). */
    const struct { const char *session, *value; } fine[] = {
        { group, "\"g\"" }, { state, "\"expired\"" }, { other, "\"admin\":false" }, { other, "\"sessionExpiresAt\":253402300799" },
        { other, "\"username\":\"\\u00e9\"" }, { other, "\"account\":\"admin\"" }, { other, longest_account },
        { other, "\"account\":\"A.b_c-d@e+f9\"" }, { other, "\"account\":\"7\"" }, { other, "\"isDefault\":false" },
    };
    for (size_t i = 0; i < sizeof fine / sizeof *fine; i++) {
        char *reply = with_session(fine[i].session, fine[i].value);
        if (status_answered(reply) != MSSO_OK) fprintf(stderr, "refused: %s\n", reply), failures++;
    }

    /* A frame with a NUL inside, and one over the cap (refused before anything is allocated). */
    int peer;
    msso_broker b = connected(&peer);
    static const char with_nul[] = "{\"type\":\"reply\",\"serial\":7,\"result\":{\"groups\":[\"\0\"]}}";
    send_frame(peer, with_nul, sizeof with_nul - 1);
    msso_reply reply = { 0 };
    msso_broker_begin(&b, MSSO_METHOD_STATUS);
    CHECK(msso_broker_call(&b, &reply) == MSSO_MALFORMED);
    uint32_t huge = 0xFFFFFFFF;
    CHECK(write(peer, &huge, 4) == 4);
    msso_broker_begin(&b, MSSO_METHOD_STATUS);
    CHECK(msso_broker_call(&b, &reply) == MSSO_MALFORMED);
    msso_reply_free(&reply);
    msso_broker_close(&b);
    close(peer);
}

static void honest_replies_are_read(void) {
    msso_sessions sessions;
    const char *frames[] = {
        "{\"type\":\"signal\",\"signal\":\"\\u001b[2J\"}", /* skipped */
        "{\"type\":\"error\",\"serial\":0,\"error\":\"Internal\",\"message\":\"late\"}",
    };
    CHECK(status_answered_by(frames, 2, &sessions) == MSSO_ERROR_REPLY);
    const char *answer[] = {
        "{\"type\":\"signal\",\"signal\":\"LoggedIn\",\"group\":\"g\"}",
        " {\"serial\":7, \"type\":\"reply\", \"result\":{\"groups\":[{\"group\":\"com.example.\\u00e9\\\"\",\"state\":\"expired\","
        "\"issuer\":\"https:\\/\\/idp.example\",\"username\":\"alice\",\"loggedInAt\":1795000000.25,\"sessionExpiresAt\":1795001800.5,"
        "\"sessionMaxAt\":1795043200,\"accessTokenExpiresAt\":1795000300,\"admin\":true,\"fieldOfTomorrow\":[{}]},"
        "{\"group\":\"g\",\"state\":\"notLoggedIn\"},"
        "{\"group\":\"g\",\"account\":\"admin\",\"isDefault\":true,\"state\":\"valid\"}]}} \n",
    };
    CHECK(status_answered_by(answer, 2, &sessions) == MSSO_OK);
    CHECK(sessions.count == 3);
    CHECK(strcmp(sessions.items[0].group, "com.example.\xc3\xa9\"") == 0);
    CHECK(sessions.items[0].state == MSSO_EXPIRED && sessions.items[0].admin == 1);
    CHECK(sessions.items[0].has_end && sessions.items[0].end == 1795001800);
    CHECK(strcmp(sessions.items[1].group, "g") == 0 && sessions.items[1].state == MSSO_NOT_LOGGED_IN);
    CHECK(!sessions.items[1].admin && !sessions.items[1].has_end);
    /* A broker without accounts names none: its session is the group's one, "" and not marked. */
    CHECK(sessions.items[0].account[0] == '\0' && !sessions.items[0].is_default && sessions.items[1].account[0] == '\0');
    CHECK(strcmp(sessions.items[2].account, "admin") == 0 && sessions.items[2].is_default);
    CHECK(msso_account_valid("a") && msso_account_valid("9.x_y-z@e+f") && !msso_account_valid("") && !msso_account_valid("+a"));

    /* An error's message, unescaped (shown through msso_printable, which replaces the newline). */
    int peer;
    msso_broker b = connected(&peer);
    send_text(peer, "{\"type\":\"error\",\"serial\":7,\"error\":\"NotLoggedIn\",\"message\":\"\\u001b[31mred\\nline\"}");
    msso_reply reply = { 0 };
    msso_broker_begin(&b, MSSO_METHOD_STATUS);
    CHECK(msso_broker_call(&b, &reply) == MSSO_ERROR_REPLY);
    CHECK(strcmp(reply.message, "\x1b[31mred\nline") == 0);
    char shown[64];
    msso_printable(shown, sizeof shown, reply.message);
    CHECK(strcmp(shown, "?[31mred?line") == 0);
    msso_reply_free(&reply);
    msso_broker_close(&b);
    close(peer);
}

/* Whether `length` bytes at `p` are all zero. */
static int wiped(const char *p, size_t length) {
    for (size_t i = 0; i < length; i++)
        if (p[i]) return 0;
    return 1;
}

static void calls_are_the_json_they_mean_and_are_wiped(void) {
    int peer;
    char sent[1024];
    msso_broker b = connected(&peer);
    msso_reply reply = { 0 };
    send_text(peer, "{\"type\":\"reply\",\"serial\":7,\"result\":{}}");
    json_call *call = msso_broker_begin(&b, MSSO_METHOD_LOGIN);
    json_call_string(call, "group", "g/1");
    json_call_string(call, "flow", "password");
    json_call_string(call, "username", "alice");
    json_call_string(call, "password", "p\"w\\\xc3\xa4\n");
    size_t length = 0;
    CHECK(msso_broker_call(&b, &reply) == MSSO_OK);
    length = b.call.json.length;
    CHECK(length > 0 && wiped(b.out, length)); /* the password is not left in the module's memory */
    received(peer, sent, sizeof sent);
    CHECK(strcmp(sent, "{\"type\":\"call\",\"serial\":7,\"method\":\"login\",\"args\":{\"group\":\"g/1\",\"flow\":\"password\","
                       "\"username\":\"alice\",\"password\":\"p\\\"w\\\\\xc3\xa4\\u000a\"}}") == 0);

    /* A password that is not UTF-8 cannot be JSON: nothing is sent. */
    call = msso_broker_begin(&b, MSSO_METHOD_LOGIN);
    json_call_string(call, "password", "\xff");
    CHECK(msso_broker_call(&b, &reply) == MSSO_UNSENDABLE);
    CHECK(wiped(b.out, b.call.json.length));
    received(peer, sent, sizeof sent);
    CHECK(sent[0] == '\0');

    send_text(peer, "{\"type\":\"reply\",\"serial\":7,\"result\":{}}");
    json_call_true(msso_broker_begin(&b, MSSO_METHOD_LOGOUT), "all");
    CHECK(msso_broker_call(&b, &reply) == MSSO_OK);
    received(peer, sent, sizeof sent);
    CHECK(strcmp(sent, "{\"type\":\"call\",\"serial\":7,\"method\":\"logout\",\"args\":{\"all\":true}}") == 0);
    msso_reply_free(&reply);
    msso_broker_close(&b);
    close(peer);
}

int main(void) {
    hostile_replies_are_refused();
    honest_replies_are_read();
    calls_are_the_json_they_mean_and_are_wiped();
    if (failures) {
        fprintf(stderr, "pam_msso unit tests: %d failed\n", failures);
        return 1;
    }
    printf("pam_msso unit tests: all passed\n");
    return 0;
}
