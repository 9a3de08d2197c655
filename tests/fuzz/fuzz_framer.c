/*
 * fuzz_framer.c - fuzz target for the TCP transport's stream reassembly
 * (module/transfer/framer.c), with its own standalone driver (build with
 * -DFUZZ_STANDALONE; without it, link with libFuzzer: clang
 * -fsanitize=fuzzer,address ...).
 *
 * The property checked: what the framer reports does not depend on how the
 * stream is cut. Each input is fed three times, as a transport would feed
 * it (framerReadSpace, write, framerWrote, then framerNext until MORE):
 * whole (as much as the framer takes at once), one byte per read, and in
 * pieces whose sizes come from the input's first bytes. A receiver plays
 * the engine: for a DATA frame it asks for the payload that follows into a
 * heap buffer of exactly its length, or throws it away, or gives it up half
 * way (as a cancelled fetch does), all decided by the frame alone. The three
 * runs must report the same frames (canonical encodings), the same payload
 * bytes, and end the same way (the same error, or waiting for more). A
 * payload given up must not change after framerDiscardPayload, a payload
 * received whole has the checksum of its bytes (and no other has one), and
 * AddressSanitizer catches any byte written past a destination. Aborts on a
 * violation.
 *
 * Half the inputs (the first cut byte odd) are a session's stream: the
 * framer checks every frame's tag and every payload's tag under a fixed
 * key, and the standalone generator seals its frames under it. Then a
 * stream left whole must deliver every frame without an error, and a
 * mutated one fails (or waits) the same way whatever the cuts. (In a
 * session no payload is given up half way: whether the framer saw all of a
 * payload before the receiver gave it up depends on the cuts, and so would
 * whether its tag was checked.)
 *
 *   fuzz_framer_standalone [-n INPUTS] [-t SECONDS] [-s SEED]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fuzz_gen.h"
#include "transfer/framer.h"
#include "transfer/wire.h"

#define FUZZ_MAX_INPUT (128 * 1024)
#define FUZZ_CUTS      8
#define FUZZ_PAY_MAX   (64 * 1024) /* larger payloads: the receiver closes, as fetch.c would */

/* How a run ended, and a digest of everything it was told. */
typedef struct FuzzRun {
    uint64_t digest;
    uint64_t frames, payloads;
    int end; /* FRAMER_MORE (stream used up), FRAMER_ERROR, or -1 (the receiver closed) */
    const char *why;
    int inPayload; /* at the end: a payload was still due */
} FuzzRun;

/* The receiver's payload in progress. */
typedef struct FuzzPay {
    uint8_t *dst;      /* NULL: thrown away from the start */
    size_t len;        /* its length */
    int giveUpHalf;    /* give it up once half of it has arrived */
    int givenUp;       /* framerDiscardPayload was called */
    uint8_t *atGiveUp; /* dst as it was then */
} FuzzPay;

static uint64_t fuzzFrames, fuzzPayloads, fuzzGivenUp, fuzzErrors, fuzzInputs, fuzzMacErrors;
static int fuzzLastEnd; /* how the last input's runs ended */
static const uint8_t fuzzKey[OBJ_WIRE_KEY] = {0x6f, 0x62, 0x6a, 0x73, 1, 2, 3, 4, 5, 6, 7, 8};

/* A frame arrived: digest its canonical encoding; for DATA, say where its
 * payload goes. Returns 0, or -1 when the receiver closes the connection. */
static int fuzzOnFrame(Framer *f, const WireMsg *m, FuzzPay *pay, FuzzRun *run)
{
    static uint8_t enc[OBJ_WIRE_HDR_LEN + OBJ_WIRE_MAX_BODY];
    WireMsg copy = *m;
    int n = wireEncode(&copy, enc, sizeof(enc));

    fuzzCheck(n >= OBJ_WIRE_HDR_LEN, "a frame the framer delivered does not encode");
    run->digest = fuzzMix(run->digest, enc, (size_t)n);
    run->frames++;
    if (m->h.type != WIRE_DATA && m->h.type != WIRE_PART)
        return 0;
    uint64_t total = m->h.type == WIRE_PART ? m->u.data.len : m->u.data.size + m->u.data.metaSize;
    if (total > FUZZ_PAY_MAX)
        return -1;
    memset(pay, 0, sizeof(*pay));
    pay->len = (size_t)total;
    if (m->h.reqId % 4 != 0) { /* reqId % 4 == 0: thrown away from the start */
        pay->dst = malloc(pay->len);
        fuzzCheck(pay->dst != NULL || pay->len == 0, "malloc");
        if (pay->dst)
            memset(pay->dst, 0xA5, pay->len);
        pay->giveUpHalf = m->h.reqId % 4 == 1 && !f->mac;
    }
    fuzzCheck(framerExpectPayload(f, pay->dst, pay->len) == 0, "a second payload was refused");
    fuzzCheck(framerInPayload(f), "no payload due after framerExpectPayload");
    return 0;
}

