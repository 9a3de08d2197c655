/*
 * fetchanswer.c - the requesting side hears back: a holder's DATA, a relay's
 * PARTs, a rendezvous (RNDV, RPART) and the RDMA reads it starts, and an
 * ERROR (BUSY, perhaps naming a relay to follow). Each answer is matched to
 * its transfer's attempt (fetchint.h), read into the object or drained so
 * the connection's stream stays in step, and handed on to fetchxfer.c.
 * How: docs/architecture.md, "An OBJ.FETCH, hop by hop"; docs/cluster.md,
 * "Broadcast".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fetchint.h"
#include "common/util.h"

/* The payload bytes answer m on c carries: a PART its len (checked against
 * its object by the decoder); a DATA to a request from offset `from` the
 * bytes of an object of m's sizes from there on (a holder answers a FETCHR
 * at o with size + metaSize - o bytes, a FETCH or o = 0 with all). Every
 * read of an answer's payload, kept or drained, takes its length from here,
 * so the stream the connection's fetches share stays in step. Returns 0
 * with *len set, or -1 when a DATA announces less than that offset (no
 * holder answers so: the stream cannot be kept in step). */
static int answerCarries(const Conn *c, const WireMsg *m, uint64_t from, uint64_t *len)
{
    uint64_t total = m->u.data.size + m->u.data.metaSize;

    if (m->h.type == WIRE_PART) {
        *len = m->u.data.len;
        return 0;
    }
    if (total < from) {
        engineLog("warning", "%s: DATA of %llu bytes for a request from offset %llu", c->desc,
                  (unsigned long long)total, (unsigned long long)from);
        return -1;
    }
    *len = total - from;
    return 0;
}

/* DATA: the payload follows the frame in the connection's stream (both
 * transports are streams; the frame itself never carries it). */
static int fetchOnData(Conn *c, const WireMsg *m)
{
    Transfer *x = xferByXid(m->h.reqId);
    uint64_t carried;

    if (x && x->cancelled && x->at.conn == c && x->state == XFER_REQUESTED) {
        /* The answer to a cancelled fetch: read its payload into nowhere, so
         * the stream the other fetches share stays in step. */
        if (answerCarries(c, m, x->at.reqFrom, &carried) == -1)
            return -1;
        if (carried == 0) {
            xferDrop(x);
            return 0;
        }
        x->state = XFER_RECEIVING;
        return c->ops->recvPayload(c, NULL, carried);
    }
    if (!x || x->at.conn != c || x->state != XFER_REQUESTED || (!x->entry && !x->hint[0])) {
        /* its payload follows in the stream: we cannot skip it safely */
        engineLog("warning", "%s: DATA for an unknown request %llu", c->desc,
                  (unsigned long long)m->h.reqId);
        return -1;
    }
    if (answerCarries(c, m, x->at.reqFrom, &carried) == -1)
        return -1;
    if (!x->entry && xferHintCreate(x, m->u.data.size, m->u.data.metaSize) == -1) {
        if (carried > 0) { /* drain it; fetchOnPayloadDone falls back */
            x->state = XFER_RECEIVING;
            return c->ops->recvPayload(c, NULL, carried);
        }
        xferAttemptFailed(x, "OOM cannot create the object the hinted node announced");
        return 0;
    }
    ObjEntry *e = x->entry;
    if (m->u.data.size != e->dataSize || m->u.data.metaSize != e->metaSize ||
        (x->dir && m->u.data.checksum != x->dir->checksum)) {
        /* Another generation than the directory's (a stale copy listed):
         * read its payload into nowhere, so the stream the other fetches
         * share stays in step, and try the next holder. */
        char why[sizeof(x->at.drainWhy)];
        snprintf(why, sizeof(why), "PROTOCOL '%.64s' sent a different %s than the directory",
                 c->peerName,
                 m->u.data.size != e->dataSize || m->u.data.metaSize != e->metaSize ? "size"
                                                                                    : "checksum");
        if (carried == 0) {
            xferAttemptFailed(x, why);
            return 0;
        }
        memcpy(x->at.drainWhy, why, sizeof(why));
        x->state = XFER_RECEIVING;
        return c->ops->recvPayload(c, NULL, carried);
    }
    x->at.remoteChecksum = m->u.data.checksum;
    uint8_t *dst = engineConfig()->arenaBase + e->offset;
    if (carried == 0) {
        xferReceived(x, NULL);
        return 0;
    }
    x->state = XFER_RECEIVING;
    x->at.expect = carried;
    return c->ops->recvPayload(c, dst + x->at.reqFrom, x->at.expect);
}

/* PART: the next piece of a relay stream, from x->landed on (the first
 * from the offset asked). A PART nobody waits for (a stream given up or
 * cancelled while its PARTs were on their way) is read into nowhere. */
