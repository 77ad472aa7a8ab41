/*
 * test_supersede.c - a rank that ran again takes the place of its earlier
 * pieces (write/supersede.h): on random layouts of 2-D pieces by a few
 * writers and random supersessions, the pieces kept are checked against a
 * brute-force reference that marks, element by element, the region each
 * supersession covers; and damaged declarations are refused by name.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/model.h"
#include "format/pieces.h"
#include "write/supersede.h"
#include "write/writer.h"
#include "unit_util.h"

#define N 8                     /* tensors are N x N */

static const char *const WRITERS[] = { "rank0", "rank0-2", "rank1",
                                       "rank10" };
static const char *const FQNS[] = { "a", "b" };

typedef struct box {
    int fqn, writer;
    int64_t off[2], size[2];
} box;

static box random_box(rng *g)
{
    box b;
    b.fqn = (int)rnd_in(g, 0, 1);
    b.writer = (int)rnd_in(g, 0, 3);
    for (int d = 0; d < 2; d++) {
        b.off[d] = rnd_in(g, 0, N - 1);
        b.size[d] = rnd_in(g, 0, N - b.off[d]);
    }
    return b;
}

static int inside(const box *b, int64_t i, int64_t j)
{
    return i >= b->off[0] && i < b->off[0] + b->size[0] &&
           j >= b->off[1] && j < b->off[1] + b->size[1];
}

/* The reference: some element lies in both boxes. */
static int share_element(const box *a, const box *b)
{
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < N; j++)
            if (inside(a, i, j) && inside(b, i, j))
                return 1;
    return 0;
}

static void add_piece(ckpt_pieces *t, const box *b, uint64_t id)
{
    ckpt_piece_rec p = { 0 };
    p.fqn = (char *)FQNS[b->fqn];
    p.writer = (char *)WRITERS[b->writer];
    p.file = (char *)"data/x.shard";
    p.dtype = CKPT_F32;
    p.ndim = 2;
    for (int d = 0; d < 2; d++) {
        p.shape[d] = N;
        p.offsets[d] = b->off[d];
        p.sizes[d] = b->size[d];
    }
    p.data_hash = id;            /* tells the pieces apart */
    ck_assert_int_eq(ckpt_pieces_add(t, &p), 0);
}

/* Declares supersession s (its writer s->writer; `listed` a bit per
 * WRITERS entry) in m. */
static void add_supersession(ckpt_manifest *m, const box *s, unsigned listed)
{
    char names[100] = "", key[200];
    for (int w = 0; w < 4; w++)
        if (listed & (1u << w))
            snprintf(names + strlen(names), sizeof names - strlen(names),
                     "%s%s", names[0] ? "," : "", WRITERS[w]);
    snprintf(key, sizeof key, "%s" CKPT_SUPERSEDE_MARK "%s;%lld,%lld;%lld,%lld",
             FQNS[s->fqn], names, (long long)s->off[0], (long long)s->off[1],
             (long long)s->size[0], (long long)s->size[1]);
    ck_assert_int_eq(ckpt_manifest_declare(m, key, "", WRITERS[s->writer]), 0);
}

START_TEST(test_random_layouts)
{
    rng g = { 0x5e9e25u + (uint64_t)_i * 7919u };
    for (int round = 0; round < 200; round++) {
        ckpt_pieces t;
        ckpt_manifest m;
        ckpt_pieces_init(&t);
        ckpt_manifest_init(&m);
        box p[12], s[3];
        unsigned listed[3];
        int np = (int)rnd_in(&g, 1, 12), ns = (int)rnd_in(&g, 0, 3);
        for (int i = 0; i < np; i++) {
            p[i] = random_box(&g);
            add_piece(&t, &p[i], (uint64_t)i);
        }
        /* a plain declaration and a replica reference are no supersession */
        ck_assert_int_eq(ckpt_manifest_declare(&m, "a", "", "rank0"), 0);
        ck_assert_int_eq(ckpt_manifest_declare(&m, "b" CKPT_REPLICA_MARK
                                               "f32;8,8;0,0;8,8", "",
                                               "rank1"), 0);
        for (int k = 0; k < ns; k++) {
            s[k] = random_box(&g);
            listed[k] = (unsigned)rnd_in(&g, 1, 15);
            add_supersession(&m, &s[k], listed[k]);
        }
        size_t dropped = 99;
        ck_assert_int_eq(ckpt_supersede_apply(&t, &m, &dropped, NULL), 0);
        size_t kept = 0, want_dropped = 0;
        for (int i = 0; i < np; i++) {
            int gone = 0;
            for (int k = 0; k < ns; k++)
                gone |= p[i].fqn == s[k].fqn &&
                        p[i].writer != s[k].writer &&
                        (listed[k] & (1u << p[i].writer)) &&
                        share_element(&p[i], &s[k]);
            if (gone) {
                want_dropped++;
                continue;
            }
            /* kept, in order */
            ck_assert_uint_lt(kept, t.n);
            ck_assert_uint_eq(ckpt_pieces_hash(&t, kept), (uint64_t)i);
            kept++;
        }
        ck_assert_uint_eq(kept, t.n);
        ck_assert_uint_eq(dropped, want_dropped);
        ckpt_pieces_free(&t);
        ckpt_manifest_free(&m);
    }
}
END_TEST

/* "rank1" is not "rank10": names are matched whole. */
START_TEST(test_names_whole)
{
    ck_assert(ckpt_supersede_listed("rank0,rank1", "rank1"));
    ck_assert(!ckpt_supersede_listed("rank10,rank0-2", "rank1"));
    ck_assert(!ckpt_supersede_listed("rank0-2", "rank0"));
    ck_assert(ckpt_supersede_listed("rank0-2,rank0", "rank0"));
    ck_assert(!ckpt_supersede_listed("", "rank0"));
}
END_TEST

START_TEST(test_damaged)
{
    static const char *const BAD[] = {
        "w" CKPT_SUPERSEDE_MARK "rank0;0,0",            /* no sizes */
        "w" CKPT_SUPERSEDE_MARK ";0,0;1,1",             /* no writers */
        "w" CKPT_SUPERSEDE_MARK "rank0;0,0;1",          /* ndim differ */
        "w" CKPT_SUPERSEDE_MARK "rank0;0,x;1,1",        /* not a list */
        "w" CKPT_SUPERSEDE_MARK "rank0;0,0;1,1;2",      /* a part more */
    };
    for (size_t k = 0; k < sizeof BAD / sizeof *BAD; k++) {
        ckpt_pieces t;
        ckpt_manifest m;
        ckpt_pieces_init(&t);
        ckpt_manifest_init(&m);
        box b = { 0, 0, { 0, 0 }, { 1, 1 } };
        add_piece(&t, &b, 1);
        ck_assert_int_eq(ckpt_manifest_declare(&m, BAD[k], "", "rank0-2"), 0);
        ckpt_error e = { 0 };
        ck_assert_int_eq(ckpt_supersede_apply(&t, &m, NULL, &e), -EINVAL);
        ck_assert_msg(strstr(e.msg, "tensor 'w'") &&
                      strstr(e.msg, "writer rank0-2") &&
                      strstr(e.msg, "damaged"), "%zu: %s", k, e.msg);
        ck_assert_uint_eq(t.n, 1);
        ckpt_pieces_free(&t);
        ckpt_manifest_free(&m);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("supersede");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, test_random_layouts, 0, 4);
    tcase_add_test(tc, test_names_whole);
    tcase_add_test(tc, test_damaged);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(suite());
}
