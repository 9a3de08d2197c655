/*
 * publish.c - the directory's writes: this node's registration (heartbeat,
 * unregister), publishes and unpublishes sent in pipelined rounds, and the
 * full re-publish from the snapshot callback after every (re)connect. All
 * of them are idempotent, which is why a write whose shard did not answer
 * is simply sent again later.
 */
#include "dirint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * The verdict on one publish, shared by dirPublishScript and
 * dirPublishMetaScript (KEYS[MK] = meta hash; ARGV = node, kind, size,
 * meta_size, checksum, want, takeover, boot). kind is "p" (a primary's fresh
 * seal), "P" (a primary's re-publish or takeover from the node ARGV[7], ""
 * for none), "q" (a protected copy) or "r" (a replica). Leaves in v:
 *   2  a tombstone of this very generation (field tomb, see versions.c)
 *      refuses all but a fresh seal: the copy was purged while away;
 *   a string  "P" of the meta's generation while meta.owner names another
 *      node (not ARGV[7]): moved, v is that owner;
 *   0  refused as stale: "P" of another generation while meta.owner names
 *      another node, or "q"/"r" of another generation than the meta's;
 *   (both "P" rules only for an object with copies, want >= 2 in the meta
 *   or the publish: only such an object's ownership moves while its owner
 *   is away; a one-copy id re-created elsewhere keeps the rule of the
 *   primaries, whoever publishes last names the generation)
 *   1  the meta is this copy's (a primary sets owner and want; a protected
 *      copy sets want where it is absent);
 *   3  the meta was replaced by this copy's generation (no meta, another
 *      generation's, or a tombstone of another): the sets are to be reset.
 * So whoever publishes last, the meta names the primary's generation, every
 * listed node holds it, and a primary that lost its ownership does not win
 * it back by re-publishing.
 */
#define DIR_PUBLISH_VERDICT                                                                        \
    "local m = redis.call('HMGET', KEYS[MK], 'size', 'meta_size', 'checksum', 'tomb', 'owner', "   \
    "'want') "                                                                                     \
    "local me, k, v = ARGV[1], ARGV[2], 1 "                                                        \
    "local same = m[1] == ARGV[3] and m[2] == ARGV[4] and m[3] == ARGV[5] "                        \
    "if m[4] and k ~= 'p' and m[4] == ARGV[3] .. ':' .. ARGV[4] .. ':' .. ARGV[5] then v = 2 "     \
    "elseif k == 'P' and m[5] and m[5] ~= me and not (same and m[5] == ARGV[7]) and "              \
    "(tonumber(ARGV[6]) >= 2 or tonumber(m[6] or '1') >= 2) then "                                 \
    "if same then v = m[5] else v = 0 end "                                                        \
    "elseif not same and (k == 'q' or k == 'r') and m[3] then v = 0 "                              \
    "else "                                                                                        \
    "if not same then "                                                                            \
    "redis.call('DEL', KEYS[MK]) "                                                                 \
    "redis.call('HSET', KEYS[MK], 'size', ARGV[3], 'meta_size', ARGV[4], 'checksum', ARGV[5]) "    \
    "v = 3 end "                                                                                   \
    "if k == 'p' or k == 'P' then redis.call('HSET', KEYS[MK], 'owner', me, 'want', ARGV[6]) "     \
    "elseif k == 'q' and (v == 3 or not m[6]) then redis.call('HSET', KEYS[MK], 'want', ARGV[6]) " \
    "end end "

/*
 * Makes the prot key KEYS[PK] a sorted set or nothing: a key of another
 * type (a plain set an earlier build wrote) is dropped, so that ZADD and
 * ZREM never fail on it; its holders count again once they publish.
 */
#define DIR_PROT_ZSET                                                                              \
    "local pt = redis.call('TYPE', KEYS[PK])['ok'] "                                               \
    "if pt ~= 'zset' and pt ~= 'none' then redis.call('DEL', KEYS[PK]) end "

