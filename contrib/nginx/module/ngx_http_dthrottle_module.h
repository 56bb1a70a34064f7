
/*
 * ngx_http_dthrottle_module.h: what the module's files share.
 *
 *   ngx_http_dthrottle_module.c  the module, its directives and
 *                                configuration, the workers' start and
 *                                exit
 *   ngx_http_dthrottle_stats.c   $dthrottle_status, and dthrottle_stats:
 *                                the worker's counters
 *   ngx_http_dthrottle_decide.c  the phase handler: the decision from the
 *                                table, the fail mode
 *   ngx_http_dthrottle_refuse.c  a refusal's status and headers
 *                                (libdthrottle's dt_headers)
 *   ngx_http_dthrottle_ask.c     talking to dthrottled: asking it without
 *                                blocking the worker, and attaching to
 *                                its table
 *   ngx_http_dthrottle_conn.c    the worker's one connection to
 *                                dthrottled, kept, and the asks pipelined
 *                                on it
 *   ngx_http_dthrottle_ring.c    the places of the asks waiting on it
 *
 * Calls run one way, down: module.c and stats.c to decide.c, decide.c
 * to refuse.c, ask.c, conn.c and ring.c (a gone request's unqueue), ask.c
 * to conn.c, conn.c to ring.c. An answer comes back up through
 * the resume handler decide.c gives with each ask.
 */


#ifndef _NGX_HTTP_DTHROTTLE_MODULE_H_INCLUDED_
#define _NGX_HTTP_DTHROTTLE_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "dthrottle_table.h"


/* What decided a request: the values of $dthrottle_status. */
typedef enum {
    NGX_HTTP_DTHROTTLE_NONE = 0,       /* not decided (yet) */
    NGX_HTTP_DTHROTTLE_OK,             /* served from the table */
    NGX_HTTP_DTHROTTLE_NO,             /* refused from the table */
    NGX_HTTP_DTHROTTLE_DRY_RUN,        /* a dry run's policy would refuse */
    NGX_HTTP_DTHROTTLE_ASKED_OK,       /* the daemon, asked, served */
    NGX_HTTP_DTHROTTLE_ASKED_NO,       /* the daemon, asked, refused */
    NGX_HTTP_DTHROTTLE_FAILED_OPEN,    /* the daemon did not answer */
    NGX_HTTP_DTHROTTLE_FAILED_CLOSED,
    NGX_HTTP_DTHROTTLE_BAD,            /* a tag the protocol cannot carry,
                                          refused or served */
    NGX_HTTP_DTHROTTLE_EMPTY           /* an empty tag, served uncounted */
} ngx_http_dthrottle_verdict_e;


/* Where a request is: ctx->state. */
typedef enum {
    NGX_HTTP_DTHROTTLE_DONE = 0,       /* decided */
    NGX_HTTP_DTHROTTLE_ASKING,         /* waiting for the daemon */
    NGX_HTTP_DTHROTTLE_ANSWERED        /* answered: ctx->rc, once */
} ngx_http_dthrottle_state_e;


/* The outcome of an ask, given to the resume handler. */
typedef enum {
    NGX_HTTP_DTHROTTLE_ANSWER_OK = 0,
    NGX_HTTP_DTHROTTLE_ANSWER_NO,
    NGX_HTTP_DTHROTTLE_ANSWER_FAILED
} ngx_http_dthrottle_answer_e;


typedef struct {
    ngx_http_complex_value_t   *tag;          /* NULL: off */
    ngx_uint_t                  fail_closed;
    ngx_uint_t                  allow_bad;    /* dthrottle_bad_tag allow */
    ngx_int_t                   status;
    ngx_msec_t                  timeout;
} ngx_http_dthrottle_loc_conf_t;


typedef struct {
    ngx_str_t                   socket;   /* dt_open()'s, NUL-terminated */
    ngx_addr_t                  addr;     /* the same, to connect to */
    unsigned                    abstract:1;
    unsigned                    used:1;   /* a "dthrottle" names a tag */
} ngx_http_dthrottle_main_conf_t;


/*
 * A decided request's context, the data of a cleanup of its pool: the
 * cleanup gives up the place in the worker's queue of asks that a request
 * going away mid-ask leaves (its answer is read and dropped), and marks
 * the request decided (internal redirects clear module contexts; the pool
 * stays).
 */
typedef struct ngx_http_dthrottle_slot_s  ngx_http_dthrottle_slot_t;

typedef struct {
    ngx_http_request_t         *request;
    ngx_http_dthrottle_slot_t  *slot;     /* its place, while asking */
    ngx_int_t                   rc;       /* returned once answered */
    ngx_uint_t                  state;    /* ngx_http_dthrottle_state_e */
    ngx_uint_t                  verdict;  /* ngx_http_dthrottle_verdict_e */
    unsigned                    probe:1;  /* the backoff's one ask, */
    unsigned                    probed:1; /* which failing, doubles it */
} ngx_http_dthrottle_ctx_t;


