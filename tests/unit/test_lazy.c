/*
 * test_lazy.c - chunks loaded on first use.  Opening an index loads
 * metadata, files and tensors only; a tensor's chunks are loaded when
 * something looks at them, once, whatever the threads asking, and are
 * exactly what loading everything at once gives (random layouts).  An
 * index written before the tensors table held nframes and codec_mask
 * still opens (its chunks are all loaded then).  A damaged chunk row is
 * refused when its tensor is first used, naming the tensor, while other
 * tensors stay readable.  The lookups are index searches, not scans.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"
#include "common/fileio.h"
#include "format/index.h"
#include "unit_util.h"

/* Byte b of element e of tensor t: what the test writes and expects. */
static unsigned char byte_at(int t, uint64_t e, size_t b)
{
    return (unsigned char)(e * 131 + b * 7 + (uint64_t)t * 31 + (e >> 8));
}

enum { MAXT = 8 };

typedef struct ckcase {
    char dir[64];
    int nt;
    char fqn[MAXT][32];
    ckpt_dtype dt[MAXT];
    int ndim[MAXT];
    int64_t shape[MAXT][3];
} ckcase;

/* Row-major bytes of box (off, size) of tensor t. */
static unsigned char *box_bytes(const ckcase *c, int t, const int64_t *off,
                                const int64_t *size, uint64_t *len)
{
    int nd = c->ndim[t];
    size_t isz = ckpt_dtype_size(c->dt[t]);
    uint64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= (uint64_t)size[d];
    unsigned char *buf = malloc(n * isz + 1);
    for (uint64_t k = 0; k < n; k++) {
        uint64_t rest = k, g = 0;
        int64_t idx[3];
        for (int d = nd - 1; d >= 0; d--) {
            idx[d] = off[d] + (int64_t)(rest % (uint64_t)size[d]);
            rest /= (uint64_t)size[d];
        }
        for (int d = 0; d < nd; d++)
            g = g * (uint64_t)c->shape[t][d] + (uint64_t)idx[d];
        for (size_t b = 0; b < isz; b++)
            buf[k * isz + b] = byte_at(t, g, b);
    }
    *len = n * isz;
    return buf;
}

/* Tensors of random shapes, each cut into a random grid whose cells go to
 * random writers (a few hundred chunks in all), written and committed. */
