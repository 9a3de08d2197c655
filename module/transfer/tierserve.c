/*
 * tierserve.c - the bytes of spilled objects served to other nodes.
 *
 * A FETCH of a spilled object is answered from its tier file, not from the
 * arena (docs/tiers.md). Each spill file being served has one read (TsRead):
 * a buffer of the object's size, filled and checked against the object's
 * checksum by this file's reader thread, so the engine thread never waits
 * for the disk. Every serving (TsServing) of that file while the read is
 * queued, under way or sent from shares the one buffer: a broadcast of a
 * spilled object costs one copy in memory, not one per requester. The
 * buffer goes when the last serving's bytes are sent.
 *
 * The buffers of every read together stay within the budget
 * (EngineConfig.tierServeBudget, spill-serve-budget): a read that does not
 * fit waits, first come first served, until others finish; one read alone
 * may exceed it (else an object larger than the budget could never be
 * served). A waiting serving holds a small record only, and it counts as a
 * pin of its connection's cap (serve.c), so a flood is bounded twice: per
 * connection by the cap, node-wide by the budget.
 *
 * A send can complete or close its connection before engineSend returns
 * (the transport may flush at once): a serving inside engineSend is freed
 * by whoever sent it (inSend), and a read has a hold of its own while its
 * servings are walked, so neither is freed under a walk.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "tierserve.h"
#include "common/list.h"
#include "store/tier.h"

typedef enum TsState {
    TS_QUEUED,  /* waiting for room in the budget (in ts.queue) */
    TS_READING, /* the reader thread has it (in its queue or done list) */
    TS_READY    /* buf holds the checked bytes, or err says why not */
} TsState;

/* One spill file being read or served. */
typedef struct TsRead {
    uint64_t fileNo;
    int fd; /* open until the reader thread is done with it */
    uint64_t len, checksum;
    uint8_t *buf; /* len bytes, charged to the budget, from admission on */
    TsState state;
    int err;           /* as TierJob.err, or ENOMEM */
    unsigned holds;    /* its servings, plus a walk over them in progress */
    ObjList waiting;   /* TsServing.link: servings not yet sent */
    ObjListLink link;  /* in ts.reads until freed (failed ones too: not shared) */
    ObjListLink qlink; /* in ts.queue, then the reader's queue, then its done list */
} TsRead;

/* One requester's answer from a read. */
typedef struct TsServing {
    Conn *conn;
    uint64_t reqId;
    void *slot;
    TierServeOverFn *over;
    uint64_t from, dataSize, metaSize, checksum;
    TsRead *rd;
    int inSend; /* inside its engineSend: sent / gone say what happened meanwhile */
    int sent, gone;
    ObjListLink link; /* rd->waiting, then ts.sending */
} TsServing;

static struct {
    ObjList reads;   /* TsRead.link: findable by fileNo */
    ObjList queue;   /* TsRead.qlink: waiting for the budget, oldest first */
    ObjList sending; /* TsServing.link: handed to the transport */
    uint64_t inUse;  /* bytes of buffers allocated */
    uint64_t waitingNow;
    /* The reader thread: started at the first read. */
    int started, stop, evFd;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    ObjList todo, done; /* TsRead.qlink, under lock */
} ts = {
    .reads = {&ts.reads, &ts.reads},
    .queue = {&ts.queue, &ts.queue},
    .sending = {&ts.sending, &ts.sending},
    .evFd = -1,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .cond = PTHREAD_COND_INITIALIZER,
    .todo = {&ts.todo, &ts.todo},
    .done = {&ts.done, &ts.done},
};

/* Publish the gauges to OBJ.STATS. */
static void tsGauges(void)
{
    EngineStats *es = engineStatsBegin();
    es->tierServeBytes = ts.inUse;
    es->tierServeWaiting = ts.waitingNow;
    engineStatsEnd();
}

/* ---- the reader thread ------------------------------------------------------------- */

