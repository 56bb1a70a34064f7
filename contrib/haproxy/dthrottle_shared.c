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
#include "dthrottle_shared_attach.h"

#define DT_EXPORT __attribute__((visibility("default")))

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
    char buf[];                    /* proc.max_tag bytes */
};

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
    if (n > proc.max_tag - proc.prefix_len) {
        return unserved(L, s, W_BAD, NULL, 0);
    }
    if (proc.prefix_len > 0) {
        memcpy(s->buf + proc.prefix_len, tag, n); /* after the prefix, copied once */
        tag = s->buf;
        n += proc.prefix_len;
    }
    if (memchr(tag, '\n', n) != NULL || memchr(tag, '\r', n) != NULL) {
        return unserved(L, s, W_BAD, NULL, 0);
    }
    t = __atomic_load_n(&proc.table, __ATOMIC_ACQUIRE);
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
    dt_table *t = __atomic_load_n(&proc.table, __ATOMIC_ACQUIRE);
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

/* stats returns the process's counters in a table: ok and no (decided in
 * process), asked and asked_no (asked over the socket, and of them
 * refused), failed (answered by the fail mode), bad (bad tags), attaches,
 * and shared (deciding in process now). */
static int stats(lua_State *L)
{
    uint64_t sum[6] = {0};
    static const char *const names[] = {"ok", "no", "bad", "asked", "asked_no", "failed"};

    pthread_mutex_lock(&proc.mu);
    for (int i = 0; i < proc.nstates; i++) {
        uint64_t *c[] = {&proc.states[i]->ok, &proc.states[i]->no, &proc.states[i]->bad,
                         &proc.states[i]->asked, &proc.states[i]->asked_no, &proc.states[i]->failed};

        for (int k = 0; k < 6; k++) {
            sum[k] += __atomic_load_n(c[k], __ATOMIC_RELAXED);
        }
    }
    pthread_mutex_unlock(&proc.mu);
    lua_createtable(L, 0, 8);
    for (int k = 0; k < 6; k++) {
        lua_pushinteger(L, (lua_Integer)sum[k]);
        lua_setfield(L, -2, names[k]);
    }
    lua_pushinteger(L, (lua_Integer)__atomic_load_n(&proc.attaches, __ATOMIC_RELAXED));
    lua_setfield(L, -2, "attaches");
    dts_shared(L);
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
    if (plen == 0 || plen >= sizeof(proc.path) || strlen(path) != plen) {
        return luaL_error(L, "dthrottle_shared: socket must be a path of 1 to 107 bytes");
    }
    if (prefix_len >= sizeof(proc.prefix) || max_tag <= (lua_Integer)prefix_len || max_tag > MAX_TAG_LIMIT) {
        return luaL_error(L, "dthrottle_shared: prefix must be at most 255 bytes, and max_tag "
                             "longer than the prefix and at most 65536");
    }
    if (lua_getfield(L, lua_upvalueindex(1), "decide") != LUA_TNIL) {
        return luaL_error(L, "dthrottle_shared: configured twice in one Lua state");
    }
    lua_pop(L, 1);

    pthread_mutex_lock(&proc.mu);
    if (!proc.configured) {
        memcpy(proc.path, path, plen + 1);
        memcpy(proc.prefix, prefix, prefix_len);
        proc.prefix_len = prefix_len;
        proc.max_tag = (size_t)max_tag;
        proc.configured = 1;
    } else if (strcmp(proc.path, path) != 0 || proc.prefix_len != prefix_len ||
               memcmp(proc.prefix, prefix, prefix_len) != 0 || proc.max_tag != (size_t)max_tag) {
        pthread_mutex_unlock(&proc.mu);
        return luaL_error(L, "dthrottle_shared: configured again with other settings "
                             "(one table per process, one configuration)");
    }
    pthread_mutex_unlock(&proc.mu);

    s = lua_newuserdata(L, sizeof(*s) + proc.max_tag);
    memset(s, 0, sizeof(*s));
    memcpy(s->buf, proc.prefix, proc.prefix_len);
    pthread_mutex_lock(&proc.mu);
    if (proc.nstates < MAX_STATES) {
        proc.states[proc.nstates++] = s; /* kept alive by the module's functions */
    }
    pthread_mutex_unlock(&proc.mu);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, -2);
    luaL_setfuncs(L, fns, 1);
    return 0;
}

DT_EXPORT int luaopen_dthrottle_shared(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"claim", dts_claim}, {"attach", dts_attach}, {"release", dts_release},
        {"shared", dts_shared}, {"stats", stats}, {"headers", headers}, {NULL, NULL},
    };

    luaL_newlib(L, fns);
    lua_pushvalue(L, -1);
    lua_pushcclosure(L, configure, 1); /* upvalue: the module's table */
    lua_setfield(L, -2, "configure");
    return 1;
}
