
/*
 * ngx_http_dthrottle_stats.c: what ngx_http_dthrottle_module (see
 * ngx_http_dthrottle_module.c) tells of its work: what decided a request,
 * $dthrottle_status, and the worker's counters, the dthrottle_stats
 * directive and its content handler.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_dthrottle_module.h"


static ngx_int_t ngx_http_dthrottle_stats_handler(ngx_http_request_t *r);


/* the values of $dthrottle_status, by ngx_http_dthrottle_verdict_e */
static ngx_str_t  ngx_http_dthrottle_verdicts[] = {
    ngx_null_string,
    ngx_string("OK"),
    ngx_string("NO"),
    ngx_string("DRY_RUN"),
    ngx_string("ASKED_OK"),
    ngx_string("ASKED_NO"),
    ngx_string("FAILED_OPEN"),
    ngx_string("FAILED_CLOSED"),
    ngx_string("BAD"),
    ngx_string("EMPTY")
};


ngx_int_t
ngx_http_dthrottle_status_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_dthrottle_ctx_t  *ctx;

    ctx = ngx_http_dthrottle_get_ctx(r);

    if (ctx == NULL || ctx->verdict == NGX_HTTP_DTHROTTLE_NONE) {
        v->not_found = 1;
        return NGX_OK;
    }

    v->len = ngx_http_dthrottle_verdicts[ctx->verdict].len;
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->data = ngx_http_dthrottle_verdicts[ctx->verdict].data;

    return NGX_OK;
}


/* dthrottle_stats: the location's content is the worker's counters */

char *
ngx_http_dthrottle_stats(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_dthrottle_stats_handler;

    return NGX_CONF_OK;
}


/*
 * ngx_http_dthrottle_stats_handler() answers this worker's counters in one
 * line: ok and no, decided in process (dry runs served count ok); asked,
 * and of those asked_no refused; failed, answered by the fail mode; bad
 * tags, refused or served; attaches; asking, the requests waiting for an
 * answer; shared, whether the worker decides in process now.
 */

static ngx_int_t
ngx_http_dthrottle_stats_handler(ngx_http_request_t *r)
{
    size_t                        len;
    ngx_int_t                     rc;
    ngx_buf_t                    *b;
    ngx_chain_t                   out;
    ngx_http_dthrottle_worker_t  *w;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    w = &ngx_http_dthrottle_worker;
    len = sizeof("ok= no= asked= asked_no= failed= bad= attaches= asking= "
                 "shared=false\n") + 8 * NGX_INT_T_LEN;

    b = ngx_create_temp_buf(r->pool, len);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->last = ngx_sprintf(b->last, "ok=%ui no=%ui asked=%ui asked_no=%ui "
                          "failed=%ui bad=%ui attaches=%ui asking=%ui "
                          "shared=%s\n",
                          w->ok, w->no, w->asked, w->asked_no, w->failed,
                          w->bad, w->attaches, w->asking,
                          w->table != NULL && !w->left && dt_shared(w->table)
                          ? "true" : "false");
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = b->last - b->pos;
    ngx_str_set(&r->headers_out.content_type, "text/plain");
    r->headers_out.content_type_len = r->headers_out.content_type.len;

    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}
