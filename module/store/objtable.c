/*
 * objtable.c - the object table (see objtable.h for the contract).
 *
 * Layout: a chained hash index of visible entries (power-of-two buckets that
 * only grow, so OBJ.LIST can use a reverse-binary cursor like Redis's SCAN);
 * a holder index (holder id -> what it created and pinned) so that a client
 * disconnect or a failed transfer is cleaned up without walking every
 * object; and an LRU list of unpinned replicas for eviction when the arena
 * runs short. Primary and protected copies are never on that list. The
 * index hash is seeded per table, so clients cannot choose ids that collide.
 *
 * Sealed primaries and protected copies in memory sit on two recency lists,
 * the hot set the spill tier leaves alone (docs/tiers.md): probation (used at
 * most once since they came into memory) and protected (used again; capped,
 * its oldest fall back to probation; no relation to a protected copy).
 * Spill victims come from probation first, so a one-time scan of many
 * objects only churns probation.
 */
#include "objtable.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <xxhash.h>

#include "common/heap.h"
#include "common/util.h"

#define OBJ_TABLE_INIT_BUCKETS 64
#define OBJ_HOLDER_BUCKETS     1024

/* One object a holder created or pinned. */
typedef struct Hold {
    ObjEntry *e;
    ObjPinCount pins;
    int created;
} Hold;

typedef struct HolderRec {
    uint64_t holder;
    Hold *holds;
    size_t count, cap;
    struct HolderRec *next;
} HolderRec;

struct ObjTable {
    pthread_mutex_t lock;
    Allocator *alloc;
    ObjEntry **buckets;
    uint64_t mask; /* buckets - 1 */
    uint64_t seed; /* keys the index hash (random per table) */
    HolderRec *holders[OBJ_HOLDER_BUCKETS];
    ObjList lru;       /* ObjEntry.lru: least recently used first */
    uint64_t lruBytes; /* arena bytes eviction could give back */
    uint64_t tick;
    uint64_t lastGen; /* ObjEntry.gen of the newest entry */
    ObjTableStats st;
    void (*evictHook)(const ObjEntry *e, void *arg);
    void *evictArg;
    ObjList probation, protected; /* ObjEntry.resid, least recently used first */
    uint64_t protectedBytes;
    int lruOnly; /* every use goes to probation: recency alone */
    ObjTierOps tierOps;
    void (*sumCancel)(const ObjEntry *e, void *arg); /* objTableSetSumCancel */
    void *sumCancelArg;
};

/* The protected list holds at most this share of the arena (in 1/8ths), so
 * that probation always has room for new objects to prove themselves. */
#define OBJ_PROTECTED_EIGHTHS 6
/* Uses after which an object in probation is promoted. */
#define OBJ_HOT_USES 2
/* Uses that earn the oldest protected entry a second chance, and how many
 * second chances one demotion may hand out. */
#define OBJ_KEEP_USES      4
#define OBJ_DEMOTE_CHANCES 64

/* ---- hashing and the index ------------------------------------------------ */

/* The index hash of an id, keyed by the table's random seed: ids are chosen
 * by clients, and with a public hash a client could pick ids that all share
 * one chain and make every lookup walk it. Can't fail. */
static uint64_t tableHash(const ObjTable *t, const void *id, size_t len)
{
    return XXH3_64bits_withSeed(id, len, t->seed);
}

/* A fresh random seed from the kernel; if getrandom is unavailable, a mix
 * of the clock and an address (weaker, still not guessable in advance from
 * outside the process). Can't fail. */
static uint64_t tableSeed(const ObjTable *t)
{
    uint64_t seed;

    if (getrandom(&seed, sizeof(seed), 0) == (ssize_t)sizeof(seed))
        return seed;
    return (uint64_t)utilMonoUs() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(uintptr_t)t;
}

/* Double the bucket array. Returns 0, or -1 (the table stays valid, only
 * with longer chains) when memory is short. */
static int tableGrow(ObjTable *t)
{
    uint64_t n = (t->mask + 1) * 2;
    ObjEntry **nb = objHeapCalloc(OBJ_HEAP_STORE, n, sizeof(*nb));

    if (!nb)
        return -1;
    for (uint64_t i = 0; i <= t->mask; i++) {
        ObjEntry *e = t->buckets[i];
        while (e) {
            ObjEntry *next = e->next;
            uint64_t b = e->hash & (n - 1);
            e->next = nb[b];
            nb[b] = e;
            e = next;
        }
    }
    objHeapFree(OBJ_HEAP_STORE, t->buckets);
    t->buckets = nb;
    t->mask = n - 1;
    return 0;
}

