/*
 * test_api_args.c - every public call of ckptfs.h given NULL for each of
 * its pointer parameters, one at a time (the others valid): required
 * pointers are refused with -EINVAL and a message naming the call and the
 * parameter, optional ones (options, err, callbacks) behave as documented,
 * and nothing crashes (run under ASan+UBSan by `--sanitize`).  Also the
 * one convention of regions: NULL offsets are zeros and NULL sizes the
 * whole shape, for ckpt_read_region as for ckpt_load_region.  And the
 * size field of every options struct: one from a newer header (larger)
 * or never initialised (0) is refused naming the struct, before anything
 * is made.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckptfs.h"
#include "unit_util.h"

static char *g_dir;        /* per test */
static char g_ck[512];     /* a committed checkpoint in it: "a" f32 4x4 */
static float g_a[16];

static const int64_t SHAPE[2] = { 4, 4 };

static ckpt_piece piece_a(void)
{
    return (ckpt_piece){ .fqn = "a", .dtype = CKPT_F32, .ndim = 2,
                         .shape = SHAPE, .data = g_a };
}

static void setup(void)
{
    g_dir = make_tmpdir_tagged("args");
    snprintf(g_ck, sizeof g_ck, "%s/ck", g_dir);
    for (int i = 0; i < 16; i++)
        g_a[i] = (float)i * 0.5f - 3.0f;
    ckpt_piece p = piece_a();
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_save_sync(g_ck, &p, 1, NULL, &err), 0);
}

static void teardown(void)
{
    remove_tmpdir(g_dir);
}

/* rc is -EINVAL with a message that names `call` and `param`. */
#define REFUSED(rc, err, call, param)                                       \
    do {                                                                   \
        ck_assert_int_eq((rc), -EINVAL);                                   \
        ck_assert_int_eq((err).code, -EINVAL);                             \
        ck_assert_msg(strstr((err).msg, call) && strstr((err).msg, param), \
                      "message '%s' names %s and %s", (err).msg, call,     \
                      param);                                              \
        memset(&(err), 0, sizeof(err));                                    \
    } while (0)

static ckpt_reader *open_ck(void)
{
    ckpt_reader *r = NULL;
    ck_assert_int_eq(ckpt_reader_open(&r, g_ck, NULL, NULL), 0);
    return r;
}

