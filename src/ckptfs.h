/*
 * ckptfs.h - the public API of libckptfs.
 *
 * libckptfs stores distributed-training checkpoints as sharded, compressed
 * data files plus a SQLite index (docs/FORMAT.md), and reads any byte range
 * or hyper-rectangular region of any tensor back without decoding more than
 * the frames it needs.
 *
 * Conventions:
 *  - Every fallible call returns 0 (or a non-negative count) on success and a
 *    negative errno value on failure.  When `err` is not NULL it receives the
 *    same code and a message that names what failed (file, tensor, chunk,
 *    frame, writer).  `err` may be NULL.
 *  - Arguments: a NULL pointer where the call needs one is refused with
 *    -EINVAL and the message "<call>: <parameter> is NULL", never a crash.
 *    Pointers documented as optional may be NULL: options structs (the
 *    defaults), `err`, callbacks.  Calls that cannot return an error treat
 *    NULL as empty: counts are 0, lookups NULL or CKPT_*_NONE, and the
 *    *_opts_init, close, destroy and abort calls do nothing.
 *  - Regions: NULL offsets mean all zeros and NULL sizes the whole shape,
 *    alike for ckpt_piece, ckpt_read_region, ckpt_load_region and
 *    ckpt_mpi_region.
 *  - Options structs (ckpt_write_opts, ckpt_read_opts, ckpt_commit_opts,
 *    ckpt_saver_opts, ckpt_save_opts, ckpt_export_opts, and
 *    ckpt_mpi_save_opts and ckpt_mpi_load_opts in ckptfs_mpi.h) begin
 *    with `size`: the sizeof of the struct in the header the caller was
 *    built against, set by the struct's *_opts_init, which must be called before any field is set.
 *    Every call that takes one reads it by that size: a struct larger than
 *    this library knows (built against a newer ckptfs.h), or a size that
 *    was never set, is refused with -EINVAL naming the struct; a smaller
 *    struct of an older layout is read up to its size, later fields
 *    keeping their defaults.  A NULL options pointer means the defaults.
 *  - Objects carry all state; the library has no mutable global state.
 *  - A ckpt_reader may be used by many threads at once.  A ckpt_writer may be
 *    shared by threads (calls are serialised inside); a ckpt_stream belongs
 *    to one thread.
 */
#ifndef CKPTFS_H
#define CKPTFS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; this API is what it exports. */
#pragma GCC visibility push(default)

/* CKPT_VERSION_MAJOR, _MINOR, _PATCH, _STRING ("0.1.0") and _NUMBER,
 * made by configure from configure.ac's version. */
#include "ckptfs_version.h"
/* The newest index.db format version this library reads.  It writes 1,
 * 2 for a delta checkpoint (one whose frames refer to a base's:
 * docs/FORMAT.md, "Delta checkpoints"), and 3 when tensors of many chunks
 * in a regular grid are packed (docs/FORMAT.md, "Packed chunks"); older
 * readers refuse the versions they do not know. */
#define CKPT_FORMAT_VERSION 3
/* The most dimensions a tensor may have (NumPy's limit). */
#define CKPT_MAX_DIMS 32
/* Default frame size: raw bytes per independently decodable frame. */
#define CKPT_DEFAULT_FRAME_SIZE ((size_t)1 << 20)
/* The smallest frame size a writer accepts (ckpt_write_opts.frame_size). */
#define CKPT_MIN_FRAME_SIZE ((size_t)4096)
/* The largest frame the format allows: 1 GiB of raw bytes (readers refuse
 * an index that claims more). */
#define CKPT_MAX_FRAME_SIZE ((size_t)1 << 30)
/* The most encoder or decoder threads an options struct may ask for. */
#define CKPT_MAX_THREADS 4096
/* zstd levels a codec accepts: 1..22, and -7..-1 for its fast modes. */
#define CKPT_MIN_LEVEL (-7)
#define CKPT_MAX_LEVEL 22

/* ------------------------------------------------------------------ errors */

typedef struct ckpt_error {
    int code;          /* negative errno; 0 when no error */
    char msg[1024];    /* human-readable, names the object that failed */
} ckpt_error;

/* ------------------------------------------------------------------ dtypes */

typedef enum ckpt_dtype {
    CKPT_DTYPE_INVALID = 0,
    CKPT_F64, CKPT_F32, CKPT_F16, CKPT_BF16, CKPT_F8E4M3, CKPT_F8E5M2,
    CKPT_I64, CKPT_I32, CKPT_I16, CKPT_I8,
    CKPT_U64, CKPT_U32, CKPT_U16, CKPT_U8,
    CKPT_BOOL,
    CKPT_BYTES,   /* an opaque byte object: a 1-D tensor of 1-byte items */
    /* Appended later: existing values never change (they are this
     * header's ABI; index.db stores dtypes by name). */
    CKPT_C64,     /* complex64: two f32, real then imaginary */
    CKPT_C128,    /* complex128: two f64 */
    CKPT_C32,     /* complex32 (torch.chalf): two f16 */
    CKPT_F8E4M3FNUZ, /* float8 E4M3, bias 8, no -0 or inf, NaN 0x80 */
    CKPT_F8E5M2FNUZ, /* float8 E5M2, bias 16, no -0 or inf, NaN 0x80 */
    CKPT_F8E8M0,  /* float8 E8M0 "fnu": an unsigned power of two, NaN 0xff */
    CKPT_DTYPE_COUNT
} ckpt_dtype;

