/* dthrottle_quota.c: the quota block of the table file, where the daemon
 * publishes the limits callers stated with their requests (Gubernator's
 * API, the HTTP endpoint's limit and per), so that a tag the daemon has
 * put under such a limit is decided in process under it. See
 * docs/shared-table.md, "Quota block".
 *
 * An entry is read as a seqlock: its seq (even, not 0) before, the words
 * with relaxed loads, an acquire fence, seq again.
 */
#include "dthrottle_internal.h"

/* Quota entry fields and kinds. */
enum {
    Q_SEQ = 0,
    Q_KIND = 4,
    Q_BURST = 8,
    Q_PER_TOKEN = 16,
    Q_WINDOW = 24,
    QK_LEAKY = 1,
    QK_WINDOW = 2
};

int dt_quota_read(const struct dt_view *v, uint32_t k, struct dt_policy_words *p,
                  int64_t *window)
{
    const unsigned char *e;
    uint32_t seq, kind, burst;
    int64_t per, win;

    if (k >= v->quota_count) {
        return -1;
    }
    e = v->table + v->quota_off + (uint64_t)k * DT_QUOTA_ENTRY;
    seq = ld32(e + Q_SEQ, __ATOMIC_ACQUIRE);
    kind = ld32(e + Q_KIND, __ATOMIC_RELAXED) & 0xFF;
    burst = ld32(e + Q_BURST, __ATOMIC_RELAXED);
    per = (int64_t)ld64(e + Q_PER_TOKEN, __ATOMIC_RELAXED);
    win = (int64_t)ld64(e + Q_WINDOW, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (seq == 0 || (seq & 1) != 0 || ld32(e + Q_SEQ, __ATOMIC_RELAXED) != seq) {
        return -1;
    }
    if (!((kind == QK_LEAKY && win == 0) || (kind == QK_WINDOW && win > 0))) {
        return -1;
    }
    /* As the daemon writes them: allow_at = (burst-1) * per_token, at
     * most a quarter of INT64_MAX. */
    if (burst < 1 || per < 1 || per > (INT64_MAX / 4) / (int64_t)burst) {
        return -1;
    }
    p->action = ACT_LIMIT;
    p->dry_run = 0;
    p->burst = burst;
    p->per_token = per;
    p->allow_at = (int64_t)(burst - 1) * per;
    *window = win;
    return 0;
}
