/*
 * respring.c - the verbs-free checks of the RESP-over-RDMA wire: private
 * data parsing and the validation of each arriving ring message (see
 * respring.h and resprdma.h). Everything a client controls about a ring
 * message passes through here before the door touches the bytes.
 */
#include "rdma/respring.h"

#include <endian.h>
#include <string.h>

#include "rdma/resprdma.h"

#define RESP_RING_HDR      ((uint32_t)sizeof(RespRdmaHdr))
#define RESP_RING_MIN_SLOT 64u

/* Parse and range-check the peer's RespRdmaPriv. Returns 0, or -1 with a
 * reason; never reads past len. */
int respRingParsePriv(const void *data, size_t len, RespRingPeer *peer, const char **why)
{
    RespRdmaPriv p;

    if (!data || len < sizeof(p)) {
        *why = "no ring description in the private data";
        return -1;
    }
    memcpy(&p, data, sizeof(p));
    if (le32toh(p.magic) != RESP_RDMA_MAGIC || le16toh(p.version) != RESP_RDMA_VERSION) {
        *why = "private data is not a RESP-over-RDMA ring (magic/version)";
        return -1;
    }
    uint32_t slots = le16toh(p.slots), slotSize = le32toh(p.slotSize);
    if (slots < 4 || slots > RING_MAX_SLOTS || slotSize < RESP_RING_MIN_SLOT ||
        slotSize > RING_MAX_LEN) {
        *why = "ring geometry out of range";
        return -1;
    }
    peer->slots = slots;
    peer->slotSize = slotSize;
    peer->rkey = le32toh(p.rkey);
    peer->addr = le64toh(p.addr);
    return 0;
}

/* Validate one ring message and apply it to the ring state. Returns 0, or
 * -1 with a reason (the caller closes the connection). */
int respRingOnMsg(RingRx *rx, RingTx *tx, const uint8_t *ring, uint32_t slotSize, uint32_t imm,
                  RespRingMsg *msg, const char **why)
{
    uint32_t slot, len;
    RespRdmaHdr h;

    ringImmDecode(imm, &slot, &len);
    /* The slot first: ringRxConsume also rejects slots beyond the ring, so
     * the slot's address below is always inside it. */
    if (slot >= rx->slots || ringRxConsume(rx, slot) == -1) {
        *why = "ring write in an unexpected slot";
        return -1;
    }
    if (len < RESP_RING_HDR || len > slotSize) {
        *why = "ring message length out of range";
        return -1;
    }
    const uint8_t *m = ring + (size_t)slot * slotSize;
    memcpy(&h, m, sizeof(h));
    if (le16toh(h.flags) != 0) {
        *why = "unknown flags in a ring message";
        return -1;
    }
    if (ringTxGrant(tx, le16toh(h.credits)) == -1) {
        *why = "more credits returned than are outstanding";
        return -1;
    }
    msg->slot = slot;
    msg->payload = m + RESP_RING_HDR;
    msg->payloadLen = len - RESP_RING_HDR;
    msg->credits = le16toh(h.credits);
    return 0;
}
