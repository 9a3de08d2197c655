/*
 * spill.c - the spill tier on the Redis side: the clients that wait while
 * room is made or a spilled object comes back, and the tier's start-up and
 * statistics. The files and the I/O thread are store/tier.c; which object
 * is cold and what state it is in is the object table's.
 *
 * A waiting client is a request on one list. A request is stepped on the
 * main thread: when it arrives, after every batch of finished tier jobs, and
 * after background checksums were taken (an object whose checksum is pending
 * cannot be spilled yet).
 * A step tries what the command needs (an arena block, or the object in
 * memory); when the arena is full it picks cold primaries (protected
 * copies count as primaries here), queues their spills and waits for them;
 * when nothing can be moved it answers OOM with the reason. The reply
 * callback finishes the command exactly as it would have finished without
 * the wait. Design: docs/tiers.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "node.h"
#include "sealer.h"
#include "spill.h"
#include "common/list.h"
#include "store/tier.h"

/* Victims chosen per round of making room. */
#define SPILL_BATCH 64
/* Holders of the pins that deferred OBJ.GET replies take (plus a sequence). */
#define OBJ_HOLDER_SPILL_GET ((1ULL << 63) | (1ULL << 59))

typedef enum ReqKind { REQ_PUT, REQ_CREATE, REQ_READ } ReqKind;

/* A client waiting on the tier. Owned by this file; handed to Redis as the
 * blocked client's private data only when finished. */
typedef struct SpillReq {
    ReqKind kind;
    ObjReplyKind reply;           /* REQ_READ */
    RedisModuleBlockedClient *bc; /* NULL once the client went away */
    uint64_t client;
    char *id;
    size_t idLen;
    RedisModuleString *data, *meta; /* retained: REQ_PUT, REQ_CREATE */
    uint64_t size;                  /* data bytes: REQ_PUT, REQ_CREATE */
    SpillFinish *finish;            /* REQ_PUT, REQ_CREATE */
    uint32_t want;                  /* REQ_PUT, REQ_CREATE: the object's replica count */
    int jobs;                       /* its spills still in flight */
    char fail[160];                 /* why one of its spills failed */
    ObjEntry *e;                    /* the result: created, or pinned by holder */
    uint8_t *copy;                  /* or a GET's bytes read from the tier file */
    uint64_t copyData;              /* data bytes of copy (its metadata follows) */
    uint64_t copyLen;
    uint64_t holder;
    int replied;
    char err[320]; /* the error to answer instead */
    ObjListLink link;
} SpillReq;

typedef struct SpillJob {
    TierJob tj;
    ObjEntry *e;     /* pinned by OBJ_HOLDER_TIER until done */
    SpillReq *owner; /* spills: the request that wanted the room */
} SpillJob;

static struct {
    Tier *tier;
    ObjList pending; /* SpillReq.link */
    uint64_t inflight, seq;
    uint64_t spills, spillBytes, spillUs, spillFailures;
    uint64_t restores, restoreBytes, restoreUs, restoreFailures;
    uint64_t memReads, tierReads, waits, copies, waiting;
} sp = {.pending = {&sp.pending, &sp.pending}};

static void reqStep(SpillReq *r);

const char *spillTierName(ObjTier tier)
{
    switch (tier) {
        case OBJ_TIER_SPILLING:
            return "spilling";
        case OBJ_TIER_SPILLED:
            return "spilled";
        case OBJ_TIER_RESTORING:
            return "restoring";
        case OBJ_TIER_MEMORY:
        default:
            return "memory";
    }
}

void spillCountRead(int fromMemory)
{
    if (fromMemory)
        sp.memReads++;
    else
        sp.tierReads++;
}

/* ---- requests ---------------------------------------------------------------------- */

static void reqFree(SpillReq *r)
{
    if (r->data)
        RedisModule_FreeString(NULL, r->data);
    if (r->meta)
        RedisModule_FreeString(NULL, r->meta);
    free(r->copy);
    free(r->id);
    free(r);
}

/* The request is answered (result or err): hand it to Redis, which calls
 * spillReply and then spillFree. Only for a request with no job in flight. */
static void reqFinish(SpillReq *r)
{
    objListUnlink(&r->link);
    sp.waiting--;
    RedisModule_UnblockClient(r->bc, r);
}

