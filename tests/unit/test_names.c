/*
 * test_names.c - unit tests for fs/names.c, the FQN <-> mount path mapping
 * of docs/MOUNT.md: the documented examples, escaping of every byte value,
 * round trips of random components and FQNs (with '%', '/', control bytes,
 * empty components, UTF-8 and stray high bytes), snprintf-like truncation,
 * and decoding's refusal of every name that escaping cannot produce.
 *
 * The random tests use a fixed seed, printed; set CKPT_TEST_SEED to try
 * another one.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "names.h"
#include "unit_util.h"

#define DEFAULT_SEED 0x6e616d65u
#define ROUNDS 20000

/* Only call into Check on failure: the random loops check a lot. */
#define REQUIRE_MSG(c, ...)                                                 \
    do {                                                                    \
        if (!(c))                                                           \
            ck_abort_msg(__VA_ARGS__);                                      \
    } while (0)

/* ------------------------------------------------------------ random */

/* A random non-NUL byte, biased towards the interesting ones. */
static char random_byte(srng *r, int allow_dot)
{
    static const char special[] = { '%', '/', '\n', '\t', 0x7f, 0x01, 0x1f,
                                    ' ', '2', '5', 'F' };
    for (;;) {
        uint64_t k = srng_next(r) % 8;
        char c;
        if (k < 3)
            c = special[srng_next(r) % sizeof special];
        else if (k < 5)
            c = (char)(0x80 + srng_next(r) % 0x80);   /* UTF-8 pieces */
        else
            c = (char)(1 + srng_next(r) % 255);
        if (c != '\0' && (allow_dot || c != '.'))
            return c;
    }
}

/* A random component (no '.') of 0..maxlen bytes, sometimes with whole
 * UTF-8 characters; returns its length. */
static size_t random_component(srng *r, char *buf, size_t maxlen)
{
    static const char *const utf8[] = { "\xc3\xa9", "\xe2\x82\xac",
                                        "\xf0\x9f\x98\x80" };
    size_t len = (size_t)(srng_next(r) % (maxlen + 1)), n = 0;
    while (n < len) {
        if (srng_next(r) % 4 == 0) {
            const char *u = utf8[srng_next(r) % 3];
            size_t ul = strlen(u);
            if (n + ul > len)
                break;
            memcpy(buf + n, u, ul);
            n += ul;
        } else {
            buf[n++] = random_byte(r, 0);
        }
    }
    buf[n] = '\0';
    return n;
}

/* ------------------------------------------------------------ helpers */

static void expect_escape(const char *comp, const char *want)
{
    char out[256];
    size_t n = names_escape(comp, strlen(comp), out, sizeof out);
    ck_assert_uint_eq(n, strlen(want));
    ck_assert_str_eq(out, want);
    char back[256];
    ssize_t k = names_unescape(out, back, sizeof back);
    ck_assert_int_eq(k, (ssize_t)strlen(comp));
    ck_assert_str_eq(back, comp);
}

static void expect_path(const char *fqn, const char *want)
{
    char out[256];
    size_t n = names_fqn_to_path(fqn, out, sizeof out);
    ck_assert_uint_eq(n, strlen(want));
    ck_assert_str_eq(out, want);
    char back[256];
    ssize_t k = names_path_to_fqn(out, back, sizeof back);
    ck_assert_int_eq(k, (ssize_t)strlen(fqn));
    ck_assert_str_eq(back, fqn);
}

static void expect_refused(const char *name)
{
    char out[64];
    ssize_t k = names_unescape(name, out, sizeof out);
    REQUIRE_MSG(k == -EINVAL, "'%s' decoded to %zd instead of -EINVAL",
                name, k);
}

/* ------------------------------------------------------------ examples */

START_TEST(documented_examples)
{
    expect_path("a.b.c", "a/b/c");
    expect_path("model.layers.0.weight", "model/layers/0/weight");
    expect_path("a..b", "a/%/b");
    expect_path(".a", "%/a");
    expect_path("a.", "a/%");
    expect_path("", "%");
    expect_escape("50%", "50%25");
    expect_escape("a/b", "a%2Fb");
    expect_escape("tab\there", "tab%09here");
    expect_escape("del\x7f", "del%7F");
    expect_escape("\x1f", "%1F");
    expect_escape("caf\xc3\xa9", "caf\xc3\xa9");         /* UTF-8 kept */
    expect_escape("\xe2\x82\xac 1", "\xe2\x82\xac 1");
    expect_escape("", "%");
    expect_escape("%", "%25");
    expect_escape("%25", "%2525");
    expect_escape("x y~!#$&'()*+,;=?@[]^_`{|}", "x y~!#$&'()*+,;=?@[]^_`{|}");
}
END_TEST

