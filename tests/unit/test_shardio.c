/*
 * test_shardio.c - unit tests of src/read/shardio.c: reading a range of a file
 * into a buffer of every alignment (both the direct and the bounced path), of
 * lengths around the piece size, with and without the XXH3-64 of the bytes,
 * and the stored-bytes buffer; bytes are compared with the data the test
 * wrote, checksums with libxxhash's plain (non-dispatched) XXH3_64bits.  A
 * read past the end of the file is -EIO naming the file.  The shard
 * mapping serves resident bytes in place, and nothing past the file's end,
 * even after the file was truncated under it.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "read/shardio.h"
#include "unit_util.h"

#define FILE_BYTES ((size_t)600 << 10)
#define PIECE ((size_t)128 << 10)    /* shardio.c's piece size */

static char g_path[256];
static unsigned char *g_data;        /* the file's bytes */

/* Writes FILE_BYTES of xorshift bytes to a fresh temporary file. */
static void file_setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_path, sizeof g_path, "%s/ckpt_test_shardio.XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(g_path);
    ck_assert_msg(fd >= 0, "mkstemp: %s", strerror(errno));
    g_data = malloc(FILE_BYTES);
    ck_assert_ptr_nonnull(g_data);
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; i < FILE_BYTES; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        g_data[i] = (unsigned char)(x >> 24);
    }
    ck_assert_int_eq(write(fd, g_data, FILE_BYTES), (ssize_t)FILE_BYTES);
    close(fd);
}

static void file_teardown(void)
{
    unlink(g_path);
    free(g_data);
}

/* Reads [off, off + n) into a buffer at alignment `align` (mod 64) and
 * checks bytes, checksum and the guard bytes around the buffer. */
static void check_read(ckpt_sio *s, int fd, uint64_t off, size_t n,
                       unsigned align, int with_sum)
{
    unsigned char *mem = NULL;
    ck_assert_int_eq(posix_memalign((void **)&mem, 64, n + 256), 0);
    memset(mem, 0x5a, n + 256);
    unsigned char *dst = mem + 64 + align;
    uint64_t sum = 0;
    ckpt_error err = { 0 };
    int rc = ckpt_sio_read(s, fd, dst, n, off, with_sum ? &sum : NULL,
                           g_path, &err);
    ck_assert_msg(rc == 0, "read off %llu n %zu align %u: %s",
                  (unsigned long long)off, n, align, err.msg);
    ck_assert_msg(memcmp(dst, g_data + off, n) == 0,
                  "bytes differ: off %llu n %zu align %u (%s path)",
                  (unsigned long long)off, n, align,
                  ckpt_sio_direct(dst, off) ? "direct" : "bounced");
    if (with_sum)
        ck_assert_msg(sum == (uint64_t)XXH3_64bits(g_data + off, n),
                      "checksum differs: off %llu n %zu align %u",
                      (unsigned long long)off, n, align);
    for (size_t i = 0; i < 64 + align; i++)
        ck_assert_msg(mem[i] == 0x5a, "wrote before the buffer");
    for (size_t i = 64 + align + n; i < n + 256; i++)
        ck_assert_msg(mem[i] == 0x5a, "wrote past the buffer");
    free(mem);
}

START_TEST(test_every_alignment)
{
    int fd = open(g_path, O_RDONLY);
    ckpt_sio *s = ckpt_sio_new();
    ck_assert_ptr_nonnull(s);
    /* Both paths are taken: some alignments go direct, others bounce. */
    static unsigned char line[128] __attribute__((aligned(64)));
    int direct = 0, bounced = 0;
    for (unsigned a = 0; a < 64; a++)
        for (uint64_t off = 0; off < 64; off += 7) {
            check_read(s, fd, off, 3 * PIECE + 77, a, 1);
            direct += ckpt_sio_direct(line + a, off);
            bounced += !ckpt_sio_direct(line + a, off);
        }
    ck_assert_int_gt(direct, 0);
    ck_assert_int_gt(bounced, 0);
    ckpt_sio_free(s);
    close(fd);
}
END_TEST

START_TEST(test_lengths_around_pieces)
{
    static const size_t lens[] = {
        1, 2, 63, 64, 65, 4095, 4096, PIECE - 1, PIECE, PIECE + 1,
        2 * PIECE, 2 * PIECE + 3, 4 * PIECE + 1000,
    };
    int fd = open(g_path, O_RDONLY);
    ckpt_sio *s = ckpt_sio_new();
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        for (unsigned a = 0; a < 64; a += 16)
            for (int sum = 0; sum < 2; sum++) {
                uint64_t off = (lens[i] * 31) % (FILE_BYTES - lens[i]);
                check_read(s, fd, off, lens[i], a, sum);
                check_read(s, fd, FILE_BYTES - lens[i], lens[i], a + 3, sum);
            }
    check_read(s, fd, 0, 0, 5, 1);   /* nothing to read: the empty hash */
    ckpt_sio_free(s);
    close(fd);
}
END_TEST

