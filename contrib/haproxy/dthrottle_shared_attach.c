/* dthrottle_shared_attach.c: the Lua C module's attaching (see
 * dthrottle_shared.c), run from a HAProxy task after the daemon answered
 * a probe: one attach at a time in the process (claim, release), with a
 * backoff after failures, dt_open the first time and dt_reattach after. */
#include "dthrottle_shared_attach.h"

#define MS 1000000LL           /* ns */
#define RETRY_MIN (50 * MS)    /* the pause after a failed attach, */
#define RETRY_MAX (5000 * MS)  /* doubling up to this */
#define RECHECK (10000 * MS)   /* a daemon that shared nothing is attached again */

struct process proc = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* monotonic_ns is CLOCK_MONOTONIC in nanoseconds, the clock of the
 * backoff. */
static int64_t monotonic_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* claim returns true when the caller may attach now: no other attach is
 * under way in the process and the backoff allows it. The caller must
 * then call release, whatever happens. */
int dts_claim(lua_State *L)
{
    int none = 0;

    lua_pushboolean(L, monotonic_ns() >= __atomic_load_n(&proc.next_try, __ATOMIC_RELAXED) &&
                           __atomic_compare_exchange_n(&proc.attaching, &none, 1, 0,
                                                       __ATOMIC_ACQUIRE, __ATOMIC_RELAXED));
    return 1;
}

/* errstr pushes nil and "what path: the error" for errno err. */
static int errstr(lua_State *L, const char *what, int err)
{
    lua_pushnil(L);
    lua_pushfstring(L, "%s %s: %s", what, proc.path, strerror(err));
    return 2;
}

/* attach attaches the process, with claim held: dt_open the first time,
 * else dt_reattach (nothing to do when the table in use is live). It
 * blocks for one exchange with the daemon: call it only from a task,
 * after the daemon answered a probe. It returns true, or nil and an
 * error. */
int dts_attach(lua_State *L)
{
    dt_table *t = __atomic_load_n(&proc.table, __ATOMIC_ACQUIRE);

    if (__atomic_load_n(&proc.attaching, __ATOMIC_RELAXED) == 0) {
        return luaL_error(L, "dthrottle_shared: attach without claim");
    }
    if (t == NULL) {
        if (dt_open(proc.path, &t) != 0) {
            return errstr(L, "dt_open", errno);
        }
        __atomic_store_n(&proc.table, t, __ATOMIC_RELEASE);
    } else if (dt_reattach(t) != 0) {
        if (errno == EAGAIN) {
            lua_pushnil(L);
            lua_pushfstring(L, "dt_reattach %s: the daemon answers, but its table has "
                               "no heartbeat (stopped, or stalled)", proc.path);
            return 2;
        }
        return errstr(L, "dt_reattach", errno);
    }
    __atomic_add_fetch(&proc.attaches, 1, __ATOMIC_RELAXED);
    lua_pushboolean(L, 1);
    return 1;
}

/* shared returns whether the process decides in process: attached to a
 * daemon that shares its table. */
int dts_shared(lua_State *L)
{
    dt_table *t = __atomic_load_n(&proc.table, __ATOMIC_ACQUIRE);

    lua_pushboolean(L, t != NULL && dt_shared(t));
    return 1;
}

/* release(ok) ends a claim: after a success, the next claim may come at
 * once (or after RECHECK, when the daemon shares no table); after a
 * failure, RETRY_MIN later, doubling up to RETRY_MAX. It returns
 * "attached" when the process attached for the first time or after an
 * outage, "detached" at the first failure of an outage, else nothing, so
 * that each is logged once. */
int dts_release(lua_State *L)
{
    int ok = lua_toboolean(L, 1);
    dt_table *t = __atomic_load_n(&proc.table, __ATOMIC_ACQUIRE);
    int64_t now = monotonic_ns(), next;
    const char *event = NULL;

    if (__atomic_load_n(&proc.attaching, __ATOMIC_RELAXED) == 0) {
        return luaL_error(L, "dthrottle_shared: release without claim");
    }
    if (ok) {
        next = t != NULL && dt_shared(t) ? 0 : now + RECHECK;
        proc.backoff = 0;
        if (proc.down || !proc.ever) {
            event = "attached";
        }
        proc.down = 0;
        proc.ever = 1;
    } else {
        proc.backoff = proc.backoff == 0 ? RETRY_MIN
                    : proc.backoff >= RETRY_MAX / 2 ? RETRY_MAX : proc.backoff * 2;
        next = now + proc.backoff;
        if (!proc.down) {
            event = "detached";
        }
        proc.down = 1;
    }
    __atomic_store_n(&proc.next_try, next, __ATOMIC_RELAXED);
    __atomic_store_n(&proc.attaching, 0, __ATOMIC_RELEASE);
    if (event == NULL) {
        return 0;
    }
    lua_pushstring(L, event);
    return 1;
}
