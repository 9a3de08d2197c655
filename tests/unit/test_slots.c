/*
 * test_slots.c - unit tests for the directory's slot router
 * (module/directory/slots.c): CRC16 and the hash-tag rule against the
 * vectors of the Redis Cluster specification and slots that a real
 * redis-server reported for CLUSTER KEYSLOT, the parsing of MOVED/ASK
 * redirections and of the `directory` seed list (tables of good and bad
 * input), the slot -> master map, and the object key schema (every key of
 * any id in one slot, no two ids sharing a key).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "directory/slots.h"

#define LIT(s)       s, sizeof(s) - 1
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static void test_crc16_matches_the_specification_vector(void **state)
{
    (void)state;
    assert_int_equal(slotsCrc16(LIT("123456789")), 0x31C3);
    assert_int_equal(slotsCrc16("", 0), 0);
}

typedef struct SlotCase {
    const char *key;
    size_t len;
    int slot; /* as CLUSTER KEYSLOT answers on Redis 7.0 */
} SlotCase;

static void test_key_slots_match_redis(void **state)
{
    (void)state;
    static const SlotCase cases[] = {
        {LIT("123456789"), 12739},
        {LIT("foo"), 12182},
        {LIT("bar"), 5061},
        {LIT("hello"), 866},
        {LIT(""), 0},
        {LIT("a{b"), 13340}, /* no closing brace: whole key */
        {LIT("objstore:{x}:meta"), 16287},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        int got = slotsKeySlot(cases[i].key, cases[i].len);
        if (got != cases[i].slot)
            fail_msg("slot of \"%s\": %d, Redis says %d", cases[i].key, got, cases[i].slot);
    }
}

typedef struct TagCase {
    const char *key;
    size_t keyLen;
    const char *hashed; /* what the specification says is hashed */
    size_t hashedLen;
    int slot;
} TagCase;

static void test_hash_tags_follow_the_specification(void **state)
{
    (void)state;
    static const TagCase cases[] = {
        {LIT("{user1000}.following"), LIT("user1000"), 3443},
        {LIT("{user1000}.followers"), LIT("user1000"), 3443},
        {LIT("foo{}{bar}"), LIT("foo{}{bar}"), 8363}, /* empty tag: whole key */
        {LIT("foo{{bar}}zap"), LIT("{bar"), 4015},    /* first '{' to first '}' */
        {LIT("foo{bar}{zap}"), LIT("bar"), 5061},     /* only the first tag */
        {LIT("objstore:{x}:loc"), LIT("x"), 16287},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        const TagCase *c = &cases[i];
        int want = slotsCrc16(c->hashed, c->hashedLen) & (SLOTS_COUNT - 1);
        assert_int_equal(want, c->slot);
        if (slotsKeySlot(c->key, c->keyLen) != c->slot)
            fail_msg("slot of \"%s\": %d, expected %d", c->key, slotsKeySlot(c->key, c->keyLen),
                     c->slot);
    }
}

static void test_hash_tag_may_hold_any_byte(void **state)
{
    (void)state;
    static const char key[] = "objstore:{a\0b\xff}:meta";
    static const char tag[] = "a\0b\xff";
    assert_int_equal(slotsKeySlot(key, sizeof(key) - 1),
                     slotsCrc16(tag, sizeof(tag) - 1) & (SLOTS_COUNT - 1));
}

/* An object key of id with suffix, as slotsObjKey builds it (len in *len). */
static char *objKey(const char *id, size_t idLen, const char *suffix, size_t *len)
{
    char *k = test_malloc(idLen + strlen(suffix) + SLOTS_OBJ_KEY_EXTRA + 1);
    *len = slotsObjKey(k, id, idLen, suffix);
    assert_true(*len <= idLen + strlen(suffix) + SLOTS_OBJ_KEY_EXTRA);
    assert_int_equal(k[*len], '\0');
    return k;
}

typedef struct IdCase {
    const char *id;
    size_t len;
} IdCase;

