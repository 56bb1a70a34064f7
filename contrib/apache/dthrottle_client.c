/* dthrottle_client.c: one Apache child's connection to dthrottled, shared
 * by its threads, with the query timeout and the backoff after a failure.
 * See dthrottle_client.h.
 *
 * The query protocol is a line out ("tag\n") and exactly three bytes back
 * ("OK\n" or "NO\n") per line, in order, on a stream socket. A query is
 * appended to the connection's output, and its waiter queued, under the
 * target's lock, in the same order; replies are matched to waiters in that
 * order. No system call is made under the lock:
 *
 *  - sending: the thread that finds nobody sending sends everything
 *    appended so far, and again until nothing is left, so the queries of
 *    threads that arrive meanwhile leave together;
 *  - reading: one waiter at a time (whichever finds no reader) reads,
 *    hands each reply to its waiter, and when its own has come wakes the
 *    oldest waiter to read next; the others sleep on a semaphore.
 *
 * With one thread (prefork) this is a send and a recv per query. When a
 * child is busy its queries travel in batches, and the daemon reads and
 * answers many per system call.
 *
 * A waiter whose deadline passes breaks the connection: every query still
 * waiting on it fails at once (the fail mode answers) and the next query
 * opens a new one, so a late reply can never answer a later query. The
 * socket is blocking, with SO_SNDTIMEO and SO_RCVTIMEO as the timeout.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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
    sem_t sem;                    /* posted when state is set, or to read next */
    int state;
} dt_waiter;

/* dt_conn is a connection, the queries not yet sent and those waiting for
 * replies, in order. Guarded by its target's mu, but for refs. */
struct dt_conn {
    int fd;
    int refs;                     /* the target's (until broken) and each query's */
    int broken;                   /* no longer the target's */
    int err;                      /* why it broke */
    int sending, reading;         /* a thread is in send, in recv */
    apr_uint64_t answered;        /* replies read */
    char *out, *spare;            /* appended queries; the batch being sent */
    apr_size_t nout, cap, spare_cap;
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
    pthread_mutexattr_t attr;
    int rv;

    /* Held for a few memory operations at a time: spin a little before
     * sleeping. */
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    rv = pthread_mutex_init(&t->mu, &attr);
    pthread_mutexattr_destroy(&attr);
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
 * (which: SO_SNDTIMEO or SO_RCVTIMEO). */
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
        /* A connect cut short by SO_SNDTIMEO says EINPROGRESS or EAGAIN. */
        *err = errno == EINPROGRESS || errno == EAGAIN ? ETIMEDOUT : errno;
        close(fd);
        return NULL;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL || (c->out = malloc(4096)) == NULL || (c->spare = malloc(4096)) == NULL) {
        if (c != NULL) {
            free(c->out);
        }
        free(c);
        close(fd);
        *err = ENOMEM;
        return NULL;
    }
    c->cap = c->spare_cap = 4096;
    c->fd = fd;
    c->refs = 1;
    c->rcvtimeo = timeout;
    return c;
}

/* conn_release lets go of a reference to c, and frees it with the last. */
static void conn_release(dt_conn *c)
{
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        close(c->fd);
        free(c->out);
        free(c->spare);
        free(c);
    }
}

/* conn_break fails every query waiting on c and takes it from t, so the
 * next query opens a new connection; a thread in recv on it is woken.
 * The caller holds t->mu and a reference to c. */
static void conn_break(dt_target *t, dt_conn *c, int err)
{
    dt_waiter *w;

    if (c->broken) {
        return;
    }
    c->broken = 1;
    c->err = err;
    c->nout = 0;
    for (w = c->head; w != NULL; w = w->next) {
        __atomic_store_n(&w->state, WS_FAILED, __ATOMIC_RELEASE);
        sem_post(&w->sem);
    }
    c->head = c->tail = NULL;
    if (c->reading || c->sending) {
        shutdown(c->fd, SHUT_RDWR);
    }
    if (t->conn == c) {
        t->conn = NULL;
        conn_release(c);
    }
}

