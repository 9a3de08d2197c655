/*
 * forkguard.c - the Python package's native core (_objstore): a forked
 * child loses the arenas of its parent's clients (forkguard.h).
 */
#include "forkguard.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/*
 * A forked child inherits the parent's mapping of each arena and every view
 * into it, but none of the pins: once the parent lets an object go, its
 * range is reused and an inherited view would show another object's bytes.
 * So the child loses the arenas at fork (forkChild maps inaccessible memory
 * over each) and a touch of an inherited view faults; forkOnFault says why
 * before the fault takes its usual course (faulthandler's traceback, or the
 * default action). forkRanges lists the arenas of this process's clients.
 */
typedef struct ArenaRange {
    void *base;
    size_t size;
} ArenaRange;

static pthread_mutex_t forkLock = PTHREAD_MUTEX_INITIALIZER;
static ArenaRange *forkRanges;
static size_t forkCount, forkCap;
static struct sigaction forkOldSegv, forkOldBus;

/* See forkguard.h. */
int forkTrack(void *base, size_t size)
{
    int rv = 0;

    pthread_mutex_lock(&forkLock);
    if (forkCount == forkCap) {
        size_t cap = forkCap ? forkCap * 2 : 8;
        ArenaRange *r = realloc(forkRanges, cap * sizeof(*r));
        if (r == NULL) {
            rv = -1;
            goto out_unlock;
        }
        forkRanges = r;
        forkCap = cap;
    }
    forkRanges[forkCount++] = (ArenaRange){base, size};
out_unlock:
    pthread_mutex_unlock(&forkLock);
    return rv;
}

/* See forkguard.h. */
void forkUntrack(void *base)
{
    pthread_mutex_lock(&forkLock);
    for (size_t i = 0; i < forkCount; i++)
        if (forkRanges[i].base == base) {
            forkRanges[i] = forkRanges[--forkCount];
            break;
        }
    pthread_mutex_unlock(&forkLock);
}

/* Whether addr lies in an arena this process lost at fork (async-signal-safe). */
static int forkLost(const void *addr)
{
    for (size_t i = 0; i < forkCount; i++)
        if ((const char *)addr >= (const char *)forkRanges[i].base &&
            (const char *)addr < (const char *)forkRanges[i].base + forkRanges[i].size)
            return 1;
    return 0;
}

/* SIGSEGV/SIGBUS in a child: name the cause when it is an inherited view, then let the
 * fault repeat under the handler that was there before (async-signal-safe). */
static void forkOnFault(int sig, siginfo_t *si, void *uctx)
{
    static const char msg[] =
        "objstore: this process touched a view (array, memoryview, tensor) of an object that "
        "it inherited across fork: the pins are the parent's, so the memory may hold another "
        "object by now, and the child has no access to it. Get the object again in the child "
        "(objstore.connect() there).\n";
    ssize_t w;

    (void)uctx;
    if (forkLost(si->si_addr))
        w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)w;
    sigaction(sig, sig == SIGBUS ? &forkOldBus : &forkOldSegv, NULL);
}

/* pthread_atfork: the list stays whole across fork. */
static void forkPrepare(void)
{
    pthread_mutex_lock(&forkLock);
}

static void forkParent(void)
{
    pthread_mutex_unlock(&forkLock);
}

/* In the child (one thread, before any Python code): inaccessible memory over every
 * arena, and forkOnFault to explain a touch. Only system calls (async-signal-safe). */
static void forkChild(void)
{
    struct sigaction sa;

    for (size_t i = 0; i < forkCount; i++)
        mmap(forkRanges[i].base, forkRanges[i].size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    if (forkCount > 0) {
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = forkOnFault;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &forkOldSegv);
        sigaction(SIGBUS, &sa, &forkOldBus);
    }
    pthread_mutex_unlock(&forkLock);
}

/* See forkguard.h. */
int forkInstall(void)
{
    static int installed;

    if (!installed && pthread_atfork(forkPrepare, forkParent, forkChild) != 0)
        return -1;
    installed = 1;
    return 0;
}
