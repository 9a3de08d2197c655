/*
 * ghash.c - GHASH with VPCLMULQDQ on 512-bit vectors (ghash.h).
 *
 * Blocks are byte-reflected on load, multiplied by the reflected powers of
 * the hash key with four carry-less multiplies per 128-bit lane, and the
 * 256-bit products of sixteen blocks are summed before one shift and
 * reduction modulo x^128 + x^7 + x^2 + x + 1 (the products are linear, so
 * one reduction of the sum equals the sum of the reductions). The multiply
 * and reduction of one block are the ones of Gueron and Kounavis' paper on
 * carry-less multiplication for GCM (Intel, 2010).
 */
#include <immintrin.h>
#include <string.h>

#include "ghash.h"

#define GHASH_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,vpclmulqdq,pclmul,ssse3")))

int ghashAvailable(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("vpclmulqdq") &&
           __builtin_cpu_supports("pclmul");
}

/* Reverse the 16 bytes of a block. */
GHASH_TARGET static inline __m128i ghashReflect(__m128i x)
{
    const __m128i rev = _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm_shuffle_epi8(x, rev);
}

/* The 256-bit carry-less product of a and b, as (lo, hi). */
GHASH_TARGET static inline void ghashClmul(__m128i a, __m128i b, __m128i *lo, __m128i *hi)
{
    __m128i l = _mm_clmulepi64_si128(a, b, 0x00);
    __m128i h = _mm_clmulepi64_si128(a, b, 0x11);
    __m128i m = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x10), _mm_clmulepi64_si128(a, b, 0x01));
    *lo = _mm_xor_si128(l, _mm_slli_si128(m, 8));
    *hi = _mm_xor_si128(h, _mm_srli_si128(m, 8));
}

/* Shift the reflected 256-bit product (lo, hi) left by one bit and reduce
 * it modulo the GCM polynomial: the reflected 128-bit result. */
GHASH_TARGET static inline __m128i ghashReduce(__m128i lo, __m128i hi)
{
    __m128i t7 = _mm_srli_epi32(lo, 31), t8 = _mm_srli_epi32(hi, 31);
    lo = _mm_slli_epi32(lo, 1);
    hi = _mm_slli_epi32(hi, 1);
    __m128i t9 = _mm_srli_si128(t7, 12);
    t8 = _mm_slli_si128(t8, 4);
    t7 = _mm_slli_si128(t7, 4);
    lo = _mm_or_si128(lo, t7);
    hi = _mm_or_si128(_mm_or_si128(hi, t8), t9);

    t7 = _mm_xor_si128(_mm_xor_si128(_mm_slli_epi32(lo, 31), _mm_slli_epi32(lo, 30)),
                       _mm_slli_epi32(lo, 25));
    t8 = _mm_srli_si128(t7, 4);
    lo = _mm_xor_si128(lo, _mm_slli_si128(t7, 12));
    __m128i t2 = _mm_xor_si128(_mm_xor_si128(_mm_srli_epi32(lo, 1), _mm_srli_epi32(lo, 2)),
                               _mm_srli_epi32(lo, 7));
    t2 = _mm_xor_si128(t2, t8);
    lo = _mm_xor_si128(lo, t2);
    return _mm_xor_si128(hi, lo);
}

/* a * b in GF(2^128), both reflected. */
GHASH_TARGET static inline __m128i ghashMul(__m128i a, __m128i b)
{
    __m128i lo, hi;
    ghashClmul(a, b, &lo, &hi);
    return ghashReduce(lo, hi);
}

GHASH_TARGET void ghashKeyInit(GhashKey *k, const uint8_t h[16])
{
    __m128i h1 = ghashReflect(_mm_loadu_si128((const __m128i *)h)), p = h1;

    /* pow[j] = H^(GHASH_POWERS - j): block j of a step is multiplied by it. */
    for (int i = 1; i <= GHASH_POWERS; i++) {
        _mm_store_si128((__m128i *)k->pow[GHASH_POWERS - i], p);
        p = ghashMul(p, h1);
    }
}

void ghashStart(GhashState *s)
{
    memset(s, 0, sizeof(*s));
}

/* The products of four blocks d (reflected) by four powers h, added into
 * (lo, hi, mi): the low, high and middle halves, lane by lane. */
#define GHASH_MUL4(d, h, lo, hi, mi)                                                               \
    do {                                                                                           \
        lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128(d, h, 0x00));                           \
        hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128(d, h, 0x11));                           \
        mi = _mm512_ternarylogic_epi64(mi, _mm512_clmulepi64_epi128(d, h, 0x10),                   \
                                       _mm512_clmulepi64_epi128(d, h, 0x01), 0x96);                \
    } while (0)

/* Fold the four lanes of (lo, hi, mi) into one 256-bit product and reduce
 * it: the reflected accumulator. */
