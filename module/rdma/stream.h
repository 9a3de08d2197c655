/*
 * stream.h - the one RDMA stream endpoint: an RC queue pair, set up with
 * rdma_cm, that carries a byte stream each way in the Valkey Over RDMA
 * protocol (streamproto.h). Three users share it: Redis clients over RDMA
 * (module/door/conntype.c), the client library (client/rdmaconn.c) and
 * the transfer engine's rdma transport (module/transfer/rdma.c).
 *
 * One object per connection. It owns the QP, its CQ, a receive buffer the
 * peer writes into (RX), a staging buffer our writes are copied into (TX),
 * and 32-byte control buffers for the posted receives and our SENDs.
 * Memory per connection is bounded: rxSize + txSize + (recvWr + 64) * 32
 * bytes; TX staging is allocated at the first write.
 *
 * Event loops: rdmaStreamFd gives one descriptor that becomes readable when
 * rdmaStreamProcess has work (completions and, for connecting streams,
 * rdma_cm events; a stream on a shared completion channel has none: its
 * owner reads that channel and calls rdmaStreamProcess). It never signals
 * writability: after Process, rdmaStreamWritable says what may be written
 * (the peer's RX buffer is re-registered by a control message, which is a
 * completion like any other). Accepted streams get their rdma_cm events on
 * the listener's channel; the owner passes them to rdmaStreamCmEvent.
 *
 * Blocking users (simple clients) call rdmaStreamWait, which sleeps on the
 * descriptor and processes.
 *
 * Work requests of the user (the transfer engine's RDMA READs and memory
 * window binds) go on rdmaStreamQp with wr_id values whose low bit is 0
 * (pointers); their completions are handed to cfg.onWc. The stream's own
 * wr_ids have the low bit set.
 *
 * Teardown (rdmaStreamFree): disconnect, move the QP to the error state,
 * wait (bounded) until every posted work request has completed or been
 * flushed, and only then release memory. Not thread-safe: one thread per
 * stream.
 */
#ifndef OBJSTORE_STREAM_H
#define OBJSTORE_STREAM_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct RdmaStream RdmaStream;

typedef struct RdmaStreamConfig {
    uint32_t rxSize;        /* our RX buffer, SP_RX_MIN..SP_RX_MAX; 0: SP_RX_DEFAULT */
    uint32_t txSize;        /* TX staging, SP_RX_MIN..SP_RX_MAX; 0: SP_RX_DEFAULT */
    uint32_t recvWr;        /* posted receives; 0: 512 */
    uint32_t userSendWr;    /* send WRs the user posts itself (READs, binds); 0 */
    uint32_t userSendSge;   /* scatter entries the user's WRs need; 0: 2 */
    int keepaliveMs;        /* a Keepalive after this long without sending; 0: 3000; <0: never */
    int responderResources; /* RDMA READs the peer may have in flight on us (0: none) */
    int initiatorDepth;     /* RDMA READs we may have in flight (0: none) */
    struct ibv_pd *pd;      /* NULL: the stream allocates its own protection domain */
    /* Connecting streams: the local address to connect from (an IP literal,
     * selecting the device), or NULL / "" for the route's choice. */
    const char *bindAddr;
    /* NULL: the stream has its own completion channel (rdmaStreamFd). Else
     * its CQ reports on this shared channel with cq_context = the stream;
     * the owner gets and acks the event, then calls rdmaStreamProcess. */
    struct ibv_comp_channel *channel;
    /* Completions of the user's work requests. NULL if it posts none. */
    void (*onWc)(void *userCtx, const struct ibv_wc *wc);
    /* A gather write (rdmaStreamWriteGather) completed or was flushed;
     * ok = 0 when it failed. NULL if the user makes none. */
    void (*onSent)(void *userCtx, uint64_t token, int ok);
    void *userCtx;
} RdmaStreamConfig;

