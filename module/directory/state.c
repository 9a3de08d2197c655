/*
 * state.c - the directory client's control block and the small helpers all
 * its parts share: allocation that aborts (as everywhere in Redis), the two
 * clocks, the error and work counters, queued operations and the results
 * handed to callbacks. Nothing here does I/O.
 */
#include "dirint.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

DirState dir = {.lock = PTHREAD_MUTEX_INITIALIZER, .queue = {&dir.queue, &dir.queue}};

/* Out of memory: there is no sane way on, so stop like Redis does. */
void dirOom(void)
{
    fprintf(stderr, "objstore directory: out of memory\n");
    abort();
}

/* malloc/calloc that never return NULL (they abort instead). */
void *dirMalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        dirOom();
    return p;
}

void *dirCalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL)
        dirOom();
    return p;
}

/* Milliseconds of the monotonic clock (every deadline) and of the wall
 * clock (the heartbeat others read), from common/util's clocks. */
int64_t dirNowMs(void)
{
    return utilMonoUs() / 1000;
}

int64_t dirWallMs(void)
{
    return utilWallMs();
}

struct timeval dirTimeval(int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    return tv;
}

/* No connect attempt before one backoff from now; the next backoff is twice
 * as long, up to OBJ_DIR_BACKOFF_MAX_MS. Can't fail. */
void dirBackoff(void)
{
    dir.nextConnectMs = dirNowMs() + dir.backoffMs;
    dir.backoffMs =
        dir.backoffMs * 2 > OBJ_DIR_BACKOFF_MAX_MS ? OBJ_DIR_BACKOFF_MAX_MS : dir.backoffMs * 2;
}

/* Counts one error and remembers its text for dirGetStats. Any thread. */
void dirNoteError(const char *fmt, ...)
{
    char msg[sizeof(dir.stats.lastError)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&dir.lock);
    dir.stats.errors++;
    memcpy(dir.stats.lastError, msg, sizeof(msg));
    pthread_mutex_unlock(&dir.lock);
}

/* Hands a notice or warning to the log hook of the config, if any. */
void dirLog(const char *level, const char *fmt, ...)
{
    if (dir.cfg.log == NULL)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    dir.cfg.log(level, msg);
}

/* The directory lost (some of) this node's entries while the link stayed up:
 * a full re-publish is due at the next chance, logged with why unless one
 * was due already (at start, after a reconnect). Can't fail. */
void dirScheduleSnapshot(const char *why)
{
    pthread_mutex_lock(&dir.lock);
    int already = dir.needSnapshot;
    dir.needSnapshot = 1;
    pthread_mutex_unlock(&dir.lock);
    if (!already)
        dirLog("notice", "directory: %s; re-publishing every local object", why);
}

/* Adds finished work to the counters. Any thread. */
void dirCountDone(uint64_t publishes, uint64_t unpublishes, uint64_t lookups)
{
    pthread_mutex_lock(&dir.lock);
    dir.stats.publishes += publishes;
    dir.stats.unpublishes += unpublishes;
    dir.stats.lookups += lookups;
    pthread_mutex_unlock(&dir.lock);
}

/* dirStop has been called: long work (a big re-publish) stops early. */
int dirStopRequested(void)
{
    pthread_mutex_lock(&dir.lock);
    int stopping = dir.stopping;
    pthread_mutex_unlock(&dir.lock);
    return stopping;
}

int dirOpIsWrite(const DirOp *op)
{
    return op->kind == DIR_OP_PUBLISH || op->kind == DIR_OP_UNPUBLISH;
}

/* A fresh op of kind carrying a copy of id, in no list; can't fail. Ops
 * are counted heap (OBJ_HEAP_DIRECTORY): while the directory is down, up to
 * OBJ_DIR_QUEUE_MAX of them wait, one per seal and delete. */
DirOp *dirOpNew(DirOpKind kind, const char *id, size_t idLen)
{
    DirOp *op = objHeapCalloc(OBJ_HEAP_DIRECTORY, 1, sizeof(*op) + idLen + 1);
    if (op == NULL)
        dirOom();
    objListInit(&op->link);
    op->kind = kind;
    op->idLen = idLen;
    if (idLen > 0)
        memcpy(op->id, id, idLen);
    return op;
}

/* Frees an op from dirOpNew (in no list). Accepts NULL. */
void dirOpFree(DirOp *op)
{
    if (op != NULL)
        free(op->takeover);
    if (op != NULL && op->ver != NULL) {
        for (size_t i = 0; i < op->ver->nIds; i++)
            free(op->ver->ids[i]);
        free(op->ver->ids);
        free(op->ver->idLens);
        free(op->ver);
    }
    objHeapFree(OBJ_HEAP_DIRECTORY, op);
}

/* Frees every op of list without answering it; list ends empty. */
void dirOpsFree(ObjList *list)
{
    ObjListLink *l;
    while ((l = objListPopFront(list)) != NULL)
        dirOpFree(dirOpOf(l));
}

/* A fresh result for the callback, carrying a copy of the id; can't fail. */
DirResult *dirResultNew(const char *id, size_t idLen)
{
    DirResult *res = dirCalloc(1, sizeof(*res));
    if (id != NULL) {
        res->id = dirMalloc(idLen + 1);
        if (idLen > 0)
            memcpy(res->id, id, idLen);
        res->id[idLen] = '\0';
        res->idLen = idLen;
    }
    return res;
}

/* Frees a result and everything it holds; accepts NULL. */
void dirResultFree(DirResult *res)
{
    if (res == NULL)
        return;
    free(res->nodes);
    free(res->id);
    for (size_t i = 0; i < res->nVersions; i++)
        free(res->versions[i].id);
    free(res->versions);
    free(res);
}

/* Sets a result's status and its error text (printf-style). */
void dirResultSet(DirResult *res, DirStatus status, const char *fmt, ...)
{
    va_list ap;
    res->status = status;
    va_start(ap, fmt);
    vsnprintf(res->err, sizeof(res->err), fmt, ap);
    va_end(ap);
}

/* Answers op with DIR_UNAVAILABLE (why) when it is a read, and frees it
 * (an op in no list). The callback runs exactly once, on this thread. */
void dirFailOne(DirOp *op, const char *why)
{
    if (!dirOpIsWrite(op)) {
        int noId = op->kind == DIR_OP_LIST || op->kind == DIR_OP_BARRIER;
        DirResult *res = dirResultNew(noId ? NULL : op->id, op->idLen);
        dirResultSet(res, DIR_UNAVAILABLE, "%s", why);
        op->cb(res, op->arg);
    }
    dirOpFree(op);
}

/* Answers every read in a list with DIR_UNAVAILABLE and frees the list
 * (writes in it are just freed); list ends empty. */
void dirFailReads(ObjList *list, const char *why)
{
    ObjListLink *l;
    while ((l = objListPopFront(list)) != NULL)
        dirFailOne(dirOpOf(l), why);
}
