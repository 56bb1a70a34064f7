
/*
 * ngx_http_dthrottle_ask.c: asking dthrottled, and attaching to its table.
 *
 * Asking: what the table does not decide is asked in the line protocol
 * ("tag\n", answered "OK\n" or "NO\n") with nginx's events: the phase
 * handler returns NGX_AGAIN, the worker serves other requests, and the
 * answer, a failure or dthrottle_timeout calls the phase handler's resume
 * (ngx_http_dthrottle_decide.c), which runs the request's phases again.
 * The asks of a worker are pipelined on one connection it keeps
 * (ngx_http_dthrottle_conn.c): a failure, a timeout among them, fails
 * every ask waiting on it, and the connection is never used again, so a
 * late answer never answers another query. New tags are asked once (the
 * daemon inserts them), then decided in process; only a daemon that
 * shares no table is asked every query. A request whose client goes away
 * mid-ask (ngx_http_test_reading finalizes it) gives up its place in the
 * cleanup of its pool (ngx_http_dthrottle_unqueue), so nothing is left to
 * fire on a freed request.
 *
 * The module's files call one way: decide.c calls this file and conn.c,
 * this file calls conn.c, and conn.c reaches the request only through
 * the resume handler it is given.
 *
 * Attaching: libdthrottle's dt_open and dt_reattach, which block for one
 * exchange with the daemon; see ngx_http_dthrottle_attach().
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_dthrottle_module.h"


#define NGX_HTTP_DTHROTTLE_REATTACH   1000   /* ms after a failed attach */
#define NGX_HTTP_DTHROTTLE_RECHECK    10000  /* ms: a daemon sharing nothing */


/*
 * ngx_http_dthrottle_ask() starts asking the daemon tag (checked: no CR
 * or LF) within timeout. It returns NGX_AGAIN (asking: the request waits
 * until resume is called with the answer), NGX_DECLINED (the ask cannot
 * be made; *err says why) or NGX_ERROR.
 */

ngx_int_t
ngx_http_dthrottle_ask(ngx_http_request_t *r, ngx_http_dthrottle_ctx_t *ctx,
    ngx_str_t *tag, ngx_msec_t timeout, ngx_http_dthrottle_resume_pt resume,
    const char **err)
{
    ngx_int_t                        rc;
    ngx_http_dthrottle_main_conf_t  *dmcf;

    dmcf = ngx_http_get_module_main_conf(r, ngx_http_dthrottle_module);

    /* a client closing the connection ends the request, not the ask */
    if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        return NGX_ERROR;
    }

    rc = ngx_http_dthrottle_queue(dmcf, ctx, tag, timeout, resume, err);
    if (rc != NGX_OK) {
        return rc;
    }

    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_request_empty_handler;
    ctx->state = NGX_HTTP_DTHROTTLE_ASKING;

    return NGX_AGAIN;
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
