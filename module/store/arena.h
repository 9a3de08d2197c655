/*
 * arena.h - the node's shared-memory arena: one file (mode 0600) in a tmpfs
 * directory such as /dev/shm, sized once and mapped MAP_SHARED, so that
 * local clients can map the same file and read or write objects in place.
 * Offsets, not pointers, name places in it (clients map it elsewhere).
 */
#ifndef OBJSTORE_ARENA_H
#define OBJSTORE_ARENA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct Arena {
    char path[512]; /* the file clients open */
    uint8_t *base;  /* this process's mapping */
    uint64_t size;
    int fd;
} Arena;

/* Create, size and map the arena file dir/objstore-<pid>.arena, created with
 * mode (0600: the server's user only; the group bits let a group, or a
 * directory's default ACL, open it; the umask applies). Stale arena files of
 * dead processes in dir are removed first. Returns 0, or -1 with a user-facing
 * reason in err. A file whose group may write (0660) must carry an ACL inherited
 * from dir's default ACL, or it is refused (readers apart from writers). */
int arenaOpen(Arena *a, const char *dir, uint64_t size, mode_t mode, char *err, size_t errLen);
/* Fill this process's page tables for the whole arena now (the memory itself
 * is already allocated by arenaOpen), so that no object's first write or
 * read takes a page fault per 4 KiB. Costs the page tables (about 2 MiB per
 * GiB of arena) and start-up time (a fraction of a second per GiB). Returns
 * 0, or -1 with errno (EINVAL: the kernel has no MADV_POPULATE_WRITE, before
 * Linux 5.14). */
int arenaPrefault(Arena *a);
/* Unmap and unlink; safe to call twice or on a failed open. */
void arenaClose(Arena *a);

#endif /* OBJSTORE_ARENA_H */
