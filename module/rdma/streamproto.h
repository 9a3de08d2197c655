/*
 * streamproto.h - the rules of the Valkey Over RDMA protocol, as pure C:
 * the 32-byte control message and the offset arithmetic of the RX and TX
 * buffers. No verbs calls; module/rdma/stream.c asks these functions, the
 * unit test and the fuzz target check them.
 *
 * The protocol (public spec: valkey-doc, topics/RDMA.md):
 *   - control messages are 32 bytes, big-endian, sent with IBV_WR_SEND into
 *     the peer's posted receives: GetServerFeature (0), SetClientFeature
 *     (1), Keepalive (2), RegisterXferMemory (3). The memory form
 *     {u16 opcode, 14 reserved, u64 addr, u32 length, u32 key} describes
 *     the sender's RX buffer; the feature form {u16 opcode, u16 select, 20
 *     reserved, u64 features} negotiates features (none are defined);
 *   - stream data is IBV_WR_RDMA_WRITE_WITH_IMM into the peer's RX buffer
 *     at the next offset, imm = byte count (network order); a receiver
 *     that has consumed its whole RX buffer registers a buffer again and
 *     the writer starts over at offset 0. That is the flow control.
 * Both sides send RegisterXferMemory once the connection is established.
 */
#ifndef OBJSTORE_STREAMPROTO_H
#define OBJSTORE_STREAMPROTO_H

#include <stddef.h>
#include <stdint.h>

#define SP_CMD_SIZE 32

#define SP_OP_GET_SERVER_FEATURE 0
#define SP_OP_SET_CLIENT_FEATURE 1
#define SP_OP_KEEPALIVE          2
#define SP_OP_REGISTER_XFER_MEM  3

/* Bounds on our own RX and TX buffers (the reference server's defaults:
 * 64 KiB to 16 MiB, 1 MiB by default). */
#define SP_RX_MIN     (64u * 1024)
#define SP_RX_MAX     (16u * 1024 * 1024)
#define SP_RX_DEFAULT (1024u * 1024)

/* A decoded control message. */
typedef struct SpCmd {
    uint16_t opcode;
    uint16_t select;   /* feature forms */
    uint64_t features; /* feature forms */
    uint64_t addr;     /* RegisterXferMemory */
    uint32_t length;   /* RegisterXferMemory */
    uint32_t key;      /* RegisterXferMemory */
} SpCmd;

/* Encode c into out[SP_CMD_SIZE] (reserved bytes zero). Can't fail. */
void spEncode(const SpCmd *c, uint8_t out[SP_CMD_SIZE]);

/* Decode a received control message of len bytes. Returns 0 and fills
 * *c, or -1 with a reason in err: wrong size, unknown opcode, a
 * RegisterXferMemory of 0 bytes or whose address range wraps, a
 * SetClientFeature asking for features we do not have. A peer's buffer may
 * have any other size (the reference server accepts any rx-size; our own
 * stay within SP_RX_MIN..SP_RX_MAX). Reserved bytes are ignored (the
 * reference peer does too). */
int spDecode(const uint8_t *buf, size_t len, SpCmd *c, char *err, size_t errLen);

/* Our RX buffer: the peer writes at `written`, we read at `read`. */
typedef struct SpRx {
    uint32_t length;  /* bytes of the registered buffer */
    uint32_t written; /* bytes the peer has written into it */
    uint32_t read;    /* bytes consumed by the reader */
} SpRx;

/* The peer wrote n bytes (an immediate). Returns 0, or -1 when that would
 * pass the end of the buffer (a protocol violation). */
int spRxArrived(SpRx *r, uint32_t n);
/* Bytes ready to read. */
static inline uint32_t spRxReady(const SpRx *r)
{
    return r->written - r->read;
}
/* The reader consumed n (<= spRxReady) bytes. Returns 1 when the whole
 * buffer is consumed and must be registered again (and resets it), else 0. */
int spRxConsume(SpRx *r, uint32_t n);

/* The peer's RX buffer as our writer sees it. */
typedef struct SpTx {
    uint64_t addr;   /* peer's buffer */
    uint32_t key;    /* its rkey */
    uint32_t length; /* 0 until the peer has registered one */
    uint32_t offset; /* next byte to write */
} SpTx;

/* The peer registered a buffer (a decoded RegisterXferMemory). Returns 0,
 * or -1 when it did so while the old one still had room (only a full
 * buffer may be replaced, so a write in flight can never land in a buffer
 * the peer has abandoned). */
int spTxRegister(SpTx *t, const SpCmd *c);
/* Bytes that may be written now. */
static inline uint32_t spTxRoom(const SpTx *t)
{
    return t->length - t->offset;
}
/* Take n (<= spTxRoom) bytes at the current offset; returns the remote
 * address they go to. */
uint64_t spTxTake(SpTx *t, uint32_t n);

#endif /* OBJSTORE_STREAMPROTO_H */