/*
 * Publishes one copy, atomically: KEYS[1] = loc set, KEYS[2] = meta hash,
 * KEYS[3] = prot zset, ARGV as for DIR_PUBLISH_VERDICT. A replaced meta
 * resets both sets; a listed primary or protected copy joins the prot set
 * scored by this incarnation's boot (ARGV[8]; a restarted node's entry is
 * rescored), a replica leaves it (a demoted copy), and so does a primary
 * refused as moved. Returns 1 when this node is listed, else the verdict
 * (0, 2, or the owner's name as a string for moved).
 */
static const char dirPublishScript[] =
    "local MK, PK = 2, 3 " DIR_PUBLISH_VERDICT DIR_PROT_ZSET
    "if v == 3 then redis.call('DEL', KEYS[1], KEYS[3]) end "
    "if v == 1 or v == 3 then "
    "redis.call('SADD', KEYS[1], me) "
    "if k == 'r' then redis.call('ZREM', KEYS[3], me) "
    "else redis.call('ZADD', KEYS[3], ARGV[8], me) end "
    "return 1 end "
    "if type(v) == 'string' then redis.call('ZREM', KEYS[3], me) end "
    "return v";

/*
 * The prot step of a publish answered ASK (see dirPublishAskedSets):
 * KEYS[1] = prot zset, ARGV[1] = node, ARGV[2] = its boot to join with, or
 * "" to leave.
 */
static const char dirProtStepScript[] =
    "local PK = 1 " DIR_PROT_ZSET
    "if ARGV[2] == '' then return redis.call('ZREM', KEYS[1], ARGV[1]) end "
    "return redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])";

/*
 * The meta half of dirPublishScript, for a slot being migrated (see
 * dirPublishAsked): KEYS[1] = meta hash, the same ARGV. Returns the
 * verdict of DIR_PUBLISH_VERDICT: 0, 1, 2, 3 or the owner's name (moved).
 */
static const char dirPublishMetaScript[] = "local MK = 1 " DIR_PUBLISH_VERDICT "return v";

/* Removes one location and holder and, atomically with them, the object's
 * meta once no location is left (a tombstone stays until it expires).
 * KEYS[1] = loc set, KEYS[2] = meta hash, KEYS[3] = prot zset, ARGV[1] =
 * node. */
static const char dirUnpublishScript[] =
    "local PK = 3 " DIR_PROT_ZSET "redis.call('SREM', KEYS[1], ARGV[1]) "
    "redis.call('ZREM', KEYS[3], ARGV[1]) "
    "if redis.call('SCARD', KEYS[1]) == 0 and redis.call('HEXISTS', KEYS[2], 'tomb') == 0 then "
    "redis.call('DEL', KEYS[2], KEYS[3]) end "
    "return 1";

/*
 * Whether the replies to the heartbeat's HSET and SADD say the directory
 * had lost this node's registration: HSET answers how many fields it added
 * (0 when the hash was there) and SADD whether the name was new. Either
 * means the entries were flushed, evicted, expired, or never reached the
 * replica that now serves them, and the object keys written alongside may
 * be gone too.
 */
static int dirRegistrationWasLost(const redisReply *hset, const redisReply *sadd)
{
    return (hset != NULL && hset->type == REDIS_REPLY_INTEGER && hset->integer > 0) ||
           (sadd != NULL && sadd->type == REDIS_REPLY_INTEGER && sadd->integer > 0);
}

/*
 * Registers this node (or renews it): HSET its fields and PEXPIRE its key,
 * and SADD it to its registry bucket, in one round. When the replies say
 * the registration had been lost, a full re-publish is scheduled (the
 * directory is soft state, the node's objects the truth). Every master it
 * holds a connection to gets this node's marker in the same round
 * (dirAddMarks): a shard that lost writes is found even when it holds
 * neither of the registration's keys, and a failover of a shard this node
 * has nothing to write to is noticed too (its dead link). Returns 0, or -1
 * when the registration's shards could not be reached (dirConnFail has
 * run). Error replies are counted only.
 */
