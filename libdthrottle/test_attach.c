/* test_attach.c: dt_open, dt_ask and dt_reattach against a fake daemon on
 * a real Unix socket: it answers the attach with two sealed memfds holding
 * a table the builder made (or with none), and tags with "OK\n" when they
 * start with 'y', "NO\n" otherwise; "hang" is never answered and "close"
 * closes the connection.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "dthrottle_internal.h"
#include "test_builder.h"

#define MAX_CONNS 32

/* fake is the daemon: its listener, its connections and its files. The
 * listener thread owns lfd; files are swapped under mu. */
struct fake {
    char dir[64], path[108];
    int lfd;
    pthread_t listener;
    pthread_t conns[MAX_CONNS];
    int conn_fds[MAX_CONNS];   /* closed by fake_stop, after the threads */
    int nconns;
    pthread_mutex_t mu;
    int share;                 /* the attach sends the files */
    int tfd, sfd;              /* the files, -1 for none */
    int rights_seen;           /* descriptors received with attaches */
    int attaches;
};

/* conn_arg is one connection of the fake. */
struct conn_arg {
    struct fake *f;
    int fd;
};

/* reply sends "OK\n" or "NO\n", with the files when fds. */
static void reply(int fd, const char *r, int tfd, int sfd)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(2 * sizeof(int))];
    } ctl;
    struct iovec iov = {(void *)(uintptr_t)r, 3};
    struct msghdr m;

    memset(&m, 0, sizeof(m));
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    if (tfd >= 0) {
        int fds[2] = {tfd, sfd};
        struct cmsghdr *c;
        memset(&ctl, 0, sizeof(ctl));
        m.msg_control = ctl.buf;
        m.msg_controllen = sizeof(ctl.buf);
        c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(fds));
        memcpy(CMSG_DATA(c), fds, sizeof(fds));
    }
    if (sendmsg(fd, &m, MSG_NOSIGNAL) != 3) {
        /* the client went away */
    }
}

static void *serve_conn(void *arg)
{
    struct conn_arg *a = arg;
    struct fake *f = a->f;
    char line[4096];
    size_t have = 0;

    for (;;) {
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(4 * sizeof(int))];
        } ctl;
        struct iovec iov = {line + have, sizeof(line) - have};
        struct msghdr m;
        struct cmsghdr *c;
        ssize_t n;
        char *nl;

        memset(&m, 0, sizeof(m));
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = ctl.buf;
        m.msg_controllen = sizeof(ctl.buf);
        if ((n = recvmsg(a->fd, &m, MSG_CMSG_CLOEXEC)) <= 0) {
            break;
        }
        for (c = CMSG_FIRSTHDR(&m); c != NULL; c = CMSG_NXTHDR(&m, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < k; i++) {
                    int fd;
                    memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                    close(fd);
                }
                __atomic_fetch_add(&f->rights_seen, (int)k, __ATOMIC_SEQ_CST);
            }
        }
        have += (size_t)n;
        while ((nl = memchr(line, '\n', have)) != NULL) {
            size_t len = (size_t)(nl - line);
            if (len == 0) {
                pthread_mutex_lock(&f->mu);
                f->attaches++;
                reply(a->fd, "OK\n", f->share ? f->tfd : -1, f->sfd);
                pthread_mutex_unlock(&f->mu);
            } else if (len == 5 && memcmp(line, "close", 5) == 0) {
                goto done;
            } else if (!(len == 4 && memcmp(line, "hang", 4) == 0)) {
                reply(a->fd, line[0] == 'y' ? "OK\n" : "NO\n", -1, -1);
            }
            memmove(line, nl + 1, have - len - 1);
            have -= len + 1;
        }
    }
done:
    shutdown(a->fd, SHUT_RDWR);
    free(a);
    return NULL;
}

static void *listen_loop(void *arg)
{
    struct fake *f = arg;
    for (;;) {
        int fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
        struct conn_arg *a;
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) {
                continue;
            }
            return NULL;
        }
        pthread_mutex_lock(&f->mu);
        if (f->nconns == MAX_CONNS || (a = malloc(sizeof(*a))) == NULL) {
            pthread_mutex_unlock(&f->mu);
            close(fd);
            continue;
        }
        a->f = f;
        a->fd = fd;
        f->conn_fds[f->nconns] = fd;
        pthread_create(&f->conns[f->nconns++], NULL, serve_conn, a);
        pthread_mutex_unlock(&f->mu);
    }
}

