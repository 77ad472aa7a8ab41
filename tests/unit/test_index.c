/*
 * test_index.c - unit tests of the SQLite files of a checkpoint
 * (src/format/index.c, src/format/planfile.c): an index written from a
 * hand-made plan and loaded back field by field, its frames, the refusals of
 * write, open, load and load_frames, and local plan files (create, append,
 * read). Uses only the SQLite C API (no sqlite3 command-line tool).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "format/db.h"
#include "format/index.h"
#include "format/planfile.h"
#include "planedit.h"
#include "format/model.h"
#include "format/plan.h"
#include "unit_util.h"

#define DIMS(...) ((const int64_t[]){ __VA_ARGS__ })
#define BIG_SUM 0xfedcba9876543210ull   /* a checksum with the top bit set */

/* ------------------------------------------------------------ fixtures */

typedef struct fixture {
    char dir[256];           /* the checkpoint directory */
    char index[PATH_MAX];    /* dir/index.db */
    ckpt_manifest m;
    ckpt_plan plan;
} fixture;

static void make_dir(fixture *fx, const char *name_suffix)
{
    char tmpl[sizeof fx->dir];
    snprintf(tmpl, sizeof tmpl, "/tmp/ckpt_test_index%s.XXXXXX",
             name_suffix);
    ck_assert_ptr_nonnull(mkdtemp(tmpl));
    snprintf(fx->dir, sizeof fx->dir, "%s", tmpl);
    snprintf(fx->index, sizeof fx->index, "%s/index.db", fx->dir);
    char data[PATH_MAX];
    snprintf(data, sizeof data, "%s/data", fx->dir);
    ck_assert_int_eq(mkdir(data, 0755), 0);
}

static void write_file(const char *dir, const char *rel, size_t size)
{
    char path[PATH_MAX];
    ck_assert_uint_lt(strlen(dir) + strlen(rel), sizeof path - 2);
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    for (size_t i = 0; i < size; i++)
        fputc((int)(i & 0xff), f);
    ck_assert_int_eq(fclose(f), 0);
}

static void rm_tree(const char *dir)
{
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static ckpt_piece_rec *piece(ckpt_manifest *m, const char *fqn,
                             const char *writer, ckpt_dtype dt, int ndim,
                             const int64_t *shape, const int64_t *off,
                             const int64_t *size)
{
    ckpt_piece_rec *p = ckpt_manifest_add_piece(m);
    ck_assert_ptr_nonnull(p);
    p->fqn = strdup(fqn);
    p->writer = strdup(writer);
    char file[64];
    snprintf(file, sizeof file, "data/%s.shard", writer);
    p->file = strdup(file);
    p->dtype = dt;
    p->ndim = ndim;
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        p->shape[d] = shape[d];
        p->offsets[d] = off ? off[d] : 0;
        p->sizes[d] = size ? size[d] : shape[d];
        n *= (uint64_t)p->sizes[d];
    }
    p->raw_bytes = n * ckpt_dtype_size(dt);
    p->data_hash = BIG_SUM ^ n;
    return p;
}

static void frame(ckpt_piece_rec *p, uint64_t file_off, uint64_t stored,
                  uint64_t raw_off, uint64_t raw, int codec, uint64_t sum)
{
    ckpt_frame_rec f = { file_off, stored, raw_off, raw, sum, codec, 0 };
    ck_assert_int_eq(ckpt_piece_add_frame(p, &f), 0);
    p->stored_bytes += stored;
}

/* Two writers' pieces of five tensors (a 2-D tensor in two row blocks, a
 * replicated bias, a scalar, an empty tensor, a byte object); shard files
 * data/rank0.shard (56 bytes) and data/rank1.shard (65 bytes). */
static void make_pieces(fixture *fx)
{
    ckpt_manifest *m = &fx->m;
    ckpt_manifest_init(m);
    ckpt_piece_rec *p;
    p = piece(m, "model.w", "rank0", CKPT_F32, 2, DIMS(4, 6), DIMS(0, 0),
              DIMS(2, 6));
    frame(p, 0, 20, 0, 32, CKPT_CODEC_ZSTD, BIG_SUM);
    frame(p, 20, 16, 32, 16, CKPT_CODEC_RAW, 0x1111);
    p = piece(m, "bias", "rank0", CKPT_BF16, 1, DIMS(6), NULL, NULL);
    frame(p, 36, 12, 0, 12, CKPT_CODEC_RAW, 0x2222);
    p = piece(m, "step", "rank0", CKPT_I64, 0, NULL, NULL, NULL);
    frame(p, 48, 8, 0, 8, CKPT_CODEC_RAW, 0x3333);
    p = piece(m, "model.w", "rank1", CKPT_F32, 2, DIMS(4, 6), DIMS(2, 0),
              DIMS(2, 6));
    frame(p, 0, 48, 0, 48, CKPT_CODEC_RAW, 0x4444);
    p = piece(m, "bias", "rank1", CKPT_BF16, 1, DIMS(6), NULL, NULL);
    frame(p, 48, 12, 0, 12, CKPT_CODEC_RAW, 0x2222);
    piece(m, "empty", "rank1", CKPT_F32, 2, DIMS(0, 3), NULL, NULL);
    p = piece(m, "blob", "rank1", CKPT_BYTES, 1, DIMS(5), NULL, NULL);
    frame(p, 60, 5, 0, 5, CKPT_CODEC_RAW, 0x5555);
    ck_assert_int_eq(ckpt_manifest_set_meta(m, "step", "100", "rank0"), 0);
    ck_assert_int_eq(ckpt_manifest_set_meta(m, "note", "hello", "rank1"), 0);
}