START_TEST(test_stored_buffer)
{
    int fd = open(g_path, O_RDONLY);
    ckpt_sio *s = ckpt_sio_new();
    ckpt_error err = { 0 };
    /* Growing and shrinking requests reuse the one buffer. */
    static const size_t lens[] = { 10, PIECE * 3, 1, 500000, 64 };
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        for (uint64_t off = 0; off < 130; off += 13) {
            const unsigned char *p = NULL;
            ck_assert_int_eq(ckpt_sio_stored(s, fd, lens[i], off, &p, g_path,
                                             &err), 0);
            ck_assert_msg(memcmp(p, g_data + off, lens[i]) == 0,
                          "stored bytes differ at off %llu n %zu",
                          (unsigned long long)off, lens[i]);
            /* placed at the file offset's alignment */
            ck_assert_uint_eq((uintptr_t)p % 64, off % 64);
        }
    ckpt_sio_free(s);
    close(fd);
}
END_TEST

START_TEST(test_past_the_end)
{
    int fd = open(g_path, O_RDONLY);
    ckpt_sio *s = ckpt_sio_new();
    unsigned char *buf = malloc(PIECE * 2 + 64);
    ckpt_error err = { 0 };
    uint64_t sum;
    for (int a = 0; a < 2; a++) {
        memset(&err, 0, sizeof err);
        int rc = ckpt_sio_read(s, fd, buf + a * 16, PIECE * 2,
                               FILE_BYTES - PIECE, &sum, g_path, &err);
        ck_assert_int_eq(rc, -EIO);
        ck_assert_int_eq(err.code, -EIO);
        ck_assert_msg(strstr(err.msg, g_path) && strstr(err.msg, "truncated"),
                      "message: %s", err.msg);
    }
    const unsigned char *p;
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(ckpt_sio_stored(s, fd, 100, FILE_BYTES - 50, &p, g_path,
                                     &err), -EIO);
    ck_assert_msg(strstr(err.msg, g_path) != NULL, "message: %s", err.msg);
    free(buf);
    ckpt_sio_free(s);
    close(fd);
}
END_TEST

START_TEST(test_mapping)
{
    char path[256];
    snprintf(path, sizeof path, "%s.map", g_path);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, g_data, FILE_BYTES), (ssize_t)FILE_BYTES);
    ckpt_smap m;
    ckpt_smap_open(&m, fd);
    ck_assert_ptr_nonnull(m.base);
    ck_assert_uint_eq(m.len, FILE_BYTES);
    /* just written: every page is in the page cache */
    static const uint64_t offs[] = { 0, 1, 4095, 4096, 70001 };
    static const size_t lens[] = { 1, 4097, PIECE * 3 + 5 };
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++)
        for (size_t j = 0; j < sizeof lens / sizeof lens[0]; j++) {
            const unsigned char *p = ckpt_smap_resident(&m, offs[i], lens[j]);
            ck_assert_msg(p != NULL, "off %llu n %zu not resident",
                          (unsigned long long)offs[i], lens[j]);
            ck_assert(memcmp(p, g_data + offs[i], lens[j]) == 0);
        }
    /* the whole file, and nothing past its end */
    ck_assert_ptr_nonnull(ckpt_smap_resident(&m, 0, FILE_BYTES));
    ck_assert_ptr_null(ckpt_smap_resident(&m, 0, FILE_BYTES + 1));
    ck_assert_ptr_null(ckpt_smap_resident(&m, FILE_BYTES - 10, 11));
    ck_assert_ptr_null(ckpt_smap_resident(&m, FILE_BYTES + 1, 1));
    ck_assert_ptr_null(ckpt_smap_resident(&m, UINT64_MAX, 2));
    ck_assert_ptr_null(ckpt_smap_resident(&m, 5, 0));
    /* truncated under the mapping: the bytes past the new end are gone
     * from the page cache, so they are not served (touching them would
     * raise SIGBUS); those before it still are */
    ck_assert_int_eq(ftruncate(fd, FILE_BYTES / 2), 0);
    ck_assert_ptr_null(ckpt_smap_resident(&m, FILE_BYTES / 2 + 8192, 100));
    ck_assert_ptr_null(ckpt_smap_resident(&m, 0, FILE_BYTES));
    const unsigned char *p = ckpt_smap_resident(&m, 0, 100);
    ck_assert_ptr_nonnull(p);
    ck_assert(memcmp(p, g_data, 100) == 0);
    ckpt_smap_close(&m);
    ck_assert_ptr_null(m.base);
    ck_assert_ptr_null(ckpt_smap_resident(&m, 0, 1));
    /* an empty file maps to nothing, and serves nothing */
    ck_assert_int_eq(ftruncate(fd, 0), 0);
    ckpt_smap_open(&m, fd);
    ck_assert_ptr_null(m.base);
    ck_assert_ptr_null(ckpt_smap_resident(&m, 0, 1));
    ckpt_smap_close(&m);
    close(fd);
    unlink(path);
}
END_TEST

static Suite *shardio_suite(void)
{
    Suite *su = suite_create("shardio");
    TCase *tc = tcase_create("reads");
    tcase_add_unchecked_fixture(tc, file_setup, file_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_every_alignment);
    tcase_add_test(tc, test_lengths_around_pieces);
    tcase_add_test(tc, test_stored_buffer);
    tcase_add_test(tc, test_past_the_end);
    tcase_add_test(tc, test_mapping);
    suite_add_tcase(su, tc);
    return su;
}

int main(void)
{
    return unit_run(shardio_suite());
}
