/* dthrottle_client.c: one Apache child's connection to dthrottled, shared
 * by its threads, with the query timeout and the backoff after a failure.
 * See dthrottle_client.h.
 *
 * The query protocol is a line out ("tag\n") and exactly three bytes back
 * ("OK\n" or "NO\n") per line, in order, on a stream socket. A query is
 * written whole, under the target's lock, and its waiter queued in the
 * same order; the replies are matched to the waiters in that order. One
 * thread at a time reads (whichever finds no reader), hands each reply to
 * its waiter, and passes the reading on when its own reply has come.
 * A waiter whose deadline passes breaks the connection: every query still
 * waiting on it fails at once (the fail mode answers), and the next query
 * opens a new one, so a late reply can never answer a later query.
 *
 * The socket is blocking, with SO_SNDTIMEO and SO_RCVTIMEO as the query
 * timeout: a healthy query costs a send and, for the reader, a recv that
 * may bring the replies of many. Apache on Linux runs on pthreads, used
 * here directly for the condition each waiter sleeps on.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "apr_network_io.h"
#include "apr_strings.h"
#include "httpd.h"
#include "http_config.h"
#include "http_log.h"

#include "dthrottle_client.h"

APLOG_USE_MODULE(dthrottle);

/* A waiter's state. */
enum { WS_PENDING, WS_OK, WS_NO, WS_FAILED };

/* dt_waiter is one query waiting for its reply, on its thread's stack. */
typedef struct dt_waiter {
    struct dt_waiter *next;
    pthread_cond_t cond;
    int state;
} dt_waiter;

/* dt_conn is a connection and the queries waiting on it, in the order they
 * were written. Guarded by its target's mu. */
struct dt_conn {
    int fd;
    int users;                    /* threads holding it; freed at 0 once broken */
    int broken;                   /* no longer the target's: closed when unused */
    int reading;                  /* a thread is in recv on fd */
    int err;                      /* why it broke */
    dt_waiter *head, *tail;       /* waiting for replies, oldest first */
    char partial[2];              /* the start of a reply read in pieces */
    int npartial;
    apr_interval_time_t rcvtimeo; /* SO_RCVTIMEO now set on fd, microseconds */
};

/* dt_now returns a monotonic clock in nanoseconds. */
static apr_uint64_t dt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (apr_uint64_t)ts.tv_sec * 1000000000u + (apr_uint64_t)ts.tv_nsec;
}

const char *dt_target_make(apr_pool_t *p, const char *addr, dt_target **out)
{
    dt_target *t = apr_pcalloc(p, sizeof(*t));
    const char *path = addr;

    t->name = apr_pstrdup(p, addr);
    if (strncmp(path, "unix:", 5) == 0) {
        path += 5;
    }
    if (path[0] == '/' || path[0] == '@') {
        struct sockaddr_un *un = (struct sockaddr_un *)&t->addr;
        apr_size_t n = strlen(path);

        if (n < 2 || n >= sizeof(un->sun_path)) {
            return apr_psprintf(p, "socket path %s: length must be 2..%d bytes",
                                path, (int)sizeof(un->sun_path) - 1);
        }
        un->sun_family = AF_UNIX;
        memcpy(un->sun_path, path, n);
        if (path[0] == '@') {
            /* An abstract socket: a leading NUL, and no trailing one. */
            un->sun_path[0] = '\0';
            t->addrlen = offsetof(struct sockaddr_un, sun_path) + n;
        }
        else {
            t->addrlen = sizeof(*un);
        }
        t->family = AF_UNIX;
    }
    else {
        char *host, *scope;
        apr_port_t port;
        apr_sockaddr_t *sa;
        apr_status_t rv = apr_parse_addr_port(&host, &scope, &port, addr, p);

        if (rv != APR_SUCCESS || host == NULL || port == 0 || scope != NULL) {
            return apr_psprintf(p, "%s is neither a socket path (/path, "
                                "unix:/path, @abstract) nor host:port", addr);
        }
        rv = apr_sockaddr_info_get(&sa, host, APR_UNSPEC, port, 0, p);
        if (rv != APR_SUCCESS) {
            char buf[120];
            return apr_psprintf(p, "resolving %s: %s", host,
                                apr_strerror(rv, buf, sizeof(buf)));
        }
        if ((apr_size_t)sa->salen > sizeof(t->addr)) {
            return apr_psprintf(p, "resolving %s: address too long", host);
        }
        memcpy(&t->addr, &sa->sa, sa->salen);
        t->addrlen = sa->salen;
        t->family = sa->family;
    }
    *out = t;
    return NULL;
}

/* close_conn closes a child's connection when it exits. */
static apr_status_t close_conn(void *data)
{
    dt_target *t = data;

    if (t->conn != NULL) {
        close(t->conn->fd);
        t->conn = NULL;
    }
    return APR_SUCCESS;
}

