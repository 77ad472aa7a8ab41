/*
 * test_pieces.c - the compact table of pieces (pieces.h) and the planner
 * working on it: pieces copied in and out unchanged, strings interned
 * once, frames kept per piece; and, on random layouts of small tensors
 * (grids, gaps, overlaps, replicas, stray boxes, shuffled input), the
 * planner's verdict and plan against a brute-force reference that counts
 * the pieces covering every element.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/pieces.h"
#include "format/plan.h"
#include "unit_util.h"

static int dims_stored(int ndim)
{
    return ndim < 0 ? 0 : ndim > CKPT_MAX_DIMS ? CKPT_MAX_DIMS : ndim;
}

static void str_eq_or_null(const char *a, const char *b)
{
    if (!a || !b)
        ck_assert_ptr_eq(a, b);
    else
        ck_assert_str_eq(a, b);
}

/* ------------------------------------------------------------ the table */

static const char *const NAMES[] = { "a", "model.w", "data/rank0.shard",
                                     "rank0", "rank1", "", "x.y.z" };

static const char *pick_name(rng *g)
{
    uint64_t k = rnd(g) % (sizeof NAMES / sizeof *NAMES + 1);
    return k == sizeof NAMES / sizeof *NAMES ? NULL : NAMES[k];
}

/* numel(sizes) x itemsize of p, or 0 when it is not a valid count. */
static int regular_bytes(const ckpt_piece_rec *p, uint64_t *out)
{
    if (p->dtype <= CKPT_DTYPE_INVALID || p->dtype >= CKPT_DTYPE_COUNT ||
        p->ndim < 0 || p->ndim > CKPT_MAX_DIMS)
        return 0;
    unsigned __int128 v = ckpt_dtype_size(p->dtype);
    for (int d = 0; d < p->ndim; d++)
        if ((v *= (uint64_t)p->sizes[d]) > UINT64_MAX)
            return 0;
    *out = (uint64_t)v;
    return 1;
}

/* Makes p a piece whose byte counts and one frame the table can derive
 * (raw bytes numel x itemsize, stored as many, one frame of it all, its
 * checksum the hash), then, one time in two, breaks one of those. */
static void make_regular(ckpt_piece_rec *p, rng *g)
{
    if (!regular_bytes(p, &p->raw_bytes))
        return;
    p->stored_bytes = p->raw_bytes;
    free(p->frames);
    p->nframes = 1;
    p->frames = calloc(1, sizeof *p->frames);
    p->frames[0] = (ckpt_frame_rec){ rnd(g), p->stored_bytes, 0,
                                     p->raw_bytes, p->data_hash,
                                     (int)rnd_in(g, 0, 8), 0 };
    switch (rnd_in(g, 0, 13)) {
    case 0: p->raw_bytes++; break;
    case 1: p->stored_bytes = rnd(g); break;
    case 2: p->frames[0].raw_offset = 1; break;
    case 3: p->frames[0].raw_size--; break;
    case 4: p->frames[0].stored_size ^= 1; break;
    case 5: p->frames[0].checksum ^= 1; break;
    case 6: p->frames[0].base = 3; break;
    case 7: p->frames[0].codec = 256; break;
    case 8: p->frames[0].codec = -1; break;
    case 9: p->stored_bytes = p->frames[0].stored_size = rnd(g); break;
    default: break;
    }
}

