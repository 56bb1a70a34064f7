/* dthrottle_internal.h: what the library's files share: the layout's
 * constants, the view of a mapped table and the table itself. Not
 * installed.
 *
 *   dthrottle_table.c   the decision (dt_decide)
 *   dthrottle_policy.c  the policy block: a tag's policy, its words, its
 *                       name (dt_policy)
 *   dthrottle_view.c    the header's checks and the daemon's liveness
 *   dthrottle_hash.c    the hash (dt_hash)
 *   dthrottle_socket.c  connecting, and a line out and a reply back
 *   dthrottle_attach.c  a table's life: open, map, ask, reattach, close
 *
 * libdthrottle.c includes them all, to be compiled as one file.
 */
#ifndef DTHROTTLE_INTERNAL_H
#define DTHROTTLE_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dthrottle_table.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "libdthrottle reads the shared table's little-endian words in place: little-endian hosts only"
#endif

/* Internal functions are not exported from libdthrottle.so. */
#define DT_HIDDEN __attribute__((visibility("hidden")))

/* ---- The layout (docs/shared-table.md). ---- */

/* Table file header fields (docs/shared-table.md, "Header"). */
enum {
    H_MAGIC = 0,
    H_VERSION = 8,
    H_SHARDS = 12,
    H_SHARD_SHIFT = 16,
    H_MAX_KEY = 20,
    H_SEED = 24,
    H_TABLE_SIZE = 32,
    H_STATE_SIZE = 40,
    H_POLICY_ACTIVE = 48,
    H_POLICY_SEQ = 56,
    H_STATE = 60,
    H_HEARTBEAT = 64,
    H_SHARD_TABLE = 72,
    H_RECORDS_OFF = 80,
    H_RECORDS_SIZE = 88,
    H_DIRTY_OFF = 96,
    H_COUNTERS_OFF = 104,
    H_COUNTED = 112,
    H_GENERATION = 120,
    H_QUOTA_OFF = 128,
    H_QUOTA_COUNT = 136,
    H_SIZE = 4096
};

/* Values of the header's state word. */
enum { ST_LIVE = 1, ST_RETIRED = 2, ST_ASKING = 3 };

/* Policy actions. */
enum { ACT_LIMIT = 0, ACT_ALLOW = 1, ACT_DENY = 2 };

/* Record fields, from the record's start. */
enum { R_TAT = 0, R_UNREPORTED = 8, R_REFUSED = 12, R_POLICY = 16, R_KEY = 18 };

/* Counters of a (stripe, policy), in u64 units. */
enum { C_OK = 0, C_NO = 1, C_DRY = 2 };

#define DT_SHARD_ENTRY 64       /* bytes per shard entry */
#define DT_POLICY_SIZE 32       /* bytes per policy */
#define DT_COUNTERS_SIZE 32     /* bytes per (stripe, policy) counters */
#define DT_STRIPES 64           /* counter stripes */
#define DT_MAX_SHARDS 64
#define DT_HEARTBEAT_NS 1000000000LL
#define DT_VERSION 1

/* Atomic loads of little-endian words in the mappings. The callers check
 * bounds and alignment: the views' bases are 8-byte aligned, and every
 * offset used is a multiple of the width. */
static inline uint64_t ld64(const unsigned char *p, int order)
{
    return __atomic_load_n((const uint64_t *)(const void *)p, order);
}

static inline uint32_t ld32(const unsigned char *p, int order)
{
    return __atomic_load_n((const uint32_t *)(const void *)p, order);
}

static inline uint16_t ld16(const unsigned char *p, int order)
{
    return __atomic_load_n((const uint16_t *)(const void *)p, order);
}

/* fits reports whether len bytes at off lie within size, without overflow. */
static inline int fits(uint64_t off, uint64_t len, uint64_t size)
{
    return off <= size && len <= size - off;
}

/* ---- Views and tables. ---- */

/* dt_view is one pair of files as this process sees them: where they are
 * mapped, and the header fields that never change for a table's life,
 * read and checked once by dt_view_init. A view is immutable once
 * published; deciders hold a pointer to it without any reference count,
 * so a view is freed only by dt_close. */
struct dt_view {
    const unsigned char *table; /* the table file, read only */
    size_t table_len;
    unsigned char *state;       /* the state file, read and written */
    size_t state_len;
    int mapped;                 /* 1: dt_open mapped both, dt_close unmaps them;
                                   0: the caller's memory (dt_map) */

    uint32_t shards;            /* a power of two, 1 to 64 */
    uint32_t shard_shift;       /* 64 - log2(shards); 64 for one shard */
    uint32_t counted;           /* counted_policies */
    uint64_t seed;
    uint64_t seed_mixed;        /* dt_mix_seed(seed), for dt_hash_mixed */
    uint64_t shard_table;       /* shards * 64 bytes in the table file */
    uint64_t records_off;       /* records_size bytes in the state file */
    uint64_t records_size;
    uint64_t dirty_off;         /* dirty_words u64 in the state file */
    uint64_t dirty_words;
    uint64_t counters_off;      /* 64 stripes * counted * 32 bytes in the state file */
    uint64_t generation;
    uint64_t quota_off;         /* quota_count entries of DT_QUOTA_ENTRY bytes in the table file */
    uint32_t quota_count;       /* 0 for a table without a quota block */

    struct dt_view *retired;    /* next retired view, owned by the table */
};

