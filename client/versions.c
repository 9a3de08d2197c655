/*
 * versions.c - the client library's named versions (OBJ.VPUBLISH, VLATEST,
 * VGET, VDROP: a model's manifest per version number) and the cluster-wide
 * delete (OBJ.PURGE), since 0.4.
 */
#include "objstore.h"
#include "objalloc.h"
#include "objclient_core.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

/* ---- named versions and the cluster-wide delete (since 0.4) -------------------------------- */

/*
 * Send a command of head arguments followed by n more (ids, parts), built
 * in a heap argv as long as it needs. Returns the reply as clientCall does,
 * or NULL with the error recorded (OOM too).
 */
static redisReply *clientCallList(ObjClient *c, CmdArgs *head, const void *const *more,
                                  const size_t *moreLens, size_t n)
{
    size_t argc = (size_t)head->argc + n;
    const char **argv = objMalloc(argc * sizeof(*argv));
    size_t *lens = objMalloc(argc * sizeof(*lens));
    redisReply *r = NULL;

    if (argv == NULL || lens == NULL) {
        clientFail(c, OBJ_ERR_OOM, "OOM cannot build a command of %zu arguments", argc);
        goto out_free;
    }
    for (int i = 0; i < head->argc; i++) {
        argv[i] = head->argv[i];
        lens[i] = head->lens[i];
    }
    for (size_t i = 0; i < n; i++) {
        if (more[i] == NULL && moreLens[i] > 0) {
            clientFail(c, OBJ_ERR_BADARG, "BADARG %s: id %zu is NULL", head->argv[0], i);
            goto out_free;
        }
        argv[(size_t)head->argc + i] = more[i] != NULL ? more[i] : "";
        lens[(size_t)head->argc + i] = moreLens[i];
    }
    r = clientCallArgv(c, (int)argc, argv, lens);
out_free:
    objFree(argv);
    objFree(lens);
    return r;
}

int objClientVersionPublish(ObjClient *c, const void *name, size_t nameLen, uint64_t version,
                            const void *manifest, size_t manifestLen, const void *const *parts,
                            const size_t *partLens, size_t nParts, uint64_t retain)
{
    char verBuf[24], retainBuf[24];
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.VPUBLISH", name, nameLen, &a) < 0)
        return -1;
    if (manifest == NULL && manifestLen > 0)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG OBJ.VPUBLISH: manifest is NULL");
    if (nParts > 0 && (parts == NULL || partLens == NULL))
        return clientFail(c, OBJ_ERR_BADARG, "BADARG OBJ.VPUBLISH: parts is NULL");
    snprintf(verBuf, sizeof(verBuf), "%" PRIu64, version);
    argsAddStr(&a, verBuf);
    argsAdd(&a, manifest, manifestLen);
    if (retain > 0) {
        snprintf(retainBuf, sizeof(retainBuf), "%" PRIu64, retain);
        argsAddStr(&a, "RETAIN");
        argsAddStr(&a, retainBuf);
    }
    if (nParts > 0)
        argsAddStr(&a, "PARTS");
    return clientStatusVerdict(c, "OBJ.VPUBLISH", clientCallList(c, &a, parts, partLens, nParts));
}

/* Take a [version, manifest-id] reply into the caller's out-parameters
 * (the id malloc'ed: objClientFreeData). Frees r. Returns 0, or -1. */
static int clientVersionPair(ObjClient *c, redisReply *r, uint64_t *version, void **manifest,
                             size_t *manifestLen)
{
    if (r == NULL)
        return -1;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_STRING) {
        clientFailShape(c, "OBJ.VLATEST", r);
        freeReplyObject(r);
        return -1;
    }
    void *copy = objMalloc(r->element[1]->len > 0 ? r->element[1]->len : 1);
    if (copy == NULL) {
        freeReplyObject(r);
        return clientFail(c, OBJ_ERR_OOM, "OOM cannot copy a manifest id");
    }
    memcpy(copy, r->element[1]->str, r->element[1]->len);
    *version = (uint64_t)r->element[0]->integer;
    *manifest = copy;
    *manifestLen = r->element[1]->len;
    freeReplyObject(r);
    return clientOk(c);
}

int objClientVersionLatest(ObjClient *c, const void *name, size_t nameLen, long long newer,
                           long long timeoutMs, uint64_t *version, void **manifest,
                           size_t *manifestLen)
{
    char newerBuf[24], timeoutBuf[32];
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.VLATEST", name, nameLen, &a) < 0)
        return -1;
    if (version == NULL || manifest == NULL || manifestLen == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientVersionLatest: an output is NULL");
    if (newer >= 0) {
        snprintf(newerBuf, sizeof(newerBuf), "%lld", newer);
        argsAddStr(&a, "NEWER");
        argsAddStr(&a, newerBuf);
        if (clientAddTimeout(c, &a, timeoutMs, timeoutBuf, sizeof(timeoutBuf)) < 0)
            return -1;
    }
    return clientVersionPair(c, clientCall(c, &a), version, manifest, manifestLen);
}

int objClientVersionGet(ObjClient *c, const void *name, size_t nameLen, uint64_t version,
                        void **manifest, size_t *manifestLen)
{
    char verBuf[24];
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.VGET", name, nameLen, &a) < 0)
        return -1;
    if (manifest == NULL || manifestLen == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientVersionGet: an output is NULL");
    snprintf(verBuf, sizeof(verBuf), "%" PRIu64, version);
    argsAddStr(&a, verBuf);
    redisReply *r = clientExpect(c, "OBJ.VGET", clientCall(c, &a), REDIS_REPLY_STRING);
    if (r == NULL)
        return -1;
    void *copy = objMalloc(r->len > 0 ? r->len : 1);
    if (copy == NULL) {
        freeReplyObject(r);
        return clientFail(c, OBJ_ERR_OOM, "OOM cannot copy a manifest id");
    }
    memcpy(copy, r->str, r->len);
    *manifest = copy;
    *manifestLen = r->len;
    freeReplyObject(r);
    return clientOk(c);
}

int objClientVersionDrop(ObjClient *c, const void *name, size_t nameLen, uint64_t version)
{
    char verBuf[24];
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.VDROP", name, nameLen, &a) < 0)
        return -1;
    snprintf(verBuf, sizeof(verBuf), "%" PRIu64, version);
    argsAddStr(&a, verBuf);
    return clientCallStatus(c, &a);
}

int objClientPurge(ObjClient *c, const void *const *ids, const size_t *idLens, size_t n,
                   size_t *known)
{
    CmdArgs a;

    if (c == NULL)
        return -1;
    if (n == 0 || ids == NULL || idLens == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientPurge: no ids");
    a.argc = 0;
    argsAddStr(&a, "OBJ.PURGE");
    redisReply *r =
        clientExpect(c, "OBJ.PURGE", clientCallList(c, &a, ids, idLens, n), REDIS_REPLY_INTEGER);
    if (r == NULL)
        return -1;
    if (known != NULL)
        *known = (size_t)r->integer;
    freeReplyObject(r);
    return clientOk(c);
}