static void indexInsert(ObjTable *t, ObjEntry *e)
{
    if (t->st.objects + 1 > t->mask + 1)
        tableGrow(t);
    uint64_t b = e->hash & t->mask;
    e->next = t->buckets[b];
    t->buckets[b] = e;
    t->st.objects++;
}

static void indexRemove(ObjTable *t, ObjEntry *e)
{
    ObjEntry **pp = &t->buckets[e->hash & t->mask];

    while (*pp && *pp != e)
        pp = &(*pp)->next;
    if (*pp) {
        *pp = e->next;
        t->st.objects--;
    }
    e->next = NULL;
}

ObjEntry *objTableFind(ObjTable *t, const void *id, size_t idLen)
{
    uint64_t h = tableHash(t, id, idLen);

    for (ObjEntry *e = t->buckets[h & t->mask]; e; e = e->next)
        if (e->hash == h && e->idLen == idLen && memcmp(e->id, id, idLen) == 0)
            return e;
    return NULL;
}

/* ---- LRU of evictable replicas --------------------------------------------- */

/* Is e an ordinary replica: evicted when unpinned, never spilled? A
 * protected copy counts toward the object's want and is treated as a
 * primary by eviction and the spill tier. */
static int copyEvictable(const ObjEntry *e)
{
    return e->replica && !e->protect;
}

static int lruLinked(const ObjEntry *e)
{
    return !objListEmpty(&e->lru);
}

/* The least recently used evictable entry, or NULL. */
static ObjEntry *lruOldest(const ObjTable *t)
{
    ObjListLink *l = objListFirst(&t->lru);
    return l ? objListEntry(l, ObjEntry, lru) : NULL;
}

static void lruRemove(ObjTable *t, ObjEntry *e)
{
    if (!lruLinked(e))
        return;
    objListUnlink(&e->lru);
    t->lruBytes -= allocBlockSize(e->block);
}

static void lruAppend(ObjTable *t, ObjEntry *e)
{
    objListPushBack(&t->lru, &e->lru);
    t->lruBytes += allocBlockSize(e->block);
}

/* ---- the hot set: sealed primaries and protected copies in memory ---------------- */

static int residLinked(const ObjEntry *e)
{
    return !objListEmpty(&e->resid);
}

static void residRemove(ObjTable *t, ObjEntry *e)
{
    if (!residLinked(e))
        return;
    objListUnlink(&e->resid);
    if (e->hot)
        t->protectedBytes -= e->dataSize + e->metaSize;
    e->hot = 0;
}

/* Move the oldest protected entries back to probation while the protected
 * list is over its cap. An old entry that is still used often gets a second
 * chance instead, at the cost of half its count (aging), so that frequency
 * and not only recency decides; after OBJ_DEMOTE_CHANCES chances in one call
 * the oldest goes regardless. Can't fail. */
static void residDemote(ObjTable *t)
{
    AllocStats as;
    int chances = OBJ_DEMOTE_CHANCES;

    allocGetStats(t->alloc, &as);
    uint64_t cap = as.capacity / 8 * OBJ_PROTECTED_EIGHTHS;
    while (t->protectedBytes > cap) {
        ObjEntry *old = objListEntry(objListFirst(&t->protected), ObjEntry, resid);
        if (old->uses >= OBJ_KEEP_USES && chances-- > 0) {
            old->uses /= 2;
            objListUnlink(&old->resid);
            objListPushBack(&t->protected, &old->resid);
            continue;
        }
        residRemove(t, old);
        old->uses /= 2;
        objListPushBack(&t->probation, &old->resid);
    }
}

/* A sealed primary or protected copy in memory was used (or just arrived,
 * used=0): record it as the most recent of its list, promoting it once it
 * has been used again. */
static void residTouch(ObjTable *t, ObjEntry *e, int used)
{
    if (e->state != OBJ_SEALED || copyEvictable(e) || e->deleting || e->tier != OBJ_TIER_MEMORY)
        return;
    if (used && e->uses < UINT32_MAX)
        e->uses++;
    int hot = !t->lruOnly && (e->hot || e->uses >= OBJ_HOT_USES);
    residRemove(t, e);
    if (!hot) {
        objListPushBack(&t->probation, &e->resid);
        return;
    }
    e->hot = 1;
    t->protectedBytes += e->dataSize + e->metaSize;
    objListPushBack(&t->protected, &e->resid);
    residDemote(t);
}

/* ---- holders ------------------------------------------------------------------ */

static HolderRec **holderSlot(ObjTable *t, uint64_t holder)
{
    HolderRec **pp = &t->holders[(holder * 0x9E3779B97F4A7C15ULL) >> 54];

    while (*pp && (*pp)->holder != holder)
        pp = &(*pp)->next;
    return pp;
}

