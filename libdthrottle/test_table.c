/* test_table.c: the in-process decision against tables the builder makes
 * from docs/shared-table.md (test_builder.c), step by step; the runner of
 * every suite. test_threads.c races threads for one bucket, test_garbage.c
 * damages tables, test_attach.c tests the socket side. "test_table -golden DIR"
 * writes the throwaway conformance case instead (test_golden.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dthrottle_table.h"
#include "test_builder.h"

int tb_failures;
const char *tb_test;

static void test_hash(void)
{
    static const struct {
        const char *key;
        uint64_t h0, h1;
    } v[] = {
        {"", 0x82e8d34a5e62e1f9ULL, 0xd2c2aa7a533611d7ULL},
        {"a", 0xc422018ea3c84465ULL, 0x044639c1775fe5a6ULL},
        {"abc", 0x978ba3b3702b31a0ULL, 0x0d857496832499aeULL},
        {"abcd", 0x25bc4af056473d60ULL, 0x7ae7af598d29e6deULL},
        {"192.168.100.200", 0x4b1026ff6bae0a06ULL, 0x3879e75550765a6aULL},
        {"0123456789abcdefg", 0xf29a8216b9fac98aULL, 0x827c216f3bbb06fcULL},
        {"the quick brown fox jumps over the lazy dog 0123456789",
         0x6cd03813dd191c5aULL, 0x87e4eb386f12302dULL},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        uint64_t h0 = dt_hash(0, v[i].key, strlen(v[i].key));
        uint64_t h1 = dt_hash(0x0123456789abcdefULL, v[i].key, strlen(v[i].key));
        if (h0 != v[i].h0 || h1 != v[i].h1) {
            fprintf(stderr, "%s: hash(%s) = %016llx %016llx, want %016llx %016llx\n",
                    tb_test, v[i].key, (unsigned long long)h0, (unsigned long long)h1,
                    (unsigned long long)v[i].h0, (unsigned long long)v[i].h1);
            tb_failures++;
        }
    }
}

/* map_fails checks that dt_map refuses b's files with errno want. */
static void map_fails(struct tb *b, int want, const char *why)
{
    dt_table *t = NULL;
    int rc = dt_map(b->table, b->table_len, b->state, b->state_len, &t);
    if (rc != -1 || errno != want) {
        fprintf(stderr, "%s: %s: dt_map = %d (%s), want -1 (%s)\n", tb_test, why, rc,
                strerror(errno), strerror(want));
        tb_failures++;
        dt_close(t);
    }
}

