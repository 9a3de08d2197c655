/*
 * rdmaint.h - what the RDMA transport's two files share: rdma.c (the stream,
 * sending, receiving, connections, start-up) and rdmaread.c (the READ
 * rendezvous: memory windows, READ chunks, the completions of our own work
 * requests). Tunables, the connection's control block, the transport's
 * state. Design: docs/architecture.md, "RDMA: the stream for control and
 * small objects" and "Large objects: the READ rendezvous". Engine thread
 * only.
 */
#ifndef OBJSTORE_TRANSFER_RDMAINT_H
#define OBJSTORE_TRANSFER_RDMAINT_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "rdma.h"
#include "rdmareg.h"
#include "streamrx.h"
#include "common/list.h"
#include "rdma/stream.h"
#include "rdma/streamproto.h"
#include "store/checksum.h" /* XXH3, dispatched where the CPU allows */

/* ---- tunables ---------------------------------------------------------------------- */

#define RDMA_RX_SIZE     (4u << 20) /* our receive buffer once the peer is authenticated */
#define RDMA_TX_SIZE     SP_RX_DEFAULT
#define RDMA_TX_SIZE_IN  SP_RX_MIN  /* staging of an accepted connection (headers, copies) */
#define RDMA_TXQ_MAX     (1u << 20) /* frame bytes waiting for the peer's room */
#define RDMA_READ_CHUNK  (1u << 20)
#define RDMA_READ_WINDOW 16  /* READ chunks in flight per connection */
#define RDMA_WIN_MAX     256 /* windows per connection (= the engine's pin cap) */
/* User send WRs in flight: the READ chunks, and one bind or invalidation
 * per window at most. */
#define RDMA_USER_WR        (RDMA_READ_WINDOW + RDMA_WIN_MAX)
#define RDMA_REG_CACHE_MAX  1024 /* per-object registrations kept */
#define RDMA_LISTEN_BACKLOG 64

/* Low bits of our wr_ids (the stream's own have bit 0 set). */
#define RDMA_WR_READ  2u
#define RDMA_WR_BIND  4u
#define RDMA_WR_INV   6u
#define RDMA_WR_KINDS 7u

_Static_assert(RDMA_TX_SIZE_IN >= SP_RX_MIN && RDMA_RX_SIZE <= SP_RX_MAX, "stream buffer sizes");

/* ---- context -------------------------------------------------------------------------- */

/* One queued frame, the payload that follows it and the payload's tag. */
typedef struct TxItem {
    size_t frameLen, frameOff;
    const uint8_t *payload;
    size_t payloadLen, payloadOff;
    size_t tagLen, tagOff; /* the payload's tag, after its last byte (0 or OBJ_WIRE_MAC) */
    uint8_t tag[OBJ_WIRE_MAC];
    void *cookie;
    struct TxItem *next;
    uint8_t frame[]; /* frameLen bytes */
} TxItem;

typedef struct ReadOp {
    void *cookie;
    uint8_t *dst;
    uint64_t raddr, len, posted;
    uint64_t landed;    /* bytes whose READ completed (a QP completes in order) */
    XXH3_state_t *hash; /* checksum of the landed bytes; NULL: none taken */
    uint32_t rkey;
    int inflight, failed;
    ObjListLink link; /* in its connection's reads */
} ReadOp;

/* The length of op's READ chunk that starts at off: chunks are cut the same
 * way when posted and when their completions are counted. */
static inline uint64_t rdmaReadChunk(const ReadOp *op, uint64_t off)
{
    return op->len - off < RDMA_READ_CHUNK ? op->len - off : RDMA_READ_CHUNK;
}

/* A window's life: FREE -> BINDING -> BOUND -> INVALIDATING -> DONE (its
 * cookie waits to be handed back) -> FREE. */
typedef enum WinState { WIN_FREE = 0, WIN_BINDING, WIN_BOUND, WIN_INVALIDATING, WIN_DONE } WinState;

/* A type-2 memory window of a connection; its pointer is the grant handle. */
typedef struct Window {
    struct ibv_mw *mw; /* NULL in registration-key mode */
    uint32_t rkey;
    WinState state;
    RdmaReg *reg;
    void *cookie;             /* released once invalidated */
    struct Window *next;      /* the connection's list of all windows */
    struct Window *nextReady; /* invalidated, cookie not yet handed back */
} Window;