static void setup_fixture(fixture *fx, const char *suffix)
{
    make_dir(fx, suffix);
    write_file(fx->dir, "data/rank0.shard", 56);
    write_file(fx->dir, "data/rank1.shard", 65);
    make_pieces(fx);
    ckpt_error err = { 0 };
    int rc = ckpt_plan_build(fx->m.pieces, fx->m.npieces, NULL, &fx->plan,
                             &err);
    ck_assert_msg(rc == 0, "plan: %s", err.msg);
}

static void teardown_fixture(fixture *fx)
{
    ckpt_plan_free(&fx->plan);
    ckpt_manifest_free(&fx->m);
    rm_tree(fx->dir);
}

static int write_index(fixture *fx, ckpt_error *err)
{
    return ckpt_index_write(fx->index, fx->dir, fx->m.pieces, &fx->plan,
                            fx->m.meta, fx->m.nmeta, 1, err);
}

static void write_ok(fixture *fx)
{
    ckpt_error err = { 0 };
    int rc = write_index(fx, &err);
    ck_assert_msg(rc == 0, "index write: %d %s", rc, err.msg);
}

static void expect_msg(const ckpt_error *err, const char *s)
{
    ck_assert_msg(strstr(err->msg, s), "'%s' not in message: %s", s,
                  err->msg);
}

/* -------------------------------------------------- write, open, load */

static const ckpt_index_tensor *find(const ckpt_index_data *d,
                                     const char *fqn)
{
    for (size_t t = 0; t < d->ntensors; t++)
        if (!strcmp(d->tensors[t].fqn, fqn))
            return &d->tensors[t];
    ck_abort_msg("tensor %s not loaded", fqn);
    return NULL;
}

/* Every field of tensor fqn against the kept pieces of the plan. */
static void compare_tensor(const fixture *fx, const ckpt_index_data *d,
                           size_t t)
{
    const ckpt_plan_tensor *pt = &fx->plan.tensors[t];
    const ckpt_index_tensor *it = find(d, pt->fqn);
    ck_assert_int_eq(it->dtype, pt->dtype);
    ck_assert_int_eq(it->ndim, pt->ndim);
    uint64_t numel = 1, stored = 0, nframes = 0;
    for (int k = 0; k < pt->ndim; k++) {
        ck_assert_int_eq(it->shape[k], pt->shape[k]);
        numel *= (uint64_t)pt->shape[k];
    }
    ck_assert_uint_eq(it->nbytes, numel * ckpt_dtype_size(pt->dtype));
    ck_assert_uint_eq(it->nchunks, pt->nchunks);
    unsigned mask = 0;
    for (size_t c = 0; c < pt->nchunks; c++) {
        const ckpt_piece_rec *p = &fx->m.pieces[pt->chunks[c]];
        const ckpt_index_chunk *ic = &it->chunks[c];
        for (int k = 0; k < pt->ndim; k++) {
            ck_assert_int_eq(ic->offsets[k], p->offsets[k]);
            ck_assert_int_eq(ic->sizes[k], p->sizes[k]);
        }
        ck_assert_str_eq(d->files[ic->file].path, p->file);
        ck_assert_uint_eq(ic->nframes, p->nframes);
        ck_assert_uint_eq(ic->raw_bytes, p->raw_bytes);
        ck_assert_uint_eq(ic->stored_bytes, p->stored_bytes);
        stored += p->stored_bytes;
        nframes += p->nframes;
        for (size_t f = 0; f < p->nframes; f++)
            mask |= 1u << p->frames[f].codec;
    }
    ck_assert_uint_eq(it->stored_bytes, stored);
    ck_assert_uint_eq(it->nframes, nframes);
    ck_assert_uint_eq(it->codec_mask, mask);
}

START_TEST(test_write_load_roundtrip)
{
    fixture fx;
    setup_fixture(&fx, "");
    write_ok(&fx);
    ckpt_error err = { 0 };
    ckpt_index *ix;
    ck_assert_int_eq(ckpt_index_open(&ix, fx.index, &err), 0);
    ckpt_index_data d;
    int rc = ckpt_index_load(ix, &d, &err);
    ck_assert_msg(rc == 0, "load: %s", err.msg);

    const char *names[] = { "bias", "blob", "empty", "model.w", "step" };
    ck_assert_uint_eq(d.ntensors, 5);
    for (size_t t = 0; t < 5; t++) {
        ck_assert_str_eq(d.tensors[t].fqn, names[t]);
        compare_tensor(&fx, &d, t);
    }
    ck_assert_uint_eq(find(&d, "model.w")->codec_mask,
                      1u << CKPT_CODEC_RAW | 1u << CKPT_CODEC_ZSTD);
    ck_assert_uint_eq(find(&d, "empty")->codec_mask, 0);
    ck_assert_int_eq(find(&d, "step")->ndim, 0);
    ck_assert_uint_eq(find(&d, "step")->nbytes, 8);
    ck_assert_int_eq(find(&d, "blob")->dtype, CKPT_BYTES);

    ck_assert_uint_eq(d.nfiles, 2);
    ck_assert_str_eq(d.files[0].path, "data/rank0.shard");
    ck_assert_uint_eq(d.files[0].size, 56);
    ck_assert_str_eq(d.files[1].path, "data/rank1.shard");
    ck_assert_uint_eq(d.files[1].size, 65);

    ck_assert_uint_eq(d.nmeta, 2);
    ck_assert_str_eq(d.meta[0].key, "note");
    ck_assert_str_eq(d.meta[0].value, "hello");
    ck_assert_str_eq(d.meta[1].key, "step");
    ck_assert_str_eq(d.meta[1].value, "100");

    ckpt_index_data_free(&d);
    ckpt_index_close(ix);
    teardown_fixture(&fx);
}
END_TEST

