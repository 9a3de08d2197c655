/*
 * serve.h - the answering side of a transfer (serve.c): FETCH frames from
 * other nodes answered inline or by a read rendezvous, and the pins held
 * meanwhile.
 */
#ifndef OBJSTORE_SERVE_H
#define OBJSTORE_SERVE_H

#include "engineint.h"

/* Its handler table, which start.c gives the engine. */
extern const EngineSide serveSide;

#endif /* OBJSTORE_SERVE_H */
