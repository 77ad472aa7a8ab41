/*
 * test_mpi_reshard.c - collective save on k ranks and load on m ranks, for
 * every k and m up to the world size (sub-communicators of MPI_COMM_WORLD).
 *
 *   test_mpi_reshard ROOT            save on 1..W ranks, load each on every
 *                                    other rank count, in 5 layouts
 *   test_mpi_reshard ROOT --load-only  load (in 5 layouts, on all W ranks)
 *                                    what an earlier run saved in ROOT
 *
 * The saved model mixes FSDP (dim-0 shards), tensor-parallel (dim-1
 * shards), 2-D grids, uneven and empty shards, 3-D tensors, a rank with two
 * pieces of one tensor, replicated tensors (whole, and HSDP-style halves),
 * a scalar and a byte object.  Loads ask for dim-0 and dim-1 splits, grids,
 * whole tensors on every rank, and overlapping boxes; every element is
 * compared with the reference values of mpi_test.h.  Also checked: the
 * index holds one copy of each replicated piece, the checkpoint verifies,
 * each frame is decoded once in all (bytes decoded summed over ranks equal
 * the bytes of the checkpoint), a rank decodes only the frames its regions
 * need, and replicated bytes are spread evenly over the writing ranks.
 */
#include "mpi_test.h"

#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"

typedef enum save_layout {
    S_DIM0, S_DIM1, S_GRID, S_SKEW, S_REP, S_HSDP, S_SLABS
} save_layout;

typedef struct tspec {
    const char *fqn;
    ckpt_dtype dt;
    int ndim;
    int64_t shape[3];
    save_layout lay;
} tspec;

static const tspec MODEL[] = {
    { "model.fsdp.w", CKPT_F32, 2, { 37, 29 }, S_DIM0 },
    { "model.big.w", CKPT_F32, 2, { 96, 70 }, S_DIM0 },
    { "model.tp.w", CKPT_BF16, 2, { 23, 41 }, S_DIM1 },
    { "model.big.tp", CKPT_F32, 2, { 70, 96 }, S_DIM1 },
    { "model.grid.w", CKPT_I64, 2, { 19, 17 }, S_GRID },
    { "model.grid3", CKPT_F16, 3, { 6, 10, 7 }, S_GRID },
    { "model.skew.w", CKPT_F64, 3, { 5, 7, 3 }, S_SKEW },
    { "model.tiny", CKPT_U8, 2, { 3, 4 }, S_DIM0 },
    { "model.mask", CKPT_BOOL, 2, { 10, 3 }, S_DIM0 },
    { "model.rep.bias", CKPT_F32, 1, { 29 }, S_REP },
    { "model.rep.big", CKPT_U16, 2, { 64, 33 }, S_REP },
    { "model.rep.scalar", CKPT_I32, 0, { 0 }, S_REP },
    { "model.hsdp.w", CKPT_F32, 2, { 16, 9 }, S_HSDP },
    { "model.slabs.w", CKPT_I16, 2, { 12, 10 }, S_SLABS },
};
#define NMODEL (sizeof MODEL / sizeof MODEL[0])
#define RNG_FQN "extra.rng_state"
#define RNG_LEN 100
#define MAX_PIECES (2 * NMODEL + 1)

typedef enum load_layout {
    L_DIM0, L_DIM1, L_GRID, L_WHOLE, L_MIXED, L_COUNT
} load_layout;

static const char *const LOAD_NAMES[] = { "dim0", "dim1", "grid", "whole",
                                          "mixed" };

/* ------------------------------------------------------------ boxes */

typedef struct box {
    int64_t off[3], size[3];
} box;

static box whole(const tspec *s)
{
    box b = { { 0 }, { 0 } };
    for (int d = 0; d < s->ndim; d++)
        b.size[d] = s->shape[d];
    return b;
}

/* Part k of `parts` along dim d (the whole of the others). */
static box split_dim(const tspec *s, int d, int parts, int k)
{
    box b = whole(s);
    if (s->ndim > d)
        t_split(s->shape[d], parts, k, &b.off[d], &b.size[d]);
    return b;
}