START_TEST(test_writer_args)
{
    ckpt_error err = { 0 };
    ckpt_writer *w = NULL;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/w", g_dir);
    REFUSED(ckpt_writer_open(NULL, dir, "r0", NULL, &err), err,
            "ckpt_writer_open", "out");
    REFUSED(ckpt_writer_open(&w, NULL, "r0", NULL, &err), err,
            "ckpt_writer_open", "dir");
    ck_assert_int_eq(ckpt_writer_open(&w, dir, NULL, NULL, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "writer name") != NULL, "%s", err.msg);
    ck_assert_int_eq(ckpt_writer_open(&w, dir, "r0", NULL, NULL), 0);

    ckpt_piece p = piece_a();
    REFUSED(ckpt_writer_put(NULL, &p, &err), err, "ckpt_writer_put",
            "writer");
    REFUSED(ckpt_writer_put(w, NULL, &err), err, "ckpt_writer_put", "piece");
    p.fqn = NULL;
    REFUSED(ckpt_writer_put(w, &p, &err), err, "ckpt_writer_put", "fqn");
    p = piece_a();
    p.shape = NULL;
    REFUSED(ckpt_writer_put(w, &p, &err), err, "ckpt_writer_put", "shape");
    p = piece_a();
    p.data = NULL;
    /* No data for the piece's bytes: refused naming the tensor. */
    REFUSED(ckpt_writer_put(w, &p, &err), err, "tensor 'a'", "no data");
    REFUSED(ckpt_writer_put_bytes(NULL, "b", "x", 1, &err), err,
            "ckpt_writer_put_bytes", "writer");
    REFUSED(ckpt_writer_put_bytes(w, NULL, "x", 1, &err), err,
            "ckpt_writer_put_bytes", "fqn");
    REFUSED(ckpt_writer_put_bytes(w, "b", NULL, 1, &err), err,
            "ckpt_writer_put_bytes", "data");

    ckpt_stream *s = NULL;
    p = piece_a();
    REFUSED(ckpt_writer_begin(NULL, &p, &s, &err), err, "ckpt_writer_begin",
            "writer");
    REFUSED(ckpt_writer_begin(w, NULL, &s, &err), err, "ckpt_writer_begin",
            "desc");
    REFUSED(ckpt_writer_begin(w, &p, NULL, &err), err, "ckpt_writer_begin",
            "out");
    REFUSED(ckpt_stream_write(NULL, g_a, 4, &err), err, "ckpt_stream_write",
            "stream");
    ck_assert_int_eq(ckpt_writer_begin(w, &p, &s, &err), 0);
    REFUSED(ckpt_stream_write(s, NULL, 4, &err), err, "ckpt_stream_write",
            "buf");
    REFUSED(ckpt_stream_write_lent(s, NULL, 4, &err), err,
            "ckpt_stream_write_lent", "buf");
    REFUSED(ckpt_stream_write_lent(NULL, g_a, 4, &err), err,
            "ckpt_stream_write_lent", "stream");
    ck_assert_int_eq(ckpt_stream_write(s, NULL, 0, &err), 0);
    ck_assert_int_eq(ckpt_stream_write(s, g_a, sizeof g_a, &err), 0);
    /* NULL actual: ended as begun. */
    ck_assert_int_eq(ckpt_stream_end_as(s, NULL, &err), 0);
    REFUSED(ckpt_stream_end(NULL, &err), err, "ckpt_stream_end", "stream");
    REFUSED(ckpt_stream_end_as(NULL, &p, &err), err, "ckpt_stream_end_as",
            "stream");
    ckpt_stream_abort(NULL);

    REFUSED(ckpt_writer_set_meta(NULL, "k", "v", &err), err,
            "ckpt_writer_set_meta", "writer");
    ck_assert_int_eq(ckpt_writer_set_meta(w, NULL, "v", &err), -EINVAL);
    ck_assert_int_eq(ckpt_writer_set_meta(w, "k", NULL, &err), -EINVAL);
    REFUSED(ckpt_writer_flush(NULL, &err), err, "ckpt_writer_flush",
            "writer");
    REFUSED(ckpt_writer_sync(NULL, &err), err, "ckpt_writer_sync", "writer");
    REFUSED(ckpt_writer_close(NULL, &err), err, "ckpt_writer_close",
            "writer");
    ckpt_writer_abort(NULL);
    /* The refusals left the writer usable. */
    ck_assert_int_eq(ckpt_writer_close(w, &err), 0);
    REFUSED(ckpt_commit(NULL, NULL, &err), err, "ckpt_commit", "dir");
    ck_assert_int_eq(ckpt_commit(dir, NULL, &err), 0);
}
END_TEST

START_TEST(test_opts_init_null)
{
    /* void: a NULL struct is ignored. */
    ckpt_write_opts_init(NULL);
    ckpt_commit_opts_init(NULL);
    ckpt_read_opts_init(NULL);
    ckpt_saver_opts_init(NULL);
    ckpt_save_opts_init(NULL);
    ck_assert_int_eq(ckpt_dtype_parse(NULL), CKPT_DTYPE_INVALID);
    ck_assert_int_eq(ckpt_dir_probe(NULL), CKPT_DIR_NONE);
    ck_assert_int_eq(ckpt_format_probe(NULL, NULL, 0), CKPT_FORMAT_NONE);
    ck_assert_int_eq(ckpt_format_probe(g_ck, NULL, 64), CKPT_FORMAT_CKPTFS);
    ck_assert_int_eq(ckpt_reader_format(NULL), CKPT_FORMAT_NONE);
    ck_assert_ptr_nonnull(ckpt_version());
}
END_TEST

