/* dthrottle_client.c: the connections of one Apache child to dthrottled,
 * their timeouts and the backoff after a failure. See dthrottle_client.h.
 *
 * The query protocol is a line out ("tag\n") and exactly three bytes back
 * ("OK\n" or "NO\n"), in order, on a stream socket. A connection carries
 * one query at a time: taken from the child's pool, used, and given back
 * only after its reply was read in full. Sends and connects are bounded by
 * SO_SNDTIMEO, the wait for the reply by ppoll, both set to the query
 * timeout: a healthy query costs three system calls (send, ppoll, recv)
 * and one sleep, and a silent daemon at most the timeout. A connection
 * whose reply did not come in time is closed: its late reply dies with it.
 *
 * (Sharing one pipelined connection among a child's threads, so queries
 * travel in batches, was measured slower: the hand-over of replies between
 * threads costs the child more than the batches save the daemon. See
 * docs/integrations/apache.md, "The module: mod_dthrottle".)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "httpd.h"
#include "http_config.h"
#include "http_log.h"

#include "dthrottle_client.h"

APLOG_USE_MODULE(dthrottle);

/* What one exchange on a connection came to. */
enum {
    XR_OK,      /* "OK\n" */
    XR_NO,      /* "NO\n" */
    XR_STALE,   /* closed by the daemon before anything was read: try a new one */
    XR_TIMEOUT, /* no full reply in time */
    XR_BAD      /* anything else: a reset mid-reply, bytes that are not a reply */
};

/* mono_now returns a monotonic clock in nanoseconds. */
static apr_uint64_t mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (apr_uint64_t)ts.tv_sec * 1000000000u + (apr_uint64_t)ts.tv_nsec;
}

/* close_idle closes the connections of a child's pool when it exits. */
static apr_status_t close_idle(void *data)
{
    dt_target *t = data;

    while (t->nidle > 0) {
        close(t->idle[--t->nidle]);
    }
    return APR_SUCCESS;
}

apr_status_t dt_target_child_init(dt_target *t, apr_pool_t *pchild, int cap)
{
    apr_status_t rv = apr_thread_mutex_create(&t->mu, APR_THREAD_MUTEX_DEFAULT,
                                              pchild);
    if (rv != APR_SUCCESS) {
        return rv;
    }
    t->cap = cap > 0 ? cap : 1;
    t->idle = apr_pcalloc(pchild, sizeof(int) * t->cap);
    t->nidle = 0;
    t->retry_at = 0;
    t->gen = 0;
    t->failures = 0;
    apr_pool_cleanup_register(pchild, t, close_idle, apr_pool_cleanup_null);
    return APR_SUCCESS;
}

/* set_timeout bounds each send and connect on fd by us microseconds. */
static int set_timeout(int fd, apr_interval_time_t us)
{
    struct timeval tv;

    if (us < 1) {
        us = 1;
    }
    tv.tv_sec = (time_t)(us / 1000000);
    tv.tv_usec = (suseconds_t)(us % 1000000);
    return setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == 0 ? 0 : errno;
}

/* connect_target opens a connection to t within timeout, or returns -1 and
 * sets *err. */
static int connect_target(dt_target *t, apr_interval_time_t timeout, int *err)
{
    int fd = socket(t->family, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0) {
        *err = errno;
        return -1;
    }
    if ((*err = set_timeout(fd, timeout)) != 0) {
        close(fd);
        return -1;
    }
    if (t->family != AF_UNIX) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    if (connect(fd, (struct sockaddr *)&t->addr, t->addrlen) != 0) {
        /* A connect cut short by SO_SNDTIMEO says EINPROGRESS. */
        *err = errno == EINPROGRESS ? ETIMEDOUT : errno;
        close(fd);
        return -1;
    }
    return fd;
}

/* dt_exchange sends one query on fd and reads its reply by deadline.
 *
 * The reply is awaited in ppoll, not in a blocking recv: a thread asleep
 * in recv on a Unix socket is also woken when the daemon reads the query
 * (the socket's "write space" wake-up shares its wait queue), and each
 * such needless wake-up is a context switch; ppoll sleeps until data
 * comes. */