/* The worker's attachment, its asking's backoff, and its counters. */
typedef struct {
    dt_table                   *table;        /* NULL until attached */
    ngx_msec_t                  attach_at;    /* no attach before */
    ngx_msec_t                  ask_at;       /* no ask before */
    ngx_msec_t                  backoff;      /* 0 while asks are answered */
    unsigned                    left:1;       /* the daemon left the table */
    unsigned                    down:1;       /* an outage was logged */
    unsigned                    probing:1;    /* the backoff's one ask */
    unsigned                    attach_logged:1;
    unsigned                    bad_logged:1;
    ngx_uint_t                  ok, no;       /* decided in process */
    ngx_uint_t                  asked, asked_no, failed, bad, attaches;
    ngx_uint_t                  asking;       /* requests waiting for
                                                 an answer */
} ngx_http_dthrottle_worker_t;


/*
 * The asks waiting on the worker's connection, oldest first: a ring of
 * NGX_HTTP_DTHROTTLE_QUEUE places (ngx_http_dthrottle_ring.c).
 */
#define NGX_HTTP_DTHROTTLE_QUEUE  1024    /* asks waiting on a connection */

/* A place in the queue: an ask waiting for its reply. */
struct ngx_http_dthrottle_slot_s {
    ngx_http_dthrottle_ctx_t   *ctx;      /* NULL: its request went away */
    uint64_t                    end;      /* ask's last byte: out's total */
    ngx_event_t                 timer;    /* its dthrottle_timeout */
};

typedef struct {
    ngx_http_dthrottle_slot_t  *slots;    /* NULL until the first ask */
    ngx_uint_t                  head;     /* the oldest waiting */
    ngx_uint_t                  waiting;  /* places taken */
} ngx_http_dthrottle_ring_t;


/*
 * The handler an ask's answer (or failure: err says why) goes to; the
 * phase handler's, given down to the connection, which knows nothing of
 * requests.
 */
typedef void (*ngx_http_dthrottle_resume_pt)(ngx_http_dthrottle_ctx_t *ctx,
    ngx_uint_t answer, const char *err);


/* ngx_http_dthrottle_decide.c */
ngx_int_t ngx_http_dthrottle_handler(ngx_http_request_t *r);
ngx_http_dthrottle_ctx_t *ngx_http_dthrottle_get_ctx(ngx_http_request_t *r);

/* ngx_http_dthrottle_refuse.c */
ngx_int_t ngx_http_dthrottle_refuse(ngx_http_request_t *r,
    ngx_http_dthrottle_loc_conf_t *dlcf, dt_result *res);

/* ngx_http_dthrottle_ask.c */
ngx_int_t ngx_http_dthrottle_ask(ngx_http_request_t *r,
    ngx_http_dthrottle_ctx_t *ctx, ngx_str_t *tag, ngx_msec_t timeout,
    ngx_http_dthrottle_resume_pt resume, const char **err);
void ngx_http_dthrottle_attach(ngx_log_t *log,
    ngx_http_dthrottle_main_conf_t *dmcf);

/* ngx_http_dthrottle_conn.c */
ngx_int_t ngx_http_dthrottle_queue(ngx_http_dthrottle_main_conf_t *dmcf,
    ngx_http_dthrottle_ctx_t *ctx, ngx_str_t *tag, ngx_msec_t timeout,
    ngx_http_dthrottle_resume_pt resume, const char **err);
void ngx_http_dthrottle_queue_exit(void);

/* ngx_http_dthrottle_ring.c */
ngx_int_t ngx_http_dthrottle_ring_init(ngx_http_dthrottle_ring_t *q,
    ngx_event_handler_pt timeout);
void ngx_http_dthrottle_ring_push(ngx_http_dthrottle_ring_t *q,
    ngx_http_dthrottle_ctx_t *ctx, uint64_t end, ngx_msec_t timeout);
ngx_http_dthrottle_ctx_t *ngx_http_dthrottle_ring_pop(
    ngx_http_dthrottle_ring_t *q, uint64_t *end);
void ngx_http_dthrottle_unqueue(ngx_http_dthrottle_ctx_t *ctx);
void ngx_http_dthrottle_ring_free(ngx_http_dthrottle_ring_t *q);

/* ngx_http_dthrottle_stats.c */
ngx_int_t ngx_http_dthrottle_status_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
char *ngx_http_dthrottle_stats(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


extern ngx_module_t                  ngx_http_dthrottle_module;
extern ngx_http_dthrottle_worker_t   ngx_http_dthrottle_worker;


#endif /* _NGX_HTTP_DTHROTTLE_MODULE_H_INCLUDED_ */
