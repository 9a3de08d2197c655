/*
 * lookup.c - the directory's reads: object lookups (meta hash, location
 * and prot sets in one round, then the listed nodes' hashes the node cache cannot
 * answer; a holder counts when its prot entry is its current incarnation's),
 * single node lookups and listings of every live node. Each read
 * answers its callback exactly once, also when a shard is down. Replies are
 * parsed strictly: a malformed entry is the entry's fault (DIR_NOTFOUND),
 * never a crash.
 */
#include "dirint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* The value of field in an HGETALL reply, or NULL when absent or not a string. */
static const redisReply *dirHashGet(const redisReply *h, const char *field)
{
    size_t flen = strlen(field);
    for (size_t i = 0; i + 1 < h->elements; i += 2) {
        const redisReply *k = h->element[i];
        if (k->type == REDIS_REPLY_STRING && (size_t)k->len == flen &&
            memcmp(k->str, field, flen) == 0) {
            const redisReply *v = h->element[i + 1];
            return v->type == REDIS_REPLY_STRING ? v : NULL;
        }
    }
    return NULL;
}

/* Parses field as a plain decimal in [0, max]: digits only, no sign or
 * spaces. Returns 0 and sets *out, or -1. */
static int dirHashU64(const redisReply *h, const char *field, uint64_t max, uint64_t *out)
{
    const redisReply *v = dirHashGet(h, field);
    if (v == NULL || v->len < 1 || v->len > 20)
        return -1;
    uint64_t n = 0;
    for (size_t i = 0; i < v->len; i++) {
        unsigned d = (unsigned char)v->str[i] - '0';
        if (d > 9 || n > (UINT64_MAX - d) / 10)
            return -1;
        n = n * 10 + d;
    }
    if (n > max)
        return -1;
    *out = n;
    return 0;
}

/* Parses field as exactly 16 hex digits. Returns 0 and sets *out, or -1. */
static int dirHashHex64(const redisReply *h, const char *field, uint64_t *out)
{
    const redisReply *v = dirHashGet(h, field);
    return v != NULL ? utilParseHex64(v->str, v->len, out) : -1;
}

/* Copies field as a C string into buf (cap bytes with the NUL); it may be
 * empty but must fit and hold no NUL. Returns 0, or -1. */
static int dirHashText(const redisReply *h, const char *field, char *buf, size_t cap)
{
    const redisReply *v = dirHashGet(h, field);
    if (v == NULL || (size_t)v->len >= cap || memchr(v->str, '\0', (size_t)v->len) != NULL)
        return -1;
    memcpy(buf, v->str, (size_t)v->len);
    buf[v->len] = '\0';
    return 0;
}

/* Fills res's size fields, want and owner from a meta hash (want absent:
 * 1; owner absent: ""). Returns 0, or -1 with *why set. */
static int dirParseMeta(const redisReply *h, DirResult *res, const char **why)
{
    uint64_t want = 1;
    res->owner[0] = '\0';
    if (dirHashGet(h, "want") != NULL &&
        (dirHashU64(h, "want", UINT32_MAX, &want) != 0 || want == 0))
        *why = "want is not a positive decimal number";
    else if (dirHashGet(h, "owner") != NULL &&
             dirHashText(h, "owner", res->owner, sizeof(res->owner)) != 0)
        *why = "owner is not a node name";
    else if (dirHashU64(h, "size", UINT64_MAX, &res->size) != 0)
        *why = "size is not a decimal number";
    else if (dirHashU64(h, "meta_size", UINT64_MAX, &res->metaSize) != 0)
        *why = "meta_size is not a decimal number";
    else if (dirHashHex64(h, "checksum", &res->checksum) != 0)
        *why = "checksum is not 16 hex digits";
    else {
        res->want = (uint32_t)want;
        return 0;
    }
    return -1;
}

/* Fills a DirNode from a node hash. Returns 0, or -1 when a field is
 * missing or malformed; label, draining and boot may be absent ("", 0, 0). */