/* A pr x pc grid over dims 0 and 1: 1x1, 2x1, 1x3, 2x2, ... */
static box grid(const tspec *s, int k, int r)
{
    int pr = k % 2 == 0 ? 2 : 1, pc = k / pr;
    if (s->ndim < 2)
        return split_dim(s, 0, k, r);
    box b = split_dim(s, 0, pr, r / pc);
    t_split(s->shape[1], pc, r % pc, &b.off[1], &b.size[1]);
    return b;
}

/* Uneven cut of dim 1 at n * j^2 / k^2: the first ranks get little or
 * nothing. */
static box skewed(const tspec *s, int k, int r)
{
    box b = whole(s);
    int64_t n = s->shape[1];
    int64_t lo = n * r * r / (k * k), hi = n * (r + 1) * (r + 1) / (k * k);
    b.off[1] = lo;
    b.size[1] = hi - lo;
    return b;
}

/* The boxes rank r of k saves of tensor s (0, 1 or 2). */
static int save_boxes(const tspec *s, int k, int r, box *out)
{
    int g;
    switch (s->lay) {
    case S_DIM0:
        out[0] = split_dim(s, 0, k, r);
        return 1;
    case S_DIM1:
        out[0] = split_dim(s, 1, k, r);
        return 1;
    case S_GRID:
        out[0] = grid(s, k, r);
        return 1;
    case S_SKEW:
        out[0] = skewed(s, k, r);
        return 1;
    case S_REP:
        out[0] = whole(s);
        return 1;
    case S_HSDP:
        g = k % 2 == 0 ? k / 2 : 1;
        out[0] = split_dim(s, 0, g, r % g);
        return 1;
    case S_SLABS:
        out[0] = split_dim(s, 0, 2 * k, r);
        out[1] = split_dim(s, 0, 2 * k, 2 * k - 1 - r);
        return 2;
    }
    return 0;
}

/* A pseudo-random box of s, seeded by (r, salt). */
static box random_box(const tspec *s, int r, int salt)
{
    box b = whole(s);
    uint64_t x = (uint64_t)(r + 1) * 2654435761u + (uint64_t)salt * 40503u;
    for (int d = 0; d < s->ndim; d++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        int64_t n = s->shape[d];
        int64_t lo = (int64_t)((x >> 33) % (uint64_t)n);
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        b.off[d] = lo;
        b.size[d] = 1 + (int64_t)((x >> 33) % (uint64_t)(n - lo));
    }
    return b;
}

/* The regions rank r of m loads of tensor s in layout l (1 or 3). */
static int load_boxes(const tspec *s, int si, load_layout l, int m, int r,
                      box *out)
{
    switch (l) {
    case L_DIM0:
        out[0] = split_dim(s, 0, m, r);
        return 1;
    case L_DIM1:
        out[0] = split_dim(s, s->ndim >= 2 ? 1 : 0, m, r);
        return 1;
    case L_GRID:
        out[0] = grid(s, m, r);
        return 1;
    case L_WHOLE:
        out[0] = whole(s);
        return 1;
    default:
        out[0] = split_dim(s, 0, 2 * m, r);
        out[1] = split_dim(s, 0, 2 * m, r + m);
        out[2] = random_box(s, r, si);
        return 3;
    }
}

/* ------------------------------------------------------------ save */

typedef struct piece_set {
    ckpt_piece p[MAX_PIECES];
    box boxes[MAX_PIECES];
    void *bufs[MAX_PIECES];
    int64_t rng_len;
    size_t n;
} piece_set;

static void pieces_free(piece_set *ps)
{
    for (size_t i = 0; i < ps->n; i++)
        free(ps->bufs[i]);
}

static void add_piece(piece_set *ps, const tspec *s, const box *b)
{
    size_t i = ps->n++;
    ps->boxes[i] = *b;
    size_t bytes = t_box_bytes(s->dt, s->ndim, b->size);
    ps->bufs[i] = malloc(bytes ? bytes : 1);
    t_fill(ps->bufs[i], s->dt, s->ndim, s->shape, b->off, b->size,
           t_fqn_id(s->fqn));
    ps->p[i] = (ckpt_piece){ s->fqn, s->dt, s->ndim, s->shape,
                             ps->boxes[i].off, ps->boxes[i].size,
                             ps->bufs[i] };
}

