/*
 * tier.c - the spill tier's files and its worker thread (see tier.h).
 *
 * One worker: the tier is a local device that does best with large
 * sequential transfers, one at a time; the main thread only queues jobs and
 * reaps results. Writes go through the page cache in large pieces without
 * fsync: a spilled object need not survive the node (a restarted node starts
 * empty), it must only come back intact while the node lives, which the
 * checksum check at every read makes sure of.
 */
#include "tier.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/util.h"

/* Bytes per write or read call: large enough to stream, small enough that
 * the kernel does not pin a huge range at once. */
#define TIER_IO_CHUNK (8ULL << 20)
#define TIER_LOCK     "lock"
#define TIER_SUFFIX   ".spill"

struct Tier {
    char path[512]; /* dir/objstore-<tag> */
    int lockFd;     /* flock held while the node lives */
    int evFd;       /* eventfd: finished jobs are waiting */
    uint64_t maxBytes;
    _Atomic uint64_t usedBytes;
    uint64_t nextFileNo; /* under lock */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    ObjList queue, done; /* TierJob.link */
    int stop;
    pthread_t worker;
};

/* The path of file fileNo. Can't fail (paths are bounded). */
static void tierFilePath(const Tier *t, uint64_t fileNo, char *out, size_t len)
{
    snprintf(out, len, "%s/%016" PRIx64 TIER_SUFFIX, t->path, fileNo);
}

/* Remove every spill file in the tier's directory (a dead node's, or ours
 * at close). Returns how many were removed. */
