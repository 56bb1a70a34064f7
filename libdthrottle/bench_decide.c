/* bench_decide.c: what one in-process decision (dt_decide) costs, at
 * 10,000 and at 1,000,000 tracked tags, on one thread and on two threads
 * deciding on distinct tags.
 *
 * The table is made by the tests' builder (test_builder.c) the way the
 * daemon lays it out on a 2-CPU host: 8 shards, each index filled to
 * about 0.68 of its slots (the daemon's average between growths), tags
 * kept verbatim up to 256 bytes, a default limit policy and two prefix
 * policies the tags do not match (one step of the trie walk). The tags
 * are IPv4 addresses ("10.x.y.z"); the limit serves every query (rate
 * 10^9 a second, burst 10^9), so that each decision takes the whole
 * served path: hash, trie, probe, key, compare-and-swap, the unreported
 * hit, the counter and the result's header values.
 *
 * Two threads run twice: on two random halves of the tags, whose records
 * lie side by side (a record is 40 bytes: a cache line holds parts of two
 * or three, often the other thread's), and "records apart", each on the
 * tags of one half of the record area, so that no line is written by
 * both: the difference is what false sharing of records costs.
 *
 * Each thread decides on its own tags in a random order drawn once, the
 * tags' bytes copied in that order into one array read front to back, so
 * that choosing the next tag costs a sequential read and the table pays
 * every cache miss a random tag brings. The clock is read once every 256
 * decisions: a caller reads it once a query, but dt_now (a vDSO call,
 * about half a decision at 10,000 tags) is not dt_decide; its cost is
 * printed on its own.
 *
 *   dt_bench [-s SECONDS] [-t 1|2] [TAGS...]
 *
 * (default: 1 s a case, 1 and 2 threads, 10000 and 1000000 tags).
 *
 * A case runs in 5 rounds; the median round is printed (a shared or
 * virtual machine's neighbours make single rounds noisy), and the best.
 *
 * Targets on one thread: at most 60 ns a decision at 10,000 tags and 200
 * ns at 1,000,000; two threads about twice the decisions a second. Each
 * size ends with its floor: the two dependent loads a decision makes (an
 * index slot, then its record), timed alone over areas of the same
 * sizes: what the memory costs whatever the code does.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dthrottle_table.h"
#include "test_builder.h"

/* test_builder.c's checks report through these. */
int tb_failures;
const char *tb_test = "bench";

#define SHARDS 8
#define LOAD 0.68
#define MAX_KEY 256
#define TAG_BYTES 16 /* "10.255.255.255" is 14 */
#define CLOCK_EVERY 256
#define ROUNDS 5 /* a case's rounds: the median is printed */

/* key is one tag, inline, so that the next tag is the next 16 bytes. */
struct key {
    unsigned char len;
    char s[TAG_BYTES - 1];
};

struct worker {
    dt_table *t;
    const struct key *keys; /* in the order decided */
    size_t nkeys;
    double seconds;
    uint64_t decisions, served;
    double elapsed;
    pthread_barrier_t *start;
};

static const struct tb_policy pols[] = {
    {TB_LIMIT, 0, 1000000000, 1e9, NULL}, /* every query served */
    {TB_ALLOW, 0, 0, 1, "ok:"},
    {TB_LIMIT, 0, 100, 10, "api:"},
};

/* clock_sink keeps dt_now's calls from being optimised away. */
static volatile int64_t clock_sink;

/* only_threads: 1 or 2 to run only that many threads (-t), 0 both. */
static int only_threads;

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* rnd is splitmix64: a random order that is the same from run to run. */
static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void tag_of(uint32_t i, struct key *k)
{
    int n = snprintf(k->s, sizeof(k->s), "10.%u.%u.%u", (i >> 16) & 0xFF,
                     (i >> 8) & 0xFF, i & 0xFF);
    k->len = (unsigned char)n;
}

static void *work(void *arg)
{
    struct worker *w = arg;
    uint64_t decisions = 0, served = 0;
    double start, stop;
    size_t i = 0;
    dt_result r;

    pthread_barrier_wait(w->start);
    start = mono();
    stop = start + w->seconds;
    for (;;) {
        int64_t now = dt_now();

        for (int j = 0; j < CLOCK_EVERY; j++) {
            const struct key *k = &w->keys[i];

            served += dt_decide(w->t, k->s, k->len, now, &r) == DT_OK;
            if (++i == w->nkeys) {
                i = 0;
            }
        }
        decisions += CLOCK_EVERY;
        if ((decisions & 0x3FFF) == 0 && mono() >= stop) {
            break;
        }
    }
    w->elapsed = mono() - start;
    w->decisions = decisions;
    w->served = served;
    return NULL;
}

