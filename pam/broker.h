/* The PAM module's side of the msso wire protocol (docs/PROTOCOL.md): connect to a user's
 * broker, check that it is that user's, make one call, read its answer. Nothing else. */
#ifndef MSSO_PAM_BROKER_H
#define MSSO_PAM_BROKER_H

#include <json-c/json.h>
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
} msso_broker;

/* Why a call failed, when it did. */
typedef enum {
    MSSO_OK = 0,
    MSSO_UNREACHABLE,  /* no broker, a socket that is not the user's, or no answer in time */
    MSSO_ERROR_REPLY,  /* the broker answered with a named error */
    MSSO_MALFORMED,    /* the broker sent something that is not the protocol: as good as no broker */
} msso_status;

/* Connects to `path` and checks, before sending anything, that the socket file and the process
 * behind it (SO_PEERCRED) belong to `uid`; then says hello. From then on, b->writer says who
 * answers. */
msso_status msso_broker_open(msso_broker *broker, const char *path, uid_t uid, int timeout_ms);

/* Calls `method` with `args` (ownership taken). On MSSO_OK, *result is the reply's result (an
 * object); on MSSO_ERROR_REPLY, *result is the error message, whose "error" and "message" are
 * strings (the message at most MSSO_MAX_MESSAGE bytes). Free with json_object_put. */
msso_status msso_broker_call(msso_broker *broker, const char *method, json_object *args, json_object **result);

void msso_broker_close(msso_broker *broker);

#endif
