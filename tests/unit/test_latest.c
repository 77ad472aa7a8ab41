/*
 * test_latest.c - unit tests for the rule that picks the checkpoint `latest`
 * points to (docs/MOUNT.md, "latest"), which is also the order gc's retention
 * keeps the newest by (src/write/gc.h, ckpt_retain_*): steps from metadata or
 * from the directory's name, the order between checkpoints with and without
 * steps, ties broken by commit time then by name, and the choice among a whole
 * root's worth of checkpoints in every order.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "write/gc.h"
#include "unit_util.h"

START_TEST(test_parse_step)
{
    int64_t v = -99;
    ck_assert_int_eq(ckpt_retain_parse_step("100", &v), 1);
    ck_assert_int_eq(v, 100);
    ck_assert_int_eq(ckpt_retain_parse_step(" -1 \n", &v), 1);
    ck_assert_int_eq(v, -1);
    ck_assert_int_eq(ckpt_retain_parse_step("+7", &v), 1);
    ck_assert_int_eq(v, 7);
    v = 5;
    ck_assert_int_eq(ckpt_retain_parse_step(NULL, &v), 0);
    ck_assert_int_eq(ckpt_retain_parse_step("", &v), 0);
    ck_assert_int_eq(ckpt_retain_parse_step("1e3", &v), 0);
    ck_assert_int_eq(ckpt_retain_parse_step("abc", &v), 0);
    ck_assert_int_eq(ckpt_retain_parse_step("99999999999999999999", &v), 0);
    ck_assert_int_eq(v, 5);     /* untouched when there is no step */
}
END_TEST

START_TEST(test_name_step)
{
    static const struct {
        const char *name;
        int has;
        int64_t step;
    } cases[] = {
        { "step-000004", 1, 4 },
        { "step-000000", 1, 0 },
        { "global_step1000", 1, 1000 },
        { "epoch3-step500", 1, 500 },      /* the last number */
        { "ckpt-12.old", 1, 12 },
        { "0042", 1, 42 },
        { "final", 0, 0 },
        { "zz-nostep", 0, 0 },
        { "", 0, 0 },
        { "step-000000000000000000000001", 1, 1 },   /* leading zeros */
        { "n-123456789012345678", 1, 123456789012345678LL },
        { "n-1234567890123456789", 0, 0 },           /* 19 digits: none */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t v = -1;
        int has = ckpt_retain_key(cases[i].name, NULL, &v);
        ck_assert_msg(has == cases[i].has, "'%s': has %d, want %d",
                      cases[i].name, has, cases[i].has);
        if (has)
            ck_assert_msg(v == cases[i].step, "'%s': %lld, want %lld",
                          cases[i].name, (long long)v,
                          (long long)cases[i].step);
    }
}
END_TEST

START_TEST(test_step_metadata_first)
{
    int64_t v = 0;
    /* The metadata wins over the name, even when they disagree. */
    ck_assert_int_eq(ckpt_retain_key("step-000009", "3", &v), 1);
    ck_assert_int_eq(v, 3);
    /* No (usable) metadata: the name's number. */
    ck_assert_int_eq(ckpt_retain_key("step-000004", NULL, &v), 1);
    ck_assert_int_eq(v, 4);
    ck_assert_int_eq(ckpt_retain_key("step-000004", "abc", &v), 1);
    ck_assert_int_eq(v, 4);
    ck_assert_int_eq(ckpt_retain_key("final", NULL, &v), 0);
}
END_TEST

static ckpt_retain_item key(const char *name, const char *meta, long sec,
                            long ns)
{
    ckpt_retain_item k = { .name = name,
                           .committed_ns = sec * 1000000000LL + ns };
    k.has_key = ckpt_retain_key(name, meta, &k.key);
    return k;
}

