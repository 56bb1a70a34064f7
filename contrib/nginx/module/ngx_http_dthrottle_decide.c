
/*
 * ngx_http_dthrottle_decide.c: the phase handler of
 * ngx_http_dthrottle_module (see ngx_http_dthrottle_module.c): a request's
 * tag decided from the table the worker maps, or asked
 * (ngx_http_dthrottle_ask.c) and resumed with the answer; the fail mode
 * and its backoff. Refusals go to ngx_http_dthrottle_refuse.c.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include <nginx.h>

#include "ngx_http_dthrottle_module.h"


#define NGX_HTTP_DTHROTTLE_MAX_TAG    1024   /* bytes a tag may have */
#define NGX_HTTP_DTHROTTLE_RETRY_MIN  50     /* ms without asking after a */
#define NGX_HTTP_DTHROTTLE_RETRY_MAX  5000   /* failure, doubling to this */


static void ngx_http_dthrottle_left(ngx_http_request_t *r,
    ngx_http_dthrottle_loc_conf_t *dlcf, ngx_uint_t left);
static ngx_int_t ngx_http_dthrottle_start_ask(ngx_http_request_t *r,
    ngx_http_dthrottle_loc_conf_t *dlcf, ngx_http_dthrottle_ctx_t *ctx,
    ngx_str_t *tag);
static void ngx_http_dthrottle_resume(ngx_http_dthrottle_ctx_t *ctx,
    ngx_uint_t answer, const char *err);
static void ngx_http_dthrottle_cleanup(void *data);
static ngx_int_t ngx_http_dthrottle_answered(ngx_http_request_t *r,
    ngx_http_dthrottle_ctx_t *ctx, ngx_uint_t answer, const char *err);
static void ngx_http_dthrottle_probe_done(ngx_http_dthrottle_ctx_t *ctx);
static ngx_int_t ngx_http_dthrottle_fail(ngx_http_request_t *r,
    ngx_http_dthrottle_loc_conf_t *dlcf, ngx_http_dthrottle_ctx_t *ctx);


ngx_int_t
ngx_http_dthrottle_handler(ngx_http_request_t *r)
{
    ngx_int_t                        rc;
    ngx_str_t                        tag;
    dt_result                        res;
    ngx_pool_cleanup_t              *cln;
    ngx_http_dthrottle_ctx_t        *ctx;
    ngx_http_dthrottle_worker_t     *w;
    ngx_http_dthrottle_loc_conf_t   *dlcf;

    if (r->main != r) {
        return NGX_DECLINED;
    }

    dlcf = ngx_http_get_module_loc_conf(r, ngx_http_dthrottle_module);

    if (dlcf->tag == NULL) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_dthrottle_get_ctx(r);

    if (ctx != NULL) {
        switch (ctx->state) {

        case NGX_HTTP_DTHROTTLE_ASKING:
            return NGX_AGAIN;

        case NGX_HTTP_DTHROTTLE_ANSWERED:
            ctx->state = NGX_HTTP_DTHROTTLE_DONE;
            return ctx->rc;

        default: /* decided before an internal redirect */
            return NGX_DECLINED;
        }
    }

    if (ngx_http_complex_value(r, dlcf->tag, &tag) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln = ngx_pool_cleanup_add(r->pool, sizeof(ngx_http_dthrottle_ctx_t));
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the rest of the context is set by an ask */
    ctx = cln->data;
    ctx->request = r;
    ctx->slot = NULL;
    ctx->state = NGX_HTTP_DTHROTTLE_DONE;
    ctx->verdict = NGX_HTTP_DTHROTTLE_NONE;
    ctx->probe = 0;
    ctx->probed = 0;
    cln->handler = ngx_http_dthrottle_cleanup;
    ngx_http_set_ctx(r, ctx, ngx_http_dthrottle_module);

    w = &ngx_http_dthrottle_worker;

    if (tag.len == 0) {
        ctx->verdict = NGX_HTTP_DTHROTTLE_EMPTY;
        return NGX_DECLINED;
    }

    if (tag.len > NGX_HTTP_DTHROTTLE_MAX_TAG
        || memchr(tag.data, '\n', tag.len) != NULL
        || memchr(tag.data, '\r', tag.len) != NULL)
    {
        w->bad++;

        if (!w->bad_logged) {
            w->bad_logged = 1;
            ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                          "dthrottle: a tag with CR or LF, or over %d bytes, "
                          "cannot be asked over the line protocol: %s "
                          "(logged once per worker)",
                          NGX_HTTP_DTHROTTLE_MAX_TAG,
                          dlcf->allow_bad ? "served" : "refused");
        }

        ctx->verdict = NGX_HTTP_DTHROTTLE_BAD;

        if (dlcf->allow_bad) {
            return NGX_DECLINED;
        }

        return ngx_http_dthrottle_refuse(r, dlcf, NULL);
    }

    if (w->table != NULL) {
        rc = dt_decide(w->table, (const char *) tag.data, tag.len, dt_now(),
                       &res);

        if (w->left && (rc == DT_OK || rc == DT_NO)) {
            ngx_http_dthrottle_left(r, dlcf, 0);
        }

        switch (rc) {

        case DT_OK:
            w->ok++;
            ctx->verdict = res.retry_after_ns > 0 ? NGX_HTTP_DTHROTTLE_DRY_RUN
                                                  : NGX_HTTP_DTHROTTLE_OK;
            return NGX_DECLINED;

        case DT_NO:
            w->no++;
            ctx->verdict = NGX_HTTP_DTHROTTLE_NO;
            return ngx_http_dthrottle_refuse(r, dlcf, &res);

        case DT_LEFT:
            if (!w->left) {
                ngx_http_dthrottle_left(r, dlcf, 1);
            }

            break;

        default: /* DT_ASK */
            break;
        }
    }

    return ngx_http_dthrottle_start_ask(r, dlcf, ctx, &tag);
}


