/*
 * ring.h - the credit and slot arithmetic of the RDMA control ring.
 *
 * Each side of a connection exposes a ring of `slots` fixed-size slots; the
 * peer writes message i into slot i mod slots with RDMA_WRITE_WITH_IMM, and
 * every such write consumes one receive WR and one slot. A writer may only
 * write while it holds a credit (a slot the reader has finished with);
 * readers give credits back piggybacked on every message they send, or in a
 * CREDIT message once `threshold` have piled up. Ordinary messages need two
 * credits, a CREDIT message one: the last slot is kept for returning
 * credits, so two sides with full rings can always unblock each other.
 * Pure C, unit-tested: the verbs code only asks these functions.
 */
#ifndef OBJSTORE_RING_H
#define OBJSTORE_RING_H

#include <stdint.h>

typedef struct RingTx {
    uint32_t slots;   /* peer's ring size */
    uint32_t next;    /* next slot to write */
    uint32_t credits; /* slots we may still write */
} RingTx;

typedef struct RingRx {
    uint32_t slots;     /* our ring size */
    uint32_t expect;    /* slot the next message must arrive in */
    uint32_t pending;   /* consumed slots not yet returned to the writer */
    uint32_t threshold; /* send an explicit CREDIT at this many */
} RingRx;

void ringTxInit(RingTx *t, uint32_t slots);
void ringRxInit(RingRx *r, uint32_t slots);
/* Take the next peer slot for a message (creditOnly: a CREDIT message).
 * Returns the slot index, or -1 when the credits do not allow it. */
int ringTxTake(RingTx *t, int creditOnly);
/* The peer returned n credits. Returns 0, or -1 if that would exceed the
 * ring (a protocol violation: the peer is confused or hostile). */
int ringTxGrant(RingTx *t, uint32_t n);
/* A message arrived in slot. Returns 0, or -1 if it is not the expected
 * slot (RC delivers in order, so anything else is a protocol violation). */
int ringRxConsume(RingRx *r, uint32_t slot);
/* Credits to piggyback on an outgoing message (at most maxField); they are
 * no longer pending afterwards. */
uint32_t ringRxTakeCredits(RingRx *r, uint32_t maxField);
/* Should an explicit CREDIT message be sent now? */
int ringRxWantsCreditMsg(const RingRx *r);

/* The immediate of a ring write: slot in the top 12 bits, length below. */
#define RING_IMM_LEN_BITS 20
#define RING_MAX_SLOTS    (1u << (32 - RING_IMM_LEN_BITS))
#define RING_MAX_LEN      ((1u << RING_IMM_LEN_BITS) - 1)
uint32_t ringImmEncode(uint32_t slot, uint32_t len);
void ringImmDecode(uint32_t imm, uint32_t *slot, uint32_t *len);

#endif /* OBJSTORE_RING_H */
