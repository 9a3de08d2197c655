/*
 * fuzz_resp.c - fuzz target for the RESP request parser (module/redis/resp.c),
 * with its own standalone driver (build with -DFUZZ_STANDALONE; without it,
 * link with libFuzzer: clang -fsanitize=fuzzer,address ...).
 *
 * The property checked: parsing is independent of how the stream is cut.
 * Each input is parsed twice: once handed over whole, once in pieces whose
 * sizes come from the input's first bytes, with the consumed prefix dropped
 * after every call as the RDMA door does. Both runs must return the same
 * requests (arguments byte for byte) and end in the same state (more, or the
 * same protocol error); every argument must lie inside the buffer it points
 * into, and consumed never exceeds what was buffered. Aborts on a violation;
 * ASan/UBSan catch the rest.
 *
 *   fuzz_resp_standalone [-n INPUTS] [-t SECONDS] [-s SEED]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fuzz_gen.h"
#include "redis/resp.h"

#define FUZZ_MAX_INPUT (256 * 1024)

/* A digest of the requests one run returned, and how it ended. */
typedef struct FuzzRun {
    uint64_t digest;
    uint64_t requests;
    int last; /* RESP_MORE or RESP_ERROR */
    char err[96];
} FuzzRun;

static uint64_t fuzzRequests, fuzzErrors;

/* Feed data[0..len) to a fresh parser in pieces of the sizes cuts[] names
 * (cycled; 0 cuts = all at once) and record what it returned. */
static void fuzzParse(const uint8_t *data, size_t len, const uint8_t *cuts, size_t nCuts, int auth,
                      FuzzRun *run)
{
    RespParser p;
    char *buf = malloc(len + 1);
    size_t have = 0, fed = 0, c = 0;

    fuzzCheck(buf != NULL, "malloc");
    respParserInit(&p);
    memset(run, 0, sizeof(*run));
    run->digest = 0xcbf29ce484222325ULL;
    run->last = RESP_MORE;
    while (fed < len) {
        size_t piece = nCuts ? (size_t)cuts[c++ % nCuts] + 1 : len;
        if (piece > len - fed)
            piece = len - fed;
        memcpy(buf + have, data + fed, piece);
        have += piece;
        fed += piece;
        for (;;) {
            int rc = respParse(&p, buf, have, auth);
            fuzzCheck(rc != RESP_NOMEM, "out of memory");
            fuzzCheck(p.consumed <= have, "consumed more than was buffered");
            if (rc == RESP_ERROR) {
                run->last = RESP_ERROR;
                snprintf(run->err, sizeof(run->err), "%s", p.err);
                goto out;
            }
            if (rc == RESP_DONE) {
                run->requests++;
                for (size_t i = 0; i < p.argc; i++) {
                    size_t alen;
                    const char *a = respArg(&p, buf, i, &alen);
                    if (p.isInline)
                        fuzzCheck(p.argv[i].off + alen <= p.inlLen, "inline arg out of range");
                    else
                        fuzzCheck(p.argv[i].off + alen <= have, "arg outside the buffer");
                    run->digest = fuzzMix(run->digest, a, alen);
                }
                run->digest = fuzzMix(run->digest, "|", 1);
            }
            memmove(buf, buf + p.consumed, have - p.consumed);
            have -= p.consumed;
            respParserConsumed(&p);
            if (rc == RESP_MORE)
                break;
        }
    }
out:
    respParserFree(&p);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || size > FUZZ_MAX_INPUT)
        return 0;
    /* Byte 0: auth flag and how many cut sizes follow; then the cut sizes. */
    int auth = data[0] & 1;
    size_t nCuts = (size_t)(data[0] >> 1) % 8 + 1;
    if (size < 1 + nCuts)
        return 0;
    const uint8_t *cuts = data + 1, *stream = data + 1 + nCuts;
    size_t len = size - 1 - nCuts;

    FuzzRun whole, pieces;
    fuzzParse(stream, len, NULL, 0, auth, &whole);
    fuzzParse(stream, len, cuts, nCuts, auth, &pieces);
    fuzzCheck(whole.requests == pieces.requests, "request count depends on the cuts");
    fuzzCheck(whole.digest == pieces.digest, "arguments depend on the cuts");
    fuzzCheck(whole.last == pieces.last, "final state depends on the cuts");
    fuzzCheck(strcmp(whole.err, pieces.err) == 0, "error text depends on the cuts");
    fuzzRequests += whole.requests;
    fuzzErrors += whole.last == RESP_ERROR;
    return 0;
}