static int dt_exchange(int fd, const char *line, apr_size_t len,
                       apr_uint64_t deadline, int *err)
{
    apr_size_t sent = 0, got = 0;
    char reply[3];

    while (sent < len) {
        ssize_t n = send(fd, line + sent, len - sent, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            *err = errno;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                return XR_TIMEOUT;
            }
            return sent == 0 ? XR_STALE : XR_BAD;
        }
        sent += (apr_size_t)n;
        if (sent < len && mono_now() >= deadline) {
            *err = ETIMEDOUT;
            return XR_TIMEOUT;
        }
    }
    for (;;) {
        struct pollfd pfd;
        struct timespec ts;
        apr_uint64_t now = mono_now(), left;
        ssize_t n;
        int rc;

        if (now >= deadline) {
            *err = ETIMEDOUT;
            return XR_TIMEOUT;
        }
        left = deadline - now;
        ts.tv_sec = (time_t)(left / 1000000000u);
        ts.tv_nsec = (long)(left % 1000000000u);
        pfd.fd = fd;
        pfd.events = POLLIN;
        pfd.revents = 0;
        rc = ppoll(&pfd, 1, &ts, NULL);
        if (rc < 0) {
            if (errno == EINTR) {
                continue;
            }
            *err = errno;
            return XR_BAD;
        }
        if (rc == 0) {
            continue; /* the deadline is checked above */
        }
        n = recv(fd, reply + got, sizeof(reply) - got, MSG_DONTWAIT);
        if (n > 0) {
            got += (apr_size_t)n;
            if (got == sizeof(reply)) {
                break;
            }
            continue;
        }
        if (n == 0) {
            *err = ECONNRESET;
            return got == 0 ? XR_STALE : XR_BAD;
        }
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) {
            continue;
        }
        *err = errno;
        return got == 0 && errno == ECONNRESET ? XR_STALE : XR_BAD;
    }
    if (reply[2] == '\n' && reply[0] == 'O' && reply[1] == 'K') {
        return XR_OK;
    }
    if (reply[2] == '\n' && reply[0] == 'N' && reply[1] == 'O') {
        return XR_NO;
    }
    *err = EPROTO;
    return XR_BAD;
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

dt_answer dt_client_ask(request_rec *r, dt_target *t, const char *line, apr_size_t len,
                        apr_interval_time_t timeout, apr_interval_time_t min_backoff,
                        apr_interval_time_t max_backoff)
{
    apr_uint64_t start = mono_now();
    apr_uint64_t deadline = start + (apr_uint64_t)timeout * 1000;
    apr_uint64_t gen;
    int fd = -1, reused = 0, x = XR_BAD, err = 0, failures;

    apr_thread_mutex_lock(t->mu);
    if (t->retry_at != 0) {
        if (start < t->retry_at) {
            apr_thread_mutex_unlock(t->mu);
            return DT_ANSWER_BACKOFF;
        }
        /* This query is the probe; the others wait for its outcome. */
        t->retry_at = deadline;
    }
    gen = t->gen;
    if (t->nidle > 0) {
        fd = t->idle[--t->nidle];
        reused = 1;
    }
    apr_thread_mutex_unlock(t->mu);

    for (;;) {
        if (fd < 0) {
            fd = connect_target(t, timeout, &err);
            if (fd < 0) {
                x = XR_BAD;
                break;
            }
        }
        x = dt_exchange(fd, line, len, deadline, &err);
        if (x == XR_STALE && reused) {
            /* The daemon closed this idle connection (a restart): once more
             * on a new one, within the same deadline. */
            close(fd);
            fd = -1;
            reused = 0;
            continue;
        }
        break;
    }

    if (x == XR_OK || x == XR_NO) {
        apr_thread_mutex_lock(t->mu);
        if (fd >= 0) {
            if (t->nidle < t->cap) {
                t->idle[t->nidle++] = fd;
                fd = -1;
            }
        }
        failures = 0;
        if (t->retry_at != 0 && gen == t->gen) {
            failures = t->failures;
            t->failures = 0;
            t->retry_at = 0;
        }
        apr_thread_mutex_unlock(t->mu);
        if (fd >= 0) {
            close(fd);
        }
        if (failures > 0) {
            ap_log_rerror(APLOG_MARK, APLOG_NOTICE, 0, r, DTLOGNO(00010)
                          "dthrottled at %s answers again, after %d failed "
                          "attempts", t->name, failures);
        }
        return x == XR_OK ? DT_ANSWER_OK : DT_ANSWER_NO;
    }

    if (fd >= 0) {
        close(fd);
    }
    failures = 0;
    apr_thread_mutex_lock(t->mu);
    if (gen == t->gen) {
        /* One failure per generation: the queries that fail together
         * count once. The idle connections predate it: drop them. */
        failures = ++t->failures;
        t->retry_at = mono_now() + backoff(failures, min_backoff, max_backoff);
        t->gen++;
        while (t->nidle > 0) {
            close(t->idle[--t->nidle]);
        }
    }
    apr_thread_mutex_unlock(t->mu);
    if (failures == 1) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, APR_FROM_OS_ERROR(err), r,
                      DTLOGNO(00011) "dthrottled at %s unreachable%s: the fail "
                      "mode answers, and this process retries after a "
                      "backoff (logged once per outage)", t->name,
                      x == XR_TIMEOUT ? " (timed out)" : "");
    }
    return DT_ANSWER_FAILED;
}
