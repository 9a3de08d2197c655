/*
 * objects.c - the client library's calls on one object: create, seal and
 * abort (the zero-copy write), the copying put (inline, or through the
 * arena with copy threads for a large object) and get, delete, exists and
 * info. A put or seal may ask for several copies (REPLICAS k, WAIT ms): the
 * node then answers how many live nodes hold the object (docs/cluster.md,
 * "Copies, repair and drain").
 */
#include "objstore.h"
#include "objalloc.h"
#include "objclient_core.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "common/util.h"

/* ---- create / seal / abort ------------------------------------------------------------------ */

/*
 * OBJ.CREATE id size [META m], then point *data at the reserved bytes in the
 * arena (mapped first, so a client that cannot map never leaves a created
 * object behind) and, when gen is not NULL, set *gen to the object's
 * generation (0 from a node that does not answer one). Returns 0, or -1 with
 * the error recorded; an answer that does not fit the mapping aborts the
 * object again (OBJ_ERR_OTHER).
 */
int objClientCreateGen(ObjClient *c, const void *id, size_t idLen, size_t size, const void *meta,
                       size_t metaLen, void **data, uint64_t *gen)
{
    uint64_t offset, gotSize, gotGen = 0;
    char sizeBuf[32];
    redisReply *r;
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.CREATE", id, idLen, &a) < 0)
        return -1;
    if (data == NULL || (meta == NULL && metaLen > 0))
        return clientFail(c, OBJ_ERR_BADARG,
                          "BADARG objClientCreate: data is NULL, or meta is NULL with metaLen > 0");
    if (clientMapArena(c) < 0)
        return -1;
    if (c->arenaReadOnly)
        return clientFail(c, OBJ_ERR_MAP,
                          "READONLY the arena %s is mapped read-only: this user may read "
                          "objects in place but not create them (objClientPut copies)",
                          c->arenaPath);
    snprintf(sizeBuf, sizeof(sizeBuf), "%zu", size);
    argsAddStr(&a, sizeBuf);
    if (metaLen > 0) {
        argsAddStr(&a, "META");
        argsAdd(&a, meta, metaLen);
    }
    r = clientCall(c, &a);
    if (r == NULL)
        return -1;
    if (clientField(c, "OBJ.CREATE", r, "offset", &offset) < 0 ||
        clientField(c, "OBJ.CREATE", r, "size", &gotSize) < 0) {
        freeReplyObject(r);
        objClientAbort(c, id, idLen);
        return clientFail(c, OBJ_ERR_IO, "unexpected reply to OBJ.CREATE (object aborted)");
    }
    if (replyField(r, "gen") != NULL && replyToU64(replyField(r, "gen"), &gotGen) < 0)
        gotGen = 0;
    freeReplyObject(r);
    if (gotSize != size || !clientInArena(c, offset, gotSize)) {
        /* A created object nobody can write would only hold memory until disconnect. */
        objClientAbort(c, id, idLen);
        return clientFail(c, OBJ_ERR_OTHER,
                          "OBJ.CREATE answered offset %llu size %llu, which is not a %zu-byte "
                          "range inside the mapped arena %s (%zu bytes); object aborted",
                          (unsigned long long)offset, (unsigned long long)gotSize, size,
                          c->arenaPath, c->arenaSize);
    }
    *data = c->arenaBase + offset;
    if (gen != NULL)
        *gen = gotGen;
    return clientOk(c);
}

/* OBJ.CREATE without the generation (objClientCreateGen). Returns 0 or -1. */
int objClientCreate(ObjClient *c, const void *id, size_t idLen, size_t size, const void *meta,
                    size_t metaLen, void **data)
{
    return objClientCreateGen(c, id, idLen, size, meta, metaLen, data, NULL);
}

/* ---- copies: REPLICAS k [WAIT ms] and the holder count ----------------------------------- */

/* The text of a put's or a seal's copy options; lives as long as its CmdArgs. */
typedef struct CopyArgs {
    char replicas[16];
    char waitMs[32];
} CopyArgs;