START_TEST(every_byte)
{
    for (int b = 1; b < 256; b++) {
        if (b == '.')
            continue;
        char comp[2] = { (char)b, 0 }, out[8], back[8];
        size_t n = names_escape(comp, 1, out, sizeof out);
        int escaped = b == '%' || b == '/' || b < 0x20 || b == 0x7f;
        ck_assert_uint_eq(n, escaped ? 3 : 1);
        if (escaped) {
            char want[4];
            snprintf(want, sizeof want, "%%%02X", b);
            ck_assert_str_eq(out, want);
        }
        ck_assert_ptr_null(strchr(out, '/'));
        ck_assert_ptr_null(strchr(out, '.'));
        ck_assert_int_eq(names_unescape(out, back, sizeof back), 1);
        ck_assert_int_eq((unsigned char)back[0], b);
    }
}
END_TEST

START_TEST(split_components)
{
    names_iter it;
    const char *c;
    size_t len;
    names_iter_init(&it, "ab..c.");
    ck_assert_int_eq(names_iter_next(&it, &c, &len), 1);
    ck_assert_uint_eq(len, 2);
    ck_assert_int_eq(memcmp(c, "ab", 2), 0);
    ck_assert_int_eq(names_iter_next(&it, &c, &len), 1);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(names_iter_next(&it, &c, &len), 1);
    ck_assert_uint_eq(len, 1);
    ck_assert_int_eq(c[0], 'c');
    ck_assert_int_eq(names_iter_next(&it, &c, &len), 1);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(names_iter_next(&it, &c, &len), 0);
    ck_assert_int_eq(names_iter_next(&it, &c, &len), 0);
    ck_assert_uint_eq(names_count("ab..c."), 4);
    ck_assert_uint_eq(names_count("x"), 1);
    ck_assert_uint_eq(names_count(""), 1);
    names_iter_init(&it, "");
    ck_assert_int_eq(names_iter_next(&it, &c, &len), 1);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(names_iter_next(&it, &c, &len), 0);
}
END_TEST

/* ------------------------------------------------------------ random */

START_TEST(random_component_round_trip)
{
    srng r = srng_seeded("random_component_round_trip", DEFAULT_SEED);
    char comp[80], esc[256], back[80];
    for (int i = 0; i < ROUNDS; i++) {
        size_t len = random_component(&r, comp, 60);
        size_t n = names_escape(comp, len, esc, sizeof esc);
        REQUIRE_MSG(n == strlen(esc) && n > 0, "round %d: length %zu", i, n);
        REQUIRE_MSG(!strchr(esc, '/') && !strchr(esc, '.'),
                    "round %d: '%s' has '/' or '.'", i, esc);
        for (size_t k = 0; k < n; k++)
            REQUIRE_MSG((unsigned char)esc[k] >= 0x20 && esc[k] != 0x7f,
                        "round %d: control byte in '%s'", i, esc);
        ssize_t k = names_unescape(esc, back, sizeof back);
        REQUIRE_MSG(k == (ssize_t)len && memcmp(back, comp, len) == 0 &&
                    back[len] == '\0', "round %d: '%s' decoded wrongly", i,
                    esc);
    }
}
END_TEST

START_TEST(random_fqn_round_trip)
{
    srng r = srng_seeded("random_fqn_round_trip", DEFAULT_SEED);
    char fqn[512], path[1600], back[512];
    for (int i = 0; i < ROUNDS; i++) {
        size_t n = 0, ncomp = 1 + srng_next(&r) % 6;
        for (size_t c = 0; c < ncomp; c++) {
            if (c)
                fqn[n++] = '.';
            n += random_component(&r, fqn + n, 20);
        }
        fqn[n] = '\0';
        ck_assert_uint_eq(names_count(fqn), ncomp);
        size_t pn = names_fqn_to_path(fqn, path, sizeof path);
        REQUIRE_MSG(pn == strlen(path), "round %d: path length", i);
        REQUIRE_MSG(!strchr(path, '.'), "round %d: '.' in path", i);
        ssize_t k = names_path_to_fqn(path, back, sizeof back);
        REQUIRE_MSG(k == (ssize_t)n && strcmp(back, fqn) == 0,
                    "round %d: '%s' came back as %zd", i, path, k);
    }
}
END_TEST

