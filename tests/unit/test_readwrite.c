/*
 * test_readwrite.c - end-to-end tests of the writer, commit and reader:
 * random tensors cut into random grids by several writers, with random
 * codecs and frame sizes, read back whole, by unaligned byte ranges and by
 * random regions, and compared with a naive element-by-element reference;
 * plus the error paths (planner refusals, corruption, uncommitted
 * directories, wrong byte counts), concurrent readers, and batch reads
 * of many tensors at once.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptfs.h"
#include "common/fileio.h"
#include "unit_util.h"
#include "write/writer.h"

/* ------------------------------------------------------------ helpers */

static char *make_tmpdir(void)
{
    return make_tmpdir_tagged("rw");
}

static uint64_t numel_of(int ndim, const int64_t *s)
{
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (uint64_t)s[i];
    return n;
}

/* Fills the global image: compressible or not, never constant. */
static void fill_image(unsigned char *buf, uint64_t n, int compressible,
                       rng *r)
{
    for (uint64_t i = 0; i < n; i++)
        buf[i] = compressible ? (unsigned char)((i / 3) % 5)
                              : (unsigned char)rnd(r);
}

/* Naive copy of a box out of a global row-major image, element by
 * element, computing each element's coordinates: the reference. */
static void naive_extract(const unsigned char *img, int ndim,
                          const int64_t *shape, size_t isz,
                          const int64_t *off, const int64_t *size,
                          unsigned char *out)
{
    uint64_t n = numel_of(ndim, size);
    int64_t idx[CKPT_MAX_DIMS];
    for (uint64_t e = 0; e < n; e++) {
        uint64_t rest = e;
        for (int d = ndim - 1; d >= 0; d--) {
            idx[d] = (int64_t)(rest % (uint64_t)size[d]) + off[d];
            rest /= (uint64_t)size[d];
        }
        uint64_t g = 0;
        for (int d = 0; d < ndim; d++)
            g = g * (uint64_t)shape[d] + (uint64_t)idx[d];
        memcpy(out + e * isz, img + g * isz, isz);
    }
}

/* Splits [0, n) into k parts like numpy.array_split. */
static void split_dim(int64_t n, int k, int part, int64_t *off, int64_t *sz)
{
    int64_t base = n / k, extra = n % k;
    *off = part * base + (part < extra ? part : extra);
    *sz = base + (part < extra ? 1 : 0);
}

static const ckpt_dtype dtypes[] = { CKPT_U8, CKPT_BF16, CKPT_F32, CKPT_I64,
                                     CKPT_F16, CKPT_BOOL, CKPT_C64, CKPT_C128,
                                     CKPT_C32, CKPT_F8E8M0 };

typedef struct tensor_case {
    char fqn[64];
    ckpt_dtype dt;
    int ndim;
    int64_t shape[4];
    int grid[4];
    unsigned char *img;
    uint64_t nbytes;
} tensor_case;

static void make_case(tensor_case *tc, int i, rng *r)
{
    snprintf(tc->fqn, sizeof tc->fqn, "model.layer%d.w", i);
    tc->dt = dtypes[rnd(r) % (sizeof dtypes / sizeof *dtypes)];
    tc->ndim = (int)rnd_in(r, 0, 4);
    for (int d = 0; d < tc->ndim; d++) {
        tc->shape[d] = rnd_in(r, 1, d == 0 ? 70 : 23);
        if (rnd(r) % 23 == 0)
            tc->shape[d] = 0;    /* an empty tensor now and then */
        tc->grid[d] = (int)rnd_in(r, 1, 3);
    }
    tc->nbytes = numel_of(tc->ndim, tc->shape) * ckpt_dtype_size(tc->dt);
    tc->img = malloc(tc->nbytes + 1);
    fill_image(tc->img, tc->nbytes, (int)(rnd(r) & 1), r);
}

/* Writes every grid cell of tc as a piece, cell k by writer k % nw. */
static void write_case(const tensor_case *tc, ckpt_writer **w, int nw)
{
    int ncell = 1;
    for (int d = 0; d < tc->ndim; d++)
        ncell *= tc->grid[d];
    size_t isz = ckpt_dtype_size(tc->dt);
    for (int k = 0; k < ncell; k++) {
        int64_t off[4], sz[4];
        int rest = k;
        for (int d = tc->ndim - 1; d >= 0; d--) {
            split_dim(tc->shape[d], tc->grid[d], rest % tc->grid[d], &off[d],
                      &sz[d]);
            rest /= tc->grid[d];
        }
        uint64_t n = numel_of(tc->ndim, sz);
        if (n == 0 && k > 0)
            continue;   /* empty pieces: one is enough */
        unsigned char *buf = malloc(n * isz + 1);
        naive_extract(tc->img, tc->ndim, tc->shape, isz, off, sz, buf);
        ckpt_piece p = { tc->fqn, tc->dt, tc->ndim, tc->shape, off, sz, buf };
        ckpt_error e;
        ck_assert_msg(ckpt_writer_put(w[k % nw], &p, &e) == 0, "%s", e.msg);
        free(buf);
    }
}

static void commit_ok(const char *dir)
{
    ckpt_error e;
    ck_assert_msg(ckpt_commit(dir, NULL, &e) == 0, "%s", e.msg);
}

static ckpt_reader *open_ok(const char *dir)
{
    ckpt_reader *r;
    ckpt_error e;
    ck_assert_msg(ckpt_reader_open(&r, dir, NULL, &e) == 0, "%s", e.msg);
    return r;
}

/* A reader of dir with n decoder threads. */
static ckpt_reader *open_threads(const char *dir, int n)
{
    ckpt_read_opts ro;
    ckpt_read_opts_init(&ro);
    ro.threads = n;
    ckpt_reader *r;
    ckpt_error e;
    ck_assert_msg(ckpt_reader_open(&r, dir, &ro, &e) == 0, "%s", e.msg);
    return r;
}

static void check_byte_ranges(ckpt_reader *r, long t, const tensor_case *tc,
                              rng *g)
{
    unsigned char *buf = malloc(tc->nbytes + 16);
    ckpt_error e;
    int64_t n = ckpt_read(r, (size_t)t, buf, 0, tc->nbytes + 5, &e);
    ck_assert_msg(n == (int64_t)tc->nbytes, "%s: %s", tc->fqn, e.msg);
    ck_assert(memcmp(buf, tc->img, tc->nbytes) == 0);
    for (int k = 0; k < 20 && tc->nbytes; k++) {
        uint64_t lo = rnd(g) % tc->nbytes;
        uint64_t len = rnd(g) % (tc->nbytes - lo) + 1;
        n = ckpt_read(r, (size_t)t, buf, lo, len, &e);
        ck_assert_msg(n == (int64_t)len, "%s [%llu,+%llu): %s", tc->fqn,
                      (unsigned long long)lo, (unsigned long long)len, e.msg);
        ck_assert_msg(memcmp(buf, tc->img + lo, len) == 0, "%s bytes "
                      "[%llu,+%llu) differ", tc->fqn,
                      (unsigned long long)lo, (unsigned long long)len);
    }
    free(buf);
}