static int dirParseNode(const redisReply *h, const redisReply *name, DirNode *n)
{
    uint64_t tcpPort, rdmaPort, features, beat, draining = 0, boot = 0;
    n->label[0] = '\0';
    if (h->elements % 2 != 0 || dirHashText(h, "addr", n->addr, sizeof(n->addr)) != 0 ||
        (dirHashGet(h, "label") != NULL &&
         dirHashText(h, "label", n->label, sizeof(n->label)) != 0) ||
        (dirHashGet(h, "draining") != NULL && dirHashU64(h, "draining", 1, &draining) != 0) ||
        (dirHashGet(h, "boot") != NULL && dirHashU64(h, "boot", OBJ_DIR_BOOT_MAX, &boot) != 0) ||
        dirHashText(h, "rdma_addr", n->rdmaAddr, sizeof(n->rdmaAddr)) != 0 ||
        dirHashU64(h, "tcp_port", 65535, &tcpPort) != 0 ||
        dirHashU64(h, "rdma_port", 65535, &rdmaPort) != 0 ||
        dirHashU64(h, "features", UINT32_MAX, &features) != 0 ||
        dirHashU64(h, "heartbeat_ms", INT64_MAX, &beat) != 0)
        return -1;
    memcpy(n->name, name->str, (size_t)name->len);
    n->name[name->len] = '\0';
    n->tcpPort = (int)tcpPort;
    n->rdmaPort = (int)rdmaPort;
    n->features = (uint32_t)features;
    n->heartbeatMs = (int64_t)beat;
    n->draining = (int)draining;
    n->boot = boot;
    n->prot = 0; /* per object: set by the lookup from its prot set */
    return 0;
}

/* A node name as stored in a set is usable when it fits DirNode.name. */
static int dirNameValid(const redisReply *name)
{
    return name->type == REDIS_REPLY_STRING && name->len > 0 && name->len < OBJ_DIR_NAME_MAX &&
           memchr(name->str, '\0', (size_t)name->len) == NULL;
}

/* The cache slot of the node named name (len bytes, not empty), or NULL. */
static DirNodeCached *dirNodeCacheFind(const char *name, size_t len)
{
    for (int i = 0; i < OBJ_DIR_NODE_CACHE; i++) {
        DirNodeCached *c = &dir.nodeCache[i];
        if (strlen(c->node.name) == len && memcmp(c->node.name, name, len) == 0)
            return c;
    }
    return NULL;
}

/*
 * The cached entry of node name that may stand in for reading it at cacheNow
 * (a dirNowMs taken once per batch), or NULL: read within the last heartbeat
 * interval, and by an earlier batch, so that what a batch reads itself never
 * changes which of its names it asked for. cacheNow 0: no cache.
 */
static const DirNode *dirNodeCacheGet(const redisReply *name, int64_t cacheNow)
{
    if (cacheNow == 0)
        return NULL;
    const DirNodeCached *c = dirNodeCacheFind(name->str, (size_t)name->len);
    if (c == NULL || c->gen == dir.nodeCacheGen || cacheNow - c->readMs >= dir.cfg.heartbeatMs)
        return NULL;
    return &c->node;
}

/* Remember node n as read now by the current batch (replacing its older
 * entry, else a free slot, else the next one round-robin). Can't fail. */
static void dirNodeCachePut(const DirNode *n)
{
    DirNodeCached *slot = dirNodeCacheFind(n->name, strlen(n->name));
    for (int i = 0; i < OBJ_DIR_NODE_CACHE && !slot; i++)
        if (!dir.nodeCache[i].node.name[0])
            slot = &dir.nodeCache[i];
    if (!slot) {
        slot = &dir.nodeCache[dir.nodeCacheNext];
        dir.nodeCacheNext = (dir.nodeCacheNext + 1) % OBJ_DIR_NODE_CACHE;
    }
    slot->node = *n;
    slot->readMs = dirNowMs();
    slot->gen = dir.nodeCacheGen;
}