int dirHeartbeat(void)
{
    char tcpPort[16], rdmaPort[16], features[16], beat[24];
    char ttl[24];
    pthread_mutex_lock(&dir.lock);
    const char *draining = dir.draining ? "1" : "0";
    pthread_mutex_unlock(&dir.lock);
    snprintf(tcpPort, sizeof(tcpPort), "%d", dir.cfg.tcpPort);
    snprintf(rdmaPort, sizeof(rdmaPort), "%d", dir.cfg.rdmaPort);
    snprintf(features, sizeof(features), "%" PRIu32, dir.cfg.features);
    snprintf(beat, sizeof(beat), "%" PRId64, dirWallMs());
    snprintf(ttl, sizeof(ttl), "%d", dir.cfg.ttlMs);

    const char *hset[] = {"HSET",        dir.nodeKey, "addr",           dir.cfg.addr, "tcp_port",
                          tcpPort,       "rdma_addr", dir.cfg.rdmaAddr, "rdma_port",  rdmaPort,
                          "features",    features,    "heartbeat_ms",   beat,         "label",
                          dir.cfg.label, "draining",  draining,         "boot",       dir.boot};
    enum { HSET_ARGC = sizeof(hset) / sizeof(hset[0]) };
    size_t hsetLen[HSET_ARGC];
    for (int i = 0; i < HSET_ARGC; i++)
        hsetLen[i] = strlen(hset[i]);
    hsetLen[1] = dir.nodeKeyLen;
    const char *expire[] = {"PEXPIRE", dir.nodeKey, ttl};
    size_t expireLen[] = {7, dir.nodeKeyLen, strlen(ttl)};
    const char *sadd[] = {"SADD", dir.bucketKey, dir.cfg.nodeName};
    size_t saddLen[] = {4, dir.bucketKeyLen, dir.nameLen};

    DirBatch b = {0};
    dirBatchAdd(&b, dir.nodeKey, dir.nodeKeyLen, HSET_ARGC, hset, hsetLen);
    dirBatchAdd(&b, dir.nodeKey, dir.nodeKeyLen, 3, expire, expireLen);
    dirBatchAdd(&b, dir.bucketKey, dir.bucketKeyLen, 3, sadd, saddLen);
    enum { REGISTRATION_CMDS = 3 };
    dirAddMarks(&b, 0, 1);
    dir.nextHeartbeatMs = dirNowMs() + dir.cfg.heartbeatMs;
    dirBatchRun(&b);
    dirCheckMarks(&b);
    int rc = 0;
    for (size_t i = 0; i < REGISTRATION_CMDS; i++) {
        if (b.cmds[i].reply == NULL)
            rc = -1;
        else
            dirAck(b.cmds[i].reply);
    }
    if (dirRegistrationWasLost(b.cmds[0].reply, b.cmds[2].reply))
        dirScheduleSnapshot("this node's registration was missing from the directory "
                            "(flushed, evicted, expired, or lost in a failover)");
    dirBatchFree(&b);
    return rc;
}

/* ---- markers --------------------------------------------------------------------------- */

/*
 * This node's marker key on master m, in a slot m serves, or NULL when m
 * serves none. Found again, and the expectation dropped, when the map moved
 * the old key's slot elsewhere. Can't fail otherwise.
 */
static const char *dirMarkKeyOf(int m, size_t *lenOut)
{
    /* A decimal tag that hashes to each slot (UINT32_MAX: none below
     * OBJ_DIR_MARK_TAGS), filled once; only this thread reads it. */
    static uint32_t tagOf[SLOTS_COUNT];
    static int tagsReady;
    if (!tagsReady) {
        memset(tagOf, 0xff, sizeof(tagOf));
        for (uint32_t tag = 0; tag < OBJ_DIR_MARK_TAGS; tag++) {
            char t[16];
            int n = snprintf(t, sizeof(t), "%" PRIu32, tag);
            int slot = slotsCrc16(t, (size_t)n) & (SLOTS_COUNT - 1);
            if (tagOf[slot] == UINT32_MAX)
                tagOf[slot] = tag;
        }
        tagsReady = 1;
    }
    DirConn *c = &dir.conns[m];
    if (c->markKey != NULL &&
        slotsMapOwner(&dir.map, slotsKeySlot(c->markKey, c->markKeyLen)) == m) {
        *lenOut = c->markKeyLen;
        return c->markKey;
    }
    free(c->markKey);
    c->markKey = NULL;
    c->markSeq = 0;
    for (int slot = 0; slot < SLOTS_COUNT; slot++) {
        if (slotsMapOwner(&dir.map, slot) == m && tagOf[slot] != UINT32_MAX) {
            c->markKey = dirMarkKey(tagOf[slot], &c->markKeyLen);
            *lenOut = c->markKeyLen;
            return c->markKey;
        }
    }
    return NULL;
}