static void make_checkpoint(ckcase *c, rng *g, int nt)
{
    static const ckpt_dtype dts[] = { CKPT_F32, CKPT_BF16, CKPT_U8,
                                      CKPT_I64 };
    strcpy(c->dir, "/tmp/ckpt-lazy-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(c->dir));
    enum { NW = 5 };
    ckpt_writer *w[NW];
    ckpt_write_opts o;
    ckpt_write_opts_init(&o);
    o.frame_size = 4096;
    o.threads = 1;
    ckpt_error e;
    for (int k = 0; k < NW; k++) {
        char name[16];
        snprintf(name, sizeof name, "rank%d", k);
        ck_assert_msg(ckpt_writer_open(&w[k], c->dir, name, &o, &e) == 0,
                      "%s", e.msg);
    }
    c->nt = nt;
    for (int t = 0; t < nt; t++) {
        snprintf(c->fqn[t], sizeof c->fqn[t], "layer%d.w%d",
                 (int)rnd_in(g, 0, 99), t);
        c->dt[t] = dts[rnd(g) % 4];
        c->ndim[t] = (int)rnd_in(g, 1, 3);
        int grid[3], cells = 1;
        for (int d = 0; d < c->ndim[t]; d++) {
            c->shape[t][d] = rnd_in(g, 1, d == 0 ? 300 : 9);
            grid[d] = (int)rnd_in(g, 1, c->shape[t][d] < 12
                                              ? (int)c->shape[t][d] : 12);
            cells *= grid[d];
        }
        for (int k = 0; k < cells; k++) {
            int64_t off[3], size[3];
            int rest = k;
            for (int d = c->ndim[t] - 1; d >= 0; d--) {
                int64_t n = c->shape[t][d], parts = grid[d];
                int64_t part = rest % parts;
                rest /= (int)parts;
                off[d] = part * (n / parts) + (part < n % parts ? part
                                                                : n % parts);
                size[d] = n / parts + (part < n % parts);
            }
            uint64_t len;
            unsigned char *buf = box_bytes(c, t, off, size, &len);
            ckpt_piece p = { c->fqn[t], c->dt[t], c->ndim[t], c->shape[t],
                             off, size, buf };
            ck_assert_msg(ckpt_writer_put(w[rnd(g) % NW], &p, &e) == 0, "%s",
                          e.msg);
            free(buf);
        }
    }
    for (int k = 0; k < NW; k++)
        ck_assert_msg(ckpt_writer_close(w[k], &e) == 0, "%s", e.msg);
    ck_assert_msg(ckpt_commit(c->dir, NULL, &e) == 0, "%s", e.msg);
}

static void drop_checkpoint(ckcase *c)
{
    ck_assert_int_eq(ckpt_remove_tree(c->dir, NULL), 0);
}

static void index_path(const ckcase *c, char *out, size_t cap)
{
    snprintf(out, cap, "%s/index.db", c->dir);
}

static void exec_sql(const ckcase *c, const char *sql)
{
    char p[128];
    sqlite3 *db;
    index_path(c, p, sizeof p);
    ck_assert_int_eq(sqlite3_open(p, &db), SQLITE_OK);
    ck_assert_msg(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK, "%s",
                  sqlite3_errmsg(db));
    ck_assert_int_eq(sqlite3_close(db), SQLITE_OK);
}

static void open_index(const ckcase *c, ckpt_index **ix)
{
    char p[128];
    ckpt_error e = { 0 };
    index_path(c, p, sizeof p);
    ck_assert_msg(ckpt_index_open(ix, p, &e) == 0, "%s", e.msg);
}

static void chunk_eq(const ckpt_index_tensor *t, const ckpt_index_chunk *a,
                     const ckpt_index_chunk *b)
{
    ck_assert_int_eq(a->id, b->id);
    for (int d = 0; d < t->ndim; d++) {
        ck_assert_int_eq(a->offsets[d], b->offsets[d]);
        ck_assert_int_eq(a->sizes[d], b->sizes[d]);
    }
    ck_assert_int_eq(a->file, b->file);
    ck_assert_uint_eq(a->nframes, b->nframes);
    ck_assert_uint_eq(a->raw_bytes, b->raw_bytes);
    ck_assert_uint_eq(a->stored_bytes, b->stored_bytes);
}

/* A random region of tensor t read through r equals the bytes written. */
static void check_region(ckpt_reader *r, const ckcase *c, int t, rng *g)
{
    long idx = ckpt_reader_find(r, c->fqn[t]);
    ck_assert_int_ge(idx, 0);
    int64_t off[3], size[3];
    for (int d = 0; d < c->ndim[t]; d++) {
        off[d] = rnd_in(g, 0, c->shape[t][d] - 1);
        size[d] = rnd_in(g, 1, c->shape[t][d] - off[d]);
    }
    uint64_t len;
    unsigned char *want = box_bytes(c, t, off, size, &len);
    unsigned char *got = malloc(len + 1);
    ckpt_error e = { 0 };
    ck_assert_msg(ckpt_read_region(r, (size_t)idx, off, size, got, &e) == 0,
                  "%s: %s", c->fqn[t], e.msg);
    ck_assert_msg(!memcmp(got, want, len), "%s: region differs", c->fqn[t]);
    free(got);
    free(want);
}

/* ---------------------------------------------------------- the index */

/* Tensors alone at open; each tensor's chunks on request, once, equal to
 * what the eager load gives, in any order. */
START_TEST(test_lazy_equals_eager)
{
    rng g = { 0x1234567u + (uint64_t)_i * 7777 };
    ckcase c;
    make_checkpoint(&c, &g, (int)rnd_in(&g, 2, MAXT));
    ckpt_index *ea, *lz;
    ckpt_index_data all, d;
    ckpt_error e = { 0 };
    open_index(&c, &ea);
    open_index(&c, &lz);
    ck_assert_msg(ckpt_index_load(ea, &all, &e) == 0, "%s", e.msg);
    ck_assert_msg(ckpt_index_load_tensors(lz, &d, &e) == 0, "%s", e.msg);
    ck_assert_uint_eq(d.ntensors, all.ntensors);
    ck_assert_uint_eq(d.nfiles, all.nfiles);
    ck_assert_uint_eq(d.nmeta, all.nmeta);
    for (size_t t = 0; t < d.ntensors; t++) {
        const ckpt_index_tensor *a = &all.tensors[t], *b = &d.tensors[t];
        ck_assert_int_eq(b->chunks_loaded, 0);
        ck_assert_ptr_null(b->chunks);
        ck_assert_str_eq(a->fqn, b->fqn);
        ck_assert_uint_eq(a->nchunks, b->nchunks);
        ck_assert_uint_eq(a->nframes, b->nframes);
        ck_assert_uint_eq(a->codec_mask, b->codec_mask);
        ck_assert_uint_eq(a->stored_bytes, b->stored_bytes);
        ck_assert_uint_eq(a->nbytes, b->nbytes);
    }
    for (size_t k = 0; k < d.ntensors; k++) {
        size_t t = d.ntensors - 1 - k;   /* not in order */
        ck_assert_msg(ckpt_index_load_chunks(lz, &d, t, &e) == 0, "%s",
                      e.msg);
        const ckpt_index_chunk *first = d.tensors[t].chunks;
        ck_assert_int_eq(ckpt_index_load_chunks(lz, &d, t, &e), 0);
        ck_assert_ptr_eq(d.tensors[t].chunks, first);   /* loaded once */
        for (size_t u = 0; u < d.ntensors; u++)   /* only t's */
            ck_assert_int_eq(d.tensors[u].chunks_loaded,
                             u == t || d.tensors[u].chunks != NULL);
        for (size_t ch = 0; ch < d.tensors[t].nchunks; ch++)
            chunk_eq(&all.tensors[t], &all.tensors[t].chunks[ch],
                     &d.tensors[t].chunks[ch]);
    }
    ckpt_index_data_free(&all);
    ckpt_index_data_free(&d);
    ckpt_index_close(ea);
    ckpt_index_close(lz);
    /* the reader: every chunk as the eager load gives it, data intact */
    ckpt_reader *r;
    ck_assert_int_eq(ckpt_reader_open(&r, c.dir, NULL, &e), 0);
    open_index(&c, &ea);
    ck_assert_int_eq(ckpt_index_load(ea, &all, &e), 0);
    for (int t = 0; t < c.nt; t++)
        check_region(r, &c, t, &g);
    for (size_t t = 0; t < all.ntensors; t++)
        for (size_t ch = 0; ch < all.tensors[t].nchunks; ch++) {
            ckpt_chunk_info ci;
            const ckpt_index_chunk *want = &all.tensors[t].chunks[ch];
            ck_assert_int_eq(ckpt_reader_chunk(r, t, ch, &ci), 0);
            for (int k = 0; k < all.tensors[t].ndim; k++) {
                ck_assert_int_eq(ci.offsets[k], want->offsets[k]);
                ck_assert_int_eq(ci.sizes[k], want->sizes[k]);
            }
            ck_assert_str_eq(ci.file, all.files[want->file].path);
            ck_assert_uint_eq(ci.nframes, want->nframes);
        }
    ck_assert_int_eq(ckpt_verify(r, NULL, NULL, NULL, &e), 0);
    ckpt_index_data_free(&all);
    ckpt_index_close(ea);
    ckpt_reader_close(r);
    drop_checkpoint(&c);
}
END_TEST

/* The index searches that lazy loading relies on. */
START_TEST(test_access_paths)
{
    rng g = { 99 };
    ckcase c;
    make_checkpoint(&c, &g, 2);
    static const char *const queries[] = {
        "SELECT id, tensor_id, seq, offsets, sizes, file_id, raw_bytes, "
        "stored_bytes, nframes, codec_mask FROM chunks WHERE tensor_id = 1 "
        "ORDER BY seq",
        "SELECT f.seq, f.file_offset, f.stored_size, f.raw_offset, "
        "f.raw_size, f.codec, f.checksum, c.codec_mask FROM frames AS f "
        "JOIN chunks AS c ON c.id = f.chunk_id WHERE f.chunk_id = 1 "
        "ORDER BY f.seq",
        "SELECT seq FROM frames WHERE chunk_id = 1 AND raw_offset <= 5000 "
        "ORDER BY raw_offset DESC LIMIT 1",
    };
    char p[128];
    index_path(&c, p, sizeof p);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(p, &db), SQLITE_OK);
    for (size_t q = 0; q < sizeof queries / sizeof *queries; q++) {
        char sql[512];
        snprintf(sql, sizeof sql, "EXPLAIN QUERY PLAN %s", queries[q]);
        sqlite3_stmt *st;
        ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL),
                         SQLITE_OK);
        int searches = 0;
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *detail = (const char *)sqlite3_column_text(st, 3);
            ck_assert_msg(strncmp(detail, "SCAN", 4) != 0,
                          "query %zu scans: %s", q, detail);
            searches += strncmp(detail, "SEARCH", 6) == 0;
        }
        ck_assert_int_gt(searches, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    drop_checkpoint(&c);
}
END_TEST