/* Ids with every brace pattern that can break a hash tag, and binary bytes. */
static const IdCase oddIds[] = {
    {LIT("x")},        {LIT("")},      {LIT("}")},       {LIT("}x")},     {LIT("{")},
    {LIT("{}")},       {LIT("}{")},    {LIT("{a}")},     {LIT("a}b")},    {LIT("}}")},
    {LIT("{{}}")},     {LIT("a{b}c")}, {LIT("\0}\xff")}, {LIT("\0")},     {LIT("}\0")},
    {LIT("h{0000}:")}, {LIT(":meta")}, {LIT("}x:meta")}, {LIT("node:A")},
};

static void test_every_key_of_any_id_lands_in_one_slot(void **state)
{
    (void)state;
    for (size_t i = 0; i < ARRAY_LEN(oddIds); i++) {
        size_t ml, ll;
        char *meta = objKey(oddIds[i].id, oddIds[i].len, ":meta", &ml);
        char *loc = objKey(oddIds[i].id, oddIds[i].len, ":loc", &ll);
        if (slotsKeySlot(meta, ml) != slotsKeySlot(loc, ll))
            fail_msg("id #%zu: meta in slot %d, loc in slot %d", i, slotsKeySlot(meta, ml),
                     slotsKeySlot(loc, ll));
        test_free(meta);
        test_free(loc);
    }
}

static void test_object_keys_of_distinct_ids_never_meet(void **state)
{
    (void)state;
    static const char *const suffixes[] = {":meta", ":loc"};
    enum { N = ARRAY_LEN(oddIds) * 2 };
    char *keys[N];
    size_t lens[N];
    for (size_t i = 0; i < N; i++) {
        keys[i] = objKey(oddIds[i / 2].id, oddIds[i / 2].len, suffixes[i % 2], &lens[i]);
        assert_true(lens[i] < 13 || memcmp(keys[i], "objstore:node", 13) != 0);
    }
    for (size_t i = 0; i < N; i++)
        for (size_t j = i + 1; j < N; j++)
            if (lens[i] == lens[j] && memcmp(keys[i], keys[j], lens[i]) == 0)
                fail_msg("ids #%zu and #%zu share the key \"%s\"", i / 2, j / 2, keys[i]);
    for (size_t i = 0; i < N; i++)
        test_free(keys[i]);
}

typedef struct ObjKeyCase {
    const char *id;
    size_t idLen;
    const char *suffix;
    const char *key; /* what slotsObjKey builds */
    size_t keyLen;
    int slot; /* as CLUSTER KEYSLOT answers on Redis 7.0 */
} ObjKeyCase;

static void test_object_keys_keep_their_layout_and_slot(void **state)
{
    (void)state;
    static const ObjKeyCase cases[] = {
        /* an id that is its own tag: the layout of every earlier build */
        {LIT("x"), ":meta", LIT("objstore:{x}:meta"), 16287},
        {LIT("{a}"), ":meta", LIT("objstore:{{a}}:meta"), 10276},
        {LIT("{a}"), ":loc", LIT("objstore:{{a}}:loc"), 10276},
        /* an empty tag: a tag of our own, CRC16 in hex */
        {LIT("}x"), ":meta", LIT("objstore:h{819a}:}x:meta"), 6197},
        {LIT("}x"), ":loc", LIT("objstore:h{819a}:}x:loc"), 6197},
        {LIT(""), ":meta", LIT("objstore:h{0000}::meta"), 6794},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        const ObjKeyCase *c = &cases[i];
        size_t len;
        char *k = objKey(c->id, c->idLen, c->suffix, &len);
        if (len != c->keyLen || memcmp(k, c->key, len) != 0)
            fail_msg("key of case %zu: \"%s\", expected \"%s\"", i, k, c->key);
        assert_int_equal(slotsKeySlot(k, len), c->slot);
        test_free(k);
    }
}

/* The directory picks each master's marker key objstore:mark:{<tag>}:<name>
 * from the decimal tags below OBJ_DIR_MARK_TAGS (module/directory/dirint.h,
 * 1 << 17), counting on them to reach every slot. */
