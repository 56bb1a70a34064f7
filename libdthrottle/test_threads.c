/* test_threads.c: threads racing for one bucket through dt_decide, each
 * phase at one instant or spread over several, against one thread alone:
 * the compare-and-swap loses no token and spends none twice.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dthrottle_table.h"
#include "test_builder.h"

#define THREADS 4
#define PHASES 20
#define TRIES 60

struct racer {
    dt_table *t;
    pthread_barrier_t *bar;
    int same_now;  /* 1: every thread at each phase's now; 0: a spread */
    int ok, no, other;
};

static int64_t phase_now(int p)
{
    return TB_T0 + (int64_t)p * 35 * 1000000; /* 35 ms: 3.5 tokens of "t:" */
}

static void *race(void *arg)
{
    struct racer *r = arg;
    for (int p = 0; p < PHASES; p++) {
        if (r->bar != NULL) {
            pthread_barrier_wait(r->bar);
        }
        for (int i = 0; i < TRIES; i++) {
            int64_t now = r->same_now ? phase_now(p) : TB_T0 + (i * 7 + p) % 1000;
            switch (tb_decide(r->t, "t:hot", now, NULL)) {
            case DT_OK:
                r->ok++;
                break;
            case DT_NO:
                r->no++;
                break;
            default:
                r->other++;
            }
        }
    }
    return NULL;
}

/* run_racers runs n racers over a fresh copy of the table, each phase
 * started together, and returns their OKs; *state gets the state after. */
static int run_racers(int n, int same_now, unsigned char **state, int *other)
{
    struct tb b;
    struct racer r[THREADS];
    pthread_t th[THREADS];
    pthread_barrier_t bar;
    int ok = 0;

    tb_std_make(&b);
    tb_add(&b, "t:hot", 5, 9, 0);
    dt_table *t = tb_map(&b);
    pthread_barrier_init(&bar, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        r[i] = (struct racer){t, &bar, same_now, 0, 0, 0};
        pthread_create(&th[i], NULL, race, &r[i]);
    }
    *other = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        ok += r[i].ok;
        *other += r[i].other;
    }
    pthread_barrier_destroy(&bar);
    *state = b.state;
    b.state = NULL;
    dt_close(t);
    tb_free(&b);
    return ok;
}

void test_threads(void)
{
    unsigned char *one, *many, *single;
    int other1, other4, ok1 = 0;
    size_t len;
    struct tb b;

    /* The single-thread reference does each phase's tries of all four. */
    tb_std_make(&b);
    len = b.state_len;
    uint32_t ref = tb_add(&b, "t:hot", 5, 9, 0);
    dt_table *t = tb_map(&b);
    for (int p = 0; p < PHASES; p++) {
        for (int i = 0; i < THREADS * TRIES; i++) {
            ok1 += tb_decide(t, "t:hot", phase_now(p), NULL) == DT_OK;
        }
    }
    CHECK_EQ(tb_unreported(&b, ref), ok1);
    dt_close(t);
    single = b.state;
    b.state = NULL;
    tb_free(&b);

    int ok4 = run_racers(THREADS, 1, &many, &other4);
    CHECK_EQ(other4, 0);
    CHECK_EQ(ok4, ok1);
    tb_std_make(&b);
    tb_fold(&b, many);
    tb_fold(&b, single);
    tb_free(&b);
    CHECK(memcmp(many, single, len) == 0);
    CHECK(ok1 > 50 && ok1 < PHASES * THREADS * TRIES);

    /* Instants spread over a microsecond, in any order: the burst, exactly. */
    int okn = run_racers(THREADS, 0, &one, &other1);
    CHECK_EQ(other1, 0);
    CHECK_EQ(okn, 50);
    free(one);
    free(many);
    free(single);
}

