/* dthrottle_client.h: how one Apache child process asks dthrottled.
 *
 * A dt_target is one daemon address (a Unix socket path, "@name" for an
 * abstract Unix socket, or host:port over TCP). It is made while the
 * configuration is read, in the parent; each child process then gives it
 * its own pool of connections and its own backoff state (dt_target_child_init),
 * so every child, and every thread of a child, asks the daemon directly:
 * no process or lock shared between children stands in the way. A target
 * on a Unix socket also holds the child's attachment to the table the
 * daemon shares (dthrottle_shared.h), which decides most queries without
 * asking.
 *
 * Safe for concurrent use by the threads of one child once
 * dt_target_child_init has run.
 */
#ifndef DTHROTTLE_CLIENT_H
#define DTHROTTLE_CLIENT_H

#include <sys/socket.h>

#include "httpd.h"
#include "apr_thread_mutex.h"

/* Message numbers in the style of Apache's APLOGNO: "DT00001: ...". */
#define DTLOGNO(n) "DT" #n ": "

/* The answer to one query asked over the socket. (Named apart from
 * libdthrottle's DT_OK and DT_NO, which the module links too.) */
typedef enum {
    DT_ANSWER_OK,      /* the daemon answered OK: serve */
    DT_ANSWER_NO,      /* the daemon answered NO: refuse */
    DT_ANSWER_FAILED,  /* asked, and no valid answer in time: the fail mode decides */
    DT_ANSWER_BACKOFF  /* not asked: backing off after a failure; the fail mode decides */
} dt_answer;

/* dt_target is one daemon address and, in a child, its connections. */
typedef struct dt_target {
    const char *name;              /* as configured, for logs */
    struct sockaddr_storage addr;  /* resolved when the configuration is read */
    socklen_t addrlen;
    int family;                    /* AF_UNIX, AF_INET or AF_INET6 */
    const char *path;              /* AF_UNIX: the socket as libdthrottle names it,
                                      "/path" or "@name"; NULL over TCP */

    /* Per child, from dt_target_child_init; all below guarded by mu. */
    apr_thread_mutex_t *mu;
    int *idle;                     /* connections not in use, most recent last */
    int nidle, cap;                /* cap: the most kept idle, one per thread */
    apr_uint64_t retry_at;         /* monotonic ns when a probe may go; 0 healthy */
    apr_uint64_t gen;              /* +1 per counted failure */
    int failures;                  /* consecutive counted failures */

    /* Per child, from dt_inproc_child_init (dthrottle_shared.c); atomic. */
    struct dt_table *table;        /* the attachment to the daemon's shared table, or NULL */
    apr_uint64_t attach_at;        /* monotonic ns before which no attach is tried */
    int attaching;                 /* 1 while a thread of the child attaches */
} dt_target;

/* dt_target_make parses addr ("/path", "unix:/path", "@abstract" or
 * "host:port") and resolves it. It returns an error message or NULL. */
const char *dt_target_make(apr_pool_t *p, const char *addr, dt_target **out);

/* dt_target_child_init gives t its per-child state: a pool that keeps at
 * most cap idle connections. Connections are opened lazily, by queries. */
apr_status_t dt_target_child_init(dt_target *t, apr_pool_t *pchild, int cap);

/* dt_client_ask sends line (a tag and its "\n", len bytes) and waits at most
 * timeout for the reply. A connection that fails or times out is closed,
 * so a late reply never answers a later query. A failure backs off the
 * whole child: for min, doubling per consecutive failure up to max, every
 * query is answered DT_ANSWER_BACKOFF at once; then one query probes. The first
 * failure of an outage and the recovery are logged, once each. */
dt_answer dt_client_ask(request_rec *r, dt_target *t, const char *line, apr_size_t len,
                        apr_interval_time_t timeout, apr_interval_time_t min_backoff,
                        apr_interval_time_t max_backoff);

#endif
