/*
 * fetch.h - the requesting side of a transfer (fetch.c): OBJ.FETCH requests,
 * shared transfers, failover between locations, payloads received or read.
 */
#ifndef OBJSTORE_FETCH_H
#define OBJSTORE_FETCH_H

#include "engineint.h"

/* Its handler table, which start.c gives the engine. */
extern const EngineSide fetchSide;

#endif /* OBJSTORE_FETCH_H */
