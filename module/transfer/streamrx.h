/*
 * streamrx.h - the receiving end the two stream transports share (tcp.c and
 * rdma.c): a connection with its framer (StreamConn), the payload operations
 * of the transport table, which only ask that framer, and the loop that,
 * once a transport has put newly read bytes where its framer said, hands the
 * framer's events to the engine through the host table. A frame that does
 * not decode closes the connection for good.
 */
#ifndef OBJSTORE_STREAMRX_H
#define OBJSTORE_STREAMRX_H

#include "framer.h"
#include "transport.h"

/* The head of a stream transport's connection: its own struct starts with
 * this, so that the operations below find the framer from the Conn. */
typedef struct StreamConn {
    Conn base; /* must be first */
    Framer rx; /* frames and payloads out of the bytes read */
} StreamConn;

/* TransportOps.recvPayload, discardPayload and payloadHash of a stream
 * transport (transport.h says what each does); c must be a StreamConn. */
int streamRecvPayload(Conn *c, void *dst, size_t len);
void streamDiscardPayload(Conn *c);
int streamPayloadHash(Conn *c, uint64_t *sum);
/* TransportOps.payloadLanded: bytes of the payload being received that are
 * in place, given that it was announced as expect bytes long. */
uint64_t streamPayloadLanded(Conn *c, uint64_t expect);

/* Deliver every event framer f has for c: whole frames to host->onFrame,
 * ends of payloads to host->onPayloadDone. hold, when not NULL, is asked
 * before each whole frame: 1 stops there (the transport comes back later,
 * e.g. once its send queue went down), 0 goes on. Returns 0, or -1 once c
 * is closed (by the engine during an event, or here: a bad frame, or a
 * frame the engine refused). */
int streamRxDeliver(const TransportHost *host, Conn *c, Framer *f, int (*hold)(Conn *c));

#endif /* OBJSTORE_STREAMRX_H */