/* Stream states, in order. */
typedef enum RdmaStreamState {
    RDMA_STREAM_CONNECTING = 0, /* rdma_cm has not established it yet */
    RDMA_STREAM_OPEN = 1,       /* established; bytes flow once the peer registered RX */
    RDMA_STREAM_CLOSED = 2,     /* the peer disconnected (arrived bytes are still readable) */
    RDMA_STREAM_FAILED = 3      /* an error; rdmaStreamError says which */
} RdmaStreamState;

/* ---- setup ---- */

/* Start connecting to host:port (IPv4/IPv6 literal or name). Non-blocking:
 * the stream owns an rdma_cm event channel, watched through rdmaStreamFd;
 * it turns OPEN in rdmaStreamProcess. Returns the stream, or NULL with a
 * reason in err. */
RdmaStream *rdmaStreamConnect(const char *host, int port, const RdmaStreamConfig *cfg, char *err,
                              size_t errLen);
/* Connect and wait until OPEN and the peer's RX buffer is known, at most
 * timeoutMs (<= 0: 5000). Returns the stream or NULL with a reason. */
RdmaStream *rdmaStreamConnectBlocking(const char *host, int port, const RdmaStreamConfig *cfg,
                                      int timeoutMs, char *err, size_t errLen);
/* Accept a CONNECT_REQUEST's id: create the QP and buffers, post the
 * receives, rdma_accept. id->context becomes the stream. On failure the
 * request is rejected, NULL is returned with a reason in err, and the id is
 * destroyed (the caller must not touch it again). */
RdmaStream *rdmaStreamAccept(struct rdma_cm_id *id, const RdmaStreamConfig *cfg, char *err,
                             size_t errLen);
/* An accepted stream's rdma_cm event (from the listener's channel):
 * ESTABLISHED, DISCONNECTED, errors. Returns 0, or -1 when the stream has
 * closed or failed (the owner frees it when it is done with it). */
int rdmaStreamCmEvent(RdmaStream *s, enum rdma_cm_event_type type, int status);

/* Release everything (see the teardown rule above). Accepts NULL. */
void rdmaStreamFree(RdmaStream *s);

/* ---- progress ---- */

/* The descriptor to watch (readable: call rdmaStreamProcess); -1 for a
 * stream on a shared channel. */
int rdmaStreamFd(const RdmaStream *s);
/* Drain rdma_cm events (connecting streams), the CQ (re-arming it), and
 * control messages; send a keepalive when due. Never blocks. Returns 0, or
 * -1 when the stream has failed or closed (arrived bytes stay readable). */
int rdmaStreamProcess(RdmaStream *s);
/* Sleep on the descriptor at most timeoutMs (0: just process), then
 * process. Returns 0, or -1 as rdmaStreamProcess. */
int rdmaStreamWait(RdmaStream *s, int timeoutMs);

RdmaStreamState rdmaStreamGetState(const RdmaStream *s);
/* Why the stream failed or closed; "" while it is fine. */
const char *rdmaStreamError(const RdmaStream *s);

/* ---- bytes ---- */

/* Bytes ready to read. */
size_t rdmaStreamReadable(const RdmaStream *s);
/* Copy up to cap ready bytes out. Returns the count (0 when none; then
 * check the state). Consumed space goes back to the peer as the protocol
 * says. */
size_t rdmaStreamRead(RdmaStream *s, void *buf, size_t cap);
/* Zero-copy read: the ready bytes, contiguous, valid until the next
 * Consume or Process. *len = 0 when none. */
const uint8_t *rdmaStreamPeek(const RdmaStream *s, size_t *len);
/* The reader is done with n (<= readable) bytes. Returns 0 or -1 (the
 * stream failed re-registering its buffer). */
int rdmaStreamConsume(RdmaStream *s, size_t n);

/* Bytes that could be written now without waiting. When our own side is
 * full (not the peer's buffer), the next send completion wakes the
 * descriptor, as a write that found no room does. */
