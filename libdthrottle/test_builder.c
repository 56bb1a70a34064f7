/* test_builder.c: tables and states made in memory from
 * docs/shared-table.md; see test_builder.h. Every field is written byte
 * by byte, little-endian, at the offset the doc gives it. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dthrottle_table.h"
#include "test_builder.h"

#define ALIGN(x, a) (((x) + (a) - 1) / (a) * (a))

static void die(const char *what)
{
    fprintf(stderr, "test_builder: %s\n", what);
    abort();
}

uint64_t tb_get64(const unsigned char *p, uint64_t off)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = v << 8 | p[off + (uint64_t)i];
    }
    return v;
}

uint32_t tb_get32(const unsigned char *p, uint64_t off)
{
    return (uint32_t)p[off] | (uint32_t)p[off + 1] << 8 | (uint32_t)p[off + 2] << 16 |
           (uint32_t)p[off + 3] << 24;
}

void tb_put64(unsigned char *p, uint64_t off, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[off + (uint64_t)i] = (unsigned char)(v >> (8 * i));
    }
}

void tb_put32(unsigned char *p, uint64_t off, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[off + (uint64_t)i] = (unsigned char)(v >> (8 * i));
    }
}

void tb_put16(unsigned char *p, uint64_t off, uint16_t v)
{
    p[off] = (unsigned char)v;
    p[off + 1] = (unsigned char)(v >> 8);
}

int64_t tb_per_token(double rate)
{
    double per = round(1e9 / rate);
    return per < 1 ? 1 : (int64_t)per;
}

/* ---- The trie of prefixes (docs/shared-table.md, "Policy block"). ---- */

/* tnode is a node of the trie as it is built: a child per byte. */
struct tnode {
    int child[256];
    int policy;
};

/* trie is the trie of pols' prefixes, laid out breadth first: node 0 the
 * root, each node's edges sorted by byte. */
struct trie {
    uint32_t nn, ne;
    uint64_t nodes[256]; /* first | n << 32 | policy << 48 */
    uint64_t edges[256]; /* byte | next << 32 */
};

static void build_trie(const struct tb_policy *pols, uint32_t np, struct trie *tr)
{
    struct tnode *t = calloc(256, sizeof(*t));
    int order[256], index[256], nt = 1, head = 0, tail = 0;

    if (t == NULL) {
        die("out of memory");
    }
    for (uint32_t pi = 1; pi < np; pi++) {
        const char *p = pols[pi].prefix ? pols[pi].prefix : "";
        int at = 0;
        for (; *p; p++) {
            unsigned char c = (unsigned char)*p;
            if (t[at].child[c] == 0) {
                if (nt == 256) {
                    die("trie too big");
                }
                t[at].child[c] = nt++;
            }
            at = t[at].child[c];
        }
        t[at].policy = (int)pi;
    }
    /* Breadth first: a node's new index is its place in the order. */
    order[tail++] = 0;
    while (head < tail) {
        int at = order[head++];
        for (int c = 0; c < 256; c++) {
            if (t[at].child[c] != 0) {
                order[tail++] = t[at].child[c];
            }
        }
    }
    for (int i = 0; i < nt; i++) {
        index[order[i]] = i;
    }
    tr->nn = (uint32_t)nt;
    tr->ne = 0;
    for (int i = 0; i < nt; i++) {
        struct tnode *n = &t[order[i]];
        uint64_t first = tr->ne, cnt = 0;
        for (int c = 0; c < 256; c++) {
            if (n->child[c] != 0) {
                tr->edges[tr->ne++] = (uint64_t)c | (uint64_t)index[n->child[c]] << 32;
                cnt++;
            }
        }
        tr->nodes[i] = first | cnt << 32 | (uint64_t)n->policy << 48;
    }
    free(t);
}

static uint64_t policies_size(const struct tb_policy *pols, uint32_t np)
{
    struct trie tr;
    build_trie(pols, np, &tr);
    return 16 + 32 * (uint64_t)np + 8 * (uint64_t)tr.nn + 8 * (uint64_t)tr.ne;
}

uint64_t tb_write_policies(struct tb *b, uint64_t off, const struct tb_policy *pols,
                           uint32_t np)
{
    unsigned char *p = b->table + off;
    uint64_t at = 16;
    struct trie tr;

    build_trie(pols, np, &tr);
    tb_put32(p, 0, np);
    tb_put32(p, 4, tr.nn);
    tb_put32(p, 8, tr.ne);
    tb_put32(p, 12, 0);
    for (uint32_t i = 0; i < np; i++, at += 32) {
        int64_t per = tb_per_token(pols[i].rate);
        double rate = pols[i].rate;
        uint64_t bits;

        memcpy(&bits, &rate, sizeof(bits));
        p[at] = (unsigned char)pols[i].action;
        p[at + 1] = (unsigned char)pols[i].dry_run;
        tb_put16(p, at + 2, 0);
        tb_put32(p, at + 4, pols[i].burst);
        tb_put64(p, at + 8, (uint64_t)per);
        tb_put64(p, at + 16, (uint64_t)((int64_t)(pols[i].burst ? pols[i].burst - 1 : 0) * per));
        tb_put64(p, at + 24, bits);
    }
    for (uint32_t i = 0; i < tr.nn; i++, at += 8) {
        tb_put32(p, at, (uint32_t)tr.nodes[i]);
        tb_put16(p, at + 4, (uint16_t)(tr.nodes[i] >> 32));
        tb_put16(p, at + 6, (uint16_t)(tr.nodes[i] >> 48));
    }
    for (uint32_t i = 0; i < tr.ne; i++, at += 8) {
        p[at] = (unsigned char)tr.edges[i];
        p[at + 1] = p[at + 2] = p[at + 3] = 0;
        tb_put32(p, at + 4, (uint32_t)(tr.edges[i] >> 32));
    }
    return at;
}

