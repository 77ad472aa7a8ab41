/*
 * test_pool_cache.c - unit tests of src/common/pool.c (thread pool, task
 * groups) and src/read/cache.c (decoded-frame LRU cache with single-flight
 * loading), including concurrent stress with content checked byte by byte.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "read/cache.h"
#include "common/pool.h"
#include "unit_util.h"

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* ------------------------------------------------------------ pool */

typedef struct count_job {
    atomic_int *runs;        /* one counter per task */
    atomic_int bad_worker;
    int nthreads;
    ckpt_taskgroup tg;
} count_job;

typedef struct count_task {
    count_job *job;
    int index;
} count_task;

static void count_fn(void *arg, int worker)
{
    count_task *t = arg;
    atomic_fetch_add(&t->job->runs[t->index], 1);
    if (worker < 0 || worker >= t->job->nthreads)
        atomic_fetch_add(&t->job->bad_worker, 1);
    ckpt_tg_done(&t->job->tg);
}

START_TEST(test_pool_runs_each_once)
{
    enum { N = 20000 };
    ckpt_pool *p;
    ckpt_error err = {0};
    ck_assert_int_eq(ckpt_pool_create(&p, 4, &err), 0);
    ck_assert_int_eq(ckpt_pool_threads(p), 4);
    count_job job = {.nthreads = 4};
    job.runs = calloc(N, sizeof *job.runs);
    count_task *tasks = calloc(N, sizeof *tasks);
    ck_assert(job.runs && tasks);
    atomic_init(&job.bad_worker, 0);
    ckpt_tg_init(&job.tg);
    ckpt_tg_add(&job.tg, N);
    for (int i = 0; i < N; i++) {
        tasks[i].job = &job;
        tasks[i].index = i;
        ck_assert_int_eq(ckpt_pool_submit(p, count_fn, &tasks[i]), 0);
    }
    ckpt_tg_wait(&job.tg);
    for (int i = 0; i < N; i++)
        if (atomic_load(&job.runs[i]) != 1)
            ck_abort_msg("task %d ran %d times", i,
                         atomic_load(&job.runs[i]));
    ck_assert_int_eq(atomic_load(&job.bad_worker), 0);
    ckpt_pool_destroy(p);
    ckpt_tg_destroy(&job.tg);
    free(tasks);
    free(job.runs);
}
END_TEST

START_TEST(test_pool_default_threads)
{
    ckpt_pool *p;
    ck_assert_int_ge(ckpt_cpu_count(), 1);
    ck_assert_int_eq(ckpt_pool_create(&p, 0, NULL), 0);
    ck_assert_int_eq(ckpt_pool_threads(p), ckpt_cpu_count());
    ckpt_pool_destroy(p);
    ck_assert_int_eq(ckpt_pool_create(&p, -3, NULL), 0);
    ck_assert_int_eq(ckpt_pool_threads(p), ckpt_cpu_count());
    ckpt_pool_destroy(p);
    ck_assert_int_eq(ckpt_pool_submit(NULL, NULL, NULL), -EINVAL);
}
END_TEST

typedef struct order_job {
    pthread_mutex_t mu;
    int seen[101];
    int nseen;
} order_job;

typedef struct order_task {
    order_job *job;
    int id;
} order_task;

static void order_fn(void *arg, int worker)
{
    order_task *t = arg;
    if (t->id == 0)
        sleep_ms(50);        /* the others queue up behind this one */
    pthread_mutex_lock(&t->job->mu);
    t->job->seen[t->job->nseen++] = t->id;
    pthread_mutex_unlock(&t->job->mu);
}

