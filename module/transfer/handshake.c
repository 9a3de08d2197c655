/*
 * handshake.c - the verdict on one more connection in its handshake
 * (handshake.h).
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
