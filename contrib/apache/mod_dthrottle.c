/* mod_dthrottle: throttle requests with dthrottled, from every child.
 *
 * Each request for which "DThrottle On" applies computes a tag (the client
 * address by default, or any ap_expr: a header, a cookie, part of the
 * path), puts the prefix before it, and serves the request on "OK",
 * refuses it (429 and Retry-After by default) on "NO". Who says which:
 *
 *  - the table dthrottled shares, when the daemon is on a Unix socket and
 *    shares it (the default; dthrottle_shared.c): each child attaches when
 *    it starts and decides in process, with no system call, every tag the
 *    daemon tracks (counted decided_shared);
 *  - otherwise the daemon, asked "prefix tag\n" over the socket
 *    (dthrottle_client.c; counted asked): a tag the daemon does not track
 *    yet (the daemon then inserts it, so its next request is decided in
 *    process), a target over TCP, a daemon with [listen] share_table =
 *    false, or a daemon that left the table (a stop, or no heartbeat for a
 *    second), which the child attaches to again once it answers. Each
 *    child keeps its own connections, one per thread asking at the same
 *    time, each query bounded by DThrottleTimeout and followed by a
 *    backoff after a failure; the fail mode answers when the daemon does
 *    not.
 *
 * There is no directive for it: whoever may connect to the socket may
 * attach and decide. Only the main request decides: subrequests and
 * internal redirects (mod_dir's index, an ErrorDocument) do not ask a
 * second time.
 *
 * Build and install (libdthrottle is compiled in, as one file):
 *   apxs -i -a -c mod_dthrottle.c dthrottle_client.c dthrottle_target.c \
 *       dthrottle_status.c dthrottle_shared.c ../../libdthrottle/libdthrottle.c
 * Directives: see the command table below and
 * docs/integrations/apache.md ("The module: mod_dthrottle").
 * Counters: SetHandler dthrottle-status, and mod_status's page.
 */
#include <string.h>

#include "apr_strings.h"
#include "ap_config.h"
#include "ap_expr.h"
#include "ap_mpm.h"
#include "http_config.h"
#include "http_core.h"
#include "http_log.h"
#include "http_protocol.h"
#include "http_request.h"
#include "httpd.h"
#include "mod_status.h"

#include "dthrottle_client.h"
#include "dthrottle_shared.h"
#include "dthrottle_status.h"

module AP_MODULE_DECLARE_DATA dthrottle_module;

#define DT_DEFAULT_SOCKET "/run/dthrottle/dthrottle.sock"
#define DT_DEFAULT_TIMEOUT apr_time_from_msec(5)
#define DT_DEFAULT_MIN_BACKOFF apr_time_from_msec(10)
#define DT_DEFAULT_MAX_BACKOFF apr_time_from_sec(5)
#define DT_DEFAULT_MAX_TAG 1024
#define DT_HARD_MAX_TAG 65000 /* dthrottled closes a line past 64 KiB */

/* dt_conf is the per-directory configuration; the server's own (outside
 * any <Location>) is its root, and virtual hosts inherit the main
 * server's. Unset fields (-1, 0 or NULL) inherit when merged. */
typedef struct {
    int enabled;                  /* DThrottle On|Off */
    dt_target *target;            /* DThrottleSocket */
    ap_expr_info_t *tag;          /* DThrottleTag; NULL: the client address */
    int tag_set;
    const char *prefix;           /* DThrottlePrefix */
    apr_interval_time_t timeout;  /* DThrottleTimeout */
    int fail_closed;              /* DThrottleFail open|closed */
    int status;                   /* DThrottleStatus */
    int retry_after;              /* DThrottleRetryAfter seconds; 0: none */
    int max_tag;                  /* DThrottleMaxTagLength, prefix included */
    int bad_tag_allow;            /* DThrottleBadTag deny|allow */
    apr_interval_time_t min_backoff, max_backoff; /* DThrottleBackoff */
} dt_conf;

/* The daemon addresses named by the configuration being read; each child
 * gives every one its own connections. */
static apr_array_header_t *targets;
static dt_target *default_target;
static int bad_tag_logged, expr_error_logged;
/* Whether any DThrottleSocket was read, and whether one named the default:
 * a default that may serve nothing is not attached to before it is used. */
static int socket_named, default_named;

