/*
 * objtable.h - the object table: id -> where the object lives in the arena,
 * its state (created / sealed), its pins and who holds them.
 *
 * The table owns the arena allocator, so an object's memory and its entry
 * come and go together. It also records, per holder (a Redis client id, or a
 * transfer), which objects it created and which it pinned, so that a holder
 * that goes away can be cleaned up in time proportional to what it held.
 *
 * Concurrency: one mutex guards the table; every function below expects the
 * caller to hold it (objTableLock/Unlock) unless it says otherwise. Callers
 * keep critical sections to bookkeeping: bytes are copied outside the lock,
 * under a pin (a pinned object's memory is never freed or moved).
 * Pure C: no Redis headers, unit-tested on its own.
 */
#ifndef OBJSTORE_OBJTABLE_H
#define OBJSTORE_OBJTABLE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "common/list.h"

#define OBJ_ID_MAX 512
/* The holder of the pins that spill and restore jobs take (bit 63: not a
 * Redis client; bit 60: no other internal holder uses it). Its pins are not
 * uses of the object. */
#define OBJ_HOLDER_TIER ((1ULL << 63) | (1ULL << 60))

/* Result codes shared by the table and the command layer. */
typedef enum ObjStatus {
    OBJ_ST_OK = 0,
    OBJ_ST_EXISTS,     /* id already present (created or sealed) */
    OBJ_ST_OOM,        /* arena cannot hold it */
    OBJ_ST_NOTFOUND,   /* no visible object with that id */
    OBJ_ST_WRONGSTATE, /* not allowed in this state / by this holder */
    OBJ_ST_DEFERRED,   /* delete accepted, memory freed at the last unpin */
    OBJ_ST_AMBIGUOUS,  /* a release that names no pin, while the holder pins several objects */
    OBJ_ST_LIMIT,      /* the table holds max-objects objects (see objTableSetMaxObjects) */
    OBJ_ST_SPILLED     /* sealed, but its bytes are on the spill tier (or coming back) */
} ObjStatus;

typedef enum ObjState { OBJ_CREATED = 0, OBJ_SEALED = 1 } ObjState;

/* Where a sealed object's bytes are (docs/tiers.md). Only a SPILLED entry
 * has no arena block; SPILLING and RESTORING entries hold a pin of the tier
 * job that moves them, so their block cannot go while the worker uses it. */
typedef enum ObjTier {
    OBJ_TIER_MEMORY = 0,
    OBJ_TIER_SPILLING,  /* in memory and readable; a copy is being written out */
    OBJ_TIER_SPILLED,   /* only in its tier file */
    OBJ_TIER_RESTORING, /* arena block reserved, the file is being read into it */
} ObjTier;

/* A pin count, per object and per holder. 64 bits: a client that pins one
 * object 2^32 times must not wrap it to zero and have the object freed
 * under its remaining pins. */
typedef uint64_t ObjPinCount;

typedef struct ObjEntry {
    char *id;
    size_t idLen;
    uint64_t hash;
    uint64_t gen; /* this object's number on this node: one per creation, never reused */
    AllocBlock *block;
    uint64_t offset; /* data offset in the arena; metadata follows the data */
    uint64_t dataSize;
    uint64_t metaSize;
    ObjState state;
    int deleting;  /* unlinked from the index, freed when pins reach 0 */
    int replica;   /* a fetched copy: may be evicted when unpinned (unless protect) */
    int protect;   /* a replica that counts toward want: never evicted, spilled like a primary */
    uint32_t want; /* how many copies the object should have (1 unless asked for more) */
    ObjPinCount pins;
    uint64_t creator;      /* holder that created it */
    int64_t createdMs;     /* wall clock */
    uint64_t lastUse;      /* table tick of the last pin/get, for LRU eviction */
    uint64_t checksum;     /* XXH3-64 of data then metadata, set at seal */
    int sumPending;        /* sealed, its checksum still being taken (objTableSealPending) */
    uint64_t staleBytes;   /* leading bytes that may still hold a freed object's data */
    struct ObjEntry *next; /* hash chain */
    ObjListLink lru;       /* evictable replicas (unpinned, sealed); self-linked when not */
    ObjTier tier;
    uint64_t fileNo;   /* its tier file (SPILLED, RESTORING), 0 when none */
    uint32_t uses;     /* pins and gets since it came into memory (saturates) */
    int hot;           /* on the protected list of the hot set, not the probation one */
    ObjListLink resid; /* sealed primaries in memory, by recency (see objTableSpillPick) */
} ObjEntry;