/* ---- The files. ---- */

static unsigned char *zalloc(size_t n)
{
    unsigned char *p = aligned_alloc(4096, n);
    if (p == NULL) {
        die("out of memory");
    }
    memset(p, 0, n);
    return p;
}

void tb_make(struct tb *b, uint32_t shards, uint32_t slots, uint32_t max_key,
             uint64_t seed, const struct tb_policy *pols, uint32_t np,
             uint64_t records_size, int64_t now)
{
    static const unsigned char magic[8] = {'D', 'T', 'H', 'T', 'B', 'L', 0, 1};
    uint64_t psize = policies_size(pols, np), dirty_words;

    memset(b, 0, sizeof(*b));
    b->shards = shards;
    b->shift = 64 - (uint32_t)__builtin_ctz(shards);
    b->slots = slots;
    b->max_key = max_key;
    b->np = np;
    b->seed = seed;
    b->next_ref = 1;

    b->shard_table = 4096;
    b->index_off = b->shard_table + 64 * (uint64_t)shards;
    b->policy_off = ALIGN(b->index_off + 8 * (uint64_t)shards * slots, 8);
    b->spare_off = ALIGN(b->policy_off + psize, 8);
    b->spare_len = 4096;
    b->table_len = ALIGN(b->spare_off + b->spare_len, 4096);

    b->records_off = 64;
    b->records_size = ALIGN(records_size, 8);
    dirty_words = (b->records_size / 8 + 63) / 64;
    b->dirty_off = b->records_off + b->records_size;
    b->counters_off = b->dirty_off + 8 * dirty_words;
    b->state_len = ALIGN(b->counters_off + 32 * (uint64_t)TB_STRIPES * np, 4096);

    b->table = zalloc(b->table_len);
    b->state = zalloc(b->state_len);

    memcpy(b->table + TB_MAGIC, magic, 8);
    tb_put32(b->table, TB_VERSION, 1);
    tb_put32(b->table, TB_SHARDS, shards);
    tb_put32(b->table, TB_SHARD_SHIFT, b->shift);
    tb_put32(b->table, TB_MAX_KEY, max_key);
    tb_put64(b->table, TB_SEED, seed);
    tb_put64(b->table, TB_TABLE_SIZE, b->table_len);
    tb_put64(b->table, TB_STATE_SIZE, b->state_len);
    tb_put64(b->table, TB_POLICY_ACTIVE, b->policy_off);
    tb_put32(b->table, TB_POLICY_SEQ, 2);
    tb_put32(b->table, TB_STATE, 1);
    tb_put64(b->table, TB_HEARTBEAT, (uint64_t)now);
    tb_put64(b->table, TB_SHARD_TABLE, b->shard_table);
    tb_put64(b->table, TB_RECORDS_OFF, b->records_off);
    tb_put64(b->table, TB_RECORDS_SIZE, b->records_size);
    tb_put64(b->table, TB_DIRTY_OFF, b->dirty_off);
    tb_put64(b->table, TB_COUNTERS_OFF, b->counters_off);
    tb_put32(b->table, TB_COUNTED, np);
    tb_put64(b->table, TB_GENERATION, 0x5eed5eed12345678ULL);

    for (uint32_t s = 0; s < shards; s++) {
        uint64_t slots_at = b->index_off + 8 * (uint64_t)s * slots;
        tb_put64(b->table, b->shard_table + 64 * (uint64_t)s,
                 (slots_at / 8) << 32 | slots);
    }
    tb_write_policies(b, b->policy_off, pols, np);
}

static size_t uvarint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

uint32_t tb_shard_of(struct tb *b, const void *key, size_t n)
{
    uint64_t h = dt_hash(b->seed, key, n);
    return b->shift == 64 ? 0 : (uint32_t)(h >> b->shift);
}

