/*
 * rdmareg.h - registrations of single objects, cached: what the RDMA
 * transport binds a transfer's read window over (rdma.c). A window bound
 * over the arena's own registration would open the whole arena on devices
 * that check a READ against the registration a window sits on rather than
 * the window's range (Soft-RoCE on Linux 6.1, tests/rdma/probe_mw.c); a
 * registration of exactly the object's bytes closes that, whatever the
 * device does. Registering costs about a millisecond, so registrations are
 * kept, keyed by their exact range, and the least recently used one no
 * window holds is dropped once there are more than the cache's bound. A
 * cached range whose object was deleted still opens only that range, and
 * only through a window bound for a transfer of whatever is pinned there.
 * Engine thread only.
 */
#ifndef OBJSTORE_RDMAREG_H
#define OBJSTORE_RDMAREG_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

/* One registration; mr->rkey / mr->lkey are what users read. */
typedef struct RdmaReg {
    const uint8_t *addr;
    uint64_t len;
    struct ibv_mr *mr;
    int refs; /* users holding it (windows bound or binding over it) */
    uint64_t lastUse;
    struct RdmaReg *next; /* hash chain */
} RdmaReg;

typedef struct RdmaRegCache RdmaRegCache;

/* A cache registering in pd with access (IBV_ACCESS_MW_BIND: windows are
 * bound over it; IBV_ACCESS_REMOTE_READ: its own key is handed out), at
 * most max entries no one holds. log reports failed deregistrations.
 * Returns NULL when out of memory. */
RdmaRegCache *rdmaRegCacheNew(struct ibv_pd *pd, int access, int max,
                              void (*log)(const char *level, const char *fmt, ...));
/* The registration of exactly [addr, addr + len) (len > 0), registered now
 * if it is not cached, with a reference taken. NULL with a reason in err
 * when it cannot be registered. */
RdmaReg *rdmaRegGet(RdmaRegCache *rc, const uint8_t *addr, uint64_t len, char *err, size_t errLen);
/* Give back a reference taken by rdmaRegGet. Can't fail. */
void rdmaRegPut(RdmaReg *r);
/* Deregister everything and free the cache (no reference may be held).
 * Accepts NULL. */
void rdmaRegCacheFree(RdmaRegCache *rc);

#endif /* OBJSTORE_RDMAREG_H */
