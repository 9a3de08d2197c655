/*
 * ghash.h - GHASH (the hash under AES-GCM and GMAC) over long inputs, with
 * the x86 carry-less multiply on 512-bit vectors (VPCLMULQDQ, AVX-512):
 * thirty-two blocks per step against precomputed powers of the hash key,
 * one reduction per step. The session MAC (wire.c) feeds payloads through it;
 * frame tags and encryption stay with libcrypto. Where the CPU lacks the
 * instructions, ghashAvailable() says so and the caller uses libcrypto for
 * payloads too. Known answers against libcrypto: tests/unit/test_wire.c.
 * Pure C, no allocation; the state is the caller's.
 */
#ifndef OBJSTORE_GHASH_H
#define OBJSTORE_GHASH_H

#include <stddef.h>
#include <stdint.h>

/* Blocks summed per reduction. */
#define GHASH_POWERS 32

/* The hash key's powers H^GHASH_POWERS..H^1, byte-reflected as the
 * multiply wants them, laid out four to a 512-bit vector. */
typedef struct GhashKey {
    _Alignas(64) uint8_t pow[GHASH_POWERS][16];
} GhashKey;

/* A GHASH under way over additional data only (GMAC): the accumulator,
 * a partial block not yet absorbed, and the bytes fed so far. */
typedef struct GhashState {
    _Alignas(16) uint8_t acc[16];
    uint8_t part[16];
    size_t partLen;
    uint64_t total;
} GhashState;

/* Does this CPU run the vector GHASH (VPCLMULQDQ, AVX-512F/BW/VL)? */
int ghashAvailable(void);
/* Make k from the hash key h = AES_K(0^128) (16 bytes). Only when
 * ghashAvailable(). Can't fail. */
void ghashKeyInit(GhashKey *k, const uint8_t h[16]);
/* Start s empty. Can't fail. */
void ghashStart(GhashState *s);
/* Absorb n bytes of p (any length, any alignment). Can't fail. */
void ghashUpdate(GhashState *s, const GhashKey *k, const void *p, size_t n);
/* GMAC's tag: pad, absorb the length block (the data as additional data,
 * no ciphertext), and XOR with ekj0 = AES_K(J0). Can't fail. */
void ghashFinishGmac(GhashState *s, const GhashKey *k, const uint8_t ekj0[16], uint8_t tag[16]);

#endif /* OBJSTORE_GHASH_H */
