/*
 * pins.c - the client library's zero-copy reads: OBJ.PIN and OBJ.RELEASE,
 * the views they give into the mapped arena, and the client-side pin cache
 * that keeps a released pin for the next pin of the same id (objstore.h:
 * objClientSetPinCache) and gives idle pins back in pipelined batches.
 */
#include "objstore.h"
#include "objalloc.h"
#include "objclient_core.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

/* ---- the pin cache ------------------------------------------------------------------------- */

/* FNV-1a of the id. Can't fail. */
static uint64_t pinHash(const void *id, size_t idLen)
{
    const unsigned char *p = id;
    uint64_t h = 1469598103934665603ULL;

    for (size_t i = 0; i < idLen; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* The entry of id that a pin may use (not stale). Returns it or NULL. */
static PinEntry *pinFind(const PinCache *pc, const void *id, size_t idLen, uint64_t h)
{
    if (pc->nbuckets == 0)
        return NULL;
    for (PinEntry *e = pc->buckets[h & (pc->nbuckets - 1)]; e != NULL; e = e->hashNext)
        if (e->hash == h && e->idLen == idLen && (idLen == 0 || memcmp(e->id, id, idLen) == 0) &&
            !e->stale)
            return e;
    return NULL;
}

/*
 * The entry of id with users left that a release drops: the one whose view
 * starts at data, or with data NULL the only one (an id deleted and made
 * again can have a stale entry and a fresh one in use at once: then *many
 * is set and NULL returned). Returns it or NULL.
 */
static PinEntry *pinFindUsed(const PinCache *pc, const void *id, size_t idLen, uint64_t h,
                             const void *data, int *many)
{
    PinEntry *found = NULL;

    *many = 0;
    if (pc->nbuckets == 0)
        return NULL;
    for (PinEntry *e = pc->buckets[h & (pc->nbuckets - 1)]; e != NULL; e = e->hashNext) {
        if (e->hash != h || e->idLen != idLen || (idLen > 0 && memcmp(e->id, id, idLen) != 0) ||
            e->users == 0 || (data != NULL && e->view.data != data))
            continue;
        if (found != NULL) {
            *many = 1;
            return NULL;
        }
        found = e;
    }
    return found;
}

/* Double the buckets (or make the first 64) when the chains would grow
 * long. Returns 0, or -1 when out of memory (the old table stays usable). */
static int pinGrow(PinCache *pc)
{
    size_t n = pc->nbuckets ? pc->nbuckets * 2 : 64;
    PinEntry **b;

    if (pc->count < pc->nbuckets)
        return 0;
    b = objCalloc(n, sizeof(*b));
    if (b == NULL)
        return pc->nbuckets ? 0 : -1;
    for (size_t i = 0; i < pc->nbuckets; i++) {
        PinEntry *e = pc->buckets[i], *next;
        for (; e != NULL; e = next) {
            next = e->hashNext;
            e->hashNext = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    }
    objFree(pc->buckets);
    pc->buckets = b;
    pc->nbuckets = n;
    return 0;
}

/* Put e at the young end of the idle list. Can't fail. */
static void pinIdleAppend(PinCache *pc, PinEntry *e)
{
    e->idleNext = NULL;
    e->idlePrev = pc->idleTail;
    if (pc->idleTail)
        pc->idleTail->idleNext = e;
    else
        pc->idleHead = e;
    pc->idleTail = e;
    pc->idle++;
}

/* Take e off the idle list. Can't fail. */
static void pinIdleRemove(PinCache *pc, PinEntry *e)
{
    if (e->idlePrev)
        e->idlePrev->idleNext = e->idleNext;
    else
        pc->idleHead = e->idleNext;
    if (e->idleNext)
        e->idleNext->idlePrev = e->idlePrev;
    else
        pc->idleTail = e->idlePrev;
    e->idlePrev = e->idleNext = NULL;
    pc->idle--;
}

/* Take e out of the hash (and the idle list); the caller frees it. Can't fail. */
static void pinUnlink(PinCache *pc, PinEntry *e)
{
    PinEntry **pp = &pc->buckets[e->hash & (pc->nbuckets - 1)];

    while (*pp != e)
        pp = &(*pp)->hashNext;
    *pp = e->hashNext;
    if (e->users == 0)
        pinIdleRemove(pc, e);
    pc->count--;
}

/*
 * Remember a fresh server pin of id (users 1). Returns 0, or -1 when out of
 * memory: then the pin simply stays uncached (its release goes straight to
 * the server), so this is not an error for the caller.
 */
static int pinAdd(PinCache *pc, const void *id, size_t idLen, uint64_t h, const ObjBuffer *view)
{
    PinEntry *e;

    if (pinGrow(pc) < 0 || (e = objMalloc(sizeof(*e) + idLen)) == NULL)
        return -1;
    memset(e, 0, sizeof(*e));
    if (idLen > 0)
        memcpy(e->id, id, idLen);
    e->idLen = idLen;
    e->hash = h;
    e->view = *view;
    e->users = 1;
    e->hashNext = pc->buckets[h & (pc->nbuckets - 1)];
    pc->buckets[h & (pc->nbuckets - 1)] = e;
    pc->count++;
    return 0;
}

/*
 * Give back n unlinked entries' server pins in one pipelined OBJ.RELEASE
 * batch and free them. Returns 0, or -1 with the first error recorded; the
 * entries are freed either way (a failed connection has dropped the pins).
 */
static int pinSendReleases(ObjClient *c, PinEntry **batch, int n)
{
    CmdArgs cmds[OBJ_CLIENT_RELEASE_BATCH];
    char offsets[OBJ_CLIENT_RELEASE_BATCH][24];
    int rv;

    for (int i = 0; i < n; i++) {
        cmds[i].argc = 0;
        argsAddStr(&cmds[i], "OBJ.RELEASE");
        argsAdd(&cmds[i], batch[i]->id, batch[i]->idLen);
        /* The id may name a newer object than the one this entry pinned. */
        snprintf(offsets[i], sizeof(offsets[i]), "%zu",
                 (size_t)((const unsigned char *)batch[i]->view.data - c->arenaBase));
        argsAddStr(&cmds[i], "OFFSET");
        argsAddStr(&cmds[i], offsets[i]);
    }
    rv = n > 0 ? clientCallPipeline(c, cmds, n) : 0;
    if (n > 0) {
        c->pins.batches++;
        c->pins.released += (uint64_t)n;
    }
    for (int i = 0; i < n; i++)
        objFree(batch[i]);
    return rv;
}

/*
 * Give back the oldest idle entries until at most keep are left, in batches
 * of up to OBJ_CLIENT_RELEASE_BATCH. Returns 0, or -1 with the first error
 * recorded (every chosen entry is forgotten anyway).
 */
static int pinTrim(ObjClient *c, size_t keep)
{
    PinEntry *batch[OBJ_CLIENT_RELEASE_BATCH];
    ObjErr err = OBJ_OK;
    char msg[OBJ_CLIENT_ERRSTR_LEN];
    int n;

    while (c->pins.idle > keep) {
        for (n = 0; n < OBJ_CLIENT_RELEASE_BATCH && c->pins.idle > keep; n++) {
            batch[n] = c->pins.idleHead;
            pinUnlink(&c->pins, batch[n]);
        }
        if (pinSendReleases(c, batch, n) < 0 && err == OBJ_OK) {
            err = c->err;
            memcpy(msg, c->errstr, sizeof(msg));
        }
    }
    if (err == OBJ_OK)
        return 0;
    c->err = err;
    memcpy(c->errstr, msg, sizeof(msg));
    return -1;
}

/*
 * At disconnect: give every entry's server pin back (idle or not; the
 * program's views die with the client) and free the table. Returns 0 or -1.
 */
int pinDrop(ObjClient *c)
{
    PinCache *pc = &c->pins;
    int rv;

    for (size_t i = 0; i < pc->nbuckets; i++)
        for (PinEntry *e = pc->buckets[i]; e != NULL; e = e->hashNext)
            if (e->users > 0) {
                e->users = 0;
                pinIdleAppend(pc, e);
            }
    rv = pinTrim(c, 0);
    objFree(pc->buckets);
    pc->buckets = NULL;
    pc->nbuckets = 0;
    return rv;
}

/* Enable, resize or (maxIdle 0) disable the pin cache. Returns 0 or -1. */
int objClientSetPinCache(ObjClient *c, size_t maxIdle)
{
    if (c == NULL)
        return -1;
    c->pins.maxIdle = maxIdle;
    if (pinTrim(c, maxIdle) < 0)
        return -1;
    return clientOk(c);
}

/* Give back every idle entry now, in one pipelined batch. Returns 0 or -1. */
int objClientFlushReleases(ObjClient *c)
{
    if (c == NULL)
        return -1;
    if (pinTrim(c, 0) < 0)
        return -1;
    return clientOk(c);
}

/* Copy the counters. Returns 0, or -1 for NULL arguments. */
int objClientPinCacheStats(const ObjClient *c, ObjPinCacheStats *st)
{
    if (c == NULL || st == NULL)
        return -1;
    st->hits = c->pins.hits;
    st->misses = c->pins.misses;
    st->batches = c->pins.batches;
    st->released = c->pins.released;
    st->cached = c->pins.count;
    st->idle = c->pins.idle;
    st->maxIdle = c->pins.maxIdle;
    return 0;
}

/* ---- pin / release ---------------------------------------------------------------------- */

/*
 * Check an OBJ.PIN reply against the mapping and fill *out. The server
 * stores the metadata right after the data, so out->meta is base + offset +
 * size; the copy of the metadata in the reply must equal those arena bytes,
 * which catches a client and server that disagree about the layout.
 * Returns 0, or -1 with the error recorded.
 */
static int clientPinView(ObjClient *c, const redisReply *r, ObjBuffer *out)
{
    const redisReply *meta = replyField(r, "meta");
    uint64_t offset, size;

    if (clientField(c, "OBJ.PIN", r, "offset", &offset) < 0 ||
        clientField(c, "OBJ.PIN", r, "size", &size) < 0)
        return -1;
    if (meta == NULL || meta->type != REDIS_REPLY_STRING)
        return clientFail(c, OBJ_ERR_IO, "unexpected reply to OBJ.PIN: no meta string");
    if (!clientInArena(c, offset, size) || !clientInArena(c, offset + size, meta->len))
        return clientFail(c, OBJ_ERR_OTHER,
                          "OBJ.PIN answered offset %llu size %llu meta %zu bytes, which is not "
                          "inside the mapped arena %s (%zu bytes)",
                          (unsigned long long)offset, (unsigned long long)size, meta->len,
                          c->arenaPath, c->arenaSize);
    if (meta->len > 0 && memcmp(c->arenaBase + offset + size, meta->str, meta->len) != 0)
        return clientFail(c, OBJ_ERR_OTHER,
                          "OBJ.PIN: the metadata is not stored right after the data in the "
                          "arena %s (client and server versions disagree?)",
                          c->arenaPath);
    out->data = c->arenaBase + offset;
    out->size = (size_t)size;
    out->meta = c->arenaBase + offset + size;
    out->metaSize = meta->len;
    return 0;
}

/*
 * Populate this process's page tables for a freshly pinned view of at least
 * prefaultMin bytes with one madvise(MADV_POPULATE_READ), instead of one
 * minor fault per 4 KiB page on first read (256 for 1 MiB). Can't fail: a
 * kernel without it (EINVAL, before 5.14) turns the option off; other
 * errors only cost the faults back. Why opt-in: it makes a pin cost time
 * proportional to the size, which a program reading a few bytes of a large
 * object does not want.
 */
static void clientPrefault(ObjClient *c, const ObjBuffer *view)
{
#ifdef MADV_POPULATE_READ
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo, hi;

    if (c->prefaultMin == 0 || view->size < c->prefaultMin || page <= 0)
        return;
    lo = (uintptr_t)view->data & ~((uintptr_t)page - 1);
    hi = (uintptr_t)view->data + view->size;
    if (madvise((void *)lo, hi - lo, MADV_POPULATE_READ) < 0 && errno == EINVAL)
        c->prefaultMin = 0;
#else
    (void)view;
    c->prefaultMin = 0;
#endif
}

/* Prefault pinned views of at least minBytes (0: off). Returns 0, or -1 for
 * a NULL client. */
int objClientSetPinPrefault(ObjClient *c, size_t minBytes)
{
    if (c == NULL)
        return -1;
    c->prefaultMin = minBytes;
    return clientOk(c);
}

/*
 * OBJ.RELEASE id OFFSET offset: the pin of the object at that offset, which
 * stays right when id was deleted and made again. Returns 0, or -1 with the
 * error recorded.
 */
static int clientReleaseOffset(ObjClient *c, const void *id, size_t idLen, uint64_t offset)
{
    char buf[24];
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.RELEASE", id, idLen, &a) < 0)
        return -1;
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)offset);
    argsAddStr(&a, "OFFSET");
    argsAddStr(&a, buf);
    return clientCallStatus(c, &a);
}

/*
 * Send a built OBJ.PIN and point *out into the arena; *gen (when not NULL)
 * gets the answered generation (0 when none). A reply that cannot be turned
 * into a view releases that pin (and only it) again, keeping the error that
 * explains why. Returns 0, or -1 with the error recorded.
 */
static int clientPinSend(ObjClient *c, const void *id, size_t idLen, CmdArgs *a, ObjBuffer *out,
                         uint64_t *gen)
{
    char msg[OBJ_CLIENT_ERRSTR_LEN];
    uint64_t offset;
    redisReply *r;
    ObjErr err;

    if (clientMapArena(c) < 0)
        return -1;
    r = clientCall(c, a);
    if (r == NULL)
        return -1;
    if (clientPinView(c, r, out) == 0) {
        if (gen != NULL && replyToU64(replyField(r, "gen"), gen) < 0)
            *gen = 0;
        freeReplyObject(r);
        return 0;
    }
    err = c->err;
    memcpy(msg, c->errstr, sizeof(msg));
    if (replyToU64(replyField(r, "offset"), &offset) == 0)
        clientReleaseOffset(c, id, idLen, offset);
    freeReplyObject(r);
    c->err = err;
    memcpy(c->errstr, msg, sizeof(msg));
    return -1;
}

/*
 * OBJ.PIN id [TIMEOUT ms], then point *out into the arena. Returns 0, or -1
 * with the error recorded; a reply that cannot be turned into a view
 * releases the pin again, keeping the error that explains why.
 */
int objClientPin(ObjClient *c, const void *id, size_t idLen, long long timeoutMs, ObjBuffer *out)
{
    char timeoutBuf[32];
    PinEntry *e;
    uint64_t h = 0;
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.PIN", id, idLen, &a) < 0)
        return -1;
    if (out == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientPin: out is NULL");
    if (clientAddTimeout(c, &a, timeoutMs, timeoutBuf, sizeof(timeoutBuf)) < 0)
        return -1;
    if (c->pins.maxIdle > 0) {
        h = pinHash(id, idLen);
        e = pinFind(&c->pins, id, idLen, h);
        if (e != NULL) {
            if (e->users++ == 0)
                pinIdleRemove(&c->pins, e);
            c->pins.hits++;
            *out = e->view;
            return clientOk(c);
        }
    }
    if (clientPinSend(c, id, idLen, &a, out, NULL) < 0)
        return -1;
    clientPrefault(c, out);
    if (c->pins.maxIdle > 0) {
        c->pins.misses++;
        pinAdd(&c->pins, id, idLen, h, out); /* out of memory: stays uncached */
    }
    return clientOk(c);
}

/*
 * Pin the object this client has just sealed: OBJ.PIN id (never served by
 * the pin cache), and check that the pin is on that object, the one created
 * at data with generation gen (0: check the offset only). Between OBJ.SEAL
 * and OBJ.PIN any writer may delete id and make it again, and the pin then
 * holds a stranger: that pin is given back at once and the call fails with
 * OBJ_ERR_WRONGSTATE, as it fails (NOTFOUND) when id was only deleted. So a
 * success means the sealed object's memory stays allocated for the caller.
 * Returns 0 with *out set, or -1 with the error recorded.
 */
int objClientPinCreated(ObjClient *c, const void *id, size_t idLen, const void *data, uint64_t gen,
                        ObjBuffer *out)
{
    uint64_t gotGen = 0;
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.PIN", id, idLen, &a) < 0)
        return -1;
    if (out == NULL || data == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientPinCreated: out or data is NULL");
    if (clientPinSend(c, id, idLen, &a, out, &gotGen) < 0)
        return -1;
    if (out->data == data && (gen == 0 || gotGen == gen))
        return clientOk(c);
    /* By offset, not through the cache: this server pin is not any cache entry's. */
    clientReleaseOffset(c, id, idLen, (uint64_t)((const unsigned char *)out->data - c->arenaBase));
    return clientFail(
        c, OBJ_ERR_WRONGSTATE,
        "WRONGSTATE the object was deleted after its seal and its id made again "
        "(the pin got generation %llu at offset %zu, not %llu at %zu); the "
        "other object's pin was given back",
        (unsigned long long)gotGen, (size_t)((const unsigned char *)out->data - c->arenaBase),
        (unsigned long long)gen, (size_t)((const unsigned char *)data - c->arenaBase));
}

/*
 * Drop one of the program's pins of cached entry e: the last one makes it
 * idle (the server pin stays; a stale entry's goes back at once), and more
 * than maxIdle idle entries send the oldest back in one batch. Returns 0,
 * or -1 with the error recorded.
 */
static int pinUserGone(ObjClient *c, PinEntry *e)
{
    if (--e->users > 0)
        return clientOk(c);
    pinIdleAppend(&c->pins, e);
    if (e->stale) {
        pinUnlink(&c->pins, e);
        if (pinSendReleases(c, &e, 1) < 0)
            return -1;
    } else if (c->pins.idle > c->pins.maxIdle && pinTrim(c, c->pins.maxIdle / 2) < 0) {
        return -1;
    }
    return clientOk(c);
}

/*
 * OBJ.RELEASE id, or with the pin cache: drop a program's pin of the cached
 * entry (pinUserGone). A pin the cache does not know (taken before it was
 * on) is released at once by the server's rule: the one object this
 * connection pins under id. When the client pins two objects under id (it
 * was deleted and made again), nothing is released and the call fails with
 * OBJ_ERR_WRONGSTATE: objClientReleaseBuffer names the one to drop.
 * Returns 0, or -1 with the error recorded.
 */
int objClientRelease(ObjClient *c, const void *id, size_t idLen)
{
    PinEntry *e;
    CmdArgs a;
    int many;

    if (clientIdCommand(c, "OBJ.RELEASE", id, idLen, &a) < 0)
        return -1;
    e = pinFindUsed(&c->pins, id, idLen, pinHash(id, idLen), NULL, &many);
    if (many)
        return clientFail(c, OBJ_ERR_WRONGSTATE,
                          "WRONGSTATE this client pins more than one object under this id (it "
                          "was deleted and made again): release it with objClientReleaseBuffer");
    if (e == NULL)
        return clientCallStatus(c, &a);
    return pinUserGone(c, e);
}

/*
 * Release the pin whose view objClientPin put in *buf: by the view's offset
 * in the arena (OBJ.RELEASE id OFFSET o), or through its cache entry.
 * Returns 0, or -1 with the error recorded (BADARG for a view that is not
 * in this client's mapped arena).
 */
int objClientReleaseBuffer(ObjClient *c, const void *id, size_t idLen, const ObjBuffer *buf)
{
    const unsigned char *data;
    PinEntry *e;
    int many;

    if (c == NULL)
        return -1;
    if (buf == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientReleaseBuffer: buf is NULL");
    data = buf->data;
    if (c->arenaBase == NULL || data < c->arenaBase ||
        !clientInArena(c, (uint64_t)(data - c->arenaBase), 0))
        return clientFail(c, OBJ_ERR_BADARG,
                          "BADARG objClientReleaseBuffer: the view is not one of this client's "
                          "pins (not inside its mapped arena)");
    e = pinFindUsed(&c->pins, id, idLen, pinHash(id, idLen), data, &many);
    if (e != NULL)
        return pinUserGone(c, e);
    return clientReleaseOffset(c, id, idLen, (uint64_t)(data - c->arenaBase));
}

/*
 * Before this client deletes id: its cached entry must not serve the id
 * again (the id may come back as another object). An idle entry's pin is
 * given back first, so the delete frees at once; one in use is marked stale
 * and goes back on its last release. Returns 0, or -1 with the error recorded.
 */
int pinForget(ObjClient *c, const void *id, size_t idLen)
{
    PinEntry *e = pinFind(&c->pins, id, idLen, pinHash(id, idLen));

    if (e == NULL)
        return 0;
    if (e->users > 0) {
        e->stale = 1;
        return 0;
    }
    pinUnlink(&c->pins, e);
    return pinSendReleases(c, &e, 1);
}