START_TEST(test_frames)
{
    fixture fx;
    setup_fixture(&fx, "");
    write_ok(&fx);
    ckpt_error err = { 0 };
    ckpt_index *ix;
    ck_assert_int_eq(ckpt_index_open(&ix, fx.index, &err), 0);
    ckpt_index_data d;
    ck_assert_int_eq(ckpt_index_load(ix, &d, &err), 0);
    for (size_t t = 0; t < d.ntensors; t++) {
        const ckpt_plan_tensor *pt = &fx.plan.tensors[t];
        for (size_t c = 0; c < pt->nchunks; c++) {
            const ckpt_piece_rec *p = &fx.m.pieces[pt->chunks[c]];
            const ckpt_index_chunk *ic = &d.tensors[t].chunks[c];
            ckpt_frame_rec *fr;
            int rc = ckpt_index_load_frames(ix, ic->id, ic->nframes,
                                            ic->raw_bytes, &fr, &err);
            ck_assert_msg(rc == 0, "frames: %s", err.msg);
            for (size_t k = 0; k < p->nframes; k++) {
                ck_assert_uint_eq(fr[k].file_offset, p->frames[k].file_offset);
                ck_assert_uint_eq(fr[k].stored_size, p->frames[k].stored_size);
                ck_assert_uint_eq(fr[k].raw_offset, p->frames[k].raw_offset);
                ck_assert_uint_eq(fr[k].raw_size, p->frames[k].raw_size);
                ck_assert_uint_eq(fr[k].checksum, p->frames[k].checksum);
                ck_assert_int_eq(fr[k].codec, p->frames[k].codec);
            }
            free(fr);
        }
    }
    const ckpt_index_chunk *c0 = &find(&d, "model.w")->chunks[0];
    ckpt_frame_rec *fr = NULL;
    ck_assert_int_eq(ckpt_index_load_frames(ix, c0->id, 1, c0->raw_bytes,
                                            &fr, &err), -EIO);
    ck_assert_ptr_null(fr);
    expect_msg(&err, "tensor 'model.w' chunk 0");
    ck_assert_int_eq(ckpt_index_load_frames(ix, c0->id, 3, c0->raw_bytes,
                                            &fr, &err), -EIO);
    ck_assert_int_eq(ckpt_index_load_frames(ix, c0->id, 2, 40, &fr, &err),
                     -EIO);
    ck_assert_int_eq(ckpt_index_load_frames(ix, c0->id, 2, 1u << 20, &fr,
                                            &err), -EIO);
    ckpt_index_data_free(&d);
    ckpt_index_close(ix);
    teardown_fixture(&fx);
}
END_TEST

/* The schema holds what FORMAT.md promises: ids, page size, the frame
 * lookup index, uint64 as same-bit int64, JSON shapes. */
START_TEST(test_schema_queries)
{
    fixture fx;
    setup_fixture(&fx, "");
    write_ok(&fx);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open_v2(fx.index, &db, SQLITE_OPEN_READONLY,
                                     NULL), SQLITE_OK);
    struct q {
        const char *sql;
        const char *want;
    } qs[] = {
        { "PRAGMA application_id", "1667985524" },
        { "PRAGMA user_version", "1" },
        { "PRAGMA page_size", "4096" },
        { "SELECT count(*) FROM sqlite_schema WHERE name = 'frames_by_raw'",
          "1" },
        { "SELECT printf('%016x', checksum) FROM frames JOIN chunks ON "
          "chunks.id = frames.chunk_id JOIN tensors ON tensors.id = "
          "chunks.tensor_id WHERE fqn = 'model.w' AND chunks.seq = 0 AND "
          "frames.seq = 0", "fedcba9876543210" },
        { "SELECT group_concat(value, 'x') FROM tensors, json_each(shape) "
          "WHERE fqn = 'model.w'", "4x6" },
        { "SELECT json_array_length(shape) FROM tensors WHERE fqn = 'step'",
          "0" },
        { "SELECT f.seq FROM frames AS f JOIN chunks AS c ON c.id = "
          "f.chunk_id JOIN tensors AS t ON t.id = c.tensor_id WHERE t.fqn = "
          "'model.w' AND c.seq = 0 AND f.raw_offset <= 40 ORDER BY "
          "f.raw_offset DESC LIMIT 1", "1" },
        { "SELECT group_concat(name) FROM (SELECT name FROM codecs ORDER BY "
          "id)", "raw,zstd" },
        { "SELECT writer FROM chunks JOIN tensors ON tensors.id = "
          "chunks.tensor_id WHERE fqn = 'bias'", "rank0" },
        { "SELECT nbytes || '/' || stored_bytes FROM tensors WHERE fqn = "
          "'model.w'", "96/84" },
    };
    for (size_t i = 0; i < sizeof qs / sizeof *qs; i++) {
        sqlite3_stmt *st;
        ck_assert_msg(sqlite3_prepare_v2(db, qs[i].sql, -1, &st, NULL) ==
                          SQLITE_OK, "%s: %s", qs[i].sql, sqlite3_errmsg(db));
        ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
        const char *got = (const char *)sqlite3_column_text(st, 0);
        ck_assert_msg(got && !strcmp(got, qs[i].want), "%s: got %s, want %s",
                      qs[i].sql, got ? got : "NULL", qs[i].want);
        sqlite3_finalize(st);
    }
    /* The frame holding a byte is found through frames_by_raw. */
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(db, "EXPLAIN QUERY PLAN SELECT seq "
                                        "FROM frames WHERE chunk_id = 1 AND "
                                        "raw_offset <= 40 ORDER BY raw_offset"
                                        " DESC LIMIT 1", -1, &st, NULL),
                     SQLITE_OK);
    int seen = 0;
    while (sqlite3_step(st) == SQLITE_ROW)
        seen |= strstr((const char *)sqlite3_column_text(st, 3),
                       "frames_by_raw") != NULL;
    sqlite3_finalize(st);
    ck_assert_msg(seen, "frame lookup does not use frames_by_raw");
    sqlite3_close(db);
    teardown_fixture(&fx);
}
END_TEST

