/* dthrottle_status.h: mod_dthrottle's counters and the pages that show them.
 *
 * The counters live in anonymous shared memory made by the parent before
 * the children are forked, so they add up all children, and they survive
 * graceful restarts (not a full stop). Without shared memory they fall
 * back to one set per process, and the log says so. Safe for concurrent
 * use: relaxed atomic adds.
 */
#ifndef DTHROTTLE_STATUS_H
#define DTHROTTLE_STATUS_H

#include "httpd.h"
#include "http_config.h"

/* The counters; dthrottle_status.c names them. */
enum {
    DT_C_CHECKED,        /* requests decided: DThrottle On, main request, once */
    DT_C_ASKED,          /* queries sent to dthrottled, answered or not */
    DT_C_DECIDED_SHARED, /* decided in a child, from the table dthrottled shares */
    DT_C_SERVED,         /* requests let through */
    DT_C_REFUSED,        /* requests refused with DThrottleStatus */
    DT_C_FAILED_OPEN,    /* served without an answer (DThrottleFail open) */
    DT_C_FAILED_CLOSED,  /* refused without an answer (DThrottleFail closed) */
    DT_C_BACKED_OFF,     /* not asked: backing off after a failure */
    DT_C_BAD_TAG,        /* not asked: the tag holds CR or LF, or is too long */
    DT_C_NO_TAG,         /* not asked: an empty tag, served */
    DT_C_N
};

/* dt_counters points at the shared counters, or at per-process ones. */
extern apr_uint64_t *dt_counters;

/* dt_count adds one to counter c. */
static APR_INLINE void dt_count(int c)
{
    __atomic_fetch_add(&dt_counters[c], 1, __ATOMIC_RELAXED);
}

/* dt_post_config makes (once per Apache process) the shared counters. */
int dt_post_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
                   server_rec *s);

/* dt_status_handler serves the counters as text for SetHandler
 * dthrottle-status: one "name: value" line each. */
int dt_status_handler(request_rec *r);

/* dt_status_hook adds the counters to mod_status's page. */
int dt_status_hook(request_rec *r, int flags);

#endif
