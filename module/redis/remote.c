/*
 * remote.c - the store's reach beyond this node, seen from Redis: it starts
 * the directory client and the transfer engine, publishes local objects,
 * and implements OBJ.FETCH, OBJ.LOCATE and OBJ.NODES as blocked clients, so
 * the Redis main thread never waits on the network.
 *
 * Hand-offs: the engine and the directory thread answer through callbacks
 * that only call thread-safe module APIs (RedisModule_UnblockClient,
 * RedisModule_EventLoopAddOneShot). Every blocked client is unblocked
 * exactly once, by the thread that owns its work. Deadlines are module
 * timers that only ask the owner to finish early, never BlockClient
 * timeouts: in Redis 7.0 a client whose unblock is pending when its
 * BlockClient timeout fires gets no reply at all.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "directory/directory.h"
#include "directory/slots.h"
#include "transfer/engine.h"
#include "replica/replica.h"
#include "acl.h"
#include "cmdtable.h"
#include "node.h"
#include "remote.h"
#include "reply.h"
#include "args.h"
#include "stats.h"
#include "waiters.h"
#include "common/list.h"
#include "common/util.h"

static RedisModuleCtx *logCtx; /* detached: usable from any thread */
static int engineRunning, dirRunning;
/* Why transfers stay off although configured (OBJ.FETCH answers it), or "". */
static char transfersRefused[192];

/* ---- callbacks from other threads ---------------------------------------------------- */

static void remoteLog(const char *level, const char *msg)
{
    RedisModule_Log(logCtx, level, "%s", msg);
}

static void remoteFetchDone(FetchReq *req)
{
    RedisModule_UnblockClient(req->owner, req);
}

/* On the main thread: a fetched object was sealed or aborted; wake its
 * OBJ.GET/OBJ.PIN waiters. */
static void remoteRecheck(void *arg)
{
    RedisModuleString *id = arg;
    size_t len;
    const char *s = RedisModule_StringPtrLen(id, &len);

    waitersRecheck(s, len);
    RedisModule_FreeString(NULL, id);
}

static void remoteChanged(const char *id, size_t idLen)
{
    if (!waitersAny()) /* the common case: a fetch nobody OBJ.GETs meanwhile */
        return;
    RedisModuleString *s = RedisModule_CreateString(NULL, id, idLen);
    if (RedisModule_EventLoopAddOneShot(remoteRecheck, s) == REDISMODULE_ERR)
        RedisModule_FreeString(NULL, s);
}

/* Directory thread: the directory refused this node's copy of id, as the
 * id names another object now (a replica of a deleted generation, or the
 * primary of an object with copies superseded while this node was away and
 * its ownership moved; a one-copy primary is never refused so).
 * Drop the copy when it is still that one, sealed and unpinned (as an
 * eviction would): kept, it would answer local reads and fetches of the id
 * with a deleted object. A pinned one stays. */
static void remoteStaleReplica(const char *id, size_t idLen, uint64_t checksum)
{
    objTableLock(objNode.table);
    ObjEntry *e = objTableFind(objNode.table, id, idLen);
    if (e != NULL && e->state == OBJ_SEALED && e->checksum == checksum && e->pins == 0 &&
        (e->replica || e->want >= 2))
        objTableDelete(objNode.table, e);
    objTableUnlock(objNode.table);
}

/* Directory thread: id was purged cluster-wide (OBJ.PURGE, a dropped
 * version). Delete this node's copy when it is of that generation, primary
 * or replica, deferred while pinned (as OBJ.DEL), and unpublish it. */
static void remotePurged(const char *id, size_t idLen, uint64_t size, uint64_t metaSize,
                         uint64_t checksum)
{
    objTableLock(objNode.table);
    ObjEntry *e = objTableFind(objNode.table, id, idLen);
    ObjStatus st = OBJ_ST_NOTFOUND;
    if (e != NULL && e->state == OBJ_SEALED && e->dataSize == size && e->metaSize == metaSize &&
        e->checksum == checksum)
        st = objTableDelete(objNode.table, e);
    objTableUnlock(objNode.table);
    if (st == OBJ_ST_OK || st == OBJ_ST_DEFERRED)
        dirUnpublish(id, idLen);
}

/* Directory thread, just before a publish is sent: whether this node still
 * holds that copy of id, sealed, with that checksum, as a primary or a
 * replica as published. A copy deleted (or evicted, or replaced by another
 * generation) since is not published: see DirConfig.holds. */
static int remoteHolds(const char *id, size_t idLen, uint64_t checksum, DirCopy copy)
{
    objTableLock(objNode.table);
    ObjEntry *e = objTableFind(objNode.table, id, idLen);
    int holds = e != NULL && e->state == OBJ_SEALED && !e->sumPending && e->checksum == checksum &&
                objRemoteCopyKind(e) == copy;
    objTableUnlock(objNode.table);
    return holds;
}

static void remoteEvicted(const ObjEntry *e, void *arg)
{
    dirUnpublish(e->id, e->idLen);
}