/* a is newer than b, and not the other way round. */
#define NEWER(a, b)                                                         \
    do {                                                                    \
        ckpt_retain_item ka_ = (a), kb_ = (b);                                    \
        ck_assert_msg(ckpt_retain_newer(&ka_, &kb_), "%s should be newer than %s",\
                      ka_.name, kb_.name);                                  \
        ck_assert_msg(!ckpt_retain_newer(&kb_, &ka_), "%s should not be newer "  \
                      "than %s", kb_.name, ka_.name);                       \
    } while (0)

START_TEST(test_order)
{
    /* The case: step-000004 without metadata beats step-000002
     * with step=2, although it was committed earlier. */
    NEWER(key("step-000004", NULL, 100, 0), key("step-000002", "2", 200, 0));
    /* Numeric, not lexicographic. */
    NEWER(key("step-1000", NULL, 1, 0), key("step-300", NULL, 2, 0));
    NEWER(key("a", "1000", 1, 0), key("b", "300", 2, 0));
    /* Metadata over the name: step-000009 with step=3 is step 3. */
    NEWER(key("step-000005", NULL, 1, 0), key("step-000009", "3", 2, 0));
    /* Any step beats none, however recent or late by name. */
    NEWER(key("0-first", "1", 1, 0), key("zz-nostep", NULL, 9, 0));
    NEWER(key("step-1", NULL, 1, 0), key("final", NULL, 9, 0));
    /* Equal steps (one from metadata, one from the name): the later
     * commit; then the greater name. */
    NEWER(key("run-b", "4", 50, 2), key("step-000004", NULL, 50, 1));
    NEWER(key("step-000004", NULL, 51, 0), key("run-b", "4", 50, 999999999));
    NEWER(key("step-04", NULL, 7, 7), key("step-004", NULL, 7, 7));
    /* No step at all: the later commit, then the greater name. */
    NEWER(key("a-ck", NULL, 300, 0), key("c-ck", NULL, 100, 0));
    NEWER(key("b", NULL, 5, 5), key("a", NULL, 5, 5));
    /* Negative steps order too. */
    NEWER(key("x", "-1", 1, 0), key("y", "-2", 2, 0));
    /* A checkpoint is not newer than itself. */
    ckpt_retain_item s = key("step-1", NULL, 1, 0);
    ck_assert(!ckpt_retain_newer(&s, &s));
}
END_TEST

/* The newest of n keys by pairwise comparison, as the mount picks it. */
static size_t pick(const ckpt_retain_item *v, const size_t *order, size_t n)
{
    size_t best = order[0];
    for (size_t i = 1; i < n; i++)
        if (ckpt_retain_newer(&v[order[i]], &v[best]))
            best = order[i];
    return best;
}

START_TEST(test_choice_independent_of_order)
{
    /* A mixed root: metadata steps, name steps, ties, and names without
     * numbers.  Whatever order the scan meets them in, `latest` is
     * step-000007 (name step 7, tied with run-x's step=7 metadata but
     * committed later). */
    ckpt_retain_item v[] = {
        key("step-000002", "2", 10, 0),
        key("step-000004", NULL, 5, 0),
        key("run-x", "7", 20, 0),
        key("step-000007", NULL, 20, 1),
        key("final", NULL, 99, 0),
        key("step-000009", "6", 30, 0),
    };
    size_t n = sizeof v / sizeof v[0], order[6];
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    /* Every rotation and its reverse. */
    for (size_t r = 0; r < n; r++) {
        size_t o[6], rev[6];
        for (size_t i = 0; i < n; i++) {
            o[i] = order[(i + r) % n];
            rev[n - 1 - i] = o[i];
        }
        ck_assert_str_eq(v[pick(v, o, n)].name, "step-000007");
        ck_assert_str_eq(v[pick(v, rev, n)].name, "step-000007");
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("latest");
    TCase *t = tcase_create("core");
    tcase_add_test(t, test_parse_step);
    tcase_add_test(t, test_name_step);
    tcase_add_test(t, test_step_metadata_first);
    tcase_add_test(t, test_order);
    tcase_add_test(t, test_choice_independent_of_order);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return unit_run(suite());
}
