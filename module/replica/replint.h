/*
 * replint.h - the replica manager's insides, shared by its files, each
 * using only those before it: core.c (state, log, event queue, node set,
 * copy kinds), place.c (placing copies on other nodes), repair.c (sweeps:
 * repair, takeover, trim), drain.c, and replica.c (the thread and the
 * public face). Every function here runs on the manager's thread unless
 * it says otherwise.
 */
#ifndef OBJSTORE_REPLINT_H
#define OBJSTORE_REPLINT_H

#include <pthread.h>

#include "replica.h"
#include "common/list.h"

/* How long a REPL may take before the asker gives up on it (bounds a hang:
 * a dead target closes its connection long before). */
#define REPL_DEADLINE_US (120LL * 1000 * 1000)
/* A repair claim's lifetime in the directory: what a claim of a node that
 * died holding it delays the object's repair by. A repair that takes longer
 * may be started again by another holder (a surplus copy, trimmed later). */
#define REPL_CLAIM_TTL_MS (10 * 1000)
/* Objects younger than this are left to their put's own placement: right
 * after it, the directory may not list the copies it made yet. */
#define REPL_SWEEP_MIN_AGE_MS 2000
/* Lookups a sweep or a drain keeps in flight at once. */
#define REPL_LOOKUP_WINDOW 64

/* What a queued event carries back to the thread. */
typedef enum RmEvType {
    RM_EV_PLACE,   /* a new placement (replicaPlace) */
    RM_EV_REPL,    /* a REPL answered: job */
    RM_EV_BARRIER, /* a placement's directory barrier answered */
    RM_EV_NODES,   /* the live node set */
    RM_EV_SWEEP,   /* a sweep's lookup of one object */
    RM_EV_CLAIM,   /* a repair claim */
    RM_EV_DRAIN,   /* a drain's lookup of one object */
    RM_EV_MOVED    /* the directory named another owner of a primary here: repl.id,
                    * repl.idLen, repl.checksum, repl.target (the owner) */
} RmEvType;

typedef struct Place Place;

/* One asynchronous request and its answer, queued back to the thread. */
typedef struct RmEv {
    ObjListLink link;
    RmEvType type;
    void *ctx;      /* a Place, or a sweep item */
    DirResult *res; /* directory answers */
    ReplReq repl;   /* RM_EV_REPL: the request (repl.owner is this event) */
} RmEv;

typedef enum PlaceKind { PLACE_PUT = 0, PLACE_REPAIR, PLACE_DRAIN } PlaceKind;

/* Copies of one object being made on other nodes. */
struct Place {
    ObjListLink link;
    PlaceKind kind;
    char *id;
    size_t idLen;
    uint64_t checksum, bytes;
    uint32_t want;    /* the object's count */
    uint32_t need;    /* new copies to make */
    uint32_t held;    /* of them, made */
    uint32_t base;    /* live holders counted before (in the answer) */
    uint32_t flags;   /* ENGINE_REPL_* */
    int inflight;     /* REPLs on their way */
    int ready;        /* the directory knows the object (PUT: barrier answered) */
    int waitingNodes; /* no candidate: ask for the node set again */
    int finished;     /* no more targets will be asked */
    int64_t replyAtUs;
    ReplicaDoneFn *done;
    void *arg;
    /* Nodes that hold a copy that counts, or were asked: never asked again. */
    char (*skip)[OBJ_DIR_NAME_MAX];
    size_t nSkip, capSkip;
    /* Live holders the lookup named that may be asked, each with its class
     * (placePick): an ordinary copy 0 (nothing to move); a copy that counts
     * PLACE_PROT_FIRST or PLACE_PROT_LAST, as the caller says. */
    char (*known)[OBJ_DIR_NAME_MAX];
    int *knownCls;
    size_t nKnown;
    /* Labels of the holders so far, to spread copies over failure domains. */
    char (*labels)[64];
    size_t nLabels, capLabels;
    void *item; /* the sweep or drain item it serves, or NULL */
    /* Called as it ends (also when dropped at stop, rm.stop set), before
     * it is freed; NULL: nobody to tell but `done`. */
    void (*ended)(Place *p);
    char lastErr[160];
};

/* The manager's state. Only `lock`, `events`, `stop`, the drain request
 * flags and `st` are shared with other threads; the rest is the thread's. */
