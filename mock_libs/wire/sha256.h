/* SHA-256 and HMAC-SHA-256 for the link handshake's shared secret (sha256.c). */
#ifndef LLDD_MOCK_SHA256_H
#define LLDD_MOCK_SHA256_H

#include <stddef.h>
#include <stdint.h>

/* HMAC-SHA-256 of the concatenation of nparts byte strings. */
void hmac_sha256(const void *key, size_t key_len, const void *const *parts, const size_t *lens, size_t nparts,
                 uint8_t out[32]);
/* 1 if equal; the time taken does not depend on where they differ. */
int bytes_equal_ct(const void *a, const void *b, size_t n);

#endif /* LLDD_MOCK_SHA256_H */
