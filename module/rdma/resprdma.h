/*
 * resprdma.h - the wire of "Redis protocol over RDMA": how a client and the
 * module's RDMA front door (rdma-client-port) carry RESP byte streams.
 * Shared by the module (module/redis/respserver.c) and the client library
 * (client/rdmaconn.c); pure definitions, no code.
 *
 * Connection: rdma_cm, RC QP, RDMA_PS_TCP. Each side describes its receive
 * ring in the connect / accept private data (RespRdmaPriv). There is no
 * other handshake: Redis AUTH/HELLO run inside the RESP stream.
 *
 * Messages: each side writes into the peer's next ring slot with
 * RDMA_WRITE_WITH_IMM; imm (network byte order) = ringImmEncode(slot, len)
 * (module/rdma/ring.h: slot in the top 12 bits, length in the low 20). A message
 * is a RespRdmaHdr followed by `len - sizeof(RespRdmaHdr)` bytes of the RESP
 * stream. Concatenating the payloads of all messages, in order, gives the
 * byte stream in that direction (requests from the client, replies from the
 * server), exactly as on a TCP socket: a reply larger than a slot simply
 * spans several messages. Receivers keep one receive WR posted per slot.
 *
 * Credits follow module/rdma/ring.h: a writer needs 2 credits for a message with
 * data and 1 for a message without data (a pure credit return); each
 * message returns, in hdr.credits, every slot the sender has consumed since
 * its last message; a receiver that owes ring.h's threshold and cannot
 * send a data message sends a data-less message to return them. A message in a slot
 * other than the expected one, a length out of range, or more credits than
 * outstanding is a protocol error: the connection is closed.
 */
#ifndef OBJSTORE_RESPRDMA_H
#define OBJSTORE_RESPRDMA_H

#include <stdint.h>

#define RESP_RDMA_MAGIC     0x4F424A43u /* "OBJC" */
#define RESP_RDMA_VERSION   1
#define RESP_RDMA_SLOTS     16          /* slots per ring (each side may choose 4..4096) */
#define RESP_RDMA_SLOT_SIZE (64 * 1024) /* bytes per slot, header included */

/* Private data of rdma_connect / rdma_accept; all fields little-endian. */
typedef struct __attribute__((packed)) RespRdmaPriv {
    uint32_t magic;    /* RESP_RDMA_MAGIC */
    uint16_t version;  /* RESP_RDMA_VERSION */
    uint16_t slots;    /* the sender's ring: number of slots */
    uint32_t slotSize; /* bytes per slot (>= 64, <= 1 MiB - 1) */
    uint32_t rkey;     /* REMOTE_WRITE key of the ring */
    uint64_t addr;     /* address of slot 0 */
} RespRdmaPriv;
_Static_assert(sizeof(RespRdmaPriv) == 24, "RespRdmaPriv is part of the wire format");

/* At the start of every ring message; little-endian. */
typedef struct __attribute__((packed)) RespRdmaHdr {
    uint16_t credits; /* slots of the receiver's-peer ring freed since the last message */
    uint16_t flags;   /* 0 in version 1 */
} RespRdmaHdr;
_Static_assert(sizeof(RespRdmaHdr) == 4, "RespRdmaHdr is part of the wire format");

#endif /* OBJSTORE_RESPRDMA_H */
