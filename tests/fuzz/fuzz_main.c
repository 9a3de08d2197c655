/*
 * fuzz_main.c - standalone driver for the wire fuzz target, for machines
 * (and test runs) without libFuzzer.
 *
 * It feeds LLVMFuzzerTestOneInput a bounded stream of inputs from a seeded
 * generator: valid frames of every type with edge-case fields, the same
 * frames after one to four mutations (bit flips, interesting values written
 * over length and size fields, truncation, extension, a header bodyLen made
 * to agree or not), and plain random bytes. Without coverage feedback it is
 * a much weaker fuzzer than libFuzzer, but it is deterministic for a given
 * seed, needs only a C compiler, and stops after -n inputs or -t seconds,
 * whichever comes first. It fails if no input reached the deep paths (whole
 * valid frames), which would mean the generator is broken.
 *
 *   fuzz_wire_standalone [-n INPUTS] [-t SECONDS] [-s SEED]   fuzz
 *   fuzz_wire_standalone FILE...                              replay inputs
 *   fuzz_wire_standalone -w DIR                               write seed frames
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fuzz_gen.h"
#include "fuzz_wire.h"
#include "transfer/wire.h"

#define FUZZ_INPUT_MAX (OBJ_WIRE_HDR_LEN + OBJ_WIRE_MAX_BODY + 64)
#define FUZZ_SEEDS     64

/* Values at and around every limit the decoder enforces. */
static uint64_t fuzzInteresting(void)
{
    static const uint64_t v[] = {0,
                                 1,
                                 2,
                                 3,
                                 4,
                                 5,
                                 6,
                                 23,
                                 24,
                                 25,
                                 31,
                                 32,
                                 33,
                                 35,
                                 36,
                                 37,
                                 57,
                                 58,
                                 59,
                                 0x7F,
                                 0x80,
                                 OBJ_WIRE_NAME_MAX,
                                 OBJ_WIRE_NAME_MAX + 1,
                                 OBJ_WIRE_TEXT_MAX,
                                 OBJ_WIRE_TEXT_MAX + 1,
                                 OBJ_WIRE_ID_MAX,
                                 OBJ_WIRE_ID_MAX + 1,
                                 OBJ_WIRE_MAX_BODY,
                                 OBJ_WIRE_MAX_BODY + 1,
                                 WIRE_TYPE_MAX,
                                 WIRE_TYPE_MAX + 1,
                                 WIRE_ERR_MAX,
                                 WIRE_ERR_MAX + 1,
                                 0xFF,
                                 0xFFFF,
                                 0x10000,
                                 OBJ_WIRE_MAGIC,
                                 OBJ_WIRE_VERSION + 1,
                                 0x7FFFFFFF,
                                 0xFFFFFFFF,
                                 OBJ_WIRE_SIZE_MAX,
                                 OBJ_WIRE_SIZE_MAX + 1,
                                 OBJ_WIRE_WANT_MAX,
                                 OBJ_WIRE_WANT_MAX + 1,
                                 UINT64_MAX};
    return v[fuzzBelow(sizeof(v) / sizeof(v[0]))];
}

/* A length in [0, max], biased to the ends. */
static uint16_t fuzzLen(unsigned max)
{
    switch (fuzzBelow(4)) {
        case 0:
            return 1;
        case 1:
            return (uint16_t)max;
        default:
            return (uint16_t)(1 + fuzzBelow(max));
    }
}

static void fuzzBytes(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)fuzzRand();
}