static void check_regions(ckpt_reader *r, long t, const tensor_case *tc,
                          rng *g)
{
    size_t isz = ckpt_dtype_size(tc->dt);
    unsigned char *got = malloc(tc->nbytes + 1), *want = malloc(tc->nbytes + 1);
    for (int k = 0; k < 20; k++) {
        int64_t off[4], sz[4];
        for (int d = 0; d < tc->ndim; d++) {
            off[d] = tc->shape[d] ? rnd_in(g, 0, tc->shape[d] - 1) : 0;
            sz[d] = rnd_in(g, 0, tc->shape[d] - off[d]);
        }
        uint64_t n = numel_of(tc->ndim, sz) * isz;
        ckpt_error e;
        naive_extract(tc->img, tc->ndim, tc->shape, isz, off, sz, want);
        ck_assert_msg(ckpt_read_region(r, (size_t)t, off, sz, got, &e) == 0,
                      "%s: %s", tc->fqn, e.msg);
        ck_assert_msg(memcmp(got, want, n) == 0, "%s region differs",
                      tc->fqn);
    }
    free(got);
    free(want);
}

/* ------------------------------------------------------------ tests */

/* Random grids, dtypes, codecs, frame sizes and writer counts. */
START_TEST(test_random_roundtrip)
{
    rng g = { 0x9e3779b97f4a7c15ull + (uint64_t)_i * 7919 };
    char *dir = make_tmpdir();
    char ck[4096];
    /* The writer creates missing ancestors of the checkpoint directory. */
    snprintf(ck, sizeof ck, "%s/run/a/step-1", dir);
    ckpt_write_opts o;
    ckpt_write_opts_init(&o);
    o.codec = rnd(&g) & 1 ? CKPT_CODEC_ZSTD : CKPT_CODEC_RAW;
    o.frame_size = (size_t)rnd_in(&g, 4096, 9000);
    o.threads = (int)rnd_in(&g, 1, 3);
    int nw = (int)rnd_in(&g, 1, 4);
    ckpt_writer *w[4];
    ckpt_error e;
    for (int k = 0; k < nw; k++) {
        char name[16];
        snprintf(name, sizeof name, "rank%d", k);
        ck_assert_msg(ckpt_writer_open(&w[k], ck, name, &o, &e) == 0, "%s",
                      e.msg);
    }
    enum { NT = 6 };
    tensor_case tc[NT];
    for (int i = 0; i < NT; i++) {
        make_case(&tc[i], i, &g);
        write_case(&tc[i], w, nw);
    }
    ck_assert_int_eq(ckpt_writer_set_meta(w[0], "step", "1", &e), 0);
    for (int k = 0; k < nw; k++)
        ck_assert_msg(ckpt_writer_close(w[k], &e) == 0, "%s", e.msg);
    commit_ok(ck);
    ckpt_reader *r = open_ok(ck);
    ck_assert_int_eq(ckpt_reader_format(r), CKPT_FORMAT_CKPTFS);
    ck_assert_uint_eq(ckpt_reader_count(r), NT);
    ck_assert_str_eq(ckpt_reader_meta_get(r, "step"), "1");
    for (int i = 0; i < NT; i++) {
        long t = ckpt_reader_find(r, tc[i].fqn);
        ck_assert_int_ge(t, 0);
        ckpt_tensor_info ti;
        ck_assert_int_eq(ckpt_reader_info(r, (size_t)t, &ti), 0);
        ck_assert_int_eq(ti.dtype, tc[i].dt);
        ck_assert_int_eq(ti.ndim, tc[i].ndim);
        ck_assert_uint_eq(ti.nbytes, tc[i].nbytes);
        check_byte_ranges(r, t, &tc[i], &g);
        check_regions(r, t, &tc[i], &g);
    }
    ck_assert_int_eq(ckpt_verify(r, NULL, NULL, NULL, &e), 0);
    ckpt_reader_close(r);
    for (int i = 0; i < NT; i++)
        free(tc[i].img);
    remove_tmpdir(dir);
}
END_TEST

/* A big 2-D tensor, dim-1 sharded, read by a resharded region and through
 * the parallel path; checks frame counts and that frames are cut on
 * element boundaries. */
START_TEST(test_large_resharded)
{
    char *dir = make_tmpdir();
    rng g = { 12345 };
    int64_t shape[2] = { 512, 1000 };
    size_t isz = 4;
    uint64_t nb = 512 * 1000 * isz;
    unsigned char *img = malloc(nb);
    fill_image(img, nb, 1, &g);
    ckpt_writer *w[2];
    ckpt_error e;
    ckpt_write_opts o;
    ckpt_write_opts_init(&o);
    o.frame_size = 65536 + 2;   /* not a multiple of 4: cut to 65536 */
    for (int k = 0; k < 2; k++) {
        char name[16];
        snprintf(name, sizeof name, "rank%d", k);
        ck_assert_int_eq(ckpt_writer_open(&w[k], dir, name, &o, &e), 0);
        int64_t off[2] = { 0, 500 * k }, sz[2] = { 512, 500 };
        unsigned char *buf = malloc(512 * 500 * isz);
        naive_extract(img, 2, shape, isz, off, sz, buf);
        ckpt_piece p = { "w", CKPT_F32, 2, shape, off, sz, buf };
        ck_assert_msg(ckpt_writer_put(w[k], &p, &e) == 0, "%s", e.msg);
        free(buf);
        ck_assert_int_eq(ckpt_writer_close(w[k], &e), 0);
    }
    commit_ok(dir);
    ckpt_reader *r = open_ok(dir);
    ckpt_chunk_info ci;
    ck_assert_int_eq(ckpt_reader_chunk(r, 0, 0, &ci), 0);
    ck_assert_uint_eq(ci.nframes, (512 * 500 * 4 + 65535) / 65536);
    ckpt_frame_info fi;
    ck_assert_int_eq(ckpt_reader_frame(r, 0, 0, 0, &fi, &e), 0);
    ck_assert_uint_eq(fi.raw_size, 65536);
    unsigned char *got = malloc(nb), *want = malloc(nb);
    /* Rows [0,16) need frame 0 of each chunk and nothing else. */
    int64_t top_off[2] = { 0, 0 }, top_sz[2] = { 16, 1000 };
    ckpt_stats st;
    naive_extract(img, 2, shape, isz, top_off, top_sz, want);
    ck_assert_int_eq(ckpt_read_region(r, 0, top_off, top_sz, got, &e), 0);
    ck_assert(memcmp(got, want, 16 * 1000 * isz) == 0);
    ckpt_reader_stats(r, &st);
    ck_assert_uint_eq(st.frames_decoded, 2);
    ck_assert_uint_eq(st.bytes_decoded, 2 * 65536);
    ck_assert_uint_eq(st.bytes_served, 16 * 1000 * isz);
    ck_assert_int_eq(ckpt_read(r, 0, got, 0, nb, &e), (int64_t)nb);
    ck_assert(memcmp(got, img, nb) == 0);
    int64_t off[2] = { 100, 250 }, sz[2] = { 400, 500 };   /* spans both */
    naive_extract(img, 2, shape, isz, off, sz, want);
    ck_assert_int_eq(ckpt_read_region(r, 0, off, sz, got, &e), 0);
    ck_assert(memcmp(got, want, 400 * 500 * isz) == 0);
    ckpt_reader_close(r);
    free(img);
    free(got);
    free(want);
    remove_tmpdir(dir);
}
END_TEST

