/* dthrottle_shared.h: deciding in an Apache child from the table
 * dthrottled shares (docs/shared-table.md), through libdthrottle
 * (libdthrottle, compiled into the module).
 *
 * When a child starts it attaches to every target that is a Unix socket
 * (dt_inproc_child_init): it connects, the daemon hands it the table's two
 * memory files, and the child maps them. From then on a query for a tag
 * the daemon tracks is decided in the child, with a hash, a probe and one
 * compare-and-swap, and no system call. What the table cannot decide (a
 * tag the daemon does not track yet, which the daemon inserts when asked;
 * a tag longer than it keeps; a reload under way) is asked over the
 * socket as before (dthrottle_client.c), and so is every query of a target
 * over TCP, of a daemon that shares no table ([listen] share_table =
 * false), and of a child that could not attach. When the daemon leaves the
 * table (a stop, or no heartbeat for a second), queries are asked over the
 * socket again, and the child attaches again once the daemon answers
 * there.
 *
 * Safe for concurrent use by the threads of one child once
 * dt_inproc_child_init has run.
 */
#ifndef DTHROTTLE_SHARED_H
#define DTHROTTLE_SHARED_H

#include "httpd.h"

#include "dthrottle_client.h"

/* What the shared table made of a query. */
typedef enum {
    DT_INPROC_OK,    /* serve: decided, and counted for the daemon, in this process */
    DT_INPROC_NO,    /* refuse: likewise */
    DT_INPROC_ASK,   /* not decided here: ask over the socket */
    DT_INPROC_ATTACH /* not decided here, for want of a live table: ask over
                        the socket and, if the daemon answers, call
                        dt_inproc_answered to attach (again) */
} dt_inproc_answer;

/* dt_inproc_child_init readies t, if it is a Unix socket, for this
 * child's attachment to its table, registers its closing with pchild, and
 * attaches at once when now is set (else on the daemon's first answer). A
 * daemon that is not there, or shares no table, is logged (info) and
 * leaves t to the socket. */
void dt_inproc_child_init(dt_target *t, apr_pool_t *pchild, server_rec *s, int now);

/* dt_inproc_decide decides tag (n bytes: the prefix and the tag, without
 * the "\n" the socket would get) from the table of t. On DT_INPROC_NO,
 * *retry_after is the Retry-After value of the tag's bucket (libdthrottle's
 * dt_headers, the daemon's arithmetic), allocated from p; NULL when the
 * table does not say (a deny policy). */
dt_inproc_answer dt_inproc_decide(dt_target *t, const char *tag, apr_size_t n,
                                  apr_pool_t *p, const char **retry_after);

/* dt_inproc_answered tells that the daemon at t answered over the socket a
 * query that dt_inproc_decide answered DT_INPROC_ATTACH: it is up, so the
 * child attaches (again), one thread at a time, and after a failed attach
 * not again for a second (for 30 s while the daemon shares no table). */
void dt_inproc_answered(request_rec *r, dt_target *t);

#endif