START_TEST(test_pool_destroy_runs_queued)
{
    ckpt_pool *p;
    ck_assert_int_eq(ckpt_pool_create(&p, 1, NULL), 0);
    order_job job = {.nseen = 0};
    pthread_mutex_init(&job.mu, NULL);
    order_task tasks[101];
    for (int i = 0; i < 101; i++) {
        tasks[i].job = &job;
        tasks[i].id = i;
        ck_assert_int_eq(ckpt_pool_submit(p, order_fn, &tasks[i]), 0);
    }
    ckpt_pool_destroy(p);      /* 100 tasks are still queued here */
    ck_assert_int_eq(job.nseen, 101);
    for (int i = 0; i < 101; i++)   /* one worker: FIFO order */
        ck_assert_int_eq(job.seen[i], i);
    pthread_mutex_destroy(&job.mu);
}
END_TEST

/* ------------------------------------------------------------ cache */

/* The content of frame `key`: n bytes computed from the key. */
static unsigned char content_byte(uint64_t key, size_t i)
{
    uint64_t x = (key + 1) * 0x9E3779B97F4A7C15ULL + i * 0xD6E8FEB86659FD93ULL;
    x ^= x >> 29;
    return (unsigned char)(x ^ (x >> 17));
}

static size_t content_check(uint64_t key, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != content_byte(key, i))
            return i;
    return n;
}

typedef struct loader {
    uint64_t key;
    atomic_int calls;
    int sleep_ms;
    int fail;              /* fail with -EIO */
    int wait_hits;         /* wait until this many hits are counted */
    ckpt_cache *cache;
} loader;

static int load_fn(void *arg, void *dst, size_t n, ckpt_error *err)
{
    loader *l = arg;
    atomic_fetch_add(&l->calls, 1);
    if (l->wait_hits) {        /* let the other getters queue up */
        for (int i = 0; i < 5000; i++) {
            ckpt_cache_stats st;
            ckpt_cache_stats_get(l->cache, &st);
            if (st.hits >= (uint64_t)l->wait_hits)
                break;
            sleep_ms(1);
        }
    }
    if (l->sleep_ms)
        sleep_ms(l->sleep_ms);
    if (l->fail) {
        if (err) {
            err->code = -EIO;
            snprintf(err->msg, sizeof err->msg, "boom loading %llu",
                     (unsigned long long)l->key);
        }
        return -EIO;
    }
    unsigned char *p = dst;
    for (size_t i = 0; i < n; i++)
        p[i] = content_byte(l->key, i);
    return 0;
}

/* Gets key (n bytes) expecting success, checks the bytes. */
static ckpt_cache_ref *get_ok(ckpt_cache *c, uint64_t key, size_t n)
{
    loader l = {.key = key};
    atomic_init(&l.calls, 0);
    const void *data = NULL;
    ckpt_cache_ref *ref = NULL;
    ckpt_error err = {0};
    int rc = ckpt_cache_get(c, key, n, load_fn, &l, &data, &ref, &err);
    ck_assert_msg(rc == 0, "get %llu: %d %s", (unsigned long long)key, rc,
                  err.msg);
    ck_assert_ptr_nonnull(data);
    ck_assert_ptr_nonnull(ref);
    ck_assert_uint_eq(content_check(key, data, n), n);
    return ref;
}

static void get_release(ckpt_cache *c, uint64_t key, size_t n)
{
    ckpt_cache_release(c, get_ok(c, key, n));
}

static ckpt_cache_stats stats(ckpt_cache *c)
{
    ckpt_cache_stats st;
    ckpt_cache_stats_get(c, &st);
    return st;
}

