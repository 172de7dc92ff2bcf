#ifndef MSSO_SHA256_H
#define MSSO_SHA256_H

#include <stddef.h>
#include <stdint.h>

void sha256(const void *data, size_t length, unsigned char digest[32]);
/* Standard base64 with padding; `out` has room for 4 * ((length + 2) / 3) + 1 bytes. */
void base64(const unsigned char *data, size_t length, char *out);

#endif