/* A checkpoint path with characters that mean something in URIs. */
START_TEST(test_uri_escaping)
{
    fixture fx;
    setup_fixture(&fx, "_%41?x=1#frag");
    write_ok(&fx);
    ckpt_error err = { 0 };
    ckpt_index *ix;
    int rc = ckpt_index_open(&ix, fx.index, &err);
    ck_assert_msg(rc == 0, "open: %s", err.msg);
    ckpt_index_data d;
    ck_assert_int_eq(ckpt_index_load(ix, &d, &err), 0);
    ck_assert_uint_eq(d.ntensors, 5);
    ckpt_index_data_free(&d);
    ckpt_index_close(ix);
    teardown_fixture(&fx);
}
END_TEST

START_TEST(test_empty_index)
{
    fixture fx;
    make_dir(&fx, "");
    ckpt_manifest_init(&fx.m);
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_plan_build(NULL, 0, NULL, &fx.plan, &err), 0);
    ck_assert_int_eq(ckpt_index_write(fx.index, fx.dir, NULL, &fx.plan, NULL,
                                      0, 0, &err), 0);
    ckpt_index *ix;
    ck_assert_int_eq(ckpt_index_open(&ix, fx.index, &err), 0);
    ckpt_index_data d;
    ck_assert_int_eq(ckpt_index_load(ix, &d, &err), 0);
    ck_assert_uint_eq(d.ntensors + d.nfiles + d.nmeta, 0);
    ckpt_index_data_free(&d);
    ckpt_index_close(ix);
    teardown_fixture(&fx);
}
END_TEST

/* ---------------------------------------------------- write refusals */

static void write_fails(fixture *fx, int code, const char *s1,
                        const char *s2)
{
    ckpt_error err = { 0 };
    int rc = write_index(fx, &err);
    ck_assert_msg(rc == code, "expected %d, got %d (%s)", code, rc, err.msg);
    expect_msg(&err, s1);
    if (s2)
        expect_msg(&err, s2);
    ck_assert_int_eq(access(fx->index, F_OK), -1);   /* nothing left */
}

START_TEST(test_write_refusals)
{
    fixture fx;
    setup_fixture(&fx, "");

    /* A shard file missing at commit. */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/data/rank1.shard", fx.dir);
    ck_assert_int_eq(unlink(path), 0);
    write_fails(&fx, -ENOENT, "data/rank1.shard", "rank1");
    /* A shard shorter than its frames say. */
    write_file(fx.dir, "data/rank1.shard", 64);
    write_fails(&fx, -EIO, "tensor 'blob'", "beyond the end");
    write_file(fx.dir, "data/rank1.shard", 65);

    /* Frames that do not tile the piece. */
    ckpt_piece_rec *w0 = &fx.m.pieces[0];
    w0->frames[1].raw_offset = 30;
    write_fails(&fx, -EINVAL, "tensor 'model.w' chunk 0", "frame 1");
    w0->frames[1].raw_offset = 32;
    w0->stored_bytes++;
    write_fails(&fx, -EINVAL, "tensor 'model.w' chunk 0", "stored");
    w0->stored_bytes--;

    /* Metadata keys given twice with different values. */
    ckpt_manifest extra;
    ckpt_manifest_init(&extra);
    ck_assert_int_eq(ckpt_manifest_set_meta(&extra, "step", "200", "rank1"),
                     0);
    ck_assert_int_eq(ckpt_manifest_take(&fx.m, &extra), 0);
    write_fails(&fx, -EINVAL, "metadata key 'step'", "'200' (writer rank1)");
    free(fx.m.meta[--fx.m.nmeta].key);
    free(fx.m.meta[fx.m.nmeta].value);
    free(fx.m.meta[fx.m.nmeta].writer);

    /* Same key, same value: written once. */
    ck_assert_int_eq(ckpt_manifest_set_meta(&extra, "step", "100", "rank1"),
                     0);
    ck_assert_int_eq(ckpt_manifest_take(&fx.m, &extra), 0);

    /* A shard path outside the checkpoint. */
    char *file = fx.m.pieces[1].file;
    fx.m.pieces[1].file = (char *)"../escape.shard";
    write_fails(&fx, -EINVAL, "'../escape.shard'", "relative path");
    fx.m.pieces[1].file = file;

    write_ok(&fx);
    ckpt_error err = { 0 };
    ck_assert_int_eq(write_index(&fx, &err), -EEXIST);
    expect_msg(&err, "index.db");
    teardown_fixture(&fx);
}
END_TEST

/* ---------------------------------------------------- open refusals */

static void open_fails(const char *path, int code, const char *s)
{
    ckpt_error err = { 0 };
    ckpt_index *ix = (ckpt_index *)1;
    int rc = ckpt_index_open(&ix, path, &err);
    ck_assert_msg(rc == code, "expected %d, got %d (%s)", code, rc, err.msg);
    ck_assert_ptr_null(ix);
    expect_msg(&err, path);
    expect_msg(&err, s);
}

/* A SQLite file with the given header fields and one table. */
static void make_db(const char *path, int app_id, int version)
{
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    char sql[200];
    snprintf(sql, sizeof sql, "PRAGMA application_id=%d; PRAGMA "
             "user_version=%d; CREATE TABLE t(x);", app_id, version);
    ck_assert_int_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_close(db), SQLITE_OK);
}