/* Find or add the Hold of (holder, e). Returns NULL on OOM. */
static Hold *holdGet(ObjTable *t, uint64_t holder, ObjEntry *e)
{
    HolderRec **pp = holderSlot(t, holder);
    HolderRec *r = *pp;

    if (!r) {
        r = objHeapCalloc(OBJ_HEAP_STORE, 1, sizeof(*r));
        if (!r)
            return NULL;
        r->holder = holder;
        *pp = r;
    }
    for (size_t i = 0; i < r->count; i++)
        if (r->holds[i].e == e)
            return &r->holds[i];
    if (r->count == r->cap) {
        size_t ncap = r->cap ? r->cap * 2 : 4;
        Hold *nh = objHeapRealloc(OBJ_HEAP_STORE, r->holds, ncap * sizeof(*nh));
        if (!nh)
            return NULL;
        r->holds = nh;
        r->cap = ncap;
    }
    r->holds[r->count] = (Hold){.e = e, .pins = 0, .created = 0};
    return &r->holds[r->count++];
}

/* Remove holds of holder that no longer hold anything; free an empty record. */
static void holderCompact(ObjTable *t, uint64_t holder)
{
    HolderRec **pp = holderSlot(t, holder);
    HolderRec *r = *pp;
    size_t j = 0;

    if (!r)
        return;
    for (size_t i = 0; i < r->count; i++)
        if (r->holds[i].pins || r->holds[i].created)
            r->holds[j++] = r->holds[i];
    r->count = j;
    if (j == 0) {
        *pp = r->next;
        objHeapFree(OBJ_HEAP_STORE, r->holds);
        objHeapFree(OBJ_HEAP_STORE, r);
    }
}

/* ---- entry life ---------------------------------------------------------------- */

static void entryFree(ObjTable *t, ObjEntry *e)
{
    if (e->sumPending && t->sumCancel)
        t->sumCancel(e, t->sumCancelArg);
    lruRemove(t, e);
    residRemove(t, e);
    if (e->block)
        allocPut(t->alloc, e->block);
    if (e->tier == OBJ_TIER_SPILLED) {
        t->st.tierObjects--;
        t->st.tierBytes -= e->dataSize + e->metaSize;
    }
    if (e->fileNo && t->tierOps.discard)
        t->tierOps.discard(e->fileNo, e->dataSize + e->metaSize, t->tierOps.arg);
    objHeapFree(OBJ_HEAP_STORE, e->id);
    objHeapFree(OBJ_HEAP_STORE, e);
}

/* The last pin went: finish a deferred delete or make a replica in memory
 * evictable (a spilled one, demoted while on the tier, waits for its
 * restore). */
static void entryUnpinned(ObjTable *t, ObjEntry *e)
{
    t->st.pinnedObjects--;
    if (e->deleting) {
        t->st.deleting--;
        entryFree(t, e);
    } else if (copyEvictable(e) && e->state == OBJ_SEALED && e->tier == OBJ_TIER_MEMORY) {
        lruAppend(t, e);
    }
}

/* Unlink a visible entry and free it, or defer that when it is pinned. */
static ObjStatus entryRemove(ObjTable *t, ObjEntry *e)
{
    indexRemove(t, e);
    if (e->state == OBJ_SEALED) {
        t->st.sealed--;
        t->st.bytesSealed -= e->dataSize + e->metaSize;
        if (e->protect)
            t->st.protectedObjects--;
    } else {
        t->st.created--;
    }
    if (e->pins) {
        e->deleting = 1;
        t->st.deleting++;
        lruRemove(t, e);
        residRemove(t, e);
        return OBJ_ST_DEFERRED;
    }
    entryFree(t, e);
    return OBJ_ST_OK;
}

/* Evict least recently used unpinned replicas until a block of `need` bytes
 * fits. Returns 1 if room was made, 0 if it could not be. When even all
 * free space plus every evictable replica is too little, nothing is evicted:
 * cached replicas are not thrown away for nothing. */
static int tableEvictFor(ObjTable *t, uint64_t need)
{
    AllocStats as;

    allocGetStats(t->alloc, &as);
    if (need > as.capacity || as.free + t->lruBytes < need)
        return 0;
    for (ObjEntry *old; as.largestFree < need && (old = lruOldest(t));) {
        if (t->evictHook)
            t->evictHook(old, t->evictArg);
        entryRemove(t, old);
        t->st.evictions++;
        allocGetStats(t->alloc, &as);
    }
    return as.largestFree >= need;
}

/* Is the table at its object limit? Evicts one unpinned replica (the least
 * recently used) to make room when that is all it takes. Returns 1 when no
 * entry may be added. */
