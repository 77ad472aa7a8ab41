/*
 * index.c - the committed index of a checkpoint, index.db (see index.h;
 * schema and meaning in docs/FORMAT.md): written once from the global plan
 * in one transaction into a new file, then opened read-only with
 * immutable=1 and loaded, with every value checked before it is trusted:
 * metadata, files and tensors at open, a tensor's chunks when asked for
 * (a search of the chunks (tensor_id, seq) index), a chunk's frames
 * likewise.  The SQLite helpers it shares with planfile.c are db.c's.
 *
 * uint64 checksums and hashes are stored as the int64 with the same bits.
 */
#include "format/index.h"
#include "format/db.h"
#include "format/chunkpack.h"
#include "codec/codec.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/region.h"
#include "common/shape.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Room for a JSON array of CKPT_MAX_DIMS dims. */
#define DIMS_JSON_CAP (CKPT_MAX_DIMS * 21 + 3)
/* Codec ids a codec_mask can hold. */
#define MAX_CODEC_ID 31

static const char INDEX_SCHEMA[] =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)"
    " WITHOUT ROWID;"
    "CREATE TABLE files(id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE,"
    " size INTEGER NOT NULL, writer TEXT);"
    "CREATE TABLE codecs(id INTEGER PRIMARY KEY, name TEXT NOT NULL);"
    "CREATE TABLE tensors(id INTEGER PRIMARY KEY, fqn TEXT NOT NULL UNIQUE,"
    " dtype TEXT NOT NULL, shape TEXT NOT NULL, numel INTEGER NOT NULL,"
    " nbytes INTEGER NOT NULL, stored_bytes INTEGER NOT NULL,"
    " nchunks INTEGER NOT NULL, nframes INTEGER NOT NULL,"
    " codec_mask INTEGER NOT NULL);"
    "CREATE TABLE chunks(id INTEGER PRIMARY KEY,"
    " tensor_id INTEGER NOT NULL REFERENCES tensors(id),"
    " seq INTEGER NOT NULL, offsets TEXT NOT NULL, sizes TEXT NOT NULL,"
    " file_id INTEGER NOT NULL REFERENCES files(id),"
    " raw_bytes INTEGER NOT NULL, stored_bytes INTEGER NOT NULL,"
    " nframes INTEGER NOT NULL, codec_mask INTEGER NOT NULL,"
    " data_hash INTEGER NOT NULL, writer TEXT, UNIQUE(tensor_id, seq));"
    "CREATE TABLE frames(chunk_id INTEGER NOT NULL REFERENCES chunks(id),"
    " seq INTEGER NOT NULL, file_offset INTEGER NOT NULL,"
    " stored_size INTEGER NOT NULL, raw_offset INTEGER NOT NULL,"
    " raw_size INTEGER NOT NULL, codec INTEGER NOT NULL REFERENCES codecs(id),"
    " checksum INTEGER NOT NULL, PRIMARY KEY(chunk_id, seq)) WITHOUT ROWID;";

/* A delta checkpoint's (user_version 2): the checkpoints its frames
 * refer to, and which one each frame uses. */
static const char INDEX_DELTA_SCHEMA[] =
    "CREATE TABLE bases(id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE,"
    " identity TEXT NOT NULL);"
    "ALTER TABLE frames ADD COLUMN base INTEGER REFERENCES bases(id);";

/* An index with packed tensors (user_version 3, also holding the delta
 * schema of version 2): one row per tensor whose chunks form a regular
 * grid (format/chunkpack.h), instead of rows in chunks and frames. */
static const char INDEX_PACK_SCHEMA[] =
    "CREATE TABLE packs(tensor_id INTEGER PRIMARY KEY REFERENCES tensors(id),"
    " grid TEXT NOT NULL, chunks BLOB NOT NULL);";

/* The layout of each plan of a save whose every tensor is packed
 * (format/layout.h): what the next save of the same layout reuses. */
static const char INDEX_LAYOUT_SCHEMA[] =
    "CREATE TABLE layouts(plan TEXT PRIMARY KEY, pieces INTEGER NOT NULL,"
    " digest INTEGER NOT NULL, file_id INTEGER REFERENCES files(id),"
    " map BLOB NOT NULL);";

/* The least chunks a tensor has for them to be packed: a tensor of fewer
 * keeps rows that sqlite3 can query chunk by chunk. */
#define PACK_MIN_CHUNKS 64

/* Built after the frames are in: faster than maintaining it row by row. */
static const char INDEX_FRAMES_BY_RAW[] =
    "CREATE UNIQUE INDEX frames_by_raw ON frames(chunk_id, raw_offset);";

static const char *const INDEX_TABLES[] = {
    "meta", "files", "codecs", "tensors", "chunks", "frames",
};

/* -------------------------------------------------------------- writing */

enum { ST_FILE, ST_CODEC, ST_TENSOR, ST_CHUNK, ST_FRAME, ST_META, ST_BASE,
       ST_PACK, ST_LAYOUT, NSTMT };

static const char *const INSERT_SQL[NSTMT] = {
    "INSERT INTO files(id, path, size, writer) VALUES(?,?,?,?)",
    "INSERT INTO codecs(id, name) VALUES(?,?)",
    "INSERT INTO tensors(id, fqn, dtype, shape, numel, nbytes, stored_bytes,"
    " nchunks, nframes, codec_mask) VALUES(?,?,?,?,?,?,?,?,?,?)",
    "INSERT INTO chunks(id, tensor_id, seq, offsets, sizes, file_id,"
    " raw_bytes, stored_bytes, nframes, codec_mask, data_hash, writer)"
    " VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
    "INSERT INTO frames(chunk_id, seq, file_offset, stored_size, raw_offset,"
    " raw_size, codec, checksum) VALUES(?,?,?,?,?,?,?,?)",
    "INSERT INTO meta(key, value) VALUES(?,?)",
    "INSERT INTO bases(id, path, identity) VALUES(?,?,?)",
    "INSERT INTO packs(tensor_id, grid, chunks) VALUES(?,?,?)",
    "INSERT INTO layouts(plan, pieces, digest, file_id, map)"
    " VALUES(?,?,?,?,?)",
};

/* The frames insert of a delta checkpoint. */
static const char INSERT_DELTA_FRAME[] =
    "INSERT INTO frames(chunk_id, seq, file_offset, stored_size, raw_offset,"
    " raw_size, codec, checksum, base) VALUES(?,?,?,?,?,?,?,?,?)";

typedef struct file_ent {
    const char *path;
    const char *writer;     /* of the first input piece naming it */
    size_t first;           /* its string id */
    uint64_t size;
} file_ent;

typedef struct iwrite {
    sqlite3 *db;
    const char *path;       /* the index being written */
    const char *dir;        /* the checkpoint directory */
    const ckpt_pieces *tab;
    const ckpt_plan *plan;
    file_ent *files;        /* sorted by path; files.id = position + 1 */
    size_t nfiles;
    size_t *file_pos;       /* per string id of a shard path: its position
                               in files */
    uint32_t codec_mask;    /* codec ids the kept frames use */
    const ckpt_index_base *bases;   /* a delta checkpoint's, else none */
    size_t nbases;
    int version;            /* user_version: 1, 2 with bases, 3 with packs */
    const ckpt_index_layout *layouts;   /* written when every tensor is
                                           packed */
    size_t nlayouts;
    const ckpt_index_packs *packs;      /* an index of a reused layout */
    ckpt_strbuf pack;       /* the record of the tensor being packed */
    sqlite3_stmt *st[NSTMT];
    ckpt_error *err;
} iwrite;

static int run(iwrite *w, int which, const ckpt_db_val *v, int n)
{
    return ckpt_db_run(w->st[which], v, n, w->path, "cannot write the index",
                       w->err);
}

/* A writer's name for messages. */
static const char *who(const char *writer)
{
    return writer ? writer : "unnamed";
}

/* A shard path must stay inside the checkpoint: relative, no "..". */
static int safe_relpath(const char *p)
{
    if (!p || !*p || *p == '/')
        return 0;
    for (const char *c = p; *c;) {
        size_t n = strcspn(c, "/");
        if (n == 2 && c[0] == '.' && c[1] == '.')
            return 0;
        c += n;
        c += *c == '/';
    }
    return 1;
}

static int cmp_file(const void *va, const void *vb)
{
    const file_ent *a = va, *b = vb;
    return strcmp(a->path, b->path);
}

static int stat_file(iwrite *w, file_ent *f)
{
    char full[PATH_MAX];
    int rc = ckpt_path_join(full, sizeof full, w->dir, f->path, w->err);
    if (rc)
        return rc;
    struct stat st;
    if (stat(full, &st))
        return ckpt_err_sys(w->err, -errno, "shard file %s (writer %s)",
                            full, who(f->writer));
    if (!S_ISREG(st.st_mode))
        return ckpt_err(w->err, -EINVAL, "shard file %s (writer %s) is not "
                        "a regular file", full, who(f->writer));
    f->size = (uint64_t)st.st_size;
    return 0;
}

/* The distinct shard files of all input pieces (kept or not), each named
 * after the first piece that names it, sorted by path, with sizes; a path
 * that is not safe is refused naming that first piece. */
static int collect_files(iwrite *w)
{
    const ckpt_pieces *tab = w->tab;
    size_t ns = (size_t)tab->nstr + 1;
    w->file_pos = malloc(ns * sizeof *w->file_pos);
    w->files = malloc(ns * sizeof *w->files);
    if (!w->file_pos || !w->files)
        return ckpt_err(w->err, -ENOMEM, "%s: out of memory", w->path);
    for (size_t k = 0; k < ns; k++)
        w->file_pos[k] = SIZE_MAX;
    for (size_t i = 0; i < tab->n; i++) {
        const ckpt_pieces_rec *p = &tab->v[i];
        uint32_t f = ckpt_pieces_file(tab, i);
        size_t id = f == CKPT_PIECES_NONE ? ns - 1 : f;
        if (w->file_pos[id] != SIZE_MAX)
            continue;
        const char *file = ckpt_pieces_str(tab, f);
        const char *writer = ckpt_pieces_str(tab, ckpt_pieces_writer(tab, i));
        if (!safe_relpath(file))
            return ckpt_err(w->err, -EINVAL, "tensor '%s' (writer %s): shard "
                            "path '%s' is not a relative path inside the "
                            "checkpoint", ckpt_pieces_str(tab, p->fqn),
                            who(writer), file ? file : "");
        w->file_pos[id] = 0;
        w->files[w->nfiles++] = (file_ent){ file, writer, id, 0 };
    }
    qsort(w->files, w->nfiles, sizeof *w->files, cmp_file);
    for (size_t k = 0; k < w->nfiles; k++) {
        w->file_pos[w->files[k].first] = k;
        int rc = stat_file(w, &w->files[k]);
        if (rc)
            return rc;
    }
    return 0;
}