/*
 * ngx_http_dthrottle_get_ctx() finds the request's context: the module's,
 * or after an internal redirect cleared that, the data of the cleanup
 * the decision added to the main request's pool.
 */

ngx_http_dthrottle_ctx_t *
ngx_http_dthrottle_get_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t        *cln;
    ngx_http_dthrottle_ctx_t  *ctx;

    r = r->main;

    ctx = ngx_http_get_module_ctx(r, ngx_http_dthrottle_module);
    if (ctx != NULL) {
        return ctx;
    }

    for (cln = r->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_dthrottle_cleanup) {
            ctx = cln->data;
            ngx_http_set_ctx(r, ctx, ngx_http_dthrottle_module);
            return ctx;
        }
    }

    return NULL;
}


/*
 * ngx_http_dthrottle_left() records the daemon leaving its table (left:
 * stopped, restarted, or stalled for a second), or beating in it again
 * (a stall over), and logs either once.
 */

static void
ngx_http_dthrottle_left(ngx_http_request_t *r,
    ngx_http_dthrottle_loc_conf_t *dlcf, ngx_uint_t left)
{
    ngx_http_dthrottle_main_conf_t  *dmcf;

    dmcf = ngx_http_get_module_main_conf(r, ngx_http_dthrottle_module);

    ngx_http_dthrottle_worker.left = left;
    ngx_http_dthrottle_worker.down = left;

    if (left) {
        ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0,
                      "dthrottle: detached, failing %s while dthrottled at "
                      "\"%V\" does not answer: it left its table (stopped, "
                      "restarted, or stalled for a second)",
                      dlcf->fail_closed ? "closed" : "open", &dmcf->socket);

    } else {
        ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0,
                      "dthrottle: attached again to dthrottled at \"%V\": "
                      "it beats in its table again, deciding in process",
                      &dmcf->socket);
    }
}


/*
 * ngx_http_dthrottle_start_ask() asks the daemon, unless a failed ask
 * holds the worker back: then the fail mode answers, and after the
 * backoff one request at a time asks (the probe).
 */

static ngx_int_t
ngx_http_dthrottle_start_ask(ngx_http_request_t *r,
    ngx_http_dthrottle_loc_conf_t *dlcf, ngx_http_dthrottle_ctx_t *ctx,
    ngx_str_t *tag)
{
    ngx_int_t                     rc;
    const char                   *err;
    ngx_http_dthrottle_worker_t  *w;

    w = &ngx_http_dthrottle_worker;

    if (w->backoff) {
        if (w->probing || (ngx_msec_int_t) (ngx_current_msec - w->ask_at) < 0) {
            return ngx_http_dthrottle_fail(r, dlcf, ctx);
        }

        w->probing = 1;
        ctx->probe = 1;
        ctx->probed = 1;
    }

    err = "";
    rc = ngx_http_dthrottle_ask(r, ctx, tag, dlcf->timeout,
                                ngx_http_dthrottle_resume, &err);

    if (rc == NGX_AGAIN) {
        return NGX_AGAIN;
    }

    ngx_http_dthrottle_probe_done(ctx);

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_dthrottle_answered(r, ctx, NGX_HTTP_DTHROTTLE_ANSWER_FAILED,
                                       err);
}


/*
 * ngx_http_dthrottle_resume(), the resume handler of an ask, ends it and
 * resumes the request's phases: the phase handler, run again, returns
 * what the answer decided.
 */