/* Reply callback: finish the command as it would have finished at once. */
static int spillReply(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    SpillReq *r = RedisModule_GetBlockedClientPrivateData(ctx);
    size_t dl = 0, ml = 0;

    if (!r)
        return REDISMODULE_OK;
    r->replied = 1;
    if (r->err[0])
        return RedisModule_ReplyWithError(ctx, r->err);
    if (r->copy) {
        const char *d = (const char *)r->copy;
        objNode.cnt.gets++;
        if (r->reply != OBJ_REPLY_GET_META)
            return RedisModule_ReplyWithStringBuffer(ctx, d, r->copyData);
        RedisModule_ReplyWithArray(ctx, 2);
        RedisModule_ReplyWithStringBuffer(ctx, d, r->copyData);
        return RedisModule_ReplyWithStringBuffer(ctx, d + r->copyData, r->copyLen - r->copyData);
    }
    const char *meta = r->meta ? RedisModule_StringPtrLen(r->meta, &ml) : "";
    if (r->kind == REQ_READ)
        return objReplyPinned(ctx, r->e, r->reply, r->holder);
    const char *data = r->data ? RedisModule_StringPtrLen(r->data, &dl) : NULL;
    r->e->want = r->want;
    return r->finish(ctx, r->e, data, r->data ? dl : r->size, meta, ml, 0);
}

/* Redis is done with a finished request. A read that was never answered
 * (the client left) gives its pin back; a created object of a client that
 * left is aborted by the disconnect itself. */
static void spillFree(RedisModuleCtx *ctx, void *privdata)
{
    SpillReq *r = privdata;

    if (!r)
        return;
    if (!r->replied && r->kind == REQ_READ && r->e && !r->err[0]) {
        objTableLock(objNode.table);
        objTableUnpin(objNode.table, r->e, r->holder);
        objTableUnlock(objNode.table);
    }
    reqFree(r);
}

/* The client left while waiting: nothing will be answered. The request
 * lives on until its spills are back (they point at it). */
static void spillDisconnected(RedisModuleCtx *ctx, RedisModuleBlockedClient *bc)
{
    ObjListLink *it;

    objListForEach(&sp.pending, it) {
        SpillReq *r = objListEntry(it, SpillReq, link);
        if (r->bc != bc)
            continue;
        objListUnlink(&r->link);
        objListInit(&r->link);
        sp.waiting--;
        r->bc = NULL;
        RedisModule_UnblockClient(bc, NULL);
        if (r->jobs == 0)
            reqFree(r);
        return;
    }
}

/* A new waiting request for the calling client. NULL (after replying OOM)
 * when memory is short. */
static SpillReq *reqNew(RedisModuleCtx *ctx, ReqKind kind, const char *id, size_t idLen)
{
    SpillReq *r = calloc(1, sizeof(*r));

    if (!r || !(r->id = malloc(idLen ? idLen : 1))) {
        free(r);
        objReplyError(ctx, OBJ_EW_OOM, "out of memory for a waiting client");
        return NULL;
    }
    memcpy(r->id, id, idLen);
    r->idLen = idLen;
    r->kind = kind;
    r->client = RedisModule_GetClientId(ctx);
    return r;
}

/* Block r's client and take the first step. */
static void reqStart(RedisModuleCtx *ctx, SpillReq *r)
{
    r->bc = RedisModule_BlockClient(ctx, spillReply, NULL, spillFree, 0);
    RedisModule_SetDisconnectCallback(r->bc, spillDisconnected);
    objListPushBack(&sp.pending, &r->link);
    sp.waits++;
    sp.waiting++;
    objNode.cnt.blocked++;
    reqStep(r);
}

int spillBlockCreate(RedisModuleCtx *ctx, RedisModuleString *id, RedisModuleString *data,
                     uint64_t size, RedisModuleString *meta, uint32_t want, SpillFinish *finish)
{
    size_t idLen;
    const char *idp = RedisModule_StringPtrLen(id, &idLen);

    if (!sp.tier || (RedisModule_GetContextFlags(ctx) &
                     (REDISMODULE_CTX_FLAGS_MULTI | REDISMODULE_CTX_FLAGS_LUA |
                      REDISMODULE_CTX_FLAGS_DENY_BLOCKING)))
        return -1;
    SpillReq *r = reqNew(ctx, data ? REQ_PUT : REQ_CREATE, idp, idLen);
    if (!r)
        return 0;
    r->size = size;
    r->finish = finish;
    r->want = want;
    if (data) {
        RedisModule_RetainString(NULL, data);
        r->data = data;
    }
    if (meta) {
        RedisModule_RetainString(NULL, meta);
        r->meta = meta;
    }
    reqStart(ctx, r);
    return 0;
}

