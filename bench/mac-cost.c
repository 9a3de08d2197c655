/*
 * mac-cost.c - what the session MAC (module/transfer/wire.h) costs on this
 * CPU, per frame and per byte, beside the alternatives it was chosen over
 * (docs/security.md, "The session MAC"):
 *
 *   frame      wireMacFrame over a PING (16 bytes), a DATA frame (40) and a PART (56):
 *              nanoseconds per tag, against HMAC-SHA256 (truncated) of the
 *              same bytes with the key set up per call and reused;
 *   payload    wireMacPayload over SIZE bytes in 64 KiB pieces: GB/s, against
 *              HMAC-SHA256 and XXH3-64 (the checksum the framer takes anyway)
 *              over the same buffer;
 *   path       the payload MAC fed as a fetch feeds it, for objects of 64 KiB
 *              to 16 MiB, against memcpy of the same bytes in the same pieces
 *              in the same run (and XXH3 and Poly1305 fed the same way): "tcp", one PART
 *              or DATA frame tag, then the payload in the pieces read()
 *              returns on the receiving node (the sizes bench/read-pieces.sh
 *              measured on loopback); "relay", the object forwarded in PARTs
 *              of SERVE_PART_MIN..SERVE_PART_MAX (module/transfer/serve.c),
 *              each with its frame tag and a payload tag of its own, fed in
 *              those pieces. Each step of a piece is timed on its own; each figure
 *              is the best object of --rounds passes (default 5). And the
 *              frame tag of a PING (16 bytes) and a PART (56), best of batches.
 *
 *   mac-cost [--iters N] [--size BYTES] [--rounds R] [--path-only]
 *
 * CSV on stdout: what,bytes,ns_per_op,gb_per_s,x_memcpy (x_memcpy: GB/s over
 * the memcpy row of the same pattern and size; path rows only). One thread.
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "transfer/wire.h"

/* This thread's CPU time: what a step costs, however often the machine's
 * other work takes the CPU away (the machine these run on is shared). */
static double macNowNs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void macRow(const char *what, size_t bytes, double ns, long ops)
{
    double per = ns / (double)ops;
    printf("%s,%zu,%.1f,%.2f,\n", what, bytes, per, (double)bytes / per);
}

/* Tags of one frame of len bytes, iters times, three ways. */
static void macFrames(const uint8_t *frame, size_t len, long iters)
{
    static const uint8_t key[OBJ_WIRE_KEY] = {7};
    uint8_t tag[32];
    char what[64];
    WireMac *w = wireMacNew(key);
    if (!w) {
        fprintf(stderr, "mac-cost: wireMacNew failed\n");
        exit(1);
    }
    double t0 = macNowNs();
    for (long i = 0; i < iters; i++)
        wireMacFrame(w, frame, len, tag);
    snprintf(what, sizeof(what), "frame-gmac");
    macRow(what, len, macNowNs() - t0, iters);
    wireMacFree(w);

    unsigned int n;
    t0 = macNowNs();
    for (long i = 0; i < iters; i++)
        HMAC(EVP_sha256(), key, sizeof(key), frame, len, tag, &n);
    macRow("frame-hmac-sha256-oneshot", len, macNowNs() - t0, iters);

    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *base = EVP_MAC_CTX_new(mac);
    OSSL_PARAM params[] = {OSSL_PARAM_utf8_string("digest", "SHA256", 0), OSSL_PARAM_END};
    EVP_MAC_init(base, key, sizeof(key), params);
    t0 = macNowNs();
    for (long i = 0; i < iters; i++) {
        EVP_MAC_CTX *c = EVP_MAC_CTX_dup(base); /* the keyed state, reused */
        size_t out;
        EVP_MAC_update(c, frame, len);
        EVP_MAC_final(c, tag, &out, sizeof(tag));
        EVP_MAC_CTX_free(c);
    }
    macRow("frame-hmac-sha256-keyed", len, macNowNs() - t0, iters);
    EVP_MAC_CTX_free(base);
    EVP_MAC_free(mac);
}