/* Read each queued file into its buffer and check it; hand it back. */
static void *tsReader(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "obj-tierserve");
    pthread_mutex_lock(&ts.lock);
    for (;;) {
        while (!ts.stop && objListEmpty(&ts.todo))
            pthread_cond_wait(&ts.cond, &ts.lock);
        if (ts.stop)
            break;
        TsRead *rd = objListEntry(objListFirst(&ts.todo), TsRead, qlink);
        objListUnlink(&rd->qlink);
        pthread_mutex_unlock(&ts.lock);
        rd->err = rd->buf ? tierReadAll(rd->fd, rd->buf, rd->len, rd->checksum) : ENOMEM;
        close(rd->fd);
        rd->fd = -1;
        pthread_mutex_lock(&ts.lock);
        objListPushBack(&ts.done, &rd->qlink);
        uint64_t one = 1;
        if (write(ts.evFd, &one, sizeof(one)) < 0) {
            /* cannot fail short of a bug: the counter never nears its limit */
        }
    }
    pthread_mutex_unlock(&ts.lock);
    return NULL;
}

static void tsOnReadDone(void *arg, uint32_t events);

/* Start the reader thread once. Returns 0, or -1 (logged). */
static int tsReaderStart(void)
{
    if (ts.started)
        return 0;
    ts.evFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ts.evFd < 0 || engineWatch(ts.evFd, EPOLLIN, tsOnReadDone, NULL) == -1)
        goto out_close_ev;
    ts.stop = 0;
    if (pthread_create(&ts.thread, NULL, tsReader, NULL) != 0)
        goto out_unwatch;
    ts.started = 1;
    return 0;

out_unwatch:
    engineUnwatch(ts.evFd);
out_close_ev:
    if (ts.evFd >= 0)
        close(ts.evFd);
    ts.evFd = -1;
    engineLog("warning", "cannot start the thread that reads spilled objects to serve them");
    return -1;
}

/* ---- reads -------------------------------------------------------------------------- */

static TsRead *tsFind(uint64_t fileNo)
{
    ObjListLink *l;

    objListForEach(&ts.reads, l) {
        TsRead *rd = objListEntry(l, TsRead, link);
        if (rd->fileNo == fileNo && !(rd->state == TS_READY && rd->err))
            return rd; /* a failed read is not shared: a later request tries again */
    }
    return NULL;
}

static void tsAdmit(void);

/* Free rd (no serving, no walk, not with the reader) and let the next
 * waiting read in. */
static void tsReadFree(TsRead *rd)
{
    objListUnlink(&rd->link);
    objListUnlink(&rd->qlink);
    if (rd->fd >= 0)
        close(rd->fd);
    if (rd->buf)
        ts.inUse -= rd->len;
    free(rd->buf);
    free(rd);
    tsAdmit();
    tsGauges();
}

/* Drop one hold of rd: its last goes with it, unless the reader has it
 * (then the reaping frees it). */
static void tsReadPut(TsRead *rd)
{
    if (--rd->holds == 0 && rd->state != TS_READING)
        tsReadFree(rd);
}

/* Hand waiting reads to the reader while the budget has room for them, in
 * the order they came. A buffer that cannot be allocated makes the read
 * fail (ENOMEM, answered when reaped). */
static void tsAdmit(void)
{
    uint64_t budget = engineConfig()->tierServeBudget;
    ObjListLink *l;

    while ((l = objListFirst(&ts.queue))) {
        TsRead *rd = objListEntry(l, TsRead, qlink);
        if (ts.inUse && ts.inUse + rd->len > budget)
            break;
        objListUnlink(&rd->qlink);
        rd->buf = malloc(rd->len ? rd->len : 1);
        if (rd->buf)
            ts.inUse += rd->len;
        rd->state = TS_READING;
        ObjListLink *s;
        objListForEach(&rd->waiting, s)
            ts.waitingNow--;
        pthread_mutex_lock(&ts.lock);
        objListPushBack(&ts.todo, &rd->qlink);
        pthread_cond_signal(&ts.cond);
        pthread_mutex_unlock(&ts.lock);
    }
}

/* ---- servings ----------------------------------------------------------------------- */

/* s's bytes are sent: give back what serve.c took, and s's hold of its read. */
static void tsServingSent(TsServing *s)
{
    objListUnlink(&s->link);
    s->over(s->conn, s->slot);
    TsRead *rd = s->rd;
    free(s);
    tsReadPut(rd);
}