GHASH_TARGET static inline __m128i ghashFold(__m512i lo, __m512i hi, __m512i mi)
{
    __m256i lo2 = _mm256_xor_si256(_mm512_castsi512_si256(lo), _mm512_extracti64x4_epi64(lo, 1));
    __m256i hi2 = _mm256_xor_si256(_mm512_castsi512_si256(hi), _mm512_extracti64x4_epi64(hi, 1));
    __m256i mi2 = _mm256_xor_si256(_mm512_castsi512_si256(mi), _mm512_extracti64x4_epi64(mi, 1));
    __m128i l = _mm_xor_si128(_mm256_castsi256_si128(lo2), _mm256_extracti128_si256(lo2, 1));
    __m128i h = _mm_xor_si128(_mm256_castsi256_si128(hi2), _mm256_extracti128_si256(hi2, 1));
    __m128i m = _mm_xor_si128(_mm256_castsi256_si128(mi2), _mm256_extracti128_si256(mi2, 1));
    return ghashReduce(_mm_xor_si128(l, _mm_slli_si128(m, 8)),
                       _mm_xor_si128(h, _mm_srli_si128(m, 8)));
}

/* Absorb whole blocks: n is a multiple of 16. Steps of GHASH_POWERS blocks
 * (one reduction each), then of 16, then single blocks. */
GHASH_TARGET static void ghashBlocks(GhashState *s, const GhashKey *k, const uint8_t *p, size_t n)
{
    const __m512i rev =
        _mm512_broadcast_i32x4(_mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    __m128i acc = _mm_load_si128((const __m128i *)s->acc);
    __m512i h[GHASH_POWERS / 4];

    for (int i = 0; i < GHASH_POWERS / 4; i++)
        h[i] = _mm512_load_si512((const void *)k->pow[4 * i]);
    for (; n >= 16 * GHASH_POWERS; n -= 16 * GHASH_POWERS, p += 16 * GHASH_POWERS) {
        __m512i lo = _mm512_setzero_si512(), hi = lo, mi = lo;
        for (int i = 0; i < GHASH_POWERS / 4; i++) {
            __m512i d = _mm512_shuffle_epi8(_mm512_loadu_si512((const void *)(p + 64 * i)), rev);
            if (i == 0)
                d = _mm512_xor_si512(d, _mm512_zextsi128_si512(acc));
            GHASH_MUL4(d, h[i], lo, hi, mi);
        }
        acc = ghashFold(lo, hi, mi);
    }
    for (; n >= 256; n -= 256, p += 256) { /* the last 16 powers: H^16..H^1 */
        __m512i lo = _mm512_setzero_si512(), hi = lo, mi = lo;
        for (int i = 0; i < 4; i++) {
            __m512i d = _mm512_shuffle_epi8(_mm512_loadu_si512((const void *)(p + 64 * i)), rev);
            if (i == 0)
                d = _mm512_xor_si512(d, _mm512_zextsi128_si512(acc));
            GHASH_MUL4(d, h[GHASH_POWERS / 4 - 4 + i], lo, hi, mi);
        }
        acc = ghashFold(lo, hi, mi);
    }
    const __m128i hk = _mm_load_si128((const __m128i *)k->pow[GHASH_POWERS - 1]); /* H^1 */
    for (; n >= 16; n -= 16, p += 16)
        acc = ghashMul(_mm_xor_si128(acc, ghashReflect(_mm_loadu_si128((const __m128i *)p))), hk);
    _mm_store_si128((__m128i *)s->acc, acc);
}

void ghashUpdate(GhashState *s, const GhashKey *k, const void *data, size_t n)
{
    const uint8_t *p = data;

    s->total += n;
    if (s->partLen > 0) {
        size_t take = 16 - s->partLen < n ? 16 - s->partLen : n;
        memcpy(s->part + s->partLen, p, take);
        s->partLen += take;
        p += take;
        n -= take;
        if (s->partLen < 16)
            return;
        ghashBlocks(s, k, s->part, 16);
        s->partLen = 0;
    }
    size_t whole = n & ~(size_t)15;
    if (whole > 0)
        ghashBlocks(s, k, p, whole);
    memcpy(s->part, p + whole, n - whole);
    s->partLen = n - whole;
}

void ghashFinishGmac(GhashState *s, const GhashKey *k, const uint8_t ekj0[16], uint8_t tag[16])
{
    uint8_t len[16] = {0};
    uint64_t bits = s->total * 8;

    if (s->partLen > 0) {
        memset(s->part + s->partLen, 0, 16 - s->partLen);
        ghashBlocks(s, k, s->part, 16);
        s->partLen = 0;
    }
    for (int i = 0; i < 8; i++) /* len(A) in bits, big-endian; len(C) = 0 */
        len[i] = (uint8_t)(bits >> (56 - 8 * i));
    ghashBlocks(s, k, len, 16);
    for (int i = 0; i < 16; i++) /* acc is reflected: its last byte is the tag's first */
        tag[i] = (uint8_t)(s->acc[15 - i] ^ ekj0[i]);
}
