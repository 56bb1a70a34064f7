/* dthrottle_table.c: the decision made in process. See dthrottle_table.h
 * and docs/shared-table.md, whose steps the comments below number; the
 * layout's constants are in dthrottle_internal.h, the policy block in
 * dthrottle_policy.c, the header's checks in dthrottle_view.c, the hash in
 * dthrottle_hash.c, the socket and the mappings in dthrottle_attach.c.
 *
 * Neither file is trusted. The fields that never change for a table's
 * life are read once and checked by dt_view_init; everything else (the
 * state, heartbeat, policy and max_key words, the shards' index words,
 * the slots, the policy block, every record) is read when it is used,
 * with the atomic load the layout asks for, and checked against the
 * mappings' sizes before anything it names is touched. Loops run at most
 * as many times as the count that bounds them (slots, tag bytes, edges),
 * and the compare-and-swap at most DT_CAS_TRIES times.
 *
 * The policy block is read as a seqlock: policy_seq (even) before, the
 * policy words with relaxed loads, an acquire fence, policy_seq again; a
 * decision is committed only when both reads agree.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <string.h>

#include "dthrottle_internal.h"

#define DT_CAS_TRIES 64 /* lost compare-and-swaps before asking */

/* ---- The state file: records, dirty bits, counters. ---- */

/* count adds one to counter c of (stripe, pi); a policy past the counted
 * ones has no counters and is not counted. dt_view_init checked that every
 * stripe < DT_STRIPES and pi < counted fit in the state file. */
static void count(const struct dt_view *v, uint32_t stripe, int pi, int c)
{
    uint64_t off;

    if ((uint32_t)pi >= v->counted || stripe >= DT_STRIPES) {
        return;
    }
    off = v->counters_off +
          ((uint64_t)stripe * v->counted + (uint64_t)pi) * DT_COUNTERS_SIZE +
          (uint64_t)c * 8;

    __atomic_fetch_add((uint64_t *)(void *)(v->state + off), 1, __ATOMIC_RELAXED);
}

/* mark_dirty sets the dirty bit of record ref, so that the daemon finds it
 * at its next report. */
static void mark_dirty(const struct dt_view *v, uint32_t ref)
{
    uint64_t word = ref >> 6;

    if (word < v->dirty_words) {
        __atomic_fetch_or((uint64_t *)(void *)(v->state + v->dirty_off + word * 8),
                          (uint64_t)1 << (ref & 63), __ATOMIC_RELEASE);
    }
}

/* record returns record ref, or NULL when its fixed fields do not lie
 * within the record area. */
static unsigned char *record(const struct dt_view *v, uint32_t ref)
{
    uint64_t off = (uint64_t)ref * 8;

    if (ref == 0 || !fits(off, R_KEY, v->records_size)) {
        return NULL;
    }
    return v->state + v->records_off + off;
}

/* same_bytes reports whether the n bytes at a and b are equal. Up to 16
 * bytes (most tags: addresses, user IDs) it compares two overlapping
 * words of each, within the n bytes, and calls nothing. */
static inline int same_bytes(const unsigned char *a, const unsigned char *b, size_t n)
{
    if (n >= 8) {
        if (n > 16) {
            return memcmp(a, b, n) == 0;
        }
        return ((ldu8(a) ^ ldu8(b)) | (ldu8(a + n - 8) ^ ldu8(b + n - 8))) == 0;
    }
    if (n >= 4) {
        return ((ldu4(a) ^ ldu4(b)) | (ldu4(a + n - 4) ^ ldu4(b + n - 4))) == 0;
    }
    if (n == 0) {
        return 1;
    }
    /* 1 to 3 bytes: the first, the middle and the last cover them. */
    return ((a[0] ^ b[0]) | (a[n >> 1] ^ b[n >> 1]) | (a[n - 1] ^ b[n - 1])) == 0;
}

/* key_is compares record ref's key with tag: 1 the same, 0 another, -1
 * when the record or its key does not lie within the record area. The
 * key is read once, length first: a writer changing it meanwhile gives
 * a mismatch, never a read past the area. */