static void random_rec(ckpt_piece_rec *p, rng *g)
{
    memset(p, 0, sizeof *p);
    p->fqn = (char *)pick_name(g);
    p->file = (char *)pick_name(g);
    p->writer = (char *)pick_name(g);
    p->dtype = (ckpt_dtype)rnd_in(g, 0, CKPT_DTYPE_COUNT);
    int64_t k = rnd_in(g, 0, 9);
    p->ndim = k == 8 ? CKPT_MAX_DIMS + 1 : k == 9 ? -1 : (int)k;
    for (int d = 0; d < dims_stored(p->ndim); d++) {
        p->shape[d] = rnd_in(g, 0, 1000);
        p->offsets[d] = rnd_in(g, 0, 1000);
        p->sizes[d] = rnd_in(g, 0, 1000);
    }
    if (p->ndim > 0 && !rnd_in(g, 0, 3))   /* an offset past 32 bits */
        p->offsets[rnd_in(g, 0, dims_stored(p->ndim) - 1)] +=
            (int64_t)rnd_in(g, 1, 4) << 31;
    p->raw_bytes = rnd(g);
    p->stored_bytes = rnd(g);
    p->data_hash = rnd(g);
    p->nframes = (size_t)rnd_in(g, 0, 3);
    p->frames = p->nframes ? calloc(p->nframes, sizeof *p->frames) : NULL;
    for (size_t f = 0; f < p->nframes; f++)
        p->frames[f] = (ckpt_frame_rec){ rnd(g), rnd(g), rnd(g), rnd(g),
                                         rnd(g), (int)rnd_in(g, 0, 8),
                                         0 };
    if (rnd_in(g, 0, 2))
        make_regular(p, g);
}

static void rec_eq(const ckpt_piece_rec *a, const ckpt_piece_rec *b)
{
    str_eq_or_null(a->fqn, b->fqn);
    str_eq_or_null(a->file, b->file);
    str_eq_or_null(a->writer, b->writer);
    ck_assert_int_eq(a->dtype, b->dtype);
    ck_assert_int_eq(a->ndim, b->ndim);
    for (int d = 0; d < dims_stored(a->ndim); d++) {
        ck_assert_int_eq(a->shape[d], b->shape[d]);
        ck_assert_int_eq(a->offsets[d], b->offsets[d]);
        ck_assert_int_eq(a->sizes[d], b->sizes[d]);
    }
    ck_assert_uint_eq(a->raw_bytes, b->raw_bytes);
    ck_assert_uint_eq(a->stored_bytes, b->stored_bytes);
    ck_assert_uint_eq(a->data_hash, b->data_hash);
    ck_assert_uint_eq(a->nframes, b->nframes);
    for (size_t f = 0; f < a->nframes; f++)
        frame_rec_eq(&a->frames[f], &b->frames[f]);
}

START_TEST(test_table_roundtrip)
{
    rng g = { 0x51ed2701u + (uint64_t)_i };
    enum { N = 500 };
    ckpt_piece_rec *in = calloc(N, sizeof *in);
    ckpt_pieces tab;
    ckpt_pieces_init(&tab);
    for (size_t i = 0; i < N; i++) {
        random_rec(&in[i], &g);
        ck_assert_int_eq(ckpt_pieces_add(&tab, &in[i]), 0);
    }
    ck_assert_uint_eq(tab.n, N);
    /* Every distinct string once (NULL is no string). */
    ck_assert_uint_le(tab.nstr, sizeof NAMES / sizeof *NAMES);
    for (uint32_t a = 0; a < tab.nstr; a++)
        for (uint32_t b = a + 1; b < tab.nstr; b++)
            ck_assert_str_ne(ckpt_pieces_str(&tab, a),
                             ckpt_pieces_str(&tab, b));
    for (size_t i = 0; i < N; i++) {
        ckpt_piece_rec out;
        ck_assert_int_eq(ckpt_pieces_get(&tab, i, &out), 0);
        rec_eq(&in[i], &out);
        ck_assert_int_eq(ckpt_pieces_ndims(&tab.v[i]),
                         dims_stored(in[i].ndim));
        ckpt_piece_clear(&out);
        free(in[i].frames);
    }
    ckpt_pieces_free(&tab);
    free(in);
}
END_TEST

/* Tables appended to one another (what the committer does with the plans
 * it read on several threads) hold the pieces of all, in order, as if
 * they had been added to one table. */