static int tableAtLimit(ObjTable *t)
{
    ObjEntry *old;

    if (!t->st.maxObjects || t->st.objects + t->st.deleting < t->st.maxObjects)
        return 0;
    if (t->st.objects + t->st.deleting > t->st.maxObjects || !(old = lruOldest(t)))
        return 1;
    if (t->evictHook)
        t->evictHook(old, t->evictArg);
    entryRemove(t, old);
    t->st.evictions++;
    return 0;
}

/* ---- public API --------------------------------------------------------------- */

ObjTable *objTableCreate(uint64_t arenaSize)
{
    ObjTable *t = objHeapCalloc(OBJ_HEAP_STORE, 1, sizeof(*t));

    if (!t)
        return NULL;
    t->alloc = allocCreate(arenaSize);
    if (!t->alloc)
        goto out_free_table;
    t->buckets = objHeapCalloc(OBJ_HEAP_STORE, OBJ_TABLE_INIT_BUCKETS, sizeof(*t->buckets));
    if (!t->buckets)
        goto out_destroy_alloc;
    t->mask = OBJ_TABLE_INIT_BUCKETS - 1;
    t->seed = tableSeed(t);
    objListInit(&t->lru);
    objListInit(&t->probation);
    objListInit(&t->protected);
    pthread_mutex_init(&t->lock, NULL);
    return t;

out_destroy_alloc:
    allocDestroy(t->alloc);
out_free_table:
    objHeapFree(OBJ_HEAP_STORE, t);
    return NULL;
}

void objTableDestroy(ObjTable *t)
{
    ObjEntry *doomed = NULL;

    if (!t)
        return;
    /* Entries deleted while pinned are reachable only through holders, maybe
     * through several: collect each once (pins set to 0 marks it), free later. */
    for (size_t i = 0; i < OBJ_HOLDER_BUCKETS; i++) {
        HolderRec *r = t->holders[i];
        while (r) {
            HolderRec *next = r->next;
            for (size_t j = 0; j < r->count; j++) {
                ObjEntry *e = r->holds[j].e;
                if (e->deleting && e->pins) {
                    e->pins = 0;
                    e->next = doomed;
                    doomed = e;
                }
            }
            objHeapFree(OBJ_HEAP_STORE, r->holds);
            objHeapFree(OBJ_HEAP_STORE, r);
            r = next;
        }
    }
    while (doomed) {
        ObjEntry *next = doomed->next;
        objHeapFree(OBJ_HEAP_STORE, doomed->id);
        objHeapFree(OBJ_HEAP_STORE, doomed);
        doomed = next;
    }
    for (uint64_t i = 0; i <= t->mask; i++) {
        ObjEntry *e = t->buckets[i];
        while (e) {
            ObjEntry *next = e->next;
            objHeapFree(OBJ_HEAP_STORE, e->id);
            objHeapFree(OBJ_HEAP_STORE, e);
            e = next;
        }
    }
    objHeapFree(OBJ_HEAP_STORE, t->buckets);
    allocDestroy(t->alloc);
    pthread_mutex_destroy(&t->lock);
    objHeapFree(OBJ_HEAP_STORE, t);
}

void objTableLock(ObjTable *t)
{
    pthread_mutex_lock(&t->lock);
}

void objTableUnlock(ObjTable *t)
{
    pthread_mutex_unlock(&t->lock);
}

/* See objtable.h. The allocator's dirty prefix makes this free for memory
 * never used since start-up (the arena file is zero-filled by the kernel). */
void objTableClearStale(ObjEntry *e, uint8_t *arenaBase, uint64_t upTo)
{
    uint64_t n = e->staleBytes < upTo ? e->staleBytes : upTo;

    memset(arenaBase + e->offset, 0, n);
}

ObjStatus objTableCreateEntry(ObjTable *t, const void *id, size_t idLen, uint64_t dataSize,
                              uint64_t metaSize, uint64_t holder, ObjEntry **out)
{
    uint64_t need = dataSize + metaSize;

    if (objTableFind(t, id, idLen))
        return OBJ_ST_EXISTS;
    if (tableAtLimit(t)) {
        t->st.oomErrors++;
        t->st.limitErrors++;
        return OBJ_ST_LIMIT;
    }
    if (need < dataSize) /* overflow */
        goto out_oom;
    AllocBlock *b = allocGet(t->alloc, need);
    if (!b && tableEvictFor(t, need))
        b = allocGet(t->alloc, need);
    if (!b)
        goto out_oom;
    ObjEntry *e = objHeapCalloc(OBJ_HEAP_STORE, 1, sizeof(*e));
    if (!e)
        goto out_put_block;
    objListInit(&e->lru);
    objListInit(&e->resid);
    e->id = objHeapMalloc(OBJ_HEAP_STORE, idLen ? idLen : 1);
    if (!e->id)
        goto out_free_entry;
    Hold *h = holdGet(t, holder, e);
    if (!h)
        goto out_free_id;
    h->created = 1;
    memcpy(e->id, id, idLen);
    e->idLen = idLen;
    e->hash = tableHash(t, id, idLen);
    e->gen = ++t->lastGen;
    e->block = b;
    e->offset = allocBlockOffset(b);
    e->dataSize = dataSize;
    e->metaSize = metaSize;
    e->staleBytes = allocBlockDirtyBytes(b) < need ? allocBlockDirtyBytes(b) : need;
    e->state = OBJ_CREATED;
    e->want = 1;
    e->creator = holder;
    e->createdMs = utilWallMs();
    e->lastUse = ++t->tick;
    indexInsert(t, e);
    t->st.created++;
    t->st.creates++;
    *out = e;
    return OBJ_ST_OK;

out_free_id:
    objHeapFree(OBJ_HEAP_STORE, e->id);
out_free_entry:
    objHeapFree(OBJ_HEAP_STORE, e);
out_put_block:
    allocPut(t->alloc, b);
out_oom:
    t->st.oomErrors++;
    return OBJ_ST_OOM;
}

