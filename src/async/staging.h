/*
 * staging.h - staging memory for asynchronous saves: a pool of equal-sized
 * slabs kept across saves (pinned with cudaHostAlloc when a CUDA device is
 * usable) with a cap on their total size, the copy engine that fills them
 * (host memory: several copy threads; CUDA device memory: cudaMemcpyAsync
 * on the pool's streams), and the staged byte stream one save reads back in
 * the background.
 *
 * A save's pieces are laid out one after another in a stream of slabs.  The
 * producer (the caller of the save) appends pieces; a slab becomes readable
 * once it is full (or the stream is closed) and its copies have landed, and,
 * when host copies (which take the CPUs) are involved, once the producer has
 * closed the stream or has to wait for a slab.  The
 * consumer (the background writer) reads the stream in order and gives each
 * slab back to the pool once it is past it, so a state larger than the cap
 * is staged in slices as the background frees space.
 */
#ifndef CKPT_STAGING_H
#define CKPT_STAGING_H

#include <stddef.h>
#include <stdint.h>
#include "ckptfs.h"

typedef struct ckpt_stage ckpt_stage;     /* the pool */
typedef struct ckpt_staged ckpt_staged;   /* one save's staged stream */

enum { CKPT_MEM_HOST = 0, CKPT_MEM_DEVICE = 1 };

/* cap: most bytes of slabs at once (0 = no cap; a cap below 64 KiB is
 * raised to 64 KiB: one slab of the smallest size); slab: bytes per slab
 * (0 = default, 16 MiB, or less for a small cap so that at least four
 * slabs fit, but never below 64 KiB); copy_threads: host copy threads
 * (<= 0: up to 4, one per CPU). */
int ckpt_stage_create(ckpt_stage **out, size_t cap, size_t slab,
                      int copy_threads, ckpt_error *err);
/* Frees the pool; no staged stream may still use it. */
void ckpt_stage_destroy(ckpt_stage *st);
/* 1 when a CUDA device is usable (slabs are pinned, device pointers are
 * recognised). */
int ckpt_stage_cuda(const ckpt_stage *st);
size_t ckpt_stage_slab_bytes(const ckpt_stage *st);
/* Grows the pool until it holds `bytes` of slabs (at most its cap), so
 * that staging that much takes no allocation: 0, or -ENOMEM with a
 * message (the slabs made so far stay). */
int ckpt_stage_reserve(ckpt_stage *st, size_t bytes, ckpt_error *err);

/* Where the n bytes at p live: CKPT_MEM_HOST or CKPT_MEM_DEVICE, or a
 * negative error (-EFAULT) with a message naming `what` when they are
 * neither readable host memory nor, where CUDA is usable, device memory.
 * `writable` asks that host memory be writable too (a load target).  The
 * host probe looks at the first and the last byte only (a device
 * allocation is unreadable from the host as a whole).  st may be NULL. */
int ckpt_mem_kind(const ckpt_stage *st, const void *p, size_t n,
                  int writable, const char *what, ckpt_error *err);

/* The XXH3-64 of the n bytes at p, which may be host memory or, where
 * CUDA is usable, device memory (copied through a bounce buffer); `what`
 * names them in errors (as ckpt_mem_kind).  st may be NULL. */
int ckpt_mem_hash(const ckpt_stage *st, const void *p, size_t n,
                  uint64_t *out, const char *what, ckpt_error *err);

int ckpt_staged_new(ckpt_staged **out, ckpt_stage *st, ckpt_error *err);
/* Producer: appends n bytes at src (of kind CKPT_MEM_HOST/DEVICE) to the
 * stream.  Blocks while the pool is at its cap until the consumer gives
 * slabs back.  The copies may still be in flight on return. */
int ckpt_staged_append(ckpt_staged *s, const void *src, size_t n, int kind,
                       ckpt_error *err);
/* Producer: no more bytes; waits until every copy has landed (after this
 * the caller's buffers are no longer read).  Returns the first copy error. */
int ckpt_staged_close(ckpt_staged *s, ckpt_error *err);
/* Consumer: the next at most `want` bytes of the stream, contiguous, in
 * *p and *n (*n > 0), waiting until they are staged.  The slab they lie in
 * stays valid until the next call.  -EIO (with the copy error) when a copy
 * failed; -ENODATA past the end of the stream. */
int ckpt_staged_read(ckpt_staged *s, size_t want, const void **p, size_t *n,
                     ckpt_error *err);
/* Producer: marks the stream failed with e (a staging failure the caller
 * saw), so that the consumer fails instead of reading a short stream. */
void ckpt_staged_fail(ckpt_staged *s, const ckpt_error *e);
/* Consumer: drops what is left (after a failure, or after the last read),
 * giving every slab back as soon as its copies have landed, so that a
 * producer waiting for slabs moves on; returns once the producer has
 * closed the stream. */
void ckpt_staged_drain(ckpt_staged *s);
/* Frees the stream, giving every slab it still holds back to the pool.
 * Both the producer and the consumer must be done with it. */
void ckpt_staged_free(ckpt_staged *s);

#endif