static void test_map_checks(void)
{
    struct tb b;
    dt_table *t = NULL;

    tb_std_make(&b);
    b.table[0] = 'X';
    map_fails(&b, EPROTO, "magic");
    b.table[0] = 'D';
    tb_put32(b.table, TB_VERSION, 2);
    map_fails(&b, EPROTONOSUPPORT, "version 2");
    tb_put32(b.table, TB_VERSION, 1);
    tb_put64(b.table, TB_TABLE_SIZE, b.table_len + 8);
    map_fails(&b, EPROTO, "table size");
    tb_put64(b.table, TB_TABLE_SIZE, b.table_len);
    tb_put64(b.table, TB_STATE_SIZE, b.state_len - 8);
    map_fails(&b, EPROTO, "state size");
    tb_put64(b.table, TB_STATE_SIZE, b.state_len);
    tb_put32(b.table, TB_SHARDS, 3);
    map_fails(&b, EPROTO, "3 shards");
    tb_put32(b.table, TB_SHARDS, 128);
    tb_put32(b.table, TB_SHARD_SHIFT, 57);
    map_fails(&b, EPROTO, "128 shards");
    tb_put32(b.table, TB_SHARDS, 4);
    tb_put32(b.table, TB_SHARD_SHIFT, 63);
    map_fails(&b, EPROTO, "shard shift");
    tb_put32(b.table, TB_SHARD_SHIFT, 62);
    tb_put64(b.table, TB_SHARD_TABLE, b.table_len - 64);
    map_fails(&b, EPROTO, "shard table past the file");
    tb_put64(b.table, TB_SHARD_TABLE, b.shard_table);
    tb_put64(b.table, TB_RECORDS_SIZE, b.state_len);
    map_fails(&b, EPROTO, "records past the file");
    tb_put64(b.table, TB_RECORDS_SIZE, b.records_size);
    tb_put64(b.table, TB_DIRTY_OFF, b.state_len - 8);
    map_fails(&b, EPROTO, "dirty bitmap past the file");
    tb_put64(b.table, TB_DIRTY_OFF, b.dirty_off);
    tb_put32(b.table, TB_COUNTED, 0xFFFFFFFF);
    map_fails(&b, EPROTO, "counters past the file");
    tb_put32(b.table, TB_COUNTED, b.np);
    tb_put64(b.table, TB_RECORDS_OFF, b.records_off + 4);
    map_fails(&b, EPROTO, "records misaligned");
    tb_put64(b.table, TB_RECORDS_OFF, b.records_off);

    CHECK(dt_map(b.table + 8, b.table_len - 8, b.state, b.state_len, &t) == -1 &&
          errno == EPROTO);
    CHECK(dt_map(b.table, b.table_len, b.state + 4, b.state_len - 4, &t) == -1 &&
          errno == EINVAL);
    CHECK(dt_map(b.table, 100, b.state, b.state_len, &t) == -1 && errno == EPROTO);
    CHECK(dt_map(b.table, b.table_len, b.state, b.state_len, &t) == 0);
    CHECK(dt_shared(t) == 1);
    CHECK(dt_ask(t, "x", 1) == -1 && errno == ENOTCONN);
    CHECK(dt_reattach(t) == -1 && errno == EINVAL);
    dt_close(t);
    tb_free(&b);
}

/* A tag found and spent, to the bottom of its bucket and back. */
static void test_spend(void)
{
    struct tb b;
    dt_result r;
    tb_std_make(&b);
    uint32_t ref = tb_add(&b, "omega", 5, 0, 0);
    dt_table *t = tb_map(&b);

    CHECK_EQ(tb_decide(t, "omega", TB_T0, &r), DT_OK);
    CHECK_EQ(tb_tat(&b, ref), TB_T0 + TB_S);
    CHECK_EQ(tb_unreported(&b, ref), 1);
    CHECK_EQ(tb_refused(&b, ref), 0);
    CHECK(tb_dirty(&b, ref));
    CHECK_EQ(tb_counter(&b, 0, TB_OK), 1);
    CHECK_EQ(tb_counter(&b, 0, TB_NO), 0);
    CHECK_EQ(r.policy, 0);
    CHECK_EQ(r.limit, 3);
    CHECK_EQ(r.remaining, 2); /* (2 s - 1 s) / 1 s + 1 */
    CHECK_EQ(r.retry_after_ns, 0);
    CHECK_EQ(r.reset_ns, TB_S);

    CHECK_EQ(tb_decide(t, "omega", TB_T0, &r), DT_OK);
    CHECK_EQ(tb_decide(t, "omega", TB_T0, &r), DT_OK);
    CHECK_EQ(tb_tat(&b, ref), TB_T0 + 3 * TB_S);
    CHECK_EQ(tb_unreported(&b, ref), 3);
    CHECK_EQ(r.remaining, 0);
    CHECK_EQ(r.reset_ns, 3 * TB_S);

    /* The burst is spent: refused, counted, and the tat kept. */
    CHECK_EQ(tb_decide(t, "omega", TB_T0, &r), DT_NO);
    CHECK_EQ(tb_decide(t, "omega", TB_T0, &r), DT_NO);
    CHECK_EQ(tb_tat(&b, ref), TB_T0 + 3 * TB_S);
    CHECK_EQ(tb_refused(&b, ref), 2);
    CHECK_EQ(tb_unreported(&b, ref), 3);
    CHECK_EQ(tb_counter(&b, 0, TB_OK), 3);
    CHECK_EQ(tb_counter(&b, 0, TB_NO), 2);
    CHECK_EQ(r.remaining, 0);
    CHECK_EQ(r.retry_after_ns, TB_S); /* 3 s - 2 s */
    CHECK_EQ(r.reset_ns, 3 * TB_S);

    /* A second later a token is back; a tat in the past starts from now. */
    CHECK_EQ(tb_decide(t, "omega", TB_T0 + TB_S, &r), DT_OK);
    CHECK_EQ(tb_tat(&b, ref), TB_T0 + 4 * TB_S);
    tb_put64(tb_rec(&b, ref), 0, (uint64_t)(TB_T0 - 100 * TB_S));
    CHECK_EQ(tb_decide(t, "omega", TB_T0 + TB_S, &r), DT_OK);
    CHECK_EQ(tb_tat(&b, ref), TB_T0 + 2 * TB_S);
    CHECK_EQ(r.remaining, 2);

    /* The empty tag: served, nothing counted, whatever the table. */
    tb_put32(b.table, TB_STATE, 2);
    CHECK_EQ(dt_decide(t, "", 0, TB_T0, &r), DT_OK);
    CHECK_EQ(r.policy, -1);
    CHECK_EQ(tb_counter(&b, 0, TB_OK), 5);
    dt_close(t);
    tb_free(&b);
}

