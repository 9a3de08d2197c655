/*
 * commands.c - the OBJ.* command handlers and their registration.
 *
 * Every handler follows the same order: arity, then parse and validate every
 * argument, and only then lock the table and change state, so that a
 * command answering an error has changed nothing. Object bytes are copied
 * outside the table lock: a created object belongs to one client (served by
 * this thread only) and a sealed one is pinned for the duration of a copy.
 * Error replies begin with the code word the README lists.
 */
#include <stdio.h>
#include <string.h>

#include "node.h"
#include "remote.h"
#include "commands.h"
#include "waiters.h"
#include "acl.h"
#include "cmdtable.h"
#include "reply.h"
#include "args.h"
#include "stats.h"
#include "spill.h"
#include "sealer.h"
#include "copies.h"
#include "common/util.h"

/* ---- argument parsing --------------------------------------------------------- */

/* For commands of the form `OBJ.X id`: check the arity and the id. Returns
 * 0, or -1 after replying with the error. */
static int argOnlyId(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, const char **id,
                     size_t *len)
{
    if (argc != 2) {
        RedisModule_WrongArity(ctx);
        return -1;
    }
    return objArgId(ctx, argv[1], id, len);
}

/* Parse a non-negative integer argument; replies BADARG naming it on error. */
static int argU64(RedisModuleCtx *ctx, RedisModuleString *arg, const char *what, uint64_t *out)
{
    size_t len;
    const char *s = RedisModule_StringPtrLen(arg, &len);

    if (utilParseU64(s, len, out) == -1) {
        objReplyError(ctx, OBJ_EW_BADARG, "%s must be a non-negative integer", what);
        return -1;
    }
    return 0;
}

/* Options after the fixed arguments. Each handler says which it accepts. */
typedef struct ObjOpts {
    RedisModuleString *meta;
    long long timeoutMs; /* -1: not given */
    int withMeta;
    RedisModuleString *match;
    uint64_t count;
    uint32_t replicas; /* 0: not given */
    long long waitMs;  /* -1: not given */
} ObjOpts;

enum {
    OPT_META = 1,
    OPT_TIMEOUT = 2,
    OPT_WITHMETA = 4,
    OPT_MATCH = 8,
    OPT_COUNT = 16,
    OPT_REPLICAS = 32,
    OPT_WAIT = 64
};

/* Parse argv[from..argc) as options from the `allowed` set. Replies BADARG
 * and returns -1 on an unknown or repeated option or a missing value. */
static int argOptions(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int from,
                      int allowed, ObjOpts *o)
{
    int seen = 0;

    memset(o, 0, sizeof(*o));
    o->timeoutMs = -1;
    o->waitMs = -1;
    o->count = 10;
    for (int i = from; i < argc; i++) {
        int opt = 0, hasValue = 1;
        if (objArgIs(argv[i], "META"))
            opt = OPT_META;
        else if (objArgIs(argv[i], "TIMEOUT"))
            opt = OPT_TIMEOUT;
        else if (objArgIs(argv[i], "WITHMETA"))
            opt = OPT_WITHMETA, hasValue = 0;
        else if (objArgIs(argv[i], "MATCH"))
            opt = OPT_MATCH;
        else if (objArgIs(argv[i], "COUNT"))
            opt = OPT_COUNT;
        else if (objArgIs(argv[i], "REPLICAS"))
            opt = OPT_REPLICAS;
        else if (objArgIs(argv[i], "WAIT"))
            opt = OPT_WAIT;
        if (!(opt & allowed) || (seen & opt)) {
            size_t len;
            const char *s = RedisModule_StringPtrLen(argv[i], &len);
            objReplyError(ctx, OBJ_EW_BADARG, "%s option '%.*s'",
                          (seen & opt) ? "repeated" : "unknown", (int)(len > 40 ? 40 : len), s);
            return -1;
        }
        seen |= opt;
        if (hasValue && i + 1 >= argc) {
            objReplyError(ctx, OBJ_EW_BADARG, "option needs a value");
            return -1;
        }
        uint64_t v;
        switch (opt) {
            case OPT_META:
                o->meta = argv[++i];
                break;
            case OPT_WITHMETA:
                o->withMeta = 1;
                break;
            case OPT_MATCH:
                o->match = argv[++i];
                break;
            case OPT_TIMEOUT: {
                size_t len;
                const char *s = RedisModule_StringPtrLen(argv[++i], &len);
                if (objArgTimeout(ctx, s, len, &v) == -1)
                    return -1;
                o->timeoutMs = (long long)v;
                break;
            }
            case OPT_REPLICAS: {
                size_t len;
                const char *s = RedisModule_StringPtrLen(argv[++i], &len);
                if (utilParseU64(s, len, &v) == -1 || v < 1 ||
                    v > (uint64_t)objNode.cfg.replicasMax) {
                    objReplyError(ctx, OBJ_EW_BADARG,
                                  "REPLICAS must be an integer from 1 to %lld (replicas-max)",
                                  objNode.cfg.replicasMax);
                    return -1;
                }
                o->replicas = (uint32_t)v;
                break;
            }
            case OPT_WAIT: {
                size_t len;
                const char *s = RedisModule_StringPtrLen(argv[++i], &len);
                if (objArgTimeout(ctx, s, len, &v) == -1)
                    return -1;
                o->waitMs = (long long)v;
                break;
            }
            case OPT_COUNT:
                if (argU64(ctx, argv[++i], "COUNT", &v) == -1)
                    return -1;
                if (v == 0) {
                    objReplyError(ctx, OBJ_EW_BADARG, "COUNT must be positive");
                    return -1;
                }
                o->count = v;
                break;
        }
    }
    return 0;
}

