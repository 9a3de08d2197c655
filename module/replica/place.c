/*
 * place.c - placing copies of one object on other nodes: pick targets from
 * the live node set (not holders, not draining; nodes with an ordinary copy
 * first, then labels no holder has, then the rest, at random within each),
 * ask each with a REPL, replace a target that fails by another until none
 * is left, and tell whoever waits (a seal's client, repair, drain).
 * A put's placement first waits for the directory to know the object (a
 * barrier behind its publish), so the targets' fetches find it and line up
 * behind the owner's busy upload slot as a relay chain.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replint.h"
#include "common/util.h"

/* How long a placement without a candidate waits before it reads the node
 * set again. */
#define PLACE_RETRY_US (500LL * 1000)

/* A cheap random number for spreading targets (xorshift64*, seeded from
 * the clock on first use; the manager's thread only). */
static uint64_t placeRand(void)
{
    static uint64_t s;

    if (!s)
        s = (uint64_t)utilMonoUs() * 0x9E3779B97F4A7C15ULL | 1;
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1DULL;
}

Place *placeNew(PlaceKind kind, const char *id, size_t idLen, uint64_t checksum, uint64_t bytes,
                uint32_t want, uint32_t need, uint32_t flags)
{
    Place *p = calloc(1, sizeof(*p));

    if (!p || !(p->id = malloc(idLen ? idLen : 1))) {
        free(p);
        return NULL;
    }
    memcpy(p->id, id, idLen);
    p->idLen = idLen;
    p->kind = kind;
    p->checksum = checksum;
    p->bytes = bytes;
    p->want = want;
    p->need = need;
    p->flags = flags;
    objListInit(&p->link);
    return p;
}

static int placeSkips(const Place *p, const char *name)
{
    for (size_t i = 0; i < p->nSkip; i++)
        if (!strcmp(p->skip[i], name))
            return 1;
    return 0;
}

static int placeHasLabel(const Place *p, const char *label)
{
    for (size_t i = 0; i < p->nLabels; i++)
        if (!strcmp(p->labels[i], label))
            return 1;
    return 0;
}

/* Remember label as one a holder has. Returns 0, or -1 out of memory. */
static int placeAddLabel(Place *p, const char *label)
{
    if (!label[0] || placeHasLabel(p, label))
        return 0;
    if (p->nLabels == p->capLabels) {
        size_t cap = p->capLabels ? p->capLabels * 2 : 4;
        void *n = realloc(p->labels, cap * sizeof(*p->labels));
        if (!n)
            return -1;
        p->labels = n;
        p->capLabels = cap;
    }
    snprintf(p->labels[p->nLabels++], sizeof(p->labels[0]), "%s", label);
    return 0;
}

int placeSkip(Place *p, const char *name, const char *label)
{
    if (label && placeAddLabel(p, label) == -1)
        return -1;
    if (placeSkips(p, name))
        return 0;
    if (p->nSkip == p->capSkip) {
        size_t cap = p->capSkip ? p->capSkip * 2 : 8;
        void *n = realloc(p->skip, cap * sizeof(*p->skip));
        if (!n)
            return -1;
        p->skip = n;
        p->capSkip = cap;
    }
    snprintf(p->skip[p->nSkip++], sizeof(p->skip[0]), "%s", name);
    return 0;
}

int placeFromLookup(Place *p, const DirResult *res, int protClass)
{
    size_t n = res->count ? res->count : 1;

    p->known = calloc(n, sizeof(*p->known));
    p->knownCls = calloc(n, sizeof(*p->knownCls));
    if (!p->known || !p->knownCls)
        return -1;
    for (size_t i = 0; i < res->count; i++) {
        const DirNode *d = &res->nodes[i];
        if (d->prot && protClass == PLACE_PROT_SKIP) {
            if (placeSkip(p, d->name, d->label) == -1)
                return -1;
            continue;
        }
        if (d->prot && placeAddLabel(p, d->label) == -1)
            return -1;
        snprintf(p->known[p->nKnown], sizeof(p->known[0]), "%s", d->name);
        p->knownCls[p->nKnown++] = d->prot ? protClass : 0;
    }
    return 0;
}

