/*
 * ckptfs_mpi.h - collective save and load of libckptfs over MPI.
 *
 * Built when configure finds Open MPI (HAVE_MPI); include it after <mpi.h>
 * or let it include <mpi.h>.  Every call here is collective over `comm`:
 * all ranks call it with the same `dir`, and all ranks return the same
 * status.  When any rank fails (a bad piece, an I/O error, ENOSPC, a
 * planner refusal), every rank returns that error, with a message that
 * names the failing rank and the cause; nothing is committed and no rank
 * hangs.  A rank's own failure reads "rank R: <cause>" (the first failing
 * rank's, with "(and N more ranks failed)" when others failed too); a
 * planner refusal reads "planner: <cause>" and names ranks as writers
 * "rank<R>".
 *
 * Save flow: each rank describes its pieces -> the descriptions are gathered
 * on rank 0 -> the planner validates them and deduplicates replicas, choosing
 * which rank writes each replicated piece so that bytes written per rank are
 * balanced -> every rank writes its share into its own shard file
 * (data/rank<R>.shard) in parallel -> results are gathered -> rank 0 commits.
 *
 * Load: every rank asks for its own regions in any layout (the checkpoint may
 * have been saved by a different number of ranks with a different sharding);
 * each rank reads only the frames that overlap its regions.  A frame that
 * several ranks need is read and decoded once, by one of them, which sends
 * the others their parts (two-phase I/O over MPI_Alltoallv), so a
 * resharding load decodes each needed frame once in all.
 *
 * Metadata needs no collective: any rank (or any process) may open the
 * checkpoint with ckpt_reader_open() and list its tensors, dtypes, shapes,
 * chunks and key/value metadata with ckpt_reader_count(), ckpt_reader_info(),
 * ckpt_reader_find(), ckpt_reader_chunk() and ckpt_reader_meta_get(), e.g. to
 * size the buffers a load will fill:
 *
 *     ckpt_reader *r;  ckpt_tensor_info ti;
 *     ckpt_reader_open(&r, dir, NULL, &err);
 *     ckpt_reader_info(r, ckpt_reader_find(r, "model.w"), &ti);
 *     ... ti.dtype, ti.ndim, ti.shape[] ...
 *     ckpt_reader_close(r);
 *
 * MPI: the calls make MPI calls only from the calling thread (their
 * encoder and decoder threads never call MPI), so MPI_THREAD_FUNNELED is
 * enough; like any collective, they must be called in the same order on
 * every rank of `comm`.  They expect the communicator's default error
 * handler (MPI_ERRORS_ARE_FATAL); a failing MPI call under
 * MPI_ERRORS_RETURN is reported as -EIO on the rank that saw it.
 */
#ifndef CKPTFS_MPI_H
#define CKPTFS_MPI_H

#include <mpi.h>
#include "ckptfs.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

typedef struct ckpt_mpi_save_opts {
    size_t size;             /* sizeof(ckpt_mpi_save_opts): set by
                                ckpt_mpi_save_opts_init (ckptfs.h,
                                "Options structs") */
    ckpt_write_opts write;   /* codec, level, frame size, threads, sync;
                                base: a delta save against that committed
                                checkpoint, opened by every rank (its path
                                the same on all) */
    /* Metadata set on the checkpoint (e.g. {"step", "100"}); taken from
     * rank 0's arguments. */
    const char *const *meta_keys;
    const char *const *meta_values;
    size_t nmeta;
} ckpt_mpi_save_opts;

void ckpt_mpi_save_opts_init(ckpt_mpi_save_opts *o);

/* Collective save of this rank's pieces[0..n) into checkpoint `dir`.
 * Pieces with the same FQN, offsets and sizes on several ranks are replicas:
 * exactly one rank writes each.  Before anything is written, every rank
 * hashes (XXH3-64) its copies of replicated pieces and rank 0 compares the
 * hashes: replicas with different bytes are refused with -EINVAL, naming
 * the tensor, the piece and the ranks, as ckpt_commit refuses them on
 * every other writing path.  Returns 0 on every rank once the
 * checkpoint is committed, or the same negative errno and message on every
 * rank.  `dir` must not exist yet, or be a directory that holds no
 * checkpoint and no unfinished save: a committed checkpoint is refused with
 * -EEXIST and an unfinished save (data/ or .pending/ without index.db) with
 * -EBUSY.  A save that fails after writing began removes every file and
 * directory it created, so it can be retried at once. */