/* Canonical short name ("f32", "bf16", "bytes"); "invalid" for bad values. */
const char *ckpt_dtype_name(ckpt_dtype dt);
/* Bytes per element; 0 for CKPT_DTYPE_INVALID. */
size_t ckpt_dtype_size(ckpt_dtype dt);
/* Parses canonical names and PyTorch/NumPy spellings: "float32",
 * "torch.bfloat16", "<f4", "int64", "float8_e4m3fn", ...  Returns
 * CKPT_DTYPE_INVALID for anything else. */
ckpt_dtype ckpt_dtype_parse(const char *s);

/* ------------------------------------------------------------------ codecs */

/* Codec ids as stored per frame in the index (docs/FORMAT.md).  Ids are
 * never reused and stay below 32; a reader refuses a frame whose id it does
 * not know, naming the id.  The byte-grouped codecs split each element into
 * byte planes (for floats: the exponent in a plane of its own, the sign
 * beside the mantissa) and code each plane as suits it. */
typedef enum ckpt_codec {
    /* A write option only, never stored: the writer picks per tensor by
     * dtype (bf16, f16, f32, f64 -> their byte-grouped float codec, c32,
     * c64, c128 -> that of their halves' float type; 2-, 4-, 8-byte
     * integers -> bg2, bg4, bg8; 1-byte types -> zstd). */
    CKPT_CODEC_AUTO = -1,
    CKPT_CODEC_RAW = 0,
    CKPT_CODEC_ZSTD = 1,
    CKPT_CODEC_BG_BF16 = 2,   /* "bgbf16": bfloat16 split */
    CKPT_CODEC_BG_F16 = 3,    /* "bgf16": binary16 split */
    CKPT_CODEC_BG_F32 = 4,    /* "bgf32": binary32 split */
    CKPT_CODEC_BG_F64 = 5,    /* "bgf64": binary64 split */
    CKPT_CODEC_BG_2 = 6,      /* "bg2": bytes of 2-byte elements */
    CKPT_CODEC_BG_4 = 7,      /* "bg4": bytes of 4-byte elements */
    CKPT_CODEC_BG_8 = 8,      /* "bg8": bytes of 8-byte elements */
    /* Stored ids of delta checkpoints only, never a write option: */
    CKPT_CODEC_REF = 9,       /* "ref": the base's frame, no bytes stored */
    CKPT_CODEC_XOR = 10       /* "xor": XOR with the base's frame, coded */
} ckpt_codec;

/* "raw", "zstd", "bgbf16", ..., "auto" for CKPT_CODEC_AUTO; "unknown" for
 * any other value. */
const char *ckpt_codec_name(int codec);

/* ------------------------------------------------------------------ writing */

typedef struct ckpt_write_opts {
    size_t size;        /* sizeof(ckpt_write_opts): ckpt_write_opts_init */
    int codec;          /* a ckpt_codec (default CKPT_CODEC_AUTO) */
    int level;          /* zstd level, for zstd and for the planes that a
                           byte-grouped codec codes with zstd (default 1) */
    size_t frame_size;  /* raw bytes per frame (default 1 MiB):
                           CKPT_MIN_FRAME_SIZE to CKPT_MAX_FRAME_SIZE */
    int threads;        /* encoder threads; 0 = online CPUs; at most
                           CKPT_MAX_THREADS */
    int sync;           /* fdatasync shard and plan files (default 1) */
    /* Drop the shard's pages from the page cache as the disk takes them
     * (the writer then also goes no faster than the disk): 1 yes, 0 no,
     * -1 (default) only for asynchronous saves, whose background writes
     * should neither evict the training job's cache nor fill memory with
     * a checkpoint nobody reads back soon. */
    int drop_cache;
    /* Delta saves (docs/FORMAT.md, "Delta checkpoints"): a committed
     * checkpoint in the same root as the save (NULL: none, the default).
     * Each frame of a tensor that the base holds with the same dtype,
     * shape, chunk and frame layout is stored as the cheapest of a
     * reference to the base's frame (when identical), the XOR with it
     * coded by `codec`, or itself.  The library copies the string. */
    const char *base;
    /* Longest chain of XOR deltas a frame may need (default 8): a frame
     * whose base frame already needs full_every - 1 is stored whole (or
     * as a reference).  1 = references only; at most 64. */
    int full_every;
} ckpt_write_opts;

/* Sets *o to the defaults, and o->size. */
void ckpt_write_opts_init(ckpt_write_opts *o);

/* One piece of a tensor: the hyper-rectangle [offsets, offsets+sizes) of a
 * tensor of global shape `shape`, as row-major bytes at `data`. */
