/*
 * versions.c - named versions and the cluster-wide delete, in the
 * directory. A name's versions live in one hash, objstore:{<name>}:versions
 * (fields top, latest, m<v> = manifest id, p<v> = the ids version v names,
 * msgpack), so every change is one Lua script on one slot and a reader
 * never sees half a version. A purge turns an object's meta into a
 * tombstone (objstore:{<id>}:meta holding only tomb = size:meta_size:checksum,
 * with a TTL) and
 * appends the id to the purge log (the stream objstore:purgelog), which
 * every node's directory thread follows. How and what is promised:
 * docs/cluster.md, "Versions" and "Purge".
 */
#include "dirint.h"

#include "common/util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Lua shared by publish (retention) and drop: removes the versions listed in
 * drop from hash key, keeps `latest` the newest left, and returns the ids
 * the dropped versions named that no remaining version names. */
#define DIR_VER_DROP_FN                                                                            \
    "local function dropv(key, drop) "                                                             \
    "local gone = {} "                                                                             \
    "for _, d in ipairs(drop) do "                                                                 \
    "local p = redis.call('HGET', key, 'p' .. d) "                                                 \
    "if p then for _, id in ipairs(cmsgpack.unpack(p)) do gone[id] = true end end "                \
    "redis.call('HDEL', key, 'm' .. d, 'p' .. d) "                                                 \
    "end "                                                                                         \
    "local newest = nil "                                                                          \
    "for _, f in ipairs(redis.call('HKEYS', key)) do "                                             \
    "if string.sub(f, 1, 1) == 'p' then "                                                          \
    "for _, id in ipairs(cmsgpack.unpack(redis.call('HGET', key, f))) do gone[id] = nil end "      \
    "if newest == nil or tonumber(string.sub(f, 2)) > tonumber(newest) then "                      \
    "newest = string.sub(f, 2) end "                                                               \
    "end "                                                                                         \
    "end "                                                                                         \
    "if newest then redis.call('HSET', key, 'latest', newest) "                                    \
    "else redis.call('HDEL', key, 'latest') end "                                                  \
    "local out = {} for id in pairs(gone) do out[#out + 1] = id end "                              \
    "return out end "

/* KEYS[1] = the name's hash; ARGV = version, retain (0: keep all), manifest,
 * parts... Refuses a version not above every one published before (EXISTS),
 * else records it as the latest and drops the versions beyond retain.
 * Returns the ids to purge. */
static const char dirVerPublishScript[] = DIR_VER_DROP_FN
    "local top = tonumber(redis.call('HGET', KEYS[1], 'top') or '0') "
    "if tonumber(ARGV[1]) <= top then return redis.error_reply('EXISTS version ' .. ARGV[1] .. "
    "' is not greater than the latest published, ' .. string.format('%d', top)) end "
    "local ids = {} for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end "
    "redis.call('HSET', KEYS[1], 'top', ARGV[1], 'latest', ARGV[1], 'm' .. ARGV[1], ARGV[3], "
    "'p' .. ARGV[1], cmsgpack.pack(ids)) "
    "local keep = tonumber(ARGV[2]) "
    "local drop = {} "
    "if keep > 0 then "
    "local vs = {} "
    "for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do "
    "if string.sub(f, 1, 1) == 'm' then vs[#vs + 1] = tonumber(string.sub(f, 2)) end end "
    "table.sort(vs) "
    "for i = 1, #vs - keep do drop[#drop + 1] = string.format('%d', vs[i]) end "
    "end "
    "return dropv(KEYS[1], drop)";

/* KEYS[1] = the name's hash; ARGV[1] = version. Returns the ids to purge. */
static const char dirVerDropScript[] = DIR_VER_DROP_FN
    "if redis.call('EXISTS', KEYS[1]) == 0 then "
    "return redis.error_reply('NOTFOUND no model of that name (it has no versions)') end "
    "if redis.call('HEXISTS', KEYS[1], 'm' .. ARGV[1]) == 0 then "
    "return redis.error_reply('NOTFOUND no version ' .. ARGV[1] .. ' of that name') end "
    "return dropv(KEYS[1], {ARGV[1]})";

/* KEYS[1] = the name's hash. Returns {latest, manifest} read together, or nil. */
static const char dirVerLatestScript[] = "local l = redis.call('HGET', KEYS[1], 'latest') "
                                         "if not l then return false end "
                                         "return {l, redis.call('HGET', KEYS[1], 'm' .. l)}";