/*
 * Appends to b one marker per master -- every master this node holds a
 * connection to (every), or those the first upTo commands of b go to --
 * after everything already in it: SET objstore:mark:{<tag>}:<name> <value> PX node-ttl GET, one new
 * value for the batch. A master runs a connection's commands in order, and
 * its replicas replay them in that order, so a master (or a promoted
 * replica) that still holds the value this node last wrote there holds
 * every write this node had acknowledged before it; anything else (the
 * key missing or older) means that shard lost some of them, which
 * dirCheckMarks finds in the same reply. Can't fail.
 */
void dirAddMarks(DirBatch *b, size_t upTo, int every)
{
    if (!dir.haveMap || dir.nConns == 0)
        return;
    unsigned char *want = dirCalloc((size_t)dir.nConns, 1);
    for (int m = 0; every && m < dir.nConns; m++)
        want[m] = dir.conns[m].ctx != NULL; /* a lost one is retried by its own backoff */
    for (size_t i = 0; !every && i < upTo && i < b->n; i++) {
        int m = slotsMapOwner(&dir.map, b->cmds[i].slot);
        if (m >= 0)
            want[m] = 1;
    }
    uint64_t value = ++dir.markNext;
    char val[24], ttl[24];
    snprintf(val, sizeof(val), "%" PRIu64, value);
    snprintf(ttl, sizeof(ttl), "%d", dir.cfg.ttlMs);
    for (int m = 0; m < dir.nConns; m++) {
        size_t keyLen;
        const char *key = want[m] ? dirMarkKeyOf(m, &keyLen) : NULL;
        if (key == NULL)
            continue;
        const char *argv[] = {"SET", key, val, "PX", ttl, "GET"};
        size_t lens[] = {3, keyLen, strlen(val), 2, strlen(ttl), 3};
        dirBatchAdd(b, key, keyLen, 6, argv, lens);
        DirCmd *c = &b->cmds[b->n - 1];
        c->mark = 1;
        c->markMaster = m;
        c->markVal = value;
    }
    free(want);
}

/*
 * Reads the markers' replies of a run batch: a master whose previous
 * marker value is not what this node last saw acknowledged there lost
 * writes (a flush, an eviction, a replica promoted without them), and a
 * full re-publish is scheduled. A marker that was not answered, went to
 * another master (a redirection) or was refused (a server without SET
 * ... GET) leaves no expectation. Can't fail.
 */
void dirCheckMarks(const DirBatch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        const DirCmd *cmd = &b->cmds[i];
        if (!cmd->mark || cmd->markMaster >= dir.nConns)
            continue;
        DirConn *c = &dir.conns[cmd->markMaster];
        const redisReply *r = cmd->reply;
        if (r == NULL || cmd->master != cmd->markMaster || r->type == REDIS_REPLY_ERROR) {
            c->markSeq = 0;
            continue;
        }
        char want[24];
        int n = snprintf(want, sizeof(want), "%" PRIu64, c->markSeq);
        int lost = c->markSeq != 0 && (r->type != REDIS_REPLY_STRING || r->len != (size_t)n ||
                                       memcmp(r->str, want, (size_t)n) != 0);
        c->markSeq = cmd->markVal;
        if (lost) {
            char why[160];
            const SlotsAddr *a = &dir.map.masters[cmd->markMaster];
            snprintf(why, sizeof(why),
                     "directory %.64s:%d lost writes of this node (its marker was %s)", a->host,
                     a->port, r->type == REDIS_REPLY_STRING ? "older" : "missing");
            dirScheduleSnapshot(why);
        }
    }
}

/* ---- writes ---------------------------------------------------------------------------- */

/* The arguments of a publish after the script and its keys: node, kind
 * ("p", "P", "q" or "r", see DIR_PUBLISH_VERDICT), size, meta_size,
 * checksum, want, takeover, boot (in a's buffers, op's or dir's). */
