/* dthrottle_attach.c: a table's life: the socket to the daemon, the
 * attach that brings the two files (docs/shared-table.md, "Getting the
 * table"), their mappings, the queries asked over the socket, and the
 * reattach after the daemon left. See dthrottle_table.h; the wire is in
 * dthrottle_socket.c.
 *
 * The socket is owned by the table and guarded by its mutex mu: one query
 * at a time, a line out and three bytes back. The views (the mappings)
 * are published through an atomic pointer and never unmapped while the
 * table is open: a reattach publishes the new view, then maps zero pages
 * over the old one's ranges, so that a thread still deciding on it reads
 * a table that decides nothing, and the old daemon's memory is let go.
 * dt_close unmaps them all.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "dthrottle_internal.h"

#define DT_RETRY_NS (100 * 1000000LL) /* no attach tried this soon after a failure */

/* mono_now is CLOCK_MONOTONIC in nanoseconds, for the pause after a
 * failed attach. */
static int64_t mono_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t dt_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* table_new allocates a table with its mutexes and no view or socket. */
static dt_table *table_new(void)
{
    dt_table *t = calloc(1, sizeof(*t));

    if (t == NULL) {
        return NULL;
    }
    t->fd = -1;
    if (pthread_mutex_init(&t->mu, NULL) != 0) {
        free(t);
        errno = ENOMEM;
        return NULL;
    }
    if (pthread_mutex_init(&t->attach_mu, NULL) != 0) {
        pthread_mutex_destroy(&t->mu);
        free(t);
        errno = ENOMEM;
        return NULL;
    }
    return t;
}

int dt_map(const void *table, size_t table_len, void *state, size_t state_len,
           dt_table **out)
{
    struct dt_view *v;
    dt_table *t;
    int err;

    if (out == NULL) {
        errno = EINVAL;
        return -1;
    }
    if ((v = malloc(sizeof(*v))) == NULL) {
        return -1;
    }
    if ((err = dt_view_init(v, table, table_len, state, state_len)) != 0) {
        free(v);
        errno = err;
        return -1;
    }
    if ((t = table_new()) == NULL) {
        free(v);
        return -1;
    }
    t->view = v;
    *out = t;
    return 0;
}

int dt_shared(const dt_table *t)
{
    return __atomic_load_n(&t->view, __ATOMIC_ACQUIRE) != NULL;
}

/* ---- The attach. ---- */

/* map_file maps the whole of shared-memory file fd with prot. The file
 * must be sealed against shrinking (F_SEAL_SHRINK, checked before its
 * size is read): a file cut short under a mapping would fault its
 * readers. It returns 0, or an errno value. */
static int map_file(int fd, int prot, void **p, size_t *len)
{
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);

    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
        return EPROTO;
    }
    if (fstat(fd, &st) != 0) {
        return errno;
    }
    if (st.st_size <= 0 || (unsigned long long)st.st_size > SIZE_MAX) {
        return EPROTO;
    }
    *p = mmap(NULL, (size_t)st.st_size, prot, MAP_SHARED, fd, 0);
    if (*p == MAP_FAILED) {
        return errno;
    }
    *len = (size_t)st.st_size;
    return 0;
}

/* map_view maps the table file tfd and the state file sfd and checks them
 * into a new view, *out; a layout version this library does not read
 * gives no view (socket only). It returns 0, or -1 and errno. */
static int map_view(int tfd, int sfd, struct dt_view **out)
{
    struct dt_view *v = malloc(sizeof(*v));
    void *table = NULL, *state = NULL;
    size_t tlen = 0, slen = 0;
    int err;

    *out = NULL;
    if (v == NULL) {
        return -1;
    }
    if ((err = map_file(tfd, PROT_READ, &table, &tlen)) == 0 &&
        (err = map_file(sfd, PROT_READ | PROT_WRITE, &state, &slen)) == 0 &&
        (err = dt_view_init(v, table, tlen, state, slen)) == 0) {
        v->mapped = 1;
        *out = v;
        return 0;
    }
    if (table != NULL) {
        munmap(table, tlen);
    }
    if (state != NULL) {
        munmap(state, slen);
    }
    free(v);
    if (err == EPROTONOSUPPORT) {
        return 0;
    }
    errno = err;
    return -1;
}

/* attach connects to path and attaches: an empty line carrying /dev/null,
 * answered "OK\n" with the table and state files, or with none when the
 * daemon shares no table. It returns 0 with the socket in *fd and the view
 * (NULL for none) in *view, or -1 and errno. */