static int key_is(const struct dt_view *v, uint32_t ref, const unsigned char *tag,
                  size_t n)
{
    const unsigned char *area = v->state + v->records_off;
    uint64_t pos = (uint64_t)ref * 8 + R_KEY, len = 0;
    unsigned char c;

    if (ref == 0 || pos >= v->records_size) {
        return -1; /* the record's fixed fields and a length byte do not fit */
    }
    /* The key length, a uvarint of at most 10 bytes: one byte below 128. */
    c = __atomic_load_n(area + pos, __ATOMIC_RELAXED);
    pos++;
    len = c & 0x7F;
    for (int shift = 7; c >= 0x80; shift += 7) {
        if (pos >= v->records_size || shift > 63) {
            return -1;
        }
        c = __atomic_load_n(area + pos, __ATOMIC_RELAXED);
        pos++;
        len |= (uint64_t)(c & 0x7F) << shift;
    }
    if (!fits(pos, len, v->records_size)) {
        return -1;
    }
    if (len != n) {
        return 0;
    }
    return same_bytes(area + pos, tag, n);
}

/* find probes shard s's index for a key of fragment f that is tag (step
 * 6): its reference, or 0 (ask) at an empty slot, after n slots, or when
 * the index does not lie within the table file. A slot whose record does
 * not lie within the record area holds no key, so not the tag's: the
 * probe goes on. */
static uint32_t find(const struct dt_view *v, uint32_t s, uint32_t f,
                     const unsigned char *tag, size_t n)
{
    uint64_t w = ld64(v->table + v->shard_table + (uint64_t)s * DT_SHARD_ENTRY,
                      __ATOMIC_ACQUIRE);
    uint64_t off = (w >> 32) * 8, slots = w & 0xFFFFFFFF, i;

    if (slots == 0 || !fits(off, slots * 8, v->table_len)) {
        return 0;
    }
    i = ((uint64_t)f * slots) >> 32;
    for (uint64_t probed = 0; probed < slots; probed++) {
        uint64_t e = ld64(v->table + off + i * 8, __ATOMIC_ACQUIRE);

        if (e == 0) {
            return 0;
        }
        if ((uint32_t)(e >> 32) == f && key_is(v, (uint32_t)e, tag, n) == 1) {
            return (uint32_t)e;
        }
        if (++i == slots) {
            i = 0;
        }
    }
    return 0;
}

/* ---- The decision (docs/shared-table.md, "The decision"). ---- */

/* headers fills the result of limit policy p for a bucket ahead of now
 * by ahead ns after the decision (tat' - now on OK, tat - now when the
 * limit refused), as docs/shared-table.md says: on OK, remaining is
 * (allow_at + per_token - (tat' - now)) / per_token, the whole tokens
 * left (the numerator is allow_at - (tat - now) >= 0, so dividing rounds
 * down), at least 0; when refused, 0 and the time until a token. */
static void headers(dt_result *res, const struct dt_policy_words *p, int64_t ahead, int refused)
{
    int64_t q = (p->allow_at - ahead + p->per_token) / p->per_token; /* no overflow: ahead >= per_token */

    res->remaining = refused || q < 0 ? 0 : q;
    res->retry_after_ns = refused ? ahead - p->allow_at : 0;
    res->reset_ns = ahead;
}

/* stripe_here is the stripe this thread counts in: its CPU's, so that
 * threads (of any process) running at once write different cache lines,
 * and one CPU's counts stay in its cache. sched_getcpu reads the rseq
 * area (glibc 2.35 and later) or the vDSO, with no system call; where it
 * fails, the stripe of the tag's hash (h's low 32 bits' top 6 bits). */
static uint32_t stripe_here(uint64_t h)
{
    int cpu = sched_getcpu();

    return cpu >= 0 ? (uint32_t)cpu % DT_STRIPES : (uint32_t)h >> 26;
}

/* fixed answers an allow or deny policy (step 4). */
static int fixed(const struct dt_view *v, int pi, const struct dt_policy_words *p)
{
    uint32_t s = stripe_here(0);

    if (p->action == ACT_ALLOW) {
        count(v, s, pi, C_OK);
        return DT_OK;
    }
    if (p->dry_run) {
        count(v, s, pi, C_DRY);
        count(v, s, pi, C_OK);
        return DT_OK;
    }
    count(v, s, pi, C_NO);
    return DT_NO;
}