/* ---------------------------------------------------------- the reader */

enum { NTHREADS = 8 };

typedef struct racer {
    ckpt_reader *r;
    const ckcase *c;
    pthread_barrier_t *go;
    int t, k;
    const int64_t *offsets;   /* of the tensor's chunk 0, as seen */
    int failed;
} racer;

static void *race(void *arg)
{
    racer *x = arg;
    rng g = { 0x777u + (uint64_t)x->k * 31 + (uint64_t)x->t };
    long idx = ckpt_reader_find(x->r, x->c->fqn[x->t]);
    pthread_barrier_wait(x->go);
    ckpt_chunk_info ci;
    if (x->k % 2) {
        check_region(x->r, x->c, x->t, &g);   /* the first use is a read */
        x->failed = ckpt_reader_chunk(x->r, (size_t)idx, 0, &ci) != 0;
    } else {                                  /* or a lookup */
        x->failed = ckpt_reader_chunk(x->r, (size_t)idx, 0, &ci) != 0;
        check_region(x->r, x->c, x->t, &g);
    }
    x->offsets = ci.offsets;
    return NULL;
}

/* Threads that use a tensor for the first time at once all get its one
 * set of chunks and the right bytes. */
START_TEST(test_concurrent_first_use)
{
    rng g = { 4242 };
    ckcase c;
    make_checkpoint(&c, &g, MAXT);
    ckpt_reader *r;
    ckpt_error e = { 0 };
    ck_assert_int_eq(ckpt_reader_open(&r, c.dir, NULL, &e), 0);
    for (int t = 0; t < c.nt; t++) {
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, NTHREADS);
        racer x[NTHREADS];
        pthread_t th[NTHREADS];
        for (int k = 0; k < NTHREADS; k++) {
            x[k] = (racer){ r, &c, &go, t, k, NULL, 0 };
            ck_assert_int_eq(pthread_create(&th[k], NULL, race, &x[k]), 0);
        }
        for (int k = 0; k < NTHREADS; k++)
            pthread_join(th[k], NULL);
        pthread_barrier_destroy(&go);
        for (int k = 0; k < NTHREADS; k++) {
            ck_assert_int_eq(x[k].failed, 0);
            ck_assert_ptr_nonnull(x[k].offsets);
            ck_assert_ptr_eq(x[k].offsets, x[0].offsets);
        }
    }
    ckpt_reader_close(r);
    drop_checkpoint(&c);
}
END_TEST

