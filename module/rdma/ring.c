/*
 * ring.c - credit and slot arithmetic of the RDMA control ring (ring.h).
 */
#include "ring.h"

void ringTxInit(RingTx *t, uint32_t slots)
{
    t->slots = slots;
    t->next = 0;
    t->credits = slots;
}

void ringRxInit(RingRx *r, uint32_t slots)
{
    r->slots = slots;
    r->expect = 0;
    r->pending = 0;
    r->threshold = slots / 2 > 2 ? slots / 2 : 2;
}

int ringTxTake(RingTx *t, int creditOnly)
{
    uint32_t need = creditOnly ? 1 : 2;
    uint32_t slot = t->next;

    if (t->credits < need)
        return -1;
    t->credits--;
    t->next = (t->next + 1) % t->slots;
    return (int)slot;
}

int ringTxGrant(RingTx *t, uint32_t n)
{
    if (n > t->slots - t->credits)
        return -1;
    t->credits += n;
    return 0;
}

int ringRxConsume(RingRx *r, uint32_t slot)
{
    if (slot != r->expect || r->pending >= r->slots)
        return -1;
    r->expect = (r->expect + 1) % r->slots;
    r->pending++;
    return 0;
}

uint32_t ringRxTakeCredits(RingRx *r, uint32_t maxField)
{
    uint32_t n = r->pending < maxField ? r->pending : maxField;

    r->pending -= n;
    return n;
}

int ringRxWantsCreditMsg(const RingRx *r)
{
    return r->pending >= r->threshold;
}

uint32_t ringImmEncode(uint32_t slot, uint32_t len)
{
    return (slot << RING_IMM_LEN_BITS) | (len & RING_MAX_LEN);
}

void ringImmDecode(uint32_t imm, uint32_t *slot, uint32_t *len)
{
    *slot = imm >> RING_IMM_LEN_BITS;
    *len = imm & RING_MAX_LEN;
}
