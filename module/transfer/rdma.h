/*
 * rdma.h - the RDMA transport (rdma.c): the engine's frames over one RDMA
 * stream per connection (module/rdma/stream.h), and the RDMA READ
 * rendezvous through a memory window bound per transfer.
 */
#ifndef OBJSTORE_TRANSFER_RDMA_H
#define OBJSTORE_TRANSFER_RDMA_H

#include <stdint.h>

#include "transport.h"

typedef struct RdmaTransportConfig {
    uint8_t *arenaBase; /* registered once (local access, window binding) */
    uint64_t arenaSize;
    char rdmaBind[64]; /* IPv4 address of the device to use */
    int rdmaPort;
    char rdmaDevice[64]; /* "" = whichever device rdmaBind is on */
} RdmaTransportConfig;

/* Open the device behind cfg->rdmaBind, register the arena and listen.
 * Returns the operations table, calling into the core only through h, or
 * NULL with a reason in err (RDMA then stays off). */
const TransportOps *rdmaTransportInit(const TransportHost *h, const RdmaTransportConfig *cfg,
                                      char *err, size_t errLen);

#endif /* OBJSTORE_TRANSFER_RDMA_H */