/* Directory thread: re-publish every sealed local object, a scan step at a
 * time so the table lock is held only briefly. A step can visit any number
 * of objects (it finishes the buckets it starts), so the batch grows to
 * whatever the step gives: nothing may be dropped, or the directory would
 * forget objects this node holds. */
typedef struct SnapBatch {
    ObjEntry *copy;
    char **ids;
    size_t n, cap;
} SnapBatch;

/* Out of memory while re-publishing: stop like the directory client does
 * (dropping objects silently would leave them unfindable). */
static void snapOom(void)
{
    RedisModule_Log(objNode.ctx, "warning", "out of memory re-publishing objects");
    abort();
}

static void snapCollect(ObjEntry *e, void *arg)
{
    SnapBatch *b = arg;

    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        ObjEntry *copy = realloc(b->copy, cap * sizeof(*copy));
        if (copy)
            b->copy = copy;
        char **ids = copy ? realloc(b->ids, cap * sizeof(*ids)) : NULL;
        if (!ids)
            snapOom();
        b->ids = ids;
        b->cap = cap;
    }
    if (!(b->ids[b->n] = malloc(e->idLen ? e->idLen : 1)))
        snapOom();
    memcpy(b->ids[b->n], e->id, e->idLen);
    b->copy[b->n++] = *e;
}

static void remoteSnapshot(DirEmitFn *emit, void *emitArg, void *arg)
{
    SnapBatch b = {0};
    uint64_t cursor = 0;

    do {
        b.n = 0;
        objTableLock(objNode.table);
        cursor = objTableScan(objNode.table, cursor, 200, snapCollect, &b);
        objTableUnlock(objNode.table);
        for (size_t i = 0; i < b.n; i++) {
            emit(b.ids[i], b.copy[i].idLen, b.copy[i].dataSize, b.copy[i].metaSize,
                 b.copy[i].checksum, objRemoteCopyKind(&b.copy[i]), b.copy[i].want, emitArg);
            free(b.ids[i]);
        }
    } while (cursor != 0);
    free(b.copy);
    free(b.ids);
}

/* ---- start / stop ----------------------------------------------------------------------- */

/* Parse the `directory` setting, "host:port" or a Redis Cluster's seeds
 * "host:port,host:port,...", into the directory config (the first seed also
 * into host/port, for the log). Returns 0 or -1. */
static int parseDirectory(const char *s, DirConfig *dc)
{
    SlotsAddr seeds[OBJ_DIR_SEEDS_MAX];

    if (strlen(s) >= sizeof(dc->seeds) || slotsParseSeeds(s, seeds, OBJ_DIR_SEEDS_MAX) < 1)
        return -1;
    snprintf(dc->seeds, sizeof(dc->seeds), "%s", s);
    snprintf(dc->host, sizeof(dc->host), "%s", seeds[0].host);
    dc->port = seeds[0].port;
    return 0;
}

/* The first turn of the event loop: the server listens now (Redis 7.2+ and
 * Valkey open their ports only after loading modules); a directory that
 * is this server itself can be reached at once. */
static void remoteServerUp(RedisModuleCtx *ctx, void *data)
{
    dirServerUp();
}

/* An empty cluster-secret lets whoever reaches the transfer port fetch every
 * object. On a bind other hosts can reach (anything outside 127.0.0.0/8,
 * 0.0.0.0 included) transfers are refused: returns 1 with the reason logged
 * and kept for OBJ.FETCH; on loopback it only warns and returns 0. */
