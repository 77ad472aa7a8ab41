/*
 * test_chunkpack.c - packed chunks (index format version 3,
 * format/chunkpack.h): the grid's boxes tile a tensor in row-major order;
 * chunk records read back what was put, and a record cut anywhere is
 * refused; checkpoints saved with regular grids (even and uneven last
 * blocks, 1-3 dims, several frames per chunk) are packed, and every
 * region read from them equals the data the test generated, as it does
 * from the same tensors saved with irregular layouts (kept as rows); a
 * damaged pack is refused naming its tensor while others stay readable.
 */
#include <check.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"
#include "format/chunkpack.h"
#include "unit_util.h"

/* ------------------------------------------------------------ the grid */

START_TEST(test_grid_tiles)
{
    srng r = srng_seeded("grid_tiles", 26);
    for (int iter = 0; iter < 200; iter++) {
        int nd = (int)srng_range(&r, 1, 3);
        int64_t shape[3], block[3], total = 1;
        for (int d = 0; d < nd; d++) {
            shape[d] = srng_range(&r, 1, 9);
            block[d] = srng_range(&r, 1, shape[d]);
            total *= shape[d];
        }
        uint64_t n = ckpt_grid_count(nd, shape, block), want = 1;
        for (int d = 0; d < nd; d++)
            want *= (uint64_t)((shape[d] + block[d] - 1) / block[d]);
        ck_assert_uint_eq(n, want);
        unsigned char *seen = calloc((size_t)total, 1);
        int64_t prev[3] = { -1, -1, -1 };
        for (uint64_t k = 0; k < n; k++) {
            int64_t off[3], size[3];
            ckpt_grid_box(nd, shape, block, k, off, size);
            /* row-major order: after the previous box */
            int d = 0;
            while (d < nd && prev[d] == off[d])
                d++;
            ck_assert_int_lt(d, nd);
            ck_assert_int_lt(prev[d], off[d]);
            memcpy(prev, off, sizeof off);
            for (int e = 0; e < nd; e++) {
                ck_assert_int_eq(off[e] % block[e], 0);
                ck_assert_int_ge(size[e], 1);
                ck_assert_int_le(size[e], block[e]);
                ck_assert_int_le(off[e] + size[e], shape[e]);
            }
            /* mark its elements */
            int64_t i[3] = { 0, 0, 0 };
            for (;;) {
                int64_t flat = 0;
                for (int e = 0; e < nd; e++)
                    flat = flat * shape[e] + off[e] + i[e];
                ck_assert_int_eq(seen[flat], 0);
                seen[flat] = 1;
                int e = nd - 1;
                while (e >= 0 && ++i[e] == size[e])
                    i[e--] = 0;
                if (e < 0)
                    break;
            }
        }
        for (int64_t e = 0; e < total; e++)
            ck_assert_int_eq(seen[e], 1);
        free(seen);
    }
    int64_t shape[2] = { 4, 5 }, bad[2] = { 0, 5 }, big[2] = { 5, 5 };
    ck_assert_uint_eq(ckpt_grid_count(2, shape, bad), 0);
    ck_assert_uint_eq(ckpt_grid_count(2, shape, big), 0);
}
END_TEST

/* ------------------------------------------------------------ records */

enum { NCH = 50, MAXF = 5 };

