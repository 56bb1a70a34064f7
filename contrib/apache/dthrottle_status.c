/* dthrottle_status.c: mod_dthrottle's counters in shared memory, the
 * dthrottle-status handler and the lines on mod_status's page. See
 * dthrottle_status.h. */
#include <string.h>

#include "apr_shm.h"
#include "apr_strings.h"
#include "httpd.h"
#include "http_config.h"
#include "http_log.h"
#include "http_protocol.h"
#include "mod_status.h"

#include "dthrottle_client.h"
#include "dthrottle_status.h"

APLOG_USE_MODULE(dthrottle);

static const char *const names[DT_C_N] = {
    "checked", "asked", "decided_shared", "served", "refused", "failed_open",
    "failed_closed", "backed_off", "bad_tag", "no_tag"
};

static apr_uint64_t local_counters[DT_C_N];
apr_uint64_t *dt_counters = local_counters;

int dt_post_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
                   server_rec *s)
{
    /* The key names how many counters there are: a graceful restart into
     * a module that counts more must not take a smaller block. */
    const char *key = apr_psprintf(ptemp, "dthrottle-counters-%d", DT_C_N);
    apr_pool_t *pp = s->process->pool;
    void *data = NULL;
    apr_shm_t *shm;
    apr_status_t rv;

    /* Kept in the process's pool, the counters outlive the configuration
     * and its rereading at every restart. */
    apr_pool_userdata_get(&data, key, pp);
    if (data == NULL) {
        rv = apr_shm_create(&shm, sizeof(apr_uint64_t) * DT_C_N, NULL, pp);
        if (rv != APR_SUCCESS) {
            ap_log_error(APLOG_MARK, APLOG_WARNING, rv, s, DTLOGNO(00020)
                         "no shared memory for the counters: each process "
                         "counts its own");
            return OK;
        }
        data = apr_shm_baseaddr_get(shm);
        memset(data, 0, sizeof(apr_uint64_t) * DT_C_N);
        apr_pool_userdata_set(data, key, apr_pool_cleanup_null, pp);
    }
    dt_counters = data;
    return OK;
}

static apr_uint64_t get(int c)
{
    return __atomic_load_n(&dt_counters[c], __ATOMIC_RELAXED);
}

int dt_status_handler(request_rec *r)
{
    int i;

    if (r->handler == NULL || strcmp(r->handler, "dthrottle-status") != 0) {
        return DECLINED;
    }
    r->allowed |= (AP_METHOD_BIT << M_GET);
    if (r->method_number != M_GET) {
        return HTTP_METHOD_NOT_ALLOWED;
    }
    ap_set_content_type(r, "text/plain; charset=utf-8");
    apr_table_setn(r->headers_out, "Cache-Control", "no-store");
    if (r->header_only) {
        return OK;
    }
    for (i = 0; i < DT_C_N; i++) {
        ap_rprintf(r, "%s: %" APR_UINT64_T_FMT "\n", names[i], get(i));
    }
    return OK;
}

int dt_status_hook(request_rec *r, int flags)
{
    int i;

    if (flags & AP_STATUS_SHORT) {
        for (i = 0; i < DT_C_N; i++) {
            ap_rprintf(r, "DThrottle_%s: %" APR_UINT64_T_FMT "\n", names[i], get(i));
        }
        return OK;
    }
    ap_rputs("<hr />\n<h2>mod_dthrottle</h2>\n<dl>\n", r);
    for (i = 0; i < DT_C_N; i++) {
        ap_rprintf(r, "<dt>%s: %" APR_UINT64_T_FMT "</dt>\n", names[i], get(i));
    }
    ap_rputs("</dl>\n", r);
    return OK;
}