static void *create_dir_conf(apr_pool_t *p, char *dir)
{
    dt_conf *c = apr_pcalloc(p, sizeof(*c));

    (void)dir;
    c->enabled = -1;
    c->timeout = -1;
    c->fail_closed = -1;
    c->retry_after = -1;
    c->bad_tag_allow = -1;
    c->min_backoff = -1;
    c->max_backoff = -1;
    return c;
}

static void *merge_dir_conf(apr_pool_t *p, void *basev, void *addv)
{
    dt_conf *base = basev, *add = addv, *c = apr_pcalloc(p, sizeof(*c));

    c->enabled = add->enabled != -1 ? add->enabled : base->enabled;
    c->target = add->target ? add->target : base->target;
    c->tag_set = add->tag_set || base->tag_set;
    c->tag = add->tag_set ? add->tag : base->tag;
    c->prefix = add->prefix ? add->prefix : base->prefix;
    c->timeout = add->timeout != -1 ? add->timeout : base->timeout;
    c->fail_closed = add->fail_closed != -1 ? add->fail_closed : base->fail_closed;
    c->status = add->status ? add->status : base->status;
    c->retry_after = add->retry_after != -1 ? add->retry_after : base->retry_after;
    c->max_tag = add->max_tag ? add->max_tag : base->max_tag;
    c->bad_tag_allow = add->bad_tag_allow != -1 ? add->bad_tag_allow : base->bad_tag_allow;
    c->min_backoff = add->min_backoff != -1 ? add->min_backoff : base->min_backoff;
    c->max_backoff = add->max_backoff != -1 ? add->max_backoff : base->max_backoff;
    return c;
}

/* find_target returns the target for addr, made once per configuration. */
static const char *find_target(apr_pool_t *p, const char *addr, dt_target **out)
{
    dt_target **ts = (dt_target **)targets->elts;
    const char *err;
    int i;

    for (i = 0; i < targets->nelts; i++) {
        if (strcmp(ts[i]->name, addr) == 0) {
            *out = ts[i];
            return NULL;
        }
    }
    if ((err = dt_target_make(p, addr, out)) != NULL) {
        return err;
    }
    APR_ARRAY_PUSH(targets, dt_target *) = *out;
    return NULL;
}

static const char *set_enabled(cmd_parms *cmd, void *cv, int on)
{
    ((dt_conf *)cv)->enabled = on;
    return NULL;
}

static const char *set_socket(cmd_parms *cmd, void *cv, const char *arg)
{
    dt_conf *c = cv;
    const char *err = find_target(cmd->pool, arg, &c->target);

    if (err) {
        return apr_pstrcat(cmd->pool, "DThrottleSocket: ", err, NULL);
    }
    socket_named = 1;
    default_named |= c->target == default_target;
    return NULL;
}

static const char *set_tag(cmd_parms *cmd, void *cv, const char *arg)
{
    dt_conf *c = cv;
    const char *err = NULL;

    c->tag = ap_expr_parse_cmd(cmd, arg, AP_EXPR_FLAG_STRING_RESULT, &err, NULL);
    if (err) {
        return apr_psprintf(cmd->pool, "DThrottleTag %s: %s", arg, err);
    }
    c->tag_set = 1;
    return NULL;
}

static const char *set_prefix(cmd_parms *cmd, void *cv, const char *arg)
{
    if (strpbrk(arg, "\r\n")) {
        return "DThrottlePrefix: must not hold a CR or LF";
    }
    ((dt_conf *)cv)->prefix = arg;
    return NULL;
}

/* parse_duration reads "5" (ms), "5ms", "2s" or "1min" into *out, which
 * must be within (0, max]. */
static const char *parse_duration(cmd_parms *cmd, const char *arg,
                                  apr_interval_time_t max, apr_interval_time_t *out)
{
    if (ap_timeout_parameter_parse(arg, out, "ms") != APR_SUCCESS
        || *out <= 0 || *out > max) {
        return apr_psprintf(cmd->pool, "%s %s: must be a duration above 0 and "
                            "at most %" APR_TIME_T_FMT " s (e.g. 5ms, 2s)",
                            cmd->cmd->name, arg, apr_time_sec(max));
    }
    return NULL;
}

static const char *set_timeout(cmd_parms *cmd, void *cv, const char *arg)
{
    return parse_duration(cmd, arg, apr_time_from_sec(60), &((dt_conf *)cv)->timeout);
}