typedef struct ObjTableStats {
    uint64_t objects, sealed, created, pinnedObjects, deleting, bytesSealed;
    uint64_t creates, seals, aborts, deletes, deferredDeletes, oomErrors, evictions;
    uint64_t maxObjects;             /* objTableSetMaxObjects; 0: no limit */
    uint64_t limitErrors;            /* creates refused at maxObjects (also counted in oomErrors) */
    uint64_t tierObjects, tierBytes; /* spilled (or being restored): their bytes are on disk */
    uint64_t protectedObjects;       /* visible sealed copies of kind OBJ_COPY_PROTECTED */
} ObjTableStats;

/* What the table asks of the spill tier: drop a file of an entry that is
 * freed while spilled, open one for reading (a serve from the tier). Called
 * under the table lock. */
typedef struct ObjTierOps {
    void (*discard)(uint64_t fileNo, uint64_t bytes, void *arg);
    int (*open)(uint64_t fileNo, void *arg); /* an fd, or -1 with errno */
    void *arg;
} ObjTierOps;

typedef struct ObjTable ObjTable;

/* Zero the first `upTo` bytes of a created entry's range (data, then
 * metadata) where an earlier object may have left bytes, so that a created
 * object reads as zeros until written. A creator that will overwrite the
 * whole range itself (OBJ.PUT, a fetched copy) need not call it. Needs no
 * lock: only the creator touches a created entry's bytes. Can't fail. */
void objTableClearStale(ObjEntry *e, uint8_t *arenaBase, uint64_t upTo);

/* Create a table managing an arena of arenaSize bytes; NULL on OOM. */
ObjTable *objTableCreate(uint64_t arenaSize);
/* Free every entry and the allocator. No lock needed (no other users). */
void objTableDestroy(ObjTable *t);
void objTableLock(ObjTable *t);
void objTableUnlock(ObjTable *t);

/* The visible entry with this id (created or sealed, not deleting), or NULL. */
ObjEntry *objTableFind(ObjTable *t, const void *id, size_t idLen);

/* Reserve dataSize + metaSize bytes and add a created entry owned by holder.
 * Returns OBJ_ST_OK (and *out), OBJ_ST_EXISTS, OBJ_ST_LIMIT (the table holds
 * max objects) or OBJ_ST_OOM (both after evicting unpinned replicas if that
 * makes room). Ids are 1..OBJ_ID_MAX bytes: the caller validates. */
ObjStatus objTableCreateEntry(ObjTable *t, const void *id, size_t idLen, uint64_t dataSize,
                              uint64_t metaSize, uint64_t holder, ObjEntry **out);
/* created -> sealed, by its creator. OBJ_ST_WRONGSTATE otherwise. */
ObjStatus objTableSeal(ObjTable *t, ObjEntry *e, uint64_t holder, uint64_t checksum);
/* created -> sealed, by its creator, with the checksum still to come:
 * sumPending until objTableSumDone. Such an entry is never spilled, and
 * freeing it (a delete, the last unpin of a deleted one) first calls the
 * hook of objTableSetSumCancel, so that nothing reads its bytes after.
 * OBJ_ST_WRONGSTATE (not its creator), changing nothing. */
