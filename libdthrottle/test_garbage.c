/* test_garbage.c: tables and states damaged on purpose, field by field
 * and at random: the decision asks, or decides within bounds, and never
 * reads outside the files (make sanitize runs this under
 * AddressSanitizer, whose heap the test's files live in).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdlib.h>
#include <string.h>

#include "dthrottle_table.h"
#include "test_builder.h"

/* expect_ask checks that tag is asked of the damaged table t. */
static void expect_ask(dt_table *t, const char *tag, const char *why)
{
    int got = tb_decide(t, tag, TB_T0, NULL);
    if (got != DT_ASK) {
        fprintf(stderr, "%s: %s: %s = %d, want DT_ASK\n", tb_test, why, tag, got);
        tb_failures++;
    }
}

/* Garbage in either file: asked, never read out of bounds. */
void test_garbage(void)
{
    struct tb b;
    tb_std_make(&b);
    uint32_t ref = tb_add(&b, "omega", 5, 0, 0);
    uint32_t s = tb_shard_of(&b, "omega", 5);
    tb_add(&b, "beta", 4, 0, 0);
    uint64_t slot = tb_slot_of(&b, ref), e = tb_get64(b.table, slot);
    uint64_t entry = b.shard_table + 64 * (uint64_t)s, w = tb_get64(b.table, entry);
    uint64_t units = b.records_size / 8;
    unsigned char *rec = tb_rec(&b, ref);
    dt_table *t = tb_map(&b);

    /* Slots and index words. */
    tb_put64(b.table, slot, (e & ~0xFFFFFFFFULL) | (units + 5));
    expect_ask(t, "omega", "slot past the record area");
    tb_put64(b.table, slot, (e & ~0xFFFFFFFFULL) | (units - 1));
    expect_ask(t, "omega", "record straddling the area's end");
    tb_put64(b.table, slot, e & ~0xFFFFFFFFULL);
    expect_ask(t, "omega", "reference 0");
    tb_put64(b.table, slot, e);
    /* A slot of the same fragment whose record is garbage holds no key:
     * the probe goes on to the tag's own slot. */
    uint64_t i = (slot - b.index_off) / 8 - (uint64_t)s * b.slots;
    uint64_t next = b.index_off + 8 * ((uint64_t)s * b.slots + (i + 1) % b.slots);
    if (tb_get64(b.table, next) == 0) {
        tb_put64(b.table, next, e);
        tb_put64(b.table, slot, (e & ~0xFFFFFFFFULL) | (units + 5));
        CHECK_EQ(tb_decide(t, "omega", TB_T0, NULL), DT_OK);
        tb_put64(b.table, slot, e);
        tb_put64(b.table, next, 0);
    } else {
        CHECK(!"the slot after omega's is taken");
    }
    tb_put64(b.table, entry, (w & ~0xFFFFFFFFULL) | 0xFFFFFFFF);
    expect_ask(t, "omega", "huge slot count");
    tb_put64(b.table, entry, (uint64_t)(b.table_len / 8 + 1) << 32 | (w & 0xFFFFFFFF));
    expect_ask(t, "omega", "index past the file");
    tb_put64(b.table, entry, 0xFFFFFFFFFFFFFFFFULL);
    expect_ask(t, "omega", "index word all ones");
    tb_put64(b.table, entry, w & ~0xFFFFFFFFULL);
    expect_ask(t, "omega", "no slots");
    tb_put64(b.table, entry, w);

    /* Records. */
    rec[18] = 0xFF, rec[19] = 0xFF, rec[20] = 0xFF, rec[21] = 0x0F;
    expect_ask(t, "omega", "key length past the area");
    memset(rec + 18, 0xFF, 16);
    expect_ask(t, "omega", "unterminated key length");
    rec[18] = 5;
    memcpy(rec + 19, "omega", 5);
    tb_put64(rec, 0, (uint64_t)INT64_MIN);
    expect_ask(t, "omega", "record being freed");
    tb_put64(rec, 0, 0);
    tb_put16(rec, 16, 0xFFFF);
    expect_ask(t, "omega", "free record");
    tb_put16(rec, 16, 0);
    tb_put64(rec, 0, (uint64_t)INT64_MAX); /* the end of time: refused */
    CHECK_EQ(tb_decide(t, "omega", TB_T0, NULL), DT_NO);
    CHECK_EQ(tb_refused(&b, ref), 1);
    tb_put64(rec, 0, 0);
    CHECK_EQ(tb_decide(t, "omega", TB_T0, NULL), DT_OK);

    /* The policy block. */
    uint64_t pa = b.policy_off;
    uint64_t nodes = pa + 16 + 32 * (uint64_t)b.np;
    tb_put64(b.table, TB_POLICY_ACTIVE, b.table_len - 8);
    expect_ask(t, "omega", "policy block past the file");
    tb_put64(b.table, TB_POLICY_ACTIVE, pa + 4);
    expect_ask(t, "omega", "policy block misaligned");
    tb_put64(b.table, TB_POLICY_ACTIVE, 0xFFFFFFFFFFFFFFF8ULL);
    expect_ask(t, "omega", "policy block at 2^64-8");
    tb_put64(b.table, TB_POLICY_ACTIVE, pa);
    uint32_t np = tb_get32(b.table, pa), nn = tb_get32(b.table, pa + 4);
    uint32_t ne = tb_get32(b.table, pa + 8);
    tb_put32(b.table, pa, 0xFFFFFFFF);
    expect_ask(t, "omega", "policy count past the file");
    tb_put32(b.table, pa, 0);
    expect_ask(t, "omega", "no policies");
    tb_put32(b.table, pa, np);
    tb_put32(b.table, pa + 4, 0);
    expect_ask(t, "omega", "no nodes");
    tb_put32(b.table, pa + 4, nn);
    /* The root: its edges past the edge count, then its policy past the
     * policies, then an edge to a node that is not there. */
    uint64_t root = tb_get64(b.table, nodes);
    tb_put32(b.table, nodes, ne);
    expect_ask(t, "omega", "root's edges past the edges");
    tb_put64(b.table, nodes, root);
    CHECK_EQ(tb_decide(t, "beta", TB_T0, NULL), DT_OK);
    tb_put16(b.table, nodes + 6, (uint16_t)np);
    expect_ask(t, "beta", "root's policy past the policies");
    tb_put64(b.table, nodes, root);
    uint64_t edges = nodes + 8 * (uint64_t)nn;
    for (uint32_t i = 0; i < ne; i++) {
        if (b.table[edges + 8 * i] == 'o' && tb_get32(b.table, edges + 8 * i + 4) < nn) {
            uint32_t next = tb_get32(b.table, edges + 8 * i + 4);
            tb_put32(b.table, edges + 8 * i + 4, nn + 7);
            expect_ask(t, "omega", "edge to no node");
            tb_put32(b.table, edges + 8 * i + 4, next);
            break;
        }
    }
    /* A limit policy the daemon would not make. */
    uint64_t p0 = pa + 16;
    int64_t per = (int64_t)tb_get64(b.table, p0 + 8);
    tb_put64(b.table, p0 + 8, 0);
    expect_ask(t, "omega", "per_token 0");
    tb_put64(b.table, p0 + 8, (uint64_t)per);
    b.table[p0] = 7;
    expect_ask(t, "omega", "unknown action");
    b.table[p0] = TB_LIMIT;
    CHECK_EQ(tb_decide(t, "omega", TB_T0, NULL), DT_OK);
    dt_close(t);
    tb_free(&b);
}

