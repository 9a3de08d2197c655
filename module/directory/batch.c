/*
 * batch.c - commands as the directory thread sends them: each is formatted
 * once, routed to the master of its key's slot, pipelined with the others
 * of its batch (one round trip for the whole batch, however many shards it
 * touches), and followed through MOVED/ASK redirections. A command whose
 * shard cannot be reached ends with no reply, and dirCmdWhy says why.
 */
#include "dirint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Adds one command for key (which routes it) to a batch; can't fail. */
void dirBatchAdd(DirBatch *b, const char *key, size_t keyLen, int argc, const char **argv,
                 const size_t *lens)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 16;
        DirCmd *grown = realloc(b->cmds, b->cap * sizeof(*grown));
        if (grown == NULL)
            dirOom();
        b->cmds = grown;
    }
    DirCmd *c = &b->cmds[b->n++];
    memset(c, 0, sizeof(*c));
    int len = redisFormatCommandArgv(&c->cmd, argc, argv, lens);
    if (len < 0)
        dirOom();
    c->len = (size_t)len;
    c->slot = slotsKeySlot(key, keyLen);
    c->master = -1;
}

/* Frees the commands and replies of a batch and empties it. */
void dirBatchFree(DirBatch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        redisFreeCommand(b->cmds[i].cmd);
        freeReplyObject(b->cmds[i].reply);
    }
    free(b->cmds);
    memset(b, 0, sizeof(*b));
}

/* Why a command has no reply, for DIR_UNAVAILABLE results. */
const char *dirCmdWhy(const DirCmd *c)
{
    if (c->master >= 0 && c->master < dir.nConns && dir.conns[c->master].err[0] != '\0')
        return dir.conns[c->master].err;
    if (c->master < 0)
        return "no directory master serves the slot (the cluster is failing over)";
    return dir.lastIoError;
}

/*
 * Follows a MOVED or ASK answer to one command, at most a few hops: MOVED
 * fixes the slot in the map and asks for a full re-read soon, ASK sends
 * ASKING first and changes nothing. c->reply ends as the final answer, or
 * NULL when the target cannot be reached.
 */
static void dirRedirect(DirCmd *c)
{
    for (int hop = 0; hop < OBJ_DIR_REDIRECTS_MAX; hop++) {
        SlotsRedirect rd;
        if (c->reply == NULL || c->reply->type != REDIS_REPLY_ERROR ||
            slotsParseRedirect(c->reply->str, c->reply->len, &rd) != 0)
            return;
        char host[SLOTS_HOST_MAX];
        snprintf(host, sizeof(host), "%s",
                 rd.to.host[0] != '\0' ? rd.to.host : dir.map.masters[c->master].host);
        int m = slotsMapAddMaster(&dir.map, host, rd.to.port);
        if (m < 0)
            dirOom();
        dirConnsSync();
        if (rd.kind == SLOTS_REDIRECT_MOVED) {
            slotsMapAssign(&dir.map, rd.slot, rd.slot, host, rd.to.port);
            dir.mapStale = 1;
            dir.nextConnectMs = dirNowMs(); /* re-read the whole map at once */
        }
        freeReplyObject(c->reply);
        c->reply = NULL;
        c->master = m;
        if (dirConnEnsure(m, 1) != 0)
            return;
        if (rd.kind == SLOTS_REDIRECT_ASK && c->onAsk != NULL) {
            c->onAsk(c, m, c->askArg);
            return;
        }
        if (rd.kind == SLOTS_REDIRECT_ASK &&
            redisAppendCommand(dir.conns[m].ctx, "ASKING") != REDIS_OK)
            dirOom();
        if (redisAppendFormattedCommand(dir.conns[m].ctx, c->cmd, c->len) != REDIS_OK)
            dirOom();
        if (rd.kind == SLOTS_REDIRECT_ASK) {
            redisReply *ok = dirReadFrom(m);
            if (ok == NULL)
                return;
            freeReplyObject(ok);
        }
        c->reply = dirReadFrom(m);
    }
}

/*
 * Runs a batch: each command goes to the master of its slot; all masters get
 * their share pipelined before any reply is read, so a batch costs one round
 * trip however many shards it touches. Afterwards every command has its
 * reply, or NULL when its shard could not be reached (dirCmdWhy says why).
 * Can't fail otherwise.
 */
void dirBatchRun(DirBatch *b)
{
    if (!dir.haveMap || b->n == 0)
        return;
    enum { UNUSED = 0, SENDING, FAILED };
    unsigned char *state = dirCalloc((size_t)dir.nConns, 1);
    for (size_t i = 0; i < b->n; i++) {
        DirCmd *c = &b->cmds[i];
        c->master = slotsMapOwner(&dir.map, c->slot);
        if (c->master < 0)
            continue;
        if (state[c->master] == UNUSED)
            state[c->master] = dirConnEnsure(c->master, 0) == 0 ? SENDING : FAILED;
        if (state[c->master] == SENDING &&
            redisAppendFormattedCommand(dir.conns[c->master].ctx, c->cmd, c->len) != REDIS_OK)
            dirOom(); /* hiredis only fails here when it cannot allocate */
    }
    for (int m = 0; m < dir.nConns; m++)
        if (state[m] == SENDING && dirFlush(m) != 0)
            state[m] = FAILED;
    for (size_t i = 0; i < b->n; i++) {
        DirCmd *c = &b->cmds[i];
        if (c->master < 0 || state[c->master] != SENDING)
            continue;
        c->reply = dirReadFrom(c->master);
        if (c->reply == NULL)
            state[c->master] = FAILED;
    }
    free(state);
    for (size_t i = 0; i < b->n; i++)
        dirRedirect(&b->cmds[i]);
}

/* Counts an error reply to a write (the write cannot succeed by being
 * repeated); the reply stays with the batch. */
void dirAck(const redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR)
        dirNoteError("directory write refused: %s", r->str);
}