/* ---- commands --------------------------------------------------------------------- */

/* The replica count a put or create asks for: REPLICAS, else the node's
 * default `replicas` (never above replicas-max). */
static uint32_t optWant(const ObjOpts *o)
{
    long long want = o->replicas ? o->replicas : objNode.cfg.replicas;

    return (uint32_t)(want > objNode.cfg.replicasMax ? objNode.cfg.replicasMax : want);
}

/* How long a seal waits for its copies: WAIT, else replica-timeout. */
static long long optWait(const ObjOpts *o)
{
    return o->waitMs >= 0 ? o->waitMs : objNode.cfg.replicaTimeoutMs;
}

/* Seal e (this client's) and answer: OK for an object of one copy; for
 * more, the number of holders once the copies are placed or the wait ran
 * out (a blocked client), or 1 at once where the client cannot wait. */
static int sealAndAnswer(RedisModuleCtx *ctx, ObjEntry *e, long long waitMs)
{
    int blocked = e->want >= 2 && copiesExpect(ctx, e, waitMs);

    sealerSeal(e, RedisModule_GetClientId(ctx));
    waitersRecheck(e->id, e->idLen);
    if (blocked)
        return REDISMODULE_OK;
    if (e->want >= 2)
        return RedisModule_ReplyWithLongLong(ctx, 1);
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

static SpillFinish putFinish, createFinish;

/* OBJ.PUT id data [META m] [REPLICAS k] [WAIT ms] */
static int ObjPut_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    const char *id;
    size_t idLen, dataLen, metaLen = 0;
    ObjOpts o;
    ObjEntry *e;

    if (argc < 3)
        return RedisModule_WrongArity(ctx);
    if (objArgId(ctx, argv[1], &id, &idLen) == -1 ||
        argOptions(ctx, argv, argc, 3, OPT_META | OPT_REPLICAS | OPT_WAIT, &o) == -1 ||
        copiesRefuseWhileDraining(ctx))
        return REDISMODULE_OK;
    const char *data = RedisModule_StringPtrLen(argv[2], &dataLen);
    const char *meta = o.meta ? RedisModule_StringPtrLen(o.meta, &metaLen) : "";
    uint64_t holder = RedisModule_GetClientId(ctx);

    objTableLock(objNode.table);
    ObjStatus st = objTableCreateEntry(objNode.table, id, idLen, dataLen, metaLen, holder, &e);
    if (st == OBJ_ST_OK)
        e->want = optWant(&o);
    objTableUnlock(objNode.table);
    if (st == OBJ_ST_OOM &&
        spillBlockCreate(ctx, argv[1], argv[2], dataLen, o.meta, optWant(&o), putFinish) == 0)
        return REDISMODULE_OK; /* the spill tier makes room; the client waits */
    if (st != OBJ_ST_OK)
        return objReplyStatus(ctx, st, "");
    return putFinish(ctx, e, data, dataLen, meta, metaLen, optWait(&o));
}

/* The rest of OBJ.PUT once e is created for this client: write, seal,
 * publish, answer (sealAndAnswer). Also after the client waited for room
 * (a SpillFinish, waitMs 0). */
static int putFinish(RedisModuleCtx *ctx, ObjEntry *e, const char *data, size_t dataLen,
                     const char *meta, size_t metaLen, long long waitMs)
{
    memcpy(objNode.arena.base + e->offset, data, dataLen);
    memcpy(objNode.arena.base + e->offset + dataLen, meta, metaLen);
    objNode.cnt.puts++;
    return sealAndAnswer(ctx, e, waitMs);
}

