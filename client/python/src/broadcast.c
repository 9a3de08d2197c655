/*
 * broadcast.c - the Python package's native core (_objstore): broadcast(),
 * which places an object on the nodes of many clients at once through the
 * library's objClientBroadcast, one thread per node.
 */
#include "client.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- broadcast --------------------------------------------------------------------------- */

/* One node of a broadcast: its client, the library's record of its outcome, the id. */
typedef struct BcastNode {
    ClientObject *c;
    ObjBroadcastDest dest;
    const char *id;
    size_t idLen;
    long long timeoutMs;
    pthread_t thread;
    int started; /* thread runs bcastNodeRun */
} BcastNode;

/* Ask one node (GIL not held): objClientBroadcast on its client, under its mutex. */
static void *bcastNodeRun(void *arg)
{
    BcastNode *b = arg;

    clientLock(b->c);
    b->dest.client = b->c->oc;
    objClientBroadcast(&b->dest, 1, b->id, b->idLen, b->timeoutMs);
    clientUnlock(b->c);
    return NULL;
}

/*
 * Ask every node at once (GIL not held): one thread per node, so that all
 * of them fetch together and relay among themselves. The library asks the
 * destinations of one objClientBroadcast call in turn over a transport that
 * does not pipeline (RDMA), and each client must be used under its own
 * mutex, so each node gets its own call. A node whose thread cannot start
 * is asked here, after the others have started. Can't fail.
 */
static void bcastRunAll(BcastNode *nodes, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        nodes[i].started = pthread_create(&nodes[i].thread, NULL, bcastNodeRun, &nodes[i]) == 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!nodes[i].started)
            bcastNodeRun(&nodes[i]);
    for (Py_ssize_t i = 0; i < n; i++)
        if (nodes[i].started)
            pthread_join(nodes[i].thread, NULL);
}

/* A node's outcome: None when it holds the object, else its exception instance
 * (ConnectionFailed for a broken connection, else the class of the code word).
 * Returns a new reference or NULL. */
static PyObject *bcastOutcome(const BcastNode *b)
{
    const ObjBroadcastDest *d = &b->dest;

    if (d->err == OBJ_OK)
        Py_RETURN_NONE;
    return errInstance(d->err == OBJ_ERR_IO ? errConnection : NULL, d->errMsg, strlen(d->errMsg));
}

/*
 * broadcast(clients, id, timeout_ms): place id on the node of every client
 * (OBJ.FETCH on each, all under way at once; timeout_ms <= 0: each node's
 * fetch-timeout). Returns a list, per client in order, of None (the node
 * holds the object) or the exception of its failure; NULL with TypeError,
 * ValueError (a client twice), ClientClosed or ClientForked before anything
 * is sent.
 */
PyObject *modBroadcast(PyObject *mod, PyObject *args)
{
    PyObject *seq, *idObj, *clients, *out = NULL;
    long long timeoutMs = 0;
    BcastNode *nodes = NULL;
    const char *id;
    size_t idLen;
    Py_ssize_t n, begun = 0;

    if (!PyArg_ParseTuple(args, "OO|L", &seq, &idObj, &timeoutMs) || idArg(idObj, &id, &idLen) < 0)
        return NULL;
    clients = PySequence_Tuple(seq); /* holds every client for the call */
    if (clients == NULL)
        return NULL;
    n = PyTuple_GET_SIZE(clients);
    nodes = calloc(n > 0 ? (size_t)n : 1, sizeof(*nodes));
    if (nodes == NULL) {
        PyErr_NoMemory();
        goto out_clients;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *c = PyTuple_GET_ITEM(clients, i);
        if (!PyObject_TypeCheck(c, &ClientType)) {
            PyErr_Format(PyExc_TypeError, "broadcast takes Clients, not %s", Py_TYPE(c)->tp_name);
            goto out_nodes;
        }
        for (Py_ssize_t j = 0; j < i; j++)
            if (nodes[j].c == (ClientObject *)c) {
                PyErr_SetString(PyExc_ValueError, "one client is given twice");
                goto out_nodes;
            }
        if (clientUsable((ClientObject *)c) < 0)
            goto out_nodes;
        nodes[i] = (BcastNode){.c = (ClientObject *)c,
                               .id = id,
                               .idLen = idLen,
                               .timeoutMs = timeoutMs,
                               .dest = {.name = ""}};
    }
    for (; begun < n; begun++)
        clientCallBegin(nodes[begun].c);
    Py_BEGIN_ALLOW_THREADS;
    bcastRunAll(nodes, n);
    Py_END_ALLOW_THREADS;
    out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *o = bcastOutcome(&nodes[i]);
        if (o == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, o);
    }
out_nodes:
    for (Py_ssize_t i = 0; i < begun; i++)
        clientCallEnd(nodes[i].c, NULL);
    free(nodes);
out_clients:
    Py_DECREF(clients);
    return out;
}
