
/*
 * ngx_http_dthrottle_ask.c: talking to dthrottled on its Unix socket.
 *
 * Asking: what the table does not decide is asked in the line protocol
 * ("tag\n", answered "OK\n" or "NO\n") with nginx's events: the phase
 * handler returns NGX_AGAIN, the worker serves other requests, and the
 * answer, a failure or dthrottle_timeout resumes the request's phases.
 * One connection per ask, closed once it is over: a timed-out connection
 * is never used again, so a late answer never answers another query. New
 * tags are asked once (the daemon inserts them), then decided in process;
 * only a daemon that shares no table is asked every query. The connection
 * lives at most as long as the request: the cleanup of the request's pool
 * closes it when the client goes away mid-ask (ngx_http_test_reading
 * finalizes the request), so nothing is left to fire on a freed request.
 *
 * Attaching: libdthrottle's dt_open and dt_reattach, which block for one
 * exchange with the daemon; see ngx_http_dthrottle_attach().
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include <ngx_event_connect.h>

#include "ngx_http_dthrottle_module.h"


#define NGX_HTTP_DTHROTTLE_REATTACH   1000   /* ms after a failed attach */
#define NGX_HTTP_DTHROTTLE_RECHECK    10000  /* ms: a daemon sharing nothing */


static ngx_int_t ngx_http_dthrottle_send(ngx_http_dthrottle_ctx_t *ctx);
static void ngx_http_dthrottle_write_handler(ngx_event_t *wev);
static void ngx_http_dthrottle_read_handler(ngx_event_t *rev);
static void ngx_http_dthrottle_finish(ngx_http_dthrottle_ctx_t *ctx,
    ngx_uint_t answer, const char *err);
static void ngx_http_dthrottle_close(ngx_http_dthrottle_ctx_t *ctx);


/*
 * ngx_http_dthrottle_ask() starts asking the daemon tag (checked: no CR
 * or LF) within timeout. It returns NGX_AGAIN (asking: the request waits),
 * NGX_DECLINED (the daemon cannot be reached; *err says why) or
 * NGX_ERROR.
 */

ngx_int_t
ngx_http_dthrottle_ask(ngx_http_request_t *r, ngx_http_dthrottle_ctx_t *ctx,
    ngx_str_t *tag, ngx_msec_t timeout, const char **err)
{
    ngx_int_t                        rc;
    ngx_connection_t                *c;
    ngx_peer_connection_t           *pc;
    ngx_http_dthrottle_main_conf_t  *dmcf;

    dmcf = ngx_http_get_module_main_conf(r, ngx_http_dthrottle_module);

    /*
     * A daemon that stopped cleanly removed its socket: say so without a
     * connect(), which nginx would log at "crit" for each ask.
     */

    if (!dmcf->abstract && access((const char *) dmcf->socket.data, F_OK) != 0)
    {
        *err = "its socket is gone";
        return NGX_DECLINED;
    }

    ctx->line.data = ngx_pnalloc(r->pool, tag->len + 1);
    if (ctx->line.data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(ctx->line.data, tag->data, tag->len);
    ctx->line.data[tag->len] = '\n';
    ctx->line.len = tag->len + 1;
    ctx->sent = 0;
    ctx->got = 0;

    pc = &ctx->peer;
    ngx_memzero(pc, sizeof(ngx_peer_connection_t));

    pc->sockaddr = dmcf->addr.sockaddr;
    pc->socklen = dmcf->addr.socklen;
    pc->name = &dmcf->addr.name;
    pc->get = ngx_event_get_peer;
    pc->log = r->connection->log;
    pc->log_error = NGX_ERROR_ERR;

    rc = ngx_event_connect_peer(pc);

    if (rc == NGX_ERROR || rc == NGX_BUSY || rc == NGX_DECLINED) {
        /* nginx logged why, and closed the socket */
        *err = "cannot connect";
        return NGX_DECLINED;
    }

    ngx_http_dthrottle_worker.asking++;

    c = pc->connection;
    c->data = ctx;
    c->read->handler = ngx_http_dthrottle_read_handler;
    c->write->handler = ngx_http_dthrottle_write_handler;

    /* one timer for the whole ask: connecting, sending, the answer */
    ngx_add_timer(c->read, timeout);

    /* connected, the line goes now; else the write handler sends it */

    if (rc == NGX_OK && ngx_http_dthrottle_send(ctx) == NGX_ERROR) {
        ngx_http_dthrottle_close(ctx);
        *err = "cannot send";
        return NGX_DECLINED;
    }

    if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        ngx_http_dthrottle_close(ctx);
        return NGX_ERROR;
    }

    /* a client closing the connection ends the request (and the ask) */
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_request_empty_handler;
    ctx->state = NGX_HTTP_DTHROTTLE_ASKING;

    return NGX_AGAIN;
}


