/*
 * index.h - the SQLite files of a checkpoint.
 *
 *  - index.db, the committed global metadata (schema in docs/FORMAT.md):
 *    written once from a global plan in one transaction, then opened
 *    read-only with immutable=1.
 *  - .pending/<writer>.plan, a writer's local plan: the pieces it wrote,
 *    with their frames, and its metadata; appended durably as pieces close.
 *
 * Both identify themselves with PRAGMA application_id and carry the format
 * version in PRAGMA user_version.
 */
#ifndef CKPT_INDEX_H
#define CKPT_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include "format/model.h"
#include "format/plan.h"

#define CKPT_INDEX_APP_ID 0x636b7074   /* "ckpt" */
#define CKPT_PLAN_APP_ID  0x636b706c   /* "ckpl" */

/* ---- committed index ---- */

/* Writes a new index at `path` (which must not exist) holding the kept
 * pieces of `plan` as chunks, their frames, the shard files they use
 * (with sizes taken by stat() under `ckpt_dir`), and the metadata `meta`
 * (nmeta entries).  One transaction; when `sync`, synchronous=FULL and the
 * file is fsynced before returning. */
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
    char *fqn;
    ckpt_dtype dtype;
    int ndim;
    int64_t shape[CKPT_MAX_DIMS];
    uint64_t nbytes, stored_bytes, nframes;
    unsigned codec_mask;    /* bit c set when some frame uses codec c */
    size_t nchunks;         /* what the tensor records; its chunks hold as
                               many once loaded */
    /* Its chunks, in row-major order of their offsets, once loaded
     * (chunks_loaded); NULL before. */
    ckpt_index_chunk *chunks;
    int64_t *dims;          /* the chunks' offsets and sizes */
    int chunks_loaded;
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
/* For builders of a ckpt_index_data other than the loader: gives t (whose
 * ndim is set) n zeroed chunks whose offsets and sizes point into new
 * dims, and marks them loaded.  -ENOMEM on failure. */
int ckpt_index_tensor_alloc_chunks(ckpt_index_tensor *t, size_t n);
/* Loads the frames of chunk `chunk_id` in order into a malloc'd array.
 * Checks they tile the chunk's raw bytes exactly (-EIO otherwise). */
int ckpt_index_load_frames(ckpt_index *ix, int64_t chunk_id,
                           uint64_t expect_frames, uint64_t raw_bytes,
                           ckpt_frame_rec **frames, ckpt_error *err);

/* ---- local plans ---- */

typedef struct ckpt_planfile ckpt_planfile;

/* Creates `path` (must not exist) for `writer`. */
int ckpt_planfile_create(ckpt_planfile **out, const char *path,
                         const char *writer, int sync, ckpt_error *err);
/* Appends pieces (with frames) and metadata in one durable transaction. */
int ckpt_planfile_append(ckpt_planfile *pf, const ckpt_piece_rec *pieces,
                         size_t npieces, const ckpt_kv *meta, size_t nmeta,
                         ckpt_error *err);
/* Makes what was appended durable (the file, and its directory entry),
 * for plans created without sync. */
/* Records declared tensors (key = FQN, value = why its piece failed or
 * "") in one transaction; a later non-empty reason replaces an earlier
 * one. */
int ckpt_planfile_declare(ckpt_planfile *pf, const ckpt_kv *declared,
                          size_t n, ckpt_error *err);
int ckpt_planfile_sync(ckpt_planfile *pf, ckpt_error *err);
void ckpt_planfile_close(ckpt_planfile *pf);
/* Reads a whole plan file, appending its pieces and metadata to m (each
 * piece's and kv's writer set to the plan's writer name).  Refuses files
 * that are not ckptfs plans. */
int ckpt_planfile_read(const char *path, ckpt_manifest *m, ckpt_error *err);
/* The same into the compact table (the committer's): pieces are appended
 * to tab (on error it may hold some of them), metadata to meta. */
int ckpt_planfile_read_pieces(const char *path, ckpt_pieces *tab,
                              ckpt_manifest *meta, ckpt_error *err);

/* ---- SQLite helpers shared by index.c and planfile.c (internal) ---- */

struct sqlite3;
struct sqlite3_stmt;

/* A value to bind: an integer, or text (NULL binds SQL NULL). */
typedef struct ckpt_db_val {
    int is_text;
    int64_t i;
    const char *s;
} ckpt_db_val;
#define CKPT_DB_INT(x) ((ckpt_db_val){ 0, (int64_t)(x), NULL })
#define CKPT_DB_TEXT(x) ((ckpt_db_val){ 1, 0, (x) })

/* Sets err from SQLite result `rc` on db ("<path>: <what>: <errmsg>") and
 * returns the matching negative errno. */
int ckpt_db_err(ckpt_error *err, struct sqlite3 *db, int rc, const char *path,
                const char *what);
int ckpt_db_exec(struct sqlite3 *db, const char *sql, const char *path,
                 ckpt_error *err);
/* Creates `path` (which must not exist) as a new SQLite file with page size
 * 4096, the given journal mode, synchronous FULL (sync) or OFF,
 * application_id `app_id` and user_version CKPT_FORMAT_VERSION.  On error
 * the file is removed. */
int ckpt_db_create(struct sqlite3 **out, const char *path, uint32_t app_id,
                   const char *journal, int sync, ckpt_error *err);
/* Refuses a file that is not SQLite, has another application_id, or a
 * user_version newer than CKPT_FORMAT_VERSION (-ENOTSUP). */
int ckpt_db_check_id(struct sqlite3 *db, const char *path, uint32_t app_id,
                     ckpt_error *err);
int ckpt_db_prepare(struct sqlite3 *db, const char *sql,
                    struct sqlite3_stmt **st, const char *path,
                    ckpt_error *err);
/* Binds v[0..n) to st's parameters 1..n, steps it to completion and resets
 * it (an INSERT or UPDATE). */
int ckpt_db_run(struct sqlite3_stmt *st, const ckpt_db_val *v, int n,
                const char *path, const char *what, ckpt_error *err);
/* Runs the query `sql`, calling fn(arg, st) for each row until fn returns
 * non-zero (returned).  A query the schema cannot answer is -EINVAL. */
int ckpt_db_each(struct sqlite3 *db, const char *sql, const char *path,
                 int (*fn)(void *arg, struct sqlite3_stmt *st), void *arg,
                 ckpt_error *err);
/* Column i as a non-negative integer: 0, or -1 (wrong type, negative). */
int ckpt_db_col_u64(struct sqlite3_stmt *st, int i, uint64_t *out);
/* Parses a JSON array of non-negative integers ("[4,8]", "[]") into dims;
 * returns ndim or -EIO naming `path` and `what`. */
int ckpt_db_dims(const char *text, int64_t *dims, const char *path,
                 const char *what, ckpt_error *err);

#endif