/* fake_start listens at a new socket path, or at an abstract name when
 * abstract. */
static void fake_start(struct fake *f, int share, int abstract)
{
    struct sockaddr_un sa;
    socklen_t len = sizeof(sa);

    memset(f, 0, sizeof(*f));
    f->share = share;
    f->tfd = f->sfd = -1;
    pthread_mutex_init(&f->mu, NULL);
    strcpy(f->dir, "/tmp/dthrottle-test-XXXXXX");
    if (mkdtemp(f->dir) == NULL) {
        abort();
    }
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (abstract) {
        snprintf(f->path, sizeof(f->path), "@%s", f->dir + 5);
        memcpy(sa.sun_path, f->path, strlen(f->path));
        sa.sun_path[0] = '\0';
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(f->path));
    } else {
        snprintf(f->path, sizeof(f->path), "%s/sock", f->dir);
        strcpy(sa.sun_path, f->path);
    }
    f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&sa, len) != 0 ||
        listen(f->lfd, 16) != 0) {
        perror("fake daemon");
        abort();
    }
    pthread_create(&f->listener, NULL, listen_loop, f);
}

/* fake_stop stops listening, shuts its connections down and waits for
 * their threads. */
static void fake_stop(struct fake *f)
{
    shutdown(f->lfd, SHUT_RDWR);
    pthread_join(f->listener, NULL);
    close(f->lfd);
    for (int i = 0; i < f->nconns; i++) {
        shutdown(f->conn_fds[i], SHUT_RDWR);
        pthread_join(f->conns[i], NULL);
        close(f->conn_fds[i]);
    }
    if (f->path[0] == '/') {
        unlink(f->path);
    }
    rmdir(f->dir);
    if (f->tfd >= 0) {
        close(f->tfd);
        close(f->sfd);
    }
    pthread_mutex_destroy(&f->mu);
}

/* memfd_of copies len bytes of p into a new memfd, sealed with seals, and
 * returns it with the daemon's writable mapping in *map. */
static int memfd_of(const unsigned char *p, size_t len, int seals, unsigned char **map)
{
    int fd = memfd_create("dthrottle-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        abort();
    }
    *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (*map == MAP_FAILED) {
        abort();
    }
    memcpy(*map, p, len);
    if (seals != 0 && fcntl(fd, F_ADD_SEALS, seals) != 0) {
        perror("F_ADD_SEALS");
        abort();
    }
    return fd;
}

/* fake_files gives the fake b's files (sealed as the doc says, or not at
 * all) and turns *live into b with the daemon's mappings: the builder's
 * accessors then read and write what the library maps. */
static void fake_files(struct fake *f, struct tb *b, int sealed, struct tb *live)
{
    unsigned char *tm, *sm;
    int tfd = memfd_of(b->table, b->table_len,
                       sealed ? F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE : 0, &tm);
    int sfd = memfd_of(b->state, b->state_len, sealed ? F_SEAL_SHRINK | F_SEAL_GROW : 0, &sm);

    pthread_mutex_lock(&f->mu);
    if (f->tfd >= 0) {
        close(f->tfd);
        close(f->sfd);
    }
    f->tfd = tfd;
    f->sfd = sfd;
    pthread_mutex_unlock(&f->mu);
    *live = *b;
    live->table = tm;
    live->state = sm;
}

static void unmap_live(struct tb *live)
{
    munmap(live->table, live->table_len);
    munmap(live->state, live->state_len);
}

static const struct tb_policy pols[] = {{TB_LIMIT, 0, 3, 1, NULL}, {TB_ALLOW, 0, 0, 1, "ok:"}};

