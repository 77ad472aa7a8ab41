/*
 * test_pickle.c - unit tests for the restricted pickle reader's bytes of
 * protocol 2 (what torch.save writes for an io.BytesIO: the BytesIO
 * rebuilt from its state, the bytes spelled _codecs.encode(str, "latin1")
 * or __builtin__.bytes() when empty): values decoded exactly, and every
 * other spelling refused without running anything.  Pickles are built
 * here opcode by opcode, as CPython's pickle module writes them.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "foreign/pickle.h"
#include "unit_util.h"

/* A pickle being built. */
typedef struct pk_buf {
    unsigned char b[512];
    size_t n;
} pk_buf;

static void put(pk_buf *p, const void *s, size_t n)
{
    ck_assert_uint_le(p->n + n, sizeof p->b);
    memcpy(p->b + p->n, s, n);
    p->n += n;
}

static void op(pk_buf *p, unsigned char c)
{
    put(p, &c, 1);
}

/* GLOBAL 'module\nname\n' */
static void global(pk_buf *p, const char *module, const char *name)
{
    op(p, 'c');
    put(p, module, strlen(module));
    op(p, '\n');
    put(p, name, strlen(name));
    op(p, '\n');
}

/* BINUNICODE of n bytes (UTF-8 as given) */
static void unicode(pk_buf *p, const char *s, size_t n)
{
    unsigned char len[4] = { (unsigned char)n, (unsigned char)(n >> 8),
                             (unsigned char)(n >> 16),
                             (unsigned char)(n >> 24) };
    op(p, 'X');
    put(p, len, 4);
    put(p, s, n);
}

/* A pickle that starts PROTO 2 (as torch.save's do) with GLOBAL m.name. */
static pk_buf proto2(const char *module, const char *name)
{
    pk_buf p = { .n = 0 };
    op(&p, 0x80);
    op(&p, 2);
    global(&p, module, name);
    return p;
}

/* PROTO 2, _codecs.encode(<s>, <enc>) */
static pk_buf encode_call(const char *s, size_t n, const char *enc)
{
    pk_buf p = proto2("_codecs", "encode");
    unicode(&p, s, n);
    unicode(&p, enc, strlen(enc));
    op(&p, 0x86);   /* TUPLE2 */
    op(&p, 'R');    /* REDUCE */
    return p;
}

static int load(pk_buf *p, pk_ctx **ctx, pk_val **root, ckpt_error *err)
{
    op(p, '.');     /* STOP */
    return pk_load(p->b, p->n, 1 << 20, "test.pkl", ctx, root, err);
}

START_TEST(test_latin1_bytes)
{
    /* 'a', U+00FF, U+0000, U+0080: the bytes 61 ff 00 80. */
    pk_buf p = encode_call("a\xc3\xbf\x00\xc2\x80", 6, "latin1");
    pk_ctx *ctx;
    pk_val *root;
    ckpt_error err = { 0 };
    ck_assert_int_eq(load(&p, &ctx, &root, &err), 0);
    ck_assert_int_eq(root->type, PK_BYTES);
    ck_assert_uint_eq(root->len, 4);
    ck_assert_int_eq(memcmp(root->s, "a\xff\x00\x80", 4), 0);
    pk_free(ctx);
    /* "latin-1" is the same codec. */
    pk_buf q = encode_call("xyz", 3, "latin-1");
    ck_assert_int_eq(load(&q, &ctx, &root, &err), 0);
    ck_assert_int_eq(root->type, PK_BYTES);
    ck_assert_str_eq(root->s, "xyz");
    pk_free(ctx);
}
END_TEST