/* A read whose segments are of very unequal sizes (dim-1 chunks of 0.3 and
 * 0.8 MiB per row), split over 8 decoder threads: every byte must arrive,
 * however the segments group into parallel tasks. */
START_TEST(test_parallel_uneven_segments)
{
    char *dir = make_tmpdir();
    rng g = { 31337 };
    int64_t w0 = 78643, w1 = 209715, rows = 12;
    int64_t shape[2] = { rows, w0 + w1 };
    size_t isz = 4;
    uint64_t nb = (uint64_t)(rows * (w0 + w1)) * isz;
    unsigned char *img = malloc(nb);
    fill_image(img, nb, 0, &g);
    ckpt_write_opts o;
    ckpt_write_opts_init(&o);
    o.codec = CKPT_CODEC_RAW;
    ckpt_writer *w;
    ckpt_error e;
    ck_assert_int_eq(ckpt_writer_open(&w, dir, "rank0", &o, &e), 0);
    for (int k = 0; k < 2; k++) {
        int64_t off[2] = { 0, k ? w0 : 0 }, sz[2] = { rows, k ? w1 : w0 };
        unsigned char *buf = malloc((size_t)(rows * sz[1]) * isz);
        naive_extract(img, 2, shape, isz, off, sz, buf);
        ckpt_piece p = { "w", CKPT_F32, 2, shape, off, sz, buf };
        ck_assert_msg(ckpt_writer_put(w, &p, &e) == 0, "%s", e.msg);
        free(buf);
    }
    ck_assert_int_eq(ckpt_writer_close(w, &e), 0);
    commit_ok(dir);
    ckpt_reader *r = open_threads(dir, 8);
    unsigned char *got = malloc(nb);
    memset(got, 0xA5, nb);
    ck_assert_int_eq(ckpt_read(r, 0, got, 0, nb, &e), (int64_t)nb);
    ck_assert_msg(memcmp(got, img, nb) == 0, "bytes lost in a parallel read");
    ckpt_reader_close(r);
    free(img);
    free(got);
    remove_tmpdir(dir);
}
END_TEST

/* ckpt_read_batch: many tensors, small (a frame or less) and large (many
 * frames), auto-coded, bf16 and f32, read whole and by regions in one
 * call on 4 decoder threads, byte for byte as the reference; its
 * refusals name the item and leave every destination untouched; a
 * corrupt frame in one item fails the batch with -EIO naming it. */
START_TEST(test_batch_read)
{
    char *dir = make_tmpdir();
    rng g = { 777 };
    enum { NT = 24, NREG = 8 };
    tensor_case tc[NT];
    ckpt_writer *w;
    ckpt_error e;
    ck_assert_int_eq(ckpt_writer_open(&w, dir, "rank0", NULL, &e), 0);
    for (int i = 0; i < NT; i++) {
        tensor_case *t = &tc[i];
        snprintf(t->fqn, sizeof t->fqn, "layers.%d.w", i);
        t->dt = i % 2 ? CKPT_BF16 : CKPT_F32;
        t->ndim = 2;
        /* every fourth one 1.5-3 MiB (2-3 frames), the rest 4-150 KiB */
        t->shape[0] = i % 4 == 0 ? rnd_in(&g, 384, 768) : rnd_in(&g, 1, 37);
        t->shape[1] = 1024;
        t->nbytes = numel_of(2, t->shape) * ckpt_dtype_size(t->dt);
        t->img = malloc(t->nbytes);
        fill_image(t->img, t->nbytes, i % 3 == 0, &g);
        ckpt_piece p = { t->fqn, t->dt, 2, t->shape, NULL, NULL, t->img };
        ck_assert_msg(ckpt_writer_put(w, &p, &e) == 0, "%s", e.msg);
    }
    ck_assert_int_eq(ckpt_writer_close(w, &e), 0);
    commit_ok(dir);
    ckpt_reader *r = open_threads(dir, 4);

    /* NT whole tensors, then NREG regions of random tensors */
    ckpt_read_item it[NT + NREG];
    unsigned char *got[NT + NREG], *want[NT + NREG];
    uint64_t len[NT + NREG], total = 0;
    int64_t roff[NREG][2], rsz[NREG][2];
    for (int k = 0; k < NT + NREG; k++) {
        const tensor_case *t = &tc[k < NT ? k : (int)(rnd(&g) % NT)];
        size_t isz = ckpt_dtype_size(t->dt);
        it[k] = (ckpt_read_item){ (size_t)ckpt_reader_find(r, t->fqn), NULL,
                                  NULL, NULL };
        len[k] = t->nbytes;
        want[k] = t->img;
        if (k >= NT) {
            int j = k - NT;
            for (int d = 0; d < 2; d++) {
                roff[j][d] = rnd_in(&g, 0, t->shape[d] - 1);
                rsz[j][d] = rnd_in(&g, 1, t->shape[d] - roff[j][d]);
            }
            it[k].offsets = roff[j];
            it[k].sizes = rsz[j];
            len[k] = numel_of(2, rsz[j]) * isz;
            want[k] = malloc(len[k]);
            naive_extract(t->img, 2, t->shape, isz, roff[j], rsz[j], want[k]);
        }
        got[k] = malloc(len[k]);
        memset(got[k], 0xA5, len[k]);
        it[k].dst = got[k];
        total += len[k];
    }

    /* refusals: nothing read, the item named */
    ckpt_read_item bad[3] = { it[0], it[1], it[2] };
    bad[2].idx = 9999;
    ck_assert_int_eq(ckpt_read_batch(r, bad, 3, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "item 2 of 3") && strstr(e.msg, "9999"),
                  "%s", e.msg);
    bad[2] = it[NT];
    int64_t past[2] = { tc[0].shape[0], 0 }, one[2] = { 1, 1 };
    bad[1].offsets = past;
    bad[1].sizes = one;
    bad[1].idx = (size_t)ckpt_reader_find(r, tc[0].fqn);
    ck_assert_int_eq(ckpt_read_batch(r, bad, 3, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "item 1 of 3") && strstr(e.msg, "outside"),
                  "%s", e.msg);
    bad[1] = it[1];
    bad[1].dst = NULL;
    ck_assert_int_eq(ckpt_read_batch(r, bad, 3, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "ckpt_read_batch: dst is NULL"), "%s", e.msg);
    for (int k = 0; k < 3; k++)
        for (uint64_t b = 0; b < len[k]; b++)
            ck_assert_msg(got[k][b] == 0xA5, "a refused batch wrote item %d",
                          k);
    ck_assert_int_eq(ckpt_read_batch(r, it, 0, &e), 0);

    ckpt_stats before, after;
    ckpt_reader_stats(r, &before);
    ck_assert_msg(ckpt_read_batch(r, it, NT + NREG, &e) == 0, "%s", e.msg);
    for (int k = 0; k < NT + NREG; k++)
        ck_assert_msg(memcmp(got[k], want[k], len[k]) == 0,
                      "batch item %d differs", k);
    ckpt_reader_stats(r, &after);
    ck_assert_uint_eq(after.bytes_served - before.bytes_served, total);
    ckpt_reader_close(r);

    /* one flipped byte in the last tensor's first frame: the batch fails
     * naming it, the others' bytes were read as they are */
    ckpt_chunk_info ci;
    ckpt_frame_info fi;
    r = open_ok(dir);
    size_t last = (size_t)ckpt_reader_find(r, tc[NT - 1].fqn);
    ck_assert_int_eq(ckpt_reader_chunk(r, last, 0, &ci), 0);
    ck_assert_int_eq(ckpt_reader_frame(r, last, 0, 0, &fi, &e), 0);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, ci.file);
    ckpt_reader_close(r);
    int fd = open(path, O_RDWR);
    unsigned char c;
    off_t at = (off_t)(fi.file_offset + fi.stored_size / 2);
    ck_assert_int_eq(pread(fd, &c, 1, at), 1);
    c ^= 0x40;
    ck_assert_int_eq(pwrite(fd, &c, 1, at), 1);
    close(fd);
    r = open_threads(dir, 4);
    ck_assert_int_eq(ckpt_read_batch(r, it, NT, &e), -EIO);
    ck_assert_msg(strstr(e.msg, tc[NT - 1].fqn) && strstr(e.msg, "checksum"),
                  "%s", e.msg);
    ckpt_reader_close(r);

    for (int k = 0; k < NT + NREG; k++) {
        free(got[k]);
        if (k >= NT)
            free(want[k]);
    }
    for (int i = 0; i < NT; i++)
        free(tc[i].img);
    remove_tmpdir(dir);
}
END_TEST

