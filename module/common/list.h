/*
 * list.h - the one intrusive doubly linked list of the tree: a circular list
 * with a sentinel head, links embedded in the structs they chain. Every
 * queue, wait list and LRU of the module and the client library uses it, so
 * that unlinking and splicing are written (and fixed) once. Header-only, no
 * allocation, no locking: the owner of a list says which lock guards it.
 *
 * The names carry an objList prefix because the RDMA door is compiled
 * against Redis's server.h, whose adlist.h already defines list/listNode.
 */
#ifndef OBJSTORE_LIST_H
#define OBJSTORE_LIST_H

#include <stddef.h>

/* A link, embedded in the struct it chains; a list's head is a link too. */
typedef struct ObjListLink {
    struct ObjListLink *prev, *next;
} ObjListLink;
typedef ObjListLink ObjList;

/* The struct holding link `ptr` (a pointer to its `member`). */
#define objListEntry(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* Iterate over the links of `head`; `it` must not be unlinked in the body. */
#define objListForEach(head, it) for ((it) = (head)->next; (it) != (head); (it) = (it)->next)
/* Iterate, allowing the body to unlink (or free) `it`; `tmp` is scratch. */
#define objListForEachSafe(head, it, tmp)                                                          \
    for ((it) = (head)->next, (tmp) = (it)->next; (it) != (head); (it) = (tmp), (tmp) = (it)->next)

/* Make an empty list, or a link that belongs to no list. Can't fail. */
static inline void objListInit(ObjListLink *l)
{
    l->prev = l->next = l;
}

/* 1 if the list has no element (or the link is in no list). */
static inline int objListEmpty(const ObjListLink *l)
{
    return l->next == l;
}

/* Insert n between a and b (a->next == b). */
static inline void objListInsertBetween(ObjListLink *n, ObjListLink *a, ObjListLink *b)
{
    n->prev = a;
    n->next = b;
    a->next = n;
    b->prev = n;
}

/* Add n at the front of head. n must not be in a list. */
static inline void objListPushFront(ObjList *head, ObjListLink *n)
{
    objListInsertBetween(n, head, head->next);
}

/* Add n at the back of head. n must not be in a list. */
static inline void objListPushBack(ObjList *head, ObjListLink *n)
{
    objListInsertBetween(n, head->prev, head);
}

/* Take n out of its list and leave it self-linked (objListEmpty(n) is then
 * true), so unlinking twice is harmless. Can't fail. */
static inline void objListUnlink(ObjListLink *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    objListInit(n);
}

/* The first link of head, or NULL if it is empty. */
static inline ObjListLink *objListFirst(const ObjList *head)
{
    return head->next == head ? NULL : head->next;
}

/* The last link of head, or NULL if it is empty. */
static inline ObjListLink *objListLast(const ObjList *head)
{
    return head->prev == head ? NULL : head->prev;
}

/* Take the first link of head out and return it, or NULL if it is empty. */
static inline ObjListLink *objListPopFront(ObjList *head)
{
    ObjListLink *n = objListFirst(head);
    if (n)
        objListUnlink(n);
    return n;
}

/* Move every element of src to the back of dst, in order; src ends empty. */
static inline void objListSpliceBack(ObjList *dst, ObjList *src)
{
    if (objListEmpty(src))
        return;
    src->next->prev = dst->prev;
    dst->prev->next = src->next;
    src->prev->next = dst;
    dst->prev = src->prev;
    objListInit(src);
}

/* Move every element of src to the front of dst, in order; src ends empty. */
static inline void objListSpliceFront(ObjList *dst, ObjList *src)
{
    if (objListEmpty(src))
        return;
    src->prev->next = dst->next;
    dst->next->prev = src->prev;
    src->next->prev = dst;
    dst->next = src->next;
    objListInit(src);
}

#endif /* OBJSTORE_LIST_H */