/* KEYS = meta, loc, prot; ARGV[1] = the tombstone's TTL. Turns a known
 * object's entry into a tombstone of its generation (the meta hash holding
 * only tomb = "size:meta_size:checksum", expiring; no location, no holder)
 * and returns that
 * generation, or nil for an id the directory does not know. */
static const char dirPurgeScript[] =
    "local m = redis.call('HMGET', KEYS[1], 'size', 'meta_size', 'checksum') "
    "if not m[3] then return false end "
    "local g = m[1] .. ':' .. m[2] .. ':' .. m[3] "
    "redis.call('DEL', KEYS[1], KEYS[2], KEYS[3]) "
    "redis.call('HSET', KEYS[1], 'tomb', g) "
    "redis.call('PEXPIRE', KEYS[1], ARGV[1]) "
    "return g";

/* ---- helpers ------------------------------------------------------------------------------ */

/* Runs one command for key alone and takes its reply (NULL: its shard could
 * not be reached, why copied to res as DIR_UNAVAILABLE). */
static redisReply *dirRunOne(const char *key, size_t keyLen, int argc, const char **argv,
                             const size_t *lens, DirResult *res)
{
    DirBatch b = {0};
    dirBatchAdd(&b, key, keyLen, argc, argv, lens);
    dirBatchRun(&b);
    redisReply *r = b.cmds[0].reply;
    b.cmds[0].reply = NULL;
    if (r == NULL)
        dirResultSet(res, DIR_UNAVAILABLE, "%s", dirCmdWhy(&b.cmds[0]));
    dirBatchFree(&b);
    return r;
}

/* Appends (version, id) to res's versions; can't fail. */
static void dirAddVersion(DirResult *res, uint64_t version, const char *id, size_t idLen)
{
    DirVersion *grown = realloc(res->versions, (res->nVersions + 1) * sizeof(*grown));
    if (grown == NULL)
        dirOom();
    res->versions = grown;
    DirVersion *v = &res->versions[res->nVersions++];
    v->version = version;
    v->id = dirMalloc(idLen + 1);
    memcpy(v->id, id, idLen);
    v->id[idLen] = '\0';
    v->idLen = idLen;
}

/* Copies an error reply into res: DIR_NOTFOUND for NOTFOUND, else
 * DIR_REFUSED. */
static void dirSetRefusal(DirResult *res, const redisReply *r)
{
    DirStatus st = strncmp(r->str, "NOTFOUND", 8) == 0 ? DIR_NOTFOUND : DIR_REFUSED;
    dirResultSet(res, st, "%.*s", (int)(r->len < 150 ? r->len : 150), r->str);
}

static int dirByVersion(const void *a, const void *b)
{
    const DirVersion *x = a, *y = b;
    return x->version < y->version ? -1 : x->version > y->version;
}

/* ---- purge -------------------------------------------------------------------------------- */

/*
 * Purges ids cluster-wide: one script per id on its slot makes a known id's
 * entry a tombstone, then each known id goes to the purge log (for the other
 * nodes) and to this node's own copy. res->known counts the known ids.
 * Returns 0, or -1 with res DIR_UNAVAILABLE when a shard did not answer
 * (what was done stays done; purging again is harmless).
 */
static int dirPurgeIds(char *const *ids, const size_t *idLens, size_t n, DirResult *res)
{
    DirBatch b = {0}, log = {0};
    char ttl[24];
    snprintf(ttl, sizeof(ttl), "%lld",
             dir.cfg.tombTtlMs > 0 ? dir.cfg.tombTtlMs : (long long)OBJ_DIR_TOMB_TTL_MS);
    for (size_t i = 0; i < n; i++) {
        size_t ml, ll, pl;
        char *meta = dirObjKey(ids[i], idLens[i], ":meta", &ml);
        char *loc = dirObjKey(ids[i], idLens[i], ":loc", &ll);
        char *prot = dirObjKey(ids[i], idLens[i], ":prot", &pl);
        const char *argv[] = {"EVAL", dirPurgeScript, "3", meta, loc, prot, ttl};
        size_t lens[] = {4, sizeof(dirPurgeScript) - 1, 1, ml, ll, pl, strlen(ttl)};
        dirBatchAdd(&b, meta, ml, 7, argv, lens);
        free(meta);
        free(loc);
        free(prot);
    }
    dirBatchRun(&b);
    int rc = 0;
    char maxLen[24];
    snprintf(maxLen, sizeof(maxLen), "%d", OBJ_DIR_PURGE_LOG_MAX);
    for (size_t i = 0; i < n; i++) {
        const redisReply *r = b.cmds[i].reply;
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            if (rc == 0)
                dirResultSet(res, DIR_UNAVAILABLE, "%s", r ? r->str : dirCmdWhy(&b.cmds[i]));
            rc = -1;
            continue;
        }
        if (r->type != REDIS_REPLY_STRING)
            continue;
        res->known++;
        const char *argv[] = {
            "XADD", OBJ_DIR_PURGE_LOG, "MAXLEN", "~", maxLen, "*", "id", ids[i], "gen", r->str};
        size_t lens[] = {
            4, sizeof(OBJ_DIR_PURGE_LOG) - 1, 6, 1, strlen(maxLen), 1, 2, idLens[i], 3, r->len};
        dirBatchAdd(&log, OBJ_DIR_PURGE_LOG, sizeof(OBJ_DIR_PURGE_LOG) - 1, 10, argv, lens);
        dirApplyPurge(ids[i], idLens[i], r->str, r->len);
    }
    dirBatchRun(&log);
    for (size_t i = 0; i < log.n; i++) {
        if (log.cmds[i].reply == NULL) {
            /* The tombstones stand: nodes find them when they re-publish. */
            dirNoteError("purge log not written: %s", dirCmdWhy(&log.cmds[i]));
            break;
        }
        dirAck(log.cmds[i].reply);
    }
    dirBatchFree(&log);
    dirBatchFree(&b);
    return rc;
}

