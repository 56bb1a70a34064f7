
/*
 * ngx_http_dthrottle_refuse.c: a refused request's status and headers,
 * the values computed by libdthrottle's dt_headers, as the daemon's own
 * ways in compute them.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_dthrottle_module.h"


static ngx_int_t ngx_http_dthrottle_header(ngx_http_request_t *r,
    ngx_str_t *key, u_char *value, size_t len);


static ngx_str_t  ngx_http_dthrottle_retry_after = ngx_string("Retry-After");
static ngx_str_t  ngx_http_dthrottle_policy = ngx_string("RateLimit-Policy");
static ngx_str_t  ngx_http_dthrottle_limit = ngx_string("RateLimit");


/*
 * ngx_http_dthrottle_refuse() refuses with dthrottle_status. res, when
 * the table refused, is its bucket: Retry-After, RateLimit-Policy and
 * RateLimit state it as the daemon's HTTP endpoint does (dt_headers). A
 * deny policy has no bucket, and gets no header. Without a bucket
 * (asked, failed closed, a bad tag denied): Retry-After: 1.
 */

ngx_int_t
ngx_http_dthrottle_refuse(ngx_http_request_t *r,
    ngx_http_dthrottle_loc_conf_t *dlcf, dt_result *res)
{
    u_char            *retry, *policy, *limit;
    dt_policy_info     info, *pi;
    dt_header_values   h;

    if (res == NULL) {
        if (ngx_http_dthrottle_header(r, &ngx_http_dthrottle_retry_after,
                                      (u_char *) "1", 1)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return dlcf->status;
    }

    if (res->reset_ns <= 0) {
        return dlcf->status;
    }

    /* the policy as the table states it now; while the daemon rewrites
     * its policies (EAGAIN), Retry-After goes alone */

    pi = dt_policy(ngx_http_dthrottle_worker.table, res->policy, &info) == 0
         ? &info : NULL;

    dt_headers(pi, 0, (double) res->remaining, res->retry_after_ns,
               res->reset_ns, &h);

    retry = ngx_pnalloc(r->pool,
                        h.retry_after_len + h.policy_len + h.limit_len);
    if (retry == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    policy = ngx_cpymem(retry, h.retry_after, h.retry_after_len);
    limit = ngx_cpymem(policy, h.policy, h.policy_len);
    ngx_memcpy(limit, h.limit, h.limit_len);

    if (ngx_http_dthrottle_header(r, &ngx_http_dthrottle_retry_after, retry,
                                  h.retry_after_len)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (pi == NULL) {
        return dlcf->status;
    }

    if (ngx_http_dthrottle_header(r, &ngx_http_dthrottle_policy, policy,
                                  h.policy_len)
        != NGX_OK
        || ngx_http_dthrottle_header(r, &ngx_http_dthrottle_limit, limit,
                                     h.limit_len)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return dlcf->status;
}


static ngx_int_t
ngx_http_dthrottle_header(ngx_http_request_t *r, ngx_str_t *key,
    u_char *value, size_t len)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key = *key;
    h->value.data = value;
    h->value.len = len;
    h->lowcase_key = NULL;
#if (nginx_version >= 1023000)
    h->next = NULL;
#endif

    return NGX_OK;
}
