/* dt_conform_headers.c: dt_conform -headers FILE, the header cases both
 * sides pass (internal/ways/rlheader/testdata/headers.txt; the Go side is
 * rlheader's TestGolden). A case is a line of eleven fields separated by
 * tabs: the policy's name in hex ("-" for empty), its action (limit,
 * allow, deny), burst and rate, then served (0 or 1), tokens, wait_ns and
 * full_ns, then the values dt_headers must write for RateLimit-Policy,
 * RateLimit and Retry-After ("-" for none). Lines that are empty or start
 * with '#' are comments. Each case that differs is named with its line.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dthrottle_table.h"

int dt_conform_headers(const char *path);

#define FIELDS 11

static int unhex(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* parse fills p and the verdict from the eight input fields f; 0, or -1. */
static int parse(char **f, dt_policy_info *p, int *served, double *tokens,
                 int64_t *wait, int64_t *full)
{
    static const char *const actions[] = {"limit", "allow", "deny"};
    size_t n = strcmp(f[0], "-") == 0 ? 0 : strlen(f[0]);
    char *end;
    int ok = 1;

    memset(p, 0, sizeof(*p));
    if (n % 2 != 0 || n / 2 >= sizeof(p->name)) {
        return -1;
    }
    for (size_t i = 0; i < n; i += 2) {
        int hi = unhex(f[0][i]), lo = unhex(f[0][i + 1]);
        if (hi < 0 || lo < 0) {
            return -1;
        }
        p->name[i / 2] = (char)(hi << 4 | lo);
    }
    p->action = -1;
    for (int i = 0; i < 3; i++) {
        if (strcmp(f[1], actions[i]) == 0) {
            p->action = i;
        }
    }
    errno = 0;
    p->burst = (uint32_t)strtoul(f[2], &end, 10);
    ok &= *end == '\0';
    p->rate = strtod(f[3], &end);
    ok &= *end == '\0';
    *served = (int)strtol(f[4], &end, 10);
    ok &= *end == '\0';
    *tokens = strtod(f[5], &end);
    ok &= *end == '\0';
    *wait = strtoll(f[6], &end, 10);
    ok &= *end == '\0';
    *full = strtoll(f[7], &end, 10);
    ok &= *end == '\0';
    return ok && errno == 0 && p->action >= 0 ? 0 : -1;
}

int dt_conform_headers(const char *path)
{
    FILE *fp = fopen(path, "r");
    char *line = NULL, *f[FIELDS];
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, cases = 0, bad = 0;

    if (fp == NULL) {
        fprintf(stderr, "dt_conform: %s: %s\n", path, strerror(errno));
        return 2;
    }
    while ((len = getline(&line, &cap, fp)) >= 0) {
        dt_policy_info p;
        dt_header_values h;
        int served, n = 0;
        double tokens;
        int64_t wait, full;
        char *s = line;

        lineno++;
        if (len > 0 && line[len - 1] == '\n') {
            line[--len] = '\0';
        }
        if (len == 0 || line[0] == '#') {
            continue;
        }
        while (n < FIELDS && s != NULL) {
            f[n++] = strsep(&s, "\t");
        }
        if (n != FIELDS || s != NULL || parse(f, &p, &served, &tokens, &wait, &full) != 0) {
            fprintf(stderr, "dt_conform: %s:%d: not a case\n", path, lineno);
            bad = 2;
            break;
        }
        cases++;
        dt_headers(&p, served, tokens, wait, full, &h);
        if (strcmp(h.policy, f[8]) != 0 || strcmp(h.limit, f[9]) != 0 ||
            strcmp(h.retry_after_len ? h.retry_after : "-", f[10]) != 0 ||
            strlen(h.policy) != h.policy_len || strlen(h.limit) != h.limit_len ||
            strlen(h.retry_after) != h.retry_after_len) {
            printf("FAIL headers %s:%d: got %s | %s | %s; want %s | %s | %s\n", path, lineno,
                   h.policy, h.limit, h.retry_after_len ? h.retry_after : "-", f[8], f[9], f[10]);
            bad = bad ? bad : 1;
        }
    }
    free(line);
    fclose(fp);
    if (bad == 0 && cases == 0) {
        fprintf(stderr, "dt_conform: no cases in %s\n", path);
        return 2;
    }
    if (bad == 0) {
        printf("ok   headers (%d cases)\n", cases);
    }
    return bad;
}