static void build_pieces(piece_set *ps, int k, int r)
{
    static const tspec rng = { RNG_FQN, CKPT_BYTES, 1, { RNG_LEN }, S_REP };
    ps->n = 0;
    for (size_t i = 0; i < NMODEL; i++) {
        box b[2];
        int nb = save_boxes(&MODEL[i], k, r, b);
        for (int j = 0; j < nb; j++)
            add_piece(ps, &MODEL[i], &b[j]);
    }
    /* The byte object, through the helper every rank would use. */
    size_t i = ps->n++;
    ps->bufs[i] = malloc(RNG_LEN);
    t_fill(ps->bufs[i], CKPT_BYTES, 1, rng.shape, (int64_t[]){ 0 },
           rng.shape, t_fqn_id(RNG_FQN));
    ckpt_mpi_bytes_piece(&ps->p[i], RNG_FQN, ps->bufs[i], &ps->rng_len,
                         RNG_LEN);
}

static ckpt_write_opts small_frames(void)
{
    ckpt_write_opts w;
    ckpt_write_opts_init(&w);
    w.frame_size = 4096;   /* many frames, so shards cut frames */
    w.threads = 1;
    w.sync = 0;
    return w;
}

static void save_on(tctx *t, MPI_Comm comm, int k, const char *dir)
{
    int r;
    MPI_Comm_rank(comm, &r);
    piece_set ps;
    build_pieces(&ps, k, r);
    ckpt_mpi_save_opts o;
    ckpt_mpi_save_opts_init(&o);
    o.write = small_frames();
    const char *keys[] = { "step" }, *vals[] = { "100" };
    o.meta_keys = keys;
    o.meta_values = vals;
    o.nmeta = 1;
    ckpt_error e = { 0 };
    int rc = ckpt_mpi_save(comm, dir, ps.p, ps.n, &o, &e);
    T_CHECKF(t, rc == 0, "save on %d ranks: %s", k, e.msg);
    t_same_status(t, comm, rc, &e);
    pieces_free(&ps);
}

/* ------------------------------------------------------------ checks */

static size_t distinct_boxes(const tspec *s, int k)
{
    switch (s->lay) {
    case S_REP:
        return 1;
    case S_HSDP:
        return k % 2 == 0 ? (size_t)(k / 2) : 1;
    default:
        return 0;   /* not checked */
    }
}

/* Rank 0: the index holds one copy per replicated box, the metadata, and
 * the checkpoint verifies. */
static void check_index(tctx *t, const char *dir, int k)
{
    ckpt_reader *rd;
    ckpt_error e = { 0 };
    if (ckpt_reader_open(&rd, dir, NULL, &e) != 0) {
        T_CHECKF(t, 0, "open %s: %s", dir, e.msg);
        return;
    }
    for (size_t i = 0; i < NMODEL; i++) {
        size_t want = distinct_boxes(&MODEL[i], k);
        long ti = ckpt_reader_find(rd, MODEL[i].fqn);
        ckpt_tensor_info info;
        T_CHECKF(t, ti >= 0, "%s missing", MODEL[i].fqn);
        if (ti < 0 || !want)
            continue;
        ckpt_reader_info(rd, (size_t)ti, &info);
        T_CHECKF(t, info.nchunks == want, "%s saved on %d ranks has %zu "
                 "chunks, want %zu (one per distinct replica)", MODEL[i].fqn,
                 k, info.nchunks, want);
    }
    const char *step = ckpt_reader_meta_get(rd, "step");
    T_CHECK(t, step && strcmp(step, "100") == 0);
    const char *ws = ckpt_reader_meta_get(rd, "world_size");
    T_CHECK(t, ws && atoi(ws) == k);
    int64_t faults = ckpt_verify(rd, NULL, NULL, NULL, &e);
    T_CHECKF(t, faults == 0, "verify %s: %lld faults (%s)", dir,
             (long long)faults, e.msg);
    ckpt_reader_close(rd);
}

/* ------------------------------------------------------------ load */

