/*
 * errors.h - the Python package's native core (_objstore): how a failure
 * becomes a Python exception. The classes are the Python layer's
 * (objstore/__init__.py hands them over through _set_errors, its table made
 * from ERROR_WORDS, the list of common/errwords.h); a library
 * error is saved while the client mutex is held and raised once the GIL is
 * back.
 */
#ifndef OBJSTORE_PY_ERRORS_H
#define OBJSTORE_PY_ERRORS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "client/objstore.h"

/* The classes of the local causes: no connection, no mapping, a closed client,
 * a client used after fork (NULL until _set_errors). */
extern PyObject *errConnection, *errMap, *errClosed, *errForked;

/* A library error saved while the client mutex was held (code OBJ_OK: none). */
typedef struct SavedErr {
    ObjErr code;
    char msg[512];
} SavedErr;

/* The exception instance of a message: the class of its code word, else fallback (or
 * the base class). Returns a new reference, or NULL with a Python error set. */
PyObject *errInstance(PyObject *fallback, const char *msg, size_t len);
/* Raise the exception for a message (see errInstance). Returns NULL. */
PyObject *errRaise(PyObject *fallback, const char *msg);
/* Raise a layout error ("BADMETA ...", printf-style). Returns NULL. */
PyObject *layoutFail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Raise a saved library error. Returns NULL. */
PyObject *errRaiseSaved(const SavedErr *e);
/* _set_errors(base, {word: class}, connection, map, closed, forked). Returns None or NULL. */
PyObject *modSetErrors(PyObject *mod, PyObject *args);
/* The module's ERROR_WORDS: ((word, class name), ...) from the one list of
 * code words (common/errwords.h), which objstore/__init__.py turns into its
 * ERROR_CODES. Returns a new reference, or NULL with a Python error set. */
PyObject *errWordsTuple(void);

#endif /* OBJSTORE_PY_ERRORS_H */
