/*
 * door.h - the RDMA door (Redis clients over RDMA, on rdma-client-port) as
 * the rest of the module sees it: open it, close it, read its counters.
 * Nothing else of the door is visible outside module/door/ (docs/rdma.md).
 *
 * Plain C on purpose (no redismodule.h): conntype.c, compiled against
 * Redis's own server.h, includes it too.
 */
#ifndef OBJSTORE_DOOR_H
#define OBJSTORE_DOOR_H

#include <stdint.h>

struct RedisModuleCtx;

/* Where the door listens; the module's settings, resolved before start. */
typedef struct DoorSettings {
    const char *bind;   /* rdma-bind: IPv4 or IPv6 address of the RDMA device */
    int port;           /* rdma-client-port; <= 0 leaves the door closed */
    const char *device; /* rdma-device: "" or the device rdma-bind must belong to */
    uint32_t rxSize;    /* rdma-rx-size: RX buffer of an authenticated client */
} DoorSettings;

typedef struct DoorStats {
    uint64_t connected;    /* RDMA clients that are Redis clients now */
    uint64_t total;        /* RDMA clients admitted since start */
    uint64_t rejected;     /* refused: maxclients, protected mode, handshake limits */
    uint64_t streamErrors; /* streams that failed: bad control messages, transport errors */
} DoorStats;

/* Open the door on s->bind:s->port (nothing when s->port <= 0). Main thread,
 * from the module's load, once. Never fails the load: when the running
 * server is not the one the headers describe, or RDMA is not available, it
 * logs why ("RDMA clients are off: ...") and stays closed. */
void doorStart(struct RedisModuleCtx *ctx, const DoorSettings *s);
/* Stop accepting and disconnect every RDMA client (the server is shutting
 * down). Harmless when the door is closed; safe from inside a command an
 * RDMA client runs. */
void doorStop(void);
/* The door's counters (all 0 when it is closed). Main thread. Can't fail. */
void doorGetStats(DoorStats *st);

#endif /* OBJSTORE_DOOR_H */