/* OBJ.CREATE id size [META m] [REPLICAS k] */
static int ObjCreate_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    const char *id;
    size_t idLen, metaLen = 0;
    uint64_t size;
    ObjOpts o;
    ObjEntry *e;

    if (argc < 3)
        return RedisModule_WrongArity(ctx);
    if (objArgId(ctx, argv[1], &id, &idLen) == -1 || argU64(ctx, argv[2], "size", &size) == -1 ||
        argOptions(ctx, argv, argc, 3, OPT_META | OPT_REPLICAS, &o) == -1 ||
        copiesRefuseWhileDraining(ctx))
        return REDISMODULE_OK;
    const char *meta = o.meta ? RedisModule_StringPtrLen(o.meta, &metaLen) : "";

    objTableLock(objNode.table);
    ObjStatus st = objTableCreateEntry(objNode.table, id, idLen, size, metaLen,
                                       RedisModule_GetClientId(ctx), &e);
    if (st == OBJ_ST_OK)
        e->want = optWant(&o);
    objTableUnlock(objNode.table);
    if (st == OBJ_ST_OOM &&
        spillBlockCreate(ctx, argv[1], NULL, size, o.meta, optWant(&o), createFinish) == 0)
        return REDISMODULE_OK; /* the spill tier makes room; the client waits */
    if (st != OBJ_ST_OK)
        return objReplyStatus(ctx, st, "");
    return createFinish(ctx, e, NULL, size, meta, metaLen, 0);
}

/* The rest of OBJ.CREATE once e (size data bytes; data is NULL) is created
 * for this client: clear, write the metadata, reply the offset. */
static int createFinish(RedisModuleCtx *ctx, ObjEntry *e, const char *data, size_t size,
                        const char *meta, size_t metaLen, long long waitMs)
{
    (void)waitMs;
    /* Outside the lock: only this client can touch e. The metadata is
     * written next, so only the data part needs clearing. */
    objTableClearStale(e, objNode.arena.base, size);
    memcpy(objNode.arena.base + e->offset + size, meta, metaLen);
    RedisModule_ReplyWithArray(ctx, 6);
    RedisModule_ReplyWithSimpleString(ctx, "offset");
    RedisModule_ReplyWithLongLong(ctx, (long long)e->offset);
    RedisModule_ReplyWithSimpleString(ctx, "size");
    RedisModule_ReplyWithLongLong(ctx, (long long)size);
    /* The creator's way to tell, after OBJ.SEAL, that an OBJ.PIN got this object
     * and not one made under the id since. */
    RedisModule_ReplyWithSimpleString(ctx, "gen");
    return RedisModule_ReplyWithLongLong(ctx, (long long)e->gen);
}

/* Find the created object id that this client may change; replies and
 * returns NULL when there is none. Caller holds the table lock. */
static ObjEntry *ownCreated(RedisModuleCtx *ctx, const char *id, size_t idLen)
{
    ObjEntry *e = objTableFind(objNode.table, id, idLen);

    if (!e) {
        objReplyStatus(ctx, OBJ_ST_NOTFOUND, "");
        return NULL;
    }
    if (e->state != OBJ_CREATED) {
        objReplyError(ctx, OBJ_EW_WRONGSTATE, "the object is sealed (immutable)");
        return NULL;
    }
    if (e->creator != RedisModule_GetClientId(ctx)) {
        objReplyError(ctx, OBJ_EW_WRONGSTATE, "the object is being created by another connection");
        return NULL;
    }
    return e;
}

/* OBJ.WRITE id offset data */
static int ObjWrite_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    const char *id;
    size_t idLen, dataLen;
    uint64_t off;

    if (argc != 4)
        return RedisModule_WrongArity(ctx);
    if (objArgId(ctx, argv[1], &id, &idLen) == -1 || argU64(ctx, argv[2], "offset", &off) == -1)
        return REDISMODULE_OK;
    const char *data = RedisModule_StringPtrLen(argv[3], &dataLen);

    objTableLock(objNode.table);
    ObjEntry *e = ownCreated(ctx, id, idLen);
    objTableUnlock(objNode.table);
    if (!e)
        return REDISMODULE_OK;
    if (off > e->dataSize || dataLen > e->dataSize - off) {
        return objReplyError(ctx, OBJ_EW_BADARG,
                             "write of %zu bytes at offset %llu passes the end (%llu)", dataLen,
                             (unsigned long long)off, (unsigned long long)e->dataSize);
    }
    memcpy(objNode.arena.base + e->offset + off, data, dataLen);
    return RedisModule_ReplyWithLongLong(ctx, (long long)dataLen);
}