/* Give the payload up once half of it has arrived (the framer's own count
 * of what is left: the receiver cannot know otherwise), as a cancel does. */
static void fuzzMaybeGiveUp(Framer *f, FuzzPay *pay)
{
    if (!pay->giveUpHalf || pay->givenUp || !framerInPayload(f))
        return;
    if (pay->len - f->payLeft < pay->len / 2 + 1 && f->payLeft > 0)
        return;
    framerDiscardPayload(f);
    pay->givenUp = 1;
    pay->atGiveUp = malloc(pay->len ? pay->len : 1);
    fuzzCheck(pay->atGiveUp != NULL, "malloc");
    if (pay->len)
        memcpy(pay->atGiveUp, pay->dst, pay->len);
}

/* The payload is complete: digest what is sure to be there whatever the
 * cuts (all of it, or the first half of one given up), then free it. */
static void fuzzOnPayloadDone(const Framer *f, FuzzPay *pay, FuzzRun *run)
{
    uint64_t sum;
    int have = framerPayloadHash(f, &sum) == 0;
    fuzzCheck(have == (pay->dst != NULL && !pay->givenUp),
              "a checksum exactly for payloads received whole");
    if (have)
        fuzzCheck(sum == XXH3_64bits(pay->dst, pay->len),
                  "the checksum taken as bytes landed differs from a second pass");
    size_t sure = pay->dst == NULL ? 0 : pay->giveUpHalf ? pay->len / 2 + 1 : pay->len;

    if (sure > pay->len)
        sure = pay->len;
    run->digest = fuzzMix(run->digest, "P", 1);
    run->digest = fuzzMix(run->digest, &pay->len, sizeof(pay->len));
    if (sure)
        run->digest = fuzzMix(run->digest, pay->dst, sure);
    if (pay->givenUp) {
        fuzzCheck(memcmp(pay->atGiveUp, pay->dst, pay->len) == 0,
                  "payload bytes written after framerDiscardPayload");
        fuzzGivenUp++;
    }
    run->payloads++;
    free(pay->atGiveUp);
    free(pay->dst);
    memset(pay, 0, sizeof(*pay));
}

/* A session under fuzzKey: sealed (1), sealed and encrypted (2), or none
 * (0); NULL for none, or when libcrypto fails. */
static WireMac *fuzzMac(int sealed, WireCrypt crypt)
{
    WireMac *mac = sealed ? wireMacNew(fuzzKey) : NULL;
    if (mac && sealed == 2 && wireMacSetEncrypt(mac, fuzzKey, crypt) == -1) {
        wireMacFree(mac);
        return NULL;
    }
    return mac;
}

/* Feed stream[0..len) to a fresh framer in reads of at most the sizes
 * cuts[] names (cycled; NULL: each read as large as the framer allows;
 * nCuts 0 with cuts non-NULL: one byte per read). */