START_TEST(test_records_round_trip)
{
    srng r = srng_seeded("records", 7);
    ckpt_frame_rec fr[NCH][MAXF];
    size_t nf[NCH];
    uint64_t file[NCH], hash[NCH];
    ckpt_strbuf b = { 0 };
    for (int c = 0; c < NCH; c++) {
        nf[c] = (size_t)srng_range(&r, 1, MAXF);
        file[c] = (uint64_t)srng_range(&r, 1, 1 << 20);
        uint64_t at = (uint64_t)srng_range(&r, 0, (int64_t)1 << 40), raw = 0;
        for (size_t k = 0; k < nf[c]; k++) {
            ckpt_frame_rec *f = &fr[c][k];
            /* mostly back to back, sometimes a gap */
            at += srng_range(&r, 0, 3) == 0 ? (uint64_t)srng_range(&r, 1, 999)
                                             : 0;
            f->file_offset = at;
            f->stored_size = (uint64_t)srng_range(&r, 0, 1 << 21);
            f->raw_offset = raw;
            f->raw_size = (uint64_t)srng_range(&r, 1, 1 << 20);
            f->checksum = srng_next(&r);
            f->codec = (int)srng_range(&r, 0, 8);
            f->base = 0;
            at += f->stored_size;
            raw += f->raw_size;
        }
        hash[c] = srng_range(&r, 0, 1) ? fr[c][0].checksum : srng_next(&r);
        ckpt_pack_put(&b, file[c], fr[c], nf[c], hash[c]);
    }
    ck_assert(!b.oom);
    size_t pos = 0;
    for (int c = 0; c < NCH; c++) {
        ckpt_pack_chunk pc;
        ckpt_frame_rec got[MAXF];
        ck_assert_int_eq(ckpt_pack_get((const uint8_t *)b.p, b.len, &pos,
                                       &pc, got, MAXF), 0);
        ck_assert_int_eq(pc.file_id, (int64_t)file[c]);
        ck_assert_uint_eq(pc.nframes, nf[c]);
        uint64_t raw = 0, stored = 0;
        unsigned mask = 0;
        for (size_t k = 0; k < nf[c]; k++) {
            ck_assert_uint_eq(got[k].file_offset, fr[c][k].file_offset);
            ck_assert_uint_eq(got[k].stored_size, fr[c][k].stored_size);
            ck_assert_uint_eq(got[k].raw_offset, fr[c][k].raw_offset);
            ck_assert_uint_eq(got[k].raw_size, fr[c][k].raw_size);
            ck_assert_uint_eq(got[k].checksum, fr[c][k].checksum);
            ck_assert_int_eq(got[k].codec, fr[c][k].codec);
            ck_assert_int_eq(got[k].base, 0);
            raw += fr[c][k].raw_size;
            stored += fr[c][k].stored_size;
            mask |= 1u << fr[c][k].codec;
        }
        ck_assert_uint_eq(pc.raw_bytes, raw);
        ck_assert_uint_eq(pc.stored_bytes, stored);
        ck_assert_uint_eq(pc.codec_mask, mask);
    }
    ck_assert_uint_eq(pos, b.len);
    /* The last record cut anywhere is refused. */
    size_t last = 0;
    for (int c = 0; c < NCH - 1; c++) {
        ckpt_pack_chunk pc;
        ck_assert_int_eq(ckpt_pack_get((const uint8_t *)b.p, b.len, &last,
                                       &pc, NULL, 0), 0);
    }
    for (size_t cut = last; cut < b.len; cut++) {
        size_t p = last;
        ckpt_pack_chunk pc;
        ck_assert_int_eq(ckpt_pack_get((const uint8_t *)b.p, cut, &p, &pc,
                                       NULL, 0), -1);
    }
    /* More frames than the caller has room for. */
    size_t p = 0;
    ckpt_pack_chunk pc;
    ckpt_frame_rec one[1];
    if (nf[0] > 1)
        ck_assert_int_eq(ckpt_pack_get((const uint8_t *)b.p, b.len, &p, &pc,
                                       one, 1), -1);
    ckpt_strbuf_free(&b);
}
END_TEST

/* ------------------------------------------------------------ checkpoints */

/* The tensors saved: a regular grid in each, and the same shapes cut
 * irregularly. */
typedef struct tcase {
    const char *fqn;
    int ndim;
    int64_t shape[3];
    int64_t block[3];   /* the grid of the regular save */
} tcase;

static const tcase CASES[] = {
    { "even.w", 2, { 64, 24 }, { 1, 24 } },        /* dim-0, 64 chunks */
    { "uneven.w", 2, { 50, 37 }, { 4, 5 } },       /* 13 x 8, smaller last */
    { "cube.w", 3, { 9, 10, 11 }, { 2, 3, 3 } },   /* 5 x 4 x 4 */
    { "frames.w", 2, { 256, 512 }, { 16, 128 } },  /* 64 chunks, 2 frames */
    { "small.w", 2, { 8, 8 }, { 4, 4 } },          /* 4 chunks: rows */
};
#define NCASES (sizeof CASES / sizeof *CASES)

static float value_at(size_t t, int64_t flat)
{
    return (float)(flat % 100003) + (float)t * 0.25f;
}

/* The f32 values of box (off, size) of tensor t. */
static float *box_values(size_t t, const int64_t *off, const int64_t *size)
{
    const tcase *c = &CASES[t];
    int64_t n = 1;
    for (int d = 0; d < c->ndim; d++)
        n *= size[d];
    float *v = xmalloc((size_t)n * sizeof *v);
    for (int64_t k = 0; k < n; k++) {
        int64_t rest = k, flat = 0, idx[3];
        for (int d = c->ndim - 1; d >= 0; d--) {
            idx[d] = off[d] + rest % size[d];
            rest /= size[d];
        }
        for (int d = 0; d < c->ndim; d++)
            flat = flat * c->shape[d] + idx[d];
        v[k] = value_at(t, flat);
    }
    return v;
}

