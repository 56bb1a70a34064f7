/* dthrottle_shared.c: dthrottled's queries decided inside HAProxy, from
 * the table the daemon shares (docs/shared-table.md), as a Lua C module.
 * Debian's HAProxy 2.6 links liblua5.3 dynamically, so its Lua can
 * require a C module; libdthrottle (../../libdthrottle) is compiled into this
 * one with hidden visibility, and luaopen_dthrottle_shared is the only
 * symbol it exports. dthrottle_shared.lua is its one user, and
 * haproxy-shared.cfg shows the wiring:
 *
 *   http-request lua.dthrottle_resolve unless { src,lua.dthrottle_decide -m bool }
 *
 * The converter dthrottle_decide is the C function decide below, called
 * by HAProxy with the tag as a Lua string, read in place: a tag the table
 * holds costs a hash, a probe and one compare-and-swap, and the converter
 * answers true (served) without a Lua string, table or system call made.
 * Anything else answers false and leaves what happened in the state's
 * stash: a refusal and its bucket, a tag to ask the daemon, a table the
 * daemon left, a bad tag. The action dthrottle_resolve, which HAProxy
 * runs next in the same rule on the same thread, takes the stash (take)
 * and finishes in Lua: the headers of a refusal (their values from
 * headers, libdthrottle's dt_headers), an ask over HAProxy's non-blocking
 * socket, the fail mode.
 *
 * One attachment per process. dthrottle_shared.lua is loaded into each
 * thread's Lua state (lua-load-per-thread), and each state requires this
 * module; the dynamic loader maps it once, so the statics below are the
 * process's, and every thread decides from the one dt_table, which
 * dt_decide allows without a lock. The table is opened in the worker by
 * the first attach, which runs from a HAProxy task after the daemon
 * answered a probe, never while HAProxy loads its configuration (the
 * master would pass it to its workers across fork); it is never closed,
 * and lives as long as the process.
 *
 * Per Lua state, hence per thread: a struct lstate, the upvalue of decide,
 * take and count, holding the stash, the tag's buffer and the counters.
 * A state is only ever run by its own thread, which is why the stash
 * needs no lock and why the module refuses HAProxy's shared state
 * (lua-load), which all threads run in turn: there the stash of one
 * thread's converter could be taken by another thread's action.
 *
 * Nothing here blocks but attach (dt_open, dt_reattach: one exchange with
 * the daemon on its Unix socket, each send and receive bounded by a
 * second), which only a task calls, after a probe answered. One attach at
 * a time in the process (claim, release), with a backoff after failures.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>

#include "dthrottle_table.h" /* libdthrottle, found with -I$(LIBDT) */

#define DT_EXPORT __attribute__((visibility("default")))

#define MS 1000000LL           /* ns */
#define RETRY_MIN (50 * MS)    /* the pause after a failed attach, */
#define RETRY_MAX (5000 * MS)  /* doubling up to this */
#define RECHECK (10000 * MS)   /* a daemon that shared nothing is attached again */
#define MAX_STATES 64          /* Lua states counted in stats: HAProxy's MAX_THREADS */
#define MAX_TAG_LIMIT 65536    /* the daemon's hard cap on a line */

/* What the stash holds after decide answered false. */
enum { W_NONE, W_NO, W_ASK, W_LEFT, W_BAD };

/* lstate is one Lua state's: the stash decide leaves for take, the tag's
 * buffer (the prefix, then the tag), and counters. Only the state's own
 * thread writes it; stats reads the counters from any thread, so they
 * are stored with relaxed atomics (plain moves on the hosts served). */
struct lstate {
    uint64_t ok, no, bad;          /* decided in process; bad tags */
    uint64_t asked, asked_no;      /* asked over the socket (count) */
    uint64_t failed;               /* answered by the fail mode (count) */
    int what;                      /* W_NONE, or what decide left */
    dt_result res;                 /* W_NO: the bucket that refused */
    size_t n;                      /* the stashed tag's bytes in buf */
    char buf[];                    /* g.max_tag bytes */
};

/* The process's settings and attachment. The settings are written by
 * configure while HAProxy loads its configuration (one thread), and only
 * read after. */