static int remoteSecretRefuses(RedisModuleCtx *ctx, const ObjConfig *cfg)
{
    struct in_addr a;

    if (cfg->clusterSecret[0] || cfg->transferPort <= 0)
        return 0;
    if (inet_pton(AF_INET, cfg->transferBind, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127) {
        RedisModule_Log(ctx, "warning",
                        "cluster-secret is empty: any local process can fetch objects from the "
                        "transfer port; set objstore.cluster-secret");
        return 0;
    }
    snprintf(transfersRefused, sizeof(transfersRefused),
             "transfers are off: cluster-secret is empty and transfer-bind %.64s is "
             "not a loopback address",
             cfg->transferBind);
    RedisModule_Log(ctx, "warning",
                    "refusing to start transfers: cluster-secret is empty and transfer-bind %s is "
                    "not a loopback address, so anyone who reaches it could fetch every object; "
                    "set objstore.cluster-secret (local commands keep working)",
                    cfg->transferBind);
    return 1;
}

int objRemoteStart(RedisModuleCtx *ctx)
{
    const ObjConfig *cfg = &objNode.cfg; /* resolved by settings.c, read-only here */
    char err[256];
    EngineConfig ec = {0};
    DirConfig dc = {0};

    logCtx = RedisModule_GetDetachedThreadSafeContext(ctx);
    ec.table = objNode.table;
    ec.arenaBase = objNode.arena.base;
    ec.arenaSize = objNode.arena.size;
    snprintf(ec.nodeName, sizeof(ec.nodeName), "%s", cfg->nodeName);
    snprintf(ec.secret, sizeof(ec.secret), "%s", cfg->clusterSecret);
    snprintf(ec.tcpBind, sizeof(ec.tcpBind), "%s", cfg->transferBind);
    ec.tcpPort = (int)cfg->transferPort;
    ec.encrypt = cfg->transferEncrypt != 0;
    snprintf(ec.rdmaBind, sizeof(ec.rdmaBind), "%s", cfg->rdmaBind);
    ec.rdmaPort = (int)cfg->rdmaPort;
    snprintf(ec.rdmaDevice, sizeof(ec.rdmaDevice), "%s", cfg->rdmaDevice);
    ec.rdmaReadMin = (uint64_t)cfg->rdmaReadMin;
    ec.uploadSlots = (int)cfg->uploadSlots;
    ec.tierServeBudget = (uint64_t)cfg->spillServe;
    ec.onFetchDone = remoteFetchDone;
    ec.onReplDone = replicaOnReplDone;
    ec.onReplicated = replicaOnReplicated;
    ec.mayReplicate = replicaMayReplicate;
    ec.onChanged = remoteChanged;
    ec.log = remoteLog;
    if (!remoteSecretRefuses(ctx, cfg)) {
        if (engineStart(&ec, err, sizeof(err)) == -1) {
            RedisModule_Log(ctx, "warning", "transfer engine: %s", err);
            return REDISMODULE_ERR;
        }
        engineRunning = 1;
    }

    if (cfg->directory[0]) {
        if (parseDirectory(cfg->directory, &dc) == -1) {
            RedisModule_Log(ctx, "warning",
                            "directory '%s' must be host:port, or host:port,host:port,... (at "
                            "most %d seeds of a Redis Cluster)",
                            cfg->directory, OBJ_DIR_SEEDS_MAX);
            goto out_stop_engine;
        }
    } else {
        snprintf(dc.host, sizeof(dc.host), "127.0.0.1");
        dc.port = (int)objNode.redisPort;
    }
    snprintf(dc.password, sizeof(dc.password), "%s", cfg->directoryPassword);
    snprintf(dc.nodeName, sizeof(dc.nodeName), "%s", cfg->nodeName);
    snprintf(dc.addr, sizeof(dc.addr), "%s", cfg->announceAddr);
    dc.tcpPort = engineRunning ? (int)cfg->transferPort : 0;
    if (engineRdmaEnabled()) {
        snprintf(dc.rdmaAddr, sizeof(dc.rdmaAddr), "%s", cfg->rdmaBind);
        dc.rdmaPort = (int)cfg->rdmaPort;
    }
    dc.features = (dc.tcpPort > 0 ? OBJ_FEAT_TCP : 0) | (engineRdmaEnabled() ? OBJ_FEAT_RDMA : 0);
    dc.heartbeatMs = (int)cfg->heartbeatMs;
    dc.ttlMs = (int)cfg->nodeTtlMs;
    dc.tombTtlMs = cfg->purgeTombstoneTtlS * 1000;
    dc.log = remoteLog;
    dc.staleReplica = remoteStaleReplica;
    dc.holds = remoteHolds;
    dc.purged = remotePurged;
    dc.moved = replicaOnMoved;
    snprintf(dc.label, sizeof(dc.label), "%s", cfg->nodeLabel);
    if (dc.port <= 0) {
        RedisModule_Log(ctx, "warning",
                        "no TCP port to reach the directory: set objstore.directory");
        goto out_stop_engine;
    }
    if (dc.ttlMs <= dc.heartbeatMs) {
        RedisModule_Log(ctx, "warning", "node-ttl (%d ms) must be longer than heartbeat (%d ms)",
                        dc.ttlMs, dc.heartbeatMs);
        goto out_stop_engine;
    }
    if (dirStart(&dc, remoteSnapshot, NULL) == -1) {
        RedisModule_Log(ctx, "warning", "cannot start the directory thread: %s", strerror(errno));
        goto out_stop_engine;
    }
    dirRunning = 1;
    ReplicaConfig rc = {.table = objNode.table,
                        .heartbeatMs = (int)cfg->heartbeatMs,
                        .repairIntervalMs = (int)cfg->repairIntervalMs,
                        .repairConcurrency = (int)cfg->repairConcurrency,
                        .log = remoteLog};
    snprintf(rc.nodeName, sizeof(rc.nodeName), "%s", cfg->nodeName);
    if (replicaStart(&rc) == -1) {
        RedisModule_Log(ctx, "warning", "cannot start the replica manager: %s", strerror(errno));
        dirStop();
        dirRunning = 0;
        goto out_stop_engine;
    }
    /* A timer fires in the event loop, after the server opened its ports. */
    RedisModule_CreateTimer(ctx, 0, remoteServerUp, NULL);
    objTableLock(objNode.table);
    objTableSetEvictHook(objNode.table, remoteEvicted, NULL);
    objTableUnlock(objNode.table);
    RedisModule_Log(ctx, "notice", "node '%s': transfers on %s:%lld (tcp%s), directory %s:%d",
                    cfg->nodeName, cfg->announceAddr, cfg->transferPort,
                    engineRdmaEnabled() ? ", rdma" : "", dc.host, dc.port);
    return REDISMODULE_OK;

out_stop_engine:
    engineStop();
    engineRunning = 0;
    return REDISMODULE_ERR;
}

/* The directory stops first: on its way out it answers the lookups it still
 * holds, and those answers are queued to the engine, which must still be
 * there to take them (and free them). */
void objRemoteStop(void)
{
    replicaStop(); /* first: it asks the directory and the engine */
    if (dirRunning)
        dirStop();
    dirRunning = 0;
    if (engineRunning)
        engineStop();
    engineRunning = 0;
}

void objRemoteConfigChanged(void)
{
    if (engineRunning)
        engineSetRdmaReadMin((uint64_t)objNode.cfg.rdmaReadMin);
    replicaConfigure((int)objNode.cfg.repairIntervalMs, (int)objNode.cfg.repairConcurrency);
}

DirCopy objRemoteCopyKind(const ObjEntry *e)
{
    switch (objTableCopyOf(e)) {
        case OBJ_COPY_PRIMARY:
            return DIR_COPY_PRIMARY;
        case OBJ_COPY_PROTECTED:
            return DIR_COPY_PROTECTED;
        default:
            return DIR_COPY_REPLICA;
    }
}

void objRemotePublish(const ObjEntry *e)
{
    if (dirRunning)
        dirPublish(e->id, e->idLen, e->dataSize, e->metaSize, e->checksum, objRemoteCopyKind(e),
                   e->want, NULL);
}

int objRemoteDirRunning(void)
{
    return dirRunning;
}

void objRemoteUnpublish(const char *id, size_t idLen)
{
    if (dirRunning)
        dirUnpublish(id, idLen);
}

/* ---- OBJ.FETCH id [id ...] [TIMEOUT ms] [VIA auto|tcp|rdma] [FROM node] ------------------- */

/* Fetches in flight, by blocked client, so a timeout or a disconnect (which
 * only know the handle) can cancel the right request. Main thread only. */
typedef struct Pending {
    RedisModuleBlockedClient *bc;
    uint64_t seq;
    RedisModuleTimerID timer;
    int hasTimer;
    ObjListLink link; /* pendingFetches */
} Pending;
static ObjList pendingFetches = {&pendingFetches, &pendingFetches};

/* The fetch of blocked client bc, or NULL when it is not pending. */
static Pending *pendingFind(RedisModuleBlockedClient *bc)
{
    ObjListLink *it;

    objListForEach(&pendingFetches, it) {
        Pending *p = objListEntry(it, Pending, link);
        if (p->bc == bc)
            return p;
    }
    return NULL;
}

/* The fetch is over for the main thread: stop its timer and forget it. */
static void pendingDrop(RedisModuleBlockedClient *bc)
{
    Pending *p = pendingFind(bc);

    if (!p)
        return;
    objListUnlink(&p->link);
    if (p->hasTimer)
        RedisModule_StopTimer(objNode.ctx, p->timer, NULL);
    free(p);
}

static void fetchReqFree(FetchReq *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->items[i].id);
    free(r->items);
    free(r);
}

