/*
 * queue.c - the FIFO of requests between the callers and the directory
 * thread, and its counts of pending writes and reads (which decide when the
 * thread wakes: a read at once, writes after OBJ_DIR_WRITE_DELAY_MS or a
 * full pipeline). Every function here but dirRequeueFront wants dir.lock
 * held.
 */
#include "dirint.h"

/* Keeps the pending counts (and the age of the oldest write) in step with
 * op entering (delta 1) or leaving (delta -1) the queue. */
static void dirCountLocked(const DirOp *op, int delta)
{
    if (dirOpIsWrite(op)) {
        if (dir.pendingWrites == 0 && delta > 0)
            dir.writesSinceMs = dirNowMs();
        dir.pendingWrites += (size_t)delta;
        if (dir.pendingWrites == 0)
            dir.writesSinceMs = 0;
    } else {
        dir.pendingReads += (size_t)delta;
    }
}

/* Queues op at the back and wakes the thread when it has to act on it. */
void dirPushLocked(DirOp *op)
{
    objListPushBack(&dir.queue, &op->link);
    dirCountLocked(op, 1);
    /* A write that joins others already waiting need not wake the thread:
     * it is asleep until their delay ends (OBJ_DIR_WRITE_DELAY_MS). */
    if (!dirOpIsWrite(op) || dir.pendingWrites == 1 || dir.pendingWrites >= OBJ_DIR_PIPELINE)
        pthread_cond_signal(&dir.wake);
}

/* Moves up to max operations from the head to the back of out, in order; the
 * writes among them count as taken (dir.batchWrites) until the thread has run
 * the batch. */
void dirTakeLocked(ObjList *out, size_t max)
{
    ObjListLink *l;
    for (size_t n = 0; n < max && (l = objListPopFront(&dir.queue)) != NULL; n++) {
        dirCountLocked(dirOpOf(l), -1);
        if (dirOpIsWrite(dirOpOf(l)))
            dir.batchWrites++;
        objListPushBack(out, l);
    }
}

/* Moves every lookup and listing to the back of out (keeping their order),
 * leaving the writes queued: used while the directory is down, to answer
 * the reads at once. A barrier behind a write is marked writesAhead: it
 * cannot be answered yet, so it fails. */
void dirTakeReadsLocked(ObjList *out)
{
    ObjListLink *l, *tmp;
    int writes = 0;
    objListForEachSafe(&dir.queue, l, tmp) {
        DirOp *op = dirOpOf(l);
        if (dirOpIsWrite(op)) {
            writes = 1;
            continue;
        }
        op->writesAhead = writes;
        objListUnlink(l);
        dirCountLocked(op, -1);
        objListPushBack(out, l);
    }
}

/* Puts a list of unfinished operations back at the head, in order; list
 * ends empty. Takes dir.lock itself. */
void dirRequeueFront(ObjList *list)
{
    ObjListLink *l;
    pthread_mutex_lock(&dir.lock);
    objListForEach(list, l)
        dirCountLocked(dirOpOf(l), 1);
    objListSpliceFront(&dir.queue, list);
    pthread_mutex_unlock(&dir.lock);
}