/* Forget the node named name (len bytes, not empty): its key has expired. */
static void dirNodeCacheForget(const char *name, size_t len)
{
    DirNodeCached *slot = dirNodeCacheFind(name, len);
    if (slot)
        memset(slot, 0, sizeof(*slot));
}

/* Adds an HGETALL of each usable name's node key to a batch, except for
 * names dirNodeCacheGet answers at cacheNow (0: none). */
static void dirAddNodeFetches(DirBatch *b, const redisReply *const *names, size_t n,
                              int64_t cacheNow)
{
    for (size_t i = 0; i < n; i++) {
        if (!dirNameValid(names[i]) || dirNodeCacheGet(names[i], cacheNow))
            continue;
        size_t keyLen;
        char *key = dirNodeKey(names[i]->str, (size_t)names[i]->len, &keyLen);
        const char *argv[] = {"HGETALL", key};
        size_t lens[] = {7, keyLen};
        dirBatchAdd(b, key, keyLen, 2, argv, lens);
        free(key);
    }
}

/*
 * Reads the node hashes that dirAddNodeFetches added for the same names and
 * the same cacheNow (starting at command *next of the run batch, which it
 * advances; names the cache answered take no command) into
 * res->nodes/res->count (live, well-formed nodes only), and keeps what it
 * read in the cache. gone[i] is set for names whose key has expired (when
 * gone is not NULL); *malformed counts names or hashes that could not be
 * used, *unreachable the nodes whose shard did not answer (why then says
 * why). Can't fail.
 */
static void dirCollectNodes(const DirBatch *b, size_t *next, const redisReply *const *names,
                            size_t n, int64_t cacheNow, DirResult *res, unsigned char *gone,
                            size_t *malformed, size_t *unreachable, char *why, size_t whyLen)
{
    res->nodes = dirCalloc(n, sizeof(DirNode));
    res->count = 0;
    *malformed = *unreachable = 0;
    for (size_t i = 0; i < n; i++) {
        if (!dirNameValid(names[i])) {
            (*malformed)++;
            continue;
        }
        const DirNode *cached = dirNodeCacheGet(names[i], cacheNow);
        if (cached) {
            res->nodes[res->count++] = *cached;
            continue;
        }
        const DirCmd *c = &b->cmds[(*next)++];
        const redisReply *h = c->reply;
        if (h == NULL) {
            (*unreachable)++;
            size_t whyN = strnlen(dirCmdWhy(c), whyLen - 1);
            memcpy(why, dirCmdWhy(c), whyN);
            why[whyN] = '\0';
        } else if (h->type == REDIS_REPLY_ARRAY && h->elements == 0) {
            if (gone != NULL)
                gone[i] = 1;
            dirNodeCacheForget(names[i]->str, (size_t)names[i]->len);
        } else if (h->type == REDIS_REPLY_ARRAY &&
                   dirParseNode(h, names[i], &res->nodes[res->count]) == 0) {
            dirNodeCachePut(&res->nodes[res->count]);
            res->count++;
        } else {
            (*malformed)++;
        }
    }
}

/* An error reply to a read: a wrong type means a malformed entry (that is the
 * entry's fault); anything else means the directory cannot answer. */
static void dirSetReplyError(DirResult *res, const redisReply *r, const char *what)
{
    if (strncmp(r->str, "WRONGTYPE", 9) == 0)
        dirResultSet(res, DIR_NOTFOUND, "malformed directory entry: %s has the wrong type", what);
    else
        dirResultSet(res, DIR_UNAVAILABLE, "directory error: %s", r->str);
}

/* The reads of each lookup, in this order, all on the id's slot. */
enum { DIR_LOOKUP_META, DIR_LOOKUP_LOC, DIR_LOOKUP_PROT, DIR_LOOKUP_CMDS };

/* Adds the reads of each lookup, its meta hash, its location set and its
 * prot set with the boots it was published by, to a batch; can't fail. */
