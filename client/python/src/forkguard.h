/*
 * forkguard.h - the Python package's native core (_objstore): what a forked
 * child does with the arenas it inherits (it loses them, and a touch of an
 * inherited view says why before it faults). See forkguard.c.
 */
#ifndef OBJSTORE_PY_FORKGUARD_H
#define OBJSTORE_PY_FORKGUARD_H

#include <stddef.h>

/* Remember a client's arena mapping. Returns 0, or -1 when out of memory (then a child
 * keeps that mapping: its views are as before, readable and unpinned). */
int forkTrack(void *base, size_t size);
/* Forget the mapping at base (its client unmaps it). Can't fail. */
void forkUntrack(void *base);
/* Install the fork handlers, once per process however often it is called.
 * Returns 0, or -1 when pthread_atfork fails. */
int forkInstall(void);

#endif /* OBJSTORE_PY_FORKGUARD_H */
