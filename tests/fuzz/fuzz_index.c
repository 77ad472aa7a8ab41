/*
 * fuzz_index.c - libFuzzer target for what a reader trusts in a ckptfs
 * checkpoint it did not write: the committed index (index.db) and the
 * writers' local plans (.pending/<writer>.plan).
 *
 * At start it writes a small real checkpoint `base` (two writers, a tensor
 * split between them, several dtypes and codecs, a scalar, a byte object,
 * an empty tensor) into a temporary directory, a copy `plain` of it, and
 * `ck`, a delta checkpoint against `base` (docs/FORMAT.md, "Delta
 * checkpoints": ref and xor frames, the bases table).  The first input
 * byte picks what the rest replaces:
 *   0 mod 4: index.db of the delta `ck`; the checkpoint is then opened
 *         (its base with it), listed (tensors, chunks, frames, metadata),
 *         read (bytes and a region of every tensor, bounded) and verified;
 *   2 mod 4: index.db of `plain` (a version-1 index), the same way;
 *   1 mod 4: rank0's plan of an uncommitted copy of the delta save; the
 *         save is then committed (the planner and the committer's bases
 *         run on what the plan says) and, if that succeeds, the result is
 *         opened, read and verified the same way;
 *   3 mod 4: the same, the plan made of the rest as records without their
 *         framing (per record: a type byte, a 2-byte little-endian payload
 *         length, the payload), framed here with valid checksums
 *         (src/format/planlog.h), so that the fuzzer reaches the parser of
 *         the records' contents past their checksums.
 * Any crash, sanitizer report, leak or hang is a finding; refusals are
 * the expected outcome for most inputs.
 *
 * With CKPT_FUZZ_WRITE_SEEDS=DIR it writes the real index.db and plan as
 * seeds (selector byte + file) into DIR and exits.  Built and run by
 * tests/fuzz/run_fuzz.sh.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptfs.h"
#include "common/fileio.h"
#include "common/strbuf.h"
#include "format/planlog.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Bytes read per tensor (and elements per region): bounds the work of
 * an index that claims huge tensors. */
#define READ_CAP ((uint64_t)64 << 10)
#define REGION_CAP 4096

static char top[4096];          /* the temporary directory */
static char committed[4200];    /* the delta checkpoint; index.db fuzzed */
static char base_dir[4200];     /* its base */
static char plain[4200];        /* a copy of the base; index.db fuzzed */
static char pending[4200];      /* the delta save before commit */
static char *plan0, *plan1;     /* the two writers' plans */
static size_t plan0_len, plan1_len;

static void die(const char *what, const ckpt_error *err)
{
    fprintf(stderr, "fuzz_index: %s: %s\n", what, err ? err->msg : "");
    exit(2);
}

/* The records of plan p[0..n) without their framing, as the input of
 * selector 3 (a seed): the selector, then per record its type, 2-byte
 * payload length and payload (longer payloads are cut). */
static void unframe(ckpt_strbuf *out, const uint8_t *p, size_t n)
{
    size_t pos = CKPT_PLANLOG_PREAMBLE;
    ckpt_planlog_rec r;
    ckpt_error err = { 0 };
    ckpt_strbuf_add(out, "\3", 1);
    while (ckpt_planlog_next(p, n, &pos, &r, "seed", &err) == 1) {
        size_t len = r.len > 0xffff ? 0xffff : r.len;
        uint8_t head[3] = { (uint8_t)r.type, (uint8_t)len,
                            (uint8_t)(len >> 8) };
        ckpt_strbuf_add(out, head, sizeof head);
        ckpt_strbuf_add(out, r.p, len);
    }
}

/* The plan that selector 3's input d[0..n) describes, framed, into out. */
static void frame(ckpt_strbuf *out, const uint8_t *d, size_t n)
{
    ckpt_planlog_preamble(out);
    size_t pos = 0;
    while (n - pos >= 3) {
        size_t len = d[pos + 1] | (size_t)d[pos + 2] << 8;
        int type = d[pos];
        pos += 3;
        if (len > n - pos)
            len = n - pos;
        size_t start = ckpt_planlog_begin(out, type ? type : 1);
        ckpt_strbuf_add(out, d + pos, len);
        ckpt_planlog_end(out, start);
        pos += len;
    }
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die(path, NULL);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
        die(path, NULL);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void spill(const char *path, const void *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n || fclose(f) != 0)
        die(path, NULL);
}

/* Writes the pieces of writer `rank` into dir (not committed), against
 * `base` (a delta save) unless NULL; the delta's tensors differ a little
 * from the base's. */
