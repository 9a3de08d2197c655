/*
 * conntype.h - the RDMA door: Redis clients over RDMA as real Redis
 * clients. conntype.c implements Redis 7.0's ConnectionType on the RDMA
 * stream endpoint (rdma/stream.h) and creates a Redis client for every
 * accepted stream; door.c (module API side) starts and stops it.
 *
 * Plain C on purpose: conntype.c includes Redis's own server.h (the
 * REDISMODULE_CORE view of redismodule.h), every other file the module API;
 * the two never meet in one translation unit, so this header includes
 * neither.
 */
#ifndef OBJSTORE_CONNTYPE_H
#define OBJSTORE_CONNTYPE_H

#include <stddef.h>
#include <stdint.h>

/* Values of the running server read through the module API (CONFIG GET),
 * compared at start with what the headers say lives at those fields of
 * struct redisServer: a mismatch means the binary is not the one the
 * headers describe, and the door stays closed. The fields are spread over
 * the struct (start, middle, end). */
typedef struct RdmaDoorProbe {
    long long hz, port, ioThreads, protectedMode, maxclients, lazyfreeUserFlush, acllogMaxLen,
        pubsubshardWhenDown;
} RdmaDoorProbe;

typedef struct RdmaDoorConfig {
    const char *bind;   /* IPv4 or IPv6 address of the RDMA device */
    int port;           /* rdma_cm port */
    const char *device; /* "" or the RDMA device rdma-bind must belong to */
    uint32_t rxSize;    /* RX buffer of an authenticated client (unauthenticated: 64 KiB) */
    int serverVersion;  /* RedisModule_GetServerVersion(): 0x00MMmmpp */
    RdmaDoorProbe probe;
} RdmaDoorConfig;

typedef struct RdmaDoorStats {
    uint64_t connected;    /* RDMA clients that are Redis clients now */
    uint64_t total;        /* RDMA clients admitted since start */
    uint64_t rejected;     /* refused: maxclients, protected mode, handshake limits */
    uint64_t streamErrors; /* streams that failed: bad control messages, transport errors */
} RdmaDoorStats;

/* The Redis version of the headers conntype.c was compiled against, as
 * "7.0.15" and as 0x00MMmmpp. Can't fail. */
const char *rdmaDoorHeadersVersion(void);
int rdmaDoorHeadersVersionNum(void);

/* Check the running server against the headers (version, probe, io-threads),
 * then listen on cfg->bind:cfg->port in Redis's event loop. Main thread,
 * once. Returns 0, or -1 with the reason in err (nothing stays open). */
int rdmaDoorStart(const RdmaDoorConfig *cfg, char *err, size_t errLen);
/* Stop accepting and disconnect every RDMA client (the server is shutting
 * down). Safe from inside a command an RDMA client runs. */
void rdmaDoorStop(void);
/* Counters (all 0 when the door is closed). Main thread. */
void rdmaDoorGetStats(RdmaDoorStats *st);

#endif /* OBJSTORE_CONNTYPE_H */