typedef struct region_set {
    ckpt_mpi_region g[3 * NMODEL];
    box boxes[3 * NMODEL];
    int spec[3 * NMODEL];
    size_t n;
    uint64_t requested;
} region_set;

static void build_regions(region_set *rs, load_layout l, int m, int r)
{
    rs->n = 0;
    rs->requested = 0;
    for (size_t i = 0; i < NMODEL; i++) {
        const tspec *s = &MODEL[i];
        box b[3];
        int nb = load_boxes(s, (int)i, l, m, r, b);
        for (int j = 0; j < nb; j++) {
            size_t k = rs->n++;
            size_t bytes = t_box_bytes(s->dt, s->ndim, b[j].size);
            rs->boxes[k] = b[j];
            rs->spec[k] = (int)i;
            rs->requested += bytes;
            void *dst = malloc(bytes ? bytes : 1);
            memset(dst, 0xa5, bytes ? bytes : 1);
            /* Alternate NULL (= whole tensor) with explicit boxes. */
            int implicit = l == L_WHOLE && i % 2 == 0;
            rs->g[k] = (ckpt_mpi_region){
                s->fqn, implicit ? NULL : rs->boxes[k].off,
                implicit ? NULL : rs->boxes[k].size, dst };
        }
    }
}

static void regions_free(region_set *rs)
{
    for (size_t k = 0; k < rs->n; k++)
        free(rs->g[k].dst);
}

static uint64_t model_bytes(void)
{
    uint64_t n = 0;
    for (size_t i = 0; i < NMODEL; i++) {
        box b = whole(&MODEL[i]);
        n += t_box_bytes(MODEL[i].dt, MODEL[i].ndim, b.size);
    }
    return n;
}

static void verify_regions(tctx *t, const region_set *rs, const char *what)
{
    for (size_t k = 0; k < rs->n; k++) {
        const tspec *s = &MODEL[rs->spec[k]];
        char label[768];
        snprintf(label, sizeof label, "%s: %s", what, s->fqn);
        t_compare(t, rs->g[k].dst, s->dt, s->ndim, s->shape,
                  rs->boxes[k].off, rs->boxes[k].size, t_fqn_id(s->fqn),
                  label);
    }
}

/* Sum over comm of v. */
static uint64_t sum_u64(MPI_Comm comm, uint64_t v)
{
    uint64_t s = 0;
    MPI_Allreduce(&v, &s, 1, MPI_UINT64_T, MPI_SUM, comm);
    return s;
}

static void load_on(tctx *t, MPI_Comm comm, int m, const char *dir,
                    load_layout l, int saved_on)
{
    int r;
    MPI_Comm_rank(comm, &r);
    region_set rs;
    build_regions(&rs, l, m, r);
    ckpt_mpi_load_opts o;
    ckpt_mpi_load_opts_init(&o);
    o.read.threads = 2;
    if (l % 2)
        o.exchange_bytes = 4096;   /* many rounds */
    ckpt_stats st;
    ckpt_error e = { 0 };
    char what[512];
    snprintf(what, sizeof what, "save on %d, load on %d (%s)", saved_on, m,
             LOAD_NAMES[l]);
    int rc = ckpt_mpi_load(comm, dir, rs.g, rs.n, &o, &st, &e);
    T_CHECKF(t, rc == 0, "%s: %s", what, e.msg);
    t_same_status(t, comm, rc, &e);
    if (rc == 0)
        verify_regions(t, &rs, what);
    uint64_t decoded = sum_u64(comm, st.bytes_decoded);
    uint64_t want = model_bytes();
    if (l == L_MIXED)
        T_CHECKF(t, decoded <= 2 * want, "%s: decoded %llu bytes for a "
                 "checkpoint of %llu", what, (unsigned long long)decoded,
                 (unsigned long long)want);
    else
        T_CHECKF(t, decoded == want, "%s: decoded %llu bytes in all, the "
                 "checkpoint holds %llu (each frame should be decoded once)",
                 what, (unsigned long long)decoded, (unsigned long long)want);
    regions_free(&rs);
}