/* A gather write in flight: its cookie comes back through onSent. */
typedef struct Sent {
    uint64_t token;
    int ok;
} Sent;

typedef struct RdmaConn {
    StreamConn sc; /* must be first: the Conn and its framer */
    RdmaStream *s;
    int fd; /* the stream's descriptor in the engine's epoll, -1 when none */
    TxItem *txHead, *txTail;
    size_t txBytes;
    ObjList reads;     /* ReadOp.link, in order; the head is the one being posted */
    int readMoved;     /* a READ chunk landed since the engine last heard of it */
    ReadOp *reporting; /* the read whose onReadDone runs (readLanded asks it) */
    int readsInflight;
    int userPosted; /* our WRs on the QP not yet completed */
    Window *windows;
    int nWindows;
    Window *ready; /* invalidated windows whose cookies wait to be handed back */
    Sent *sent;    /* onSent reports waiting to be handed on */
    int nSent, capSent;
    char failWhy[128]; /* a completion failed: close with this after processing */
    int up, authed, closing, inHandler;
    uint64_t tickGen; /* the last rdmaTick that progressed it */
    ObjListLink all;  /* in rdmaSt.all once adopted; self-linked before and after */
} RdmaConn;

typedef enum RdmaKeyMode {
    RDMA_KEYS_WINDOW = 0, /* a window over the object's registration, per transfer */
    RDMA_KEYS_OBJREG      /* the object registration's own key (no windows on the device) */
} RdmaKeyMode;

/* The transport's state (engine thread only). */
typedef struct RdmaState {
    struct rdma_event_channel *ec;
    struct rdma_cm_id *listenId;
    struct ibv_context *verbs;
    struct ibv_pd *pd;
    struct ibv_mr *arenaMr;
    uint8_t *arenaBase;
    uint64_t arenaSize;
    int rdAtomic;
    RdmaKeyMode keys;
    RdmaRegCache *regs; /* per-object registrations, windows are bound over them */
    ObjList all;        /* RdmaConn.all, newest first */
    uint64_t unlinks;   /* connections taken off all so far (a walk's check) */
    uint64_t tickGen;   /* the current or last rdmaTick */
    char bindAddr[64];  /* rdma-bind: outgoing connections leave from this device */
} RdmaState;

extern RdmaState rdmaSt;
/* The engine core, as given to rdmaTransportInit. */
extern const TransportHost *rdmaHost;

/* ---- rdmaread.c ---- */

/* The oldest read of c, or NULL when it has none. */
ReadOp *rdmaReadFirst(const RdmaConn *c);
/* Record why c must close (the first reason only): it is closed once the
 * stream's processing has returned. */
void rdmaFail(RdmaConn *c, const char *fmt, const char *what);
/* The stream's onWc: a completion of one of our WRs (READ chunk, bind,
 * invalidation), or its flush at teardown. Bookkeeping only. */
void rdmaOnWc(void *ctx, const struct ibv_wc *wc);
/* TransportOps.grantRead and revokeRead: a window over one object. */
void *rdmaGrantRead(Conn *base, const void *addr, uint64_t len, uint32_t *rkey);
void rdmaRevokeRead(Conn *base, void *grant, void *cookie);
/* Kill every window of closing c (before its QP goes), then free their
 * records (after the stream's flush). */
void rdmaWindowsKill(RdmaConn *c);
void rdmaWindowsFree(RdmaConn *c);
/* Post read chunks while the window allows. Returns 0 or -1 (verbs error). */
int rdmaPumpReads(RdmaConn *c);
/* Hand op's outcome to the engine and free it. */
void rdmaReadReport(RdmaConn *c, ReadOp *op, int ok, const uint64_t *sum);
/* Report and drop the finished read ops at the head of c's list, in order. */
void rdmaReapReads(RdmaConn *c);
/* TransportOps.readRemote and readLanded. */
int rdmaReadRemote(Conn *base, void *dst, uint64_t len, uint64_t raddr, uint32_t rkey,
                   void *cookie);
uint64_t rdmaReadLanded(Conn *base, void *cookie);

#endif /* OBJSTORE_TRANSFER_RDMAINT_H */
