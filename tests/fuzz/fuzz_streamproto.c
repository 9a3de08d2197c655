/*
 * fuzz_streamproto.c - standalone fuzz driver for the RDMA stream's control
 * message decoder and flow-control arithmetic (module/rdma/streamproto.c),
 * fed what a hostile peer could send: mutated and random 32-byte control
 * messages of any length, and long sequences of immediates (bytes written),
 * reads and buffer registrations. Runs under ASan/UBSan. Checks:
 *   - a decoded message re-encodes to bytes that decode to the same fields,
 *     and a decoded RegisterXferMemory names a non-empty buffer whose range
 *     does not wrap;
 *   - the RX side never counts a byte past its buffer, never lets the
 *     reader pass the writer, and asks for re-registration exactly when the
 *     whole buffer was consumed;
 *   - the TX side never writes past the peer's buffer, and a replacement
 *     buffer is only taken once the old one is full.
 *
 *   fuzz_streamproto_standalone [-n INPUTS] [-t SECONDS] [-s SEED]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_gen.h"
#include "rdma/streamproto.h"

static uint64_t seed = 1;
static unsigned long decoded, refused, reRegistrations, replacementsRefused;

/* fuzzCmd: one control message, mostly a mutated valid one. */
static void fuzzCmd(void)
{
    uint8_t b[SP_CMD_SIZE + 8];
    size_t len = fuzzBelow(8) ? SP_CMD_SIZE : fuzzBelow(sizeof(b) + 1);
    SpCmd c = {.opcode = (uint16_t)fuzzBelow(6),
               .select = (uint16_t)fuzzRand(),
               .features = fuzzBelow(4) ? 0 : fuzzRand(),
               .addr = fuzzBelow(4) ? fuzzRand() : fuzzBelow(1u << 30),
               .length =
                   fuzzBelow(3) ? (uint32_t)fuzzRand() : SP_RX_MIN + (uint32_t)fuzzBelow(SP_RX_MAX),
               .key = (uint32_t)fuzzRand()};
    spEncode(&c, b);
    for (uint64_t k = fuzzBelow(4); k > 0; k--)
        b[fuzzBelow(sizeof(b))] ^= (uint8_t)(1u << fuzzBelow(8));
    SpCmd d, e;
    char err[160];
    if (spDecode(b, len, &d, err, sizeof(err)) < 0) {
        fuzzCheck(err[0] != 0, "a refusal says why");
        refused++;
        return;
    }
    decoded++;
    fuzzCheck(len == SP_CMD_SIZE, "only 32-byte messages decode");
    fuzzCheck(d.opcode <= SP_OP_REGISTER_XFER_MEM, "only known opcodes decode");
    if (d.opcode == SP_OP_REGISTER_XFER_MEM) {
        fuzzCheck(d.length > 0, "a buffer is not empty");
        fuzzCheck(d.addr + d.length >= d.addr, "buffer range does not wrap");
    }
    if (d.opcode == SP_OP_SET_CLIENT_FEATURE)
        fuzzCheck(d.features == 0, "no unknown feature is accepted");
    uint8_t again[SP_CMD_SIZE];
    spEncode(&d, again);
    fuzzCheck(spDecode(again, SP_CMD_SIZE, &e, err, sizeof(err)) == 0, "re-encoding decodes");
    fuzzCheck(!memcmp(&d, &e, sizeof(d)), "re-encoding keeps every field");
}

/* fuzzFlow: a sequence of writes, reads and registrations on one RX and
 * one TX side. */
static void fuzzFlow(void)
{
    SpRx r = {.length = SP_RX_MIN + (uint32_t)fuzzBelow(4096)};
    SpTx t = {0};
    for (int step = 0; step < 64; step++) {
        switch (fuzzBelow(4)) {
            case 0: { /* the peer's immediate: any count */
                uint32_t n =
                    fuzzBelow(2) ? (uint32_t)fuzzBelow(r.length + 2) : (uint32_t)fuzzRand();
                uint32_t before = r.written;
                if (spRxArrived(&r, n) == 0)
                    fuzzCheck(r.written == before + n && r.written <= r.length, "arrival fits");
                else
                    fuzzCheck(r.written == before && n > r.length - before, "overrun refused");
                break;
            }
            case 1: { /* the reader consumes part of what is ready */
                uint32_t ready = spRxReady(&r), n = ready ? (uint32_t)fuzzBelow(ready + 1) : 0;
                int again = spRxConsume(&r, n);
                if (again) {
                    reRegistrations++;
                    fuzzCheck(r.read == 0 && r.written == 0, "a re-registered buffer is empty");
                }
                fuzzCheck(r.read <= r.written && r.written <= r.length, "reader behind writer");
                break;
            }
            case 2: { /* the peer registers a buffer */
                SpCmd c = {.opcode = SP_OP_REGISTER_XFER_MEM,
                           .addr = fuzzRand() >> 1,
                           .length = SP_RX_MIN + (uint32_t)fuzzBelow(4096),
                           .key = 1};
                uint32_t room = spTxRoom(&t);
                if (spTxRegister(&t, &c) == 0)
                    fuzzCheck(room == 0 && t.offset == 0 && t.length == c.length, "only full ones");
                else
                    replacementsRefused++;
                break;
            }
            default: { /* the writer takes what room there is */
                uint32_t room = spTxRoom(&t), n = room ? (uint32_t)fuzzBelow(room + 1) : 0;
                uint64_t at = spTxTake(&t, n);
                fuzzCheck(at + n <= t.addr + t.length && t.offset <= t.length, "write in bounds");
                break;
            }
        }
    }
}

int main(int argc, char **argv)
{
    uint64_t n = 200000;
    double seconds = 10;

    if (fuzzParseArgs(argc, argv, &n, &seconds, &seed))
        return 2;
    double end = fuzzNow() + seconds;
    uint64_t i;
    for (i = 0; i < n && fuzzNow() < end; i++) {
        fuzzCmd();
        fuzzFlow();
    }
    printf("fuzz_streamproto: %llu inputs (seed %llu): decoded %lu, refused %lu, "
           "re-registrations %lu, replacements refused %lu\n",
           (unsigned long long)i, (unsigned long long)seed, decoded, refused, reRegistrations,
           replacementsRefused);
    /* A generator that never reaches the deep paths tests nothing. */
    if (!decoded || !refused || !reRegistrations || !replacementsRefused) {
        fprintf(stderr, "fuzz_streamproto: the generator did not reach every path\n");
        return 1;
    }
    return 0;
}
