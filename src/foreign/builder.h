/*
 * builder.h - what the format modules (dcp.c, safetensors.c) describe a
 * foreign checkpoint with: the reader's own model (tensors, chunks and
 * frames as an index would give them), where each frame is a byte range
 * of an original file (codec raw, no checksum) and a chunk that torch
 * stored with strides (a transposed tensor) is one frame gathered element
 * by element; and the confined access to the checkpoint's files the
 * modules read them with.  The dispatcher (foreign.h) sits on top.
 */
#ifndef CKPT_FOREIGN_BUILDER_H
#define CKPT_FOREIGN_BUILDER_H

#include <stddef.h>
#include <stdint.h>
#include "ckptfs.h"
#include "common/confine.h"
#include "format/index.h"

typedef enum ckpt_foreign_kind {
    CKPT_FOREIGN_NONE = 0,
    CKPT_FOREIGN_DCP,           /* a directory with .metadata */
    CKPT_FOREIGN_SAFETENSORS,   /* a .safetensors file, or a directory of
                                   them (with model.safetensors.index.json
                                   or not) */
    CKPT_FOREIGN_TORCH          /* torch.save archives: a .pt/.pth/.bin
                                   file, or a directory of them (with
                                   pytorch_model.bin.index.json or not) */
} ckpt_foreign_kind;

/* A chunk read through its one frame's whole stored range: where its
 * elements are, relative to the start of that range (or of what the
 * range decodes to), in elements. */
typedef struct ckpt_strided {
    int64_t stride[CKPT_MAX_DIMS];
    int row_major;          /* the elements lie in order: stride unused */
    /* DCP's ZStandard extension: the stored range is one zstd stream
     * (codec/zstream.h) decoding to `decoded` bytes, the elements from
     * decoded byte `skip` on, `span` bytes of them. */
    int zstd;
    uint64_t skip, span, decoded;
} ckpt_strided;

/* A chunk inside a zstd stream (ckpt_foreign_add_zstd_chunk). */
typedef struct ckpt_zstd_src {
    uint64_t offset, length;   /* the stream's bytes in the file */
    uint64_t decoded;          /* what it decodes to */
    uint64_t skip, span;       /* the elements' bytes in that */
} ckpt_zstd_src;

/* A pending chunk, before ckpt_foreign_finish orders everything: as
 * small as its tensor's rank allows (a safetensors or torch.save file
 * has one whole chunk per tensor, and hundreds of thousands of them). */
typedef struct ckpt_foreign_chunk {
    size_t tensor;
    int64_t *dims;          /* offsets then sizes, ndim each; NULL for the
                               whole tensor (offsets 0, sizes its shape) */
    const char *file;       /* in f->names: shared by a file's chunks */
    uint64_t data_offset;   /* of its first element in the file */
    uint64_t span;          /* bytes from there to past its last element */
    ckpt_strided *strided;  /* NULL when stored row-major */
} ckpt_foreign_chunk;

/* Where a described chunk's bytes are in its file: its frames are made
 * from this when it is first read (ckpt_foreign_frames), so that a
 * checkpoint of many small tensors costs a few words per chunk until
 * then. */
typedef struct ckpt_foreign_src {
    uint64_t data_offset;   /* of its first element */
    uint64_t span;          /* bytes from there to past its last element */
    ckpt_strided *strided;  /* NULL when stored row-major (owned) */
} ckpt_foreign_src;

typedef struct ckpt_foreign {
    ckpt_foreign_kind kind;
    char *dir;              /* the directory the files are relative to */
    ckpt_confine root;      /* dir, where every file is opened (confine.h);
                               opened on first use */
    int follow;             /* follow symbolic links (the opt-in) */
    const char *index_file; /* the file naming the tensors besides their
                               data files (".metadata", the safetensors
                               index json), relative to dir, or NULL */
    char *stamp;            /* the file whose stat stands for the whole
                               checkpoint (.metadata, the .safetensors
                               file, the index json) */
    ckpt_index_data d;      /* as ckpt_index_load gives it */
    ckpt_foreign_src *src;  /* per chunk (by its id): where its bytes are,
                               what its frames are made from on first use */
    size_t nchunks;
    /* building */
    ckpt_foreign_chunk *pend;
    size_t npend, pend_cap, tensors_cap, meta_cap;
    char **names;           /* the chunks' file names, each kept once */
    size_t nnames, names_cap;
} ckpt_foreign;