static void write_rank(const char *dir, int rank, const char *base)
{
    ckpt_write_opts o;
    ckpt_write_opts_init(&o);
    o.sync = 0;
    o.threads = 1;
    o.frame_size = 4096;   /* several frames per chunk */
    o.base = base;
    ckpt_writer *w;
    ckpt_error err = { 0 };
    char name[16];
    snprintf(name, sizeof name, "rank%d", rank);
    if (ckpt_writer_open(&w, dir, name, &o, &err))
        die("writer", &err);
    static float wv[64 * 40];
    static uint16_t bv[3000];
    static int64_t step = 7;
    for (int i = 0; i < 64 * 40; i++)
        wv[i] = (float)((i * 7919) % 1000) / 37.0f - 12.0f +
                (base && i % 700 == 0 ? 0.5f : 0.0f);
    for (int i = 0; i < 3000; i++)
        bv[i] = (uint16_t)(0x3f80 + (i % 97));
    int64_t wshape[2] = { 64, 40 }, woff[2] = { 32 * rank, 0 };
    int64_t wsz[2] = { 32, 40 }, bshape[1] = { 3000 }, eshape[2] = { 0, 5 };
    ckpt_piece w_piece = { "model.layers.0.w", CKPT_F32, 2, wshape, woff,
                           wsz, wv + 32 * 40 * rank };
    int rc = ckpt_writer_put(w, &w_piece, &err);
    if (!rc && rank == 0) {
        ckpt_piece b = { "model.b", CKPT_BF16, 1, bshape, NULL, NULL, bv };
        ckpt_piece s = { "step", CKPT_I64, 0, NULL, NULL, NULL, &step };
        ckpt_piece e = { "empty", CKPT_F32, 2, eshape, NULL, NULL, bv };
        rc = ckpt_writer_put(w, &b, &err);
        if (!rc)
            rc = ckpt_writer_put(w, &s, &err);
        if (!rc)
            rc = ckpt_writer_put(w, &e, &err);
        if (!rc)
            rc = ckpt_writer_put_bytes(w, "rng", "\x01\x02\x03\x04", 4, &err);
        if (!rc)
            rc = ckpt_writer_set_meta(w, "step", "7", &err);
    }
    if (rc || ckpt_writer_close(w, &err))
        die("writing", &err);
}