/* The creator is done with created entry e (sealing or aborting it): check
 * that holder is its creator and drop the creation from holder's record. */
static ObjStatus creatorLetGo(ObjTable *t, ObjEntry *e, uint64_t holder)
{
    if (e->state != OBJ_CREATED || e->creator != holder || e->deleting)
        return OBJ_ST_WRONGSTATE;
    Hold *h = holdGet(t, holder, e);
    if (h)
        h->created = 0;
    holderCompact(t, holder);
    return OBJ_ST_OK;
}

ObjStatus objTableSeal(ObjTable *t, ObjEntry *e, uint64_t holder, uint64_t checksum)
{
    if (creatorLetGo(t, e, holder) != OBJ_ST_OK)
        return OBJ_ST_WRONGSTATE;
    e->state = OBJ_SEALED;
    e->checksum = checksum;
    t->st.created--;
    t->st.sealed++;
    t->st.seals++;
    t->st.bytesSealed += e->dataSize + e->metaSize;
    residTouch(t, e, 0);
    return OBJ_ST_OK;
}

ObjStatus objTableSealPending(ObjTable *t, ObjEntry *e, uint64_t holder)
{
    ObjStatus st = objTableSeal(t, e, holder, 0);

    if (st == OBJ_ST_OK)
        e->sumPending = 1;
    return st;
}

void objTableSumDone(ObjTable *t, ObjEntry *e, uint64_t sum)
{
    (void)t;
    e->checksum = sum;
    e->sumPending = 0;
}

void objTableSetSumCancel(ObjTable *t, void (*fn)(const ObjEntry *e, void *arg), void *arg)
{
    t->sumCancel = fn;
    t->sumCancelArg = arg;
}

uint64_t objTableScrub(ObjTable *t, uint8_t *arenaBase, uint64_t maxBytes)
{
    objTableLock(t);
    uint64_t n = allocScrub(t->alloc, arenaBase, maxBytes);
    objTableUnlock(t);
    return n;
}

uint64_t objTableDirtyFreeBytes(ObjTable *t)
{
    return allocDirtyFreeBytes(t->alloc);
}

ObjStatus objTableAbort(ObjTable *t, ObjEntry *e, uint64_t holder)
{
    if (creatorLetGo(t, e, holder) != OBJ_ST_OK)
        return OBJ_ST_WRONGSTATE;
    t->st.aborts++;
    entryRemove(t, e);
    return OBJ_ST_OK;
}

ObjStatus objTableDelete(ObjTable *t, ObjEntry *e)
{
    if (e->state != OBJ_SEALED || e->deleting)
        return OBJ_ST_WRONGSTATE;
    t->st.deletes++;
    ObjStatus st = entryRemove(t, e);
    if (st == OBJ_ST_DEFERRED)
        t->st.deferredDeletes++;
    return st;
}

ObjStatus objTablePin(ObjTable *t, ObjEntry *e, uint64_t holder)
{
    if (e->state != OBJ_SEALED || e->deleting)
        return OBJ_ST_WRONGSTATE;
    if (e->tier == OBJ_TIER_SPILLED || e->tier == OBJ_TIER_RESTORING)
        return OBJ_ST_SPILLED;
    Hold *h = holdGet(t, holder, e);
    if (!h)
        return OBJ_ST_OOM;
    h->pins++;
    if (holder != OBJ_HOLDER_TIER)
        residTouch(t, e, 1);
    if (e->pins++ == 0) {
        t->st.pinnedObjects++;
        lruRemove(t, e);
    }
    e->lastUse = ++t->tick;
    return OBJ_ST_OK;
}

