/* dthrottle_shared_attach.h: the Lua C module's lower half, which
 * dthrottle_shared.c (the request's path and loading) builds on: the
 * process's settings and attachment, and the attaching functions of
 * dthrottle_shared_attach.c. Every symbol stays inside the module: it is
 * built with hidden visibility. */
#ifndef DTHROTTLE_SHARED_ATTACH_H
#define DTHROTTLE_SHARED_ATTACH_H

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

#define MAX_STATES 64          /* Lua states counted in stats: HAProxy's MAX_THREADS */

struct lstate; /* dthrottle_shared.c */

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

/* The process's one, defined in dthrottle_shared_attach.c. */
extern struct process proc;

/* Attaching, from a task (dthrottle_shared_attach.c): each a function of
 * the module's table. */
int dts_claim(lua_State *L);
int dts_attach(lua_State *L);
int dts_shared(lua_State *L);
int dts_release(lua_State *L);

#endif
