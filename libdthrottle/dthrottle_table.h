/* dthrottle_table.h: deciding dthrottled's queries in this process, from
 * the daemon's shared-memory table.
 *
 * dthrottled publishes its tag table in two shared-memory files: a table
 * file only the daemon writes (header, index, policies) and a state file
 * every attached process writes (the buckets, their unreported hits, the
 * counters). docs/shared-table.md gives their layout field by field and
 * the decision step by step; this library follows it. A query this
 * process can decide costs a hash, a probe and one compare-and-swap, and
 * no system call; one it cannot (a tag the daemon does not track yet, a
 * policy being rewritten) it asks the daemon over the socket kept open
 * since the attach.
 *
 * A dt_table is one attachment: the socket, and the two mappings when the
 * daemon shares them. It is safe for concurrent use by the threads of one
 * process, except dt_close, which must be the last call.
 *
 * The process trusts nothing it reads: every offset, count, reference and
 * length read from either file is checked against the mappings' sizes
 * before use, and every loop is bounded, so a corrupt or hostile table or
 * state makes queries fall back to asking, never reads out of bounds.
 */
#ifndef DTHROTTLE_TABLE_H
#define DTHROTTLE_TABLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dt_table is an attachment to dthrottled; see above. */
typedef struct dt_table dt_table;

/* What dt_decide and dt_ask answer. */
enum {
    DT_NO = 0,   /* refuse */
    DT_OK = 1,   /* serve */
    DT_ASK = 2,  /* not decided here: ask the daemon (dt_ask) */
    DT_LEFT = 3  /* the daemon left the table: answer by the fail mode, dt_reattach */
};

/* dt_result is what a decision tells about its bucket, for headers such
 * as RateLimit and Retry-After. Times are in nanoseconds from now. */
typedef struct {
    int policy;             /* the tag's policy (0 the default), -1 when none was found */
    uint32_t limit;         /* the policy's burst */
    int64_t remaining;      /* on OK: the whole tokens left after the query,
                               (allow_at + per_token - (tat' - now)) / per_token
                               (tat' the tat after); 0 when the limit refused */
    int64_t retry_after_ns; /* when the limit refused: until one token (tat - now - allow_at);
                               else 0 */
    int64_t reset_ns;       /* until the bucket is full (tat' - now; tat - now when refused) */
} dt_result;

/* dt_policy_info is what the table states of one policy, for the
 * RateLimit-Policy and RateLimit headers. */
typedef struct {
    char name[256];  /* NUL-terminated; "default" for policy 0 and its index
                        for another when the table carries no names */
    int action;      /* 0 limit, 1 allow, 2 deny */
    int dry_run;     /* 1: serves what the limit would refuse */
    uint32_t burst;  /* the bucket's size (the header's q) */
    double rate;     /* tokens per second (burst / rate: the window, w) */
} dt_policy_info;

/* DT_HEADER_MAX is the size of the RateLimit-Policy and RateLimit values
 * dt_headers writes, their NUL included: the longest name of a
 * dt_policy_info, every byte escaped, and the largest numbers. */
#define DT_HEADER_MAX 576

/* dt_header_values is a decision stated as header fields
 * (draft-ietf-httpapi-ratelimit-headers-10), as dthrottled's own ways
 * in state it. Each value is NUL-terminated; its length beside it. */
typedef struct {
    char policy[DT_HEADER_MAX];  /* RateLimit-Policy: "name";q=<burst>;w=<seconds> */
    char limit[DT_HEADER_MAX];   /* RateLimit: "name";r=<remaining>;t=<seconds> */
    char retry_after[24];        /* Retry-After: <seconds>; "" for none */
    size_t policy_len, limit_len, retry_after_len;
} dt_header_values;

/* dt_hash is the table's hash of key (n bytes) under seed, bit for bit
 * the daemon's (bucket.Hash). */
uint64_t dt_hash(uint64_t seed, const void *key, size_t n);

/* dt_open connects to the daemon's Unix socket at socket_path ("@name"
 * for an abstract socket), attaches (an empty line carrying a descriptor;
 * the answer carries the table and state files), maps both files and
 * checks the table's header. A daemon that shares no table, or one of a
 * layout version this library does not read, gives a "socket only" table:
 * dt_decide then answers DT_ASK and dt_ask asks. Sends and receives on the
 * socket time out after a second. It returns 0 and *out, or -1 and errno. */
int dt_open(const char *socket_path, dt_table **out);

/* dt_map makes a table over memory the caller provides and keeps owning
 * (for tests and the conformance driver): table_len bytes of a table file,
 * state_len bytes of a state file, both 8-byte aligned. It has no socket:
 * dt_ask fails with ENOTCONN and dt_reattach with EINVAL. It returns 0 and
 * *out, or -1 and errno (EINVAL: bad arguments; EPROTONOSUPPORT: another
 * layout version; EPROTO: a header that does not describe the memory). */