static void test_decimal_tags_below_2_17_reach_every_slot(void **state)
{
    (void)state;
    static unsigned char hit[SLOTS_COUNT];
    int reached = 0;
    for (unsigned tag = 0; tag < (1u << 17); tag++) {
        char t[16];
        int n = snprintf(t, sizeof(t), "%u", tag);
        int slot = slotsCrc16(t, (size_t)n) & (SLOTS_COUNT - 1);
        reached += !hit[slot];
        hit[slot] = 1;
    }
    assert_int_equal(reached, SLOTS_COUNT);
}

typedef struct RedirectCase {
    const char *msg;
    SlotsRedirectKind kind;
    int slot;
    const char *host;
    int port;
} RedirectCase;

static void test_redirects_parse(void **state)
{
    (void)state;
    static const RedirectCase cases[] = {
        {"MOVED 3999 127.0.0.1:6381", SLOTS_REDIRECT_MOVED, 3999, "127.0.0.1", 6381},
        {"ASK 3999 127.0.0.1:6381", SLOTS_REDIRECT_ASK, 3999, "127.0.0.1", 6381},
        {"MOVED 0 10.0.0.2:7000", SLOTS_REDIRECT_MOVED, 0, "10.0.0.2", 7000},
        {"MOVED 16383 redis-3.example:7002", SLOTS_REDIRECT_MOVED, 16383, "redis-3.example", 7002},
        {"ASK 1 ::1:7001", SLOTS_REDIRECT_ASK, 1, "::1", 7001},
        {"MOVED 12 :7005", SLOTS_REDIRECT_MOVED, 12, "", 7005}, /* unknown endpoint */
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        SlotsRedirect r;
        memset(&r, 0, sizeof(r));
        if (slotsParseRedirect(cases[i].msg, strlen(cases[i].msg), &r) != 0)
            fail_msg("\"%s\" was refused", cases[i].msg);
        assert_int_equal(r.kind, cases[i].kind);
        assert_int_equal(r.slot, cases[i].slot);
        assert_string_equal(r.to.host, cases[i].host);
        assert_int_equal(r.to.port, cases[i].port);
    }
}

static void test_redirects_refuse_malformed_replies(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "MOVED",
        "MOVED ",
        "MOVED 3999",
        "MOVED 3999 ",
        "MOVED 3999 127.0.0.1",
        "MOVED 3999 127.0.0.1:",
        "MOVED 3999 127.0.0.1:0",
        "MOVED 3999 127.0.0.1:65536",
        "MOVED 3999 127.0.0.1:63x",
        "MOVED 16384 127.0.0.1:6379",
        "MOVED -1 127.0.0.1:6379",
        "MOVED x 127.0.0.1:6379",
        "ASK  3999 127.0.0.1:6379",
        "moved 3999 127.0.0.1:6379",
        "ERR unknown command",
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "CLUSTERDOWN The cluster is down",
        "",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        SlotsRedirect r;
        if (slotsParseRedirect(bad[i], strlen(bad[i]), &r) == 0)
            fail_msg("\"%s\" was taken for a redirection", bad[i]);
    }
}

static void test_seed_lists_parse(void **state)
{
    (void)state;
    SlotsAddr seeds[4];
    assert_int_equal(slotsParseSeeds("127.0.0.1:6379", seeds, 4), 1);
    assert_string_equal(seeds[0].host, "127.0.0.1");
    assert_int_equal(seeds[0].port, 6379);
    assert_int_equal(slotsParseSeeds("10.0.0.1:7000,10.0.0.2:7001, dir-3:7002 ", seeds, 4), 3);
    assert_string_equal(seeds[1].host, "10.0.0.2");
    assert_int_equal(seeds[1].port, 7001);
    assert_string_equal(seeds[2].host, "dir-3");
    assert_int_equal(seeds[2].port, 7002);
}

