/*
 * versions.c - the commands of named versions and of the cluster-wide
 * delete, as blocked clients answered by the directory thread (the
 * directory side: module/directory/versions.c).
 *
 * OBJ.VLATEST NEWER v is a blocked client, not a busy wait: the waiters sit
 * in one list, and while any is listed a module timer asks the directory for
 * the latest version of each name waited on every OBJ_VERSION_POLL_MS (a
 * bounded poll: one read per name and period, none when nobody waits); the
 * answer wakes every waiter it satisfies with that one whole version.
 * Deadlines are module timers, as for OBJ.GET (waiters.c).
 * Commands and replies: docs/commands.md; the directory keys: docs/cluster.md.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "directory/directory.h"
#include "acl.h"
#include "cmdtable.h"
#include "node.h"
#include "remote.h"
#include "reply.h"
#include "args.h"
#include "versions.h"
#include "common/list.h"
#include "common/util.h"

/* How often the latest version of a name waited on is read. */
#define OBJ_VERSION_POLL_MS 10

/* One request in flight to the directory for a blocked client. */
typedef struct VerReq {
    RedisModuleBlockedClient *bc;
    DirVerKind kind;
    DirResult *res;
} VerReq;

/* A client blocked in OBJ.VLATEST NEWER. Main thread only. */
typedef struct VerWaiter {
    RedisModuleBlockedClient *bc;
    char *name;
    size_t nameLen;
    uint64_t newer;
    int gone, timedOut;
    RedisModuleTimerID timer;
    int hasTimer;
    DirResult *res; /* the version that woke it */
    ObjListLink link;
} VerWaiter;

static ObjList verWaiters = {&verWaiters, &verWaiters};
static int pollTimerOn; /* the poll timer is armed */
/* Latest-version reads not landed yet; atomic: an answer that cannot reach
 * the main thread is taken off on the directory thread. */
static _Atomic size_t pollsInFlight;

/* ---- argument parsing ---------------------------------------------------------------------- */

/* A name or id argument of 1..OBJ_ID_MAX bytes (objArgIdLen, naming it
 * what). Returns 0, or -1 after replying BADARG. */
static int verArgId(RedisModuleCtx *ctx, RedisModuleString *arg, const char *what, const char **s,
                    size_t *len)
{
    *s = RedisModule_StringPtrLen(arg, len);
    return objArgIdLen(ctx, *len, what);
}

/* A version number in [min, OBJ_DIR_VERSION_MAX]. Returns 0, or -1 after
 * replying BADARG. */
static int verArgVersion(RedisModuleCtx *ctx, RedisModuleString *arg, const char *what,
                         uint64_t min, uint64_t *out)
{
    size_t len;
    const char *s = RedisModule_StringPtrLen(arg, &len);
    if (utilParseU64(s, len, out) == 0 && *out >= min && *out <= OBJ_DIR_VERSION_MAX)
        return 0;
    objReplyError(ctx, OBJ_EW_BADARG, "%s must be an integer from %" PRIu64 " to %llu", what, min,
                  OBJ_DIR_VERSION_MAX);
    return -1;
}

/* ---- replies --------------------------------------------------------------------------------- */

/* Replies an unsuccessful result: UNAVAILABLE, or the directory's error. */
static int verReplyFailure(RedisModuleCtx *ctx, const DirResult *res)
{
    if (res->status == DIR_UNAVAILABLE)
        return objReplyError(ctx, OBJ_EW_UNAVAILABLE, "directory unreachable: %s", res->err);
    if (!res->err[0])
        return objReplyError(ctx, OBJ_EW_NOTFOUND, "no such version");
    return RedisModule_ReplyWithError(ctx, res->err); /* the directory's, with its word */
}

/* Replies one version as [version, manifest-id]. */
static void verReplyPair(RedisModuleCtx *ctx, const DirVersion *v)
{
    RedisModule_ReplyWithArray(ctx, 2);
    RedisModule_ReplyWithLongLong(ctx, (long long)v->version);
    RedisModule_ReplyWithStringBuffer(ctx, v->id, v->idLen);
}