/* dt_table is an attachment; see dthrottle_table.h. */
struct dt_table {
    struct dt_view *view;       /* atomic (acquire/release); NULL: socket only */
    char *path;                 /* the daemon's socket; NULL for dt_map */

    pthread_mutex_t mu;         /* guards fd and the exchange on it */
    int fd;                     /* the kept socket, -1 when closed */

    pthread_mutex_t attach_mu;  /* one dt_reattach at a time; guards below */
    struct dt_view *retired;    /* views replaced by dt_reattach, for dt_close */
    int64_t retry_at;           /* CLOCK_MONOTONIC ns before which no attach is tried */
};

/* dt_view_init checks the header of the table at table (table_len bytes)
 * against it and the state (state_len bytes) and fills v. It returns 0,
 * or an errno value: EINVAL (misaligned or NULL), EPROTONOSUPPORT
 * (another version), EPROTO (anything else). */
DT_HIDDEN int dt_view_init(struct dt_view *v, const void *table, size_t table_len,
                 void *state, size_t state_len);

/* dt_view_live reports whether v's daemon is live at now: state live and
 * the heartbeat at most a second old. */
DT_HIDDEN int dt_view_live(const struct dt_view *v, int64_t now);

/* ---- The policy block (dthrottle_policy.c). ---- */

/* dt_pblock is the policy block in force, its counts checked against the
 * table file: policies, nodes and edges lie within it. */
struct dt_pblock {
    const unsigned char *policies, *nodes, *edges;
    uint32_t np, nn, ne;
    uint32_t names; /* bytes of names after the edges; not checked here */
};

/* dt_policy_words is one policy's fields. */
struct dt_policy_words {
    unsigned action, dry_run;
    uint32_t burst;
    int64_t per_token, allow_at;
};

/* dt_pblock_read finds the block policy_active names: 0, or -1 when it
 * does not fit in the table file. */
DT_HIDDEN int dt_pblock_read(const struct dt_view *v, struct dt_pblock *b);

/* dt_policy_of is the policy of tag (n bytes) in b's trie: that of its
 * longest prefix in it, 0 (the default) for none, or -1 when the trie
 * names a node, edge or policy outside the block. */
DT_HIDDEN int dt_policy_of(const struct dt_pblock *b, const unsigned char *tag, size_t n);

/* dt_policy_read reads policy pi (< b->np) into p. */
DT_HIDDEN void dt_policy_read(const struct dt_pblock *b, int pi, struct dt_policy_words *p);

/* dt_seq_holds reports whether policy_seq is still seq: the policy words
 * read since are a consistent set. */
DT_HIDDEN int dt_seq_holds(const struct dt_view *v, uint32_t seq);

/* ---- The quota block (dthrottle_quota.c). ---- */

/* A record's policy index from DT_QUOTA_BASE on names entry
 * index - DT_QUOTA_BASE of the quota block: a limit its callers stated. */
enum { DT_QUOTA_BASE = 0x8000, DT_QUOTA_ENTRY = 32, DT_QUOTA_MAX = 16384 };

/* dt_quota_read reads quota entry k as limit words (action limit, no dry
 * run) and its window (0 for a leaky bucket): 0, or -1 when the entry is
 * not one a caller decides under (free, a calendar window, being
 * written, out of range, or not holding together). */
DT_HIDDEN int dt_quota_read(const struct dt_view *v, uint32_t k, struct dt_policy_words *p,
                            int64_t *window);

/* ---- The hash (dthrottle_hash.c). ---- */

/* dt_mix_seed is the hash's first step, which depends on the seed alone;
 * dt_hash_mixed(dt_mix_seed(seed), key, n) is dt_hash(seed, key, n), the
 * seed mixed once per view instead of once per key. */
DT_HIDDEN uint64_t dt_mix_seed(uint64_t seed);
DT_HIDDEN uint64_t dt_hash_mixed(uint64_t seed_mixed, const void *key, size_t n);

/* ---- The socket (dthrottle_socket.c). ---- */

struct iovec;

/* dt_connect opens a stream connection to the Unix socket at path ("@name"
 * for an abstract one), its sends and receives bounded by a second. It
 * returns the descriptor, or -1 and errno. */
DT_HIDDEN int dt_connect(const char *path);

/* dt_send_all sends the iovcnt buffers of iov in full, the first bytes
 * carrying descriptor rights when rights >= 0; it advances iov. It
 * returns 0, or -1 and errno (ETIMEDOUT for a timeout). */
DT_HIDDEN int dt_send_all(int fd, struct iovec *iov, int iovcnt, int rights);

/* dt_recv_reply reads the three bytes of a reply, "OK\n" or "NO\n", into
 * reply. With fds, it also takes the descriptors that come with them: at
 * most two, in order, into fds and *nfds; more, or a truncated set, is
 * EPROTO. It returns 0, or -1 and errno, having closed every descriptor
 * it took. */
DT_HIDDEN int dt_recv_reply(int fd, char reply[3], int *fds, int *nfds);

/* ldu8 and ldu4 load 8 and 4 bytes from anywhere (unaligned), in the
 * host's order, which is little-endian (above). */
static inline uint64_t ldu8(const unsigned char *p)
{
    uint64_t x;
    memcpy(&x, p, sizeof(x));
    return x;
}

static inline uint32_t ldu4(const unsigned char *p)
{
    uint32_t x;
    memcpy(&x, p, sizeof(x));
    return x;
}

#endif
