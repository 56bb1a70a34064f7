/* dthrottle_view.c: the table file's header, read and checked once when a
 * table is mapped (dt_view_init), and the daemon's liveness, read at each
 * decision (dt_view_live). See dthrottle_internal.h and
 * docs/shared-table.md, "Header".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <string.h>

#include "dthrottle_internal.h"

static const unsigned char dt_magic[8] = {'D', 'T', 'H', 'T', 'B', 'L', 0, 1};

int dt_view_init(struct dt_view *v, const void *table, size_t table_len,
                 void *state, size_t state_len)
{
    const unsigned char *h = table;
    uint64_t rec_units;

    memset(v, 0, sizeof(*v));
    if (h == NULL || state == NULL || ((uintptr_t)h & 7) != 0 ||
        ((uintptr_t)state & 7) != 0) {
        return EINVAL;
    }
    if (table_len < H_SIZE || memcmp(h, dt_magic, sizeof(dt_magic)) != 0) {
        return EPROTO;
    }
    if (ld32(h + H_VERSION, __ATOMIC_RELAXED) != DT_VERSION) {
        return EPROTONOSUPPORT;
    }
    v->table = h;
    v->table_len = table_len;
    v->state = state;
    v->state_len = state_len;
    v->shards = ld32(h + H_SHARDS, __ATOMIC_RELAXED);
    v->shard_shift = ld32(h + H_SHARD_SHIFT, __ATOMIC_RELAXED);
    v->counted = ld32(h + H_COUNTED, __ATOMIC_RELAXED);
    v->seed = ld64(h + H_SEED, __ATOMIC_RELAXED);
    v->seed_mixed = dt_mix_seed(v->seed);
    v->shard_table = ld64(h + H_SHARD_TABLE, __ATOMIC_RELAXED);
    v->records_off = ld64(h + H_RECORDS_OFF, __ATOMIC_RELAXED);
    v->records_size = ld64(h + H_RECORDS_SIZE, __ATOMIC_RELAXED);
    v->dirty_off = ld64(h + H_DIRTY_OFF, __ATOMIC_RELAXED);
    v->counters_off = ld64(h + H_COUNTERS_OFF, __ATOMIC_RELAXED);
    v->generation = ld64(h + H_GENERATION, __ATOMIC_RELAXED);

    if (ld64(h + H_TABLE_SIZE, __ATOMIC_RELAXED) != table_len ||
        ld64(h + H_STATE_SIZE, __ATOMIC_RELAXED) != state_len) {
        return EPROTO;
    }
    /* shards a power of two, 1 to 64; the shift takes a hash to one. */
    if (v->shards == 0 || v->shards > DT_MAX_SHARDS ||
        (v->shards & (v->shards - 1)) != 0 ||
        v->shard_shift != 64u - (uint32_t)__builtin_ctz(v->shards)) {
        return EPROTO;
    }
    if ((v->shard_table & 7) != 0 ||
        !fits(v->shard_table, (uint64_t)v->shards * DT_SHARD_ENTRY, table_len)) {
        return EPROTO;
    }
    /* Records: references are u32 in 8-byte units, the dirty bitmap has
     * a bit for each unit of the area. */
    rec_units = v->records_size / 8;
    v->dirty_words = (rec_units + 63) / 64;
    if ((v->records_off & 7) != 0 || !fits(v->records_off, v->records_size, state_len) ||
        (v->dirty_off & 7) != 0 || !fits(v->dirty_off, v->dirty_words * 8, state_len) ||
        (v->counters_off & 7) != 0 ||
        !fits(v->counters_off, (uint64_t)DT_STRIPES * v->counted * DT_COUNTERS_SIZE,
              state_len)) {
        return EPROTO;
    }
    /* The quota block: a table without one, or with one that does not
     * fit, has its stated limits decided by the daemon. */
    v->quota_off = ld64(h + H_QUOTA_OFF, __ATOMIC_RELAXED);
    v->quota_count = ld32(h + H_QUOTA_COUNT, __ATOMIC_RELAXED);
    if (v->quota_count > DT_QUOTA_MAX || (v->quota_off & 7) != 0 ||
        !fits(v->quota_off, (uint64_t)v->quota_count * DT_QUOTA_ENTRY, table_len)) {
        v->quota_count = 0;
    }
    return 0;
}

int dt_view_live(const struct dt_view *v, int64_t now)
{
    uint32_t st = ld32(v->table + H_STATE, __ATOMIC_ACQUIRE);
    int64_t hb = (int64_t)ld64(v->table + H_HEARTBEAT, __ATOMIC_ACQUIRE);
    int64_t age;

    if (st != ST_LIVE && st != ST_ASKING) {
        return 0;
    }
    return !__builtin_sub_overflow(now, hb, &age) && age <= DT_HEARTBEAT_NS;
}
