
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
 *    endpoint states them (internal/ways/rlheader/); a deny policy's has none.
 *  - ASK (a tag the table does not hold yet, or one it keys by a digest, a
 *    reload under way, a daemon that shares nothing, a worker not
 *    attached) and LEFT (the daemon stopped, restarted or stalled): the
 *    daemon is asked over its Unix socket without blocking the worker,
 *    on one connection per worker, kept and pipelined
 *    (ngx_http_dthrottle_ask.c, ngx_http_dthrottle_conn.c); it inserts a
 *    new tag, so the tag's next request is decided in process. Its NO is
 *    dthrottle_status with Retry-After: 1 (the line protocol says nothing
 *    of the bucket). An
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
 * protocol: refused with Retry-After: 1 (dthrottle_bad_tag allow serves
 * it), counted bad, logged once per worker. Only the main request
 * decides, once: subrequests, and the request again after an internal
 * redirect (an index, try_files, error_page), do not.
 *
 * Trust: whoever may connect to the daemon's socket may decide. Each
 * worker maps the daemon's state file writable, as every attached process
 * does; libdthrottle bounds everything it reads from it.
 *
 * Directives: the command table below; docs/integrations/nginx-module.md.
 * Counters, per worker: the dthrottle_stats handler; what decided a
 * request: $dthrottle_status (both in ngx_http_dthrottle_stats.c).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_dthrottle_module.h"


#define NGX_HTTP_DTHROTTLE_SOCKET     "/run/dthrottle/dthrottle.sock"


static char *ngx_http_dthrottle(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_dthrottle_socket(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_dthrottle_set_socket(ngx_conf_t *cf,
    ngx_http_dthrottle_main_conf_t *dmcf, ngx_str_t *value);
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


static ngx_conf_enum_t  ngx_http_dthrottle_bad_tags[] = {
    { ngx_string("deny"), 0 },
    { ngx_string("allow"), 1 },
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

    /* dthrottle_bad_tag deny | allow: refuse (default) or serve a tag the
     * line protocol cannot carry (CR or LF, over 1024 bytes). */
    { ngx_string("dthrottle_bad_tag"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_dthrottle_loc_conf_t, allow_bad),
      &ngx_http_dthrottle_bad_tags },

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


/* the worker's attachment and counters; the module's files share it */
ngx_http_dthrottle_worker_t  ngx_http_dthrottle_worker;


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
    conf->allow_bad = NGX_CONF_UNSET_UINT;
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
    ngx_conf_merge_uint_value(conf->allow_bad, prev->allow_bad, 0);
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
    ngx_http_dthrottle_queue_exit();
    dt_close(ngx_http_dthrottle_worker.table);
    ngx_http_dthrottle_worker.table = NULL;
}
