/*
 * hello.c - a first objstore program: the whole object life cycle through the
 * C client against one node (start one with `make run`).
 *
 * It writes an object in place in the shared arena (create -> fill -> seal),
 * reads it back without a copy (pin -> checksum -> release), does the same
 * with the copying put/get that also work from another machine, and deletes
 * what it made. Each step is printed; the exit status is 0 when all of them
 * worked, 1 with the server's or the library's message otherwise.
 *
 * Build it with the tree's Makefile (`make` builds build/examples/hello), or
 * standalone through pkg-config, against the installed library (`make install`;
 * PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig when PREFIX is not searched) or the
 * build tree's (PKG_CONFIG_PATH=/path/to/objstore/build/client):
 *
 *   cc -o hello hello.c $(pkg-config --cflags --libs objstore)
 *   ./hello [host [port]]            # default 127.0.0.1 6379
 */
#include <objstore.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HELLO_SIZE (1024 * 1024)

/*
 * FNV-1a over a byte range: a checksum anyone can recompute by hand, to show
 * that the pinned bytes are the ones written. Can't fail.
 */
static unsigned long long helloChecksum(const unsigned char *p, size_t n)
{
    unsigned long long h = 14695981039346656037ULL;

    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* Print why step failed and return 1 (the exit status). */
static int helloFail(ObjClient *c, const char *step)
{
    fprintf(stderr, "hello: %s failed (error %d): %s\n", step, (int)objClientErrCode(c),
            objClientErrMsg(c));
    return 1;
}

/*
 * Create, fill and seal `id` in place, then pin it and compare checksums.
 * Returns 0, or 1 after printing the failure.
 */
static int helloZeroCopy(ObjClient *c, const char *id)
{
    const char meta[] = "example=hello";
    unsigned long long written, pinned;
    unsigned char *p;
    void *data;
    ObjBuffer buf;

    if (objClientCreate(c, id, strlen(id), HELLO_SIZE, meta, strlen(meta), &data) < 0)
        return helloFail(c, "objClientCreate (zero-copy)");
    p = data;
    for (size_t i = 0; i < HELLO_SIZE; i++)
        p[i] = (unsigned char)(i * 7 + 3);
    written = helloChecksum(p, HELLO_SIZE);
    printf("created  %-24s %d bytes, written in place in the shared arena\n", id, HELLO_SIZE);

    if (objClientSeal(c, id, strlen(id)) < 0)
        return helloFail(c, "objClientSeal");
    printf("sealed   %-24s now immutable and visible to every client\n", id);

    if (objClientPin(c, id, strlen(id), 0, &buf) < 0)
        return helloFail(c, "objClientPin");
    pinned = helloChecksum(buf.data, buf.size);
    printf("pinned   %-24s %zu bytes, meta \"%.*s\", checksum %016llx (written %016llx)\n", id,
           buf.size, (int)buf.metaSize, (const char *)buf.meta, pinned, written);
    if (objClientRelease(c, id, strlen(id)) < 0)
        return helloFail(c, "objClientRelease");
    printf("released %s\n", id);
    if (pinned != written || buf.size != HELLO_SIZE) {
        fprintf(stderr, "hello: the pinned bytes differ from the written ones\n");
        return 1;
    }
    return 0;
}

/*
 * Put `id` through the connection, get it back and compare. Returns 0, or 1
 * after printing the failure.
 */
static int helloCopying(ObjClient *c, const char *id)
{
    const char text[] = "hello, objstore";
    void *data;
    size_t size;
    int same;

    if (objClientPut(c, id, strlen(id), text, strlen(text), NULL, 0) < 0)
        return helloFail(c, "objClientPut");
    printf("put      %-24s \"%s\"\n", id, text);
    if (objClientGet(c, id, strlen(id), 0, &data, &size) < 0)
        return helloFail(c, "objClientGet");
    printf("got      %-24s \"%.*s\"\n", id, (int)size, (const char *)data);
    same = size == strlen(text) && memcmp(data, text, size) == 0;
    objClientFreeData(data);
    if (!same) {
        fprintf(stderr, "hello: objClientGet returned other bytes than were put\n");
        return 1;
    }
    return 0;
}

/* Delete `id`, printing the outcome. Returns 0, or 1 after printing the failure. */
static int helloDelete(ObjClient *c, const char *id)
{
    if (objClientDelete(c, id, strlen(id)) < 0)
        return helloFail(c, "objClientDelete");
    printf("deleted  %s\n", id);
    return 0;
}

int main(int argc, char **argv)
{
    const char *host = argc > 1 ? argv[1] : "127.0.0.1";
    int port = argc > 2 ? atoi(argv[2]) : 6379;
    char zeroId[64], copyId[64];
    ObjClient *c;
    int rv;

    if (argc > 3 || port <= 0 || port > 65535) {
        fprintf(stderr, "usage: %s [host [port]]   (default 127.0.0.1 6379)\n", argv[0]);
        return 2;
    }
    /* Ids carry the pid so that several runs against one node do not collide. */
    snprintf(zeroId, sizeof(zeroId), "hello:%ld:zero-copy", (long)getpid());
    snprintf(copyId, sizeof(copyId), "hello:%ld:copy", (long)getpid());

    c = objClientConnect(host, port);
    if (c == NULL) {
        fprintf(stderr, "hello: out of memory\n");
        return 1;
    }
    if (objClientErrCode(c) != OBJ_OK) {
        rv = helloFail(c, "objClientConnect");
        goto out_free;
    }
    printf("connected to %s:%d\n", host, port);

    rv = helloZeroCopy(c, zeroId);
    if (rv == 0)
        rv = helloCopying(c, copyId);
    if (rv == 0)
        rv = helloDelete(c, zeroId);
    if (rv == 0)
        rv = helloDelete(c, copyId);
    if (rv == 0) {
        printf("all steps worked\n");
    } else {
        /* Best effort, quietly: the failure has been reported; a created
         * object is aborted by the disconnect anyway. */
        objClientDelete(c, zeroId, strlen(zeroId));
        objClientDelete(c, copyId, strlen(copyId));
    }

out_free:
    objClientFree(c);
    return rv;
}
