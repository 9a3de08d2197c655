/*
 * fetch.h - the requesting side of a transfer (fetch.c): OBJ.FETCH requests,
 * shared transfers, failover between locations, payloads received or read.
 */
#ifndef OBJSTORE_FETCH_H
#define OBJSTORE_FETCH_H

#include "engineint.h"

/* Its handler table, registered with engineAddSide. */
extern const EngineSide fetchSide;

#endif /* OBJSTORE_FETCH_H */
