/*
 * client.h - the Python package's native core (_objstore): the Client
 * type, one connection to one node (made by connect(), connect.c). Its
 * state and the one way a C call is made on it: clientcore.h.
 */
#ifndef OBJSTORE_PY_CLIENT_H
#define OBJSTORE_PY_CLIENT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "clientcore.h"

extern PyTypeObject ClientType;

/* connect(host, port, unix_socket, rdma, username, password, zero_copy): a Client
 * (connect.c). Returns it or NULL. */
PyObject *modConnect(PyObject *mod, PyObject *args, PyObject *kw);
/* broadcast(clients, id, timeout_ms): place id on every client's node at once
 * (broadcast.c). Returns the list of outcomes or NULL. */
PyObject *modBroadcast(PyObject *mod, PyObject *args);

#endif /* OBJSTORE_PY_CLIENT_H */