enum { DIR_PUBLISH_ARGS = 8 };
typedef struct DirPublishArgs {
    char size[24], metaSize[24], checksum[24], want[16];
    const char *argv[DIR_PUBLISH_ARGS];
    size_t lens[DIR_PUBLISH_ARGS];
} DirPublishArgs;

/* The script's kind letter of a publish: a primary's publish is a fresh
 * seal ("p") unless it comes from a re-publish or takes over ("P"). */
static const char *dirPublishKind(const DirOp *op)
{
    if (op->copy == DIR_COPY_REPLICA)
        return "r";
    if (op->copy == DIR_COPY_PROTECTED)
        return "q";
    return op->resync ? "P" : "p";
}

static void dirPublishArgs(const DirOp *op, DirPublishArgs *a)
{
    snprintf(a->size, sizeof(a->size), "%" PRIu64, op->size);
    snprintf(a->metaSize, sizeof(a->metaSize), "%" PRIu64, op->metaSize);
    snprintf(a->checksum, sizeof(a->checksum), "%016" PRIx64, op->checksum);
    snprintf(a->want, sizeof(a->want), "%" PRIu32, op->want > 0 ? op->want : 1);
    const char *argv[] = {dir.cfg.nodeName,
                          dirPublishKind(op),
                          a->size,
                          a->metaSize,
                          a->checksum,
                          a->want,
                          op->takeover ? op->takeover : "",
                          dir.boot};
    for (int i = 0; i < DIR_PUBLISH_ARGS; i++) {
        a->argv[i] = argv[i];
        a->lens[i] = i == 0 ? dir.nameLen : strlen(argv[i]);
    }
}

/* Sends ASKING and then one command on master m's connection, and reads
 * both answers. Returns the command's reply, or NULL when m was lost (or
 * answered a transient error). */
static redisReply *dirAskAndRun(int m, int argc, const char **argv, const size_t *lens)
{
    if (redisAppendCommand(dir.conns[m].ctx, "ASKING") != REDIS_OK ||
        redisAppendCommandArgv(dir.conns[m].ctx, argc, argv, lens) != REDIS_OK)
        dirOom();
    redisReply *ok = dirReadFrom(m);
    if (ok == NULL)
        return NULL;
    freeReplyObject(ok);
    return dirReadFrom(m);
}

/* Runs one single-key command on master m after ASKING (see
 * dirPublishAsked), discarding its answer. Returns 0, or -1 when m was
 * lost. */
static int dirAskStep(int m, int argc, const char **argv, const size_t *lens)
{
    redisReply *r = dirAskAndRun(m, argc, argv, lens);
    freeReplyObject(r);
    return r == NULL ? -1 : 0;
}

/* The set steps of a publish answered ASK, after its meta half answered
 * verdict (DIR_PUBLISH_VERDICT's): the location and prot sets reset (3),
 * this node added to them (1, 3; a replica leaves prot), or taken out of
 * prot (moved), as dirPublishScript does. Returns 0, or -1 when m was
 * lost. */
static int dirPublishAskedSets(int m, const DirOp *op, const redisReply *verdict,
                               const char *locKey, size_t locLen, const char *protKey,
                               size_t protLen)
{
    long long v = verdict != NULL && verdict->type == REDIS_REPLY_INTEGER ? verdict->integer : 0;
    int moved = verdict != NULL && verdict->type == REDIS_REPLY_STRING;
    const char *delLoc[] = {"DEL", locKey}, *delProt[] = {"DEL", protKey};
    size_t delLocLen[] = {3, locLen}, delProtLen[] = {3, protLen};
    if (v == 3 &&
        (dirAskStep(m, 2, delLoc, delLocLen) != 0 || dirAskStep(m, 2, delProt, delProtLen) != 0))
        return -1;
    const char *sadd[] = {"SADD", locKey, dir.cfg.nodeName};
    size_t saddLen[] = {4, locLen, dir.nameLen};
    if ((v == 1 || v == 3) && dirAskStep(m, 3, sadd, saddLen) != 0)
        return -1;
    int join = (v == 1 || v == 3) && op->copy != DIR_COPY_REPLICA;
    const char *prot[] = {"EVAL",  dirProtStepScript, "1",
                          protKey, dir.cfg.nodeName,  join ? dir.boot : ""};
    size_t protLens[] = {
        4, sizeof(dirProtStepScript) - 1, 1, protLen, dir.nameLen, strlen(prot[5])};
    if ((v == 1 || v == 3 || moved) && dirAskStep(m, 6, prot, protLens) != 0)
        return -1;
    return 0;
}

