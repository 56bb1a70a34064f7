/* dthrottle_headers.c: a decision stated as header fields (dt_headers):
 * RateLimit-Policy, RateLimit and Retry-After, with the daemon's
 * arithmetic (internal/ways/rlheader), byte for byte. The cases both
 * sides pass are internal/ways/rlheader/testdata/headers.txt
 * (dt_conform -headers). No libm: every rounding below is of a value
 * that fits an int64_t, so a cast does it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <inttypes.h>
#include <stdio.h>

#include "dthrottle_table.h"

#define HDR_NS 1000000000LL
#define HDR_2_63 9223372036854775808.0 /* float64(math.MaxInt64) */

/* hdr_ceil_ns is ns in whole seconds, rounded up; 0 for ns <= 0
 * (rlheader.CeilSeconds). */
static int64_t hdr_ceil_ns(int64_t ns)
{
    if (ns <= 0) {
        return 0;
    }
    return ns / HDR_NS + (ns % HDR_NS != 0);
}

/* hdr_window is the policy's w: the time the bucket takes to refill from
 * empty (bucket.Policy.Refill: burst / rate seconds as whole
 * nanoseconds, truncated, 0 for a policy that is not a usable limit),
 * rounded up to a second and at least 1 (rlheader.ceilSeconds of
 * Duration.Seconds). */
static int64_t hdr_window(const dt_policy_info *p)
{
    int64_t d = 0, c;
    double ns, s;

    if (p->action == 0 && p->rate > 0 && p->burst > 0) {
        ns = (double)p->burst / p->rate * 1e9;
        d = ns >= HDR_2_63 ? INT64_MAX : (int64_t)ns;
    }
    /* Duration.Seconds: whole seconds plus the rest, each as a double;
     * at most 9223372036.9, so c below fits. */
    s = (double)(d / HDR_NS) + (double)(d % HDR_NS) / 1e9;
    c = (int64_t)s;
    if ((double)c < s) {
        c++;
    }
    return c < 1 ? 1 : c;
}

/* hdr_remaining is r: the whole tokens left, 0 in debt (floor, at least
 * 0; the largest int64_t above it). */
static int64_t hdr_remaining(double tokens)
{
    if (!(tokens > 0)) {
        return 0;
    }
    if (tokens >= HDR_2_63) {
        return INT64_MAX;
    }
    return (int64_t)tokens;
}

/* hdr_name writes name (at most size bytes, up to a NUL) to out as a
 * structured-field string (RFC 9651): quoted, '"' and '\' escaped, a byte
 * outside printable ASCII as '?'. out holds 2 * size + 2 bytes. */
static size_t hdr_name(char *out, const char *name, size_t size)
{
    size_t n = 0;

    out[n++] = '"';
    for (size_t i = 0; i < size && name[i] != '\0'; i++) {
        unsigned char c = (unsigned char)name[i];

        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else {
            out[n++] = c < 0x20 || c > 0x7e ? '?' : (char)c;
        }
    }
    out[n++] = '"';
    return n;
}

void dt_headers(const dt_policy_info *p, int served, double tokens,
                int64_t wait_ns, int64_t full_ns, dt_header_values *h)
{
    char name[2 * sizeof(p->name) + 2];
    size_t n;
    int k;

    h->policy[0] = h->limit[0] = h->retry_after[0] = '\0';
    h->policy_len = h->limit_len = h->retry_after_len = 0;

    if (p != NULL) {
        n = hdr_name(name, p->name, sizeof(p->name));
        k = snprintf(h->policy, sizeof(h->policy), "%.*s;q=%" PRIu32 ";w=%" PRId64,
                     (int)n, name, p->burst, hdr_window(p));
        h->policy_len = (size_t)k;
        k = snprintf(h->limit, sizeof(h->limit), "%.*s;r=%" PRId64 ";t=%" PRId64,
                     (int)n, name, hdr_remaining(tokens), hdr_ceil_ns(full_ns));
        h->limit_len = (size_t)k;
    }

    /* Refused, and servable some day: a cost above the burst waits
     * forever (INT64_MAX), and gets none. */
    if (!served && wait_ns != INT64_MAX) {
        int64_t s = hdr_ceil_ns(wait_ns);

        k = snprintf(h->retry_after, sizeof(h->retry_after), "%" PRId64, s < 1 ? 1 : s);
        h->retry_after_len = (size_t)k;
    }
}