static const char *set_backoff(cmd_parms *cmd, void *cv, const char *min, const char *max)
{
    dt_conf *c = cv;
    const char *err = parse_duration(cmd, min, apr_time_from_sec(3600), &c->min_backoff);

    if (err) {
        return err;
    }
    if (max == NULL) {
        c->max_backoff = c->min_backoff > DT_DEFAULT_MAX_BACKOFF
                         ? c->min_backoff : DT_DEFAULT_MAX_BACKOFF;
        return NULL;
    }
    if ((err = parse_duration(cmd, max, apr_time_from_sec(3600), &c->max_backoff))) {
        return err;
    }
    return c->max_backoff < c->min_backoff
           ? "DThrottleBackoff: the maximum is below the minimum" : NULL;
}

static const char *set_fail(cmd_parms *cmd, void *cv, const char *arg)
{
    if (strcasecmp(arg, "open") && strcasecmp(arg, "closed")) {
        return "DThrottleFail: must be open or closed";
    }
    ((dt_conf *)cv)->fail_closed = strcasecmp(arg, "closed") == 0;
    return NULL;
}

static const char *set_bad_tag(cmd_parms *cmd, void *cv, const char *arg)
{
    if (strcasecmp(arg, "deny") && strcasecmp(arg, "allow")) {
        return "DThrottleBadTag: must be deny or allow";
    }
    ((dt_conf *)cv)->bad_tag_allow = strcasecmp(arg, "allow") == 0;
    return NULL;
}

/* parse_int reads a decimal integer within [lo, hi] into *out. */
static const char *parse_int(cmd_parms *cmd, const char *arg, int lo, int hi, int *out)
{
    char *end;
    apr_int64_t v = apr_strtoi64(arg, &end, 10);

    if (*arg == '\0' || *end != '\0' || v < lo || v > hi) {
        return apr_psprintf(cmd->pool, "%s %s: must be an integer from %d to %d",
                            cmd->cmd->name, arg, lo, hi);
    }
    *out = (int)v;
    return NULL;
}

static const char *set_status(cmd_parms *cmd, void *cv, const char *arg)
{
    return parse_int(cmd, arg, 400, 599, &((dt_conf *)cv)->status);
}

static const char *set_retry_after(cmd_parms *cmd, void *cv, const char *arg)
{
    return parse_int(cmd, arg, 0, 86400, &((dt_conf *)cv)->retry_after);
}

static const char *set_max_tag(cmd_parms *cmd, void *cv, const char *arg)
{
    return parse_int(cmd, arg, 1, DT_HARD_MAX_TAG, &((dt_conf *)cv)->max_tag);
}

static const command_rec dt_cmds[] = {
    AP_INIT_FLAG("DThrottle", set_enabled, NULL, RSRC_CONF | ACCESS_CONF,
                 "On to ask dthrottled before serving each request (default Off)"),
    AP_INIT_TAKE1("DThrottleSocket", set_socket, NULL, RSRC_CONF | ACCESS_CONF,
                  "dthrottled's address: /path or unix:/path, @abstract, or "
                  "host:port (default " DT_DEFAULT_SOCKET ")"),
    AP_INIT_TAKE1("DThrottleTag", set_tag, NULL, RSRC_CONF | ACCESS_CONF,
                  "an expression giving the throttling tag (default the "
                  "client address, %{REMOTE_ADDR})"),
    AP_INIT_TAKE1("DThrottlePrefix", set_prefix, NULL, RSRC_CONF | ACCESS_CONF,
                  "text put before the tag, e.g. web: to select a [[policy]]"),
    AP_INIT_TAKE1("DThrottleTimeout", set_timeout, NULL, RSRC_CONF | ACCESS_CONF,
                  "the longest wait for an answer, e.g. 5ms (default), 20ms"),
    AP_INIT_TAKE1("DThrottleFail", set_fail, NULL, RSRC_CONF | ACCESS_CONF,
                  "open (serve, the default) or closed (refuse) when "
                  "dthrottled does not answer"),
    AP_INIT_TAKE1("DThrottleStatus", set_status, NULL, RSRC_CONF | ACCESS_CONF,
                  "the status of a refused request (default 429)"),
    AP_INIT_TAKE1("DThrottleRetryAfter", set_retry_after, NULL, RSRC_CONF | ACCESS_CONF,
                  "Retry-After seconds on a refused request; 0 for none "
                  "(default: the seconds until the bucket earns a token, when "
                  "decided in process, else 1)"),
    AP_INIT_TAKE1("DThrottleMaxTagLength", set_max_tag, NULL, RSRC_CONF | ACCESS_CONF,
                  "the longest tag sent, prefix included (default 1024 bytes)"),
    AP_INIT_TAKE1("DThrottleBadTag", set_bad_tag, NULL, RSRC_CONF | ACCESS_CONF,
                  "deny (the default) or allow a request whose tag holds a "
                  "CR or LF or is too long; such a tag is never sent"),
    AP_INIT_TAKE12("DThrottleBackoff", set_backoff, NULL, RSRC_CONF | ACCESS_CONF,
                   "after a failure, ask nothing for min, doubling up to max "
                   "(default 10ms 5s)"),
    {NULL}
};

