/*
 * respring.h - the checks of the RESP-over-RDMA wire (resprdma.h) that need
 * no verbs: the ring description in the connect / accept private data, and
 * every ring message as it arrives (immediate -> slot and length, the slot
 * the ring expects, the header's flags and returned credits). The RDMA door
 * (module/redis/respserver.c) hands each completion's immediate to
 * respRingOnMsg and closes the connection on -1. Pure C, no I/O: fuzzed by
 * tests/fuzz/fuzz_respring.c.
 */
#ifndef OBJSTORE_RESPRING_H
#define OBJSTORE_RESPRING_H

#include <stddef.h>
#include <stdint.h>

#include "rdma/ring.h"

/* The peer's ring, from its private data (host byte order). */
typedef struct RespRingPeer {
    uint32_t slots;    /* 4..RING_MAX_SLOTS */
    uint32_t slotSize; /* 64..RING_MAX_LEN */
    uint32_t rkey;
    uint64_t addr;
} RespRingPeer;

/* A ring message that passed every check. */
typedef struct RespRingMsg {
    uint32_t slot;          /* the slot it arrived in */
    const uint8_t *payload; /* the RESP bytes after the header, inside that slot */
    uint32_t payloadLen;    /* 0 for a pure credit return */
    uint32_t credits;       /* granted to the sender's tx ring */
} RespRingMsg;

/* Parse the ring description of connect / accept private data (len bytes at
 * data, NULL for none). Returns 0 with *peer filled, or -1 with a reason in
 * *why (a static string) and *peer untouched. */
int respRingParsePriv(const void *data, size_t len, RespRingPeer *peer, const char **why);

/* A ring write with immediate imm (host byte order) arrived in ring, our
 * receive ring of rx->slots slots of slotSize bytes. Checks, in order: the
 * slot is the one rx expects, the length holds a header and fits a slot, the
 * header's flags are 0, the credits it returns do not exceed what tx has
 * outstanding. On success the slot is consumed (rx), the credits granted
 * (tx) and *msg describes the message: returns 0. Returns -1 with a reason
 * in *why on the first failed check; the connection must then be closed
 * (rx/tx may be half updated). */
int respRingOnMsg(RingRx *rx, RingTx *tx, const uint8_t *ring, uint32_t slotSize, uint32_t imm,
                  RespRingMsg *msg, const char **why);

#endif /* OBJSTORE_RESPRING_H */
