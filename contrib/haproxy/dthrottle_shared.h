/* dthrottle_shared.h: what the two files of the Lua C module share (see
 * dthrottle_shared.c): the process's settings and attachment, a Lua
 * state's stash and counters, and the attaching functions of
 * dthrottle_shared_attach.c. Every symbol stays inside the module: it is
 * built with hidden visibility. */
#ifndef DTHROTTLE_SHARED_H
#define DTHROTTLE_SHARED_H

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
    char buf[];                    /* proc.max_tag bytes */
};

/* The process's settings and attachment. The settings are written by
 * configure while HAProxy loads its configuration (one thread), and only
 * read after. */
struct process {
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
};

/* The process's one: dthrottle_shared.c. */
extern struct process proc;

static inline int64_t mono_now(void)
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

/* Attaching, from a task (dthrottle_shared_attach.c): each a function of
 * the module's table. */
int dts_claim(lua_State *L);
int dts_attach(lua_State *L);
int dts_shared(lua_State *L);
int dts_release(lua_State *L);

#endif
