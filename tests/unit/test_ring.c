/*
 * test_ring.c - the RDMA control ring's credit and slot arithmetic (ring.h):
 * slots are used in order, credits never let a writer overrun the reader,
 * the last credit is kept for CREDIT messages, and two sides exchanging
 * messages under any interleaving never deadlock or overrun.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "rdma/ring.h"

static void testSlotsAreTakenInOrderAndWrap(void **state)
{
    RingTx t;
    ringTxInit(&t, 4);
    assert_int_equal(ringTxTake(&t, 0), 0);
    assert_int_equal(ringTxTake(&t, 0), 1);
    assert_int_equal(ringTxGrant(&t, 2), 0);
    assert_int_equal(ringTxTake(&t, 0), 2);
    assert_int_equal(ringTxTake(&t, 0), 3);
    assert_int_equal(ringTxGrant(&t, 2), 0);
    assert_int_equal(ringTxTake(&t, 0), 0);
}

static void testOrdinaryMessageLeavesTheLastCredit(void **state)
{
    RingTx t;
    ringTxInit(&t, 4);
    for (int i = 0; i < 3; i++)
        assert_true(ringTxTake(&t, 0) >= 0);
    assert_int_equal(t.credits, 1);
    assert_int_equal(ringTxTake(&t, 0), -1);
    assert_int_equal(ringTxTake(&t, 1), 3); /* a CREDIT message may use it */
    assert_int_equal(ringTxTake(&t, 1), -1);
}

static void testGrantBeyondTheRingIsRefused(void **state)
{
    RingTx t;
    ringTxInit(&t, 8);
    assert_int_equal(ringTxGrant(&t, 1), -1);
    assert_true(ringTxTake(&t, 0) >= 0);
    assert_int_equal(ringTxGrant(&t, 2), -1);
    assert_int_equal(ringTxGrant(&t, 1), 0);
    assert_int_equal(t.credits, 8);
}

static void testReceiverRejectsOutOfOrderSlots(void **state)
{
    RingRx r;
    ringRxInit(&r, 4);
    assert_int_equal(ringRxConsume(&r, 1), -1);
    assert_int_equal(ringRxConsume(&r, 0), 0);
    assert_int_equal(ringRxConsume(&r, 0), -1);
    assert_int_equal(ringRxConsume(&r, 1), 0);
}

static void testReceiverRejectsMoreThanTheRingHolds(void **state)
{
    RingRx r;
    ringRxInit(&r, 4);
    for (uint32_t i = 0; i < 4; i++)
        assert_int_equal(ringRxConsume(&r, i), 0);
    assert_int_equal(ringRxConsume(&r, 0), -1); /* the writer had no credit */
    assert_int_equal(ringRxTakeCredits(&r, 0xFFFF), 4);
    assert_int_equal(ringRxConsume(&r, 0), 0);
}

static void testCreditsArePiggybackedUpToTheFieldLimit(void **state)
{
    RingRx r;
    ringRxInit(&r, 16);
    for (uint32_t i = 0; i < 10; i++)
        assert_int_equal(ringRxConsume(&r, i), 0);
    assert_int_equal(ringRxTakeCredits(&r, 3), 3);
    assert_int_equal(ringRxTakeCredits(&r, 100), 7);
    assert_int_equal(ringRxTakeCredits(&r, 100), 0);
}

static void testExplicitCreditOnlyAtTheThreshold(void **state)
{
    RingRx r;
    ringRxInit(&r, 16);
    for (uint32_t i = 0; i < 7; i++)
        assert_int_equal(ringRxConsume(&r, i), 0);
    assert_false(ringRxWantsCreditMsg(&r));
    assert_int_equal(ringRxConsume(&r, 7), 0);
    assert_true(ringRxWantsCreditMsg(&r));
}

static void testImmediateRoundTrips(void **state)
{
    uint32_t slots[] = {0, 1, 15, RING_MAX_SLOTS - 1};
    uint32_t lens[] = {0, 16, 65536, RING_MAX_LEN};
    for (size_t i = 0; i < 4; i++) {
        for (size_t j = 0; j < 4; j++) {
            uint32_t s, l;
            ringImmDecode(ringImmEncode(slots[i], lens[j]), &s, &l);
            assert_int_equal(s, slots[i]);
            assert_int_equal(l, lens[j]);
        }
    }
}

/* One direction of a simulated connection: the writer's view and the
 * reader's view of the same ring, plus messages in flight. */
typedef struct Side {
    RingTx tx;    /* toward the peer */
    RingRx rx;    /* from the peer */
    int wantSend; /* ordinary messages still to send */
} Side;

typedef struct Msg {
    uint32_t slot;
    uint32_t credits;
    int isCredit;
} Msg;

#define SIM_SLOTS 8
#define SIM_QUEUE 64

/* Deliver or send at random; every message carries all pending credits, and
 * a CREDIT message goes out at the threshold. Asserts no overrun, and that
 * the whole workload completes (no deadlock) within a bounded step count. */
static void testTwoSidesNeverDeadlockOrOverrun(void **state)
{
    Side s[2];
    Msg q[2][SIM_QUEUE]; /* q[i]: messages in flight toward side i */
    int qh[2] = {0, 0}, qt[2] = {0, 0};
    srand(12345);
    for (int i = 0; i < 2; i++) {
        ringTxInit(&s[i].tx, SIM_SLOTS);
        ringRxInit(&s[i].rx, SIM_SLOTS);
        s[i].wantSend = 5000;
    }
    long steps = 0;
    while ((s[0].wantSend || s[1].wantSend || qh[0] != qt[0] || qh[1] != qt[1]) &&
           steps < 1000000) {
        steps++;
        int i = rand() & 1, peer = !i;
        if ((rand() & 1) && qh[i] != qt[i]) { /* side i reads one message */
            Msg m = q[i][qh[i]++ % SIM_QUEUE];
            assert_int_equal(ringRxConsume(&s[i].rx, m.slot), 0);
            assert_int_equal(ringTxGrant(&s[i].tx, m.credits), 0);
            continue;
        }
        /* side i sends: its own traffic if it has any, else a CREDIT once
         * enough credits are owed; every message piggybacks all of them */
        int creditMsg = !s[i].wantSend;
        if (creditMsg && !ringRxWantsCreditMsg(&s[i].rx))
            continue;
        int slot = ringTxTake(&s[i].tx, creditMsg);
        if (slot < 0)
            continue;
        assert_true(qt[peer] - qh[peer] < SIM_QUEUE);
        q[peer][qt[peer]++ % SIM_QUEUE] =
            (Msg){(uint32_t)slot, ringRxTakeCredits(&s[i].rx, 0xFFFF), creditMsg};
        if (!creditMsg)
            s[i].wantSend--;
    }
    assert_int_equal(s[0].wantSend, 0);
    assert_int_equal(s[1].wantSend, 0);
    assert_true(steps < 1000000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(testSlotsAreTakenInOrderAndWrap),
        cmocka_unit_test(testOrdinaryMessageLeavesTheLastCredit),
        cmocka_unit_test(testGrantBeyondTheRingIsRefused),
        cmocka_unit_test(testReceiverRejectsOutOfOrderSlots),
        cmocka_unit_test(testReceiverRejectsMoreThanTheRingHolds),
        cmocka_unit_test(testCreditsArePiggybackedUpToTheFieldLimit),
        cmocka_unit_test(testExplicitCreditOnlyAtTheThreshold),
        cmocka_unit_test(testImmediateRoundTrips),
        cmocka_unit_test(testTwoSidesNeverDeadlockOrOverrun),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