/* rounds passes of the EVP_MAC name (HMAC-SHA256) over buf in 64 KiB pieces. */
static void macPayloadEvp(const char *name, const char *what, const uint8_t *buf, size_t size,
                          int rounds)
{
    static const uint8_t key[OBJ_WIRE_KEY] = {7};
    EVP_MAC *mac = EVP_MAC_fetch(NULL, name, NULL);
    OSSL_PARAM params[] = {OSSL_PARAM_utf8_string("digest", "SHA256", 0), OSSL_PARAM_END};
    uint8_t tag[32];
    size_t out;

    double t0 = macNowNs();
    for (int r = 0; r < rounds; r++) {
        EVP_MAC_CTX *c = EVP_MAC_CTX_new(mac);
        EVP_MAC_init(c, key, sizeof(key), params);
        for (size_t off = 0; off < size; off += 65536)
            EVP_MAC_update(c, buf + off, size - off < 65536 ? size - off : 65536);
        EVP_MAC_final(c, tag, &out, sizeof(tag));
        EVP_MAC_CTX_free(c);
    }
    macRow(what, size, macNowNs() - t0, rounds);
    EVP_MAC_free(mac);
}

/* rounds passes of an AEAD over buf as additional data only (a MAC), in
 * 64 KiB pieces, with a fresh IV per pass as the session MAC does. */
static void macPayloadAead(const EVP_CIPHER *cipher, const char *what, const uint8_t *buf,
                           size_t size, int rounds)
{
    static const uint8_t key[OBJ_WIRE_KEY] = {7};
    uint8_t iv[12] = {0}, tag[16], none[16];
    int n;
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    EVP_EncryptInit_ex(c, cipher, NULL, key, NULL);

    double t0 = macNowNs();
    for (int r = 0; r < rounds; r++) {
        iv[0] = (uint8_t)r;
        EVP_EncryptInit_ex(c, NULL, NULL, NULL, iv);
        for (size_t off = 0; off < size; off += 65536)
            EVP_EncryptUpdate(c, NULL, &n, buf + off,
                              (int)(size - off < 65536 ? size - off : 65536));
        EVP_EncryptFinal_ex(c, none, &n);
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, 16, tag);
    }
    macRow(what, size, macNowNs() - t0, rounds);
    EVP_CIPHER_CTX_free(c);
}

/* One pass over buf (size bytes) in 64 KiB pieces, rounds times, per way. */
static void macPayload(const uint8_t *buf, size_t size, int rounds)
{
    static const uint8_t key[OBJ_WIRE_KEY] = {7};
    const size_t piece = 64 * 1024;
    uint8_t tag[32];
    WireMac *w = wireMacNew(key);
    uint8_t frame[OBJ_WIRE_HDR_LEN] = {9};

    double t0 = macNowNs();
    for (int r = 0; r < rounds; r++) {
        wireMacFrame(w, frame, sizeof(frame), tag);
        wireMacPayloadBegin(w);
        for (size_t off = 0; off < size; off += piece)
            wireMacPayloadUpdate(w, buf + off, size - off < piece ? size - off : piece);
        wireMacPayloadEnd(w, tag);
    }
    macRow("payload-gmac", size, macNowNs() - t0, rounds);
    wireMacFree(w);

    macPayloadEvp("HMAC", "payload-hmac-sha256", buf, size, rounds);
    macPayloadAead(EVP_chacha20_poly1305(), "payload-poly1305", buf, size, rounds);

    XXH3_state_t *x = XXH3_createState();
    volatile uint64_t sink = 0;
    t0 = macNowNs();
    for (int r = 0; r < rounds; r++) {
        XXH3_64bits_reset(x);
        for (size_t off = 0; off < size; off += piece)
            XXH3_64bits_update(x, buf + off, size - off < piece ? size - off : piece);
        sink ^= XXH3_64bits_digest(x);
    }
    macRow("payload-xxh3-checksum", size, macNowNs() - t0, rounds);
    XXH3_freeState(x);
}

/* ---- the path's own feeding pattern ------------------------------------------------ */

/* What read() returned on the fetching node over loopback while it fetched
 * 16 MiB objects (bench/read-pieces.sh, bench/results/read-pieces.txt):
 * reads per power-of-two class, pieces of a class drawn uniformly in it. */
static const struct {
    size_t from;
    int reads;
} macReadPieces[] = {{64u << 10, 18}, {128u << 10, 29}, {256u << 10, 114}, {512u << 10, 202},
                     {1u << 20, 141}, {2u << 20, 22},   {4u << 20, 2}};
