/*
 * copies.c - the Redis side of an object's copies (copies.h): the seal's
 * wait for its replica count (a blocked client the replica manager answers
 * with the number of holders), the cluster-wide delete of an object with
 * copies, OBJ.DRAIN, the drain before a shutdown, and the statistics.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "copies.h"
#include "node.h"
#include "reply.h"
#include "remote.h"
#include "args.h"
#include "cmdtable.h"
#include "common/list.h"
#include "common/util.h"
#include "directory/directory.h"
#include "replica/replica.h"

/* A seal waiting for its copies: registered before the seal, handed to the
 * replica manager once the object is published (copiesSealed). Main thread
 * only until handed; then the manager writes holders and unblocks. */
typedef struct SealWait {
    ObjListLink link;
    const ObjEntry *e;
    uint64_t gen;
    RedisModuleBlockedClient *bc;
    RedisModuleTimerID timer;
    int handed;
    int64_t replyAtUs;
    uint32_t holders;
} SealWait;

static ObjList sealWaits = {&sealWaits, &sealWaits};

static int sealWaitReply(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    SealWait *w = RedisModule_GetBlockedClientPrivateData(ctx);

    (void)argv;
    (void)argc;
    return RedisModule_ReplyWithLongLong(ctx, (long long)w->holders);
}

static void sealWaitFree(RedisModuleCtx *ctx, void *privdata)
{
    SealWait *w = privdata;

    (void)ctx;
    if (!w->handed)
        objListUnlink(&w->link);
    if (w->timer)
        RedisModule_StopTimer(objNode.ctx, w->timer, NULL);
    free(w);
}

/* Manager thread: the copies are placed, or the wait ran out. */
static void sealWaitDone(void *arg, uint32_t holders)
{
    SealWait *w = arg;

    w->holders = holders;
    RedisModule_UnblockClient(w->bc, w);
}

/* Main thread: the wait ran out before the object was even published (its
 * checksum still pending, or it was deleted meanwhile): answer alone. */
static void sealWaitExpired(RedisModuleCtx *ctx, void *data)
{
    SealWait *w = data;

    (void)ctx;
    w->timer = 0;
    if (w->handed)
        return;
    objListUnlink(&w->link);
    w->handed = 1;
    w->holders = 1;
    RedisModule_UnblockClient(w->bc, w);
}

int copiesExpect(RedisModuleCtx *ctx, ObjEntry *e, long long waitMs)
{
    if (waitMs <= 0 || (RedisModule_GetContextFlags(ctx) &
                        (REDISMODULE_CTX_FLAGS_MULTI | REDISMODULE_CTX_FLAGS_LUA |
                         REDISMODULE_CTX_FLAGS_DENY_BLOCKING)))
        return 0;
    SealWait *w = calloc(1, sizeof(*w));
    if (!w)
        return 0;
    w->e = e;
    w->gen = e->gen;
    w->replyAtUs = utilMonoUs() + waitMs * 1000;
    w->bc = RedisModule_BlockClient(ctx, sealWaitReply, NULL, sealWaitFree, 0);
    /* A margin past the manager's own deadline: only a seal that was never
     * published is answered by this timer. */
    w->timer = RedisModule_CreateTimer(objNode.ctx, (mstime_t)waitMs + 100, sealWaitExpired, w);
    objListPushBack(&sealWaits, &w->link);
    objNode.cnt.blocked++;
    return 1;
}

void copiesSealed(const ObjEntry *e)
{
    ObjListLink *l;
    SealWait *w = NULL;

    if (e->want < 2 || objTableCopyOf(e) != OBJ_COPY_PRIMARY)
        return;
    objListForEach(&sealWaits, l) {
        SealWait *c = objListEntry(l, SealWait, link);
        if (c->e == e && c->gen == e->gen) {
            w = c;
            break;
        }
    }
    if (w) {
        objListUnlink(&w->link);
        w->handed = 1;
        replicaPlace(e->id, e->idLen, e->checksum, e->dataSize + e->metaSize, e->want, w->replyAtUs,
                     sealWaitDone, w);
        return;
    }
    replicaPlace(e->id, e->idLen, e->checksum, e->dataSize + e->metaSize, e->want, 0, NULL, NULL);
}