typedef struct ckpt_piece {
    const char *fqn;          /* dotted name, e.g. "model.layers.0.w" */
    ckpt_dtype dtype;
    int ndim;                 /* 0 for a scalar */
    const int64_t *shape;     /* global shape, ndim entries */
    const int64_t *offsets;   /* NULL means all zeros */
    const int64_t *sizes;     /* NULL means the whole shape */
    const void *data;         /* prod(sizes) * itemsize bytes, row-major */
} ckpt_piece;

/* A writer is one rank's (or one process's) stream into a checkpoint
 * directory: it owns its shard file data/<name>.shard and its local plan
 * .pending/<name>.plan.  Several writers, in one process or many, may write
 * one checkpoint; ckpt_commit() then joins their plans. */
typedef struct ckpt_writer ckpt_writer;
typedef struct ckpt_stream ckpt_stream;

/* Creates the checkpoint directory if needed (with its .pending/ and data/,
 * in one step).  Refuses a directory that is already committed (has
 * index.db) and a writer name already in use.  The writer holds the save's
 * lease (docs/GUARANTEES.md, "Live saves") until it is closed or aborted,
 * so that `ckpt gc` keeps the save; -ESTALE when a gc removed the save
 * while the writer waited for it. */
int ckpt_writer_open(ckpt_writer **out, const char *dir, const char *name,
                     const ckpt_write_opts *opts, ckpt_error *err);
/* Writes one piece (validated for bounds and sizes; global consistency is
 * checked at commit). */
int ckpt_writer_put(ckpt_writer *w, const ckpt_piece *p, ckpt_error *err);
/* Writes a byte object: a 1-D tensor of dtype bytes. */
int ckpt_writer_put_bytes(ckpt_writer *w, const char *fqn, const void *data,
                          size_t len, ckpt_error *err);
/* Streams one piece: `desc->data` is ignored; the piece's bytes arrive in
 * order through ckpt_stream_write; ckpt_stream_end checks that exactly the
 * piece's byte count arrived and records the piece.  Memory in flight is
 * bounded by a few frames per encoder thread, whatever the piece size. */
int ckpt_writer_begin(ckpt_writer *w, const ckpt_piece *desc,
                      ckpt_stream **out, ckpt_error *err);
int ckpt_stream_write(ckpt_stream *s, const void *buf, size_t len,
                      ckpt_error *err);
/* Like ckpt_stream_write, but the whole frames in buf are encoded straight
 * from it, not copied, and the call returns once they are in the shard:
 * for a caller that has other work to keep the cores busy meanwhile (the
 * mount, serving several writers at once), the copy buys no overlap. */
int ckpt_stream_write_lent(ckpt_stream *s, const void *buf, size_t len,
                           ckpt_error *err);
int ckpt_stream_end(ckpt_stream *s, ckpt_error *err);   /* frees s */
/* Like ckpt_stream_end, for a piece whose extent is known only once its
 * bytes have arrived (a file written through the mount, a byte object of
 * unknown length): begin with an upper bound of the piece, then end as
 * `actual`, which must have the same dtype and hold exactly the bytes
 * written.  Frees s. */
int ckpt_stream_end_as(ckpt_stream *s, const ckpt_piece *actual,
                       ckpt_error *err);
void ckpt_stream_abort(ckpt_stream *s);                 /* frees s */
/* Sets a key/value pair of checkpoint metadata (e.g. "step").  The keys
 * ckptfs sets itself at commit (ckpt_meta_reserved) are refused. */
int ckpt_writer_set_meta(ckpt_writer *w, const char *key, const char *value,
                         ckpt_error *err);
/* 1 if metadata key `key` is one ckptfs sets itself at commit
 * (format_version, created, producer, world_size, identity, a delta's
 * base, data_hash: how the chunks' hashes are made, layout.reused): a
 * copy of a checkpoint's metadata leaves these out. */
int ckpt_meta_reserved(const char *key);
/* Records every closed piece in the local plan (after an fdatasync of the
 * shard, with sync = 1, which the plan notes so that the commit does not
 * sync it again).  Only ckpt_commit makes a checkpoint durable; a save
 * cut by a restart of its host is refused by a commit there
 * (docs/GUARANTEES.md, "Which sync makes which promise"). */
int ckpt_writer_flush(ckpt_writer *w, ckpt_error *err);
/* Syncs the shard (fdatasync), even when the writer was opened with
 * sync = 0, and closes and reopens the plan file, when either changed
 * since the last call: what ckpt_writer_flush recorded so far is where a
 * committer on another node reads it (close-to-open consistency).  The
 * commit makes the checkpoint durable; a save cut by a restart of its
 * host is saved again. */
int ckpt_writer_sync(ckpt_writer *w, ckpt_error *err);
/* Flushes and frees the writer.  The writer is freed even on error. */
int ckpt_writer_close(ckpt_writer *w, ckpt_error *err);
/* Frees the writer without recording anything more. */
void ckpt_writer_abort(ckpt_writer *w);

typedef struct ckpt_commit_opts {
    size_t size;         /* sizeof(ckpt_commit_opts): ckpt_commit_opts_init */
    int expect_writers;  /* refuse unless exactly this many plans; 0 = any */
    int sync;            /* fsync index and directory (default 1) */
    int world_size;      /* recorded as metadata world_size; 0 = the number
                            of writer plans */
} ckpt_commit_opts;