static int fetchOnPart(Conn *c, const WireMsg *m)
{
    Transfer *x = xferByXid(m->h.reqId);
    uint64_t carried;

    answerCarries(c, m, 0, &carried); /* a PART: can't fail */
    if (x && x->cancelled && x->at.conn == c && x->state == XFER_REQUESTED) {
        x->state = XFER_RECEIVING; /* drained, then dropped */
        return c->ops->recvPayload(c, NULL, carried);
    }
    if (!x || x->at.conn != c || x->state != XFER_REQUESTED || !x->entry)
        return c->ops->recvPayload(c, NULL, carried);
    ObjEntry *e = x->entry;
    uint64_t at = x->at.partial ? x->landed : x->at.reqFrom;
    if (m->u.data.size != e->dataSize || m->u.data.metaSize != e->metaSize ||
        m->u.data.offset != at || (x->dir && m->u.data.checksum != x->dir->checksum)) {
        xferAttemptFailed(x, "PROTOCOL the relay sent another object or range than asked for");
        return -1;
    }
    x->at.remoteChecksum = m->u.data.checksum;
    x->state = XFER_RECEIVING;
    if (!x->at.partial)
        x->at.progressUs = utilMonoUs();
    x->at.partial = 1;
    x->relayed = 1;
    x->at.reqFrom = at;
    x->at.expect = carried;
    return c->ops->recvPayload(c, engineConfig()->arenaBase + e->offset + at, x->at.expect);
}

/* Does a relay answer one request on c with one PART (RDMA, where a
 * round trip is cheap and a large range goes by RPART), rather than with a
 * stream of them? serve.c decides the same way. */
static int relayAnswersOnce(const Conn *c)
{
    return c->ops->readRemote != NULL;
}

void fetchOnPayloadDone(Conn *c)
{
    for (Transfer *x = xferFirst(); x; x = xferNext(x)) {
        if (x->at.conn == c && x->state == XFER_RECEIVING) {
            if (x->cancelled)
                xferDrop(x); /* drained */
            else if (x->at.drainWhy[0]) {
                char why[sizeof(x->at.drainWhy)];
                memcpy(why, x->at.drainWhy, sizeof(why));
                xferAttemptFailed(x, why);
            } else if (!x->entry) /* drained: the hinted answer had no room here */
                xferAttemptFailed(x, "OOM cannot create the object the hinted node announced");
            else {
                /* A resumed payload's hash covers its tail only: one pass then. */
                uint64_t sum, total = x->entry->dataSize + x->entry->metaSize;
                int landed =
                    !x->at.reqFrom && c->ops->payloadHash && c->ops->payloadHash(c, &sum) == 0;
                engineStatsBegin()->downloadedBytes += x->at.expect;
                engineStatsEnd();
                x->landed = x->at.reqFrom + x->at.expect;
                if (x->at.partial && x->landed < total && relayAnswersOnce(c)) {
                    x->at.partial = 0; /* ask the relay for more */
                    x->at.again = 1;
                    xferSendFetch(x);
                } else if (x->at.partial && x->landed < total) { /* the relay's next PART follows */
                    x->state = XFER_REQUESTED;
                    x->at.progressUs = utilMonoUs();
                } else {
                    x->at.partial = 0;
                    xferReceived(x, landed && x->landed == total ? &sum : NULL);
                }
            }
            break;
        }
    }
    xferKick(c);
}

static int fetchOnRndv(Conn *c, const WireMsg *m)
{
    Transfer *x = xferByXid(m->h.reqId);

    if (x && x->cancelled && x->at.conn == c && x->state == XFER_REQUESTED) {
        /* The answer to a cancelled fetch: nothing follows an RNDV in the
         * stream, so release the owner's pin and forget the transfer (kept
         * listed, it would hold its place in c's window for good). */
        xferSendDone(c, m->h.reqId);
        xferDrop(x);
        return 0;
    }
    if (!x || x->at.conn != c || x->state != XFER_REQUESTED || (!x->entry && !x->hint[0]) ||
        !c->ops->readRemote) {
        xferSendDone(c, m->h.reqId); /* not ours (any more): release the owner's pin */
        return 0;
    }
    if (!x->entry && xferHintCreate(x, m->u.data.size, m->u.data.metaSize) == -1) {
        xferSendDone(c, m->h.reqId);
        xferAttemptFailed(x, "OOM cannot create the object the hinted node announced");
        return 0;
    }
    ObjEntry *e = x->entry;
    if (m->u.data.size != e->dataSize || m->u.data.metaSize != e->metaSize ||
        (x->dir && m->u.data.checksum != x->dir->checksum)) {
        char why[160];
        snprintf(why, sizeof(why), "PROTOCOL '%.64s' sent a different %s than the directory",
                 c->peerName,
                 m->u.data.size != e->dataSize || m->u.data.metaSize != e->metaSize ? "size"
                                                                                    : "checksum");
        xferSendDone(c, m->h.reqId);
        xferAttemptFailed(x, why);
        return 0;
    }
    x->at.remoteChecksum = m->u.data.checksum;
    x->state = XFER_READING;
    x->at.readToken = xferNewReadToken();
    x->at.failAfterReads[0] = '\0';
    if (c->ops->readRemote(c, engineConfig()->arenaBase + e->offset, e->dataSize + e->metaSize,
                           m->u.data.addr, m->u.data.rkey,
                           (void *)(uintptr_t)x->at.readToken) == -1) {
        x->at.readToken = 0;
        xferSendDone(c, m->h.reqId);
        xferAttemptFailed(x, "UNAVAILABLE cannot post RDMA reads");
    }
    return 0;
}

