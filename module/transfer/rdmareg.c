/*
 * rdmareg.c - the cache of per-object registrations (rdmareg.h): a hash
 * table of exact ranges, with a use clock for choosing what to drop.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdmareg.h"

#define RDMA_REG_BUCKETS 1024

struct RdmaRegCache {
    struct ibv_pd *pd;
    int access, max, count;
    uint64_t clock;
    void (*log)(const char *level, const char *fmt, ...);
    RdmaReg *buckets[RDMA_REG_BUCKETS];
};

static size_t regBucket(const uint8_t *addr, uint64_t len)
{
    uint64_t h = (uint64_t)(uintptr_t)addr * 0x9E3779B97F4A7C15ull ^ len;
    return (size_t)(h >> 32) % RDMA_REG_BUCKETS;
}

/* Deregister and free one entry (a failed deregistration is logged: the
 * memory stays registered, nothing else is lost). */
static void regFree(RdmaRegCache *rc, RdmaReg *r)
{
    int err = ibv_dereg_mr(r->mr);
    if (err)
        rc->log("warning", "rdma: ibv_dereg_mr (object of %llu bytes): %s",
                (unsigned long long)r->len, strerror(err));
    free(r);
}

/* Drop the least recently used registration nobody holds. Returns 0, or
 * -1 when every one is held. */
static int regEvictOne(RdmaRegCache *rc)
{
    RdmaReg **victim = NULL;

    for (size_t b = 0; b < RDMA_REG_BUCKETS; b++)
        for (RdmaReg **pp = &rc->buckets[b]; *pp; pp = &(*pp)->next)
            if ((*pp)->refs == 0 && (!victim || (*pp)->lastUse < (*victim)->lastUse))
                victim = pp;
    if (!victim)
        return -1;
    RdmaReg *r = *victim;
    *victim = r->next;
    rc->count--;
    regFree(rc, r);
    return 0;
}

RdmaRegCache *rdmaRegCacheNew(struct ibv_pd *pd, int access, int max,
                              void (*log)(const char *level, const char *fmt, ...))
{
    RdmaRegCache *rc = calloc(1, sizeof(*rc));

    if (!rc)
        return NULL;
    rc->pd = pd;
    rc->access = access;
    rc->max = max;
    rc->log = log;
    return rc;
}

RdmaReg *rdmaRegGet(RdmaRegCache *rc, const uint8_t *addr, uint64_t len, char *err, size_t errLen)
{
    size_t b = regBucket(addr, len);

    for (RdmaReg *r = rc->buckets[b]; r; r = r->next) {
        if (r->addr == addr && r->len == len) {
            r->refs++;
            r->lastUse = ++rc->clock;
            return r;
        }
    }
    if (rc->count >= rc->max)
        regEvictOne(rc); /* all held: the cache grows past its bound for a while */
    RdmaReg *r = calloc(1, sizeof(*r));
    if (!r) {
        snprintf(err, errLen, "out of memory");
        return NULL;
    }
    r->mr = ibv_reg_mr(rc->pd, (void *)addr, len, rc->access);
    if (!r->mr) {
        snprintf(err, errLen, "ibv_reg_mr (object of %llu bytes): %s", (unsigned long long)len,
                 strerror(errno));
        free(r);
        return NULL;
    }
    r->addr = addr;
    r->len = len;
    r->refs = 1;
    r->lastUse = ++rc->clock;
    r->next = rc->buckets[b];
    rc->buckets[b] = r;
    rc->count++;
    return r;
}

void rdmaRegPut(RdmaReg *r)
{
    if (r->refs > 0)
        r->refs--;
}

void rdmaRegCacheFree(RdmaRegCache *rc)
{
    if (!rc)
        return;
    for (size_t b = 0; b < RDMA_REG_BUCKETS; b++) {
        while (rc->buckets[b]) {
            RdmaReg *r = rc->buckets[b];
            rc->buckets[b] = r->next;
            regFree(rc, r);
        }
    }
    free(rc);
}
