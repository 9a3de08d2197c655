/*
 * drain.c - the client library's calls on a node's drain (OBJ.DRAIN): start
 * it (and wait for it), ask how far it got, cancel it. What a drain does:
 * docs/cluster.md, "Copies, repair and drain".
 */
#include "objstore.h"
#include "objclient_core.h"

#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

/* Whether the string or status reply v reads exactly s. */
static int replyIs(const redisReply *v, const char *s)
{
    return v != NULL && (v->type == REDIS_REPLY_STRING || v->type == REDIS_REPLY_STATUS) &&
           v->len == strlen(s) && memcmp(v->str, s, v->len) == 0;
}

/*
 * Read OBJ.DRAIN's field/value reply r into *st (NULL: only checked).
 * last_error may be absent, nil or empty. Frees r. Returns 0, or -1 with
 * the error recorded (also for r NULL).
 */
static int drainVerdict(ObjClient *c, redisReply *r, ObjDrainStatus *st)
{
    ObjDrainStatus tmp = {.state = OBJ_DRAIN_IDLE};
    const redisReply *state, *last;

    r = clientExpect(c, "OBJ.DRAIN", r, REDIS_REPLY_ARRAY);
    if (r == NULL)
        return -1;
    state = replyField(r, "state");
    if (replyIs(state, "draining"))
        tmp.state = OBJ_DRAIN_DRAINING;
    else if (replyIs(state, "drained"))
        tmp.state = OBJ_DRAIN_DRAINED;
    else if (!replyIs(state, "idle")) {
        clientFailShape(c, "OBJ.DRAIN", r);
        goto out_free_reply;
    }
    if (clientField(c, "OBJ.DRAIN", r, "objects_left", &tmp.objectsLeft) < 0 ||
        clientField(c, "OBJ.DRAIN", r, "objects_moved", &tmp.objectsMoved) < 0 ||
        clientField(c, "OBJ.DRAIN", r, "bytes_moved", &tmp.bytesMoved) < 0 ||
        clientField(c, "OBJ.DRAIN", r, "failures", &tmp.failures) < 0)
        goto out_free_reply;
    last = replyField(r, "last_error");
    if (last != NULL && (last->type == REDIS_REPLY_STRING || last->type == REDIS_REPLY_STATUS))
        snprintf(tmp.lastError, sizeof(tmp.lastError), "%.*s", (int)last->len, last->str);
    freeReplyObject(r);
    if (st != NULL)
        *st = tmp;
    return clientOk(c);

out_free_reply:
    freeReplyObject(r);
    return -1;
}

/* Send OBJ.DRAIN [word] [arg] and read its answer into *st (may be NULL).
 * Returns 0, or -1 with the error recorded (also for a NULL client). */
static int drainCall(ObjClient *c, const char *word, const char *arg, ObjDrainStatus *st)
{
    CmdArgs a = {.argc = 0};

    if (c == NULL)
        return -1;
    argsAddStr(&a, "OBJ.DRAIN");
    if (word != NULL)
        argsAddStr(&a, word);
    if (arg != NULL)
        argsAddStr(&a, arg);
    return drainVerdict(c, clientCall(c, &a), st);
}

/* OBJ.DRAIN [WAIT ms]. Returns 0, or -1 with the error recorded. */
int objClientDrain(ObjClient *c, long long waitMs, ObjDrainStatus *st)
{
    char buf[32];

    if (c == NULL)
        return -1;
    if (waitMs < 0)
        return clientFail(c, OBJ_ERR_BADARG,
                          "BADARG drain wait %lld ms (use > 0, or 0 = answer at once)", waitMs);
    if (waitMs == 0)
        return drainCall(c, NULL, NULL, st);
    snprintf(buf, sizeof(buf), "%lld", waitMs);
    return drainCall(c, "WAIT", buf, st);
}

/* OBJ.DRAIN STATUS. Returns 0, or -1 with the error recorded. */
int objClientDrainStatus(ObjClient *c, ObjDrainStatus *st)
{
    if (c != NULL && st == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientDrainStatus: st is NULL");
    return drainCall(c, "STATUS", NULL, st);
}

/* OBJ.DRAIN CANCEL. Returns 0, or -1 with the error recorded. */
int objClientDrainCancel(ObjClient *c, ObjDrainStatus *st)
{
    return drainCall(c, "CANCEL", NULL, st);
}
