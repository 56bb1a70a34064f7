
/*
 * ngx_http_dthrottle_conn.c: the worker's one connection to dthrottled,
 * made without blocking (ngx_event_connect_peer) by its first ask and kept
 * between asks, and the asks pipelined on it (ngx_http_dthrottle_ask.c
 * queues them; each answer goes to the resume handler given with them):
 *
 *  - An ask puts its line in the out buffer and takes the next place in a
 *    ring of NGX_HTTP_DTHROTTLE_QUEUE, with a timer of its own (its
 *    location's dthrottle_timeout: connecting, sending, the answer). The
 *    write event, posted, sends the asks of one turn of the event loop in
 *    one send(). Each reply read answers the oldest place; a reply, or a
 *    byte of one, before its ask was all sent, or one neither "OK\n" nor
 *    "NO\n", fails the connection: answers never go out of step.
 *  - Failed whole: a timer, a read or write error, the daemon closing the
 *    connection while asks wait, or a bad reply closes it, and every ask
 *    waiting is answered by the fail mode; the next ask connects again, so
 *    a late answer never answers another query. Closed by the daemon
 *    while nothing waits, it is just closed; a connection that answered
 *    before, closed before anything of the asks waiting was sent on it (a
 *    restart), is replaced, and they are sent on the new one.
 *  - Bounded: past NGX_HTTP_DTHROTTLE_QUEUE asks waiting, or
 *    NGX_HTTP_DTHROTTLE_OUT bytes not sent (the daemon not reading), an
 *    ask is refused and the fail mode answers it at once.
 *  - A request gone mid-ask gives up its place (ngx_http_dthrottle_unqueue,
 *    from its pool's cleanup): the place stays, its timer running, its
 *    reply read and dropped, and nothing points to the request. The
 *    places are ngx_http_dthrottle_ring.c's.
 *  - The worker exiting closes the connection and drops what waits.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include <ngx_event_connect.h>

#include "ngx_http_dthrottle_module.h"


#define NGX_HTTP_DTHROTTLE_OUT    65536     /* bytes of asks not yet sent */
#define NGX_HTTP_DTHROTTLE_READ   768       /* bytes read at once: replies */


/* The worker's connection to the daemon, and what waits on it. */
typedef struct {
    ngx_peer_connection_t       peer;     /* connection NULL: none */
    ngx_http_dthrottle_main_conf_t
                               *dmcf;
    ngx_http_dthrottle_resume_pt
                                resume;   /* where answers go */
    ngx_http_dthrottle_ring_t   ring;     /* the asks waiting */
    u_char                     *out;      /* OUT bytes: pos to last unsent */
    size_t                      pos;
    size_t                      last;
    uint64_t                    queued;   /* bytes ever put in out */
    uint64_t                    sent;     /* of those, sent */
    u_char                      reply[3];
    size_t                      got;
    uint64_t                    acked;    /* of those, asks answered */
    ngx_uint_t                  gen;      /* connections closed */
    unsigned                    kept:1;   /* it answered an ask */
} ngx_http_dthrottle_conn_t;


static ngx_int_t ngx_http_dthrottle_connect(ngx_http_dthrottle_conn_t *k,
    const char **err);
static ngx_int_t ngx_http_dthrottle_flush(ngx_http_dthrottle_conn_t *k);
static void ngx_http_dthrottle_write_handler(ngx_event_t *wev);
static void ngx_http_dthrottle_read_handler(ngx_event_t *rev);
static void ngx_http_dthrottle_timeout_handler(ngx_event_t *ev);
static void ngx_http_dthrottle_lost(ngx_http_dthrottle_conn_t *k,
    const char *err);
static void ngx_http_dthrottle_fail_all(ngx_http_dthrottle_conn_t *k,
    const char *err);
static void ngx_http_dthrottle_close(ngx_http_dthrottle_conn_t *k);


static ngx_http_dthrottle_conn_t  ngx_http_dthrottle_conn;


