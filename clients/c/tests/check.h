/* The C unit tests' one assertion (clients/c/tests/unit.c, pam/tests/unit.c): a failure is
 * printed with its place and counted; `failures` is the exit status's source. */
#ifndef MSSO_TESTS_CHECK_H
#define MSSO_TESTS_CHECK_H
#include <stdio.h>

static int failures;

#define CHECK(condition)                                                          \
    do {                                                                          \
        if (!(condition)) {                                                       \
            fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #condition); \
            failures++;                                                           \
        }                                                                         \
    } while (0)

#endif
