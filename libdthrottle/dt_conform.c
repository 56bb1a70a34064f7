/* dt_conform: runs the shared table's golden cases through libdthrottle.
 *
 *     dt_conform [DIR [NAME...]]      DIR defaults to ../internal/bucket/testdata/shared
 *     dt_conform -headers FILE        the header cases (dt_conform_headers.c)
 *
 * A case NAME in DIR is four files, the contract the Go side (inproc)
 * implements too:
 *     NAME.table   the table file's bytes
 *     NAME.state   the state file's bytes before the ops
 *     NAME.ops     one op a line: <now_ns> <tag in hex, or - for empty> <OK|NO|ASK|LEFT>
 *     NAME.after   the state file's bytes after the ops
 *     NAME.policies (when present) one policy a line, as dt_policy must
 *                  state it: <index> <name in hex> <action> <dry_run>
 *                  <burst> <rate's IEEE 754 bits in hex>
 * The files may also be sparse, as the Go side writes them (see load).
 * The table is mapped read only (a write to it would fault), the state
 * copied into writable memory; each op is decided with dt_decide and its
 * answer checked; then the state is compared with NAME.after byte for
 * byte, and the first difference named, the counters of both summed over
 * their stripes first (a decision counts in its CPU's stripe). Without NAMEs every case in DIR
 * runs (every NAME.table). It exits 0 when every case passes, 1 when one
 * does not, 2 when a case cannot be read or there is none.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dthrottle_table.h"

#define DEFAULT_DIR "../internal/bucket/testdata/shared"

/* file is a case file in memory, in an anonymous mapping of its own. */
struct file {
    unsigned char *p;
    size_t len;
};

static uint64_t le64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* slurp reads the whole of path into malloc'd memory. */
static unsigned char *slurp(const char *path, size_t *len)
{
    unsigned char *buf = NULL;
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd >= 0 && fstat(fd, &st) == 0 && (buf = malloc((size_t)st.st_size + 1)) != NULL) {
        *len = (size_t)st.st_size;
        if (pread(fd, buf, *len, 0) != (ssize_t)*len) {
            free(buf);
            buf = NULL;
        }
    }
    if (buf == NULL) {
        fprintf(stderr, "dt_conform: %s: %s\n", path, errno ? strerror(errno) : "short read");
    }
    if (fd >= 0) {
        close(fd);
    }
    return buf;
}

/* load reads DIR/NAME.EXT into a mapping of its own, page aligned,
 * read only with ro (a write to it faults). A file may be the bytes
 * themselves, or sparse as the Go side writes them (internal/bucket/conform_test.go):
 * "DTSPARSE", the size (u64), then each page that is not all zero as its
 * offset (u64) and its 4096 bytes. It returns 0, or -1 having said why. */