static int write_files(iwrite *w)
{
    for (size_t i = 0; i < w->nfiles; i++) {
        const file_ent *f = &w->files[i];
        ckpt_db_val v[] = { CKPT_DB_INT(i + 1), CKPT_DB_TEXT(f->path),
                            CKPT_DB_INT(f->size), CKPT_DB_TEXT(f->writer) };
        int rc = run(w, ST_FILE, v, 4);
        if (rc)
            return rc;
    }
    return 0;
}

static int has_base(const ckpt_index_base *v, size_t n, int64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].id == id)
            return 1;
    return 0;
}

/* A delta frame (ref or xor) names one of the index's bases, any other
 * frame none; a ref stores no bytes. */
static int check_frame_base(iwrite *w, const ckpt_frame_rec *fr,
                            const char *fqn, size_t seq, size_t k)
{
    int delta = fr->codec == CKPT_CODEC_REF || fr->codec == CKPT_CODEC_XOR;
    if (delta ? !has_base(w->bases, w->nbases, fr->base) : fr->base != 0)
        return ckpt_err(w->err, -EINVAL, "tensor '%s' chunk %zu: frame %zu "
                        "(codec %s) names base %lld, which the save %s", fqn,
                        seq, k, ckpt_codec_name(fr->codec),
                        (long long)fr->base,
                        delta ? "does not have" : "cannot use");
    if (fr->codec == CKPT_CODEC_REF && fr->stored_size != 0)
        return ckpt_err(w->err, -EINVAL, "tensor '%s' chunk %zu: ref frame "
                        "%zu stores bytes", fqn, seq, k);
    return 0;
}

/* Frames must tile the piece's raw bytes in order, each non-empty, lie in
 * the shard file, and add up to the piece's stored byte count. */
static int check_frames(iwrite *w, size_t i, size_t seq, const file_ent *f,
                        uint32_t *mask)
{
    const ckpt_pieces_rec *p = &w->tab->v[i];
    ckpt_frame_rec one;
    const ckpt_frame_rec *frames = ckpt_pieces_frames(w->tab, i, &one);
    const char *fqn = ckpt_pieces_str(w->tab, p->fqn);
    const char *writer = who(ckpt_pieces_str(w->tab,
                                             ckpt_pieces_writer(w->tab, i)));
    uint64_t raw = 0, stored = 0, p_raw = ckpt_pieces_raw(w->tab, i),
             p_stored = ckpt_pieces_stored(w->tab, i);
    *mask = 0;
    for (size_t k = 0; k < ckpt_pieces_nframes(w->tab, i); k++) {
        const ckpt_frame_rec *fr = &frames[k];
        if (fr->raw_offset != raw || fr->raw_size == 0 ||
            fr->raw_size > p_raw - raw)
            return ckpt_err(w->err, -EINVAL, "tensor '%s' chunk %zu (writer "
                            "%s): frame %zu holds raw bytes [%llu,+%llu) but "
                            "the next frame must start at %llu of %llu",
                            fqn, seq, writer, k,
                            (unsigned long long)fr->raw_offset,
                            (unsigned long long)fr->raw_size,
                            (unsigned long long)raw,
                            (unsigned long long)p_raw);
        if (fr->file_offset > f->size || fr->stored_size > f->size -
                                                            fr->file_offset)
            return ckpt_err(w->err, -EIO, "tensor '%s' chunk %zu (writer %s): "
                            "frame %zu at bytes [%llu,+%llu) lies beyond the "
                            "end of %s (%llu bytes)", fqn, seq, writer, k,
                            (unsigned long long)fr->file_offset,
                            (unsigned long long)fr->stored_size, f->path,
                            (unsigned long long)f->size);
        if (fr->codec < 0 || fr->codec > MAX_CODEC_ID)
            return ckpt_err(w->err, -EINVAL, "tensor '%s' chunk %zu: frame "
                            "%zu has codec id %d (0..%d allowed)", fqn, seq,
                            k, fr->codec, MAX_CODEC_ID);
        int rc = check_frame_base(w, fr, fqn, seq, k);
        if (rc)
            return rc;
        *mask |= 1u << fr->codec;
        raw += fr->raw_size;
        stored += fr->stored_size;
    }
    if (raw != p_raw || stored != p_stored)
        return ckpt_err(w->err, -EINVAL, "tensor '%s' chunk %zu (writer %s): "
                        "frames hold %llu raw / %llu stored bytes, the piece "
                        "%llu / %llu", fqn, seq, writer,
                        (unsigned long long)raw, (unsigned long long)stored,
                        (unsigned long long)p_raw,
                        (unsigned long long)p_stored);
    return 0;
}

static int write_frames(iwrite *w, size_t i, int64_t chunk_id)
{
    ckpt_frame_rec one;
    const ckpt_frame_rec *frames = ckpt_pieces_frames(w->tab, i, &one);
    for (size_t k = 0; k < ckpt_pieces_nframes(w->tab, i); k++) {
        const ckpt_frame_rec *f = &frames[k];
        ckpt_db_val v[] = {
            CKPT_DB_INT(chunk_id), CKPT_DB_INT(k),
            CKPT_DB_INT(f->file_offset), CKPT_DB_INT(f->stored_size),
            CKPT_DB_INT(f->raw_offset), CKPT_DB_INT(f->raw_size),
            CKPT_DB_INT(f->codec), CKPT_DB_INT((int64_t)f->checksum),
            f->base ? CKPT_DB_INT(f->base) : CKPT_DB_TEXT(NULL),
        };
        int rc = run(w, ST_FRAME, v, w->version >= 2 ? 9 : 8);
        if (rc)
            return rc;
    }
    return 0;
}

/* Checks the frames of chunk c of plan tensor t (check_frames): sets
 * *mask to their codecs, adds them to *tmask, and sets *fi to its file's
 * position. */
static int check_chunk(iwrite *w, const ckpt_plan_tensor *pt, size_t c,
                       size_t *fi, uint32_t *mask, uint32_t *tmask)
{
    size_t i = pt->chunks[c];
    uint32_t f = ckpt_pieces_file(w->tab, i);
    *fi = w->file_pos[f == CKPT_PIECES_NONE ? w->tab->nstr : f];
    int rc = check_frames(w, i, c, &w->files[*fi], mask);
    *tmask |= rc ? 0 : *mask;
    return rc;
}

/* Writes chunk c of plan tensor t with its frames; adds its codecs to
 * *tmask. */
static int write_chunk(iwrite *w, size_t t, size_t c, int64_t chunk_id,
                       uint32_t *tmask)
{
    const ckpt_plan_tensor *pt = &w->plan->tensors[t];
    size_t i = pt->chunks[c], fi;
    uint32_t mask;
    int rc = check_chunk(w, pt, c, &fi, &mask, tmask);
    if (rc)
        return rc;
    char off[DIMS_JSON_CAP], size[DIMS_JSON_CAP];
    int64_t o[CKPT_MAX_DIMS];
    ckpt_shape_format_json(off, sizeof off, pt->ndim,
                           ckpt_pieces_offsets(w->tab, i, o));
    ckpt_shape_format_json(size, sizeof size, pt->ndim,
                           ckpt_pieces_sizes(w->tab, i));
    ckpt_db_val v[] = {
        CKPT_DB_INT(chunk_id), CKPT_DB_INT(t + 1), CKPT_DB_INT(c),
        CKPT_DB_TEXT(off), CKPT_DB_TEXT(size), CKPT_DB_INT(fi + 1),
        CKPT_DB_INT(ckpt_pieces_raw(w->tab, i)),
        CKPT_DB_INT(ckpt_pieces_stored(w->tab, i)),
        CKPT_DB_INT(ckpt_pieces_nframes(w->tab, i)), CKPT_DB_INT(mask),
        CKPT_DB_INT((int64_t)ckpt_pieces_hash(w->tab, i)),
        CKPT_DB_TEXT(ckpt_pieces_str(w->tab, ckpt_pieces_writer(w->tab, i))),
    };
    rc = run(w, ST_CHUNK, v, 12);
    return rc ? rc : write_frames(w, i, chunk_id);
}

/* Whether plan tensor t is packed: enough chunks, which form the regular
 * grid of chunk 0's sizes in row-major order, none with a delta frame;
 * block gets the grid's block sizes. */
static int tensor_grid(const iwrite *w, size_t t, int64_t *block)
{
    const ckpt_plan_tensor *pt = &w->plan->tensors[t];
    size_t nd = (size_t)pt->ndim;
    if (pt->nchunks < PACK_MIN_CHUNKS || pt->nchunks > UINT32_MAX ||
        pt->ndim < 1)
        return 0;
    memcpy(block, ckpt_pieces_sizes(w->tab, pt->chunks[0]), nd * 8);
    if (ckpt_grid_count(pt->ndim, pt->shape, block) != pt->nchunks)
        return 0;
    int64_t off[CKPT_MAX_DIMS], size[CKPT_MAX_DIMS], o[CKPT_MAX_DIMS];
    for (size_t c = 0; c < pt->nchunks; c++) {
        size_t i = pt->chunks[c];
        ckpt_grid_box(pt->ndim, pt->shape, block, c, off, size);
        if (memcmp(off, ckpt_pieces_offsets(w->tab, i, o), nd * 8) ||
            memcmp(size, ckpt_pieces_sizes(w->tab, i), nd * 8))
            return 0;
        ckpt_frame_rec one;
        const ckpt_frame_rec *fr = ckpt_pieces_frames(w->tab, i, &one);
        for (size_t k = 0; k < ckpt_pieces_nframes(w->tab, i); k++)
            if (fr[k].base || fr[k].codec == CKPT_CODEC_REF ||
                fr[k].codec == CKPT_CODEC_XOR)
                return 0;
    }
    return 1;
}

static int insert_pack(iwrite *w, size_t t, int ndim, const int64_t *block);

/* The packs row of plan tensor t, whose chunks form the grid `block`:
 * each chunk's frames checked and recorded in w->pack. */
static int write_pack(iwrite *w, size_t t, const int64_t *block,
                      uint32_t *tmask)
{
    const ckpt_plan_tensor *pt = &w->plan->tensors[t];
    w->pack.len = 0;
    for (size_t c = 0; c < pt->nchunks; c++) {
        size_t i = pt->chunks[c], fi;
        uint32_t mask;
        int rc = check_chunk(w, pt, c, &fi, &mask, tmask);
        if (rc)
            return rc;
        ckpt_frame_rec one;
        ckpt_pack_put(&w->pack, fi + 1, ckpt_pieces_frames(w->tab, i, &one),
                      ckpt_pieces_nframes(w->tab, i),
                      ckpt_pieces_hash(w->tab, i));
    }
    return insert_pack(w, t, pt->ndim, block);
}

