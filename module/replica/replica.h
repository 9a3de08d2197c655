/*
 * replica.h - copies that outlive their node: the replica manager places the
 * copies an object's replica count asks for (at seal), restores them when a
 * holder dies (repair), moves ownership off a dead owner, and moves a
 * draining node's objects elsewhere. It runs on a thread of its own and
 * works through the directory (directory.h) and the transfer engine's REPL
 * requests (engine.h). How and what is promised: docs/cluster.md ("Copies,
 * repair and drain"). Pure C: no Redis headers.
 */
#ifndef OBJSTORE_REPLICA_H
#define OBJSTORE_REPLICA_H

#include <stddef.h>
#include <stdint.h>

#include "directory/directory.h"
#include "store/objtable.h"
#include "transfer/engine.h"

/* The most copies an object may ask for (replicas-max is at most this). */
#define OBJ_REPLICAS_MAX 16

typedef struct ReplicaConfig {
    ObjTable *table;
    char nodeName[OBJ_DIR_NAME_MAX];
    int heartbeatMs;       /* how often the live node set is read */
    int repairIntervalMs;  /* a full repair sweep at least this often */
    int repairConcurrency; /* copies made at once by repair and drain, each */
    void (*log)(const char *level, const char *msg);
} ReplicaConfig;

/* Start the manager's thread. Returns 0, or -1 (errno) when it cannot. */
int replicaStart(const ReplicaConfig *cfg);
/* Stop it: placements in flight are dropped, their callbacks run first. */
void replicaStop(void);
/* Change the repair settings at run time. */
void replicaConfigure(int repairIntervalMs, int repairConcurrency);

/* Runs once per placement that someone waits for, on the manager's thread
 * (only thread-safe work: unblock a client): holders is the number of live
 * nodes holding the object, this one included. */
typedef void ReplicaDoneFn(void *arg, uint32_t holders);

/* This node's primary id (checksum, bytes of data and metadata) is sealed
 * and its publish queued: place want - 1 more copies. done(arg, holders)
 * runs when want holders are reached, or at replyAtUs (utilMonoUs) with
 * the count reached; copies in flight then go on. done may be NULL. */
void replicaPlace(const char *id, size_t idLen, uint64_t checksum, uint64_t bytes, uint32_t want,
                  int64_t replyAtUs, ReplicaDoneFn *done, void *arg);

/* Engine callbacks (EngineConfig.onReplDone, onReplicated, mayReplicate). */
void replicaOnReplDone(ReplReq *r);
int replicaOnReplicated(const char *peer, const char *id, size_t idLen, uint64_t checksum,
                        uint32_t flags, uint32_t want, char *err, size_t errLen);
int replicaMayReplicate(char *err, size_t errLen);
/* Directory callback (DirConfig.moved): the directory names another owner
 * of id; this node's primary of that generation becomes a replica. */
void replicaOnMoved(const char *id, size_t idLen, uint64_t checksum, const char *owner);

typedef enum ReplicaDrainState {
    REPLICA_DRAIN_IDLE = 0,
    REPLICA_DRAIN_DRAINING = 1,
    REPLICA_DRAIN_DRAINED = 2
} ReplicaDrainState;

typedef struct ReplicaDrainStatus {
    ReplicaDrainState state;
    uint64_t left, moved, bytes, failures;
    char lastError[160];
} ReplicaDrainStatus;

/* Start draining (nothing when already draining or drained): new objects
 * are refused, every primary and protected copy is moved to other nodes. */
void replicaDrainStart(void);
/* Back to idle: objects are taken again; copies not moved yet stay. */
void replicaDrainCancel(void);
void replicaDrainGet(ReplicaDrainStatus *st);
/* Is the node draining or drained (new objects refused)? Any thread. */
int replicaDraining(void);

typedef struct ReplicaStats {
    uint64_t below;    /* objects held here short of their count, at the last sweep */
    uint64_t placed;   /* copies made for puts */
    uint64_t repairs;  /* copies made by repair */
    uint64_t inFlight; /* repair copies being made now */
    uint64_t repairBytes;
    uint64_t repairFailures;
    uint64_t takeovers; /* objects this node took ownership of */
    uint64_t trimmed;   /* surplus protected copies this node released */
    uint64_t sweeps;
} ReplicaStats;
void replicaGetStats(ReplicaStats *st);

#endif /* OBJSTORE_REPLICA_H */