ObjStatus objTablePinCreated(ObjTable *t, ObjEntry *e, uint64_t holder)
{
    if (e->state != OBJ_CREATED || e->deleting)
        return OBJ_ST_WRONGSTATE;
    Hold *h = holdGet(t, holder, e);
    if (!h)
        return OBJ_ST_OOM;
    h->pins++;
    if (e->pins++ == 0)
        t->st.pinnedObjects++; /* a created entry is in no eviction list */
    return OBJ_ST_OK;
}

/* Drop one pin of holder's Hold h (on h->e). */
static void holdUnpin(ObjTable *t, uint64_t holder, Hold *h)
{
    ObjEntry *e = h->e;

    h->pins--;
    holderCompact(t, holder); /* may move or free h */
    if (--e->pins == 0)
        entryUnpinned(t, e);
}

/* Does hold h pin an object of this id that sel and value name? */
static int holdMatches(const Hold *h, const void *id, size_t idLen, ObjPinSel sel, uint64_t value)
{
    const ObjEntry *e = h->e;

    if (!h->pins || e->idLen != idLen || memcmp(e->id, id, idLen) != 0)
        return 0;
    return sel == OBJ_PIN_GEN ? e->gen == value : sel == OBJ_PIN_OFFSET ? e->offset == value : 1;
}

ObjStatus objTableRelease(ObjTable *t, const void *id, size_t idLen, uint64_t holder, ObjPinSel sel,
                          uint64_t value)
{
    HolderRec *r = *holderSlot(t, holder);
    Hold *found = NULL;

    if (!r)
        return OBJ_ST_WRONGSTATE;
    /* One Hold per (holder, object): two matches are two objects of the id. */
    for (size_t i = 0; i < r->count; i++) {
        if (!holdMatches(&r->holds[i], id, idLen, sel, value))
            continue;
        if (found)
            return OBJ_ST_AMBIGUOUS;
        found = &r->holds[i];
        if (sel != OBJ_PIN_SOLE)
            break;
    }
    if (!found)
        return OBJ_ST_WRONGSTATE;
    holdUnpin(t, holder, found);
    return OBJ_ST_OK;
}

ObjStatus objTableUnpin(ObjTable *t, ObjEntry *e, uint64_t holder)
{
    HolderRec *r = *holderSlot(t, holder);

    if (!r)
        return OBJ_ST_WRONGSTATE;
    for (size_t i = 0; i < r->count; i++) {
        if (r->holds[i].e == e && r->holds[i].pins) {
            holdUnpin(t, holder, &r->holds[i]);
            return OBJ_ST_OK;
        }
    }
    return OBJ_ST_WRONGSTATE;
}

int objTableHolderGone(ObjTable *t, uint64_t holder)
{
    HolderRec **pp = holderSlot(t, holder);
    HolderRec *r = *pp;
    int aborted = 0;

    if (!r)
        return 0;
    *pp = r->next; /* detach first: nothing below may find it again */
    for (size_t i = 0; i < r->count; i++) {
        Hold *h = &r->holds[i];
        ObjEntry *e = h->e;
        if (h->created) { /* created objects are never pinned */
            t->st.aborts++;
            entryRemove(t, e);
            aborted++;
        } else if (h->pins) {
            e->pins -= h->pins;
            if (e->pins == 0)
                entryUnpinned(t, e);
        }
    }
    objHeapFree(OBJ_HEAP_STORE, r->holds);
    objHeapFree(OBJ_HEAP_STORE, r);
    return aborted;
}

void objTableSetEvictHook(ObjTable *t, void (*fn)(const ObjEntry *e, void *arg), void *arg)
{
    t->evictHook = fn;
    t->evictArg = arg;
}

void objTableSetMaxObjects(ObjTable *t, uint64_t max)
{
    t->st.maxObjects = max;
}

ObjCopy objTableCopyOf(const ObjEntry *e)
{
    if (!e->replica)
        return OBJ_COPY_PRIMARY;
    return e->protect ? OBJ_COPY_PROTECTED : OBJ_COPY_REPLICA;
}

/* See objtable.h. A copy that becomes a primary or protected keeps its
 * place in the hot set when it had one (a protected copy taking ownership
 * is no use of it). */
void objTableSetCopy(ObjTable *t, ObjEntry *e, ObjCopy c)
{
    if (e->state != OBJ_SEALED || e->deleting)
        return;
    if (e->protect)
        t->st.protectedObjects--;
    e->replica = c != OBJ_COPY_PRIMARY;
    e->protect = c == OBJ_COPY_PROTECTED;
    if (e->protect)
        t->st.protectedObjects++;
    if (copyEvictable(e)) {
        residRemove(t, e);
        if (e->pins == 0 && e->tier == OBJ_TIER_MEMORY && !lruLinked(e))
            lruAppend(t, e);
    } else {
        lruRemove(t, e);
        if (!residLinked(e))
            residTouch(t, e, 0);
    }
}