/* Answer s (off every list) from its read rd, which is TS_READY: DATA from
 * the buffer, or the read's error. Returns engineSend's result. */
static int tsAnswer(TsServing *s, TsRead *rd)
{
    Conn *c = s->conn;

    if (rd->err) {
        uint64_t reqId = s->reqId;
        s->over(c, s->slot);
        free(s);
        tsReadPut(rd); /* not the last hold: the caller's walk has one */
        engineSendError(c, reqId, WIRE_ERR_INTERNAL,
                        "the object's spill tier file cannot be read (see the owner's log)");
        return 0;
    }
    uint64_t n = rd->len - s->from;
    int tp = engineTpIndex(c->ops);
    EngineStats *es = engineStatsBegin();
    engineTpStats(tp)->served++;
    engineTpStats(tp)->servedBytes += n;
    engineTpStats(tp)->servedInline++;
    es->uploadedBytes += n;
    engineStatsEnd();
    WireMsg r = {.h = {.type = WIRE_DATA, .reqId = s->reqId}};
    r.u.data.size = s->dataSize;
    r.u.data.metaSize = s->metaSize;
    r.u.data.checksum = s->checksum;
    objListPushBack(&ts.sending, &s->link);
    s->inSend = 1;
    int rc =
        engineSend(c, &r, rd->buf + s->from, n, (void *)((uintptr_t)s | TIER_SERVE_COOKIE_TAG));
    s->inSend = 0;
    if (s->gone)
        free(s); /* its connection closed: tierServeConnClosed took it off, and the read's hold */
    else if (s->sent)
        tsServingSent(s);
    return rc;
}

/* rd is ready (or failed): answer every serving waiting on it. */
static void tsAnswerAll(TsRead *rd)
{
    ObjListLink *l;

    rd->holds++; /* the walk's own: an answer may drop the other holds */
    while ((l = objListFirst(&rd->waiting))) {
        TsServing *s = objListEntry(l, TsServing, link);
        objListUnlink(&s->link);
        tsAnswer(s, rd);
    }
    tsReadPut(rd);
}

/* The reader finished reads: answer their servings. */
static void tsOnReadDone(void *arg, uint32_t events)
{
    uint64_t v;

    (void)arg;
    (void)events;
    if (read(ts.evFd, &v, sizeof(v)) < 0) {
        /* EAGAIN: nothing new; the done list is looked at anyway */
    }
    for (;;) {
        pthread_mutex_lock(&ts.lock);
        ObjListLink *l = objListFirst(&ts.done);
        if (l)
            objListUnlink(l);
        pthread_mutex_unlock(&ts.lock);
        if (!l)
            return;
        TsRead *rd = objListEntry(l, TsRead, qlink);
        rd->state = TS_READY;
        EngineStats *es = engineStatsBegin();
        es->tierServeReads++;
        engineStatsEnd();
        if (rd->err)
            engineLog("warning", "serving a spilled object: %s",
                      rd->err == ENOMEM ? "out of memory for its buffer" : tierStrError(rd->err));
        tsAnswerAll(rd);
    }
}

