
/*
 * ngx_http_dthrottle_ring.c: the places of the asks waiting on the
 * worker's connection to dthrottled (ngx_http_dthrottle_conn.c), oldest
 * first: a ring of NGX_HTTP_DTHROTTLE_QUEUE, each place with the timer of
 * its ask. A request gone mid-ask leaves its place (ngx_http_dthrottle_
 * unqueue): the place stays until its reply, which nobody takes.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_dthrottle_module.h"


/*
 * ngx_http_dthrottle_ring_init() makes the ring's places, each timer
 * firing timeout: NGX_OK or NGX_ERROR.
 */

ngx_int_t
ngx_http_dthrottle_ring_init(ngx_http_dthrottle_ring_t *q,
    ngx_event_handler_pt timeout)
{
    ngx_uint_t    i;
    ngx_event_t  *ev;

    q->slots = ngx_calloc(NGX_HTTP_DTHROTTLE_QUEUE
                          * sizeof(ngx_http_dthrottle_slot_t),
                          ngx_cycle->log);
    if (q->slots == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < NGX_HTTP_DTHROTTLE_QUEUE; i++) {
        ev = &q->slots[i].timer;
        ev->data = &q->slots[i];
        ev->handler = timeout;
        ev->log = ngx_cycle->log;
    }

    q->head = 0;
    q->waiting = 0;

    return NGX_OK;
}


/*
 * ngx_http_dthrottle_ring_push() takes the next place (one is free: the
 * caller checked) for ctx's ask, whose last byte is the end'th queued,
 * and starts its timer.
 */

void
ngx_http_dthrottle_ring_push(ngx_http_dthrottle_ring_t *q,
    ngx_http_dthrottle_ctx_t *ctx, uint64_t end, ngx_msec_t timeout)
{
    ngx_http_dthrottle_slot_t  *slot;

    slot = &q->slots[(q->head + q->waiting) % NGX_HTTP_DTHROTTLE_QUEUE];
    q->waiting++;
    slot->ctx = ctx;
    slot->end = end;
    ngx_add_timer(&slot->timer, timeout);

    ctx->slot = slot;
    ngx_http_dthrottle_worker.asking++;
}


/*
 * ngx_http_dthrottle_ring_pop() gives up the oldest place, sets *end to
 * its ask's end, and returns the context of the request that waits in
 * it, NULL if it went away.
 */

ngx_http_dthrottle_ctx_t *
ngx_http_dthrottle_ring_pop(ngx_http_dthrottle_ring_t *q, uint64_t *end)
{
    ngx_http_dthrottle_ctx_t   *ctx;
    ngx_http_dthrottle_slot_t  *slot;

    slot = &q->slots[q->head];
    q->head = (q->head + 1) % NGX_HTTP_DTHROTTLE_QUEUE;
    q->waiting--;
    *end = slot->end;

    if (slot->timer.timer_set) {
        ngx_del_timer(&slot->timer);
    }

    ctx = slot->ctx;
    slot->ctx = NULL;

    if (ctx != NULL) {
        ctx->slot = NULL;
        ngx_http_dthrottle_worker.asking--;
    }

    return ctx;
}


/*
 * ngx_http_dthrottle_unqueue() gives up the place of ctx's request, gone
 * before its answer: the reply is read and dropped.
 */

void
ngx_http_dthrottle_unqueue(ngx_http_dthrottle_ctx_t *ctx)
{
    if (ctx->slot != NULL) {
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                       "dthrottle: the request left while asking");
        ctx->slot->ctx = NULL;
        ctx->slot = NULL;
        ngx_http_dthrottle_worker.asking--;
    }
}


/* ngx_http_dthrottle_ring_free() frees the places, none waiting. */

void
ngx_http_dthrottle_ring_free(ngx_http_dthrottle_ring_t *q)
{
    if (q->slots != NULL) {
        ngx_free(q->slots);
        q->slots = NULL;
    }
}