#ifdef FUZZ_STANDALONE
/* ---- standalone driver: generated requests, mutated, and random bytes ---------------- */

static size_t fuzzAppend(uint8_t *out, size_t at, size_t cap, const char *s, size_t n)
{
    if (at + n > cap)
        return at;
    memcpy(out + at, s, n);
    return at + n;
}

/* One request, valid or nearly so: multibulk, inline (with quotes and
 * escapes), empty forms, and counts/lengths at the limits. */
static size_t fuzzRequest(uint8_t *out, size_t at, size_t cap)
{
    static const char *inl[] = {"PING\r\n",    "SET k \"a b\\x41\\n\"\n", "GET 'k'\r\n",
                                "\r\n",        "  ECHO   x  \r\n",        "SET \"unterminated\r\n",
                                "a \"b\"c\r\n"};
    static const char *odd[] = {"*0\r\n",
                                "*-1\r\n",
                                "*1\r\n$-1\r\n",
                                "*1\r\n$0\r\n\r\n",
                                "*2\r\n$1\r\nx\r\n:1\r\n",
                                "*1048577\r\n",
                                "*1\r\n$536870913\r\n",
                                "*01\r\n$1\r\nx\r\n",
                                "*1\r\n$1\r\nxy\r\n",
                                "*11\r\n"};
    char tmp[256];
    switch (fuzzRand() % 4) {
        case 0: {
            int argc = (int)(fuzzRand() % 5) + 1;
            int n = snprintf(tmp, sizeof(tmp), "*%d\r\n", argc);
            at = fuzzAppend(out, at, cap, tmp, (size_t)n);
            for (int i = 0; i < argc; i++) {
                size_t alen = fuzzRand() % 3 == 0 ? fuzzRand() % 20000 : fuzzRand() % 16;
                n = snprintf(tmp, sizeof(tmp), "$%zu\r\n", alen);
                at = fuzzAppend(out, at, cap, tmp, (size_t)n);
                for (size_t j = 0; j < alen && at < cap; j++)
                    out[at++] = (uint8_t)fuzzRand();
                at = fuzzAppend(out, at, cap, "\r\n", 2);
            }
            return at;
        }
        case 1: {
            const char *s = inl[fuzzRand() % (sizeof(inl) / sizeof(inl[0]))];
            return fuzzAppend(out, at, cap, s, strlen(s));
        }
        case 2: {
            const char *s = odd[fuzzRand() % (sizeof(odd) / sizeof(odd[0]))];
            return fuzzAppend(out, at, cap, s, strlen(s));
        }
        default: {
            size_t n = fuzzRand() % 64;
            for (size_t j = 0; j < n && at < cap; j++)
                out[at++] = (uint8_t)fuzzRand();
            return at;
        }
    }
}

int main(int argc, char **argv)
{
    uint64_t inputs = 20000, seed = 1;
    double seconds = 8;

    if (fuzzParseArgs(argc, argv, &inputs, &seconds, &seed))
        return 2;
    static uint8_t in[FUZZ_MAX_INPUT];
    double start = fuzzNow();
    uint64_t done = 0;
    for (; done < inputs && fuzzNow() - start < seconds; done++) {
        size_t n = 0, nCuts = fuzzRand() % 8 + 1;
        in[n++] = (uint8_t)(((nCuts - 1) << 1) | (fuzzRand() & 1));
        for (size_t i = 0; i < nCuts; i++)
            in[n++] = (uint8_t)fuzzRand();
        int reqs = (int)(fuzzRand() % 6) + 1;
        for (int r = 0; r < reqs; r++)
            n = fuzzRequest(in, n, sizeof(in));
        int flips = (int)(fuzzRand() % 3);
        for (int f = 0; f < flips && n > 1 + nCuts; f++)
            in[1 + nCuts + fuzzRand() % (n - 1 - nCuts)] ^= (uint8_t)(1u << (fuzzRand() % 8));
        LLVMFuzzerTestOneInput(in, n);
    }
    printf("fuzz_resp: %llu inputs in %.1f s (seed %llu): %llu requests parsed, %llu protocol "
           "errors\n",
           (unsigned long long)done, fuzzNow() - start, (unsigned long long)seed,
           (unsigned long long)fuzzRequests, (unsigned long long)fuzzErrors);
    if (fuzzRequests == 0 || fuzzErrors == 0) {
        fprintf(stderr, "fuzz_resp: the generator never reached whole requests and errors\n");
        return 1;
    }
    return 0;
}
#endif
