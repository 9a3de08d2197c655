/*
 * fuzz_wire.h - the wire-format fuzz target (fuzz_wire.c), shared by the
 * libFuzzer build and the standalone driver (fuzz_main.c).
 */
#ifndef OBJSTORE_FUZZ_WIRE_H
#define OBJSTORE_FUZZ_WIRE_H

#include <stddef.h>
#include <stdint.h>

/* What the target saw, so a driver can tell that it reached the deep paths. */
typedef struct FuzzWireStats {
    uint64_t inputs;    /* calls */
    uint64_t hdrOk;     /* inputs whose first 16 bytes were an acceptable header */
    uint64_t frameOk;   /* ... followed by an acceptable body: a whole valid frame */
    uint64_t rawBodyOk; /* bodies accepted by wireDecodeBody behind a raw header */
    uint64_t encodeOk;  /* messages built from the input that wireEncode accepted */
} FuzzWireStats;

extern FuzzWireStats fuzzWireStats;

/* The libFuzzer entry point. Aborts on a broken invariant; returns 0. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* OBJSTORE_FUZZ_WIRE_H */