static int fetchReply(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    FetchReq *r = RedisModule_GetBlockedClientPrivateData(ctx);

    if (r->timedOut)
        return objReplyError(ctx, OBJ_EW_TIMEOUT, "the fetch did not complete in time");
    RedisModule_ReplyWithArray(ctx, (long)r->n);
    for (size_t i = 0; i < r->n; i++) {
        if (r->items[i].err[0])
            RedisModule_ReplyWithError(ctx, r->items[i].err);
        else
            RedisModule_ReplyWithSimpleString(ctx, "OK");
    }
    return REDISMODULE_OK;
}

/* The deadline passed: the engine cancels and hands the request back marked
 * timedOut, and fetchReply answers TIMEOUT. */
static void fetchTimerFired(RedisModuleCtx *ctx, void *data)
{
    Pending *p = data; /* listed until fetchFree, which would stop this timer */

    p->hasTimer = 0;
    engineCancelFetch(p->seq, 1);
}

static void fetchDisconnected(RedisModuleCtx *ctx, RedisModuleBlockedClient *bc)
{
    Pending *p = pendingFind(bc);

    if (p)
        engineCancelFetch(p->seq, 0);
}

static void fetchFree(RedisModuleCtx *ctx, void *privdata)
{
    FetchReq *r = privdata;

    pendingDrop(r->owner);
    fetchReqFree(r);
}

/* OBJ.FETCH with FROM naming this node: nothing to pull, so it answers at
 * once from the local table, per id: OK when held sealed here, else an
 * error (the caller's hint is wrong, and asking elsewhere is not what it
 * asked for). */
static int fetchReplyFromSelf(RedisModuleCtx *ctx, RedisModuleString **argv, int nids)
{
    RedisModule_ReplyWithArray(ctx, nids);
    for (int i = 1; i <= nids; i++) {
        size_t len;
        const char *s = RedisModule_StringPtrLen(argv[i], &len);
        objTableLock(objNode.table);
        ObjEntry *e = objTableFind(objNode.table, s, len);
        int state = e ? (int)e->state : -1;
        objTableUnlock(objNode.table);
        if (state == OBJ_SEALED)
            RedisModule_ReplyWithSimpleString(ctx, "OK");
        else if (state == OBJ_CREATED)
            objReplyError(ctx, OBJ_EW_WRONGSTATE, "the object is being created on this node");
        else
            objReplyError(ctx, OBJ_EW_NOTFOUND,
                          "FROM names this node, which does not hold the object");
    }
    return REDISMODULE_OK;
}

