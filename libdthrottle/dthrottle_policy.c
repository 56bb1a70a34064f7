/* dthrottle_policy.c: the policy block (docs/shared-table.md, "Policy
 * block"), read in place: the block in force, the trie from a tag to its
 * policy, a policy's words and name, and whether policy_seq still holds
 * (the block is read as a seqlock; dthrottle_table.c's decision commits
 * only when it does). dt_policy states a policy as the headers do. Every
 * count and offset the block holds is checked against the table file
 * before what it names is read; a walk visits at most a tag's length
 * plus one nodes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "dthrottle_internal.h"

/* dt_pblock_read finds the block policy_active names; 0, or -1 when it does
 * not fit in the table file. */
int dt_pblock_read(const struct dt_view *v, struct dt_pblock *b)
{
    uint64_t off = ld64(v->table + H_POLICY_ACTIVE, __ATOMIC_RELAXED);
    uint64_t size;
    const unsigned char *p;

    if ((off & 7) != 0 || !fits(off, 16, v->table_len)) {
        return -1;
    }
    p = v->table + off;
    b->np = ld32(p, __ATOMIC_RELAXED);
    b->nn = ld32(p + 4, __ATOMIC_RELAXED);
    b->ne = ld32(p + 8, __ATOMIC_RELAXED);
    b->names = ld32(p + 12, __ATOMIC_RELAXED);
    /* Each count is below 2^32: the sum cannot overflow 64 bits. */
    size = (uint64_t)b->np * DT_POLICY_SIZE + (uint64_t)b->nn * 8 + (uint64_t)b->ne * 8;
    if (b->np == 0 || b->nn == 0 || !fits(off + 16, size, v->table_len)) {
        return -1;
    }
    b->policies = p + 16;
    b->nodes = b->policies + (uint64_t)b->np * DT_POLICY_SIZE;
    b->edges = b->nodes + (uint64_t)b->nn * 8;
    return 0;
}

/* find_edge returns the child of the node whose edges are edges[first,
 * first+n) for byte c, or -1 when it has none: a binary search over edges
 * sorted by byte, the range checked by the caller. */
static int64_t find_edge(const struct dt_pblock *b, uint32_t first, uint32_t n,
                         unsigned char c)
{
    uint32_t lo = first, hi = first + n;

    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        uint64_t e = ld64(b->edges + (uint64_t)mid * 8, __ATOMIC_RELAXED);
        unsigned char eb = (unsigned char)e;

        if (eb == c) {
            return (int64_t)(e >> 32);
        }
        if (eb < c) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return -1;
}

/* dt_policy_of walks the trie from the root, one tag byte a step: the policy
 * of the tag's longest prefix in it, 0 (the default) for none, or -1 when
 * the trie names a node, edge or policy outside the block. At most n+1
 * nodes are visited. */
int dt_policy_of(const struct dt_pblock *b, const unsigned char *tag, size_t n)
{
    uint32_t node = 0;
    int best = 0;

    for (size_t i = 0;; i++) {
        uint64_t w;
        uint32_t first, cnt, pol;
        int64_t next;

        if (node >= b->nn) {
            return -1;
        }
        w = ld64(b->nodes + (uint64_t)node * 8, __ATOMIC_RELAXED);
        first = (uint32_t)w;
        cnt = (uint32_t)(w >> 32) & 0xFFFF;
        pol = (uint32_t)(w >> 48);
        if (pol != 0) {
            best = (int)pol;
        }
        if (i == n || cnt == 0) {
            break;
        }
        if (!fits(first, cnt, b->ne)) {
            return -1;
        }
        if ((next = find_edge(b, first, cnt, tag[i])) < 0) {
            break;
        }
        node = (uint32_t)next;
    }
    return (uint32_t)best < b->np ? best : -1;
}

/* dt_policy_read reads policy pi (< b->np). */
void dt_policy_read(const struct dt_pblock *b, int pi, struct dt_policy_words *p)
{
    const unsigned char *q = b->policies + (uint64_t)pi * DT_POLICY_SIZE;
    uint64_t w = ld64(q, __ATOMIC_RELAXED);

    p->action = (unsigned)(w & 0xFF);
    p->dry_run = (unsigned)(w >> 8) & 0xFF;
    p->burst = (uint32_t)(w >> 32);
    p->per_token = (int64_t)ld64(q + 8, __ATOMIC_RELAXED);
    p->allow_at = (int64_t)ld64(q + 16, __ATOMIC_RELAXED);
}

/* dt_seq_holds reports whether policy_seq is still seq: the policy words
 * read since are a consistent set. */
int dt_seq_holds(const struct dt_view *v, uint32_t seq)
{
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return ld32(v->table + H_POLICY_SEQ, __ATOMIC_RELAXED) == seq;
}

/* ---- A policy as the headers state it. ---- */

/* name_of copies the name of policy pi from the names after the edges
 * into out (size bytes, NUL-terminated), or the default name when the
 * block carries none, or they do not fit in the table file. */
static void name_of(const struct dt_view *v, const struct dt_pblock *b, int pi,
                    char *out, size_t size)
{
    const unsigned char *q = b->edges + (uint64_t)b->ne * 8;
    uint64_t left = b->names;

    out[0] = '\0';
    if (!fits((uint64_t)(q - v->table), left, v->table_len)) {
        left = 0;
    }
    for (int i = 0; left >= 2; i++) {
        /* Names are not aligned: two byte loads, little-endian. */
        uint64_t k = (uint64_t)__atomic_load_n(q, __ATOMIC_RELAXED) |
                     (uint64_t)__atomic_load_n(q + 1, __ATOMIC_RELAXED) << 8;
        size_t j;

        if (k > left - 2) {
            break;
        }
        if (i == pi) {
            for (j = 0; j < k && j + 1 < size; j++) {
                out[j] = (char)__atomic_load_n(q + 2 + j, __ATOMIC_RELAXED);
            }
            out[j] = '\0';
            break;
        }
        q += 2 + k;
        left -= 2 + k;
    }
    if (out[0] == '\0') {
        if (pi == 0) {
            snprintf(out, size, "default");
        } else {
            snprintf(out, size, "%d", pi);
        }
    }
}

int dt_policy(dt_table *t, int policy, dt_policy_info *out)
{
    const struct dt_view *v = __atomic_load_n(&t->view, __ATOMIC_ACQUIRE);
    struct dt_pblock b;
    uint64_t w;
    uint32_t seq;

    if (v == NULL) {
        errno = ENOTCONN;
        return -1;
    }
    seq = ld32(v->table + H_POLICY_SEQ, __ATOMIC_ACQUIRE);
    if ((seq & 1) != 0 || dt_pblock_read(v, &b) != 0) {
        errno = EAGAIN;
        return -1;
    }
    if (policy < 0 || (uint32_t)policy >= b.np) {
        errno = ENOENT;
        return -1;
    }
    const unsigned char *q = b.policies + (uint64_t)policy * DT_POLICY_SIZE;
    w = ld64(q, __ATOMIC_RELAXED);
    out->action = (int)(w & 0xFF);
    out->dry_run = (int)((w >> 8) & 0xFF);
    out->burst = (uint32_t)(w >> 32);
    w = ld64(q + 24, __ATOMIC_RELAXED);
    memcpy(&out->rate, &w, sizeof(out->rate));
    name_of(v, &b, policy, out->name, sizeof(out->name));
    if (!dt_seq_holds(v, seq)) {
        errno = EAGAIN;
        return -1;
    }
    return 0;
}
