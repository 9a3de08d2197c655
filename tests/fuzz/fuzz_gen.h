/*
 * fuzz_gen.h - what the standalone fuzz drivers share: a seeded generator
 * (splitmix64: fast, and reproducible from the seed) and a monotonic clock
 * for their time bounds. Header-only: each driver is one program.
 */
#ifndef OBJSTORE_FUZZ_GEN_H
#define OBJSTORE_FUZZ_GEN_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static uint64_t fuzzState;

static inline uint64_t fuzzRand(void)
{
    uint64_t z = (fuzzState += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A value in [0, n); 0 when n is 0. */
static inline uint64_t fuzzBelow(uint64_t n)
{
    return n == 0 ? 0 : fuzzRand() % n;
}

static inline double fuzzNow(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Abort the driver, naming the broken invariant, unless ok. */
static inline void fuzzCheck(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "%s: invariant broken: %s\n", program_invocation_short_name, what);
        abort();
    }
}

/* Fold len bytes into the running hash h (FNV-1a style, length included):
 * how the drivers compare what several runs over one input produced. */
static inline uint64_t fuzzMix(uint64_t h, const void *data, size_t len)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return (h ^ len) * 0x100000001b3ULL;
}

/* The drivers' common options: -n INPUTS, -t SECONDS, -s SEED (each left
 * as the caller's default when absent); seeds the generator. Returns 0, or
 * 2 after printing the usage on a bad option. */
static inline int fuzzParseArgs(int argc, char **argv, uint64_t *inputs, double *seconds,
                                uint64_t *seed)
{
    int opt;

    while ((opt = getopt(argc, argv, "n:t:s:")) != -1) {
        if (opt == 'n')
            *inputs = strtoull(optarg, NULL, 10);
        else if (opt == 't')
            *seconds = atof(optarg);
        else if (opt == 's')
            *seed = strtoull(optarg, NULL, 10);
        else {
            fprintf(stderr, "usage: %s [-n INPUTS] [-t SECONDS] [-s SEED]\n", argv[0]);
            return 2;
        }
    }
    fuzzState = *seed;
    return 0;
}

#endif /* OBJSTORE_FUZZ_GEN_H */
