/* The PAM module's side of the msso wire protocol (docs/PROTOCOL.md): connect to a user's
 * broker, check that it is that user's, make one call, read its answer. Nothing else. */
#ifndef MSSO_PAM_BROKER_H
#define MSSO_PAM_BROKER_H

#include "json.h" /* libmsso's reader and writer (clients/c/src), compiled into the module */
#include "replies.h"

#include <sys/types.h>

typedef struct {
    int fd;
    int timeout_ms;   /* budget for the whole exchange, connect included */
    long deadline_ms; /* monotonic time at which the budget runs out */
    unsigned serial; /* the last call's, random (broker.c) */
    uid_t uid;        /* the user whose broker this must be */
    /* The process that wrote every byte read so far, from the kernel (SCM_CREDENTIALS): 0 before
     * the first byte, -1 when more than one did or one could not be identified or was not the
     * user's. With a pidfd of it (SCM_PIDFD, Linux 6.5), or -1. */
    pid_t writer;
    int writer_pidfd;
    char *out;      /* the call being written (msso_broker_begin): wiped once sent */
    json_call call;
} msso_broker;

/* A message read from the broker: its frame, wiped when freed, and the frame's tokens. */
typedef struct {
    char *text;
    size_t length;
    json_doc doc;
    uint32_t result;                    /* MSSO_OK: the result, an object of `doc` */
    char message[MSSO_MAX_MESSAGE + 1]; /* MSSO_ERROR_REPLY: the error's message (raw: show through msso_printable) */
} msso_reply;

/* Why a call failed, when it did. */
typedef enum {
    MSSO_OK = 0,
    MSSO_UNREACHABLE,  /* no broker, a socket that is not the user's, or no answer in time */
    MSSO_ERROR_REPLY,  /* the broker answered with a named error */
    MSSO_MALFORMED,    /* the broker sent something that is not the protocol: as good as no broker */
    MSSO_UNSENDABLE,   /* an argument that is not UTF-8 (or a call over the frame's cap): nothing was sent */
} msso_status;

/* Connects to `path` and checks, before sending anything, that the socket file and the process
 * behind it (SO_PEERCRED) belong to `uid`; then says hello. From then on, b->writer says who
 * answers. */
msso_status msso_broker_open(msso_broker *broker, const char *path, uid_t uid, int timeout_ms);

/* Starts a call of `method`: the caller writes its arguments into what this returns (json.h's
 * json_call_string, …), then makes the call with msso_broker_call. */
json_call *msso_broker_begin(msso_broker *broker, const char *method);

/* Sends the call begun, wipes it (it may hold the password), and reads its answer into `reply`
 * (which starts zeroed, and is freed with msso_reply_free whatever the outcome; it may be used
 * again). On MSSO_OK, reply->result is the result, an object; on MSSO_ERROR_REPLY,
 * reply->message is the error's message. */
msso_status msso_broker_call(msso_broker *broker, msso_reply *reply);

/* Wipes the frame, frees it and the tokens. */
void msso_reply_free(msso_reply *reply);

void msso_broker_close(msso_broker *broker);

#endif