/* Random damage anywhere in either file after the map: decisions go on,
 * in bounds (make sanitize runs this under AddressSanitizer). */
void test_fuzz(void)
{
    static const char *tags[] = {"omega", "beta", "gamma", "a1", "abc9", "ok:1",
                                 "no:2", "drl:3", "h:4", "t:5", "zz"};
    struct tb b, pristine;
    unsigned int seed = 12345;
    tb_std_make(&pristine);
    for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++) {
        const char *tag = tags[i];
        tb_add(&pristine, tag, strlen(tag), (uint16_t)(i % 3 == 0 ? 0 : 5), 0);
    }
    b = pristine;
    b.table = malloc(b.table_len);
    b.state = malloc(b.state_len);
    dt_table *t = NULL;
    int outcomes[4] = {0};

    for (int round = 0; round < 3000; round++) {
        memcpy(b.table, pristine.table, b.table_len);
        memcpy(b.state, pristine.state, b.state_len);
        if (t == NULL) {
            t = tb_map(&b);
        }
        int hits = 1 + rand_r(&seed) % 16;
        for (int k = 0; k < hits; k++) {
            int in_table = rand_r(&seed) % 2;
            size_t len = in_table ? b.table_len : b.state_len;
            size_t at;
            /* Mostly where the structure is: the header's first words,
             * the shard entries and slots, the policies, the records. */
            switch (rand_r(&seed) % 4) {
            case 0:
                at = (size_t)rand_r(&seed) % 128;
                break;
            case 1:
                at = (size_t)rand_r(&seed) % 1024 + (in_table ? 4096 : 0);
                break;
            default:
                at = (size_t)rand_r(&seed) % len;
            }
            if (at >= len) {
                at %= len;
            }
            unsigned char v = (unsigned char)rand_r(&seed);
            (in_table ? b.table : b.state)[at] = rand_r(&seed) % 4 == 0 ? 0xFF : v;
        }
        for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++) {
            int rc = tb_decide(t, tags[i], TB_T0 + (int64_t)(i * 1000), NULL);
            CHECK(rc >= DT_NO && rc <= DT_LEFT);
            outcomes[rc & 3]++;
        }
    }
    CHECK(outcomes[DT_OK] > 0 && outcomes[DT_ASK] > 0);
    dt_close(t);
    tb_free(&b);
    tb_free(&pristine);
}
