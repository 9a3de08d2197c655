/*
 * test_streamproto.c - the Valkey Over RDMA rules (module/rdma/streamproto.h):
 * control messages are 32 big-endian bytes at the spec's offsets, decoding
 * refuses what a hostile peer could send, and the RX/TX offset arithmetic
 * is the protocol's flow control (no write past a buffer, re-registration
 * only of a consumed buffer).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rdma/streamproto.h"

static void testMemoryFormIsBigEndianAtTheSpecOffsets(void **state)
{
    SpCmd c = {.opcode = SP_OP_REGISTER_XFER_MEM,
               .addr = 0x0102030405060708ull,
               .length = 0x00100000,
               .key = 0xa1b2c3d4};
    uint8_t b[SP_CMD_SIZE];
    spEncode(&c, b);
    static const uint8_t want[SP_CMD_SIZE] = {0, 3, 0, 0,    0, 0, 0,    0,    0,    0,   0,
                                              0, 0, 0, 0,    0, 1, 2,    3,    4,    5,   6,
                                              7, 8, 0, 0x10, 0, 0, 0xa1, 0xb2, 0xc3, 0xd4};
    assert_memory_equal(b, want, SP_CMD_SIZE);
    SpCmd d;
    char err[128];
    assert_int_equal(spDecode(b, sizeof(b), &d, err, sizeof(err)), 0);
    assert_int_equal(d.opcode, SP_OP_REGISTER_XFER_MEM);
    assert_true(d.addr == c.addr);
    assert_int_equal(d.length, c.length);
    assert_int_equal(d.key, c.key);
}

static void testFeatureFormCarriesSelectAndFeatures(void **state)
{
    SpCmd c = {.opcode = SP_OP_GET_SERVER_FEATURE, .select = 0x0102, .features = 0x55};
    uint8_t b[SP_CMD_SIZE];
    spEncode(&c, b);
    assert_int_equal(b[0], 0);
    assert_int_equal(b[1], 0);
    assert_int_equal(b[2], 1);
    assert_int_equal(b[3], 2);
    assert_int_equal(b[31], 0x55);
    SpCmd d;
    char err[128];
    assert_int_equal(spDecode(b, sizeof(b), &d, err, sizeof(err)), 0);
    assert_int_equal(d.select, 0x0102);
    assert_true(d.features == 0x55);
}

static void testDecodeRefusesWhatAPeerMustNotSend(void **state)
{
    uint8_t b[SP_CMD_SIZE] = {0};
    SpCmd d;
    char err[128];
    assert_int_equal(spDecode(b, 31, &d, err, sizeof(err)), -1); /* short */
    assert_non_null(strstr(err, "31 bytes"));
    assert_int_equal(spDecode(b, 33, &d, err, sizeof(err)), -1); /* long */
    b[1] = 4;
    assert_int_equal(spDecode(b, sizeof(b), &d, err, sizeof(err)), -1); /* unknown opcode */
    assert_non_null(strstr(err, "unknown"));
    SpCmd set = {.opcode = SP_OP_SET_CLIENT_FEATURE, .features = 1};
    spEncode(&set, b);
    assert_int_equal(spDecode(b, sizeof(b), &d, err, sizeof(err)), -1); /* a feature we lack */
    SpCmd mem = {.opcode = SP_OP_REGISTER_XFER_MEM, .addr = 4096, .length = 0};
    spEncode(&mem, b);
    assert_int_equal(spDecode(b, sizeof(b), &d, err, sizeof(err)), -1); /* empty */
    mem.length = 16384; /* a reference server started with a small rx-size */
    spEncode(&mem, b);
    assert_int_equal(spDecode(b, sizeof(b), &d, err, sizeof(err)), 0);
    mem.length = 32u << 20; /* ... or a large one */
    spEncode(&mem, b);
    assert_int_equal(spDecode(b, sizeof(b), &d, err, sizeof(err)), 0);
    mem.length = SP_RX_MIN;
    mem.addr = UINT64_MAX - 100;
    spEncode(&mem, b);
    assert_int_equal(spDecode(b, sizeof(b), &d, err, sizeof(err)), -1); /* wraps */
    SpCmd keep = {.opcode = SP_OP_KEEPALIVE};
    spEncode(&keep, b);
    b[20] = 0xff; /* reserved bytes are not checked (the reference peer does not either) */
    assert_int_equal(spDecode(b, sizeof(b), &d, err, sizeof(err)), 0);
}

static void testRxRefusesWritesPastTheEnd(void **state)
{
    SpRx r = {.length = 100};
    assert_int_equal(spRxArrived(&r, 60), 0);
    assert_int_equal(spRxArrived(&r, 41), -1);
    assert_int_equal(spRxArrived(&r, 40), 0);
    assert_int_equal(spRxReady(&r), 100);
    assert_int_equal(spRxArrived(&r, 1), -1);
    assert_int_equal(spRxArrived(&r, 0), 0);
}

static void testRxAsksForReRegistrationOnlyWhenAllIsConsumed(void **state)
{
    SpRx r = {.length = 100};
    assert_int_equal(spRxArrived(&r, 100), 0);
    assert_int_equal(spRxConsume(&r, 99), 0);
    assert_int_equal(spRxReady(&r), 1);
    assert_int_equal(spRxConsume(&r, 1), 1);
    assert_int_equal(r.written, 0);
    assert_int_equal(r.read, 0);
    assert_int_equal(spRxArrived(&r, 100), 0); /* the whole buffer again */
}

static void testTxWritesUpToThePeersBufferThenWaits(void **state)
{
    SpTx t = {0};
    assert_int_equal(spTxRoom(&t), 0); /* nothing until the peer registers */
    SpCmd c = {.opcode = SP_OP_REGISTER_XFER_MEM, .addr = 1000, .length = 100, .key = 7};
    assert_int_equal(spTxRegister(&t, &c), 0);
    assert_true(spTxTake(&t, 30) == 1000);
    assert_true(spTxTake(&t, 70) == 1030);
    assert_int_equal(spTxRoom(&t), 0);
    c.addr = 5000;
    assert_int_equal(spTxRegister(&t, &c), 0); /* consumed: a new buffer is fine */
    assert_true(spTxTake(&t, 10) == 5000);
}

static void testTxRefusesAReplacementWhileTheBufferHasRoom(void **state)
{
    SpTx t = {0};
    SpCmd c = {.opcode = SP_OP_REGISTER_XFER_MEM, .addr = 1000, .length = 100, .key = 7};
    assert_int_equal(spTxRegister(&t, &c), 0);
    spTxTake(&t, 50);
    assert_int_equal(spTxRegister(&t, &c), -1);
    assert_int_equal(t.offset, 50); /* unchanged */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(testMemoryFormIsBigEndianAtTheSpecOffsets),
        cmocka_unit_test(testFeatureFormCarriesSelectAndFeatures),
        cmocka_unit_test(testDecodeRefusesWhatAPeerMustNotSend),
        cmocka_unit_test(testRxRefusesWritesPastTheEnd),
        cmocka_unit_test(testRxAsksForReRegistrationOnlyWhenAllIsConsumed),
        cmocka_unit_test(testTxWritesUpToThePeersBufferThenWaits),
        cmocka_unit_test(testTxRefusesAReplacementWhileTheBufferHasRoom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