/* OBJ.SEAL id [REPLICAS k] [WAIT ms] */
static int ObjSeal_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    const char *id;
    size_t idLen;
    ObjOpts o;

    if (argc < 2)
        return RedisModule_WrongArity(ctx);
    if (objArgId(ctx, argv[1], &id, &idLen) == -1 ||
        argOptions(ctx, argv, argc, 2, OPT_REPLICAS | OPT_WAIT, &o) == -1)
        return REDISMODULE_OK;
    objTableLock(objNode.table);
    ObjEntry *e = ownCreated(ctx, id, idLen);
    if (e && o.replicas)
        e->want = o.replicas;
    objTableUnlock(objNode.table);
    if (!e)
        return REDISMODULE_OK;
    return sealAndAnswer(ctx, e, optWait(&o));
}

/* OBJ.ABORT id */
static int ObjAbort_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    const char *id;
    size_t idLen;

    if (argOnlyId(ctx, argv, argc, &id, &idLen) == -1)
        return REDISMODULE_OK;
    objTableLock(objNode.table);
    ObjEntry *e = ownCreated(ctx, id, idLen);
    if (e)
        objTableAbort(objNode.table, e, RedisModule_GetClientId(ctx));
    objTableUnlock(objNode.table);
    if (!e)
        return REDISMODULE_OK;
    waitersRecheck(id, idLen);
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

/* OBJ.GET id [TIMEOUT ms] [WITHMETA] and OBJ.PIN id [TIMEOUT ms]: answer now
 * if sealed, else wait (a created object always, a missing one with TIMEOUT). */
static int getOrPin(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int isPin)
{
    const char *id;
    size_t idLen;
    ObjOpts o;

    if (argc < 2)
        return RedisModule_WrongArity(ctx);
    if (objArgId(ctx, argv[1], &id, &idLen) == -1 ||
        argOptions(ctx, argv, argc, 2, OPT_TIMEOUT | (isPin ? 0 : OPT_WITHMETA), &o) == -1)
        return REDISMODULE_OK;
    ObjReplyKind kind = isPin ? OBJ_REPLY_PIN : o.withMeta ? OBJ_REPLY_GET_META : OBJ_REPLY_GET;

    objTableLock(objNode.table);
    ObjEntry *e = objTableFind(objNode.table, id, idLen);
    int sealed = e && e->state == OBJ_SEALED;
    int away = sealed && (e->tier == OBJ_TIER_SPILLED || e->tier == OBJ_TIER_RESTORING);
    objTableUnlock(objNode.table);
    if (sealed)
        spillCountRead(!away);
    if (away)
        return spillBlockRestore(ctx, id, idLen, kind);
    if (sealed || (!e && o.timeoutMs < 0))
        return objReplyObject(ctx, id, idLen, kind);
    return waitersBlock(ctx, id, idLen, o.timeoutMs < 0 ? 0 : o.timeoutMs, o.timeoutMs >= 0, kind);
}

static int ObjGet_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    return getOrPin(ctx, argv, argc, 0);
}

static int ObjPin_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    return getOrPin(ctx, argv, argc, 1);
}

/* OBJ.RELEASE id [GEN g | OFFSET o]: without GEN or OFFSET, the pin of the
 * one object this connection pins under id (AMBIGUOUS when it pins two). */
static int ObjRelease_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    const char *id;
    size_t idLen;
    ObjPinSel sel = OBJ_PIN_SOLE;
    uint64_t value = 0;

    if (argc != 2 && argc != 4)
        return RedisModule_WrongArity(ctx);
    if (objArgId(ctx, argv[1], &id, &idLen) == -1)
        return REDISMODULE_OK;
    if (argc == 4) {
        if (objArgIs(argv[2], "GEN")) {
            sel = OBJ_PIN_GEN;
        } else if (objArgIs(argv[2], "OFFSET")) {
            sel = OBJ_PIN_OFFSET;
        } else {
            return objReplyError(ctx, OBJ_EW_BADARG, "expected GEN g or OFFSET o");
        }
        if (argU64(ctx, argv[3], sel == OBJ_PIN_GEN ? "GEN" : "OFFSET", &value) == -1)
            return REDISMODULE_OK;
    }
    objTableLock(objNode.table);
    ObjStatus st =
        objTableRelease(objNode.table, id, idLen, RedisModule_GetClientId(ctx), sel, value);
    objTableUnlock(objNode.table);
    if (st == OBJ_ST_OK)
        objNode.cnt.releases++;
    return objReplyStatus(ctx, st,
                          sel == OBJ_PIN_SOLE ? "this connection holds no pin on the object"
                                              : "this connection holds no pin on that object");
}