/* The packs row of tensor t: its grid `block` and w->pack. */
static int insert_pack(iwrite *w, size_t t, int ndim, const int64_t *block)
{
    if (w->pack.oom)
        return ckpt_err(w->err, -ENOMEM, "%s: out of memory", w->path);
    char grid[DIMS_JSON_CAP];
    ckpt_shape_format_json(grid, sizeof grid, ndim, block);
    sqlite3_stmt *st = w->st[ST_PACK];
    int rc = sqlite3_bind_int64(st, 1, (int64_t)t + 1);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_text(st, 2, grid, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_blob64(st, 3, w->pack.p, w->pack.len,
                                 SQLITE_STATIC);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc != SQLITE_DONE)
        return ckpt_db_err(w->err, w->db, rc, w->path,
                           "cannot write the index");
    return 0;
}

/* A tensor's row: name, type, shape, and its chunks' totals. */
typedef struct tensor_rec {
    const char *fqn;
    ckpt_dtype dtype;
    int ndim;
    const int64_t *shape;
    uint64_t nchunks, stored, nframes;
    uint32_t mask;
} tensor_rec;

/* Inserts tensor t's row (id t + 1), its numel and nbytes computed. */
static int insert_tensor(iwrite *w, size_t t, const tensor_rec *r)
{
    char what[300];
    snprintf(what, sizeof what, "tensor '%.200s'", r->fqn);
    uint64_t numel, nbytes;
    int rc = ckpt_shape_numel(r->ndim, r->shape, &numel, what, w->err);
    if (!rc)
        rc = ckpt_shape_nbytes(r->dtype, r->ndim, r->shape, &nbytes, what,
                               w->err);
    if (rc)
        return rc;
    w->codec_mask |= r->mask;
    char shape[DIMS_JSON_CAP];
    ckpt_shape_format_json(shape, sizeof shape, r->ndim, r->shape);
    ckpt_db_val v[] = {
        CKPT_DB_INT(t + 1), CKPT_DB_TEXT(r->fqn),
        CKPT_DB_TEXT(ckpt_dtype_name(r->dtype)), CKPT_DB_TEXT(shape),
        CKPT_DB_INT(numel), CKPT_DB_INT(nbytes), CKPT_DB_INT(r->stored),
        CKPT_DB_INT(r->nchunks), CKPT_DB_INT(r->nframes),
        CKPT_DB_INT(r->mask),
    };
    return run(w, ST_TENSOR, v, 10);
}

/* Writes the chunks of plan tensor t (rows, or its packs row), then its
 * row with their totals. */
static int write_tensor(iwrite *w, size_t t, int64_t *chunk_id)
{
    const ckpt_plan_tensor *pt = &w->plan->tensors[t];
    uint64_t stored = 0, nframes = 0;
    uint32_t mask = 0;
    int64_t block[CKPT_MAX_DIMS];
    int packed = w->version >= 3 && tensor_grid(w, t, block);
    int rc = 0;
    for (size_t c = 0; !rc && c < pt->nchunks; c++) {
        stored += ckpt_pieces_stored(w->tab, pt->chunks[c]);
        nframes += ckpt_pieces_nframes(w->tab, pt->chunks[c]);
        if (!packed)
            rc = write_chunk(w, t, c, ++*chunk_id, &mask);
    }
    if (!rc && packed)
        rc = write_pack(w, t, block, &mask);
    tensor_rec row = { pt->fqn, pt->dtype, pt->ndim, pt->shape, pt->nchunks,
                       stored, nframes, mask };
    return rc ? rc : insert_tensor(w, t, &row);
}

/* Tensor t of a reused layout (w->packs): its packs row, from the
 * records fill() makes, and its row. */
static int write_packed_tensor(iwrite *w, size_t t)
{
    const ckpt_index_packed_tensor *pt = &w->packs->tensors[t];
    tensor_rec row = { pt->fqn, pt->dtype, pt->ndim, pt->shape, pt->nchunks,
                       0, 0, 0 };
    w->pack.len = 0;
    int rc = w->packs->fill(w->packs->arg, t, &w->pack, &row.stored,
                            &row.nframes, &row.mask, w->err);
    if (!rc)
        rc = insert_pack(w, t, pt->ndim, pt->grid);
    return rc ? rc : insert_tensor(w, t, &row);
}

static int write_layouts(iwrite *w)
{
    for (size_t i = 0; i < w->nlayouts; i++) {
        const ckpt_index_layout *l = &w->layouts[i];
        file_ent key = { .path = l->file }, *f = NULL;
        if (l->file && !(f = bsearch(&key, w->files, w->nfiles,
                                     sizeof *w->files, cmp_file)))
            return ckpt_err(w->err, -EINVAL, "plan %s: its shard %s is not "
                            "among the index's files", l->plan, l->file);
        ckpt_db_val v[] = {
            CKPT_DB_TEXT(l->plan), CKPT_DB_INT(l->pieces),
            CKPT_DB_INT((int64_t)l->digest),
            f ? CKPT_DB_INT(f - w->files + 1) : CKPT_DB_TEXT(NULL),
            CKPT_DB_BLOB(l->map ? (const void *)l->map : "", l->len),
        };
        int rc = run(w, ST_LAYOUT, v, 5);
        if (rc)
            return rc;
    }
    return 0;
}

static int write_codecs(iwrite *w)
{
    uint32_t mask = w->codec_mask | 1u << CKPT_CODEC_RAW |
                    1u << CKPT_CODEC_ZSTD;
    for (int c = 0; c <= MAX_CODEC_ID; c++) {
        if (!(mask & 1u << c))
            continue;
        ckpt_db_val v[] = { CKPT_DB_INT(c), CKPT_DB_TEXT(ckpt_codec_name(c)) };
        int rc = run(w, ST_CODEC, v, 2);
        if (rc)
            return rc;
    }
    return 0;
}

static int cmp_kv(const void *va, const void *vb)
{
    const ckpt_kv *a = *(const ckpt_kv *const *)va;
    const ckpt_kv *b = *(const ckpt_kv *const *)vb;
    int c = strcmp(a->key, b->key);
    return c ? c : (a > b) - (a < b);
}

/* Writes the metadata; a key given twice must have one value. */
static int write_meta(iwrite *w, const ckpt_kv *meta, size_t nmeta)
{
    const ckpt_kv **kv = malloc((nmeta ? nmeta : 1) * sizeof *kv);
    if (!kv)
        return ckpt_err(w->err, -ENOMEM, "%s: out of memory", w->path);
    int rc = 0;
    for (size_t i = 0; i < nmeta && !rc; i++) {
        kv[i] = &meta[i];
        if (!meta[i].key || !meta[i].value)
            rc = ckpt_err(w->err, -EINVAL, "metadata entry %zu has no %s", i,
                          meta[i].key ? "value" : "key");
    }
    if (!rc)
        qsort(kv, nmeta, sizeof *kv, cmp_kv);
    for (size_t i = 0; i < nmeta && !rc; i++) {
        if (i && !strcmp(kv[i]->key, kv[i - 1]->key)) {
            if (strcmp(kv[i]->value, kv[i - 1]->value))
                rc = ckpt_err(w->err, -EINVAL, "metadata key '%s': '%s' "
                              "(writer %s) vs '%s' (writer %s)", kv[i]->key,
                              kv[i - 1]->value, who(kv[i - 1]->writer),
                              kv[i]->value, who(kv[i]->writer));
            continue;
        }
        /* format_version says what the index is: its user_version. */
        char version[16];
        snprintf(version, sizeof version, "%d", w->version);
        int fv = !strcmp(kv[i]->key, "format_version");
        ckpt_db_val v[] = { CKPT_DB_TEXT(kv[i]->key),
                            CKPT_DB_TEXT(fv ? version : kv[i]->value) };
        rc = run(w, ST_META, v, 2);
    }
    free(kv);
    return rc;
}

static int write_bases(iwrite *w)
{
    for (size_t i = 0; i < w->nbases; i++) {
        const ckpt_index_base *b = &w->bases[i];
        ckpt_db_val v[] = { CKPT_DB_INT(b->id), CKPT_DB_TEXT(b->path),
                            CKPT_DB_TEXT(b->identity) };
        int rc = run(w, ST_BASE, v, 3);
        if (rc)
            return rc;
    }
    return 0;
}

/* The schema and statements: a delta checkpoint's (with bases) has the
 * bases table, frames.base and user_version 2; one with packed tensors
 * those and the packs table, user_version 3. */
static int write_schema(iwrite *w)
{
    int rc = ckpt_db_exec(w->db, INDEX_SCHEMA, w->path, w->err);
    if (!rc && w->version >= 2) {
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version=%d", w->version);
        rc = ckpt_db_exec(w->db, INDEX_DELTA_SCHEMA, w->path, w->err);
        if (!rc && w->version >= 3)
            rc = ckpt_db_exec(w->db, INDEX_PACK_SCHEMA, w->path, w->err);
        if (!rc && w->nlayouts)
            rc = ckpt_db_exec(w->db, INDEX_LAYOUT_SCHEMA, w->path, w->err);
        if (!rc)
            rc = ckpt_db_exec(w->db, sql, w->path, w->err);
    }
    for (int i = 0; !rc && i < NSTMT; i++) {
        const char *sql = INSERT_SQL[i];
        if (i == ST_FRAME && w->version >= 2)
            sql = INSERT_DELTA_FRAME;
        if ((i == ST_BASE && !w->nbases) ||
            (i == ST_PACK && w->version < 3) ||
            (i == ST_LAYOUT && !w->nlayouts))
            continue;
        rc = ckpt_db_prepare(w->db, sql, &w->st[i], w->path, w->err);
    }
    return rc ? rc : write_bases(w);
}

static int write_all(iwrite *w, const ckpt_kv *meta, size_t nmeta)
{
    /* A large page cache: the file is written once, in one transaction. */
    int rc = ckpt_db_exec(w->db, "PRAGMA cache_size=-65536; BEGIN", w->path,
                          w->err);
    if (!rc)
        rc = write_schema(w);
    if (!rc)
        rc = write_files(w);
    int64_t chunk_id = 0;
    size_t nt = w->packs ? w->packs->ntensors : w->plan->ntensors;
    for (size_t t = 0; !rc && t < nt; t++)
        rc = w->packs ? write_packed_tensor(w, t)
                      : write_tensor(w, t, &chunk_id);
    if (!rc)
        rc = write_codecs(w);
    if (!rc)
        rc = write_meta(w, meta, nmeta);
    if (!rc && w->nlayouts)
        rc = write_layouts(w);
    if (!rc)
        rc = ckpt_db_exec(w->db, INDEX_FRAMES_BY_RAW, w->path, w->err);
    if (!rc)
        rc = ckpt_db_exec(w->db, "COMMIT", w->path, w->err);
    return rc;
}

