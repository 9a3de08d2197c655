/*
 * clientcore.h - the Python package's native core (_objstore): the Client
 * object's state, its mutex and queue of pin releases, and the one way a C
 * call is made on it (clientRun). The Client type and its methods:
 * client.h.
 */
#ifndef OBJSTORE_PY_CLIENTCORE_H
#define OBJSTORE_PY_CLIENTCORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <sys/types.h>

#include "client/objclient_int.h"
#include "client/objstore.h"
#include "errors.h"

enum { PENDING_RELEASE, PENDING_ABORT };

/* One release (or abort) waiting for the client mutex; singly linked, newest first. */
typedef struct Pending {
    struct Pending *next;
    int op;
    const void *view; /* a release: where the pinned object's bytes start (names the pin) */
    size_t idLen;
    unsigned char id[];
} Pending;

typedef struct ClientObject {
    PyObject_HEAD ObjClient *oc;  /* NULL once freed */
    const ObjClientTransport *tr; /* the transport oc wraps (the library's table) */
    void *conn;                   /* its connection (owned by oc) */
    pthread_mutex_t lock;         /* serialises every use of oc and conn */
    pthread_mutex_t qlock;        /* guards pending; held only for list surgery */
    Pending *pending;
    pid_t pid;              /* the process that connected */
    int closed;             /* close() was called: no new calls */
    int zeroCopy;           /* the arena is mapped: pins and creates work in place */
    Py_ssize_t liveBuffers; /* Buffers that point into the mapping (GIL-guarded) */
    Py_ssize_t inflight;    /* calls under way (GIL-guarded): close() waits for them */
} ClientObject;

/* A C call on a client, made under its mutex without the GIL (clientRun).
 * Returns 0, or -1 with *e set, or with e->code left OBJ_OK when the error
 * is the library's own (then clientRun saves it from c->oc). */
typedef int (*ClientOp)(ClientObject *c, void *arg, SavedErr *e);

/* Queue a release of the pin whose view starts at view, or an abort of id.
 * Returns 0, or -1 when out of memory (the connection's close drops the pin). */
int clientQueue(ClientObject *c, int op, const void *id, size_t idLen, const void *view);
/* Send what is queued now if the mutex is free, else leave it to the holder
 * (never blocks; with the GIL held). Can't fail. */
void clientKick(ClientObject *c);
/* Take the mutex (the caller does not hold the GIL) and send what is queued. */
void clientLock(ClientObject *c);
/* Let the mutex go, sending what was queued meanwhile. */
void clientUnlock(ClientObject *c);
/* Check that a call may use the client (not closed, not in a forked child).
 * Returns 0, or -1 with the exception set. */
int clientUsable(ClientObject *c);
/* Run op(c, arg) with the client usable, the GIL released and the mutex
 * held, then raise its error. Returns 0, or -1 with the exception set. */
int clientRun(ClientObject *c, ClientOp op, void *arg);
/* Free the library's client once closed and nothing needs it any more
 * (with the GIL held). Can't fail. */
void clientMaybeDestroy(ClientObject *c);
/* Free the library's client now (with the GIL held; not in a forked child). */
void clientDestroy(ClientObject *c);
/* Parse an id argument: bytes of 1 to 512 bytes (the Python layer encodes str).
 * Returns 0, or -1 with the exception set. */
int idArg(PyObject *o, const char **id, size_t *len);
/* A method of c starts: close() now waits for it. Accepts NULL. */
void clientCallBegin(ClientObject *c);
/* The method is done, with result r (passed through; NULL keeps its exception). */
PyObject *clientCallEnd(ClientObject *c, PyObject *r);

/* The copies a put or a seal asks for, and what the node answered. */
typedef struct CopiesAsk {
    int replicas;     /* copies asked for (0: the node's default) */
    long long waitMs; /* OBJ_WAIT_DEFAULT: the node's replica-timeout */
    int holders;      /* out: the node's holder count */
    int counted;      /* out: whether it answered one (an object of several copies) */
} CopiesAsk;
/* The ask with the node's defaults. */
#define COPIES_ASK_DEFAULT ((CopiesAsk){.waitMs = OBJ_WAIT_DEFAULT})
/* What a put or seal returns to Python: the holder count, or None for an object of
 * one copy. NULL only out of memory. */
PyObject *copiesAskResult(const CopiesAsk *a);

/*
 * Define the method `name` (self of type Self) as nameIn counted as a call
 * under way of the client `owner` (an expression of self): close() waits
 * until it returns, so a call that finishes after close() may still hand
 * out a view of the arena.
 */
#define PYOBJ_COUNTED_METHOD(name, Self, owner)                                                    \
    static PyObject *name(Self *self, PyObject *args)                                              \
    {                                                                                              \
        ClientObject *counted = (owner);                                                           \
                                                                                                   \
        clientCallBegin(counted);                                                                  \
        return clientCallEnd(counted, name##In(self, args));                                       \
    }

#endif /* OBJSTORE_PY_CLIENTCORE_H */