/* refuse answers a request with the configured status and Retry-After:
 * DThrottleRetryAfter when set (0: none), else the value the shared table
 * gives for the bucket (table_retry, when not NULL), else 1. */
static int refuse(request_rec *r, const dt_conf *c, const char *table_retry)
{
    dt_count(DT_C_REFUSED);
    if (c->retry_after > 0) {
        apr_table_setn(r->err_headers_out, "Retry-After", apr_itoa(r->pool, c->retry_after));
    }
    else if (c->retry_after == -1) {
        apr_table_setn(r->err_headers_out, "Retry-After", table_retry ? table_retry : "1");
    }
    return c->status ? c->status : HTTP_TOO_MANY_REQUESTS;
}

static int serve(void)
{
    dt_count(DT_C_SERVED);
    return DECLINED;
}

/* dt_check decides a request. It runs as a header parser: after the
 * per-directory configuration is known, before access control. */
static int dt_check(request_rec *r)
{
    const dt_conf *c;
    const char *tag, *line, *retry = NULL;
    apr_size_t plen, tlen;
    int max_tag;
    request_rec *p;
    dt_target *t;
    dt_inproc_answer inproc;
    dt_answer answer;

    if (r->main != NULL) {
        /* A subrequest: its main request decides. (Apache runs header
         * parsers for main requests only; this says it here too.) */
        return DECLINED;
    }
    for (p = r->prev; p != NULL; p = p->prev) {
        if (ap_get_module_config(p->request_config, &dthrottle_module)) {
            return DECLINED; /* an internal redirect of a decided request */
        }
    }
    c = ap_get_module_config(r->per_dir_config, &dthrottle_module);
    if (c->enabled != 1) {
        return DECLINED;
    }
    ap_set_module_config(r->request_config, &dthrottle_module, (void *)c);
    dt_count(DT_C_CHECKED);

    if (c->tag_set && c->tag) {
        const char *err = NULL;

        tag = ap_expr_str_exec(r, c->tag, &err);
        if (err) {
            if (!__atomic_exchange_n(&expr_error_logged, 1, __ATOMIC_RELAXED)) {
                ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, DTLOGNO(00001)
                              "DThrottleTag: %s; such a request is not throttled "
                              "(counted no_tag; logged once per process)", err);
            }
            tag = NULL;
        }
    }
    else {
        tag = r->useragent_ip;
    }
    if (tag == NULL || *tag == '\0') {
        /* Nothing to key on (an absent header): as nginx does for an
         * empty key, not throttled. */
        dt_count(DT_C_NO_TAG);
        return serve();
    }
    plen = c->prefix ? strlen(c->prefix) : 0;
    tlen = strlen(tag);
    max_tag = c->max_tag ? c->max_tag : DT_DEFAULT_MAX_TAG;
    if (plen + tlen > (apr_size_t)max_tag || strpbrk(tag, "\r\n")) {
        /* Never sent: a CR or LF would split it into two queries and put
         * the replies out of step. */
        dt_count(DT_C_BAD_TAG);
        if (!__atomic_exchange_n(&bad_tag_logged, 1, __ATOMIC_RELAXED)) {
            ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, DTLOGNO(00002)
                          "a tag holding CR or LF, or longer than %d bytes, is "
                          "never sent; DThrottleBadTag %s applies (logged once "
                          "per process; see the bad_tag counter)", max_tag,
                          c->bad_tag_allow == 1 ? "allow" : "deny");
        }
        return c->bad_tag_allow == 1 ? serve() : refuse(r, c, NULL);
    }
    line = apr_pstrcat(r->pool, c->prefix ? c->prefix : "", tag, "\n", NULL);
    t = c->target ? c->target : default_target;

    /* In process first, from the table the daemon shares; the same tag as
     * the socket's line, without its "\n". */
    inproc = dt_inproc_decide(t, line, plen + tlen, r->pool, &retry);
    if (inproc == DT_INPROC_OK || inproc == DT_INPROC_NO) {
        dt_count(DT_C_DECIDED_SHARED);
        return inproc == DT_INPROC_OK ? serve() : refuse(r, c, retry);
    }
    answer = dt_client_ask(r, t, line, plen + tlen + 1,
                           c->timeout != -1 ? c->timeout : DT_DEFAULT_TIMEOUT,
                           c->min_backoff != -1 ? c->min_backoff : DT_DEFAULT_MIN_BACKOFF,
                           c->max_backoff != -1 ? c->max_backoff : DT_DEFAULT_MAX_BACKOFF);
    if (inproc == DT_INPROC_ATTACH
        && (answer == DT_ANSWER_OK || answer == DT_ANSWER_NO)) {
        dt_inproc_answered(r, t); /* the daemon is up: attach (again) */
    }
    switch (answer) {
    case DT_ANSWER_OK:
        dt_count(DT_C_ASKED);
        return serve();
    case DT_ANSWER_NO:
        dt_count(DT_C_ASKED);
        return refuse(r, c, NULL);
    case DT_ANSWER_FAILED:
        dt_count(DT_C_ASKED);
        break;
    case DT_ANSWER_BACKOFF:
        dt_count(DT_C_BACKED_OFF);
        break;
    }
    if (c->fail_closed == 1) {
        dt_count(DT_C_FAILED_CLOSED);
        return refuse(r, c, NULL);
    }
    dt_count(DT_C_FAILED_OPEN);
    return serve();
}