/*
 * Add REPLICAS k (replicas > 0; 0: the node's default, no option) and WAIT ms
 * (waitMs >= 0 and replicas != 1; OBJ_WAIT_DEFAULT: the node's
 * replica-timeout, no option) to a, their text in buf. Returns 0, or -1
 * (BADARG) for a negative replicas or a waitMs below OBJ_WAIT_DEFAULT; the
 * range 1..replicas-max is the node's to check.
 */
static int copyArgsAdd(ObjClient *c, CmdArgs *a, int replicas, long long waitMs, CopyArgs *buf)
{
    if (replicas < 0)
        return clientFail(c, OBJ_ERR_BADARG,
                          "BADARG replicas %d (use 1 or more, 0 = the node's default)", replicas);
    if (waitMs < OBJ_WAIT_DEFAULT)
        return clientFail(c, OBJ_ERR_BADARG,
                          "BADARG wait %lld ms (use >= 0, 0 = do not wait, %d = the node's "
                          "replica-timeout)",
                          waitMs, OBJ_WAIT_DEFAULT);
    if (replicas > 0) {
        snprintf(buf->replicas, sizeof(buf->replicas), "%d", replicas);
        argsAddStr(a, "REPLICAS");
        argsAddStr(a, buf->replicas);
    }
    if (waitMs >= 0 && replicas != 1) {
        snprintf(buf->waitMs, sizeof(buf->waitMs), "%lld", waitMs);
        argsAddStr(a, "WAIT");
        argsAddStr(a, buf->waitMs);
    }
    return 0;
}

/*
 * Judge the reply r (NULL: the call failed, the error is recorded) of a put
 * or a seal: `OK` for an object of one copy (*holders 1, *counted 0), an
 * integer for one of several (*holders that count, *counted 1). holders and
 * counted may be NULL. Frees r. Returns 0, or -1 with the error recorded.
 */
static int holdersVerdict(ObjClient *c, const char *cmd, redisReply *r, int *holders, int *counted)
{
    int n = 1, isCount = 0;

    if (r == NULL)
        return -1;
    if (r->type == REDIS_REPLY_INTEGER && r->integer >= 0 && r->integer <= INT_MAX) {
        n = (int)r->integer;
        isCount = 1;
    } else if (r->type != REDIS_REPLY_STATUS) {
        clientFailShape(c, cmd, r);
        freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    if (holders != NULL)
        *holders = n;
    if (counted != NULL)
        *counted = isCount;
    return clientOk(c);
}

/* See objclient_int.h. Returns 0, or -1 with the error recorded. */
int objClientSealCounted(ObjClient *c, const void *id, size_t idLen, int replicas, long long waitMs,
                         int *holders, int *counted)
{
    CopyArgs copies;
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.SEAL", id, idLen, &a) < 0 ||
        copyArgsAdd(c, &a, replicas, waitMs, &copies) < 0)
        return -1;
    return holdersVerdict(c, "OBJ.SEAL", clientCall(c, &a), holders, counted);
}

/* OBJ.SEAL id [REPLICAS k] [WAIT ms]. Returns 0, or -1 with the error recorded. */
int objClientSealReplicas(ObjClient *c, const void *id, size_t idLen, int replicas,
                          long long waitMs, int *holders)
{
    return objClientSealCounted(c, id, idLen, replicas, waitMs, holders, NULL);
}

/* OBJ.SEAL id: the node's default copies and wait. Returns 0, or -1 with the error recorded. */
int objClientSeal(ObjClient *c, const void *id, size_t idLen)
{
    return objClientSealCounted(c, id, idLen, 0, OBJ_WAIT_DEFAULT, NULL, NULL);
}

/* OBJ.ABORT id. Returns 0, or -1 with the error recorded. */
int objClientAbort(ObjClient *c, const void *id, size_t idLen)
{
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.ABORT", id, idLen, &a) < 0)
        return -1;
    return clientCallStatus(c, &a);
}