/* Frees everything f holds and zeroes it (safe on a zeroed f). */
void ckpt_foreign_free(ckpt_foreign *f);

/* Adds a tensor; returns its number (>= 0) or a negative errno. */
long ckpt_foreign_add_tensor(ckpt_foreign *f, const char *fqn,
                             ckpt_dtype dt, int ndim, const int64_t *shape,
                             ckpt_error *err);
/* Adds a chunk of tensor `t` stored in `file` (relative to f->dir) from
 * byte `data_offset`: row-major when `stride` is NULL, else with these
 * strides (elements), using `span` bytes. */
int ckpt_foreign_add_chunk(ckpt_foreign *f, size_t t, const int64_t *offsets,
                           const int64_t *sizes, const char *file,
                           uint64_t data_offset, const int64_t *stride,
                           uint64_t span, ckpt_error *err);
/* Adds a chunk of tensor `t` whose bytes are inside the zstd stream z of
 * `file`: row-major when `stride` is NULL, else with these strides.
 * Reading any of it decodes the stream (once per read). */
int ckpt_foreign_add_zstd_chunk(ckpt_foreign *f, size_t t,
                                const int64_t *offsets, const int64_t *sizes,
                                const char *file, const ckpt_zstd_src *z,
                                const int64_t *stride, ckpt_error *err);
/* Keeps tensor `t` listed but unreadable: drops the chunks added for it
 * and records `why` (a message naming it), which every read of it
 * returns; the rest of the checkpoint serves.  It keeps the dtype and
 * shape it was added with when they are sound (a known dtype, a size
 * that does not overflow, not empty), else it is listed as one byte
 * (CKPT_BYTES of shape [1]), so that every read of it reaches the
 * refusal. */
int ckpt_foreign_refuse(ckpt_foreign *f, size_t t, const char *why,
                        ckpt_error *err);
int ckpt_foreign_set_meta(ckpt_foreign *f, const char *key,
                          const char *value, ckpt_error *err);
/* The directory of a checkpoint given as one file or as a folder: sets
 * f->dir to path's folder (a regular file's parent, else path itself) and
 * *file to the file's name within it, or NULL for a folder. */
int ckpt_foreign_set_dir(ckpt_foreign *f, const char *path,
                         const char **file, ckpt_error *err);
/* 1 when `name` exists in folder `dir` (an index file that says how a
 * folder's files are laid out), 0 otherwise or when the path is too long. */
int ckpt_foreign_dir_has(const char *dir, const char *name);
/* The frames of a chunk of `raw` bytes of elements of `isz` bytes stored
 * at *src: one per ~1 MiB of a row-major chunk, one for a strided chunk
 * (none when raw is 0).  Sets *n; with out, also a new array of them
 * (room for one at least).  -ENOMEM. */
int ckpt_foreign_frames(const ckpt_foreign_src *src, uint64_t raw,
                        size_t isz, ckpt_frame_rec **out, uint64_t *n);
/* Sorts tensors by FQN (refusing duplicates), chunks by offsets, records
 * the files with their sizes, and cuts row-major chunks into frames. */
int ckpt_foreign_finish(ckpt_foreign *f, ckpt_error *err);

/* A relative path inside the checkpoint directory: no "..", not absolute,
 * not empty.  0 or -EINVAL naming `what`. */
int ckpt_foreign_check_relpath(const char *p, const char *what,
                               ckpt_error *err);

/* Opens the regular file `rel` of the checkpoint (relative to f->dir)
 * for reading, without leaving f->dir (confine.h).  Returns the
 * descriptor or a negative errno naming the file. */
int ckpt_foreign_openat(ckpt_foreign *f, const char *rel, ckpt_error *err);

/* Reads the whole of the file `rel` (as ckpt_foreign_openat opens it; at
 * most `max` bytes, else -EFBIG) into a new buffer (one spare byte at its
 * end). */
int ckpt_foreign_slurp(ckpt_foreign *f, const char *rel, uint64_t max,
                       char **buf, size_t *len, ckpt_error *err);

#endif