/* RPART: a range of the object to read by rendezvous (a relay's landed
 * bytes, or an owner's rest of a resumed object): READ it into the object
 * at its offset; readsFinished then says DONE and asks for the rest. */
static int fetchOnRpart(Conn *c, const WireMsg *m)
{
    Transfer *x = xferByXid(m->h.reqId);

    if (x && x->cancelled && x->at.conn == c && x->state == XFER_REQUESTED) {
        xferSendDone(c, m->h.reqId); /* nothing follows an RPART: forget the transfer */
        xferDrop(x);
        return 0;
    }
    if (!x || x->at.conn != c || x->state != XFER_REQUESTED || !x->entry || !c->ops->readRemote) {
        xferSendDone(c, m->h.reqId); /* not ours (any more): release the peer's key */
        return 0;
    }
    ObjEntry *e = x->entry;
    if (m->u.data.size != e->dataSize || m->u.data.metaSize != e->metaSize ||
        m->u.data.offset != x->at.reqFrom || (x->dir && m->u.data.checksum != x->dir->checksum)) {
        xferSendDone(c, m->h.reqId);
        xferAttemptFailed(x, "PROTOCOL the peer offered another object or range than asked for");
        return 0;
    }
    x->at.remoteChecksum = m->u.data.checksum;
    x->state = XFER_READING;
    x->at.readToken = xferNewReadToken();
    x->at.failAfterReads[0] = '\0';
    x->at.ranged = 1;
    x->relayed = 1; /* the peer may be a relay: a bad chain means complete holders only */
    x->at.expect = m->u.data.len;
    uint8_t *dst = engineConfig()->arenaBase + e->offset + m->u.data.offset;
    if (c->ops->readRemote(c, dst, m->u.data.len, m->u.data.addr, m->u.data.rkey,
                           (void *)(uintptr_t)x->at.readToken) == -1) {
        x->at.readToken = 0;
        x->at.ranged = 0;
        xferSendDone(c, m->h.reqId);
        xferAttemptFailed(x, "UNAVAILABLE cannot post RDMA reads");
    }
    return 0;
}

/* The transfer whose reads on c carry token, or NULL (a stale completion:
 * its attempt is over). */
static Transfer *xferByReadToken(const Conn *c, uint64_t token)
{
    for (Transfer *x = xferFirst(); x; x = xferNext(x))
        if (x->at.readToken == token && x->at.conn == c && x->state == XFER_READING)
            return x;
    return NULL;
}

/* The reads of x's attempt on c (cookie) ended short: keep the prefix that
 * landed, in order from where they started (a later attempt asks for the
 * rest), and count it. */
static void readsNoteLanded(Transfer *x, Conn *c, void *cookie)
{
    uint64_t got = c->ops->readLanded ? c->ops->readLanded(c, cookie) : 0;

    engineStatsBegin()->downloadedBytes += got;
    engineStatsEnd();
    x->landed = x->at.reqFrom + got;
    x->at.ranged = 0;
}

/* An RPART's range is in the object (its DONE is sent): ask the same peer
 * for the rest, or, at the end, take the whole object's checksum in one
 * pass (the reads' own covers their range only) and seal it. */
static void rangeRead(Transfer *x)
{
    uint64_t total = x->entry->dataSize + x->entry->metaSize;

    engineStatsBegin()->downloadedBytes += x->at.expect;
    engineStatsEnd();
    x->at.ranged = 0;
    x->landed = x->at.reqFrom + x->at.expect;
    if (x->landed < total) {
        x->at.again = 1; /* the same attempt goes on */
        xferSendFetch(x);
        return;
    }
    xferReceived(x, NULL);
}

/* Every READ of the attempt has completed or been flushed: only now may the
 * object be verified (against sum, the checksum the transport took as the
 * bytes landed, when it has one), handed on, or given back. */