static void load_bytes_on(tctx *t, MPI_Comm comm, const char *dir)
{
    void *buf = NULL;
    size_t len = 0;
    ckpt_error e = { 0 };
    int rc = ckpt_mpi_load_bytes(comm, dir, RNG_FQN, &buf, &len, &e);
    T_CHECKF(t, rc == 0, "load_bytes: %s", e.msg);
    t_same_status(t, comm, rc, &e);
    int64_t shape = RNG_LEN, off = 0;
    T_CHECK(t, len == RNG_LEN);
    if (rc == 0 && len == RNG_LEN)
        t_compare(t, buf, CKPT_BYTES, 1, &shape, &off, &shape,
                  t_fqn_id(RNG_FQN), "byte object");
    free(buf);
}

/* ------------------------------------------------------------ locality */

/* Loads of "model.big.w" (dim-0 shards) from the checkpoint that all W
 * ranks saved: rank r asking for exactly its own shard decodes exactly
 * those bytes (no frame of another shard); a rank that asks for nothing
 * decodes nothing, even when another asks for everything. */
static void locality_test(tctx *t, const char *dir)
{
    const tspec *s = NULL;
    for (size_t i = 0; i < NMODEL; i++)
        if (!strcmp(MODEL[i].fqn, "model.big.w"))
            s = &MODEL[i];
    for (int everything = 0; everything <= 1; everything++) {
        box b = everything ? whole(s) : split_dim(s, 0, t->size, t->rank);
        int asks = !everything || t->rank == 0;
        size_t bytes = asks ? t_box_bytes(s->dt, s->ndim, b.size) : 0;
        void *dst = malloc(bytes ? bytes : 1);
        ckpt_mpi_region g = { s->fqn, b.off, b.size, dst };
        ckpt_stats st;
        ckpt_error e = { 0 };
        int rc = ckpt_mpi_load(t->world, dir, &g, asks ? 1 : 0, NULL, &st,
                               &e);
        T_CHECKF(t, rc == 0, "locality load: %s", e.msg);
        if (rc == 0 && asks)
            t_compare(t, dst, s->dt, s->ndim, s->shape, b.off, b.size,
                      t_fqn_id(s->fqn), "locality load");
        T_CHECKF(t, st.bytes_decoded == bytes, "rank %d asked for %zu bytes "
                 "and decoded %llu", t->rank, bytes,
                 (unsigned long long)st.bytes_decoded);
        free(dst);
    }
}

/* ------------------------------------------------------------ balance */

/* Every rank passes the same 9 tensors of different sizes: each is
 * written once, and the bytes per writing rank are even. */
static void balance_test(tctx *t, const char *root)
{
    enum { NB = 9 };
    char dir[4096], names[NB][32];
    int64_t shapes[NB];
    void *bufs[NB];
    ckpt_piece p[NB];
    uint64_t total = 0, largest = 0;
    snprintf(dir, sizeof dir, "%s/balance", root);
    for (int i = 0; i < NB; i++) {
        snprintf(names[i], sizeof names[i], "rep.t%d", i);
        shapes[i] = 1000 + 700 * i;
        bufs[i] = malloc((size_t)shapes[i] * 4);
        t_fill(bufs[i], CKPT_F32, 1, &shapes[i], (int64_t[]){ 0 },
               &shapes[i], t_fqn_id(names[i]));
        p[i] = (ckpt_piece){ names[i], CKPT_F32, 1, &shapes[i], NULL, NULL,
                             bufs[i] };
        total += (uint64_t)shapes[i] * 4;
        largest = (uint64_t)shapes[i] * 4;
    }
    ckpt_mpi_save_opts o;
    ckpt_mpi_save_opts_init(&o);
    o.write = small_frames();
    ckpt_error e = { 0 };
    int rc = ckpt_mpi_save(t->world, dir, p, NB, &o, &e);
    T_CHECKF(t, rc == 0, "balance save: %s", e.msg);
    for (int i = 0; i < NB; i++)
        free(bufs[i]);
    if (t->rank != 0 || rc != 0)
        return;
    ckpt_reader *rd;
    if (ckpt_reader_open(&rd, dir, NULL, &e) != 0) {
        T_CHECKF(t, 0, "%s", e.msg);
        return;
    }
    uint64_t *per = calloc((size_t)t->size, sizeof *per);
    for (size_t i = 0; i < ckpt_reader_count(rd); i++) {
        ckpt_tensor_info info;
        ckpt_chunk_info ci;
        ckpt_reader_info(rd, i, &info);
        T_CHECKF(t, info.nchunks == 1, "%s: %zu copies in the index",
                 info.fqn, info.nchunks);
        ckpt_reader_chunk(rd, i, 0, &ci);
        int w = -1;
        if (sscanf(ci.file, "data/rank%d.shard", &w) == 1 && w >= 0 &&
            w < t->size)
            per[w] += ci.raw_bytes;
    }
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int w = 0; w < t->size; w++) {
        lo = per[w] < lo ? per[w] : lo;
        hi = per[w] > hi ? per[w] : hi;
    }
    printf("balance: %d ranks write", t->size);
    for (int w = 0; w < t->size; w++)
        printf(" %llu", (unsigned long long)per[w]);
    printf(" bytes (spread %llu, largest piece %llu)\n",
           (unsigned long long)(hi - lo), (unsigned long long)largest);
    T_CHECKF(t, hi - lo <= largest, "bytes per rank spread %llu > largest "
             "piece %llu", (unsigned long long)(hi - lo),
             (unsigned long long)largest);
    T_CHECKF(t, hi <= total / (uint64_t)t->size + largest, "rank writes "
             "%llu of %llu bytes", (unsigned long long)hi,
             (unsigned long long)total);
    free(per);
    ckpt_reader_close(rd);
}

