/* dt_hammer.c: a process hammering one tag through libdthrottle from
 * several threads sharing one attachment, deciding in process and asking
 * the daemon what it cannot decide, from one instant to another; then it
 * prints what it was served. internal/inproc/procs_test.go runs it beside Go
 * processes and a socket connection hammering the same tag, and checks
 * that together they were served exactly what the tag's limit allows.
 *
 *   dt_hammer SOCKET TAG START_NS STOP_NS THREADS
 *
 * START_NS and STOP_NS are Unix nanoseconds (CLOCK_REALTIME, the clock of
 * dt_decide): the threads decide from START_NS until STOP_NS. The report
 * is one line of key=value pairs on stdout:
 *
 *   served      queries answered OK, in process or by the daemon
 *   decisions   queries made
 *   local       of them decided in process (DT_OK or DT_NO)
 *   asked       answered by the daemon over the socket (dt_ask)
 *   failed      neither (DT_LEFT, or a failed ask): not served
 *   first_begin when the first query began, Unix ns
 *   first_done  when the first query returned
 *   last_begin  when the last query began
 *   last_end    when the last query returned
 *   max_gap     the longest time any thread went between two queries
 *               returning, ns
 *
 * It exits 1, printing why on stderr, when it cannot attach.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dthrottle_table.h"

#define MAX_THREADS 16

struct hammer {
    dt_table *t;
    const char *tag;
    size_t n;
    int64_t start, stop;
    uint64_t served, decisions, local, asked, failed;
    int64_t first_begin, first_done, last_begin, last_end, max_gap;
};

static void *hammer(void *arg)
{
    struct hammer *h = arg;
    int64_t now = dt_now(), prev = -1;

    while (now < h->start) { /* until the common start, a millisecond at a time */
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        now = dt_now();
    }
    for (; now < h->stop; now = dt_now()) {
        int64_t end;
        int rc = dt_decide(h->t, h->tag, h->n, now, NULL);

        switch (rc) {
        case DT_OK:
        case DT_NO:
            h->local++;
            break;
        case DT_ASK:
            rc = dt_ask(h->t, h->tag, h->n);
            if (rc == DT_OK || rc == DT_NO) {
                h->asked++;
            } else {
                h->failed++;
            }
            break;
        default: /* DT_LEFT: the fail mode (closed) answers, and attach again */
            h->failed++;
            dt_reattach(h->t);
            rc = DT_NO;
            break;
        }
        end = dt_now();
        h->decisions++;
        h->served += rc == DT_OK;
        if (prev < 0) {
            h->first_begin = now;
            h->first_done = end;
        } else if (end - prev > h->max_gap) {
            h->max_gap = end - prev;
        }
        h->last_begin = now;
        h->last_end = end;
        prev = end;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    struct hammer h[MAX_THREADS], sum;
    pthread_t th[MAX_THREADS];
    dt_table *t;
    int threads;

    if (argc != 6 || (threads = atoi(argv[5])) < 1 || threads > MAX_THREADS) {
        fprintf(stderr, "usage: dt_hammer SOCKET TAG START_NS STOP_NS THREADS (1 to %d)\n",
                MAX_THREADS);
        return 2;
    }
    if (dt_open(argv[1], &t) != 0) {
        fprintf(stderr, "dt_hammer: dt_open %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    if (!dt_shared(t)) {
        fprintf(stderr, "dt_hammer: the daemon at %s shares no table\n", argv[1]);
        dt_close(t);
        return 1;
    }
    for (int i = 0; i < threads; i++) {
        memset(&h[i], 0, sizeof(h[i]));
        h[i].t = t;
        h[i].tag = argv[2];
        h[i].n = strlen(argv[2]);
        h[i].start = strtoll(argv[3], NULL, 10);
        h[i].stop = strtoll(argv[4], NULL, 10);
        if (pthread_create(&th[i], NULL, hammer, &h[i]) != 0) {
            fprintf(stderr, "dt_hammer: pthread_create failed\n");
            return 1;
        }
    }
    memset(&sum, 0, sizeof(sum));
    sum.first_begin = sum.first_done = INT64_MAX;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        sum.served += h[i].served;
        sum.decisions += h[i].decisions;
        sum.local += h[i].local;
        sum.asked += h[i].asked;
        sum.failed += h[i].failed;
        if (h[i].decisions == 0) {
            continue;
        }
        if (h[i].first_begin < sum.first_begin) {
            sum.first_begin = h[i].first_begin;
        }
        if (h[i].first_done < sum.first_done) {
            sum.first_done = h[i].first_done;
        }
        if (h[i].last_begin > sum.last_begin) {
            sum.last_begin = h[i].last_begin;
        }
        if (h[i].last_end > sum.last_end) {
            sum.last_end = h[i].last_end;
        }
        if (h[i].max_gap > sum.max_gap) {
            sum.max_gap = h[i].max_gap;
        }
    }
    dt_close(t);
    if (sum.decisions == 0) {
        sum.first_begin = sum.first_done = 0;
    }
    printf("served=%" PRIu64 " decisions=%" PRIu64 " local=%" PRIu64 " asked=%" PRIu64
           " failed=%" PRIu64 " first_begin=%" PRId64 " first_done=%" PRId64
           " last_begin=%" PRId64 " last_end=%" PRId64 " max_gap=%" PRId64 "\n",
           sum.served, sum.decisions, sum.local, sum.asked, sum.failed, sum.first_begin,
           sum.first_done, sum.last_begin, sum.last_end, sum.max_gap);
    return 0;
}