/* A refusal marks a clean record dirty, and only from 0. */
static void test_refused_dirty(void)
{
    struct tb b;
    tb_std_make(&b);
    uint32_t ref = tb_add(&b, "empty", 5, 0, TB_T0 + 5 * TB_S);
    uint32_t other = tb_add(&b, "counted", 7, 0, TB_T0 + 5 * TB_S);
    dt_table *t = tb_map(&b);

    CHECK_EQ(tb_decide(t, "empty", TB_T0, NULL), DT_NO);
    CHECK_EQ(tb_refused(&b, ref), 1);
    CHECK_EQ(tb_unreported(&b, ref), 0);
    CHECK(tb_dirty(&b, ref));
    CHECK_EQ(tb_tat(&b, ref), TB_T0 + 5 * TB_S);
    CHECK_EQ(tb_counter(&b, 0, TB_NO), 1);

    tb_put32(tb_rec(&b, other), 12, 5); /* refused before, already reported dirty */
    CHECK_EQ(tb_decide(t, "counted", TB_T0, NULL), DT_NO);
    CHECK_EQ(tb_refused(&b, other), 6);
    CHECK(!tb_dirty(&b, other));
    dt_close(t);
    tb_free(&b);
}

/* Tags the process cannot decide: asked, nothing written. */
static void test_ask(void)
{
    struct tb b;
    dt_result r;
    char long_tag[TB_STD_MAX_KEY + 2];
    tb_std_make(&b);
    memset(long_tag, 'z', sizeof(long_tag) - 1);
    long_tag[sizeof(long_tag) - 1] = '\0';
    tb_add(&b, long_tag, TB_STD_MAX_KEY + 1, 0, 0); /* even if it were there */
    tb_add(&b, "omega", 5, 0, 0);
    dt_table *t = tb_map(&b);
    unsigned char *before = malloc(b.state_len);
    memcpy(before, b.state, b.state_len);

    CHECK_EQ(tb_decide(t, "nobody", TB_T0, &r), DT_ASK);
    CHECK_EQ(r.policy, 0);
    CHECK_EQ(tb_decide(t, "alph", TB_T0, NULL), DT_ASK);
    CHECK_EQ(tb_decide(t, "alphaa", TB_T0, NULL), DT_ASK);
    CHECK_EQ(tb_decide(t, long_tag, TB_T0, NULL), DT_ASK);
    CHECK(memcmp(before, b.state, b.state_len) == 0);
    /* max_key is read at each decision: a reload may raise it. */
    tb_put32(b.table, TB_MAX_KEY, TB_STD_MAX_KEY + 1);
    CHECK_EQ(tb_decide(t, long_tag, TB_T0, NULL), DT_OK);
    tb_put32(b.table, TB_MAX_KEY, TB_STD_MAX_KEY);
    /* A long tag of an allow policy is still answered (step 4 before 5). */
    CHECK_EQ(tb_decide(t, "ok:0123456789abcdefghij", TB_T0, NULL), DT_OK);
    CHECK_EQ(tb_counter(&b, 1, TB_OK), 1);
    free(before);
    dt_close(t);
    tb_free(&b);
}

