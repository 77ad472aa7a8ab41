/*
 * test_planlog.c - the local plan's binary log (src/format/planlog.c,
 * planfile.c; docs/FORMAT.md "Local plans"): every record type read back
 * as written (against the test's own pieces, digests and packed records
 * computed here), a plan cut at every byte of its last record reading as
 * the appends before it, damage before the end refused by name and
 * offset, a failed write undone, and a reader beside a writer that
 * appends.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptfs.h"
#include "codec/codec.h"
#include "format/chunkpack.h"
#include "format/layout.h"
#include "format/pieces.h"
#include "format/planfile.h"
#include "format/planlog.h"
#include "unit_util.h"
#include "planedit.h"

#define NP 3

/* Piece i of the fixture: a [6, 4] float32 tensor cut in rows, 2 frames
 * each; with delta = 1 piece 2's second frame is a ref frame of base 7. */
static void make_piece(ckpt_piece_rec *p, int i, int delta)
{
    static char *names[NP] = { "model.w", "model.w", "opt.m" };
    memset(p, 0, sizeof *p);
    p->fqn = names[i];
    p->file = "data/rank0.shard";
    p->dtype = i == 2 ? CKPT_BF16 : CKPT_F32;
    p->ndim = 2;
    p->shape[0] = 6, p->shape[1] = 4;
    p->offsets[0] = i == 1 ? 3 : 0;
    p->sizes[0] = i == 2 ? 6 : 3, p->sizes[1] = 4;
    p->raw_bytes = (uint64_t)p->sizes[0] * 4 * (i == 2 ? 2 : 4);
    p->data_hash = 0x1111111111111111ull * (uint64_t)(i + 1);
    static ckpt_frame_rec fr[NP][2];
    for (int k = 0; k < 2; k++) {
        ckpt_frame_rec *f = &fr[i][k];
        f->raw_offset = (uint64_t)k * p->raw_bytes / 2;
        f->raw_size = p->raw_bytes / 2;
        f->stored_size = f->raw_size - 3;
        f->file_offset = 1000u * (unsigned)i + 100u * (unsigned)k;
        f->codec = k ? CKPT_CODEC_ZSTD : CKPT_CODEC_RAW;
        f->checksum = 0xfeedface00000000ull + (uint64_t)(10 * i + k);
        f->base = 0;
        p->stored_bytes += f->stored_size;
    }
    if (delta && i == 2) {
        fr[i][1].codec = CKPT_CODEC_REF;
        fr[i][1].base = 7;
    }
    p->frames = fr[i];
    p->nframes = 2;
}

static void same_piece(const ckpt_pieces *t, size_t at, const ckpt_piece_rec *w)
{
    ckpt_piece_rec g;
    ck_assert_int_eq(ckpt_pieces_get(t, at, &g), 0);
    ck_assert_str_eq(g.fqn, w->fqn);
    ck_assert_str_eq(g.file, w->file);
    ck_assert_int_eq(g.dtype, w->dtype);
    ck_assert_int_eq(g.ndim, w->ndim);
    for (int d = 0; d < w->ndim; d++) {
        ck_assert_int_eq(g.shape[d], w->shape[d]);
        ck_assert_int_eq(g.offsets[d], w->offsets[d]);
        ck_assert_int_eq(g.sizes[d], w->sizes[d]);
    }
    ck_assert_uint_eq(g.raw_bytes, w->raw_bytes);
    ck_assert_uint_eq(g.stored_bytes, w->stored_bytes);
    ck_assert_uint_eq(g.data_hash, w->data_hash);
    ck_assert_uint_eq(g.nframes, w->nframes);
    for (size_t k = 0; k < w->nframes; k++)
        frame_rec_eq(&g.frames[k], &w->frames[k]);
    ckpt_piece_clear(&g);
}

static const char *meta_of(const ckpt_manifest *m, const char *k)
{
    const char *v = ckpt_manifest_get_meta(m, k);
    return v ? v : "(none)";
}

/* Writes plan `path`: pieces 0-1 with meta a=1, a declared tensor, then
 * piece 2 with meta a=2, b=x and a synced claim, then the tensor declared
 * again with a reason and once more without. */