static int attach(const char *path, int *fd, struct dt_view **view)
{
    struct iovec iov = {(void *)(uintptr_t) "\n", 1};
    char reply[3];
    int fds[2], nfds = 0, null_fd, s, rc, err;

    *fd = -1;
    *view = NULL;
    if ((s = dt_connect(path)) < 0) {
        return -1;
    }
    if ((null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
        err = errno;
        close(s);
        errno = err;
        return -1;
    }
    rc = dt_send_all(s, &iov, 1, null_fd);
    err = errno;
    close(null_fd);
    if (rc != 0 || dt_recv_reply(s, reply, fds, &nfds) != 0) {
        err = rc != 0 ? err : errno;
        close(s);
        errno = err;
        return -1;
    }
    if (reply[0] != 'O' || nfds == 1) {
        rc = -1;
        err = EPROTO;
    } else if (nfds == 2) {
        rc = map_view(fds[0], fds[1], view);
        err = errno;
    }
    while (nfds > 0) {
        close(fds[--nfds]); /* the mappings keep the files */
    }
    if (rc != 0) {
        close(s);
        errno = err;
        return -1;
    }
    *fd = s;
    return 0;
}

int dt_open(const char *socket_path, dt_table **out)
{
    dt_table *t;
    int err;

    if (socket_path == NULL || out == NULL) {
        errno = EINVAL;
        return -1;
    }
    if ((t = table_new()) == NULL) {
        return -1;
    }
    if ((t->path = strdup(socket_path)) == NULL ||
        attach(t->path, &t->fd, &t->view) != 0) {
        err = errno;
        dt_close(t);
        errno = err;
        return -1;
    }
    *out = t;
    return 0;
}

/* ---- Asking. ---- */

int dt_ask(dt_table *t, const char *tag, size_t n)
{
    struct iovec iov[2] = {{(void *)(uintptr_t)tag, n}, {(void *)(uintptr_t) "\n", 1}};
    char reply[3];
    int rc, err;

    if (n == 0) {
        return DT_OK;
    }
    if (memchr(tag, '\n', n) != NULL || tag[n - 1] == '\r') {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&t->mu);
    if (t->fd < 0) {
        if (t->path == NULL) {
            pthread_mutex_unlock(&t->mu);
            errno = ENOTCONN;
            return -1;
        }
        if ((t->fd = dt_connect(t->path)) < 0) {
            err = errno;
            pthread_mutex_unlock(&t->mu);
            errno = err;
            return -1;
        }
    }
    rc = dt_send_all(t->fd, iov, 2, -1);
    if (rc == 0) {
        rc = dt_recv_reply(t->fd, reply, NULL, NULL);
    }
    if (rc != 0) {
        /* Whatever the daemon says late must not answer the next query. */
        err = errno;
        close(t->fd);
        t->fd = -1;
        pthread_mutex_unlock(&t->mu);
        errno = err;
        return -1;
    }
    pthread_mutex_unlock(&t->mu);
    return reply[0] == 'O' ? DT_OK : DT_NO;
}

/* ---- Reattaching and closing. ---- */

/* blank maps zero pages over a replaced view's ranges: the threads still
 * deciding on it read state 0 (DT_LEFT) or empty shards (DT_ASK), and
 * their writes land nowhere. Failing that, the old mappings stay. */
static void blank(struct dt_view *v)
{
    if (!v->mapped) {
        return;
    }
    mmap((void *)(uintptr_t)v->table, v->table_len, PROT_READ,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    mmap(v->state, v->state_len, PROT_READ | PROT_WRITE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
}

/* free_view unmaps v if dt_open mapped it, and frees it. */
static void free_view(struct dt_view *v)
{
    if (v->mapped) {
        munmap((void *)(uintptr_t)v->table, v->table_len);
        munmap(v->state, v->state_len);
    }
    free(v);
}

int dt_reattach(dt_table *t)
{
    struct dt_view *old, *v;
    int64_t start;
    int fd, old_fd, err;

    if (t->path == NULL) {
        errno = EINVAL;
        return -1;
    }
    if (pthread_mutex_trylock(&t->attach_mu) != 0) {
        errno = EAGAIN;
        return -1;
    }
    old = __atomic_load_n(&t->view, __ATOMIC_ACQUIRE);
    if (old != NULL && dt_view_live(old, dt_now())) {
        pthread_mutex_unlock(&t->attach_mu);
        return 0;
    }
    start = mono_now();
    if (start < t->retry_at) {
        pthread_mutex_unlock(&t->attach_mu);
        errno = EAGAIN;
        return -1;
    }
    if (attach(t->path, &fd, &v) != 0) {
        err = errno;
        t->retry_at = start + DT_RETRY_NS;
        pthread_mutex_unlock(&t->attach_mu);
        errno = err;
        return -1;
    }
    if (v != NULL && !dt_view_live(v, dt_now())) {
        /* The daemon answers but does not keep the table it hands out
         * (stopped, or its heartbeat stalled): deciding from it would be
         * DT_LEFT at once, and attaching again at every query would
         * block on the socket and pile up mappings. Pause instead. */
        free_view(v);
        close(fd);
        t->retry_at = start + DT_RETRY_NS;
        pthread_mutex_unlock(&t->attach_mu);
        errno = EAGAIN;
        return -1;
    }
    t->retry_at = 0;
    old = __atomic_exchange_n(&t->view, v, __ATOMIC_ACQ_REL);
    pthread_mutex_lock(&t->mu);
    old_fd = t->fd;
    t->fd = fd;
    pthread_mutex_unlock(&t->mu);
    if (old_fd >= 0) {
        close(old_fd);
    }
    if (old != NULL) {
        blank(old);
        old->retired = t->retired;
        t->retired = old;
    }
    pthread_mutex_unlock(&t->attach_mu);
    return 0;
}

void dt_close(dt_table *t)
{
    if (t == NULL) {
        return;
    }
    if (t->view != NULL) {
        free_view(t->view);
    }
    while (t->retired != NULL) {
        struct dt_view *v = t->retired;
        t->retired = v->retired;
        free_view(v);
    }
    if (t->fd >= 0) {
        close(t->fd);
    }
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->attach_mu);
    free(t->path);
    free(t);
}