/* What OBJ.FETCH asks for: the ids are argv[1..nids]. */
typedef struct FetchArgs {
    int nids;
    long long timeoutMs; /* 0: no deadline */
    FetchVia via;
    const char *from; /* FROM's node name (fromLen bytes), or NULL */
    size_t fromLen;
} FetchArgs;

/* The value v of option s (TIMEOUT, VIA or FROM, as fetchParse found it)
 * into a. Returns 0, or -1 after replying BADARG. */
static int fetchParseOption(RedisModuleCtx *ctx, const char *s, int isFrom, const char *v,
                            size_t len, FetchArgs *a)
{
    uint64_t u;

    if (isFrom) {
        if (a->from) {
            objReplyError(ctx, OBJ_EW_BADARG, "FROM given twice");
            return -1;
        }
        if (len == 0 || len > OBJ_WIRE_NAME_MAX || memchr(v, '\0', len)) {
            objReplyError(ctx, OBJ_EW_BADARG,
                          "FROM must name a node in 1 to 128 bytes, without NUL");
            return -1;
        }
        a->from = v;
        a->fromLen = len;
    } else if (s[0] == 'T' || s[0] == 't') {
        if (objArgTimeout(ctx, v, len, &u) == -1)
            return -1;
        a->timeoutMs = u == 0 ? 0 : (long long)u;
    } else if (len == 4 && !strncasecmp(v, "auto", 4)) {
        a->via = FETCH_VIA_AUTO;
    } else if (len == 3 && !strncasecmp(v, "tcp", 3)) {
        a->via = FETCH_VIA_TCP;
    } else if (len == 4 && !strncasecmp(v, "rdma", 4)) {
        a->via = FETCH_VIA_RDMA;
    } else {
        objReplyError(ctx, OBJ_EW_BADARG, "VIA must be auto, tcp or rdma");
        return -1;
    }
    return 0;
}

/* Parse `id [id ...] [TIMEOUT ms] [VIA auto|tcp|rdma] [FROM node]` (argc >=
 * 2) into a. Ids come first; TIMEOUT/VIA/FROM (with a value) start the
 * options. A trailing FROM after an id is a FROM without its name, not an
 * id. Returns 0, or -1 after replying BADARG. */
static int fetchParse(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, FetchArgs *a)
{
    memset(a, 0, sizeof(*a));
    a->timeoutMs = objNode.cfg.fetchTimeoutMs;
    a->via = FETCH_VIA_AUTO;
    for (int i = 1; i < argc; i++) {
        size_t len;
        const char *s = RedisModule_StringPtrLen(argv[i], &len);
        int isFrom = a->nids > 0 && len == 4 && !strncasecmp(s, "FROM", 4);
        if (isFrom && i + 1 == argc) {
            objReplyError(ctx, OBJ_EW_BADARG, "FROM needs a node name");
            return -1;
        }
        int isOpt = i + 1 < argc && a->nids > 0 &&
                    ((len == 7 && !strncasecmp(s, "TIMEOUT", 7)) ||
                     (len == 3 && !strncasecmp(s, "VIA", 3)) || isFrom);
        if (!isOpt && i > a->nids + 1) {
            objReplyError(ctx, OBJ_EW_BADARG, "ids must come before the options");
            return -1;
        }
        if (!isOpt) {
            if (objArgIdLen(ctx, len, "object id") == -1)
                return -1;
            a->nids++;
            continue;
        }
        const char *v = RedisModule_StringPtrLen(argv[++i], &len);
        if (fetchParseOption(ctx, s, isFrom, v, len, a) == -1)
            return -1;
    }
    return 0;
}

/* Answer OBJ.FETCH without the network when it can be: every id already
 * held sealed here (OK each, like Plasma's contains()), or FROM naming
 * this node (fetchReplyFromSelf). Returns 1 when it replied, else 0. */
static int fetchAnswerLocally(RedisModuleCtx *ctx, RedisModuleString **argv, const FetchArgs *a)
{
    int allLocal = 1;

    objTableLock(objNode.table);
    for (int i = 1; i <= a->nids && allLocal; i++) {
        size_t len;
        const char *s = RedisModule_StringPtrLen(argv[i], &len);
        ObjEntry *e = objTableFind(objNode.table, s, len);
        allLocal = e && e->state == OBJ_SEALED;
    }
    objTableUnlock(objNode.table);
    if (!allLocal && a->from && a->fromLen == strlen(objNode.cfg.nodeName) &&
        !memcmp(a->from, objNode.cfg.nodeName, a->fromLen)) {
        fetchReplyFromSelf(ctx, argv, a->nids);
        return 1;
    }
    if (!allLocal)
        return 0;
    RedisModule_ReplyWithArray(ctx, a->nids);
    for (int i = 0; i < a->nids; i++)
        RedisModule_ReplyWithSimpleString(ctx, "OK");
    return 1;
}