static int verReply(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    VerReq *q = RedisModule_GetBlockedClientPrivateData(ctx);
    const DirResult *res = q->res;
    if (res->status != DIR_FOUND)
        return verReplyFailure(ctx, res);
    switch (q->kind) {
        case DIR_V_PUBLISH:
        case DIR_V_DROP:
            return RedisModule_ReplyWithSimpleString(ctx, "OK");
        case DIR_V_PURGE:
            return RedisModule_ReplyWithLongLong(ctx, (long long)res->known);
        case DIR_V_GET:
            if (res->nVersions != 1)
                return objReplyError(ctx, OBJ_EW_NOTFOUND, "no such version of that name");
            return RedisModule_ReplyWithStringBuffer(ctx, res->versions[0].id,
                                                     res->versions[0].idLen);
        case DIR_V_LIST:
            RedisModule_ReplyWithArray(ctx, (long)res->nVersions);
            for (size_t i = 0; i < res->nVersions; i++)
                verReplyPair(ctx, &res->versions[i]);
            return REDISMODULE_OK;
        case DIR_V_LATEST:
            break;
    }
    if (res->nVersions != 1)
        return objReplyError(ctx, OBJ_EW_NOTFOUND, "that name has no version");
    verReplyPair(ctx, &res->versions[0]);
    return REDISMODULE_OK;
}

static void verFree(RedisModuleCtx *ctx, void *privdata)
{
    VerReq *q = privdata;
    dirResultFree(q->res);
    free(q);
}

static void verAnswer(DirResult *res, void *arg)
{
    VerReq *q = arg;
    q->res = res;
    RedisModule_UnblockClient(q->bc, q);
}

/* Blocks the client and sends one request to the directory; the reply
 * follows from verReply. */
static int verRun(RedisModuleCtx *ctx, DirVerKind kind, const char *name, size_t nameLen,
                  uint64_t version, uint64_t retain, size_t nIds, const char *const *ids,
                  const size_t *idLens, const char *cmd)
{
    if (!objRemoteDirRunning())
        return objReplyError(ctx, OBJ_EW_UNAVAILABLE, "the directory client is not running");
    if (objReplyIfCannotWait(ctx, cmd))
        return REDISMODULE_OK;
    VerReq *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return objReplyError(ctx, OBJ_EW_OOM, "out of memory");
    q->kind = kind;
    q->bc = RedisModule_BlockClient(ctx, verReply, NULL, verFree, 0);
    dirVersionRequest(kind, name, nameLen, version, retain, nIds, ids, idLens, verAnswer, q);
    return REDISMODULE_OK;
}

/* ---- OBJ.VLATEST NEWER: waiters and the poll --------------------------------------------- */

static void verPollTick(RedisModuleCtx *ctx, void *data);

/* Unlinks w, stops its timer and hands it to Redis (freed by verWaiterFree). */
static void verWaiterRelease(VerWaiter *w)
{
    objListUnlink(&w->link);
    if (w->hasTimer)
        RedisModule_StopTimer(objNode.ctx, w->timer, NULL);
    w->hasTimer = 0;
    RedisModule_UnblockClient(w->bc, w);
}

static int verWaiterReply(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    VerWaiter *w = RedisModule_GetBlockedClientPrivateData(ctx);
    if (w == NULL || w->gone)
        return REDISMODULE_OK;
    if (w->timedOut || w->res == NULL || w->res->nVersions != 1)
        return objReplyError(ctx, OBJ_EW_TIMEOUT, "no newer version appeared in time");
    verReplyPair(ctx, &w->res->versions[0]);
    return REDISMODULE_OK;
}

static void verWaiterFree(RedisModuleCtx *ctx, void *privdata)
{
    VerWaiter *w = privdata;
    dirResultFree(w->res);
    free(w->name);
    free(w);
}

static void verWaiterTimedOut(RedisModuleCtx *ctx, void *data)
{
    VerWaiter *w = data; /* still listed: verWaiterRelease stops the timer */
    w->hasTimer = 0;
    w->timedOut = 1;
    verWaiterRelease(w);
}

static void verWaiterDisconnected(RedisModuleCtx *ctx, RedisModuleBlockedClient *bc)
{
    ObjListLink *it;
    objListForEach(&verWaiters, it) {
        VerWaiter *w = objListEntry(it, VerWaiter, link);
        if (w->bc == bc) {
            w->gone = 1;
            verWaiterRelease(w);
            return;
        }
    }
}