START_TEST(test_reader_args)
{
    ckpt_error err = { 0 };
    ckpt_reader *r = NULL;
    REFUSED(ckpt_reader_open(NULL, g_ck, NULL, &err), err,
            "ckpt_reader_open", "out");
    REFUSED(ckpt_reader_open(&r, NULL, NULL, &err), err, "ckpt_reader_open",
            "dir");
    ckpt_reader_close(NULL);
    r = open_ck();

    ckpt_tensor_info ti;
    ckpt_chunk_info ci;
    ckpt_frame_info fi;
    ck_assert_uint_eq(ckpt_reader_count(NULL), 0);
    ck_assert_int_eq(ckpt_reader_info(NULL, 0, &ti), -EINVAL);
    ck_assert_int_eq(ckpt_reader_info(r, 0, NULL), -EINVAL);
    ck_assert_int_eq(ckpt_reader_find(NULL, "a"), -EINVAL);
    ck_assert_int_eq(ckpt_reader_find(r, NULL), -EINVAL);
    ck_assert_int_eq(ckpt_reader_chunk(NULL, 0, 0, &ci), -EINVAL);
    ck_assert_int_eq(ckpt_reader_chunk(r, 0, 0, NULL), -EINVAL);
    REFUSED(ckpt_reader_frame(NULL, 0, 0, 0, &fi, &err), err,
            "ckpt_reader_frame", "reader");
    REFUSED(ckpt_reader_frame(r, 0, 0, 0, NULL, &err), err,
            "ckpt_reader_frame", "out");
    ck_assert_uint_eq(ckpt_reader_meta_count(NULL), 0);
    const char *k, *v;
    ck_assert_int_eq(ckpt_reader_meta_at(NULL, 0, &k, &v), -EINVAL);
    ck_assert_int_eq(ckpt_reader_meta_at(r, 0, NULL, &v), -EINVAL);
    ck_assert_int_eq(ckpt_reader_meta_at(r, 0, &k, NULL), -EINVAL);
    ck_assert_ptr_null(ckpt_reader_meta_get(NULL, "producer"));
    ck_assert_ptr_null(ckpt_reader_meta_get(r, NULL));

    float buf[16];
    REFUSED(ckpt_read(NULL, 0, buf, 0, 8, &err), err, "ckpt_read", "reader");
    REFUSED(ckpt_read(r, 0, NULL, 0, 8, &err), err, "ckpt_read", "dst");
    ck_assert_int_eq(ckpt_read(r, 0, NULL, 0, 0, &err), 0);
    ckpt_read_item item = { 0, NULL, NULL, buf };
    REFUSED(ckpt_read_batch(NULL, &item, 1, &err), err, "ckpt_read_batch",
            "reader");
    REFUSED(ckpt_read_batch(r, NULL, 1, &err), err, "ckpt_read_batch",
            "items");
    ck_assert_int_eq(ckpt_read_batch(r, NULL, 0, &err), 0);
    item.dst = NULL;
    REFUSED(ckpt_read_batch(r, &item, 1, &err), err, "ckpt_read_batch",
            "dst");

    ckpt_stats st;
    memset(&st, 0xff, sizeof st);
    ckpt_reader_stats(NULL, &st);           /* zeros */
    ck_assert_uint_eq(st.bytes_served, 0);
    ckpt_reader_stats(r, NULL);
    ck_assert_int_eq(ckpt_verify(NULL, NULL, NULL, NULL, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "ckpt_verify") != NULL, "%s", err.msg);
    ck_assert_int_eq(ckpt_verify(r, NULL, NULL, NULL, NULL), 0);

    struct stat sb;
    ck_assert_int_eq(ckpt_reader_chunk(r, 0, 0, &ci), 0);
    REFUSED(ckpt_reader_file_stat(NULL, ci.file, &sb, &err), err,
            "ckpt_reader_file_stat", "reader");
    REFUSED(ckpt_reader_file_stat(r, NULL, &sb, &err), err,
            "ckpt_reader_file_stat", "file");
    REFUSED(ckpt_reader_file_stat(r, ci.file, NULL, &err), err,
            "ckpt_reader_file_stat", "st");
    ckpt_perm pm;
    REFUSED(ckpt_reader_perm(NULL, 0, &pm, &err), err, "ckpt_reader_perm",
            "reader");
    REFUSED(ckpt_reader_perm(r, 0, NULL, &err), err, "ckpt_reader_perm",
            "out");
    ckpt_reader_close(r);
}
END_TEST

