/*
 * node.c - the one definition of this node's state (node.h). It calls
 * nothing, so that every Redis-facing file can share the state without
 * depending on module.c, which fills it in at load and calls the others.
 */
#include "node.h"

ObjNode objNode;
