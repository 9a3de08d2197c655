/*
 * waiters.h - clients blocked until an object is sealed (waiters.c).
 */
#ifndef OBJSTORE_WAITERS_H
#define OBJSTORE_WAITERS_H

#include <stddef.h>
#include <stdint.h>
#include "redismodule.h"
#include "reply.h"

/* Block the client until id is sealed (then reply as kind), or until
 * timeoutMs (0 = forever) passes. waitMissing: keep waiting while the id
 * does not exist (else a vanished id answers NOTFOUND). */
int waitersBlock(RedisModuleCtx *ctx, const char *id, size_t idLen, long long timeoutMs,
                 int waitMissing, ObjReplyKind kind);
/* Re-examine waiters of id (or of every id when id is NULL) after a seal,
 * an abort or a put, and wake those whose wait is over. */
void waitersRecheck(const char *id, size_t idLen);
uint64_t waitersCount(void);
/* Is any client waiting? Safe from any thread: a thread that changed an
 * object under the table lock and then sees 0 need not call
 * waitersRecheck (a waiter counted later looks at the object itself). */
int waitersAny(void);

#endif /* OBJSTORE_WAITERS_H */