/* ---- copying put / get ------------------------------------------------------------------ */

/* A put of at least this many bytes goes through the arena when it can be
 * mapped (create, copy, seal: two round trips and one copy); a smaller one
 * travels inline in one OBJ.PUT (one round trip, the bytes copied through
 * the socket), which costs less up to about here (bench/results/put.md). */
#define OBJ_PUT_ARENA_MIN (1ULL << 20)
/* Each copy thread gets at least this many bytes of a put. */
#define OBJ_PUT_THREAD_MIN (4ULL << 20)
/* Most copy threads objClientSetPutThreads takes. */
#define OBJ_PUT_THREADS_MAX 64

/* One thread's share of a put: the bytes [from, to) of the object. */
typedef struct CopySlice {
    unsigned char *dst; /* the object's first byte in the arena */
    const ObjPart *parts;
    size_t n;
    size_t from, to;
    pthread_t thread;
    int started;
} CopySlice;

/* Copy what falls into s's range of every part. (No MADV_POPULATE_WRITE
 * first: on arena pages this process has mapped before it cost as much as
 * the copy; a page's first touch faults it in, in each thread's slice.) */
static void *copySlice(void *arg)
{
    CopySlice *s = arg;

    for (size_t i = 0; i < s->n; i++) {
        const ObjPart *p = &s->parts[i];
        size_t lo = p->offset > s->from ? p->offset : s->from;
        size_t hi = p->offset + p->len < s->to ? p->offset + p->len : s->to;
        if (lo < hi)
            memcpy(s->dst + lo, (const unsigned char *)p->data + (lo - p->offset), hi - lo);
    }
    return NULL;
}

/* Copy parts into dst (size bytes) with up to `threads` threads, each on a
 * contiguous slice of at least OBJ_PUT_THREAD_MIN; the caller's thread takes
 * the first slice, and the slices of threads that cannot be started. */
static void copyParts(unsigned char *dst, const ObjPart *parts, size_t n, size_t size, int threads)
{
    CopySlice s[OBJ_PUT_THREADS_MAX];
    size_t t = size / OBJ_PUT_THREAD_MIN;

    if (t > (size_t)threads)
        t = (size_t)threads;
    if (t < 1)
        t = 1;
    size_t step = (size / t + 65535) & ~(size_t)65535; /* whole 64 KiB */
    for (size_t i = 0; i < t; i++) {
        size_t from = i * step < size ? i * step : size;
        size_t to = from + step < size && i + 1 < t ? from + step : size;
        s[i] = (CopySlice){.dst = dst, .parts = parts, .n = n, .from = from, .to = to};
    }
    for (size_t i = 1; i < t; i++)
        s[i].started = pthread_create(&s[i].thread, NULL, copySlice, &s[i]) == 0;
    copySlice(&s[0]);
    for (size_t i = 1; i < t; i++) {
        if (s[i].started)
            pthread_join(s[i].thread, NULL);
        else
            copySlice(&s[i]);
    }
}

void objClientPutInline(ObjClient *c)
{
    if (c != NULL)
        c->noArena = 1;
}

int objClientSetPutThreads(ObjClient *c, int threads)
{
    if (c == NULL)
        return -1;
    if (threads < 0 || threads > OBJ_PUT_THREADS_MAX)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG put threads must be 0 to %d, not %d",
                          OBJ_PUT_THREADS_MAX, threads);
    c->putThreads = threads;
    return clientOk(c);
}

/* Whether a put of size bytes goes through the arena: large enough, and
 * the arena maps read-write (tried once; a client that cannot map it, or
 * may only read it, puts inline, and that is not its error). */
static int putViaArena(ObjClient *c, size_t size)
{
    if (size < OBJ_PUT_ARENA_MIN || c->noArena)
        return 0;
    if (clientMapArena(c) == 0)
        return !c->arenaReadOnly;
    if (!clientConnected(c))
        return -1;
    c->noArena = 1;
    clientOk(c);
    return 0;
}