int spillBlockRestore(RedisModuleCtx *ctx, const char *id, size_t idLen, ObjReplyKind kind)
{
    if (objReplyIfCannotWait(ctx, kind == OBJ_REPLY_PIN ? "OBJ.PIN" : "OBJ.GET"))
        return REDISMODULE_OK;
    SpillReq *r = reqNew(ctx, REQ_READ, id, idLen);
    if (!r)
        return REDISMODULE_OK;
    r->reply = kind;
    reqStart(ctx, r);
    return REDISMODULE_OK;
}

/* ---- jobs -------------------------------------------------------------------------- */

static void jobDone(SpillJob *j);

/* Queue a spill (owner set) or a restore of e, which the tier's holder has
 * pinned. A spill the tier refuses at once (over spill-max) ends here. */
static void jobSubmit(ObjEntry *e, TierOp op, SpillReq *owner)
{
    SpillJob *j = calloc(1, sizeof(*j));

    if (!j) { /* give the object back as it was */
        objTableLock(objNode.table);
        if (op == TIER_SPILL)
            objTableSpillDone(objNode.table, e, OBJ_HOLDER_TIER, 0, 0);
        else
            objTableRestoreDone(objNode.table, e, OBJ_HOLDER_TIER, 0);
        objTableUnlock(objNode.table);
        if (owner)
            snprintf(owner->fail, sizeof(owner->fail), "out of memory for a tier job");
        return;
    }
    j->e = e;
    j->owner = owner;
    j->tj.op = op;
    j->tj.buf = objNode.arena.base + e->offset;
    j->tj.len = e->dataSize + e->metaSize;
    j->tj.checksum = e->checksum;
    j->tj.fileNo = e->fileNo;
    if (owner)
        owner->jobs++;
    if (tierSubmit(sp.tier, &j->tj) == -1) {
        jobDone(j); /* j->tj.err says why */
        return;
    }
    sp.inflight++;
}

/* Pending reads of e answer err instead of waiting for another restore. */
static void failReadsOf(const ObjEntry *e, const char *err)
{
    ObjListLink *it;

    objListForEach(&sp.pending, it) {
        SpillReq *r = objListEntry(it, SpillReq, link);
        if (r->kind == REQ_READ && r->idLen == e->idLen && !memcmp(r->id, e->id, r->idLen))
            snprintf(r->err, sizeof(r->err), "%s", err);
    }
}

static void jobSpillDone(SpillJob *j)
{
    ObjTable *t = objNode.table;
    int ok = j->tj.err == 0;

    objTableLock(t);
    int kept = objTableSpillDone(t, j->e, OBJ_HOLDER_TIER, ok, j->tj.fileNo);
    objTableUnlock(t);
    if (ok && !kept) /* pinned or deleted meanwhile: it stays, the copy goes */
        tierDiscard(sp.tier, j->tj.fileNo, j->tj.len);
    if (ok) {
        sp.spills++;
        sp.spillBytes += j->tj.len;
        sp.spillUs += (uint64_t)j->tj.usec;
    } else {
        sp.spillFailures++;
        RedisModule_Log(objNode.ctx, "warning",
                        "spill tier: writing a %llu-byte object failed (%s); it stays in memory",
                        (unsigned long long)j->tj.len, tierStrError(j->tj.err));
    }
    SpillReq *r = j->owner;
    if (!r)
        return;
    if (!ok)
        snprintf(r->fail, sizeof(r->fail), "the spill tier cannot take more (%s)",
                 tierStrError(j->tj.err));
    if (--r->jobs == 0 && !r->bc)
        reqFree(r); /* its client left meanwhile */
}

/* The code word of a tier read that failed: CHECKSUM when the file held
 * other bytes than were spilled, IOERR when it could not be read. */
static ObjErrWord tierErrWord(int err)
{
    return err == TIER_ESIZE || err == TIER_ECHECKSUM ? OBJ_EW_CHECKSUM : OBJ_EW_IOERR;
}