/* Allow, deny and dry-run policies. */
static void test_fixed(void)
{
    struct tb b;
    dt_result r;
    tb_std_make(&b);
    uint32_t full = tb_add(&b, "drl:full", 8, 4, TB_T0 + 5 * TB_S);
    uint32_t fresh = tb_add(&b, "drl:new", 7, 4, 0);
    dt_table *t = tb_map(&b);

    CHECK_EQ(tb_decide(t, "ok:x", TB_T0, &r), DT_OK);
    CHECK_EQ(r.policy, 1);
    CHECK_EQ(r.limit, 0);
    CHECK_EQ(tb_decide(t, "no:x", TB_T0, &r), DT_NO);
    CHECK_EQ(r.policy, 2);
    CHECK_EQ(tb_decide(t, "dry:x", TB_T0, &r), DT_OK);
    CHECK_EQ(r.policy, 3);
    CHECK_EQ(tb_counter(&b, 1, TB_OK), 1);
    CHECK_EQ(tb_counter(&b, 2, TB_NO), 1);
    CHECK_EQ(tb_counter(&b, 2, TB_OK), 0);
    CHECK_EQ(tb_counter(&b, 3, TB_DRY), 1);
    CHECK_EQ(tb_counter(&b, 3, TB_OK), 1);
    CHECK_EQ(tb_counter(&b, 3, TB_NO), 0);

    /* A dry run of a limit serves what the limit refuses, keeping the
     * bucket as it is, counts it dry and ok, and leaves the would-be
     * refusal for the daemon's heaviest refused tags. */
    CHECK_EQ(tb_decide(t, "drl:full", TB_T0, &r), DT_OK);
    CHECK_EQ(tb_tat(&b, full), TB_T0 + 5 * TB_S);
    CHECK_EQ(tb_refused(&b, full), 1);
    CHECK_EQ(tb_unreported(&b, full), 0);
    CHECK(tb_dirty(&b, full));
    CHECK_EQ(tb_counter(&b, 4, TB_DRY), 1);
    CHECK_EQ(tb_counter(&b, 4, TB_OK), 1);
    CHECK_EQ(tb_counter(&b, 4, TB_NO), 0);
    CHECK_EQ(r.retry_after_ns, 4 * TB_S); /* 5 s - allow_at 1 s */
    CHECK_EQ(r.remaining, 0);
    /* and spends like a limit where the limit serves. */
    CHECK_EQ(tb_decide(t, "drl:new", TB_T0, &r), DT_OK);
    CHECK_EQ(tb_tat(&b, fresh), TB_T0 + TB_S);
    CHECK_EQ(tb_unreported(&b, fresh), 1);
    CHECK_EQ(tb_counter(&b, 4, TB_OK), 2);
    dt_close(t);
    tb_free(&b);
}

/* Policies past counted_policies have no counters: allow and deny are
 * answered uncounted, limits asked. */
static void test_uncounted(void)
{
    struct tb b;
    tb_std_make(&b);
    tb_put32(b.table, TB_COUNTED, 2);
    b.np = 2; /* the builder's counters by the header's stride */
    tb_add(&b, "h:1", 3, 8, 0);
    dt_table *t = tb_map(&b);
    unsigned char *before = malloc(b.state_len);

    CHECK_EQ(tb_decide(t, "ok:x", TB_T0, NULL), DT_OK);
    CHECK_EQ(tb_counter(&b, 1, TB_OK), 1);
    memcpy(before, b.state, b.state_len);
    CHECK_EQ(tb_decide(t, "no:x", TB_T0, NULL), DT_NO);
    CHECK_EQ(tb_decide(t, "dry:x", TB_T0, NULL), DT_OK);
    CHECK_EQ(tb_decide(t, "h:1", TB_T0, NULL), DT_ASK);
    CHECK(memcmp(before, b.state, b.state_len) == 0);
    free(before);
    dt_close(t);
    tb_free(&b);
}