void placeFree(Place *p)
{
    free(p->id);
    free(p->skip);
    free(p->known);
    free(p->knownCls);
    free(p->labels);
    free(p);
}

/* The class a node the lookup named has (placePick), or -1. */
static int placeKnownClass(const Place *p, const char *name)
{
    for (size_t i = 0; i < p->nKnown; i++)
        if (!strcmp(p->known[i], name))
            return p->knownCls[i];
    return -1;
}

/* The next node to ask, or NULL when none is left: among the live nodes
 * neither skipped nor draining, by class (a label no holder has first;
 * within that, a node with an ordinary copy, which has nothing to move,
 * first), then (PLACE_PROT_LAST) a holder whose copy counts; at random
 * within the class. */
static const DirNode *placePick(const Place *p)
{
    const DirNode *best = NULL;
    int bestClass = PLACE_PROT_LAST + 1;
    uint32_t seen = 0;

    for (size_t i = 0; i < rm.nNodes; i++) {
        const DirNode *n = &rm.nodes[i];
        if (!strcmp(n->name, rm.cfg.nodeName) || n->draining || placeSkips(p, n->name))
            continue;
        int known = placeKnownClass(p, n->name);
        int cls = known == PLACE_PROT_FIRST || known == PLACE_PROT_LAST
                      ? known
                      : (placeHasLabel(p, n->label) ? 2 : 0) + (known == 0 ? 0 : 1);
        if (cls > bestClass)
            continue;
        if (cls < bestClass) {
            bestClass = cls;
            seen = 0;
        }
        /* Reservoir sampling within the best class so far. */
        if (placeRand() % ++seen == 0)
            best = n;
    }
    return best;
}

/* Ask node n for a copy. Returns 0, or -1 when the request cannot be made. */
static int placeAsk(Place *p, const DirNode *n)
{
    RmEv *ev = rmEvNew(RM_EV_REPL, p);

    if (!ev || placeSkip(p, n->name, n->label) == -1) {
        free(ev);
        return -1;
    }
    ReplReq *r = &ev->repl;
    snprintf(r->target, sizeof(r->target), "%s", n->name);
    memcpy(r->id, p->id, p->idLen);
    r->idLen = p->idLen;
    r->checksum = p->checksum;
    r->flags = p->flags;
    r->want = p->want;
    r->deadlineUs = utilMonoUs() + REPL_DEADLINE_US;
    p->inflight++;
    engineSubmitRepl(r);
    return 0;
}

/* Tell whoever waits, once: the seal's client learns the holders so far. A put
 * answered with fewer copies than it asked for is logged with the reason (a put is
 * the caller's; repair runs again and is not). */
static void placeAnswer(Place *p)
{
    if (p->done) {
        ReplicaDoneFn *done = p->done;
        p->done = NULL;
        uint32_t have = p->base + p->held;
        if (p->kind == PLACE_PUT && have < p->want)
            rmLog("notice",
                  "object '%.*s': %u of %u copies when its put answered (%zu live nodes known): %s",
                  (int)(p->idLen > 64 ? 64 : p->idLen), p->id, have, p->want, rm.nNodes,
                  p->lastErr[0] ? p->lastErr : "copies still on their way");
        done(p->arg, have);
    }
}

/* The placement is over: hand it to its owner and free it. */
static void placeEnd(Place *p)
{
    placeAnswer(p);
    objListUnlink(&p->link);
    if (p->ended)
        p->ended(p);
    placeFree(p);
}

/* Ask as many nodes as copies are missing; end the placement when it is
 * complete, or when nothing is in flight and no candidate is left (then a
 * put waiting for its reply looks at the node set again until its time is
 * up: a node may join). */