/* Writes one 1-D f32 piece [off, off+sz) of a length-n tensor whose
 * element i holds value i + bias, with writer w. */
static int put_range(ckpt_writer *w, const char *fqn, int64_t n, int64_t off,
                     int64_t sz, float bias, ckpt_error *e)
{
    float *v = malloc(sizeof(float) * (size_t)(sz + 1));
    for (int64_t i = 0; i < sz; i++)
        v[i] = (float)(off + i) + bias;
    ckpt_piece p = { fqn, CKPT_F32, 1, &n, &off, &sz, v };
    int rc = ckpt_writer_put(w, &p, e);
    free(v);
    return rc;
}

static void two_writers(const char *dir, int64_t a_off, int64_t a_sz,
                        int64_t b_off, int64_t b_sz, float b_bias)
{
    ckpt_writer *a, *b;
    ckpt_error e;
    ck_assert_int_eq(ckpt_writer_open(&a, dir, "rank0", NULL, &e), 0);
    ck_assert_int_eq(ckpt_writer_open(&b, dir, "rank1", NULL, &e), 0);
    ck_assert_int_eq(put_range(a, "t", 100, a_off, a_sz, 0, &e), 0);
    ck_assert_int_eq(put_range(b, "t", 100, b_off, b_sz, b_bias, &e), 0);
    ck_assert_int_eq(ckpt_writer_close(a, &e), 0);
    ck_assert_int_eq(ckpt_writer_close(b, &e), 0);
}

static void expect_commit_error(const char *dir, const char *w1,
                                const char *w2)
{
    ckpt_error e;
    char idx[4096];
    ck_assert_int_eq(ckpt_commit(dir, NULL, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "'t'") && strstr(e.msg, w1) &&
                  (!w2 || strstr(e.msg, w2)), "message: %s", e.msg);
    ck_assert_int_eq(ckpt_path_join(idx, sizeof idx, dir, "index.db", NULL),
                     0);
    ck_assert_int_ne(access(idx, F_OK), 0);
    ck_assert_int_eq(ckpt_dir_probe(dir), CKPT_DIR_PENDING);
}

START_TEST(test_planner_refusals)
{
    char *root = make_tmpdir();
    char good[4096], dir[4096];
    snprintf(good, sizeof good, "%s/step-1", root);
    two_writers(good, 0, 50, 50, 50, 0);
    commit_ok(good);
    const struct { int64_t ao, as, bo, bs; float bias; const char *w2; }
    cases[] = {
        { 0, 60, 50, 50, 0, "rank1" },     /* partial overlap */
        { 0, 40, 50, 50, 0, NULL },        /* gap */
        { 0, 50, 0, 50, 1, "rank1" },      /* replica with other bytes */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(dir, sizeof dir, "%s/bad-%zu", root, i);
        two_writers(dir, cases[i].ao, cases[i].as, cases[i].bo, cases[i].bs,
                    cases[i].bias);
        expect_commit_error(dir, "rank0", cases[i].w2);
    }
    /* The earlier checkpoint is intact. */
    ckpt_reader *r = open_ok(good);
    float v[100];
    ckpt_error e;
    ck_assert_int_eq(ckpt_read(r, 0, v, 0, sizeof v, &e), (int64_t)sizeof v);
    for (int i = 0; i < 100; i++)
        ck_assert(v[i] == (float)i);
    ck_assert_int_eq(ckpt_verify(r, NULL, NULL, NULL, &e), 0);
    ckpt_reader_close(r);
    remove_tmpdir(root);
}
END_TEST

START_TEST(test_replicas_kept_once)
{
    char *dir = make_tmpdir();
    two_writers(dir, 0, 100, 0, 100, 0);
    commit_ok(dir);
    ckpt_reader *r = open_ok(dir);
    ckpt_tensor_info ti;
    ck_assert_int_eq(ckpt_reader_info(r, 0, &ti), 0);
    ck_assert_uint_eq(ti.nchunks, 1);
    ckpt_reader_close(r);
    remove_tmpdir(dir);
}
END_TEST