/* Reads the replies of a script that returns ids to purge, and purges them
 * (failures there are logged; the version change itself stands). */
static void dirPurgeReturned(const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0)
        return;
    char **ids = dirCalloc(r->elements, sizeof(*ids));
    size_t *lens = dirCalloc(r->elements, sizeof(*lens));
    size_t n = 0;
    for (size_t i = 0; i < r->elements; i++) {
        if (r->element[i]->type != REDIS_REPLY_STRING)
            continue;
        ids[n] = r->element[i]->str;
        lens[n++] = r->element[i]->len;
    }
    DirResult *res = dirResultNew(NULL, 0);
    if (dirPurgeIds(ids, lens, n, res) != 0)
        dirLog("warning", "directory: purging the objects of dropped versions: %s", res->err);
    dirResultFree(res);
    free(ids);
    free(lens);
}

/*
 * Follows the purge log: on the first read it only notes where the log
 * ends (older purges are this node's business only through tombstones at
 * re-publish), then reads the entries after the last one seen and hands
 * each whose tombstone still stands to the node. Can't fail (a shard down:
 * tried again at the next poll).
 */
void dirFollowPurges(void)
{
    dir.nextPurgeMs = dirNowMs() + OBJ_DIR_PURGE_POLL_MS;
    DirResult *tmp = dirResultNew(NULL, 0);
    const char *key = OBJ_DIR_PURGE_LOG;
    size_t keyLen = sizeof(OBJ_DIR_PURGE_LOG) - 1;
    redisReply *r;
    if (dir.purgeLastId[0] == '\0') {
        const char *argv[] = {"XREVRANGE", key, "+", "-", "COUNT", "1"};
        size_t lens[] = {9, keyLen, 1, 1, 5, 1};
        r = dirRunOne(key, keyLen, 6, argv, lens, tmp);
        if (r != NULL && r->type == REDIS_REPLY_ARRAY) {
            const char *last = "0-0";
            if (r->elements == 1 && r->element[0]->type == REDIS_REPLY_ARRAY &&
                r->element[0]->elements == 2 &&
                r->element[0]->element[0]->type == REDIS_REPLY_STRING)
                last = r->element[0]->element[0]->str;
            snprintf(dir.purgeLastId, sizeof(dir.purgeLastId), "%s", last);
        }
        freeReplyObject(r);
        dirResultFree(tmp);
        return;
    }
    char from[64];
    snprintf(from, sizeof(from), "(%s", dir.purgeLastId);
    const char *argv[] = {"XRANGE", key, from, "+", "COUNT", "256"};
    size_t lens[] = {6, keyLen, strlen(from), 1, 5, 3};
    r = dirRunOne(key, keyLen, 6, argv, lens, tmp);
    dirResultFree(tmp);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        return;
    }
    /* Each entry: [entry id, [id, <id>, gen, <gen>]]; its tombstone is read
     * back so that an id re-created since (its tombstone gone) is kept. */
    DirBatch b = {0};
    const redisReply **ent = dirCalloc(r->elements ? r->elements : 1, sizeof(*ent));
    size_t n = 0;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
            e->element[0]->type != REDIS_REPLY_STRING)
            continue;
        snprintf(dir.purgeLastId, sizeof(dir.purgeLastId), "%s", e->element[0]->str);
        const redisReply *f = e->element[1];
        if (f->type != REDIS_REPLY_ARRAY || f->elements != 4 ||
            f->element[1]->type != REDIS_REPLY_STRING || f->element[3]->type != REDIS_REPLY_STRING)
            continue;
        size_t ml;
        char *meta = dirObjKey(f->element[1]->str, f->element[1]->len, ":meta", &ml);
        const char *hget[] = {"HGET", meta, "tomb"};
        size_t hgetLen[] = {4, ml, 4};
        dirBatchAdd(&b, meta, ml, 3, hget, hgetLen);
        free(meta);
        ent[n++] = f;
    }
    dirBatchRun(&b);
    for (size_t i = 0; i < n; i++) {
        const redisReply *t = b.cmds[i].reply, *gen = ent[i]->element[3];
        if (t != NULL && t->type == REDIS_REPLY_STRING && t->len == gen->len &&
            memcmp(t->str, gen->str, gen->len) == 0)
            dirApplyPurge(ent[i]->element[1]->str, ent[i]->element[1]->len, gen->str, gen->len);
    }
    dirBatchFree(&b);
    free(ent);
    freeReplyObject(r);
}