/* The relay's PART payloads (module/transfer/serve.c). */
#define MAC_PART_MIN (128u << 10)
#define MAC_PART_MAX (512u << 10)
/* Each timing covers at least this many bytes (whole objects). */
#define MAC_PATH_BYTES (64u << 20)
#define MAC_MAX_PIECES 4096

static uint64_t macRand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One piece size as the receive path sees it (from macReadPieces). */
static size_t macReadPiece(uint64_t *rng)
{
    int total = 0;
    for (size_t i = 0; i < sizeof(macReadPieces) / sizeof(macReadPieces[0]); i++)
        total += macReadPieces[i].reads;
    int pick = (int)(macRand(rng) % (uint64_t)total);
    size_t i = 0;
    while (pick >= macReadPieces[i].reads)
        pick -= macReadPieces[i++].reads;
    return macReadPieces[i].from + macRand(rng) % macReadPieces[i].from;
}

/* How a size-byte object reaches the MAC: pieces (bytes each, in order) and
 * where tagged units (a DATA payload, or a PART) begin: unit[k] is 1 when
 * piece k starts one. relay: units of MAC_PART_MIN..MAC_PART_MAX bytes,
 * each cut into read pieces; else one unit. Returns the number of pieces. */
static int macPlan(size_t size, int relay, uint64_t seed, size_t *piece, uint8_t *unit)
{
    uint64_t rng = seed | 1;
    int n = 0;
    for (size_t off = 0; off < size && n < MAC_MAX_PIECES;) {
        size_t left = size - off, part = left;
        if (relay) {
            part = MAC_PART_MIN + macRand(&rng) % (MAC_PART_MAX - MAC_PART_MIN + 1);
            part = part < left ? part : left;
        }
        for (size_t in = 0; in < part && n < MAC_MAX_PIECES;) {
            size_t p = macReadPiece(&rng);
            p = p < part - in ? p : part - in;
            unit[n] = in == 0;
            piece[n++] = p;
            in += p;
        }
        off += part;
    }
    return n;
}

enum { MAC_WAY_MEMCPY, MAC_WAY_GMAC, MAC_WAY_XXH3, MAC_WAY_GMAC_PASS, MAC_WAY_POLY1305, MAC_WAYS };
static const char *const macWayNames[MAC_WAYS] = {"memcpy", "gmac", "xxh3", "gmac-pass",
                                                  "poly1305"};

/* Where the path's bytes come from and go: a source ring (the socket's
 * side) and an arena, both larger than the caches, each object at the next
 * place in both, so that no object starts out hot in the cache. */
#define MAC_SRC_RING (32u << 20)
#define MAC_ARENA    (128u << 20)

typedef struct MacPath {
    const uint8_t *src; /* MAC_SRC_RING bytes */
    uint8_t *arena;     /* MAC_ARENA bytes */
    size_t srcOff, arenaOff;
    WireMac *w;
    XXH3_state_t *x;
    EVP_CIPHER_CTX *poly; /* ChaCha20-Poly1305 keyed, fed additional data only */
    const uint8_t *frame; /* the PART frame tagged before each unit */
    size_t flen;
} MacPath;

/* One object of the plan through the receive path: every piece copied
 * from the source ring into the object's place in the arena (the read()),
 * then, while it is hot, fed to the payload MAC (a frame tag and a payload
 * tag per unit) and to XXH3: each step timed on its own, added into
 * ns[MAC_WAY_*]. For comparison: Poly1305 (ChaCha20-Poly1305 over the
 * pieces as additional data, a nonce per unit: a MAC the session could use
 * instead of GMAC) fed the same pieces, and the payload MAC as a separate
 * pass over the whole landed object (ns[MAC_WAY_GMAC_PASS]). */