static void readsFinished(Conn *c, void *cookie, int ok, const uint64_t *sum)
{
    Transfer *x = xferByReadToken(c, (uint64_t)(uintptr_t)cookie);

    if (!x)
        return;
    x->at.readToken = 0;
    xferSendDone(c, x->xid);
    if (x->cancelled) { /* every requester left while the NIC was writing */
        xferAbortEntry(x);
        xferUnlink(x);
        xferFree(x);
        return;
    }
    if (x->at.failAfterReads[0] || !ok) {
        char why[160];
        snprintf(why, sizeof(why), "%s",
                 x->at.failAfterReads[0] ? x->at.failAfterReads : "UNAVAILABLE RDMA read failed");
        readsNoteLanded(x, c, cookie);
        xferAttemptFailed(x, why);
        return;
    }
    if (x->at.ranged) {
        rangeRead(x);
        return;
    }
    engineStatsBegin()->downloadedBytes += x->entry->dataSize + x->entry->metaSize;
    engineStatsEnd();
    xferReceived(x, sum);
}

/* A holder answered BUSY, naming in its text ("relay <name>") a node it is
 * sending the object to: ask that node for what it has landed. Returns 1
 * when x goes there (now, or once the node's address is known), 0 when it
 * does not (no relay named, relays ruled out, or too many hops). */
static int relayFollow(Transfer *x, const WireMsg *m)
{
    static const char tag[] = "relay ";
    size_t n = m->u.error.textLen, tl = sizeof(tag) - 1;

    if (x->noRelay || !x->entry || x->relayHops >= FETCH_RELAY_HOPS || n <= tl ||
        n - tl > OBJ_WIRE_NAME_MAX || memcmp(m->u.error.text, tag, tl))
        return 0;
    char name[OBJ_WIRE_NAME_MAX + 1];
    memcpy(name, m->u.error.text + tl, n - tl);
    name[n - tl] = '\0';
    if (!strcmp(name, engineConfig()->nodeName))
        return 0;
    x->relayHops++;
    xferAttemptReset(x);
    const DirNode *node = engineNodeCached(name);
    if (node)
        return xferRelayConnect(x, node) == 0;
    snprintf(x->relay, sizeof(x->relay), "%s", name);
    x->state = XFER_RELAY_NODE;
    engineLookupNode(name);
    return 1;
}

static int fetchOnError(Conn *c, const WireMsg *m)
{
    Transfer *x = xferByXid(m->h.reqId);
    char why[192];

    if (!x || x->at.conn != c)
        return 0;
    snprintf(why, sizeof(why), "%s from '%s': %.*s", wireErrName(m->u.error.code), c->peerName,
             (int)m->u.error.textLen, m->u.error.text);
    if (x->state == XFER_READING) {
        /* The NIC may still be writing into the object (cancelled or not):
         * nothing is freed or tried elsewhere until every READ has completed
         * or been flushed; fetchOnReadDone acts on the error then. */
        if (!x->at.failAfterReads[0])
            snprintf(x->at.failAfterReads, sizeof(x->at.failAfterReads), "%.159s", why);
        engineLog("warning", "%s: ERROR for request %llu while its RDMA reads are in flight",
                  c->desc, (unsigned long long)m->h.reqId);
        return 0;
    }
    if (x->cancelled) { /* nothing follows an ERROR: nothing to drain */
        xferDrop(x);
        return 0;
    }
    if (m->u.error.code == WIRE_ERR_BUSY) {
        x->sawBusy = 1;
        engineStatsBegin()->redirected++;
        engineStatsEnd();
        if (relayFollow(x, m))
            return 0;
    } else if (m->u.error.code == WIRE_ERR_NOTSEALED && x->at.askedPartial) {
        /* A relay ended its stream (its own transfer gave the object up, or
         * stalled): that says nothing of the object, so it is not the
         * fetch's answer. As after a BUSY, the transfer comes back to the
         * holders (waits and asks the directory again, or insists) and goes
         * on from the offset it reached. */
        x->sawBusy = 1;
    }
    xferAttemptFailed(x, why);
    return 0;
}

void fetchOnReadDone(Conn *c, void *cookie, int ok, const uint64_t *sum)
{
    readsFinished(c, cookie, ok, sum);
    xferKick(c);
}

/* DATA, RNDV or ERROR: an answer to one of our requests, which may also
 * open room in c's window for a waiting one. */
int fetchOnAnswer(Conn *c, const WireMsg *m)
{
    int rc;

    if (m->h.type == WIRE_DATA)
        rc = fetchOnData(c, m);
    else if (m->h.type == WIRE_PART)
        rc = fetchOnPart(c, m);
    else if (m->h.type == WIRE_RNDV)
        rc = fetchOnRndv(c, m);
    else if (m->h.type == WIRE_RPART)
        rc = fetchOnRpart(c, m);
    else
        rc = fetchOnError(c, m);
    if (rc == 0)
        xferKick(c);
    return rc;
}
