/*
 * index.h - index.db, the committed global metadata of a checkpoint
 * (schema in docs/FORMAT.md): written once from a global plan in one
 * transaction, then opened read-only with immutable=1 and loaded lazily.
 * It identifies itself with PRAGMA application_id CKPT_INDEX_APP_ID (db.h)
 * and carries the format version in PRAGMA user_version.
 */
#ifndef CKPT_INDEX_H
#define CKPT_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include "format/model.h"
#include "format/plan.h"
#include "common/strbuf.h"

/* Writes a new index at `path` (which must not exist) holding the kept
 * pieces of `plan` as chunks, their frames, the shard files they use
 * (with sizes taken by stat() under `ckpt_dir`), and the metadata `meta`
 * (nmeta entries).  One transaction, unsynced by SQLite; when `sync`, the
 * finished file is fsynced once before returning. */
int ckpt_index_write(const char *path, const char *ckpt_dir,
                     const ckpt_piece_rec *pieces, const ckpt_plan *plan,
                     const ckpt_kv *meta, size_t nmeta, int sync,
                     ckpt_error *err);
/* The same from the compact table the plan was built on (the
 * committer's). */
int ckpt_index_write_pieces(const char *path, const char *ckpt_dir,
                            const ckpt_pieces *tab, const ckpt_plan *plan,
                            const ckpt_kv *meta, size_t nmeta, int sync,
                            ckpt_error *err);

/* A base checkpoint of a delta checkpoint (a row of its bases table). */
typedef struct ckpt_index_base {
    int64_t id;             /* what frames.base names */
    char *path;             /* relative to the root: a sibling's name */
    char *identity;         /* the base's meta 'identity' when saved */
} ckpt_index_base;

/* ckpt_index_write_pieces for a delta checkpoint: with bases (nbases > 0)
 * the index gets the bases table, frames.base and user_version 2; every
 * ref or xor frame must name one of them. */
int ckpt_index_write_delta(const char *path, const char *ckpt_dir,
                           const ckpt_pieces *tab, const ckpt_plan *plan,
                           const ckpt_kv *meta, size_t nmeta,
                           const ckpt_index_base *bases, size_t nbases,
                           int sync, ckpt_error *err);

/* A plan's layout as an index records it (docs/FORMAT.md, "Layouts"):
 * the plan's name in .pending/, its pieces' count and layout digest
 * (format/layout.h), the one shard they are in (NULL: no piece), and
 * the map of its pieces to chunks. */
typedef struct ckpt_index_layout {
    const char *plan;
    uint64_t pieces, digest;
    const char *file;
    const uint8_t *map;
    size_t len;
} ckpt_index_layout;

/* ckpt_index_write_delta, and the layouts of its plans when every tensor
 * of the index is packed (otherwise they are not recorded: a save that
 * reused them would be planned afresh anyway). */
int ckpt_index_write_laid(const char *path, const char *ckpt_dir,
                          const ckpt_pieces *tab, const ckpt_plan *plan,
                          const ckpt_kv *meta, size_t nmeta,
                          const ckpt_index_base *bases, size_t nbases,
                          const ckpt_index_layout *layouts, size_t nlayouts,
                          int sync, ckpt_error *err);

/* A tensor of an index written from a reused layout: every one packed. */
typedef struct ckpt_index_packed_tensor {
    const char *fqn;
    ckpt_dtype dtype;
    int ndim;
    int64_t shape[CKPT_MAX_DIMS], grid[CKPT_MAX_DIMS];
    uint64_t nchunks;
} ckpt_index_packed_tensor;

/* A shard file of such an index (its size is taken by stat). */
typedef struct ckpt_index_file_name {
    const char *path;
    const char *writer;
} ckpt_index_file_name;

/* What ckpt_index_write_packs writes: files (ids 1.. in this order,
 * which must be path order), tensors (ids 1.., fqn order), the layouts
 * recorded again, and for each tensor t, fill(arg, t, ...) appends its
 * chunks' records (format/chunkpack.h) to b and sets their totals. */
typedef struct ckpt_index_packs {
    const ckpt_index_file_name *files;
    size_t nfiles;
    const ckpt_index_packed_tensor *tensors;
    size_t ntensors;
    const ckpt_index_layout *layouts;
    size_t nlayouts;
    int (*fill)(void *arg, size_t t, ckpt_strbuf *b, uint64_t *stored,
                uint64_t *nframes, uint32_t *mask, ckpt_error *err);
    void *arg;
} ckpt_index_packs;

/* Writes a new index (version 3) at `path` from `src`, as
 * ckpt_index_write_pieces does from a plan: one transaction, fsynced once
 * when `sync`. */
int ckpt_index_write_packs(const char *path, const char *ckpt_dir,
                           const ckpt_index_packs *src, const ckpt_kv *meta,
                           size_t nmeta, int sync, ckpt_error *err);

/* A read-only handle on a committed index.  Safe for use by one thread at a
 * time (callers serialise). */
typedef struct ckpt_index ckpt_index;

typedef struct ckpt_index_chunk {
    int64_t id;             /* chunks.id */
    int64_t *offsets;       /* ndim entries each, in the tensor's dims */
    int64_t *sizes;
    int file;               /* index into ckpt_index_data.files */
    uint64_t nframes, raw_bytes, stored_bytes;
} ckpt_index_chunk;