static struct {
    pthread_mutex_t mu;          /* guards configured and states */
    int configured;
    char path[108];              /* the daemon's socket ("@name": abstract) */
    char prefix[256];            /* put before every tag */
    size_t prefix_len;
    size_t max_tag;              /* bytes, prefix included */
    struct lstate *states[MAX_STATES];
    int nstates;

    dt_table *table;             /* atomic: NULL until the first attach */
    int attaching;               /* atomic: a caller holds the claim */
    int64_t next_try;            /* atomic: monotonic ns before which no claim */
    uint64_t attaches;           /* atomic: attaches that succeeded */
    /* Written by the claim's holder only. */
    int64_t backoff;             /* ns, 0 while attached */
    int down;                    /* the outage was reported */
    int ever;                    /* attached once */
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int64_t mono_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* bump adds 1 to a counter of the calling thread's state. */
static inline void bump(uint64_t *c)
{
    __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

/* ---- The request's path. ---- */

/* unserved leaves what for take, with the tag (n bytes at tag) in
 * s->buf, where it may already be, counts it, and answers false. */
static int unserved(lua_State *L, struct lstate *s, int what, const char *tag, size_t n)
{
    if (what == W_BAD) {
        bump(&s->bad);
        n = 0;
    } else if (what == W_NO) {
        bump(&s->no);
    }
    if (tag != s->buf && n > 0) {
        memcpy(s->buf, tag, n);
    }
    s->n = n;
    s->what = what;
    lua_pushboolean(L, 0);
    return 1;
}

/* decide is the converter: decide(tag) answers true when the table serves
 * tag (the prefix put before it), and false otherwise, leaving the stash
 * for take. An empty or missing tag is served, nothing counted, as the
 * daemon serves it. A tag over max_tag bytes (prefix included), or one
 * holding CR or LF, which the line protocol could not carry, is bad. A
 * process not attached yet asks. It never raises an error. */
static int decide(lua_State *L)
{
    struct lstate *s = lua_touserdata(L, lua_upvalueindex(1));
    size_t n = 0;
    const char *tag = lua_tolstring(L, 1, &n);
    dt_table *t;
    int rc;

    s->what = W_NONE;
    if (tag == NULL || n == 0) {
        lua_pushboolean(L, 1);
        return 1;
    }
    if (n > g.max_tag - g.prefix_len) {
        return unserved(L, s, W_BAD, NULL, 0);
    }
    if (g.prefix_len > 0) {
        memcpy(s->buf + g.prefix_len, tag, n); /* after the prefix, copied once */
        tag = s->buf;
        n += g.prefix_len;
    }
    if (memchr(tag, '\n', n) != NULL || memchr(tag, '\r', n) != NULL) {
        return unserved(L, s, W_BAD, NULL, 0);
    }
    t = __atomic_load_n(&g.table, __ATOMIC_ACQUIRE);
    rc = t == NULL ? DT_ASK : dt_decide(t, tag, n, dt_now(), &s->res);
    if (rc == DT_OK) {
        bump(&s->ok);
        lua_pushboolean(L, 1);
        return 1;
    }
    return unserved(L, s, rc == DT_NO ? W_NO : rc == DT_LEFT ? W_LEFT : W_ASK, tag, n);
}

/* push_policy pushes the name, burst and rate the table states for
 * policy: the name nil when it states none (a table without names, which
 * names a policy by its index), and all three nil while the daemon
 * rewrites its policies. */
static void push_policy(lua_State *L, int policy)
{
    dt_table *t = __atomic_load_n(&g.table, __ATOMIC_ACQUIRE);
    dt_policy_info info;
    char index[16];

    if (t == NULL || dt_policy(t, policy, &info) != 0) {
        lua_pushnil(L);
        lua_pushnil(L);
        lua_pushnil(L);
        return;
    }
    snprintf(index, sizeof(index), "%d", policy);
    if (strcmp(info.name, index) == 0) {
        lua_pushnil(L);
    } else {
        lua_pushstring(L, info.name);
    }
    lua_pushinteger(L, (lua_Integer)info.burst);
    lua_pushnumber(L, info.rate);
}

/* take returns what the thread's last decide left, and forgets it:
 *   "NO", tag, policy, retry_after_ns, reset_ns[, name, burst, rate]
 *                  the table refused; for a limit policy (reset_ns above
 *                  0) the policy as the table states it (push_policy)
 *   "ASK", tag     ask the daemon
 *   "LEFT", tag    the daemon left the table: the fail mode, and attach
 *   "BAD"          a bad tag
 *   nothing        nothing left (the converter did not run, or served)
 * The tag is the prefix and the tag, as the daemon knows it. */
static int take(lua_State *L)
{
    struct lstate *s = lua_touserdata(L, lua_upvalueindex(1));
    int what = s->what;

    s->what = W_NONE;
    switch (what) {
    case W_NO:
        lua_pushliteral(L, "NO");
        lua_pushlstring(L, s->buf, s->n);
        lua_pushinteger(L, s->res.policy);
        lua_pushinteger(L, s->res.retry_after_ns);
        lua_pushinteger(L, s->res.reset_ns);
        if (s->res.reset_ns <= 0) {
            return 5; /* a deny policy: no bucket */
        }
        push_policy(L, s->res.policy);
        return 8;
    case W_ASK:
    case W_LEFT:
        lua_pushstring(L, what == W_ASK ? "ASK" : "LEFT");
        lua_pushlstring(L, s->buf, s->n);
        return 2;
    case W_BAD:
        lua_pushliteral(L, "BAD");
        return 1;
    default:
        return 0;
    }
}

/* count("asked" | "asked_no" | "failed") adds 1 to that counter of the
 * thread's state, for stats. */
static int count(lua_State *L)
{
    static const char *const names[] = {"asked", "asked_no", "failed", NULL};
    struct lstate *s = lua_touserdata(L, lua_upvalueindex(1));
    uint64_t *c[] = {&s->asked, &s->asked_no, &s->failed};

    bump(c[luaL_checkoption(L, 1, NULL, names)]);
    return 0;
}

/* headers(name, burst, rate, served, tokens, wait_ns, full_ns) returns
 * the values of RateLimit-Policy, RateLimit and Retry-After for that
 * verdict, from libdthrottle's dt_headers (the daemon's arithmetic); the
 * first two nil when name is nil, the last nil when there is none. A
 * name over 255 bytes is cut there. */
static int headers(lua_State *L)
{
    dt_policy_info info = {.action = 0};
    dt_header_values h;
    size_t n = 0;
    const char *name = luaL_optlstring(L, 1, NULL, &n);
    lua_Integer burst = luaL_checkinteger(L, 2);

    if (name != NULL) {
        n = n < sizeof(info.name) - 1 ? n : sizeof(info.name) - 1;
        memcpy(info.name, name, n);
        info.name[n] = '\0';
    }
    info.burst = burst < 0 ? 0 : burst > UINT32_MAX ? UINT32_MAX : (uint32_t)burst;
    info.rate = luaL_checknumber(L, 3);
    dt_headers(name != NULL ? &info : NULL, lua_toboolean(L, 4), luaL_checknumber(L, 5),
               luaL_checkinteger(L, 6), luaL_checkinteger(L, 7), &h);
    if (name != NULL) {
        lua_pushlstring(L, h.policy, h.policy_len);
        lua_pushlstring(L, h.limit, h.limit_len);
    } else {
        lua_pushnil(L);
        lua_pushnil(L);
    }
    if (h.retry_after_len > 0) {
        lua_pushlstring(L, h.retry_after, h.retry_after_len);
    } else {
        lua_pushnil(L);
    }
    return 3;
}

/* ---- Attaching, from a task. ---- */

/* claim returns true when the caller may attach now: no other attach is
 * under way in the process and the backoff allows it. The caller must
 * then call release, whatever happens. */
static int claim(lua_State *L)
{
    int none = 0;

    lua_pushboolean(L, mono_now() >= __atomic_load_n(&g.next_try, __ATOMIC_RELAXED) &&
                           __atomic_compare_exchange_n(&g.attaching, &none, 1, 0,
                                                       __ATOMIC_ACQUIRE, __ATOMIC_RELAXED));
    return 1;
}

/* errstr pushes nil and "what path: the error" for errno err. */
static int errstr(lua_State *L, const char *what, int err)
{
    lua_pushnil(L);
    lua_pushfstring(L, "%s %s: %s", what, g.path, strerror(err));
    return 2;
}

/* attach attaches the process, with claim held: dt_open the first time,
 * else dt_reattach (nothing to do when the table in use is live). It
 * blocks for one exchange with the daemon: call it only from a task,
 * after the daemon answered a probe. It returns true, or nil and an
 * error. */
static int attach(lua_State *L)
{
    dt_table *t = __atomic_load_n(&g.table, __ATOMIC_ACQUIRE);

    if (__atomic_load_n(&g.attaching, __ATOMIC_RELAXED) == 0) {
        return luaL_error(L, "dthrottle_shared: attach without claim");
    }
    if (t == NULL) {
        if (dt_open(g.path, &t) != 0) {
            return errstr(L, "dt_open", errno);
        }
        __atomic_store_n(&g.table, t, __ATOMIC_RELEASE);
    } else if (dt_reattach(t) != 0) {
        if (errno == EAGAIN) {
            lua_pushnil(L);
            lua_pushfstring(L, "dt_reattach %s: the daemon answers, but its table has "
                               "no heartbeat (stopped, or stalled)", g.path);
            return 2;
        }
        return errstr(L, "dt_reattach", errno);
    }
    __atomic_add_fetch(&g.attaches, 1, __ATOMIC_RELAXED);
    lua_pushboolean(L, 1);
    return 1;
}

/* shared returns whether the process decides in process: attached to a
 * daemon that shares its table. */
static int shared(lua_State *L)
{
    dt_table *t = __atomic_load_n(&g.table, __ATOMIC_ACQUIRE);

    lua_pushboolean(L, t != NULL && dt_shared(t));
    return 1;
}

/* release(ok) ends a claim: after a success, the next claim may come at
 * once (or after RECHECK, when the daemon shares no table); after a
 * failure, RETRY_MIN later, doubling up to RETRY_MAX. It returns
 * "attached" when the process attached for the first time or after an
 * outage, "detached" at the first failure of an outage, else nothing, so
 * that each is logged once. */
static int release(lua_State *L)
{
    int ok = lua_toboolean(L, 1);
    dt_table *t = __atomic_load_n(&g.table, __ATOMIC_ACQUIRE);
    int64_t now = mono_now(), next;
    const char *event = NULL;

    if (__atomic_load_n(&g.attaching, __ATOMIC_RELAXED) == 0) {
        return luaL_error(L, "dthrottle_shared: release without claim");
    }
    if (ok) {
        next = t != NULL && dt_shared(t) ? 0 : now + RECHECK;
        g.backoff = 0;
        if (g.down || !g.ever) {
            event = "attached";
        }
        g.down = 0;
        g.ever = 1;
    } else {
        g.backoff = g.backoff == 0 ? RETRY_MIN
                    : g.backoff >= RETRY_MAX / 2 ? RETRY_MAX : g.backoff * 2;
        next = now + g.backoff;
        if (!g.down) {
            event = "detached";
        }
        g.down = 1;
    }
    __atomic_store_n(&g.next_try, next, __ATOMIC_RELAXED);
    __atomic_store_n(&g.attaching, 0, __ATOMIC_RELEASE);
    if (event == NULL) {
        return 0;
    }
    lua_pushstring(L, event);
    return 1;
}

/* stats returns the process's counters in a table: ok and no (decided in
 * process), asked and asked_no (asked over the socket, and of them
 * refused), failed (answered by the fail mode), bad (bad tags), attaches,
 * and shared (deciding in process now). */
static int stats(lua_State *L)
{
    uint64_t sum[6] = {0};
    static const char *const names[] = {"ok", "no", "bad", "asked", "asked_no", "failed"};

    pthread_mutex_lock(&g.mu);
    for (int i = 0; i < g.nstates; i++) {
        uint64_t *c[] = {&g.states[i]->ok, &g.states[i]->no, &g.states[i]->bad,
                         &g.states[i]->asked, &g.states[i]->asked_no, &g.states[i]->failed};

        for (int k = 0; k < 6; k++) {
            sum[k] += __atomic_load_n(c[k], __ATOMIC_RELAXED);
        }
    }
    pthread_mutex_unlock(&g.mu);
    lua_createtable(L, 0, 8);
    for (int k = 0; k < 6; k++) {
        lua_pushinteger(L, (lua_Integer)sum[k]);
        lua_setfield(L, -2, names[k]);
    }
    lua_pushinteger(L, (lua_Integer)__atomic_load_n(&g.attaches, __ATOMIC_RELAXED));
    lua_setfield(L, -2, "attaches");
    shared(L);
    lua_setfield(L, -2, "shared");
    return 1;
}

/* ---- Loading. ---- */

/* opt_string and opt_int read field k of the options (index 1); nil
 * gives dflt. */
static const char *opt_string(lua_State *L, const char *k, const char *dflt, size_t *n)
{
    const char *s = dflt;

    *n = strlen(dflt);
    if (lua_getfield(L, 1, k) != LUA_TNIL) {
        if (lua_type(L, -1) != LUA_TSTRING) {
            luaL_error(L, "dthrottle_shared: %s must be a string", k);
        }
        s = lua_tolstring(L, -1, n); /* the options' table keeps it */
    }
    lua_pop(L, 1);
    return s;
}

static lua_Integer opt_int(lua_State *L, const char *k, lua_Integer dflt)
{
    lua_Integer v = dflt;
    int ok = 1;

    if (lua_getfield(L, 1, k) != LUA_TNIL) {
        v = lua_tointegerx(L, -1, &ok);
    }
    lua_pop(L, 1);
    if (!ok) {
        luaL_error(L, "dthrottle_shared: %s must be an integer", k);
    }
    return v;
}

/* configure{socket=, prefix=, max_tag=} sets the process's settings (the
 * first call; the calls of the other threads' states must give the
 * same) and readies this state: it adds decide, take and count to the
 * module's table (upvalue 1). Called while HAProxy loads its
 * configuration, once per state. */
static int configure(lua_State *L)
{
    size_t plen, prefix_len;
    const char *path, *prefix;
    lua_Integer max_tag;
    struct lstate *s;
    static const luaL_Reg fns[] = {{"decide", decide}, {"take", take}, {"count", count}, {NULL, NULL}};

    luaL_checktype(L, 1, LUA_TTABLE);
    path = opt_string(L, "socket", "/run/dthrottle/dthrottle.sock", &plen);
    prefix = opt_string(L, "prefix", "", &prefix_len);
    max_tag = opt_int(L, "max_tag", 1024);
    if (plen == 0 || plen >= sizeof(g.path) || strlen(path) != plen) {
        return luaL_error(L, "dthrottle_shared: socket must be a path of 1 to 107 bytes");
    }
    if (prefix_len >= sizeof(g.prefix) || max_tag <= (lua_Integer)prefix_len || max_tag > MAX_TAG_LIMIT) {
        return luaL_error(L, "dthrottle_shared: prefix must be at most 255 bytes, and max_tag "
                             "longer than the prefix and at most 65536");
    }
    if (lua_getfield(L, lua_upvalueindex(1), "decide") != LUA_TNIL) {
        return luaL_error(L, "dthrottle_shared: configured twice in one Lua state");
    }
    lua_pop(L, 1);

    pthread_mutex_lock(&g.mu);
    if (!g.configured) {
        memcpy(g.path, path, plen + 1);
        memcpy(g.prefix, prefix, prefix_len);
        g.prefix_len = prefix_len;
        g.max_tag = (size_t)max_tag;
        g.configured = 1;
    } else if (strcmp(g.path, path) != 0 || g.prefix_len != prefix_len ||
               memcmp(g.prefix, prefix, prefix_len) != 0 || g.max_tag != (size_t)max_tag) {
        pthread_mutex_unlock(&g.mu);
        return luaL_error(L, "dthrottle_shared: configured again with other settings "
                             "(one table per process, one configuration)");
    }
    pthread_mutex_unlock(&g.mu);

    s = lua_newuserdata(L, sizeof(*s) + g.max_tag);
    memset(s, 0, sizeof(*s));
    memcpy(s->buf, g.prefix, g.prefix_len);
    pthread_mutex_lock(&g.mu);
    if (g.nstates < MAX_STATES) {
        g.states[g.nstates++] = s; /* kept alive by the module's functions */
    }
    pthread_mutex_unlock(&g.mu);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, -2);
    luaL_setfuncs(L, fns, 1);
    return 0;
}

DT_EXPORT int luaopen_dthrottle_shared(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"claim", claim}, {"attach", attach}, {"release", release},
        {"shared", shared}, {"stats", stats}, {"headers", headers}, {NULL, NULL},
    };

    luaL_newlib(L, fns);
    lua_pushvalue(L, -1);
    lua_pushcclosure(L, configure, 1); /* upvalue: the module's table */
    lua_setfield(L, -2, "configure");
    return 1;
}