/* A copy of the one version in res (status DIR_FOUND); can't fail but for
 * memory (NULL). */
static DirResult *verCopyResult(const DirResult *res)
{
    DirResult *c = calloc(1, sizeof(*c));
    DirVersion *v = calloc(1, sizeof(*v));
    char *id = malloc(res->versions[0].idLen + 1);
    if (c == NULL || v == NULL || id == NULL) {
        free(c);
        free(v);
        free(id);
        return NULL;
    }
    memcpy(id, res->versions[0].id, res->versions[0].idLen + 1);
    *v = res->versions[0];
    v->id = id;
    c->status = DIR_FOUND;
    c->versions = v;
    c->nVersions = 1;
    return c;
}

/* Main thread: a latest-version read landed; wake each waiter on its name
 * that the version satisfies, each with a copy of that same version. */
static void verPollLanded(void *arg)
{
    DirResult *res = arg;
    ObjListLink *it, *next;
    pollsInFlight--;
    if (res->status == DIR_FOUND && res->nVersions == 1) {
        objListForEachSafe(&verWaiters, it, next) {
            VerWaiter *w = objListEntry(it, VerWaiter, link);
            if (w->nameLen != res->idLen || memcmp(w->name, res->id, res->idLen) != 0 ||
                res->versions[0].version <= w->newer)
                continue;
            if ((w->res = verCopyResult(res)) != NULL)
                verWaiterRelease(w);
        }
    }
    dirResultFree(res);
}

/* Directory thread: hand the read to the main thread. */
static void verPollAnswered(DirResult *res, void *arg)
{
    if (RedisModule_EventLoopAddOneShot(verPollLanded, res) == REDISMODULE_ERR) {
        dirResultFree(res); /* cannot happen while the server runs; the next tick re-reads */
        pollsInFlight--;
    }
}

/* Asks for the latest version of one name. */
static void verPollName(const char *name, size_t nameLen)
{
    pollsInFlight++;
    dirVersionRequest(DIR_V_LATEST, name, nameLen, 0, 0, 0, NULL, NULL, verPollAnswered, NULL);
}

/* Keeps the poll timer armed while anybody waits. */
static void verPollArm(void)
{
    if (!pollTimerOn && !objListEmpty(&verWaiters)) {
        RedisModule_CreateTimer(objNode.ctx, OBJ_VERSION_POLL_MS, verPollTick, NULL);
        pollTimerOn = 1;
    }
}

/* Every OBJ_VERSION_POLL_MS while anybody waits, once the previous round
 * landed: one read per distinct name waited on. */
static void verPollTick(RedisModuleCtx *ctx, void *data)
{
    ObjListLink *it, *jt;
    pollTimerOn = 0;
    if (pollsInFlight == 0) {
        objListForEach(&verWaiters, it) {
            VerWaiter *w = objListEntry(it, VerWaiter, link);
            int seen = 0;
            objListForEach(&verWaiters, jt) {
                if (jt == it)
                    break;
                VerWaiter *o = objListEntry(jt, VerWaiter, link);
                seen |= o->nameLen == w->nameLen && memcmp(o->name, w->name, w->nameLen) == 0;
            }
            if (!seen)
                verPollName(w->name, w->nameLen);
        }
    }
    verPollArm();
}

/* Blocks the client until name has a version above newer (or timeoutMs,
 * 0 = forever), and reads the name's latest at once. */