/* OBJ.DEL id */
static int ObjDel_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    const char *id;
    size_t idLen;

    if (argOnlyId(ctx, argv, argc, &id, &idLen) == -1)
        return REDISMODULE_OK;
    objTableLock(objNode.table);
    ObjEntry *e = objTableFind(objNode.table, id, idLen);
    int copies =
        e && e->state == OBJ_SEALED && e->want >= 2 && objTableCopyOf(e) != OBJ_COPY_REPLICA;
    ObjStatus st = e ? objTableDelete(objNode.table, e) : OBJ_ST_NOTFOUND;
    objTableUnlock(objNode.table);
    if (st == OBJ_ST_OK || st == OBJ_ST_DEFERRED) {
        /* The purge first (one queue: it reaches the directory before the
         * unpublish): its tombstone outlives the last location, so a copy
         * whose publish is still on its way is refused and deleted too. */
        if (copies && objRemoteDirRunning())
            copiesDeleted(id, idLen); /* its copies elsewhere go too */
        objRemoteUnpublish(id, idLen);
    }
    return objReplyStatus(ctx, st, "the object is not sealed; its creator can OBJ.ABORT it");
}

/* OBJ.EXISTS id */
static int ObjExists_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    const char *id;
    size_t idLen;

    if (argOnlyId(ctx, argv, argc, &id, &idLen) == -1)
        return REDISMODULE_OK;
    objTableLock(objNode.table);
    ObjEntry *e = objTableFind(objNode.table, id, idLen);
    int yes = e && e->state == OBJ_SEALED;
    objTableUnlock(objNode.table);
    return RedisModule_ReplyWithLongLong(ctx, yes);
}

/* OBJ.INFO id */
static int ObjInfo_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    const char *id;
    size_t idLen;

    if (argOnlyId(ctx, argv, argc, &id, &idLen) == -1)
        return REDISMODULE_OK;
    objTableLock(objNode.table);
    ObjEntry *found = objTableFind(objNode.table, id, idLen);
    ObjEntry e = found ? *found : (ObjEntry){0};
    objTableUnlock(objNode.table);
    if (!found)
        return objReplyStatus(ctx, OBJ_ST_NOTFOUND, "");
    char sum[17];
    snprintf(sum, sizeof(sum), "%016llx", (unsigned long long)e.checksum);
    static const char *const copyNames[] = {"primary", "protected", "replica"};
    RedisModule_ReplyWithArray(ctx, 26);
    RedisModule_ReplyWithSimpleString(ctx, "id");
    RedisModule_ReplyWithStringBuffer(ctx, id, idLen);
    RedisModule_ReplyWithSimpleString(ctx, "state");
    RedisModule_ReplyWithSimpleString(ctx, e.state == OBJ_SEALED ? "sealed" : "created");
    RedisModule_ReplyWithSimpleString(ctx, "size");
    RedisModule_ReplyWithLongLong(ctx, (long long)e.dataSize);
    RedisModule_ReplyWithSimpleString(ctx, "meta_size");
    RedisModule_ReplyWithLongLong(ctx, (long long)e.metaSize);
    RedisModule_ReplyWithSimpleString(ctx, "offset");
    RedisModule_ReplyWithLongLong(ctx, e.tier == OBJ_TIER_SPILLED ? -1 : (long long)e.offset);
    RedisModule_ReplyWithSimpleString(ctx, "pins");
    RedisModule_ReplyWithLongLong(ctx, e.pins);
    RedisModule_ReplyWithSimpleString(ctx, "creator");
    RedisModule_ReplyWithLongLong(ctx, (long long)e.creator);
    RedisModule_ReplyWithSimpleString(ctx, "created_ms");
    RedisModule_ReplyWithLongLong(ctx, e.createdMs);
    RedisModule_ReplyWithSimpleString(ctx, "checksum");
    RedisModule_ReplyWithSimpleString(ctx, e.state != OBJ_SEALED ? ""
                                           : e.sumPending        ? "pending"
                                                                 : sum);
    RedisModule_ReplyWithSimpleString(ctx, "replica");
    RedisModule_ReplyWithLongLong(ctx, e.replica);
    RedisModule_ReplyWithSimpleString(ctx, "tier");
    RedisModule_ReplyWithSimpleString(ctx, spillTierName(e.tier));
    RedisModule_ReplyWithSimpleString(ctx, "replicas");
    RedisModule_ReplyWithLongLong(ctx, e.want ? e.want : 1);
    RedisModule_ReplyWithSimpleString(ctx, "copy");
    return RedisModule_ReplyWithSimpleString(ctx, copyNames[objTableCopyOf(&e)]);
}