static void test_seed_lists_refuse_bad_entries(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",      ",",   "127.0.0.1", "127.0.0.1:",          ":6379", "a:1,", "a:1,,b:2",
        "a:1,b", "a:0", "a:70000",   "a:1,b:2,c:3,d:4,e:5", /* more than the 4 the caller has room
                                                               for */
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        SlotsAddr seeds[4];
        if (slotsParseSeeds(bad[i], seeds, 4) != -1)
            fail_msg("seed list \"%s\" was accepted", bad[i]);
    }
}

static void test_map_routes_ranges_to_masters(void **state)
{
    (void)state;
    SlotsMap *m = test_malloc(sizeof(*m));
    slotsMapInit(m);
    assert_int_equal(slotsMapCovered(m), 0);
    assert_int_equal(slotsMapOwner(m, 0), -1);
    assert_int_equal(slotsMapAssign(m, 0, 5460, "127.0.0.1", 7000), 0);
    assert_int_equal(slotsMapAssign(m, 5461, 10922, "127.0.0.1", 7001), 1);
    assert_int_equal(slotsMapCovered(m), 10923);
    assert_int_equal(slotsMapAssign(m, 10923, 16383, "127.0.0.1", 7002), 2);
    assert_int_equal(slotsMapCovered(m), SLOTS_COUNT);
    assert_int_equal(slotsMapOwner(m, slotsKeySlot(LIT("foo"))), 2); /* 12182 */
    assert_int_equal(slotsMapOwner(m, slotsKeySlot(LIT("bar"))), 0); /* 5061 */
    assert_int_equal(slotsMapOwner(m, 5461), 1);
    assert_int_equal(slotsMapOwner(m, SLOTS_COUNT), -1);
    assert_int_equal(slotsMapOwner(m, -1), -1);

    /* A MOVED moves one slot; the same master keeps its index. */
    assert_int_equal(slotsMapAssign(m, 12182, 12182, "127.0.0.1", 7000), 0);
    assert_int_equal(slotsMapOwner(m, 12182), 0);
    assert_int_equal(slotsMapFind(m, "127.0.0.1", 7002), 2);
    assert_int_equal(slotsMapFind(m, "127.0.0.1", 7003), -1);

    assert_int_equal(slotsMapAssign(m, 10, 9, "127.0.0.1", 7000), -1);
    assert_int_equal(slotsMapAssign(m, 0, SLOTS_COUNT, "127.0.0.1", 7000), -1);
    slotsMapReset(m);
    assert_int_equal(slotsMapCovered(m), 0);
    assert_int_equal(m->nMasters, 0);
    test_free(m);
}

static void test_map_of_a_single_redis_covers_every_slot(void **state)
{
    (void)state;
    SlotsMap *m = test_malloc(sizeof(*m));
    slotsMapInit(m);
    assert_int_equal(slotsMapAssign(m, 0, SLOTS_COUNT - 1, "127.0.0.1", 6379), 0);
    assert_int_equal(slotsMapCovered(m), SLOTS_COUNT);
    assert_int_equal(m->nMasters, 1);
    slotsMapReset(m);
    test_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc16_matches_the_specification_vector),
        cmocka_unit_test(test_key_slots_match_redis),
        cmocka_unit_test(test_hash_tags_follow_the_specification),
        cmocka_unit_test(test_hash_tag_may_hold_any_byte),
        cmocka_unit_test(test_every_key_of_any_id_lands_in_one_slot),
        cmocka_unit_test(test_object_keys_of_distinct_ids_never_meet),
        cmocka_unit_test(test_object_keys_keep_their_layout_and_slot),
        cmocka_unit_test(test_decimal_tags_below_2_17_reach_every_slot),
        cmocka_unit_test(test_redirects_parse),
        cmocka_unit_test(test_redirects_refuse_malformed_replies),
        cmocka_unit_test(test_seed_lists_parse),
        cmocka_unit_test(test_seed_lists_refuse_bad_entries),
        cmocka_unit_test(test_map_routes_ranges_to_masters),
        cmocka_unit_test(test_map_of_a_single_redis_covers_every_slot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