/*
 * A publish answered ASK: its slot is moving to master m, and none of the
 * id's keys is left on the old one. The importing master refuses a script
 * on several keys until all are there (TRYAGAIN), so the publish runs there
 * in steps, each after ASKING: the meta half of the script, then (as it
 * answered) the set steps (dirPublishAskedSets). Not atomic, but only while
 * this slot migrates. c->reply ends as the meta script's answer, or NULL
 * when m was lost (the publish is then sent again).
 */
static void dirPublishAsked(DirCmd *c, int m, const void *askArg)
{
    const DirOp *op = askArg;
    size_t metaLen, locLen, protLen;
    char *metaKey = dirObjKey(op->id, op->idLen, ":meta", &metaLen);
    char *locKey = dirObjKey(op->id, op->idLen, ":loc", &locLen);
    char *protKey = dirObjKey(op->id, op->idLen, ":prot", &protLen);
    DirPublishArgs a;
    dirPublishArgs(op, &a);
    const char *eval[4 + DIR_PUBLISH_ARGS] = {"EVAL", dirPublishMetaScript, "1", metaKey};
    size_t evalLen[4 + DIR_PUBLISH_ARGS] = {4, sizeof(dirPublishMetaScript) - 1, 1, metaLen};
    memcpy(eval + 4, a.argv, sizeof(a.argv));
    memcpy(evalLen + 4, a.lens, sizeof(a.lens));
    c->reply = dirAskAndRun(m, 4 + DIR_PUBLISH_ARGS, eval, evalLen);
    if (c->reply != NULL &&
        dirPublishAskedSets(m, op, c->reply, locKey, locLen, protKey, protLen) != 0) {
        freeReplyObject(c->reply);
        c->reply = NULL;
    }
    free(metaKey);
    free(locKey);
    free(protKey);
}

/* Adds the command of one publish or unpublish to a batch: one script on
 * the id's slot (both keys carry its tag), so a shard applies it whole.
 * op->cmdIndex is where it went. */
void dirAddWrite(DirBatch *b, DirOp *op)
{
    size_t metaLen, locLen, protLen;
    char *metaKey = dirObjKey(op->id, op->idLen, ":meta", &metaLen);
    char *locKey = dirObjKey(op->id, op->idLen, ":loc", &locLen);
    char *protKey = dirObjKey(op->id, op->idLen, ":prot", &protLen);

    if (op->kind == DIR_OP_PUBLISH) {
        DirPublishArgs a;
        dirPublishArgs(op, &a);
        enum { HEAD = 6 };
        const char *eval[HEAD + DIR_PUBLISH_ARGS] = {"EVAL", dirPublishScript, "3",
                                                     locKey, metaKey,          protKey};
        size_t evalLen[HEAD + DIR_PUBLISH_ARGS] = {
            4, sizeof(dirPublishScript) - 1, 1, locLen, metaLen, protLen};
        memcpy(eval + HEAD, a.argv, sizeof(a.argv));
        memcpy(evalLen + HEAD, a.lens, sizeof(a.lens));
        dirBatchAdd(b, locKey, locLen, HEAD + DIR_PUBLISH_ARGS, eval, evalLen);
        b->cmds[b->n - 1].onAsk = dirPublishAsked;
        b->cmds[b->n - 1].askArg = op;
    } else {
        const char *eval[] = {"EVAL",  dirUnpublishScript, "3", locKey, metaKey,
                              protKey, dir.cfg.nodeName};
        size_t evalLen[] = {4,          sizeof(dirUnpublishScript) - 1, 1, locLen, metaLen, protLen,
                            dir.nameLen};
        dirBatchAdd(b, locKey, locLen, 7, eval, evalLen);
    }
    op->cmdIndex = b->n - 1;
    free(metaKey);
    free(locKey);
    free(protKey);
}