static void jobRestoreDone(SpillJob *j)
{
    ObjTable *t = objNode.table;
    int ok = j->tj.err == 0;
    char err[320];

    if (!ok) {
        sp.restoreFailures++;
        objErrFormat(err, sizeof(err), tierErrWord(j->tj.err),
                     "the object's spill tier file cannot be read back: %s",
                     tierStrError(j->tj.err));
        RedisModule_Log(objNode.ctx, "warning", "spill tier: restoring '%.*s' failed: %s",
                        (int)(j->e->idLen > 64 ? 64 : j->e->idLen), j->e->id,
                        tierStrError(j->tj.err));
        failReadsOf(j->e, err);
    } else {
        sp.restores++;
        sp.restoreBytes += j->tj.len;
        sp.restoreUs += (uint64_t)j->tj.usec;
    }
    objTableLock(t);
    objTableRestoreDone(t, j->e, OBJ_HOLDER_TIER, ok);
    objTableUnlock(t);
}

/* A job is back from the worker (or was refused at once). Main thread. */
/* A GET's copy from the tier file is back (no arena room was needed). */
static void jobCopyDone(SpillJob *j)
{
    SpillReq *r = j->owner;

    if (j->tj.err) {
        sp.restoreFailures++;
        RedisModule_Log(objNode.ctx, "warning", "spill tier: reading '%.*s' failed: %s",
                        (int)(r->idLen > 64 ? 64 : r->idLen), r->id, tierStrError(j->tj.err));
        objErrFormat(r->err, sizeof(r->err), tierErrWord(j->tj.err),
                     "the object's spill tier file cannot be read: %s", tierStrError(j->tj.err));
        free(j->tj.buf);
    } else {
        sp.copies++;
        r->copy = j->tj.buf;
        r->copyLen = j->tj.len;
    }
    if (--r->jobs == 0 && !r->bc)
        reqFree(r);
}

static void jobDone(SpillJob *j)
{
    if (j->tj.op == TIER_SPILL)
        jobSpillDone(j);
    else if (j->tj.op == TIER_COPY)
        jobCopyDone(j);
    else
        jobRestoreDone(j);
    free(j);
}

/* A GET of a spilled object for which no arena room can be made: read its
 * file into a buffer of the request's instead (the bytes are answered from
 * there). Returns 0 when the read is queued, -1 when it cannot be. */
static int reqCopy(SpillReq *r)
{
    ObjTable *t = objNode.table;
    SpillJob *j = calloc(1, sizeof(*j));

    if (!j)
        return -1;
    objTableLock(t);
    ObjEntry *e = objTableFind(t, r->id, r->idLen);
    int fd = e && e->tier == OBJ_TIER_SPILLED ? objTableTierOpen(t, e) : -1;
    if (fd >= 0) {
        j->tj.len = e->dataSize + e->metaSize;
        j->tj.checksum = e->checksum;
        r->copyData = e->dataSize;
    }
    objTableUnlock(t);
    j->tj.buf = fd < 0 ? NULL : malloc(j->tj.len ? j->tj.len : 1);
    if (!j->tj.buf) {
        if (fd >= 0)
            close(fd);
        free(j);
        return -1;
    }
    j->tj.op = TIER_COPY;
    j->tj.fd = fd;
    j->owner = r;
    r->jobs++;
    tierSubmit(sp.tier, &j->tj); /* a copy is never refused */
    sp.inflight++;
    return 0;
}

/* Step every waiting request that is not waiting for its own spills. Main
 * thread, without the table lock; can't fail. */
static void spillStepWaiting(void)
{
    ObjListLink *it, *next;

    objListForEachSafe(&sp.pending, it, next) {
        SpillReq *r = objListEntry(it, SpillReq, link);
        if (r->jobs == 0)
            reqStep(r);
    }
}

/* The worker finished jobs: settle them, then step the waiting requests. */
static void spillOnEvent(int fd, void *user, int mask)
{
    TierJob *tj;

    while ((tj = tierReap(sp.tier))) {
        sp.inflight--;
        jobDone((SpillJob *)((char *)tj - offsetof(SpillJob, tj)));
    }
    spillStepWaiting();
}

/* ---- stepping a request --------------------------------------------------------------- */

/* Make room for need bytes for r: spill a batch of cold primaries or
 * protected copies, or wait for spills in flight, or answer OOM. Caller
 * holds the table lock; it is released here. */