static void dirAddLookups(DirBatch *b, DirOp *const *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t metaLen, locLen, protLen;
        char *metaKey = dirObjKey(ops[i]->id, ops[i]->idLen, ":meta", &metaLen);
        char *locKey = dirObjKey(ops[i]->id, ops[i]->idLen, ":loc", &locLen);
        char *protKey = dirObjKey(ops[i]->id, ops[i]->idLen, ":prot", &protLen);
        const char *hget[] = {"HGETALL", metaKey};
        size_t hgetLen[] = {7, metaLen};
        const char *smem[] = {"SMEMBERS", locKey};
        size_t smemLen[] = {8, locLen};
        const char *pmem[] = {"ZRANGE", protKey, "0", "-1", "WITHSCORES"};
        size_t pmemLen[] = {6, protLen, 1, 2, 10};
        dirBatchAdd(b, metaKey, metaLen, 2, hget, hgetLen);
        dirBatchAdd(b, locKey, locLen, 2, smem, smemLen);
        dirBatchAdd(b, protKey, protLen, 5, pmem, pmemLen);
        free(metaKey);
        free(locKey);
        free(protKey);
    }
}

/* Whether r is the answer of a read of a key of another type. */
static int dirIsWrongType(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "WRONGTYPE", 9) == 0;
}

/*
 * The verdict on one lookup from its first round (mc: the meta hash, then
 * the location set and the prot set). Returns 0 with r's status set, or 1
 * when the object exists and its listed nodes must be read first
 * (dirLookupNodesVerdict then sets the status). A prot key of another type
 * (a plain set of an earlier build) lists no holder: the next publish
 * replaces it.
 */
static int dirLookupMetaVerdict(DirResult *r, const DirCmd *mc)
{
    const DirCmd *lc = mc + DIR_LOOKUP_LOC, *pc = mc + DIR_LOOKUP_PROT;
    const redisReply *meta = mc->reply, *loc = lc->reply, *prot = pc->reply;
    const char *why = NULL;
    r->want = 1;
    if (meta == NULL || loc == NULL || prot == NULL)
        dirResultSet(r, DIR_UNAVAILABLE, "%s",
                     dirCmdWhy(meta == NULL  ? mc
                               : loc == NULL ? lc
                                             : pc));
    else if (meta->type == REDIS_REPLY_ERROR)
        dirSetReplyError(r, meta, "the meta hash");
    else if (loc->type == REDIS_REPLY_ERROR)
        dirSetReplyError(r, loc, "the location set");
    else if (prot->type == REDIS_REPLY_ERROR && !dirIsWrongType(prot))
        dirSetReplyError(r, prot, "the protected set");
    else if (meta->type != REDIS_REPLY_ARRAY || loc->type != REDIS_REPLY_ARRAY ||
             (prot->type != REDIS_REPLY_ARRAY && !dirIsWrongType(prot)))
        dirResultSet(r, DIR_NOTFOUND, "malformed directory entry: unexpected reply type");
    else if (meta->elements == 0)
        dirResultSet(r, DIR_NOTFOUND, "object is not in the directory");
    else if (dirHashGet(meta, "tomb") != NULL)
        dirResultSet(r, DIR_NOTFOUND, "object was purged (OBJ.PURGE)");
    else if (meta->elements % 2 != 0 || dirParseMeta(meta, r, &why) != 0)
        dirResultSet(r, DIR_NOTFOUND, "malformed directory entry: %s",
                     why != NULL ? why : "odd hash reply");
    else if (loc->elements == 0)
        dirResultSet(r, DIR_NOTFOUND, "object has no location in the directory");
    else
        return 1;
    return 0;
}

/*
 * Whether the prot reply p (ZRANGE ... WITHSCORES: member, score, ...; or
 * the error of a key of another type, which lists nobody) names node n as
 * published by its current incarnation: n's entry is scored by n's boot,
 * and n has one. An entry of an earlier incarnation (n restarted, empty,
 * under the same name) does not count. Can't fail.
 */