/*
 * ngx_http_dthrottle_queue() queues the ask of tag (checked: no CR or LF)
 * for ctx's request, within timeout, connecting first if need be. It
 * returns NGX_OK (queued: resume will be called with its answer),
 * NGX_DECLINED (not queued; *err says why) or NGX_ERROR.
 */

ngx_int_t
ngx_http_dthrottle_queue(ngx_http_dthrottle_main_conf_t *dmcf,
    ngx_http_dthrottle_ctx_t *ctx, ngx_str_t *tag, ngx_msec_t timeout,
    ngx_http_dthrottle_resume_pt resume, const char **err)
{
    ngx_event_t                *ev;
    ngx_http_dthrottle_conn_t  *k;

    k = &ngx_http_dthrottle_conn;

    if (k->out == NULL) {
        k->dmcf = dmcf;
        k->out = ngx_alloc(NGX_HTTP_DTHROTTLE_OUT, ngx_cycle->log);

        if (k->out == NULL
            || ngx_http_dthrottle_ring_init(&k->ring,
                                   ngx_http_dthrottle_timeout_handler)
               != NGX_OK)
        {
            ngx_http_dthrottle_queue_exit();
            return NGX_ERROR;
        }
    }

    if (k->ring.waiting == NGX_HTTP_DTHROTTLE_QUEUE) {
        *err = "too many asks waiting";
        return NGX_DECLINED;
    }

    if (k->last + tag->len + 1 > NGX_HTTP_DTHROTTLE_OUT) {
        k->last = ngx_movemem(k->out, k->out + k->pos, k->last - k->pos)
                  - k->out;
        k->pos = 0;

        if (k->last + tag->len + 1 > NGX_HTTP_DTHROTTLE_OUT) {
            *err = "too many asks not sent yet";
            return NGX_DECLINED;
        }
    }

    if (k->peer.connection == NULL
        && ngx_http_dthrottle_connect(k, err) != NGX_OK)
    {
        return NGX_DECLINED;
    }

    k->resume = resume;

    ngx_memcpy(k->out + k->last, tag->data, tag->len);
    k->last += tag->len;
    k->out[k->last++] = '\n';
    k->queued += tag->len + 1;

    ngx_http_dthrottle_ring_push(&k->ring, ctx, k->queued, timeout);

    /* sent once this turn of the event loop is over, with the others;
     * a full socket, or one connecting, says when by its write event */
    ev = k->peer.connection->write;

    if (ev->ready && !ev->posted) {
        ngx_post_event(ev, &ngx_posted_events);
    }

    return NGX_OK;
}


/*
 * ngx_http_dthrottle_connect() connects to the daemon, without blocking:
 * NGX_OK (connected, or connecting: the write event says when), or
 * NGX_DECLINED (*err says why).
 */

static ngx_int_t
ngx_http_dthrottle_connect(ngx_http_dthrottle_conn_t *k, const char **err)
{
    ngx_int_t                        rc;
    ngx_connection_t                *c;
    ngx_peer_connection_t           *pc;
    ngx_http_dthrottle_main_conf_t  *dmcf;

    dmcf = k->dmcf;

    /*
     * A daemon that stopped cleanly removed its socket: say so without a
     * connect(), which nginx would log at "crit" for each attempt.
     */

    if (!dmcf->abstract && access((const char *) dmcf->socket.data, F_OK) != 0)
    {
        *err = "its socket is gone";
        return NGX_DECLINED;
    }

    pc = &k->peer;
    ngx_memzero(pc, sizeof(ngx_peer_connection_t));

    pc->sockaddr = dmcf->addr.sockaddr;
    pc->socklen = dmcf->addr.socklen;
    pc->name = &dmcf->addr.name;
    pc->get = ngx_event_get_peer;
    pc->log = ngx_cycle->log;      /* it outlives the requests it serves */
    pc->log_error = NGX_ERROR_ERR;

    rc = ngx_event_connect_peer(pc);

    if (rc == NGX_ERROR || rc == NGX_BUSY || rc == NGX_DECLINED) {
        /* nginx logged why, and closed the socket */
        pc->connection = NULL;
        *err = "cannot connect";
        return NGX_DECLINED;
    }

    c = pc->connection;
    c->data = k;
    c->read->handler = ngx_http_dthrottle_read_handler;
    c->write->handler = ngx_http_dthrottle_write_handler;

    k->kept = 0;
    k->got = 0;

    return NGX_OK;
}