static void fuzzFeed(const uint8_t *stream, size_t len, const uint8_t *cuts, size_t nCuts,
                     int sealed, FuzzRun *run)
{
    Framer *f = malloc(sizeof(*f));
    WireMac *mac = fuzzMac(sealed, WIRE_CRYPT_DECRYPT);
    FuzzPay pay = {0};
    size_t off = 0, c = 0;

    fuzzCheck(f != NULL && (mac != NULL || !sealed), "malloc");
    framerInit(f);
    framerSetMac(f, mac);
    memset(run, 0, sizeof(*run));
    run->digest = 0xcbf29ce484222325ULL;
    /* Every round either ends the run or moves at least one byte. */
    for (size_t round = 0; round <= 2 * len + 2; round++) {
        for (int ev = 0;; ev++) {
            WireMsg m;
            const char *why = NULL;
            fuzzCheck(ev <= FRAMER_BUF + 2, "framerNext never says MORE");
            FramerEvent e = framerNext(f, &m, &why);
            if (e == FRAMER_MORE)
                break;
            if (e == FRAMER_ERROR) {
                fuzzCheck(why != NULL, "an error without a reason");
                const char *again = NULL;
                fuzzCheck(framerNext(f, &m, &again) == FRAMER_ERROR && again == why,
                          "an error that does not stay");
                run->end = FRAMER_ERROR;
                run->why = why;
                goto out;
            }
            if (e == FRAMER_PAYLOAD_DONE) {
                fuzzOnPayloadDone(f, &pay, run);
                continue;
            }
            fuzzCheck(e == FRAMER_FRAME, "an unknown event");
            if (fuzzOnFrame(f, &m, &pay, run) == -1) {
                run->end = -1;
                goto out;
            }
            fuzzMaybeGiveUp(f, &pay);
        }
        if (off == len) {
            run->end = FRAMER_MORE;
            run->inPayload = framerInPayload(f);
            goto out;
        }
        uint8_t *dst;
        size_t room = framerReadSpace(f, &dst);
        fuzzCheck(room > 0, "no room although every event was taken");
        size_t n = len - off;
        if (cuts && nCuts == 0)
            n = 1;
        else if (cuts) {
            uint8_t k = cuts[c++ % nCuts];
            size_t piece = k & 0x80 ? (size_t)(k & 0x7f) * 97 + 1 : (size_t)k + 1;
            n = n < piece ? n : piece;
        }
        n = n < room ? n : room;
        if (dst)
            memcpy(dst, stream + off, n);
        fuzzCheck(framerWrote(f, n) == 0, "framerWrote refused what framerReadSpace allowed");
        fuzzCheck(framerWrote(f, 0) == -1, "framerWrote took a second write");
        off += n;
        fuzzMaybeGiveUp(f, &pay);
    }
    fuzzCheck(0, "the feeding loop did not end");
out:
    free(pay.atGiveUp);
    free(pay.dst);
    framerDestroy(f);
    wireMacFree(mac);
    free(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < FUZZ_CUTS || size > FUZZ_MAX_INPUT)
        return 0;
    const uint8_t *cuts = data, *stream = data + FUZZ_CUTS;
    size_t len = size - FUZZ_CUTS;
    /* A heap copy of exactly the stream, for ASan's sake. */
    uint8_t *copy = malloc(len ? len : 1);
    fuzzCheck(copy != NULL, "malloc");
    memcpy(copy, stream, len);

    FuzzRun whole, bytes, pieces;
    int sealed = cuts[0] & 1 ? 1 + ((cuts[0] >> 1) & 1) : 0;
    fuzzFeed(copy, len, NULL, 0, sealed, &whole);
    fuzzFeed(copy, len, cuts, 0, sealed, &bytes);
    fuzzFeed(copy, len, cuts, FUZZ_CUTS, sealed, &pieces);
    const FuzzRun *other[] = {&bytes, &pieces};
    for (int i = 0; i < 2; i++) {
        fuzzCheck(whole.frames == other[i]->frames, "frame count depends on the cuts");
        fuzzCheck(whole.payloads == other[i]->payloads, "payload count depends on the cuts");
        fuzzCheck(whole.digest == other[i]->digest, "frames or payloads depend on the cuts");
        fuzzCheck(whole.end == other[i]->end, "how the stream ends depends on the cuts");
        fuzzCheck(whole.why == other[i]->why, "the error depends on the cuts");
        fuzzCheck(whole.inPayload == other[i]->inPayload, "the final state depends on the cuts");
    }
    fuzzInputs++;
    fuzzFrames += whole.frames;
    fuzzPayloads += whole.payloads;
    fuzzErrors += whole.end == FRAMER_ERROR;
    fuzzMacErrors += whole.end == FRAMER_ERROR && strstr(whole.why, "MAC") != NULL;
    fuzzLastEnd = whole.end;
    free(copy);
    return 0;
}

#ifdef FUZZ_STANDALONE
/* ---- standalone driver: valid streams, mutated, and random bytes ---------------------- */

static uint8_t fuzzText[OBJ_WIRE_ID_MAX];

/* Append one valid frame (DATA with its payload) at out[at], sealed under
 * tx unless it is NULL; returns the new length (unchanged if it would not
 * fit in cap). */
