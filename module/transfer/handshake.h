/*
 * handshake.h - the caps on incoming connections that have not proved the
 * cluster secret yet, as pure verdicts: whether one more fits, and if not,
 * which unproved connection makes room for it (the oldest from its address,
 * or the oldest of all), so idle strangers cannot starve real nodes. The
 * engine applies them to every connection in its handshake (engine.c), the
 * RDMA transport once more to connection requests, before anything is
 * allocated for them (rdma.c with the caps of rdmaproto.h). Unit test:
 * tests/unit/test_rdmaproto.c.
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

/* Which unproved incoming connection must go so that one more may start
 * its handshake. A newcomer is never refused for the room idle ones hold:
 * the oldest gives way (an honest handshake takes a round trip, so the
 * oldest is the one most likely stalled, and a flood must outpace every
 * honest round trip to shut a node out). */
typedef enum HandshakeEvict {
    HANDSHAKE_EVICT_NONE = 0, /* it fits */
    HANDSHAKE_EVICT_SAME,     /* the oldest from the newcomer's address */
    HANDSHAKE_EVICT_ANY       /* the oldest of all */
} HandshakeEvict;

/* With `all` unproved incoming connections in total and `same` of them
 * from the newcomer's address: which must go (the per-source cap first,
 * since evicting from the same address also frees room in the total).
 * Can't fail. */
HandshakeEvict handshakeEvict(const HandshakeCaps *caps, int all, int same);

#endif /* OBJSTORE_HANDSHAKE_H */