/* ------------------------------------------------------------ main */

/* The first k ranks of the world, or MPI_COMM_NULL on the others. */
static MPI_Comm first_ranks(tctx *t, int k)
{
    MPI_Comm c;
    MPI_Comm_split(t->world, t->rank < k ? 0 : MPI_UNDEFINED, t->rank, &c);
    return c;
}

static void ckpt_dir(char *buf, size_t cap, const char *root, int k)
{
    snprintf(buf, cap, "%s/saved-on-%d", root, k);
}

static void load_all_layouts(tctx *t, MPI_Comm comm, int m, const char *dir,
                             int saved_on)
{
    for (int l = 0; l < L_COUNT; l++)
        load_on(t, comm, m, dir, (load_layout)l, saved_on);
    load_bytes_on(t, comm, dir);
}

static void full_matrix(tctx *t, const char *root)
{
    char dir[4096];
    for (int k = 1; k <= t->size; k++) {
        MPI_Comm c = first_ranks(t, k);
        ckpt_dir(dir, sizeof dir, root, k);
        if (c != MPI_COMM_NULL) {
            save_on(t, c, k, dir);
            MPI_Comm_free(&c);
        }
        MPI_Barrier(t->world);
        if (t->rank == 0)
            check_index(t, dir, k);
        for (int m = 1; m <= t->size; m++) {
            if (m == k && t->size > 1)
                continue;
            c = first_ranks(t, m);
            if (c != MPI_COMM_NULL) {
                load_all_layouts(t, c, m, dir, k);
                MPI_Comm_free(&c);
            }
            MPI_Barrier(t->world);
        }
    }
    ckpt_dir(dir, sizeof dir, root, t->size);
    locality_test(t, dir);
    balance_test(t, root);
}

/* Loads on all ranks of this run what a run on another rank count saved. */
static void load_only(tctx *t, const char *root)
{
    char dir[4096];
    for (int k = 1; k <= 8; k++) {
        ckpt_dir(dir, sizeof dir, root, k);
        if (ckpt_dir_probe(dir) != CKPT_DIR_COMMITTED)
            continue;
        load_all_layouts(t, t->world, t->size, dir, k);
    }
}

int main(int argc, char **argv)
{
    tctx t;
    t_init(&t, &argc, &argv);
    if (argc < 2) {
        if (t.rank == 0)
            fprintf(stderr, "usage: %s ROOT [--load-only]\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    if (argc > 2 && strcmp(argv[2], "--load-only") == 0)
        load_only(&t, argv[1]);
    else
        full_matrix(&t, argv[1]);
    return t_finish(&t, "test_mpi_reshard");
}
