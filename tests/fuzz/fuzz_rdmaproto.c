/*
 * fuzz_rdmaproto.c - standalone fuzz driver for the RDMA transport's control
 * and immediate decoding (module/transfer/rdmaproto.c): the private data a
 * connecting peer sends, and long sequences of ring writes (immediate +
 * slot bytes) against the two-ring receive rules, as a hostile peer could
 * produce them. Runs under ASan/UBSan with rings allocated to their exact
 * size, so any read past a slot or a ring is a crash. Checks:
 *   - decoded private data always has a writable geometry and re-encodes to
 *     the bytes it came from;
 *   - an accepted write names a slot inside the current ring and a length
 *     inside its slot; the full ring is only entered after our RING, and
 *     never left; handshake-ring credits are never returned after our RING;
 *   - an accepted message accounts for every byte (header + body + payload)
 *     and only DATA carries a payload.
 *
 *   fuzz_rdmaproto_standalone [-n SEQUENCES] [-t SECONDS] [-s SEED]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_gen.h"
#include "transfer/rdmaproto.h"

#define HS_SLOTS   8
#define FULL_SLOTS 16
#define FULL_SLOT  (2 * RDMA_FRAME_MAX)
#define STEPS      64

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_rdmaproto: check failed at %s:%d: %s (seed %llu)\n", __FILE__,   \
                    __LINE__, #cond, (unsigned long long)seed);                                    \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static uint64_t seed = 1;
static unsigned long privOk, msgsOk, switches, refused;

static void fuzzPriv(void)
{
    uint8_t buf[RDMA_PRIV_LEN + 8];
    RdmaRingDesc r = {.addr = fuzzRand(),
                      .rkey = (uint32_t)fuzzRand(),
                      .slots = (uint32_t)fuzzBelow(RDMA_PEER_SLOTS_MAX + 8),
                      .slotSize = (uint32_t)fuzzBelow(RING_MAX_LEN + 16)};
    rdmaPrivEncode(&r, buf);
    for (int i = (int)fuzzBelow(4); i > 0; i--)
        buf[fuzzBelow(RDMA_PRIV_LEN)] ^= (uint8_t)(1u << fuzzBelow(8));
    size_t len = fuzzBelow(sizeof(buf) + 1);
    uint8_t *exact = malloc(len ? len : 1);
    memcpy(exact, buf, len);
    RdmaRingDesc out;
    const char *why = NULL;
    if (rdmaPrivDecode(len ? exact : NULL, len, &out, &why) == 0) {
        uint8_t again[RDMA_PRIV_LEN];
        CHECK(rdmaRingGeometryOk(out.slots, out.slotSize));
        rdmaPrivEncode(&out, again);
        CHECK(memcmp(again, exact, RDMA_PRIV_LEN) == 0);
        privOk++;
    } else {
        CHECK(why != NULL);
    }
    free(exact);
}

/* A frame of a random type with plausible fields, or garbage, into slot. */
static uint32_t fillSlot(uint8_t *slot, uint32_t cap)
{
    WireMsg m = {.h = {.type = (uint8_t)(1 + fuzzBelow(WIRE_TYPE_MAX)), .reqId = 1 + fuzzBelow(9)}};
    static const char id[] = "some-object";
    switch (m.h.type) { /* the fields share a union: set only the type's own */
        case WIRE_FETCH:
            m.u.fetch.id = id;
            m.u.fetch.idLen = 1 + (uint16_t)fuzzBelow(sizeof(id) - 1);
            break;
        case WIRE_ERROR:
            m.u.error.code = 1 + (uint16_t)fuzzBelow(WIRE_ERR_MAX);
            break;
        case WIRE_HELLO:
            m.u.hello.name = id;
            m.u.hello.nameLen = 4;
            break;
        case WIRE_DATA:
        case WIRE_RNDV:
            m.u.data.size = fuzzBelow(1 << 20);
            break;
        case WIRE_RING:
            m.u.ring.slots = (uint32_t)fuzzBelow(64);
            m.u.ring.slotSize = (uint32_t)fuzzRand();
            break;
        default:
            break;
    }
    int n = wireEncode(&m, slot, cap);
    if (n < 0 || fuzzBelow(8) == 0) {
        n = (int)fuzzBelow(cap < 64 ? cap : 64);
        for (int i = 0; i < n; i++)
            slot[i] = (uint8_t)fuzzRand();
    }
    if (fuzzBelow(4) == 0) { /* a payload after the frame, or a corrupted header */
        uint32_t extra = (uint32_t)fuzzBelow(64);
        if ((uint32_t)n + extra <= cap)
            n += (int)extra;
        slot[fuzzBelow(OBJ_WIRE_HDR_LEN)] ^= (uint8_t)fuzzRand();
    }
    return (uint32_t)n;
}