static int verBlockNewer(RedisModuleCtx *ctx, const char *name, size_t nameLen, uint64_t newer,
                         uint64_t timeoutMs)
{
    if (!objRemoteDirRunning())
        return objReplyError(ctx, OBJ_EW_UNAVAILABLE, "the directory client is not running");
    if (objReplyIfCannotWait(ctx, "OBJ.VLATEST"))
        return REDISMODULE_OK;
    VerWaiter *w = calloc(1, sizeof(*w));
    if (w == NULL || (w->name = malloc(nameLen)) == NULL) {
        free(w);
        return objReplyError(ctx, OBJ_EW_OOM, "out of memory for a waiter");
    }
    memcpy(w->name, name, nameLen);
    w->nameLen = nameLen;
    w->newer = newer;
    w->bc = RedisModule_BlockClient(ctx, verWaiterReply, NULL, verWaiterFree, 0);
    RedisModule_SetDisconnectCallback(w->bc, verWaiterDisconnected);
    if (timeoutMs > 0) {
        w->timer = RedisModule_CreateTimer(ctx, (mstime_t)timeoutMs, verWaiterTimedOut, w);
        w->hasTimer = 1;
    }
    objListPushBack(&verWaiters, &w->link);
    verPollName(name, nameLen);
    verPollArm();
    return REDISMODULE_OK;
}

/* ---- the commands ------------------------------------------------------------------------- */

/* OBJ.VPUBLISH name version manifest-id [RETAIN n] [PARTS id ...] */
static int ObjVPublish_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    const char *name;
    size_t nameLen;
    uint64_t version, retain = 0;
    if (argc < 4)
        return RedisModule_WrongArity(ctx);
    if (verArgId(ctx, argv[1], "name", &name, &nameLen) == -1 ||
        verArgVersion(ctx, argv[2], "version", 1, &version) == -1)
        return REDISMODULE_OK;
    int firstPart = argc, i = 4;
    while (i < argc && firstPart == argc) {
        if (objArgIs(argv[i], "RETAIN") && i + 1 < argc) {
            if (verArgVersion(ctx, argv[i + 1], "RETAIN", 1, &retain) == -1)
                return REDISMODULE_OK;
            i += 2;
        } else if (objArgIs(argv[i], "PARTS")) {
            firstPart = i + 1;
        } else {
            return objReplyError(ctx, OBJ_EW_BADARG,
                                 "expected RETAIN n or PARTS id ... after the manifest id");
        }
    }
    /* The manifest and the parts: ids under the caller's read permission. */
    size_t nIds = 1 + (size_t)(argc - firstPart);
    const char **ids = calloc(nIds, sizeof(*ids));
    size_t *lens = calloc(nIds, sizeof(*lens));
    int rc = REDISMODULE_OK;
    if (ids == NULL || lens == NULL) {
        rc = objReplyError(ctx, OBJ_EW_OOM, "out of memory");
        goto out_free;
    }
    if (verArgId(ctx, argv[3], "manifest id", &ids[0], &lens[0]) == -1 ||
        objAclCheckIds(ctx, argv, 3, 1, OBJ_ACL_READ) == -1 ||
        objAclCheckIds(ctx, argv, firstPart, argc - firstPart, OBJ_ACL_READ) == -1)
        goto out_free;
    for (size_t k = 1; k < nIds; k++)
        if (verArgId(ctx, argv[firstPart + (int)k - 1], "part id", &ids[k], &lens[k]) == -1)
            goto out_free;
    rc =
        verRun(ctx, DIR_V_PUBLISH, name, nameLen, version, retain, nIds, ids, lens, "OBJ.VPUBLISH");
out_free:
    free(ids);
    free(lens);
    return rc;
}

/* OBJ.VLATEST name [NEWER v] [TIMEOUT ms] */
static int ObjVLatest_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    const char *name;
    size_t nameLen;
    uint64_t newer = 0, timeoutMs = 0;
    int hasNewer = 0;
    if (argc < 2 || argc % 2 != 0)
        return RedisModule_WrongArity(ctx);
    if (verArgId(ctx, argv[1], "name", &name, &nameLen) == -1)
        return REDISMODULE_OK;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (objArgIs(argv[i], "NEWER")) {
            if (verArgVersion(ctx, argv[i + 1], "NEWER", 0, &newer) == -1)
                return REDISMODULE_OK;
            hasNewer = 1;
        } else if (objArgIs(argv[i], "TIMEOUT")) {
            size_t len;
            const char *s = RedisModule_StringPtrLen(argv[i + 1], &len);
            if (objArgTimeout(ctx, s, len, &timeoutMs) == -1)
                return REDISMODULE_OK;
        } else {
            return objReplyError(ctx, OBJ_EW_BADARG, "expected NEWER v or TIMEOUT ms");
        }
    }
    if (!hasNewer)
        return verRun(ctx, DIR_V_LATEST, name, nameLen, 0, 0, 0, NULL, NULL, "OBJ.VLATEST");
    return verBlockNewer(ctx, name, nameLen, newer, timeoutMs);
}