static int dt_pre_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp)
{
    const char *err;

    targets = apr_array_make(pconf, 4, sizeof(dt_target *));
    socket_named = default_named = 0;
    if ((err = find_target(pconf, DT_DEFAULT_SOCKET, &default_target)) != NULL) {
        ap_log_perror(APLOG_MARK, APLOG_CRIT, 0, plog, DTLOGNO(00003)
                      "default socket: %s", err);
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    return OK;
}

static void dt_child_init(apr_pool_t *pchild, server_rec *s)
{
    dt_target **ts = (dt_target **)targets->elts;
    int threads = 1, i;

    /* One idle connection kept per thread that may ask at once. */
    if (ap_mpm_query(AP_MPMQ_MAX_THREADS, &threads) != APR_SUCCESS || threads < 1) {
        threads = 1;
    }
    for (i = 0; i < targets->nelts; i++) {
        apr_status_t rv = dt_target_child_init(ts[i], pchild, threads);
        if (rv != APR_SUCCESS) {
            ap_log_error(APLOG_MARK, APLOG_CRIT, rv, s, DTLOGNO(00004)
                         "setting up the connections to %s", ts[i]->name);
            exit(APEXIT_CHILDSICK);
        }
        /* Attached here, in each child, never in the parent they fork
         * from; the default socket, when DThrottleSocket names others, on
         * its first answer instead. */
        dt_inproc_child_init(ts[i], pchild, s,
                             ts[i] != default_target || default_named || !socket_named);
    }
}

static void dt_register_hooks(apr_pool_t *p)
{
    ap_hook_pre_config(dt_pre_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_post_config(dt_post_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_child_init(dt_child_init, NULL, NULL, APR_HOOK_MIDDLE);
    /* Last among header parsers: after mod_setenvif, whose variables a
     * DThrottleTag expression may read. */
    ap_hook_header_parser(dt_check, NULL, NULL, APR_HOOK_LAST);
    ap_hook_handler(dt_status_handler, NULL, NULL, APR_HOOK_MIDDLE);
    APR_OPTIONAL_HOOK(ap, status_hook, dt_status_hook, NULL, NULL, APR_HOOK_MIDDLE);
}

AP_DECLARE_MODULE(dthrottle) = {
    STANDARD20_MODULE_STUFF,
    create_dir_conf,
    merge_dir_conf,
    NULL,
    NULL,
    dt_cmds,
    dt_register_hooks
};