/* NULL offsets: zeros; NULL sizes: the whole shape; dst NULL refused. */
static void region_calls(int (*fn)(ckpt_reader *, size_t, const int64_t *,
                                   const int64_t *, void *, ckpt_error *),
                         const char *name)
{
    ckpt_error err = { 0 };
    ckpt_reader *r = open_ck();
    float got[16];
    memset(got, 0, sizeof got);
    ck_assert_int_eq(fn(r, 0, NULL, NULL, got, &err), 0);
    ck_assert_mem_eq(got, g_a, sizeof g_a);
    const int64_t sz[2] = { 2, 3 }, off[2] = { 1, 1 };
    memset(got, 0, sizeof got);
    ck_assert_int_eq(fn(r, 0, NULL, sz, got, &err), 0);   /* from 0,0 */
    for (int i = 0; i < 2; i++)
        ck_assert_mem_eq(&got[i * 3], &g_a[i * 4], 12);
    /* NULL sizes is the whole shape: from 1,1 that leaves it. */
    ck_assert_int_eq(fn(r, 0, off, NULL, got, &err), -EINVAL);
    memset(&err, 0, sizeof err);
    REFUSED(fn(NULL, 0, NULL, NULL, got, &err), err, name, "reader");
    REFUSED(fn(r, 0, NULL, NULL, NULL, &err), err, name, "dst");
    ckpt_reader_close(r);
}

START_TEST(test_read_region_null_region)
{
    region_calls(ckpt_read_region, "ckpt_read_region");
}
END_TEST

START_TEST(test_load_region_null_region)
{
    region_calls(ckpt_load_region, "ckpt_load_region");
}
END_TEST

START_TEST(test_async_args)
{
    ckpt_error err = { 0 };
    ckpt_saver *sv = NULL;
    REFUSED(ckpt_saver_create(NULL, NULL, &err), err, "ckpt_saver_create",
            "out");
    ck_assert_int_eq(ckpt_saver_create(&sv, NULL, &err), 0);
    ckpt_saver_destroy(NULL);
    ck_assert_int_eq(ckpt_saver_cuda(NULL), 0);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/as", g_dir);
    ckpt_piece p = piece_a();
    ckpt_save *h = NULL;
    REFUSED(ckpt_save_async(NULL, dir, &p, 1, NULL, &h, &err), err,
            "ckpt_save_async", "saver");
    REFUSED(ckpt_save_async(sv, NULL, &p, 1, NULL, &h, &err), err,
            "ckpt_save_async", "dir");
    REFUSED(ckpt_save_async(sv, dir, NULL, 1, NULL, &h, &err), err,
            "ckpt_save_async", "pieces");
    REFUSED(ckpt_save_async(sv, dir, &p, 1, NULL, NULL, &err), err,
            "ckpt_save_async", "out");
    ck_assert_int_eq(ckpt_save_poll(NULL), -EINVAL);
    REFUSED(ckpt_save_wait(NULL, &err), err, "ckpt_save_wait", "save");
    /* Nothing was started: the save still works. */
    ck_assert_int_eq(ckpt_save_async(sv, dir, &p, 1, NULL, &h, &err), 0);
    ck_assert_int_eq(ckpt_save_wait(h, &err), 0);
    ckpt_saver_destroy(sv);

    snprintf(dir, sizeof dir, "%s/sy", g_dir);
    REFUSED(ckpt_save_sync(NULL, &p, 1, NULL, &err), err, "ckpt_save_sync",
            "dir");
    REFUSED(ckpt_save_sync(dir, NULL, 1, NULL, &err), err, "ckpt_save_sync",
            "pieces");
    ck_assert_int_eq(ckpt_save_sync(dir, &p, 1, NULL, &err), 0);
}
END_TEST

/* `s` says it is n bytes larger than the library's struct, or 0. */
#define SET_SIZE(s, grow) ((s).size = (grow) < 0 ? 0 : sizeof(s) + (grow))

/* rc refused with -EINVAL and a message naming struct `name`, and
 * nothing made at `path`. */