/* Distinct components must give distinct names (one-to-one). */
START_TEST(random_injective)
{
    srng r = srng_seeded("random_injective", DEFAULT_SEED);
    char a[40], b[40], ea[128], eb[128];
    for (int i = 0; i < ROUNDS; i++) {
        size_t la = random_component(&r, a, 6);
        size_t lb = random_component(&r, b, 6);
        names_escape(a, la, ea, sizeof ea);
        names_escape(b, lb, eb, sizeof eb);
        int same = la == lb && memcmp(a, b, la) == 0;
        REQUIRE_MSG(same == (strcmp(ea, eb) == 0),
                    "round %d: '%s' and '%s' collide", i, ea, eb);
    }
}
END_TEST

/* ------------------------------------------------------------ limits */

START_TEST(truncation_like_snprintf)
{
    char out[6];
    memset(out, 'x', sizeof out);
    size_t n = names_escape("a%b/c", 5, out, sizeof out);
    ck_assert_uint_eq(n, 9);                        /* "a%25b%2Fc" */
    ck_assert_str_eq(out, "a%25b");
    ck_assert_uint_eq(names_escape("abc", 3, NULL, 0), 3);
    ck_assert_uint_eq(names_escape("", 0, out, 1), 1);
    ck_assert_str_eq(out, "");
    char path[5];
    ck_assert_uint_eq(names_fqn_to_path("ab.cd.ef", path, sizeof path), 8);
    ck_assert_str_eq(path, "ab/c");
    ck_assert_uint_eq(names_fqn_to_path("ab.cd.ef", NULL, 0), 8);

    char small[3];
    ck_assert_int_eq(names_unescape("abc", small, sizeof small),
                     -ENAMETOOLONG);
    ck_assert_int_eq(names_unescape("ab", small, sizeof small), 2);
    ck_assert_int_eq(names_unescape("%", small, 0), -ENAMETOOLONG);
    ck_assert_int_eq(names_path_to_fqn("ab/c", small, sizeof small),
                     -ENAMETOOLONG);
}
END_TEST

START_TEST(malformed_refused)
{
    expect_refused("");            /* no name is empty */
    expect_refused("a.b");         /* '.' belongs to ckptfs */
    expect_refused("x.tensor");
    expect_refused(".npy");
    expect_refused("%2E");         /* '.' is never escaped */
    expect_refused("%41");         /* 'A' needs no escape: not canonical */
    expect_refused("%20");         /* nor does a space */
    expect_refused("%2f");         /* lowercase hex */
    expect_refused("%7f");
    expect_refused("%00");         /* NUL is never in an FQN */
    expect_refused("%2");          /* truncated */
    expect_refused("a%");          /* '%' alone is fine, not in a name */
    expect_refused("%%");
    expect_refused("%G0");
    expect_refused("%0G");
    expect_refused("ab\ncd");      /* raw control byte */
    expect_refused("\x7f");
    expect_refused("a/b");         /* raw '/' */

    char out[16];
    ck_assert_int_eq(names_path_to_fqn("a//b", out, sizeof out), -EINVAL);
    ck_assert_int_eq(names_path_to_fqn("/a", out, sizeof out), -EINVAL);
    ck_assert_int_eq(names_path_to_fqn("a/", out, sizeof out), -EINVAL);
    ck_assert_int_eq(names_path_to_fqn("", out, sizeof out), -EINVAL);
    ck_assert_int_eq(names_path_to_fqn("a/b.tensor", out, sizeof out),
                     -EINVAL);
    ck_assert_int_eq(names_path_to_fqn("a/%41", out, sizeof out), -EINVAL);
}
END_TEST

/* A lone '%' is special only as a whole name: the empty component. */
START_TEST(lone_percent_is_empty)
{
    char out[4];
    memset(out, 'x', sizeof out);
    ck_assert_int_eq(names_unescape("%", out, sizeof out), 0);
    ck_assert_str_eq(out, "");
}
END_TEST

static Suite *names_suite(void)
{
    Suite *s = suite_create("names");
    TCase *ex = tcase_create("examples");
    tcase_add_test(ex, documented_examples);
    tcase_add_test(ex, every_byte);
    tcase_add_test(ex, split_components);
    tcase_add_test(ex, lone_percent_is_empty);
    suite_add_tcase(s, ex);
    TCase *rt = tcase_create("random");
    tcase_add_test(rt, random_component_round_trip);
    tcase_add_test(rt, random_fqn_round_trip);
    tcase_add_test(rt, random_injective);
    suite_add_tcase(s, rt);
    TCase *lim = tcase_create("limits");
    tcase_add_test(lim, truncation_like_snprintf);
    tcase_add_test(lim, malformed_refused);
    suite_add_tcase(s, lim);
    return s;
}

int main(void)
{
    return unit_run(names_suite());
}