static void
ngx_http_dthrottle_resume(ngx_http_dthrottle_ctx_t *ctx, ngx_uint_t answer,
    const char *err)
{
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ctx->request;
    c = r->connection;

    ngx_http_dthrottle_probe_done(ctx);
    ngx_http_set_log_request(c->log, r);

    ctx->rc = ngx_http_dthrottle_answered(r, ctx, answer, err);
    ctx->state = NGX_HTTP_DTHROTTLE_ANSWERED;

    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;

    ngx_http_core_run_phases(r);
    ngx_http_run_posted_requests(c);
}


/*
 * The cleanup of a decided request's pool: a request that did not wait
 * out its ask (the client went away) gives up its place in the queue.
 * Its handler also marks the request decided (ngx_http_dthrottle_get_ctx).
 */

static void
ngx_http_dthrottle_cleanup(void *data)
{
    ngx_http_dthrottle_ctx_t  *ctx = data;

    ngx_http_dthrottle_unqueue(ctx);
    ngx_http_dthrottle_probe_done(ctx);
}


/*
 * ngx_http_dthrottle_answered() takes an ask's outcome (err says why it
 * failed) and returns what the phase handler returns for the request.
 */

static ngx_int_t
ngx_http_dthrottle_answered(ngx_http_request_t *r,
    ngx_http_dthrottle_ctx_t *ctx, ngx_uint_t answer, const char *err)
{
    ngx_http_dthrottle_worker_t     *w;
    ngx_http_dthrottle_loc_conf_t   *dlcf;
    ngx_http_dthrottle_main_conf_t  *dmcf;

    w = &ngx_http_dthrottle_worker;
    dlcf = ngx_http_get_module_loc_conf(r, ngx_http_dthrottle_module);
    dmcf = ngx_http_get_module_main_conf(r, ngx_http_dthrottle_module);

    if (answer == NGX_HTTP_DTHROTTLE_ANSWER_FAILED) {

        if (w->backoff == 0) {
            ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                          "dthrottle: cannot ask dthrottled at \"%V\", "
                          "failing %s: %s", &dmcf->socket,
                          dlcf->fail_closed ? "closed" : "open", err);
            w->backoff = NGX_HTTP_DTHROTTLE_RETRY_MIN;
            w->ask_at = ngx_current_msec + w->backoff;

        } else if (ctx->probed) {
            /* a probe failed, not an ask started before the backoff */
            w->backoff = ngx_min(w->backoff * 2, NGX_HTTP_DTHROTTLE_RETRY_MAX);
            w->ask_at = ngx_current_msec + w->backoff;
        }

        return ngx_http_dthrottle_fail(r, dlcf, ctx);
    }

    w->asked++;

    if (w->backoff) {
        ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0,
                      "dthrottle: asking dthrottled at \"%V\" again",
                      &dmcf->socket);
        w->backoff = 0;
    }

    /* the daemon answers: a worker that does not decide in process
     * attaches (again) */

    if ((w->table == NULL || w->left || !dt_shared(w->table))
        && (ngx_msec_int_t) (ngx_current_msec - w->attach_at) >= 0)
    {
        ngx_http_dthrottle_attach(r->connection->log, dmcf);
    }

    if (answer == NGX_HTTP_DTHROTTLE_ANSWER_OK) {
        ctx->verdict = NGX_HTTP_DTHROTTLE_ASKED_OK;
        return NGX_DECLINED;
    }

    w->asked_no++;
    ctx->verdict = NGX_HTTP_DTHROTTLE_ASKED_NO;

    return ngx_http_dthrottle_refuse(r, dlcf, NULL);
}


/*
 * ngx_http_dthrottle_probe_done() ends the backoff's one ask, if ctx's
 * request made it.
 */

static void
ngx_http_dthrottle_probe_done(ngx_http_dthrottle_ctx_t *ctx)
{
    if (ctx->probe) {
        ctx->probe = 0;
        ngx_http_dthrottle_worker.probing = 0;
    }
}


static ngx_int_t
ngx_http_dthrottle_fail(ngx_http_request_t *r,
    ngx_http_dthrottle_loc_conf_t *dlcf, ngx_http_dthrottle_ctx_t *ctx)
{
    ngx_http_dthrottle_worker.failed++;

    if (!dlcf->fail_closed) {
        ctx->verdict = NGX_HTTP_DTHROTTLE_FAILED_OPEN;
        return NGX_DECLINED;
    }

    ctx->verdict = NGX_HTTP_DTHROTTLE_FAILED_CLOSED;

    return ngx_http_dthrottle_refuse(r, dlcf, NULL);
}