static void reqMakeRoom(SpillReq *r, uint64_t need)
{
    ObjEntry *victims[SPILL_BATCH];
    size_t n = 0;

    if (!r->fail[0])
        n = objTableSpillPick(objNode.table, need, OBJ_HOLDER_TIER, victims, SPILL_BATCH);
    objTableUnlock(objNode.table);
    if (n == 0) {
        if (sp.inflight > 0 && !r->fail[0])
            return; /* others' spills and restores are moving: look again after them */
        /* Objects whose checksum is still being taken cannot be spilled yet
         * (a busy machine leaves the worker behind): look again once it has
         * them (sealerOnSettled). */
        if (sealerPending() > 0 && !r->fail[0])
            return;
        if (r->kind == REQ_READ && r->reply != OBJ_REPLY_PIN && reqCopy(r) == 0)
            return; /* a GET needs no arena room: it is answered from the file */
        AllocStats as;
        objTableLock(objNode.table);
        objTableAllocStats(objNode.table, &as);
        objTableUnlock(objNode.table);
        objErrFormat(r->err, sizeof(r->err), OBJ_EW_OOM,
                     "arena full: %llu of %llu bytes free, largest free range %llu, and %s; "
                     "delete objects or raise objstore.memory",
                     (unsigned long long)as.free, (unsigned long long)as.capacity,
                     (unsigned long long)as.largestFree,
                     r->fail[0] ? r->fail
                                : "nothing more can be spilled (every object in memory is pinned "
                                  "or in use)");
        reqFinish(r);
        return;
    }
    for (size_t i = 0; i < n; i++)
        jobSubmit(victims[i], TIER_SPILL, r);
    if (r->jobs == 0) /* every spill was refused at once */
        reqStep(r);
}

/* A read: the object pinned in memory for the reply, a restore started, or
 * wait for the one under way. Caller holds the table lock; released here. */
static void reqStepRead(SpillReq *r)
{
    ObjTable *t = objNode.table;
    ObjEntry *e = objTableFind(t, r->id, r->idLen);

    if (!e || e->state != OBJ_SEALED) {
        objTableUnlock(t);
        objErrFormat(r->err, sizeof(r->err), OBJ_EW_NOTFOUND, "no such object");
        reqFinish(r);
        return;
    }
    if (e->tier == OBJ_TIER_RESTORING) {
        objTableUnlock(t);
        return;
    }
    if (e->tier == OBJ_TIER_SPILLED) {
        ObjStatus st = objTableRestoreBegin(t, e, OBJ_HOLDER_TIER);
        if (st == OBJ_ST_OOM) {
            reqMakeRoom(r, e->dataSize + e->metaSize);
            return;
        }
        objTableUnlock(t);
        jobSubmit(e, TIER_RESTORE, NULL);
        return;
    }
    r->holder =
        r->reply == OBJ_REPLY_PIN ? r->client : (OBJ_HOLDER_SPILL_GET | (++sp.seq & 0xffffffffff));
    ObjStatus st = objTablePin(t, e, r->holder);
    objTableUnlock(t);
    if (st != OBJ_ST_OK)
        objErrFormat(r->err, sizeof(r->err), OBJ_EW_WRONGSTATE, "cannot pin the object");
    else
        r->e = e;
    reqFinish(r);
}

/* Take r as far as it goes now (see the file's comment). */
static void reqStep(SpillReq *r)
{
    ObjTable *t = objNode.table;
    size_t ml = 0;

    if (r->err[0] || r->copy) {
        reqFinish(r);
        return;
    }
    objTableLock(t);
    if (r->kind == REQ_READ) {
        reqStepRead(r);
        return;
    }
    if (r->meta)
        RedisModule_StringPtrLen(r->meta, &ml);
    ObjEntry *e;
    ObjStatus st = objTableCreateEntry(t, r->id, r->idLen, r->size, ml, r->client, &e);
    if (st == OBJ_ST_OOM) {
        reqMakeRoom(r, r->size + ml);
        return;
    }
    objTableUnlock(t);
    if (st == OBJ_ST_OK)
        r->e = e;
    else
        objErrFormat(r->err, sizeof(r->err), OBJ_EW_EXISTS, "an object with this id exists");
    reqFinish(r);
}

/* ---- start, stop, stats ------------------------------------------------------------- */

static void spillDiscard(uint64_t fileNo, uint64_t bytes, void *arg)
{
    tierDiscard(arg, fileNo, bytes);
}

static int spillOpen(uint64_t fileNo, void *arg)
{
    return tierOpenFile(arg, fileNo);
}