static void macPathObject(MacPath *p, const size_t *piece, const uint8_t *unit, int n, size_t size,
                          double ns[MAC_WAYS])
{
    uint8_t tag[OBJ_WIRE_MAC];
    static volatile uint64_t sink;
    if (p->srcOff + size > MAC_SRC_RING)
        p->srcOff = 0;
    if (p->arenaOff + size > MAC_ARENA)
        p->arenaOff = 0;
    const uint8_t *src = p->src + p->srcOff;
    uint8_t *dst = p->arena + p->arenaOff;
    size_t off = 0;

    XXH3_64bits_reset(p->x);
    for (int k = 0; k < n; k++) {
        double t0 = macNowNs();
        memcpy(dst + off, src + off, piece[k]);
        double t1 = macNowNs();
        if (unit[k]) {
            if (k > 0)
                wireMacPayloadEnd(p->w, tag);
            wireMacFrame(p->w, p->frame, p->flen, tag);
            wireMacPayloadBegin(p->w);
        }
        wireMacPayloadUpdate(p->w, dst + off, piece[k]);
        if (k == n - 1)
            wireMacPayloadEnd(p->w, tag);
        double t2 = macNowNs();
        XXH3_64bits_update(p->x, dst + off, piece[k]);
        double t3 = macNowNs();
        int len;
        if (unit[k]) {
            uint8_t iv[12] = {(uint8_t)k, (uint8_t)(p->arenaOff >> 16)};
            if (k > 0) {
                EVP_EncryptFinal_ex(p->poly, tag, &len);
                EVP_CIPHER_CTX_ctrl(p->poly, EVP_CTRL_AEAD_GET_TAG, OBJ_WIRE_MAC, tag);
            }
            EVP_EncryptInit_ex(p->poly, NULL, NULL, NULL, iv);
        }
        EVP_EncryptUpdate(p->poly, NULL, &len, dst + off, (int)piece[k]);
        if (k == n - 1) {
            EVP_EncryptFinal_ex(p->poly, tag, &len);
            EVP_CIPHER_CTX_ctrl(p->poly, EVP_CTRL_AEAD_GET_TAG, OBJ_WIRE_MAC, tag);
        }
        double t4 = macNowNs();
        ns[MAC_WAY_MEMCPY] += t1 - t0;
        ns[MAC_WAY_GMAC] += t2 - t1;
        ns[MAC_WAY_XXH3] += t3 - t2;
        ns[MAC_WAY_POLY1305] += t4 - t3;
        off += piece[k];
    }
    sink ^= XXH3_64bits_digest(p->x);

    double t0 = macNowNs();
    off = 0;
    for (int k = 0; k < n; k++) {
        if (unit[k]) {
            if (k > 0)
                wireMacPayloadEnd(p->w, tag);
            wireMacFrame(p->w, p->frame, p->flen, tag);
            wireMacPayloadBegin(p->w);
        }
        wireMacPayloadUpdate(p->w, dst + off, piece[k]);
        off += piece[k];
    }
    wireMacPayloadEnd(p->w, tag);
    ns[MAC_WAY_GMAC_PASS] += macNowNs() - t0;
    sink ^= tag[0];

    p->srcOff += size;
    p->arenaOff += size;
}

/* The frame tag of the path: wireMacFrame over frame (len bytes), the best
 * of 200 batches of 1000 tags, in nanoseconds per tag (row frame-tag). */
static void macFrameBest(WireMac *w, const uint8_t *frame, size_t len)
{
    uint8_t tag[OBJ_WIRE_MAC];
    double best = 1e30;
    for (int b = 0; b < 200; b++) {
        double t0 = macNowNs();
        for (int i = 0; i < 1000; i++)
            wireMacFrame(w, frame, len, tag);
        double ns = (macNowNs() - t0) / 1000;
        best = ns < best ? ns : best;
    }
    printf("frame-tag,%zu,%.1f,%.2f,\n", len, best, (double)len / best);
}

/* The path rows for objects of size bytes: both patterns; each way's
 * figure is the best object of rounds passes over objs objects (at least
 * MAC_PATH_BYTES), so that a preemption on a shared machine spoils one
 * sample, not the figure. */
static void macPath(MacPath *p, size_t size, int rounds)
{
    static size_t piece[MAC_MAX_PIECES];
    static uint8_t unit[MAC_MAX_PIECES];
    int objs = (int)(MAC_PATH_BYTES / size);
    objs = objs < 1 ? 1 : objs;

    for (int relay = 0; relay <= 1; relay++) {
        int n = macPlan(size, relay, 0x9e3779b97f4a7c15ULL ^ size, piece, unit);
        double best[MAC_WAYS];
        for (int v = 0; v < MAC_WAYS; v++)
            best[v] = 1e30;
        for (int r = 0; r < rounds; r++)
            for (int o = 0; o < objs; o++) {
                double ns[MAC_WAYS] = {0};
                macPathObject(p, piece, unit, n, size, ns);
                for (int v = 0; v < MAC_WAYS; v++)
                    best[v] = ns[v] < best[v] ? ns[v] : best[v];
            }
        for (int v = 0; v < MAC_WAYS; v++)
            printf("%s-%s,%zu,%.1f,%.2f,%.2f\n", relay ? "relay" : "tcp", macWayNames[v], size,
                   best[v], (double)size / best[v], best[MAC_WAY_MEMCPY] / best[v]);
    }
}