static size_t fuzzFrame(uint8_t *out, size_t at, size_t cap, WireMac *tx)
{
    static uint8_t pay[FUZZ_MAX_INPUT];
    WireMsg m;
    size_t payLen = 0;

    memset(&m, 0, sizeof(m));
    m.h.type = (uint8_t)(1 + fuzzBelow(WIRE_TYPE_MAX));
    if (m.h.type == 8 || m.h.type == 11) /* the retired CREDIT and RING */
        m.h.type = WIRE_PING;
    if (fuzzBelow(2))
        m.h.type = WIRE_DATA; /* the payload paths are the point */
    m.h.reqId = 1 + fuzzBelow(16);
    switch (m.h.type) {
        case WIRE_HELLO:
            m.u.hello.nameLen = (uint16_t)(1 + fuzzBelow(OBJ_WIRE_NAME_MAX));
            m.u.hello.name = (const char *)fuzzText;
            break;
        case WIRE_PART:
        case WIRE_RPART: /* an RPART carries no payload: only its frame goes through */
            m.u.data.size = 1 + fuzzBelow(3000);
            m.u.data.offset = fuzzBelow((uint32_t)m.u.data.size);
            m.u.data.len = 1 + fuzzBelow((uint32_t)(m.u.data.size - m.u.data.offset));
            m.u.data.addr = fuzzRand();
            m.u.data.rkey = (uint32_t)fuzzRand();
            if (m.h.type == WIRE_PART)
                payLen = m.u.data.len;
            break;
        case WIRE_FETCH:
        case WIRE_FETCHR:
            m.u.fetch.idLen = (uint16_t)(1 + fuzzBelow(OBJ_WIRE_ID_MAX));
            m.u.fetch.id = (const char *)fuzzText;
            break;
        case WIRE_DATA:
        case WIRE_RNDV: {
            static const uint64_t sizes[] = {0, 1, 2, 15, 16, 17, 4095, 4096, 8208, 20000};
            m.u.data.size = fuzzBelow(2) ? sizes[fuzzBelow(10)] : fuzzBelow(3000);
            m.u.data.metaSize = fuzzBelow(3) ? 0 : fuzzBelow(64);
            m.u.data.checksum = fuzzRand();
            if (m.h.type == WIRE_DATA)
                payLen = m.u.data.size + m.u.data.metaSize;
            break;
        }
        case WIRE_ERROR:
            m.u.error.code = (uint16_t)(1 + fuzzBelow(WIRE_ERR_MAX));
            m.u.error.textLen = (uint16_t)fuzzBelow(OBJ_WIRE_TEXT_MAX + 1);
            m.u.error.text = (const char *)fuzzText;
            break;
        case WIRE_REPL:
            m.u.repl.flags = (uint32_t)fuzzBelow(WIRE_REPL_FLAGS + 1);
            m.u.repl.want = (uint32_t)(1 + fuzzBelow(OBJ_WIRE_WANT_MAX));
            m.u.repl.checksum = fuzzRand();
            m.u.repl.idLen = (uint16_t)(1 + fuzzBelow(OBJ_WIRE_ID_MAX));
            m.u.repl.id = (const char *)fuzzText;
            break;
        case WIRE_HELD:
            m.u.held.checksum = fuzzRand();
            break;
        default:
            break;
    }
    if (payLen > sizeof(pay))
        return at;
    for (size_t i = 0; i < payLen; i++)
        pay[i] = (uint8_t)fuzzRand();
    int64_t paySeq = -1;
    int n = wireEncode(&m, out + at, cap - at);
    if (n >= 0)
        n = wireSeal(tx, out + at, cap - at, n, &paySeq);
    if (n < 0 || at + (size_t)n + payLen + OBJ_WIRE_MAC > cap)
        return at;
    at += (size_t)n;
    if (paySeq < 0) { /* no session: the payload as it is */
        memcpy(out + at, pay, payLen);
        return at + payLen;
    }
    /* the payload (encrypted, when tx encrypts) and its tag after it */
    if (wireMacPayloadBeginAt(tx, (uint64_t)paySeq) == -1 ||
        wireMacPayloadCrypt(tx, pay, out + at, payLen) == -1)
        return at;
    if (wireMacCrypt(tx) == WIRE_CRYPT_NONE)
        memcpy(out + at, pay, payLen);
    at += payLen;
    wireMacPayloadEnd(tx, out + at);
    return at + OBJ_WIRE_MAC;
}