/* round decides for seconds on nthreads threads, each on its own share
 * of the tags: ns a decision (per thread) and decisions a second (all
 * threads), or -1 when a decision was not served. */
static int round_of(dt_table *t, struct key *order, size_t ntags, int nthreads,
                    double seconds, double *ns, double *rate)
{
    struct worker w[2];
    pthread_t th[2];
    pthread_barrier_t start;
    uint64_t decisions = 0, served = 0;

    *ns = *rate = 0;
    pthread_barrier_init(&start, NULL, (unsigned)nthreads);
    for (int i = 0; i < nthreads; i++) {
        size_t from = ntags * (size_t)i / (size_t)nthreads;
        size_t to = ntags * (size_t)(i + 1) / (size_t)nthreads;

        memset(&w[i], 0, sizeof(w[i]));
        w[i].t = t;
        w[i].keys = order + from;
        w[i].nkeys = to - from;
        w[i].seconds = seconds;
        w[i].start = &start;
        pthread_create(&th[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i], NULL);
        decisions += w[i].decisions;
        served += w[i].served;
        *ns += w[i].elapsed * 1e9 / (double)w[i].decisions / nthreads;
        *rate += (double)w[i].decisions / w[i].elapsed;
    }
    pthread_barrier_destroy(&start);
    if (served != decisions) {
        fprintf(stderr, "dt_bench: %llu of %llu decisions served, want all\n",
                (unsigned long long)served, (unsigned long long)decisions);
        return -1;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* run makes ROUNDS rounds and prints the median round's ns a decision
 * and decisions a second, and the best round's. */
static int run(dt_table *t, struct key *order, size_t ntags, int nthreads, double seconds,
               const char *how)
{
    double ns[ROUNDS], rate[ROUNDS];

    for (int i = 0; i < ROUNDS; i++) {
        if (round_of(t, order, ntags, nthreads, seconds / ROUNDS, &ns[i], &rate[i]) != 0) {
            return -1;
        }
    }
    qsort(ns, ROUNDS, sizeof(ns[0]), cmp_double);
    qsort(rate, ROUNDS, sizeof(rate[0]), cmp_double);
    printf("%8zu tags, %d thread%s: %6.1f ns/decision, %6.2f M decisions/s"
           "  (best round %.1f ns, %.2f M/s)%s\n",
           ntags, nthreads, nthreads == 1 ? " " : "s", ns[ROUNDS / 2],
           rate[ROUNDS / 2] / 1e6, ns[0], rate[ROUNDS - 1] / 1e6, how);
    fflush(stdout);
    return 0;
}

/* floor prints what no decision at this size can beat: the two loads a
 * decision depends on in turn (an index slot, then the record it names)
 * as a chain of random loads over two areas the size of the table's
 * index and records, each load's line naming the next: what the memory
 * itself costs, with no hash, compare or compare-and-swap. */
static int floor_of(size_t index_bytes, size_t record_bytes)
{
    size_t ni = index_bytes / 64, nr = record_bytes / 64, steps = 2000000;
    uint64_t *ix = malloc(ni * 64), *rc = malloc(nr * 64), seed = 0xf100, at = 0;
    uint64_t *pi = malloc(ni * 8), *pr = malloc(nr * 8);
    double start, ns = 0;

    if (ix == NULL || rc == NULL || pi == NULL || pr == NULL || ni < 2 || nr < ni) {
        free(ix);
        free(rc);
        free(pi);
        free(pr);
        return -1;
    }
    /* One cycle through every index line in a random order, each naming
     * a distinct random record line, which names the next index line. */
    for (size_t i = 0; i < ni; i++) {
        pi[i] = i;
    }
    for (size_t i = 0; i < nr; i++) {
        pr[i] = i;
    }
    for (size_t i = ni - 1; i > 0; i--) {
        size_t j = (size_t)(rnd(&seed) % (i + 1));
        uint64_t x = pi[i];
        pi[i] = pi[j];
        pi[j] = x;
    }
    for (size_t i = nr - 1; i > 0; i--) {
        size_t j = (size_t)(rnd(&seed) % (i + 1));
        uint64_t x = pr[i];
        pr[i] = pr[j];
        pr[j] = x;
    }
    for (size_t k = 0; k < ni; k++) {
        ix[pi[k] * 8] = pr[k];
        rc[pr[k] * 8] = pi[(k + 1) % ni];
    }
    at = pi[0];
    free(pi);
    free(pr);
    for (int pass = 0; pass < 2; pass++) { /* the first warms the pages */
        start = mono();
        for (size_t i = 0; i < steps; i++) {
            at = rc[ix[at * 8] * 8];
        }
        ns = (mono() - start) * 1e9 / (double)steps;
    }
    printf("  floor: an index slot, then its record, at random (%.1f MB, %.1f MB): %.1f ns"
           " (%llu)\n", index_bytes / 1048576.0, record_bytes / 1048576.0, ns,
           (unsigned long long)at % 2);
    free(ix);
    free(rc);
    return 0;
}

static int bench(size_t ntags, double seconds)
{
    uint32_t slots = (uint32_t)((double)ntags / SHARDS / LOAD) + 1;
    struct key *order = malloc(ntags * sizeof(*order)), *apart = malloc(ntags * sizeof(*apart));
    uint64_t seed = 0x5eed;
    struct tb b;
    dt_table *t;
    int rc = 0;

    if (order == NULL || apart == NULL) {
        free(order);
        free(apart);
        fprintf(stderr, "dt_bench: out of memory\n");
        return -1;
    }
    /* records: 18 bytes, a one-byte length and the key, 8-byte aligned */
    tb_make(&b, SHARDS, slots, MAX_KEY, 0x0123456789abcdefULL, pols,
            (uint32_t)(sizeof(pols) / sizeof(pols[0])), (ntags + 1) * 40,
            dt_now() + 3600 * TB_S); /* a heartbeat that stays fresh */
    for (size_t i = 0; i < ntags; i++) {
        tag_of((uint32_t)i, &order[i]);
        tb_add(&b, order[i].s, order[i].len, 0, 0);
    }
    /* apart: the tags in the order of their records, each half shuffled
     * on its own, so that two threads' records never share a line. */
    memcpy(apart, order, ntags * sizeof(*order));
    for (size_t i = ntags - 1; i > 0; i--) { /* Fisher-Yates */
        size_t j = (size_t)(rnd(&seed) % (i + 1));
        struct key k = order[i];
        order[i] = order[j];
        order[j] = k;
    }
    for (size_t h = 0; h < 2; h++) {
        size_t lo = ntags / 2 * h, hi = h == 0 ? ntags / 2 : ntags;
        for (size_t i = hi - 1; i > lo; i--) {
            size_t j = lo + (size_t)(rnd(&seed) % (i - lo + 1));
            struct key k = apart[i];
            apart[i] = apart[j];
            apart[j] = k;
        }
    }
    t = tb_map(&b);
    /* One pass first: the pages faulted in, each record's first hit
     * marked dirty (later hits find unreported above 0). */
    for (size_t i = 0; i < ntags; i++) {
        if (dt_decide(t, order[i].s, order[i].len, dt_now(), NULL) != DT_OK) {
            fprintf(stderr, "dt_bench: %.*s not decided in process\n", order[i].len,
                    order[i].s);
            rc = -1;
            break;
        }
    }
    for (int th = 1; th <= 2 && rc == 0; th++) {
        if (only_threads == 0 || only_threads == th) {
            rc = run(t, order, ntags, th, seconds, "");
        }
    }
    if (rc == 0 && only_threads != 1) {
        rc = run(t, apart, ntags, 2, seconds, ", records apart");
    }
    if (rc == 0) {
        rc = floor_of((size_t)SHARDS * slots * 8, (ntags + 1) * 40);
    }
    dt_close(t);
    tb_free(&b);
    free(order);
    free(apart);
    return rc;
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {10000, 1000000};
    double seconds = 1, start;
    int i = 1, rc = 0;

    for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
        if (strcmp(argv[i], "-s") == 0) {
            seconds = atof(argv[i + 1]);
        } else if (strcmp(argv[i], "-t") == 0) {
            only_threads = atoi(argv[i + 1]);
        } else {
            break;
        }
    }
    if (seconds <= 0 || only_threads < 0 || only_threads > 2 || (i < argc && argv[i][0] == '-')) {
        fprintf(stderr, "usage: dt_bench [-s SECONDS] [-t 1|2] [TAGS...]\n");
        return 2;
    }
    start = mono();
    for (int j = 0; j < 1000000; j++) {
        clock_sink = dt_now();
    }
    printf("dt_now: %.1f ns/call\n", (mono() - start) * 1e3);
    if (i < argc) {
        for (; i < argc && rc == 0; i++) {
            long n = atol(argv[i]);
            if (n < 2 || n > 16000000) {
                fprintf(stderr, "dt_bench: %s tags: want 2 to 16000000\n", argv[i]);
                return 2;
            }
            rc = bench((size_t)n, seconds);
        }
    } else {
        for (size_t j = 0; j < sizeof(sizes) / sizeof(sizes[0]) && rc == 0; j++) {
            rc = bench(sizes[j], seconds);
        }
    }
    return rc == 0 ? 0 : 1;
}
