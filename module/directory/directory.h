/*
 * directory.h - the object directory, kept in a Redis server (by default the
 * node's own) and reached with hiredis from one background thread, never
 * from the Redis main thread.
 *
 * The directory is one Redis, or a Redis Cluster given by seed addresses:
 * the thread reads CLUSTER SLOTS, keeps one connection per master, routes
 * each key by the slot of its hash tag (slots.h), pipelines each round of
 * commands to all the masters it touches, follows MOVED and ASK, and
 * re-reads the map when a master is lost (a failover). A single Redis is a
 * map of one master, on the same code path.
 *
 * Keys (hash tags keep an object's keys in one cluster slot, so a lookup is
 * one round trip to one shard; nothing is a key every node writes):
 *   objstore:node:<name>    hash  addr, tcp_port, rdma_addr, rdma_port,
 *                                 features, heartbeat_ms, label, draining,
 *                                 boot (PEXPIRE ttl)
 *   objstore:nodes:{b<k>}   set   names of the registered nodes of bucket k,
 *                                 k = CRC16(name) % 16 (16 sets over the slots)
 *   objstore:{<id>}:meta    hash  size, meta_size, checksum (16 hex digits),
 *                                 want, owner (the primary's node), or after a
 *                                 purge only tomb (PEXPIRE, versions.c)
 *   objstore:{<id>}:loc     set   names of nodes holding a sealed copy
 *   objstore:{<id>}:prot    zset  the holders whose copies count toward want
 *                                 (primary and protected copies), each scored
 *                                 by the boot id of the incarnation that
 *                                 published it (a restarted holder's old
 *                                 entry does not count)
 *   objstore:{<id>}:claim   string  the node repairing id (PX, dirClaim)
 *   objstore:{<name>}:versions  hash  a name's versions (versions.c)
 *   objstore:purgelog       stream  purged ids and generations (versions.c)
 *   objstore:mark:{<tag>}:<name>  string  this node's marker on the master
 *                                 serving slot(<tag>) (PX ttl, docs/cluster.md)
 *   (an id that is empty or starts with '}' cannot be its own hash tag:
 *   objstore:h{<hex CRC16(id)>}:<id>:meta, :loc, ... instead, slotsObjKey)
 *
 * The thread registers the node and renews it every heartbeat, so a dead
 * node drops out by itself when its key expires. Publish/unpublish requests
 * are queued and never block the caller. When the directory is unreachable
 * the thread retries with backoff; once it is back it re-registers and
 * re-publishes every local object (through the snapshot callback), because
 * a restarted directory Redis may have lost everything; so it does when a
 * heartbeat finds the registration or a marker gone while the link stayed up.
 * Pure C (hiredis + pthreads): no Redis module headers.
 */
#ifndef OBJSTORE_DIRECTORY_H
#define OBJSTORE_DIRECTORY_H

#include <stddef.h>
#include <stdint.h>

#define OBJ_DIR_NAME_MAX  128
#define OBJ_DIR_ADDR_MAX  64
#define OBJ_DIR_SEEDS_MAX 16 /* seeds a `directory` list may name */

/* What kind of copy a publish speaks for. The directory keeps one meta per
 * id and converges on the primary's: a primary's fresh seal replaces a meta
 * of another generation (size, meta size or checksum differ) and resets the
 * location and protected sets to itself; a replica's or protected copy's is
 * added only to a meta of its own generation (or creates one where there is
 * none), and is refused otherwise: it is a copy of an id that now names
 * another object. A primary's re-publish or takeover of the generation that
 * meta.owner gives to another node is refused as moved (DirConfig.moved);
 * of another generation, while meta.owner names another node, as stale
 * (DirConfig.staleReplica). docs/cluster.md, "Copies, repair and drain". */
typedef enum DirCopy {
    DIR_COPY_PRIMARY = 0,
    DIR_COPY_REPLICA = 1,
    DIR_COPY_PROTECTED = 2 /* counts toward want (in the prot set), not the owner's */
} DirCopy;

#define OBJ_DIR_LABEL_MAX 64
/* Boot ids are 1..OBJ_DIR_BOOT_MAX: below 2^52, a sorted set's score (a
 * double) holds them exactly. */