static void attach_socket_only(void)
{
    struct fake f;
    dt_table *t = NULL;

    fake_start(&f, 0, 0);
    CHECK(dt_open(f.path, &t) == 0);
    CHECK_EQ(dt_shared(t), 0);
    CHECK_EQ(f.attaches, 1);
    CHECK_EQ(__atomic_load_n(&f.rights_seen, __ATOMIC_SEQ_CST), 1);
    CHECK_EQ(dt_decide(t, "alpha", 5, dt_now(), NULL), DT_ASK);
    CHECK_EQ(dt_ask(t, "yes", 3), DT_OK);
    CHECK_EQ(dt_ask(t, "nope", 4), DT_NO);
    CHECK_EQ(dt_ask(t, "", 0), DT_OK);
    CHECK(dt_ask(t, "y\nb", 3) == -1 && errno == EINVAL);
    CHECK(dt_ask(t, "y\r", 2) == -1 && errno == EINVAL);
    CHECK_EQ(dt_ask(t, "y\rz", 3), DT_OK);
    /* A connection the daemon closes, and one it never answers: each
     * fails once, and the next query connects again. */
    CHECK(dt_ask(t, "close", 5) == -1);
    CHECK_EQ(dt_ask(t, "yes", 3), DT_OK);
    CHECK(dt_ask(t, "hang", 4) == -1 && errno == ETIMEDOUT);
    CHECK_EQ(dt_ask(t, "no", 2), DT_NO);
    CHECK_EQ(f.attaches, 1);
    dt_close(t);
    fake_stop(&f);

    CHECK(dt_open(f.path, &t) == -1 && errno == ENOENT);
}

static void attach_shared(void)
{
    struct fake f;
    struct tb b, b2, live, live2;
    dt_table *t = NULL;
    struct dt_view *old;
    int64_t now = dt_now();

    tb_make(&b, 2, 16, 64, 42, pols, 2, 1024, now);
    uint32_t ref = tb_add(&b, "alpha", 5, 0, 0);
    fake_start(&f, 1, 1);
    fake_files(&f, &b, 1, &live);
    CHECK(dt_open(f.path, &t) == 0);
    CHECK_EQ(dt_shared(t), 1);
    CHECK_EQ(__atomic_load_n(&f.rights_seen, __ATOMIC_SEQ_CST), 1);

    /* Decided here, seen by the daemon. */
    CHECK_EQ(dt_decide(t, "alpha", 5, now, NULL), DT_OK);
    CHECK_EQ(tb_unreported(&live, ref), 1);
    CHECK(tb_dirty(&live, ref));
    CHECK_EQ(tb_tat(&live, ref), now + TB_S);
    CHECK_EQ(dt_decide(t, "beta", 4, now, NULL), DT_ASK);
    CHECK_EQ(dt_ask(t, "yes", 3), DT_OK);

    /* Live: a reattach does nothing. */
    tb_put64(live.table, TB_HEARTBEAT, (uint64_t)dt_now());
    old = t->view;
    CHECK_EQ(dt_reattach(t), 0);
    CHECK(t->view == old);
    CHECK_EQ(f.attaches, 1);

    /* The daemon restarts with a new table and retires the old one. */
    now = dt_now();
    tb_make(&b2, 1, 16, 64, 43, pols, 2, 1024, now);
    uint32_t ref2 = tb_add(&b2, "alpha", 5, 0, 0);
    fake_files(&f, &b2, 1, &live2);
    tb_put32(live.table, TB_STATE, 2);
    CHECK_EQ(dt_decide(t, "alpha", 5, now, NULL), DT_LEFT);
    CHECK_EQ(dt_reattach(t), 0);
    CHECK_EQ(f.attaches, 2);
    CHECK(t->view != old);
    CHECK_EQ(old->table[0], 0);              /* zero pages over the old view */
    CHECK_EQ(tb_get32(old->table, TB_STATE), 0);
    CHECK_EQ(live.table[0], 'D');            /* the daemon's copy is untouched */
    CHECK_EQ(dt_decide(t, "alpha", 5, now, NULL), DT_OK);
    CHECK_EQ(tb_unreported(&live2, ref2), 1);
    CHECK_EQ(tb_unreported(&live, ref), 1);
    CHECK_EQ(dt_ask(t, "nope", 4), DT_NO);

    /* The daemon answers but its heartbeat stalls: attaching hands out
     * the stale table, which is not taken, and attempts pause. */
    tb_put64(live2.table, TB_HEARTBEAT, (uint64_t)(dt_now() - 2 * TB_S));
    old = t->view;
    CHECK_EQ(dt_decide(t, "alpha", 5, dt_now(), NULL), DT_LEFT);
    CHECK(dt_reattach(t) == -1 && errno == EAGAIN);
    CHECK_EQ(f.attaches, 3);
    CHECK(t->view == old);
    CHECK(dt_reattach(t) == -1 && errno == EAGAIN);
    CHECK_EQ(f.attaches, 3);
    tb_put64(live2.table, TB_HEARTBEAT, (uint64_t)dt_now());
    CHECK_EQ(dt_reattach(t), 0);              /* live again: nothing to do */
    CHECK_EQ(dt_decide(t, "alpha", 5, dt_now(), NULL), DT_OK);
    nanosleep(&(struct timespec){.tv_nsec = 150 * 1000 * 1000}, NULL); /* past the pause */

    /* The daemon goes away: a failed reattach, then a pause. */
    tb_put32(live2.table, TB_STATE, 2);
    fake_stop(&f);
    CHECK_EQ(dt_decide(t, "alpha", 5, now, NULL), DT_LEFT);
    CHECK(dt_reattach(t) == -1 && errno != EAGAIN);
    CHECK(dt_reattach(t) == -1 && errno == EAGAIN);
    CHECK(dt_ask(t, "yes", 3) == -1);
    dt_close(t);
    unmap_live(&live);
    unmap_live(&live2);
    tb_free(&b);
    tb_free(&b2);
}

