/*
 * conn.c - where the directory lives and how the thread reaches it: the
 * slot map (read with CLUSTER SLOTS from a known master or a seed; a single
 * Redis is one master serving every slot) and one blocking hiredis
 * connection per master. A broken link or a "not now" reply drops the
 * connection, schedules a re-read of the map with backoff and a full
 * re-publish (a failover looks exactly like that).
 */
#include "dirint.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/*
 * Closes a connection given up on with a reset, not a FIN: what it had sent
 * and not yet seen acknowledged is dropped instead of being retransmitted
 * after a cut link heals, where it would reach the directory after (and
 * out of order with) the same writes sent again on the next connection --
 * a late publish of a copy deleted since undoes its unpublish. Accepts NULL.
 */
static void dirCloseAbortively(redisContext *ctx)
{
    if (ctx != NULL && ctx->fd >= 0) {
        struct linger reset = {.l_onoff = 1, .l_linger = 0};
        (void)setsockopt(ctx->fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    }
    redisFree(ctx);
}

/*
 * Drops master m's connection after an I/O error (or a reply saying the
 * server cannot serve now), remembers why for DIR_UNAVAILABLE results, and
 * schedules a re-read of the slot map with backoff: a dead connection is how
 * a failover shows, and the shard may come back empty, so a full re-publish
 * is due as well. Can't fail.
 */
void dirConnFail(int m, const char *fmt, ...)
{
    DirConn *c = &dir.conns[m];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    memcpy(dir.lastIoError, c->err, sizeof(dir.lastIoError));
    dirNoteError("%s", c->err);

    dirCloseAbortively(c->ctx);
    c->ctx = NULL;
    c->markSeq = 0; /* the re-publish below covers whatever it lost */
    c->retryMs = dirNowMs() + dir.backoffMs;
    /* A re-read already pending keeps its time: under a stream of lookups
     * for the dead shard, each one's failed retry would otherwise push the
     * re-read back again, and the node would never learn the new master. */
    if (!dir.mapStale) {
        dir.mapStale = 1;
        dirBackoff();
    }
    pthread_mutex_lock(&dir.lock);
    dir.stats.connected = 0;
    dir.needSnapshot = 1;
    pthread_mutex_unlock(&dir.lock);

    /* SIGPIPE is blocked on this thread; discard one left pending by the
     * broken socket so it can never surface later. */
    sigset_t pipeSet;
    struct timespec zero = {0, 0};
    sigemptyset(&pipeSet);
    sigaddset(&pipeSet, SIGPIPE);
    while (sigtimedwait(&pipeSet, NULL, &zero) == SIGPIPE) {
    }
}

/* Error replies that mean "not now" rather than "not this way": the server
 * is starting, busy, not writable, or its cluster is failing over. They are
 * treated like a lost link. */
static int dirIsTransient(const char *msg)
{
    static const char *const words[] = {"LOADING",    "BUSY",     "NOAUTH",      "READONLY",
                                        "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS"};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        size_t n = strlen(words[i]);
        if (strncmp(msg, words[i], n) == 0 && (msg[n] == ' ' || msg[n] == '\0'))
            return 1;
    }
    return 0;
}

/* Keeps dir.conns as long as dir.map.masters (new entries disconnected). */
void dirConnsSync(void)
{
    if (dir.nConns >= dir.map.nMasters)
        return;
    DirConn *grown = realloc(dir.conns, (size_t)dir.map.nMasters * sizeof(*grown));
    if (grown == NULL)
        dirOom();
    memset(grown + dir.nConns, 0, (size_t)(dir.map.nMasters - dir.nConns) * sizeof(*grown));
    dir.conns = grown;
    dir.nConns = dir.map.nMasters;
}

/*
 * Opens a connection to host:port with the connect and command timeouts,
 * keepalive and AUTH. Returns the context, or NULL with why in err.
 */
static redisContext *dirOpen(const char *host, int port, char *err, size_t errLen)
{
    redisContext *c = redisConnectWithTimeout(host, port, dirTimeval(OBJ_DIR_CONNECT_TIMEOUT_MS));
    if (c == NULL || c->err) {
        snprintf(err, errLen, "cannot connect to directory %.64s:%d: %s", host, port,
                 c != NULL ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    if (redisSetTimeout(c, dirTimeval(OBJ_DIR_COMMAND_TIMEOUT_MS)) != REDIS_OK) {
        snprintf(err, errLen, "directory %.64s:%d: cannot set timeout", host, port);
        redisFree(c);
        return NULL;
    }
    redisEnableKeepAlive(c); /* only a hint: a failure here costs nothing */
    if (dir.cfg.password[0] != '\0') {
        redisReply *r = redisCommand(c, "AUTH %s", dir.cfg.password);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            snprintf(err, errLen, "directory %.64s:%d refused AUTH: %.64s", host, port,
                     r != NULL      ? r->str
                     : c->errstr[0] ? c->errstr
                                    : "connection lost");
            freeReplyObject(r);
            redisFree(c);
            return NULL;
        }
        freeReplyObject(r);
    }
    return c;
}

/*
 * Warns when the directory Redis behind ctx (host:port) may evict keys: an
 * evicted object key is lost without a trace the node could notice (a lost
 * registration or marker is noticed, a lone object key is not), so the
 * object stays unlocated until its node re-publishes for another reason. Skipped silently when the
 * server refuses CONFIG (renamed, or not in the ACL). Can't fail.
 */
static void dirCheckEvictionPolicy(redisContext *ctx, const SlotsAddr *a)
{
    redisReply *r = redisCommand(ctx, "CONFIG GET maxmemory-policy");
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_STRING && strcmp(r->element[1]->str, "noeviction") != 0)
        dirLog("warning",
               "directory %.64s:%d runs with maxmemory-policy %.32s: keys it evicts leave "
               "objects unlocated until their node re-publishes them; run the directory "
               "with maxmemory-policy noeviction",
               a->host, a->port, r->element[1]->str);
    freeReplyObject(r);
}