/* Sets *o to the defaults, and o->size. */
void ckpt_commit_opts_init(ckpt_commit_opts *o);

/* Validates every local plan under dir/.pending with the planner (same
 * dtype and shape per FQN, pieces in bounds, no partial overlap, full
 * coverage; identical replicas kept once, and refused if their bytes
 * differ; a tensor declared through a mount with no piece refused, with
 * why its piece failed; a save whose shard failed to sync refused), then
 * writes dir/index.db atomically and removes .pending.  On error nothing
 * is committed (an index.db published before a later step failed is
 * removed again) and the plans are left for inspection.  Holds the save's
 * lease while it runs; -ESTALE when a gc removed the save while the commit
 * waited; -EEXIST when it is committed already. */
int ckpt_commit(const char *dir, const ckpt_commit_opts *opts,
                ckpt_error *err);

/* ------------------------------------------------------------------ reading */

typedef struct ckpt_read_opts {
    size_t size;         /* sizeof(ckpt_read_opts): ckpt_read_opts_init */
    size_t cache_bytes;  /* decoded-frame cache (default 256 MiB) */
    int threads;         /* decoder threads; 0 = online CPUs */
    int prefetch;        /* frames decoded ahead of a sequential reader
                            (default 4; 0 disables) */
    /* Files are read only inside the checkpoint's directory: a shard,
     * item or .safetensors file that is a symbolic link (or lies under
     * one) is refused, but for a Hugging Face cache snapshot's links into
     * its blobs/ (docs/TRUST.md).  1 follows links wherever they lead
     * (default 0). */
    int follow_links;
} ckpt_read_opts;

/* Sets *o to the defaults, and o->size. */
void ckpt_read_opts_init(ckpt_read_opts *o);

typedef struct ckpt_reader ckpt_reader;

/* Opens a committed checkpoint.  Refuses, with a message saying which, a
 * missing directory, a directory without index.db (not committed), an
 * index.db that is not a ckptfs index or is of a newer format, and one
 * that breaks the format (names against the FQN rules or repeated, sizes
 * out of bounds: "damaged index"; docs/TRUST.md).  Reads the metadata,
 * files and tensors; each tensor's chunks are read from the index when
 * first needed (a read of it, ckpt_reader_chunk, verify), so opening costs
 * the same for 8 writers as for 16,384.  The reader may be shared by
 * threads. */
int ckpt_reader_open(ckpt_reader **out, const char *dir,
                     const ckpt_read_opts *opts, ckpt_error *err);
/* Frees the reader.  The caller must not close a reader while another
 * thread is in, or may still enter, any call on it (every ckpt_reader_*,
 * ckpt_read*, ckpt_load_region): nothing inside waits for them, and the
 * memory they use is freed (the Python package's Reader counts the calls
 * in flight and closes after the last returns). */
void ckpt_reader_close(ckpt_reader *r);

typedef struct ckpt_tensor_info {
    const char *fqn;
    ckpt_dtype dtype;
    int ndim;
    const int64_t *shape;
    uint64_t numel;
    uint64_t nbytes;        /* numel * itemsize: the size of its image */
    uint64_t stored_bytes;  /* bytes its frames occupy in shard files */
    size_t nchunks;
    uint64_t nframes;
    const char *codecs;     /* codecs its frames use: "zstd", "raw+zstd" */
} ckpt_tensor_info;

typedef struct ckpt_chunk_info {
    const int64_t *offsets;
    const int64_t *sizes;
    const char *file;       /* shard path relative to the checkpoint */
    uint64_t nframes;
    uint64_t raw_bytes;
    uint64_t stored_bytes;
} ckpt_chunk_info;

typedef struct ckpt_frame_info {
    uint64_t file_offset;
    uint64_t stored_size;
    uint64_t raw_offset;    /* within the chunk's row-major image */
    uint64_t raw_size;
    int codec;
    uint64_t checksum;      /* XXH3-64 of the raw bytes */
} ckpt_frame_info;

/* Tensors are listed in FQN order. */
size_t ckpt_reader_count(const ckpt_reader *r);
int ckpt_reader_info(const ckpt_reader *r, size_t idx, ckpt_tensor_info *out);
/* Index of `fqn`, or -ENOENT (-EINVAL for a NULL r or fqn). */
long ckpt_reader_find(const ckpt_reader *r, const char *fqn);
/* Chunk `chunk` of tensor idx (chunks in row-major order of their
 * offsets).  The first lookup of a tensor's chunks loads them: -EIO when
 * the index holds them damaged, -EINVAL for a bad idx or chunk. */
int ckpt_reader_chunk(const ckpt_reader *r, size_t idx, size_t chunk,
                      ckpt_chunk_info *out);
int ckpt_reader_frame(ckpt_reader *r, size_t idx, size_t chunk, uint64_t frame,
                      ckpt_frame_info *out, ckpt_error *err);

/* Key/value metadata, in key order. */
size_t ckpt_reader_meta_count(const ckpt_reader *r);
int ckpt_reader_meta_at(const ckpt_reader *r, size_t i, const char **key,
                        const char **value);
