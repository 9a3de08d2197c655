/*
 * test_rdmaproto.c - unit tests for the RDMA transport's pure rules
 * (module/transfer/rdmaproto.c, judged by handshake.c): connections still in their handshake are
 * capped overall and per source address, and the caps are exact (the last
 * one allowed gets in, the next is refused with the reason naming which
 * cap it met); past a cap the oldest unproved connection gives way, from
 * the newcomer's address when that cap is met, else the oldest of all.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "transfer/rdmaproto.h"

static void testUnderBothCaps(void **state)
{
    assert_null(handshakeVerdict(&rdmaPreauthCaps, 0, 0));
    assert_null(
        handshakeVerdict(&rdmaPreauthCaps, RDMA_PREAUTH_MAX - 1, RDMA_PREAUTH_MAX_PER_SOURCE - 1));
}

static void testPerSourceCap(void **state)
{
    const char *why = handshakeVerdict(&rdmaPreauthCaps, RDMA_PREAUTH_MAX_PER_SOURCE,
                                       RDMA_PREAUTH_MAX_PER_SOURCE);
    assert_non_null(why);
    assert_non_null(strstr(why, "from this address"));
    /* Another source still gets in while the total has room. */
    assert_null(handshakeVerdict(&rdmaPreauthCaps, RDMA_PREAUTH_MAX_PER_SOURCE, 0));
}

static void testOverallCap(void **state)
{
    const char *why = handshakeVerdict(&rdmaPreauthCaps, RDMA_PREAUTH_MAX, 0);
    assert_non_null(why);
    assert_null(strstr(why, "from this address"));
    assert_non_null(
        handshakeVerdict(&rdmaPreauthCaps, RDMA_PREAUTH_MAX + 5, RDMA_PREAUTH_MAX_PER_SOURCE + 5));
}

static void testNoEvictionUnderTheCaps(void **state)
{
    assert_int_equal(handshakeEvict(&rdmaPreauthCaps, 0, 0), HANDSHAKE_EVICT_NONE);
    assert_int_equal(
        handshakeEvict(&rdmaPreauthCaps, RDMA_PREAUTH_MAX - 1, RDMA_PREAUTH_MAX_PER_SOURCE - 1),
        HANDSHAKE_EVICT_NONE);
}

static void testPerSourceCapEvictsFromTheSameAddress(void **state)
{
    assert_int_equal(
        handshakeEvict(&rdmaPreauthCaps, RDMA_PREAUTH_MAX_PER_SOURCE, RDMA_PREAUTH_MAX_PER_SOURCE),
        HANDSHAKE_EVICT_SAME);
    /* Both caps met: one from the same address frees room in both. */
    assert_int_equal(
        handshakeEvict(&rdmaPreauthCaps, RDMA_PREAUTH_MAX, RDMA_PREAUTH_MAX_PER_SOURCE),
        HANDSHAKE_EVICT_SAME);
}

static void testOverallCapEvictsTheOldestOfAll(void **state)
{
    assert_int_equal(handshakeEvict(&rdmaPreauthCaps, RDMA_PREAUTH_MAX, 0), HANDSHAKE_EVICT_ANY);
    assert_int_equal(
        handshakeEvict(&rdmaPreauthCaps, RDMA_PREAUTH_MAX, RDMA_PREAUTH_MAX_PER_SOURCE - 1),
        HANDSHAKE_EVICT_ANY);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(testUnderBothCaps),
        cmocka_unit_test(testPerSourceCap),
        cmocka_unit_test(testOverallCap),
        cmocka_unit_test(testNoEvictionUnderTheCaps),
        cmocka_unit_test(testPerSourceCapEvictsFromTheSameAddress),
        cmocka_unit_test(testOverallCapEvictsTheOldestOfAll),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