static void write_plan(const char *path, int delta)
{
    ckpt_piece_rec p[NP];
    for (int i = 0; i < NP; i++)
        make_piece(&p[i], i, delta);
    ckpt_error err = { 0 };
    ckpt_planfile *pf;
    ck_assert_msg(ckpt_planfile_create(&pf, path, "rank0", &err) == 0, "%s",
                  err.msg);
    ckpt_kv m1[] = { { "a", "1", NULL } }, m2[] = { { "b", "x", NULL },
                                                    { "a", "2", NULL } };
    ckpt_kv d0[] = { { "opt.m", "", NULL }, { "model.w", "", NULL } };
    ckpt_kv d1[] = { { "opt.m", "its write failed", NULL } };
    ckpt_kv d2[] = { { "opt.m", "", NULL } };
    ck_assert_int_eq(ckpt_planfile_append(pf, p, 2, m1, 1, &err), 0);
    ck_assert_int_eq(ckpt_planfile_declare(pf, d0, 2, &err), 0);
    ckpt_planfile_note_synced(pf, "data/rank0.shard", 4242);
    ck_assert_int_eq(ckpt_planfile_append(pf, p + 2, 1, m2, 2, &err), 0);
    ck_assert_int_eq(ckpt_planfile_declare(pf, d1, 1, &err), 0);
    ck_assert_int_eq(ckpt_planfile_declare(pf, d2, 1, &err), 0);
    ckpt_planfile_close(pf);
}