START_TEST(test_table_append)
{
    rng g = { 0x2600a11du + (uint64_t)_i };
    enum { N = 300, PARTS = 4 };
    ckpt_piece_rec *in = calloc(N, sizeof *in);
    ckpt_pieces part[PARTS], all;
    ckpt_pieces_init(&all);
    for (int k = 0; k < PARTS; k++)
        ckpt_pieces_init(&part[k]);
    for (size_t i = 0; i < N; i++) {
        random_rec(&in[i], &g);
        /* uneven parts, one of them empty */
        int k = i < N / 2 ? 0 : i < N / 2 + 7 ? 1 : 3;
        ck_assert_int_eq(ckpt_pieces_add(&part[k], &in[i]), 0);
    }
    for (int k = 0; k < PARTS; k++) {
        ck_assert_int_eq(ckpt_pieces_append(&all, &part[k]), 0);
        ckpt_pieces_free(&part[k]);
    }
    ck_assert_uint_eq(all.n, N);
    for (uint32_t a = 0; a < all.nstr; a++)
        for (uint32_t b = a + 1; b < all.nstr; b++)
            ck_assert_str_ne(ckpt_pieces_str(&all, a),
                             ckpt_pieces_str(&all, b));
    for (size_t i = 0; i < N; i++) {
        ckpt_piece_rec out;
        ck_assert_int_eq(ckpt_pieces_get(&all, i, &out), 0);
        rec_eq(&in[i], &out);
        ckpt_piece_clear(&out);
        free(in[i].frames);
    }
    ckpt_pieces_free(&all);
    free(in);
}
END_TEST

/* Frames are added piece after piece: going back to an earlier piece is
 * refused. */
START_TEST(test_table_frame_order)
{
    ckpt_pieces tab;
    ckpt_pieces_init(&tab);
    ckpt_piece_rec p = { .fqn = "a", .file = "f", .writer = "w", .ndim = 1,
                         .dtype = CKPT_U8, .shape = { 4 }, .sizes = { 4 } };
    ck_assert_int_eq(ckpt_pieces_add(&tab, &p), 0);
    ck_assert_int_eq(ckpt_pieces_add(&tab, &p), 0);
    ckpt_frame_rec f = { 0, 2, 0, 2, 7, 0, 0 };
    ck_assert_int_eq(ckpt_pieces_add_frame(&tab, 0, &f), 0);
    f.raw_offset = 2;
    ck_assert_int_eq(ckpt_pieces_add_frame(&tab, 0, &f), 0);
    ck_assert_int_eq(ckpt_pieces_add_frame(&tab, 1, &f), 0);
    ck_assert_int_eq(ckpt_pieces_add_frame(&tab, 0, &f), -EINVAL);
    ck_assert_uint_eq(ckpt_pieces_nframes(&tab, 0), 2);
    ck_assert_uint_eq(ckpt_pieces_nframes(&tab, 1), 1);
    ckpt_frame_rec one;
    ck_assert_uint_eq(ckpt_pieces_frames(&tab, 0, &one)[1].raw_offset, 2);
    ck_assert_uint_eq(tab.nstr, 3);
    /* A piece whose one frame is in its record gets more at the end. */
    p.raw_bytes = p.stored_bytes = 4;
    p.data_hash = 9;
    ckpt_frame_rec whole = { 100, 4, 0, 4, 9, 1, 0 };
    p.frames = &whole;
    p.nframes = 1;
    ck_assert_int_eq(ckpt_pieces_add(&tab, &p), 0);
    ck_assert_uint_eq(tab.nframes, 3);   /* its frame is in the record */
    ck_assert_int_eq(ckpt_pieces_add_frame(&tab, 2, &f), 0);
    ck_assert_uint_eq(ckpt_pieces_nframes(&tab, 2), 2);
    const ckpt_frame_rec *two = ckpt_pieces_frames(&tab, 2, &one);
    frame_rec_eq(&two[0], &whole);
    frame_rec_eq(&two[1], &f);
    ckpt_pieces_free(&tab);
}
END_TEST