static void refused_opts(int rc, ckpt_error *err, const char *name,
                         const char *path)
{
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_msg(strstr(err->msg, name) != NULL, "message '%s' names %s",
                  err->msg, name);
    struct stat sb;
    ck_assert_msg(path == NULL || stat(path, &sb) != 0, "%s was made", path);
    memset(err, 0, sizeof *err);
}

START_TEST(test_opts_size)
{
    static const int grows[] = { 16, -1 };
    char dir[600];
    snprintf(dir, sizeof dir, "%s/sz", g_dir);
    ckpt_piece p = piece_a();
    for (int g = 0; g < 2; g++) {
        int grow = grows[g];
        ckpt_error err = { 0 };
        /* A larger struct really is larger: the library must not read
         * past its own layout either. */
        struct { ckpt_write_opts o; char newer[16]; } wo;
        memset(&wo, 0, sizeof wo);
        ckpt_write_opts_init(&wo.o);
        SET_SIZE(wo.o, grow);
        ckpt_writer *w = NULL;
        refused_opts(ckpt_writer_open(&w, dir, "r0", &wo.o, &err), &err,
                     "ckpt_write_opts", dir);
        ck_assert_ptr_null(w);

        struct { ckpt_read_opts o; char newer[16]; } ro;
        ckpt_read_opts_init(&ro.o);
        SET_SIZE(ro.o, grow);
        ckpt_reader *r = NULL;
        refused_opts(ckpt_reader_open(&r, g_ck, &ro.o, &err), &err,
                     "ckpt_read_opts", NULL);
        ck_assert_ptr_null(r);

        struct { ckpt_commit_opts o; char newer[16]; } co;
        ckpt_commit_opts_init(&co.o);
        SET_SIZE(co.o, grow);
        refused_opts(ckpt_commit(dir, &co.o, &err), &err, "ckpt_commit_opts",
                     NULL);

        struct { ckpt_saver_opts o; char newer[16]; } so;
        ckpt_saver_opts_init(&so.o);
        SET_SIZE(so.o, grow);
        ckpt_saver *sv = NULL;
        refused_opts(ckpt_saver_create(&sv, &so.o, &err), &err,
                     "ckpt_saver_opts", NULL);
        ck_assert_ptr_null(sv);

        struct { ckpt_save_opts o; char newer[16]; } vo;
        ckpt_save_opts_init(&vo.o);
        SET_SIZE(vo.o, grow);
        refused_opts(ckpt_save_sync(dir, &p, 1, &vo.o, &err), &err,
                     "ckpt_save_opts", dir);
        ckpt_save_opts_init(&vo.o);
        SET_SIZE(vo.o.write, grow);       /* the nested struct */
        refused_opts(ckpt_save_sync(dir, &p, 1, &vo.o, &err), &err,
                     "ckpt_save_opts.write", dir);
        ck_assert_int_eq(ckpt_saver_create(&sv, NULL, &err), 0);
        ckpt_save *h = NULL;
        refused_opts(ckpt_save_async(sv, dir, &p, 1, &vo.o, &h, &err), &err,
                     "ckpt_save_opts.write", dir);
        ck_assert_ptr_null(h);
        ckpt_saver_destroy(sv);
    }
    /* The init functions set the size the library knows. */
    ckpt_write_opts w;
    ckpt_write_opts_init(&w);
    ck_assert_uint_eq(w.size, sizeof w);
    ckpt_save_opts s;
    ckpt_save_opts_init(&s);
    ck_assert_uint_eq(s.size, sizeof s);
    ck_assert_uint_eq(s.write.size, sizeof s.write);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("api_args");
    TCase *tc = tcase_create("api_args");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_writer_args);
    tcase_add_test(tc, test_opts_init_null);
    tcase_add_test(tc, test_reader_args);
    tcase_add_test(tc, test_read_region_null_region);
    tcase_add_test(tc, test_load_region_null_region);
    tcase_add_test(tc, test_async_args);
    tcase_add_test(tc, test_opts_size);
    suite_add_tcase(s, tc);
    return unit_run(s);
}