/* The purge's answer: nothing waits for it. */
static void copiesPurgeAnswered(DirResult *res, void *arg)
{
    (void)arg;
    dirResultFree(res);
}

void copiesDeleted(const char *id, size_t idLen)
{
    const char *ids[1] = {id};
    size_t lens[1] = {idLen};

    dirVersionRequest(DIR_V_PURGE, "", 0, 0, 0, 1, ids, lens, copiesPurgeAnswered, NULL);
}

int copiesRefuseWhileDraining(RedisModuleCtx *ctx)
{
    if (!replicaDraining())
        return 0;
    objReplyError(ctx, OBJ_EW_DRAINING,
                  "the node is draining: put new objects on another node (OBJ.DRAIN CANCEL "
                  "takes them here again)");
    return 1;
}

void copiesDrainBeforeShutdown(void)
{
    ReplicaDrainStatus st;

    if (!objNode.cfg.drainOnShutdown)
        return;
    replicaDrainStart();
    int64_t until = utilMonoUs() + objNode.cfg.drainTimeoutMs * 1000;
    RedisModule_Log(objNode.ctx, "notice", "shutdown: draining the node first (up to %lld ms)",
                    objNode.cfg.drainTimeoutMs);
    for (;;) {
        replicaDrainGet(&st);
        if (st.state == REPLICA_DRAIN_DRAINED || utilMonoUs() >= until)
            break;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    RedisModule_Log(objNode.ctx, st.state == REPLICA_DRAIN_DRAINED ? "notice" : "warning",
                    "shutdown: %s, %llu objects moved, %llu left%s%s",
                    st.state == REPLICA_DRAIN_DRAINED ? "drained" : "drain incomplete",
                    (unsigned long long)st.moved, (unsigned long long)st.left,
                    st.lastError[0] ? ", last error: " : "", st.lastError);
}

/* ---- OBJ.DRAIN [WAIT ms] | STATUS | CANCEL ------------------------------------------------- */

static int drainReplyStatus(RedisModuleCtx *ctx)
{
    ReplicaDrainStatus st;
    static const char *const names[] = {"idle", "draining", "drained"};

    replicaDrainGet(&st);
    RedisModule_ReplyWithArray(ctx, 12);
    RedisModule_ReplyWithSimpleString(ctx, "state");
    RedisModule_ReplyWithSimpleString(ctx, names[st.state]);
    RedisModule_ReplyWithSimpleString(ctx, "objects_left");
    RedisModule_ReplyWithLongLong(ctx, (long long)st.left);
    RedisModule_ReplyWithSimpleString(ctx, "objects_moved");
    RedisModule_ReplyWithLongLong(ctx, (long long)st.moved);
    RedisModule_ReplyWithSimpleString(ctx, "bytes_moved");
    RedisModule_ReplyWithLongLong(ctx, (long long)st.bytes);
    RedisModule_ReplyWithSimpleString(ctx, "failures");
    RedisModule_ReplyWithLongLong(ctx, (long long)st.failures);
    RedisModule_ReplyWithSimpleString(ctx, "last_error");
    return RedisModule_ReplyWithStringBuffer(ctx, st.lastError, strlen(st.lastError));
}

/* A client waiting for the drain's end: polled every 20 ms by a timer. */
typedef struct DrainWait {
    RedisModuleBlockedClient *bc;
    int64_t untilUs;
} DrainWait;

static int drainWaitReply(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    (void)argv;
    (void)argc;
    return drainReplyStatus(ctx);
}

static void drainWaitFree(RedisModuleCtx *ctx, void *privdata)
{
    (void)ctx;
    free(privdata);
}

static void drainWaitPoll(RedisModuleCtx *ctx, void *data)
{
    DrainWait *w = data;
    ReplicaDrainStatus st;

    replicaDrainGet(&st);
    if (st.state == REPLICA_DRAIN_DRAINING && utilMonoUs() < w->untilUs) {
        RedisModule_CreateTimer(ctx, 20, drainWaitPoll, w);
        return;
    }
    RedisModule_UnblockClient(w->bc, w);
}

static int ObjDrain_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    uint64_t waitMs = 0;

    if (argc == 2 && objArgIs(argv[1], "STATUS"))
        return drainReplyStatus(ctx);
    if (argc == 2 && objArgIs(argv[1], "CANCEL")) {
        replicaDrainCancel();
        return drainReplyStatus(ctx);
    }
    if (argc == 3 && objArgIs(argv[1], "WAIT")) {
        size_t len;
        const char *s = RedisModule_StringPtrLen(argv[2], &len);
        if (objArgTimeout(ctx, s, len, &waitMs) == -1)
            return REDISMODULE_OK;
    } else if (argc != 1) {
        return objReplyError(ctx, OBJ_EW_BADARG, "OBJ.DRAIN takes WAIT ms, STATUS or CANCEL");
    }
    if (!objRemoteDirRunning())
        return objReplyError(ctx, OBJ_EW_UNAVAILABLE, "the directory client is not running");
    replicaDrainStart();
    if (waitMs == 0 || (RedisModule_GetContextFlags(ctx) &
                        (REDISMODULE_CTX_FLAGS_MULTI | REDISMODULE_CTX_FLAGS_LUA |
                         REDISMODULE_CTX_FLAGS_DENY_BLOCKING)))
        return drainReplyStatus(ctx);
    DrainWait *w = calloc(1, sizeof(*w));
    if (!w)
        return objReplyError(ctx, OBJ_EW_OOM, "out of memory");
    w->untilUs = utilMonoUs() + (int64_t)waitMs * 1000;
    w->bc = RedisModule_BlockClient(ctx, drainWaitReply, NULL, drainWaitFree, 0);
    RedisModule_CreateTimer(ctx, 20, drainWaitPoll, w);
    return REDISMODULE_OK;
}