/* The trie gives the longest prefix; the record must agree. */
static void test_prefix(void)
{
    static const struct {
        const char *tag;
        int policy;
    } cases[] = {
        {"a", 5}, {"ax", 5}, {"ab", 6}, {"abz", 6}, {"abc", 7}, {"abcdef", 7},
        {"b", 0}, {"okay", 0}, {"ok", 0}, {"ok:", 1}, {"no:", 2}, {"xabc", 0},
        {"h:", 8}, {"h", 0}, {"\xff", 0},
    };
    struct tb b;
    dt_result r;
    tb_std_make(&b);
    uint32_t ab = tb_add(&b, "abq", 3, 6, 0);
    tb_add(&b, "abc1", 4, 5, 0); /* the record says 5, the trie 7 */
    dt_table *t = tb_map(&b);

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tb_decide(t, cases[i].tag, TB_T0, &r);
        if (r.policy != cases[i].policy) {
            fprintf(stderr, "%s: policy of %s = %d, want %d\n", tb_test, cases[i].tag,
                    r.policy, cases[i].policy);
            tb_failures++;
        }
    }
    CHECK_EQ(tb_decide(t, "abq", TB_T0, &r), DT_OK);
    CHECK_EQ(r.limit, 20);
    CHECK_EQ(tb_tat(&b, ab), TB_T0 + tb_per_token(100));
    CHECK_EQ(tb_decide(t, "abc1", TB_T0, &r), DT_ASK);
    dt_close(t);
    tb_free(&b);
}

/* The daemon left, or asks to be asked, or rewrites its policies. */
static void test_left(void)
{
    struct tb b;
    tb_std_make(&b);
    tb_add(&b, "omega", 5, 0, 0);
    dt_table *t = tb_map(&b);

    CHECK_EQ(tb_decide(t, "omega", TB_T0 + TB_S, NULL), DT_OK);
    CHECK_EQ(tb_decide(t, "omega", TB_T0 + TB_S + 1, NULL), DT_LEFT);
    CHECK_EQ(tb_decide(t, "ok:x", TB_T0 + 2 * TB_S, NULL), DT_LEFT);
    CHECK_EQ(tb_decide(t, "ok:x", TB_T0 - 5 * TB_S, NULL), DT_OK); /* a clock behind */
    tb_put32(b.table, TB_STATE, 2);
    CHECK_EQ(tb_decide(t, "omega", TB_T0, NULL), DT_LEFT);
    tb_put32(b.table, TB_STATE, 0);
    CHECK_EQ(tb_decide(t, "omega", TB_T0, NULL), DT_LEFT);
    tb_put32(b.table, TB_STATE, 3);
    CHECK_EQ(tb_decide(t, "omega", TB_T0, NULL), DT_ASK);
    CHECK_EQ(tb_decide(t, "ok:x", TB_T0, NULL), DT_ASK);
    CHECK_EQ(tb_decide(t, "omega", TB_T0 + 2 * TB_S, NULL), DT_LEFT);
    tb_put32(b.table, TB_STATE, 1);
    tb_put64(b.table, TB_HEARTBEAT, (uint64_t)INT64_MIN);
    CHECK_EQ(tb_decide(t, "omega", TB_T0, NULL), DT_LEFT);
    tb_put64(b.table, TB_HEARTBEAT, (uint64_t)TB_T0);

    tb_put32(b.table, TB_POLICY_SEQ, 3);
    CHECK_EQ(tb_decide(t, "omega", TB_T0, NULL), DT_ASK);
    CHECK_EQ(tb_decide(t, "ok:x", TB_T0, NULL), DT_ASK);
    CHECK_EQ(tb_decide(t, "no:x", TB_T0, NULL), DT_ASK);

    /* New policies in the spare room: the default now denies. */
    struct tb_policy deny[] = {{TB_DENY, 0, 0, 1, NULL}};
    tb_write_policies(&b, b.spare_off, deny, 1);
    tb_put64(b.table, TB_POLICY_ACTIVE, b.spare_off);
    tb_put32(b.table, TB_POLICY_SEQ, 4);
    CHECK_EQ(tb_decide(t, "omega", TB_T0, NULL), DT_NO);
    CHECK_EQ(tb_decide(t, "ok:x", TB_T0, NULL), DT_NO);
    CHECK_EQ(tb_counter(&b, 0, TB_NO), 2);
    dt_close(t);
    tb_free(&b);
}