START_TEST(test_scalar_and_empty)
{
    char *dir = make_tmpdir();
    ckpt_writer *w;
    ckpt_error e;
    ck_assert_int_eq(ckpt_writer_open(&w, dir, "rank0", NULL, &e), 0);
    double pi = 3.25;
    ckpt_piece s = { "scalar", CKPT_F64, 0, NULL, NULL, NULL, &pi };
    ck_assert_msg(ckpt_writer_put(w, &s, &e) == 0, "%s", e.msg);
    int64_t shape[2] = { 0, 5 };
    ckpt_piece em = { "empty", CKPT_F32, 2, shape, NULL, NULL, NULL };
    ck_assert_msg(ckpt_writer_put(w, &em, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(ckpt_writer_put_bytes(w, "blob", "hello", 5, &e), 0);
    ck_assert_int_eq(ckpt_writer_close(w, &e), 0);
    commit_ok(dir);
    ckpt_reader *r = open_ok(dir);
    double got = 0;
    long t = ckpt_reader_find(r, "scalar");
    ck_assert_int_eq(ckpt_read(r, (size_t)t, &got, 0, 8, &e), 8);
    ck_assert(got == pi);
    ck_assert_int_eq(ckpt_read_region(r, (size_t)t, NULL, NULL, &got, &e), 0);
    ck_assert(got == pi);
    t = ckpt_reader_find(r, "empty");
    ck_assert_int_eq(ckpt_read(r, (size_t)t, &got, 0, 8, &e), 0);
    char b[8] = { 0 };
    t = ckpt_reader_find(r, "blob");
    ckpt_tensor_info ti;
    ckpt_reader_info(r, (size_t)t, &ti);
    ck_assert_int_eq(ti.dtype, CKPT_BYTES);
    ck_assert_int_eq(ckpt_read(r, (size_t)t, b, 1, 100, &e), 4);
    ck_assert_str_eq(b, "ello");
    ck_assert_int_eq(ckpt_verify(r, NULL, NULL, NULL, &e), 0);
    ckpt_reader_close(r);
    remove_tmpdir(dir);
}
END_TEST

START_TEST(test_stream_in_pieces)
{
    char *dir = make_tmpdir();
    rng g = { 777 };
    int64_t n = 3000000;     /* 6 MB: whole 1 MiB frames in most writes */
    unsigned char *img = malloc((size_t)n * 2);
    fill_image(img, (uint64_t)n * 2, 1, &g);
    ckpt_writer *w;
    ckpt_stream *s;
    ckpt_error e;
    ck_assert_int_eq(ckpt_writer_open(&w, dir, "rank0", NULL, &e), 0);
    ckpt_piece p = { "x", CKPT_BF16, 1, &n, NULL, NULL, NULL };
    ck_assert_int_eq(ckpt_writer_begin(w, &p, &s, &e), 0);
    /* Lent buffers are overwritten as soon as the call returns: whatever
     * it encodes straight from them must be in the shard by then. */
    unsigned char *lent = malloc(3 << 20);
    for (uint64_t at = 0; at < (uint64_t)n * 2;) {
        uint64_t k = (uint64_t)rnd_in(&g, 1, 3 << 20);
        if (k > (uint64_t)n * 2 - at)
            k = (uint64_t)n * 2 - at;
        if (rnd_in(&g, 0, 1)) {
            memcpy(lent, img + at, k);
            ck_assert_int_eq(ckpt_stream_write_lent(s, lent, k, &e), 0);
            memset(lent, 0xa5, k);
        } else {
            ck_assert_int_eq(ckpt_stream_write(s, img + at, k, &e), 0);
        }
        at += k;
    }
    free(lent);
    ck_assert_int_eq(ckpt_stream_end(s, &e), 0);
    /* A stream that gets too few bytes is refused at its end. */
    int64_t m = 10;
    ckpt_piece q = { "short", CKPT_F32, 1, &m, NULL, NULL, NULL };
    ck_assert_int_eq(ckpt_writer_begin(w, &q, &s, &e), 0);
    ck_assert_int_eq(ckpt_stream_write(s, img, 8, &e), 0);
    ck_assert_int_eq(ckpt_stream_end(s, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "'short'") && strstr(e.msg, "40"), "%s",
                  e.msg);
    /* ... and one that gets too many is refused at the write. */
    ck_assert_int_eq(ckpt_writer_begin(w, &q, &s, &e), 0);
    ck_assert_int_eq(ckpt_stream_write(s, img, 44, &e), -EINVAL);
    ckpt_stream_abort(s);
    ck_assert_int_eq(ckpt_writer_close(w, &e), 0);
    commit_ok(dir);
    ckpt_reader *r = open_ok(dir);
    ck_assert_int_eq(ckpt_reader_count(r), 1);
    unsigned char *got = malloc((size_t)n * 2);
    ck_assert_int_eq(ckpt_read(r, 0, got, 0, (uint64_t)n * 2, &e), n * 2);
    ck_assert(memcmp(got, img, (size_t)n * 2) == 0);
    ckpt_reader_close(r);
    free(img);
    free(got);
    remove_tmpdir(dir);
}
END_TEST

typedef struct late_wait {
    ckpt_stream *s;
    uint64_t ticket;
    unsigned char *buf;      /* scribbled once the wait returned */
    size_t len;
} late_wait;

static void *wait_late(void *arg)
{
    late_wait *l = arg;
    usleep(50000);           /* the stream's end is waiting for this */
    ckpt_stream_wait_lent(l->s, l->ticket);
    memset(l->buf, 0x5a, l->len);
    return NULL;
}

/* The mount's pipeline (ckpt_stream_write_lent_async): buffers lent past
 * the call, waited for later (each then overwritten), in writes of any
 * size; the end waits for a lender that has not waited yet. */
START_TEST(test_stream_lent_async)
{
    char *dir = make_tmpdir();
    rng g = { 2626 };
    int64_t n = 2500000;     /* 5 MB of bf16 */
    uint64_t total = (uint64_t)n * 2;
    unsigned char *img = malloc(total);
    fill_image(img, total, 1, &g);
    ckpt_write_opts o;
    ckpt_write_opts_init(&o);
    o.frame_size = 64 << 10;
    ckpt_writer *w;
    ckpt_stream *s;
    ckpt_error e;
    ck_assert_int_eq(ckpt_writer_open(&w, dir, "rank0", &o, &e), 0);
    ckpt_piece p = { "x", CKPT_BF16, 1, &n, NULL, NULL, NULL };
    ck_assert_int_eq(ckpt_writer_begin(w, &p, &s, &e), 0);
    enum { NBUF = 3, CAP = 300000 };
    unsigned char *buf[NBUF];
    uint64_t ticket[NBUF] = { 0 };
    int lent = 0;
    for (int i = 0; i < NBUF; i++)
        buf[i] = malloc(CAP);
    uint64_t at = 0;
    for (int k = 0; total - at > 400000; k++) {
        int b = k % NBUF;
        ckpt_stream_wait_lent(s, ticket[b]);
        ticket[b] = 0;
        memset(buf[b], 0xa5, CAP);
        uint64_t len = (uint64_t)rnd_in(&g, 1, CAP);
        memcpy(buf[b], img + at, len);
        ck_assert_int_eq(ckpt_stream_write_lent_async(s, buf[b], len,
                                                      &ticket[b], &e), 0);
        lent += ticket[b] != 0;
        at += len;
    }
    ck_assert_int_gt(lent, 0);   /* whole frames were lent, not copied */
    for (int i = 0; i < NBUF; i++)
        ckpt_stream_wait_lent(s, ticket[i]);
    /* All but the last byte: whole frames lent, their ticket left to a
     * thread that waits late, while the stream ends. */
    uint64_t len = total - at - 1;
    unsigned char *rest = malloc(len);
    memcpy(rest, img + at, len);
    late_wait lw = { s, 0, rest, len };
    ck_assert_int_eq(ckpt_stream_write_lent_async(s, rest, len, &lw.ticket,
                                                  &e), 0);
    ck_assert(lw.ticket != 0);
    at += len;
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, wait_late, &lw), 0);
    ck_assert_int_eq(ckpt_stream_write_lent(s, img + at, 1, &e), 0);
    ck_assert_int_eq(ckpt_stream_end(s, &e), 0);
    pthread_join(th, NULL);
    free(rest);
    for (int i = 0; i < NBUF; i++)
        free(buf[i]);
    ck_assert_int_eq(ckpt_writer_close(w, &e), 0);
    commit_ok(dir);
    ckpt_reader *r = open_ok(dir);
    unsigned char *got = malloc(total);
    ck_assert_int_eq(ckpt_read(r, 0, got, 0, total, &e), (int64_t)total);
    ck_assert(memcmp(got, img, total) == 0);
    ckpt_reader_close(r);
    free(img);
    free(got);
    remove_tmpdir(dir);
}
END_TEST

