/* test_golden.c: "test_table -golden DIR" writes a throwaway conformance
 * case (dt_conform's format, see dt_conform.c) three times:
 * DIR/good/throwaway, whose .after is worked out here field by field from
 * the doc, DIR/bad/throwaway, the same with one byte of .after wrong, and
 * DIR/badpolicy/throwaway, with one policy's name wrong, which dt_conform
 * must fail. It proves the driver, not the golden cases the
 * Go side writes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_builder.h"

static const struct tb_policy golden_pols[] = {
    {TB_LIMIT, 0, 3, 1, NULL}, /* per_token 1 s, allow_at 2 s */
    {TB_ALLOW, 0, 0, 1, "ok:"},
    {TB_DENY, 0, 0, 1, "no:"},
    {TB_DENY, 1, 0, 1, "dry:"},
};

/* The ops, and what each answers. */
static const struct {
    int64_t at; /* from TB_T0 */
    const char *tag;
    const char *want;
} ops[] = {
    {0, "alpha", "OK"}, {0, "alpha", "OK"}, {0, "alpha", "OK"}, {0, "alpha", "NO"},
    {0, "beta", "NO"},  {0, "gamma", "ASK"}, {TB_S, "alpha", "OK"}, {0, "", "OK"},
    {0, "ok:x", "OK"},  {0, "no:x", "NO"},  {0, "dry:x", "OK"},  {2 * TB_S, "alpha", "LEFT"},
};

static int write_file(const char *dir, const char *ext, const void *p, size_t n)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/throwaway.%s", dir, ext);
    if ((f = fopen(path, "wb")) == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        return -1;
    }
    return 0;
}

static int write_ops(const char *dir)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/throwaway.ops", dir);
    if ((f = fopen(path, "w")) == NULL) {
        perror(path);
        return -1;
    }
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        fprintf(f, "%lld ", (long long)(TB_T0 + ops[i].at));
        if (ops[i].tag[0] == '\0') {
            fputc('-', f);
        }
        for (const char *c = ops[i].tag; *c; c++) {
            fprintf(f, "%02x", (unsigned char)*c);
        }
        fprintf(f, " %s\n", ops[i].want);
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* add_counter adds n to counter which of (stripe, pi) in after. */
static void add_counter(struct tb *b, unsigned char *after, uint32_t stripe, uint32_t pi,
                        int which, uint64_t n)
{
    uint64_t off = b->counters_off + 32 * ((uint64_t)stripe * b->np + pi) + 8 * (uint64_t)which;
    tb_put64(after, off, tb_get64(after, off) + n);
}

static void set_dirty(struct tb *b, unsigned char *after, uint32_t ref)
{
    uint64_t off = b->dirty_off + 8 * (uint64_t)(ref >> 6);
    tb_put64(after, off, tb_get64(after, off) | (uint64_t)1 << (ref & 63));
}

/* write_policies writes throwaway.policies: the builder's block has no
 * names, so dt_policy must name them "default", "1", ...; wrong names
 * the first one "wrong" instead. */
static int write_policies(const char *dir, int wrong)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/throwaway.policies", dir);
    if ((f = fopen(path, "w")) == NULL) {
        perror(path);
        return -1;
    }
    for (size_t i = 0; i < sizeof(golden_pols) / sizeof(golden_pols[0]); i++) {
        char name[16];
        uint64_t bits;

        snprintf(name, sizeof(name), i == 0 ? (wrong ? "wrong" : "default") : "%zu", i);
        fprintf(f, "%zu ", i);
        for (const char *c = name; *c; c++) {
            fprintf(f, "%02x", (unsigned char)*c);
        }
        memcpy(&bits, &golden_pols[i].rate, sizeof(bits));
        fprintf(f, " %d %d %u %016llx\n", golden_pols[i].action, golden_pols[i].dry_run,
                (unsigned)golden_pols[i].burst, (unsigned long long)bits);
    }
    return fclose(f) == 0 ? 0 : -1;
}

static int write_case(const char *dir, struct tb *b, const unsigned char *after, int wrong)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        perror(dir);
        return -1;
    }
    return write_file(dir, "table", b->table, b->table_len) ||
                   write_file(dir, "state", b->state, b->state_len) || write_ops(dir) ||
                   write_file(dir, "after", after, b->state_len) || write_policies(dir, wrong)
               ? -1
               : 0;
}

int write_golden(const char *dir)
{
    struct tb b;
    char sub[4096];
    unsigned char *after;
    int rc;

    tb_make(&b, 2, 16, 32, 7, golden_pols, 4, 1024, TB_T0);
    uint32_t alpha = tb_add(&b, "alpha", 5, 0, 0);
    uint32_t beta = tb_add(&b, "beta", 4, 0, TB_T0 + 10 * TB_S);
    uint32_t sa = tb_stripe_of("alpha", 5, b.seed), sb = tb_stripe_of("beta", 4, b.seed);

    /* What the ops leave, by the doc: alpha served 3 at T0 (tat T0+3s),
     * refused once, served once a second later (T0+4s); beta refused. */
    after = malloc(b.state_len);
    memcpy(after, b.state, b.state_len);
    unsigned char *ra = after + b.records_off + 8 * (uint64_t)alpha;
    unsigned char *rb = after + b.records_off + 8 * (uint64_t)beta;
    tb_put64(ra, 0, (uint64_t)(TB_T0 + 4 * TB_S));
    tb_put32(ra, 8, 4);
    tb_put32(ra, 12, 1);
    set_dirty(&b, after, alpha);
    tb_put32(rb, 12, 1);
    set_dirty(&b, after, beta);
    add_counter(&b, after, sa, 0, TB_OK, 4);
    add_counter(&b, after, sa, 0, TB_NO, 1);
    add_counter(&b, after, sb, 0, TB_NO, 1);
    add_counter(&b, after, 0, 1, TB_OK, 1);
    add_counter(&b, after, 0, 2, TB_NO, 1);
    add_counter(&b, after, 0, 3, TB_DRY, 1);
    add_counter(&b, after, 0, 3, TB_OK, 1);

    snprintf(sub, sizeof(sub), "%s/good", dir);
    rc = write_case(sub, &b, after, 0);
    snprintf(sub, sizeof(sub), "%s/badpolicy", dir);
    rc = rc || write_case(sub, &b, after, 1);
    after[b.records_off + 8 * (uint64_t)alpha + 8] ^= 1; /* alpha's unreported */
    snprintf(sub, sizeof(sub), "%s/bad", dir);
    rc = rc || write_case(sub, &b, after, 0);
    free(after);
    tb_free(&b);
    return rc ? -1 : 0;
}