#define OBJ_DIR_BOOT_MAX ((1ULL << 52) - 1)

typedef struct DirConfig {
    char host[256]; /* directory Redis (when seeds is empty) */
    int port;
    char seeds[1024];   /* or: "host:port[,host:port...]", a Redis Cluster's seeds or one Redis */
    char password[128]; /* AUTH if non-empty */
    char nodeName[OBJ_DIR_NAME_MAX];
    char addr[OBJ_DIR_ADDR_MAX]; /* this node's transfer address (TCP) */
    int tcpPort;
    char rdmaAddr[OBJ_DIR_ADDR_MAX]; /* "" when no RDMA */
    int rdmaPort;
    uint32_t features;             /* OBJ_FEAT_* (wire.h) */
    char label[OBJ_DIR_LABEL_MAX]; /* failure domain (rack, zone); "" when none */
    int heartbeatMs;               /* renew interval, e.g. 1000 */
    long long tombTtlMs; /* how long a purge's tombstone lives; <= 0: OBJ_DIR_TOMB_TTL_MS */
    int ttlMs;           /* node key lifetime, e.g. 5000 */
    /* This incarnation's boot id (1..OBJ_DIR_BOOT_MAX), or 0 (the normal
     * case): the process's own, drawn at its first dirStart and kept until it
     * exits. A test sets one to play a node restarted under the same name. */
    uint64_t boot;
    /* Where notices and warnings go ("notice", "warning"), from the directory
     * thread; NULL: nowhere. */
    void (*log)(const char *level, const char *msg);
    /* Called on the directory thread when the directory refused this node's
     * copy of id (checksum: the copy's) because the id names another object
     * now: a replica or protected copy of another generation, or a primary's
     * re-publish of another generation while meta.owner names another node;
     * the node may drop that copy. NULL: nothing is called. */
    void (*staleReplica)(const char *id, size_t idLen, uint64_t checksum);
    /* Called on the directory thread when the directory refused this node's
     * primary of id as moved: a re-publish or takeover of the id's
     * generation (checksum) while meta.owner names owner, another node. The
     * directory has already taken this node out of the id's protected set;
     * the node demotes its copy to a REPLICA and publishes it as such. NULL:
     * nothing is called. */
    void (*moved)(const char *id, size_t idLen, uint64_t checksum, const char *owner);
    /* Called on the directory thread just before a publish is sent: whether
     * this node still holds that copy of id (sealed, same checksum and kind:
     * PRIMARY, PROTECTED or REPLICA).
     * A copy deleted since its publish was queued (or since a re-publish
     * listed it) is not published: a primary's publish takes the id's entry
     * over, so a late one of a deleted generation would replace the entry of
     * the id's live object elsewhere, and the unpublish queued behind it
     * would then leave the id unlocated. NULL: every publish is sent. */
    int (*holds)(const char *id, size_t idLen, uint64_t checksum, DirCopy copy);
    /* Called on the directory thread when id was purged cluster-wide
     * (OBJ.PURGE, a dropped version): a purge log entry still backed by its
     * tombstone, or a re-publish or replica publish of this node that a
     * tombstone names. The node deletes its copy of id when it is of that
     * generation (deferred while pinned). NULL: nothing is called. */
    void (*purged)(const char *id, size_t idLen, uint64_t size, uint64_t metaSize,
                   uint64_t checksum);
} DirConfig;

/* A live node as the directory sees it. */
typedef struct DirNode {
    char name[OBJ_DIR_NAME_MAX];
    char addr[OBJ_DIR_ADDR_MAX];
    int tcpPort;
    char rdmaAddr[OBJ_DIR_ADDR_MAX];
    int rdmaPort;
    uint32_t features;
    int64_t heartbeatMs;           /* wall clock of its last heartbeat */
    char label[OBJ_DIR_LABEL_MAX]; /* its failure domain, "" when none */
    int draining;                  /* it takes no new objects (dirSetDraining) */
    uint64_t boot;                 /* its incarnation (registration field boot); 0 when absent */
    /* Object lookups: in the id's protected set, published by this very
     * incarnation (the entry's boot is the node's), so a holder whose copy
     * counts; an entry of an earlier incarnation (a node restarted empty
     * under the same name) reads as 0. */
    int prot;
} DirNode;