/* The copies a put asks for, and what the node answered about them. */
typedef struct PutCopies {
    int replicas;     /* 0: the node's default */
    long long waitMs; /* OBJ_WAIT_DEFAULT: the node's replica-timeout */
    int *holders;     /* out (may be NULL): holdersVerdict */
    int *counted;     /* out (may be NULL): holdersVerdict */
} PutCopies;

/* OBJ.PUT id data [META m] [REPLICAS k] [WAIT ms] of parts joined (one round trip). */
static int putInline(ObjClient *c, const void *id, size_t idLen, const ObjPart *parts, size_t n,
                     size_t size, const void *meta, size_t metaLen, const PutCopies *pc)
{
    unsigned char *joined = NULL;
    const void *data = "";
    CopyArgs copies;
    CmdArgs a;
    int rv;

    if (n == 1 && parts[0].offset == 0 && parts[0].len == size) {
        data = size ? parts[0].data : "";
    } else if (size > 0) {
        joined = objCalloc(1, size);
        if (joined == NULL)
            return clientFail(c, OBJ_ERR_OTHER, "OOM out of memory joining %zu bytes", size);
        copyParts(joined, parts, n, size, 1);
        data = joined;
    }
    clientIdCommand(c, "OBJ.PUT", id, idLen, &a);
    argsAdd(&a, data, size);
    if (metaLen > 0) {
        argsAddStr(&a, "META");
        argsAdd(&a, meta, metaLen);
    }
    copyArgsAdd(c, &a, pc->replicas, pc->waitMs, &copies); /* checked by the caller */
    rv = holdersVerdict(c, "OBJ.PUT", clientCall(c, &a), pc->holders, pc->counted);
    objFree(joined);
    return rv;
}

/* objClientPutParts with the copies of pc: inline in one OBJ.PUT, or
 * create, copy and seal through the arena. Returns 0, or -1 with the error
 * recorded (a seal that failed aborts the object). */
static int putParts(ObjClient *c, const void *id, size_t idLen, const ObjPart *parts, size_t n,
                    size_t size, const void *meta, size_t metaLen, const PutCopies *pc)
{
    CopyArgs copies;
    CmdArgs a;
    void *dst;

    if (clientIdCommand(c, "OBJ.PUT", id, idLen, &a) < 0 ||
        copyArgsAdd(c, &a, pc->replicas, pc->waitMs, &copies) < 0)
        return -1;
    if ((parts == NULL && n > 0) || (meta == NULL && metaLen > 0))
        return clientFail(c, OBJ_ERR_BADARG,
                          "BADARG objClientPut: parts or meta is NULL with a non-zero length");
    for (size_t i = 0; i < n; i++)
        if ((parts[i].data == NULL && parts[i].len > 0) || parts[i].offset > size ||
            parts[i].len > size - parts[i].offset)
            return clientFail(c, OBJ_ERR_BADARG,
                              "BADARG objClientPut: part %zu (%zu bytes at %zu) does not fit "
                              "a %zu-byte object",
                              i, parts[i].len, parts[i].offset, size);
    int arena = putViaArena(c, size);
    if (arena < 0)
        return -1;
    if (!arena)
        return putInline(c, id, idLen, parts, n, size, meta, metaLen, pc);
    if (objClientCreate(c, id, idLen, size, meta, metaLen, &dst) < 0)
        return -1;
    copyParts(dst, parts, n, size, c->putThreads ? c->putThreads : OBJ_PUT_THREADS_DEFAULT);
    if (objClientSealCounted(c, id, idLen, pc->replicas, pc->waitMs, pc->holders, pc->counted) <
        0) {
        ObjErr err = c->err;
        char msg[OBJ_CLIENT_ERRSTR_LEN];
        snprintf(msg, sizeof(msg), "%s", c->errstr);
        objClientAbort(c, id, idLen);
        return clientFail(c, err, "%s", msg);
    }
    return 0;
}