/* OBJ.LIST cursor [MATCH pattern] [COUNT n]. The reply must start with the
 * cursor, which only the scan computes, so ids are copied out under the
 * table lock and everything else happens after it: the MATCH test (which
 * would otherwise hold the lock the transfer engine needs) and the ACL
 * check (ids the user may not read are left out). With MATCH the scan goes
 * a step at a time and stops early, with a cursor to go on from, once the
 * matching has done OBJ_LIST_MATCH_BUDGET units of work: a pattern can cost
 * far more than its length, and the main thread serves everyone else. */
#define OBJ_LIST_PATTERN_MAX  1024
#define OBJ_LIST_MATCH_BUDGET (1ULL << 20)

static uint64_t listBudgetStops; /* calls that ended early on the budget */

typedef struct ListScan {
    RedisModuleString **ids;
    size_t n, cap;
} ListScan;

static void listCollect(ObjEntry *e, void *arg)
{
    ListScan *ls = arg;

    if (ls->n == ls->cap) {
        ls->cap = ls->cap ? ls->cap * 2 : 16;
        ls->ids = RedisModule_Realloc(ls->ids, ls->cap * sizeof(*ls->ids));
    }
    ls->ids[ls->n++] = RedisModule_CreateString(NULL, e->id, e->idLen);
}

/* Keep ids[from..n) that match pat (all when pat is NULL) and that caller
 * may read, adding the matching work to *work. Can't fail. */
static void listFilter(ListScan *ls, size_t from, const char *pat, size_t patLen,
                       const ObjAclCaller *caller, uint64_t *work)
{
    size_t kept = from;

    for (size_t i = from; i < ls->n; i++) {
        size_t len;
        const char *id = RedisModule_StringPtrLen(ls->ids[i], &len);
        if ((!pat || utilGlobMatchCounted(pat, patLen, id, len, work)) &&
            objAclAllows(caller, ls->ids[i], OBJ_ACL_READ))
            ls->ids[kept++] = ls->ids[i];
        else
            RedisModule_FreeString(NULL, ls->ids[i]);
    }
    ls->n = kept;
}

/* Scan from cursor until count objects were visited, the table ends or (with
 * a pattern) the work budget is spent, leaving in ls the ids to show.
 * Returns the next cursor. */
static uint64_t listScan(uint64_t cursor, uint64_t count, const char *pat, size_t patLen,
                         const ObjAclCaller *caller, ListScan *ls)
{
    uint64_t visited = 0, work = 0;

    do {
        size_t from = ls->n;
        objTableLock(objNode.table);
        cursor = objTableScan(objNode.table, cursor, pat ? 1 : count, listCollect, ls);
        objTableUnlock(objNode.table);
        visited += ls->n - from;
        listFilter(ls, from, pat, patLen, caller, &work);
    } while (pat && cursor != 0 && visited < count && work < OBJ_LIST_MATCH_BUDGET);
    if (pat && cursor != 0 && visited < count)
        listBudgetStops++;
    return cursor;
}

static int ObjList_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    uint64_t cursor;
    ObjOpts o;
    ListScan ls = {0};
    ObjAclCaller caller;
    const char *pat = NULL;
    size_t patLen = 0;

    if (argc < 2)
        return RedisModule_WrongArity(ctx);
    if (argU64(ctx, argv[1], "cursor", &cursor) == -1 ||
        argOptions(ctx, argv, argc, 2, OPT_MATCH | OPT_COUNT, &o) == -1)
        return REDISMODULE_OK;
    if (o.match)
        pat = RedisModule_StringPtrLen(o.match, &patLen);
    if (patLen > OBJ_LIST_PATTERN_MAX) {
        return objReplyError(ctx, OBJ_EW_BADARG, "MATCH pattern must be at most %d bytes",
                             OBJ_LIST_PATTERN_MAX);
    }
    objAclCallerGet(ctx, &caller);
    uint64_t next = listScan(cursor, o.count, pat, patLen, &caller, &ls);
    objAclCallerFree(&caller);

    char cur[24];
    snprintf(cur, sizeof(cur), "%llu", (unsigned long long)next);
    RedisModule_ReplyWithArray(ctx, 2);
    RedisModule_ReplyWithStringBuffer(ctx, cur, strlen(cur));
    RedisModule_ReplyWithArray(ctx, (long)ls.n);
    for (size_t i = 0; i < ls.n; i++) {
        RedisModule_ReplyWithString(ctx, ls.ids[i]);
        RedisModule_FreeString(NULL, ls.ids[i]);
    }
    RedisModule_Free(ls.ids);
    return REDISMODULE_OK;
}

