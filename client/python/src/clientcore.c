/*
 * clientcore.c - the Python package's native core (_objstore): a Client's
 * mutex, its queue of pin releases and the one way a C call is made on it
 * (clientcore.h).
 *
 * Concurrency: every call releases the GIL, then takes the client mutex
 * (never the other way round, so a thread waiting for the mutex never holds
 * the GIL). A Buffer deallocated while another thread holds the mutex (the
 * GC may run anywhere) only queues its release; the holder sends it when it
 * lets the mutex go.
 */
#include "clientcore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forkguard.h"

/* Queue a release of the pin whose view starts at view, or an abort of id.
 * Returns 0, or -1 when out of memory (then the pin stays until the
 * connection closes, which drops it). */
int clientQueue(ClientObject *c, int op, const void *id, size_t idLen, const void *view)
{
    Pending *p = malloc(sizeof(*p) + idLen);

    if (p == NULL)
        return -1;
    p->op = op;
    p->view = view;
    p->idLen = idLen;
    memcpy(p->id, id, idLen);
    pthread_mutex_lock(&c->qlock);
    p->next = c->pending;
    c->pending = p;
    pthread_mutex_unlock(&c->qlock);
    return 0;
}

/*
 * The one place that gives a pin back to the node (or aborts a creation):
 * called with the client mutex held. Errors are dropped: a failed
 * connection has dropped its pins already.
 */
static void clientDropPin(ClientObject *c, const Pending *p)
{
    if (c->oc == NULL)
        return;
    if (p->op == PENDING_ABORT)
        objClientAbort(c->oc, p->id, p->idLen);
    else /* by the view: the id may name a newer object by now */
        objClientReleaseBuffer(c->oc, p->id, p->idLen, &(ObjBuffer){.data = p->view});
}

/* Send every queued release, oldest first. Called with the client mutex held. */
static void clientFlushPending(ClientObject *c)
{
    Pending *list, *rev = NULL, *next;

    pthread_mutex_lock(&c->qlock);
    list = c->pending;
    c->pending = NULL;
    pthread_mutex_unlock(&c->qlock);
    for (; list != NULL; list = next) {
        next = list->next;
        list->next = rev;
        rev = list;
    }
    for (; rev != NULL; rev = next) {
        next = rev->next;
        clientDropPin(c, rev);
        free(rev);
    }
}

/* Whether releases are queued. */
static int clientHasPending(ClientObject *c)
{
    int any;

    pthread_mutex_lock(&c->qlock);
    any = c->pending != NULL;
    pthread_mutex_unlock(&c->qlock);
    return any;
}

/* Take the client mutex (the caller does not hold the GIL) and send what is queued. */
void clientLock(ClientObject *c)
{
    pthread_mutex_lock(&c->lock);
    clientFlushPending(c);
}

/*
 * Let the mutex go. A release queued by a thread whose trylock failed while
 * we held it is sent here: the queue is read after the unlock, and the
 * queueing thread queued before its trylock, so nothing is left behind.
 */
void clientUnlock(ClientObject *c)
{
    clientFlushPending(c);
    pthread_mutex_unlock(&c->lock);
    while (clientHasPending(c) && pthread_mutex_trylock(&c->lock) == 0) {
        clientFlushPending(c);
        pthread_mutex_unlock(&c->lock);
    }
}

/* Send what is queued if the mutex is free; a busy mutex means its holder
 * sends it when it lets go. Never blocks. Can't fail. */
void clientKick(ClientObject *c)
{
    if (pthread_mutex_trylock(&c->lock) == 0)
        clientUnlock(c);
}

/* Free the library's client (its pins go with the connection): a ClientOp,
 * run under the mutex without the GIL. Returns 0. */
static int clientDestroyOp(ClientObject *c, void *unused, SavedErr *e)
{
    void *base;
    size_t size;

    clientFlushPending(c);
    if (objClientArenaRange(c->oc, &base, &size) == 0)
        forkUntrack(base);
    objClientFree(c->oc);
    c->oc = NULL;
    return 0;
}