int main(int argc, char **argv)
{
    long iters = 1000000;
    size_t size = 16u << 20;
    int rounds = 5, pathOnly = 0;
    static const struct option opts[] = {{"iters", required_argument, NULL, 'i'},
                                         {"size", required_argument, NULL, 's'},
                                         {"rounds", required_argument, NULL, 'r'},
                                         {"path-only", no_argument, NULL, 'p'},
                                         {0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'i')
            iters = atol(optarg);
        else if (o == 's')
            size = (size_t)atoll(optarg);
        else if (o == 'r')
            rounds = atoi(optarg);
        else if (o == 'p')
            pathOnly = 1;
        else {
            fprintf(stderr,
                    "usage: mac-cost [--iters N] [--size BYTES] [--rounds R] [--path-only]\n");
            return 2;
        }
    }
    const size_t pathMax = 16u << 20;
    size_t bufSize = size > MAC_SRC_RING ? size : MAC_SRC_RING;
    uint8_t *buf = malloc(bufSize), *arena = malloc(MAC_ARENA);
    if (!buf || !arena || iters <= 0 || rounds <= 0 || size == 0)
        return 1;
    for (size_t i = 0; i < bufSize; i++)
        buf[i] = (uint8_t)(i * 131 + 7);
    memset(arena, 1, MAC_ARENA); /* its pages in place, as an arena's are */

    WireMsg ping = {.h = {.type = WIRE_PING, .reqId = 1}};
    WireMsg data = {.h = {.type = WIRE_DATA, .reqId = 1}};
    data.u.data.size = 4096;
    WireMsg part = {.h = {.type = WIRE_PART, .reqId = 1}};
    part.u.data.size = 16u << 20;
    part.u.data.len = MAC_PART_MAX;
    uint8_t f1[64], f2[64], f3[80];
    int n1 = wireEncode(&ping, f1, sizeof(f1)), n2 = wireEncode(&data, f2, sizeof(f2));
    int n3 = wireEncode(&part, f3, sizeof(f3));
    if (n1 < 0 || n2 < 0 || n3 < 0) {
        fprintf(stderr, "mac-cost: wireEncode failed\n");
        return 1;
    }

    printf("what,bytes,ns_per_op,gb_per_s,x_memcpy\n");
    if (!pathOnly) {
        macFrames(f1, (size_t)n1, iters);
        macFrames(f2, (size_t)n2, iters);
        macFrames(f3, (size_t)n3, iters);
        int payloadRounds = (int)(((size_t)8 << 30) / size);
        macPayload(buf, size, payloadRounds < 3 ? 3 : payloadRounds > 200 ? 200 : payloadRounds);
        macPayload(buf, 4096, 200000);
    }
    static const uint8_t key[OBJ_WIRE_KEY] = {7};
    MacPath p = {.src = buf, .arena = arena, .frame = f3, .flen = (size_t)n3};
    p.w = wireMacNew(key);
    p.x = XXH3_createState();
    p.poly = EVP_CIPHER_CTX_new();
    if (!p.poly || EVP_EncryptInit_ex(p.poly, EVP_chacha20_poly1305(), NULL, key, NULL) != 1)
        p.x = NULL;
    if (!p.w || !p.x) {
        fprintf(stderr, "mac-cost: wireMacNew, XXH3_createState or ChaCha20-Poly1305 failed\n");
        return 1;
    }
    macFrameBest(p.w, f1, (size_t)n1);
    macFrameBest(p.w, f3, (size_t)n3);
    for (size_t s = 64u << 10; s <= pathMax; s *= 4)
        macPath(&p, s, rounds);
    XXH3_freeState(p.x);
    EVP_CIPHER_CTX_free(p.poly);
    wireMacFree(p.w);
    free(arena);
    free(buf);
    return 0;
}
