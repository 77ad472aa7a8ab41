/*
 * cache.h - the decoded-frame cache shared by all reader threads: an LRU
 * keyed by frame id, bounded in bytes, with single-flight loading (when
 * many threads ask for the same missing frame, one decodes it and the
 * others wait for that result).
 */
#ifndef CKPT_CACHE_H
#define CKPT_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include "ckptfs.h"

typedef struct ckpt_cache ckpt_cache;
typedef struct ckpt_cache_ref ckpt_cache_ref;

/* Fills dst with the n decoded bytes of the frame; 0 or negative errno. */
typedef int (*ckpt_cache_load_fn)(void *arg, void *dst, size_t n,
                                  ckpt_error *err);

/* capacity in bytes of decoded data kept; 0 keeps nothing once released. */
int ckpt_cache_create(ckpt_cache **out, size_t capacity, ckpt_error *err);
void ckpt_cache_destroy(ckpt_cache *c);   /* no references may be held */

/* Returns in *ref a pinned entry for `key` holding n bytes (at *data),
 * loading it with load(arg, ...) on a miss.  Concurrent callers for one key
 * share one load; if it fails, all of them get its error and the entry is
 * dropped so a later call retries.  Pinned entries are never evicted. */
int ckpt_cache_get(ckpt_cache *c, uint64_t key, size_t n,
                   ckpt_cache_load_fn load, void *arg, const void **data,
                   ckpt_cache_ref **ref, ckpt_error *err);
/* 1 if key is present (loaded or loading), without touching LRU order. */
int ckpt_cache_contains(ckpt_cache *c, uint64_t key);
void ckpt_cache_release(ckpt_cache *c, ckpt_cache_ref *ref);

typedef struct ckpt_cache_stats {
    uint64_t hits, misses, loads_failed, evictions;
    size_t bytes;        /* decoded bytes held now */
} ckpt_cache_stats;

void ckpt_cache_stats_get(ckpt_cache *c, ckpt_cache_stats *out);

#endif
