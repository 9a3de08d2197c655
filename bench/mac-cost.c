/*
 * mac-cost.c - what the session MAC (module/transfer/wire.h) costs on this
 * CPU, per frame and per byte, beside the alternatives it was chosen over
 * (docs/security.md, "The session MAC"):
 *
 *   frame      wireMacFrame over a PING (16 bytes) and a DATA frame (40):
 *              nanoseconds per tag, against HMAC-SHA256 (truncated) of the
 *              same bytes with the key set up per call and reused;
 *   payload    wireMacPayload over SIZE bytes in 64 KiB pieces (as a socket
 *              hands them over): GB/s, against HMAC-SHA256 and XXH3-64 (the
 *              checksum the framer takes anyway) over the same buffer.
 *
 *   mac-cost [--iters N] [--size BYTES]
 *
 * CSV on stdout: what,bytes,ns_per_op,gb_per_s. One thread, a warm buffer.
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

static double macNowNs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void macRow(const char *what, size_t bytes, double ns, long ops)
{
    double per = ns / (double)ops;
    printf("%s,%zu,%.1f,%.2f\n", what, bytes, per, (double)bytes / per);
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

int main(int argc, char **argv)
{
    long iters = 1000000;
    size_t size = 16u << 20;
    static const struct option opts[] = {
        {"iters", required_argument, NULL, 'i'}, {"size", required_argument, NULL, 's'}, {0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'i')
            iters = atol(optarg);
        else if (o == 's')
            size = (size_t)atoll(optarg);
        else {
            fprintf(stderr, "usage: mac-cost [--iters N] [--size BYTES]\n");
            return 2;
        }
    }
    uint8_t *buf = malloc(size);
    if (!buf || iters <= 0)
        return 1;
    for (size_t i = 0; i < size; i++)
        buf[i] = (uint8_t)(i * 131 + 7);

    WireMsg ping = {.h = {.type = WIRE_PING, .reqId = 1}};
    WireMsg data = {.h = {.type = WIRE_DATA, .reqId = 1}};
    data.u.data.size = 4096;
    uint8_t f1[64], f2[64];
    int n1 = wireEncode(&ping, f1, sizeof(f1)), n2 = wireEncode(&data, f2, sizeof(f2));

    printf("what,bytes,ns_per_op,gb_per_s\n");
    macFrames(f1, (size_t)n1, iters);
    macFrames(f2, (size_t)n2, iters);
    int rounds = (int)(((size_t)8 << 30) / size);
    macPayload(buf, size, rounds < 3 ? 3 : rounds > 200 ? 200 : rounds);
    macPayload(buf, 4096, 200000);
    free(buf);
    return 0;
}