typedef struct RmState {
    ReplicaConfig cfg;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    int running, stop;
    ObjList events; /* RmEv.link */
    ReplicaStats st;
    /* Drain, as the command layer sees it (under lock). */
    int drainWanted;  /* 1: start, 0: cancel; acted on by the thread */
    int drainFlagged; /* drainWanted changed since the thread looked */
    ReplicaDrainStatus drain;
    /* The thread's own. */
    ObjList places; /* Place.link */
    DirNode *nodes; /* the live node set, last read */
    size_t nNodes;
    int64_t nodesAtUs;
    int nodesAsked;
    uint64_t nodesHash; /* of the names: a change starts a sweep */
    int haveNodes;
} RmState;

extern RmState rm;

/* ---- core.c ---- */
/* Log a formatted line through the config's log (level "notice", "warning"). */
void rmLog(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A fresh event of type for ctx, or NULL when out of memory. */
RmEv *rmEvNew(RmEvType type, void *ctx);
/* Queue ev to the thread (any thread). */
void rmEvPost(RmEv *ev);
/* The directory callback of every request the thread makes (arg: its
 * RmEv): queues the answer back to the thread. */
void rmDirAnswer(DirResult *res, void *arg);
/* The live node named name in the last node set, or NULL. */
const DirNode *rmNode(const char *name);
/* Ask for the live node set now (an answer is on its way when asked). */
void rmAskNodes(void);
/* Under the table lock: this node's sealed copy of id with that checksum,
 * or NULL. */
ObjEntry *rmLocal(const char *id, size_t idLen, uint64_t checksum);
/* Set this node's copy of id (that checksum) to kind c and publish it so,
 * taking over from `from` when c is PRIMARY and from is not NULL. Returns
 * 0, or -1 when the copy is gone. Any thread. */
int rmSetCopy(const char *id, size_t idLen, uint64_t checksum, ObjCopy c, uint32_t want,
              const char *from);
/* Is the node draining or drained? Any thread. */
int rmDrainingNow(void);
/* What a sweep or a drain remembers of one local object: its id (a copy),
 * generation, bytes, replica count and copy kind. */
typedef struct RmObj {
    char *id;
    size_t idLen;
    uint64_t checksum, bytes;
    uint32_t want;
    ObjCopy copy;
} RmObj;
/* Fill o from e (caller holds the table lock). Returns 0, or -1 out of
 * memory (o then holds nothing). */
int rmObjFrom(RmObj *o, const ObjEntry *e);
void rmObjFree(RmObj *o);

/* ---- place.c ---- */
/* A placement of kind for id; the caller fills what it knows (skip, known,
 * labels) and calls placeStart. NULL when out of memory. */
Place *placeNew(PlaceKind kind, const char *id, size_t idLen, uint64_t checksum, uint64_t bytes,
                uint32_t want, uint32_t need, uint32_t flags);
/* Remember a node as one not to ask (a holder, or asked); and its label. */
int placeSkip(Place *p, const char *name, const char *label);
/* How placeFromLookup treats holders whose copies count. */
#define PLACE_PROT_SKIP  (-1) /* never asked: a new copy is wanted */
#define PLACE_PROT_FIRST (-2) /* asked first (a drain handing ownership over) */
#define PLACE_PROT_LAST  4    /* asked only when no other node can take a copy */
/* Take a directory lookup's live locations: ordinary holders are asked
 * first, holders whose copies count as protClass says. Returns 0, or -1
 * out of memory. */
int placeFromLookup(Place *p, const DirResult *res, int protClass);
/* Free a placement that was never started. */
void placeFree(Place *p);
void placeStart(Place *p);
/* Events for placements. */
void placeOnBarrier(Place *p, DirResult *res);
void placeOnRepl(Place *p, const ReplReq *r);
/* Deadlines, retries after a new node set. */
void placeTick(int64_t now);
/* The node set changed: placements waiting for a candidate look again. */
void placeNodesChanged(void);
/* Drop every placement (stop): their callbacks run with what they have. */
void placeDropAll(void);
/* Repair copies being made now. */
int placeRepairsInFlight(void);

/* ---- repair.c ---- */
/* Start a sweep (a no-op while one runs; then another follows it). */
void repairSweep(void);
void repairOnLookup(void *item, DirResult *res);
void repairOnClaim(void *item, DirResult *res);
void repairTick(int64_t now);
void repairDropAll(void);

/* ---- drain.c ---- */
void drainTick(int64_t now);
void drainOnLookup(void *item, DirResult *res);
void drainDropAll(void);

#endif /* OBJSTORE_REPLINT_H */