typedef struct fault_log {
    int n;
    char last[1024];
} fault_log;

static void on_fault(void *arg, const ckpt_fault *f)
{
    fault_log *l = arg;
    l->n++;
    snprintf(l->last, sizeof l->last, "%s chunk=%ld frame=%ld %s: %s",
             f->fqn, f->chunk, f->frame, f->file ? f->file : "-", f->msg);
}

START_TEST(test_corruption_detected)
{
    char *dir = make_tmpdir();
    rng g = { 4242 };
    int64_t n = 40000;   /* 160000 bytes of f32: 3 frames of 64 KiB */
    unsigned char *img = malloc((size_t)n * 4);
    fill_image(img, (uint64_t)n * 4, 0, &g);
    ckpt_write_opts o;
    ckpt_write_opts_init(&o);
    o.codec = CKPT_CODEC_RAW;
    o.frame_size = 65536;
    ckpt_writer *w;
    ckpt_error e;
    ck_assert_int_eq(ckpt_writer_open(&w, dir, "rank0", &o, &e), 0);
    ckpt_piece p = { "a.b", CKPT_F32, 1, &n, NULL, NULL, img };
    ck_assert_int_eq(ckpt_writer_put(w, &p, &e), 0);
    ckpt_piece q = { "other", CKPT_F32, 1, &n, NULL, NULL, img };
    ck_assert_int_eq(ckpt_writer_put(w, &q, &e), 0);
    ck_assert_int_eq(ckpt_writer_close(w, &e), 0);
    commit_ok(dir);
    /* Flip one byte in the second frame of "a.b" (shard offset 70000). */
    char path[4096];
    snprintf(path, sizeof path, "%s/data/rank0.shard", dir);
    int fd = open(path, O_RDWR);
    unsigned char c;
    ck_assert_int_eq(pread(fd, &c, 1, 70000), 1);
    c ^= 0x20;
    ck_assert_int_eq(pwrite(fd, &c, 1, 70000), 1);
    close(fd);
    ckpt_reader *r = open_ok(dir);
    long t = ckpt_reader_find(r, "a.b");
    unsigned char *got = malloc((size_t)n * 4);
    ck_assert_int_eq(ckpt_read(r, (size_t)t, got, 65536 + 10, 100, &e), -EIO);
    ck_assert_msg(strstr(e.msg, "'a.b'") && strstr(e.msg, "frame 1") &&
                  strstr(e.msg, "checksum"), "%s", e.msg);
    /* Other ranges and tensors still read. */
    ck_assert_int_eq(ckpt_read(r, (size_t)t, got, 0, 65536, &e), 65536);
    ck_assert(memcmp(got, img, 65536) == 0);
    long u = ckpt_reader_find(r, "other");
    ck_assert_int_eq(ckpt_read(r, (size_t)u, got, 0, (uint64_t)n * 4, &e),
                     n * 4);
    ck_assert(memcmp(got, img, (size_t)n * 4) == 0);
    fault_log log = { 0 };
    ck_assert_int_eq(ckpt_verify(r, on_fault, &log, NULL, &e), 1);
    ck_assert_msg(strstr(log.last, "a.b chunk=0 frame=1 data/rank0.shard"),
                  "%s", log.last);
    ckpt_reader_close(r);
    /* A truncated shard: the frames past the end fail, naming the file. */
    ck_assert_int_eq(truncate(path, 150000), 0);
    r = open_ok(dir);
    u = ckpt_reader_find(r, "other");
    ck_assert_int_eq(ckpt_read(r, (size_t)u, got, 0, (uint64_t)n * 4, &e),
                     -EIO);
    ck_assert_msg(strstr(e.msg, "truncated") && strstr(e.msg, "rank0.shard"),
                  "%s", e.msg);
    ckpt_reader_close(r);
    free(img);
    free(got);
    remove_tmpdir(dir);
}
END_TEST

/* Coded frames whose stored bytes are in the page cache are decoded in
 * place from a mapping of the shard (shardio.h): a corrupt one is still
 * caught by its checksum, and a shard truncated after the reader mapped it
 * fails the frames past its new end with an error, not SIGBUS. */
START_TEST(test_mapped_frames_faults)
{
    char *dir = make_tmpdir();
    int64_t n = 48000;   /* 192000 bytes of f32: 3 zstd frames of 64 KiB */
    float *img = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        img[i] = (float)(i % 13) * 0.25f;
    ckpt_write_opts o;
    ckpt_write_opts_init(&o);
    o.codec = CKPT_CODEC_ZSTD;
    o.frame_size = 65536;
    ckpt_writer *w;
    ckpt_error e;
    ck_assert_int_eq(ckpt_writer_open(&w, dir, "rank0", &o, &e), 0);
    ckpt_piece p = { "a", CKPT_F32, 1, &n, NULL, NULL, img };
    ck_assert_int_eq(ckpt_writer_put(w, &p, &e), 0);
    ck_assert_int_eq(ckpt_writer_close(w, &e), 0);
    commit_ok(dir);
    ckpt_reader *r = open_ok(dir);
    long t = ckpt_reader_find(r, "a");
    ckpt_frame_info f1, f2;
    ck_assert_int_eq(ckpt_reader_frame(r, (size_t)t, 0, 1, &f1, &e), 0);
    ck_assert_int_eq(ckpt_reader_frame(r, (size_t)t, 0, 2, &f2, &e), 0);
    ck_assert_int_eq(f1.codec, CKPT_CODEC_ZSTD);
    ckpt_reader_close(r);
    char path[4096];
    snprintf(path, sizeof path, "%s/data/rank0.shard", dir);
    /* read back whole: every page of the shard in the page cache */
    int fd = open(path, O_RDWR);
    unsigned char *raw = malloc(f2.file_offset + f2.stored_size);
    ck_assert_int_eq(pread(fd, raw, f2.file_offset + f2.stored_size, 0),
                     (ssize_t)(f2.file_offset + f2.stored_size));
    unsigned char c = raw[f1.file_offset + f1.stored_size / 2] ^ 0x10;
    ck_assert_int_eq(pwrite(fd, &c, 1, (off_t)(f1.file_offset +
                                               f1.stored_size / 2)), 1);
    close(fd);
    unsigned char *got = malloc((size_t)n * 4);
    r = open_ok(dir);
    ck_assert_int_eq(ckpt_read(r, (size_t)t, got, 0, (uint64_t)n * 4, &e),
                     -EIO);
    ck_assert_msg(strstr(e.msg, "'a'") && strstr(e.msg, "frame 1"),
                  "%s", e.msg);
    ck_assert_int_eq(ckpt_read(r, (size_t)t, got, 0, 65536, &e), 65536);
    ck_assert(memcmp(got, img, 65536) == 0);
    /* mapped (frame 0 was just read), then truncated within frame 2 */
    ck_assert_int_eq(truncate(path, (off_t)(f2.file_offset + 10)), 0);
    ck_assert_int_eq(ckpt_read(r, (size_t)t, got, 2 * 65536, 100, &e), -EIO);
    ck_assert_msg(strstr(e.msg, "rank0.shard") && strstr(e.msg, "frame 2"),
                  "%s", e.msg);
    ckpt_reader_close(r);
    free(raw);
    free(img);
    free(got);
    remove_tmpdir(dir);
}
END_TEST

