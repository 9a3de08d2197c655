/*
 * tier.h - the spill tier: a directory of files on a local file system
 * (NVMe, pmem with DAX) that holds the bytes of cold objects while their
 * arena memory is used by others, and one worker thread that writes and
 * reads them in large sequential I/O off the Redis main thread.
 *
 * Files are named by a counter of this node (never by an object id), mode
 * 0600, in a subdirectory of the node's own that a restarted node empties
 * first. Jobs go in with tierSubmit; finished ones come back through
 * tierReap, and the event fd says when there are some. What an object is
 * and where it lives is the object table's business, not this file's.
 * Design and settings: docs/tiers.md. Pure C: no Redis headers.
 */
#ifndef OBJSTORE_TIER_H
#define OBJSTORE_TIER_H

#include <stddef.h>
#include <stdint.h>

#include "common/list.h"

/* Errors of a job besides errno values: the file is not as long as the
 * object (truncated or grown behind the node's back), or its bytes do not
 * match the object's checksum. */
#define TIER_ESIZE     (-2)
#define TIER_ECHECKSUM (-3)

/* TIER_COPY reads an already open file (fd, closed by the worker) into a
 * buffer of the submitter's: a read that needs no arena room. */
typedef enum TierOp { TIER_SPILL = 1, TIER_RESTORE = 2, TIER_COPY = 3 } TierOp;

/* One write of an object's bytes to a new file, or one read of a file into
 * the object's arena block. The submitter owns the job; the buffer must
 * stay valid (pinned) until the job is reaped. */
typedef struct TierJob {
    TierOp op;
    uint64_t fileNo;   /* set by tierSubmit for a spill */
    int fd;            /* TIER_COPY: the open file */
    uint8_t *buf;      /* the object's data then metadata */
    uint64_t len;      /* data + metadata bytes */
    uint64_t checksum; /* restore: what the bytes must hash to */
    int err;           /* 0, an errno value, TIER_ESIZE or TIER_ECHECKSUM */
    int64_t usec;      /* time the worker spent on the I/O */
    void *user;
    ObjListLink link;
} TierJob;

typedef struct Tier Tier;

/* Open the tier in dir: create (0700) and lock dir/objstore-<tag>, empty it
 * of a dead node's files, start the worker. maxBytes caps the bytes on the
 * tier (0: only the file system's size). Returns NULL with a user-facing
 * reason in err. */
Tier *tierOpen(const char *dir, const char *tag, uint64_t maxBytes, char *err, size_t errLen);
/* Stop the worker (waiting for the job in progress), remove every file and
 * the directory. Accepts NULL. */
void tierClose(Tier *t);
/* Queue a job. A spill reserves its bytes first; past maxBytes it fails at
 * once: returns -1 with j->err = ENOSPC and the job is not queued. 0 when
 * queued. Any thread. */
int tierSubmit(Tier *t, TierJob *j);
/* A descriptor that turns readable when finished jobs are waiting. */
int tierEventFd(const Tier *t);
/* One finished job (first in, first out), or NULL. Clears the event fd when
 * it returns NULL. */
TierJob *tierReap(Tier *t);
/* Remove a file and give its bytes back to the cap. Any thread. */
void tierDiscard(Tier *t, uint64_t fileNo, uint64_t bytes);
/* Open a file for reading: an fd, or -1 with errno. */
int tierOpenFile(Tier *t, uint64_t fileNo);
/* Read exactly len bytes of the file open on fd into buf and check them
 * against checksum. Returns 0 or an error as in TierJob.err. */
int tierReadAll(int fd, uint8_t *buf, uint64_t len, uint64_t checksum);
/* A readable reason for a TierJob.err. */
const char *tierStrError(int err);
/* The tier's directory (this node's subdirectory). */
const char *tierPath(const Tier *t);
/* Bytes in the tier's files now (including reserved for writes in flight). */
uint64_t tierBytesUsed(const Tier *t);

#endif /* OBJSTORE_TIER_H */
