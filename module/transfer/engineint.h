/*
 * engineint.h - the engine core (engine.c: loop, queue, connections,
 * handshake) as its sides see it: the handler table a side registers
 * (EngineSide) and the narrow API the sides call (send, connect, look up,
 * settings, counters). The core's own state stays inside engine.c; the
 * requesting side's stays in its files (fetchint.h). Not for the
 * Redis-facing layer: that uses engine.h. Engine thread only, unless a
 * function says otherwise.
 */
#ifndef OBJSTORE_ENGINEINT_H
#define OBJSTORE_ENGINEINT_H

#include <pthread.h>

#include "engine.h"
#include "transport.h"

/* Holder ids for pins and creations made by the engine (see node.h for the
 * reserved OBJ_HOLDER_INTERNAL bit): one per transfer, one per connection. */
#define ENGINE_HOLDER_XFER(xid) ((1ULL << 63) | (1ULL << 61) | (xid))
#define ENGINE_HOLDER_CONN(cid) ((1ULL << 63) | (1ULL << 62) | (cid))

enum { TP_TCP = 0, TP_RDMA = 1, TP_COUNT = 2 };

/* Pins one connection may hold on the answering side; a FETCH beyond it is
 * answered BUSY (and a stream transport stops reading first). */
#define ENGINE_CONN_PINS_MAX 256
/* Requests the requesting side keeps outstanding on one connection; the
 * rest wait their turn. Half the pin cap: an honest node never meets BUSY,
 * even while the peer has not yet seen the DONE or send completion that
 * ends an earlier request. */
#define ENGINE_CONN_FETCH_WINDOW (ENGINE_CONN_PINS_MAX / 2)

struct Peer {
    char name[OBJ_WIRE_NAME_MAX + 1];
    Conn *conn[TP_COUNT];
    struct Peer *next;
};

/* engine.c */
/* Hand a finished fetch back: to its done hook (an engine-internal
 * request), else to cfg->onFetchDone. After it the engine never touches req. */
void engineFetchDone(FetchReq *req);
int engineSend(Conn *c, WireMsg *m, const void *payload, size_t len, void *cookie);
void engineSendError(Conn *c, uint64_t reqId, WireErr code, const char *text);
Conn *engineConnFor(const DirNode *node, int tp, char *err, size_t errLen);
/* The engine's settings (its copy of what engineStart was given). */
const EngineConfig *engineConfig(void);
/* The transport at TP_* index tp, or NULL where it is unavailable. */
const TransportOps *engineTransport(int tp);
/* Lock the counters and return them; engineStatsEnd unlocks. Any thread. */
EngineStats *engineStatsBegin(void);
void engineStatsEnd(void);
/* The counters of transport tp (between engineStatsBegin and End). */
EngineTransportStats *engineTpStats(int tp);
int engineTpIndex(const TransportOps *ops);
/* Ask the directory for id; the answer comes back as fetchOnDirResult(xid). */
void engineLookup(uint64_t xid, const char *id, size_t idLen);
/* Ask the directory for node name's address; the answer comes back to the
 * sides' nodeResult (res->id is the name), after it has been cached. */
void engineLookupNode(const char *name);
/* The address of node name as last seen in a directory answer, or NULL.
 * The cache is filled from every directory answer the engine receives. */
const DirNode *engineNodeCached(const char *name);
/* Forget the cached address of name (it led nowhere). */
void engineNodeForget(const char *name);
/* Which transport reaches node n for via (RDMA first for auto)? Returns
 * TP_*, or -1 with a "NOTSUPPORTED ..." reason in err. */
int engineTransportFor(const DirNode *n, FetchVia via, char *err, size_t errLen);
/* The existing connection of transport tp to node name, or NULL. */
Conn *engineConnExisting(const char *name, int tp);

/* A side of the engine: the requesting side (fetch.c) or the answering side
 * (serve.c). The core dispatches work and frames through the tables it is
 * started with (engineStartWith) and never names them or their functions; a
 * NULL entry means "not mine". */
typedef int EngineFrameFn(Conn *c, const WireMsg *m);
typedef struct EngineSide {
    const char *name;
    /* Work queued by the Redis thread (engine.h). */
    void (*submit)(FetchReq *req);
    void (*cancel)(uint64_t seq, int timedOut);
    void (*submitRepl)(ReplReq *r);
    void (*dirResult)(uint64_t xid, DirResult *res);
    /* The answer to engineLookupNode; the core frees res after every side. */
    void (*nodeResult)(const DirResult *res);
    /* Frames of a READY connection, by type (an ERROR with reqId 0 is the
     * core's: the session failed). Return 0, or -1 to close the conn. */
    EngineFrameFn *onFrame[WIRE_TYPE_MAX + 1];
    /* Connection and transport events. */
    void (*connReady)(Conn *c);
    void (*connClosed)(Conn *c);
    void (*payloadDone)(Conn *c);
    /* Some bytes of a payload landed on c (at least once per read while one
     * is due): a relay stream may forward them. */
    void (*payloadMoved)(Conn *c);
    void (*sendDone)(Conn *c, void *cookie);
    void (*readDone)(Conn *c, void *cookie, int ok, const uint64_t *sum);
    /* Periodic (every ENGINE_TICK_MS), and once at stop. */
    void (*tick)(void);
    void (*shutdown)(void);
} EngineSide;

/* engineStart (engine.h) without the sides: the core alone, started with
 * the n handler tables of with (they must outlive the engine; at most 4),
 * in the order they are asked. Returns 0, or -1 with a reason in err. */
int engineStartWith(const EngineConfig *cfg, const EngineSide *const *with, int n, char *err,
                    size_t errLen);

/* The core's side of the transports' host table (engine.c). */
int engineWatch(int fd, uint32_t events, EngineFdFn *fn, void *arg);
int engineModify(int fd, uint32_t events, EngineFdFn *fn, void *arg);
void engineUnwatch(int fd);
uint64_t engineNextConnId(void);
void engineCountBadFrame(void);
int engineConnBusy(const Conn *c);
void engineOnUp(Conn *c);
int engineOnFrame(Conn *c, const WireMsg *m);
void engineOnPayloadDone(Conn *c);
void engineOnSendDone(Conn *c, void *cookie);
void engineOnReadDone(Conn *c, void *cookie, int ok, const uint64_t *sum);
void engineOnClosed(Conn *c, const char *why);
/* Log from any engine-side file, with a level "warning"/"notice"/"verbose". */
void engineLog(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* OBJSTORE_ENGINEINT_H */
