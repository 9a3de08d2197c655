/*
 * node.h - the state of this node, shared by the Redis-facing files of the
 * module: its settings, its arena, its object table and its command
 * counters, defined in node.c. Functions live in the header of their own
 * file.
 *
 * Only the Redis main thread touches the counters and the waiters; the
 * object table has its own lock because the transfer engine shares it.
 */
#ifndef OBJSTORE_NODE_H
#define OBJSTORE_NODE_H

#include <stdint.h>

#include "store/arena.h"
#include "store/objtable.h"
#include "redismodule.h"

#define OBJ_MODULE_NAME    "objstore"
#define OBJ_MODULE_VERSION 1

/* Holder ids at or above this are not Redis clients (internal pins). */
#define OBJ_HOLDER_INTERNAL (1ULL << 63)

/* Every setting (see the table in config.c for names, defaults, limits). */
typedef struct ObjConfig {
    long long memory;     /* arena bytes */
    char arenaDir[256];   /* where the arena file lives */
    char arenaMode[8];    /* the arena file's creation mode, octal: 0600, 0640 or 0660 */
    long long prefault;   /* 1: the arena's page tables are filled at start */
    long long scrub;      /* 1: freed arena ranges are zeroed in the background */
    char nodeName[128];   /* "" = <host>:<port> */
    char directory[1024]; /* host:port of the directory Redis, or a Redis Cluster's seeds
                           * host:port,host:port,...; "" = this server */
    char directoryPassword[128];
    char transferBind[64];
    long long transferPort; /* -1 = Redis port + 10000, 0 = no TCP transfers */
    char announceAddr[64];  /* address other nodes dial; "" = transfer-bind */
    char clusterSecret[256];
    long long transferEncrypt; /* 1: TCP payloads are encrypted (AES-GCM), not only authenticated */
    long long fetchTimeoutMs;  /* OBJ.FETCH without TIMEOUT */
    long long heartbeatMs, nodeTtlMs;
    long long purgeTombstoneTtlS; /* how long a purge keeps a node away from bringing a copy back */
    char rdmaBind[64];            /* "" = announce address */
    long long rdmaPort;           /* -1 = Redis port + 20000, 0 = no RDMA */
    char rdmaDevice[64];
    long long rdmaReadMin;    /* RDMA inline/rendezvous threshold */
    long long uploadSlots;    /* large uploads at once before BUSY redirects (0: no cap) */
    long long rdmaClientPort; /* RESP over RDMA; -1 = Redis port + 30000, 0 = off */
    long long rdmaRxSize;     /* an RDMA client's RX buffer once authenticated */
    long long maxObjects;     /* -1 = memory / OBJ_LIMITS_BYTES_PER_OBJECT, 0 = no limit */
    char spillDir[256];       /* the spill tier's file system; "" = no tier (docs/tiers.md) */
    long long spillMax;       /* bytes the tier may hold; 0 = what the file system takes */
    long long spillServe;     /* spill-serve-budget: buffers serving spilled objects */
    char spillPolicy[16];     /* hot (recency and frequency) or lru (recency alone) */
    /* Copies (docs/cluster.md, "Copies, repair and drain"). */
    long long replicas;          /* an object's copies when a put names none */
    long long replicasMax;       /* the most a put may ask for */
    long long replicaTimeoutMs;  /* how long a seal waits for its copies (WAIT) */
    char nodeLabel[64];          /* failure domain (rack, zone): copies go to distinct ones */
    long long repairConcurrency; /* copies repair (and drain) make at once */
    long long repairIntervalMs;  /* a full repair sweep at least this often */
    long long drainOnShutdown;   /* 1: SHUTDOWN drains the node first */
    long long drainTimeoutMs;    /* how long SHUTDOWN waits for its drain */
} ObjConfig;

typedef struct ObjCounters {
    uint64_t puts, gets, pins, releases, blocked;
} ObjCounters;

typedef struct ObjNode {
    RedisModuleCtx *ctx; /* detached: for timers and logs outside commands */
    ObjConfig cfg;
    Arena arena;
    ObjTable *table;
    ObjCounters cnt;
    long long redisPort; /* this server's TCP port, 0 if none (settings.c) */
} ObjNode;

extern ObjNode objNode;

#endif /* OBJSTORE_NODE_H */