START_TEST(test_open_refusals)
{
    fixture fx;
    make_dir(&fx, "");
    char p[PATH_MAX];

    snprintf(p, sizeof p, "%s/missing.db", fx.dir);
    open_fails(p, -ENOENT, "No such file");

    snprintf(p, sizeof p, "%s/garbage.db", fx.dir);
    FILE *f = fopen(p, "w");
    for (int i = 0; i < 300; i++)
        fputs("this is not sqlite ", f);
    fclose(f);
    open_fails(p, -EINVAL, "is not a ckptfs index (not a SQLite database)");

    snprintf(p, sizeof p, "%s/empty.db", fx.dir);
    write_file(fx.dir, "empty.db", 0);
    open_fails(p, -EINVAL, "empty file");

    snprintf(p, sizeof p, "%s/plain.db", fx.dir);
    make_db(p, 0, 0);
    open_fails(p, -EINVAL, "(application_id 0x00000000 is not ckptfs's)");

    snprintf(p, sizeof p, "%s/newer.db", fx.dir);
    make_db(p, CKPT_INDEX_APP_ID, CKPT_FORMAT_VERSION + 1);
    char want[96];
    snprintf(want, sizeof want, "format version %d is newer than this "
             "ckptfs supports (%d)", CKPT_FORMAT_VERSION + 1,
             CKPT_FORMAT_VERSION);
    open_fails(p, -ENOTSUP, want);

    snprintf(p, sizeof p, "%s/notables.db", fx.dir);
    make_db(p, CKPT_INDEX_APP_ID, 1);
    open_fails(p, -EINVAL, "table 'meta' is missing");

    snprintf(p, sizeof p, "%s/x.plan", fx.dir);
    ckpt_planfile *pf;
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_planfile_create(&pf, p, "rank0", &err), 0);
    ckpt_planfile_close(pf);
    open_fails(p, -EINVAL, "(it is a ckptfs local plan)");

    open_fails(fx.dir, -EISDIR, "is a directory");
    rm_tree(fx.dir);
}
END_TEST

/* ------------------------------------------------------ damaged index */

/* Writes the fixture's index, applies sql to it, then expects load to
 * fail with -EIO and a message holding s. */
static void damaged_load(const char *sql, int code, const char *s)
{
    fixture fx;
    setup_fixture(&fx, "");
    write_ok(&fx);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(fx.index, &db), SQLITE_OK);
    ck_assert_msg(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK, "%s",
                  sqlite3_errmsg(db));
    ck_assert_int_eq(sqlite3_close(db), SQLITE_OK);
    ckpt_error err = { 0 };
    ckpt_index *ix;
    int rc = ckpt_index_open(&ix, fx.index, &err);
    if (rc == 0) {
        ckpt_index_data d;
        rc = ckpt_index_load(ix, &d, &err);
        ck_assert_ptr_null(d.tensors);
        ckpt_index_close(ix);
    }
    ck_assert_msg(rc == code, "%s: expected %d, got %d (%s)", sql, code, rc,
                  err.msg);
    expect_msg(&err, s);
    teardown_fixture(&fx);
}

START_TEST(test_damaged_index)
{
    damaged_load("UPDATE tensors SET dtype = 'q7' WHERE fqn = 'bias'", -EIO,
                 "tensor 'bias' has unknown dtype 'q7'");
    damaged_load("UPDATE tensors SET shape = '4,6' WHERE fqn = 'model.w'",
                 -EIO, "tensor 'model.w' shape");
    damaged_load("UPDATE tensors SET shape = '[4,-6]' WHERE fqn = 'model.w'",
                 -EIO, "not a JSON array");
    damaged_load("UPDATE tensors SET numel = 25 WHERE fqn = 'model.w'", -EIO,
                 "tensor 'model.w'");
    damaged_load("UPDATE chunks SET offsets = '[3,0]' WHERE seq = 1", -EIO,
                 "lies outside");
    damaged_load("UPDATE chunks SET offsets = '[2]' WHERE seq = 1", -EIO,
                 "dims");
    damaged_load("UPDATE chunks SET raw_bytes = 47 WHERE seq = 1", -EIO,
                 "raw_bytes");
    damaged_load("UPDATE chunks SET file_id = 9", -EIO, "names no file");
    damaged_load("UPDATE tensors SET nchunks = 3 WHERE fqn = 'model.w'", -EIO,
                 "records 3 chunks");
    damaged_load("UPDATE chunks SET codec_mask = 1 << 40 WHERE seq = 1",
                 -ENOTSUP, "codec ids this ckptfs does not know");
    damaged_load("UPDATE chunks SET codec_mask = 0 WHERE seq = 1", -EIO,
                 "codec_mask");
    damaged_load("UPDATE files SET path = '/etc/passwd' WHERE id = 1", -EIO,
                 "'/etc/passwd'");
    damaged_load("DROP TABLE codecs", -EINVAL, "table 'codecs' is missing");
    damaged_load("ALTER TABLE tensors DROP COLUMN numel", -EINVAL,
                 "numel");
}
END_TEST

/* Loads fine, but the frames of model.w's chunk 0 (id 4) are refused. */
static void damaged_frames(const char *sql)
{
    fixture fx;
    setup_fixture(&fx, "");
    write_ok(&fx);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(fx.index, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_close(db), SQLITE_OK);
    ckpt_error err = { 0 };
    ckpt_index *ix;
    ck_assert_int_eq(ckpt_index_open(&ix, fx.index, &err), 0);
    ckpt_index_data d;
    ck_assert_int_eq(ckpt_index_load(ix, &d, &err), 0);
    const ckpt_index_chunk *c = &find(&d, "model.w")->chunks[0];
    ck_assert_int_eq(c->id, 4);
    ckpt_frame_rec *fr;
    ck_assert_int_eq(ckpt_index_load_frames(ix, c->id, c->nframes,
                                            c->raw_bytes, &fr, &err), -EIO);
    expect_msg(&err, "tensor 'model.w' chunk 0");
    expect_msg(&err, "do not tile");
    ckpt_index_data_free(&d);
    ckpt_index_close(ix);
    teardown_fixture(&fx);
}

