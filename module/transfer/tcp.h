/*
 * tcp.h - the TCP transport (tcp.c): length-prefixed frames over sockets,
 * payloads written straight from the arena and read straight into objects.
 */
#ifndef OBJSTORE_TCP_H
#define OBJSTORE_TCP_H

#include "transport.h"

/* The TCP operations table, calling into the core only through h (which
 * must outlive the transport). Can't fail; listening comes later. */
const TransportOps *tcpTransportInit(const TransportHost *h);

#endif /* OBJSTORE_TCP_H */