size_t rdmaStreamWritable(RdmaStream *s);
/* Copy up to len bytes into the stream (one or more writes). Returns the
 * bytes taken (may be fewer than len, 0 when there is no room: process and
 * retry), or -1 when the stream has failed or closed. */
ssize_t rdmaStreamWrite(RdmaStream *s, const void *buf, size_t len);
/* rdmaStreamWrite of the concatenation of iov[0..iovcnt): the buffers are
 * gathered straight into the staging buffer (one copy, as few writes as the
 * room allows). Same returns. */
ssize_t rdmaStreamWritev(RdmaStream *s, const struct iovec *iov, int iovcnt);
/* One write of hdr (copied) followed by len bytes of registered memory
 * (lkey) sent from where they are, as one WRITE_WITH_IMM with two scatter
 * entries. All or nothing: returns 1 when posted (cfg.onSent(token) follows
 * once the payload may be reused), 0 when the peer's buffer or our staging
 * has no contiguous room for it now, -1 when the stream has failed. On 0,
 * copy the bytes with rdmaStreamWrite: the peer frees room only once its
 * whole buffer was filled and read, so waiting alone would not help when
 * the tail of its buffer is too short. */
int rdmaStreamWriteGather(RdmaStream *s, const void *hdr, size_t hdrLen, const void *payload,
                          size_t len, uint32_t lkey, uint64_t token);

/* ---- for the transfer engine ---- */

struct ibv_qp *rdmaStreamQp(const RdmaStream *s);
struct ibv_pd *rdmaStreamPd(const RdmaStream *s);
struct rdma_cm_id *rdmaStreamId(const RdmaStream *s);
/* Let the peer issue RDMA READs on this QP (the QP starts without remote
 * read access; call after the peer proved itself). Returns 0 or -1. */
int rdmaStreamAllowRemoteRead(RdmaStream *s);
/* Use an RX buffer of rxSize from the next time the buffer is registered
 * again (a stream accepted before authentication starts small). Returns 0
 * or -1 (bad size or out of memory). */
int rdmaStreamResizeRx(RdmaStream *s, uint32_t rxSize);
/* Use a staging (TX) buffer of txSize from the first write made while no
 * write is in flight (a stream accepted before authentication starts
 * small; the larger buffer is mapped when it is first needed). Returns 0
 * or -1 (bad size). */
int rdmaStreamResizeTx(RdmaStream *s, uint32_t txSize);
/* Post the user's send work request(s) (a chain) on the QP; the stream
 * counts them so that teardown waits for their completions, which go to
 * cfg.onWc. wr_id low bits must be 0. Returns 0, or -1 (logged reason in
 * rdmaStreamError; nothing of the chain that failed is counted). */
int rdmaStreamPostSend(RdmaStream *s, struct ibv_send_wr *wr);
/* Work requests of the stream's own (data writes, control messages) posted
 * and not yet completed: 0 once every byte written so far has reached the
 * peer. Lets a user close gracefully (the last reply delivered before
 * rdmaStreamFree flushes the queue). While some are pending, their
 * completion wakes the stream's descriptor. */
unsigned rdmaStreamSendsPending(RdmaStream *s);
/* Keepalive messages received from the peer so far (diagnostics: a test
 * tells from it that the peer's side of the stream is being processed). */
uint64_t rdmaStreamKeepalivesIn(const RdmaStream *s);
/* The context given to onWc / onSent. */
void *rdmaStreamUserCtx(const RdmaStream *s);
/* Change the context given to onWc / onSent. */
void rdmaStreamSetUserCtx(RdmaStream *s, void *userCtx);

/* Addresses of the connection (for CLIENT LIST and same-host checks). */
const struct sockaddr *rdmaStreamPeerAddr(const RdmaStream *s);
const struct sockaddr *rdmaStreamLocalAddr(const RdmaStream *s);

#ifdef __cplusplus
}
#endif

#endif /* OBJSTORE_STREAM_H */