START_TEST(test_damaged_frames)
{
    damaged_frames("UPDATE frames SET raw_size = 31 WHERE chunk_id = 4 AND "
                   "seq = 0");
    damaged_frames("UPDATE frames SET raw_offset = 33 WHERE chunk_id = 4 AND "
                   "seq = 1");
    damaged_frames("DELETE FROM frames WHERE chunk_id = 4 AND seq = 1");
    damaged_frames("UPDATE frames SET seq = 5 WHERE chunk_id = 4 AND seq = 1");
    /* A codec the chunk's codec_mask does not list (model.w chunk 0 uses
     * raw and zstd). */
    damaged_frames("UPDATE chunks SET codec_mask = 2 WHERE id = 4");
    damaged_frames("UPDATE frames SET codec = 3 WHERE chunk_id = 4");
}
END_TEST

/* --------------------------------------------------------- plan files */

START_TEST(test_planfile_roundtrip)
{
    fixture fx;
    make_dir(&fx, "");
    make_pieces(&fx);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/rank0.plan", fx.dir);
    ckpt_error err = { 0 };
    ckpt_planfile *pf;
    ck_assert_int_eq(ckpt_planfile_create(&pf, path, "rank0", &err), 0);
    ck_assert_int_eq(ckpt_planfile_append(pf, fx.m.pieces, 3, fx.m.meta, 1,
                                          &err), 0);
    ck_assert_int_eq(ckpt_planfile_append(pf, fx.m.pieces + 3,
                                          fx.m.npieces - 3, NULL, 0, &err), 0);
    ckpt_kv later[2] = { { (char *)"step", (char *)"101", NULL },
                         { (char *)"lr", (char *)"0.1", NULL } };
    ck_assert_int_eq(ckpt_planfile_append(pf, NULL, 0, later, 2, &err), 0);

    /* A reader sees what was appended while the writer is still open. */
    ckpt_manifest got;
    ckpt_manifest_init(&got);
    int rc = ckpt_planfile_read(path, &got, &err);
    ck_assert_msg(rc == 0, "read: %s", err.msg);
    ckpt_planfile_close(pf);

    ck_assert_uint_eq(got.npieces, fx.m.npieces);
    for (size_t i = 0; i < got.npieces; i++) {
        const ckpt_piece_rec *a = &fx.m.pieces[i], *b = &got.pieces[i];
        ck_assert_str_eq(b->fqn, a->fqn);
        ck_assert_str_eq(b->file, a->file);
        ck_assert_str_eq(b->writer, "rank0");    /* the plan's writer */
        ck_assert_int_eq(b->dtype, a->dtype);
        ck_assert_int_eq(b->ndim, a->ndim);
        for (int d = 0; d < a->ndim; d++) {
            ck_assert_int_eq(b->shape[d], a->shape[d]);
            ck_assert_int_eq(b->offsets[d], a->offsets[d]);
            ck_assert_int_eq(b->sizes[d], a->sizes[d]);
        }
        ck_assert_uint_eq(b->raw_bytes, a->raw_bytes);
        ck_assert_uint_eq(b->stored_bytes, a->stored_bytes);
        ck_assert_uint_eq(b->data_hash, a->data_hash);
        ck_assert_uint_eq(b->nframes, a->nframes);
        for (size_t k = 0; k < a->nframes; k++)
            frame_rec_eq(&b->frames[k], &a->frames[k]);
    }
    /* The user's two keys, and how the plan's data_hash is made. */
    ck_assert_uint_eq(got.nmeta, 3);
    ck_assert_str_eq(ckpt_manifest_get_meta(&got, "step"), "101");
    ck_assert_str_eq(ckpt_manifest_get_meta(&got, "lr"), "0.1");
    ck_assert_str_eq(ckpt_manifest_get_meta(&got, CKPT_META_DATA_HASH),
                     CKPT_DATA_HASH_FRAMES);
    for (size_t i = 0; i < got.nmeta; i++)
        ck_assert_str_eq(got.meta[i].writer, "rank0");

    /* Reading appends: a second plan adds to the same manifest. */
    snprintf(path, sizeof path, "%s/rank1.plan", fx.dir);
    ck_assert_int_eq(ckpt_planfile_create(&pf, path, "rank1", &err), 0);
    ckpt_kv kv = { (char *)"step", (char *)"101", NULL };
    ck_assert_int_eq(ckpt_planfile_append(pf, fx.m.pieces, 1, &kv, 1, &err),
                     0);
    ckpt_planfile_close(pf);
    ck_assert_int_eq(ckpt_planfile_read(path, &got, &err), 0);
    ck_assert_uint_eq(got.npieces, fx.m.npieces + 1);
    ck_assert_str_eq(got.pieces[got.npieces - 1].writer, "rank1");
    ck_assert_uint_eq(got.nmeta, 5);     /* rank1's step and data_hash */
    ck_assert_str_eq(got.meta[3].writer, "rank1");
    ck_assert_str_eq(got.meta[4].writer, "rank1");

    ckpt_manifest_free(&got);
    ckpt_manifest_free(&fx.m);
    rm_tree(fx.dir);
}
END_TEST