int tierServeFetch(const TierServeReq *q)
{
    Conn *c = q->conn;
    TsRead *rd = tsReaderStart() == 0 ? tsFind(q->fileNo) : NULL;
    int fresh = !rd && ts.started;
    TsServing *s = malloc(sizeof(*s));

    if (fresh && s && (rd = calloc(1, sizeof(*rd)))) {
        rd->fileNo = q->fileNo;
        rd->fd = q->fd;
        rd->len = q->dataSize + q->metaSize;
        rd->checksum = q->checksum;
        rd->state = TS_QUEUED;
        objListInit(&rd->waiting);
        objListInit(&rd->qlink);
        objListPushBack(&ts.reads, &rd->link);
    } else {
        close(q->fd);
    }
    if (!s || !rd) {
        free(s);
        q->over(c, q->slot);
        engineSendError(c, q->reqId, WIRE_ERR_INTERNAL,
                        "cannot serve the spilled object now (see the owner's log)");
        return 0;
    }
    if (!fresh) {
        EngineStats *es = engineStatsBegin();
        es->tierServeShared++;
        engineStatsEnd();
    }
    *s = (TsServing){.conn = c,
                     .reqId = q->reqId,
                     .slot = q->slot,
                     .over = q->over,
                     .from = q->from,
                     .dataSize = q->dataSize,
                     .metaSize = q->metaSize,
                     .checksum = q->checksum,
                     .rd = rd};
    rd->holds++;
    if (rd->state == TS_READY) /* and not failed: tsFind skips those */
        return tsAnswer(s, rd);
    objListPushBack(&rd->waiting, &s->link);
    if (rd->state == TS_QUEUED)
        ts.waitingNow++;
    if (fresh) {
        objListPushBack(&ts.queue, &rd->qlink);
        tsAdmit();
    }
    if (rd->state == TS_QUEUED) {
        EngineStats *es = engineStatsBegin();
        es->tierServeWaits++;
        engineStatsEnd();
    }
    tsGauges();
    return 0;
}

void tierServeSent(Conn *c, void *cookie)
{
    TsServing *s = (TsServing *)((uintptr_t)cookie & ~(uintptr_t)TIER_SERVE_COOKIE_TAG);

    (void)c;
    if (s->inSend)
        s->sent = 1; /* tsAnswer finishes it */
    else
        tsServingSent(s);
}

/* Forget s, a serving of c, which is closing: no answer, nothing given back
 * (serve.c drops all of c's pins and slots). */
static void tsServingGone(TsServing *s)
{
    TsRead *rd = s->rd;

    if (rd->state == TS_QUEUED)
        ts.waitingNow--;
    objListUnlink(&s->link);
    if (s->inSend)
        s->gone = 1; /* tsAnswer frees it */
    else
        free(s);
    tsReadPut(rd);
}

void tierServeConnClosed(Conn *c)
{
    ObjListLink *l, *next, *sl, *snext;

    objListForEachSafe(&ts.sending, l, next) {
        TsServing *s = objListEntry(l, TsServing, link);
        if (s->conn == c) /* may free its read, never another serving */
            tsServingGone(s);
    }
    /* A read freed here is unlinked from ts.reads: start again after each. */
    for (int again = 1; again;) {
        again = 0;
        objListForEach(&ts.reads, l) {
            TsRead *rd = objListEntry(l, TsRead, link);
            unsigned before = rd->holds;
            rd->holds++;
            objListForEachSafe(&rd->waiting, sl, snext) {
                TsServing *s = objListEntry(sl, TsServing, link);
                if (s->conn == c)
                    tsServingGone(s);
            }
            if (rd->holds != before + 1) {
                tsReadPut(rd);
                again = 1;
                break;
            }
            rd->holds--;
        }
    }
    tsGauges();
}

void tierServeShutdown(void)
{
    ObjListLink *l;

    if (ts.started) {
        pthread_mutex_lock(&ts.lock);
        ts.stop = 1;
        pthread_cond_signal(&ts.cond);
        pthread_mutex_unlock(&ts.lock);
        pthread_join(ts.thread, NULL);
        engineUnwatch(ts.evFd);
        close(ts.evFd);
        ts.evFd = -1;
        ts.started = 0;
    }
    while ((l = objListFirst(&ts.sending))) { /* every connection closed before: none left */
        objListUnlink(l);
        free(objListEntry(l, TsServing, link));
    }
    while ((l = objListFirst(&ts.reads))) {
        TsRead *rd = objListEntry(l, TsRead, link);
        ObjListLink *sl;
        while ((sl = objListFirst(&rd->waiting))) {
            objListUnlink(sl);
            free(objListEntry(sl, TsServing, link));
        }
        objListUnlink(&rd->link);
        objListUnlink(&rd->qlink);
        if (rd->fd >= 0)
            close(rd->fd);
        free(rd->buf);
        free(rd);
    }
    ts.inUse = ts.waitingNow = 0;
    objListInit(&ts.queue);
    objListInit(&ts.todo);
    objListInit(&ts.done);
}