/* A regular layout (the rows of an f32 tensor, one frame each, as FSDP
 * writes them) costs a record and its 32-bit offsets per piece: no frame,
 * no sizes, no byte counts stored (what lets a 16k-rank commit hold its 16
 * million pieces), and reads back as it went in. */
START_TEST(test_table_compact)
{
    enum { N = 1000 };
    ckpt_pieces tab;
    ckpt_pieces_init(&tab);
    ckpt_frame_rec f = { 0 };
    ckpt_piece_rec p = { .fqn = "w", .file = "s", .writer = "r", .ndim = 2,
                         .dtype = CKPT_F32, .shape = { N, 256 },
                         .sizes = { 1, 256 }, .raw_bytes = 1024,
                         .stored_bytes = 1024, .frames = &f, .nframes = 1 };
    for (int i = 0; i < N; i++) {
        p.offsets[0] = i;
        p.data_hash = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
        f = (ckpt_frame_rec){ 4096 + 1024 * (uint64_t)i, 1024, 0, 1024,
                              p.data_hash, i % 3, 0 };
        ck_assert_int_eq(ckpt_pieces_add(&tab, &p), 0);
    }
    ck_assert_uint_eq(tab.nframes, 0);
    ck_assert_uint_eq(tab.ndims, 0);       /* offsets in 32 bits */
    ck_assert_uint_eq(tab.ndims32, 2 * N);
    ck_assert_uint_eq(tab.nshape, 2);   /* shape and sizes; file and writer */
    ck_assert_uint_le(sizeof(ckpt_pieces_rec), 36);
    for (int i = 0; i < N; i++) {
        ckpt_piece_rec out;
        ck_assert_int_eq(ckpt_pieces_get(&tab, (size_t)i, &out), 0);
        p.offsets[0] = i;
        p.data_hash = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
        f = (ckpt_frame_rec){ 4096 + 1024 * (uint64_t)i, 1024, 0, 1024,
                              p.data_hash, i % 3, 0 };
        rec_eq(&p, &out);
        ckpt_piece_clear(&out);
    }
    ckpt_pieces_free(&tab);
}
END_TEST

/* An ndim or dtype past 8 bits is kept as INT8_MIN / INT8_MAX: invalid
 * still, and refused by the planner. */
START_TEST(test_table_clamped)
{
    ckpt_pieces tab;
    ckpt_pieces_init(&tab);
    ckpt_piece_rec p = { .fqn = "a", .ndim = 1000, .dtype = CKPT_F32 };
    ck_assert_int_eq(ckpt_pieces_add(&tab, &p), 0);
    p.ndim = -1000;
    p.dtype = (ckpt_dtype)5000;
    ck_assert_int_eq(ckpt_pieces_add(&tab, &p), 0);
    ckpt_piece_rec out;
    ck_assert_int_eq(ckpt_pieces_get(&tab, 0, &out), 0);
    ck_assert_int_eq(out.ndim, INT8_MAX);
    ck_assert_int_eq(out.dtype, CKPT_F32);
    ckpt_piece_clear(&out);
    ck_assert_int_eq(ckpt_pieces_get(&tab, 1, &out), 0);
    ck_assert_int_eq(out.ndim, INT8_MIN);
    ck_assert_int_eq(out.dtype, INT8_MAX);
    ckpt_piece_clear(&out);
    ckpt_pieces_free(&tab);
    ckpt_plan plan;
    ckpt_error err = { 0 };
    p.ndim = 1000;
    p.dtype = CKPT_F32;
    ck_assert_int_eq(ckpt_plan_build(&p, 1, NULL, &plan, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "dimensions"));
    p.ndim = 1;
    p.dtype = (ckpt_dtype)5000;
    ck_assert_int_eq(ckpt_plan_build(&p, 1, NULL, &plan, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "invalid dtype"));
}
END_TEST

/* ------------------------------------------------ the planner on tables */

enum { MAXP = 200, MAXE = 6 * 6 * 4 };

