/*
 * streamrx.c - the receiving end of a stream transport (streamrx.h): its
 * payload operations and its delivery loop.
 */
#include <stdio.h>

#include "streamrx.h"

int streamRecvPayload(Conn *c, void *dst, size_t len)
{
    return framerExpectPayload(&((StreamConn *)c)->rx, dst, len);
}

void streamDiscardPayload(Conn *c)
{
    framerDiscardPayload(&((StreamConn *)c)->rx);
}

int streamPayloadHash(Conn *c, uint64_t *sum)
{
    return framerPayloadHash(&((StreamConn *)c)->rx, sum);
}

uint64_t streamPayloadLanded(Conn *c, uint64_t expect)
{
    size_t left = framerPayloadLeft(&((StreamConn *)c)->rx);
    return left > expect ? 0 : expect - left;
}

int streamRxDeliver(const TransportHost *host, Conn *c, Framer *f, int (*hold)(Conn *c))
{
    const char *why = "";

    for (;;) {
        WireMsg m;
        framerSetMac(f, c->rxMac); /* the handshake keys it between two frames */
        if (hold && framerFrameWaiting(f) && hold(c))
            return 0;
        switch (framerNext(f, &m, &why)) {
            case FRAMER_MORE:
                if (framerInPayload(f) && host->onPayloadMoved)
                    host->onPayloadMoved(c);
                return 0;
            case FRAMER_ERROR:
                goto out_bad_frame;
            case FRAMER_PAYLOAD_DONE:
                host->onPayloadDone(c);
                break;
            case FRAMER_FRAME:
                if (host->onFrame(c, &m) == -1) {
                    if (c->state != CONN_CLOSED)
                        c->ops->close(c, "protocol error (see the previous log line)");
                    return -1;
                }
                break;
        }
        if (c->state == CONN_CLOSED)
            return -1;
    }

out_bad_frame : {
    char reason[128];
    snprintf(reason, sizeof(reason), "bad frame: %s", why);
    host->countBadFrame();
    host->log("warning", "%s: %s", c->desc, reason);
    c->ops->close(c, reason);
    return -1;
}
}