typedef enum DirStatus {
    DIR_FOUND = 0,
    DIR_NOTFOUND = 1,    /* no meta, or no live location */
    DIR_UNAVAILABLE = 2, /* the directory Redis (or the shard of the key) cannot be reached */
    DIR_REFUSED = 3      /* bad input the directory refused; err is the whole reply, code first */
} DirStatus;

/* One version of a name: its number and its manifest's id. */
typedef struct DirVersion {
    uint64_t version;
    char *id;
    size_t idLen;
} DirVersion;

/* Result of a lookup or listing, heap-allocated; whoever receives it frees
 * it (struct, nodes and id) with dirResultFree. */
typedef struct DirResult {
    DirStatus status;
    char err[160];                     /* reason when not DIR_FOUND (for DIR_UNAVAILABLE: why the
                                        * directory cannot be reached, e.g. "cannot connect to
                                        * directory 127.0.0.1:6379: Connection refused") */
    uint64_t size, metaSize, checksum; /* of the object (lookups) */
    uint32_t want;                     /* lookups: copies wanted (meta.want, 1 when absent) */
    char owner[OBJ_DIR_NAME_MAX];      /* lookups: meta.owner, "" when absent */
    int ownerLive;                     /* lookups: owner is among the live nodes listed */
    DirNode *nodes;                    /* live locations (lookups) or all live nodes (dirNodes) */
    size_t count;
    /* The lookup's key, copied, so callbacks need no state of their own. */
    char *id;
    size_t idLen;
    DirVersion *versions; /* version requests: the versions answered, oldest first */
    size_t nVersions;
    uint64_t known; /* DIR_V_PURGE: how many of the ids the directory knew */
} DirResult;

typedef void DirResultFn(DirResult *res, void *arg);

/* For re-publishing: call emit(id, idLen, size, metaSize, checksum, copy,
 * want, emitArg) for every sealed local object. Runs on the directory thread. emit only
 * copies its arguments (the network I/O happens after the snapshot returns),
 * so the snapshot may hold the object table's lock while it iterates. */
typedef void DirEmitFn(const char *id, size_t idLen, uint64_t size, uint64_t metaSize,
                       uint64_t checksum, DirCopy copy, uint32_t want, void *emitArg);
typedef void DirSnapshotFn(DirEmitFn *emit, void *emitArg, void *arg);

/* Start the directory thread. Returns 0, or -1 (with errno) when the thread
 * cannot start: EINVAL for an unusable config (empty nodeName, a port out of
 * range, a malformed seed list, heartbeatMs <= 0 or ttlMs <= heartbeatMs, a boot
 * above OBJ_DIR_BOOT_MAX), EBUSY when already
 * started. An unreachable directory is NOT an error here. May be called
 * again after dirStop. */
int dirStart(const DirConfig *cfg, DirSnapshotFn *snapshot, void *snapshotArg);
/* The server the module runs in has opened its listeners (called from the
 * first turn of its event loop): when the directory is not connected yet,
 * connect at once and start the backoff anew. Redis 7.2+ and Valkey open
 * their ports only after loading modules, so a node whose directory is its
 * own server is refused until then and would otherwise wait out its
 * backoff. Any thread; does nothing when not started. */
void dirServerUp(void);
/* Unregister (best effort, bounded by a short timeout) and join the thread. */
void dirStop(void);
/* The boot id this node registers and scores its prot entries with (see
 * DirConfig.boot); 0 before the first dirStart. Any thread. */
uint64_t dirBootId(void);

/* Queue a publication of this node as a location of id (copy: which kind
 * of copy this node holds, see DirCopy; want: how many copies id should
 * have, 0 taken as 1). A PRIMARY's publish is a fresh seal when takeoverFrom
 * is NULL, and replaces any other generation; with takeoverFrom it is a
 * takeover under the re-publish's rules: it takes the id's generation over
 * from that node (a node name; "": from a meta without owner, e.g. after
 * the directory lost it, keeping the other holders listed), as a re-publish
 * does from no owner or from this node (see DirCopy). */
void dirPublish(const char *id, size_t idLen, uint64_t size, uint64_t metaSize, uint64_t checksum,
                DirCopy copy, uint32_t want, const char *takeoverFrom);
