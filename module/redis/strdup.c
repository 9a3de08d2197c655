/*
 * strdup.c - one allocator for everything objstore.so allocates and frees itself:
 * the module's own strdup.
 *
 * hiredis (linked in statically) duplicates host names with strdup and
 * releases them with free. Valkey loads modules with RTLD_DEEPBIND and runs
 * on jemalloc: the module's malloc and free bind to the C library's, but
 * the C library's strdup allocates through the global malloc, jemalloc, and
 * glibc's free then aborts on that block. This strdup, hidden in the module,
 * is the one hiredis and the module link to, so both halves of each pair
 * come from the same allocator on every server.
 */
#include <stdlib.h>
#include <string.h>

/* strdup: a copy of s from this module's malloc, or NULL (errno ENOMEM). */
char *strdup(const char *s)
{
    size_t len = strlen(s) + 1;
    char *p = malloc(len);

    if (p)
        memcpy(p, s, len);
    return p;
}