/* putParts with the node's default copies. Returns 0, or -1 with the error recorded. */
int objClientPutParts(ObjClient *c, const void *id, size_t idLen, const ObjPart *parts, size_t n,
                      size_t size, const void *meta, size_t metaLen)
{
    PutCopies pc = {.replicas = 0, .waitMs = OBJ_WAIT_DEFAULT};

    return putParts(c, id, idLen, parts, n, size, meta, metaLen, &pc);
}

/* putParts with replicas copies. Returns 0, or -1 with the error recorded. */
int objClientPutPartsReplicas(ObjClient *c, const void *id, size_t idLen, const ObjPart *parts,
                              size_t n, size_t size, const void *meta, size_t metaLen, int replicas,
                              long long waitMs, int *holders)
{
    PutCopies pc = {.replicas = replicas, .waitMs = waitMs, .holders = holders};

    return putParts(c, id, idLen, parts, n, size, meta, metaLen, &pc);
}

/* See objclient_int.h. Returns 0, or -1 with the error recorded. */
int objClientPutPartsCounted(ObjClient *c, const void *id, size_t idLen, const ObjPart *parts,
                             size_t n, size_t size, const void *meta, size_t metaLen, int replicas,
                             long long waitMs, int *holders, int *counted)
{
    PutCopies pc = {replicas, waitMs, holders, counted};

    return putParts(c, id, idLen, parts, n, size, meta, metaLen, &pc);
}

/* objClientPutPartsReplicas of one part: data's size bytes. Returns 0, or -1
 * with the error recorded. */
int objClientPutReplicas(ObjClient *c, const void *id, size_t idLen, const void *data, size_t size,
                         const void *meta, size_t metaLen, int replicas, long long waitMs,
                         int *holders)
{
    ObjPart part = {.data = data, .len = size, .offset = 0};

    if (c != NULL && data == NULL && size > 0)
        return clientFail(c, OBJ_ERR_BADARG,
                          "BADARG objClientPut: data or meta is NULL with a non-zero length");
    return objClientPutPartsReplicas(c, id, idLen, &part, 1, size, meta, metaLen, replicas, waitMs,
                                     holders);
}

/* OBJ.PUT id data [META m], or create, copy and seal for a large object
 * when the arena maps. Returns 0, or -1 with the error recorded. */
int objClientPut(ObjClient *c, const void *id, size_t idLen, const void *data, size_t size,
                 const void *meta, size_t metaLen)
{
    return objClientPutReplicas(c, id, idLen, data, size, meta, metaLen, 0, OBJ_WAIT_DEFAULT, NULL);
}

/*
 * OBJ.GET id [TIMEOUT ms] into a malloc'ed copy (a 1-byte allocation for an
 * empty object, so *data is never NULL on success). Returns 0, or -1 with
 * the error recorded and *data, *size untouched.
 */