/* ---- statistics -------------------------------------------------------------------- */

/* The store's fields of OBJ.STATS / INFO objstore (see stats.h). */
void objCommandsStats(ObjStatSink *sink)
{
    ObjTableStats ts;
    AllocStats as;

    objTableLock(objNode.table);
    objTableGetStats(objNode.table, &ts);
    objTableAllocStats(objNode.table, &as);
    objTableUnlock(objNode.table);
    objStatStr(sink, "arena_path", objNode.arena.path);
    objStatNum(sink, "arena_size", objNode.arena.size);
    objStatNum(sink, "arena_used", as.used);
    objStatNum(sink, "arena_free", as.free);
    objStatNum(sink, "arena_largest_free", as.largestFree);
    objStatNum(sink, "arena_free_ranges", as.freeBlocks);
    objStatNum(sink, "objects", ts.objects);
    objStatNum(sink, "objects_sealed", ts.sealed);
    objStatNum(sink, "objects_created", ts.created);
    objStatNum(sink, "objects_pinned", ts.pinnedObjects);
    objStatNum(sink, "objects_deleting", ts.deleting);
    objStatNum(sink, "bytes_sealed", ts.bytesSealed);
    objStatNum(sink, "puts", objNode.cnt.puts);
    objStatNum(sink, "creates", ts.creates);
    objStatNum(sink, "seals", ts.seals);
    objStatNum(sink, "aborts", ts.aborts);
    objStatNum(sink, "gets", objNode.cnt.gets);
    objStatNum(sink, "pins", objNode.cnt.pins);
    objStatNum(sink, "releases", objNode.cnt.releases);
    objStatNum(sink, "deletes", ts.deletes);
    objStatNum(sink, "deferred_deletes", ts.deferredDeletes);
    objStatNum(sink, "evictions", ts.evictions);
    objStatNum(sink, "oom_errors", ts.oomErrors);
    objStatNum(sink, "blocked_clients", waitersCount());
    objStatNum(sink, "blocked_total", objNode.cnt.blocked);
    objStatNum(sink, "list_budget_stops", listBudgetStops);
}

/* ---- registration ------------------------------------------------------------------ */

#define ARG(n, t, fl)                                                                              \
    {                                                                                              \
        .name = n, .type = REDISMODULE_ARG_TYPE_##t, .key_spec_index = -1, .flags = fl             \
    }
#define TOKARG(n, tok, t, fl)                                                                      \
    {                                                                                              \
        .name = n, .token = tok, .type = REDISMODULE_ARG_TYPE_##t, .key_spec_index = -1,           \
        .flags = fl                                                                                \
    }
#define OPTIONAL REDISMODULE_CMD_ARG_OPTIONAL

static RedisModuleCommandArg argsPut[] = {ARG("id", STRING, 0),
                                          ARG("data", STRING, 0),
                                          TOKARG("meta", "META", STRING, OPTIONAL),
                                          TOKARG("replicas", "REPLICAS", INTEGER, OPTIONAL),
                                          TOKARG("wait", "WAIT", INTEGER, OPTIONAL),
                                          {0}};
static RedisModuleCommandArg argsCreate[] = {ARG("id", STRING, 0),
                                             ARG("size", INTEGER, 0),
                                             TOKARG("meta", "META", STRING, OPTIONAL),
                                             TOKARG("replicas", "REPLICAS", INTEGER, OPTIONAL),
                                             {0}};
static RedisModuleCommandArg argsSeal[] = {ARG("id", STRING, 0),
                                           TOKARG("replicas", "REPLICAS", INTEGER, OPTIONAL),
                                           TOKARG("wait", "WAIT", INTEGER, OPTIONAL),
                                           {0}};
static RedisModuleCommandArg argsWrite[] = {
    ARG("id", STRING, 0), ARG("offset", INTEGER, 0), ARG("data", STRING, 0), {0}};
static RedisModuleCommandArg argsId[] = {ARG("id", STRING, 0), {0}};
static RedisModuleCommandArg argsGet[] = {ARG("id", STRING, 0),
                                          TOKARG("timeout", "TIMEOUT", INTEGER, OPTIONAL),
                                          TOKARG("withmeta", "WITHMETA", PURE_TOKEN, OPTIONAL),
                                          {0}};
