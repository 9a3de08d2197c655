/*
 * rdmaproto.c - the RDMA transport's protocol rules (see rdmaproto.h): pure
 * arithmetic and decoding over bytes a peer we do not trust wrote. Every
 * input is bounded here before rdma.c touches memory with it.
 */
#include "rdmaproto.h"

#include <endian.h>
#include <string.h>

_Static_assert(RDMA_PRIV_LEN == 24, "private data is part of the wire format");

int rdmaRingGeometryOk(uint32_t slots, uint32_t slotSize)
{
    return slots >= 4 && slots <= RDMA_PEER_SLOTS_MAX && slotSize >= RDMA_FRAME_MAX &&
           slotSize <= RING_MAX_LEN;
}

void rdmaPrivEncode(const RdmaRingDesc *r, uint8_t out[RDMA_PRIV_LEN])
{
    uint32_t magic = htole32(RDMA_PRIV_MAGIC), slotSize = htole32(r->slotSize),
             rkey = htole32(r->rkey);
    uint16_t version = htole16(RDMA_PRIV_VERSION), slots = htole16((uint16_t)r->slots);
    uint64_t addr = htole64(r->addr);

    memcpy(out, &magic, 4);
    memcpy(out + 4, &version, 2);
    memcpy(out + 6, &slots, 2);
    memcpy(out + 8, &slotSize, 4);
    memcpy(out + 12, &rkey, 4);
    memcpy(out + 16, &addr, 8);
}

int rdmaPrivDecode(const void *data, size_t len, RdmaRingDesc *r, const char **why)
{
    const uint8_t *p = data;
    uint32_t magic, slotSize, rkey;
    uint16_t version, slots;
    uint64_t addr;

    if (!p || len < RDMA_PRIV_LEN) {
        *why = "no ring description in the private data";
        return -1;
    }
    memcpy(&magic, p, 4);
    memcpy(&version, p + 4, 2);
    memcpy(&slots, p + 6, 2);
    memcpy(&slotSize, p + 8, 4);
    memcpy(&rkey, p + 12, 4);
    memcpy(&addr, p + 16, 8);
    if (le32toh(magic) != RDMA_PRIV_MAGIC || le16toh(version) != RDMA_PRIV_VERSION) {
        *why = "private data is not an objstore ring of this version (magic/version)";
        return -1;
    }
    r->slots = le16toh(slots);
    r->slotSize = le32toh(slotSize);
    r->rkey = le32toh(rkey);
    r->addr = le64toh(addr);
    if (!rdmaRingGeometryOk(r->slots, r->slotSize)) {
        *why = "peer ring geometry out of range";
        return -1;
    }
    return 0;
}

uint32_t rdmaImmEncode(uint32_t slot, uint32_t len, int full)
{
    return ringImmEncode(slot, len) | (full ? RDMA_IMM_FULL : 0);
}

void rdmaRxInit(RdmaRx *rx, uint32_t hsSlots, uint32_t hsSlotSize, uint32_t fullSlots,
                uint32_t fullSlotSize)
{
    memset(rx, 0, sizeof(*rx));
    ringRxInit(&rx->ring, hsSlots);
    rx->slotSize = hsSlotSize;
    rx->fullSlots = fullSlots;
    rx->fullSlotSize = fullSlotSize;
}

int rdmaRxAccept(RdmaRx *rx, uint32_t imm, uint32_t *slot, uint32_t *len, int *switched,
                 const char **why)
{
    int full = (imm & RDMA_IMM_FULL) != 0;

    *switched = 0;
    if (full && !rx->full) {
        if (!rx->announced) {
            *why = "write into a full ring that was never announced";
            return -1;
        }
        ringRxInit(&rx->ring, rx->fullSlots);
        rx->slotSize = rx->fullSlotSize;
        rx->full = 1;
        *switched = 1;
    } else if (!full && rx->full) {
        *why = "write into the handshake ring after the full ring";
        return -1;
    }
    ringImmDecode(imm & ~RDMA_IMM_FULL, slot, len);
    if (ringRxConsume(&rx->ring, *slot) == -1) {
        *why = "ring write in an unexpected slot";
        return -1;
    }
    if (*len < OBJ_WIRE_HDR_LEN || *len > rx->slotSize) {
        *why = "ring message length out of range";
        return -1;
    }
    return 0;
}

uint32_t rdmaRxTakeCredits(RdmaRx *rx, uint32_t maxField)
{
    if (rx->announced && !rx->full)
        return 0;
    return ringRxTakeCredits(&rx->ring, maxField);
}

int rdmaCheckMsg(const uint8_t *p, uint32_t len, WireMsg *m, size_t *payLen, const char **why)
{
    if (len < OBJ_WIRE_HDR_LEN) {
        *why = "ring message length out of range";
        return -1;
    }
    if (wireDecodeHdr(p, &m->h, why) == -1)
        return -1;
    if (OBJ_WIRE_HDR_LEN + (uint64_t)m->h.bodyLen > len) {
        *why = "ring message shorter than its header says";
        return -1;
    }
    if (wireDecodeBody(p + OBJ_WIRE_HDR_LEN, m, why) == -1)
        return -1;
    *payLen = len - OBJ_WIRE_HDR_LEN - m->h.bodyLen;
    if (*payLen && m->h.type != WIRE_DATA) {
        *why = "payload on a message that carries none";
        return -1;
    }
    return 0;
}