int dt_map(const void *table, size_t table_len, void *state, size_t state_len,
           dt_table **out);

/* dt_decide decides a query for tag (n bytes) at now (Unix nanoseconds,
 * CLOCK_REALTIME: dt_now), in process, and fills *res when res is not
 * NULL. DT_OK and DT_NO are decided and counted here; DT_ASK: ask the
 * daemon (dt_ask), as for every query while the daemon's table is in the
 * "asking" state (3); DT_LEFT: the daemon left the table (retired, or no
 * heartbeat for over a second): answer by the fail mode and dt_reattach.
 * An empty tag is served, nothing counted. Lock-free: it makes no system
 * call and holds no lock, so a thread or process stopped anywhere in it
 * blocks nobody; a compare-and-swap that keeps losing gives DT_ASK. */
int dt_decide(dt_table *t, const char *tag, size_t n, int64_t now, dt_result *res);

/* dt_ask asks the daemon over the kept socket: it sends tag and "\n" and
 * reads "OK\n" or "NO\n", returning DT_OK or DT_NO; an empty tag is DT_OK
 * without asking. Tags holding '\n', or ending in '\r' (which the daemon
 * strips), are refused: -1 and EINVAL. One query at a time per table (a
 * mutex). A failed exchange closes the socket, so that a late reply never
 * answers a later query, and returns -1 with errno; the next dt_ask
 * connects again (without attaching). */
int dt_ask(dt_table *t, const char *tag, size_t n);

/* dt_reattach attaches again: a new socket and new mappings replace the
 * old. It does nothing and returns 0 when the table in use is live (state
 * live, heartbeat under a second old: another thread reattached first).
 * While one thread reattaches, and for 100 ms after an attempt failed, it
 * returns -1 and EAGAIN at once; so it does when the daemon hands out a
 * table whose heartbeat is already stale (it answers, but does not keep
 * the table), and then pauses 100 ms. Threads still deciding on the old
 * mappings are safe: they are replaced by zero pages (which decide
 * nothing: DT_LEFT or DT_ASK) and unmapped by dt_close. */
int dt_reattach(dt_table *t);

/* dt_policy fills *out with policy (a dt_result's policy) as the table
 * in use states it now. It returns 0, or -1 and errno: EAGAIN while the
 * daemon rewrites its policies (try again, or go without the headers),
 * ENOENT for a policy the table does not hold, ENOTCONN when t decides
 * nothing in process. Lock-free; meant for a refusal's headers, not for
 * every decision (it walks the names). */
int dt_policy(dt_table *t, int policy, dt_policy_info *out);

/* dt_headers fills *h with the header values of a decision under policy
 * p, with the daemon's arithmetic (internal/ways/rlheader), byte for byte:
 *   RateLimit-Policy  p's name as a structured-field string ('"' and '\'
 *                     escaped, a byte outside printable ASCII as '?'), q
 *                     its burst, w the time it takes to refill from empty
 *                     (burst / rate seconds, in whole nanoseconds), rounded
 *                     up to a second, at least 1 (1 for a policy that is
 *                     not a limit: action not 0, rate or burst not > 0);
 *   RateLimit         the name, r the whole tokens left (tokens rounded
 *                     down, at least 0), t full_ns rounded up to a second
 *                     (0 for full_ns <= 0);
 *   Retry-After       on a refusal (served 0): wait_ns rounded up to a
 *                     second, at least 1; none when served, or when
 *                     wait_ns is INT64_MAX (a cost above the burst, never
 *                     served).
 * p NULL (dt_policy failed) leaves the RateLimit values empty and states
 * Retry-After alone. From a dt_decide answer rc and its dt_result res:
 *   dt_headers(&info, rc == DT_OK, (double)res.remaining,
 *              res.retry_after_ns, res.reset_ns, &h);
 * where info is dt_policy(t, res.policy, ...)'s. Whether to send them is
 * the caller's: the daemon states them for limit policies only (res's
 * reset_ns above 0). No allocation, no lock, no system call. */
void dt_headers(const dt_policy_info *p, int served, double tokens,
                int64_t wait_ns, int64_t full_ns, dt_header_values *h);

/* dt_shared reports whether t has mappings to decide in process (1), or
 * asks everything over its socket (0). */
int dt_shared(const dt_table *t);

/* dt_close closes the socket, unmaps the mappings it made and frees t.
 * No other call on t may run or follow. dt_close(NULL) does nothing. */
void dt_close(dt_table *t);

/* dt_now is CLOCK_REALTIME in nanoseconds, the clock of dt_decide. */
int64_t dt_now(void);

#ifdef __cplusplus
}
#endif

#endif
