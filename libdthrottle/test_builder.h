/* test_builder.h: a table file and a state file made in memory the way
 * docs/shared-table.md lays them out, written field by field from the
 * doc (not from the library), for the tests and the throwaway golden case.
 *
 * Layout of what tb_make builds:
 *   table: header (4096) | shard entries | index slots, shard by shard |
 *          policy block | room for a second policy block
 *   state: 64 bytes unused | record area | dirty bitmap | counters (64 stripes)
 * The builder owns both buffers (8-byte aligned, zeroed); tb_free frees
 * them. Not safe for concurrent use while it builds.
 */
#ifndef TEST_BUILDER_H
#define TEST_BUILDER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dthrottle_table.h"

/* The checks of the tests: a failed one is reported and counted, and the
 * test goes on. tb_test names the test running (test_table.c). */
extern int tb_failures;
extern const char *tb_test;

#define CHECK(c)                                                              \
    do {                                                                      \
        if (!(c)) {                                                           \
            fprintf(stderr, "%s:%d: %s: failed: %s\n", __FILE__, __LINE__,    \
                    tb_test, #c);                                             \
            tb_failures++;                                                    \
        }                                                                     \
    } while (0)

#define CHECK_EQ(got, want)                                                   \
    do {                                                                      \
        long long got_ = (long long)(got), want_ = (long long)(want);        \
        if (got_ != want_) {                                                  \
            fprintf(stderr, "%s:%d: %s: %s = %lld, want %lld\n", __FILE__,    \
                    __LINE__, tb_test, #got, got_, want_);                    \
            tb_failures++;                                                    \
        }                                                                     \
    } while (0)

/* The instant the tests' tables beat their heartbeat. */
#define TB_T0 1700000000000000000LL
#define TB_S 1000000000LL

/* Header offsets, from docs/shared-table.md. */
enum {
    TB_MAGIC = 0, TB_VERSION = 8, TB_SHARDS = 12, TB_SHARD_SHIFT = 16,
    TB_MAX_KEY = 20, TB_SEED = 24, TB_TABLE_SIZE = 32, TB_STATE_SIZE = 40,
    TB_POLICY_ACTIVE = 48, TB_POLICY_SEQ = 56, TB_STATE = 60, TB_HEARTBEAT = 64,
    TB_SHARD_TABLE = 72, TB_RECORDS_OFF = 80, TB_RECORDS_SIZE = 88,
    TB_DIRTY_OFF = 96, TB_COUNTERS_OFF = 104, TB_COUNTED = 112,
    TB_GENERATION = 120
};

/* Policy actions and counters. */
enum { TB_LIMIT = 0, TB_ALLOW = 1, TB_DENY = 2 };
enum { TB_OK = 0, TB_NO = 1, TB_DRY = 2 };
#define TB_STRIPES 64

/* tb_policy describes one policy; the first of a set is the default and
 * has no prefix. */
struct tb_policy {
    int action;
    int dry_run;
    uint32_t burst;
    double rate;        /* tokens per second */
    const char *prefix; /* NULL or "" for the default */
};

/* tb is a table and its state under construction. */
struct tb {
    unsigned char *table, *state;
    size_t table_len, state_len;
    uint32_t shards, shift, slots, max_key, np;
    uint64_t seed;
    uint64_t shard_table, index_off, policy_off, spare_off, spare_len;
    uint64_t records_off, records_size, dirty_off, counters_off;
    uint32_t next_ref;  /* the next free 8-byte unit of the record area */
};

/* tb_make builds a live table at heartbeat now: shards (a power of two)
 * of slots index slots each, the np policies of pols (counted_policies =
 * np), tags up to max_key bytes, a record area of records_size bytes.
 * It aborts on failure. */
void tb_make(struct tb *b, uint32_t shards, uint32_t slots, uint32_t max_key,
             uint64_t seed, const struct tb_policy *pols, uint32_t np,
             uint64_t records_size, int64_t now);

/* tb_write_policies writes the policy block of pols at off in the table
 * file (the active one or the spare room) and returns its size. */
uint64_t tb_write_policies(struct tb *b, uint64_t off, const struct tb_policy *pols,
                           uint32_t np);

/* tb_add tracks key (n bytes) under policy pi with tat: a record and its
 * index slot. It returns the record's reference. */
uint32_t tb_add(struct tb *b, const void *key, size_t n, uint16_t pi, int64_t tat);

/* Accessors of the state and the table, for checks and for damage. */
unsigned char *tb_rec(struct tb *b, uint32_t ref);
int64_t tb_tat(struct tb *b, uint32_t ref);
uint32_t tb_unreported(struct tb *b, uint32_t ref);
uint32_t tb_refused(struct tb *b, uint32_t ref);
int tb_dirty(struct tb *b, uint32_t ref);
uint64_t tb_counter(struct tb *b, uint32_t pi, int which); /* summed over the stripes */
/* tb_fold moves the counters of every stripe of state (laid out as b's)
 * into stripe 0: a decision counts in its CPU's stripe, so two states
 * agree when their folded counters do. */
void tb_fold(const struct tb *b, unsigned char *state);
uint32_t tb_shard_of(struct tb *b, const void *key, size_t n);
uint32_t tb_stripe_of(const void *key, size_t n, uint64_t seed); /* the counters' stripe */
uint64_t tb_slot_of(struct tb *b, uint32_t ref); /* the table offset of ref's slot */
int64_t tb_per_token(double rate);

/* Little-endian words at an offset of a buffer. */
uint64_t tb_get64(const unsigned char *p, uint64_t off);
uint32_t tb_get32(const unsigned char *p, uint64_t off);
void tb_put64(unsigned char *p, uint64_t off, uint64_t v);
void tb_put32(unsigned char *p, uint64_t off, uint32_t v);
void tb_put16(unsigned char *p, uint64_t off, uint16_t v);

void tb_free(struct tb *b);

/* tb_std_make builds the table of most tests: 4 shards of 64 slots, tags
 * up to TB_STD_MAX_KEY bytes, and these policies (per_token, allow_at):
 *   0 default limit 3/s (1 s, 2 s)   5 "a"   limit 10 at 10/s
 *   1 "ok:"  allow                    6 "ab"  limit 20 at 100/s
 *   2 "no:"  deny                     7 "abc" limit 30 at 1000/s
 *   3 "dry:" deny, dry run            8 "h:"  limit 5 at 2/s (0.5 s, 2 s)
 *   4 "drl:" limit 2/s, dry run       9 "t:"  limit 50 at 100/s (10 ms) */
#define TB_STD_MAX_KEY 16
void tb_std_make(struct tb *b);

/* tb_map maps b with dt_map, aborting on failure. */
dt_table *tb_map(struct tb *b);

/* tb_decide is dt_decide of a C string. */
int tb_decide(dt_table *t, const char *tag, int64_t now, dt_result *res);

/* The test suites outside test_table.c. */
void test_attach(void);
void test_garbage(void);
void test_fuzz(void);
void test_threads(void);
int write_golden(const char *dir);

#endif