/* Value for `key`, or NULL. */
const char *ckpt_reader_meta_get(const ckpt_reader *r, const char *key);

/* Reads bytes [off, off+len) of tensor idx's row-major image into dst.
 * Returns the number of bytes read (short only at the end of the image).
 * Before the first byte of a tensor is served, its chunks are checked to
 * tile it exactly (once per tensor, the verdict kept): a tensor whose
 * chunks overlap, repeat or leave a hole is -EIO ("damaged index", naming
 * the tensor and chunks), here and in ckpt_read_region. */
int64_t ckpt_read(ckpt_reader *r, size_t idx, void *dst, uint64_t off,
                  uint64_t len, ckpt_error *err);
/* Reads the region [offsets, offsets+sizes) of tensor idx into dst, stored
 * row-major (prod(sizes) * itemsize bytes).  This is also how M ranks load
 * what N ranks saved.  NULL offsets are all zeros, NULL sizes the whole
 * shape (both NULL: the whole tensor); dst may be NULL only for an empty
 * region. */
int ckpt_read_region(ckpt_reader *r, size_t idx, const int64_t *offsets,
                     const int64_t *sizes, void *dst, ckpt_error *err);

/* One read of a batch: the region [offsets, offsets+sizes) of tensor idx
 * (NULL offsets: zeros, NULL sizes: the shape), row-major to dst, as
 * ckpt_read_region reads it. */
typedef struct ckpt_read_item {
    size_t idx;
    const int64_t *offsets;
    const int64_t *sizes;
    void *dst;
} ckpt_read_item;

/* Reads the n items as ckpt_read_region reads each, sharing the work of
 * all of them out among the reader's threads: loading a state of many
 * small tensors keeps every thread busy, where reading them one call at a
 * time leaves the threads little to share.  Every item is checked (tensor,
 * region, dst) before any byte is read; a failure names the item ("item I
 * of N: ...").  On failure some destinations may have been written. */
int ckpt_read_batch(ckpt_reader *r, const ckpt_read_item *items, size_t n,
                    ckpt_error *err);

typedef struct ckpt_fault {
    const char *fqn;        /* "-" for a fault of a shard file as a whole */
    long chunk;             /* -1 when the fault is not in one chunk */
    long frame;             /* -1 when the fault is not in one frame */
    const char *file;       /* shard file, or NULL */
    uint64_t file_offset;
    const char *msg;
} ckpt_fault;

typedef void (*ckpt_fault_fn)(void *arg, const ckpt_fault *fault);

/* Decodes and checks every frame of every tensor and the coverage of every
 * tensor by its chunks.  Calls fn once per fault; `progress` (may be NULL)
 * after each frame with bytes checked so far.  Returns the number of faults
 * (0 = intact), or a negative error if verification could not run. */
int64_t ckpt_verify(ckpt_reader *r, ckpt_fault_fn fn, void *arg,
                    void (*progress)(void *arg, uint64_t done, uint64_t total),
                    ckpt_error *err);

/* What ckpt_diff finds of one tensor. */
typedef enum ckpt_diff_status {
    CKPT_DIFF_EQUAL = 0,      /* the same dtype, shape and bytes */
    CKPT_DIFF_CHANGED = 1,    /* the same name, other bytes (or dtype/shape) */
    CKPT_DIFF_ONLY_A = 2,     /* in the first checkpoint only */
    CKPT_DIFF_ONLY_B = 3      /* in the second checkpoint only */
} ckpt_diff_status;

typedef struct ckpt_diff_entry {
    const char *fqn;
    ckpt_diff_status status;
    int same_type;            /* dtype and shape agree */
    int same_layout;          /* the same chunks and frames: frames were
                                 compared by their checksums, no decode */
    uint64_t frames;          /* frames of the tensor (in B when in both) */
    uint64_t changed_frames;  /* same_layout: frames whose checksums
                                 differ; else the frames of B holding a
                                 changed element */
    uint64_t changed_elems;   /* elements whose bytes differ */
    int has_stats;            /* a float tensor compared element-wise: */
    double max_abs;           /* max |b - a| (NaN where either is NaN) */
    double rel_l2;            /* ||b - a||_2 / ||a||_2 (inf when ||a|| = 0
                                 and b differs) */
} ckpt_diff_entry;

typedef void (*ckpt_diff_fn)(void *arg, const ckpt_diff_entry *e);

/* Compares the tensors of checkpoints a and b, in FQN order, calling fn
 * once per tensor.  Tensors stored with the same chunks and frames are
 * compared frame by frame by checksum (XXH3-64): an equal one costs no
 * decode; a changed one is read whole from both for its element counts
 * and, for f64/f32/f16/bf16/fp8, the float differences.  Returns the
 * number of tensors that are not equal, or a negative error. */
int64_t ckpt_diff(ckpt_reader *a, ckpt_reader *b, ckpt_diff_fn fn,
                  void *arg, ckpt_error *err);

typedef struct ckpt_stats {
    uint64_t frames_decoded;
    uint64_t bytes_decoded;  /* raw bytes of the frames decoded: over
                                bytes_served, the read amplification */
    uint64_t cache_hits;
    uint64_t cache_misses;
    uint64_t bytes_read;     /* read from shard files */
    uint64_t bytes_served;   /* delivered to callers */
} ckpt_stats;