/* OBJ.VGET name version, OBJ.VDROP name version */
static int verNameVersion(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, DirVerKind kind,
                          const char *cmd)
{
    const char *name;
    size_t nameLen;
    uint64_t version;
    if (argc != 3)
        return RedisModule_WrongArity(ctx);
    if (verArgId(ctx, argv[1], "name", &name, &nameLen) == -1 ||
        verArgVersion(ctx, argv[2], "version", 1, &version) == -1)
        return REDISMODULE_OK;
    return verRun(ctx, kind, name, nameLen, version, 0, 0, NULL, NULL, cmd);
}

static int ObjVGet_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    return verNameVersion(ctx, argv, argc, DIR_V_GET, "OBJ.VGET");
}

static int ObjVDrop_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    return verNameVersion(ctx, argv, argc, DIR_V_DROP, "OBJ.VDROP");
}

/* OBJ.VLIST name */
static int ObjVList_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    const char *name;
    size_t nameLen;
    if (argc != 2)
        return RedisModule_WrongArity(ctx);
    if (verArgId(ctx, argv[1], "name", &name, &nameLen) == -1)
        return REDISMODULE_OK;
    return verRun(ctx, DIR_V_LIST, name, nameLen, 0, 0, 0, NULL, NULL, "OBJ.VLIST");
}

/* OBJ.PURGE id [id ...] */
static int ObjPurge_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    if (argc < 2)
        return RedisModule_WrongArity(ctx);
    size_t n = (size_t)argc - 1;
    const char **ids = calloc(n, sizeof(*ids));
    size_t *lens = calloc(n, sizeof(*lens));
    int rc = REDISMODULE_OK;
    if (ids == NULL || lens == NULL) {
        rc = objReplyError(ctx, OBJ_EW_OOM, "out of memory");
        goto out_free;
    }
    for (size_t i = 0; i < n; i++)
        if (verArgId(ctx, argv[i + 1], "object id", &ids[i], &lens[i]) == -1)
            goto out_free;
    rc = verRun(ctx, DIR_V_PURGE, "", 0, 0, 0, n, ids, lens, "OBJ.PURGE");
out_free:
    free(ids);
    free(lens);
    return rc;
}

/* ---- registration ---------------------------------------------------------------------------- */

static int purgeIdCount(RedisModuleString **argv, int argc)
{
    return argc - 1;
}

int objVersionsRegisterCommands(RedisModuleCtx *ctx)
{
    static const ObjCommandDef defs[] = {
        {"obj.vpublish", ObjVPublish_RedisCommand, "write", -4,
         "Make a version of a name current, atomically, with its manifest and parts",
         "O(P) in the parts", NULL, OBJ_ACL_UPDATE, NULL},
        {"obj.vlatest", ObjVLatest_RedisCommand, "readonly", -2,
         "The latest version of a name; NEWER v blocks until one above v exists", "O(1)", NULL,
         OBJ_ACL_READ, NULL},
        {"obj.vget", ObjVGet_RedisCommand, "readonly", 3, "The manifest id of a version", "O(1)",
         NULL, OBJ_ACL_READ, NULL},
        {"obj.vlist", ObjVList_RedisCommand, "readonly", 2, "Every version of a name, oldest first",
         "O(V) in the versions", NULL, OBJ_ACL_READ, NULL},
        {"obj.vdrop", ObjVDrop_RedisCommand, "write", 3,
         "Drop a version; its objects no other version names are purged", "O(V) in the versions",
         NULL, OBJ_ACL_DELETE, NULL},
        {"obj.purge", ObjPurge_RedisCommand, "write", -2,
         "Delete objects on every node, replicas included, and keep them from coming back",
         "O(N) in the ids", NULL, OBJ_ACL_DELETE, purgeIdCount},
    };
    return objCommandTableRegister(ctx, defs, sizeof(defs) / sizeof(defs[0]));
}
