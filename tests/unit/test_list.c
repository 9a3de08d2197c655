/*
 * test_list.c - the intrusive list (common/list.h): order of pushes, unlink
 * from any position, pop, and both splices, checked by walking the list in
 * both directions after every change.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/list.h"

typedef struct Item {
    int v;
    ObjListLink link;
} Item;

/* Assert that head holds exactly want[0..n) in order, forwards and backwards. */
static void expectList(ObjList *head, const int *want, int n)
{
    ObjListLink *it;
    int i = 0;
    objListForEach(head, it) {
        assert_true(i < n);
        assert_int_equal(objListEntry(it, Item, link)->v, want[i]);
        i++;
    }
    assert_int_equal(i, n);
    for (it = head->prev; it != head; it = it->prev)
        assert_int_equal(objListEntry(it, Item, link)->v, want[--i]);
    assert_int_equal(i, 0);
    assert_int_equal(objListEmpty(head), n == 0);
}

static void testPushesKeepOrderAndUnlinkWorksAnywhere(void **state)
{
    (void)state;
    Item it[4] = {{.v = 0}, {.v = 1}, {.v = 2}, {.v = 3}};
    ObjList head;
    objListInit(&head);
    expectList(&head, NULL, 0);
    assert_null(objListFirst(&head));
    assert_null(objListLast(&head));
    objListPushBack(&head, &it[1].link);
    objListPushBack(&head, &it[2].link);
    objListPushFront(&head, &it[0].link);
    objListPushBack(&head, &it[3].link);
    expectList(&head, (int[]){0, 1, 2, 3}, 4);
    objListUnlink(&it[2].link);
    assert_true(objListEmpty(&it[2].link));
    objListUnlink(&it[2].link); /* twice is harmless */
    expectList(&head, (int[]){0, 1, 3}, 3);
    objListUnlink(&it[0].link);
    objListUnlink(&it[3].link);
    expectList(&head, (int[]){1}, 1);
    assert_ptr_equal(objListPopFront(&head), &it[1].link);
    assert_null(objListPopFront(&head));
    expectList(&head, NULL, 0);
}

static void testForEachSafeAllowsUnlinkingTheCurrentElement(void **state)
{
    (void)state;
    Item it[5];
    ObjList head;
    objListInit(&head);
    for (int i = 0; i < 5; i++) {
        it[i].v = i;
        objListPushBack(&head, &it[i].link);
    }
    ObjListLink *cur, *tmp;
    objListForEachSafe(&head, cur, tmp) {
        if (objListEntry(cur, Item, link)->v % 2 == 0)
            objListUnlink(cur);
    }
    expectList(&head, (int[]){1, 3}, 2);
}

static void testSplicesMoveEverythingInOrder(void **state)
{
    (void)state;
    Item it[6];
    ObjList a, b;
    objListInit(&a);
    objListInit(&b);
    for (int i = 0; i < 6; i++) {
        it[i].v = i;
        objListPushBack(i < 3 ? &a : &b, &it[i].link);
    }
    objListSpliceBack(&a, &b);
    expectList(&a, (int[]){0, 1, 2, 3, 4, 5}, 6);
    expectList(&b, NULL, 0);
    objListSpliceBack(&a, &b); /* an empty source changes nothing */
    expectList(&a, (int[]){0, 1, 2, 3, 4, 5}, 6);
    objListUnlink(&it[4].link);
    objListUnlink(&it[5].link);
    objListPushBack(&b, &it[4].link);
    objListPushBack(&b, &it[5].link);
    objListSpliceFront(&a, &b);
    expectList(&a, (int[]){4, 5, 0, 1, 2, 3}, 6);
    expectList(&b, NULL, 0);
    objListSpliceFront(&b, &a); /* into an empty list */
    expectList(&b, (int[]){4, 5, 0, 1, 2, 3}, 6);
    expectList(&a, NULL, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(testPushesKeepOrderAndUnlinkWorksAnywhere),
        cmocka_unit_test(testForEachSafeAllowsUnlinkingTheCurrentElement),
        cmocka_unit_test(testSplicesMoveEverythingInOrder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