/* Finalizes the statements and closes the database. */
static int close_writer(iwrite *w, int rc)
{
    for (int i = 0; i < NSTMT; i++)
        sqlite3_finalize(w->st[i]);   /* errors were reported by the step */
    int crc = sqlite3_close(w->db);
    if (crc != SQLITE_OK && !rc)
        rc = ckpt_db_err(w->err, w->db, crc, w->path, "cannot close");
    free(w->files);
    free(w->file_pos);
    ckpt_strbuf_free(&w->pack);
    return rc;
}

int ckpt_index_write_pieces(const char *path, const char *ckpt_dir,
                            const ckpt_pieces *tab, const ckpt_plan *plan,
                            const ckpt_kv *meta, size_t nmeta, int sync,
                            ckpt_error *err)
{
    return ckpt_index_write_delta(path, ckpt_dir, tab, plan, meta, nmeta,
                                  NULL, 0, sync, err);
}

int ckpt_index_write_delta(const char *path, const char *ckpt_dir,
                           const ckpt_pieces *tab, const ckpt_plan *plan,
                           const ckpt_kv *meta, size_t nmeta,
                           const ckpt_index_base *bases, size_t nbases,
                           int sync, ckpt_error *err)
{
    return ckpt_index_write_laid(path, ckpt_dir, tab, plan, meta, nmeta,
                                 bases, nbases, NULL, 0, sync, err);
}

/* Writes w (its files collected or given) at w->path, fsynced when
 * `sync`; removed on failure. */
static int write_file(iwrite *w, const ckpt_kv *meta, size_t nmeta,
                      int sync)
{
    int rc = ckpt_db_create(&w->db, w->path, CKPT_INDEX_APP_ID, "OFF",
                            w->err);
    if (rc) {
        free(w->files);
        free(w->file_pos);
        return rc;
    }
    rc = write_all(w, meta, nmeta);
    rc = close_writer(w, rc);
    /* Written without a journal or a sync by SQLite (nobody sees the file
     * before it is linked to index.db): one fsync of the finished file. */
    if (!rc && sync)
        rc = ckpt_fsync_path(w->path, w->err);
    if (rc)
        unlink(w->path);
    return rc;
}

int ckpt_index_write_packs(const char *path, const char *ckpt_dir,
                           const ckpt_index_packs *src, const ckpt_kv *meta,
                           size_t nmeta, int sync, ckpt_error *err)
{
    iwrite w = { .path = path, .dir = ckpt_dir, .packs = src, .version = 3,
                 .layouts = src->layouts, .nlayouts = src->nlayouts,
                 .err = err };
    w.files = calloc(src->nfiles ? src->nfiles : 1, sizeof *w.files);
    if (!w.files)
        return ckpt_err(err, -ENOMEM, "%s: out of memory", path);
    int rc = 0;
    for (size_t k = 0; !rc && k < src->nfiles; k++) {
        const ckpt_index_file_name *f = &src->files[k];
        w.files[w.nfiles++] = (file_ent){ f->path, f->writer, 0, 0 };
        if (!safe_relpath(f->path) ||
            (k && strcmp(src->files[k - 1].path, f->path) >= 0))
            rc = ckpt_err(err, -EINVAL, "shard path '%s' (writer %s) is not "
                          "a relative path inside the checkpoint, or out of "
                          "order", f->path ? f->path : "", who(f->writer));
        if (!rc)
            rc = stat_file(&w, &w.files[k]);
    }
    if (rc) {
        free(w.files);
        return rc;
    }
    return write_file(&w, meta, nmeta, sync);
}

int ckpt_index_write_laid(const char *path, const char *ckpt_dir,
                          const ckpt_pieces *tab, const ckpt_plan *plan,
                          const ckpt_kv *meta, size_t nmeta,
                          const ckpt_index_base *bases, size_t nbases,
                          const ckpt_index_layout *layouts, size_t nlayouts,
                          int sync, ckpt_error *err)
{
    iwrite w = { .path = path, .dir = ckpt_dir, .tab = tab, .plan = plan,
                 .bases = bases, .nbases = nbases, .err = err };
    w.version = nbases ? 2 : 1;
    int64_t block[CKPT_MAX_DIMS];
    /* Layouts are kept only where every tensor is packed. */
    int all = nlayouts && !nbases && plan->ntensors;
    for (size_t t = 0; t < plan->ntensors && (w.version < 3 || all); t++) {
        if (tensor_grid(&w, t, block))
            w.version = 3;
        else
            all = 0;
    }
    if (all) {
        w.layouts = layouts;
        w.nlayouts = nlayouts;
    }
    int rc = collect_files(&w);
    if (rc) {
        free(w.files);
        free(w.file_pos);
        return rc;
    }
    return write_file(&w, meta, nmeta, sync);
}

int ckpt_index_write(const char *path, const char *ckpt_dir,
                     const ckpt_piece_rec *pieces, const ckpt_plan *plan,
                     const ckpt_kv *meta, size_t nmeta, int sync,
                     ckpt_error *err)
{
    ckpt_pieces tab;
    ckpt_pieces_init(&tab);
    int rc = 0;
    for (size_t i = 0; !rc && i < plan->npieces; i++)
        if (ckpt_pieces_add(&tab, &pieces[i]))
            rc = ckpt_err(err, -ENOMEM, "%s: out of memory", path);
    if (!rc)
        rc = ckpt_index_write_pieces(path, ckpt_dir, &tab, plan, meta, nmeta,
                                     sync, err);
    ckpt_pieces_free(&tab);
    return rc;
}

/* -------------------------------------------------------------- reading */

/* (id, position) pairs sorted by id: rows refer to files by id, which need
 * not be dense in an index written by another tool. */
typedef struct id_map {
    int64_t *pairs;
    size_t n, cap;
} id_map;

/* A packed tensor's record, kept once its chunks are loaded: its frames
 * are read from it when asked for. */
typedef struct pack_rec {
    uint8_t *blob;
    size_t len;
    size_t *pos;            /* per chunk: where its record starts */
    uint64_t n;
} pack_rec;

struct ckpt_index {
    sqlite3 *db;
    char *path;
    sqlite3_stmt *frames;   /* frames of one chunk, by seq */
    sqlite3_stmt *chunks;   /* chunks of one tensor, by seq */
    sqlite3_stmt *packs;    /* version 3: the packs row of one tensor */
    pack_rec *pk;           /* by tensor id, 1..npk - 1 */
    size_t npk;
    int has_totals;         /* tensors holds nframes and codec_mask */
    int version;            /* PRAGMA user_version: 2 with bases */
    id_map files;           /* files.id -> position in the loaded files */
};

/* -EIO "<path>: <what>" for a value the index should not hold. */
static int damaged(ckpt_error *err, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int damaged(ckpt_error *err, const char *path, const char *fmt, ...)
{
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return ckpt_err(err, -EIO, "%s: damaged index: %s", path, what);
}

/* "file:" URI for path, with the characters URIs give meaning escaped. */
static char *path_uri(const char *path)
{
    size_t n = strlen(path);
    char *uri = malloc(3 * n + 16), *o = uri;
    if (!uri)
        return NULL;
    o += sprintf(o, "file:%s", path[0] == '/' ? "//" : "");
    for (const char *p = path; *p; p++) {
        if (*p == '%' || *p == '?' || *p == '#')
            o += sprintf(o, "%%%02X", (unsigned)(unsigned char)*p);
        else
            *o++ = *p;
    }
    strcpy(o, "?immutable=1");
    return uri;
}

static int check_tables(ckpt_index *ix, ckpt_error *err)
{
    sqlite3_stmt *st;
    int rc = ckpt_db_prepare(ix->db, "SELECT 1 FROM sqlite_schema WHERE "
                             "type = 'table' AND name = ?", &st, ix->path,
                             err);
    for (size_t i = 0; !rc && i < sizeof INDEX_TABLES / sizeof *INDEX_TABLES;
         i++) {
        int src = sqlite3_bind_text(st, 1, INDEX_TABLES[i], -1, SQLITE_STATIC);
        if (src == SQLITE_OK)
            src = sqlite3_step(st);
        sqlite3_reset(st);
        if (src == SQLITE_DONE)
            rc = ckpt_err(err, -EINVAL, "%s is not a valid ckptfs index: "
                          "table '%s' is missing", ix->path, INDEX_TABLES[i]);
        else if (src != SQLITE_ROW)
            rc = ckpt_db_err(err, ix->db, src, ix->path, "cannot read schema");
    }
    sqlite3_finalize(st);
    return rc;
}

/* Whether the index has table `name`. */
static int has_table(ckpt_index *ix, const char *name)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(ix->db, "SELECT 1 FROM sqlite_schema WHERE "
                           "type = 'table' AND name = ?", -1, &st,
                           NULL) != SQLITE_OK)
        return 0;
    int yes = sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC) ==
                  SQLITE_OK && sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return yes;
}

/* Whether tensors has the nframes and codec_mask columns (indexes written
 * before they were added have not). */
static int has_totals(sqlite3 *db)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, "SELECT nframes, codec_mask FROM tensors",
                                -1, &st, NULL);
    sqlite3_finalize(st);
    return rc == SQLITE_OK;
}

/* The statements that later loads run, prepared once. */
static int prepare_reads(ckpt_index *ix, ckpt_error *err)
{
    int rc = ckpt_db_prepare(ix->db, ix->version >= 2
                             ? "SELECT f.seq, f.file_offset, "
                               "f.stored_size, f.raw_offset, f.raw_size, "
                               "f.codec, f.checksum, c.codec_mask, "
                               "coalesce(f.base, 0) "
                               "FROM frames AS f JOIN chunks AS c ON "
                               "c.id = f.chunk_id WHERE f.chunk_id = ? "
                               "ORDER BY f.seq"
                             : "SELECT f.seq, f.file_offset, "
                               "f.stored_size, f.raw_offset, f.raw_size, "
                               "f.codec, f.checksum, c.codec_mask, 0 "
                               "FROM frames AS f JOIN chunks AS c ON "
                               "c.id = f.chunk_id WHERE f.chunk_id = ? "
                               "ORDER BY f.seq", &ix->frames, ix->path, err);
    if (!rc)
        rc = ckpt_db_prepare(ix->db, "SELECT id, tensor_id, seq, offsets, "
                             "sizes, file_id, raw_bytes, stored_bytes, "
                             "nframes, codec_mask FROM chunks WHERE "
                             "tensor_id = ? ORDER BY seq", &ix->chunks,
                             ix->path, err);
    if (!rc && ix->version >= 3)
        rc = ckpt_db_prepare(ix->db, "SELECT grid, chunks FROM packs WHERE "
                             "tensor_id = ?", &ix->packs, ix->path, err);
    if (rc)
        return ckpt_err_wrap(err, -EINVAL, "%s is not a valid ckptfs index",
                             ix->path);
    return 0;
}