static void attach_refused(void)
{
    struct fake f;
    struct tb b, live;
    dt_table *t = NULL;

    /* Files that could shrink under the mapping are refused. */
    tb_make(&b, 1, 16, 64, 42, pols, 2, 1024, dt_now());
    fake_start(&f, 1, 0);
    fake_files(&f, &b, 0, &live);
    CHECK(dt_open(f.path, &t) == -1 && errno == EPROTO);
    unmap_live(&live);

    /* A layout of another version: asked over the socket. */
    tb_put32(b.table, TB_VERSION, 2);
    fake_files(&f, &b, 1, &live);
    CHECK(dt_open(f.path, &t) == 0);
    CHECK_EQ(dt_shared(t), 0);
    CHECK_EQ(dt_ask(t, "yes", 3), DT_OK);
    dt_close(t);
    unmap_live(&live);

    /* A header that does not describe the files. */
    tb_put32(b.table, TB_VERSION, 1);
    tb_put64(b.table, TB_STATE_SIZE, 8);
    fake_files(&f, &b, 1, &live);
    CHECK(dt_open(f.path, &t) == -1 && errno == EPROTO);
    unmap_live(&live);
    fake_stop(&f);
    tb_free(&b);
}

/* decider decides one tag in a loop until stop, counting the answers. */
struct decider {
    dt_table *t;
    int *stop;
    long answers[4];
};