static int tierEmpty(Tier *t)
{
    DIR *d = opendir(t->path);
    struct dirent *de;
    int n = 0;

    if (!d)
        return 0;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name), sl = strlen(TIER_SUFFIX);
        if (l > sl && !strcmp(de->d_name + l - sl, TIER_SUFFIX) &&
            unlinkat(dirfd(d), de->d_name, 0) == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* Write j's bytes to a new file. Returns 0 or an errno value; a failed
 * write leaves no file behind. */
static int tierWrite(Tier *t, TierJob *j)
{
    char p[600];
    int err = 0;

    tierFilePath(t, j->fileNo, p, sizeof(p));
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno;
    for (uint64_t off = 0; off < j->len && !err;) {
        uint64_t n = j->len - off < TIER_IO_CHUNK ? j->len - off : TIER_IO_CHUNK;
        ssize_t w = pwrite(fd, j->buf + off, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            err = w < 0 ? errno : ENOSPC;
        else
            off += (uint64_t)w;
    }
    if (close(fd) != 0 && !err)
        err = errno;
    if (err)
        unlink(p);
    return err;
}

int tierReadAll(int fd, uint8_t *buf, uint64_t len, uint64_t checksum)
{
    struct stat sb;

    if (fstat(fd, &sb) != 0)
        return errno;
    if ((uint64_t)sb.st_size != len)
        return TIER_ESIZE;
    for (uint64_t off = 0; off < len;) {
        uint64_t n = len - off < TIER_IO_CHUNK ? len - off : TIER_IO_CHUNK;
        ssize_t r = pread(fd, buf + off, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return errno;
        if (r == 0)
            return TIER_ESIZE;
        off += (uint64_t)r;
    }
    return XXH3_64bits(buf, len) == checksum ? 0 : TIER_ECHECKSUM;
}

/* Read j's file into its buffer and check it. Returns 0 or an error. */
static int tierRead(Tier *t, TierJob *j)
{
    int fd = tierOpenFile(t, j->fileNo);

    if (fd < 0)
        return errno;
    int err = tierReadAll(fd, j->buf, j->len, j->checksum);
    close(fd);
    return err;
}

/* The worker: take jobs in order, do them, hand them back. */
static void *tierWorker(void *arg)
{
    Tier *t = arg;

    pthread_mutex_lock(&t->lock);
    for (;;) {
        while (!t->stop && objListEmpty(&t->queue))
            pthread_cond_wait(&t->cond, &t->lock);
        if (t->stop)
            break;
        TierJob *j = objListEntry(objListFirst(&t->queue), TierJob, link);
        objListUnlink(&j->link);
        pthread_mutex_unlock(&t->lock);
        int64_t t0 = utilMonoUs();
        if (j->op == TIER_COPY) {
            j->err = tierReadAll(j->fd, j->buf, j->len, j->checksum);
            close(j->fd);
        } else {
            j->err = j->op == TIER_SPILL ? tierWrite(t, j) : tierRead(t, j);
        }
        j->usec = utilMonoUs() - t0;
        if (j->op == TIER_SPILL && j->err)
            t->usedBytes -= j->len;
        pthread_mutex_lock(&t->lock);
        objListPushBack(&t->done, &j->link);
        uint64_t one = 1;
        if (write(t->evFd, &one, sizeof(one)) < 0) {
            /* cannot fail short of a bug: the counter never nears its limit */
        }
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

Tier *tierOpen(const char *dir, const char *tag, uint64_t maxBytes, char *err, size_t errLen)
{
    Tier *t = calloc(1, sizeof(*t));

    if (!t) {
        snprintf(err, errLen, "spill tier: out of memory");
        return NULL;
    }
    t->lockFd = t->evFd = -1;
    t->maxBytes = maxBytes;
    t->nextFileNo = 1;
    objListInit(&t->queue);
    objListInit(&t->done);
    if (snprintf(t->path, sizeof(t->path), "%s/objstore-%s", dir, tag) >= (int)sizeof(t->path)) {
        snprintf(err, errLen, "spill-dir %s: path too long", dir);
        goto out_free;
    }
    if (mkdir(t->path, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errLen, "spill-dir: cannot create %s: %s", t->path, strerror(errno));
        goto out_free;
    }
    char lp[600];
    snprintf(lp, sizeof(lp), "%s/" TIER_LOCK, t->path);
    t->lockFd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (t->lockFd < 0 || flock(t->lockFd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(err, errLen, "spill-dir: cannot lock %s: %s (another live node uses it?)", lp,
                 strerror(errno));
        goto out_close_lock;
    }
    tierEmpty(t); /* a dead node's leftovers: nothing in them is ours to restore */
    t->evFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (t->evFd < 0) {
        snprintf(err, errLen, "spill tier: eventfd: %s", strerror(errno));
        goto out_close_lock;
    }
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    if (pthread_create(&t->worker, NULL, tierWorker, t) != 0) {
        snprintf(err, errLen, "spill tier: cannot start its thread");
        goto out_destroy_sync;
    }
    return t;

out_destroy_sync:
    pthread_cond_destroy(&t->cond);
    pthread_mutex_destroy(&t->lock);
    close(t->evFd);
out_close_lock:
    if (t->lockFd >= 0)
        close(t->lockFd);
out_free:
    free(t);
    return NULL;
}

void tierClose(Tier *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    t->stop = 1;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->worker, NULL);
    tierEmpty(t);
    char lp[600];
    snprintf(lp, sizeof(lp), "%s/" TIER_LOCK, t->path);
    unlink(lp);
    rmdir(t->path);
    close(t->lockFd);
    close(t->evFd);
    pthread_cond_destroy(&t->cond);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

int tierSubmit(Tier *t, TierJob *j)
{
    if (j->op == TIER_SPILL) {
        uint64_t used = t->usedBytes += j->len;
        if (t->maxBytes && used > t->maxBytes) {
            t->usedBytes -= j->len;
            j->err = ENOSPC;
            return -1;
        }
    }
    pthread_mutex_lock(&t->lock);
    if (j->op == TIER_SPILL)
        j->fileNo = t->nextFileNo++;
    objListPushBack(&t->queue, &j->link);
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
    return 0;
}

int tierEventFd(const Tier *t)
{
    return t->evFd;
}

TierJob *tierReap(Tier *t)
{
    TierJob *j = NULL;
    uint64_t v;

    pthread_mutex_lock(&t->lock);
    ObjListLink *l = objListFirst(&t->done);
    if (l) {
        j = objListEntry(l, TierJob, link);
        objListUnlink(&j->link);
    } else if (read(t->evFd, &v, sizeof(v)) < 0) {
        /* EAGAIN: already clear */
    }
    pthread_mutex_unlock(&t->lock);
    return j;
}

void tierDiscard(Tier *t, uint64_t fileNo, uint64_t bytes)
{
    char p[600];

    tierFilePath(t, fileNo, p, sizeof(p));
    unlink(p);
    t->usedBytes -= bytes;
}

int tierOpenFile(Tier *t, uint64_t fileNo)
{
    char p[600];

    tierFilePath(t, fileNo, p, sizeof(p));
    return open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
}

const char *tierStrError(int err)
{
    if (err == TIER_ESIZE)
        return "the tier file's size does not match the object (truncated or changed)";
    if (err == TIER_ECHECKSUM)
        return "the tier file's bytes do not match the object's checksum";
    return strerror(err);
}

const char *tierPath(const Tier *t)
{
    return t->path;
}

uint64_t tierBytesUsed(const Tier *t)
{
    return t->usedBytes;
}
