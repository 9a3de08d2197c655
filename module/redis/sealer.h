/*
 * sealer.h - the two background workers that keep a put's bytes walked once
 * (sealer.c): the checksum of a large sealed object, taken after OBJ.SEAL
 * has answered, and the scrub of arena ranges that deleted objects left, so
 * that OBJ.CREATE rarely has anything to clear. docs/architecture.md ("A
 * put touches its bytes once") and docs/security.md describe the rules.
 */
#ifndef OBJSTORE_SEALER_H
#define OBJSTORE_SEALER_H

#include "redismodule.h"
#include "stats.h"
#include "store/objtable.h"

/* Objects of at least this many bytes (data and metadata) get their
 * checksum in the background; smaller ones at once, which costs less than
 * the hand-over. */
#define SEALER_DEFER_MIN (1ULL << 20)

/* Start both workers. REDISMODULE_ERR, logged, when they cannot start. */
int sealerStart(RedisModuleCtx *ctx);
/* Stop both workers (at shutdown, before the arena goes). Checksums still
 * queued are never taken: their objects are neither published nor served. */
void sealerStop(void);
/* Seal created entry e for its creator holder. Large ones are sealed with
 * the checksum pending and queued for the worker, which publishes them once
 * it is known; small ones (and any when the worker is not running) get it
 * now and are published at once. Returns the table's status (OK or
 * WRONGSTATE); takes the table lock itself. */
ObjStatus sealerSeal(ObjEntry *e, uint64_t holder);
/* Checksums queued or being taken (OBJ.STATS checksums_pending). Can't fail. */
uint64_t sealerPending(void);
/* fn (NULL: none) runs on the main thread, without the table lock, whenever
 * checksums were recorded or dropped: objects that could not be spilled while
 * their checksum was pending may be spilled now (spill.c looks again). */
void sealerOnSettled(void (*fn)(void));
/* OBJ.STATS fields: checksums_deferred, checksums_pending, scrubbed_bytes,
 * arena_dirty_free_bytes. */
void sealerStats(ObjStatSink *sink);

#endif /* OBJSTORE_SEALER_H */
