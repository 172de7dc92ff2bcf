// The kernel key retention service through its two system calls (add_key(2), keyctl(2)), so that
// msso needs neither libkeyutils nor its headers' package.
#define _GNU_SOURCE
#include "cmsso_system.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <linux/keyctl.h>
#include <sys/syscall.h>

static long keyctl5(int operation, unsigned long a, unsigned long b, unsigned long c, unsigned long d) {
    long result = syscall(SYS_keyctl, operation, a, b, c, d);
    return result < 0 ? -errno : result;
}

int32_t cmsso_keys_home(int *persistent) {
    // uid -1: our own; linked into our process keyring (made if this process has none yet).
    *persistent = 1;
    long home = keyctl5(KEYCTL_GET_PERSISTENT, (unsigned long)-1, (unsigned long)KEY_SPEC_PROCESS_KEYRING, 0, 0);
    if (home != -EOPNOTSUPP) return (int32_t)home;
    *persistent = 0;
    long user = keyctl5(KEYCTL_GET_KEYRING_ID, (unsigned long)KEY_SPEC_USER_KEYRING, 1, 0, 0);
    if (user < 0) return (int32_t)user;
    long process = keyctl5(KEYCTL_GET_KEYRING_ID, (unsigned long)KEY_SPEC_PROCESS_KEYRING, 1, 0, 0);
    if (process < 0) return (int32_t)process;
    long linked = keyctl5(KEYCTL_LINK, (unsigned long)user, (unsigned long)process, 0, 0);
    return linked < 0 ? (int32_t)linked : (int32_t)user;
}

int32_t cmsso_keys_find(int32_t keyring, const char *description) {
    long key = keyctl5(KEYCTL_SEARCH, (unsigned long)keyring, (unsigned long)"user", (unsigned long)description, 0);
    if (key == -ENOKEY || key == -EKEYEXPIRED || key == -EKEYREVOKED) return 0;
    return (int32_t)key;
}

long cmsso_keys_read(int32_t key, char *buffer, size_t capacity) {
    return keyctl5(KEYCTL_READ, (unsigned long)key, (unsigned long)buffer, capacity, 0);
}

int32_t cmsso_keys_write(int32_t keyring, const char *description, const void *payload, size_t length) {
    long key = syscall(SYS_add_key, "user", description, payload, length, keyring);
    return key < 0 ? -errno : (int32_t)key;
}

int cmsso_keys_delete(int32_t keyring, int32_t key) {
    // Invalidating forgets the payload at once, wherever the key is linked; a kernel without it
    // (before Linux 3.5) forgets it when the last link goes.
    if (keyctl5(KEYCTL_INVALIDATE, (unsigned long)key, 0, 0, 0) == 0) return 0;
    return (int)keyctl5(KEYCTL_UNLINK, (unsigned long)key, (unsigned long)keyring, 0, 0);
}

long cmsso_keys_list(int32_t keyring, int32_t *serials, size_t capacity) {
    long bytes = keyctl5(KEYCTL_READ, (unsigned long)keyring, (unsigned long)serials, capacity * sizeof(int32_t), 0);
    return bytes < 0 ? bytes : bytes / (long)sizeof(int32_t);
}

long cmsso_keys_describe(int32_t key, char *buffer, size_t capacity) {
    long length = keyctl5(KEYCTL_DESCRIBE, (unsigned long)key, (unsigned long)buffer, capacity, 0);
    if (length > 0 && (size_t)length > capacity) return -ENOBUFS; // not all of it: not read as a name
    return length;
}