ObjStatus objTableSealPending(ObjTable *t, ObjEntry *e, uint64_t holder);
/* The checksum of entry e, sealed pending and not freed since, is sum. */
void objTableSumDone(ObjTable *t, ObjEntry *e, uint64_t sum);
/* fn(e, arg) is called, under the table lock, before an entry whose
 * checksum is pending is freed; it returns once nobody reads e's bytes. */
void objTableSetSumCancel(ObjTable *t, void (*fn)(const ObjEntry *e, void *arg), void *arg);
/* Zero up to maxBytes of arena bytes that freed objects left (see
 * allocScrub); the bytes cleared, 0 when none are left. Takes the lock. */
uint64_t objTableScrub(ObjTable *t, uint8_t *arenaBase, uint64_t maxBytes);
/* Bytes of free ranges not scrubbed yet. Caller holds the lock. */
uint64_t objTableDirtyFreeBytes(ObjTable *t);
/* Free a created entry, by its creator. OBJ_ST_WRONGSTATE otherwise. */
ObjStatus objTableAbort(ObjTable *t, ObjEntry *e, uint64_t holder);
/* Delete a sealed entry: OBJ_ST_OK (freed) or OBJ_ST_DEFERRED (pinned; the id
 * is gone at once). OBJ_ST_WRONGSTATE for a created entry. */
ObjStatus objTableDelete(ObjTable *t, ObjEntry *e);
/* Pin a sealed entry on behalf of holder. OBJ_ST_WRONGSTATE if not sealed. */
ObjStatus objTablePin(ObjTable *t, ObjEntry *e, uint64_t holder);
/* Hold a created entry on behalf of holder (a relay sending the bytes that
 * have landed in it): its memory then outlives an abort until the holder
 * unpins it (objTableUnpin, objTableHolderGone), and a seal keeps the pin.
 * The entry stays a created one to everyone else. OBJ_ST_WRONGSTATE unless
 * created (and not given up), OBJ_ST_OOM. */
ObjStatus objTablePinCreated(ObjTable *t, ObjEntry *e, uint64_t holder);
/* Which of a holder's pins of an id a release drops: an id may name a
 * deleted-but-pinned object and its successor at once, so a release names
 * the object by the generation or the offset its pin returned. */
typedef enum ObjPinSel {
    OBJ_PIN_SOLE,   /* the holder's only pinned object of that id */
    OBJ_PIN_GEN,    /* the one whose gen is the value */
    OBJ_PIN_OFFSET, /* the one whose offset is the value */
} ObjPinSel;
/* Drop one pin that holder has on an object with this id (also one that was
 * deleted while pinned), chosen by sel and value. OBJ_ST_WRONGSTATE if
 * holder holds no such pin; OBJ_ST_AMBIGUOUS (nothing dropped) for
 * OBJ_PIN_SOLE while holder pins more than one object of that id. */
ObjStatus objTableRelease(ObjTable *t, const void *id, size_t idLen, uint64_t holder, ObjPinSel sel,
                          uint64_t value);
/* Drop one pin on exactly this entry (for holders that keep the pointer). */
ObjStatus objTableUnpin(ObjTable *t, ObjEntry *e, uint64_t holder);
/* A holder went away: abort what it created, drop every pin it held.
 * Returns the number of objects aborted. */
int objTableHolderGone(ObjTable *t, uint64_t holder);
/* Call fn(e, arg) for each replica just before eviction frees it (under the
 * table lock: fn must only queue work, e.g. a directory removal). */
void objTableSetEvictHook(ObjTable *t, void (*fn)(const ObjEntry *e, void *arg), void *arg);
/* Cap the entries the table holds (visible ones and those deleted but still
 * pinned: each costs heap outside the arena) at max; 0: no limit. Lowering
 * it below the current count refuses new entries until enough go. */