static void fuzzSequence(void)
{
    static uint8_t *hs, *full; /* exact-size rings, reused: ASan sees any overrun */
    RdmaRx rx;

    if (!hs) {
        hs = malloc((size_t)HS_SLOTS * RDMA_FRAME_MAX);
        full = malloc((size_t)FULL_SLOTS * FULL_SLOT);
    }
    uint32_t expect = 0; /* the slot an honest peer would write next */

    rdmaRxInit(&rx, HS_SLOTS, RDMA_FRAME_MAX, FULL_SLOTS, FULL_SLOT);
    for (int step = 0; step < STEPS; step++) {
        if (!rx.announced && fuzzBelow(8) == 0)
            rx.announced = 1;
        if (rx.announced && !rx.full)
            CHECK(rdmaRxTakeCredits(&rx, 0xFFFF) == 0);
        int wasFull = rx.full, goFull = rx.full ? fuzzBelow(16) != 0 : fuzzBelow(4) == 0;
        if (goFull && !wasFull)
            expect = 0;
        uint32_t slots = goFull ? FULL_SLOTS : HS_SLOTS;
        uint32_t slotSize = goFull ? FULL_SLOT : RDMA_FRAME_MAX;
        uint32_t slot =
            fuzzBelow(8) == 0 ? (uint32_t)fuzzBelow(RDMA_PEER_SLOTS_MAX) : expect % slots;
        uint8_t *base = (goFull ? full : hs) + (size_t)(slot % slots) * slotSize;
        uint32_t len = fillSlot(base, slotSize);
        if (fuzzBelow(8) == 0)
            len = (uint32_t)fuzzBelow(RING_MAX_LEN + 1);
        uint32_t imm = rdmaImmEncode(slot, len, goFull);
        if (fuzzBelow(16) == 0)
            imm = (uint32_t)fuzzRand();

        uint32_t gotSlot, gotLen;
        int switched;
        const char *why = NULL;
        if (rdmaRxAccept(&rx, imm, &gotSlot, &gotLen, &switched, &why) == -1) {
            CHECK(why != NULL);
            refused++;
            break; /* the transport closes the connection here */
        }
        CHECK(!wasFull || rx.full);
        CHECK(!rx.full || rx.announced);
        CHECK(switched == (rx.full && !wasFull));
        switches += switched;
        uint32_t curSlots = rx.full ? FULL_SLOTS : HS_SLOTS;
        CHECK(gotSlot < curSlots && gotLen >= OBJ_WIRE_HDR_LEN && gotLen <= rx.slotSize);
        expect = gotSlot + 1;
        const uint8_t *p = (rx.full ? full : hs) + (size_t)gotSlot * rx.slotSize;
        WireMsg m;
        size_t payLen;
        if (rdmaCheckMsg(p, gotLen, &m, &payLen, &why) == 0) {
            CHECK(OBJ_WIRE_HDR_LEN + m.h.bodyLen + payLen == gotLen);
            CHECK(payLen == 0 || m.h.type == WIRE_DATA);
            msgsOk++;
        } else {
            CHECK(why != NULL);
            refused++;
            break;
        }
    }
}

int main(int argc, char **argv)
{
    uint64_t n = 100000;
    double seconds = 20;

    if (fuzzParseArgs(argc, argv, &n, &seconds, &seed))
        return 2;
    double end = fuzzNow() + seconds;
    uint64_t i;
    for (i = 0; i < n && fuzzNow() < end; i++) {
        fuzzPriv();
        fuzzSequence();
    }
    printf("fuzz_rdmaproto: %llu sequences (seed %llu): private data accepted %lu, messages "
           "accepted %lu, ring switches %lu, refusals %lu\n",
           (unsigned long long)i, (unsigned long long)seed, privOk, msgsOk, switches, refused);
    /* A generator that never reaches the deep paths tests nothing. */
    if (!privOk || !msgsOk || !switches || !refused) {
        fprintf(stderr, "fuzz_rdmaproto: the generator did not reach every path\n");
        return 1;
    }
    return 0;
}
