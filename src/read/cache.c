/*
 * cache.c - the decoded-frame cache shared by reader threads: an LRU of
 * decoded frames bounded in bytes, with single-flight loading (see cache.h).
 *
 * One mutex guards the table, the LRU list and the counters; it is never
 * held while a frame loads or while memory is freed.  An entry is LOADING
 * (its loader fills the buffer, others wait on the entry's condvar), READY,
 * or FAILED (already out of the table; kept only until its waiters have
 * copied the error).  `refs` counts every holder: callers holding a
 * reference, the loader, and waiters.  Only READY entries with no holders
 * sit on the LRU list, so eviction never skips pinned ones.
 *
 * Counters: a get that finds no entry is a miss and starts a load; a get
 * that finds one (ready, or loading and waited for) is a hit.  `bytes`
 * counts the buffers of entries in the table, loading ones included, and
 * is kept at or under the capacity whenever unpinned entries can be evicted.
 */
#include "read/cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

#define CACHE_MIN_BUCKETS 64

enum { ENT_LOADING, ENT_READY, ENT_FAILED };

typedef struct cache_entry {
    uint64_t key;
    size_t n;
    void *data;
    int state;
    long refs;
    struct cache_entry *hnext;          /* hash chain; free list once gone */
    struct cache_entry *prev, *next;    /* LRU list (oldest first) */
    pthread_cond_t cv;                  /* broadcast when LOADING ends */
    int fail_code;                      /* FAILED: the load's error */
    char *fail_msg;
} cache_entry;

struct ckpt_cache {
    pthread_mutex_t mu;
    size_t capacity;
    cache_entry **buckets;
    size_t nbuckets;                    /* a power of two */
    size_t count;
    cache_entry *lru_old, *lru_new;
    ckpt_cache_stats st;
};

/* ------------------------------------------------------------ hash table */

static size_t hash_key(uint64_t k)
{
    /* splitmix64 finaliser: frame ids are often sequential. */
    k ^= k >> 30;
    k *= 0xbf58476d1ce4e5b9ULL;
    k ^= k >> 27;
    k *= 0x94d049bb133111ebULL;
    k ^= k >> 31;
    return (size_t)k;
}

static cache_entry *table_find(const ckpt_cache *c, uint64_t key)
{
    cache_entry *e = c->buckets[hash_key(key) & (c->nbuckets - 1)];
    while (e && e->key != key)
        e = e->hnext;
    return e;
}

/* Doubles the table.  Failing to allocate only leaves chains longer. */
static void table_grow(ckpt_cache *c)
{
    size_t nb = c->nbuckets * 2;
    cache_entry **b = calloc(nb, sizeof *b);
    if (!b)
        return;
    for (size_t i = 0; i < c->nbuckets; i++) {
        cache_entry *e = c->buckets[i];
        while (e) {
            cache_entry *next = e->hnext;
            size_t h = hash_key(e->key) & (nb - 1);
            e->hnext = b[h];
            b[h] = e;
            e = next;
        }
    }
    free(c->buckets);
    c->buckets = b;
    c->nbuckets = nb;
}

static void table_insert(ckpt_cache *c, cache_entry *e)
{
    if (c->count >= c->nbuckets)
        table_grow(c);
    size_t h = hash_key(e->key) & (c->nbuckets - 1);
    e->hnext = c->buckets[h];
    c->buckets[h] = e;
    c->count++;
}

static void table_remove(ckpt_cache *c, cache_entry *e)
{
    cache_entry **pp = &c->buckets[hash_key(e->key) & (c->nbuckets - 1)];
    while (*pp && *pp != e)
        pp = &(*pp)->hnext;
    if (*pp) {
        *pp = e->hnext;
        e->hnext = NULL;
        c->count--;
    }
}

/* ------------------------------------------------------------ LRU list */

