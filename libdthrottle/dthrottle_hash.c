/* dthrottle_hash.c: the shared table's hash (docs/shared-table.md, "The
 * hash"), bit for bit the daemon's bucket.Hash: the multiply-mix of
 * wyhash, keyed by the table's seed. It places a tag in its shard (the
 * high bits) and its index slots (the fragment, the low 32 bits). */
#include <string.h>

#include "dthrottle_internal.h"

#define P0 0xa0761d6478bd642fULL
#define P1 0xe7037ed1a0b428dbULL
#define P2 0x8ebc6af09c88c6e3ULL

/* mix is the high 64 bits of the 128-bit product a*b xor its low 64. */
static inline uint64_t mix(uint64_t a, uint64_t b)
{
    __uint128_t p = (__uint128_t)a * b;
    return (uint64_t)(p >> 64) ^ (uint64_t)p;
}

uint64_t dt_hash(uint64_t seed, const void *key, size_t n)
{
    return dt_hash_mixed(dt_mix_seed(seed), key, n);
}

uint64_t dt_mix_seed(uint64_t seed)
{
    return seed ^ mix(seed ^ P0, P1);
}

uint64_t dt_hash_mixed(uint64_t seed, const void *key, size_t n)
{
    const unsigned char *k = key;
    uint64_t a = 0, b = 0;
    __uint128_t p;

    if (n == 0) {
        /* a = b = 0 */
    } else if (n < 4) {
        a = (uint64_t)k[0] << 16 | (uint64_t)k[n >> 1] << 8 | k[n - 1];
    } else if (n <= 16) {
        size_t q = (n >> 3) << 2;
        a = (uint64_t)ldu4(k) << 32 | ldu4(k + q);
        b = (uint64_t)ldu4(k + n - 4) << 32 | ldu4(k + n - 4 - q);
    } else {
        const unsigned char *q = k;
        size_t i = n;
        while (i > 16) {
            seed = mix(ldu8(q) ^ P1, ldu8(q + 8) ^ seed);
            q += 16;
            i -= 16;
        }
        a = ldu8(k + n - 16);
        b = ldu8(k + n - 8);
    }
    a ^= P1;
    b ^= seed;
    p = (__uint128_t)a * b;
    return mix((uint64_t)p ^ P2 ^ (uint64_t)n, (uint64_t)(p >> 64) ^ P1);
}