static void placeRun(Place *p)
{
    while (!p->finished && p->held + (uint32_t)p->inflight < p->need) {
        const DirNode *n = rm.haveNodes ? placePick(p) : NULL;
        if (!n || placeAsk(p, n) == -1)
            break;
    }
    if (p->held >= p->need) {
        p->finished = 1;
        placeAnswer(p);
    }
    if (p->inflight > 0)
        return;
    if (p->held >= p->need) {
        placeEnd(p);
        return;
    }
    if (!p->lastErr[0])
        snprintf(p->lastErr, sizeof(p->lastErr), "no live node can take a copy");
    if (p->done && utilMonoUs() < p->replyAtUs) {
        p->waitingNodes = 1; /* placeTick asks for the node set again */
        return;
    }
    placeEnd(p);
}

void placeStart(Place *p)
{
    objListPushBack(&rm.places, &p->link);
    if (p->need == 0) {
        placeEnd(p);
        return;
    }
    if (p->kind != PLACE_PUT) {
        p->ready = 1;
        placeRun(p);
        return;
    }
    /* The directory must know the object before anyone fetches it. */
    RmEv *ev = rmEvNew(RM_EV_BARRIER, p);
    if (!ev) {
        snprintf(p->lastErr, sizeof(p->lastErr), "OOM out of memory");
        placeEnd(p);
        return;
    }
    if (placeSkip(p, rm.cfg.nodeName,
                  rmNode(rm.cfg.nodeName) ? rmNode(rm.cfg.nodeName)->label : "") == -1) {
        free(ev);
        placeEnd(p);
        return;
    }
    p->inflight++; /* the barrier */
    dirBarrier(rmDirAnswer, ev);
}

void placeOnBarrier(Place *p, DirResult *res)
{
    p->inflight--;
    if (res->status != DIR_FOUND)
        snprintf(p->lastErr, sizeof(p->lastErr), "UNAVAILABLE %.140s", res->err);
    else
        p->ready = 1;
    dirResultFree(res);
    if (!p->ready) {
        placeEnd(p);
        return;
    }
    placeRun(p);
}

void placeOnRepl(Place *p, const ReplReq *r)
{
    p->inflight--;
    if (r->ok) {
        p->held++;
        const DirNode *n = rmNode(r->target);
        if (n)
            placeAddLabel(p, n->label);
        pthread_mutex_lock(&rm.lock);
        if (p->kind == PLACE_PUT)
            rm.st.placed++;
        pthread_mutex_unlock(&rm.lock);
    } else {
        snprintf(p->lastErr, sizeof(p->lastErr), "%.40s: %.110s", r->target, r->err);
        rmLog("notice", "a copy of '%.*s' on '%s' failed: %s", (int)(p->idLen > 64 ? 64 : p->idLen),
              p->id, r->target, r->err);
    }
    placeRun(p);
}

void placeTick(int64_t now)
{
    ObjListLink *l, *tmp;
    int ask = 0;

    objListForEachSafe(&rm.places, l, tmp) {
        Place *p = objListEntry(l, Place, link);
        if (p->done && p->replyAtUs && now >= p->replyAtUs) {
            placeAnswer(p); /* the seal's wait is over; copies in flight go on */
            if (p->waitingNodes && p->inflight == 0) {
                placeEnd(p);
                continue;
            }
        }
        if (p->waitingNodes)
            ask = 1;
    }
    if (ask && now - rm.nodesAtUs >= PLACE_RETRY_US)
        rmAskNodes();
}

void placeNodesChanged(void)
{
    ObjListLink *l, *tmp;

    objListForEachSafe(&rm.places, l, tmp) {
        Place *p = objListEntry(l, Place, link);
        if (p->waitingNodes && p->ready) {
            p->waitingNodes = 0;
            placeRun(p);
        }
    }
}

void placeDropAll(void)
{
    ObjListLink *l;

    while ((l = objListPopFront(&rm.places)) != NULL) {
        Place *p = objListEntry(l, Place, link);
        objListInit(&p->link);
        placeAnswer(p);
        if (p->ended) /* rm.stop is set: owners only free their items */
            p->ended(p);
        placeFree(p);
    }
}

int placeRepairsInFlight(void)
{
    ObjListLink *l;
    int n = 0;

    objListForEach(&rm.places, l) {
        const Place *p = objListEntry(l, Place, link);
        if (p->kind != PLACE_PUT)
            n++;
    }
    return n;
}