START_TEST(test_open_refusals)
{
    char *dir = make_tmpdir();
    ckpt_reader *r;
    ckpt_error e;
    ck_assert_int_eq(ckpt_reader_open(&r, dir, NULL, &e), -ENOENT);
    ck_assert_msg(strstr(e.msg, "no index.db"), "%s", e.msg);
    ck_assert_int_eq(ckpt_commit(dir, NULL, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "nothing to commit"), "%s", e.msg);
    ckpt_writer *w, *w2;
    ck_assert_int_eq(ckpt_writer_open(&w, dir, "rank0", NULL, &e), 0);
    ck_assert_int_eq(ckpt_writer_open(&w2, dir, "rank0", NULL, &e), -EEXIST);
    ck_assert_msg(strstr(e.msg, "rank0"), "%s", e.msg);
    ck_assert_int_eq(ckpt_writer_open(&w2, dir, "a/b", NULL, &e), -EINVAL);
    ckpt_write_opts bad;
    ckpt_write_opts_init(&bad);
    bad.drop_cache = 2;
    ck_assert_int_eq(ckpt_writer_open(&w2, dir, "rank1", &bad, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "drop_cache 2"), "%s", e.msg);
    ck_assert_int_eq(ckpt_reader_open(&r, dir, NULL, &e), -ENOENT);
    ck_assert_msg(strstr(e.msg, "not a committed checkpoint"), "%s", e.msg);
    ck_assert_int_eq(ckpt_dir_probe(dir), CKPT_DIR_PENDING);
    ckpt_writer_abort(w);
    /* A committed checkpoint takes no more writers. */
    ck_assert_int_eq(ckpt_writer_open(&w, dir, "rank1", NULL, &e), 0);
    ck_assert_int_eq(ckpt_writer_close(w, &e), 0);
    ck_assert_int_eq(ckpt_commit(dir, NULL, &e), 0);
    ck_assert_int_eq(ckpt_writer_open(&w, dir, "rank2", NULL, &e), -EEXIST);
    ck_assert_msg(strstr(e.msg, "already a committed"), "%s", e.msg);
    ck_assert_int_eq(ckpt_commit(dir, NULL, &e), -EEXIST);
    remove_tmpdir(dir);
}
END_TEST

START_TEST(test_bad_pieces)
{
    char *dir = make_tmpdir();
    ckpt_writer *w;
    ckpt_error e;
    ck_assert_int_eq(ckpt_writer_open(&w, dir, "rank0", NULL, &e), 0);
    int64_t shape[2] = { 4, 4 }, off[2] = { 2, 0 }, sz[2] = { 3, 4 };
    float v[16] = { 0 };
    ckpt_piece oob = { "w", CKPT_F32, 2, shape, off, sz, v };
    ck_assert_int_eq(ckpt_writer_put(w, &oob, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "'w'"), "%s", e.msg);
    int64_t huge[2] = { (int64_t)1 << 62, 4 };
    ckpt_piece big = { "big", CKPT_F32, 2, huge, NULL, NULL, v };
    ck_assert_int_eq(ckpt_writer_put(w, &big, &e), -EOVERFLOW);
    ckpt_piece bad = { "x/y", CKPT_F32, 2, shape, NULL, NULL, v };
    ck_assert_int_eq(ckpt_writer_put(w, &bad, &e), -EINVAL);
    ckpt_piece ctl = { "x\ty", CKPT_F32, 2, shape, NULL, NULL, v };
    ck_assert_int_eq(ckpt_writer_put(w, &ctl, &e), -EINVAL);
    ckpt_piece nodt = { "n", CKPT_DTYPE_INVALID, 2, shape, NULL, NULL, v };
    ck_assert_int_eq(ckpt_writer_put(w, &nodt, &e), -EINVAL);
    ck_assert_int_eq(ckpt_writer_set_meta(w, "created", "x", &e), -EINVAL);
    ckpt_writer_abort(w);
    remove_tmpdir(dir);
}
END_TEST

typedef struct reader_arg {
    ckpt_reader *r;
    const unsigned char *img;
    uint64_t n;
    uint64_t seed;
    int bad;
} reader_arg;

static void *reader_thread(void *p)
{
    reader_arg *a = p;
    rng g = { a->seed };
    unsigned char *buf = malloc(a->n);
    for (int k = 0; k < 300; k++) {
        uint64_t lo = rnd(&g) % a->n, len = rnd(&g) % 70000 + 1;
        if (len > a->n - lo)
            len = a->n - lo;
        ckpt_error e;
        if (ckpt_read(a->r, 0, buf, lo, len, &e) != (int64_t)len ||
            memcmp(buf, a->img + lo, len) != 0)
            a->bad++;
    }
    free(buf);
    return NULL;
}