START_TEST(test_cache_hit_miss)
{
    ckpt_cache *c;
    ck_assert_int_eq(ckpt_cache_create(&c, 1 << 20, NULL), 0);
    ck_assert_int_eq(ckpt_cache_contains(c, 5), 0);
    get_release(c, 5, 1000);
    ck_assert_int_eq(ckpt_cache_contains(c, 5), 1);
    get_release(c, 5, 1000);
    get_release(c, 6, 10);
    get_release(c, 5, 1000);
    ckpt_cache_stats st = stats(c);
    ck_assert_uint_eq(st.misses, 2);
    ck_assert_uint_eq(st.hits, 2);
    ck_assert_uint_eq(st.evictions, 0);
    ck_assert_uint_eq(st.loads_failed, 0);
    ck_assert_uint_eq(st.bytes, 1010);
    /* Asking for a cached key with another size is refused. */
    loader l = {.key = 5};
    const void *d;
    ckpt_cache_ref *r;
    ckpt_error err = {0};
    ck_assert_int_eq(ckpt_cache_get(c, 5, 999, load_fn, &l, &d, &r, &err),
                     -EINVAL);
    ck_assert_int_eq(err.code, -EINVAL);
    ckpt_cache_destroy(c);
}
END_TEST

START_TEST(test_cache_lru_order)
{
    ckpt_cache *c;
    ck_assert_int_eq(ckpt_cache_create(&c, 300, NULL), 0);
    get_release(c, 1, 100);
    get_release(c, 2, 100);
    get_release(c, 3, 100);
    get_release(c, 1, 100);          /* order now 2, 3, 1 */
    get_release(c, 4, 100);          /* evicts 2 */
    ck_assert_int_eq(ckpt_cache_contains(c, 2), 0);
    ck_assert_int_eq(ckpt_cache_contains(c, 1), 1);
    ck_assert_int_eq(ckpt_cache_contains(c, 3), 1);
    ck_assert_int_eq(ckpt_cache_contains(c, 4), 1);
    ck_assert_uint_eq(stats(c).evictions, 1);
    get_release(c, 5, 200);          /* evicts 3 then 1 */
    ck_assert_int_eq(ckpt_cache_contains(c, 3), 0);
    ck_assert_int_eq(ckpt_cache_contains(c, 1), 0);
    ck_assert_int_eq(ckpt_cache_contains(c, 4), 1);
    ck_assert_int_eq(ckpt_cache_contains(c, 5), 1);
    ckpt_cache_stats st = stats(c);
    ck_assert_uint_eq(st.evictions, 3);
    ck_assert_uint_le(st.bytes, 300);
    ck_assert_uint_eq(st.bytes, 300);
    /* A frame bigger than the whole capacity is served, then dropped. */
    get_release(c, 9, 1000);
    ck_assert_int_eq(ckpt_cache_contains(c, 9), 0);
    ck_assert_uint_le(stats(c).bytes, 300);
    ckpt_cache_destroy(c);
}
END_TEST

START_TEST(test_cache_pinned)
{
    ckpt_cache *c;
    ck_assert_int_eq(ckpt_cache_create(&c, 100, NULL), 0);
    ckpt_cache_ref *r1 = get_ok(c, 1, 100);
    ckpt_cache_ref *r2 = get_ok(c, 2, 100);   /* over capacity, both pinned */
    ck_assert_int_eq(ckpt_cache_contains(c, 1), 1);
    ck_assert_int_eq(ckpt_cache_contains(c, 2), 1);
    ck_assert_uint_eq(stats(c).bytes, 200);
    ckpt_cache_ref *r1b = get_ok(c, 1, 100);  /* second pin on 1 */
    ckpt_cache_release(c, r1);
    ckpt_cache_release(c, r2);                /* 2 unpinned: evicted */
    ck_assert_int_eq(ckpt_cache_contains(c, 2), 0);
    ck_assert_int_eq(ckpt_cache_contains(c, 1), 1);
    get_release(c, 3, 50);                    /* 1 still pinned */
    ck_assert_int_eq(ckpt_cache_contains(c, 1), 1);
    ck_assert_int_eq(ckpt_cache_contains(c, 3), 0);
    ckpt_cache_release(c, r1b);               /* fits: kept */
    ck_assert_int_eq(ckpt_cache_contains(c, 1), 1);
    ck_assert_uint_eq(stats(c).bytes, 100);
    ckpt_cache_destroy(c);
}
END_TEST