/* append adds line to c's output; 0 or ENOMEM. */
static int append(dt_conn *c, const char *line, apr_size_t len)
{
    if (c->nout + len > c->cap) {
        apr_size_t cap = c->cap * 2 > c->nout + len ? c->cap * 2 : c->nout + len;
        char *out = realloc(c->out, cap);

        if (out == NULL) {
            return ENOMEM;
        }
        c->out = out;
        c->cap = cap;
    }
    memcpy(c->out + c->nout, line, len);
    c->nout += len;
    return 0;
}

/* send_all writes n bytes, or returns why not: a query half written would
 * put the stream out of step. */
static int send_all(int fd, const char *buf, apr_size_t n)
{
    apr_size_t sent = 0;

    while (sent < n) {
        ssize_t k = send(fd, buf + sent, n - sent, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno;
        }
        sent += (apr_size_t)k;
    }
    return 0;
}

/* send_pending sends c's output, batch by batch, until none is left; the
 * caller set c->sending, and holds t->mu, which is let go while sending. */
static void send_pending(dt_target *t, dt_conn *c)
{
    while (c->nout > 0 && !c->broken) {
        char *buf = c->out;
        apr_size_t n = c->nout, cap = c->cap;
        int err;

        c->out = c->spare;
        c->cap = c->spare_cap;
        c->nout = 0;
        c->spare = buf;
        c->spare_cap = cap;
        pthread_mutex_unlock(&t->mu);
        err = send_all(c->fd, buf, n);
        pthread_mutex_lock(&t->mu);
        if (err != 0) {
            c->sending = 0;
            conn_break(t, c, err);
            return;
        }
    }
    c->sending = 0;
}

/* deliver hands the replies in buf to the oldest waiters. It returns
 * EPROTO for bytes that are not replies, or a reply nobody waits for. */
static int deliver(dt_conn *c, const char *buf, apr_size_t n)
{
    apr_size_t i = 0;

    while (i < n) {
        dt_waiter *w;
        char last;

        while (c->npartial < 2 && i < n) {
            c->partial[c->npartial++] = buf[i++];
        }
        if (i == n) {
            break;
        }
        last = buf[i++];
        c->npartial = 0;
        if ((w = c->head) == NULL || last != '\n') {
            return EPROTO;
        }
        if (c->partial[0] == 'O' && c->partial[1] == 'K') {
            __atomic_store_n(&w->state, WS_OK, __ATOMIC_RELEASE);
        }
        else if (c->partial[0] == 'N' && c->partial[1] == 'O') {
            __atomic_store_n(&w->state, WS_NO, __ATOMIC_RELEASE);
        }
        else {
            return EPROTO;
        }
        if ((c->head = w->next) == NULL) {
            c->tail = NULL;
        }
        c->answered++;
        sem_post(&w->sem);
    }
    return 0;
}

/* read_replies reads what has come on c, as the one reader, within the
 * deadline. The caller holds t->mu, which is let go while reading. */
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
    /* Set the receive timeout to what is left when that differs much from
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

/* wait_reply waits until w's reply has come or c broke. The caller holds
 * t->mu. It returns 1 with t->mu held, or 0 without: a waiter woken with
 * its answer leaves without taking the lock again. */