/* The headers of a decision, by the doc's formula. */
static void test_headers(void)
{
    struct tb b;
    dt_result r;
    int64_t per = tb_per_token(2); /* 0.5 s; allow_at 2 s */
    tb_std_make(&b);
    uint32_t ref = tb_add(&b, "h:1", 3, 8, TB_T0 + 7 * per / 5);
    dt_table *t = tb_map(&b);

    CHECK_EQ(tb_decide(t, "h:1", TB_T0, &r), DT_OK);
    CHECK_EQ(r.policy, 8);
    CHECK_EQ(r.limit, 5);
    CHECK_EQ(r.reset_ns, 7 * per / 5 + per);                   /* tat' - now */
    CHECK_EQ(r.remaining, (4 * per - (7 * per / 5 + per)) / per + 1);
    CHECK_EQ(r.remaining, 2);
    CHECK_EQ(r.retry_after_ns, 0);

    tb_put64(tb_rec(&b, ref), 0, (uint64_t)(TB_T0 + 4 * per + per / 3));
    CHECK_EQ(tb_decide(t, "h:1", TB_T0, &r), DT_NO);
    CHECK_EQ(r.remaining, 0);
    CHECK_EQ(r.retry_after_ns, per / 3);          /* tat - now - allow_at */
    CHECK_EQ(r.reset_ns, 4 * per + per / 3);      /* tat - now */

    tb_put64(tb_rec(&b, ref), 0, 0);
    CHECK_EQ(tb_decide(t, "h:1", TB_T0, &r), DT_OK);
    CHECK_EQ(r.remaining, 4);                     /* a full bucket of 5, one taken */
    CHECK_EQ(r.reset_ns, per);

    /* Half a token left after the query: none remains whole (the next
     * query at the same instant is refused), as the HTTP endpoint's
     * RateLimit header rounds the level down. */
    tb_put64(tb_rec(&b, ref), 0, (uint64_t)(TB_T0 + 4 * per - per / 2));
    CHECK_EQ(tb_decide(t, "h:1", TB_T0, &r), DT_OK);
    CHECK_EQ(r.remaining, 0);
    CHECK_EQ(r.reset_ns, 4 * per + per / 2);
    CHECK_EQ(tb_decide(t, "h:1", TB_T0, &r), DT_NO);
    CHECK_EQ(r.retry_after_ns, per / 2);
    dt_close(t);
    tb_free(&b);
}

static const struct {
    const char *name;
    void (*fn)(void);
} tests[] = {
    {"hash", test_hash},
    {"map_checks", test_map_checks},
    {"spend", test_spend},
    {"refused_dirty", test_refused_dirty},
    {"ask", test_ask},
    {"fixed", test_fixed},
    {"uncounted", test_uncounted},
    {"prefix", test_prefix},
    {"left", test_left},
    {"headers", test_headers},
    {"garbage", test_garbage},
    {"fuzz", test_fuzz},
    {"threads", test_threads},
    {"attach", test_attach},
};

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "-golden") == 0) {
        return write_golden(argv[2]) == 0 ? 0 : 1;
    }
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        int before = tb_failures;
        tb_test = tests[i].name;
        tests[i].fn();
        printf("%s %s\n", tb_failures == before ? "ok  " : "FAIL", tests[i].name);
    }
    if (tb_failures != 0) {
        printf("%d checks failed\n", tb_failures);
        return 1;
    }
    return 0;
}