static int dirProtHolds(const redisReply *p, const DirNode *n)
{
    if (p->type != REDIS_REPLY_ARRAY || n->boot == 0)
        return 0;
    size_t len = strlen(n->name);
    for (size_t i = 0; i + 1 < p->elements; i += 2) {
        const redisReply *m = p->element[i], *sc = p->element[i + 1];
        if (m->type != REDIS_REPLY_STRING || m->len != len || memcmp(m->str, n->name, len) != 0)
            continue;
        if (sc->type != REDIS_REPLY_STRING || sc->len == 0 || sc->len > 40)
            return 0;
        char buf[48];
        memcpy(buf, sc->str, sc->len);
        buf[sc->len] = '\0';
        char *end;
        double score = strtod(buf, &end);
        /* Boots are below 2^52: the score holds one exactly, and a score in
         * range compares exactly once converted. */
        return *end == '\0' && score >= 1 && score <= (double)OBJ_DIR_BOOT_MAX &&
               (uint64_t)score == n->boot;
    }
    return 0;
}

/*
 * The verdict on a lookup whose object exists, from the node hashes of its
 * location set loc (read at cacheNow into nb, from command *next on, which
 * it advances): DIR_FOUND with every live node, DIR_UNAVAILABLE when none
 * is live and some shard did not answer, else DIR_NOTFOUND. Each live node
 * is marked prot when the prot set lists it with its current boot, and r->ownerLive says whether
 * the owner is one of them. Can't fail.
 */
static void dirLookupNodesVerdict(DirResult *r, const DirBatch *nb, size_t *next,
                                  const redisReply *loc, const redisReply *prot, int64_t cacheNow)
{
    char down[sizeof(r->err)] = "";
    size_t malformed = 0, unreachable = 0;
    dirCollectNodes(nb, next, (const redisReply *const *)loc->element, loc->elements, cacheNow, r,
                    NULL, &malformed, &unreachable, down, sizeof(down));
    for (size_t i = 0; i < r->count; i++) {
        r->nodes[i].prot = dirProtHolds(prot, &r->nodes[i]);
        if (r->owner[0] != '\0' && strcmp(r->nodes[i].name, r->owner) == 0)
            r->ownerLive = 1;
    }
    if (r->count > 0)
        dirResultSet(r, DIR_FOUND, "");
    else if (unreachable > 0)
        dirResultSet(r, DIR_UNAVAILABLE, "%s", down);
    else
        dirResultSet(r, DIR_NOTFOUND,
                     "object has no live location (%zu listed, %zu malformed node entries)",
                     loc->elements, malformed);
}

/* Counts n finished lookups, then runs each callback with its result and
 * frees the op. */
static void dirAnswerLookups(DirOp **ops, DirResult **res, size_t n)
{
    dirCountDone(0, 0, n);
    for (size_t i = 0; i < n; i++) {
        ops[i]->cb(res[i], ops[i]->arg);
        dirOpFree(ops[i]);
    }
}

/*
 * Looks n objects up together: the meta hash, location and prot sets of
 * each in one round over the shards (an object's keys share its {id} slot, so
 * each lookup is one round trip to one shard), then the hashes of the
 * listed nodes the node cache cannot answer in another (none, usually). A
 * location whose shard does not answer is left out; only when no location
 * is left for that reason is the answer DIR_UNAVAILABLE. Runs every
 * callback (exactly once) and frees the ops (which are in no list).
 *
 * writes (the publishes/unpublishes queued before these lookups, maybe
 * none) go first in the same pipeline, so that a lookup never waits a round
 * trip of its own behind them; Redis runs a connection's commands in order,
 * so the lookups still see them. The answered writes are freed; writes
 * ends holding those whose shard did not answer, in order, for the caller
 * to queue again.
 */