/* Plans read back, planned and committed: the path ckpt_commit takes. */
START_TEST(test_plans_to_index)
{
    fixture fx;
    setup_fixture(&fx, "");
    char path[PATH_MAX];
    ckpt_error err = { 0 };
    const char *writers[2] = { "rank0", "rank1" };
    for (int w = 0; w < 2; w++) {
        snprintf(path, sizeof path, "%s/%s.plan", fx.dir, writers[w]);
        ckpt_planfile *pf;
        ck_assert_int_eq(ckpt_planfile_create(&pf, path, writers[w], &err),
                         0);
        for (size_t i = 0; i < fx.m.npieces; i++)
            if (!strcmp(fx.m.pieces[i].writer, writers[w]))
                ck_assert_int_eq(ckpt_planfile_append(pf, &fx.m.pieces[i], 1,
                                                      fx.m.meta, fx.m.nmeta,
                                                      &err), 0);
        ckpt_planfile_close(pf);
    }
    ckpt_manifest all;
    ckpt_manifest_init(&all);
    for (int w = 0; w < 2; w++) {
        snprintf(path, sizeof path, "%s/%s.plan", fx.dir, writers[w]);
        ck_assert_int_eq(ckpt_planfile_read(path, &all, &err), 0);
    }
    ckpt_plan plan;
    ck_assert_int_eq(ckpt_plan_build(all.pieces, all.npieces, NULL, &plan,
                                     &err), 0);
    int rc = ckpt_index_write(fx.index, fx.dir, all.pieces, &plan, all.meta,
                              all.nmeta, 1, &err);
    ck_assert_msg(rc == 0, "write: %s", err.msg);
    ckpt_index *ix;
    ck_assert_int_eq(ckpt_index_open(&ix, fx.index, &err), 0);
    ckpt_index_data d;
    ck_assert_int_eq(ckpt_index_load(ix, &d, &err), 0);
    ck_assert_uint_eq(d.ntensors, 5);
    ck_assert_uint_eq(d.nmeta, 3);     /* step, lr, data_hash */
    ck_assert_uint_eq(find(&d, "model.w")->nchunks, 2);
    ckpt_index_data_free(&d);
    ckpt_index_close(ix);
    ckpt_plan_free(&plan);
    ckpt_manifest_free(&all);
    teardown_fixture(&fx);
}
END_TEST

/* Plans read on several threads are the table one thread reading them in
 * turn makes; the first damaged plan in name order is the one reported,
 * whichever thread met it first. */
START_TEST(test_plans_read_many)
{
    fixture fx;
    make_dir(&fx, "");
    make_pieces(&fx);
    enum { NPLANS = 12 };
    char names[NPLANS][16], path[PATH_MAX];
    char *list[NPLANS];
    ckpt_error err = { 0 };
    for (int w = 0; w < NPLANS; w++) {
        snprintf(names[w], sizeof names[w], "r%02d.plan", w);
        list[w] = names[w];
        snprintf(path, sizeof path, "%s/%s", fx.dir, names[w]);
        char writer[16];
        snprintf(writer, sizeof writer, "r%02d", w);
        ckpt_planfile *pf;
        ck_assert_int_eq(ckpt_planfile_create(&pf, path, writer, &err), 0);
        /* a different number of pieces per plan */
        ck_assert_int_eq(ckpt_planfile_append(pf, fx.m.pieces,
                                              1 + (size_t)w % fx.m.npieces,
                                              fx.m.meta, fx.m.nmeta, &err),
                         0);
        ckpt_planfile_close(pf);
    }
    ckpt_pieces many, one;
    ckpt_manifest mm, m1;
    ckpt_pieces_init(&many);
    ckpt_pieces_init(&one);
    ckpt_manifest_init(&mm);
    ckpt_manifest_init(&m1);
    ck_assert_msg(ckpt_planfile_read_many(fx.dir, list, NPLANS, 3, &many, &mm,
                                          NULL, NULL, &err) == 0,
                  "%s", err.msg);
    for (int w = 0; w < NPLANS; w++) {
        snprintf(path, sizeof path, "%s/%s", fx.dir, names[w]);
        ck_assert_int_eq(ckpt_planfile_read_pieces(path, &one, &m1, &err), 0);
    }
    ck_assert_uint_eq(many.n, one.n);
    ck_assert_uint_eq(mm.nmeta, m1.nmeta);
    for (size_t i = 0; i < one.n; i++) {
        ckpt_piece_rec a, b;
        ck_assert_int_eq(ckpt_pieces_get(&many, i, &a), 0);
        ck_assert_int_eq(ckpt_pieces_get(&one, i, &b), 0);
        ck_assert_str_eq(a.fqn, b.fqn);
        ck_assert_str_eq(a.file, b.file);
        ck_assert_str_eq(a.writer, b.writer);
        ck_assert_int_eq(a.ndim, b.ndim);
        ck_assert(!memcmp(a.shape, b.shape, sizeof a.shape));
        ck_assert(!memcmp(a.offsets, b.offsets, sizeof a.offsets));
        ck_assert(!memcmp(a.sizes, b.sizes, sizeof a.sizes));
        ck_assert_uint_eq(a.nframes, b.nframes);
        if (a.nframes)
            ck_assert(!memcmp(a.frames, b.frames,
                              a.nframes * sizeof *a.frames));
        ckpt_piece_clear(&a);
        ckpt_piece_clear(&b);
    }
    for (size_t i = 0; i < m1.nmeta; i++)
        ck_assert_str_eq(mm.meta[i].writer, m1.meta[i].writer);
    ckpt_pieces_free(&many);
    ckpt_manifest_free(&mm);
    /* Two damaged plans: the first in order is named. */
    for (int w = 9; w >= 5; w -= 4) {
        snprintf(path, sizeof path, "%s/%s", fx.dir, names[w]);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs("not a plan", f);
        fclose(f);
    }
    ckpt_pieces_init(&many);
    ckpt_manifest_init(&mm);
    ck_assert_int_eq(ckpt_planfile_read_many(fx.dir, list, NPLANS, 4, &many,
                                             &mm, NULL, NULL, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "r05.plan") != NULL, "%s", err.msg);
    ckpt_pieces_free(&many);
    ckpt_pieces_free(&one);
    ckpt_manifest_free(&mm);
    ckpt_manifest_free(&m1);
    ckpt_manifest_free(&fx.m);
    rm_tree(fx.dir);
}
END_TEST

