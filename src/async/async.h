/*
 * async.h - the library-internal side of asynchronous saves (async.c),
 * shared by the single-process API (ckpt_save_async) and the collective
 * one (mpi.c): one background job writes one writer's pieces from staged
 * memory and, for a single-process save, commits.  The synchronous
 * ckpt_save_sync (save.c) shares its checks and its cleanup.
 */
#ifndef CKPT_ASYNC_H
#define CKPT_ASYNC_H

#include <stdint.h>
#include "ckptfs.h"

typedef struct ckpt_async_desc {
    const char *dir;
    const char *writer;          /* writer name, e.g. "rank3" */
    int commit;                  /* commit when written (single process) */
    int made_dir;                /* dir did not exist: remove it on failure */
    const ckpt_piece *pieces;
    size_t n;
    const uint8_t *keep;         /* per piece: written; NULL = all */
    const ckpt_write_opts *write;
    const char *const *meta_keys;
    const char *const *meta_values;
    size_t nmeta;
} ckpt_async_desc;

/* The caller's save options (NULL: the defaults) read into *dst by their
 * size fields, the outer struct's and its write options' (optsize.h). */
int ckpt_save_opts_take(ckpt_save_opts *dst, const ckpt_save_opts *src,
                        ckpt_error *err);
/* Is dir free to save into (-EEXIST: committed, -EBUSY: an unfinished
 * save)?  *made tells whether it does not exist yet. */
int ckpt_async_check_target(const char *dir, int *made, ckpt_error *err);
/* Checks that every kept piece's data is readable host memory or, where
 * CUDA is usable, device memory (errors name the tensor). */
int ckpt_async_check_data(ckpt_saver *s, const ckpt_piece *pieces, size_t n,
                          const uint8_t *keep, ckpt_error *err);
/* The XXH3-64 of the n bytes at p (host memory, or device memory where
 * the saver can use CUDA; s may be NULL: host memory only). */
int ckpt_async_hash(ckpt_saver *s, const void *p, size_t n, uint64_t *out,
                    const char *what, ckpt_error *err);
/* Stages the pieces and queues the job; see ckpt_save_async.  The pieces
 * must already be checked (ckpt_plan_check_piece, ckpt_async_check_data). */
int ckpt_async_start(ckpt_saver *s, const ckpt_async_desc *d,
                     ckpt_save **out, ckpt_error *err);
/* The checks a writer makes of a piece on its own (dtype, fqn, shape,
 * bounds), and its byte count. */
int ckpt_async_check_piece(const ckpt_piece *p, size_t i, uint64_t *nbytes,
                           ckpt_error *err);
/* Removes what a failed single-process save into dir made: the files of
 * writer `writer` when `owned`, the lock, .pending/ and data/ when empty,
 * and dir itself when `made_dir`.  Leaves a committed checkpoint alone. */
void ckpt_async_cleanup(const char *dir, const char *writer, int owned,
                        int made_dir);
/* Waits for the job and frees it; *owned tells whether the job created
 * the writer's files (to remove them after a failure). */
int ckpt_async_wait(ckpt_save *h, int *owned, ckpt_error *err);

#endif