static RedisModuleCommandArg argsDrain[] = {
    {.name = "action",
     .type = REDISMODULE_ARG_TYPE_ONEOF,
     .key_spec_index = -1,
     .flags = REDISMODULE_CMD_ARG_OPTIONAL,
     .subargs = (RedisModuleCommandArg[]){{.name = "wait",
                                           .token = "WAIT",
                                           .type = REDISMODULE_ARG_TYPE_INTEGER,
                                           .key_spec_index = -1},
                                          {.name = "status",
                                           .token = "STATUS",
                                           .type = REDISMODULE_ARG_TYPE_PURE_TOKEN,
                                           .key_spec_index = -1},
                                          {.name = "cancel",
                                           .token = "CANCEL",
                                           .type = REDISMODULE_ARG_TYPE_PURE_TOKEN,
                                           .key_spec_index = -1},
                                          {0}}},
    {0}};

int copiesRegisterCommands(RedisModuleCtx *ctx)
{
    static const ObjCommandDef defs[] = {
        {"obj.drain", ObjDrain_RedisCommand, "admin", -1,
         "Move this node's objects to other nodes before it leaves; refuse new ones meanwhile",
         "O(N) in the objects held, done in the background", argsDrain, 0, NULL},
    };
    return objCommandTableRegister(ctx, defs, sizeof(defs) / sizeof(defs[0]));
}

void copiesStats(ObjStatSink *sink)
{
    ReplicaStats rs;
    ReplicaDrainStatus ds;
    ObjTableStats ts;

    replicaGetStats(&rs);
    replicaDrainGet(&ds);
    objTableLock(objNode.table);
    objTableGetStats(objNode.table, &ts);
    objTableUnlock(objNode.table);
    objStatNum(sink, "protected_objects", ts.protectedObjects);
    objStatNum(sink, "replicas_below_target", rs.below);
    objStatNum(sink, "replicas_placed", rs.placed);
    objStatNum(sink, "repairs_done", rs.repairs);
    objStatNum(sink, "repairs_in_flight", rs.inFlight);
    objStatNum(sink, "repair_bytes", rs.repairBytes);
    objStatNum(sink, "repair_failures", rs.repairFailures);
    objStatNum(sink, "ownership_takeovers", rs.takeovers);
    objStatNum(sink, "replicas_trimmed", rs.trimmed);
    objStatNum(sink, "drain_state", (uint64_t)ds.state);
    objStatNum(sink, "drain_objects_left", ds.left);
    objStatNum(sink, "drain_objects_moved", ds.moved);
    objStatNum(sink, "drain_bytes_moved", ds.bytes);
}