static void put_box(ckpt_writer *w, size_t t, const int64_t *off,
                    const int64_t *size)
{
    const tcase *c = &CASES[t];
    float *v = box_values(t, off, size);
    ckpt_piece p = { c->fqn, CKPT_F32, c->ndim, c->shape, off, size, v };
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_writer_put(w, &p, &err) == 0, "%s", err.msg);
    free(v);
}

/* Saves every tensor: as its grid (regular), or cut along dim 0 into
 * slabs of 1, 2, 3, ... rows and the rest whole (irregular); a delta of
 * checkpoint `base` when it is not NULL. */
static void save(const char *dir, int regular, const char *base)
{
    ckpt_write_opts o;
    ckpt_write_opts_init(&o);
    o.base = base;
    o.frame_size = CKPT_MIN_FRAME_SIZE;
    o.threads = 1;
    ckpt_writer *w;
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_writer_open(&w, dir, "w0", &o, &err) == 0, "%s",
                  err.msg);
    for (size_t t = 0; t < NCASES; t++) {
        const tcase *c = &CASES[t];
        int64_t off[3] = { 0, 0, 0 }, size[3];
        if (regular) {
            uint64_t n = ckpt_grid_count(c->ndim, c->shape, c->block);
            for (uint64_t k = 0; k < n; k++) {
                ckpt_grid_box(c->ndim, c->shape, c->block, k, off, size);
                put_box(w, t, off, size);
            }
            continue;
        }
        memcpy(size, c->shape, sizeof size);
        for (int64_t rows = 1; off[0] < c->shape[0]; off[0] += rows++) {
            size[0] = c->shape[0] - off[0] < rows ? c->shape[0] - off[0]
                                                   : rows;
            put_box(w, t, off, size);
        }
    }
    ck_assert_msg(ckpt_writer_close(w, &err) == 0, "%s", err.msg);
    ckpt_commit_opts co;
    ckpt_commit_opts_init(&co);
    co.sync = 0;
    ck_assert_msg(ckpt_commit(dir, &co, &err) == 0, "%s", err.msg);
}

static int64_t sql_int(const char *dir, const char *sql)
{
    char path[512];
    snprintf(path, sizeof path, "%s/index.db", dir);
    sqlite3 *db;
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    int rc = sqlite3_step(st);
    int64_t v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    ck_assert(rc == SQLITE_ROW || rc == SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* Random regions of every tensor of dir equal the generated values. */
static void check_regions(const char *dir, srng *r)
{
    ckpt_reader *rd;
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_reader_open(&rd, dir, NULL, &err) == 0, "%s",
                  err.msg);
    for (size_t t = 0; t < NCASES; t++) {
        const tcase *c = &CASES[t];
        long idx = ckpt_reader_find(rd, c->fqn);
        ck_assert_int_ge(idx, 0);
        for (int iter = 0; iter < 40; iter++) {
            int64_t off[3], size[3], n = 1;
            for (int d = 0; d < c->ndim; d++) {
                off[d] = srng_range(r, 0, c->shape[d] - 1);
                size[d] = srng_range(r, 1, c->shape[d] - off[d]);
                n *= size[d];
            }
            if (iter == 0) {   /* the whole tensor once */
                n = 1;
                for (int d = 0; d < c->ndim; d++) {
                    off[d] = 0;
                    size[d] = c->shape[d];
                    n *= size[d];
                }
            }
            float *got = xmalloc((size_t)n * sizeof *got);
            float *want = box_values(t, off, size);
            ck_assert_msg(ckpt_read_region(rd, (size_t)idx, off, size, got,
                                           &err) == 0, "%s", err.msg);
            ck_assert_msg(memcmp(got, want, (size_t)n * sizeof *got) == 0,
                          "%s: region %d differs", c->fqn, iter);
            free(got);
            free(want);
        }
    }
    ckpt_reader_close(rd);
}

START_TEST(test_packed_region_reads)
{
    char *tmp = make_tmpdir_tagged("chunkpack");
    char reg[512], irr[512];
    snprintf(reg, sizeof reg, "%s/regular", tmp);
    snprintf(irr, sizeof irr, "%s/irregular", tmp);
    save(reg, 1, NULL);
    save(irr, 0, NULL);
    /* Grids of 64 chunks or more are packed; the rest are rows. */
    ck_assert_int_eq(sql_int(reg, "PRAGMA user_version"), 3);
    ck_assert_int_eq(sql_int(reg, "SELECT count(*) FROM packs"), 4);
    ck_assert_int_eq(sql_int(reg, "SELECT count(*) FROM chunks"), 4);
    ck_assert_int_eq(sql_int(reg, "SELECT value FROM meta WHERE key = "
                                  "'format_version'"), 3);
    ck_assert_int_eq(sql_int(irr, "PRAGMA user_version"), 1);
    ck_assert_int_eq(sql_int(reg, "SELECT count(*) FROM frames"), 4);
    /* Chunk layout as saved, frames as many as the bytes need. */
    ckpt_reader *rd;
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_reader_open(&rd, reg, NULL, &err) == 0, "%s",
                  err.msg);
    for (size_t t = 0; t < NCASES; t++) {
        const tcase *c = &CASES[t];
        size_t idx = (size_t)ckpt_reader_find(rd, c->fqn);
        ckpt_tensor_info ti;
        ck_assert_int_eq(ckpt_reader_info(rd, idx, &ti), 0);
        uint64_t n = ckpt_grid_count(c->ndim, c->shape, c->block);
        ck_assert_uint_eq(ti.nchunks, n);
        for (uint64_t k = 0; k < n; k++) {
            int64_t off[3], size[3];
            ckpt_chunk_info ci;
            ckpt_grid_box(c->ndim, c->shape, c->block, k, off, size);
            ck_assert_int_eq(ckpt_reader_chunk(rd, idx, k, &ci), 0);
            ck_assert(!memcmp(ci.offsets, off, (size_t)c->ndim * 8));
            ck_assert(!memcmp(ci.sizes, size, (size_t)c->ndim * 8));
            ck_assert_str_eq(ci.file, "data/w0.shard");
            ck_assert_uint_eq(ci.nframes, (ci.raw_bytes + 4095) / 4096);
        }
    }
    ckpt_reader_close(rd);
    srng r = srng_seeded("packed_region_reads", 16384);
    check_regions(reg, &r);
    check_regions(irr, &r);
    remove_tmpdir(tmp);
}
END_TEST