static int load(const char *dir, const char *name, const char *ext, int ro, struct file *f)
{
    char path[4096];
    unsigned char *raw;
    size_t rawlen = 0;

    memset(f, 0, sizeof(*f));
    snprintf(path, sizeof(path), "%s/%s.%s", dir, name, ext);
    errno = 0;
    if ((raw = slurp(path, &rawlen)) == NULL) {
        return -1;
    }
    int sparse = rawlen >= 16 && memcmp(raw, "DTSPARSE", 8) == 0;
    f->len = sparse ? (size_t)le64(raw + 8) : rawlen;
    f->p = mmap(NULL, f->len ? f->len : 1, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (f->p == MAP_FAILED) {
        fprintf(stderr, "dt_conform: %s: %zu bytes: %s\n", path, f->len, strerror(errno));
        f->p = NULL;
        free(raw);
        return -1;
    }
    if (!sparse) {
        memcpy(f->p, raw, rawlen);
    } else {
        size_t at = 16;
        for (; rawlen - at >= 8 + 4096; at += 8 + 4096) {
            uint64_t off = le64(raw + at);
            if (off >= f->len || off % 4096 != 0) {
                break;
            }
            memcpy(f->p + off, raw + at + 8, f->len - off < 4096 ? f->len - off : 4096);
        }
        if (at != rawlen) {
            fprintf(stderr, "dt_conform: %s: a malformed sparse file (at byte %zu)\n", path, at);
            free(raw);
            munmap(f->p, f->len ? f->len : 1);
            f->p = NULL;
            return -1;
        }
    }
    free(raw);
    if (ro) {
        mprotect(f->p, f->len ? f->len : 1, PROT_READ);
    }
    return 0;
}

static void unload(struct file *f)
{
    if (f->p != NULL) {
        munmap(f->p, f->len ? f->len : 1);
        f->p = NULL;
    }
}

/* where names offset off of the state file by the table's header: a
 * record unit, a dirty word, a counter. */
static void where(const struct file *table, uint64_t off, char *buf, size_t n)
{
    static const char *fields[] = {"ok", "no", "dry", "reserved"};
    const unsigned char *h = table->p;
    uint64_t ro, rs, dirty, counters, counted;

    if (table->len < 128) {
        snprintf(buf, n, "?");
        return;
    }
    ro = le64(h + 80), rs = le64(h + 88), dirty = le64(h + 96), counters = le64(h + 104);
    memcpy(&counted, h + 112, 4), counted &= 0xFFFFFFFF;
    if (off >= ro && off - ro < rs) {
        snprintf(buf, n, "record area, unit %llu + %llu",
                 (unsigned long long)((off - ro) / 8), (unsigned long long)((off - ro) % 8));
    } else if (off >= counters && counted > 0 && off - counters < 32 * 64 * counted) {
        uint64_t i = (off - counters) / 32;
        snprintf(buf, n, "counters, stripe %llu policy %llu %s",
                 (unsigned long long)(i / counted), (unsigned long long)(i % counted),
                 fields[(off - counters) % 32 / 8]);
    } else if (off >= dirty && off - dirty < (rs / 8 + 63) / 64 * 8) {
        snprintf(buf, n, "dirty bitmap, word %llu", (unsigned long long)((off - dirty) / 8));
    } else {
        snprintf(buf, n, "outside the record area, dirty bitmap and counters");
    }
}

/* fold moves every stripe's counters into stripe 0 of state (len bytes),
 * by the table's header: a decision counts in any stripe (its CPU's), so
 * two states agree when their sums per policy do. */
static void fold(const struct file *table, unsigned char *state, size_t len)
{
    const unsigned char *h = table->p;
    uint64_t counters, counted;

    if (table->len < 128) {
        return;
    }
    counters = le64(h + 104);
    memcpy(&counted, h + 112, 4), counted &= 0xFFFFFFFF;
    if (counters > len || 32 * 64 * counted > len - counters) {
        return;
    }
    for (uint64_t stripe = 1; stripe < 64; stripe++) {
        for (uint64_t i = 0; i < 4 * counted; i++) {
            unsigned char *from = state + counters + 32 * stripe * counted + 8 * i;
            unsigned char *to = state + counters + 8 * i;
            uint64_t sum = le64(to) + le64(from);

            for (int b = 0; b < 8; b++) {
                to[b] = (unsigned char)(sum >> (8 * b));
                from[b] = 0;
            }
        }
    }
}

/* parse_op reads "<now> <hex|-> <answer>" into its parts; tag gets the
 * bytes (its own buffer, *tag_cap long). It returns 0, or -1. */
static int parse_op(char *line, long long *now, unsigned char **tag, size_t *tag_cap,
                    size_t *n, int *want)
{
    static const char *answers[] = {"NO", "OK", "ASK", "LEFT"}; /* by DT_ value */
    char *save = NULL, *f_now = strtok_r(line, " \t\r\n", &save);
    char *f_tag = strtok_r(NULL, " \t\r\n", &save);
    char *f_ans = strtok_r(NULL, " \t\r\n", &save), *end;
    size_t hex;

    if (f_now == NULL || f_tag == NULL || f_ans == NULL || strtok_r(NULL, " \t\r\n", &save)) {
        return -1;
    }
    errno = 0;
    *now = strtoll(f_now, &end, 10);
    if (errno != 0 || *end != '\0') {
        return -1;
    }
    *n = 0;
    if (strcmp(f_tag, "-") != 0) {
        hex = strlen(f_tag);
        if (hex == 0 || hex % 2 != 0) {
            return -1;
        }
        if (hex / 2 > *tag_cap) {
            unsigned char *p = realloc(*tag, hex / 2);
            if (p == NULL) {
                return -1;
            }
            *tag = p;
            *tag_cap = hex / 2;
        }
        for (size_t i = 0; i < hex; i += 2) {
            char pair[3] = {f_tag[i], f_tag[i + 1], '\0'};
            unsigned long v = strtoul(pair, &end, 16);
            if (*end != '\0' || pair[0] == '+' || pair[0] == '-' || pair[0] == ' ') {
                return -1;
            }
            (*tag)[(*n)++] = (unsigned char)v;
        }
    }
    for (int i = 0; i < 4; i++) {
        if (strcmp(f_ans, answers[i]) == 0) {
            *want = i;
            return 0;
        }
    }
    return -1;
}

/* check_policies checks dt_policy against NAME.policies, when there is
 * one: the number of policies that differ (the first named), or -1 when
 * the file cannot be read. */
static int check_policies(const char *dir, const char *name, dt_table *t)
{
    char path[4096], hex[2 * 255 + 1], want[256];
    unsigned long long bits;
    int idx, action, dry, bad = 0;
    unsigned burst;
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s.policies", dir, name);
    if ((f = fopen(path, "r")) == NULL) {
        return errno == ENOENT ? 0 : -1;
    }
    while (fscanf(f, "%d %510s %d %d %u %llx", &idx, hex, &action, &dry, &burst, &bits) == 6) {
        dt_policy_info p = {.name = "(dt_policy failed)"};
        double rate;
        size_t n = strlen(hex) / 2;

        for (size_t i = 0; i < n; i++) {
            unsigned v;
            sscanf(hex + 2 * i, "%2x", &v);
            want[i] = (char)v;
        }
        want[n] = '\0';
        memcpy(&rate, &bits, sizeof(rate));
        if (dt_policy(t, idx, &p) != 0 || strcmp(p.name, want) != 0 || p.action != action ||
            p.dry_run != dry || p.burst != burst || p.rate != rate) {
            if (bad++ == 0) {
                printf("FAIL %s: policy %d: dt_policy states %s %d %d %u %g, want %s %d %d %u %g\n",
                       name, idx, p.name, p.action, p.dry_run, p.burst, p.rate, want, action, dry,
                       burst, rate);
            }
        }
    }
    if (!feof(f)) {
        bad = -1;
    }
    fclose(f);
    return bad;
}

/* run_case runs case name of dir: 0 passed, 1 failed, 2 unreadable. */
static int run_case(const char *dir, const char *name)
{
    static const char *answers[] = {"NO", "OK", "ASK", "LEFT"};
    struct file table, state, after;
    char path[4096], *line = NULL;
    unsigned char *tag = NULL;
    size_t line_cap = 0, tag_cap = 0, ops = 0, lineno = 0;
    dt_table *t = NULL;
    FILE *f = NULL;
    int rc = 2, bad = 0;

    state.p = after.p = NULL;
    if (load(dir, name, "table", 1, &table) != 0) {
        return 2;
    }
    if (load(dir, name, "state", 0, &state) != 0 || load(dir, name, "after", 0, &after) != 0) {
        goto out;
    }
    if (dt_map(table.p, table.len, state.p, state.len, &t) != 0) {
        fprintf(stderr, "dt_conform: %s: dt_map: %s\n", name, strerror(errno));
        goto out;
    }
    snprintf(path, sizeof(path), "%s/%s.ops", dir, name);
    if ((f = fopen(path, "r")) == NULL) {
        fprintf(stderr, "dt_conform: %s: %s\n", path, strerror(errno));
        goto out;
    }
    while (getline(&line, &line_cap, f) >= 0) {
        long long now;
        size_t n;
        int want, got;

        lineno++;
        if (line[strspn(line, " \t\r\n")] == '\0') {
            continue;
        }
        if (parse_op(line, &now, &tag, &tag_cap, &n, &want) != 0) {
            fprintf(stderr, "dt_conform: %s:%zu: not <now_ns> <hex tag|-> <OK|NO|ASK|LEFT>\n",
                    path, lineno);
            goto out;
        }
        ops++;
        got = dt_decide(t, (const char *)tag, n, now, NULL);
        if (got != want) {
            if (bad++ == 0) {
                printf("FAIL %s: %s:%zu: got %s, want %s\n", name, path, lineno,
                       got >= 0 && got < 4 ? answers[got] : "?", answers[want]);
            }
        }
    }
    rc = 1;
    switch (check_policies(dir, name, t)) {
    case -1:
        fprintf(stderr, "dt_conform: %s/%s.policies: unreadable\n", dir, name);
        rc = 2;
        goto out;
    case 0:
        break;
    default:
        bad++;
    }
    fold(&table, state.p, state.len);
    fold(&table, after.p, after.len);
    if (state.len != after.len) {
        printf("FAIL %s: state is %zu bytes, after %zu\n", name, state.len, after.len);
        bad++;
    } else {
        for (size_t i = 0; i < state.len; i++) {
            if (state.p[i] != after.p[i]) {
                char w[128];
                where(&table, i, w, sizeof(w));
                printf("FAIL %s: state differs from %s.after at offset %zu (%s): got 0x%02x, "
                       "want 0x%02x\n",
                       name, name, i, w, state.p[i], after.p[i]);
                bad++;
                break;
            }
        }
    }
    if (bad == 0) {
        printf("ok   %s (%zu ops)\n", name, ops);
        rc = 0;
    }
out:
    if (f != NULL) {
        fclose(f);
    }
    free(line);
    free(tag);
    dt_close(t);
    unload(&table);
    unload(&state);
    unload(&after);
    return rc;
}

int dt_conform_headers(const char *path); /* dt_conform_headers.c */

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : DEFAULT_DIR;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int worst = 0;

    if (argc == 3 && strcmp(argv[1], "-headers") == 0) {
        return dt_conform_headers(argv[2]);
    }
    if (argc > 1 && argv[1][0] == '-') {
        fprintf(stderr, "usage: dt_conform [DIR [NAME...]] | dt_conform -headers FILE\n");
        return 2;
    }
    if (argc > 2) {
        names = argv + 2;
        n = (size_t)(argc - 2);
    } else {
        DIR *d = opendir(dir);
        struct dirent *e;
        if (d == NULL) {
            fprintf(stderr, "dt_conform: %s: %s\n", dir, strerror(errno));
            return 2;
        }
        while ((e = readdir(d)) != NULL) {
            size_t len = strlen(e->d_name);
            if (len > 6 && strcmp(e->d_name + len - 6, ".table") == 0) {
                if (n == cap) {
                    cap = cap ? 2 * cap : 16;
                    if ((names = realloc(names, cap * sizeof(*names))) == NULL) {
                        fprintf(stderr, "dt_conform: out of memory\n");
                        return 2;
                    }
                }
                if ((names[n++] = strndup(e->d_name, len - 6)) == NULL) {
                    fprintf(stderr, "dt_conform: out of memory\n");
                    return 2;
                }
            }
        }
        closedir(d);
        qsort(names, n, sizeof(*names), by_name);
    }
    if (n == 0) {
        fprintf(stderr, "dt_conform: no cases in %s\n", dir);
        return 2;
    }
    for (size_t i = 0; i < n; i++) {
        int rc = run_case(dir, names[i]);
        worst = rc > worst ? rc : worst;
    }
    if (argc <= 2) {
        for (size_t i = 0; i < n; i++) {
            free(names[i]);
        }
        free(names);
    }
    return worst;
}