START_TEST(test_cache_capacity_zero)
{
    ckpt_cache *c;
    ck_assert_int_eq(ckpt_cache_create(&c, 0, NULL), 0);
    ckpt_cache_ref *r = get_ok(c, 7, 64);
    ck_assert_int_eq(ckpt_cache_contains(c, 7), 1);
    ckpt_cache_ref *r2 = get_ok(c, 7, 64);    /* shares the pinned entry */
    ck_assert_uint_eq(stats(c).hits, 1);
    ckpt_cache_release(c, r);
    ck_assert_int_eq(ckpt_cache_contains(c, 7), 1);
    ckpt_cache_release(c, r2);
    ck_assert_int_eq(ckpt_cache_contains(c, 7), 0);
    get_release(c, 8, 0);                     /* even empty frames */
    ck_assert_int_eq(ckpt_cache_contains(c, 8), 0);
    ck_assert_uint_eq(stats(c).bytes, 0);
    ckpt_cache_destroy(c);
}
END_TEST

/* Several threads getting one key at once. */
typedef struct flight {
    ckpt_cache *cache;
    loader *l;
    uint64_t key;
    size_t n;
    pthread_barrier_t *start, *done;
    int rc;
    ckpt_error err;
    const void *data;
} flight;

static void *flight_main(void *arg)
{
    flight *f = arg;
    ckpt_cache_ref *ref = NULL;
    pthread_barrier_wait(f->start);
    f->rc = ckpt_cache_get(f->cache, f->key, f->n, load_fn, f->l, &f->data,
                           &ref, &f->err);
    pthread_barrier_wait(f->done);     /* hold the pin until all are in */
    if (f->rc == 0)
        ckpt_cache_release(f->cache, ref);
    return NULL;
}

/* Runs `nt` threads getting key at once through loader l. */
static void run_flight(ckpt_cache *c, loader *l, flight *fs, int nt)
{
    pthread_barrier_t start, done;
    pthread_t th[16];
    ck_assert_int_le(nt, 16);
    pthread_barrier_init(&start, NULL, (unsigned)nt);
    pthread_barrier_init(&done, NULL, (unsigned)nt);
    for (int i = 0; i < nt; i++) {
        memset(&fs[i], 0, sizeof fs[i]);
        fs[i].cache = c;
        fs[i].l = l;
        fs[i].key = l->key;
        fs[i].n = 4096;
        fs[i].start = &start;
        fs[i].done = &done;
        ck_assert_int_eq(pthread_create(&th[i], NULL, flight_main, &fs[i]),
                         0);
    }
    for (int i = 0; i < nt; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&done);
}

START_TEST(test_cache_single_flight)
{
    enum { NT = 8 };
    ckpt_cache *c;
    ck_assert_int_eq(ckpt_cache_create(&c, 1 << 20, NULL), 0);
    loader l = {.key = 42, .sleep_ms = 50, .wait_hits = NT - 1, .cache = c};
    atomic_init(&l.calls, 0);
    flight fs[NT];
    run_flight(c, &l, fs, NT);
    ck_assert_int_eq(atomic_load(&l.calls), 1);
    for (int i = 0; i < NT; i++) {
        ck_assert_msg(fs[i].rc == 0, "thread %d: %s", i, fs[i].err.msg);
        ck_assert_ptr_eq(fs[i].data, fs[0].data);
        ck_assert_uint_eq(content_check(42, fs[i].data, 4096), 4096);
    }
    ckpt_cache_stats st = stats(c);
    ck_assert_uint_eq(st.misses, 1);
    ck_assert_uint_eq(st.hits, NT - 1);
    ck_assert_uint_eq(st.loads_failed, 0);
    ckpt_cache_destroy(c);
}
END_TEST

