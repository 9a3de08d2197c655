/*
 * alloc.c - the client library's allocator hooks and version (objstore.h):
 * one table of malloc/calloc/realloc/free that every allocation of the
 * library uses, replaced whole by objSetAllocators, and objVersion, the
 * version of the library a program is running against.
 */
#include "objalloc.h"

#include <stdlib.h>

ObjAllocFuncs objAllocFns = {
    .mallocFn = malloc,
    .callocFn = calloc,
    .reallocFn = realloc,
    .freeFn = free,
};

/*
 * Install fns (every member must be set; NULL or an incomplete table is
 * refused and changes nothing). Returns the table that was in force, so a
 * caller can chain to it or put it back. See objstore.h for when it may be
 * called.
 */
ObjAllocFuncs objSetAllocators(const ObjAllocFuncs *fns)
{
    ObjAllocFuncs old = objAllocFns;

    if (fns != NULL && fns->mallocFn != NULL && fns->callocFn != NULL && fns->reallocFn != NULL &&
        fns->freeFn != NULL)
        objAllocFns = *fns;
    return old;
}

/* Go back to the C library's allocator. Can't fail. */
void objResetAllocators(void)
{
    objAllocFns.mallocFn = malloc;
    objAllocFns.callocFn = calloc;
    objAllocFns.reallocFn = realloc;
    objAllocFns.freeFn = free;
}

/* The library's version as OBJSTORE_VERSION encodes it. Can't fail. */
unsigned objVersion(void)
{
    return OBJSTORE_VERSION;
}