/* Block the client and hand the fetch of a's ids to the engine, with a
 * module timer for its deadline. Returns REDISMODULE_OK (OOM replied when
 * the request cannot be built; nothing is blocked then). */
static int fetchBlock(RedisModuleCtx *ctx, RedisModuleString **argv, const FetchArgs *a)
{
    int nids = a->nids;
    FetchReq *r = calloc(1, sizeof(*r));
    Pending *p = calloc(1, sizeof(*p));

    if (!r || !p || !(r->items = calloc((size_t)nids, sizeof(*r->items))))
        goto out_oom;
    r->n = (size_t)nids;
    r->via = a->via;
    if (a->from) {
        memcpy(r->from, a->from, a->fromLen);
        r->from[a->fromLen] = '\0';
    }
    r->deadlineUs = a->timeoutMs > 0 ? utilMonoUs() + a->timeoutMs * 1000 : 0;
    for (int i = 0; i < nids; i++) {
        size_t len;
        const char *s = RedisModule_StringPtrLen(argv[i + 1], &len);
        if (!(r->items[i].id = malloc(len)))
            goto out_oom;
        memcpy(r->items[i].id, s, len);
        r->items[i].idLen = len;
    }
    RedisModuleBlockedClient *bc = RedisModule_BlockClient(ctx, fetchReply, NULL, fetchFree, 0);
    RedisModule_SetDisconnectCallback(bc, fetchDisconnected);
    r->owner = bc;
    p->bc = bc;
    objListPushFront(&pendingFetches, &p->link);
    engineSubmitFetch(r); /* assigns r->seq before returning */
    p->seq = r->seq;
    if (a->timeoutMs > 0) {
        p->timer = RedisModule_CreateTimer(ctx, a->timeoutMs, fetchTimerFired, p);
        p->hasTimer = 1;
    }
    return REDISMODULE_OK;

out_oom:
    if (r) {
        r->n = r->items ? (size_t)nids : 0;
        fetchReqFree(r);
    }
    free(p);
    return objReplyError(ctx, OBJ_EW_OOM, "out of memory");
}

static int ObjFetch_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    FetchArgs a;

    if (argc < 2)
        return RedisModule_WrongArity(ctx);
    if (fetchParse(ctx, argv, argc, &a) == -1)
        return REDISMODULE_OK;
    if (!engineRunning)
        return objReplyError(ctx, OBJ_EW_UNAVAILABLE, "%s",
                             transfersRefused[0] ? transfersRefused
                                                 : "the transfer engine is not running");
    if (fetchAnswerLocally(ctx, argv, &a))
        return REDISMODULE_OK;
    if (objReplyIfCannotWait(ctx, "OBJ.FETCH"))
        return REDISMODULE_OK;
    return fetchBlock(ctx, argv, &a);
}

/* ---- OBJ.LOCATE id / OBJ.NODES ---------------------------------------------------------- */

static void dirAnswer(DirResult *res, void *arg)
{
    RedisModule_UnblockClient(arg, res);
}

static void dirFree(RedisModuleCtx *ctx, void *privdata)
{
    dirResultFree(privdata);
}

static int dirUnavailable(RedisModuleCtx *ctx, const DirResult *res)
{
    return objReplyError(ctx, OBJ_EW_UNAVAILABLE, "directory unreachable: %s", res->err);
}

static int locateReply(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    DirResult *res = RedisModule_GetBlockedClientPrivateData(ctx);
    char sum[17];

    if (res->status == DIR_UNAVAILABLE)
        return dirUnavailable(ctx, res);
    if (res->status != DIR_FOUND) {
        return objReplyError(ctx, OBJ_EW_NOTFOUND, "%s", res->err[0] ? res->err : "no such object");
    }
    snprintf(sum, sizeof(sum), "%016llx", (unsigned long long)res->checksum);
    RedisModule_ReplyWithArray(ctx, 14);
    RedisModule_ReplyWithSimpleString(ctx, "size");
    RedisModule_ReplyWithLongLong(ctx, (long long)res->size);
    RedisModule_ReplyWithSimpleString(ctx, "meta_size");
    RedisModule_ReplyWithLongLong(ctx, (long long)res->metaSize);
    RedisModule_ReplyWithSimpleString(ctx, "checksum");
    RedisModule_ReplyWithSimpleString(ctx, sum);
    RedisModule_ReplyWithSimpleString(ctx, "locations");
    RedisModule_ReplyWithArray(ctx, (long)res->count);
    for (size_t i = 0; i < res->count; i++)
        RedisModule_ReplyWithStringBuffer(ctx, res->nodes[i].name, strlen(res->nodes[i].name));
    RedisModule_ReplyWithSimpleString(ctx, "replicas");
    RedisModule_ReplyWithLongLong(ctx, res->want ? res->want : 1);
    RedisModule_ReplyWithSimpleString(ctx, "owner");
    RedisModule_ReplyWithStringBuffer(ctx, res->owner, strlen(res->owner));
    RedisModule_ReplyWithSimpleString(ctx, "protected");
    size_t nProt = 0;
    for (size_t i = 0; i < res->count; i++)
        nProt += res->nodes[i].prot != 0;
    RedisModule_ReplyWithArray(ctx, (long)nProt);
    for (size_t i = 0; i < res->count; i++)
        if (res->nodes[i].prot)
            RedisModule_ReplyWithStringBuffer(ctx, res->nodes[i].name, strlen(res->nodes[i].name));
    return REDISMODULE_OK;
}

