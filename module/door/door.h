/*
 * door.h - the RDMA door (Redis clients over RDMA), the module
 * objstore-rdma.so: its settings and counters, what conntype.c offers
 * door.c (close, counters), and the one thing objstore.so sees of it, the
 * shared API that hands out the counters (DOOR_STATS_API). Nothing else of
 * the door is visible outside module/door/ (docs/rdma.md).
 *
 * Plain C on purpose (no redismodule.h): conntype.c, compiled against
 * Redis's own server.h, includes it too.
 */
#ifndef OBJSTORE_DOOR_H
#define OBJSTORE_DOOR_H

#include <stdint.h>

/* The name under which objstore-rdma.so exports its counters
 * (RedisModule_ExportSharedAPI): a DoorStatsFn. objstore.so shows them in
 * OBJ.STATS and INFO objstore when the door module is loaded. */
#define DOOR_STATS_API "objstore-rdma.stats"

/* Where the door listens; the module's settings, resolved before start. */
typedef struct DoorSettings {
    const char *bind;   /* objstore-rdma.bind: IPv4 or IPv6 address of the RDMA device */
    int port;           /* objstore-rdma.port; <= 0 leaves the door closed */
    const char *device; /* objstore-rdma.device: "" or the device bind must belong to */
    uint32_t rxSize;    /* objstore-rdma.rx-size: RX buffer of an authenticated client */
} DoorSettings;

typedef struct DoorStats {
    uint64_t connected;    /* RDMA clients that are Redis clients now */
    uint64_t total;        /* RDMA clients admitted since start */
    uint64_t rejected;     /* refused: maxclients, protected mode, handshake limits */
    uint64_t streamErrors; /* streams that failed: bad control messages, transport errors */
} DoorStats;

/* The door's counters as objstore.so reads them (DOOR_STATS_API). */
typedef void DoorStatsFn(DoorStats *st);

/* Stop accepting and disconnect every RDMA client (the server is shutting
 * down). Harmless when the door is closed; safe from inside a command an
 * RDMA client runs. */
void doorStop(void);
/* The door's counters (all 0 when it is closed). Main thread. Can't fail. */
void doorGetStats(DoorStats *st);

#endif /* OBJSTORE_DOOR_H */