START_TEST(test_concurrent_readers)
{
    char *dir = make_tmpdir();
    rng g = { 99 };
    int64_t n = 1 << 20;
    unsigned char *img = malloc((size_t)n);
    fill_image(img, (uint64_t)n, 1, &g);
    ckpt_write_opts o;
    ckpt_write_opts_init(&o);
    o.frame_size = 16384;
    ckpt_writer *w;
    ckpt_error e;
    ck_assert_int_eq(ckpt_writer_open(&w, dir, "rank0", &o, &e), 0);
    ckpt_piece p = { "x", CKPT_U8, 1, &n, NULL, NULL, img };
    ck_assert_int_eq(ckpt_writer_put(w, &p, &e), 0);
    ck_assert_int_eq(ckpt_writer_close(w, &e), 0);
    commit_ok(dir);
    ckpt_read_opts ro;
    ckpt_read_opts_init(&ro);
    ro.cache_bytes = 8 * 16384;   /* small: forces evictions */
    ckpt_reader *r;
    ck_assert_int_eq(ckpt_reader_open(&r, dir, &ro, &e), 0);
    pthread_t th[8];
    reader_arg a[8];
    for (int i = 0; i < 8; i++) {
        a[i] = (reader_arg){ r, img, (uint64_t)n, 1000 + (uint64_t)i, 0 };
        pthread_create(&th[i], NULL, reader_thread, &a[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(a[i].bad, 0);
    }
    ckpt_stats st;
    ckpt_reader_stats(r, &st);
    ck_assert_uint_gt(st.frames_decoded, 0);
    ck_assert_uint_gt(st.bytes_served, 0);
    ckpt_reader_close(r);
    free(img);
    remove_tmpdir(dir);
}
END_TEST

/* ------------------------------------------------------------ foreign */

/* A safetensors file written here (header length odd, so the data sits at
 * an odd file offset): tensors whose bytes the test knows. */
typedef struct st_tensor {
    const char *name, *dtype;
    ckpt_dtype dt;
    int ndim;
    int64_t shape[2];
} st_tensor;

static const st_tensor st_tensors[] = {
    { "a", "F32", CKPT_F32, 2, { 300, 77 } },
    { "b", "U8", CKPT_U8, 1, { 5001, 0 } },
    { "c", "BF16", CKPT_BF16, 2, { 600, 1000 } },
    { "d", "C64", CKPT_C64, 2, { 31, 17 } },
    { "e", "F8_E4M3FNUZ", CKPT_F8E4M3FNUZ, 1, { 999, 0 } },
    { "f", "F8_E8M0", CKPT_F8E8M0, 1, { 3, 0 } },
};
#define NST (sizeof st_tensors / sizeof st_tensors[0])

/* Writes dir/x.safetensors; img[i] receives tensor i's bytes. */
static void write_safetensors(const char *dir, unsigned char **img,
                              uint64_t *nb, rng *g)
{
    char head[1024], path[4096];
    size_t hl = 0;
    uint64_t at = 0;
    hl += (size_t)snprintf(head + hl, sizeof head - hl, "{");
    for (size_t i = 0; i < NST; i++) {
        const st_tensor *t = &st_tensors[i];
        nb[i] = numel_of(t->ndim, t->shape) * ckpt_dtype_size(t->dt);
        img[i] = malloc(nb[i]);
        fill_image(img[i], nb[i], 0, g);
        hl += (size_t)snprintf(head + hl, sizeof head - hl,
                               "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld",
                               i ? "," : "", t->name, t->dtype,
                               (long long)t->shape[0]);
        if (t->ndim == 2)
            hl += (size_t)snprintf(head + hl, sizeof head - hl, ",%lld",
                                   (long long)t->shape[1]);
        hl += (size_t)snprintf(head + hl, sizeof head - hl,
                               "],\"data_offsets\":[%llu,%llu]}",
                               (unsigned long long)at,
                               (unsigned long long)(at + nb[i]));
        at += nb[i];
    }
    hl += (size_t)snprintf(head + hl, sizeof head - hl, "}");
    if (hl % 2 == 0)
        head[hl++] = ' ';            /* JSON allows it: an odd length */
    snprintf(path, sizeof path, "%s/x.safetensors", dir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    unsigned char len[8];
    for (int k = 0; k < 8; k++)
        len[k] = (unsigned char)((uint64_t)hl >> (8 * k));
    ck_assert_uint_eq(fwrite(len, 1, 8, f), 8);
    ck_assert_uint_eq(fwrite(head, 1, hl, f), hl);
    for (size_t i = 0; i < NST; i++)
        ck_assert_uint_eq(fwrite(img[i], 1, nb[i], f), nb[i]);
    ck_assert_int_eq(fclose(f), 0);
}

/* Byte ranges of a checksum-less raw frame: a long one is read in place
 * (only its bytes), a short one through the frame cache; both into buffers
 * of every alignment; regions of rows.  Every byte against the data the
 * test wrote. */
START_TEST(test_foreign_partial_reads)
{
    char *dir = make_tmpdir();
    rng g = { 4242 };
    unsigned char *img[NST];
    uint64_t nb[NST];
    write_safetensors(dir, img, nb, &g);
    char path[4096];
    snprintf(path, sizeof path, "%s/x.safetensors", dir);
    ckpt_read_opts ro;
    ckpt_read_opts_init(&ro);
    ro.prefetch = 0;
    ro.cache_bytes = 0;   /* a cached whole frame would hide a re-read */
    ckpt_reader *r;
    ckpt_error e;
    ck_assert_msg(ckpt_reader_open(&r, path, &ro, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(ckpt_reader_format(r), CKPT_FORMAT_SAFETENSORS);
    unsigned char *buf = malloc(nb[2] + 128);
    for (size_t i = 0; i < NST; i++) {
        long t = ckpt_reader_find(r, st_tensors[i].name);
        ck_assert_int_ge(t, 0);
        for (int k = 0; k < 200; k++) {
            uint64_t lo = rnd(&g) % nb[i];
            uint64_t len = k % 2 ? rnd(&g) % (nb[i] - lo) + 1
                                 : rnd(&g) % 300 + 1;   /* short ones too */
            if (len > nb[i] - lo)
                len = nb[i] - lo;
            if (k % 4 == 1) {   /* whole elements */
                size_t isz = ckpt_dtype_size(st_tensors[i].dt);
                lo -= lo % isz;
                len = len < isz ? isz : len - len % isz;
            }
            unsigned char *dst = buf + rnd(&g) % 64;
            ckpt_stats s0, s1;
            ckpt_reader_stats(r, &s0);
            int64_t n = ckpt_read(r, (size_t)t, dst, lo, len, &e);
            ck_assert_msg(n == (int64_t)len, "%s [%llu,+%llu): %s",
                          st_tensors[i].name, (unsigned long long)lo,
                          (unsigned long long)len, e.msg);
            ck_assert_msg(memcmp(dst, img[i] + lo, len) == 0, "%s bytes "
                          "[%llu,+%llu) differ", st_tensors[i].name,
                          (unsigned long long)lo, (unsigned long long)len);
            ckpt_reader_stats(r, &s1);
            /* A long part of whole elements is read in place: exactly its
             * bytes, not the frame's (no cache here to hide a re-read). */
            size_t isz = ckpt_dtype_size(st_tensors[i].dt);
            if (len >= (64 << 10) && len < nb[i] && lo % isz == 0 &&
                len % isz == 0)
                ck_assert_msg(s1.bytes_read - s0.bytes_read == len,
                              "%s: read %llu bytes for %llu at %llu",
                              st_tensors[i].name,
                              (unsigned long long)(s1.bytes_read -
                                                   s0.bytes_read),
                              (unsigned long long)len,
                              (unsigned long long)lo);
        }
        /* rows of a 2-D tensor: short runs, many of them */
        if (st_tensors[i].ndim == 2) {
            const int64_t *sh = st_tensors[i].shape;
            size_t isz = ckpt_dtype_size(st_tensors[i].dt);
            int64_t off[2] = { sh[0] / 3, sh[1] / 5 };
            int64_t sz[2] = { sh[0] - off[0] - 1, sh[1] / 2 };
            unsigned char *want = malloc(nb[i]);
            naive_extract(img[i], 2, sh, isz, off, sz, want);
            ck_assert_msg(ckpt_read_region(r, (size_t)t, off, sz, buf, &e)
                          == 0, "%s", e.msg);
            ck_assert(memcmp(buf, want, (size_t)(sz[0] * sz[1]) * isz) == 0);
            free(want);
        }
    }
    ckpt_reader_close(r);
    free(buf);
    for (size_t i = 0; i < NST; i++)
        free(img[i]);
    remove_tmpdir(dir);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("readwrite");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_random_roundtrip, 0, 40);
    tcase_add_test(tc, test_large_resharded);
    tcase_add_test(tc, test_parallel_uneven_segments);
    tcase_add_test(tc, test_batch_read);
    tcase_add_test(tc, test_planner_refusals);
    tcase_add_test(tc, test_replicas_kept_once);
    tcase_add_test(tc, test_scalar_and_empty);
    tcase_add_test(tc, test_stream_in_pieces);
    tcase_add_test(tc, test_stream_lent_async);
    tcase_add_test(tc, test_corruption_detected);
    tcase_add_test(tc, test_mapped_frames_faults);
    tcase_add_test(tc, test_open_refusals);
    tcase_add_test(tc, test_bad_pieces);
    tcase_add_test(tc, test_concurrent_readers);
    tcase_add_test(tc, test_foreign_partial_reads);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(suite());
}