/*
 * Makes sure master m has a connection. Without force, a master that failed
 * less than a backoff ago is not tried again, so that commands for a dead
 * shard fail at once. Returns 0, or -1 (dir.conns[m].err says why).
 */
int dirConnEnsure(int m, int force)
{
    DirConn *c = &dir.conns[m];
    if (c->ctx != NULL)
        return 0;
    if (!force && dirNowMs() < c->retryMs)
        return -1;
    const SlotsAddr *a = &dir.map.masters[m];
    char err[sizeof(c->err)];
    c->ctx = dirOpen(a->host, a->port, err, sizeof(err));
    if (c->ctx == NULL) {
        dirConnFail(m, "%s", err);
        return -1;
    }
    if (!c->policyChecked) {
        c->policyChecked = 1;
        dirCheckEvictionPolicy(c->ctx, a);
    }
    return 0;
}

/*
 * Reads master m's next pipelined reply. Returns it (free with
 * freeReplyObject), or NULL when the connection failed or the server
 * answered with a transient error; then dirConnFail has run.
 */
redisReply *dirReadFrom(int m)
{
    DirConn *c = &dir.conns[m];
    const SlotsAddr *a = &dir.map.masters[m];
    redisReply *r = NULL;
    if (redisGetReply(c->ctx, (void **)&r) != REDIS_OK || r == NULL) {
        dirConnFail(m, "directory %.64s:%d: %s", a->host, a->port,
                    c->ctx->errstr[0] ? c->ctx->errstr : "connection lost");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR && dirIsTransient(r->str)) {
        dirConnFail(m, "directory %.64s:%d: %s", a->host, a->port, r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* Sends what is buffered on master m's connection. Returns 0, or -1 after
 * dirConnFail. */
int dirFlush(int m)
{
    DirConn *c = &dir.conns[m];
    int done = 0;
    while (!done) {
        if (redisBufferWrite(c->ctx, &done) != REDIS_OK) {
            const SlotsAddr *a = &dir.map.masters[m];
            dirConnFail(m, "directory %.64s:%d: %s", a->host, a->port, c->ctx->errstr);
            return -1;
        }
    }
    return 0;
}

/* ---- the slot map ------------------------------------------------------------------------ */

/*
 * Fills map from a CLUSTER SLOTS reply; an entry whose host is empty or "?"
 * (an endpoint the server does not know) means the server asked. Returns the
 * number of slots covered (0 for a reply of no use).
 */
static int dirMapFromReply(const redisReply *r, const SlotsAddr *asked, SlotsMap *map)
{
    if (r->type != REDIS_REPLY_ARRAY)
        return 0;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2)
            continue;
        const redisReply *host = e->element[2]->element[0], *port = e->element[2]->element[1];
        if (host->type != REDIS_REPLY_STRING || port->type != REDIS_REPLY_INTEGER ||
            port->integer <= 0 || port->integer > 65535 || host->len >= SLOTS_HOST_MAX)
            continue;
        char h[SLOTS_HOST_MAX];
        if (host->len == 0 || (host->len == 1 && host->str[0] == '?'))
            snprintf(h, sizeof(h), "%s", asked->host);
        else
            snprintf(h, sizeof(h), "%.*s", (int)host->len, host->str);
        if (slotsMapAssign(map, (int)e->element[0]->integer, (int)e->element[1]->integer, h,
                           (int)port->integer) < 0 &&
            slotsMapAddMaster(map, h, (int)port->integer) < 0)
            dirOom(); /* the range was bad, or adding the master ran out of memory */
    }
    return slotsMapCovered(map);
}

/*
 * Asks one server for the slot map, on its existing connection when it is a
 * master already connected, else on a connection of its own. A server that
 * refuses CLUSTER SLOTS (other than for a transient reason) is a single
 * Redis: one master, every slot. Returns 0 with map filled, or -1 with why
 * in err.
 */
static int dirMapAsk(const SlotsAddr *a, SlotsMap *map, char *err, size_t errLen)
{
    int m = slotsMapFind(&dir.map, a->host, a->port);
    redisContext *c = m >= 0 && m < dir.nConns ? dir.conns[m].ctx : NULL;
    int own = c == NULL;
    if (own && (c = dirOpen(a->host, a->port, err, errLen)) == NULL)
        return -1;
    int rc = -1;
    redisReply *r = redisCommand(c, "CLUSTER SLOTS");
    if (r == NULL) {
        snprintf(err, errLen, "directory %.64s:%d: %s", a->host, a->port,
                 c->errstr[0] ? c->errstr : "connection lost");
        if (!own) {
            dirConnFail(m, "%s", err);
            c = NULL;
        }
    } else if (r->type == REDIS_REPLY_ERROR && !dirIsTransient(r->str)) {
        /* "cluster support disabled": a single Redis. Any other refusal (the
         * command renamed away, an ACL without +cluster) is taken the same
         * way; should the server be a cluster node after all, its MOVED
         * answers teach the map slot by slot. */
        if (slotsMapAssign(map, 0, SLOTS_COUNT - 1, a->host, a->port) < 0)
            dirOom();
        rc = 0;
    } else if (r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errLen, "directory %.64s:%d: %.64s", a->host, a->port, r->str);
    } else if (dirMapFromReply(r, a, map) == 0) {
        snprintf(err, errLen, "directory %.64s:%d: CLUSTER SLOTS lists no slot", a->host, a->port);
    } else {
        rc = 0;
    }
    freeReplyObject(r);
    if (own)
        redisFree(c);
    return rc;
}