START_TEST(test_planfile_refusals)
{
    fixture fx;
    make_dir(&fx, "");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/a.plan", fx.dir);
    ckpt_error err = { 0 };
    ckpt_planfile *pf;
    ck_assert_int_eq(ckpt_planfile_create(&pf, path, "", &err), -EINVAL);
    ck_assert_int_eq(ckpt_planfile_create(&pf, path, "rank0", &err), 0);
    ckpt_planfile_close(pf);
    ck_assert_int_eq(ckpt_planfile_create(&pf, path, "rank0", &err),
                     -EEXIST);
    expect_msg(&err, path);

    /* A failed append leaves the plan as it was. */
    make_pieces(&fx);
    snprintf(path, sizeof path, "%s/b.plan", fx.dir);
    ck_assert_int_eq(ckpt_planfile_create(&pf, path, "rank0", &err), 0);
    char *file = fx.m.pieces[1].file;
    fx.m.pieces[1].file = NULL;
    ck_assert_int_eq(ckpt_planfile_append(pf, fx.m.pieces, 2, NULL, 0, &err),
                     -EINVAL);
    fx.m.pieces[1].file = file;
    ckpt_planfile_close(pf);
    ckpt_manifest got;
    ckpt_manifest_init(&got);
    ck_assert_int_eq(ckpt_planfile_read(path, &got, &err), 0);
    ck_assert_uint_eq(got.npieces, 0);

    /* Not a plan: an index, garbage, a missing file. */
    snprintf(path, sizeof path, "%s/other.db", fx.dir);
    make_db(path, CKPT_INDEX_APP_ID, 1);
    ck_assert_int_eq(ckpt_planfile_read(path, &got, &err), -EINVAL);
    expect_msg(&err, "is not a ckptfs local plan (an SQLite database)");
    write_file(fx.dir, "junk.plan", 5000);
    snprintf(path, sizeof path, "%s/junk.plan", fx.dir);
    ck_assert_int_eq(ckpt_planfile_read(path, &got, &err), -EINVAL);
    expect_msg(&err, "is not a ckptfs local plan (no plan header)");
    /* A plan of an older ckptfs (SQLite, application_id 'ckpl'). */
    snprintf(path, sizeof path, "%s/old.plan", fx.dir);
    make_db(path, CKPT_PLAN_APP_ID, 1);
    ck_assert_int_eq(ckpt_planfile_read(path, &got, &err), -EINVAL);
    expect_msg(&err, "old.plan was written by an older ckptfs (an SQLite "
               "plan)");
    snprintf(path, sizeof path, "%s/none.plan", fx.dir);
    ck_assert_int_eq(ckpt_planfile_read(path, &got, &err), -ENOENT);
    expect_msg(&err, "none.plan");
    ck_assert_uint_eq(got.npieces, 0);
    ckpt_manifest_free(&got);
    ckpt_manifest_free(&fx.m);
    rm_tree(fx.dir);
}
END_TEST

/* The synced-shard claim reaches the committer, and a plan last written
 * on this host in another boot (a restart: its unsynced appends may be
 * lost) is refused; one written on another host is not. */
START_TEST(test_planfile_claims)
{
    fixture fx;
    make_dir(&fx, "");
    make_pieces(&fx);
    char path[PATH_MAX], host[256] = "";
    snprintf(path, sizeof path, "%s/rank0.plan", fx.dir);
    ckpt_error err = { 0 };
    ckpt_planfile *pf;
    ck_assert_int_eq(ckpt_planfile_create(&pf, path, "rank0", &err), 0);
    ckpt_planfile_note_synced(pf, "data/rank0.shard", 123456);
    ck_assert_int_eq(ckpt_planfile_append(pf, fx.m.pieces, 2, NULL, 0, &err),
                     0);
    ckpt_planfile_close(pf);

    ckpt_pieces tab;
    ckpt_manifest m;
    ckpt_plan_synced got;
    ckpt_pieces_init(&tab);
    ckpt_manifest_init(&m);
    int rc = ckpt_planfile_read_synced(path, &tab, &m, &got, &err);
    ck_assert_msg(rc == 0, "read: %s", err.msg);
    ck_assert_int_eq(got.has, 1);
    ck_assert_uint_eq(got.bytes, 123456);
    ck_assert_str_eq(got.file, "data/rank0.shard");
    ck_assert_uint_eq(tab.n, 2);

    if (access("/proc/sys/kernel/random/boot_id", R_OK) == 0 &&
        gethostname(host, sizeof host - 1) == 0) {
        char other[400];
        snprintf(other, sizeof other, "%s 00000000-0000-0000-0000-0000000"
                 "00000", host);
        planedit_set_boot(path, other);
        ck_assert_int_eq(ckpt_planfile_read_synced(path, &tab, &m, &got,
                                                   &err), -ESTALE);
        expect_msg(&err, "before it restarted");
        expect_msg(&err, "rank0.plan");
        snprintf(other, sizeof other, "not-%s 00000000-0000-0000-0000-"
                 "000000000000", host);
        planedit_set_boot(path, other);
        ck_assert_int_eq(ckpt_planfile_read_synced(path, &tab, &m, &got,
                                                   &err), 0);
    }
    ckpt_pieces_free(&tab);
    ckpt_manifest_free(&m);
    ckpt_manifest_free(&fx.m);
    rm_tree(fx.dir);
}
END_TEST

static Suite *index_suite(void)
{
    Suite *s = suite_create("index");
    TCase *tc = tcase_create("index");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_write_load_roundtrip);
    tcase_add_test(tc, test_frames);
    tcase_add_test(tc, test_schema_queries);
    tcase_add_test(tc, test_uri_escaping);
    tcase_add_test(tc, test_empty_index);
    tcase_add_test(tc, test_write_refusals);
    tcase_add_test(tc, test_open_refusals);
    tcase_add_test(tc, test_damaged_index);
    tcase_add_test(tc, test_damaged_frames);
    tcase_add_test(tc, test_planfile_roundtrip);
    tcase_add_test(tc, test_plans_to_index);
    tcase_add_test(tc, test_plans_read_many);
    tcase_add_test(tc, test_planfile_refusals);
    tcase_add_test(tc, test_planfile_claims);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(index_suite());
}