apr_status_t dt_target_child_init(dt_target *t, apr_pool_t *pchild)
{
    int rv = pthread_mutex_init(&t->mu, NULL);

    if (rv != 0) {
        return APR_FROM_OS_ERROR(rv);
    }
    t->conn = NULL;
    t->retry_at = 0;
    t->gen = 0;
    t->failures = 0;
    apr_pool_cleanup_register(pchild, t, close_conn, apr_pool_cleanup_null);
    return APR_SUCCESS;
}

/* set_timeout bounds each send, recv and connect on fd by us microseconds
 * (which == SO_SNDTIMEO or SO_RCVTIMEO). */
static int set_timeout(int fd, int which, apr_interval_time_t us)
{
    struct timeval tv;

    if (us < 1) {
        us = 1;
    }
    tv.tv_sec = (time_t)(us / 1000000);
    tv.tv_usec = (suseconds_t)(us % 1000000);
    return setsockopt(fd, SOL_SOCKET, which, &tv, sizeof(tv)) == 0 ? 0 : errno;
}

/* conn_open connects to t within timeout, or returns NULL and sets *err. */
static dt_conn *conn_open(dt_target *t, apr_interval_time_t timeout, int *err)
{
    dt_conn *c;
    int fd = socket(t->family, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0) {
        *err = errno;
        return NULL;
    }
    if ((*err = set_timeout(fd, SO_SNDTIMEO, timeout)) != 0
        || (*err = set_timeout(fd, SO_RCVTIMEO, timeout)) != 0) {
        close(fd);
        return NULL;
    }
    if (t->family != AF_UNIX) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    if (connect(fd, (struct sockaddr *)&t->addr, t->addrlen) != 0) {
        /* A connect cut short by SO_SNDTIMEO says EINPROGRESS. */
        *err = errno == EINPROGRESS ? ETIMEDOUT : errno;
        close(fd);
        return NULL;
    }
    if ((c = calloc(1, sizeof(*c))) == NULL) {
        *err = ENOMEM;
        close(fd);
        return NULL;
    }
    c->fd = fd;
    c->rcvtimeo = timeout;
    return c;
}

/* conn_break fails every query waiting on c and takes it from t, so the
 * next query opens a new connection; a thread in recv on it is woken. */
static void conn_break(dt_target *t, dt_conn *c, int err)
{
    dt_waiter *w;

    if (c->broken) {
        return;
    }
    c->broken = 1;
    c->err = err;
    if (t->conn == c) {
        t->conn = NULL;
    }
    for (w = c->head; w != NULL; w = w->next) {
        w->state = WS_FAILED;
        pthread_cond_signal(&w->cond);
    }
    c->head = c->tail = NULL;
    if (c->reading) {
        shutdown(c->fd, SHUT_RDWR);
    }
}

/* conn_release lets go of c, closing it if it was the last user of a
 * broken connection. */
static void conn_release(dt_conn *c)
{
    if (--c->users == 0 && c->broken) {
        close(c->fd);
        free(c);
    }
}

/* send_all writes the whole query, or returns why not: a query half
 * written would put the stream out of step. */
static int send_all(int fd, const char *line, apr_size_t len)
{
    apr_size_t sent = 0;

    while (sent < len) {
        ssize_t n = send(fd, line + sent, len - sent, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno;
        }
        sent += (apr_size_t)n;
    }
    return 0;
}

/* deliver hands the replies in buf to the oldest waiters. It returns
 * EPROTO for bytes that are not replies, or a reply nobody waits for. */
static int deliver(dt_conn *c, const char *buf, apr_size_t n)
{
    char reply[3];
    apr_size_t i = 0;

    while (i < n) {
        dt_waiter *w;

        while (c->npartial < 2 && i < n) {
            c->partial[c->npartial++] = buf[i++];
        }
        if (i == n) {
            break;
        }
        reply[0] = c->partial[0];
        reply[1] = c->partial[1];
        reply[2] = buf[i++];
        c->npartial = 0;
        if ((w = c->head) == NULL || reply[2] != '\n') {
            return EPROTO;
        }
        if (reply[0] == 'O' && reply[1] == 'K') {
            w->state = WS_OK;
        }
        else if (reply[0] == 'N' && reply[1] == 'O') {
            w->state = WS_NO;
        }
        else {
            return EPROTO;
        }
        if ((c->head = w->next) == NULL) {
            c->tail = NULL;
        }
        pthread_cond_signal(&w->cond);
    }
    return 0;
}

/* read_replies reads what has come on c, as the one reader, within the
 * deadline; called and returning with t->mu held. */
