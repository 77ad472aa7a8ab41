/*
 * test_delta.c - delta saves (src/format/delta.c, src/codec/xorframe.c,
 * the writer's choice in src/write/writer.c, the committer's bases in
 * src/write/deltasave.c): round trips bit-exact against the data the test
 * saved, whole and by region, with the frame kinds the writer should pick;
 * chains at the full_every bound; and each refusal: a base missing,
 * changed since, outside the root, a reference cycle, a base that changed
 * during the save; xor frames coded and applied (sparse and dense), and
 * a damaged base under an xor frame named as the fault; ckpt_save_sync's
 * two lanes (pieces whose first frame is unchanged put beside the
 * others); refs settled where frames are submitted, outside the xor
 * budget.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptfs.h"
#include "codec/xorframe.h"
#include "common/xxh.h"
#include "common/fileio.h"
#include "write/gc.h"
#include "write/writer.h"
#include "unit_util.h"

#define ROWS 64
#define COLS 256                      /* 1 KiB rows of f32 */
#define FRAME 4096                    /* 4 rows a frame: 16 frames */
#define N (ROWS * COLS)

static void join(char *buf, const char *a, const char *b)
{
    int n = snprintf(buf, 4096, "%s/%s", a, b);
    ck_assert(n > 0 && n < 4096);
}

/* A deterministic f32 tensor. */
static void fill(float *v, uint64_t seed)
{
    rng r = { seed };
    for (int i = 0; i < N; i++)
        v[i] = (float)((int64_t)(rnd(&r) % 20001) - 10000) / 1000.0f;
}

/* Saves {"w": w (ROWS x COLS f32), "b": 100 bytes of b} into root/name
 * against `base` (a name in root, or NULL), committed; returns 0 or the
 * error of the open (err set). */
static int save(const char *root, const char *name, const char *base,
                int full_every, const float *w, const unsigned char *b,
                ckpt_error *err)
{
    char dir[4096], bpath[4096];
    join(dir, root, name);
    ckpt_write_opts o;
    ckpt_write_opts_init(&o);
    o.frame_size = FRAME;
    o.sync = 0;
    /* Several encoders: the writer's xor budget (2 tries to start) is
     * spent in frame order whatever the scheduling, so it reaches frame
     * 1 (xor_budget_in_frame_order). */
    o.threads = 4;
    if (base) {
        join(bpath, root, base);
        o.base = bpath;
    }
    if (full_every)
        o.full_every = full_every;
    ckpt_writer *wr;
    int rc = ckpt_writer_open(&wr, dir, "rank0", &o, err);
    if (rc)
        return rc;
    int64_t shape[2] = { ROWS, COLS };
    ckpt_piece p = { "w", CKPT_F32, 2, shape, NULL, NULL, w };
    ck_assert_msg(ckpt_writer_put(wr, &p, err) == 0, "%s", err->msg);
    ck_assert_msg(ckpt_writer_put_bytes(wr, "b", b, 100, err) == 0, "%s",
                  err->msg);
    ck_assert_msg(ckpt_writer_close(wr, err) == 0, "%s", err->msg);
    ckpt_commit_opts co;
    ckpt_commit_opts_init(&co);
    co.sync = 0;
    return ckpt_commit(dir, &co, err);
}

static ckpt_reader *open_ck(const char *root, const char *name)
{
    char dir[4096];
    join(dir, root, name);
    ckpt_reader *r;
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_reader_open(&r, dir, NULL, &err) == 0, "%s", err.msg);
    return r;
}

/* Reads "w" whole and checks it bit for bit, and "b". */
static void check_read(const char *root, const char *name, const float *w,
                       const unsigned char *b)
{
    ckpt_reader *r = open_ck(root, name);
    ckpt_error err = { 0 };
    float *got = xmalloc(sizeof(float) * N);
    long t = ckpt_reader_find(r, "w");
    ck_assert_int_ge(t, 0);
    ck_assert_msg(ckpt_read(r, (size_t)t, got, 0, sizeof(float) * N, &err) ==
                  (int64_t)(sizeof(float) * N), "%s: %s", name, err.msg);
    ck_assert_msg(memcmp(got, w, sizeof(float) * N) == 0, "%s: w differs",
                  name);
    unsigned char gb[100];
    t = ckpt_reader_find(r, "b");
    ck_assert_int_eq(ckpt_read(r, (size_t)t, gb, 0, 100, &err), 100);
    ck_assert(memcmp(gb, b, 100) == 0);
    ck_assert_int_eq(ckpt_verify(r, NULL, NULL, NULL, &err), 0);
    free(got);
    ckpt_reader_close(r);
}

/* The codec of frame k of "w" in root/name. */
static int codec_of(const char *root, const char *name, uint64_t k)
{
    ckpt_reader *r = open_ck(root, name);
    ckpt_error err = { 0 };
    ckpt_frame_info fi;
    long t = ckpt_reader_find(r, "w");
    ck_assert_msg(ckpt_reader_frame(r, (size_t)t, 0, k, &fi, &err) == 0,
                  "%s", err.msg);
    ckpt_reader_close(r);
    return fi.codec;
}

/* Runs sql on root/name/index.db (a test tampering with a checkpoint). */
static void tamper(const char *root, const char *name, const char *sql)
{
    char dir[4096], path[4096];
    join(dir, root, name);
    join(path, dir, "index.db");
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    ck_assert_msg(rc == SQLITE_OK, "%s: %s", sql, msg ? msg : "");
    sqlite3_close(db);
}

/* ckpt_reader_open of root/name fails with `code` and a message holding
 * `words`. */
static void refused(const char *root, const char *name, int code,
                    const char *words)
{
    char dir[4096];
    join(dir, root, name);
    ckpt_reader *r = NULL;
    ckpt_error err = { 0 };
    int rc = ckpt_reader_open(&r, dir, NULL, &err);
    ck_assert_msg(rc == code, "%s: %d (%s), expected %d", name, rc, err.msg,
                  code);
    ck_assert_msg(strstr(err.msg, words), "'%s' lacks '%s'", err.msg, words);
}

typedef struct state {
    char *root;
    float *w0, *w1;
    unsigned char b[100];
} state;

/* s0 full; s1 against s0: rows 0-3 unchanged, rows 4-7 nudged, rows
 * 8-11 replaced. */
static void two_saves(state *s)
{
    ckpt_error err = { 0 };
    s->root = make_tmpdir_tagged("delta");
    s->w0 = xmalloc(sizeof(float) * N);
    s->w1 = xmalloc(sizeof(float) * N);
    fill(s->w0, 7);
    memcpy(s->w1, s->w0, sizeof(float) * N);
    for (int i = 4 * COLS; i < 8 * COLS; i += 3)
        s->w1[i] += 0.001f;
    float *fresh = xmalloc(sizeof(float) * N);
    fill(fresh, 99);
    memcpy(s->w1 + 8 * COLS, fresh, sizeof(float) * (N - 8 * COLS));
    free(fresh);                  /* rows 8.. all new */
    for (int i = 0; i < 100; i++)
        s->b[i] = (unsigned char)(i * 7);
    ck_assert_msg(save(s->root, "s0", NULL, 0, s->w0, s->b, &err) == 0, "%s",
                  err.msg);
    ck_assert_msg(save(s->root, "s1", "s0", 0, s->w1, s->b, &err) == 0, "%s",
                  err.msg);
}

static void state_free(state *s)
{
    remove_tmpdir(s->root);
    free(s->w0);
    free(s->w1);
}

