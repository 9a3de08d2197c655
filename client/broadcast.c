/*
 * broadcast.c - the client library's placing of objects on nodes: OBJ.FETCH
 * on one node (objClientFetch), and on many at once (objClientBroadcast:
 * every node is asked before any answer is awaited, over transports that
 * pipeline; one by one over those that do not).
 */
#include "objstore.h"
#include "objalloc.h"
#include "objclient_core.h"

#include <stdio.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "common/util.h"

/*
 * Judge OBJ.FETCH's answer for one id (r may be NULL: the call failed, the
 * error is already recorded). Frees r. Returns 0, or -1 with the error
 * recorded on c.
 */
static int clientFetchVerdict(ObjClient *c, redisReply *r)
{
    const redisReply *elem;
    int rv;

    if (r == NULL)
        return -1;
    if (r->type == REDIS_REPLY_ERROR) {
        rv = clientFailReply(c, r);
    } else if (r->type == REDIS_REPLY_STATUS) {
        rv = clientOk(c);
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 1) {
        rv = clientFailShape(c, "OBJ.FETCH", r);
    } else {
        elem = r->element[0];
        if (elem->type == REDIS_REPLY_ERROR)
            rv = clientFailReply(c, elem);
        else if (elem->type == REDIS_REPLY_STATUS || elem->type == REDIS_REPLY_STRING)
            rv = clientOk(c);
        else
            rv = clientFailShape(c, "OBJ.FETCH", elem);
    }
    freeReplyObject(r);
    return rv;
}

/*
 * OBJ.FETCH id [TIMEOUT ms] (timeoutMs <= 0: the server's default). The reply
 * has one element per id, each a status or an error; an error element
 * becomes this call's error. Returns 0, or -1 with the error recorded.
 */
int objClientFetch(ObjClient *c, const void *id, size_t idLen, long long timeoutMs)
{
    char timeoutBuf[32];
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.FETCH", id, idLen, &a) < 0)
        return -1;
    if (timeoutMs > 0 && clientAddTimeout(c, &a, timeoutMs, timeoutBuf, sizeof(timeoutBuf)) < 0)
        return -1;
    return clientFetchVerdict(c, clientCall(c, &a));
}

/*
 * Write OBJ.FETCH id to d's node without waiting for the answer (over a
 * transport that pipelines; any other one is asked and answered here, in
 * turn). Returns 1 when the answer is still to be read, 0 when d's outcome
 * is known already (d->err set).
 */
static int broadcastSend(ObjBroadcastDest *d, const void *id, size_t idLen, long long timeoutMs)
{
    ObjClient *c = d->client;
    char timeoutBuf[32];
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.FETCH", id, idLen, &a) < 0 ||
        (timeoutMs > 0 && clientAddTimeout(c, &a, timeoutMs, timeoutBuf, sizeof(timeoutBuf)) < 0))
        return 0;
    if (c->tr->append == NULL || !clientConnected(c)) {
        clientFetchVerdict(c, clientCall(c, &a));
        return 0;
    }
    if (c->tr->append(c->conn, a.argc, a.argv, a.lens) < 0 || c->tr->flush(c->conn) < 0) {
        clientFailIo(c);
        return 0;
    }
    return 1;
}

/* Copy c's outcome into d. */
static void broadcastNote(ObjBroadcastDest *d)
{
    ObjClient *c = d->client;

    d->err = c ? c->err : OBJ_ERR_BADARG;
    snprintf(d->errMsg, sizeof(d->errMsg), "%.255s",
             c ? c->errstr : "BADARG no client for the node");
}

/* A node that answers NOTFOUND is asked again every BROADCAST_RETRY_MS for
 * up to BROADCAST_NOTFOUND_MS (never past the call's timeout): a put is in
 * the directory a moment after OBJ.PUT returns, and a broadcast right after
 * a put must not fail on that moment. */
#define BROADCAST_NOTFOUND_MS 1000
#define BROADCAST_RETRY_MS    20

/* One round of objClientBroadcast over the dests whose `pending` is set on
 * entry: every one is asked before any answer is awaited, so the nodes
 * fetch at once; then each dest's outcome is noted. */
static void broadcastRound(ObjBroadcastDest *dests, size_t n, const void *id, size_t idLen,
                           long long timeoutMs)
{
    redisReply *r;

    for (size_t i = 0; i < n; i++) {
        ObjBroadcastDest *d = &dests[i];
        if (d->pending)
            d->pending = d->client != NULL ? 1 + broadcastSend(d, id, idLen, timeoutMs) : 1;
    }
    for (size_t i = 0; i < n; i++) {
        ObjBroadcastDest *d = &dests[i];
        if (!d->pending)
            continue;
        if (d->pending == 2) { /* sent: its answer is due */
            if ((r = d->client->tr->getReply(d->client->conn)) == NULL)
                clientFailIo(d->client);
            else
                clientFetchVerdict(d->client, r);
        }
        d->pending = 0;
        broadcastNote(d);
    }
}

int objClientBroadcast(ObjBroadcastDest *dests, size_t n, const void *id, size_t idLen,
                       long long timeoutMs)
{
    long long window =
        timeoutMs > 0 && timeoutMs < BROADCAST_NOTFOUND_MS ? timeoutMs : BROADCAST_NOTFOUND_MS;
    long long start = utilMonoUs() / 1000, total = timeoutMs;
    size_t failed;

    if (dests == NULL && n > 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        dests[i].pending = 1;
    for (;;) {
        broadcastRound(dests, n, id, idLen, timeoutMs);
        size_t again = 0;
        failed = 0;
        for (size_t i = 0; i < n; i++) {
            if (dests[i].err == OBJ_OK)
                continue;
            failed++;
            if (dests[i].err == OBJ_ERR_NOTFOUND && dests[i].client != NULL) {
                dests[i].pending = 1;
                again++;
            }
        }
        long long elapsed = utilMonoUs() / 1000 - start;
        if (!again || elapsed + BROADCAST_RETRY_MS > window)
            break;
        usleep(BROADCAST_RETRY_MS * 1000);
        if (total > 0) { /* what is left of the call's timeout */
            long long left = total - (utilMonoUs() / 1000 - start);
            timeoutMs = left > 1 ? left : 1;
        }
    }
    for (size_t i = 0; i < n; i++)
        dests[i].pending = 0;
    return failed ? -1 : 0;
}
