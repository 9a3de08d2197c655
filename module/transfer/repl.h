/*
 * repl.h - REPL, both ends (repl.c): asking a node to hold a counted copy
 * of an object (engineSubmitRepl), and being asked.
 */
#ifndef OBJSTORE_REPL_H
#define OBJSTORE_REPL_H

#include "engineint.h"

/* Its handler table, which start.c gives the engine. */
extern const EngineSide replSide;

#endif /* OBJSTORE_REPL_H */
