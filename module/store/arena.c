/*
 * arena.c - create, map and remove the shared-memory arena file (arena.h).
 *
 * The file is sized with posix_fallocate so that an undersized tmpfs fails
 * here, at start-up, with a clear message, instead of a SIGBUS later when a
 * page is first touched by a writer.
 */
#include "arena.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

/* Remove dir/objstore-<pid>.arena files whose process no longer exists:
 * a node killed with SIGKILL cannot clean up after itself. */
static void arenaRemoveStale(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;

    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        int pid;
        char tail[16];
        if (sscanf(de->d_name, "objstore-%d.aren%15s", &pid, tail) != 2 || strcmp(tail, "a"))
            continue;
        if (pid <= 0 || pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        unlink(path);
    }
    closedir(d);
}

/*
 * Whether the new arena file's group may write it only through an ACL: a file
 * whose group bits grant write (arena-mode 0660) must have inherited an access
 * ACL from its directory's default ACL, where those bits are the mask and the
 * named groups say who writes (docs/security.md). Without one, the file's whole
 * group (the readers) could write every object. Returns 0, or -1 with err set.
 */
static int arenaCheckGroupWrite(const Arena *a, const char *dir, char *err, size_t errLen)
{
    struct stat st;

    if (fstat(a->fd, &st) == -1) {
        snprintf(err, errLen, "cannot stat arena file %s: %s", a->path, strerror(errno));
        return -1;
    }
    if (!(st.st_mode & S_IWGRP) || fgetxattr(a->fd, "system.posix_acl_access", NULL, 0) > 0)
        return 0;
    snprintf(err, errLen,
             "arena-mode lets the group of %s write it, but %s has no default ACL to say "
             "which group writes (set one, or use arena-mode 0640; docs/security.md)",
             a->path, dir);
    return -1;
}

int arenaOpen(Arena *a, const char *dir, uint64_t size, mode_t mode, char *err, size_t errLen)
{
    int rc;

    memset(a, 0, sizeof(*a));
    a->fd = -1;
    arenaRemoveStale(dir);
    if ((size_t)snprintf(a->path, sizeof(a->path), "%s/objstore-%d.arena", dir, (int)getpid()) >=
        sizeof(a->path)) {
        snprintf(err, errLen, "arena-dir '%s' is too long", dir);
        return -1;
    }
    a->fd = open(a->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (a->fd == -1) {
        snprintf(err, errLen, "cannot create arena file %s: %s", a->path, strerror(errno));
        return -1;
    }
    if (arenaCheckGroupWrite(a, dir, err, errLen) == -1)
        goto out_unlink;
    rc = posix_fallocate(a->fd, 0, (off_t)size);
    if (rc != 0) {
        snprintf(err, errLen, "cannot size arena file %s to %llu bytes: %s (is %s large enough?)",
                 a->path, (unsigned long long)size, strerror(rc), dir);
        goto out_unlink;
    }
    a->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
    if (a->base == MAP_FAILED) {
        a->base = NULL;
        snprintf(err, errLen, "cannot map arena file %s: %s", a->path, strerror(errno));
        goto out_unlink;
    }
    a->size = size;
    return 0;

out_unlink:
    close(a->fd);
    a->fd = -1;
    unlink(a->path);
    a->path[0] = '\0';
    return -1;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older headers lack the name */
#endif

int arenaPrefault(Arena *a)
{
    return madvise(a->base, a->size, MADV_POPULATE_WRITE);
}

void arenaClose(Arena *a)
{
    if (a->base)
        munmap(a->base, a->size);
    a->base = NULL;
    if (a->fd != -1)
        close(a->fd);
    a->fd = -1;
    if (a->path[0])
        unlink(a->path);
    a->path[0] = '\0';
}
