/*
 * handshake.c - the verdicts on one more connection in its handshake:
 * whether it fits, and which one gives way (handshake.h).
 */
#include <stddef.h>

#include "handshake.h"

const char *handshakeVerdict(const HandshakeCaps *caps, int all, int same)
{
    if (all >= caps->max)
        return caps->whyMax;
    if (same >= caps->maxPerSource)
        return caps->whyPerSource;
    return NULL;
}

HandshakeEvict handshakeEvict(const HandshakeCaps *caps, int all, int same)
{
    if (same >= caps->maxPerSource)
        return HANDSHAKE_EVICT_SAME;
    if (all >= caps->max)
        return HANDSHAKE_EVICT_ANY;
    return HANDSHAKE_EVICT_NONE;
}