typedef struct tcase {
    char fqn[16];
    int ndim;
    int64_t shape[3];
} tcase;

typedef struct layout {
    tcase t[4];
    int nt;
    ckpt_piece_rec p[MAXP];
    int np;
    char names[MAXP][16];
} layout;

static uint64_t box_numel(int ndim, const int64_t *s)
{
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= (uint64_t)s[d];
    return n;
}

static void add_piece(layout *L, const tcase *tc, const int64_t *off,
                      const int64_t *size, int writer, uint64_t hash)
{
    if (L->np == MAXP)
        return;
    ckpt_piece_rec *p = &L->p[L->np];
    memset(p, 0, sizeof *p);
    snprintf(L->names[L->np], sizeof L->names[0], "rank%d", writer);
    p->fqn = (char *)tc->fqn;
    p->writer = L->names[L->np];
    p->file = L->names[L->np];
    p->dtype = CKPT_F32;
    p->ndim = tc->ndim;
    memcpy(p->shape, tc->shape, sizeof tc->shape);
    memcpy(p->offsets, off, (size_t)tc->ndim * sizeof *off);
    memcpy(p->sizes, size, (size_t)tc->ndim * sizeof *size);
    p->raw_bytes = box_numel(tc->ndim, size) * 4;
    p->data_hash = hash;
    L->np++;
}

/* A random grid tiling of each tensor, then random damage: a dropped
 * piece, replicas (with equal or other bytes), a shifted piece, a stray
 * box.  Input order shuffled. */
static void make_layout(layout *L, rng *g)
{
    memset(L, 0, sizeof *L);
    L->nt = (int)rnd_in(g, 1, 4);
    for (int i = 0; i < L->nt; i++) {
        tcase *tc = &L->t[i];
        snprintf(tc->fqn, sizeof tc->fqn, "t%d", (int)rnd_in(g, 0, 9) * 10 + i);
        tc->ndim = (int)rnd_in(g, 1, 3);
        for (int d = 0; d < tc->ndim; d++)
            tc->shape[d] = rnd_in(g, 1, d == 2 ? 4 : 6);
        int grid[3], cells = 1;
        int64_t cut[3][7];
        for (int d = 0; d < tc->ndim; d++) {
            grid[d] = (int)rnd_in(g, 1, (int)tc->shape[d]);
            cells *= grid[d];
            /* random distinct cut points 0 = c0 < c1 < ... < c_grid */
            cut[d][0] = 0;
            cut[d][grid[d]] = tc->shape[d];
            for (int k = 1; k < grid[d]; k++)
                cut[d][k] = cut[d][k - 1] + 1 +
                            rnd_in(g, 0, tc->shape[d] - cut[d][k - 1] -
                                             (grid[d] - k) - 1);
        }
        for (int c = 0; c < cells; c++) {
            int64_t off[3], size[3];
            int rest = c;
            for (int d = tc->ndim - 1; d >= 0; d--) {
                int k = rest % grid[d];
                rest /= grid[d];
                off[d] = cut[d][k];
                size[d] = cut[d][k + 1] - cut[d][k];
            }
            int w = (int)rnd_in(g, 0, 3);
            add_piece(L, tc, off, size, w, 1000 + (uint64_t)c);
            if (rnd(g) % 5 == 0)   /* a replica, usually with equal bytes */
                add_piece(L, tc, off, size, (w + 1) % 4,
                          rnd(g) % 6 ? 1000 + (uint64_t)c : 7);
        }
    }
    int damage = (int)rnd_in(g, 0, 5);
    if (damage == 1 && L->np > 1) {             /* a gap */
        int k = (int)rnd_in(g, 0, L->np - 1);
        L->p[k] = L->p[--L->np];
        memcpy(L->names[k], L->names[L->np], sizeof L->names[0]);
        L->p[k].writer = L->p[k].file = L->names[k];
    } else if (damage == 2) {                   /* a shifted piece */
        ckpt_piece_rec *p = &L->p[rnd_in(g, 0, L->np - 1)];
        int d = (int)rnd_in(g, 0, p->ndim - 1);
        p->offsets[d] += rnd(g) & 1 ? 1 : -1;
    } else if (damage == 3) {                   /* a stray box */
        const tcase *tc = &L->t[rnd_in(g, 0, L->nt - 1)];
        int64_t off[3], size[3];
        for (int d = 0; d < tc->ndim; d++) {
            off[d] = rnd_in(g, 0, tc->shape[d] - 1);
            size[d] = rnd_in(g, 1, tc->shape[d] - off[d]);
        }
        add_piece(L, tc, off, size, 9, 5);
    }
    for (int k = L->np - 1; k > 0; k--) {        /* shuffle */
        int j = (int)rnd_in(g, 0, k);
        ckpt_piece_rec tmp = L->p[k];
        L->p[k] = L->p[j];
        L->p[j] = tmp;
        char nt[16];
        memcpy(nt, L->names[k], sizeof nt);
        memcpy(L->names[k], L->names[j], sizeof nt);
        memcpy(L->names[j], nt, sizeof nt);
        L->p[k].writer = L->p[k].file = L->names[k];
        L->p[j].writer = L->p[j].file = L->names[j];
    }
}