void dirDoLookups(ObjList *writes, DirOp **ops, size_t n)
{
    DirBatch b = {0}, nb = {0};
    ObjListLink *l;
    dirDropGonePublishes(writes);
    objListForEach(writes, l)
        dirAddWrite(&b, dirOpOf(l));
    size_t first = b.n; /* the lookups' commands start here */
    DirResult **res = dirCalloc(n, sizeof(*res));
    unsigned char *needNodes = dirCalloc(n, 1);
    int64_t cacheNow = dirNowMs();
    dir.nodeCacheGen++;
    dirAddLookups(&b, ops, n);
    if (first > 0) /* markers after the writes (and the lookups), where they went */
        dirAddMarks(&b, first, 0);
    dirBatchRun(&b);
    dirCheckMarks(&b);
    if (!objListEmpty(writes))
        dirTakeWriteReplies(&b, writes);

    for (size_t i = 0; i < n; i++) {
        const DirCmd *mc = &b.cmds[first + DIR_LOOKUP_CMDS * i];
        const redisReply *loc = mc[DIR_LOOKUP_LOC].reply;
        res[i] = dirResultNew(ops[i]->id, ops[i]->idLen);
        needNodes[i] = (unsigned char)dirLookupMetaVerdict(res[i], mc);
        if (needNodes[i])
            dirAddNodeFetches(&nb, (const redisReply *const *)loc->element, loc->elements,
                              cacheNow);
    }
    dirBatchRun(&nb);

    size_t next = 0;
    for (size_t i = 0; i < n; i++) {
        const DirCmd *mc = &b.cmds[first + DIR_LOOKUP_CMDS * i];
        if (needNodes[i])
            dirLookupNodesVerdict(res[i], &nb, &next, mc[DIR_LOOKUP_LOC].reply,
                                  mc[DIR_LOOKUP_PROT].reply, cacheNow);
    }
    dirBatchFree(&nb);
    dirBatchFree(&b);
    dirAnswerLookups(ops, res, n);
    free(needNodes);
    free(res);
}

/*
 * Reads every registry bucket in one batch (run into b, which the caller
 * frees). Returns 0 with the number of names listed in *total, or -1 with
 * res set when a bucket could not be read or is not a set.
 */
static int dirListBuckets(DirBatch *b, DirResult *res, size_t *total)
{
    for (int k = 0; k < OBJ_DIR_NODE_BUCKETS; k++) {
        size_t keyLen;
        char *key = dirBucketKey(k, &keyLen);
        const char *argv[] = {"SMEMBERS", key};
        size_t lens[] = {8, keyLen};
        dirBatchAdd(b, key, keyLen, 2, argv, lens);
        free(key);
    }
    dirBatchRun(b);

    *total = 0;
    for (int k = 0; k < OBJ_DIR_NODE_BUCKETS; k++) {
        const redisReply *r = b->cmds[k].reply;
        if (r == NULL) {
            dirResultSet(res, DIR_UNAVAILABLE, "%s", dirCmdWhy(&b->cmds[k]));
            return -1;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            dirSetReplyError(res, r, "a node registry bucket");
            return -1;
        }
        if (r->type != REDIS_REPLY_ARRAY) {
            dirResultSet(res, DIR_NOTFOUND, "malformed directory: unexpected reply type");
            return -1;
        }
        *total += r->elements;
    }
    return 0;
}

/* Removes from its bucket each name whose node key has expired (gone[i]),
 * in one batch. Best effort: a failure only leaves the name for the next
 * listing. */
static void dirListPrune(const redisReply *const *names, const int *bucketOf,
                         const unsigned char *gone, size_t n)
{
    DirBatch clean = {0};
    for (size_t i = 0; i < n; i++) {
        if (!gone[i])
            continue;
        size_t keyLen;
        char *key = dirBucketKey(bucketOf[i], &keyLen);
        const char *argv[] = {"SREM", key, names[i]->str};
        size_t lens[] = {4, keyLen, (size_t)names[i]->len};
        dirBatchAdd(&clean, key, keyLen, 3, argv, lens);
        free(key);
    }
    dirBatchRun(&clean);
    for (size_t i = 0; i < clean.n; i++)
        if (clean.cmds[i].reply != NULL)
            dirAck(clean.cmds[i].reply);
    dirBatchFree(&clean);
}

/*
 * Lists live nodes: every registry bucket in one batch (the buckets spread
 * over the shards), then each node's hash in another; names whose key has
 * expired are removed from their bucket on the way. Every shard must answer,
 * or the listing is DIR_UNAVAILABLE: a partial list would read as dead
 * nodes. Fills res; never fails otherwise (a failed clean-up does not spoil
 * the answer).
 */