static int wait_reply(dt_target *t, dt_conn *c, dt_waiter *w, apr_uint64_t deadline)
{
    struct timespec ts;

    ts.tv_sec = (time_t)(deadline / 1000000000u);
    ts.tv_nsec = (long)(deadline % 1000000000u);
    while (w->state == WS_PENDING) {
        int rc;

        if (!c->reading) {
            read_replies(t, c, deadline);
            continue;
        }
        pthread_mutex_unlock(&t->mu);
        while ((rc = sem_clockwait(&w->sem, CLOCK_MONOTONIC, &ts)) != 0 && errno == EINTR) {
        }
        /* A post is made under the lock, after the state is set: once it
         * is taken, the state can be read, and the semaphore destroyed. */
        if (rc == 0 && __atomic_load_n(&w->state, __ATOMIC_ACQUIRE) != WS_PENDING) {
            return 0;
        }
        pthread_mutex_lock(&t->mu);
        if (w->state == WS_PENDING && dt_now() >= deadline) {
            conn_break(t, c, ETIMEDOUT);
        }
    }
    /* Pass the reading on to the oldest query still waiting. */
    if (!c->reading && c->head != NULL) {
        sem_post(&c->head->sem);
    }
    return 1;
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

/* query sends line on t's connection, opening one if need be, and waits
 * for the reply. The caller holds t->mu; query lets it go. It returns the
 * waiter's state; *stale is set when a connection that had answered
 * before was found closed by the daemon (a restart), worth one more try. */
static int query(dt_target *t, const char *line, apr_size_t len,
                 apr_interval_time_t timeout, apr_uint64_t deadline, int *err, int *stale)
{
    dt_waiter w;
    dt_conn *c = t->conn;

    *stale = 0;
    if (c == NULL && (c = t->conn = conn_open(t, timeout, err)) == NULL) {
        pthread_mutex_unlock(&t->mu);
        return WS_FAILED;
    }
    if ((*err = append(c, line, len)) != 0) {
        pthread_mutex_unlock(&t->mu);
        return WS_FAILED;
    }
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
    w.next = NULL;
    w.state = WS_PENDING;
    sem_init(&w.sem, 0, 0);
    if (c->tail != NULL) {
        c->tail->next = &w;
    }
    else {
        c->head = &w;
    }
    c->tail = &w;
    if (!c->sending) {
        c->sending = 1;
        send_pending(t, c);
    }
    if (wait_reply(t, c, &w, deadline)) {
        if (w.state == WS_FAILED) {
            *err = c->err;
            *stale = c->answered > 0 && (c->err == EPIPE || c->err == ECONNRESET);
        }
        pthread_mutex_unlock(&t->mu);
    }
    else if (w.state == WS_FAILED) {
        /* Broken: c->err and c->answered no longer change. */
        *err = c->err;
        *stale = c->answered > 0 && (c->err == EPIPE || c->err == ECONNRESET);
    }
    sem_destroy(&w.sem);
    conn_release(c);
    return w.state;
}

dt_answer dt_ask(request_rec *r, dt_target *t, const char *line, apr_size_t len,
                 apr_interval_time_t timeout, apr_interval_time_t min_backoff,
                 apr_interval_time_t max_backoff)
{
    apr_uint64_t start = dt_now();
    apr_uint64_t deadline = start + (apr_uint64_t)timeout * 1000;
    apr_uint64_t gen;
    int state, err = 0, stale, failures = 0;

    pthread_mutex_lock(&t->mu);
    if (t->retry_at != 0) {
        if (start < t->retry_at) {
            pthread_mutex_unlock(&t->mu);
            return DT_BACKOFF;
        }
        /* This query is the probe; the others wait for its outcome. */
        __atomic_store_n(&t->retry_at, deadline, __ATOMIC_RELAXED);
    }
    gen = t->gen;
    state = query(t, line, len, timeout, deadline, &err, &stale);
    if (state == WS_FAILED && stale) {
        pthread_mutex_lock(&t->mu);
        state = query(t, line, len, timeout, deadline, &err, &stale);
    }

    if (state != WS_FAILED) {
        /* Healthy, the common case, the lock is not taken again. */
        if (__atomic_load_n(&t->retry_at, __ATOMIC_RELAXED) != 0) {
            pthread_mutex_lock(&t->mu);
            if (t->retry_at != 0 && gen == t->gen) {
                failures = t->failures;
                t->failures = 0;
                __atomic_store_n(&t->retry_at, 0, __ATOMIC_RELAXED);
            }
            pthread_mutex_unlock(&t->mu);
        }
        if (failures > 0) {
            ap_log_rerror(APLOG_MARK, APLOG_NOTICE, 0, r, DTLOGNO(00010)
                          "dthrottled at %s answers again, after %d failed "
                          "attempts", t->name, failures);
        }
        return state == WS_OK ? DT_OK : DT_NO;
    }
    pthread_mutex_lock(&t->mu);
    if (gen == t->gen) {
        /* One failure per generation: the queries that fail together
         * count once. */
        failures = ++t->failures;
        __atomic_store_n(&t->retry_at, dt_now() + backoff(failures, min_backoff, max_backoff),
                         __ATOMIC_RELAXED);
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