/*
 * ngx_http_dthrottle_send() sends what is left of the line: NGX_OK once
 * it is all sent, NGX_AGAIN when the socket is full, or NGX_ERROR.
 */

static ngx_int_t
ngx_http_dthrottle_send(ngx_http_dthrottle_ctx_t *ctx)
{
    ssize_t            n;
    ngx_int_t          rc;
    ngx_connection_t  *c;

    c = ctx->peer.connection;
    rc = NGX_OK;

    while (ctx->sent < ctx->line.len) {
        n = c->send(c, ctx->line.data + ctx->sent, ctx->line.len - ctx->sent);

        if (n == NGX_AGAIN) {
            rc = NGX_AGAIN;
            break;
        }

        if (n <= 0) {
            return NGX_ERROR;
        }

        ctx->sent += n;
    }

    if (ngx_handle_write_event(c->write, 0) != NGX_OK) {
        return NGX_ERROR;
    }

    return rc;
}


static void
ngx_http_dthrottle_write_handler(ngx_event_t *wev)
{
    ngx_connection_t          *c;
    ngx_http_dthrottle_ctx_t  *ctx;

    c = wev->data;
    ctx = c->data;

    if (ngx_http_dthrottle_send(ctx) == NGX_ERROR) {
        ngx_http_dthrottle_finish(ctx, NGX_HTTP_DTHROTTLE_ANSWER_FAILED,
                                  "cannot send");
    }
}


static void
ngx_http_dthrottle_read_handler(ngx_event_t *rev)
{
    ssize_t                    n;
    ngx_connection_t          *c;
    ngx_http_dthrottle_ctx_t  *ctx;

    c = rev->data;
    ctx = c->data;

    if (rev->timedout) {
        ngx_http_dthrottle_finish(ctx, NGX_HTTP_DTHROTTLE_ANSWER_FAILED,
                                  "timed out");
        return;
    }

    while (ctx->got < sizeof(ctx->reply)) {
        n = c->recv(c, ctx->reply + ctx->got, sizeof(ctx->reply) - ctx->got);

        if (n == NGX_AGAIN) {
            if (ngx_handle_read_event(rev, 0) != NGX_OK) {
                ngx_http_dthrottle_finish(ctx,
                                          NGX_HTTP_DTHROTTLE_ANSWER_FAILED,
                                          "cannot read");
            }

            return;
        }

        if (n <= 0) {
            ngx_http_dthrottle_finish(ctx, NGX_HTTP_DTHROTTLE_ANSWER_FAILED,
                                      n == 0 ? "it closed the connection"
                                             : "cannot read");
            return;
        }

        ctx->got += n;
    }

    if (ngx_strncmp(ctx->reply, "OK\n", 3) == 0) {
        ngx_http_dthrottle_finish(ctx, NGX_HTTP_DTHROTTLE_ANSWER_OK, NULL);

    } else if (ngx_strncmp(ctx->reply, "NO\n", 3) == 0) {
        ngx_http_dthrottle_finish(ctx, NGX_HTTP_DTHROTTLE_ANSWER_NO, NULL);

    } else {
        ngx_http_dthrottle_finish(ctx, NGX_HTTP_DTHROTTLE_ANSWER_FAILED,
                                  "an answer neither OK nor NO");
    }
}


