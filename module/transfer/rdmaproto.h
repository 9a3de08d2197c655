/*
 * rdmaproto.h - the RDMA transport's own protocol rules, as pure functions:
 * the rdma_cm private data that names a handshake ring, the immediate of a
 * ring write (slot, length, and which ring), the two-ring receive rules
 * (handshake ring until the peer's first write into the full ring we
 * announced, never back), and the checks a ring message passes before the
 * engine sees it. module/transfer/rdma.c does the verbs around them; the
 * fuzz target tests/fuzz/fuzz_rdmaproto.c drives them with hostile input.
 * No verbs, no threads, no engine.
 */
#ifndef OBJSTORE_RDMAPROTO_H
#define OBJSTORE_RDMAPROTO_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"
#include "rdma/ring.h"

#define RDMA_PRIV_MAGIC   0x4F424A52u /* "OBJR" */
#define RDMA_PRIV_VERSION 3           /* handshake ring, then RING */
#define RDMA_PRIV_LEN     24
#define RDMA_FRAME_MAX    (OBJ_WIRE_HDR_LEN + OBJ_WIRE_MAX_BODY)
/* Immediate bit of a write into the full ring (ring.h's slot field keeps
 * 11 bits, so the rings have at most RDMA_PEER_SLOTS_MAX slots). */
#define RDMA_IMM_FULL       (1u << 31)
#define RDMA_PEER_SLOTS_MAX (RING_MAX_SLOTS / 2)

/* A ring one side lets the other write: private data or RING. */
typedef struct RdmaRingDesc {
    uint64_t addr;
    uint32_t rkey, slots, slotSize;
} RdmaRingDesc;

/* Is a ring the peer describes one we can write (4..RDMA_PEER_SLOTS_MAX
 * slots of RDMA_FRAME_MAX..RING_MAX_LEN bytes)? */
int rdmaRingGeometryOk(uint32_t slots, uint32_t slotSize);
/* Private data: {u32 magic, u16 version, u16 slots, u32 slotSize, u32 rkey,
 * u64 addr}, little-endian. Encode can't fail; decode returns 0, or -1
 * with a reason (short, wrong magic or version, geometry out of range). */
void rdmaPrivEncode(const RdmaRingDesc *r, uint8_t out[RDMA_PRIV_LEN]);
int rdmaPrivDecode(const void *data, size_t len, RdmaRingDesc *r, const char **why);

uint32_t rdmaImmEncode(uint32_t slot, uint32_t len, int full);

/* Which ring the peer writes, and in which order. */
typedef struct RdmaRx {
    RingRx ring;       /* slot order and credits of the ring being written */
    uint32_t slotSize; /* of that ring */
    int full;          /* the peer has moved to the full ring */
    int announced;     /* our RING is on the wire (a full ring exists) */
    uint32_t fullSlots, fullSlotSize;
} RdmaRx;

void rdmaRxInit(RdmaRx *rx, uint32_t hsSlots, uint32_t hsSlotSize, uint32_t fullSlots,
                uint32_t fullSlotSize);
/* A ring write with immediate imm arrived. Returns 0 with the slot and
 * length to read (*switched = 1 when it is the first write into the full
 * ring: the caller releases the handshake ring and reads the full one from
 * now on), or -1 with a reason: a full-ring write before we announced one,
 * a handshake-ring write after the switch, a slot out of order, a length
 * shorter than a header or longer than the slot. */
int rdmaRxAccept(RdmaRx *rx, uint32_t imm, uint32_t *slot, uint32_t *len, int *switched,
                 const char **why);
/* Credits to piggyback now: none of a handshake ring the peer was told to
 * leave (a credit arriving after its switch would count against the new
 * ring); else every one owed, at most maxField. */
uint32_t rdmaRxTakeCredits(RdmaRx *rx, uint32_t maxField);

/* Decode the ring message p[0..len) (len from rdmaRxAccept): header, body,
 * and the payload rule (only DATA carries one). Returns 0 with m and the
 * payload length, or -1 with a reason. */
int rdmaCheckMsg(const uint8_t *p, uint32_t len, WireMsg *m, size_t *payLen, const char **why);

#endif /* OBJSTORE_RDMAPROTO_H */
