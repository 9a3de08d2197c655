/*
 * fuzz_respring.c - fuzz target for the RDMA door's ring checks
 * (module/rdma/respring.c): the private data of a connect request and the
 * sequence of immediates and headers a hostile client can write into the
 * door's receive ring. With its own standalone driver (build with
 * -DFUZZ_STANDALONE; without it, link with libFuzzer).
 *
 * The property checked: respRingOnMsg agrees with a model written here
 * from resprdma.h's rules (expected slot, length within [header, slot],
 * flags 0, credits at most those outstanding), message by message, and
 * what it accepts lies inside the ring; the ring state never claims more
 * credits or pending slots than the ring has. respRingParsePriv accepts
 * exactly the geometries the wire allows. Aborts on a violation;
 * ASan/UBSan catch reads outside the ring.
 *
 *   fuzz_respring_standalone [-n INPUTS] [-t SECONDS] [-s SEED]
 */
#include <endian.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_gen.h"
#include "rdma/resprdma.h"
#include "rdma/respring.h"

#define FUZZ_MAX_SLOTS 64
#define FUZZ_MAX_SLOT  4096
#define FUZZ_MAX_INPUT 4096

static uint64_t fuzzAccepted, fuzzRejected, fuzzPrivOk;

/* The first 25 bytes: a private data length and 24 bytes of RespRdmaPriv. */
static void fuzzPriv(const uint8_t *data, size_t len)
{
    RespRingPeer peer = {0};
    const char *why = NULL;
    RespRdmaPriv p;

    if (len < 1 + sizeof(p))
        return;
    size_t privLen = data[0] % (sizeof(p) + 8);
    memcpy(&p, data + 1, sizeof(p));
    int rc = respRingParsePriv(privLen ? data + 1 : NULL, privLen < sizeof(p) ? privLen : sizeof(p),
                               &peer, &why);
    uint32_t slots = le16toh(p.slots), size = le32toh(p.slotSize);
    int want = privLen >= sizeof(p) && le32toh(p.magic) == RESP_RDMA_MAGIC &&
               le16toh(p.version) == RESP_RDMA_VERSION && slots >= 4 && slots <= RING_MAX_SLOTS &&
               size >= 64 && size <= RING_MAX_LEN;
    fuzzCheck((rc == 0) == want, "private data accepted iff the wire allows it");
    fuzzCheck(rc == 0 || why != NULL, "a refused private data has a reason");
    if (rc == 0) {
        fuzzPrivOk++;
        fuzzCheck(peer.slots == slots && peer.slotSize == size && peer.addr == le64toh(p.addr),
                  "private data fields are taken as sent");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

/* Layout: 25 bytes of private data (above); then ring geometry (3 bytes);
 * then operations of 9 bytes: kind, immediate (4, little-endian) and header
 * (4). Kind 0: we send a message (takes a tx credit); 1: we return every
 * pending credit; else: the client's ring write lands. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    static const uint32_t sizes[] = {64, 65, 100, 1024, FUZZ_MAX_SLOT};
    static uint8_t ring[FUZZ_MAX_SLOTS * FUZZ_MAX_SLOT];
    RingRx rx;
    RingTx tx;

    fuzzPriv(data, len);
    if (len < 28)
        return 0;
    data += 25;
    len -= 25;
    uint32_t slots = 4 + data[0] % (FUZZ_MAX_SLOTS - 3);
    uint32_t slotSize = sizes[data[1] % (sizeof(sizes) / sizeof(sizes[0]))];
    uint32_t txSlots = 4 + data[2] % (FUZZ_MAX_SLOTS - 3);
    ringRxInit(&rx, slots);
    ringTxInit(&tx, txSlots);
    /* The model. */
    uint32_t expect = 0, pending = 0, credits = tx.credits;
    for (size_t at = 3; at + 9 <= len; at += 9) {
        const uint8_t *op = data + at;
        if (op[0] == 0) {
            int slot = ringTxTake(&tx, op[1] & 1);
            fuzzCheck((slot >= 0) == (credits >= ((op[1] & 1) ? 1u : 2u)), "tx take vs model");
            if (slot >= 0)
                credits--;
            continue;
        }
        if (op[0] == 1) {
            fuzzCheck(ringRxTakeCredits(&rx, 0xFFFF) == pending, "credits returned vs model");
            pending = 0;
            continue;
        }
        uint32_t imm;
        memcpy(&imm, op + 1, 4);
        imm = le32toh(imm);
        uint32_t slot = imm >> RING_IMM_LEN_BITS, mlen = imm & RING_MAX_LEN;
        RespRdmaHdr h;
        memcpy(&h, op + 5, sizeof(h));
        if (slot < slots)
            memcpy(ring + (size_t)slot * slotSize, &h, sizeof(h));
        RespRingMsg m;
        const char *why = NULL;
        int rc = respRingOnMsg(&rx, &tx, ring, slotSize, imm, &m, &why);
        int want = slot == expect && pending < slots && mlen >= sizeof(RespRdmaHdr) &&
                   mlen <= slotSize && le16toh(h.flags) == 0 &&
                   le16toh(h.credits) <= txSlots - credits;
        fuzzCheck((rc == 0) == want, "ring message accepted iff the model accepts it");
        if (rc == -1) {
            fuzzCheck(why != NULL, "a refused message has a reason");
            fuzzRejected++;
            return 0; /* the door closes the connection */
        }
        fuzzAccepted++;
        expect = (expect + 1) % slots;
        pending++;
        credits += le16toh(h.credits);
        fuzzCheck(m.slot == slot && m.payloadLen == mlen - sizeof(RespRdmaHdr),
                  "message fields as sent");
        fuzzCheck(m.payload >= ring + (size_t)slot * slotSize &&
                      m.payload + m.payloadLen <= ring + (size_t)(slot + 1) * slotSize,
                  "the payload lies inside its slot");
        fuzzCheck(rx.pending == pending && rx.expect == expect && tx.credits == credits,
                  "ring state vs model");
        fuzzCheck(tx.credits <= tx.slots && rx.pending <= rx.slots, "ring counters in range");
    }
    return 0;
}

#ifdef FUZZ_STANDALONE
/* ---- standalone driver: mostly well-formed sessions, mutated, and random bytes ---------- */

/* A plausible immediate: usually the expected slot and a valid length. */
static uint32_t fuzzImm(uint32_t expect, uint32_t slotSize)
{
    uint32_t slot = fuzzRand() % 8 ? expect : (uint32_t)fuzzBelow(RING_MAX_SLOTS);
    uint32_t len;
    switch (fuzzRand() % 6) {
        case 0:
            len = (uint32_t)fuzzBelow(8);
            break;
        case 1:
            len = slotSize + (uint32_t)fuzzBelow(3);
            break;
        case 2:
            len = (uint32_t)fuzzBelow(RING_MAX_LEN + 1);
            break;
        default:
            len = 4 + (uint32_t)fuzzBelow(slotSize - 3);
    }
    return ringImmEncode(slot, len & RING_MAX_LEN);
}

int main(int argc, char **argv)
{
    static const uint32_t sizes[] = {64, 65, 100, 1024, FUZZ_MAX_SLOT};
    uint64_t inputs = 200000, seed = 1;
    double seconds = 8;

    if (fuzzParseArgs(argc, argv, &inputs, &seconds, &seed))
        return 2;
    static uint8_t in[FUZZ_MAX_INPUT];
    double start = fuzzNow();
    uint64_t done = 0;
    for (; done < inputs && fuzzNow() - start < seconds; done++) {
        size_t n = 0;
        RespRdmaPriv p = {
            .magic = htole32(RESP_RDMA_MAGIC),
            .version = htole16(RESP_RDMA_VERSION),
            .slots = htole16((uint16_t)(fuzzRand() % 3 ? 4 + fuzzBelow(4093) : fuzzBelow(65536))),
            .slotSize = htole32(
                (uint32_t)(fuzzRand() % 3 ? 64 + fuzzBelow(RING_MAX_LEN - 63) : fuzzRand())),
            .rkey = (uint32_t)fuzzRand(),
            .addr = fuzzRand()};
        if (fuzzRand() % 8 == 0)
            p.magic ^= (uint32_t)(1u << fuzzBelow(32));
        if (fuzzRand() % 8 == 0)
            p.version = htole16((uint16_t)fuzzRand());
        in[n++] = (uint8_t)(fuzzRand() % 4 ? sizeof(p) : fuzzBelow(sizeof(p) + 8));
        memcpy(in + n, &p, sizeof(p));
        n += sizeof(p);
        uint8_t geo[3] = {(uint8_t)fuzzRand(), (uint8_t)fuzzRand(), (uint8_t)fuzzRand()};
        memcpy(in + n, geo, 3);
        n += 3;
        uint32_t slots = 4 + geo[0] % (FUZZ_MAX_SLOTS - 3);
        uint32_t slotSize = sizes[geo[1] % (sizeof(sizes) / sizeof(sizes[0]))];
        uint32_t txSlots = 4 + geo[2] % (FUZZ_MAX_SLOTS - 3), expect = 0, sent = 0;
        size_t ops = 1 + fuzzBelow(200);
        for (size_t i = 0; i < ops && n + 9 <= sizeof(in); i++) {
            uint8_t kind = (uint8_t)(fuzzRand() % 4);
            uint32_t imm = fuzzImm(expect, slotSize);
            uint16_t cr = (uint16_t)(fuzzRand() % 6 ? fuzzBelow(sent + 1) : fuzzRand());
            RespRdmaHdr h = {.credits = htole16(cr), .flags = fuzzRand() % 16 ? 0 : 1};
            if (kind == 0 && sent < txSlots)
                sent++;
            else if (kind >= 2) {
                expect = (expect + 1) % slots;
                sent = cr <= sent ? sent - cr : 0;
            }
            in[n] = kind;
            imm = htole32(imm);
            memcpy(in + n + 1, &imm, 4);
            memcpy(in + n + 5, &h, 4);
            n += 9;
        }
        int flips = (int)(fuzzRand() % 3);
        for (int f = 0; f < flips; f++)
            in[fuzzBelow(n)] ^= (uint8_t)(1u << (fuzzRand() % 8));
        LLVMFuzzerTestOneInput(in, n);
    }
    printf("fuzz_respring: %llu inputs in %.1f s (seed %llu): %llu messages accepted, %llu "
           "refused, %llu private data accepted\n",
           (unsigned long long)done, fuzzNow() - start, (unsigned long long)seed,
           (unsigned long long)fuzzAccepted, (unsigned long long)fuzzRejected,
           (unsigned long long)fuzzPrivOk);
    if (fuzzAccepted == 0 || fuzzRejected == 0 || fuzzPrivOk == 0) {
        fprintf(stderr, "fuzz_respring: the generator never reached accepted and refused "
                        "messages\n");
        return 1;
    }
    return 0;
}
#endif