static int read_version(ckpt_index *ix, ckpt_error *err)
{
    sqlite3_stmt *st;
    int rc = ckpt_db_prepare(ix->db, "PRAGMA user_version", &st, ix->path,
                             err);
    if (rc)
        return rc;
    if (sqlite3_step(st) == SQLITE_ROW)
        ix->version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (ix->version >= 2 && !has_table(ix, "bases"))
        return damaged(err, ix->path, "format version %d without a bases "
                       "table", ix->version);
    if (ix->version >= 3 && !has_table(ix, "packs"))
        return damaged(err, ix->path, "format version %d without a packs "
                       "table", ix->version);
    return 0;
}

static int open_db(ckpt_index *ix, ckpt_error *err)
{
    struct stat st;
    if (stat(ix->path, &st))
        return ckpt_err_sys(err, -errno, "cannot open index %s", ix->path);
    if (S_ISDIR(st.st_mode))
        return ckpt_err(err, -EISDIR, "%s is a directory, not a ckptfs index",
                        ix->path);
    if (st.st_size == 0)
        return ckpt_err(err, -EINVAL, "%s is not a ckptfs index (empty file)",
                        ix->path);
    char *uri = path_uri(ix->path);
    if (!uri)
        return ckpt_err(err, -ENOMEM, "%s: out of memory", ix->path);
    int rc = sqlite3_open_v2(uri, &ix->db,
                             SQLITE_OPEN_READONLY | SQLITE_OPEN_URI |
                             SQLITE_OPEN_NOMUTEX, NULL);
    free(uri);
    if (rc != SQLITE_OK)
        return ckpt_db_err(err, ix->db, rc, ix->path, "cannot open index");
    rc = ckpt_db_check_id(ix->db, ix->path, CKPT_INDEX_APP_ID, err);
    if (!rc)
        rc = read_version(ix, err);
    if (!rc)
        rc = check_tables(ix, err);
    if (!rc) {
        ix->has_totals = has_totals(ix->db);
        rc = prepare_reads(ix, err);
    }
    return rc;
}

int ckpt_index_open(ckpt_index **out, const char *path, ckpt_error *err)
{
    *out = NULL;
    ckpt_index *ix = calloc(1, sizeof *ix);
    if (!ix || !(ix->path = strdup(path))) {
        free(ix);
        return ckpt_err(err, -ENOMEM, "%s: out of memory", path);
    }
    int rc = open_db(ix, err);
    if (rc) {
        ckpt_index_close(ix);
        return rc;
    }
    *out = ix;
    return 0;
}

void ckpt_index_close(ckpt_index *ix)
{
    if (!ix)
        return;
    sqlite3_finalize(ix->frames);
    sqlite3_finalize(ix->chunks);
    sqlite3_finalize(ix->packs);
    for (size_t i = 0; i < ix->npk; i++) {
        free(ix->pk[i].blob);
        free(ix->pk[i].pos);
    }
    free(ix->pk);
    sqlite3_close(ix->db);
    free(ix->files.pairs);
    free(ix->path);
    free(ix);
}

void ckpt_index_data_free(ckpt_index_data *d)
{
    if (!d)
        return;
    for (size_t t = 0; t < d->ntensors; t++) {
        free(d->tensors[t].fqn);
        free(d->tensors[t].chunks);
        free(d->tensors[t].dims);
        free(d->tensors[t].refused);
    }
    for (size_t i = 0; i < d->nfiles; i++)
        free(d->files[i].path);
    for (size_t i = 0; i < d->nmeta; i++) {
        free(d->meta[i].key);
        free(d->meta[i].value);
        free(d->meta[i].writer);
    }
    free(d->tensors);
    free(d->files);
    free(d->meta);
    memset(d, 0, sizeof *d);
}

int ckpt_index_tensor_name(ckpt_index_tensor *t, const char *fqn, int ndim,
                           const int64_t *shape)
{
    size_t len = strlen(fqn) + 1, at = (len + 7) & ~(size_t)7;
    size_t nd = ndim > 0 ? (size_t)ndim : 1;
    char *p = malloc(at + nd * sizeof *t->shape);
    if (!p)
        return -ENOMEM;
    memcpy(p, fqn, len);
    t->fqn = p;
    t->shape = (int64_t *)(void *)(p + at);
    t->shape[0] = 0;
    t->ndim = ndim;
    for (int k = 0; k < ndim; k++)
        t->shape[k] = shape[k];
    return 0;
}

/* Points chunk k's offsets and sizes at its place in dims. */
static void point_dims(ckpt_index_chunk *v, size_t n, int64_t *dims, int ndim)
{
    for (size_t k = 0; k < n; k++) {
        v[k].offsets = dims + 2 * (size_t)ndim * k;
        v[k].sizes = v[k].offsets + ndim;
    }
}

int ckpt_index_tensor_alloc_chunks(ckpt_index_tensor *t, size_t n)
{
    size_t per = 2 * (size_t)t->ndim;
    if (n > SIZE_MAX / sizeof *t->chunks / (per ? per : 1))
        return -ENOMEM;
    /* one allocation: the chunks, then their dims (t->dims stays NULL) */
    size_t nv = n ? n : 1, ndims = n * per;
    ckpt_index_chunk *v = calloc(1, nv * sizeof *v + ndims * sizeof(int64_t));
    if (!v)
        return -ENOMEM;
    point_dims(v, n, (int64_t *)(void *)(v + nv), t->ndim);
    free(t->chunks);
    free(t->dims);
    t->chunks = v;
    t->dims = NULL;
    t->nchunks = n;
    t->chunks_loaded = 1;
    return 0;
}

/* ---- loading: a query walked row by row ---- */

/* What the loader of metadata, files and tensors keeps besides *d. */
typedef struct loader {
    ckpt_index *ix;
    ckpt_index_data *d;
    size_t meta_cap, files_cap, tensors_cap;
    ckpt_error *err;
} loader;

static const char *col_text(sqlite3_stmt *st, int i)
{
    return (const char *)sqlite3_column_text(st, i);
}

/* Grows *arr to hold n + 1 elements of `size`. */
static int grow(void **arr, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? 2 * *cap : 8;
    void *p = realloc(*arr, nc * size);
    if (!p)
        return -ENOMEM;
    *arr = p;
    *cap = nc;
    return 0;
}

static int oom(ckpt_error *err, const ckpt_index *ix)
{
    return ckpt_err(err, -ENOMEM, "%s: out of memory", ix->path);
}

static int id_map_add(id_map *m, int64_t id, size_t pos)
{
    if (grow((void **)&m->pairs, &m->cap, m->n, 2 * sizeof *m->pairs))
        return -ENOMEM;
    m->pairs[2 * m->n] = id;
    m->pairs[2 * m->n + 1] = (int64_t)pos;
    m->n++;
    return 0;
}

static int cmp_id(const void *va, const void *vb)
{
    const int64_t *a = va, *b = vb;
    return (a[0] > b[0]) - (a[0] < b[0]);
}

static void id_map_sort(id_map *m)
{
    if (m->n)
        qsort(m->pairs, m->n, 2 * sizeof *m->pairs, cmp_id);
}

/* Position of `id`, or -1. */
static long id_map_find(const id_map *m, int64_t id)
{
    int64_t key[2] = { id, 0 };
    if (!m->n)
        return -1;
    const int64_t *hit = bsearch(key, m->pairs, m->n, 2 * sizeof *m->pairs,
                                 cmp_id);
    return hit ? (long)hit[1] : -1;
}

static int meta_row(void *arg, sqlite3_stmt *st)
{
    loader *l = arg;
    const char *k = col_text(st, 0), *v = col_text(st, 1);
    if (!k || !v)
        return damaged(l->err, l->ix->path, "metadata entry without %s",
                       k ? "value" : "key");
    ckpt_index_data *d = l->d;
    if (grow((void **)&d->meta, &l->meta_cap, d->nmeta, sizeof *d->meta))
        return oom(l->err, l->ix);
    ckpt_kv *m = d->meta;
    m[d->nmeta] = (ckpt_kv){ strdup(k), strdup(v), NULL };
    if (!m[d->nmeta].key || !m[d->nmeta].value) {
        free(m[d->nmeta].key);
        free(m[d->nmeta].value);
        return oom(l->err, l->ix);
    }
    d->nmeta++;
    return 0;
}

static int file_row(void *arg, sqlite3_stmt *st)
{
    loader *l = arg;
    ckpt_index_data *d = l->d;
    const char *path = col_text(st, 1);
    uint64_t size;
    if (!safe_relpath(path) || ckpt_db_col_u64(st, 2, &size))
        return damaged(l->err, l->ix->path, "file '%s' has a bad path or "
                       "size", path ? path : "NULL");
    if (grow((void **)&d->files, &l->files_cap, d->nfiles, sizeof *d->files) ||
        id_map_add(&l->ix->files, sqlite3_column_int64(st, 0), d->nfiles) ||
        !(d->files[d->nfiles].path = strdup(path)))
        return oom(l->err, l->ix);
    d->files[d->nfiles++].size = size;
    return 0;
}

/* A codec_mask value (of a tensor or a chunk) as the set it is. */
static int codec_set(ckpt_error *err, const char *path, const char *what,
                     uint64_t mask, unsigned *out)
{
    if (mask >> (MAX_CODEC_ID + 1))
        return ckpt_err(err, -ENOTSUP, "%s: %s uses codec ids this ckptfs "
                        "does not know (mask 0x%llx)", path, what,
                        (unsigned long long)mask);
    *out = (unsigned)mask;
    return 0;
}

/* The totals columns of a tensor row (index with totals): frames exactly
 * when there are bytes and codecs. */
static int tensor_totals(loader *l, sqlite3_stmt *st, ckpt_index_tensor *t)
{
    uint64_t mask;
    char what[300];
    snprintf(what, sizeof what, "tensor '%.200s'", t->fqn);
    if (ckpt_db_col_u64(st, 8, &t->nframes) ||
        ckpt_db_col_u64(st, 9, &mask) || t->nframes > t->nbytes ||
        (t->nframes > 0) != (t->nbytes > 0) || (t->nframes > 0) != (mask != 0))
        return damaged(l->err, l->ix->path, "%s: nframes or codec_mask are "
                       "wrong for its size", what);
    return codec_set(l->err, l->ix->path, what, mask, &t->codec_mask);
}