/* A publish the directory refused: this node's copy of op's id is of
 * another generation than the one the directory names (the id was deleted
 * and created again elsewhere). Counted, logged, and handed to the node,
 * which may drop that copy (dir.cfg.staleReplica). */
static void dirNoteStaleReplica(const DirOp *op)
{
    pthread_mutex_lock(&dir.lock);
    dir.stats.staleReplicas++;
    pthread_mutex_unlock(&dir.lock);
    dirLog("verbose",
           "directory: not listing this node's %s of '%.*s': the id now names another "
           "object (checksum %016" PRIx64 " is not the directory's)",
           op->copy == DIR_COPY_PRIMARY ? "primary" : "copy",
           (int)(op->idLen > 64 ? 64 : op->idLen), op->id, op->checksum);
    if (dir.cfg.staleReplica != NULL)
        dir.cfg.staleReplica(op->id, op->idLen, op->checksum);
}

/* A primary's re-publish or takeover the directory refused as moved: the
 * id's ownership is with another node (r: its name). Counted, logged, and
 * handed to the node, which demotes its copy (dir.cfg.moved). */
static void dirNoteMoved(const DirOp *op, const redisReply *r)
{
    char owner[OBJ_DIR_NAME_MAX];
    size_t n = r->len < sizeof(owner) - 1 ? (size_t)r->len : sizeof(owner) - 1;
    memcpy(owner, r->str, n);
    owner[n] = '\0';
    pthread_mutex_lock(&dir.lock);
    dir.stats.movedPrimaries++;
    pthread_mutex_unlock(&dir.lock);
    dirLog("verbose", "directory: this node's primary of '%.*s' moved to node '%.64s'",
           (int)(op->idLen > 64 ? 64 : op->idLen), op->id, owner);
    if (dir.cfg.moved != NULL)
        dir.cfg.moved(op->id, op->idLen, op->checksum, owner);
}

/*
 * Takes the replies of the writes list, whose commands dirAddWrite put first
 * in the run batch b (one each), in order: frees each op that was answered
 * (and counts it), and leaves in the list those that were not (their shard
 * could not be reached), in order; the list ends empty when all were
 * answered. Can't fail.
 */
void dirTakeWriteReplies(const DirBatch *b, ObjList *writes)
{
    uint64_t publishes = 0, unpublishes = 0;
    ObjListLink *l, *tmp;
    objListForEachSafe(writes, l, tmp) {
        DirOp *op = dirOpOf(l);
        const redisReply *r = b->cmds[op->cmdIndex].reply;
        if (r == NULL)
            continue;
        dirAck(r);
        if (op->kind == DIR_OP_PUBLISH) {
            publishes++;
            if (r->type == REDIS_REPLY_INTEGER && r->integer == 2) {
                /* Purged while this node was away: its copy goes (and its
                 * unpublish follows), it does not bring the object back. */
                char gen[OBJ_DIR_GEN_MAX];
                size_t n = dirGenFormat(gen, op->size, op->metaSize, op->checksum);
                dirApplyPurge(op->id, op->idLen, gen, n);
            } else if (r->type == REDIS_REPLY_INTEGER && r->integer == 0) {
                dirNoteStaleReplica(op);
            } else if (r->type == REDIS_REPLY_STRING) {
                dirNoteMoved(op, r);
            }
        } else {
            unpublishes++;
        }
        objListUnlink(l);
        dirOpFree(op);
    }
    dirCountDone(publishes, unpublishes, 0);
}

/* Whether op is a publish of a copy this node no longer holds (see
 * DirConfig.holds): deleted, evicted or replaced since it was queued. */
static int dirPublishIsGone(const DirOp *op)
{
    return op->kind == DIR_OP_PUBLISH && dir.cfg.holds != NULL &&
           !dir.cfg.holds(op->id, op->idLen, op->checksum, op->copy);
}

/* Frees the publishes of writes whose copy is gone (dirPublishIsGone), just
 * before writes are sent; the unpublish that followed each deletion stays
 * queued behind and is sent. Can't fail. */