/* ---- version requests ---------------------------------------------------------------------- */

/* Fills res from a reply naming one version: {version, manifest} or a
 * manifest alone (version given). */
static void dirTakeOneVersion(const redisReply *r, uint64_t version, DirResult *res)
{
    if (r->type == REDIS_REPLY_ERROR) {
        dirSetRefusal(res, r);
    } else if (r->type == REDIS_REPLY_STRING) {
        dirAddVersion(res, version, r->str, r->len);
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
               r->element[0]->type == REDIS_REPLY_STRING &&
               r->element[1]->type == REDIS_REPLY_STRING &&
               utilParseU64(r->element[0]->str, r->element[0]->len, &version) == 0) {
        dirAddVersion(res, version, r->element[1]->str, r->element[1]->len);
    } else {
        dirResultSet(res, DIR_NOTFOUND, "NOTFOUND no version of that name");
    }
}

/* Fills res with every version in an HGETALL reply of the name's hash. */
static void dirTakeVersionList(const redisReply *r, DirResult *res)
{
    if (r->type == REDIS_REPLY_ERROR) {
        dirSetRefusal(res, r);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
        dirResultSet(res, DIR_NOTFOUND, "NOTFOUND no model of that name (it has no versions)");
        return;
    }
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        const redisReply *f = r->element[i], *v = r->element[i + 1];
        uint64_t version;
        if (f->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING && f->len > 1 &&
            f->str[0] == 'm' && utilParseU64(f->str + 1, f->len - 1, &version) == 0)
            dirAddVersion(res, version, v->str, v->len);
    }
    if (res->nVersions > 1)
        qsort(res->versions, res->nVersions, sizeof(*res->versions), dirByVersion);
}

/* Checks that every id of a publish (manifest and parts) is known to the
 * directory, one EXISTS each on its slot. Returns 0, or -1 with res set. */
static int dirCheckIdsKnown(const DirVerReq *v, DirResult *res)
{
    DirBatch b = {0};
    for (size_t i = 0; i < v->nIds; i++) {
        size_t ml;
        char *meta = dirObjKey(v->ids[i], v->idLens[i], ":meta", &ml);
        const char *argv[] = {"EXISTS", meta};
        size_t lens[] = {6, ml};
        dirBatchAdd(&b, meta, ml, 2, argv, lens);
        free(meta);
    }
    dirBatchRun(&b);
    int rc = 0;
    for (size_t i = 0; i < v->nIds && rc == 0; i++) {
        const redisReply *r = b.cmds[i].reply;
        if (r == NULL) {
            dirResultSet(res, DIR_UNAVAILABLE, "%s", dirCmdWhy(&b.cmds[i]));
            rc = -1;
        } else if (r->type != REDIS_REPLY_INTEGER || r->integer != 1) {
            dirResultSet(res, DIR_NOTFOUND,
                         "NOTFOUND %s '%.*s' is not sealed and published on any node",
                         i == 0 ? "manifest" : "part", (int)(v->idLens[i] > 64 ? 64 : v->idLens[i]),
                         v->ids[i]);
            rc = -1;
        }
    }
    dirBatchFree(&b);
    return rc;
}

/* One publish: its ids checked, then the script; the ids of versions
 * dropped by retention are purged. */