void objTableMarkReplica(ObjTable *t, ObjEntry *e)
{
    objTableSetCopy(t, e, OBJ_COPY_REPLICA);
}

/* ---- the spill tier ---------------------------------------------------------------- */

void objTableSetTier(ObjTable *t, const ObjTierOps *ops, int lruOnly)
{
    t->tierOps = *ops;
    t->lruOnly = lruOnly;
}

/* Add the unpinned in-memory entries of list l, oldest first, to out until
 * enough bytes are chosen. Returns the new count. */
static size_t spillPickFrom(ObjTable *t, ObjList *l, uint64_t want, uint64_t *got, uint64_t holder,
                            ObjEntry **out, size_t n, size_t max)
{
    ObjListLink *it, *next;

    objListForEachSafe(l, it, next) {
        if (n == max || *got >= want)
            break;
        ObjEntry *e = objListEntry(it, ObjEntry, resid);
        if (e->pins || e->tier != OBJ_TIER_MEMORY || e->sumPending)
            continue;
        if (objTablePin(t, e, holder) != OBJ_ST_OK)
            continue;
        e->tier = OBJ_TIER_SPILLING;
        residRemove(t, e);
        *got += allocBlockSize(e->block);
        out[n++] = e;
    }
    return n;
}

size_t objTableSpillPick(ObjTable *t, uint64_t need, uint64_t holder, ObjEntry **out, size_t max)
{
    AllocStats as;
    uint64_t got = 0;

    allocGetStats(t->alloc, &as);
    if (need > as.capacity)
        return 0;
    /* Free space may be scattered: ask for the whole request plus a quarter
     * from victims, unless what is free already covers it (then one round
     * more makes the difference). */
    uint64_t want = need + need / 4;
    size_t n = spillPickFrom(t, &t->probation, want, &got, holder, out, 0, max);
    return spillPickFrom(t, &t->protected, want, &got, holder, out, n, max);
}

int objTableSpillDone(ObjTable *t, ObjEntry *e, uint64_t holder, int ok, uint64_t fileNo)
{
    int kept = ok && e->pins == 1 && !e->deleting;

    if (kept) {
        residRemove(t, e); /* the pick took it off; a spilled entry is on no list */
        allocPut(t->alloc, e->block);
        e->block = NULL;
        e->tier = OBJ_TIER_SPILLED;
        e->fileNo = fileNo;
        e->uses = 0;
        t->st.tierObjects++;
        t->st.tierBytes += e->dataSize + e->metaSize;
    } else {
        e->tier = OBJ_TIER_MEMORY;
        residTouch(t, e, 0);
    }
    objTableUnpin(t, e, holder);
    return kept;
}

ObjStatus objTableRestoreBegin(ObjTable *t, ObjEntry *e, uint64_t holder)
{
    uint64_t need = e->dataSize + e->metaSize;

    if (e->tier != OBJ_TIER_SPILLED || e->deleting)
        return OBJ_ST_WRONGSTATE;
    Hold *h = holdGet(t, holder, e);
    if (!h)
        return OBJ_ST_OOM;
    AllocBlock *b = allocGet(t->alloc, need);
    if (!b && tableEvictFor(t, need))
        b = allocGet(t->alloc, need);
    if (!b) {
        holderCompact(t, holder);
        return OBJ_ST_OOM;
    }
    e->block = b;
    e->offset = allocBlockOffset(b);
    e->tier = OBJ_TIER_RESTORING;
    h->pins++;
    if (e->pins++ == 0)
        t->st.pinnedObjects++;
    return OBJ_ST_OK;
}

void objTableRestoreDone(ObjTable *t, ObjEntry *e, uint64_t holder, int ok)
{
    if (ok) {
        t->st.tierObjects--;
        t->st.tierBytes -= e->dataSize + e->metaSize;
        if (t->tierOps.discard)
            t->tierOps.discard(e->fileNo, e->dataSize + e->metaSize, t->tierOps.arg);
        e->fileNo = 0;
        e->tier = OBJ_TIER_MEMORY;
        residTouch(t, e, 0);
    } else {
        allocPut(t->alloc, e->block);
        e->block = NULL;
        e->offset = 0;
        e->tier = OBJ_TIER_SPILLED;
    }
    objTableUnpin(t, e, holder);
}

int objTableTierOpen(ObjTable *t, const ObjEntry *e)
{
    if (!e->fileNo || !t->tierOps.open)
        return -1;
    return t->tierOps.open(e->fileNo, t->tierOps.arg);
}