void ckpt_reader_stats(const ckpt_reader *r, ckpt_stats *out);

struct stat;

/* stat(2) of the checkpoint's file `file` (a path relative to the
 * checkpoint, as ckpt_chunk_info.file gives it), found the way the reader
 * opens its files: inside the checkpoint's directory, through no symbolic
 * link unless follow_links (docs/TRUST.md); "." is the directory the
 * reader opened (whatever its path leads to now).  Returns 0, or a negative
 * errno with err naming the file (-ENOENT when it is missing, -ELOOP for
 * a link that is not followed). */
int ckpt_reader_file_stat(const ckpt_reader *r, const char *file,
                          struct stat *st, ckpt_error *err);

/* An owner, a group and permission bits, as a file system shows them. */
typedef struct ckpt_perm {
    uint32_t uid, gid;
    uint32_t mode;          /* permission bits: 0777 at most */
} ckpt_perm;

/* Who may read what the reader serves of tensor idx: the owner, group and
 * permission bits that stand for every file it is read from (its chunks'
 * files, and the file that names the checkpoint's tensors: index.db,
 * .metadata, model.safetensors.index.json, or for safetensors every
 * file's header), combined so that whoever they let read could read each
 * of those files (the first one's owner and group; for files of one owner
 * and group, the AND of their modes), and could search the directories
 * between the checkpoint's directory and its chunks' files (data/).  idx (size_t)-1 stands for the
 * listing of the tensors (names, dtypes, shapes) alone.  A file that
 * cannot be looked at grants nothing.  Each file is looked at once, when
 * first needed (later changes are not seen).  Returns 0 or a negative
 * errno (-EINVAL for a bad idx, -ENOMEM). */
int ckpt_reader_perm(ckpt_reader *r, size_t idx, ckpt_perm *out,
                     ckpt_error *err);

/* ------------------------------------------------------------------ dirs */

typedef enum ckpt_dir_state {
    CKPT_DIR_NONE = 0,       /* neither a checkpoint nor a save in progress */
    CKPT_DIR_COMMITTED = 1,  /* has index.db */
    CKPT_DIR_PENDING = 2     /* has .pending/ or data/ but no index.db */
} ckpt_dir_state;

/* Classifies a directory without opening its index. */
ckpt_dir_state ckpt_dir_probe(const char *dir);

/* Checkpoints of other tools that ckpt_reader_open also reads, read-only
 * (docs/MOUNT.md, "Foreign checkpoints"): their tensors are served from
 * the original files, without checksums (ckpt_verify then checks that
 * every byte can be read and that the chunks tile each tensor). */
typedef enum ckpt_format {
    CKPT_FORMAT_NONE = 0,
    CKPT_FORMAT_CKPTFS = 1,      /* a directory with index.db */
    CKPT_FORMAT_DCP = 2,         /* PyTorch distributed checkpoint: a
                                    directory with .metadata */
    CKPT_FORMAT_SAFETENSORS = 3, /* a .safetensors file, or a directory
                                    with model.safetensors.index.json or
                                    *.safetensors files */
    CKPT_FORMAT_TORCH = 4        /* torch.save archives (zip format): a
                                    .pt/.pth/.bin file, or a directory with
                                    pytorch_model.bin.index.json or such
                                    files */
} ckpt_format;

/* What `path` is, without reading its contents.  When `stamp` is not NULL
 * it receives (cap bytes at most) the file whose status stands for the
 * checkpoint's: index.db, .metadata, the .safetensors or torch.save file
 * or index json (for a directory of such files without index, the
 * directory). */
ckpt_format ckpt_format_probe(const char *path, char *stamp, size_t cap);

/* What an open reader reads: CKPT_FORMAT_CKPTFS, or the foreign format it
 * was opened on (CKPT_FORMAT_DCP, _SAFETENSORS, _TORCH), whose bytes
 * carry no checksums: any byte range is read as it is, without the frame
 * around it. */
ckpt_format ckpt_reader_format(const ckpt_reader *r);

/* Version of the library, e.g. "0.1.0": the CKPT_VERSION_STRING it was
 * built with (a program built against another header can compare). */
const char *ckpt_version(void);

/* ------------------------------------------------------------------ async save */

/* An asynchronous save blocks the caller only while the state is copied
 * into staging memory; the frames are then encoded, written, synced and
 * committed in the background (docs/ASYNC.md).
 *
 *     ckpt_saver *sv;
 *     ckpt_saver_create(&sv, NULL, &err);              once
 *     ...
 *     ckpt_save *h;
 *     ckpt_save_async(sv, "ck/step-100", pieces, n, NULL, &h, &err);
 *     ... go on training: the buffers may be overwritten at once ...
 *     ckpt_save_wait(h, &err);                          0: committed
 *     ...
 *     ckpt_saver_destroy(sv);
 *
 * A piece's data may be host memory or, in a libckptfs built with CUDA and
 * run where a device is usable, CUDA device (or managed) memory: device
 * pointers are recognised with cudaPointerGetAttributes and copied
 * device-to-host into pinned staging buffers (cudaHostAlloc) on the
 * saver's own streams, while the background encodes the pieces already
 * staged.  Host memory is copied by several threads.  Built without CUDA,
 * or run without a device, data that is not readable host memory (such as
 * a device pointer) is refused with -EFAULT and a message naming the
 * tensor, before anything is written. */

