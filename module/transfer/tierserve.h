/*
 * tierserve.h - serving spilled objects to other nodes (tierserve.c). A
 * spilled object's file is read once, on a reader thread of its own (never
 * on the engine thread), into one buffer that every concurrent serving of
 * that object shares; the buffers of all the spilled objects being served
 * stay within a node-wide byte budget (spill-serve-budget), and a read past
 * it waits its turn. serve.c decides that a request is served this way and
 * owns its pin of the connection's cap and its upload slot; this file owns
 * the bytes. Design: docs/tiers.md, "Serving a spilled object". Engine
 * thread only.
 */
#ifndef OBJSTORE_TIERSERVE_H
#define OBJSTORE_TIERSERVE_H

#include <stdint.h>

#include "engineint.h"

/* The low bit every send cookie of this file carries (no ObjEntry has it). */
#define TIER_SERVE_COOKIE_TAG 1u

/* A serving is over (sent, or answered with an ERROR): serve.c gives back
 * what it took for it on c (a pin of the cap; slot, its upload slot or
 * NULL). Called before the ERROR is sent, never for a serving that goes
 * with its connection (tierServeConnClosed). */
typedef void TierServeOverFn(Conn *c, void *slot);

/* A request for a spilled object, as serve.c found it under the table lock. */
typedef struct TierServeReq {
    Conn *conn;
    uint64_t reqId;
    void *slot;      /* handed back to over */
    uint64_t fileNo; /* the object's spill file: what servings share */
    int fd;          /* that file, open (taken over here, whatever happens) */
    uint64_t dataSize, metaSize, checksum;
    uint64_t from; /* the first byte to send, at most dataSize + metaSize */
    TierServeOverFn *over;
} TierServeReq;

/* Serve q: DATA from the shared buffer of its file once that is read and
 * checked against the checksum (at once when it already is), or an ERROR
 * when it cannot be read. The read waits while the budget is taken.
 * Returns 0, or -1 when q's connection is closing. */
int tierServeFetch(const TierServeReq *q);
/* A send whose cookie carries TIER_SERVE_COOKIE_TAG completed on c. */
void tierServeSent(Conn *c, void *cookie);
/* c is gone: forget its servings (serve.c drops its pins and slots). */
void tierServeConnClosed(Conn *c);
/* The engine stops: wait for the reader thread, free every buffer. */
void tierServeShutdown(void);

#endif /* OBJSTORE_TIERSERVE_H */