START_TEST(test_damaged_pack)
{
    char *tmp = make_tmpdir_tagged("chunkpack");
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/ck", tmp);
    save(dir, 1, NULL);
    snprintf(path, sizeof path, "%s/index.db", dir);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, "UPDATE packs SET chunks = "
                                  "substr(chunks, 1, length(chunks) - 3) "
                                  "WHERE tensor_id = (SELECT id FROM tensors "
                                  "WHERE fqn = 'uneven.w')", NULL, NULL,
                                  NULL), SQLITE_OK);
    sqlite3_close(db);
    ckpt_reader *rd;
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_reader_open(&rd, dir, NULL, &err) == 0, "%s",
                  err.msg);
    int64_t off[2] = { 0, 0 }, size[2] = { 1, 1 };
    float v;
    size_t bad = (size_t)ckpt_reader_find(rd, "uneven.w");
    ck_assert_int_eq(ckpt_read_region(rd, bad, off, size, &v, &err), -EIO);
    ck_assert_msg(strstr(err.msg, "damaged index") &&
                  strstr(err.msg, "uneven.w"), "%s", err.msg);
    size_t good = (size_t)ckpt_reader_find(rd, "cube.w");
    int64_t off3[3] = { 8, 9, 10 }, size3[3] = { 1, 1, 1 };
    ck_assert_int_eq(ckpt_read_region(rd, good, off3, size3, &v, &err), 0);
    ck_assert(v == value_at(2, (8 * 10 + 9) * 11 + 10));
    ckpt_reader_close(rd);
    remove_tmpdir(tmp);
}
END_TEST

/* A delta saved on a packed base reads its unchanged frames from the
 * base's packs. */
START_TEST(test_delta_on_packed_base)
{
    char *tmp = make_tmpdir_tagged("chunkpack");
    char base[512], delta[512];
    snprintf(base, sizeof base, "%s/step-1", tmp);
    snprintf(delta, sizeof delta, "%s/step-2", tmp);
    save(base, 1, NULL);
    save(delta, 1, base);
    ck_assert_int_eq(sql_int(base, "PRAGMA user_version"), 3);
    ck_assert_int_eq(sql_int(delta, "PRAGMA user_version"), 2);
    ck_assert_int_eq(sql_int(delta, "SELECT count(*) FROM frames WHERE "
                                    "codec = 9"),
                     sql_int(delta, "SELECT count(*) FROM frames"));
    srng r = srng_seeded("delta_on_packed_base", 2);
    check_regions(delta, &r);
    remove_tmpdir(tmp);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("chunkpack");
    TCase *tc = tcase_create("chunkpack");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_grid_tiles);
    tcase_add_test(tc, test_records_round_trip);
    tcase_add_test(tc, test_packed_region_reads);
    tcase_add_test(tc, test_damaged_pack);
    tcase_add_test(tc, test_delta_on_packed_base);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(suite());
}