static void lru_unlink(ckpt_cache *c, cache_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->lru_old = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->lru_new = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push_new(ckpt_cache *c, cache_entry *e)
{
    e->next = NULL;
    e->prev = c->lru_new;
    if (c->lru_new)
        c->lru_new->next = e;
    else
        c->lru_old = e;
    c->lru_new = e;
}

/* ------------------------------------------------------------ entries */

static cache_entry *entry_new(uint64_t key, size_t n)
{
    cache_entry *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    if (pthread_cond_init(&e->cv, NULL) != 0) {
        free(e);
        return NULL;
    }
    e->key = key;
    e->n = n;
    e->state = ENT_LOADING;
    return e;
}

static void entry_free(cache_entry *e)
{
    pthread_cond_destroy(&e->cv);
    free(e->data);
    free(e->fail_msg);
    free(e);
}

/* Frees a list of entries linked through hnext (called unlocked). */
static void free_list(cache_entry *e)
{
    while (e) {
        cache_entry *next = e->hnext;
        entry_free(e);
        e = next;
    }
}

/* Evicts unpinned entries, oldest first, until `bytes` is at most `limit`
 * (all of them when the capacity is 0); returns them for freeing. */
static cache_entry *evict_to(ckpt_cache *c, size_t limit)
{
    cache_entry *gone = NULL;
    while (c->lru_old && (c->st.bytes > limit || c->capacity == 0)) {
        cache_entry *e = c->lru_old;
        lru_unlink(c, e);
        table_remove(c, e);
        c->st.bytes -= e->n;
        c->st.evictions++;
        e->hnext = gone;
        gone = e;
    }
    return gone;
}

/* Drops one holder of e (lock held); returns e if it must now be freed. */
static cache_entry *unpin(ckpt_cache *c, cache_entry *e, cache_entry **gone)
{
    if (--e->refs > 0)
        return NULL;
    if (e->state == ENT_FAILED)
        return e;
    lru_push_new(c, e);
    *gone = evict_to(c, c->capacity);
    return NULL;
}

/* ------------------------------------------------------------ public */

int ckpt_cache_create(ckpt_cache **out, size_t capacity, ckpt_error *err)
{
    if (!out)
        return ckpt_err(err, -EINVAL, "cache: no output pointer");
    ckpt_cache *c = calloc(1, sizeof *c);
    cache_entry **b = calloc(CACHE_MIN_BUCKETS, sizeof *b);
    if (!c || !b) {
        free(c);
        free(b);
        return ckpt_err(err, -ENOMEM, "out of memory creating the frame "
                        "cache");
    }
    int rc = pthread_mutex_init(&c->mu, NULL);
    if (rc) {
        free(c);
        free(b);
        return ckpt_err_sys(err, -rc, "cannot create the frame cache");
    }
    c->capacity = capacity;
    c->buckets = b;
    c->nbuckets = CACHE_MIN_BUCKETS;
    *out = c;
    return 0;
}

void ckpt_cache_destroy(ckpt_cache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nbuckets; i++)
        free_list(c->buckets[i]);
    free(c->buckets);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Waits for a LOADING entry that this thread already pinned (lock held).
 * On failure, drops the pin and returns the load's error; *to_free is set
 * if this was the last holder. */
static int wait_loaded(ckpt_cache *c, cache_entry *e, cache_entry **to_free,
                       ckpt_error *err)
{
    while (e->state == ENT_LOADING)
        pthread_cond_wait(&e->cv, &c->mu);
    if (e->state == ENT_READY)
        return 0;
    int code = e->fail_code;
    if (e->fail_msg)
        ckpt_err(err, code, "%s", e->fail_msg);
    else
        ckpt_err_sys(err, code, "loading frame %#llx failed",
                     (unsigned long long)e->key);
    cache_entry *gone = NULL;
    *to_free = unpin(c, e, &gone);
    return code;
}

/* Serves a get from an entry in the table (lock held, released here). */
static int get_hit(ckpt_cache *c, cache_entry *e, const void **data,
                   ckpt_cache_ref **ref, ckpt_error *err)
{
    c->st.hits++;
    if (e->refs == 0)
        lru_unlink(c, e);       /* READY and unpinned: on the LRU list */
    e->refs++;
    cache_entry *to_free = NULL;
    int rc = wait_loaded(c, e, &to_free, err);
    pthread_mutex_unlock(&c->mu);
    if (to_free)
        entry_free(to_free);
    if (rc)
        return rc;
    *data = e->data;
    *ref = (ckpt_cache_ref *)e;
    return 0;
}

/* Runs load() into a fresh buffer; no lock held.  Returns 0 or the
 * error, with its message in lerr. */
static int run_load(uint64_t key, size_t n, ckpt_cache_load_fn load,
                    void *arg, void **buf, ckpt_error *lerr)
{
    ckpt_err_clear(lerr);
    *buf = malloc(n ? n : 1);
    if (!*buf)
        return ckpt_err(lerr, -ENOMEM, "out of memory for a %zu-byte decoded "
                        "frame", n);
    int rc = load(arg, *buf, n, lerr);
    if (rc == 0)
        return 0;
    if (rc > 0)
        rc = -EIO;
    if (lerr->msg[0] == '\0')
        ckpt_err_sys(lerr, rc, "loading frame %#llx failed",
                     (unsigned long long)key);
    lerr->code = rc;
    free(*buf);
    *buf = NULL;
    return rc;
}

/* Marks a LOADING entry FAILED (lock held): out of the table, waiters
 * woken with the error.  Returns e if it must now be freed. */
static cache_entry *mark_failed(ckpt_cache *c, cache_entry *e,
                                const ckpt_error *lerr)
{
    e->state = ENT_FAILED;
    e->fail_code = lerr->code;
    e->fail_msg = strdup(lerr->msg);    /* NULL: waiters get a generic one */
    table_remove(c, e);
    c->st.bytes -= e->n;
    c->st.loads_failed++;
    pthread_cond_broadcast(&e->cv);
    cache_entry *gone = NULL;
    return unpin(c, e, &gone);
}

/* Serves a miss (lock held, released here): inserts a LOADING entry,
 * loads it unlocked, publishes the result. */
static int get_miss(ckpt_cache *c, uint64_t key, size_t n,
                    ckpt_cache_load_fn load, void *arg, const void **data,
                    ckpt_cache_ref **ref, ckpt_error *err)
{
    cache_entry *e = entry_new(key, n);
    if (!e) {
        pthread_mutex_unlock(&c->mu);
        return ckpt_err(err, -ENOMEM, "out of memory caching frame %#llx",
                        (unsigned long long)key);
    }
    c->st.misses++;
    cache_entry *gone = evict_to(c, c->capacity > n ? c->capacity - n : 0);
    e->refs = 1;
    table_insert(c, e);
    c->st.bytes += n;
    pthread_mutex_unlock(&c->mu);
    free_list(gone);

    ckpt_error lerr;
    void *buf;
    int rc = run_load(key, n, load, arg, &buf, &lerr);

    pthread_mutex_lock(&c->mu);
    cache_entry *to_free = NULL;
    if (rc == 0) {
        e->data = buf;
        e->state = ENT_READY;
        pthread_cond_broadcast(&e->cv);
    } else {
        to_free = mark_failed(c, e, &lerr);
    }
    pthread_mutex_unlock(&c->mu);
    if (to_free)
        entry_free(to_free);
    if (rc) {
        if (err)
            *err = lerr;
        return rc;
    }
    *data = buf;
    *ref = (ckpt_cache_ref *)e;
    return 0;
}

int ckpt_cache_get(ckpt_cache *c, uint64_t key, size_t n,
                   ckpt_cache_load_fn load, void *arg, const void **data,
                   ckpt_cache_ref **ref, ckpt_error *err)
{
    if (!c || !load || !data || !ref)
        return ckpt_err(err, -EINVAL, "cache get: missing argument");
    pthread_mutex_lock(&c->mu);
    cache_entry *e = table_find(c, key);
    if (e && e->n != n) {
        pthread_mutex_unlock(&c->mu);
        return ckpt_err(err, -EINVAL, "cache: frame %#llx is cached with %zu "
                        "bytes but %zu were asked for",
                        (unsigned long long)key, e->n, n);
    }
    if (e)
        return get_hit(c, e, data, ref, err);
    return get_miss(c, key, n, load, arg, data, ref, err);
}

int ckpt_cache_contains(ckpt_cache *c, uint64_t key)
{
    if (!c)
        return 0;
    pthread_mutex_lock(&c->mu);
    int found = table_find(c, key) != NULL;
    pthread_mutex_unlock(&c->mu);
    return found;
}

void ckpt_cache_release(ckpt_cache *c, ckpt_cache_ref *ref)
{
    if (!c || !ref)
        return;
    cache_entry *e = (cache_entry *)ref, *gone = NULL;
    pthread_mutex_lock(&c->mu);
    cache_entry *to_free = unpin(c, e, &gone);
    pthread_mutex_unlock(&c->mu);
    free_list(gone);
    if (to_free)
        entry_free(to_free);
}

void ckpt_cache_stats_get(ckpt_cache *c, ckpt_cache_stats *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    pthread_mutex_unlock(&c->mu);
}