void dirDropGonePublishes(ObjList *writes)
{
    ObjListLink *l, *tmp;
    objListForEachSafe(writes, l, tmp) {
        if (dirPublishIsGone(dirOpOf(l))) {
            objListUnlink(l);
            dirOpFree(dirOpOf(l));
        }
    }
}

/*
 * Sends a list of publishes/unpublishes in pipelined rounds (each round one
 * batch over all shards, closed by a marker per shard it wrote to),
 * renewing the heartbeat between rounds when it is
 * due, and frees each operation once its replies are in; a publish whose
 * copy is gone is dropped unsent (dirPublishIsGone). Returns 0 when
 * all were answered (the list ends empty), or -1 when a shard could not be
 * reached or a stop was requested: the list then holds the operations not
 * known to be applied, in order (the caller requeues or drops them; sending
 * them again is harmless).
 */
int dirSendWrites(ObjList *list)
{
    while (!objListEmpty(list)) {
        if (dirStopRequested())
            return -1;
        if (dirNowMs() >= dir.nextHeartbeatMs && dirHeartbeat() != 0)
            return -1;
        DirBatch b = {0};
        ObjList round;
        objListInit(&round);
        ObjListLink *l;
        for (int n = 0; n < OBJ_DIR_PIPELINE && (l = objListPopFront(list)) != NULL;) {
            if (dirPublishIsGone(dirOpOf(l))) {
                dirOpFree(dirOpOf(l));
                continue;
            }
            dirAddWrite(&b, dirOpOf(l));
            objListPushBack(&round, l);
            n++;
        }
        dirAddMarks(&b, b.n, 0);
        dirBatchRun(&b);
        dirCheckMarks(&b);
        dirTakeWriteReplies(&b, &round);
        dirBatchFree(&b);
        if (!objListEmpty(&round)) {
            objListSpliceFront(list, &round);
            return -1;
        }
    }
    return 0;
}

/* The emit function handed to the snapshot callback: it only copies, so the
 * callback may hold its own locks while it iterates. */
static void dirCollectEmit(const char *id, size_t idLen, uint64_t size, uint64_t metaSize,
                           uint64_t checksum, DirCopy copy, uint32_t want, void *emitArg)
{
    ObjList *col = emitArg;
    DirOp *op = dirOpNew(DIR_OP_PUBLISH, id, idLen);
    op->size = size;
    op->metaSize = metaSize;
    op->checksum = checksum;
    op->copy = copy;
    op->want = want > 0 ? want : 1;
    op->resync = 1;
    objListPushBack(col, &op->link);
}

/*
 * Re-publishes every local object: collects them from the snapshot callback,
 * then sends them in pipelined rounds. When a shard fails half-way the rest
 * is dropped, because dirConnFail schedules a whole new snapshot.
 */
void dirRepublish(void)
{
    if (dir.snapshot == NULL)
        return;
    ObjList col;
    objListInit(&col);
    dir.snapshot(dirCollectEmit, &col, dir.snapshotArg);
    dirSendWrites(&col);
    dirOpsFree(&col);
}

/* Best effort, briefly: remove this node from the directory, so peers stop
 * considering it at once rather than when its key expires. The connections
 * stay open (dirConnsCloseAll closes them). */
void dirUnregister(void)
{
    if (dir.haveMap) {
        for (int m = 0; m < dir.nConns; m++)
            if (dir.conns[m].ctx != NULL)
                redisSetTimeout(dir.conns[m].ctx, dirTimeval(OBJ_DIR_STOP_TIMEOUT_MS));
        const char *del[] = {"DEL", dir.nodeKey};
        size_t delLen[] = {3, dir.nodeKeyLen};
        const char *srem[] = {"SREM", dir.bucketKey, dir.cfg.nodeName};
        size_t sremLen[] = {4, dir.bucketKeyLen, dir.nameLen};
        DirBatch b = {0};
        dirBatchAdd(&b, dir.nodeKey, dir.nodeKeyLen, 2, del, delLen);
        dirBatchAdd(&b, dir.bucketKey, dir.bucketKeyLen, 3, srem, sremLen);
        dirBatchRun(&b);
        dirBatchFree(&b);
    }
}
