/*
 * conntype.h - what door.c hands to conntype.c, the connection type built
 * against Redis's own server.h: the settings plus what the module API read
 * of the running server, checked before the door opens. Internal to
 * module/door/.
 *
 * Plain C on purpose: conntype.c sees the REDISMODULE_CORE view of
 * redismodule.h, door.c the module API; the two never meet in one
 * translation unit, so this header includes neither.
 */
#ifndef OBJSTORE_CONNTYPE_H
#define OBJSTORE_CONNTYPE_H

#include <stddef.h>

#include "door.h"

/* Values of the running server read through the module API (CONFIG GET),
 * compared at start with what the headers say lives at those fields of
 * struct redisServer: a mismatch means the binary is not the one the
 * headers describe, and the door stays closed. The fields are spread over
 * the struct (start, middle, end). */
typedef struct DoorProbe {
    long long hz, port, ioThreads, protectedMode, maxclients, lazyfreeUserFlush, acllogMaxLen,
        pubsubshardWhenDown;
} DoorProbe;

typedef struct DoorTypeConfig {
    DoorSettings settings;
    int serverVersion; /* RedisModule_GetServerVersion(): 0x00MMmmpp */
    DoorProbe probe;
} DoorTypeConfig;

/* Check the running server against the headers: the version, the probe,
 * io-threads at most 1. Call it only once the server is known to be Redis
 * and to export every symbol of serversyms.h (the probe reads struct
 * redisServer). Main thread. Returns 0, or -1 with the reason in err. */
int doorTypeCheck(const DoorTypeConfig *cfg, char *err, size_t errLen);
/* The version of the headers conntype.c was built against ("7.0.15"). */
const char *doorTypeBuiltFor(void);
/* Check the running server as doorTypeCheck does, then listen on the settings' bind:port in Redis's
 * event loop. Main thread, once. Returns 0, or -1 with the reason in err (nothing stays open).
 * doorStop and doorGetStats (door.h) live in conntype.c too. */
int doorTypeStart(const DoorTypeConfig *cfg, char *err, size_t errLen);

#endif /* OBJSTORE_CONNTYPE_H */