/* An index without tensors.nframes and codec_mask (as written before
 * they existed) opens with every chunk loaded and reads the same. */
START_TEST(test_index_without_totals)
{
    rng g = { 31337 };
    ckcase c;
    make_checkpoint(&c, &g, 4);
    ckpt_index *ix;
    ckpt_index_data before, d;
    ckpt_error e = { 0 };
    open_index(&c, &ix);
    ck_assert_int_eq(ckpt_index_load_tensors(ix, &before, &e), 0);
    ckpt_index_close(ix);
    exec_sql(&c, "ALTER TABLE tensors DROP COLUMN nframes;"
                 "ALTER TABLE tensors DROP COLUMN codec_mask");
    open_index(&c, &ix);
    ck_assert_msg(ckpt_index_load_tensors(ix, &d, &e) == 0, "%s", e.msg);
    for (size_t t = 0; t < d.ntensors; t++) {
        ck_assert_int_eq(d.tensors[t].chunks_loaded, 1);
        ck_assert_uint_eq(d.tensors[t].nframes, before.tensors[t].nframes);
        ck_assert_uint_eq(d.tensors[t].codec_mask,
                          before.tensors[t].codec_mask);
        ck_assert_int_eq(ckpt_index_load_chunks(ix, &d, t, &e), 0);
    }
    ckpt_index_data_free(&d);
    ckpt_index_close(ix);
    ckpt_reader *r;
    ck_assert_msg(ckpt_reader_open(&r, c.dir, NULL, &e) == 0, "%s", e.msg);
    for (int t = 0; t < c.nt; t++) {
        ckpt_tensor_info ti;
        long idx = ckpt_reader_find(r, before.tensors[t].fqn);
        ck_assert_int_eq(ckpt_reader_info(r, (size_t)idx, &ti), 0);
        ck_assert_uint_eq(ti.nframes, before.tensors[t].nframes);
        check_region(r, &c, t, &g);
    }
    ck_assert_int_eq(ckpt_verify(r, NULL, NULL, NULL, &e), 0);
    ckpt_reader_close(r);
    ckpt_index_data_free(&before);
    drop_checkpoint(&c);
}
END_TEST