START_TEST(round_trip)
{
    state s;
    two_saves(&s);
    check_read(s.root, "s0", s.w0, s.b);
    check_read(s.root, "s1", s.w1, s.b);
    ck_assert_int_eq(codec_of(s.root, "s1", 0), CKPT_CODEC_REF);
    ck_assert_int_eq(codec_of(s.root, "s1", 1), CKPT_CODEC_XOR);
    int c = codec_of(s.root, "s1", 3);
    ck_assert_msg(c != CKPT_CODEC_REF && c != CKPT_CODEC_XOR,
                  "a new frame is stored whole, got codec %d", c);
    /* A region crossing a ref, an xor and a whole frame. */
    ckpt_reader *r = open_ck(s.root, "s1");
    ckpt_error err = { 0 };
    int64_t off[2] = { 2, 5 }, sz[2] = { 9, 100 };
    float got[9 * 100];
    ck_assert_msg(ckpt_read_region(r, (size_t)ckpt_reader_find(r, "w"), off,
                                   sz, got, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 9; i++)
        ck_assert(memcmp(&got[i * 100], &s.w1[(2 + i) * COLS + 5],
                         100 * sizeof(float)) == 0);
    ckpt_reader_close(r);
    state_free(&s);
}
END_TEST

/* Codes new over base as an xor frame with `codec` and checks both ways of
 * decoding it against new; returns the inner codec the frame chose, and
 * its header's version in *version. */
static int xor_round_trip(const unsigned char *base, const unsigned char *nw,
                          size_t n, int codec, int *version)
{
    ckpt_codec_ctx *c = ckpt_codec_ctx_new();
    ck_assert_ptr_nonnull(c);
    ckpt_error err = { 0 };
    size_t cap = CKPT_XOR_HEAD + ckpt_codec_bound(n), got;
    unsigned char *diff = xmalloc(n), *enc = xmalloc(cap);
    unsigned char *out = xmalloc(n), *tmp = xmalloc(n);
    ckpt_xor_bytes(diff, base, nw, n);
    ck_assert_msg(ckpt_xor_encode(c, codec, 1, 4, diff, n, enc, cap, &got,
                                  &err) == 0, "%s", err.msg);
    ck_assert_msg(ckpt_xor_decode(c, enc, got, base, out, n, &err) == 0,
                  "%s", err.msg);
    ck_assert(memcmp(out, nw, n) == 0);
    memcpy(out, base, n);            /* applied over the base in place */
    ck_assert_msg(ckpt_xor_apply(c, enc, got, out, tmp, n, &err) == 0, "%s",
                  err.msg);
    ck_assert(memcmp(out, nw, n) == 0);
    int inner = enc[1];
    *version = enc[0];
    free(diff);
    free(enc);
    free(out);
    free(tmp);
    ckpt_codec_ctx_free(c);
    return inner;
}

START_TEST(xor_sparse_and_dense)
{
    /* not a multiple of 64 bytes: the tail past the last block counts */
    const size_t n = 4 * N + 36;
    unsigned char *base = xmalloc(n), *nw = xmalloc(n);
    rng r = { 5 };
    for (size_t i = 0; i < n; i++)
        base[i] = (unsigned char)rnd(&r);
    /* a row changed at random, and the last byte: sparse (the changed
     * blocks alone), stored raw: zstd would not save a third of them */
    memcpy(nw, base, n);
    for (size_t i = 8192; i < 8192 + 512; i++)
        nw[i] ^= (unsigned char)(1 + rnd(&r) % 255);
    nw[n - 1] ^= 0x80;
    int version;
    ck_assert_int_eq(xor_round_trip(base, nw, n, CKPT_CODEC_BG_F32, &version),
                     CKPT_CODEC_RAW);
    ck_assert_int_eq(version, 2);
    /* one byte in 256 changed: sparse, its blocks mostly zeros, coded
     * zstd */
    memcpy(nw, base, n);
    for (size_t i = 3; i < n; i += 256)
        nw[i] ^= 0x40;
    ck_assert_int_eq(xor_round_trip(base, nw, n, CKPT_CODEC_BG_F32, &version),
                     CKPT_CODEC_ZSTD);
    ck_assert_int_eq(version, 2);
    /* every element nudged: byte planes, as asked */
    float *f = (float *)base, *g = (float *)nw;
    for (size_t i = 0; i < n / 4; i++) {
        f[i] = (float)(int64_t)(rnd(&r) % 2001 - 1000) / 100.0f;
        g[i] = f[i] * 1.0001f + 1e-6f;
    }
    ck_assert_int_ne(xor_round_trip(base, nw, n, CKPT_CODEC_BG_F32, &version),
                     CKPT_CODEC_ZSTD);
    ck_assert_int_eq(version, 1);   /* dense: the whole XOR */
    free(base);
    free(nw);
}
END_TEST

/* The 64-byte blocks in which a and b (n bytes) differ, and all blocks. */
static size_t blocks_changed(const unsigned char *a, const unsigned char *b,
                             size_t n, size_t *all)
{
    size_t changed = 0;
    *all = (n + 63) / 64;
    for (size_t off = 0; off < n; off += 64)
        changed += memcmp(a + off, b + off, n - off < 64 ? n - off : 64) != 0;
    return changed;
}

START_TEST(xor_sparse_densities)
{
    /* rows of 128 f32 (512 bytes) or single bytes changed, from none to
     * all of them, in frames of whole blocks, a short last block, and
     * shorter than a block: bit-exact both ways, and stored sparse
     * (version 2) exactly when at least half of the blocks are zero and
     * there is a whole one */
    static const size_t sizes[] = { 65536, 65536 + 36, 4095, 100, 64, 63, 1 };
    static const int permille[] = { 0, 10, 50, 200, 450, 1000 };
    rng r = { 21 };
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t n = sizes[si];
        unsigned char *base = xmalloc(n), *nw = xmalloc(n);
        for (size_t pi = 0; pi < sizeof permille / sizeof *permille; pi++) {
            for (int rows = 0; rows < 2; rows++) {
                for (size_t i = 0; i < n; i++)
                    base[i] = (unsigned char)rnd(&r);
                memcpy(nw, base, n);
                size_t unit = rows ? 512 : 1;
                for (size_t at = 0; at < n; at += unit) {
                    if ((int)(rnd(&r) % 1000) >= permille[pi])
                        continue;
                    for (size_t i = at; i < at + unit && i < n; i++)
                        nw[i] ^= (unsigned char)(1 + rnd(&r) % 255);
                }
                size_t all, changed = blocks_changed(base, nw, n, &all);
                int version;
                (void)xor_round_trip(base, nw, n, CKPT_CODEC_BG_F32,
                                     &version);
                int sparse = n >= 64 && changed * 2 <= all;
                ck_assert_msg(version == (sparse ? 2 : 1),
                              "%zu bytes, %zu of %zu blocks changed: "
                              "version %d", n, changed, all, version);
            }
        }
        free(base);
        free(nw);
    }
}
END_TEST

/* Expects the xor frame f (n bytes, copied to a buffer of exactly that
 * size, so that ASan sees any overread) refused by both decoders of a
 * raw_n-byte frame, with `what` in the message. */
static void expect_refused(const unsigned char *f, size_t n, size_t raw_n,
                           const char *what)
{
    ckpt_codec_ctx *c = ckpt_codec_ctx_new();
    ck_assert_ptr_nonnull(c);
    unsigned char *src = xmalloc(n ? n : 1), *base = xmalloc(raw_n);
    unsigned char *dst = xmalloc(raw_n), *tmp = xmalloc(raw_n);
    memcpy(src, f, n);
    memset(base, 0x5a, raw_n);
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_xor_decode(c, src, n, base, dst, raw_n, &err),
                     -EIO);
    ck_assert_msg(strstr(err.msg, what), "expected '%s', got: %s", what,
                  err.msg);
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(ckpt_xor_apply(c, src, n, dst, tmp, raw_n, &err), -EIO);
    ck_assert_msg(strstr(err.msg, what), "expected '%s', got: %s", what,
                  err.msg);
    free(src);
    free(base);
    free(dst);
    free(tmp);
    ckpt_codec_ctx_free(c);
}