void objTableSetMaxObjects(ObjTable *t, uint64_t max);
/* What a copy on this node is (docs/tiers.md#copy-kinds). The primary and a
 * protected copy count toward the object's want: neither is ever evicted,
 * both are spilled under pressure; an ordinary replica is evicted (LRU) and
 * never spilled. PROTECTED is replica && protect. */
typedef enum ObjCopy { OBJ_COPY_PRIMARY = 0, OBJ_COPY_PROTECTED, OBJ_COPY_REPLICA } ObjCopy;
/* The kind of e's copy. Caller holds the table lock. Can't fail. */
ObjCopy objTableCopyOf(const ObjEntry *e);
/* Make sealed entry e (not deleting) a copy of kind c, moving it between
 * the eviction list (unpinned ordinary replicas in memory) and the spill
 * candidates (primaries and protected copies in memory); counts
 * protectedObjects. A spilled copy made a REPLICA stays on the tier until it
 * is read back, then is evictable. No-op for a created or deleting entry. */
void objTableSetCopy(ObjTable *t, ObjEntry *e, ObjCopy c);
/* objTableSetCopy(t, e, OBJ_COPY_REPLICA): evictable when unpinned. */
void objTableMarkReplica(ObjTable *t, ObjEntry *e);

/* ---- the spill tier (docs/tiers.md) ------------------------------------------------------ */

/* Install the tier's callbacks; lruOnly picks victims by recency alone (the
 * baseline the benchmark compares with) instead of the scan-resistant hot set. */
void objTableSetTier(ObjTable *t, const ObjTierOps *ops, int lruOnly);
/* Choose cold, unpinned, sealed primaries and protected copies in memory to
 * spill so that a block of `need` bytes can fit: at most max of them,
 * coldest first, until what is free plus what they give back reaches need
 * (with a margin for fragmentation). Each is marked SPILLING and pinned by holder. Returns how
 * many were chosen (0: nothing can be moved). */
size_t objTableSpillPick(ObjTable *t, uint64_t need, uint64_t holder, ObjEntry **out, size_t max);
/* A spill of e ended (ok: its file fileNo holds the bytes). Returns 1 when e
 * is now SPILLED (its block freed, the file kept), 0 when e stays in memory
 * (the write failed, it was pinned or deleted meanwhile) and the caller must
 * drop the file. Drops holder's pin (which may free a deleted entry). */
int objTableSpillDone(ObjTable *t, ObjEntry *e, uint64_t holder, int ok, uint64_t fileNo);
/* Reserve an arena block for spilled e and mark it RESTORING, pinned by
 * holder. OBJ_ST_OOM when no room (after evicting replicas), OBJ_ST_WRONGSTATE
 * when e is not SPILLED. */
ObjStatus objTableRestoreBegin(ObjTable *t, ObjEntry *e, uint64_t holder);
/* A restore of e ended. ok: e is in memory again and its file is dropped;
 * else its block is given back and e stays SPILLED. Drops holder's pin. */
void objTableRestoreDone(ObjTable *t, ObjEntry *e, uint64_t holder, int ok);
/* Open the file of a SPILLED or RESTORING entry for reading (fd), or -1. */
int objTableTierOpen(ObjTable *t, const ObjEntry *e);

/* Visit the entries of a SCAN-style cursor step: calls fn for each sealed
 * entry in the next bucket(s) until about `count` were visited. Returns the
 * next cursor (0 when the iteration is complete). Entries present for the
 * whole iteration are returned at least once, even if the table grows. */
uint64_t objTableScan(ObjTable *t, uint64_t cursor, size_t count,
                      void (*fn)(ObjEntry *e, void *arg), void *arg);

void objTableGetStats(ObjTable *t, ObjTableStats *st);
void objTableAllocStats(ObjTable *t, AllocStats *st);
/* Verify every invariant (entries vs allocator vs holders); 0 or -1. */
int objTableCheck(ObjTable *t);

#endif /* OBJSTORE_OBJTABLE_H */