static void fuzzPutLe(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* One mutation of stream[0..len) (cap room); returns the new length. */
static size_t fuzzMutate(uint8_t *s, size_t len, size_t cap)
{
    static const uint64_t lens[] = {0,
                                    1,
                                    23,
                                    24,
                                    25,
                                    OBJ_WIRE_MAX_BODY,
                                    OBJ_WIRE_MAX_BODY + 1,
                                    FUZZ_PAY_MAX,
                                    FUZZ_PAY_MAX + 1,
                                    UINT32_MAX,
                                    OBJ_WIRE_SIZE_MAX};
    size_t at = fuzzBelow(len ? len : 1);

    switch (fuzzBelow(6)) {
        case 0: /* flip a bit */
            if (len)
                s[at] ^= (uint8_t)(1u << fuzzBelow(8));
            return len;
        case 1: /* a length at a header's bodyLen or a DATA size, wherever they may be */
            if (at + 8 <= len)
                fuzzPutLe(s + at, lens[fuzzBelow(sizeof(lens) / sizeof(lens[0]))],
                          fuzzBelow(2) ? 4 : 8);
            return len;
        case 2: /* truncate */
            return fuzzBelow(len + 1);
        case 3: /* drop a run of bytes */
        {
            size_t n = fuzzBelow(len - at + 1);
            memmove(s + at, s + at + n, len - at - n);
            return len - n;
        }
        case 4: /* insert random bytes */
        {
            size_t n = 1 + fuzzBelow(32);
            if (len + n > cap)
                return len;
            memmove(s + at + n, s + at, len - at);
            for (size_t i = 0; i < n; i++)
                s[at + i] = (uint8_t)fuzzRand();
            return len + n;
        }
        default: /* a random byte */
            if (len)
                s[at] = (uint8_t)fuzzRand();
            return len;
    }
}

int main(int argc, char **argv)
{
    static uint8_t in[FUZZ_MAX_INPUT];
    uint64_t inputs = 12000, seed = 1;
    double seconds = 8;

    if (fuzzParseArgs(argc, argv, &inputs, &seconds, &seed))
        return 2;
    for (size_t i = 0; i < sizeof(fuzzText); i++)
        fuzzText[i] = (uint8_t)('a' + i % 26);
    double start = fuzzNow();
    uint64_t done = 0;
    for (; done < inputs && fuzzNow() - start < seconds; done++) {
        size_t n = 0, rounds = 0;
        for (; n < FUZZ_CUTS; n++)
            in[n] = (uint8_t)fuzzRand();
        int sealed = in[0] & 1 ? 1 + ((in[0] >> 1) & 1) : 0;
        if (fuzzBelow(16) == 0) { /* random bytes */
            size_t len = fuzzBelow(2) ? fuzzBelow(64) : fuzzBelow(8192);
            for (size_t i = 0; i < len; i++)
                in[n++] = (uint8_t)fuzzRand();
            rounds = 1;
        } else {
            size_t frames = 1 + fuzzBelow(8);
            WireMac *tx = fuzzMac(sealed, WIRE_CRYPT_ENCRYPT);
            fuzzCheck(tx != NULL || !sealed, "wireMacNew");
            for (size_t i = 0; i < frames; i++)
                n = fuzzFrame(in, n, sizeof(in), tx);
            wireMacFree(tx);
            rounds = fuzzBelow(4) == 0 ? 0 : 1 + fuzzBelow(3);
            for (size_t r = 0; r < rounds; r++)
                n = FUZZ_CUTS + fuzzMutate(in + FUZZ_CUTS, n - FUZZ_CUTS, sizeof(in) - FUZZ_CUTS);
        }
        LLVMFuzzerTestOneInput(in, n);
        fuzzCheck(!sealed || rounds > 0 || fuzzLastEnd != FRAMER_ERROR,
                  "a sealed stream left whole failed its tags");
    }
    printf("fuzz_framer: %llu inputs in %.1f s (seed %llu): %llu frames, %llu payloads (%llu "
           "given up half way), %llu bad streams (%llu failed a session MAC)\n",
           (unsigned long long)done, fuzzNow() - start, (unsigned long long)seed,
           (unsigned long long)fuzzFrames, (unsigned long long)fuzzPayloads,
           (unsigned long long)fuzzGivenUp, (unsigned long long)fuzzErrors,
           (unsigned long long)fuzzMacErrors);
    if (done > 100 && (fuzzFrames == 0 || fuzzPayloads == 0 || fuzzGivenUp == 0 ||
                       fuzzErrors == 0 || fuzzMacErrors == 0)) {
        fprintf(stderr, "fuzz_framer: the generator never reached frames, payloads, give-ups "
                        "and errors\n");
        return 1;
    }
    return 0;
}
#endif