START_TEST(test_cache_failed_load)
{
    enum { NT = 8 };
    ckpt_cache *c;
    ck_assert_int_eq(ckpt_cache_create(&c, 1 << 20, NULL), 0);
    loader l = {.key = 43, .sleep_ms = 50, .fail = 1, .wait_hits = NT - 1,
                .cache = c};
    atomic_init(&l.calls, 0);
    flight fs[NT];
    run_flight(c, &l, fs, NT);
    ck_assert_int_eq(atomic_load(&l.calls), 1);
    for (int i = 0; i < NT; i++) {
        ck_assert_int_eq(fs[i].rc, -EIO);
        ck_assert_int_eq(fs[i].err.code, -EIO);
        ck_assert_str_eq(fs[i].err.msg, "boom loading 43");
    }
    ck_assert_int_eq(ckpt_cache_contains(c, 43), 0);
    ckpt_cache_stats st = stats(c);
    ck_assert_uint_eq(st.loads_failed, 1);
    ck_assert_uint_eq(st.bytes, 0);
    /* A later get retries the load, and may succeed. */
    l.fail = 0;
    l.wait_hits = 0;
    l.sleep_ms = 0;
    const void *d;
    ckpt_cache_ref *r;
    ck_assert_int_eq(ckpt_cache_get(c, 43, 4096, load_fn, &l, &d, &r, NULL),
                     0);
    ck_assert_int_eq(atomic_load(&l.calls), 2);
    ck_assert_uint_eq(content_check(43, d, 4096), 4096);
    ckpt_cache_release(c, r);
    ckpt_cache_destroy(c);
}
END_TEST

static int silent_fail_load(void *arg, void *dst, size_t n, ckpt_error *err)
{
    return *(int *)arg;      /* an error code, and no message */
}

START_TEST(test_cache_load_error_without_message)
{
    ckpt_cache *c;
    ck_assert_int_eq(ckpt_cache_create(&c, 1 << 20, NULL), 0);
    const void *d;
    ckpt_cache_ref *r;
    ckpt_error err = {0};
    int code = -EACCES;
    ck_assert_int_eq(ckpt_cache_get(c, 44, 16, silent_fail_load, &code, &d,
                                    &r, &err), -EACCES);
    ck_assert_int_eq(err.code, -EACCES);
    ck_assert_msg(strstr(err.msg, "0x2c") != NULL, "%s", err.msg);
    code = 1;                /* not a negative errno: reported as -EIO */
    ck_assert_int_eq(ckpt_cache_get(c, 44, 16, silent_fail_load, &code, &d,
                                    &r, &err), -EIO);
    ck_assert_int_eq(err.code, -EIO);
    ck_assert_int_eq(ckpt_cache_contains(c, 44), 0);
    ck_assert_uint_eq(stats(c).loads_failed, 2);
    ckpt_cache_destroy(c);
}
END_TEST

/* Stress: many threads, random keys, every byte checked. */
typedef struct stress_arg {
    ckpt_cache *cache;
    uint64_t seed;
    atomic_int *loads;
    int bad;             /* wrong bytes or unexpected errors seen */
    int failures;        /* injected load failures seen */
} stress_arg;

typedef struct stress_loader {
    uint64_t key;
    atomic_int *loads;
} stress_loader;

static int stress_load(void *arg, void *dst, size_t n, ckpt_error *err)
{
    stress_loader *l = arg;
    int k = atomic_fetch_add(l->loads, 1);
    if (k % 29 == 28) {
        snprintf(err->msg, sizeof err->msg, "injected failure");
        err->code = -EIO;
        return -EIO;
    }
    unsigned char *p = dst;
    for (size_t i = 0; i < n; i++)
        p[i] = content_byte(l->key, i);
    return 0;
}

static size_t stress_size(uint64_t key)
{
    return 1 + (size_t)(key * 2654435761u % 3000);
}