static void read_replies(dt_target *t, dt_conn *c, apr_uint64_t deadline)
{
    char buf[384];
    apr_uint64_t now = dt_now();
    apr_interval_time_t left;
    ssize_t n;
    int e = 0;

    if (now >= deadline) {
        conn_break(t, c, ETIMEDOUT);
        return;
    }
    /* Set the receive timeout to what is left, when that differs much from
     * what is set: rarely, since most queries start with all of it. */
    left = (apr_interval_time_t)((deadline - now) / 1000);
    if (left < c->rcvtimeo - c->rcvtimeo / 4 || left > c->rcvtimeo + c->rcvtimeo / 4) {
        if ((e = set_timeout(c->fd, SO_RCVTIMEO, left)) != 0) {
            conn_break(t, c, e);
            return;
        }
        c->rcvtimeo = left;
    }
    c->reading = 1;
    pthread_mutex_unlock(&t->mu);
    do {
        n = recv(c->fd, buf, sizeof(buf), 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        e = errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno;
    }
    pthread_mutex_lock(&t->mu);
    c->reading = 0;
    if (n > 0) {
        if ((e = deliver(c, buf, (apr_size_t)n)) != 0) {
            conn_break(t, c, e);
        }
    }
    else {
        conn_break(t, c, n == 0 ? ECONNRESET : e);
    }
}

/* backoff returns the pause in nanoseconds after n consecutive failures:
 * min, doubling, at most max. */
static apr_uint64_t backoff(int n, apr_interval_time_t min, apr_interval_time_t max)
{
    apr_uint64_t d = (apr_uint64_t)min;

    for (; n > 1 && d < (apr_uint64_t)max; n--) {
        d *= 2;
    }
    if (d > (apr_uint64_t)max) {
        d = (apr_uint64_t)max;
    }
    return d * 1000;
}

/* wait_reply queues w on c and waits until its reply comes, or the
 * connection breaks; called and returning with t->mu held. */
static void wait_reply(dt_target *t, dt_conn *c, dt_waiter *w, apr_uint64_t deadline)
{
    struct timespec ts;

    ts.tv_sec = (time_t)(deadline / 1000000000u);
    ts.tv_nsec = (long)(deadline % 1000000000u);
    if (c->tail != NULL) {
        c->tail->next = w;
    }
    else {
        c->head = w;
    }
    c->tail = w;
    while (w->state == WS_PENDING) {
        if (!c->reading) {
            read_replies(t, c, deadline);
        }
        else if (pthread_cond_clockwait(&w->cond, &t->mu, CLOCK_MONOTONIC, &ts) == ETIMEDOUT
                 && w->state == WS_PENDING) {
            conn_break(t, c, ETIMEDOUT);
        }
    }
    /* Pass the reading on to the oldest query still waiting. */
    if (!c->reading && c->head != NULL) {
        pthread_cond_signal(&c->head->cond);
    }
}

dt_answer dt_ask(request_rec *r, dt_target *t, const char *line, apr_size_t len,
                 apr_interval_time_t timeout, apr_interval_time_t min_backoff,
                 apr_interval_time_t max_backoff)
{
    apr_uint64_t start = dt_now();
    apr_uint64_t deadline = start + (apr_uint64_t)timeout * 1000;
    apr_uint64_t gen;
    dt_waiter w;
    dt_conn *c;
    int err = 0, tries, failures = 0;

    w.next = NULL;
    w.state = WS_PENDING;
    pthread_mutex_lock(&t->mu);
    if (t->retry_at != 0) {
        if (start < t->retry_at) {
            pthread_mutex_unlock(&t->mu);
            return DT_BACKOFF;
        }
        /* This query is the probe; the others wait for its outcome. */
        t->retry_at = deadline;
    }
    gen = t->gen;
    for (tries = 0; tries < 2 && w.state == WS_PENDING; tries++) {
        int fresh = t->conn == NULL;

        if (fresh && (t->conn = conn_open(t, timeout, &err)) == NULL) {
            w.state = WS_FAILED;
            break;
        }
        c = t->conn;
        c->users++;
        if ((err = send_all(c->fd, line, len)) != 0) {
            conn_break(t, c, err);
            conn_release(c);
            /* A connection the daemon closed while it was idle (a restart):
             * once more, on a new one. */
            if (fresh || (err != EPIPE && err != ECONNRESET)) {
                w.state = WS_FAILED;
            }
            continue;
        }
        pthread_cond_init(&w.cond, NULL);
        wait_reply(t, c, &w, deadline);
        pthread_cond_destroy(&w.cond);
        if (w.state == WS_FAILED) {
            err = c->err;
        }
        conn_release(c);
    }

    if (w.state == WS_OK || w.state == WS_NO) {
        if (t->retry_at != 0 && gen == t->gen) {
            failures = t->failures;
            t->failures = 0;
            t->retry_at = 0;
        }
        pthread_mutex_unlock(&t->mu);
        if (failures > 0) {
            ap_log_rerror(APLOG_MARK, APLOG_NOTICE, 0, r, DTLOGNO(00010)
                          "dthrottled at %s answers again, after %d failed "
                          "attempts", t->name, failures);
        }
        return w.state == WS_OK ? DT_OK : DT_NO;
    }
    if (gen == t->gen) {
        /* One failure per generation: the queries that fail together
         * count once. */
        failures = ++t->failures;
        t->retry_at = dt_now() + backoff(failures, min_backoff, max_backoff);
        t->gen++;
    }
    pthread_mutex_unlock(&t->mu);
    if (failures == 1) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, APR_FROM_OS_ERROR(err), r,
                      DTLOGNO(00011) "dthrottled at %s unreachable: the fail "
                      "mode answers, and this process asks again after a "
                      "backoff (logged once per outage)", t->name);
    }
    return DT_FAILED;
}