static int same_box(const ckpt_piece_rec *a, const ckpt_piece_rec *b)
{
    return a->ndim == b->ndim &&
           !memcmp(a->offsets, b->offsets, (size_t)a->ndim * 8) &&
           !memcmp(a->sizes, b->sizes, (size_t)a->ndim * 8);
}

static int row_major_before(const ckpt_piece_rec *a, const ckpt_piece_rec *b)
{
    for (int d = 0; d < a->ndim; d++)
        if (a->offsets[d] != b->offsets[d])
            return a->offsets[d] < b->offsets[d];
    for (int d = 0; d < a->ndim; d++)
        if (a->sizes[d] != b->sizes[d])
            return a->sizes[d] < b->sizes[d];
    return 0;
}

/* Brute force: every tensor's distinct boxes in bounds, replicas with
 * equal hashes, and every element covered by exactly one distinct box. */
static int reference_ok(const layout *L)
{
    for (int i = 0; i < L->nt; i++) {
        const tcase *tc = &L->t[i];
        int count[MAXE] = { 0 };
        for (int k = 0; k < L->np; k++) {
            const ckpt_piece_rec *p = &L->p[k];
            if (strcmp(p->fqn, tc->fqn))
                continue;
            int first = 1;
            for (int j = 0; j < k; j++)
                if (!strcmp(L->p[j].fqn, tc->fqn) && same_box(&L->p[j], p)) {
                    if (L->p[j].data_hash != p->data_hash)
                        return 0;
                    first = 0;
                }
            for (int d = 0; d < tc->ndim; d++)
                if (p->offsets[d] < 0 ||
                    p->offsets[d] + p->sizes[d] > tc->shape[d])
                    return 0;
            if (!first)
                continue;
            uint64_t n = box_numel(tc->ndim, p->sizes);
            for (uint64_t e = 0; e < n; e++) {
                uint64_t rest = e, g = 0;
                int64_t idx[3];
                for (int d = tc->ndim - 1; d >= 0; d--) {
                    idx[d] = (int64_t)(rest % (uint64_t)p->sizes[d]) +
                             p->offsets[d];
                    rest /= (uint64_t)p->sizes[d];
                }
                for (int d = 0; d < tc->ndim; d++)
                    g = g * (uint64_t)tc->shape[d] + (uint64_t)idx[d];
                count[g]++;
            }
        }
        int named = 0;   /* a tensor no piece names is not the planner's */
        for (int k = 0; k < L->np; k++)
            named |= !strcmp(L->p[k].fqn, tc->fqn);
        for (uint64_t e = 0; named && e < box_numel(tc->ndim, tc->shape); e++)
            if (count[e] != 1)
                return 0;
    }
    return 1;
}