static uint64_t xs(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Gets one key, checks its bytes; keeps the pin in *held if asked. */
static void stress_one(stress_arg *a, uint64_t key, ckpt_cache_ref **held,
                       const void **held_data, uint64_t *held_key)
{
    stress_loader l = {.key = key, .loads = a->loads};
    const void *d = NULL;
    ckpt_cache_ref *r = NULL;
    ckpt_error err = {0};
    size_t n = stress_size(key);
    int rc = ckpt_cache_get(a->cache, key, n, stress_load, &l, &d, &r, &err);
    if (rc == -EIO && strcmp(err.msg, "injected failure") == 0) {
        a->failures++;
        return;
    }
    if (rc != 0 || content_check(key, d, n) != n) {
        a->bad++;
        if (rc == 0)
            ckpt_cache_release(a->cache, r);
        return;
    }
    if (!*held) {
        *held = r;
        *held_data = d;
        *held_key = key;
    } else {
        ckpt_cache_release(a->cache, r);
    }
}

static void *stress_main(void *arg)
{
    stress_arg *a = arg;
    uint64_t s = a->seed;
    ckpt_cache_ref *held = NULL;
    const void *held_data = NULL;
    uint64_t held_key = 0;
    for (int i = 0; i < 4000; i++) {
        uint64_t key = xs(&s) % 200;
        stress_one(a, key, &held, &held_data, &held_key);
        if (held && (xs(&s) % 8 == 0)) {   /* pinned data stays intact */
            size_t n = stress_size(held_key);
            if (content_check(held_key, held_data, n) != n)
                a->bad++;
            ckpt_cache_release(a->cache, held);
            held = NULL;
        }
    }
    if (held)
        ckpt_cache_release(a->cache, held);
    return NULL;
}

START_TEST(test_cache_stress)
{
    enum { NT = 8 };
    const size_t capacity = 64 * 1024;
    ckpt_cache *c;
    ck_assert_int_eq(ckpt_cache_create(&c, capacity, NULL), 0);
    atomic_int loads;
    atomic_init(&loads, 0);
    stress_arg args[NT];
    pthread_t th[NT];
    for (int i = 0; i < NT; i++) {
        args[i] = (stress_arg){.cache = c, .seed = 0x1234567ULL * (i + 1),
                               .loads = &loads};
        ck_assert_int_eq(pthread_create(&th[i], NULL, stress_main, &args[i]),
                         0);
    }
    int failures = 0;
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(args[i].bad, 0);
        failures += args[i].failures;
    }
    ckpt_cache_stats st = stats(c);
    ck_assert_uint_eq(st.hits + st.misses, (uint64_t)NT * 4000);
    ck_assert_uint_eq(st.misses, (uint64_t)atomic_load(&loads));
    ck_assert_uint_gt(st.evictions, 0);
    ck_assert_uint_gt(st.loads_failed, 0);
    ck_assert_uint_ge((uint64_t)failures, st.loads_failed);
    ck_assert_uint_le(st.bytes, capacity);   /* nothing pinned any more */
    ckpt_cache_destroy(c);
}
END_TEST

static Suite *pool_cache_suite(void)
{
    Suite *s = suite_create("pool_cache");
    TCase *tp = tcase_create("pool");
    tcase_set_timeout(tp, 60);
    tcase_add_test(tp, test_pool_runs_each_once);
    tcase_add_test(tp, test_pool_default_threads);
    tcase_add_test(tp, test_pool_destroy_runs_queued);
    suite_add_tcase(s, tp);
    TCase *tc = tcase_create("cache");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cache_hit_miss);
    tcase_add_test(tc, test_cache_lru_order);
    tcase_add_test(tc, test_cache_pinned);
    tcase_add_test(tc, test_cache_capacity_zero);
    tcase_add_test(tc, test_cache_single_flight);
    tcase_add_test(tc, test_cache_failed_load);
    tcase_add_test(tc, test_cache_load_error_without_message);
    tcase_add_test(tc, test_cache_stress);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(pool_cache_suite());
}