static RedisModuleCommandArg argsPin[] = {
    ARG("id", STRING, 0), TOKARG("timeout", "TIMEOUT", INTEGER, OPTIONAL), {0}};
static RedisModuleCommandArg argsRelease[] = {
    ARG("id", STRING, 0),
    {.name = "which",
     .type = REDISMODULE_ARG_TYPE_ONEOF,
     .key_spec_index = -1,
     .flags = OPTIONAL,
     .subargs = (RedisModuleCommandArg[]){TOKARG("gen", "GEN", INTEGER, 0),
                                          TOKARG("offset", "OFFSET", INTEGER, 0),
                                          {0}}},
    {0}};
static RedisModuleCommandArg argsList[] = {ARG("cursor", INTEGER, 0),
                                           TOKARG("pattern", "MATCH", PATTERN, OPTIONAL),
                                           TOKARG("count", "COUNT", INTEGER, OPTIONAL),
                                           {0}};

/* `deny-script` on every command that ties state to the calling connection
 * (a created object it owns, pins it holds): a script's client never
 * disconnects, so what it created or pinned would never be given back. */
static const ObjCommandDef objCommands[] = {
    {"obj.put", ObjPut_RedisCommand, "write", -3,
     "Create, write and seal an object in one call (and place its copies)",
     "O(N) in the object size", argsPut, OBJ_ACL_INSERT, NULL},
    {"obj.create", ObjCreate_RedisCommand, "write deny-script", -3,
     "Reserve a created object (reading as zeros); returns its offset in the shared arena",
     "O(N) in the bytes an earlier object left in its range", argsCreate, OBJ_ACL_INSERT, NULL},
    {"obj.write", ObjWrite_RedisCommand, "write deny-script", 4,
     "Write bytes into a created object", "O(N) in the bytes written", argsWrite, OBJ_ACL_UPDATE,
     NULL},
    {"obj.seal", ObjSeal_RedisCommand, "write deny-script", -2,
     "Make a created object immutable and visible (and place its copies)",
     "O(1); the checksum of a large object is taken in the background", argsSeal, OBJ_ACL_UPDATE,
     NULL},
    {"obj.abort", ObjAbort_RedisCommand, "write fast deny-script", 2, "Discard a created object",
     "O(1)", argsId, OBJ_ACL_DELETE, NULL},
    {"obj.get", ObjGet_RedisCommand, "readonly", -2,
     "Return an object's bytes, waiting until it is sealed", "O(N) in the object size", argsGet,
     OBJ_ACL_READ, NULL},
    {"obj.pin", ObjPin_RedisCommand, "write deny-script", -2,
     "Pin a sealed object for zero-copy access and return where it lives", "O(1)", argsPin,
     OBJ_ACL_READ, NULL},
    {"obj.release", ObjRelease_RedisCommand, "write fast deny-script", -2,
     "Drop a pin taken by OBJ.PIN (of the object GEN or OFFSET names)",
     "O(P) in the pins of this connection", argsRelease, OBJ_ACL_READ, NULL},
    {"obj.del", ObjDel_RedisCommand, "write fast", 2,
     "Delete a sealed object (deferred while pinned)", "O(1)", argsId, OBJ_ACL_DELETE, NULL},
    {"obj.exists", ObjExists_RedisCommand, "readonly fast", 2,
     "Tell whether a sealed object exists", "O(1)", argsId, OBJ_ACL_READ, NULL},
    {"obj.info", ObjInfo_RedisCommand, "readonly fast", 2, "Describe an object", "O(1)", argsId,
     OBJ_ACL_READ, NULL},
    {"obj.list", ObjList_RedisCommand, "readonly", -2, "Iterate over sealed object ids",
     "O(1) per call, O(N) for a full iteration", argsList, 0, NULL},
    {"obj.stats", ObjStats_RedisCommand, "readonly fast", 1, "Store and arena statistics", "O(1)",
     NULL, 0, NULL},
};

int objCommandsRegister(RedisModuleCtx *ctx)
{
    if (objRemoteRegisterCommands(ctx) == REDISMODULE_ERR ||
        copiesRegisterCommands(ctx) == REDISMODULE_ERR) {
        RedisModule_Log(ctx, "warning", "cannot register the remote commands");
        return REDISMODULE_ERR;
    }
    return objCommandTableRegister(ctx, objCommands, sizeof(objCommands) / sizeof(objCommands[0]));
}