/* Reverse the bits of v (for the SCAN cursor). */
static uint64_t rev64(uint64_t v)
{
    v = ((v >> 1) & 0x5555555555555555ULL) | ((v & 0x5555555555555555ULL) << 1);
    v = ((v >> 2) & 0x3333333333333333ULL) | ((v & 0x3333333333333333ULL) << 2);
    v = ((v >> 4) & 0x0F0F0F0F0F0F0F0FULL) | ((v & 0x0F0F0F0F0F0F0F0FULL) << 4);
    v = ((v >> 8) & 0x00FF00FF00FF00FFULL) | ((v & 0x00FF00FF00FF00FFULL) << 8);
    v = ((v >> 16) & 0x0000FFFF0000FFFFULL) | ((v & 0x0000FFFF0000FFFFULL) << 16);
    return (v >> 32) | (v << 32);
}

/* The cursor increments its high bits first (reverse binary), so a bucket
 * split by growth is always visited through both of its halves later. */
uint64_t objTableScan(ObjTable *t, uint64_t cursor, size_t count,
                      void (*fn)(ObjEntry *e, void *arg), void *arg)
{
    size_t visited = 0;
    uint64_t v = cursor;

    if (count == 0)
        count = 1;
    do {
        for (ObjEntry *e = t->buckets[v & t->mask]; e; e = e->next) {
            if (e->state == OBJ_SEALED) {
                fn(e, arg);
                visited++;
            }
        }
        v |= ~t->mask;
        v = rev64(v);
        v++;
        v = rev64(v);
    } while (v != 0 && visited < count);
    return v;
}

void objTableGetStats(ObjTable *t, ObjTableStats *st)
{
    *st = t->st;
}

void objTableAllocStats(ObjTable *t, AllocStats *st)
{
    allocGetStats(t->alloc, st);
}

/* Is visible entry e on exactly the lists its copy kind and state call for:
 * the eviction list when an unpinned ordinary replica in memory, the hot
 * set when a sealed primary or protected copy in memory? 0 or -1. */
static int checkEntryLists(const ObjEntry *e)
{
    if ((e->protect && !e->replica) || e->want == 0)
        return -1;
    if (e->state != OBJ_SEALED)
        return e->protect || lruLinked(e) || residLinked(e) ? -1 : 0;
    int mem = e->tier == OBJ_TIER_MEMORY;
    if (lruLinked(e) != (copyEvictable(e) && mem && e->pins == 0))
        return -1;
    return residLinked(e) != (!copyEvictable(e) && mem) ? -1 : 0;
}

/* Does every entry of hot-set list l belong there (hot says which list)?
 * Adds the bytes of its hot entries to *hotBytes. 0 or -1. */
static int checkResidList(const ObjList *l, int hot, uint64_t *hotBytes)
{
    ObjListLink *it;

    objListForEach(l, it) {
        const ObjEntry *e = objListEntry(it, ObjEntry, resid);
        if (e->hot != hot || copyEvictable(e) || e->deleting || e->state != OBJ_SEALED ||
            e->tier != OBJ_TIER_MEMORY)
            return -1;
        if (hot)
            *hotBytes += e->dataSize + e->metaSize;
    }
    return 0;
}

int objTableCheck(ObjTable *t)
{
    uint64_t n = 0, sealed = 0, created = 0, bytes = 0, prot = 0, hotBytes = 0;

    if (allocCheck(t->alloc) != 0)
        return -1;
    for (uint64_t i = 0; i <= t->mask; i++) {
        for (ObjEntry *e = t->buckets[i]; e; e = e->next) {
            if ((e->hash & t->mask) != i || e->deleting)
                return -1;
            if ((e->block == NULL) != (e->tier == OBJ_TIER_SPILLED))
                return -1;
            if (e->block && (allocBlockOffset(e->block) != e->offset ||
                             allocBlockSize(e->block) < e->dataSize + e->metaSize))
                return -1;
            if (checkEntryLists(e) != 0)
                return -1;
            n++;
            if (e->state == OBJ_SEALED) {
                sealed++;
                prot += e->protect != 0;
                bytes += e->dataSize + e->metaSize;
            } else {
                created++;
            }
        }
    }
    if (n != t->st.objects || sealed != t->st.sealed || created != t->st.created ||
        bytes != t->st.bytesSealed || prot != t->st.protectedObjects)
        return -1;
    ObjListLink *l;
    objListForEach(&t->lru, l) {
        const ObjEntry *e = objListEntry(l, ObjEntry, lru);
        if (e->pins || !copyEvictable(e) || e->deleting || e->state != OBJ_SEALED ||
            e->tier != OBJ_TIER_MEMORY)
            return -1;
    }
    if (checkResidList(&t->protected, 1, &hotBytes) != 0 ||
        checkResidList(&t->probation, 0, &hotBytes) != 0)
        return -1;
    return hotBytes == t->protectedBytes ? 0 : -1;
}