/* Checks a tensor row's dtype, shape, sizes and counts into t. */
static int tensor_fields(loader *l, sqlite3_stmt *st, ckpt_index_tensor *t)
{
    const char *path = l->ix->path, *dt = col_text(st, 2);
    char what[300];
    snprintf(what, sizeof what, "tensor '%.200s' shape", t->fqn);
    t->dtype = dt ? ckpt_dtype_parse(dt) : CKPT_DTYPE_INVALID;
    if (t->dtype == CKPT_DTYPE_INVALID)
        return damaged(l->err, path, "tensor '%s' has unknown dtype '%s'",
                       t->fqn, dt ? dt : "NULL");
    int ndim = t->ndim;
    uint64_t numel, nbytes, want_numel, want_nbytes, nchunks;
    if (ckpt_shape_numel(ndim, t->shape, &want_numel, what, l->err) ||
        ckpt_shape_nbytes(t->dtype, ndim, t->shape, &want_nbytes, what,
                          l->err))
        return damaged(l->err, path, "tensor '%s' shape is too large",
                       t->fqn);
    if (ckpt_db_col_u64(st, 4, &numel) || ckpt_db_col_u64(st, 5, &nbytes) ||
        ckpt_db_col_u64(st, 6, &t->stored_bytes) ||
        ckpt_db_col_u64(st, 7, &nchunks) || numel != want_numel ||
        nbytes != want_nbytes || nchunks > SIZE_MAX / 2)
        return damaged(l->err, path, "tensor '%s': numel, nbytes, "
                       "stored_bytes or nchunks disagree with its shape or "
                       "are negative", t->fqn);
    t->nbytes = nbytes;
    t->nchunks = (size_t)nchunks;
    return l->ix->has_totals ? tensor_totals(l, st, t) : 0;
}

/* A tensor's name: one the library would write (no '/', no empty or
 * dotted components that could make a path, no control characters; see
 * ckpt_fqn_check), and after the previous one in name order, so that
 * names are unique and a binary search finds them. */
static int tensor_name(loader *l, sqlite3_stmt *st, const char *fqn)
{
    ckpt_error e = { 0 };
    if ((size_t)sqlite3_column_bytes(st, 1) != strlen(fqn))
        return damaged(l->err, l->ix->path, "a tensor name holds a NUL byte "
                       "(after '%.200s')", fqn);
    if (ckpt_fqn_check(fqn, &e))
        return damaged(l->err, l->ix->path, "%s", e.msg);
    if (l->d->ntensors == 0)
        return 0;
    int c = strcmp(l->d->tensors[l->d->ntensors - 1].fqn, fqn);
    if (c == 0)
        return damaged(l->err, l->ix->path, "tensor name '%s' appears more "
                       "than once", fqn);
    if (c > 0)
        return damaged(l->err, l->ix->path, "tensor names are not in name "
                       "order ('%s' after '%s')", fqn,
                       l->d->tensors[l->d->ntensors - 1].fqn);
    return 0;
}

static int tensor_row(void *arg, sqlite3_stmt *st)
{
    loader *l = arg;
    ckpt_index_data *d = l->d;
    const char *fqn = col_text(st, 1);
    if (!fqn)
        return damaged(l->err, l->ix->path, "tensor without a name");
    int rc = tensor_name(l, st, fqn);
    if (rc)
        return rc;
    /* the shape first: the record is made as long as its rank needs */
    int64_t shape[CKPT_MAX_DIMS];
    char what[300];
    snprintf(what, sizeof what, "tensor '%.200s' shape", fqn);
    int ndim = ckpt_db_dims(col_text(st, 3), shape, l->ix->path, what,
                            l->err);
    if (ndim < 0)
        return ndim;
    size_t n = d->ntensors;
    if (grow((void **)&d->tensors, &l->tensors_cap, n, sizeof *d->tensors))
        return oom(l->err, l->ix);
    ckpt_index_tensor *t = &d->tensors[n];
    memset(t, 0, sizeof *t);
    t->id = sqlite3_column_int64(st, 0);
    if (ckpt_index_tensor_name(t, fqn, ndim, shape))
        return oom(l->err, l->ix);
    d->ntensors++;
    return tensor_fields(l, st, t);
}

/* The chunks of one tensor as they are read, checked and summed. */
typedef struct chunk_load {
    ckpt_index *ix;
    const ckpt_index_tensor *t;
    ckpt_index_chunk *v;
    int64_t *dims;          /* 2 * ndim per chunk */
    size_t n, cap, dims_cap;
    uint64_t stored, nframes;
    unsigned mask;
    ckpt_error *err;
} chunk_load;

/* offsets and sizes of a chunk row into off and size (its place in dims;
 * NULL for a scalar): ndim of the tensor, inside its shape, and not before
 * the previous chunk (prev) in row-major order. */
static int chunk_box(chunk_load *cl, sqlite3_stmt *st, const int64_t *prev,
                     int64_t *off, int64_t *size)
{
    const ckpt_index_tensor *t = cl->t;
    const char *path = cl->ix->path;
    char what[300];
    snprintf(what, sizeof what, "tensor '%.200s' chunk %zu", t->fqn, cl->n);
    int64_t o[CKPT_MAX_DIMS], s[CKPT_MAX_DIMS];
    int no = ckpt_db_dims(col_text(st, 3), o, path, what, cl->err);
    if (no < 0)
        return no;
    int ns = ckpt_db_dims(col_text(st, 4), s, path, what, cl->err);
    if (ns < 0)
        return ns;
    if (no != t->ndim || ns != t->ndim)
        return damaged(cl->err, path, "%s has %d/%d dims, the tensor %d",
                       what, no, ns, t->ndim);
    for (int d = 0; d < t->ndim; d++)
        if (o[d] > t->shape[d] || s[d] > t->shape[d] - o[d])
            return damaged(cl->err, path, "%s lies outside the tensor", what);
    if (prev) {
        int d = 0;
        while (d < t->ndim && prev[d] == o[d])
            d++;
        if (d < t->ndim && prev[d] > o[d])
            return damaged(cl->err, path, "%s is out of row-major order",
                           what);
    }
    if (t->ndim) {
        memcpy(off, o, (size_t)t->ndim * sizeof *o);
        memcpy(size, s, (size_t)t->ndim * sizeof *s);
    }
    return 0;
}

/* Sizes of a chunk row: raw bytes that match the box, at least one byte
 * per frame, frames (and codecs) exactly when there are bytes. */
static int chunk_sizes(chunk_load *cl, sqlite3_stmt *st, ckpt_index_chunk *c,
                       const int64_t *size, unsigned *codec_mask)
{
    const ckpt_index_tensor *t = cl->t;
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++)
        numel *= (uint64_t)size[d];   /* inside the checked shape */
    uint64_t mask;
    if (ckpt_db_col_u64(st, 6, &c->raw_bytes) ||
        ckpt_db_col_u64(st, 7, &c->stored_bytes) ||
        ckpt_db_col_u64(st, 8, &c->nframes) ||
        ckpt_db_col_u64(st, 9, &mask) ||
        c->raw_bytes != numel * ckpt_dtype_size(t->dtype) ||
        c->nframes > c->raw_bytes || (c->raw_bytes > 0) != (c->nframes > 0) ||
        (c->nframes > 0) != (mask != 0))
        return damaged(cl->err, cl->ix->path, "tensor '%s' chunk %zu: "
                       "raw_bytes, stored_bytes, nframes or codec_mask are "
                       "wrong for its sizes", t->fqn, cl->n);
    char what[300];
    snprintf(what, sizeof what, "tensor '%.200s' chunk %zu", t->fqn, cl->n);
    int rc = codec_set(cl->err, cl->ix->path, what, mask, codec_mask);
    if (rc)
        return rc;
    long fi = id_map_find(&cl->ix->files, sqlite3_column_int64(st, 5));
    if (fi < 0)
        return damaged(cl->err, cl->ix->path, "tensor '%s' chunk %zu names "
                       "no file in the files table", t->fqn, cl->n);
    c->file = (int)fi;
    return 0;
}

static int chunk_row(chunk_load *cl, sqlite3_stmt *st)
{
    const ckpt_index_tensor *t = cl->t;
    if (sqlite3_column_int64(st, 2) != (int64_t)cl->n)
        return damaged(cl->err, cl->ix->path, "tensor '%s': chunk seq %lld "
                       "where %zu was expected", t->fqn,
                       (long long)sqlite3_column_int64(st, 2), cl->n);
    size_t per = 2 * (size_t)t->ndim;
    if (grow((void **)&cl->v, &cl->cap, cl->n, sizeof *cl->v) ||
        (per && grow((void **)&cl->dims, &cl->dims_cap, cl->n,
                     per * sizeof *cl->dims)))
        return oom(cl->err, cl->ix);
    ckpt_index_chunk *c = &cl->v[cl->n];
    int64_t *off = per ? cl->dims + per * cl->n : NULL;
    int64_t *size = per ? off + t->ndim : NULL;
    const int64_t *prev = per && cl->n ? off - per : NULL;
    memset(c, 0, sizeof *c);
    c->id = sqlite3_column_int64(st, 0);
    unsigned mask = 0;
    int rc = chunk_box(cl, st, prev, off, size);
    if (!rc)
        rc = chunk_sizes(cl, st, c, size, &mask);
    if (rc)
        return rc;
    cl->mask |= mask;
    cl->nframes += c->nframes;
    cl->stored += c->stored_bytes;
    cl->n++;
    return 0;
}

/* The chunks add up to what the tensor records. */
static int check_totals(const chunk_load *cl)
{
    const ckpt_index_tensor *t = cl->t;
    uint64_t numel = ckpt_box_numel(t->ndim, t->shape);
    if (cl->n == 0 && numel > 0)   /* read as zeros, it would be lost */
        return damaged(cl->err, cl->ix->path, "tensor '%s': no chunk holds "
                       "any of its %llu elements", t->fqn,
                       (unsigned long long)numel);
    if (cl->n != t->nchunks || cl->stored != t->stored_bytes)
        return damaged(cl->err, cl->ix->path, "tensor '%s' has %zu chunks "
                       "storing %llu bytes; it records %zu chunks and %llu "
                       "bytes", t->fqn, cl->n, (unsigned long long)cl->stored,
                       t->nchunks, (unsigned long long)t->stored_bytes);
    if (cl->ix->has_totals &&
        (cl->nframes != t->nframes || cl->mask != t->codec_mask))
        return damaged(cl->err, cl->ix->path, "tensor '%s' has %llu frames "
                       "using codecs 0x%x; it records %llu frames and 0x%x",
                       t->fqn, (unsigned long long)cl->nframes, cl->mask,
                       (unsigned long long)t->nframes, t->codec_mask);
    return 0;
}