/* window_start is the start of the window of length w (> 0) holding t:
 * windows are aligned to multiples of w since the Unix epoch. */
static int64_t window_start(int64_t t, int64_t w)
{
    int64_t m = t % w;

    return m < 0 ? t - m - w : t - m;
}

/* window_ceil is the start of the first window of length w starting at
 * or after t. */
static int64_t window_ceil(int64_t t, int64_t w)
{
    int64_t s = window_start(t, w);

    return s < t ? s + w : s;
}

/* spend decides for record ref under limit policy pi, whose words were
 * read under seq, counting in stripe s (steps 7 to 10); a record the
 * daemon put under a limit its callers stated is decided under that
 * limit (spend_under). */
static int spend_under(const struct dt_view *v, uint32_t seq, uint32_t s, int pi,
                       uint16_t expect, const struct dt_policy_words *p, int64_t window,
                       uint32_t ref, const unsigned char *tag, size_t n, int64_t now,
                       dt_result *res);

static int spend(const struct dt_view *v, uint32_t seq, uint32_t s, int pi,
                 const struct dt_policy_words *p, uint32_t ref, const unsigned char *tag,
                 size_t n, int64_t now, dt_result *res)
{
    return spend_under(v, seq, s, pi, (uint16_t)pi, p, 0, ref, tag, n, now, res);
}

/* stated decides for record ref, whose policy index is rp, under the
 * stated limit of quota entry rp - DT_QUOTA_BASE, with policy pi's dry
 * run and counters. */
static int stated(const struct dt_view *v, uint32_t seq, uint32_t s, int pi,
                  const struct dt_policy_words *p, uint16_t rp, uint32_t ref,
                  const unsigned char *tag, size_t n, int64_t now, dt_result *res)
{
    struct dt_policy_words q;
    int64_t window;

    if (dt_quota_read(v, (uint32_t)rp - DT_QUOTA_BASE, &q, &window) != 0) {
        return DT_ASK;
    }
    q.dry_run = p->dry_run;
    res->limit = q.burst;
    return spend_under(v, seq, s, pi, rp, &q, window, ref, tag, n, now, res);
}

/* spend_under is spend for a record whose policy index must be expect,
 * under limit words p: a window of length window (> 0) stands still at
 * the window's start, and a bucket under it is full when its tat is not
 * past that start (docs/design.md, "Limits callers state"). */