int spillStart(RedisModuleCtx *ctx)
{
    const ObjConfig *cfg = &objNode.cfg;
    char err[700], tag[sizeof(cfg->nodeName)];
    int lruOnly = !strcasecmp(cfg->spillPolicy, "lru");

    if (!cfg->spillDir[0])
        return REDISMODULE_OK;
    if (!lruOnly && strcasecmp(cfg->spillPolicy, "hot")) {
        RedisModule_Log(ctx, "warning", "spill-policy must be hot or lru, not '%s'",
                        cfg->spillPolicy);
        return REDISMODULE_ERR;
    }
    /* The directory is named by the node, so a restarted node finds (and
     * empties) what it left; only letters, digits, '-' and '.' are kept. */
    size_t i = 0;
    for (; cfg->nodeName[i] && i + 1 < sizeof(tag); i++) {
        char ch = cfg->nodeName[i];
        int keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                   (ch >= '0' && ch <= '9') || ch == '-' || ch == '.';
        tag[i] = keep ? ch : '_';
    }
    tag[i] = '\0';
    sp.tier = tierOpen(cfg->spillDir, tag, (uint64_t)cfg->spillMax, err, sizeof(err));
    if (!sp.tier) {
        RedisModule_Log(ctx, "warning", "%s", err);
        return REDISMODULE_ERR;
    }
    if (RedisModule_EventLoopAdd(tierEventFd(sp.tier), REDISMODULE_EVENTLOOP_READABLE, spillOnEvent,
                                 NULL) != REDISMODULE_OK) {
        RedisModule_Log(ctx, "warning", "spill tier: cannot watch its event fd");
        tierClose(sp.tier);
        sp.tier = NULL;
        return REDISMODULE_ERR;
    }
    ObjTierOps ops = {.discard = spillDiscard, .open = spillOpen, .arg = sp.tier};
    objTableSetTier(objNode.table, &ops, lruOnly);
    sealerOnSettled(spillStepWaiting);
    RedisModule_Log(ctx, "notice",
                    "spill tier %s (at most %lld bytes, 0 = the file system's; "
                    "policy %s)",
                    tierPath(sp.tier), cfg->spillMax, lruOnly ? "lru" : "hot");
    return REDISMODULE_OK;
}

void spillStop(void)
{
    if (!sp.tier)
        return;
    sealerOnSettled(NULL);
    RedisModule_EventLoopDel(tierEventFd(sp.tier), REDISMODULE_EVENTLOOP_READABLE);
    tierClose(sp.tier);
    sp.tier = NULL;
}

/* MB/s (10^6 bytes a second) of bytes moved in us microseconds. */
static uint64_t spillMbps(uint64_t bytes, uint64_t us)
{
    return us ? bytes / us : 0;
}

void spillStats(ObjStatSink *sink)
{
    ObjTableStats ts;

    objTableLock(objNode.table);
    objTableGetStats(objNode.table, &ts);
    objTableUnlock(objNode.table);
    objStatNum(sink, "tier_enabled", sp.tier != NULL);
    objStatStr(sink, "tier_path", sp.tier ? tierPath(sp.tier) : "");
    objStatNum(sink, "tier_max", (uint64_t)objNode.cfg.spillMax);
    objStatNum(sink, "memory_objects", ts.sealed - ts.tierObjects);
    objStatNum(sink, "memory_bytes", ts.bytesSealed - ts.tierBytes);
    objStatNum(sink, "tier_objects", ts.tierObjects);
    objStatNum(sink, "tier_bytes", ts.tierBytes);
    objStatNum(sink, "tier_file_bytes", sp.tier ? tierBytesUsed(sp.tier) : 0);
    objStatNum(sink, "spills", sp.spills);
    objStatNum(sink, "spill_bytes", sp.spillBytes);
    objStatNum(sink, "spill_mbps", spillMbps(sp.spillBytes, sp.spillUs));
    objStatNum(sink, "spill_failures", sp.spillFailures);
    objStatNum(sink, "restores", sp.restores);
    objStatNum(sink, "restore_bytes", sp.restoreBytes);
    objStatNum(sink, "restore_mbps", spillMbps(sp.restoreBytes, sp.restoreUs));
    objStatNum(sink, "restore_failures", sp.restoreFailures);
    objStatNum(sink, "reads_from_memory", sp.memReads);
    objStatNum(sink, "reads_from_tier", sp.tierReads);
    objStatNum(sink, "tier_direct_reads", sp.copies);
    objStatNum(sink, "tier_waits", sp.waits);
    objStatNum(sink, "tier_waiting", sp.waiting);
}