int ckpt_mpi_save(MPI_Comm comm, const char *dir, const ckpt_piece *pieces,
                  size_t n, const ckpt_mpi_save_opts *opts, ckpt_error *err);

/* Asynchronous collective save: like ckpt_mpi_save, but returns on every
 * rank once the ranks have planned the save and this rank's pieces are
 * staged in `saver` (ckpt_saver_create; see ckpt_save_async in ckptfs.h
 * for staging, its cap, the queue depth and device memory).  From then on
 * the caller may overwrite or free its buffers.  Each rank writes its share
 * in the background (its encoder threads never call MPI);
 * ckpt_mpi_save_wait, collective, then agrees on the outcome and rank 0
 * commits.
 *
 * Errors returned at once (the same on every rank, nothing started): bad
 * arguments, a malformed piece, data that is not readable memory.  The
 * rest -- a committed (-EEXIST) or unfinished (-EBUSY) target, planner
 * refusals, I/O errors, ENOSPC on any rank -- is returned by
 * ckpt_mpi_save_wait on every rank, with nothing committed and the save's
 * files removed. */
typedef struct ckpt_mpi_async ckpt_mpi_async;

int ckpt_mpi_save_async(MPI_Comm comm, const char *dir,
                        const ckpt_piece *pieces, size_t n,
                        const ckpt_mpi_save_opts *opts, ckpt_saver *saver,
                        ckpt_mpi_async **out, ckpt_error *err);
/* Local, not collective: 1 once this rank's background part has finished
 * (the checkpoint is committed only by the wait), 0 while it runs, -EINVAL
 * for a NULL h.  Named like ckpt_save_poll, its single-process twin. */
int ckpt_mpi_save_poll(ckpt_mpi_async *h);
/* Collective over the communicator of the save: waits for every rank's
 * background part, commits, and frees h.  Returns 0 on every rank once
 * committed, or the same error on every rank. */
int ckpt_mpi_save_wait(ckpt_mpi_async *h, ckpt_error *err);

/* One region a rank wants: [offsets, offsets+sizes) of tensor `fqn`,
 * stored row-major at dst (prod(sizes) * itemsize bytes).  NULL offsets
 * and sizes mean the whole tensor. */
typedef struct ckpt_mpi_region {
    const char *fqn;
    const int64_t *offsets;
    const int64_t *sizes;
    void *dst;
} ckpt_mpi_region;

typedef struct ckpt_mpi_load_opts {
    size_t size;             /* sizeof(ckpt_mpi_load_opts): set by
                                ckpt_mpi_load_opts_init */
    ckpt_read_opts read;     /* cache, decoder threads, prefetch */
    /* Bytes each rank sends, and receives, per exchange round at most
     * (its staging memory is about twice this); default 64 MiB. */
    size_t exchange_bytes;
} ckpt_mpi_load_opts;

void ckpt_mpi_load_opts_init(ckpt_mpi_load_opts *o);

/* Collective load: fills each of this rank's regions[0..n).  A missing
 * tensor or an out-of-bounds region fails on the ranks concerned, and every
 * rank returns the error.  Regions of one rank, or of several, may
 * overlap.  `stats` (may be NULL) receives this rank's reader counters:
 * bytes_decoded counts the frames this rank decoded, bytes_served what it
 * read for itself and for the ranks it served.  The read amplification of
 * the load is the sum over ranks of bytes_decoded over the sum of the bytes
 * the regions asked for. */
int ckpt_mpi_load(MPI_Comm comm, const char *dir,
                  const ckpt_mpi_region *regions, size_t n,
                  const ckpt_mpi_load_opts *opts, ckpt_stats *stats,
                  ckpt_error *err);

/* Byte objects (RNG state, a data-loader position, ...) are 1-D pieces of
 * dtype CKPT_BYTES, saved with ckpt_mpi_save like any piece: */
/* Fills *p (with *len_storage) so that ckpt_mpi_save writes `data` as the
 * byte object `fqn`.  Every rank that passes the same object passes a
 * replica, written once.  Does nothing when p or len_storage is NULL (it
 * returns no status: ckpt_mpi_save then refuses the piece left as it
 * was). */
void ckpt_mpi_bytes_piece(ckpt_piece *p, const char *fqn, const void *data,
                          int64_t *len_storage, size_t len);

/* Collective load of byte object `fqn` on every rank: *out is malloc'd (the
 * caller frees it) and *len set.  Every rank returns the same status. */
int ckpt_mpi_load_bytes(MPI_Comm comm, const char *dir, const char *fqn,
                        void **out, size_t *len, ckpt_error *err);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* CKPTFS_MPI_H */
