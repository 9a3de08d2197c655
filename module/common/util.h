/*
 * util.h - small pure helpers shared by the module and its unit tests:
 * strict number and size parsing for command arguments, glob matching for
 * OBJ.LIST MATCH, and clocks. No Redis headers.
 */
#ifndef OBJSTORE_UTIL_H
#define OBJSTORE_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Parse a whole buffer as a decimal integer in [0, INT64_MAX]: no sign, no
 * spaces, no trailing bytes. Returns 0 and sets *out, or -1. */
int utilParseU64(const char *s, size_t len, uint64_t *out);
/* Parse a whole buffer as exactly 16 hex digits (either case), the way
 * checksums travel as text. Returns 0 and sets *out, or -1. */
int utilParseHex64(const char *s, size_t len, uint64_t *out);
/* Parse a size like "1gb", "512m", "4096", "64kb" (1024-based, case
 * insensitive). Returns 0 and sets *out, or -1 on syntax error or overflow. */
int utilParseSize(const char *s, size_t len, uint64_t *out);
/* The longest TIMEOUT a command accepts, in milliseconds (one day; 0 already
 * means "no deadline"). Larger values would overflow the deadline arithmetic
 * of Redis timers and of the engine, which then fire at once. */
#define OBJ_TIMEOUT_MAX_MS 86400000ULL
/* Parse a TIMEOUT value in [0, OBJ_TIMEOUT_MAX_MS] as utilParseU64 does.
 * Returns 0 and sets *out, or -1 (syntax, or above the maximum). */
int utilParseTimeoutMs(const char *s, size_t len, uint64_t *out);
/* Glob match (*, ?, [a-z], [^x], \x) over binary-safe strings; 1 on match. */
int utilGlobMatch(const char *pat, size_t patLen, const char *str, size_t strLen);
/* utilGlobMatch that also adds the pattern and string bytes it examined to
 * *work, so that a caller can bound the total cost of many matches. The cost
 * of one match is at most about (strLen + 1) * (patLen + strLen). */
int utilGlobMatchCounted(const char *pat, size_t patLen, const char *str, size_t strLen,
                         uint64_t *work);
/* Milliseconds: wall clock (for created_ms) and monotonic (for durations). */
int64_t utilWallMs(void);
int64_t utilMonoUs(void);

#endif /* OBJSTORE_UTIL_H */
