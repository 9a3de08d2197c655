/*
 * streamproto.c - the Valkey Over RDMA rules as pure functions: encoding
 * and validating 32-byte control messages, and the RX/TX offset arithmetic
 * that is the protocol's flow control. See streamproto.h.
 */
#include "streamproto.h"

#include <stdio.h>
#include <string.h>

/* putBe16/32/64, getBe16/32/64: big-endian field access on byte arrays. */
static void putBe16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void putBe32(uint8_t *p, uint32_t v)
{
    putBe16(p, (uint16_t)(v >> 16));
    putBe16(p + 2, (uint16_t)v);
}

static void putBe64(uint8_t *p, uint64_t v)
{
    putBe32(p, (uint32_t)(v >> 32));
    putBe32(p + 4, (uint32_t)v);
}

static uint16_t getBe16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t getBe32(const uint8_t *p)
{
    return ((uint32_t)getBe16(p) << 16) | getBe16(p + 2);
}

static uint64_t getBe64(const uint8_t *p)
{
    return ((uint64_t)getBe32(p) << 32) | getBe32(p + 4);
}

/* Field offsets of the two 32-byte forms. */
#define SP_OFF_SELECT   2  /* feature: u16 select */
#define SP_OFF_FEATURES 24 /* feature: u64 features */
#define SP_OFF_ADDR     16 /* memory: u64 addr */
#define SP_OFF_LENGTH   24 /* memory: u32 length */
#define SP_OFF_KEY      28 /* memory: u32 key */

void spEncode(const SpCmd *c, uint8_t out[SP_CMD_SIZE])
{
    memset(out, 0, SP_CMD_SIZE);
    putBe16(out, c->opcode);
    switch (c->opcode) {
        case SP_OP_GET_SERVER_FEATURE:
        case SP_OP_SET_CLIENT_FEATURE:
            putBe16(out + SP_OFF_SELECT, c->select);
            putBe64(out + SP_OFF_FEATURES, c->features);
            break;
        case SP_OP_REGISTER_XFER_MEM:
            putBe64(out + SP_OFF_ADDR, c->addr);
            putBe32(out + SP_OFF_LENGTH, c->length);
            putBe32(out + SP_OFF_KEY, c->key);
            break;
        default:
            break;
    }
}

int spDecode(const uint8_t *buf, size_t len, SpCmd *c, char *err, size_t errLen)
{
    if (len != SP_CMD_SIZE) {
        snprintf(err, errLen, "control message of %zu bytes (want %d)", len, SP_CMD_SIZE);
        return -1;
    }
    memset(c, 0, sizeof(*c));
    c->opcode = getBe16(buf);
    switch (c->opcode) {
        case SP_OP_GET_SERVER_FEATURE:
        case SP_OP_SET_CLIENT_FEATURE:
            c->select = getBe16(buf + SP_OFF_SELECT);
            c->features = getBe64(buf + SP_OFF_FEATURES);
            if (c->opcode == SP_OP_SET_CLIENT_FEATURE && c->features != 0) {
                snprintf(err, errLen, "SetClientFeature asks for features 0x%llx we do not have",
                         (unsigned long long)c->features);
                return -1;
            }
            return 0;
        case SP_OP_KEEPALIVE:
            return 0;
        case SP_OP_REGISTER_XFER_MEM:
            c->addr = getBe64(buf + SP_OFF_ADDR);
            c->length = getBe32(buf + SP_OFF_LENGTH);
            c->key = getBe32(buf + SP_OFF_KEY);
            /* Any size the peer likes (the reference server takes any
             * rx-size): our staging does not follow it, it costs us nothing. */
            if (c->length == 0) {
                snprintf(err, errLen, "RegisterXferMemory of 0 bytes");
                return -1;
            }
            if (c->addr + c->length < c->addr) {
                snprintf(err, errLen, "RegisterXferMemory range wraps the address space");
                return -1;
            }
            return 0;
        default:
            snprintf(err, errLen, "unknown control opcode %u", c->opcode);
            return -1;
    }
}

int spRxArrived(SpRx *r, uint32_t n)
{
    if (n > r->length - r->written)
        return -1;
    r->written += n;
    return 0;
}

int spRxConsume(SpRx *r, uint32_t n)
{
    r->read += n;
    if (r->read < r->length)
        return 0;
    r->read = r->written = 0;
    return 1;
}

int spTxRegister(SpTx *t, const SpCmd *c)
{
    if (t->length != 0 && t->offset < t->length)
        return -1;
    t->addr = c->addr;
    t->key = c->key;
    t->length = c->length;
    t->offset = 0;
    return 0;
}

uint64_t spTxTake(SpTx *t, uint32_t n)
{
    uint64_t at = t->addr + t->offset;
    t->offset += n;
    return at;
}