static int read_chunks(chunk_load *cl)
{
    sqlite3_stmt *st = cl->ix->chunks;
    int rc = 0, src = sqlite3_bind_int64(st, 1, cl->t->id);
    if (src == SQLITE_OK)
        while (!rc && (src = sqlite3_step(st)) == SQLITE_ROW)
            rc = chunk_row(cl, st);
    if (!rc && src != SQLITE_DONE)
        rc = ckpt_db_err(cl->err, cl->ix->db, src, cl->ix->path,
                         "cannot read chunks");
    sqlite3_reset(st);
    return rc ? rc : check_totals(cl);
}

/* ---- packed tensors (version 3, format/chunkpack.h) ---- */

/* The id a packed chunk gets: negative, so that it is no chunks.id, and
 * holding its tensor's id and its place. */
static int64_t pack_chunk_id(int64_t tensor_id, uint64_t k)
{
    return -(int64_t)(((uint64_t)tensor_id << 32) | k) - 1;
}

/* The slot of tensor id `id` in ix->pk, grown to hold it (ids of a
 * version 3 index are 1..ntensors). */
static pack_rec *pack_slot(ckpt_index *ix, int64_t id, size_t ntensors,
                           ckpt_error *err)
{
    if (id < 1 || (uint64_t)id > ntensors || id > INT32_MAX) {
        damaged(err, ix->path, "packed tensor id %lld is not in 1..%zu",
                (long long)id, ntensors);
        return NULL;
    }
    if (!ix->pk) {
        if (!(ix->pk = calloc(ntensors + 1, sizeof *ix->pk))) {
            oom(err, ix);
            return NULL;
        }
        ix->npk = ntensors + 1;
    }
    return (size_t)id < ix->npk ? &ix->pk[id] : NULL;
}

/* The chunks of packed tensor cl->t from its grid and record: the boxes
 * computed, each chunk's record read and checked against its box. */
static int unpack_chunks(chunk_load *cl, const int64_t *block,
                         const uint8_t *blob, size_t len, size_t *pos)
{
    const ckpt_index_tensor *t = cl->t;
    size_t at = 0, itemsize = ckpt_dtype_size(t->dtype);
    for (; cl->n < t->nchunks; cl->n++) {
        ckpt_index_chunk *c = &cl->v[cl->n];
        ckpt_pack_chunk pc;
        pos[cl->n] = at;
        ckpt_grid_box(t->ndim, t->shape, block, cl->n, c->offsets, c->sizes);
        long fi = -1;
        if (ckpt_pack_get(blob, len, &at, &pc, NULL, 0) == 0)
            fi = id_map_find(&cl->ix->files, pc.file_id);
        if (fi < 0 || pc.raw_bytes != ckpt_box_numel(t->ndim, c->sizes) *
                                          itemsize ||
            pc.codec_mask & (1u << CKPT_CODEC_REF | 1u << CKPT_CODEC_XOR))
            return damaged(cl->err, cl->ix->path, "tensor '%s' packed chunk "
                           "%zu: its record is cut short, names no file, "
                           "holds delta frames or not the bytes of its box",
                           t->fqn, cl->n);
        c->id = pack_chunk_id(t->id, cl->n);
        c->file = (int)fi;
        c->nframes = pc.nframes;
        c->raw_bytes = pc.raw_bytes;
        c->stored_bytes = pc.stored_bytes;
        cl->mask |= pc.codec_mask;
        cl->nframes += pc.nframes;
        cl->stored += pc.stored_bytes;
    }
    if (at != len)
        return damaged(cl->err, cl->ix->path, "tensor '%s': its packed "
                       "chunks end before their record", t->fqn);
    return check_totals(cl);
}

/* Loads packed tensor cl->t from its packs row (grid and record) into a
 * new chunk array, and keeps the record for its frames. */
static int load_pack(chunk_load *cl, size_t ntensors, sqlite3_stmt *st)
{
    ckpt_index_tensor *t = (ckpt_index_tensor *)cl->t;
    const char *path = cl->ix->path;
    char what[300];
    snprintf(what, sizeof what, "tensor '%.200s' grid", t->fqn);
    int64_t block[CKPT_MAX_DIMS];
    int nd = ckpt_db_dims(col_text(st, 0), block, path, what, cl->err);
    if (nd < 0)
        return nd;
    if (nd != t->ndim || t->ndim < 1 || t->nchunks > UINT32_MAX ||
        ckpt_grid_count(nd, t->shape, block) != t->nchunks)
        return damaged(cl->err, path, "%s is not a grid of its %zu chunks",
                       what, t->nchunks);
    pack_rec *pk = pack_slot(cl->ix, t->id, ntensors, cl->err);
    if (!pk)
        return -EIO;
    size_t len = (size_t)sqlite3_column_bytes(st, 1);
    const uint8_t *blob = sqlite3_column_blob(st, 1);
    pack_rec nk = { malloc(len ? len : 1), len,
                    malloc(t->nchunks * sizeof *nk.pos), t->nchunks };
    int rc = nk.blob && nk.pos ? ckpt_index_tensor_alloc_chunks(t, t->nchunks)
                               : -ENOMEM;
    if (rc)
        rc = oom(cl->err, cl->ix);
    else {
        if (len)
            memcpy(nk.blob, blob, len);
        cl->v = t->chunks;
        rc = unpack_chunks(cl, block, nk.blob, len, nk.pos);
    }
    if (rc) {
        free(nk.blob);
        free(nk.pos);
        free(t->chunks);
        free(t->dims);
        t->chunks = NULL;
        t->dims = NULL;
        t->chunks_loaded = 0;
        return rc;
    }
    free(pk->blob);
    free(pk->pos);
    *pk = nk;
    return 0;
}

/* Loads tensor t's chunks from its packs row when it has one: 1 when it
 * had, 0 when it has none (its chunks are rows), or an error. */
static int try_pack(ckpt_index *ix, ckpt_index_data *d, size_t t,
                    ckpt_error *err)
{
    if (ix->version < 3)
        return 0;
    sqlite3_stmt *st = ix->packs;
    chunk_load cl = { .ix = ix, .t = &d->tensors[t], .err = err };
    int rc = 0, src = sqlite3_bind_int64(st, 1, d->tensors[t].id);
    if (src == SQLITE_OK)
        src = sqlite3_step(st);
    if (src == SQLITE_ROW)
        rc = load_pack(&cl, d->ntensors, st);
    else if (src != SQLITE_DONE)
        rc = ckpt_db_err(err, ix->db, src, ix->path, "cannot read packs");
    sqlite3_reset(st);
    return rc ? rc : src == SQLITE_ROW;
}

/* The frames of packed chunk `chunk_id` from its tensor's record. */
static int pack_frames(ckpt_index *ix, int64_t chunk_id,
                       uint64_t expect_frames, uint64_t raw_bytes,
                       ckpt_frame_rec *f, ckpt_error *err)
{
    uint64_t key = (uint64_t)(-(chunk_id + 1));
    uint64_t tid = key >> 32, k = key & UINT32_MAX;
    const pack_rec *pk = tid < ix->npk ? &ix->pk[tid] : NULL;
    if (!pk || !pk->blob || k >= pk->n)
        return damaged(err, ix->path, "packed chunk %llu of tensor id %llu "
                       "is not loaded", (unsigned long long)k,
                       (unsigned long long)tid);
    size_t at = pk->pos[k];
    ckpt_pack_chunk pc;
    int bad = ckpt_pack_get(pk->blob, pk->len, &at, &pc, f, expect_frames) ||
              pc.nframes != expect_frames || pc.raw_bytes != raw_bytes;
    for (uint64_t i = 0; !bad && i < pc.nframes; i++)
        bad = f[i].raw_size > CKPT_MAX_FRAME_SIZE ||
              f[i].stored_size > ckpt_codec_bound((size_t)f[i].raw_size);
    if (bad)
        return damaged(err, ix->path, "tensor id %llu packed chunk %llu: its "
                       "frames do not tile its %llu raw bytes in %llu frames "
                       "of at most 1 GiB", (unsigned long long)tid,
                       (unsigned long long)k, (unsigned long long)raw_bytes,
                       (unsigned long long)expect_frames);
    return 0;
}

int ckpt_index_load_chunks(ckpt_index *ix, ckpt_index_data *d, size_t t,
                           ckpt_error *err)
{
    ckpt_index_tensor *tt = &d->tensors[t];
    if (tt->chunks_loaded)
        return 0;
    int rc = try_pack(ix, d, t, err);
    if (rc)
        return rc < 0 ? rc : 0;
    chunk_load cl = { .ix = ix, .t = tt, .err = err };
    rc = read_chunks(&cl);
    if (rc == 0 && !cl.v && !(cl.v = calloc(1, sizeof *cl.v)))
        rc = oom(err, ix);
    if (rc == 0 && !cl.dims && !(cl.dims = calloc(1, sizeof *cl.dims)))
        rc = oom(err, ix);
    if (rc) {
        free(cl.v);
        free(cl.dims);
        return rc;
    }
    point_dims(cl.v, cl.n, cl.dims, tt->ndim);
    tt->chunks = cl.v;
    tt->dims = cl.dims;
    if (!ix->has_totals) {
        tt->nframes = cl.nframes;
        tt->codec_mask = cl.mask;
    }
    tt->chunks_loaded = 1;
    return 0;
}

/* ckpt_index_tensor_files of a packed tensor: 1 when tt is packed (fn
 * called for each of its chunks' files), 0 when it is not, or an error. */
static int pack_files(ckpt_index *ix, const ckpt_index_tensor *tt,
                      void (*fn)(void *arg, size_t pos), void *arg,
                      ckpt_error *err)
{
    if (ix->version < 3)
        return 0;
    sqlite3_stmt *st = ix->packs;
    int rc = 0, src = sqlite3_bind_int64(st, 1, tt->id);
    if (src == SQLITE_OK)
        src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        const uint8_t *blob = sqlite3_column_blob(st, 1);
        size_t len = (size_t)sqlite3_column_bytes(st, 1), at = 0;
        for (size_t c = 0; !rc && c < tt->nchunks; c++) {
            ckpt_pack_chunk pc;
            long pos = -1;
            if (ckpt_pack_get(blob, len, &at, &pc, NULL, 0) == 0)
                pos = id_map_find(&ix->files, pc.file_id);
            if (pos < 0)
                rc = damaged(err, ix->path, "tensor '%s' packed chunk %zu: "
                             "its record is cut short or names no file",
                             tt->fqn, c);
            else
                fn(arg, (size_t)pos);
        }
    } else if (src != SQLITE_DONE)
        rc = ckpt_db_err(err, ix->db, src, ix->path, "cannot read packs");
    sqlite3_reset(st);
    return rc ? rc : src == SQLITE_ROW;
}