typedef struct faults {
    int n;
    char first[512];
} faults;

static void on_fault(void *arg, const ckpt_fault *f)
{
    faults *fs = arg;
    if (fs->n++ == 0)
        snprintf(fs->first, sizeof fs->first, "%s: %s", f->fqn, f->msg);
}

/* Damages tensor `bad`'s chunks (or its recorded totals) with sql, then
 * expects: open fine, other tensors readable, bad refused when first
 * used by a read, a lookup or verify, with `want` in the message. */
static void damaged_tensor(const char *sql_fmt, const char *want)
{
    rng g = { 5151 };
    ckcase c;
    make_checkpoint(&c, &g, 3);
    int bad = 1;
    char sql[512];
    snprintf(sql, sizeof sql, sql_fmt, c.fqn[bad]);
    exec_sql(&c, sql);
    ckpt_reader *r;
    ckpt_error e = { 0 };
    ck_assert_msg(ckpt_reader_open(&r, c.dir, NULL, &e) == 0, "%s", e.msg);
    check_region(r, &c, 0, &g);
    check_region(r, &c, 2, &g);
    long idx = ckpt_reader_find(r, c.fqn[bad]);
    unsigned char buf[64];
    int64_t off[3] = { 0, 0, 0 }, size[3] = { 1, 1, 1 };
    for (int round = 0; round < 2; round++) {   /* refused every time */
        memset(&e, 0, sizeof e);
        ck_assert_int_eq(ckpt_read_region(r, (size_t)idx, off, size, buf, &e),
                         -EIO);
        ck_assert_msg(strstr(e.msg, "damaged index") &&
                      strstr(e.msg, c.fqn[bad]) && strstr(e.msg, want),
                      "message: %s", e.msg);
    }
    ckpt_chunk_info ci;
    ck_assert_int_eq(ckpt_reader_chunk(r, (size_t)idx, 0, &ci), -EIO);
    faults fs = { 0 };
    ck_assert_int_ge(ckpt_verify(r, on_fault, &fs, NULL, &e), 1);
    ck_assert_msg(strstr(fs.first, c.fqn[bad]) && strstr(fs.first, want),
                  "fault: %s", fs.first);
    ckpt_reader_close(r);
    drop_checkpoint(&c);
}

START_TEST(test_damaged_chunks_found_on_use)
{
    damaged_tensor("UPDATE chunks SET raw_bytes = raw_bytes + 1 WHERE "
                   "tensor_id = (SELECT id FROM tensors WHERE fqn = '%s')",
                   "raw_bytes");
    damaged_tensor("UPDATE tensors SET nframes = nframes + 1 WHERE "
                   "fqn = '%s'", "records");
    damaged_tensor("UPDATE tensors SET codec_mask = codec_mask | 64 WHERE "
                   "fqn = '%s'", "codecs");
    damaged_tensor("DELETE FROM chunks WHERE seq = 0 AND tensor_id = "
                   "(SELECT id FROM tensors WHERE fqn = '%s')", "chunk");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("lazy");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_lazy_equals_eager, 0, 6);
    tcase_add_test(tc, test_access_paths);
    tcase_add_test(tc, test_concurrent_first_use);
    tcase_add_test(tc, test_index_without_totals);
    tcase_add_test(tc, test_damaged_chunks_found_on_use);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(suite());
}