/*
 * ngx_http_dthrottle_flush() sends what the out buffer holds: NGX_OK once
 * it is all sent or the socket is full, or NGX_ERROR.
 */

static ngx_int_t
ngx_http_dthrottle_flush(ngx_http_dthrottle_conn_t *k)
{
    ssize_t            n;
    ngx_connection_t  *c;

    c = k->peer.connection;

    while (k->pos < k->last) {
        n = c->send(c, k->out + k->pos, k->last - k->pos);

        if (n == NGX_AGAIN) {
            break;
        }

        if (n <= 0) {
            return NGX_ERROR;
        }

        k->pos += n;
        k->sent += n;
    }

    if (k->pos == k->last) {
        k->pos = 0;
        k->last = 0;
    }

    if (ngx_handle_write_event(c->write, 0) != NGX_OK) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


static void
ngx_http_dthrottle_write_handler(ngx_event_t *wev)
{
    ngx_connection_t           *c;
    ngx_http_dthrottle_conn_t  *k;

    ngx_uint_t                  gen;

    c = wev->data;
    k = c->data;

    if (ngx_http_dthrottle_flush(k) == NGX_OK) {
        return;
    }

    /* the daemon may have answered asks before it went: those answers
     * are taken first, then the connection ends */
    gen = k->gen;
    ngx_http_dthrottle_read_handler(c->read);

    if (k->gen == gen) {
        ngx_http_dthrottle_lost(k, "cannot send");
    }
}


/*
 * The read handler takes the replies in order, each three bytes, and
 * resumes the request of the oldest place with each (or drops it, its
 * request gone).
 */

static void
ngx_http_dthrottle_read_handler(ngx_event_t *rev)
{
    u_char                     *p, *last;
    u_char                      buf[NGX_HTTP_DTHROTTLE_READ];
    ssize_t                     n;
    ngx_uint_t                  answer, gen;
    ngx_connection_t           *c;
    ngx_http_dthrottle_ctx_t   *ctx;
    ngx_http_dthrottle_conn_t  *k;

    c = rev->data;
    k = c->data;
    gen = k->gen;

    /* the worker is exiting (worker_shutdown_timeout) */
    if (c->close) {
        ngx_http_dthrottle_fail_all(k, "the worker is exiting");
        return;
    }

    for ( ;; ) {
        n = c->recv(c, buf, sizeof(buf));

        if (n == NGX_AGAIN) {
            if (ngx_handle_read_event(rev, 0) != NGX_OK) {
                ngx_http_dthrottle_lost(k, "cannot read");
            }

            return;
        }

        if (n <= 0) {
            ngx_http_dthrottle_lost(k, n == 0 ? "it closed the connection"
                                              : "cannot read");
            return;
        }

        last = buf + n;

        for (p = buf; p < last; p++) {

            /* a reply, or part of one, before its ask was all sent */
            if (k->ring.waiting == 0
                || k->ring.slots[k->ring.head].end > k->sent)
            {
                ngx_http_dthrottle_fail_all(k, "an answer to nothing asked");
                return;
            }

            k->reply[k->got++] = *p;

            if (k->got < sizeof(k->reply)) {
                continue;
            }

            k->got = 0;

            if (ngx_strncmp(k->reply, "OK\n", 3) == 0) {
                answer = NGX_HTTP_DTHROTTLE_ANSWER_OK;

            } else if (ngx_strncmp(k->reply, "NO\n", 3) == 0) {
                answer = NGX_HTTP_DTHROTTLE_ANSWER_NO;

            } else {
                ngx_http_dthrottle_fail_all(k, "an answer neither OK nor NO");
                return;
            }

            k->kept = 1;
            ctx = ngx_http_dthrottle_ring_pop(&k->ring, &k->acked);

            if (ctx != NULL) {
                k->resume(ctx, answer, NULL);
            }

            /* nothing a request does when resumed closes the connection;
             * this says so */
            if (k->gen != gen) {
                return;
            }
        }
    }
}


static void
ngx_http_dthrottle_timeout_handler(ngx_event_t *ev)
{
    ngx_http_dthrottle_fail_all(&ngx_http_dthrottle_conn, "timed out");
}


/*
 * ngx_http_dthrottle_lost() ends a connection the daemon closed, or that
 * failed to send or read: quietly when nothing waits; replaced when it
 * answered before and nothing waiting was sent on it (the daemon closed a
 * kept connection, restarting: the asks go on a new one); else every
 * waiting ask fails.
 */

static void
ngx_http_dthrottle_lost(ngx_http_dthrottle_conn_t *k, const char *err)
{
    if (k->ring.waiting == 0) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                       "dthrottle: connection closed while idle: %s", err);
        ngx_http_dthrottle_close(k);
        k->pos = 0;
        k->last = 0;
        return;
    }

    /* every byte sent on it was an ask it answered */
    if (k->kept && k->sent == k->acked && k->got == 0) {
        ngx_http_dthrottle_close(k);

        if (ngx_http_dthrottle_connect(k, &err) == NGX_OK) {
            if (k->peer.connection->write->ready) {
                ngx_post_event(k->peer.connection->write, &ngx_posted_events);
            }

            return;
        }
    }

    ngx_http_dthrottle_fail_all(k, err);
}


