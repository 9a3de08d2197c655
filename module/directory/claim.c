/*
 * claim.c - repair claims and write barriers. A claim is a short lease on
 * one object (objstore:{<id>}:claim, PX) that lets one node of several
 * survivors repair it while the others wait; a barrier answers once the
 * writes queued before it have been answered, so a caller knows its
 * publish is visible before it asks other nodes to act on it. See
 * docs/cluster.md, "Copies, repair and drain".
 */
#include "dirint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* KEYS[1] = the claim key, ARGV = node, ttl (ms). Takes the claim when
 * free (SET NX PX) or renews it when this node holds it (PEXPIRE): returns
 * 1; else the holder's name. */
static const char dirClaimScript[] =
    "local c = redis.call('GET', KEYS[1]) "
    "if not c then redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) return 1 end "
    "if c == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end "
    "return c";

/* The verdict of a claim's reply r (NULL: its shard did not answer, c says
 * why) into res. */
static void dirClaimVerdict(DirResult *res, const DirCmd *c)
{
    const redisReply *r = c->reply;
    if (r == NULL)
        dirResultSet(res, DIR_UNAVAILABLE, "%s", dirCmdWhy(c));
    else if (r->type == REDIS_REPLY_INTEGER && r->integer == 1)
        dirResultSet(res, DIR_FOUND, "");
    else if (r->type == REDIS_REPLY_STRING)
        dirResultSet(res, DIR_REFUSED, "BUSY object is claimed by node '%.*s'",
                     (int)(r->len < 64 ? r->len : 64), r->str);
    else if (r->type == REDIS_REPLY_ERROR)
        dirResultSet(res, DIR_UNAVAILABLE, "directory error: %.100s", r->str);
    else
        dirResultSet(res, DIR_UNAVAILABLE, "directory error: unexpected claim reply");
}

/* Answers one claim (op->size: its ttl in ms) and frees it: the callback
 * runs exactly once. */
void dirRunClaim(DirOp *op)
{
    DirResult *res = dirResultNew(op->id, op->idLen);
    if (!dir.haveMap) {
        dirResultSet(res, DIR_UNAVAILABLE, "%s", dir.lastIoError);
    } else {
        size_t keyLen;
        char *key = dirObjKey(op->id, op->idLen, ":claim", &keyLen);
        char ttl[24];
        snprintf(ttl, sizeof(ttl), "%" PRIu64, op->size);
        const char *argv[] = {"EVAL", dirClaimScript, "1", key, dir.cfg.nodeName, ttl};
        size_t lens[] = {4, sizeof(dirClaimScript) - 1, 1, keyLen, dir.nameLen, strlen(ttl)};
        DirBatch b = {0};
        dirBatchAdd(&b, key, keyLen, 6, argv, lens);
        dirBatchRun(&b);
        dirClaimVerdict(res, &b.cmds[0]);
        dirBatchFree(&b);
        free(key);
    }
    op->cb(res, op->arg);
    dirOpFree(op);
}

/* Answers one barrier and frees it. The thread runs the queue in order and
 * puts back every write a shard did not answer, together with all that
 * follows it (the barrier too), so reaching a barrier in order means every
 * write queued before it was answered; one taken ahead of writes while the
 * directory is down (writesAhead) fails. */
void dirRunBarrier(DirOp *op)
{
    DirResult *res = dirResultNew(NULL, 0);
    if (op->writesAhead)
        dirResultSet(res, DIR_UNAVAILABLE, "%s", dir.lastIoError);
    else
        dirResultSet(res, DIR_FOUND, "");
    op->cb(res, op->arg);
    dirOpFree(op);
}