static void dirVerPublish(const DirOp *op, const char *key, size_t keyLen, DirResult *res)
{
    const DirVerReq *v = op->ver;
    if (dirCheckIdsKnown(v, res) != 0)
        return;
    char ver[24], keep[24];
    snprintf(ver, sizeof(ver), "%" PRIu64, v->version);
    snprintf(keep, sizeof(keep), "%" PRIu64, v->retain);
    size_t argc = 6 + v->nIds;
    const char **argv = dirCalloc(argc, sizeof(*argv));
    size_t *lens = dirCalloc(argc, sizeof(*lens));
    argv[0] = "EVAL";
    lens[0] = 4;
    argv[1] = dirVerPublishScript;
    lens[1] = sizeof(dirVerPublishScript) - 1;
    argv[2] = "1";
    lens[2] = 1;
    argv[3] = key;
    lens[3] = keyLen;
    argv[4] = ver;
    lens[4] = strlen(ver);
    argv[5] = keep;
    lens[5] = strlen(keep);
    for (size_t i = 0; i < v->nIds; i++) {
        argv[6 + i] = v->ids[i];
        lens[6 + i] = v->idLens[i];
    }
    redisReply *r = dirRunOne(key, keyLen, (int)argc, argv, lens, res);
    free(argv);
    free(lens);
    if (r == NULL)
        return;
    if (r->type == REDIS_REPLY_ERROR)
        dirSetRefusal(res, r);
    else
        dirPurgeReturned(r);
    freeReplyObject(r);
}

/* The request kinds on the name's hash other than publish and purge. */
static void dirVerOther(const DirOp *op, const char *key, size_t keyLen, DirResult *res)
{
    const DirVerReq *v = op->ver;
    char ver[24], field[32];
    snprintf(ver, sizeof(ver), "%" PRIu64, v->version);
    snprintf(field, sizeof(field), "m%" PRIu64, v->version);
    redisReply *r = NULL;
    if (v->kind == DIR_V_LATEST) {
        const char *argv[] = {"EVAL", dirVerLatestScript, "1", key};
        size_t lens[] = {4, sizeof(dirVerLatestScript) - 1, 1, keyLen};
        r = dirRunOne(key, keyLen, 4, argv, lens, res);
    } else if (v->kind == DIR_V_GET) {
        const char *argv[] = {"HGET", key, field};
        size_t lens[] = {4, keyLen, strlen(field)};
        r = dirRunOne(key, keyLen, 3, argv, lens, res);
    } else if (v->kind == DIR_V_LIST) {
        const char *argv[] = {"HGETALL", key};
        size_t lens[] = {7, keyLen};
        r = dirRunOne(key, keyLen, 2, argv, lens, res);
    } else {
        const char *argv[] = {"EVAL", dirVerDropScript, "1", key, ver};
        size_t lens[] = {4, sizeof(dirVerDropScript) - 1, 1, keyLen, strlen(ver)};
        r = dirRunOne(key, keyLen, 5, argv, lens, res);
    }
    if (r == NULL)
        return;
    if (v->kind == DIR_V_LIST)
        dirTakeVersionList(r, res);
    else if (v->kind == DIR_V_DROP && r->type == REDIS_REPLY_ERROR)
        dirSetRefusal(res, r);
    else if (v->kind == DIR_V_DROP)
        dirPurgeReturned(r);
    else if (r->type == REDIS_REPLY_NIL)
        dirResultSet(res, DIR_NOTFOUND, "NOTFOUND %s",
                     v->kind == DIR_V_GET ? "no such version of that name"
                                          : "that name has no version");
    else
        dirTakeOneVersion(r, v->version, res);
    freeReplyObject(r);
}

/* Answers one version request or purge and frees it; the callback runs
 * exactly once. */
void dirRunVersion(DirOp *op)
{
    DirResult *res = dirResultNew(op->id, op->idLen);
    if (!dir.haveMap) {
        dirResultSet(res, DIR_UNAVAILABLE, "%s", dir.lastIoError);
    } else if (op->ver->kind == DIR_V_PURGE) {
        dirPurgeIds(op->ver->ids, op->ver->idLens, op->ver->nIds, res);
    } else {
        size_t keyLen;
        char *key = dirObjKey(op->id, op->idLen, ":versions", &keyLen);
        if (op->ver->kind == DIR_V_PUBLISH)
            dirVerPublish(op, key, keyLen, res);
        else
            dirVerOther(op, key, keyLen, res);
        free(key);
    }
    op->cb(res, op->arg);
    dirOpFree(op);
}