/* Encode a random valid message into buf. Returns the frame length. */
static size_t fuzzValidFrame(uint8_t *buf, size_t cap)
{
    static char text[OBJ_WIRE_ID_MAX];
    WireMsg m;

    fuzzBytes((uint8_t *)text, sizeof(text));
    memset(&m, 0, sizeof(m));
    m.h.type = (uint8_t)(1 + fuzzBelow(WIRE_TYPE_MAX));
    if (m.h.type == 8 || m.h.type == 11) /* the retired CREDIT and RING */
        m.h.type = WIRE_PING;
    m.h.reserved = fuzzBelow(2) ? 0 : (uint16_t)fuzzRand();
    m.h.reqId = fuzzBelow(2) ? 1 + fuzzBelow(100) : fuzzRand() | 1;
    switch (m.h.type) {
        case WIRE_HELLO:
            m.u.hello.features = (uint16_t)fuzzBelow(4);
            fuzzBytes(m.u.hello.nonce, OBJ_WIRE_NONCE);
            if (fuzzBelow(2))
                fuzzBytes(m.u.hello.proof, OBJ_WIRE_PROOF);
            m.u.hello.nameLen = fuzzLen(OBJ_WIRE_NAME_MAX);
            m.u.hello.name = text;
            break;
        case WIRE_AUTH:
            fuzzBytes(m.u.auth.proof, OBJ_WIRE_PROOF);
            break;
        case WIRE_FETCH:
            m.u.fetch.idLen = fuzzLen(OBJ_WIRE_ID_MAX);
            m.u.fetch.id = text;
            break;
        case WIRE_PART:
        case WIRE_RPART:
            m.u.data.size = 1 + fuzzRand() % OBJ_WIRE_SIZE_MAX;
            m.u.data.metaSize = fuzzBelow(2) ? 0 : OBJ_WIRE_SIZE_MAX;
            m.u.data.checksum = fuzzRand();
            m.u.data.offset = fuzzRand() % m.u.data.size;
            m.u.data.len = 1 + fuzzRand() % (m.u.data.size + m.u.data.metaSize - m.u.data.offset);
            if (m.h.type == WIRE_RPART) {
                m.u.data.addr = fuzzRand();
                m.u.data.rkey = (uint32_t)fuzzRand();
            }
            break;
        case WIRE_FETCHR:
            m.u.fetch.idLen = fuzzLen(OBJ_WIRE_ID_MAX);
            m.u.fetch.id = text;
            m.u.fetch.offset = fuzzRand() % (2 * OBJ_WIRE_SIZE_MAX + 1);
            m.u.fetch.flags = (uint32_t)fuzzBelow(WIRE_FETCHR_FLAGS + 1);
            break;
        case WIRE_DATA:
        case WIRE_RNDV:
            m.u.data.size = fuzzRand() % (OBJ_WIRE_SIZE_MAX + 1);
            m.u.data.metaSize = fuzzBelow(2) ? 0 : OBJ_WIRE_SIZE_MAX;
            m.u.data.checksum = fuzzRand();
            m.u.data.addr = fuzzRand();
            m.u.data.rkey = (uint32_t)fuzzRand();
            break;
        case WIRE_ERROR:
            m.u.error.code = (uint16_t)(1 + fuzzBelow(WIRE_ERR_MAX));
            m.u.error.textLen = fuzzBelow(3) ? fuzzLen(OBJ_WIRE_TEXT_MAX) : 0;
            m.u.error.text = text;
            break;
        case WIRE_REPL:
            m.u.repl.flags = (uint32_t)fuzzBelow(WIRE_REPL_FLAGS + 1);
            m.u.repl.want = fuzzLen(OBJ_WIRE_WANT_MAX);
            m.u.repl.checksum = fuzzRand();
            m.u.repl.idLen = fuzzLen(OBJ_WIRE_ID_MAX);
            m.u.repl.id = text;
            break;
        case WIRE_HELD:
            m.u.held.checksum = fuzzRand();
            break;
        default:
            break;
    }
    int n = wireEncode(&m, buf, cap);
    if (n < 0) {
        fprintf(stderr, "fuzz_main: generator built an invalid %s\n", wireTypeName(m.h.type));
        abort();
    }
    return (size_t)n;
}