/*
 * ngx_http_dthrottle_fail_all() closes the connection and answers every
 * ask waiting on it by the fail mode. A request resumed may end others
 * (the streams of one HTTP/2 connection) and ask anew: the places are
 * taken from the queue one at a time, so an ask gone meanwhile is
 * skipped, and a new ask, queued behind them on a new connection, is not
 * theirs to fail.
 */

static void
ngx_http_dthrottle_fail_all(ngx_http_dthrottle_conn_t *k, const char *err)
{
    ngx_uint_t                 n;
    ngx_http_dthrottle_ctx_t  *ctx;

    n = k->ring.waiting;

    ngx_http_dthrottle_close(k);
    k->pos = 0;
    k->last = 0;
    k->sent = k->queued;

    while (n--) {
        ctx = ngx_http_dthrottle_ring_pop(&k->ring, &k->acked);

        if (ctx != NULL) {
            k->resume(ctx, NGX_HTTP_DTHROTTLE_ANSWER_FAILED, err);
        }
    }
}


static void
ngx_http_dthrottle_close(ngx_http_dthrottle_conn_t *k)
{
    if (k->peer.connection != NULL) {
        ngx_close_connection(k->peer.connection);
        k->peer.connection = NULL;
    }

    k->gen++;
    k->got = 0;
    k->kept = 0;
}


/*
 * ngx_http_dthrottle_queue_exit(), the worker exiting: closes the
 * connection and drops the asks waiting on it, resuming none.
 */

void
ngx_http_dthrottle_queue_exit(void)
{
    ngx_http_dthrottle_conn_t  *k;

    k = &ngx_http_dthrottle_conn;

    ngx_http_dthrottle_close(k);

    while (k->ring.waiting > 0) {
        (void) ngx_http_dthrottle_ring_pop(&k->ring, &k->acked);
    }

    ngx_http_dthrottle_ring_free(&k->ring);

    if (k->out != NULL) {
        ngx_free(k->out);
    }

    ngx_memzero(k, sizeof(ngx_http_dthrottle_conn_t));
}
