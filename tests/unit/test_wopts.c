/*
 * test_wopts.c - unit tests of src/wopts.c, the one parser of write
 * options from text: every bound of ckptfs.h (CKPT_MIN/MAX_FRAME_SIZE,
 * CKPT_MAX_THREADS, the codec levels) accepted at its edge and refused one
 * past it, with the message the CLI and the mount show; a refused value
 * leaves the options as they were; ckpt_write_opts_check and
 * ckpt_writer_open refuse the same out-of-bounds structs.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckptfs.h"
#include "write/wopts.h"
#include "unit_util.h"

/* Parses name=value into a fresh default struct; returns the code. */
static int parse(const char *name, const char *value, ckpt_write_opts *o,
                 ckpt_error *err)
{
    ckpt_write_opts_init(o);
    memset(err, 0, sizeof *err);
    return ckpt_write_opt_parse(o, name, value, err);
}

START_TEST(test_frame_size_bounds)
{
    ckpt_write_opts o;
    ckpt_error err;
    ck_assert_int_eq(parse("frame_size", "4096", &o, &err), 0);
    ck_assert_uint_eq(o.frame_size, CKPT_MIN_FRAME_SIZE);
    ck_assert_int_eq(parse("frame_size", "4K", &o, &err), 0);
    ck_assert_uint_eq(o.frame_size, 4096);
    ck_assert_int_eq(parse("frame_size", "1G", &o, &err), 0);
    ck_assert_uint_eq(o.frame_size, CKPT_MAX_FRAME_SIZE);
    ck_assert_int_eq(parse("frame_size", "64KiB", &o, &err), 0);
    ck_assert_uint_eq(o.frame_size, 65536);
    const char *bad[] = { "4095", "1073741825", "2G", "0", "", "-4096",
                          "1X", "4K4", " 4096" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_int_eq(parse("frame_size", bad[i], &o, &err), -EINVAL);
        ck_assert_uint_eq(o.frame_size, CKPT_DEFAULT_FRAME_SIZE);
        char want[128];
        snprintf(want, sizeof want, "bad frame size '%s': expected 4K to "
                 "1G, e.g. 1M or 65536", bad[i]);
        ck_assert_str_eq(err.msg, want);
        ck_assert_int_eq(err.code, -EINVAL);
    }
}
END_TEST

START_TEST(test_threads_bounds)
{
    ckpt_write_opts o;
    ckpt_error err;
    ck_assert_int_eq(parse("threads", "0", &o, &err), 0);
    ck_assert_int_eq(o.threads, 0);
    ck_assert_int_eq(parse("threads", "4096", &o, &err), 0);
    ck_assert_int_eq(o.threads, CKPT_MAX_THREADS);
    const char *bad[] = { "4097", "-1", "", "x", "1.5", "99999999999999999" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_int_eq(parse("threads", bad[i], &o, &err), -EINVAL);
        ck_assert_int_eq(o.threads, 0);
        char want[128];
        snprintf(want, sizeof want, "bad thread count '%s': expected 0 to "
                 "4096", bad[i]);
        ck_assert_str_eq(err.msg, want);
    }
}
END_TEST

START_TEST(test_codec_and_levels)
{
    ckpt_write_opts o;
    ckpt_error err;
    ck_assert_int_eq(parse("codec", "zstd:22", &o, &err), 0);
    ck_assert_int_eq(o.codec, CKPT_CODEC_ZSTD);
    ck_assert_int_eq(o.level, CKPT_MAX_LEVEL);
    ck_assert_int_eq(parse("codec", "bgbf16:-7", &o, &err), 0);
    ck_assert_int_eq(o.codec, CKPT_CODEC_BG_BF16);
    ck_assert_int_eq(o.level, CKPT_MIN_LEVEL);
    ck_assert_int_eq(parse("codec", "raw", &o, &err), 0);
    ck_assert_int_eq(o.codec, CKPT_CODEC_RAW);
    const char *bad[] = { "zstd:23", "zstd:-8", "zstd:0", "raw:1", "lz4" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_int_eq(parse("codec", bad[i], &o, &err), -EINVAL);
        ck_assert_int_eq(o.codec, CKPT_CODEC_AUTO);
        ck_assert_int_eq(o.level, 1);
        ck_assert_msg(strstr(err.msg, bad[i]) != NULL,
                      "message '%s' names '%s'", err.msg, bad[i]);
    }
    ck_assert_int_eq(parse("level", "3", &o, &err), -EINVAL);
    ck_assert_str_eq(err.msg, "unknown write option 'level'");
    ck_assert_int_eq(ckpt_write_opt_parse(NULL, "codec", "raw", &err),
                     -EINVAL);
    ck_assert_int_eq(ckpt_write_opt_parse(&o, "codec", NULL, &err), -EINVAL);
}
END_TEST

START_TEST(test_struct_check)
{
    ckpt_write_opts o;
    ckpt_error err = { 0 };
    ckpt_write_opts_init(&o);
    ck_assert_int_eq(ckpt_write_opts_check(&o, &err), 0);
    o.frame_size = CKPT_MIN_FRAME_SIZE - 1;
    ck_assert_int_eq(ckpt_write_opts_check(&o, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "frame size 4095") != NULL, "%s", err.msg);
    o.frame_size = CKPT_MAX_FRAME_SIZE + 1;
    ck_assert_int_eq(ckpt_write_opts_check(&o, &err), -EINVAL);
    o.frame_size = CKPT_MAX_FRAME_SIZE;
    ck_assert_int_eq(ckpt_write_opts_check(&o, &err), 0);
    o.threads = CKPT_MAX_THREADS + 1;
    ck_assert_int_eq(ckpt_write_opts_check(&o, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "at most 4096") != NULL, "%s", err.msg);
    /* The writer refuses it before creating anything. */
    char dir[] = "/tmp/ckpt_test_wopts.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char ck[64];
    snprintf(ck, sizeof ck, "%s/ck", dir);
    ckpt_writer *w = NULL;
    ck_assert_int_eq(ckpt_writer_open(&w, ck, "rank0", &o, &err), -EINVAL);
    ck_assert_ptr_null(w);
    ck_assert_msg(strstr(err.msg, "encoder threads") != NULL, "%s", err.msg);
    ck_assert_int_eq(rmdir(dir), 0);    /* nothing was made inside */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("wopts");
    TCase *tc = tcase_create("wopts");
    tcase_add_test(tc, test_frame_size_bounds);
    tcase_add_test(tc, test_threads_bounds);
    tcase_add_test(tc, test_codec_and_levels);
    tcase_add_test(tc, test_struct_check);
    suite_add_tcase(s, tc);
    return unit_run(s);
}