typedef struct ckpt_saver_opts {
    size_t size;        /* sizeof(ckpt_saver_opts): ckpt_saver_opts_init */
    /* Most bytes of staging memory at once; 0 (default) = no cap: the pool
     * grows to the size of the states in flight.  With a cap smaller than
     * the state, staging proceeds in slices as the background writes and
     * frees space, so ckpt_save_async returns only when all but the last
     * cap bytes are written: a smaller stall for less memory, down to a
     * synchronous save for a tiny cap.  Staging moves slabs of at least
     * 64 KiB, so a cap below 64 KiB counts as 64 KiB (one slab). */
    size_t staging_bytes;
    /* Threads copying host memory into staging; 0 = one per CPU, at
     * most 4. */
    int copy_threads;
    /* Saves that may be in flight when a new one starts: default 1, a new
     * save first waits until the previous one has finished.  With a
     * larger depth saves queue up and are written one after another. */
    int queue_depth;
    /* Niceness (0-19) of the background writer and its encoder threads,
     * so that they yield the CPU to training; default 10, 0 = unchanged
     * (Linux: per thread). */
    int nice;
} ckpt_saver_opts;

/* Sets *o to the defaults, and o->size. */
void ckpt_saver_opts_init(ckpt_saver_opts *o);

/* A saver owns the staging pool (kept across saves, freed by
 * ckpt_saver_destroy), the copy threads and the background thread.  One
 * thread at a time may start saves on it. */
typedef struct ckpt_saver ckpt_saver;
/* One save in flight: a handle to poll and wait on. */
typedef struct ckpt_save ckpt_save;

int ckpt_saver_create(ckpt_saver **out, const ckpt_saver_opts *opts,
                      ckpt_error *err);
/* Waits for every save still in flight, then frees the saver.  Every
 * handle must have been waited on before (handles left over are freed,
 * their outcome lost). */
void ckpt_saver_destroy(ckpt_saver *s);
/* 1 when this saver can save CUDA device memory (built with CUDA and a
 * device is usable), else 0. */
int ckpt_saver_cuda(const ckpt_saver *s);
/* Allocates staging memory for `bytes` of state now (at most the cap),
 * so that the first save does not pay for it in its stall: pinned memory
 * where a device is usable costs about 0.5 s per GiB to make.  Every save
 * grows the pool to its state's size anyway, before staging.  0, or
 * -ENOMEM: more bytes than the machine's memory are refused before any
 * allocation (a size in the wrong unit); otherwise what was made before
 * memory ran out stays in the pool. */
int ckpt_saver_reserve(ckpt_saver *s, uint64_t bytes, ckpt_error *err);

typedef struct ckpt_save_opts {
    size_t size;                   /* sizeof(ckpt_save_opts) */
    ckpt_write_opts write;         /* codec, level, frame size, threads, sync */
    const char *const *meta_keys;  /* checkpoint metadata (e.g. "step") */
    const char *const *meta_values;
    size_t nmeta;
} ckpt_save_opts;

/* Sets *o to the defaults, and o->size and o->write.size. */
void ckpt_save_opts_init(ckpt_save_opts *o);

/* Starts saving pieces[0..n) as the checkpoint `dir` (one writer,
 * "rank0"), and returns once their bytes are staged: from then on the
 * caller may overwrite or free its buffers, and what gets saved is the
 * state at the time of the call.  The strings and arrays of the pieces and
 * options are copied too.
 *
 * Returns an error at once, with nothing started, for bad arguments: a
 * piece that is malformed on its own (dtype, fqn, bounds), data that is
 * not readable (see above), `dir` already a committed checkpoint (-EEXIST)
 * or holding an unfinished save (-EBUSY).  Everything later -- the
 * planner's refusals (overlapping pieces, holes, conflicting dtypes or
 * shapes), I/O errors, ENOSPC -- is reported by ckpt_save_wait; then
 * nothing is committed and every file the save created is removed, so
 * earlier checkpoints are untouched and the save can be retried.  Before
 * staging, the call waits while queue_depth saves are in flight. */
int ckpt_save_async(ckpt_saver *s, const char *dir, const ckpt_piece *pieces,
                    size_t n, const ckpt_save_opts *opts, ckpt_save **out,
                    ckpt_error *err);
/* 1 when the save has finished (successfully or not), 0 while it runs,
 * -EINVAL for a NULL h. */
int ckpt_save_poll(ckpt_save *h);
/* Waits for the save to finish and frees the handle: 0 once the
 * checkpoint is committed, or the background part's error. */
int ckpt_save_wait(ckpt_save *h, ckpt_error *err);

