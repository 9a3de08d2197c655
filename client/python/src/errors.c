/*
 * errors.c - the Python package's native core (_objstore): exceptions from
 * code words and saved library errors (errors.h).
 */
#include "errors.h"

#include <stdarg.h>
#include <string.h>

#include "common/errwords.h"

/* Set once by the Python layer (_set_errors): the base class, the code-word table and
 * the classes of the local causes. */
static PyObject *errBase, *errTable;
PyObject *errConnection, *errMap, *errClosed, *errForked;

/*
 * The exception instance for a code word and message: the class registered
 * for the message's first word, else the base class. Returns a new
 * reference, or NULL with a Python error set.
 */
PyObject *errInstance(PyObject *fallback, const char *msg, size_t len)
{
    PyObject *cls = fallback ? fallback : errBase, *word, *found = NULL, *text, *e;
    size_t wordLen = 0;

    while (wordLen < len && msg[wordLen] != ' ')
        wordLen++;
    if (fallback == NULL && errTable != NULL) {
        word = PyUnicode_DecodeLatin1(msg, (Py_ssize_t)wordLen, NULL);
        if (word == NULL)
            return NULL;
        found = PyDict_GetItemWithError(errTable, word);
        Py_DECREF(word);
        if (found == NULL && PyErr_Occurred())
            return NULL;
        if (found != NULL)
            cls = found;
    }
    if (cls == NULL)
        cls = PyExc_RuntimeError;
    text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)len, "replace");
    if (text == NULL)
        return NULL;
    e = PyObject_CallOneArg(cls, text);
    Py_DECREF(text);
    return e;
}

/* Raise the exception for a message (see errInstance). Returns NULL. */
PyObject *errRaise(PyObject *fallback, const char *msg)
{
    PyObject *e = errInstance(fallback, msg, strlen(msg));

    if (e != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(e), e);
        Py_DECREF(e);
    }
    return NULL;
}

/*
 * Raise the error of a layout that a writer's metadata named and that does
 * not fit (printf-style message, "BADMETA ..."): the class registered for
 * BADMETA (objstore.BadMetadata, a ValueError). Returns NULL.
 */
PyObject *layoutFail(const char *fmt, ...)
{
    char msg[256];
    va_list ap;

    va_start(ap, fmt);
    PyOS_vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return errRaise(NULL, msg);
}

/* Raise a saved library error: I/O and mapping failures have classes of their
 * own, every other one is found by its code word. Returns NULL. */
PyObject *errRaiseSaved(const SavedErr *e)
{
    if (e->code == OBJ_ERR_IO)
        return errRaise(errConnection, e->msg);
    if (e->code == OBJ_ERR_MAP)
        return errRaise(errMap, e->msg);
    return errRaise(NULL, e->msg);
}

/* _set_errors(base, {word: class}, connection, map, closed, forked): the exception
 * classes, from the Python layer. Returns None or NULL (TypeError). */
PyObject *modSetErrors(PyObject *mod, PyObject *args)
{
    PyObject *base, *table, *conn, *map, *closed, *forked;

    if (!PyArg_ParseTuple(args, "OO!OOOO", &base, &PyDict_Type, &table, &conn, &map, &closed,
                          &forked))
        return NULL;
    Py_XSETREF(errBase, Py_NewRef(base));
    Py_XSETREF(errTable, Py_NewRef(table));
    Py_XSETREF(errConnection, Py_NewRef(conn));
    Py_XSETREF(errMap, Py_NewRef(map));
    Py_XSETREF(errClosed, Py_NewRef(closed));
    Py_XSETREF(errForked, Py_NewRef(forked));
    Py_RETURN_NONE;
}

/* See errors.h. */
PyObject *errWordsTuple(void)
{
#define PY_ERR_WORD_ROW(word, code, pyClass, origin, meaning) {#word, #pyClass},
    static const struct {
        const char *word, *pyClass;
    } rows[] = {OBJ_ERR_WORDS(PY_ERR_WORD_ROW)};
#undef PY_ERR_WORD_ROW
    Py_ssize_t n = (Py_ssize_t)(sizeof(rows) / sizeof(rows[0]));
    PyObject *t = PyTuple_New(n);

    for (Py_ssize_t i = 0; t != NULL && i < n; i++) {
        PyObject *row = Py_BuildValue("(ss)", rows[i].word, rows[i].pyClass);
        if (row == NULL)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, i, row);
    }
    return t;
}