static int spend_under(const struct dt_view *v, uint32_t seq, uint32_t s, int pi,
                       uint16_t expect, const struct dt_policy_words *p, int64_t window,
                       uint32_t ref, const unsigned char *tag, size_t n, int64_t now,
                       dt_result *res)
{
    unsigned char *r = record(v, ref);
    int64_t *tatp = (int64_t *)(void *)(r + R_TAT);
    int64_t at = window > 0 ? window_start(now, window) : now;

    for (int tries = 0; tries < DT_CAS_TRIES; tries++) {
        int64_t tat0 = __atomic_load_n(tatp, __ATOMIC_ACQUIRE);
        int64_t tat, ahead, next, after;
        uint16_t rp;

        /* 7: the record still holds the tag, under the same policy. */
        if (tat0 == INT64_MIN || key_is(v, ref, tag, n) != 1) {
            return DT_ASK;
        }
        if ((rp = ld16(r + R_POLICY, __ATOMIC_RELAXED)) != expect) {
            if (tries == 0 && expect == (uint16_t)pi && rp >= DT_QUOTA_BASE) {
                return stated(v, seq, s, pi, p, rp, ref, tag, n, now, res);
            }
            return DT_ASK;
        }
        /* 8, the policy read checked consistent (9) before anything is
         * decided from it, refusals included. */
        tat = tat0 > at ? tat0 : at;
        if (__builtin_sub_overflow(tat, at, &ahead) || !dt_seq_holds(v, seq)) {
            return DT_ASK;
        }
        if (ahead > p->allow_at) {
            headers(res, p, ahead, 1);
            if (window > 0) {
                res->retry_after_ns = window_ceil(tat - p->allow_at, window) - now;
                res->reset_ns = window_ceil(tat, window) - now;
            }
            if (__atomic_fetch_add((uint32_t *)(void *)(r + R_REFUSED), 1,
                                   __ATOMIC_ACQ_REL) == 0) {
                mark_dirty(v, ref);
            }
            if (p->dry_run) {
                count(v, s, pi, C_DRY);
                count(v, s, pi, C_OK);
                return DT_OK;
            }
            count(v, s, pi, C_NO);
            return DT_NO;
        }
        /* 9: served, ahead <= allow_at; a tat + per_token past 2^63 is
         * not one the daemon wrote. */
        if (__builtin_add_overflow(tat, p->per_token, &next) ||
            __builtin_add_overflow(ahead, p->per_token, &after)) {
            return DT_ASK;
        }
        if (__atomic_compare_exchange_n(tatp, &tat0, next, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            /* 10 */
            if (__atomic_fetch_add((uint32_t *)(void *)(r + R_UNREPORTED), 1,
                                   __ATOMIC_ACQ_REL) == 0) {
                mark_dirty(v, ref);
            }
            count(v, s, pi, C_OK);
            headers(res, p, after, 0);
            if (window > 0) {
                res->reset_ns = window_ceil(next, window) - now;
            }
            return DT_OK;
        }
    }
    return DT_ASK;
}

/* table_left answers step 2: DT_LEFT when the daemon left the table,
 * DT_ASK when it asks to be asked (state 3), 0 when live. */
static int table_left(const struct dt_view *v, int64_t now)
{
    if (!dt_view_live(v, now)) {
        return DT_LEFT;
    }
    return ld32(v->table + H_STATE, __ATOMIC_ACQUIRE) == ST_LIVE ? 0 : DT_ASK;
}

int dt_decide(dt_table *t, const char *tag, size_t n, int64_t now, dt_result *res)
{
    const unsigned char *k = (const unsigned char *)tag;
    const struct dt_view *v;
    struct dt_pblock b;
    struct dt_policy_words p;
    dt_result scratch;
    uint32_t seq, shard;
    uint64_t h;
    uint32_t ref;
    int pi, rc;

    if (res == NULL) {
        res = &scratch;
    }
    memset(res, 0, sizeof(*res));
    res->policy = -1;
    /* 1 */
    if (n == 0) {
        return DT_OK;
    }
    if ((v = __atomic_load_n(&t->view, __ATOMIC_ACQUIRE)) == NULL) {
        return DT_ASK;
    }
    /* 2 */
    if ((rc = table_left(v, now)) != 0) {
        return rc;
    }
    /* 3 */
    seq = ld32(v->table + H_POLICY_SEQ, __ATOMIC_ACQUIRE);
    if ((seq & 1) != 0 || dt_pblock_read(v, &b) != 0 || (pi = dt_policy_of(&b, k, n)) < 0) {
        return DT_ASK;
    }
    dt_policy_read(&b, pi, &p);
    res->policy = pi;
    res->limit = p.burst;
    /* 4 */
    if (p.action == ACT_ALLOW || p.action == ACT_DENY) {
        return dt_seq_holds(v, seq) ? fixed(v, pi, &p) : DT_ASK;
    }
    /* 5 (max_key changes with a reload), and a limit policy the daemon
     * would not have made */
    if (n > ld32(v->table + H_MAX_KEY, __ATOMIC_RELAXED) || (uint32_t)pi >= v->counted ||
        p.action != ACT_LIMIT || p.per_token < 1 || p.allow_at < 0) {
        return DT_ASK;
    }
    /* 6 */
    h = dt_hash_mixed(v->seed_mixed, k, n);
    shard = v->shard_shift >= 64 ? 0 : (uint32_t)(h >> v->shard_shift);
    if ((ref = find(v, shard, (uint32_t)h, k, n)) == 0) {
        return DT_ASK;
    }
    /* 7 to 10, counted in the stripe of this CPU */
    return spend(v, seq, stripe_here(h), pi, &p, ref, k, n, now, res);
}
