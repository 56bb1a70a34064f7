/* dthrottle_shared.c: an Apache child's attachment to the table dthrottled
 * shares, and the decisions made from it. See dthrottle_shared.h.
 *
 * The attachment (a dt_table of libdthrottle) is made in each child, never
 * in the parent: the children are forked from the parent, and each must
 * have its own socket and mappings. A dt_table is safe for the threads of
 * one child; it is published in t->table with an atomic store, replaced in
 * place by dt_reattach, and closed with the child's pool.
 *
 * libdthrottle's blocking dt_ask is not used: a query the table does not
 * decide goes through the child's pooled connections (dthrottle_client.c),
 * with DThrottleTimeout and the backoff. Attaching again is done only
 * after the daemon answered there, so that a daemon that is frozen or gone
 * costs requests no more than the socket's timeout and backoff already do.
 */
#include <errno.h>
#include <time.h>

#include "httpd.h"
#include "http_config.h"
#include "http_log.h"
#include "apr_strings.h"

#include "../../libdthrottle/dthrottle_table.h"
#include "dthrottle_shared.h"

APLOG_USE_MODULE(dthrottle);

#define NS_PER_SEC 1000000000LL
#define ATTACH_RETRY_NS (1 * NS_PER_SEC)   /* after a failed attach */
#define SOCKET_ONLY_NS (30 * NS_PER_SEC)   /* while the daemon shares no table */

/* mono_now returns a monotonic clock in nanoseconds. */
static apr_uint64_t mono_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (apr_uint64_t)ts.tv_sec * NS_PER_SEC + (apr_uint64_t)ts.tv_nsec;
}

/* close_table closes the attachment when the child's pool is destroyed. */
static apr_status_t close_table(void *data)
{
    dt_target *t = data;

    dt_close(__atomic_exchange_n(&t->table, NULL, __ATOMIC_ACQ_REL));
    return APR_SUCCESS;
}

void dt_inproc_child_init(dt_target *t, apr_pool_t *pchild, server_rec *s, int now)
{
    dt_table *tb = NULL;
    int err;

    t->table = NULL;
    t->attach_at = 0;
    t->attaching = 0;
    if (t->path == NULL) {
        return; /* TCP: the table is shared over a Unix socket only */
    }
    apr_pool_cleanup_register(pchild, t, close_table, apr_pool_cleanup_null);
    if (!now) {
        return;
    }
    if (dt_open(t->path, &tb) != 0) {
        err = errno;
        ap_log_error(APLOG_MARK, APLOG_INFO, APR_FROM_OS_ERROR(err), s, DTLOGNO(00030)
                     "no shared table from dthrottled at %s yet: asking over "
                     "the socket, and attaching once the daemon answers there",
                     t->name);
        return;
    }
    __atomic_store_n(&t->table, tb, __ATOMIC_RELEASE);
    if (!dt_shared(tb)) {
        t->attach_at = mono_now() + SOCKET_ONLY_NS;
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, DTLOGNO(00031)
                     "dthrottled at %s shares no table ([listen] share_table "
                     "= false, or a layout this module does not read): asking "
                     "over the socket", t->name);
        return;
    }
    ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, s, DTLOGNO(00032)
                 "attached to the table dthrottled at %s shares: deciding in "
                 "process", t->name);
}

dt_inproc_answer dt_inproc_decide(dt_target *t, const char *tag, apr_size_t n,
                                  apr_pool_t *p, const char **retry_after)
{
    dt_table *tb;
    dt_result res;

    if (t->path == NULL) {
        return DT_INPROC_ASK;
    }
    tb = __atomic_load_n(&t->table, __ATOMIC_ACQUIRE);
    if (tb == NULL || !dt_shared(tb)) {
        return DT_INPROC_ATTACH;
    }
    switch (dt_decide(tb, tag, n, dt_now(), &res)) {
    case DT_OK:
        return DT_INPROC_OK;
    case DT_NO:
        *retry_after = NULL;
        if (res.reset_ns > 0) { /* a limit's bucket; a deny policy has none */
            dt_header_values h;

            dt_headers(NULL, 0, (double)res.remaining, res.retry_after_ns, res.reset_ns, &h);
            if (h.retry_after_len > 0) {
                *retry_after = apr_pstrmemdup(p, h.retry_after, h.retry_after_len);
            }
        }
        return DT_INPROC_NO;
    case DT_LEFT:
        return DT_INPROC_ATTACH;
    default:
        return DT_INPROC_ASK;
    }
}

void dt_inproc_answered(request_rec *r, dt_target *t)
{
    apr_uint64_t now = mono_now();
    dt_table *tb;
    int rc, err, shared;

    if (now < __atomic_load_n(&t->attach_at, __ATOMIC_RELAXED)
        || __atomic_exchange_n(&t->attaching, 1, __ATOMIC_ACQUIRE)) {
        return; /* too soon after the last attempt, or another thread attaches */
    }
    tb = __atomic_load_n(&t->table, __ATOMIC_ACQUIRE);
    if (tb == NULL) {
        /* The daemon was not there when this child started. */
        rc = dt_open(t->path, &tb);
        err = errno;
        if (rc == 0) {
            __atomic_store_n(&t->table, tb, __ATOMIC_RELEASE);
        }
    }
    else {
        /* The daemon left the table (or shared none): attach again. It is a
         * no-op returning 0 if the table in use is live. */
        rc = dt_reattach(tb);
        err = errno;
    }
    shared = rc == 0 && dt_shared(tb);
    __atomic_store_n(&t->attach_at,
                     shared ? 0 : now + (rc == 0 ? SOCKET_ONLY_NS : ATTACH_RETRY_NS),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&t->attaching, 0, __ATOMIC_RELEASE);
    if (shared) {
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, DTLOGNO(00033)
                      "attached to the table dthrottled at %s shares: deciding "
                      "in process", t->name);
    }
    else if (rc != 0 && err != EAGAIN) {
        ap_log_rerror(APLOG_MARK, APLOG_INFO, APR_FROM_OS_ERROR(err), r,
                      DTLOGNO(00034) "attaching to the table dthrottled at %s "
                      "shares: asking over the socket, and trying again in a "
                      "second", t->name);
    }
}