/* Makes fresh the current map's successor, the way the map is re-read:
 * asks the masters of the current map (connected ones first), then the
 * seeds, until one answers. Returns 0, or -1 with why in err (fresh then
 * empty). */
static int dirMapRead(SlotsMap *fresh, char *err, size_t errLen)
{
    int nAddr = 0, rc = -1;
    SlotsAddr *addrs = dirCalloc((size_t)(dir.map.nMasters + dir.nSeeds), sizeof(*addrs));
    for (int pass = 0; pass < 2; pass++)
        for (int m = 0; m < dir.map.nMasters; m++)
            if ((dir.conns[m].ctx != NULL) == (pass == 0))
                addrs[nAddr++] = dir.map.masters[m];
    for (int s = 0; s < dir.nSeeds; s++)
        addrs[nAddr++] = dir.seeds[s];
    snprintf(err, errLen, "no directory address");
    for (int i = 0; i < nAddr && rc != 0; i++) {
        rc = dirMapAsk(&addrs[i], fresh, err, errLen);
        if (rc != 0)
            slotsMapReset(fresh);
    }
    free(addrs);
    return rc;
}

/* Makes fresh the map: the connections of masters that stay are carried
 * over by address, the others closed. Takes fresh's contents. */
static void dirMapAdopt(SlotsMap *fresh)
{
    DirConn *conns = dirCalloc((size_t)fresh->nMasters, sizeof(*conns));
    for (int m = 0; m < dir.nConns; m++) {
        int to = slotsMapFind(fresh, dir.map.masters[m].host, dir.map.masters[m].port);
        if (to >= 0) {
            conns[to] = dir.conns[m];
        } else {
            redisFree(dir.conns[m].ctx);
            free(dir.conns[m].markKey);
        }
    }
    free(dir.conns);
    slotsMapReset(&dir.map);
    dir.map = *fresh;
    dir.conns = conns;
    dir.nConns = dir.map.nMasters;
    dir.mapCovered = slotsMapCovered(&dir.map);
    dir.haveMap = 1;
    dir.mapStale = 0;
}

/*
 * Re-reads the slot map: from the masters of the current map (connected ones
 * first), then from the seeds. Connections of masters that stay are kept,
 * the others closed. Returns 0, or -1 with dir.lastIoError set (the old map
 * stays).
 */
int dirMapLoad(void)
{
    SlotsMap *fresh = dirMalloc(sizeof(*fresh)); /* a map is large: not on the stack */
    slotsMapInit(fresh);
    char err[sizeof(dir.lastIoError)];
    int rc = dirMapRead(fresh, err, sizeof(err));
    if (rc != 0) {
        memcpy(dir.lastIoError, err, sizeof(err));
        dirNoteError("%s", err);
        slotsMapReset(fresh);
    } else {
        dirMapAdopt(fresh);
    }
    free(fresh);
    return rc;
}

/* Every slot has a master, every master a connection, and the map is not
 * known to be stale: writes may flow. */
int dirAllUp(void)
{
    if (!dir.haveMap || dir.mapStale || dir.mapCovered != SLOTS_COUNT)
        return 0;
    for (int m = 0; m < dir.nConns; m++)
        if (dir.conns[m].ctx == NULL)
            return 0;
    return 1;
}

/* Closes every connection and forgets the slot map (dirStop, after the
 * last command). Can't fail. */
void dirConnsCloseAll(void)
{
    for (int m = 0; m < dir.nConns; m++) {
        redisFree(dir.conns[m].ctx);
        free(dir.conns[m].markKey);
    }
    free(dir.conns);
    dir.conns = NULL;
    dir.nConns = 0;
    slotsMapReset(&dir.map);
    dir.haveMap = 0;
}