START_TEST(test_encode_refusals)
{
    static const struct {
        const char *s;
        size_t n;
        const char *enc;
    } bad[] = {
        { "\xc4\x80", 2, "latin1" },        /* U+0100: not latin1 */
        { "\xe2\x82\xac", 3, "latin1" },    /* the euro sign */
        { "\xc3", 1, "latin1" },            /* cut UTF-8 */
        { "\xc3\x28", 2, "latin1" },        /* not a continuation */
        { "\xc1\xbf", 2, "latin1" },        /* overlong */
        { "\x80", 1, "latin1" },            /* a lone continuation */
        { "abc", 3, "utf8" },               /* another codec */
        { "abc", 3, "latin2" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pk_buf p = encode_call(bad[i].s, bad[i].n, bad[i].enc);
        pk_ctx *ctx = NULL;
        pk_val *root = NULL;
        ckpt_error err = { 0 };
        ck_assert_msg(load(&p, &ctx, &root, &err) == -EINVAL,
                      "case %zu was accepted", i);
        ck_assert_ptr_nonnull(strstr(err.msg, "_codecs.encode"));
        ck_assert_ptr_null(ctx);
    }
}
END_TEST

START_TEST(test_empty_bytes)
{
    pk_buf p = proto2("__builtin__", "bytes");
    op(&p, ')');    /* EMPTY_TUPLE */
    op(&p, 'R');
    pk_ctx *ctx;
    pk_val *root;
    ckpt_error err = { 0 };
    ck_assert_int_eq(load(&p, &ctx, &root, &err), 0);
    ck_assert_int_eq(root->type, PK_BYTES);
    ck_assert_uint_eq(root->len, 0);
    pk_free(ctx);
    /* bytes('x') is no spelling of bytes the reader takes. */
    pk_buf q = proto2("__builtin__", "bytes");
    unicode(&q, "x", 1);
    op(&q, 0x85);   /* TUPLE1 */
    op(&q, 'R');
    ck_assert_int_eq(load(&q, &ctx, &root, &err), -EINVAL);
}
END_TEST

/* Python 3.13's pathlib pickles its paths as pathlib._local classes (DCP
 * .metadata of torch 2.6 on Python 3.13 holds one): read as the path. */
START_TEST(test_pathlib_local)
{
    pk_buf p = proto2("pathlib._local", "PosixPath");
    unicode(&p, "/ck/a", 5);
    op(&p, 0x85);   /* TUPLE1 */
    op(&p, 'R');
    pk_ctx *ctx;
    pk_val *root;
    ckpt_error err = { 0 };
    ck_assert_int_eq(load(&p, &ctx, &root, &err), 0);
    ck_assert_int_eq(root->type, PK_STR);
    ck_assert_str_eq(root->s, "/ck/a");
    pk_free(ctx);
}
END_TEST

/* A state_dict's OrderedDict is built with its _metadata attribute. */
START_TEST(test_ordered_dict_build)
{
    pk_buf p = proto2("collections", "OrderedDict");
    op(&p, ')');    /* EMPTY_TUPLE */
    op(&p, 'R');
    op(&p, '}');    /* EMPTY_DICT: the attributes */
    op(&p, 'b');    /* BUILD */
    pk_ctx *ctx;
    pk_val *root;
    ckpt_error err = { 0 };
    ck_assert_int_eq(load(&p, &ctx, &root, &err), 0);
    ck_assert_int_eq(root->type, PK_DICT);
    ck_assert_ptr_nonnull(root->state);
    pk_free(ctx);
}
END_TEST

START_TEST(test_bytesio_object)
{
    /* BytesIO() with BUILD state (b'\xff', 1, None), as torch.save writes
     * it: recorded, not run. */
    pk_buf p = proto2("_io", "BytesIO");
    op(&p, ')');
    op(&p, 0x81);   /* NEWOBJ */
    pk_buf e = encode_call("\xc3\xbf", 2, "latin1");
    put(&p, e.b + 2, e.n - 2);      /* without its PROTO */
    op(&p, 'K');    /* BININT1 1 */
    op(&p, 1);
    op(&p, 'N');
    op(&p, 0x87);   /* TUPLE3 */
    op(&p, 'b');    /* BUILD */
    pk_ctx *ctx;
    pk_val *root;
    ckpt_error err = { 0 };
    ck_assert_int_eq(load(&p, &ctx, &root, &err), 0);
    ck_assert_int_eq(root->type, PK_OBJ);
    ck_assert_int_eq(pk_global_of(root), PKG_BYTESIO);
    const pk_val *v = pk_item(root->state, 0);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(v->type, PK_BYTES);
    ck_assert_uint_eq(v->len, 1);
    ck_assert_int_eq((unsigned char)v->s[0], 0xff);
    pk_free(ctx);
    /* Other io classes stay refused. */
    pk_buf q = proto2("_io", "FileIO");
    ck_assert_int_eq(load(&q, &ctx, &root, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "refusing global '_io.FileIO'"));
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("pickle");
    TCase *t = tcase_create("bytes");
    tcase_add_test(t, test_latin1_bytes);
    tcase_add_test(t, test_encode_refusals);
    tcase_add_test(t, test_empty_bytes);
    tcase_add_test(t, test_bytesio_object);
    tcase_add_test(t, test_pathlib_local);
    tcase_add_test(t, test_ordered_dict_build);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return unit_run(suite());
}
