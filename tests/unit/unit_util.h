/*
 * unit_util.h - helpers every unit test used to carry its own copy of:
 * deterministic generators (tests carry their state: the same seed gives
 * the same data), malloc that fails the test instead of returning NULL,
 * a temporary directory made and removed per test, and the main() that
 * runs a suite.  Header-only
 * (static inline): include it after <check.h>.
 */
#ifndef CKPT_UNIT_UTIL_H
#define CKPT_UNIT_UTIL_H

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "format/model.h"

/* xorshift64 (13, 7, 17): the state must not be 0. */
typedef struct rng { uint64_t s; } rng;

static inline uint64_t rnd(rng *r)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}

/* A number in [lo, hi]. */
static inline int64_t rnd_in(rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rnd(r) % (uint64_t)(hi - lo + 1));
}

/* xorshift64*, on a bare state (not 0): for byte data whose top bits
 * should look random. */
static inline uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* splitmix64 seeded from CKPT_TEST_SEED, else the test's default seed,
 * printed so that a failing run can be replayed. */
typedef struct srng { uint64_t s; } srng;

static inline uint64_t srng_next(srng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static inline int64_t srng_range(srng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(srng_next(r) % (uint64_t)(hi - lo + 1));
}

static inline srng srng_seeded(const char *test, uint64_t default_seed)
{
    const char *env = getenv("CKPT_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : default_seed;
    printf("%s: seed %llu (set CKPT_TEST_SEED to change)\n", test,
           (unsigned long long)seed);
    fflush(stdout);
    return (srng){ seed };
}

/* malloc that fails the test when memory runs out (n = 0 allowed). */
static inline void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* A new directory /tmp/ckpt-<tag>-XXXXXX (malloc'd path). */
static inline char *make_tmpdir_tagged(const char *tag)
{
    char buf[256];
    snprintf(buf, sizeof buf, "/tmp/ckpt-%s-XXXXXX", tag);
    char *d = strdup(buf);
    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_nonnull(mkdtemp(d));
    return d;
}

/* Removes the directory and everything in it, and frees the path. */
static inline void remove_tmpdir(char *d)
{
    ck_assert_int_eq(ckpt_remove_tree(d, NULL), 0);
    free(d);
}

/* Two frames equal field by field (padding is not compared). */
static inline void frame_rec_eq(const ckpt_frame_rec *a,
                                const ckpt_frame_rec *b)
{
    ck_assert_uint_eq(a->file_offset, b->file_offset);
    ck_assert_uint_eq(a->stored_size, b->stored_size);
    ck_assert_uint_eq(a->raw_offset, b->raw_offset);
    ck_assert_uint_eq(a->raw_size, b->raw_size);
    ck_assert_uint_eq(a->checksum, b->checksum);
    ck_assert_int_eq(a->codec, b->codec);
    ck_assert_int_eq(a->base, b->base);
}

/* Runs the suite; the exit status of a unit test program. */
static inline int unit_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