static void fuzzPutLe(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Apply one random mutation to buf (len bytes, cap room); returns the new length. */
static size_t fuzzMutate(uint8_t *buf, size_t len, size_t cap)
{
    size_t at = fuzzBelow(len > 0 ? len : 1);
    static const int widths[] = {1, 2, 4, 8};
    int w = widths[fuzzBelow(4)];

    switch (fuzzBelow(8)) {
        case 0: /* flip a bit */
            if (len > 0)
                buf[at] ^= (uint8_t)(1u << fuzzBelow(8));
            return len;
        case 1: /* random byte */
            if (len > 0)
                buf[at] = (uint8_t)fuzzRand();
            return len;
        case 2: /* an interesting value over a field, often a length field */
            if (fuzzBelow(2) && len >= OBJ_WIRE_HDR_LEN + 8) {
                static const size_t fieldAt[] = {0, 1, 2, 4, 16, 18, 20, 24, 32, 72};
                at = fieldAt[fuzzBelow(sizeof(fieldAt) / sizeof(fieldAt[0]))];
            }
            if (at + (size_t)w <= len)
                fuzzPutLe(buf + at, fuzzInteresting(), w);
            return len;
        case 3: /* truncate */
            return fuzzBelow(len + 1);
        case 4: /* extend */
        {
            size_t more = fuzzBelow(2) ? 1 : fuzzBelow(cap - len + 1);
            if (len + more > cap)
                more = cap - len;
            fuzzBytes(buf + len, more);
            return len + more;
        }
        case 5: /* drop one byte from the middle */
            if (len == 0)
                return 0;
            memmove(buf + at, buf + at + 1, len - at - 1);
            return len - 1;
        case 6: /* duplicate one byte */
            if (len == 0 || len >= cap)
                return len;
            memmove(buf + at + 1, buf + at, len - at);
            return len + 1;
        default: /* make the header agree with the length, as a liar would */
            if (len >= OBJ_WIRE_HDR_LEN)
                fuzzPutLe(buf + 4, len - OBJ_WIRE_HDR_LEN, 4);
            return len;
    }
}

/* Run the target on a heap copy of exactly len bytes, for ASan's sake. */
static void fuzzRun(const uint8_t *data, size_t len)
{
    uint8_t *copy = malloc(len > 0 ? len : 1);
    if (copy == NULL)
        abort();
    if (len > 0)
        memcpy(copy, data, len);
    LLVMFuzzerTestOneInput(copy, len);
    free(copy);
}

/* Replay the inputs stored in files (crash reproducers, corpus entries).
 * Returns 0, or -1 if a file cannot be read. */
static int fuzzReplay(int argc, char **argv)
{
    static uint8_t buf[1 << 20];
    for (int i = 0; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (f == NULL) {
            fprintf(stderr, "fuzz_main: %s: %s\n", argv[i], strerror(errno));
            return -1;
        }
        size_t len = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        fuzzRun(buf, len);
        printf("replayed %s (%zu bytes): ok\n", argv[i], len);
    }
    return 0;
}

/* Write FUZZ_SEEDS valid frames into dir as seed-NN files, a starting corpus
 * for libFuzzer. Returns 0, or -1 on an I/O error. */
static int fuzzWriteSeeds(const char *dir)
{
    static uint8_t buf[FUZZ_INPUT_MAX];
    char path[4096];
    for (int i = 0; i < FUZZ_SEEDS; i++) {
        size_t len = fuzzValidFrame(buf, sizeof(buf));
        snprintf(path, sizeof(path), "%s/seed-%02d", dir, i);
        FILE *f = fopen(path, "wb");
        if (f == NULL || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
            fprintf(stderr, "fuzz_main: %s: %s\n", path, strerror(errno));
            if (f != NULL)
                fclose(f);
            return -1;
        }
    }
    printf("wrote %d seed frames to %s\n", FUZZ_SEEDS, dir);
    return 0;
}

int main(int argc, char **argv)
{
    static uint8_t buf[FUZZ_INPUT_MAX];
    unsigned long long inputs = 200000, seed = 1;
    double seconds = 8;
    const char *seedDir = NULL;
    int opt;

    while ((opt = getopt(argc, argv, "n:t:s:w:")) != -1) {
        char *end = NULL;
        switch (opt) {
            case 'n':
                inputs = strtoull(optarg, &end, 10);
                break;
            case 't':
                seconds = strtod(optarg, &end);
                break;
            case 's':
                seed = strtoull(optarg, &end, 10);
                break;
            case 'w':
                seedDir = optarg;
                end = optarg + strlen(optarg);
                break;
            default:
                end = NULL;
                break;
        }
        if (end == NULL || *end != '\0' || end == optarg) {
            fprintf(stderr, "usage: %s [-n INPUTS] [-t SECONDS] [-s SEED] | -w DIR | FILE...\n",
                    argv[0]);
            return 2;
        }
    }
    fuzzState = seed;
    if (seedDir != NULL)
        return fuzzWriteSeeds(seedDir) == 0 ? 0 : 1;
    if (optind < argc)
        return fuzzReplay(argc - optind, argv + optind) == 0 ? 0 : 1;

    double start = fuzzNow();
    unsigned long long i;
    for (i = 0; i < inputs; i++) {
        if ((i & 1023) == 0 && fuzzNow() - start > seconds)
            break;
        size_t len;
        uint64_t kind = fuzzBelow(16);
        if (kind == 0) { /* plain random bytes, mostly short */
            len = fuzzBelow(2) ? fuzzBelow(64) : fuzzBelow(sizeof(buf));
            fuzzBytes(buf, len);
        } else {
            len = fuzzValidFrame(buf, sizeof(buf));
            if (kind > 3) { /* a quarter of the frames stay valid */
                uint64_t rounds = 1 + fuzzBelow(4);
                for (uint64_t r = 0; r < rounds; r++)
                    len = fuzzMutate(buf, len, sizeof(buf));
            }
        }
        fuzzRun(buf, len);
    }

    const FuzzWireStats *st = &fuzzWireStats;
    printf("fuzz_wire: %llu inputs in %.1f s (seed %llu): headers ok %llu, frames ok %llu, "
           "raw bodies ok %llu, encodes ok %llu\n",
           i, fuzzNow() - start, seed, (unsigned long long)st->hdrOk,
           (unsigned long long)st->frameOk, (unsigned long long)st->rawBodyOk,
           (unsigned long long)st->encodeOk);
    if (i > 1000 && (st->frameOk == 0 || st->rawBodyOk == 0)) {
        fprintf(stderr, "fuzz_wire: no input decoded: the generator is broken\n");
        return 1;
    }
    return 0;
}