static char *plan_in(const char *dir, const char *name)
{
    char *p = xmalloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

START_TEST(test_every_record_round_trips)
{
    char *dir = make_tmpdir_tagged("planlog");
    for (int delta = 0; delta < 2; delta++) {
        char *path = plan_in(dir, delta ? "d.plan" : "p.plan");
        write_plan(path, delta);
        ckpt_piece_rec want[NP];
        for (int i = 0; i < NP; i++)
            make_piece(&want[i], i, delta);
        ckpt_pieces tab;
        ckpt_manifest m;
        ckpt_plan_synced s;
        ckpt_error err = { 0 };
        ckpt_pieces_init(&tab);
        ckpt_manifest_init(&m);
        ck_assert_msg(ckpt_planfile_read_synced(path, &tab, &m, &s, &err) == 0,
                      "%s", err.msg);
        ck_assert_uint_eq(tab.n, NP);
        for (int i = 0; i < NP; i++)
            same_piece(&tab, (size_t)i, &want[i]);
        ck_assert_str_eq(meta_of(&m, "a"), "2");
        ck_assert_str_eq(meta_of(&m, "b"), "x");
        ck_assert_str_eq(meta_of(&m, CKPT_META_DATA_HASH),
                         CKPT_DATA_HASH_FRAMES);
        ck_assert_str_eq(m.meta[0].writer, "rank0");
        ck_assert_uint_eq(m.ndeclared, 2);
        ck_assert_str_eq(m.declared[0].key, "model.w");
        ck_assert_str_eq(m.declared[0].value, "");
        ck_assert_str_eq(m.declared[1].key, "opt.m");
        ck_assert_str_eq(m.declared[1].value, "its write failed");
        ck_assert_int_eq(s.has, 1);
        ck_assert_uint_eq(s.bytes, 4242);
        ck_assert_str_eq(s.file, "data/rank0.shard");
        /* The layout claim: the digest of all three pieces, or none once
         * a piece (the delta one) cannot be packed. */
        uint64_t digest = CKPT_LAYOUT_SEED;
        ckpt_strbuf packed = { 0 };
        for (int i = 0; i < NP; i++) {
            digest = ckpt_layout_step(digest, want[i].fqn, want[i].dtype, 2,
                                      want[i].shape, want[i].offsets,
                                      want[i].sizes, want[i].file);
            ckpt_pack_put(&packed, 0, want[i].frames, 2, want[i].data_hash);
        }
        ck_assert_int_eq(s.has_layout, !delta);
        if (!delta) {
            ck_assert_uint_eq(s.layout_pieces, NP);
            ck_assert_uint_eq(s.layout, digest);
        }
        /* What a commit reusing a layout reads. */
        char *name = strrchr(path, '/') + 1;
        ckpt_plan_packed pk;
        memset(&pk, 0, sizeof pk);
        ck_assert_msg(ckpt_planfile_read_packed_many(dir, &name, 1, 1, &pk,
                                                     &err) == 0, "%s",
                      err.msg);
        ck_assert_str_eq(pk.writer, "rank0");
        ck_assert_uint_eq(pk.declared, 2);
        ck_assert_int_eq(pk.has_packed, 1);
        ck_assert_str_eq(meta_of(&pk.meta, "a"), "2");
        ck_assert_int_eq(pk.claim.has_layout, !delta);
        /* The delta plan has the first append's records only. */
        size_t plen = packed.len;
        if (delta) {
            packed.len = 0;
            for (int i = 0; i < 2; i++)
                ckpt_pack_put(&packed, 0, want[i].frames, 2,
                              want[i].data_hash);
            ck_assert_uint_lt(packed.len, plen);
        }
        ck_assert_uint_eq(pk.pieces, delta ? 2 : NP);
        ck_assert_uint_eq(pk.len, packed.len);
        ck_assert_mem_eq(pk.data, packed.p, packed.len);
        ckpt_plan_packed_free(&pk);
        ckpt_strbuf_free(&packed);
        ckpt_pieces_free(&tab);
        ckpt_manifest_free(&m);
        free(path);
    }
    remove_tmpdir(dir);
}
END_TEST

static void copy_cut(const char *from, const char *to, size_t n)
{
    FILE *f = fopen(from, "rb");
    char *buf = xmalloc(n + 1);
    ck_assert_uint_eq(fread(buf, 1, n, f), n);
    fclose(f);
    f = fopen(to, "wb");
    ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
    fclose(f);
    free(buf);
}

/* Reads plan path: its pieces' count, its "a" metadata, its declared
 * count; -1 on failure (then err). */
static int read_counts(const char *path, size_t *np, char *a, size_t acap,
                       size_t *nd, ckpt_error *err)
{
    ckpt_pieces tab;
    ckpt_manifest m;
    ckpt_pieces_init(&tab);
    ckpt_manifest_init(&m);
    int rc = ckpt_planfile_read_pieces(path, &tab, &m, err);
    *np = tab.n;
    snprintf(a, acap, "%s", meta_of(&m, "a"));
    *nd = m.ndeclared;
    ckpt_pieces_free(&tab);
    ckpt_manifest_free(&m);
    return rc;
}

/* A writer killed in the middle of its last write leaves a prefix of
 * it: at every cut the plan reads as the appends before; the last
 * record damaged in place (a write that did not land whole) likewise. */
START_TEST(test_torn_tail_is_ignored)
{
    char *dir = make_tmpdir_tagged("planlog");
    char *path = plan_in(dir, "p.plan"), *cut = plan_in(dir, "c.plan");
    ckpt_piece_rec p[NP];
    for (int i = 0; i < NP; i++)
        make_piece(&p[i], i, 0);
    ckpt_error err = { 0 };
    ckpt_planfile *pf;
    ckpt_kv m1[] = { { "a", "1", NULL } }, m2[] = { { "a", "2", NULL } };
    ck_assert_int_eq(ckpt_planfile_create(&pf, path, "rank0", &err), 0);
    ck_assert_int_eq(ckpt_planfile_append(pf, p, 2, m1, 1, &err), 0);
    ck_assert_int_eq(ckpt_planfile_append(pf, p + 2, 1, m2, 1, &err), 0);
    ckpt_planfile_close(pf);
    size_t size, last = planedit_last_record(path, &size);
    ck_assert_uint_gt(size, last);
    size_t np, nd;
    char a[16];
    for (size_t n = last; n < size; n++) {
        copy_cut(path, cut, n);
        ck_assert_msg(read_counts(cut, &np, a, sizeof a, &nd, &err) == 0,
                      "cut at %zu: %s", n, err.msg);
        ck_assert_msg(np == 2 && strcmp(a, "1") == 0,
                      "cut at %zu: %zu pieces, a=%s", n, np, a);
    }
    copy_cut(path, cut, size);
    ck_assert_int_eq(read_counts(cut, &np, a, sizeof a, &nd, &err), 0);
    ck_assert_uint_eq(np, 3);
    ck_assert_str_eq(a, "2");
    /* Its last byte changed: a torn write, not damage. */
    FILE *f = fopen(cut, "r+b");
    ck_assert_int_eq(fseek(f, -1, SEEK_END), 0);
    int c = fgetc(f);
    ck_assert_int_eq(fseek(f, -1, SEEK_END), 0);
    fputc(0x5a ^ c, f);
    fclose(f);
    ck_assert_int_eq(read_counts(cut, &np, a, sizeof a, &nd, &err), 0);
    ck_assert_uint_eq(np, 2);
    /* Zeros where the last write should be (a power loss): the same. */
    f = fopen(cut, "r+b");
    ck_assert_int_eq(fseek(f, (long)last, SEEK_SET), 0);
    for (size_t n = last; n < size; n++)
        fputc(0, f);
    fclose(f);
    ck_assert_int_eq(read_counts(cut, &np, a, sizeof a, &nd, &err), 0);
    ck_assert_uint_eq(np, 2);
    /* A plan cut inside its header is not a plan. */
    copy_cut(path, cut, 20);
    ck_assert_int_eq(read_counts(cut, &np, a, sizeof a, &nd, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "c.plan is not a ckptfs local plan"), "%s",
                  err.msg);
    free(path);
    free(cut);
    remove_tmpdir(dir);
}
END_TEST

/* A byte changed in any record but the last: refused, naming the plan
 * and the offset of the damaged record. */
START_TEST(test_damage_before_the_end_is_refused)
{
    char *dir = make_tmpdir_tagged("planlog");
    char *path = plan_in(dir, "p.plan"), *bad = plan_in(dir, "bad.plan");
    write_plan(path, 0);
    size_t size, last = planedit_last_record(path, &size);
    FILE *f = fopen(path, "rb");
    uint8_t *buf = xmalloc(size);
    ck_assert_uint_eq(fread(buf, 1, size, f), size);
    fclose(f);
    srng r = srng_seeded("test_damage_before_the_end_is_refused", 26);
    for (int t = 0; t < 64; t++) {
        size_t at = (size_t)srng_range(&r, CKPT_PLANLOG_PREAMBLE,
                                       (int64_t)last - 1);
        uint8_t was = buf[at];
        buf[at] ^= (uint8_t)srng_range(&r, 1, 255);
        f = fopen(bad, "wb");
        ck_assert_uint_eq(fwrite(buf, 1, size, f), size);
        fclose(f);
        buf[at] = was;
        ckpt_error err = { 0 };
        size_t np, nd;
        char a[16];
        int rc = read_counts(bad, &np, a, sizeof a, &nd, &err);
        ck_assert_msg(rc == -EIO, "byte %zu: rc %d: %s", at, rc, err.msg);
        ck_assert_msg(strstr(err.msg, "bad.plan: damaged local plan at "
                             "offset "), "%s", err.msg);
        /* The offset named is the damaged record's (at or before it). */
        unsigned long long off = strtoull(strstr(err.msg, "offset ") + 7,
                                          NULL, 10);
        ck_assert_uint_le(off, at);
        ck_assert_uint_ge(off, CKPT_PLANLOG_PREAMBLE);
    }
    free(buf);
    free(path);
    free(bad);
    remove_tmpdir(dir);
}
END_TEST

/* Reads plan path into *tab and *m (initialized here): it must read. */
static void read_plan_ok(const char *path, ckpt_pieces *tab, ckpt_manifest *m)
{
    ckpt_error err = { 0 };
    ckpt_pieces_init(tab);
    ckpt_manifest_init(m);
    ck_assert_msg(ckpt_planfile_read_pieces(path, tab, m, &err) == 0, "%s",
                  err.msg);
}

/* Appends piece *p with a long metadata value to plan pf (file path)
 * with room in the file for 40 bytes more only (the file size limit):
 * the append fails and the plan is as it was. */
static void append_cut_short(ckpt_planfile *pf, const char *path,
                             const ckpt_piece_rec *p)
{
    struct stat st, now;
    ckpt_error err = { 0 };
    ck_assert_int_eq(stat(path, &st), 0);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = (rlim_t)st.st_size + 40;
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    ckpt_kv big[] = { { "big", "a value longer than the forty bytes the limit"
                        " leaves for this record", NULL } };
    ck_assert_int_eq(ckpt_planfile_append(pf, p, 1, big, 1, &err), -EFBIG);
    ck_assert_msg(strstr(err.msg, strrchr(path, '/') + 1), "%s", err.msg);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    ck_assert_int_eq(stat(path, &now), 0);
    ck_assert_int_eq(now.st_size, st.st_size);
}

/* An append whose write fails part way (the file size limit here) is
 * cut back: the next append follows the last good record. */
START_TEST(test_failed_write_is_undone)
{
    char *dir = make_tmpdir_tagged("planlog");
    char *path = plan_in(dir, "p.plan");
    ckpt_piece_rec p[NP];
    for (int i = 0; i < NP; i++)
        make_piece(&p[i], i, 0);
    ckpt_error err = { 0 };
    ckpt_planfile *pf;
    ck_assert_int_eq(ckpt_planfile_create(&pf, path, "rank0", &err), 0);
    ck_assert_int_eq(ckpt_planfile_append(pf, p, 1, NULL, 0, &err), 0);
    append_cut_short(pf, path, p + 1);
    ck_assert_int_eq(ckpt_planfile_append(pf, p + 2, 1, NULL, 0, &err), 0);
    ckpt_planfile_close(pf);
    ckpt_pieces tab;
    ckpt_manifest m;
    read_plan_ok(path, &tab, &m);
    ck_assert_uint_eq(tab.n, 2);
    same_piece(&tab, 0, &p[0]);
    same_piece(&tab, 1, &p[2]);
    ck_assert_ptr_null(ckpt_manifest_get_meta(&m, "big"));
    ckpt_pieces_free(&tab);
    ckpt_manifest_free(&m);
    free(path);
    remove_tmpdir(dir);
}
END_TEST

/* How many times n bytes of `what` occur in file path. */
static int occurrences(const char *path, const void *what, size_t n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    int count = 0;
    for (size_t i = 0; i + n <= len; i++)
        count += memcmp(buf + i, what, n) == 0;
    return count;
}

/* One-frame piece i of shard `file` (data hash its frame's checksum but
 * for i = 1), or with gap = 1 two frames whose raw offsets leave a gap
 * (which no packed record can say). */
static void small_piece(ckpt_piece_rec *p, ckpt_frame_rec *f, int i,
                        const char *file, int gap)
{
    memset(p, 0, sizeof *p);
    p->fqn = i % 2 ? "model.b" : "model.a";
    p->file = (char *)file;
    p->dtype = CKPT_F32;
    p->ndim = 1;
    p->shape[0] = 64;
    p->offsets[0] = 8 * i;
    p->sizes[0] = 8;
    p->raw_bytes = 32;
    p->nframes = gap ? 2 : 1;
    for (size_t k = 0; k < p->nframes; k++) {
        f[k] = (ckpt_frame_rec){ .file_offset = 32u * (unsigned)i + 16 * k,
                                 .stored_size = p->nframes == 1 ? 32 : 16,
                                 .raw_offset = 20 * k,
                                 .raw_size = p->nframes == 1 ? 32 : 16,
                                 .codec = CKPT_CODEC_RAW,
                                 .checksum = 0xc0ffee0000000000ull +
                                             (uint64_t)(16 * i) + k };
        p->stored_bytes += f[k].stored_size;
    }
    p->data_hash = i == 1 || gap ? 0xabcdefull : f[0].checksum;
    p->frames = f;
}

/* Shard paths are written once per plan and referred to after (a name
 * first given in an append that failed is given again), a one-frame
 * piece's frames are written once (its packed record) and its data hash
 * not at all when it is its frame's checksum; pieces no packed record
 * can hold (raw offsets with a gap) keep their own frames.  Every piece
 * reads back as appended. */
START_TEST(test_compact_pieces)
{
    char *dir = make_tmpdir_tagged("planlog");
    char *path = plan_in(dir, "p.plan");
    ckpt_piece_rec p[6];
    ckpt_frame_rec f[6][2];
    const char *rank0 = "data/rank0.shard", *other = "data/other.shard";
    small_piece(&p[0], f[0], 0, rank0, 0);
    small_piece(&p[1], f[1], 1, rank0, 0);
    small_piece(&p[2], f[2], 2, other, 0);      /* its append fails */
    small_piece(&p[3], f[3], 3, other, 0);
    small_piece(&p[4], f[4], 4, rank0, 0);
    small_piece(&p[5], f[5], 5, other, 1);      /* gap: not packable */
    ckpt_error err = { 0 };
    ckpt_planfile *pf;
    ck_assert_int_eq(ckpt_planfile_create(&pf, path, "rank0", &err), 0);
    ck_assert_int_eq(ckpt_planfile_append(pf, p, 2, NULL, 0, &err), 0);
    append_cut_short(pf, path, p + 2);
    ck_assert_int_eq(ckpt_planfile_append(pf, p + 3, 2, NULL, 0, &err), 0);
    ck_assert_int_eq(ckpt_planfile_append(pf, p + 5, 1, NULL, 0, &err), 0);
    ckpt_planfile_close(pf);

    ckpt_pieces tab;
    ckpt_manifest m;
    read_plan_ok(path, &tab, &m);
    ck_assert_uint_eq(tab.n, 5);
    same_piece(&tab, 0, &p[0]);
    same_piece(&tab, 1, &p[1]);
    same_piece(&tab, 2, &p[3]);
    same_piece(&tab, 3, &p[4]);
    same_piece(&tab, 4, &p[5]);
    ckpt_pieces_free(&tab);
    ckpt_manifest_free(&m);

    ck_assert_int_eq(occurrences(path, rank0, strlen(rank0)), 1);
    ck_assert_int_eq(occurrences(path, other, strlen(other)), 1);
    uint8_t le[8];
    for (int k = 0; k < 4; k++) {
        const ckpt_piece_rec *q = &p[k < 2 ? k : k + 1];
        for (int b = 0; b < 8; b++)
            le[b] = (uint8_t)(q->frames[0].checksum >> (8 * b));
        ck_assert_int_eq(occurrences(path, le, 8), 1);
    }
    uint64_t h = 0xabcdefull;   /* piece 1's own hash, and piece 5's */
    for (int b = 0; b < 8; b++)
        le[b] = (uint8_t)(h >> (8 * b));
    ck_assert_int_eq(occurrences(path, le, 8), 2);
    free(path);
    remove_tmpdir(dir);
}
END_TEST

#define APPENDS 400

typedef struct concurrent {
    const char *path;
    int done;           /* atomics: the appender is done, */
    int reads;          /* reads the reader made, */
    size_t appended;    /* appends made */
} concurrent;

static void *appender(void *arg)
{
    concurrent *c = arg;
    ckpt_piece_rec p;
    make_piece(&p, 0, 0);
    ckpt_error err = { 0 };
    ckpt_planfile *pf;
    ck_assert_int_eq(ckpt_planfile_create(&pf, c->path, "rank0", &err), 0);
    /* Until the reader has read a few times while appends go on. */
    size_t i;
    for (i = 0; i < APPENDS || (__atomic_load_n(&c->reads, __ATOMIC_ACQUIRE)
                                < 20 && i < 100 * APPENDS); i++)
        ck_assert_int_eq(ckpt_planfile_append(pf, &p, 1, NULL, 0, &err), 0);
    ckpt_planfile_close(pf);
    c->appended = i;
    __atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* A committer reading a plan while its writer appends (a mount) sees
 * the appends complete so far, never an error, never fewer than before. */
START_TEST(test_reader_beside_appender)
{
    char *dir = make_tmpdir_tagged("planlog");
    concurrent c = { plan_in(dir, "p.plan"), 0, 0, 0 };
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, appender, &c), 0);
    size_t seen = 0;
    for (;;) {
        int done = __atomic_load_n(&c.done, __ATOMIC_ACQUIRE);
        ckpt_pieces tab;
        ckpt_manifest m;
        ckpt_error err = { 0 };
        ckpt_pieces_init(&tab);
        ckpt_manifest_init(&m);
        int rc = ckpt_planfile_read_pieces(c.path, &tab, &m, &err);
        /* Before the create's write lands the file may be empty or hold
         * part of its header. */
        ck_assert_msg(rc == 0 || rc == -ENOENT || (rc == -EINVAL && !seen),
                      "%s", err.msg);
        ck_assert_uint_ge(tab.n, seen);
        ck_assert_uint_le(tab.n, 100 * APPENDS);
        seen = tab.n;
        __atomic_add_fetch(&c.reads, 1, __ATOMIC_RELEASE);
        ckpt_pieces_free(&tab);
        ckpt_manifest_free(&m);
        if (done)
            break;
    }
    pthread_join(t, NULL);
    ck_assert_uint_eq(seen, c.appended);
    free((char *)c.path);
    remove_tmpdir(dir);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("planlog");
    TCase *tc = tcase_create("planlog");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_every_record_round_trips);
    tcase_add_test(tc, test_torn_tail_is_ignored);
    tcase_add_test(tc, test_damage_before_the_end_is_refused);
    tcase_add_test(tc, test_failed_write_is_undone);
    tcase_add_test(tc, test_compact_pieces);
    tcase_add_test(tc, test_reader_beside_appender);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(suite());
}