static void dirDoList(DirResult *res)
{
    DirBatch b = {0};
    size_t total;
    if (dirListBuckets(&b, res, &total) != 0)
        goto out_free_batch;

    const redisReply **names = dirCalloc(total, sizeof(*names));
    int *bucketOf = dirCalloc(total, sizeof(*bucketOf));
    size_t n = 0;
    for (int k = 0; k < OBJ_DIR_NODE_BUCKETS; k++) {
        const redisReply *r = b.cmds[k].reply;
        for (size_t i = 0; i < r->elements; i++) {
            bucketOf[n] = k;
            names[n++] = r->element[i];
        }
    }
    unsigned char *gone = dirCalloc(total, 1);
    size_t malformed = 0, unreachable = 0, next = 0;
    char down[sizeof(res->err)] = "";
    DirBatch nb = {0};
    dirAddNodeFetches(&nb, names, n, 0);
    dirBatchRun(&nb);
    dirCollectNodes(&nb, &next, names, n, 0, res, gone, &malformed, &unreachable, down,
                    sizeof(down));
    dirBatchFree(&nb);
    if (unreachable > 0) {
        res->count = 0;
        dirResultSet(res, DIR_UNAVAILABLE, "%s", down);
    } else {
        dirResultSet(res, DIR_FOUND, "");
        dirListPrune(names, bucketOf, gone, n);
    }
    free(gone);
    free(bucketOf);
    free(names);
out_free_batch:
    dirBatchFree(&b);
}

/* Answers one listing and frees it: the callback runs exactly once. */
void dirRunList(DirOp *op)
{
    DirResult *res = dirResultNew(NULL, 0);
    if (!dir.haveMap)
        dirResultSet(res, DIR_UNAVAILABLE, "%s", dir.lastIoError);
    else
        dirDoList(res);
    op->cb(res, op->arg);
    dirOpFree(op);
}

/*
 * Answers one node lookup and frees it: an HGETALL of objstore:node:<name>,
 * routed by that key's slot like every other command. DIR_FOUND carries the
 * node as res->nodes[0]; an expired or malformed entry is DIR_NOTFOUND. The
 * callback runs exactly once.
 */
void dirRunNode(DirOp *op)
{
    DirResult *res = dirResultNew(op->id, op->idLen);
    /* dirParseNode takes the name as a reply string, as the registry gives it. */
    redisReply name = {.type = REDIS_REPLY_STRING, .str = op->id, .len = op->idLen};

    if (!dir.haveMap) {
        dirResultSet(res, DIR_UNAVAILABLE, "%s", dir.lastIoError);
    } else if (!dirNameValid(&name)) {
        dirResultSet(res, DIR_NOTFOUND, "not a usable node name");
    } else {
        DirBatch b = {0};
        dirAddNodeFetches(&b, (const redisReply *const[]){&name}, 1, 0);
        dirBatchRun(&b);
        const redisReply *h = b.cmds[0].reply;
        res->nodes = dirCalloc(1, sizeof(DirNode));
        if (h == NULL)
            dirResultSet(res, DIR_UNAVAILABLE, "%s", dirCmdWhy(&b.cmds[0]));
        else if (h->type == REDIS_REPLY_ERROR)
            dirSetReplyError(res, h, "the node hash");
        else if (h->type != REDIS_REPLY_ARRAY || h->elements == 0)
            dirResultSet(res, DIR_NOTFOUND, "node '%.64s' is not registered", op->id);
        else if (dirParseNode(h, &name, &res->nodes[0]) != 0)
            dirResultSet(res, DIR_NOTFOUND, "malformed directory entry of node '%.64s'", op->id);
        else {
            res->count = 1;
            dirResultSet(res, DIR_FOUND, "");
        }
        dirBatchFree(&b);
    }
    op->cb(res, op->arg);
    dirOpFree(op);
}