/*
 * Check that a call may use the client: not closed, not in a forked child.
 * Returns 0, or -1 with the exception set.
 */
int clientUsable(ClientObject *c)
{
    if (c->pid != getpid()) {
        PyErr_Format(errForked ? errForked : PyExc_RuntimeError,
                     "this client was connected by process %d and cannot be used after fork: "
                     "call objstore.connect() again in the child (process %d)",
                     (int)c->pid, (int)getpid());
        return -1;
    }
    if (c->closed || c->oc == NULL) {
        PyErr_SetString(errClosed ? errClosed : PyExc_ValueError, "the client is closed");
        return -1;
    }
    return 0;
}

/* Save the library's error (called with the mutex held). */
static void clientSaveErr(ClientObject *c, SavedErr *e)
{
    e->code = objClientErrCode(c->oc);
    snprintf(e->msg, sizeof(e->msg), "%s", objClientErrMsg(c->oc));
}

/*
 * The one place a C call is made on a client: op under the mutex (queued
 * releases sent first and after), the GIL released meanwhile, its error
 * saved before the mutex goes (the library keeps only the last one).
 * Returns op's verdict, with *e set on failure.
 */
static int clientLocked(ClientObject *c, ClientOp op, void *arg, SavedErr *e)
{
    int rv;

    e->code = OBJ_OK;
    Py_BEGIN_ALLOW_THREADS;
    clientLock(c);
    rv = op(c, arg, e);
    if (rv < 0 && e->code == OBJ_OK)
        clientSaveErr(c, e);
    clientUnlock(c);
    Py_END_ALLOW_THREADS;
    return rv;
}

/* See clientcore.h: clientLocked of a usable client, its error raised. */
int clientRun(ClientObject *c, ClientOp op, void *arg)
{
    SavedErr e;

    if (clientUsable(c) < 0)
        return -1;
    if (clientLocked(c, op, arg, &e) < 0) {
        errRaiseSaved(&e);
        return -1;
    }
    return 0;
}

/* Free the library's client now, in the process that connected. With the
 * GIL held; releases it while it waits for the mutex. Can't fail. */
void clientDestroy(ClientObject *c)
{
    SavedErr e;

    if (c->oc != NULL && c->pid == getpid())
        clientLocked(c, clientDestroyOp, NULL, &e);
}

/*
 * Free the library's client once nothing needs it: closed, no Buffer points into the
 * mapping, no call is under way (a call that finishes after close() may still hand
 * out a view). With the GIL held; releases it while it waits for the mutex. Can't fail.
 */
void clientMaybeDestroy(ClientObject *c)
{
    if (c->closed && c->liveBuffers == 0 && c->inflight == 0)
        clientDestroy(c);
}

/* A method of c starts: close() now waits for it (see clientMaybeDestroy). Accepts NULL. */
void clientCallBegin(ClientObject *c)
{
    if (c != NULL)
        c->inflight++;
}

/* The method is done, with result r (passed through; NULL keeps its exception). */
PyObject *clientCallEnd(ClientObject *c, PyObject *r)
{
    if (c != NULL) {
        c->inflight--;
        clientMaybeDestroy(c);
    }
    return r;
}

/* Parse an id argument: bytes of 1 to 512 bytes (the Python layer encodes str). */
int idArg(PyObject *o, const char **id, size_t *len)
{
    if (!PyBytes_Check(o)) {
        PyErr_Format(PyExc_TypeError, "id must be bytes or str, not %s", Py_TYPE(o)->tp_name);
        return -1;
    }
    *id = PyBytes_AS_STRING(o);
    *len = (size_t)PyBytes_GET_SIZE(o);
    if (*len < 1 || *len > 512) {
        PyErr_Format(PyExc_ValueError, "an id has 1 to 512 bytes, not %zu", *len);
        return -1;
    }
    return 0;
}

PyObject *copiesAskResult(const CopiesAsk *a)
{
    if (a->counted)
        return PyLong_FromLong(a->holders);
    Py_RETURN_NONE;
}
