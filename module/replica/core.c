/*
 * core.c - what every part of the replica manager shares: its state, its
 * log, its event queue (answers of the directory and the engine come back
 * to the thread through it), the live node set as last read, and the one
 * way to change and publish the kind of this node's copy of an object.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replint.h"

RmState rm = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

void rmLog(const char *level, const char *fmt, ...)
{
    char buf[512];
    va_list ap;

    if (!rm.cfg.log)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    rm.cfg.log(level, buf);
}

RmEv *rmEvNew(RmEvType type, void *ctx)
{
    RmEv *ev = calloc(1, sizeof(*ev));

    if (ev) {
        ev->type = type;
        ev->ctx = ctx;
        ev->repl.owner = ev;
    }
    return ev;
}

void rmEvPost(RmEv *ev)
{
    pthread_mutex_lock(&rm.lock);
    objListPushBack(&rm.events, &ev->link);
    pthread_cond_signal(&rm.wake);
    pthread_mutex_unlock(&rm.lock);
}

void rmDirAnswer(DirResult *res, void *arg)
{
    RmEv *ev = arg;

    ev->res = res;
    rmEvPost(ev);
}

const DirNode *rmNode(const char *name)
{
    for (size_t i = 0; i < rm.nNodes; i++)
        if (!strcmp(rm.nodes[i].name, name))
            return &rm.nodes[i];
    return NULL;
}

void rmAskNodes(void)
{
    if (rm.nodesAsked)
        return;
    RmEv *ev = rmEvNew(RM_EV_NODES, NULL);
    if (!ev)
        return;
    rm.nodesAsked = 1;
    dirListNodes(rmDirAnswer, ev);
}

ObjEntry *rmLocal(const char *id, size_t idLen, uint64_t checksum)
{
    ObjEntry *e = objTableFind(rm.cfg.table, id, idLen);

    if (!e || e->state != OBJ_SEALED || e->sumPending || e->checksum != checksum)
        return NULL;
    return e;
}

int rmSetCopy(const char *id, size_t idLen, uint64_t checksum, ObjCopy c, uint32_t want,
              const char *from)
{
    ObjTable *t = rm.cfg.table;
    uint64_t size, metaSize;

    objTableLock(t);
    ObjEntry *e = rmLocal(id, idLen, checksum);
    if (!e) {
        objTableUnlock(t);
        return -1;
    }
    objTableSetCopy(t, e, c);
    e->want = want;
    size = e->dataSize;
    metaSize = e->metaSize;
    objTableUnlock(t);
    DirCopy dc = c == OBJ_COPY_PRIMARY     ? DIR_COPY_PRIMARY
                 : c == OBJ_COPY_PROTECTED ? DIR_COPY_PROTECTED
                                           : DIR_COPY_REPLICA;
    dirPublish(id, idLen, size, metaSize, checksum, dc, want, c == OBJ_COPY_PRIMARY ? from : NULL);
    return 0;
}

int rmDrainingNow(void)
{
    pthread_mutex_lock(&rm.lock);
    int on = rm.drain.state != REPLICA_DRAIN_IDLE;
    pthread_mutex_unlock(&rm.lock);
    return on;
}

int rmObjFrom(RmObj *o, const ObjEntry *e)
{
    o->id = malloc(e->idLen ? e->idLen : 1);
    if (!o->id)
        return -1;
    memcpy(o->id, e->id, e->idLen);
    o->idLen = e->idLen;
    o->checksum = e->checksum;
    o->bytes = e->dataSize + e->metaSize;
    o->want = e->want ? e->want : 1;
    o->copy = objTableCopyOf(e);
    return 0;
}

void rmObjFree(RmObj *o)
{
    free(o->id);
    o->id = NULL;
}