typedef struct ckpt_index_tensor {
    int64_t id;
    char *fqn;              /* and shape: one allocation, set by
                               ckpt_index_tensor_name, freed with fqn */
    int64_t *shape;         /* ndim entries (room for at least one) */
    ckpt_dtype dtype;
    int ndim;
    uint64_t nbytes, stored_bytes, nframes;
    unsigned codec_mask;    /* bit c set when some frame uses codec c */
    size_t nchunks;         /* what the tensor records; its chunks hold as
                               many once loaded */
    /* Its chunks, in row-major order of their offsets, once loaded
     * (chunks_loaded); NULL before. */
    ckpt_index_chunk *chunks;
    int64_t *dims;          /* the chunks' offsets and sizes when held
                               apart from chunks (the loader's), else
                               NULL (ckpt_index_tensor_alloc_chunks puts
                               them in the chunks' allocation) */
    int chunks_loaded;
    char *refused;          /* foreign checkpoints: why this tensor cannot
                               be read (listed, every read of it fails so),
                               or NULL */
} ckpt_index_tensor;

typedef struct ckpt_index_file {
    char *path;             /* relative to the checkpoint dir */
    uint64_t size;          /* recorded size at commit */
} ckpt_index_file;

typedef struct ckpt_index_data {
    ckpt_index_tensor *tensors;  /* sorted by fqn (strcmp) */
    size_t ntensors;
    ckpt_index_file *files;
    size_t nfiles;
    ckpt_kv *meta;               /* sorted by key */
    size_t nmeta;
} ckpt_index_data;

/* Opens `path` read-only (immutable=1).  Refuses with a clear message a
 * file that is not SQLite, a SQLite file whose application_id is not
 * ckptfs's, and a user_version newer than CKPT_FORMAT_VERSION (-ENOTSUP). */
int ckpt_index_open(ckpt_index **out, const char *path, ckpt_error *err);
void ckpt_index_close(ckpt_index *ix);
/* Loads metadata, files and tensors, with their totals, but no chunks:
 * each tensor's are left to ckpt_index_load_chunks, so that opening costs
 * the same whatever the number of chunks.  An index written before the
 * tensors table held nframes and codec_mask has every tensor's chunks
 * loaded here instead (the totals come from them). */
int ckpt_index_load_tensors(ckpt_index *ix, ckpt_index_data *out,
                            ckpt_error *err);
/* Loads the chunks of d->tensors[t] (without frames; a search of the
 * chunks table's (tensor_id, seq) index, not a scan), checks each row and
 * the tensor's totals against them, and sets the tensor's chunks, dims
 * and chunks_loaded; nothing else of d changes.  Does nothing when they
 * are loaded.  On error the tensor is left as it was. */
int ckpt_index_load_chunks(ckpt_index *ix, ckpt_index_data *d, size_t t,
                           ckpt_error *err);
/* Calls fn(arg, pos) once for each file (its position in d->files) that a
 * chunk of d->tensors[t] lies in, without loading its chunks: what a
 * tensor's permission depends on, asked for every file of a listing.  A
 * chunk naming an unknown file is -EIO (damaged index). */
int ckpt_index_tensor_files(ckpt_index *ix, const ckpt_index_data *d,
                            size_t t, void (*fn)(void *arg, size_t pos),
                            void *arg, ckpt_error *err);
/* ckpt_index_load_tensors, then every tensor's chunks. */
int ckpt_index_load(ckpt_index *ix, ckpt_index_data *out, ckpt_error *err);
void ckpt_index_data_free(ckpt_index_data *d);
/* Sets t's fqn, ndim and shape (a copy of fqn and of shape's ndim
 * entries, in one allocation that free(t->fqn) releases; room for at
 * least one dim).  A tensor's record is so as small as its rank and name
 * allow.  -ENOMEM on failure (t unchanged). */
int ckpt_index_tensor_name(ckpt_index_tensor *t, const char *fqn, int ndim,
                           const int64_t *shape);
/* For builders of a ckpt_index_data other than the loader: gives t (whose
 * ndim is set) n zeroed chunks whose offsets and sizes point into the
 * same allocation, and marks them loaded.  -ENOMEM on failure. */
int ckpt_index_tensor_alloc_chunks(ckpt_index_tensor *t, size_t n);
/* Loads the frames of chunk `chunk_id` in order into a malloc'd array.
 * Checks they tile the chunk's raw bytes exactly (-EIO otherwise). */
int ckpt_index_load_frames(ckpt_index *ix, int64_t chunk_id,
                           uint64_t expect_frames, uint64_t raw_bytes,
                           ckpt_frame_rec **frames, ckpt_error *err);

/* The index's PRAGMA user_version (1, or 2 for a delta checkpoint). */
int ckpt_index_version(const ckpt_index *ix);
/* Loads the bases table (none below version 2) into a malloc'd array,
 * ordered by id; release with ckpt_index_bases_free. */
int ckpt_index_bases(ckpt_index *ix, ckpt_index_base **out, size_t *n,
                     ckpt_error *err);
void ckpt_index_bases_free(ckpt_index_base *v, size_t n);

#endif