/* The synchronous form of ckpt_save_async, without staging: saves
 * pieces[0..n) as the checkpoint `dir` in one call (one writer, "rank0",
 * writing straight from the caller's buffers, then ckpt_commit) and
 * returns once it is committed.  Checks everything it can before creating
 * anything: bad arguments, a piece malformed on its own (dtype, fqn,
 * bounds) or without data, `dir` already a committed checkpoint (-EEXIST)
 * or holding an unfinished save (-EBUSY).  Any later failure (a planner
 * refusal, an I/O error, ENOSPC) removes every file the save created, and
 * `dir` when the save made it, so nothing is committed, earlier
 * checkpoints are untouched and the save can be retried.  Byte objects are
 * pieces of dtype CKPT_BYTES (ndim 1, shape {length}). */
int ckpt_save_sync(const char *dir, const ckpt_piece *pieces, size_t n,
                   const ckpt_save_opts *opts, ckpt_error *err);

/* Like ckpt_read_region (the same arguments: NULL offsets are zeros, NULL
 * sizes the whole shape), but dst may also be CUDA device memory (in a
 * libckptfs built with CUDA, where a device is usable): the region is read
 * in slices into two pinned bounce buffers and copied to the device on a
 * stream of its own, one slice's copy overlapping the next one's read.
 * dst that is neither writable host memory nor device memory is refused
 * with -EFAULT. */
int ckpt_load_region(ckpt_reader *r, size_t idx, const int64_t *offsets,
                     const int64_t *sizes, void *dst, ckpt_error *err);

/* Like ckpt_read_batch, but each item's dst may also be CUDA device memory
 * (as for ckpt_load_region).  Every item is checked first (tensor, region,
 * dst: "item I of N: ..."), then the host items are read as one
 * ckpt_read_batch and the device items as one pipeline: their regions are
 * packed into two pinned bounce buffers (32 MiB each), each buffer's
 * frames decoded by all of the reader's threads at once and copied to the
 * device while the other buffer is read.  Loading a state of many tensors
 * into device memory this way costs one pinned allocation in all, where
 * ckpt_load_region costs one per call.  On failure some destinations may
 * have been written. */
int ckpt_load_batch(ckpt_reader *r, const ckpt_read_item *items, size_t n,
                    ckpt_error *err);

/* ------------------------------------------------------------------ export */

/* What ckpt_export writes (docs/CLI.md, "ckpt export"). */
typedef enum ckpt_export_format {
    CKPT_EXPORT_SAFETENSORS = 1,  /* OUT ending in .safetensors: one file;
                                     else a folder: model.safetensors, or
                                     HF shards and their index past
                                     max_shard_size */
    CKPT_EXPORT_PT = 2,           /* a torch.save archive (one file) */
    CKPT_EXPORT_DCP = 3           /* a DCP folder: .metadata, __0_0.distcp */
} ckpt_export_format;

typedef struct ckpt_export_opts {
    size_t size;            /* sizeof(ckpt_export_opts): ckpt_export_opts_init */
    int format;             /* a ckpt_export_format (default safetensors) */
    int torch_major;        /* pt and dcp: the torch that loads it, 1 (1.13:
                               torch.distributed._shard.checkpoint, no
                               float8, uint16-64 or complex32) or 2
                               (default) */
    uint64_t max_shard_size;/* safetensors folder: bytes per shard at most
                               (default 5,000,000,000, as HF's "5GB") */
    int flat;               /* pt: keys are the FQNs (default 0: a name's
                               dots make nested dicts) */
    int convert;            /* 1 converts, exactly, the dtypes torch 1
                               lacks (float8 to float32, complex32 to
                               complex64, uint16 to int32, uint32 to
                               int64); 0 refuses them (default) */
    int bytes_as_u8;        /* safetensors, pt: byte objects become 1-D
                               uint8 tensors (default 0: left out, and
                               each reported through `note`) */
    int sync;               /* 1: output fsynced before it is renamed into
                               place (default 0) */
    int follow_links;       /* read SRC as ckpt_read_opts.follow_links */
    int threads;            /* SRC's decoder threads; 0 = online CPUs */
    const char *const *tensors; /* export only these FQNs (ntensors of
                               them; a missing one is refused) */
    size_t ntensors;
    const char *prefix;     /* export only FQNs that start with it */
    size_t buffer_bytes;    /* bytes per read block, two of them in memory
                               (default 8 MiB) */
    /* Called (may be NULL) with bytes done of the total as data moves. */
    void (*progress)(void *arg, uint64_t done, uint64_t total);
    /* Called (may be NULL) for each object left out, with why. */
    void (*note)(void *arg, const char *fqn, const char *why);
    void *arg;              /* passed to progress and note */
} ckpt_export_opts;

/* Sets *o to the defaults, and o->size. */
void ckpt_export_opts_init(ckpt_export_opts *o);

/* Writes the checkpoint at `src` (any that ckpt_reader_open reads) as
 * `out` in another tool's format, streaming through two read blocks.
 * `out` must not exist; it is written under a hidden temporary name in its
 * directory and renamed into place only once complete, so a failed or
 * killed export leaves nothing under its name.  A dtype the format (or
 * torch_major) lacks is refused by name unless `convert`. */
int ckpt_export(const char *src, const char *out,
                const ckpt_export_opts *opts, ckpt_error *err);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* CKPTFS_H */