START_TEST(xor_sparse_refusals)
{
    /* A frame of 340 bytes: 6 blocks, the last of 20 bytes.  Blocks 1
     * and 5 changed, stored raw (codec raw), so that the payload can be
     * damaged by hand: version 2, codec 0, u32 count 2, block 1, block 5
     * padded with zeros, the bitmap 0x22. */
    enum { RAW_N = 340, HEAD = 6, BM = 1, STORED = HEAD + 2 * 64 + BM,
           MAP = HEAD + 2 * 64 };
    unsigned char diff[RAW_N] = { 0 };
    rng r = { 31 };
    for (int i = 64; i < 128; i++)
        diff[i] = (unsigned char)(1 + rnd(&r) % 255);
    diff[RAW_N - 1] = 0x80;
    ckpt_codec_ctx *c = ckpt_codec_ctx_new();
    ck_assert_ptr_nonnull(c);
    ckpt_error err = { 0 };
    size_t cap = CKPT_XOR_HEAD + ckpt_codec_bound(RAW_N), got;
    unsigned char *enc = xmalloc(cap), f[STORED];
    ck_assert_msg(ckpt_xor_encode(c, CKPT_CODEC_RAW, 1, 4, diff, RAW_N, enc,
                                  cap, &got, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(got, STORED);
    static const unsigned char head[HEAD] = { 2, 0, 2, 0, 0, 0 };
    ck_assert(memcmp(enc, head, sizeof head) == 0);
    ck_assert(memcmp(enc + HEAD, diff + 64, 64) == 0);
    ck_assert_int_eq(enc[HEAD + 64 + 19], 0x80);
    ck_assert_int_eq(enc[MAP], 0x22);
    memcpy(f, enc, STORED);

    f[2] = 3;                        /* the header says 3 blocks */
    expect_refused(f, STORED, RAW_N, "129 payload bytes stored for 3 blocks");
    f[2] = 7;                        /* more blocks than the frame has */
    expect_refused(f, STORED, RAW_N, "lists 7 blocks, more than");
    f[2] = f[3] = f[4] = f[5] = 0xff;
    expect_refused(f, STORED, RAW_N, "more than its 340-byte frame");
    memcpy(f, enc, STORED);
    f[MAP] = 0x23;                   /* 3 bits for 2 blocks */
    expect_refused(f, STORED, RAW_N, "bitmap lists 3 blocks, its header 2");
    f[MAP] = 0x60;                   /* bit 6: past the last block, 5 */
    expect_refused(f, STORED, RAW_N, "past the frame");
    memcpy(f, enc, STORED);
    f[MAP - 1] = 1;                  /* the padding of the short block */
    expect_refused(f, STORED, RAW_N, "past the end of the frame");
    memcpy(f, enc, STORED);
    expect_refused(f, STORED - 1, RAW_N, "128 payload bytes stored for 2");
    expect_refused(f, 5, RAW_N, "shorter than its header");
    f[0] = 3;                        /* a version from a later writer */
    expect_refused(f, STORED, RAW_N, "header version 3, which this reader "
                   "does not know");
    f[0] = 2;
    f[1] = CKPT_CODEC_XOR;
    expect_refused(f, STORED, RAW_N, "not an ordinary codec");

    /* blocks of one changed byte each, which zstd codes: the stream cut
     * short, its header's count one more */
    memset(diff, 0, RAW_N);
    diff[64 + 5] = diff[RAW_N - 1] = 0x80;
    ck_assert_msg(ckpt_xor_encode(c, CKPT_CODEC_BG_F32, 1, 4, diff, RAW_N,
                                  enc, cap, &got, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(enc[0], 2);
    ck_assert_int_eq(enc[1], CKPT_CODEC_ZSTD);
    expect_refused(enc, got - 3, RAW_N, "zstd");
    enc[2]++;
    expect_refused(enc, got, RAW_N, "zstd");
    free(enc);
    ckpt_codec_ctx_free(c);
}
END_TEST

/* The stored byte `at` bytes into frame k of "w" in root/name (which
 * must hold it), XORed with `flip` on disk when flip is not 0; returns the
 * byte as it was. */
static int frame_byte(const char *root, const char *name, uint64_t k,
                      uint64_t at, unsigned char flip)
{
    ckpt_reader *r = open_ck(root, name);
    ckpt_error err = { 0 };
    ckpt_frame_info fi;
    ck_assert_msg(ckpt_reader_frame(r, (size_t)ckpt_reader_find(r, "w"), 0,
                                    k, &fi, &err) == 0, "%s", err.msg);
    ckpt_reader_close(r);
    ck_assert_uint_lt(at, fi.stored_size);
    char dir[4096], path[4096];
    join(dir, root, name);
    join(path, dir, "data/rank0.shard");
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    unsigned char byte = 0, was;
    off_t off = (off_t)(fi.file_offset + at);
    ck_assert_int_eq(pread(fd, &byte, 1, off), 1);
    was = byte;
    byte ^= flip;
    ck_assert_int_eq(flip ? pwrite(fd, &byte, 1, off) : 1, 1);
    close(fd);
    return was;
}

/* Reads "w" of root/name whole, expecting -EIO with `what` (and not
 * `not`, when given) in the message. */
static void expect_read_fails(const char *root, const char *name,
                              const char *what, const char *not)
{
    ckpt_reader *r = open_ck(root, name);
    ckpt_error err = { 0 };
    float *got = xmalloc(sizeof(float) * N);
    ck_assert_int_eq(ckpt_read(r, (size_t)ckpt_reader_find(r, "w"), got, 0,
                               sizeof(float) * N, &err), -EIO);
    ck_assert_msg(strstr(err.msg, what), "expected '%s': %s", what, err.msg);
    ck_assert_msg(!not || !strstr(err.msg, not), "not '%s': %s", not,
                  err.msg);
    free(got);
    ckpt_reader_close(r);
}

START_TEST(sparse_xor_in_a_checkpoint)
{
    /* s1 against s0, one row of four changed in frames 0 and 1 and one
     * element in frame 2: sparse xor frames, read back bit for bit and
     * verified; a damaged base under one is named as the fault, a damaged
     * delta is refused */
    state s;
    ckpt_error err = { 0 };
    s.root = make_tmpdir_tagged("delta");
    s.w0 = xmalloc(sizeof(float) * N);
    s.w1 = xmalloc(sizeof(float) * N);
    fill(s.w0, 17);
    memcpy(s.w1, s.w0, sizeof(float) * N);
    for (int i = 1 * COLS; i < 2 * COLS; i++)
        s.w1[i] *= 1.5f;
    for (int i = 6 * COLS; i < 7 * COLS; i++)
        s.w1[i] += 0.25f;
    s.w1[9 * COLS + 3] = -1.0f;
    for (int i = 0; i < 100; i++)
        s.b[i] = (unsigned char)(i * 3);
    ck_assert_msg(save(s.root, "s0", NULL, 0, s.w0, s.b, &err) == 0, "%s",
                  err.msg);
    ck_assert_msg(save(s.root, "s1", "s0", 0, s.w1, s.b, &err) == 0, "%s",
                  err.msg);
    for (uint64_t k = 0; k < 3; k++) {
        ck_assert_int_eq(codec_of(s.root, "s1", k), CKPT_CODEC_XOR);
        ck_assert_int_eq(frame_byte(s.root, "s1", k, 0, 0), 2);
    }
    ck_assert_int_eq(codec_of(s.root, "s1", 3), CKPT_CODEC_REF);
    check_read(s.root, "s1", s.w1, s.b);
    check_read(s.root, "s0", s.w0, s.b);

    frame_byte(s.root, "s0", 1, 40, 0xA5);
    expect_read_fails(s.root, "s1", "base 's0'", NULL);
    frame_byte(s.root, "s0", 1, 40, 0xA5);    /* repaired */
    check_read(s.root, "s1", s.w1, s.b);
    frame_byte(s.root, "s1", 1, 8, 0xA5);     /* in the sparse payload */
    expect_read_fails(s.root, "s1", "", "base 's0'");
    state_free(&s);
}
END_TEST

START_TEST(damaged_base_under_xor)
{
    /* s1's frame 1 is xor over s0's frame 1: damage that one in s0's
     * shard, and a read of s1 names the base as the fault */
    state s;
    two_saves(&s);
    ck_assert_int_eq(codec_of(s.root, "s1", 1), CKPT_CODEC_XOR);
    ckpt_reader *r0 = open_ck(s.root, "s0");
    ckpt_error err = { 0 };
    ckpt_frame_info fi;
    ck_assert_msg(ckpt_reader_frame(r0, (size_t)ckpt_reader_find(r0, "w"), 0,
                                    1, &fi, &err) == 0, "%s", err.msg);
    ckpt_reader_close(r0);
    char dir[4096], path[4096];
    join(dir, s.root, "s0");
    join(path, dir, "data/rank0.shard");
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    unsigned char byte;
    off_t at = (off_t)(fi.file_offset + fi.stored_size - 1);
    ck_assert_int_eq(pread(fd, &byte, 1, at), 1);
    byte ^= 0xA5;
    ck_assert_int_eq(pwrite(fd, &byte, 1, at), 1);
    close(fd);
    ckpt_reader *r = open_ck(s.root, "s1");
    float *got = xmalloc(sizeof(float) * N);
    int64_t n = ckpt_read(r, (size_t)ckpt_reader_find(r, "w"), got, 0,
                          sizeof(float) * N, &err);
    ck_assert_int_eq(n, -EIO);
    ck_assert_msg(strstr(err.msg, "base 's0'") &&
                  strstr(err.msg, "checksum mismatch"),
                  "the fault names the base: %s", err.msg);
    free(got);
    ckpt_reader_close(r);
    state_free(&s);
}
END_TEST

START_TEST(depth_bound)
{
    /* full_every 3: a frame changed in every save is xor, xor, whole,
     * xor...; the unchanged frame 0 stays a ref to s0, whatever the
     * chain. */
    ckpt_error err = { 0 };
    char *root = make_tmpdir_tagged("delta");
    float *w = xmalloc(sizeof(float) * N);
    float *hist[6];
    unsigned char b[100] = { 1, 2, 3 };
    fill(w, 3);
    const int expect[6] = { -1, CKPT_CODEC_XOR, CKPT_CODEC_XOR, -1,
                            CKPT_CODEC_XOR, CKPT_CODEC_XOR };
    for (int k = 0; k < 6; k++) {
        char name[16], base[16];
        snprintf(name, sizeof name, "s%d", k);
        snprintf(base, sizeof base, "s%d", k - 1);
        if (k)
            for (int i = 4 * COLS; i < 8 * COLS; i += 5)
                w[i] += 0.01f;
        hist[k] = xmalloc(sizeof(float) * N);
        memcpy(hist[k], w, sizeof(float) * N);
        ck_assert_msg(save(root, name, k ? base : NULL, 3, w, b, &err) == 0,
                      "%s", err.msg);
        int c = codec_of(root, name, 1);
        if (expect[k] < 0)
            ck_assert_msg(c != CKPT_CODEC_XOR && c != CKPT_CODEC_REF,
                          "s%d frame 1 should be whole, is %d", k, c);
        else
            ck_assert_msg(c == expect[k], "s%d frame 1: %d", k, c);
        if (k)
            ck_assert_int_eq(codec_of(root, name, 0), CKPT_CODEC_REF);
    }
    for (int k = 0; k < 6; k++) {
        char name[16];
        snprintf(name, sizeof name, "s%d", k);
        check_read(root, name, hist[k], b);
        free(hist[k]);
    }
    /* s5's frame 0 refers to s0, which holds its bytes. */
    char dir[4096], path[4096];
    join(dir, root, "s5");
    join(path, dir, "index.db");
    sqlite3 *db;
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT b.path FROM frames AS f "
                     "JOIN bases AS b ON b.id = f.base WHERE f.seq = 0 AND "
                     "f.chunk_id = (SELECT c.id FROM chunks AS c JOIN tensors"
                     " AS t ON t.id = c.tensor_id WHERE t.fqn = 'w')", -1,
                     &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_str_eq((const char *)sqlite3_column_text(st, 0), "s0");
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(w);
    remove_tmpdir(root);
}
END_TEST

START_TEST(refuse_missing)
{
    state s;
    two_saves(&s);
    char a[4096], b[4096];
    join(a, s.root, "s0");
    join(b, s.root, "gone");
    ck_assert_int_eq(rename(a, b), 0);
    refused(s.root, "s1", -ENOENT, "'s0' is missing");
    state_free(&s);
}
END_TEST

START_TEST(refuse_changed)
{
    state s;
    two_saves(&s);
    ckpt_error err = { 0 };
    char a[4096];
    join(a, s.root, "s0");
    ck_assert_int_eq(ckpt_remove_tree(a, NULL), 0);
    /* The same bytes saved again: another checkpoint all the same. */
    ck_assert_int_eq(save(s.root, "s0", NULL, 0, s.w0, s.b, &err), 0);
    refused(s.root, "s1", -ESTALE, "changed since");
    state_free(&s);
}
END_TEST

START_TEST(refuse_outside)
{
    state s;
    two_saves(&s);
    tamper(s.root, "s1", "UPDATE bases SET path = '../s0'");
    refused(s.root, "s1", -EXDEV, "outside");
    /* At save time: a base that is not a sibling. */
    char *other = make_tmpdir_tagged("delta-other");
    ckpt_error err = { 0 };
    char base[4096], dir[4096];
    join(base, s.root, "s0");
    join(dir, other, "s2");
    ckpt_write_opts o;
    ckpt_write_opts_init(&o);
    o.base = base;
    ckpt_writer *w;
    ck_assert_int_eq(ckpt_writer_open(&w, dir, "rank0", &o, &err), -EXDEV);
    ck_assert_msg(strstr(err.msg, "not in the save's root"), "%s", err.msg);
    remove_tmpdir(other);
    state_free(&s);
}
END_TEST

START_TEST(refuse_cycle)
{
    state s;
    two_saves(&s);
    /* s1 names itself as its base: following it never ends. */
    tamper(s.root, "s1", "UPDATE bases SET path = 's1', identity = "
           "(SELECT value FROM meta WHERE key = 'identity')");
    refused(s.root, "s1", -ELOOP, "cycle");
    state_free(&s);
}
END_TEST

/* A writer of the delta save root/name against root/base (frames of
 * FRAME bytes, not committed). */
static ckpt_writer *open_delta(const char *root, const char *name,
                               const char *base)
{
    char dir[4096], bpath[4096];
    ckpt_error err = { 0 };
    join(dir, root, name);
    join(bpath, root, base);
    ckpt_write_opts o;
    ckpt_write_opts_init(&o);
    o.frame_size = FRAME;
    o.base = bpath;
    ckpt_writer *w;
    ck_assert_msg(ckpt_writer_open(&w, dir, "rank0", &o, &err) == 0, "%s",
                  err.msg);
    return w;
}

START_TEST(refuse_base_changed_during_save)
{
    state s;
    two_saves(&s);
    ckpt_error err = { 0 };
    char dir[4096], base[4096];
    join(dir, s.root, "s2");
    join(base, s.root, "s1");
    ckpt_writer *w = open_delta(s.root, "s2", "s1");
    int64_t shape[2] = { ROWS, COLS };
    ckpt_piece p = { "w", CKPT_F32, 2, shape, NULL, NULL, s.w1 };
    ck_assert_int_eq(ckpt_writer_put(w, &p, &err), 0);
    ck_assert_int_eq(ckpt_writer_close(w, &err), 0);
    ck_assert_int_eq(ckpt_remove_tree(base, NULL), 0);
    ck_assert_int_eq(save(s.root, "s1", NULL, 0, s.w1, s.b, &err), 0);
    ck_assert_int_eq(ckpt_commit(dir, NULL, &err), -ESTALE);
    ck_assert_msg(strstr(err.msg, "changed while"), "%s", err.msg);
    state_free(&s);
}
END_TEST

START_TEST(old_reader_version)
{
    /* A delta index says version 2; a plain one stays 1. */
    state s;
    two_saves(&s);
    char path[4096];
    const char *names[2] = { "s0", "s1" };
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/%s/index.db", s.root, names[k]);
        sqlite3 *db;
        sqlite3_stmt *st;
        ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
        ck_assert_int_eq(sqlite3_prepare_v2(db, "PRAGMA user_version", -1,
                                            &st, NULL), SQLITE_OK);
        ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
        ck_assert_int_eq(sqlite3_column_int(st, 0), k + 1);
        sqlite3_finalize(st);
        sqlite3_close(db);
    }
    state_free(&s);
}
END_TEST

START_TEST(gc_keeps_bases)
{
    /* s3 (kept, newest) names s2, which names s1: both kept; s0, which
     * nothing kept names, goes; keep_last counted only s3. */
    char *b3[] = { (char *)"s2" }, *b2[] = { (char *)"s1" };
    char *b0[] = { (char *)"gone" };
    ckpt_retain_item v[] = {
        { "s0", 1, 0, 0, b0, 1 }, { "s1", 1, 1, 0, NULL, 0 },
        { "s2", 1, 2, 0, b2, 1 }, { "s3", 1, 3, 0, b3, 1 },
    };
    ckpt_retain_why why[4];
    size_t user[4] = { 9, 9, 9, 9 };
    ck_assert_int_eq(ckpt_retain_select(v, 4, 1, 0, why), 0);
    ckpt_retain_keep_bases(v, 4, why, user);
    ck_assert_int_eq(why[3], CKPT_RETAIN_LATEST);
    ck_assert_int_eq(why[2], CKPT_RETAIN_BASE);
    ck_assert_int_eq(user[2], 3);
    ck_assert_int_eq(why[1], CKPT_RETAIN_BASE);
    ck_assert_int_eq(user[1], 2);
    ck_assert_int_eq(why[0], CKPT_RETAIN_DROP);
    /* And from a real root: the bases a delta's index names. */
    state s;
    two_saves(&s);
    char dir[4096];
    join(dir, s.root, "s1");
    ckpt_retain_item it = { .name = "s1" };
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_retain_bases(dir, &it, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(it.nbases, 1);
    ck_assert_str_eq(it.bases[0], "s0");
    ckpt_retain_item_free_bases(&it);
    join(dir, s.root, "s0");
    ck_assert_int_eq(ckpt_retain_bases(dir, &it, &err), 0);
    ck_assert_uint_eq(it.nbases, 0);
    state_free(&s);
}
END_TEST

/* Saves "t", nf frames of `frame` bytes of v, into root/name against
 * base (or NULL) with `threads` encoders: put whole (chunk 0), or
 * streamed in writes of `chunk` bytes (copied into the writer's frames). */
static void save_tc(const char *root, const char *name, const char *base,
                    int threads, const float *v, int nf, size_t frame,
                    size_t chunk)
{
    char dir[4096], bpath[4096];
    ckpt_error err = { 0 };
    join(dir, root, name);
    ckpt_write_opts o;
    ckpt_write_opts_init(&o);
    o.frame_size = frame;
    o.sync = 0;
    o.threads = threads;
    if (base) {
        join(bpath, root, base);
        o.base = bpath;
    }
    ckpt_writer *wr;
    ck_assert_msg(ckpt_writer_open(&wr, dir, "rank0", &o, &err) == 0, "%s",
                  err.msg);
    int64_t shape[1] = { (int64_t)(nf * frame / 4) };
    ckpt_piece p = { "t", CKPT_F32, 1, shape, NULL, NULL, v };
    ckpt_stream *st;
    size_t n = (size_t)nf * frame;
    if (chunk == 0) {
        ck_assert_msg(ckpt_writer_put(wr, &p, &err) == 0, "%s", err.msg);
    } else {
        ck_assert_msg(ckpt_writer_begin(wr, &p, &st, &err) == 0, "%s",
                      err.msg);
        for (size_t off = 0; off < n; off += chunk)
            ck_assert_msg(ckpt_stream_write(st, (const char *)v + off,
                                            n - off < chunk ? n - off : chunk,
                                            &err) == 0, "%s", err.msg);
        ck_assert_msg(ckpt_stream_end(st, &err) == 0, "%s", err.msg);
    }
    ck_assert_msg(ckpt_writer_close(wr, &err) == 0, "%s", err.msg);
    ckpt_commit_opts co;
    ckpt_commit_opts_init(&co);
    co.sync = 0;
    ck_assert_msg(ckpt_commit(dir, &co, &err) == 0, "%s", err.msg);
}

static void save_t(const char *root, const char *name, const char *base,
                   int threads, const float *v, int nf, size_t frame)
{
    save_tc(root, name, base, threads, v, nf, frame, 0);
}

/* Reads tensor t of rd whole, checks it is the n bytes at want, and
 * closes rd. */
static void read_back(ckpt_reader *rd, size_t t, const void *want, size_t n)
{
    ckpt_error err = { 0 };
    unsigned char *got = xmalloc(n);
    ck_assert_msg(ckpt_read(rd, t, got, 0, n, &err) == (int64_t)n, "%s",
                  err.msg);
    ck_assert(memcmp(got, want, n) == 0);
    free(got);
    ckpt_reader_close(rd);
}

/* The xor budget's states, nf frames of FRAME bytes (f32) each: *v0
 * random, *v1 the same but for frames 0-3 (new values) and, from frame
 * `first` on, every `step`th frame nudged (an xor try would win). */
static void budget_states(int nf, int first, int step, uint64_t seed,
                          float **v0, float **v1)
{
    enum { PER = FRAME / 4 };
    *v0 = xmalloc(sizeof(float) * (size_t)nf * PER);
    *v1 = xmalloc(sizeof(float) * (size_t)nf * PER);
    rng r = { seed };
    for (int i = 0; i < nf * PER; i++)
        (*v0)[i] = (float)(rnd(&r) % 100000) / 7.0f;
    memcpy(*v1, *v0, sizeof(float) * (size_t)nf * PER);
    for (int i = 0; i < 4 * PER; i++)
        (*v1)[i] = (float)(rnd(&r) % 100000) / 3.0f;
    for (int f = first; f < nf; f += step)
        for (int i = f * PER; i < (f + 1) * PER; i += 16)
            (*v1)[i] += 1.0f;
}

/* The codec of frame f of tensor t in rd. */
static int frame_codec(ckpt_reader *rd, size_t t, uint64_t f)
{
    ckpt_error err = { 0 };
    ckpt_frame_info fi;
    ck_assert_msg(ckpt_reader_frame(rd, t, 0, f, &fi, &err) == 0, "%s",
                  err.msg);
    return fi.codec;
}

/* Saves v1 ("t", nf frames of FRAME bytes) into root/name against
 * root/s0 as save_tc does, checks that it reads back bit for bit, and
 * puts each frame's codec into codec[0..nf). */
static void saved_codecs(const char *root, const char *name, int threads,
                         const float *v1, int nf, size_t chunk, int *codec)
{
    save_tc(root, name, "s0", threads, v1, nf, FRAME, chunk);
    ckpt_reader *rd = open_ck(root, name);
    size_t t = (size_t)ckpt_reader_find(rd, "t");
    for (int f = 0; f < nf; f++)
        codec[f] = frame_codec(rd, t, (uint64_t)f);
    read_back(rd, t, v1, sizeof(float) * (size_t)nf * (FRAME / 4));
}

START_TEST(xor_budget_in_frame_order)
{
    /* Frames 0-3 all new (frames 0 and 1 take the 2 credits and their
     * xor tries lose), frames 4-39 nudged (an xor try would win).  In
     * frame order frames 2-32 are skipped candidates, frame 33 the probe
     * (one in 32), whose win brings the tries back: frames 33-39 are xor,
     * whatever the number of encoders racing for frames.  When the
     * encoders spent the credit in the order they reached frames, a
     * nudged frame taking a credit before a new one became xor; when
     * the frames handed out before a win was drained were skipped, the
     * ones after 33 depended on how many were in flight. */
    enum { NF = 40 };
    char *root = make_tmpdir_tagged("delta");
    float *v0, *v1;
    budget_states(NF, 4, 1, 5, &v0, &v1);
    save_t(root, "s0", NULL, 1, v0, NF, FRAME);
    const int threads[] = { 1, 2, 4, 8, 3, 8, 5, 8, 6, 8, 7, 8 };
    for (size_t k = 0; k < sizeof threads / sizeof *threads; k++) {
        char name[16];
        snprintf(name, sizeof name, "d%zu", k);
        int codec[NF];
        saved_codecs(root, name, threads[k], v1, NF, 0, codec);
        for (int f = 0; f < NF; f++)
            ck_assert_msg((codec[f] == CKPT_CODEC_XOR) == (f >= 33) &&
                          codec[f] != CKPT_CODEC_REF,
                          "%d threads: frame %d has codec %d", threads[k], f,
                          codec[f]);
    }
    free(v0);
    free(v1);
    remove_tmpdir(root);
}
END_TEST

START_TEST(refs_take_no_xor_ticket)
{
    /* Frames 0-3 new (0 and 1 spend the 2 credits and lose, 2 and 3 are
     * skipped candidates), then from frame 4 the base's frames (refs) and
     * nudged ones (an xor try would win) in turn.  A ref is settled where
     * it is submitted and takes no ticket: the candidates are frames 2,
     * 3 and the odd frames, the probe (one in 32) is frame 63, whose win
     * brings the tries back: odd frames 5-61 are whole, 63-71 xor, even
     * frames from 4 refs, with any number of encoders, put whole or
     * streamed in writes that straddle frames.  When a ref took a ticket
     * and gave it back once drained, the probe came earlier by the refs
     * still in flight when later frames were handed out. */
    enum { NF = 72 };
    char *root = make_tmpdir_tagged("delta");
    float *v0, *v1;
    budget_states(NF, 5, 2, 11, &v0, &v1);
    save_t(root, "s0", NULL, 1, v0, NF, FRAME);
    const int threads[] = { 1, 2, 8, 4, 8, 3, 8 };
    const size_t nt = sizeof threads / sizeof *threads;
    for (size_t k = 0; k < 2 * nt; k++) {
        char name[16];
        snprintf(name, sizeof name, "d%zu", k);
        int codec[NF];
        saved_codecs(root, name, threads[k % nt], v1, NF,
                     k < nt ? 0 : FRAME * 3 / 2 + 4, codec);
        for (int f = 0; f < NF; f++) {
            int want = f >= 4 && f % 2 == 0 ? CKPT_CODEC_REF
                       : f >= 63 ? CKPT_CODEC_XOR : -1;
            ck_assert_msg(want < 0 ? codec[f] != CKPT_CODEC_REF &&
                          codec[f] != CKPT_CODEC_XOR : codec[f] == want,
                          "%s, %d threads: frame %d has codec %d",
                          k < nt ? "put" : "streamed", threads[k % nt], f,
                          codec[f]);
        }
    }
    free(v0);
    free(v1);
    remove_tmpdir(root);
}
END_TEST

/* ckpt_save_sync of the tensors "frozen", "tail" and "moved" (NF frames
 * of FRAME bytes each, f32) and "small" (3 frames) into root/name,
 * against base (or none). */
enum { LANE_NF = 12, LANE_PER = FRAME / 4, LANE_T = 4 };
static const char *const lane_names[LANE_T] = { "frozen", "tail", "moved",
                                                "small" };

static int lane_frames(int k)
{
    return k == 3 ? 3 : LANE_NF;
}

static void save_lanes(const char *root, const char *name, const char *base,
                       int threads, float *const v[LANE_T])
{
    char dir[4096], bpath[4096];
    ckpt_error err = { 0 };
    join(dir, root, name);
    ckpt_save_opts o;
    ckpt_save_opts_init(&o);
    o.write.frame_size = FRAME;
    o.write.sync = 0;
    o.write.threads = threads;
    if (base) {
        join(bpath, root, base);
        o.write.base = bpath;
    }
    int64_t shape[LANE_T];
    ckpt_piece p[LANE_T];
    for (int k = 0; k < LANE_T; k++) {
        shape[k] = lane_frames(k) * LANE_PER;
        p[k] = (ckpt_piece){ lane_names[k], CKPT_F32, 1, &shape[k], NULL,
                             NULL, v[k] };
    }
    ck_assert_msg(ckpt_save_sync(dir, p, LANE_T, &o, &err) == 0, "%s",
                  err.msg);
}

START_TEST(lanes_in_save_sync)
{
    /* "frozen" is the base's, "tail" too but for a nudge in every frame
     * after its first, "moved" nudged in every frame, "small" the base's
     * but too small for a lane: lane 1 takes frozen and tail (their first
     * frame unchanged), lane 0 moved and small, on two threads.  Each
     * reads back bit for bit; frozen and small are all refs, tail a ref
     * then xor frames, moved all xor frames: each lane's xor budget
     * is its own, so which frames are tried does not depend on how the
     * threads run (asked with 1 to 8 encoders). */
    char *root = make_tmpdir_tagged("delta");
    float *v0[LANE_T], *v1[LANE_T];
    rng r = { 9 };
    for (int k = 0; k < LANE_T; k++) {
        v0[k] = xmalloc(sizeof(float) * LANE_NF * LANE_PER);
        v1[k] = xmalloc(sizeof(float) * LANE_NF * LANE_PER);
        for (int i = 0; i < LANE_NF * LANE_PER; i++)
            v0[k][i] = (float)(rnd(&r) % 100000) / 7.0f;
        memcpy(v1[k], v0[k], sizeof(float) * LANE_NF * LANE_PER);
    }
    for (int i = LANE_PER; i < LANE_NF * LANE_PER; i += 16)
        v1[1][i] += 1.0f;
    for (int i = 0; i < LANE_NF * LANE_PER; i += 16)
        v1[2][i] += 1.0f;
    save_lanes(root, "s0", NULL, 1, v0);

    /* The rule: unchanged first frame, against the writer's base. */
    ckpt_error err = { 0 };
    ckpt_writer *w = open_delta(root, "probe", "s0");
    int64_t shape[1] = { LANE_NF * LANE_PER }, other[1] = { LANE_PER };
    for (int k = 0; k < LANE_T; k++) {
        int64_t sk[1] = { lane_frames(k) * LANE_PER };
        ckpt_piece p = { lane_names[k], CKPT_F32, 1, sk, NULL, NULL, v1[k] };
        ck_assert_int_eq(ckpt_writer_unchanged_start(w, &p, &err), k < 2);
    }
    ckpt_piece absent = { "absent", CKPT_F32, 1, shape, NULL, NULL, v1[0] };
    ck_assert_int_eq(ckpt_writer_unchanged_start(w, &absent, &err), 0);
    ckpt_piece resized = { "frozen", CKPT_F32, 1, other, NULL, NULL, v1[0] };
    ck_assert_int_eq(ckpt_writer_unchanged_start(w, &resized, &err), 0);
    ckpt_writer_abort(w);

    const int threads[] = { 1, 2, 8, 3, 8 };
    for (size_t n = 0; n < sizeof threads / sizeof *threads; n++) {
        char name[16];
        snprintf(name, sizeof name, "d%zu", n);
        save_lanes(root, name, "s0", threads[n], v1);
        for (int k = 0; k < LANE_T; k++) {
            ckpt_reader *rd = open_ck(root, name);
            size_t t = (size_t)ckpt_reader_find(rd, lane_names[k]);
            for (uint64_t f = 0; f < (uint64_t)lane_frames(k); f++) {
                ckpt_frame_info fi;
                ck_assert_msg(ckpt_reader_frame(rd, t, 0, f, &fi, &err) == 0,
                              "%s", err.msg);
                int want = k == 0 || k == 3 || (k == 1 && f == 0)
                           ? CKPT_CODEC_REF : CKPT_CODEC_XOR;
                ck_assert_msg(fi.codec == want, "%d threads: %s frame %llu "
                              "has codec %d, not %d", threads[n],
                              lane_names[k], (unsigned long long)f, fi.codec,
                              want);
            }
            read_back(rd, t, v1[k],
                      sizeof(float) * (size_t)lane_frames(k) * LANE_PER);
        }
    }
    for (int k = 0; k < LANE_T; k++) {
        free(v0[k]);
        free(v1[k]);
    }
    remove_tmpdir(root);
}
END_TEST

/* The int64 that sql gives (its first row) in root/name/index.db. */
static int64_t index_int(const char *root, const char *name, const char *sql)
{
    char dir[4096], path[4096];
    join(dir, root, name);
    join(path, dir, "index.db");
    sqlite3 *db;
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_msg(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK,
                  "%s", sql);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

START_TEST(data_hash_from_frames)
{
    /* A chunk's data_hash is the XXH3-64 of its frames' checksums (LE
     * uint64s, in order), one frame's is that frame's checksum (the
     * XXH3-64 of its bytes), and the index says which definition it
     * uses: the writer hashes the bytes once, per frame (#28). */
    state s;
    two_saves(&s);
    for (int k = 0; k < 2; k++) {
        const char *name = k ? "s1" : "s0";
        const float *w = k ? s.w1 : s.w0;
        unsigned char le[16 * 8];
        for (int f = 0; f < 16; f++) {
            uint64_t sum = XXH3_64bits((const char *)w + f * FRAME, FRAME);
            for (int b = 0; b < 8; b++)
                le[f * 8 + b] = (unsigned char)(sum >> (8 * b));
        }
        uint64_t want = XXH3_64bits(le, sizeof le);
        ck_assert_uint_eq((uint64_t)index_int(s.root, name,
            "SELECT data_hash FROM chunks JOIN tensors ON tensor_id = "
            "tensors.id WHERE fqn = 'w'"), want);
        ck_assert_uint_eq((uint64_t)index_int(s.root, name,
            "SELECT data_hash FROM chunks JOIN tensors ON tensor_id = "
            "tensors.id WHERE fqn = 'b'"), XXH3_64bits(s.b, 100));
        ck_assert_int_eq(index_int(s.root, name, "SELECT count(*) FROM meta "
                                   "WHERE key = 'data_hash' AND value = "
                                   "'frames'"), 1);
    }
    state_free(&s);
}
END_TEST

/* The coded size of diff (n bytes of f32 XOR) as an xor frame. */
static size_t xor_coded(const unsigned char *diff, size_t n)
{
    ckpt_codec_ctx *c = ckpt_codec_ctx_new();
    ck_assert_ptr_nonnull(c);
    ckpt_error err = { 0 };
    size_t cap = CKPT_XOR_HEAD + ckpt_codec_bound(n), got;
    unsigned char *enc = xmalloc(cap);
    ck_assert_msg(ckpt_xor_encode(c, CKPT_CODEC_BG_F32, 1, 4, diff, n, enc,
                                  cap, &got, &err) == 0, "%s", err.msg);
    free(enc);
    ckpt_codec_ctx_free(c);
    return got;
}

START_TEST(xor_hopeless_is_sound)
{
    /* ckpt_xor_hopeless lets the writer skip coding an xor frame that
     * cannot pay: whenever it says so, the frame coded is indeed over the
     * limit; and it does say so for a frame of a dense training step
     * (every element moved), so that such a try costs no coding. */
    const size_t n = 1 << 20;
    float *a = xmalloc(n), *b = xmalloc(n);
    unsigned char *diff = xmalloc(n);
    rng r = { 11 };
    int said = 0;
    /* moves from none to large, on a share of the elements from 1/64 to
     * all of them */
    const float step[] = { 1e-7f, 1e-5f, 1e-3f, 1e-1f, 10.0f };
    for (size_t si = 0; si < sizeof step / sizeof *step; si++) {
        for (int every = 1; every <= 64; every *= 4) {
            for (size_t i = 0; i < n / 4; i++) {
                a[i] = (float)(int64_t)(rnd(&r) % 200001 - 100000) / 1e4f;
                b[i] = a[i];
                if (i % (size_t)every == 0)
                    b[i] += step[si] * (float)(int64_t)(rnd(&r) % 201 - 100);
            }
            ckpt_xor_bytes(diff, a, b, n);
            size_t coded = xor_coded(diff, n);
            for (size_t limit = n / 16; limit <= n; limit += n / 16) {
                if (!ckpt_xor_hopeless(diff, n, 4, limit))
                    continue;
                said++;
                ck_assert_msg(coded > limit, "step %g, 1 in %d moved: "
                              "hopeless at %zu but coded in %zu",
                              (double)step[si], every, limit, coded);
            }
            if (every == 1 && step[si] >= 1e-3f)
                ck_assert_msg(ckpt_xor_hopeless(diff, n, 4, n * 2 / 3 * 4 / 5),
                              "dense step %g not told hopeless (coded %zu)",
                              (double)step[si], coded);
        }
    }
    ck_assert_int_gt(said, 0);
    /* a few changed rows: runs of zeros, never hopeless */
    memset(diff, 0, n);
    for (size_t i = 4096; i < 8192; i++)
        diff[i] = (unsigned char)rnd(&r);
    ck_assert(!ckpt_xor_hopeless(diff, n, 4, 1));
    free(a);
    free(b);
    free(diff);
}
END_TEST

/* n floats in [-10, 10] with every mantissa bit in use: byte planes 0
 * and 1 stored as they are, the exponent's Huffman-coded. */
static void fill_noise(float *v, size_t n, rng *r)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(int64_t)(rnd(r) % 2000001 - 1000000) / 1e5f;
}

START_TEST(try_judged_before_base_decode)
{
    /* Every frame of "t" replaced: an xor try cannot pay, and the writer
     * sees so from the base frame's leading byte planes (stored or
     * Huffman-coded mantissa bytes), without decoding the frame: damage
     * the exponent plane of every base frame, which a decode would find,
     * and the delta save still goes through, every frame stored whole
     * and read back exactly.  (Decoding the base frame for each try
     * failed such a save with the base's checksum mismatch.) */
    enum { NF = 6, FR = 1 << 16, PER = FR / 4 };
    char *root = make_tmpdir_tagged("delta");
    float *v0 = xmalloc(FR * NF), *v1 = xmalloc(FR * NF);
    rng r = { 17 };
    fill_noise(v0, (size_t)NF * PER, &r);
    fill_noise(v1, (size_t)NF * PER, &r);
    save_t(root, "s0", NULL, 2, v0, NF, FR);
    char dir[4096], path[4096];
    join(dir, root, "s0");
    join(path, dir, "data/rank0.shard");
    ckpt_reader *r0 = open_ck(root, "s0");
    ckpt_error err = { 0 };
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    for (uint64_t f = 0; f < NF; f++) {
        ckpt_frame_info fi;
        ck_assert_msg(ckpt_reader_frame(r0, (size_t)ckpt_reader_find(r0, "t"),
                                        0, f, &fi, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(fi.codec, CKPT_CODEC_BG_F32);
        unsigned char h[24], b;
        ck_assert_int_eq(pread(fd, h, sizeof h, (off_t)fi.file_offset), 24);
        size_t at = sizeof h;                /* past planes 0-2 */
        for (int k = 0; k < 3; k++)
            at += (size_t)h[5 + 5 * k] | (size_t)h[6 + 5 * k] << 8 |
                  (size_t)h[7 + 5 * k] << 16 | (size_t)h[8 + 5 * k] << 24;
        ck_assert_msg(h[4] == 0 && h[9] == 0 && h[19] != 0,
                      "frame %llu: planes 0, 1 stored, 3 coded (methods "
                      "%d %d %d)", (unsigned long long)f, h[4], h[9], h[19]);
        off_t pos = (off_t)(fi.file_offset + at + 40);
        ck_assert_int_eq(pread(fd, &b, 1, pos), 1);
        b ^= 0x5A;
        ck_assert_int_eq(pwrite(fd, &b, 1, pos), 1);
    }
    close(fd);
    ckpt_reader_close(r0);
    save_t(root, "s1", "s0", 2, v1, NF, FR);
    ckpt_reader *rd = open_ck(root, "s1");
    size_t t = (size_t)ckpt_reader_find(rd, "t");
    for (uint64_t f = 0; f < NF; f++) {
        ckpt_frame_info fi;
        ck_assert_msg(ckpt_reader_frame(rd, t, 0, f, &fi, &err) == 0, "%s",
                      err.msg);
        ck_assert_int_eq(fi.codec, CKPT_CODEC_BG_F32);
    }
    read_back(rd, t, v1, FR * NF);
    free(v0);
    free(v1);
    remove_tmpdir(root);
}
END_TEST

/* Planes 0..np-1 of the bgf32 frame of the n bytes at v (into planes),
 * as a writer's try peeks at them; returns np. */
static int leading_planes(const float *v, size_t n, unsigned char *planes,
                          int *layout)
{
    ckpt_codec_ctx *c = ckpt_codec_ctx_new();
    ck_assert_ptr_nonnull(c);
    ckpt_error err = { 0 };
    size_t cap = ckpt_codec_bound(n), got, prefix;
    int used;
    unsigned char *enc = xmalloc(cap);
    ck_assert_msg(ckpt_codec_encode(c, CKPT_CODEC_BG_F32, 1, 4, v, n, enc,
                                    cap, &got, &used, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(used, CKPT_CODEC_BG_F32);
    int np = ckpt_codec_leading_planes(used, enc, got, n, 2, &prefix,
                                       layout);
    ck_assert_int_ge(np, 1);
    ck_assert_int_le(np, 3);
    ck_assert_msg(ckpt_codec_decode_leading(c, used, enc, prefix, n, np,
                                            planes, &err) == 0, "%s",
                  err.msg);
    free(enc);
    ckpt_codec_ctx_free(c);
    return np;
}

START_TEST(planes_hopeless_is_sound)
{
    /* ckpt_xor_planes_hopeless judges a try from the base frame's leading
     * planes only: whenever it says hopeless, the xor frame coded is
     * indeed over the limit; it says so for frames whose every element
     * was replaced or moved by a large step; and never for a frame of
     * which a few rows changed (the embedding tables' case, where every
     * try must go on). */
    const size_t n = 1 << 20, ne = n / 4;
    float *a = xmalloc(n), *b = xmalloc(n);
    unsigned char *diff = xmalloc(n), *planes = xmalloc(n);
    rng r = { 23 };
    int said = 0, layout;
    const float step[] = { 1e-5f, 1e-3f, 1e-1f, 10.0f };
    for (size_t si = 0; si < sizeof step / sizeof *step; si++) {
        for (int every = 1; every <= 64; every *= 4) {
            fill_noise(a, ne, &r);
            memcpy(b, a, n);
            for (size_t i = 0; i < ne; i += (size_t)every)
                b[i] += step[si] * (float)(int64_t)(rnd(&r) % 201 - 100);
            int np = leading_planes(a, n, planes, &layout);
            ckpt_xor_bytes(diff, a, b, n);
            size_t coded = xor_coded(diff, n);
            for (size_t limit = n / 16; limit <= n; limit += n / 16) {
                if (!ckpt_xor_planes_hopeless(layout, b, n, planes, np,
                                              limit))
                    continue;
                said++;
                ck_assert_msg(coded > limit, "step %g, 1 in %d moved: "
                              "hopeless at %zu but coded in %zu",
                              (double)step[si], every, limit, coded);
            }
            if (every == 1 && step[si] >= 1e-1f)
                ck_assert_msg(ckpt_xor_planes_hopeless(layout, b, n, planes,
                                                       np, n * 2 / 3 * 4 / 5),
                              "dense step %g not told hopeless (coded %zu)",
                              (double)step[si], coded);
        }
    }
    ck_assert_int_gt(said, 0);
    /* every element replaced */
    fill_noise(a, ne, &r);
    fill_noise(b, ne, &r);
    int np = leading_planes(a, n, planes, &layout);
    ck_assert(ckpt_xor_planes_hopeless(layout, b, n, planes, np, n / 2));
    /* 5% of 128-wide rows replaced: never hopeless */
    memcpy(b, a, n);
    for (size_t row = 0; row < ne / 128; row += 20)
        fill_noise(b + row * 128, 128, &r);
    ck_assert(!ckpt_xor_planes_hopeless(layout, b, n, planes, np, 1));
    free(a);
    free(b);
    free(diff);
    free(planes);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("delta");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, depth_bound);
    tcase_add_test(tc, xor_sparse_and_dense);
    tcase_add_test(tc, xor_sparse_densities);
    tcase_add_test(tc, xor_sparse_refusals);
    tcase_add_test(tc, sparse_xor_in_a_checkpoint);
    tcase_add_test(tc, damaged_base_under_xor);
    tcase_add_test(tc, refuse_missing);
    tcase_add_test(tc, refuse_changed);
    tcase_add_test(tc, refuse_outside);
    tcase_add_test(tc, refuse_cycle);
    tcase_add_test(tc, refuse_base_changed_during_save);
    tcase_add_test(tc, old_reader_version);
    tcase_add_test(tc, gc_keeps_bases);
    tcase_add_test(tc, xor_budget_in_frame_order);
    tcase_add_test(tc, data_hash_from_frames);
    tcase_add_test(tc, xor_hopeless_is_sound);
    tcase_add_test(tc, try_judged_before_base_decode);
    tcase_add_test(tc, planes_hopeless_is_sound);
    tcase_add_test(tc, lanes_in_save_sync);
    tcase_add_test(tc, refs_take_no_xor_ticket);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(suite());
}