/*
 * ngx_http_dthrottle_finish() ends an ask and resumes the request: the
 * phase handler, run again, returns what the answer decided.
 */

static void
ngx_http_dthrottle_finish(ngx_http_dthrottle_ctx_t *ctx, ngx_uint_t answer,
    const char *err)
{
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ctx->request;
    c = r->connection;

    ngx_http_dthrottle_close(ctx);
    ngx_http_set_log_request(c->log, r);

    ctx->rc = ngx_http_dthrottle_answered(r, ctx, answer, err);
    ctx->state = NGX_HTTP_DTHROTTLE_ANSWERED;

    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;

    ngx_http_core_run_phases(r);
    ngx_http_run_posted_requests(c);
}


static void
ngx_http_dthrottle_close(ngx_http_dthrottle_ctx_t *ctx)
{
    if (ctx->peer.connection != NULL) {
        ngx_close_connection(ctx->peer.connection);
        ctx->peer.connection = NULL;
        ngx_http_dthrottle_worker.asking--;
    }

    ngx_http_dthrottle_probe_done(ctx);
}


/*
 * The cleanup of a decided request's pool: closes the connection of an ask
 * the request did not wait out (the client went away). Its handler also
 * marks the request decided (ngx_http_dthrottle_get_ctx).
 */

void
ngx_http_dthrottle_cleanup(void *data)
{
    ngx_http_dthrottle_ctx_t  *ctx = data;

    if (ctx->peer.connection != NULL) {
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, ctx->peer.connection->log, 0,
                       "dthrottle: the request left while asking");
    }

    ngx_http_dthrottle_close(ctx);
}


/*
 * ngx_http_dthrottle_attach() attaches the worker to the daemon's table:
 * dt_open() the first time, dt_reattach() after. It blocks for one
 * exchange on the daemon's socket (a connect, a line out, a line and two
 * descriptors back: tens of microseconds, at most a second per send and
 * receive), so it runs when the worker starts, and then only right after
 * the daemon answered an ask: at once when the daemon restarted, a second
 * after a failed attempt, every 10 s while the daemon shares no table.
 */

void
ngx_http_dthrottle_attach(ngx_log_t *log,
    ngx_http_dthrottle_main_conf_t *dmcf)
{
    int                           rc, shared;
    dt_table                     *t;
    ngx_err_t                     err;
    ngx_uint_t                    level;
    ngx_http_dthrottle_worker_t  *w;

    w = &ngx_http_dthrottle_worker;

    if (w->table == NULL) {
        t = NULL;
        rc = dt_open((const char *) dmcf->socket.data, &t);
        if (rc == 0) {
            w->table = t;
        }

    } else {
        rc = dt_reattach(w->table);
    }

    if (rc != 0) {
        err = ngx_errno;

        if (!w->attach_logged) {
            w->attach_logged = 1;
            ngx_log_error(NGX_LOG_NOTICE, log, err,
                          "dthrottle: cannot attach to the table of "
                          "dthrottled at \"%V\"; asking it over its socket, "
                          "and attaching once it answers", &dmcf->socket);
        }

        w->down = 1;
        w->attach_at = ngx_current_msec + NGX_HTTP_DTHROTTLE_REATTACH;
        return;
    }

    w->attaches++;
    w->left = 0;
    w->attach_logged = 0;
    shared = dt_shared(w->table);

    w->attach_at = ngx_current_msec
                   + (shared ? 0 : NGX_HTTP_DTHROTTLE_RECHECK);

    level = w->down ? NGX_LOG_NOTICE : NGX_LOG_INFO;
    ngx_log_error(level, log, 0,
                  "dthrottle: attached%s to dthrottled at \"%V\": %s",
                  w->down ? " again" : "", &dmcf->socket,
                  shared ? "deciding in process"
                         : "it shares no table, asking it");
    w->down = 0;
}
