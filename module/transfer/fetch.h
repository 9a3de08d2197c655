/*
 * fetch.h - the requesting side of a transfer (fetch.c, fetchxfer.c,
 * fetchanswer.c; their insides: fetchint.h): OBJ.FETCH requests,
 * shared transfers, failover between locations, payloads received or read.
 */
#ifndef OBJSTORE_FETCH_H
#define OBJSTORE_FETCH_H

#include "engineint.h"

/* Its handler table, which start.c gives the engine. */
extern const EngineSide fetchSide;

/* For the answering side (a relay): is object id being received here (over
 * either transport)? Then *e is its created entry, *landed how many of its
 * bytes are in place from its start, and *checksum the owner's. Returns 0, or -1 when no
 * such transfer runs. Engine thread only. */
int fetchPartial(const char *id, size_t idLen, ObjEntry **e, uint64_t *landed, uint64_t *checksum);
/* The node the transfer of id running here receives from right now, or
 * NULL (none runs, or it is between sources). Engine thread only. */
const char *fetchSource(const char *id, size_t idLen);

#endif /* OBJSTORE_FETCH_H */
