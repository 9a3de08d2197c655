/*
 * fetchint.h - the requesting side's insides, shared by its three files:
 * fetchxfer.c (transfers and their attempts), fetchanswer.c (the peer's
 * answers) and fetch.c (the engine's entry points). How a fetch runs:
 * docs/architecture.md ("An OBJ.FETCH, hop by hop") and docs/cluster.md
 * ("Broadcast"). Engine thread only.
 */
#ifndef OBJSTORE_FETCHINT_H
#define OBJSTORE_FETCHINT_H

#include "fetch.h"

typedef enum XferState {
    XFER_LOOKUP = 0, /* waiting for the directory */
    XFER_HINT_NODE,  /* waiting for the directory's address of the hinted node */
    XFER_CONNECTING, /* waiting for conn to be READY, or for room in its window */
    XFER_REQUESTED,  /* FETCH sent */
    XFER_RECEIVING,  /* payload streaming into the object */
    XFER_READING,    /* RDMA reads outstanding */
    XFER_WAITING,    /* every holder was busy: asks the directory again at retryAtUs */
    XFER_RELAY_NODE  /* waiting for the directory's address of the relay a holder named */
} XferState;

/* Relays a transfer follows from one directory answer before it stops
 * following (a broadcast's relays form chains about as long as the number
 * of nodes that started at once), and how long a relay stream may go
 * without a byte before the transfer gives it up and goes on elsewhere. */
#define FETCH_RELAY_HOPS     64
#define FETCH_RELAY_STALL_US (8LL * 1000 * 1000)

/* How long a transfer keeps coming back to busy holders before it insists,
 * and how close to a requester's deadline it stops doing so. */
#define FETCH_WAIT_MAX_US    (30LL * 1000 * 1000)
#define FETCH_WAIT_MARGIN_US (2LL * 1000 * 1000)

/* One requester of a transfer: item idx of req. */
typedef struct XferWaiter {
    FetchReq *req;
    size_t idx;
} XferWaiter;

/* One attempt of a transfer: one request to one node (with the requests
 * that ask the same node for the rest, `again`), from the moment it has a
 * connection until it fails or the object is in. All zero between
 * attempts: xferAttemptReset ends one, the only place it is cleared. */
typedef struct FetchAttempt {
    Conn *conn; /* the connection it asks on; NULL between attempts */
    /* The request on the wire asked for the bytes from reqFrom on; its
     * answer carries expect of them (a stream's payload, a PART, or the
     * range of the reads in flight). */
    uint64_t reqFrom, expect;
    uint64_t remoteChecksum; /* the whole object's, as the answer gave it */
    /* While RDMA reads are in flight (XFER_READING): the token their
     * completion must carry. A fresh one per read, never reused, so a
     * completion from an earlier attempt or another connection cannot
     * finish this one. 0 when no reads are outstanding. */
    uint64_t readToken;
    int askedPartial;      /* the request on the wire said PARTIAL_OK (a relay may answer) */
    int partial;           /* the answers are a relay's PARTs */
    int ranged;            /* the reads in flight are an RPART's range (XFER_READING) */
    int again;             /* the request being sent asks the same peer for the rest */
    int64_t progressUs;    /* relay stream: when a byte last landed */
    uint64_t progressMark; /* relay stream: how far it had got then */
    /* Why the attempt failed while its reads were in flight (an ERROR from
     * the peer): acted on once the NIC has let go of the object. */
    char failAfterReads[160];
    /* Why the payload being drained is not taken (the holder sent another
     * generation than the directory's): the attempt fails with it once the
     * payload has been read into nowhere. "" otherwise. */
    char drainWhy[160];
} FetchAttempt;

/* One object being pulled from another node, shared by every OBJ.FETCH that
 * asked for it while it runs. What the transfer keeps across attempts is
 * here; what one attempt has is in `at`.
 *
 * Which states and flags go together:
 *   LOOKUP       at all zero; dir NULL (asked) or, for a moment, set while
 *                the next location is picked; entry set when asked again
 *                after busy holders
 *   HINT_NODE    hint set; at, dir and entry unset
 *   CONNECTING   at.conn set (not READY yet, or its window full)
 *   REQUESTED    at.conn set; at.partial between a relay stream's PARTs;
 *                cancelled when the answer is still to be drained
 *   RECEIVING    at.conn set; at.drainWhy, cancelled, or (hinted) no entry
 *                mean the payload is read into nowhere
 *   READING      at.conn and at.readToken set; at.ranged for an RPART;
 *                at.failAfterReads when an ERROR came meanwhile; cancelled
 *                when every requester left (freed once the reads end)
 *   WAITING      at all zero; sawBusy set, insist not
 *   RELAY_NODE   relay set; at all zero; entry set
 * cancelled is set only in REQUESTED, RECEIVING and READING (elsewhere a
 * cancelled transfer is freed at once). insist and noRelay keep
 * askedPartial off. hint is set only before the first directory answer
 * (dir NULL). at.again lives only between a finished range and the
 * request for the rest. */