static void path_in(char *out, size_t cap, const char *dir, const char *rel)
{
    snprintf(out, cap, "%s/%s", dir, rel);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *tmp = getenv("TMPDIR");
    snprintf(top, sizeof top, "%s/ckpt-fuzz-index.XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(top))
        die("mkdtemp", NULL);
    snprintf(committed, sizeof committed, "%s/ck", top);
    snprintf(base_dir, sizeof base_dir, "%s/base", top);
    snprintf(plain, sizeof plain, "%s/plain", top);
    snprintf(pending, sizeof pending, "%s/save", top);
    ckpt_error err = { 0 };
    ckpt_commit_opts co;
    ckpt_commit_opts_init(&co);
    co.sync = 0;
    write_rank(base_dir, 0, NULL);
    write_rank(base_dir, 1, NULL);
    if (ckpt_commit(base_dir, &co, &err))
        die("commit", &err);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", base_dir, plain);
    if (system(cmd) != 0)
        die(cmd, NULL);
    write_rank(committed, 0, base_dir);
    write_rank(committed, 1, base_dir);
    char p[4400];
    path_in(p, sizeof p, committed, ".pending/rank0.plan");
    plan0 = slurp(p, &plan0_len);
    path_in(p, sizeof p, committed, ".pending/rank1.plan");
    plan1 = slurp(p, &plan1_len);
    /* The save to commit again and again: the same shards, plans put
     * back before each commit. */
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", committed, pending);
    if (system(cmd) != 0)
        die(cmd, NULL);
    if (ckpt_commit(committed, &co, &err))
        die("commit", &err);
    const char *seeds = getenv("CKPT_FUZZ_WRITE_SEEDS");
    if (seeds) {
        size_t n;
        path_in(p, sizeof p, committed, "index.db");
        char *idx = slurp(p, &n);
        char *buf = malloc(n + plan0_len + 1);
        buf[0] = 0;
        memcpy(buf + 1, idx, n);
        path_in(p, sizeof p, seeds, "index-db");
        spill(p, buf, n + 1);
        buf[0] = 1;
        memcpy(buf + 1, plan0, plan0_len);
        path_in(p, sizeof p, seeds, "plan-rank0");
        spill(p, buf, plan0_len + 1);
        ckpt_strbuf recs = { 0 };
        unframe(&recs, (const uint8_t *)plan0, plan0_len);
        path_in(p, sizeof p, seeds, "plan-rank0-records");
        spill(p, recs.p, recs.len);
        ckpt_strbuf_free(&recs);
        free(buf);
        free(idx);
        path_in(p, sizeof p, plain, "index.db");
        idx = slurp(p, &n);
        buf = malloc(n + 1);
        buf[0] = 2;
        memcpy(buf + 1, idx, n);
        path_in(p, sizeof p, seeds, "index-db-plain");
        spill(p, buf, n + 1);
        free(buf);
        free(idx);
        ckpt_remove_tree(top, NULL);
        exit(0);
    }
    return 0;
}

/* Lists, reads and verifies the checkpoint at dir, as a user would. */
static void exercise(const char *dir)
{
    ckpt_read_opts o;
    ckpt_read_opts_init(&o);
    o.threads = 1;
    o.prefetch = 1;
    o.cache_bytes = (size_t)1 << 20;
    ckpt_reader *r;
    ckpt_error err = { 0 };
    if (ckpt_reader_open(&r, dir, &o, &err))
        return;
    static unsigned char buf[READ_CAP];
    for (size_t i = 0; i < ckpt_reader_meta_count(r); i++) {
        const char *k, *v;
        if (ckpt_reader_meta_at(r, i, &k, &v) == 0 && (!k || !v))
            abort();
    }
    for (size_t t = 0; t < ckpt_reader_count(r); t++) {
        ckpt_tensor_info ti;
        if (ckpt_reader_info(r, t, &ti) || ckpt_reader_find(r, ti.fqn) < 0)
            abort();
        ckpt_perm perm;
        (void)ckpt_reader_perm(r, t, &perm, &err);
        for (size_t c = 0; c < ti.nchunks && c < 64; c++) {
            ckpt_chunk_info ci;
            ckpt_frame_info fi;
            if (ckpt_reader_chunk(r, t, c, &ci) == 0 && ci.nframes)
                (void)ckpt_reader_frame(r, t, c, ci.nframes - 1, &fi, &err);
        }
        uint64_t n = ti.nbytes < READ_CAP ? ti.nbytes : READ_CAP;
        int64_t got = ckpt_read(r, t, buf, 0, n, &err);
        if (got >= 0 && (uint64_t)got != n)
            abort();   /* a read is short only at the end of the image */
        if (ti.nbytes > 3)
            (void)ckpt_read(r, t, buf, ti.nbytes - 3, 3, &err);
        int64_t off[CKPT_MAX_DIMS], sz[CKPT_MAX_DIMS];
        uint64_t numel = 1;
        for (int d = 0; d < ti.ndim; d++) {
            off[d] = ti.shape[d] / 2;
            sz[d] = ti.shape[d] - off[d] < 2 ? ti.shape[d] - off[d] : 2;
            numel *= (uint64_t)sz[d];
        }
        if (numel * ckpt_dtype_size(ti.dtype) <= sizeof buf &&
            numel <= REGION_CAP)
            (void)ckpt_read_region(r, t, off, sz, buf, &err);
    }
    (void)ckpt_verify(r, NULL, NULL, NULL, &err);
    ckpt_reader_close(r);
}

/* Puts the save back as it was before its commit, with rank0's plan
 * replaced by the input. */
static int reset_save(const uint8_t *plan, size_t n)
{
    char p[4400];
    path_in(p, sizeof p, pending, "index.db");
    unlink(p);
    path_in(p, sizeof p, pending, "index.db.tmp");
    unlink(p);
    path_in(p, sizeof p, pending, ".pending");
    ckpt_remove_tree(p, NULL);
    if (mkdir(p, 0755) != 0)
        return -1;
    path_in(p, sizeof p, pending, ".pending/rank0.plan");
    spill(p, plan, n);
    path_in(p, sizeof p, pending, ".pending/rank1.plan");
    spill(p, plan1, plan1_len);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char p[4400];
    if (data[0] % 2 == 0) {
        const char *dir = data[0] % 4 == 0 ? committed : plain;
        path_in(p, sizeof p, dir, "index.db");
        spill(p, data + 1, size - 1);
        exercise(dir);
        return 0;
    }
    ckpt_strbuf framed = { 0 };
    if (data[0] % 4 == 3)
        frame(&framed, data + 1, size - 1);
    int rc = data[0] % 4 == 3
             ? reset_save((const uint8_t *)framed.p, framed.len)
             : reset_save(data + 1, size - 1);
    ckpt_strbuf_free(&framed);
    if (rc)
        return 0;
    ckpt_commit_opts co;
    ckpt_commit_opts_init(&co);
    co.sync = 0;
    ckpt_error err = { 0 };
    if (ckpt_commit(pending, &co, &err) == 0)
        exercise(pending);
    return 0;
}