static void check_plan(const layout *L, const ckpt_plan *plan)
{
    ck_assert_uint_eq(plan->npieces, (size_t)L->np);
    for (size_t t = 0; t < plan->ntensors; t++) {
        const ckpt_plan_tensor *pt = &plan->tensors[t];
        if (t)
            ck_assert_int_lt(strcmp(plan->tensors[t - 1].fqn, pt->fqn), 0);
        size_t distinct = 0;
        for (int k = 0; k < L->np; k++) {
            int first = !strcmp(L->p[k].fqn, pt->fqn);
            for (int j = 0; first && j < k; j++)
                first = strcmp(L->p[j].fqn, pt->fqn) ||
                        !same_box(&L->p[j], &L->p[k]);
            distinct += first;
        }
        ck_assert_uint_eq(pt->nchunks, distinct);
        for (size_t c = 0; c < pt->nchunks; c++) {
            const ckpt_piece_rec *p = &L->p[pt->chunks[c]];
            ck_assert_str_eq(p->fqn, pt->fqn);
            if (c)
                ck_assert(row_major_before(&L->p[pt->chunks[c - 1]], p));
        }
    }
    /* Each piece is kept as the first replica of its box. */
    for (int k = 0; k < L->np; k++) {
        int keep = k;
        for (int j = 0; j < L->np; j++)
            if (!strcmp(L->p[j].fqn, L->p[k].fqn) &&
                same_box(&L->p[j], &L->p[k]) && j < keep)
                keep = j;
        ck_assert_uint_eq(plan->kept_as[k], (size_t)keep);
    }
}

/* Prints the layout (for a failing round). */
static void dump_layout(const layout *L)
{
    for (int k = 0; k < L->np; k++) {
        const ckpt_piece_rec *p = &L->p[k];
        fprintf(stderr, "piece %d: %s %s shape", k, p->fqn, p->writer);
        for (int d = 0; d < p->ndim; d++)
            fprintf(stderr, " %lld", (long long)p->shape[d]);
        fprintf(stderr, " off");
        for (int d = 0; d < p->ndim; d++)
            fprintf(stderr, " %lld", (long long)p->offsets[d]);
        fprintf(stderr, " size");
        for (int d = 0; d < p->ndim; d++)
            fprintf(stderr, " %lld", (long long)p->sizes[d]);
        fprintf(stderr, " hash %llu\n", (unsigned long long)p->data_hash);
    }
}

START_TEST(test_planner_random_layouts)
{
    rng g = { 0xabcdef12345ull + (uint64_t)_i * 104729 };
    layout *L = malloc(sizeof *L);
    int ok = 0, refused = 0;
    for (int round = 0; round < 50; round++) {
        make_layout(L, &g);
        ckpt_pieces tab;
        ckpt_pieces_init(&tab);
        for (int k = 0; k < L->np; k++)
            ck_assert_int_eq(ckpt_pieces_add(&tab, &L->p[k]), 0);
        ckpt_plan plan, plan2;
        ckpt_error err = { 0 };
        ckpt_plan_opts o = { .check_replica_hashes = 1 };
        int rc = ckpt_plan_build_pieces(&tab, &o, &plan, &err);
        int want = reference_ok(L);
        if ((rc == 0) != want)
            dump_layout(L);
        ck_assert_msg((rc == 0) == want, "round %d: planner %d (%s), "
                      "reference %s", round, rc, err.msg,
                      want ? "ok" : "refused");
        if (rc == 0) {
            check_plan(L, &plan);
            /* the record API gives the same plan */
            ck_assert_int_eq(ckpt_plan_build(L->p, (size_t)L->np, &o, &plan2,
                                             &err), 0);
            ck_assert_uint_eq(plan2.ntensors, plan.ntensors);
            ck_assert(!memcmp(plan2.kept_as, plan.kept_as,
                              (size_t)L->np * sizeof *plan.kept_as));
            for (size_t t = 0; t < plan.ntensors; t++) {
                ck_assert_ptr_eq(plan2.tensors[t].fqn,
                                 L->p[plan2.tensors[t].chunks[0]].fqn);
                ck_assert(!memcmp(plan2.tensors[t].chunks,
                                  plan.tensors[t].chunks,
                                  plan.tensors[t].nchunks *
                                      sizeof *plan.tensors[t].chunks));
            }
            ckpt_plan_free(&plan2);
            ok++;
        } else {
            ck_assert_int_eq(rc, -EINVAL);
            ck_assert_msg(strstr(err.msg, "tensor '") != NULL, "%s", err.msg);
            refused++;
        }
        ckpt_plan_free(&plan);
        ckpt_pieces_free(&tab);
    }
    ck_assert_int_gt(ok, 0);
    ck_assert_int_gt(refused, 0);
    free(L);
}
END_TEST

