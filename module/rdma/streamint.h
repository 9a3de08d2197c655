/*
 * streamint.h - what the RDMA stream endpoint's two files share: stream.c
 * (buffers, posting, completions, bytes, teardown) and streamcm.c (set-up
 * with rdma_cm, connect, accept, and the progress of a stream's own event
 * channel). The tunables, the control block, the helpers streamcm.c calls.
 * Why the buffers, work request ids and QP set-up are as they are:
 * docs/architecture.md, "The RDMA stream endpoint".
 */
#ifndef OBJSTORE_RDMA_STREAMINT_H
#define OBJSTORE_RDMA_STREAMINT_H

#include "stream.h"
#include "streamproto.h"

/* ---- tunables ---------------------------------------------------------------------- */

#define SP_SEND_SLOTS      32          /* control SENDs in flight */
#define SP_SEND_SLOTS_ALL  0xffffffffu /* the free-slot bitmap with every one free */
#define SP_WRITES_MAX      128         /* data writes in flight */
#define SP_RECV_DEFAULT    512         /* posted receives */
#define SP_KEEPALIVE_MS    3000        /* idle time before a Keepalive */
#define SP_RESOLVE_MS      2000        /* rdma_resolve_addr / rdma_resolve_route */
#define SP_DRAIN_MS        2000        /* teardown: longest wait for flushed work */
#define SP_CONNECT_DEFAULT 5000

/* wr_id kinds (low three bits); the index sits above them. */
#define WRID_RECV     1u
#define WRID_CMDSEND  3u
#define WRID_WRITE    5u
#define WRID_KIND(w)  ((uint32_t)((w)&7u))
#define WRID_INDEX(w) ((uint32_t)((w) >> 3))

/* One data write in flight. */
typedef struct StreamWrite {
    uint32_t stageEnd; /* staging offset just past its bytes */
    uint64_t token;    /* gather writes: the user's token */
    int gather;
} StreamWrite;

/* The control block of one connection. */
struct RdmaStream {
    RdmaStreamConfig cfg;
    RdmaStreamState state;
    char err[256];
    int accepted; /* 1: the passive side (answers GetServerFeature) */

    /* rdma_cm */
    struct rdma_cm_id *id;
    struct rdma_event_channel *ec; /* own channel (connecting streams), else NULL */
    int epfd;                      /* connecting streams: epoll over ec and cc */

    /* verbs */
    struct ibv_pd *pd;
    int ownPd;
    struct ibv_comp_channel *cc;
    int ownCc;
    struct ibv_cq *cq;  /* receives: armed always (arrivals wake the owner) */
    struct ibv_cq *scq; /* sends: armed only while someone waits on a send (sendInterest) */
    int sendArmed;
    int qpReady; /* QP created */
    struct ibv_qp *qp;
    int ownQp;      /* connecting side: made with ibv_create_qp, moved through its states here */
    int remoteRead; /* remote READ access granted */

    /* control buffers */
    uint8_t *cmdBuf;
    size_t cmdLen;
    struct ibv_mr *cmdMr;
    uint32_t sendSlotFree; /* bitmap of free SEND slots */

    /* RX */
    uint8_t *rxBuf;
    size_t rxMapLen;
    struct ibv_mr *rxMr;
    SpRx rx;
    uint32_t rxNext;       /* size for the next registration (0: same) */
    uint64_t keepalivesIn; /* Keepalive messages received */

    /* TX */
    SpTx tx;
    uint8_t *txBuf;
    size_t txMapLen;
    struct ibv_mr *txMr;
    uint32_t txSize;
    uint32_t txNext; /* size once no write is in flight (0: same) */
    uint32_t txHead; /* next free staging byte */
    uint32_t txTail; /* oldest staging byte in flight */
    StreamWrite writes[SP_WRITES_MAX];
    uint32_t wHead, wCount; /* FIFO of writes in flight */

    /* accounting */
    uint32_t recvPosted;
    uint32_t ownSends; /* control SENDs + data writes in flight */
    uint32_t gathers;  /* gather writes in flight (their user waits for onSent) */
    uint32_t userSends;
    uint64_t lastSendMs;
};

/* ---- stream.c's helpers, for streamcm.c ---- */

/* A monotonic clock in milliseconds. Can't fail. */
uint64_t streamNowMs(void);
/* Record why s failed (the first reason wins) and mark it FAILED.
 * Returns -1 so callers can `return streamFail(...)`. */
int streamFail(RdmaStream *s, const char *fmt, ...);
/* Map len bytes and register them with access. Returns 0, or -1 (failed). */
int streamMapRegister(RdmaStream *s, size_t len, int access, uint8_t **buf, size_t *mapLen,
                      struct ibv_mr **mr);
/* Post receive slot i. Returns 0 or -1 (stream failed). */
int streamPostRecv(RdmaStream *s, uint32_t i);
/* Send one control message. Returns 0, or -1 (stream failed). */
int streamSendCmd(RdmaStream *s, const SpCmd *c);
/* Tell the peer where to write (our RX buffer). Returns 0 or -1. */
int streamRegisterRx(RdmaStream *s);
/* Give the QP the remote access granted so far. Returns 0 or -1. */
int streamSetQpAccess(RdmaStream *s);
/* Take the completion events, re-arm, and poll both CQs dry. Returns 0 or
 * -1 (stream failed). */
int streamDrainCq(RdmaStream *s);

#endif /* OBJSTORE_RDMA_STREAMINT_H */
