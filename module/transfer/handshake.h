/*
 * handshake.h - the caps on incoming connections that have not proved the
 * cluster secret yet, as one pure verdict: the engine applies it to every
 * connection in its handshake (engine.c), the RDMA transport once more to
 * connection requests, before anything is allocated for them (rdma.c with
 * the caps of rdmaproto.h). Unit test: tests/unit/test_rdmaproto.c.
 */
#ifndef OBJSTORE_HANDSHAKE_H
#define OBJSTORE_HANDSHAKE_H

/* One set of caps, and what a refusal at each says (static strings). */
typedef struct HandshakeCaps {
    int max;          /* unproved connections in total */
    int maxPerSource; /* unproved connections from one address */
    const char *whyMax, *whyPerSource;
} HandshakeCaps;

/* May one more connection start its handshake, with `all` unproved incoming
 * connections in total and `same` of them from its address? Returns NULL,
 * or why not (caps->whyMax or caps->whyPerSource; the total is asked
 * first). Can't fail. */
const char *handshakeVerdict(const HandshakeCaps *caps, int all, int same);

#endif /* OBJSTORE_HANDSHAKE_H */