/* Many pieces of few tensors: the planner groups them (no assumption on
 * the input order) and keeps the first replica of each box. */
START_TEST(test_planner_many_writers)
{
    enum { W = 4096, T = 3 };
    ckpt_pieces tab;
    ckpt_pieces_init(&tab);
    char fqn[T][8], writer[32], file[48];
    for (int t = 0; t < T; t++)
        snprintf(fqn[t], sizeof fqn[t], "p%d", T - t);
    for (int w = 0; w < W; w++) {
        snprintf(writer, sizeof writer, "rank%d", w);
        snprintf(file, sizeof file, "data/rank%d.shard", w);
        for (int t = 0; t < T; t++) {
            /* tensor 0 by rows; 1 as a (W/8) x 8 grid; 2 replicated */
            ckpt_piece_rec p = { .fqn = fqn[t], .file = file,
                                 .writer = writer, .dtype = CKPT_BF16,
                                 .ndim = 2 };
            p.shape[0] = t == 1 ? W / 8 : W;
            p.shape[1] = t == 1 ? 8 * 3 : 5;
            p.offsets[0] = t == 0 ? w : t == 1 ? w / 8 : 0;
            p.offsets[1] = t == 1 ? w % 8 * 3 : 0;
            p.sizes[0] = t == 2 ? W : 1;
            p.sizes[1] = t == 1 ? 3 : 5;
            p.raw_bytes = (uint64_t)p.sizes[0] * (uint64_t)p.sizes[1] * 2;
            ck_assert_int_eq(ckpt_pieces_add(&tab, &p), 0);
        }
    }
    ckpt_plan plan;
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_plan_build_pieces(&tab, NULL, &plan, &err) == 0, "%s",
                  err.msg);
    ck_assert_uint_eq(plan.ntensors, T);
    ck_assert_str_eq(plan.tensors[0].fqn, "p1");   /* replicated */
    ck_assert_uint_eq(plan.tensors[0].nchunks, 1);
    ck_assert_uint_eq(plan.tensors[0].chunks[0], 0 * T + 2);
    ck_assert_uint_eq(plan.tensors[1].nchunks, W);
    ck_assert_uint_eq(plan.tensors[2].nchunks, W);
    for (size_t c = 0; c < W; c++) {
        ck_assert_uint_eq(plan.tensors[1].chunks[c], c * T + 1);
        ck_assert_uint_eq(plan.tensors[2].chunks[c], c * T + 0);
    }
    for (size_t i = 0; i < tab.n; i++)
        ck_assert_uint_eq(plan.kept_as[i], i % T == 2 ? 2 : i);
    ckpt_plan_free(&plan);
    ckpt_pieces_free(&tab);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("pieces");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, test_table_roundtrip, 0, 5);
    tcase_add_loop_test(tc, test_table_append, 0, 3);
    tcase_add_test(tc, test_table_frame_order);
    tcase_add_test(tc, test_table_compact);
    tcase_add_test(tc, test_table_clamped);
    tcase_add_loop_test(tc, test_planner_random_layouts, 0, 8);
    tcase_add_test(tc, test_planner_many_writers);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(suite());
}