typedef struct Transfer {
    uint64_t xid; /* reqId on the wire */
    char *id;
    size_t idLen;
    FetchVia via;
    XferState state;
    DirResult *dir;
    size_t nextLoc;  /* next location in dir to try */
    ObjEntry *entry; /* the created local object, NULL until allocated */
    int tp;          /* TP_* of the latest attempt (its failure is counted there) */
    int attempts;
    int cancelled; /* no requester left: finish quietly */
    /* Resuming: the payload's first `landed` bytes are in the object. */
    uint64_t landed;
    int sawBusy;       /* a holder of this pass over the locations answered BUSY */
    int insist;        /* waited long enough for busy holders: ask without BUSY_OK */
    int64_t retryAtUs; /* XFER_WAITING: when to ask the directory again */
    int relayed;       /* bytes from a relay are in the object */
    int noRelay;       /* a copy through relays failed its checksum: complete holders only */
    int relayHops;     /* relays followed since the last directory answer */
    char relay[OBJ_WIRE_NAME_MAX + 1]; /* XFER_RELAY_NODE: whose address is awaited */
    int64_t startUs;
    /* The FROM node while the hinted attempt runs; "" once it is over (or
     * there was none): dir is NULL until then. */
    char hint[OBJ_WIRE_NAME_MAX + 1];
    char lastErr[160];
    FetchAttempt at; /* the current attempt */
    XferWaiter *waiters;
    size_t nWaiters, capWaiters;
    ObjListLink link; /* in the list of transfers */
} Transfer;

/* ---- fetchxfer.c: transfers and their attempts ---- */

/* The first transfer, and the one after x; NULL at the end. A walk that
 * changes the list stops (or starts again) right after. */
Transfer *xferFirst(void);
Transfer *xferNext(const Transfer *x);
/* Give x (filled in by the caller) its xid and list it, newest first. */
void xferAdd(Transfer *x);
/* A fresh token for a read of an attempt (never 0, never reused). */
uint64_t xferNewReadToken(void);
/* Record the outcome of item idx of r (err "" = success); r is handed back
 * when it was the last one. After that the engine never touches r again. */
void xferItemDone(FetchReq *r, size_t idx, const char *err);
Transfer *xferByXid(uint64_t xid);
/* The live (not cancelled) transfer of id, or NULL. */
Transfer *xferById(const char *id, size_t idLen);
/* Add item idx of r to x's waiters. Returns 0, or -1 when out of memory. */
int xferAttach(Transfer *x, FetchReq *r, size_t idx);
void xferUnlink(Transfer *x);
void xferFree(Transfer *x);
/* Forget a cancelled transfer whose answer has been drained (or will never
 * come): its object was aborted when it was cancelled. */
void xferDrop(Transfer *x);
/* Give back the created object of x, if it still has one. */
void xferAbortEntry(Transfer *x);
/* Finish x: tell every waiter (err "" = success), unlink and free it. */
void xferComplete(Transfer *x, const char *err);
/* Fail x: give back its object, count the failure, finish it with err. */
void xferFail(Transfer *x, const char *err);
/* End x's attempt (FetchAttempt): the one place its fields are cleared. */
void xferAttemptReset(Transfer *x);
/* The hinted attempt of x failed (why): give back the object it created,
 * forget the node's cached address when forget is set, and carry on as an
 * ordinary fetch with a directory lookup. Only once nothing of the attempt
 * is in flight. */
void xferHintFallback(Transfer *x, const char *why, int forget);
/* The current attempt failed: remember why and try the next location (or,
 * for the hinted attempt, fall back to the directory). */
void xferAttemptFailed(Transfer *x, const char *why);
/* Send x's FETCH on x->at.conn, or leave x waiting (XFER_CONNECTING) while
 * the connection's window is full; xferKick sends it when room opens. */
void xferSendFetch(Transfer *x);
/* Send the FETCHes waiting for c, as far as its window allows. */
void xferKick(Conn *c);
/* Make c (transport tp) the connection of x's attempt and send its FETCH,
 * now or once c is up. */
void xferUseConn(Transfer *x, Conn *c, int tp);
/* Try x's next location; wait, insist or fail when none is left. */
void xferTryNext(Transfer *x);
/* Put the locations of res in a random order. */
void xferShuffle(DirResult *res);
/* Start x's hinted attempt (mayAsk: the directory may be asked for the
 * node's address); falls back to the directory when that cannot work. */
void xferHintStart(Transfer *x, int mayAsk);
/* Create x's object of the size the hinted node announced. Returns 0, or
 * -1 when it cannot be created. */
int xferHintCreate(Transfer *x, uint64_t size, uint64_t metaSize);
/* The payload is in place: verify (against landedSum, the checksum the
 * transport took as the bytes landed, or a pass over the object when
 * NULL), seal as a replica, publish, answer. */
void xferReceived(Transfer *x, const uint64_t *landedSum);
/* Tell the owner it may drop the pin of reqId. */
void xferSendDone(Conn *c, uint64_t reqId);
/* Ask relay node n for the rest of x. Returns 0, or -1 (x left as it was,
 * without a connection). */
int xferRelayConnect(Transfer *x, const DirNode *n);
/* How many bytes of x's object have landed, in order from its start. */
uint64_t xferLandedNow(const Transfer *x);

/* ---- fetchanswer.c: the peer's answers ---- */

/* DATA, PART, RNDV, RPART or ERROR: an answer to one of our requests. */
int fetchOnAnswer(Conn *c, const WireMsg *m);
/* A stream's payload has been read (into its object, or into nowhere). */
void fetchOnPayloadDone(Conn *c);
/* The reads posted with cookie on c are over (ok; sum: their checksum). */
void fetchOnReadDone(Conn *c, void *cookie, int ok, const uint64_t *sum);

#endif /* OBJSTORE_FETCHINT_H */