static int nodesReply(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    DirResult *res = RedisModule_GetBlockedClientPrivateData(ctx);
    int64_t now = utilWallMs();

    if (res->status == DIR_UNAVAILABLE)
        return dirUnavailable(ctx, res);
    RedisModule_ReplyWithArray(ctx, (long)res->count);
    for (size_t i = 0; i < res->count; i++) {
        const DirNode *n = &res->nodes[i];
        char tps[16];
        snprintf(tps, sizeof(tps), "%s%s", (n->features & OBJ_FEAT_TCP) ? "tcp" : "",
                 (n->features & OBJ_FEAT_RDMA) ? ",rdma" : "");
        RedisModule_ReplyWithArray(ctx, 14);
        RedisModule_ReplyWithSimpleString(ctx, "name");
        RedisModule_ReplyWithStringBuffer(ctx, n->name, strlen(n->name));
        RedisModule_ReplyWithSimpleString(ctx, "addr");
        RedisModule_ReplyWithStringBuffer(ctx, n->addr, strlen(n->addr));
        RedisModule_ReplyWithSimpleString(ctx, "tcp_port");
        RedisModule_ReplyWithLongLong(ctx, n->tcpPort);
        RedisModule_ReplyWithSimpleString(ctx, "rdma_addr");
        RedisModule_ReplyWithStringBuffer(ctx, n->rdmaAddr, strlen(n->rdmaAddr));
        RedisModule_ReplyWithSimpleString(ctx, "rdma_port");
        RedisModule_ReplyWithLongLong(ctx, n->rdmaPort);
        RedisModule_ReplyWithSimpleString(ctx, "transports");
        RedisModule_ReplyWithSimpleString(ctx, tps);
        RedisModule_ReplyWithSimpleString(ctx, "heartbeat_age_ms");
        RedisModule_ReplyWithLongLong(ctx, now - n->heartbeatMs);
    }
    return REDISMODULE_OK;
}

/* No deadline of our own: the directory thread answers every request exactly
 * once, within its hiredis connect/command timeouts (UNAVAILABLE if down). */
static int ObjLocate_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    const char *id;
    size_t len;

    if (argc != 2)
        return RedisModule_WrongArity(ctx);
    if (objArgId(ctx, argv[1], &id, &len) == -1)
        return REDISMODULE_OK;
    if (!dirRunning)
        return objReplyError(ctx, OBJ_EW_UNAVAILABLE, "the directory client is not running");
    if (objReplyIfCannotWait(ctx, "OBJ.LOCATE"))
        return REDISMODULE_OK;
    RedisModuleBlockedClient *bc = RedisModule_BlockClient(ctx, locateReply, NULL, dirFree, 0);
    dirLookup(id, len, dirAnswer, bc);
    return REDISMODULE_OK;
}

static int ObjNodes_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    if (argc != 1)
        return RedisModule_WrongArity(ctx);
    if (!dirRunning)
        return objReplyError(ctx, OBJ_EW_UNAVAILABLE, "the directory client is not running");
    if (objReplyIfCannotWait(ctx, "OBJ.NODES"))
        return REDISMODULE_OK;
    RedisModuleBlockedClient *bc = RedisModule_BlockClient(ctx, nodesReply, NULL, dirFree, 0);
    dirListNodes(dirAnswer, bc);
    return REDISMODULE_OK;
}

/* ---- statistics --------------------------------------------------------------------------- */