uint32_t tb_add(struct tb *b, const void *key, size_t n, uint16_t pi, int64_t tat)
{
    uint64_t h = dt_hash(b->seed, key, n), size, at, v;
    uint32_t s = tb_shard_of(b, key, n), f = (uint32_t)h, ref = b->next_ref;
    uint64_t home = ((uint64_t)f * b->slots) >> 32;
    unsigned char *r;

    size = ALIGN(18 + uvarint_len(n) + n, 8);
    if ((uint64_t)ref * 8 + size > b->records_size) {
        die("record area full");
    }
    b->next_ref += (uint32_t)(size / 8);
    r = b->state + b->records_off + (uint64_t)ref * 8;
    tb_put64(r, 0, (uint64_t)tat);
    tb_put32(r, 8, 0);
    tb_put32(r, 12, 0);
    tb_put16(r, 16, pi);
    at = 18;
    for (v = n; v >= 0x80; v >>= 7) {
        r[at++] = (unsigned char)(v | 0x80);
    }
    r[at++] = (unsigned char)v;
    memcpy(r + at, key, n);

    for (uint64_t i = 0; i < b->slots; i++) {
        uint64_t slot = b->index_off + 8 * ((uint64_t)s * b->slots + (home + i) % b->slots);
        if (tb_get64(b->table, slot) == 0) {
            tb_put64(b->table, slot, (uint64_t)f << 32 | ref);
            return ref;
        }
    }
    die("shard full");
    return 0;
}

unsigned char *tb_rec(struct tb *b, uint32_t ref)
{
    return b->state + b->records_off + (uint64_t)ref * 8;
}

int64_t tb_tat(struct tb *b, uint32_t ref)
{
    return (int64_t)tb_get64(tb_rec(b, ref), 0);
}

uint32_t tb_unreported(struct tb *b, uint32_t ref)
{
    return tb_get32(tb_rec(b, ref), 8);
}

uint32_t tb_refused(struct tb *b, uint32_t ref)
{
    return tb_get32(tb_rec(b, ref), 12);
}

int tb_dirty(struct tb *b, uint32_t ref)
{
    return (int)(tb_get64(b->state, b->dirty_off + 8 * (uint64_t)(ref >> 6)) >> (ref & 63) & 1);
}

uint64_t tb_counter(struct tb *b, uint32_t pi, int which)
{
    uint64_t sum = 0;

    for (uint64_t stripe = 0; stripe < 64; stripe++) {
        sum += tb_get64(b->state, b->counters_off + 32 * (stripe * b->np + pi) +
                                      8 * (uint64_t)which);
    }
    return sum;
}

void tb_fold(const struct tb *b, unsigned char *state)
{
    for (uint64_t stripe = 1; stripe < 64; stripe++) {
        for (uint64_t i = 0; i < 4 * (uint64_t)b->np; i++) {
            uint64_t from = b->counters_off + 32 * stripe * b->np + 8 * i;
            uint64_t to = b->counters_off + 8 * i;

            tb_put64(state, to, tb_get64(state, to) + tb_get64(state, from));
            tb_put64(state, from, 0);
        }
    }
}

uint32_t tb_stripe_of(const void *key, size_t n, uint64_t seed)
{
    return (uint32_t)dt_hash(seed, key, n) >> 26;
}

uint64_t tb_slot_of(struct tb *b, uint32_t ref)
{
    for (uint64_t i = 0; i < (uint64_t)b->shards * b->slots; i++) {
        uint64_t off = b->index_off + 8 * i, e = tb_get64(b->table, off);
        if (e != 0 && (uint32_t)e == ref) {
            return off;
        }
    }
    die("no slot");
    return 0;
}

void tb_free(struct tb *b)
{
    free(b->table);
    free(b->state);
    memset(b, 0, sizeof(*b));
}

/* ---- The standard table of the tests. ---- */

/* The policies of most tests: the default limits 3 per second. */
static const struct tb_policy std_pols[] = {
    {TB_LIMIT, 0, 3, 1, NULL},      /* 0: default, per_token 1 s, allow_at 2 s */
    {TB_ALLOW, 0, 0, 1, "ok:"},     /* 1 */
    {TB_DENY, 0, 0, 1, "no:"},      /* 2 */
    {TB_DENY, 1, 0, 1, "dry:"},     /* 3: a dry run of deny */
    {TB_LIMIT, 1, 2, 1, "drl:"},    /* 4: a dry run of a limit */
    {TB_LIMIT, 0, 10, 10, "a"},     /* 5 */
    {TB_LIMIT, 0, 20, 100, "ab"},   /* 6 */
    {TB_LIMIT, 0, 30, 1000, "abc"}, /* 7 */
    {TB_LIMIT, 0, 5, 2, "h:"},      /* 8: per_token 0.5 s, allow_at 2 s */
    {TB_LIMIT, 0, 50, 100, "t:"},   /* 9: per_token 10 ms */
};

void tb_std_make(struct tb *b)
{
    tb_make(b, 4, 64, TB_STD_MAX_KEY, 0x0123456789abcdefULL, std_pols,
            (uint32_t)(sizeof(std_pols) / sizeof(std_pols[0])), 8192, TB_T0);
}

dt_table *tb_map(struct tb *b)
{
    dt_table *t = NULL;
    if (dt_map(b->table, b->table_len, b->state, b->state_len, &t) != 0) {
        fprintf(stderr, "%s: dt_map: %s\n", tb_test, strerror(errno));
        abort();
    }
    return t;
}

int tb_decide(dt_table *t, const char *tag, int64_t now, dt_result *res)
{
    return dt_decide(t, tag, strlen(tag), now, res);
}