int ckpt_index_tensor_files(ckpt_index *ix, const ckpt_index_data *d,
                            size_t t, void (*fn)(void *arg, size_t pos),
                            void *arg, ckpt_error *err)
{
    const ckpt_index_tensor *tt = &d->tensors[t];
    if (tt->chunks_loaded) {
        for (size_t c = 0; c < tt->nchunks; c++)
            fn(arg, (size_t)tt->chunks[c].file);
        return 0;
    }
    int prc = pack_files(ix, tt, fn, arg, err);
    if (prc)
        return prc < 0 ? prc : 0;
    sqlite3_stmt *st;
    int src = sqlite3_prepare_v2(ix->db, "SELECT DISTINCT file_id FROM "
                                 "chunks WHERE tensor_id = ?", -1, &st, NULL);
    if (src != SQLITE_OK)
        return ckpt_db_err(err, ix->db, src, ix->path,
                           "cannot list a tensor's files");
    int rc = 0;
    src = sqlite3_bind_int64(st, 1, tt->id);
    while (!rc && src == SQLITE_OK && (src = sqlite3_step(st)) == SQLITE_ROW) {
        long pos = id_map_find(&ix->files, sqlite3_column_int64(st, 0));
        if (pos < 0)
            rc = damaged(err, ix->path, "tensor '%s': a chunk names file id "
                         "%lld, which is not in files", tt->fqn,
                         (long long)sqlite3_column_int64(st, 0));
        else {
            fn(arg, (size_t)pos);
            src = SQLITE_OK;
        }
    }
    if (!rc && src != SQLITE_DONE)
        rc = ckpt_db_err(err, ix->db, src, ix->path,
                         "cannot list a tensor's files");
    sqlite3_finalize(st);
    return rc;
}

static int load_rows(loader *l, const char *sql,
                     int (*fn)(void *arg, sqlite3_stmt *st))
{
    return ckpt_db_each(l->ix->db, sql, l->ix->path, fn, l, l->err);
}

int ckpt_index_load_tensors(ckpt_index *ix, ckpt_index_data *out,
                            ckpt_error *err)
{
    memset(out, 0, sizeof *out);
    free(ix->files.pairs);
    memset(&ix->files, 0, sizeof ix->files);
    loader l = { .ix = ix, .d = out, .err = err };
    int rc = load_rows(&l, "SELECT key, value FROM meta ORDER BY key",
                       meta_row);
    if (!rc)
        rc = load_rows(&l, "SELECT id, path, size FROM files ORDER BY path",
                       file_row);
    id_map_sort(&ix->files);
    if (!rc)
        rc = load_rows(&l, ix->has_totals
                       ? "SELECT id, fqn, dtype, shape, numel, nbytes, "
                         "stored_bytes, nchunks, nframes, codec_mask "
                         "FROM tensors ORDER BY fqn"
                       : "SELECT id, fqn, dtype, shape, numel, nbytes, "
                         "stored_bytes, nchunks FROM tensors ORDER BY fqn",
                       tensor_row);
    /* Without the totals in tensors, they come from the chunks. */
    for (size_t t = 0; !rc && !ix->has_totals && t < out->ntensors; t++)
        rc = ckpt_index_load_chunks(ix, out, t, err);
    if (rc)
        ckpt_index_data_free(out);
    return rc;
}

int ckpt_index_load(ckpt_index *ix, ckpt_index_data *out, ckpt_error *err)
{
    int rc = ckpt_index_load_tensors(ix, out, err);
    for (size_t t = 0; !rc && t < out->ntensors; t++)
        rc = ckpt_index_load_chunks(ix, out, t, err);
    if (rc)
        ckpt_index_data_free(out);
    return rc;
}

/* "tensor 'x' chunk 3" for chunk_id, for messages (best effort). */
static void chunk_label(ckpt_index *ix, int64_t chunk_id, char *buf,
                        size_t cap)
{
    snprintf(buf, cap, "chunk id %lld", (long long)chunk_id);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(ix->db, "SELECT t.fqn, c.seq FROM chunks AS c "
                           "JOIN tensors AS t ON t.id = c.tensor_id "
                           "WHERE c.id = ?", -1, &st, NULL) != SQLITE_OK)
        return;
    if (sqlite3_bind_int64(st, 1, chunk_id) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW && col_text(st, 0))
        snprintf(buf, cap, "tensor '%.300s' chunk %lld", col_text(st, 0),
                 (long long)sqlite3_column_int64(st, 1));
    sqlite3_finalize(st);
}

/* Checks frame row k against the bytes tiled so far (*raw) and the
 * chunk's codec_mask. */
static int frame_row(sqlite3_stmt *st, uint64_t k, uint64_t raw_bytes,
                     uint64_t *raw, ckpt_frame_rec *f)
{
    int64_t seq = sqlite3_column_int64(st, 0), codec;
    if (ckpt_db_col_u64(st, 1, &f->file_offset) ||
        ckpt_db_col_u64(st, 2, &f->stored_size) ||
        ckpt_db_col_u64(st, 3, &f->raw_offset) ||
        ckpt_db_col_u64(st, 4, &f->raw_size) ||
        seq < 0 || (uint64_t)seq != k)
        return -1;
    codec = sqlite3_column_int64(st, 5);
    if (codec < 0 || codec > MAX_CODEC_ID ||
        !(sqlite3_column_int64(st, 7) & (int64_t)1 << codec))
        return -1;
    f->codec = (int)codec;
    f->checksum = (uint64_t)sqlite3_column_int64(st, 6);
    f->base = sqlite3_column_int64(st, 8);
    int delta = codec == CKPT_CODEC_REF || codec == CKPT_CODEC_XOR;
    if (delta ? f->base <= 0 : f->base != 0)
        return -1;
    if (codec == CKPT_CODEC_REF && f->stored_size != 0)
        return -1;
    size_t bound = ckpt_codec_bound((size_t)f->raw_size) +
                   (codec == CKPT_CODEC_XOR ? 2 : 0);
    if (f->raw_offset != *raw || f->raw_size == 0 ||
        f->raw_size > raw_bytes - *raw || f->raw_size > CKPT_MAX_FRAME_SIZE ||
        f->stored_size > bound ||
        f->stored_size > (uint64_t)INT64_MAX - f->file_offset)
        return -1;
    *raw += f->raw_size;
    return 0;
}

int ckpt_index_load_frames(ckpt_index *ix, int64_t chunk_id,
                           uint64_t expect_frames, uint64_t raw_bytes,
                           ckpt_frame_rec **frames, ckpt_error *err)
{
    *frames = NULL;
    char label[400];
    if (expect_frames > raw_bytes ||
        expect_frames > SIZE_MAX / sizeof **frames) {
        chunk_label(ix, chunk_id, label, sizeof label);
        return damaged(err, ix->path, "%s: %llu frames for %llu raw bytes",
                       label, (unsigned long long)expect_frames,
                       (unsigned long long)raw_bytes);
    }
    ckpt_frame_rec *f = malloc((expect_frames ? expect_frames : 1) *
                               sizeof *f);
    if (!f)
        return ckpt_err(err, -ENOMEM, "%s: out of memory", ix->path);
    if (chunk_id < 0) {
        int prc = pack_frames(ix, chunk_id, expect_frames, raw_bytes, f, err);
        if (prc)
            free(f);
        else
            *frames = f;
        return prc;
    }
    uint64_t k = 0, raw = 0;
    int bad = 0;
    int src = sqlite3_bind_int64(ix->frames, 1, chunk_id);
    if (src == SQLITE_OK)
        while ((src = sqlite3_step(ix->frames)) == SQLITE_ROW) {
            if (k == expect_frames ||
                frame_row(ix->frames, k, raw_bytes, &raw, &f[k])) {
                bad = 1;
                break;
            }
            k++;
        }
    int rc = 0;
    if (!bad && src != SQLITE_DONE)
        rc = ckpt_db_err(err, ix->db, src, ix->path, "cannot read frames");
    sqlite3_reset(ix->frames);
    if (!rc && (bad || k != expect_frames || raw != raw_bytes)) {
        chunk_label(ix, chunk_id, label, sizeof label);
        rc = damaged(err, ix->path, "%s: its frames do not tile its %llu raw "
                     "bytes in %llu frames of at most 1 GiB, or use codecs "
                     "its codec_mask does not list (frame %llu is wrong)",
                     label,
                     (unsigned long long)raw_bytes,
                     (unsigned long long)expect_frames,
                     (unsigned long long)k);
    }
    if (rc) {
        free(f);
        return rc;
    }
    *frames = f;
    return 0;
}

int ckpt_index_version(const ckpt_index *ix)
{
    return ix->version;
}

static void bases_free(ckpt_index_base *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].path);
        free(v[i].identity);
    }
    free(v);
}

void ckpt_index_bases_free(ckpt_index_base *v, size_t n)
{
    bases_free(v, n);
}

typedef struct bases_load {
    ckpt_index *ix;
    ckpt_index_base *v;
    size_t n, cap;
    ckpt_error *err;
} bases_load;

static int base_row(void *arg, sqlite3_stmt *st)
{
    bases_load *l = arg;
    int64_t id = sqlite3_column_int64(st, 0);
    const char *path = col_text(st, 1), *ident = col_text(st, 2);
    if (id <= 0 || !path || !*path || !ident || !*ident)
        return damaged(l->err, l->ix->path, "base %lld has no path or "
                       "identity", (long long)id);
    if (grow((void **)&l->v, &l->cap, l->n, sizeof *l->v))
        return oom(l->err, l->ix);
    ckpt_index_base *b = &l->v[l->n];
    b->id = id;
    b->path = strdup(path);
    b->identity = strdup(ident);
    l->n++;
    if (!b->path || !b->identity)
        return oom(l->err, l->ix);
    return 0;
}

int ckpt_index_bases(ckpt_index *ix, ckpt_index_base **out, size_t *n,
                     ckpt_error *err)
{
    *out = NULL;
    *n = 0;
    if (ix->version < 2)
        return 0;
    bases_load l = { .ix = ix, .err = err };
    int rc = ckpt_db_each(ix->db, "SELECT id, path, identity FROM bases "
                          "ORDER BY id", ix->path, base_row, &l, err);
    if (rc) {
        bases_free(l.v, l.n);
        return rc;
    }
    *out = l.v;
    *n = l.n;
    return 0;
}