/* The transfer and directory fields of OBJ.STATS / INFO objstore (see stats.h). */
void objRemoteStats(ObjStatSink *sink)
{
    EngineStats es;
    DirStats ds;

    engineGetStats(&es);
    dirGetStats(&ds);
    objStatStr(sink, "node_name", objNode.cfg.nodeName);
#define STAT(k, v) objStatNum(sink, k, (uint64_t)(v))
#define TPSTATS(p, t)                                                                              \
    STAT(p "fetches", t.fetches);                                                                  \
    STAT(p "fetch_bytes", t.bytes);                                                                \
    STAT(p "fetch_failures", t.failures);                                                          \
    STAT(p "fetch_failovers", t.failovers);                                                        \
    STAT(p "fetch_latency_avg_us", t.latencyCount ? t.latencyUsSum / t.latencyCount : 0);          \
    STAT(p "fetch_latency_max_us", t.latencyUsMax);                                                \
    STAT(p "served", t.served);                                                                    \
    STAT(p "served_bytes", t.servedBytes);                                                         \
    STAT(p "served_inline", t.servedInline);                                                       \
    STAT(p "served_rndv", t.servedRndv)
    TPSTATS("tcp_", es.tcp);
    TPSTATS("rdma_", es.rdma);
    STAT("fetch_requests", es.fetchRequests);
    STAT("fetch_shared", es.shared);
    STAT("fetch_local_hits", es.localHits);
    STAT("fetch_cancelled", es.cancelled);
    STAT("transfer_connections", es.connections);
    STAT("transfer_bad_frames", es.badFrames);
    STAT("transfer_refused_connections", es.refusedConnections);
    STAT("transfer_encrypted_sessions", es.encryptedSessions);
    STAT("transfer_hint_hits", es.hintHits);
    STAT("transfer_hint_fallbacks", es.hintFallbacks);
    STAT("transfer_uploaded_bytes", es.uploadedBytes);
    STAT("transfer_downloaded_bytes", es.downloadedBytes);
    STAT("transfer_redirects", es.redirects);
    STAT("transfer_redirected", es.redirected);
    STAT("transfer_range_resumes", es.rangeResumes);
    STAT("transfer_relayed", es.relayed);
    STAT("transfer_relay_follows", es.relayFollows);
    STAT("tier_serve_budget", objNode.cfg.spillServe);
    STAT("tier_serve_bytes", es.tierServeBytes);
    STAT("tier_serve_waiting", es.tierServeWaiting);
    STAT("tier_serve_reads", es.tierServeReads);
    STAT("tier_serve_shared", es.tierServeShared);
    STAT("tier_serve_waits", es.tierServeWaits);
    STAT("transfer_checksum_waits", es.checksumWaits);
    STAT("repl_requests", es.replRequests);
    STAT("repl_served", es.replServed);
    STAT("repl_failed", es.replFailed);
    STAT("repl_bytes", es.replBytes);
    STAT("rdma_enabled", engineRunning && engineRdmaEnabled());
    STAT("directory_connected", ds.connected);
    STAT("directory_publishes", ds.publishes);
    STAT("directory_unpublishes", ds.unpublishes);
    STAT("directory_lookups", ds.lookups);
    STAT("directory_reconnects", ds.reconnects);
    STAT("directory_errors", ds.errors);
    STAT("directory_queued", ds.queued);
    STAT("directory_stale_replicas", ds.staleReplicas);
    STAT("directory_purges_applied", ds.purgesApplied);
    STAT("directory_moved_primaries", ds.movedPrimaries);
#undef TPSTATS
#undef STAT
}

/* ---- registration ------------------------------------------------------------------------- */

static RedisModuleCommandArg argsFetch[] = {{.name = "id",
                                             .type = REDISMODULE_ARG_TYPE_STRING,
                                             .key_spec_index = -1,
                                             .flags = REDISMODULE_CMD_ARG_MULTIPLE},
                                            {.name = "timeout",
                                             .token = "TIMEOUT",
                                             .type = REDISMODULE_ARG_TYPE_INTEGER,
                                             .key_spec_index = -1,
                                             .flags = REDISMODULE_CMD_ARG_OPTIONAL},
                                            {.name = "via",
                                             .token = "VIA",
                                             .type = REDISMODULE_ARG_TYPE_STRING,
                                             .key_spec_index = -1,
                                             .flags = REDISMODULE_CMD_ARG_OPTIONAL},
                                            {.name = "node",
                                             .token = "FROM",
                                             .type = REDISMODULE_ARG_TYPE_STRING,
                                             .key_spec_index = -1,
                                             .flags = REDISMODULE_CMD_ARG_OPTIONAL},
                                            {0}};
static RedisModuleCommandArg argsLocate[] = {
    {.name = "id", .type = REDISMODULE_ARG_TYPE_STRING, .key_spec_index = -1}, {0}};

/* How many ids OBJ.FETCH names (argv[1] on), by fetchParse's rule: the ids
 * end at the first TIMEOUT, VIA or FROM that has a value after it. For
 * key-position requests and ACL checks, which run before fetchParse. */
static int fetchIdCount(RedisModuleString **argv, int argc)
{
    int n = 0;

    for (int i = 1; i < argc; i++, n++) {
        size_t len;
        const char *s = RedisModule_StringPtrLen(argv[i], &len);
        int isOpt =
            n > 0 && i + 1 < argc &&
            ((len == 7 && !strncasecmp(s, "TIMEOUT", 7)) ||
             (len == 3 && !strncasecmp(s, "VIA", 3)) || (len == 4 && !strncasecmp(s, "FROM", 4)));
        if (isOpt)
            break;
    }
    return n;
}

int objRemoteRegisterCommands(RedisModuleCtx *ctx)
{
    static const ObjCommandDef defs[] = {
        {"obj.fetch", ObjFetch_RedisCommand, "write", -2,
         "Pull objects from other nodes into this node (per-id result); FROM names the node "
         "to ask first, without a directory lookup",
         "O(N) in the bytes fetched", argsFetch, OBJ_ACL_READ, fetchIdCount},
        {"obj.locate", ObjLocate_RedisCommand, "readonly", 2,
         "Show an object's size, checksum and live locations from the directory",
         "O(L) in the locations", argsLocate, OBJ_ACL_READ, NULL},
        {"obj.nodes", ObjNodes_RedisCommand, "readonly", 1, "List the live nodes",
         "O(N) in the nodes", NULL, 0, NULL},
    };
    return objCommandTableRegister(ctx, defs, sizeof(defs) / sizeof(defs[0]));
}