int objClientGet(ObjClient *c, const void *id, size_t idLen, long long timeoutMs, void **data,
                 size_t *size)
{
    char timeoutBuf[32];
    redisReply *r;
    void *copy;
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.GET", id, idLen, &a) < 0)
        return -1;
    if (data == NULL || size == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientGet: data or size is NULL");
    if (clientAddTimeout(c, &a, timeoutMs, timeoutBuf, sizeof(timeoutBuf)) < 0)
        return -1;
    r = clientExpect(c, "OBJ.GET", clientCall(c, &a), REDIS_REPLY_STRING);
    if (r == NULL)
        return -1;
    copy = objMalloc(r->len > 0 ? r->len : 1);
    if (copy == NULL) {
        clientFail(c, OBJ_ERR_OTHER, "out of memory copying a %zu-byte object", r->len);
        freeReplyObject(r);
        return -1;
    }
    memcpy(copy, r->str, r->len);
    *data = copy;
    *size = r->len;
    freeReplyObject(r);
    return clientOk(c);
}

/* Free a buffer from objClientGet. Accepts NULL. */
void objClientFreeData(void *data)
{
    objFree(data);
}

/* ---- delete / exists / info ---------------------------------------------------------- */

/* OBJ.DEL id: OK (freed now) and DEFERRED (pinned) are both success. Returns 0 or -1. */
int objClientDelete(ObjClient *c, const void *id, size_t idLen)
{
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.DEL", id, idLen, &a) < 0)
        return -1;
    if (pinForget(c, id, idLen) < 0)
        return -1;
    return clientCallStatus(c, &a);
}

/* OBJ.EXISTS id into *exists (1 or 0). Returns 0, or -1 with the error recorded. */
int objClientExists(ObjClient *c, const void *id, size_t idLen, int *exists)
{
    redisReply *r;
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.EXISTS", id, idLen, &a) < 0)
        return -1;
    if (exists == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientExists: exists is NULL");
    r = clientExpect(c, "OBJ.EXISTS", clientCall(c, &a), REDIS_REPLY_INTEGER);
    if (r == NULL)
        return -1;
    *exists = r->integer != 0;
    freeReplyObject(r);
    return clientOk(c);
}

/*
 * Parse OBJ.INFO's checksum (16 hex digits). Returns 0, or -1 if v is
 * anything else.
 */
static int replyToChecksum(const redisReply *v, uint64_t *out)
{
    if (v == NULL || (v->type != REDIS_REPLY_STRING && v->type != REDIS_REPLY_STATUS))
        return -1;
    return utilParseHex64(v->str, v->len, out);
}

/* How long objClientInfo waits for a pending checksum, in ms. */
#define OBJ_INFO_PENDING_MS 60000

/*
 * OBJ.INFO id into *info. sealed is 1 only in state "sealed" (not "created",
 * not "deleting"). A sealed object must carry a checksum; an unsealed one
 * without a parseable checksum reports 0. Returns 0, or -1 with the error
 * recorded and *info untouched.
 */
int objClientInfo(ObjClient *c, const void *id, size_t idLen, ObjInfo *info)
{
    const redisReply *state, *sum;
    ObjInfo tmp = {0};
    redisReply *r;
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.INFO", id, idLen, &a) < 0)
        return -1;
    if (info == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientInfo: info is NULL");
    /* A large object's checksum is taken just after its seal: ask again
     * until it is known (about 1 ms per 10 MiB). */
    for (long long waitedMs = 0;; waitedMs++) {
        r = clientCall(c, &a);
        if (r == NULL)
            return -1;
        sum = replyField(r, "checksum");
        if (!sum || sum->type != REDIS_REPLY_STATUS || sum->len != 7 ||
            memcmp(sum->str, "pending", 7) != 0 || waitedMs >= OBJ_INFO_PENDING_MS)
            break;
        freeReplyObject(r);
        usleep(1000);
        clientIdCommand(c, "OBJ.INFO", id, idLen, &a);
    }
    state = replyField(r, "state");
    if (state == NULL || (state->type != REDIS_REPLY_STRING && state->type != REDIS_REPLY_STATUS)) {
        clientFail(c, OBJ_ERR_IO, "unexpected reply to OBJ.INFO: no state");
        goto out_free_reply;
    }
    tmp.sealed = state->len == 6 && memcmp(state->str, "sealed", 6) == 0;
    if (clientField(c, "OBJ.INFO", r, "size", &tmp.size) < 0 ||
        clientField(c, "OBJ.INFO", r, "meta_size", &tmp.metaSize) < 0 ||
        clientField(c, "OBJ.INFO", r, "offset", &tmp.offset) < 0 ||
        clientField(c, "OBJ.INFO", r, "pins", &tmp.pins) < 0)
        goto out_free_reply;
    if (replyToChecksum(replyField(r, "checksum"), &tmp.checksum) < 0 && tmp.sealed) {
        clientFail(c, OBJ_ERR_IO, "unexpected reply to OBJ.INFO: checksum is not 16 hex digits");
        goto out_free_reply;
    }
    freeReplyObject(r);
    *info = tmp;
    return clientOk(c);

out_free_reply:
    freeReplyObject(r);
    return -1;
}
