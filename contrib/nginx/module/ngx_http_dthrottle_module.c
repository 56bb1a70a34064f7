
/*
 * ngx_http_dthrottle_module: throttle requests with dthrottled, deciding
 * in each worker from the table the daemon shares (docs/shared-table.md).
 *
 * In the preaccess phase, as limit_req, each main request computes its tag
 * ("dthrottle $remote_addr;", any complex value) and decides it with
 * libdthrottle (compiled in) from the table the worker mapped when it
 * started (dt_open, per worker, never in the master):
 *
 *  - OK: the request goes on. A tag the table holds costs a hash, a probe
 *    and one compare-and-swap in the worker: no system call, no lock, no
 *    allocation but the tag's and the context's in the request's pool.
 *  - NO: dthrottle_status (429) with Retry-After, RateLimit-Policy and
 *    RateLimit stated from the bucket that refused, as the daemon's HTTP
 *    endpoint states them (rlheader/); a deny policy's has none.
 *  - ASK (a tag the table does not hold yet, or one it keys by a digest, a
 *    reload under way, a daemon that shares nothing, a worker not
 *    attached) and LEFT (the daemon stopped, restarted or stalled): the
 *    daemon is asked over its Unix socket without blocking the worker
 *    (ngx_http_dthrottle_ask.c); it inserts a new tag, so the tag's next
 *    request is decided in process. Its NO is dthrottle_status with
 *    Retry-After: 1 (the line protocol says nothing of the bucket). An
 *    ask not answered within dthrottle_timeout, or a daemon that cannot
 *    be reached, is answered by the fail mode (dthrottle_fail: open
 *    serves, closed refuses with Retry-After: 1); then the worker asks
 *    nothing for 50 ms, doubling up to 5 s, and after that one ask at a
 *    time until one is answered. After an answer, a worker that does not
 *    decide in process attaches again (blocking for one exchange with the
 *    daemon, which just answered); after a failed attempt, a second later.
 *
 * An empty tag is served uncounted, as the daemon serves an empty line. A
 * tag holding CR or LF, or over 1024 bytes, cannot be asked over the line
 * protocol: refused with Retry-After: 1, logged once per worker. Only the
 * main request decides, once: subrequests, and the request again after an
 * internal redirect (an index, try_files, error_page), do not.
 *
 * Trust: whoever may connect to the daemon's socket may decide. Each
 * worker maps the daemon's state file writable, as every attached process
 * does; libdthrottle bounds everything it reads from it.
 *
 * Directives: the command table below; docs/integrations/nginx-module.md.
 * Counters, per worker: the dthrottle_stats handler; what decided a
 * request: $dthrottle_status.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_dthrottle_module.h"


#define NGX_HTTP_DTHROTTLE_SOCKET     "/run/dthrottle/dthrottle.sock"


static ngx_int_t ngx_http_dthrottle_status_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_dthrottle_stats_handler(ngx_http_request_t *r);
static char *ngx_http_dthrottle(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_dthrottle_socket(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_dthrottle_set_socket(ngx_conf_t *cf,
    ngx_http_dthrottle_main_conf_t *dmcf, ngx_str_t *value);
static char *ngx_http_dthrottle_stats(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static void *ngx_http_dthrottle_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_dthrottle_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_dthrottle_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_dthrottle_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_dthrottle_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_dthrottle_init(ngx_conf_t *cf);
static ngx_int_t ngx_http_dthrottle_init_process(ngx_cycle_t *cycle);
static void ngx_http_dthrottle_exit_process(ngx_cycle_t *cycle);


static ngx_conf_enum_t  ngx_http_dthrottle_fail_modes[] = {
    { ngx_string("open"), 0 },
    { ngx_string("closed"), 1 },
    { ngx_null_string, 0 }
};


static ngx_conf_num_bounds_t  ngx_http_dthrottle_status_bounds = {
    ngx_conf_check_num_bounds, 400, 599
};


static ngx_command_t  ngx_http_dthrottle_commands[] = {

    /* dthrottle <tag> | off: throttle by tag, any complex value
     * ($remote_addr, api:$http_x_api_key); off: not here. Inherited. */
    { ngx_string("dthrottle"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_dthrottle,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    /* dthrottle_socket <path>: dthrottled's Unix socket, "unix:" optional,
     * "@name" for an abstract one; default /run/dthrottle/dthrottle.sock. */
    { ngx_string("dthrottle_socket"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_dthrottle_socket,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    /* dthrottle_fail open | closed: serve (default) or refuse while the
     * daemon does not answer. */
    { ngx_string("dthrottle_fail"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_dthrottle_loc_conf_t, fail_closed),
      &ngx_http_dthrottle_fail_modes },

    /* dthrottle_status <code>: a refusal's status, 400 to 599; 429. */
    { ngx_string("dthrottle_status"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_dthrottle_loc_conf_t, status),
      &ngx_http_dthrottle_status_bounds },

    /* dthrottle_timeout <time>: the longest an ask may take, connecting,
     * sending and reading the answer; 50ms. */
    { ngx_string("dthrottle_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_dthrottle_loc_conf_t, timeout),
      NULL },

    /* dthrottle_stats: this location answers the worker's counters. */
    { ngx_string("dthrottle_stats"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_dthrottle_stats,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_dthrottle_module_ctx = {
    ngx_http_dthrottle_add_variables,      /* preconfiguration */
    ngx_http_dthrottle_init,               /* postconfiguration */

    ngx_http_dthrottle_create_main_conf,   /* create main configuration */
    ngx_http_dthrottle_init_main_conf,     /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_dthrottle_create_loc_conf,    /* create location configuration */
    ngx_http_dthrottle_merge_loc_conf      /* merge location configuration */
};


ngx_module_t  ngx_http_dthrottle_module = {
    NGX_MODULE_V1,
    &ngx_http_dthrottle_module_ctx,        /* module context */
    ngx_http_dthrottle_commands,           /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_dthrottle_init_process,       /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_dthrottle_exit_process,       /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


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


static ngx_int_t
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


/*
 * ngx_http_dthrottle_stats_handler() answers this worker's counters in one
 * line: ok and no, decided in process (dry runs served count ok); asked,
 * and of those asked_no refused; failed, answered by the fail mode; bad
 * tags; attaches; asking, the asks under way; shared, whether the worker
 * decides in process now.
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


static char *
ngx_http_dthrottle(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_dthrottle_loc_conf_t *dlcf = conf;

    ngx_str_t                         *value;
    ngx_http_dthrottle_main_conf_t    *dmcf;
    ngx_http_compile_complex_value_t   ccv;

    if (dlcf->tag != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        dlcf->tag = NULL;
        return NGX_CONF_OK;
    }

    dlcf->tag = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
    if (dlcf->tag == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

    ccv.cf = cf;
    ccv.value = &value[1];
    ccv.complex_value = dlcf->tag;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    dmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_dthrottle_module);
    dmcf->used = 1;

    return NGX_CONF_OK;
}


static char *
ngx_http_dthrottle_socket(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_dthrottle_main_conf_t *dmcf = conf;

    ngx_str_t  *value;

    if (dmcf->socket.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    return ngx_http_dthrottle_set_socket(cf, dmcf, &value[1]);
}


/*
 * ngx_http_dthrottle_set_socket() sets the daemon's socket: its path for
 * dt_open() (NUL-terminated, as configuration arguments are) and the
 * sockaddr asks connect to.
 */

static char *
ngx_http_dthrottle_set_socket(ngx_conf_t *cf,
    ngx_http_dthrottle_main_conf_t *dmcf, ngx_str_t *value)
{
    u_char              *p;
    ngx_str_t            path;
    struct sockaddr_un  *sun;

    path = *value;

    if (path.len > 5 && ngx_strncmp(path.data, "unix:", 5) == 0) {
        path.data += 5;
        path.len -= 5;
    }

    sun = ngx_pcalloc(cf->pool, sizeof(struct sockaddr_un));
    p = ngx_pnalloc(cf->pool, sizeof("unix:") - 1 + path.len);
    if (sun == NULL || p == NULL) {
        return NGX_CONF_ERROR;
    }

    if (path.len < 2 || path.len >= sizeof(sun->sun_path)
        || (path.data[0] != '/' && path.data[0] != '@'))
    {
        return "must be an absolute path of at most 107 bytes, "
               "or @name for an abstract socket";
    }

    sun->sun_family = AF_UNIX;
    ngx_memcpy(sun->sun_path, path.data, path.len);

    if (path.data[0] == '@') {
        sun->sun_path[0] = '\0';
        dmcf->abstract = 1;
        dmcf->addr.socklen = offsetof(struct sockaddr_un, sun_path) + path.len;

    } else {
        dmcf->addr.socklen = sizeof(struct sockaddr_un);
    }

    ngx_memcpy(ngx_cpymem(p, "unix:", 5), path.data, path.len);

    dmcf->addr.sockaddr = (struct sockaddr *) sun;
    dmcf->addr.name.data = p;
    dmcf->addr.name.len = sizeof("unix:") - 1 + path.len;
    dmcf->socket = path;

    return NGX_CONF_OK;
}


static char *
ngx_http_dthrottle_stats(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_dthrottle_stats_handler;

    return NGX_CONF_OK;
}


static void *
ngx_http_dthrottle_create_main_conf(ngx_conf_t *cf)
{
    /*
     * set by ngx_pcalloc():
     *
     *     dmcf->socket = { 0, NULL };
     *     dmcf->addr = { NULL, 0, { 0, NULL } };
     *     dmcf->abstract = 0;
     *     dmcf->used = 0;
     */

    return ngx_pcalloc(cf->pool, sizeof(ngx_http_dthrottle_main_conf_t));
}


static char *
ngx_http_dthrottle_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_dthrottle_main_conf_t *dmcf = conf;

    ngx_str_t  path = ngx_string(NGX_HTTP_DTHROTTLE_SOCKET);

    if (dmcf->socket.data != NULL) {
        return NGX_CONF_OK;
    }

    return ngx_http_dthrottle_set_socket(cf, dmcf, &path);
}


static void *
ngx_http_dthrottle_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_dthrottle_loc_conf_t  *conf;

    conf = ngx_palloc(cf->pool, sizeof(ngx_http_dthrottle_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    conf->tag = NGX_CONF_UNSET_PTR;
    conf->fail_closed = NGX_CONF_UNSET_UINT;
    conf->status = NGX_CONF_UNSET;
    conf->timeout = NGX_CONF_UNSET_MSEC;

    return conf;
}


static char *
ngx_http_dthrottle_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_dthrottle_loc_conf_t *prev = parent;
    ngx_http_dthrottle_loc_conf_t *conf = child;

    ngx_conf_merge_ptr_value(conf->tag, prev->tag, NULL);
    ngx_conf_merge_uint_value(conf->fail_closed, prev->fail_closed, 0);
    ngx_conf_merge_value(conf->status, prev->status,
                         NGX_HTTP_TOO_MANY_REQUESTS);
    ngx_conf_merge_msec_value(conf->timeout, prev->timeout, 50);

    if (conf->timeout == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"dthrottle_timeout\" must be above 0");
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_dthrottle_add_variables(ngx_conf_t *cf)
{
    ngx_str_t             name = ngx_string("dthrottle_status");
    ngx_http_variable_t  *var;

    /* not cached: it changes once the request is decided */
    var = ngx_http_add_variable(cf, &name, NGX_HTTP_VAR_NOCACHEABLE);
    if (var == NULL) {
        return NGX_ERROR;
    }

    var->get_handler = ngx_http_dthrottle_status_variable;

    return NGX_OK;
}


static ngx_int_t
ngx_http_dthrottle_init(ngx_conf_t *cf)
{
    ngx_http_handler_pt        *h;
    ngx_http_core_main_conf_t  *cmcf;

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_dthrottle_handler;

    return NGX_OK;
}


/*
 * Each worker attaches when it starts, before it serves; the master, and
 * the cache manager and loader, never do. A daemon not there yet is
 * asked, and attached to once it answers.
 */

static ngx_int_t
ngx_http_dthrottle_init_process(ngx_cycle_t *cycle)
{
    ngx_http_dthrottle_main_conf_t  *dmcf;

    if (ngx_process != NGX_PROCESS_WORKER && ngx_process != NGX_PROCESS_SINGLE) {
        return NGX_OK;
    }

    dmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_dthrottle_module);

    if (dmcf != NULL && dmcf->used && ngx_http_dthrottle_worker.table == NULL)
    {
        ngx_http_dthrottle_attach(cycle->log, dmcf);
    }

    return NGX_OK;
}


static void
ngx_http_dthrottle_exit_process(ngx_cycle_t *cycle)
{
    dt_close(ngx_http_dthrottle_worker.table);
    ngx_http_dthrottle_worker.table = NULL;
}