static void *decide_loop(void *arg)
{
    struct decider *d = arg;
    while (!__atomic_load_n(d->stop, __ATOMIC_ACQUIRE)) {
        int rc = dt_decide(d->t, "alpha", 5, dt_now(), NULL);
        __atomic_fetch_add(&d->answers[rc & 3], 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static long decided(struct decider *d, int n)
{
    long sum = 0;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 4; k++) {
            sum += __atomic_load_n(&d[i].answers[k], __ATOMIC_RELAXED);
        }
    }
    return sum;
}

/* beater is the fake daemon's heartbeat: as dthrottled does, it beats in
 * the table it hands out every 100 ms, so that the views the deciders
 * read stay live however slowly the test runs (a view whose heartbeat is
 * a second old is not, and the deciders would attach again). */
struct beater {
    struct tb *live;
    int cur;  /* atomic: the index in live of the table handed out */
    int stop; /* atomic */
};

static void *beat_loop(void *arg)
{
    struct beater *b = arg;
    const struct timespec every = {0, 100000000};

    while (!__atomic_load_n(&b->stop, __ATOMIC_ACQUIRE)) {
        unsigned char le[8];
        uint64_t v;
        struct tb *live = &b->live[__atomic_load_n(&b->cur, __ATOMIC_ACQUIRE)];

        /* One atomic store of the little-endian field, never torn. */
        tb_put64(le, 0, (uint64_t)dt_now());
        memcpy(&v, le, sizeof(v));
        __atomic_store_n((uint64_t *)(void *)(live->table + TB_HEARTBEAT), v, __ATOMIC_RELEASE);
        nanosleep(&every, NULL);
    }
    return NULL;
}

/* await_view reattaches t until a view other than old is installed, and
 * reports whether one was before deadline; *again counts the calls that
 * answered -1 with EAGAIN, as dt_reattach may, documented: on a loaded
 * machine an attach whose reply takes longer than the socket's second
 * fails that way and pauses the next for DT_RETRY_NS, so the view
 * waited for may come at a later call, after another attach. */
static int await_view(dt_table *t, const struct dt_view *old, int64_t deadline, int *again)
{
    const struct timespec pause = {0, 1000000};

    while (__atomic_load_n(&t->view, __ATOMIC_ACQUIRE) == old) {
        if (dt_now() >= deadline) {
            return 0;
        }
        if (dt_reattach(t) != 0) {
            if (errno != EAGAIN) {
                return 0;
            }
            (*again)++;
            nanosleep(&pause, NULL);
        }
    }
    return 1;
}

/* Threads decide while the daemon restarts under them again and again:
 * every reattach replaces the view they read, and none of them faults. */
static void attach_race(void)
{
    enum { DECIDERS = 4, RESTARTS = 20 };
    static const struct tb_policy big[] = {{TB_LIMIT, 0, 1000000, 1e6, NULL}};
    struct fake f;
    struct tb b, live[RESTARTS + 1];
    struct decider d[DECIDERS];
    pthread_t th[DECIDERS], beat;
    struct beater beats = {live, 0, 0};
    dt_table *t = NULL;
    const struct dt_view *old;
    int stop = 0, again = 0;

    fake_start(&f, 1, 0);
    tb_make(&b, 1, 16, 64, 1, big, 1, 1024, dt_now());
    tb_add(&b, "alpha", 5, 0, 0);
    fake_files(&f, &b, 1, &live[0]);
    tb_free(&b);
    CHECK(dt_open(f.path, &t) == 0);
    pthread_create(&beat, NULL, beat_loop, &beats);
    for (int i = 0; i < DECIDERS; i++) {
        memset(&d[i], 0, sizeof(d[i]));
        d[i].t = t;
        d[i].stop = &stop;
        pthread_create(&th[i], NULL, decide_loop, &d[i]);
    }
    for (int r = 1; r <= RESTARTS; r++) {
        long before = decided(d, DECIDERS);
        int64_t deadline = dt_now() + 5 * TB_S;

        tb_make(&b, 1 << (r % 3), 16, 64, (uint64_t)r, big, 1, 1024, dt_now());
        tb_add(&b, "alpha", 5, 0, 0);
        fake_files(&f, &b, 1, &live[r]);
        tb_free(&b);
        __atomic_store_n(&beats.cur, r, __ATOMIC_RELEASE);
        old = __atomic_load_n(&t->view, __ATOMIC_ACQUIRE);
        tb_put32(live[r - 1].table, TB_STATE, 2);
        CHECK(await_view(t, old, deadline, &again));
        /* Let the deciders run on the new view a while. */
        while (decided(d, DECIDERS) < before + 2000 && dt_now() < deadline) {
        }
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < DECIDERS; i++) {
        pthread_join(th[i], NULL);
    }
    __atomic_store_n(&beats.stop, 1, __ATOMIC_RELEASE);
    pthread_join(beat, NULL);
    long ok = 0;
    for (int i = 0; i < DECIDERS; i++) {
        ok += d[i].answers[DT_OK];
    }
    CHECK(ok > 0);
    /* One attach at the open and one at each restart, and at most one
     * more for each call that failed after attaching. */
    CHECK(f.attaches >= RESTARTS + 1 && f.attaches <= RESTARTS + 1 + again);
    dt_close(t);
    fake_stop(&f);
    for (int r = 0; r <= RESTARTS; r++) {
        unmap_live(&live[r]);
    }
}

void test_attach(void)
{
    attach_socket_only();
    attach_shared();
    attach_refused();
    attach_race();
}