/* Queue the removal of this node as a location (and holder) of id. */
void dirUnpublish(const char *id, size_t idLen);
/* Mark this node draining (on != 0) or not in its registration (field
 * draining): written by the thread's next turn, and with every heartbeat.
 * Any thread. */
void dirSetDraining(int on);
/* Claim id for ttlMs: SET objstore:{<id>}:claim <this node> NX PX ttlMs, or
 * PEXPIRE when this node holds it already. cb runs as for dirLookup:
 * DIR_FOUND won (or renewed), DIR_REFUSED another node holds it (err
 * "BUSY ... '<node>'"), DIR_UNAVAILABLE. */
void dirClaim(const char *id, size_t idLen, int ttlMs, DirResultFn *cb, void *arg);
/* cb runs once every publish and unpublish queued before this call has been
 * answered by the directory (DIR_FOUND), or with DIR_UNAVAILABLE when the
 * directory cannot be reached (or is not running: then at once, as for
 * dirLookup). */
void dirBarrier(DirResultFn *cb, void *arg);
/* Look id up; cb(res, arg) runs later on the directory thread, exactly once
 * (also when the directory is down: res->status == DIR_UNAVAILABLE). Only
 * when the directory thread is not running (before dirStart, after dirStop)
 * does cb run at once, on the caller's thread, with DIR_UNAVAILABLE.
 * Publishes/unpublishes are simply dropped then. */
void dirLookup(const char *id, size_t idLen, DirResultFn *cb, void *arg);
/* Look one node up by name (objstore:node:<name>): DIR_FOUND with the node
 * as res->nodes[0] (count 1), DIR_NOTFOUND when it is not registered (or its
 * key expired), DIR_UNAVAILABLE as for dirLookup; res->id holds the name.
 * cb runs as for dirLookup. Not counted in DirStats.lookups (objects only). */
void dirLookupNode(const char *name, size_t nameLen, DirResultFn *cb, void *arg);
/* List live nodes (res->nodes); cb runs on the directory thread. */
void dirListNodes(DirResultFn *cb, void *arg);
void dirResultFree(DirResult *res);

/* Named versions and the cluster-wide delete (versions.c, docs/cluster.md). */
typedef enum DirVerKind {
    DIR_V_PUBLISH, /* ids[0] the manifest, ids[1..] the parts; version, retain */
    DIR_V_LATEST,  /* the newest version (nVersions 1), DIR_NOTFOUND when none */
    DIR_V_GET,     /* version's manifest (nVersions 1), DIR_NOTFOUND when none */
    DIR_V_LIST,    /* every version, oldest first */
    DIR_V_DROP,    /* version: gone at once; its ids no other version names purged */
    DIR_V_PURGE    /* ids: purged cluster-wide; res->known counts those known */
} DirVerKind;
/* Largest version number (versions are exact in the directory's Lua). */
#define OBJ_DIR_VERSION_MAX 9007199254740991ULL
/* Run one version request for name (ignored by DIR_V_PURGE); the ids are
 * copied. cb runs exactly once, as for dirLookup: DIR_FOUND on success,
 * DIR_NOTFOUND or DIR_REFUSED with err the whole error reply (code word
 * first), DIR_UNAVAILABLE when the directory cannot be reached. */
void dirVersionRequest(DirVerKind kind, const char *name, size_t nameLen, uint64_t version,
                       uint64_t retain, size_t nIds, const char *const *ids, const size_t *idLens,
                       DirResultFn *cb, void *arg);

typedef struct DirStats {
    int connected;
    uint64_t publishes, unpublishes, lookups, reconnects, errors;
    uint64_t queued;         /* publishes and unpublishes not yet answered */
    uint64_t staleReplicas;  /* replica publishes refused: the id names another object now */
    uint64_t purgesApplied;  /* local copies handed to DirConfig.purged (log or tombstone) */
    uint64_t movedPrimaries; /* primary publishes refused as moved (DirConfig.moved) */
    char lastError[128];     /* text of the latest error counted in errors, or "" */
} DirStats;
void dirGetStats(DirStats *st);

#endif /* OBJSTORE_DIRECTORY_H */
