/*
 * test_fileio.c - unit tests of src/common/fileio.c: the append-only shard
 * file (offsets, size, content, writeback past 32 MiB, with and without
 * dropping the written pages from the page cache, ENOSPC on a full tmpfs,
 * appends of every alignment through its bounce buffer), full reads and
 * writes, fsync of files and directories, mkdir and mkdir -p, path joining,
 * and recursive removal that never follows symlinks.  Every error case checks
 * the code and that the message names the file and the problem.
 *
 * Each test is its own TCase with an *unchecked* fixture: the temporary
 * directory (and the tmpfs of the ENOSPC test) is made and removed by the
 * runner process, so cleanup happens even when an assertion fails.  (A
 * checked teardown would not do: in fork mode a failed assertion _exits the
 * test process before its checked teardown runs.)
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "unit_util.h"

/* ------------------------------------------------------------ fixture */

static char g_dir[PATH_MAX];        /* this test's mkdtemp directory */
static char g_mnt[PATH_MAX];        /* the tmpfs mount point, if any */
static int g_mounted;
static char g_no_mount[512];        /* why the tmpfs could not be mounted */
static int g_cleanup_failures;      /* counted by the runner process */

static void dir_setup(void)
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    int r = snprintf(g_dir, sizeof g_dir, "%s/ckpt_test_fileio.XXXXXX", tmp);
    ck_assert_msg(r > 0 && (size_t)r < sizeof g_dir, "TMPDIR too long");
    ck_assert_msg(mkdtemp(g_dir) != NULL, "mkdtemp %s: %s", g_dir,
                  strerror(errno));
    g_mnt[0] = '\0';
    g_mounted = 0;
    g_no_mount[0] = '\0';
}

/* The directory plus a 64 KiB tmpfs mounted at <dir>/mnt (root only). */
static void mount_setup(void)
{
    dir_setup();
    /* A failed unchecked setup skips the teardown: clean up here. */
    int r = snprintf(g_mnt, sizeof g_mnt, "%s/mnt", g_dir);
    if (r <= 0 || (size_t)r >= sizeof g_mnt || mkdir(g_mnt, 0755) != 0) {
        int e = errno;
        (void)rmdir(g_dir);
        ck_abort_msg("cannot make a mount point in %s: %s", g_dir,
                     strerror(e));
    }
    if (mount("tmpfs", g_mnt, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "size=64k,mode=0755") == 0)
        g_mounted = 1;
    else if (snprintf(g_no_mount, sizeof g_no_mount,
                      "cannot mount a 64 KiB tmpfs on %s: %s", g_mnt,
                      strerror(errno)) < 0)
        strcpy(g_no_mount, "cannot mount a 64 KiB tmpfs");
}

static int rm_entry(const char *path, const struct stat *st, int type,
                    struct FTW *ftw)
{
    if (remove(path) != 0 && errno != ENOENT) {
        fprintf(stderr, "test_fileio: cleanup: cannot remove %s: %s\n", path,
                strerror(errno));
        g_cleanup_failures++;
    }
    return 0;
}

/* Runs in the runner process after every test, passed or not.  Does not
 * use ck_assert (in fork mode that would _exit the runner); failures are
 * counted and make main() fail. */
static void fixture_teardown(void)
{
    if (g_mounted) {
        if (umount(g_mnt) != 0 && umount2(g_mnt, MNT_DETACH) != 0) {
            fprintf(stderr, "test_fileio: cleanup: cannot unmount %s: %s\n",
                    g_mnt, strerror(errno));
            g_cleanup_failures++;
        }
        g_mounted = 0;
    }
    if (g_dir[0] &&
        nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) != 0 &&
        errno != ENOENT) {
        fprintf(stderr, "test_fileio: cleanup: cannot walk %s: %s\n", g_dir,
                strerror(errno));
        g_cleanup_failures++;
    }
    g_dir[0] = '\0';
    g_mnt[0] = '\0';
}

/* ------------------------------------------------------------ helpers */

/* <test dir>/<rel> into buf (PATH_MAX bytes). */
static void tpath(char *buf, const char *rel)
{
    int r = snprintf(buf, PATH_MAX, "%s/%s", g_dir, rel);
    ck_assert_msg(r > 0 && r < PATH_MAX, "path too long");
}

static void fill(unsigned char *buf, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        buf[i] = (unsigned char)((s * 0x2545F4914F6CDD1DULL) >> 56);
    }
}

static void write_file(const char *path, const void *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
    ck_assert_msg(write(fd, data, n) == (ssize_t)n, "write %s", path);
    ck_assert_int_eq(close(fd), 0);
}

/* Reads exactly n bytes from fd with plain read(). */
static void read_exact(int fd, void *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = read(fd, (char *)buf + done, n - done);
        ck_assert_msg(r > 0, "read: %s", r < 0 ? strerror(errno) : "EOF");
        done += (size_t)r;
    }
}

/* The whole file with plain read(); *n is its size. */
static unsigned char *slurp(const char *path, size_t *n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    *n = (size_t)st.st_size;
    unsigned char *buf = xmalloc(*n);
    read_exact(fd, buf, *n);
    char extra;
    ck_assert_int_eq(read(fd, &extra, 1), 0);
    ck_assert_int_eq(close(fd), 0);
    return buf;
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static int is_dir(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Asserts that a call returned `code`, stored it in err, and that the
 * message contains each of up to three needles (NULL: none). */
#define EXPECT_ERR(rc, err, code, n1, n2, n3) \
    expect_err(__LINE__, (rc), &(err), (code), (n1), (n2), (n3))

static void expect_err(int line, int rc, const ckpt_error *err, int code,
                       const char *n1, const char *n2, const char *n3)
{
    ck_assert_msg(rc == code, "line %d: rc %d, expected %d (%s)", line, rc,
                  code, err->msg);
    ck_assert_msg(err->code == code, "line %d: err.code %d, expected %d",
                  line, err->code, code);
    const char *needles[3] = {n1, n2, n3};
    for (int i = 0; i < 3; i++)
        ck_assert_msg(!needles[i] || strstr(err->msg, needles[i]),
                      "line %d: message \"%s\" lacks \"%s\"", line, err->msg,
                      needles[i]);
}

/* ------------------------------------------------------------ shard */

START_TEST(test_shard_append_and_read_back)
{
    char path[PATH_MAX];
    tpath(path, "shard.bin");
    ckpt_error err = {0, ""};
    ckpt_shard *s = NULL;

    ck_assert_int_eq(ckpt_shard_create(&s, path, &err), 0);
    ck_assert_ptr_nonnull(s);
    ck_assert_str_eq(ckpt_shard_path(s), path);
    ck_assert_uint_eq(ckpt_shard_size(s), 0);

    /* Pieces of varied sizes, including an empty one (NULL buffer). */
    static const size_t sizes[] = {5, 0, 1000, 1, 4097, 65536 + 3};
    enum { NPIECES = sizeof sizes / sizeof sizes[0] };
    size_t total = 0;
    for (int i = 0; i < NPIECES; i++)
        total += sizes[i];
    unsigned char *expect = xmalloc(total);
    fill(expect, total, 1);

    uint64_t running = 0;
    for (int i = 0; i < NPIECES; i++) {
        uint64_t off = UINT64_MAX;
        const void *buf = sizes[i] ? expect + running : NULL;
        ck_assert_int_eq(ckpt_shard_append(s, buf, sizes[i], &off, &err), 0);
        ck_assert_uint_eq(off, running);
        running += sizes[i];
        ck_assert_uint_eq(ckpt_shard_size(s), running);

        if (i == 2) {
            /* A second create of the same path fails and leaves the
             * shard's file alone. */
            ckpt_shard *s2 = NULL;
            int rc = ckpt_shard_create(&s2, path, &err);
            EXPECT_ERR(rc, err, -EEXIST, path, "cannot create shard file",
                       strerror(EEXIST));
            ck_assert_ptr_null(s2);
        }
    }
    /* A NULL offset pointer is allowed. */
    ck_assert_int_eq(ckpt_shard_append(s, "", 0, NULL, &err), 0);
    ck_assert_uint_eq(ckpt_shard_size(s), total);

    ck_assert_int_eq(ckpt_shard_sync(s, &err), 0);

    size_t n;
    unsigned char *got = slurp(path, &n);
    ck_assert_uint_eq(n, total);
    ck_assert_msg(memcmp(got, expect, total) == 0,
                  "file content differs from the appended buffers");
    free(got);

    ck_assert_int_eq(ckpt_shard_close(s, &err), 0);

    /* Closing did not change the file. */
    got = slurp(path, &n);
    ck_assert_uint_eq(n, total);
    ck_assert(memcmp(got, expect, total) == 0);
    free(got);
    free(expect);
}
END_TEST

/* Appends from buffers at every alignment, at file offsets of every
 * alignment: those the kernel copies slowly go through the shard's bounce
 * buffer (ckpt_copy_fast says which), in pieces of 128 KiB; the file must
 * hold exactly the bytes appended.  Also ckpt_copy_blocks itself. */
START_TEST(test_shard_append_alignments)
{
    char path[PATH_MAX];
    tpath(path, "aligned.bin");
    ckpt_error err = {0, ""};
    ckpt_shard *s = NULL;
    ck_assert_int_eq(ckpt_shard_create(&s, path, &err), 0);
    enum { MAXN = 300000 };
    unsigned char *src = NULL;
    ck_assert_int_eq(posix_memalign((void **)&src, 64, MAXN + 64), 0);
    size_t cap = 64 * (MAXN + 64), total = 0;
    unsigned char *expect = xmalloc(cap);
    int slow = 0, fast = 0;
    for (unsigned a = 0; a < 64; a += 3) {
        size_t n = a % 2 ? 4096 + a * 4099 % MAXN : 131072 + 7 * a;
        if (n > MAXN)
            n = MAXN;
        fill(src + a, n, a + 5);
        if (ckpt_copy_fast((uintptr_t)(src + a), total))
            fast++;
        else
            slow++;
        uint64_t off;
        ck_assert_int_eq(ckpt_shard_append(s, src + a, n, &off, &err), 0);
        ck_assert_uint_eq(off, total);
        memcpy(expect + total, src + a, n);
        total += n;
    }
    ck_assert_int_gt(slow, 0);   /* both paths were taken */
    ck_assert_int_gt(fast, 0);
    ck_assert_int_eq(ckpt_shard_close(s, &err), 0);
    size_t got_n = 0;
    unsigned char *got = slurp(path, &got_n);
    ck_assert_uint_eq(got_n, total);
    ck_assert(memcmp(got, expect, total) == 0);
    /* ckpt_copy_blocks: every length around its block, every alignment */
    for (size_t n = 0; n < 5000; n += 97)
        for (unsigned a = 0; a < 64; a += 13) {
            memset(got, 0x5a, n + 128);
            ckpt_copy_blocks(got + a, expect + 7, n);
            ck_assert(memcmp(got + a, expect + 7, n) == 0);
            ck_assert_uint_eq(got[a + n], 0x5a);
            for (unsigned k = 0; k < a; k++)
                ck_assert_uint_eq(got[k], 0x5a);
        }
    free(got);
    free(expect);
    free(src);
}
END_TEST

START_TEST(test_shard_create_refusals)
{
    char path[PATH_MAX], missing[PATH_MAX];
    ckpt_error err = {0, ""};
    ckpt_shard *s = NULL;

    /* An existing file is neither opened nor truncated. */
    tpath(path, "existing.bin");
    write_file(path, "precious", 8);
    int rc = ckpt_shard_create(&s, path, &err);
    EXPECT_ERR(rc, err, -EEXIST, path, strerror(EEXIST), NULL);
    ck_assert_ptr_null(s);
    size_t n;
    unsigned char *got = slurp(path, &n);
    ck_assert_uint_eq(n, 8);
    ck_assert(memcmp(got, "precious", 8) == 0);
    free(got);

    /* A missing directory. */
    tpath(missing, "no/such/dir/shard.bin");
    rc = ckpt_shard_create(&s, missing, &err);
    EXPECT_ERR(rc, err, -ENOENT, missing, "cannot create shard file",
               strerror(ENOENT));
    ck_assert_ptr_null(s);

    /* Bad arguments. */
    rc = ckpt_shard_create(&s, NULL, &err);
    EXPECT_ERR(rc, err, -EINVAL, "no path", NULL, NULL);
    rc = ckpt_shard_create(NULL, path, &err);
    EXPECT_ERR(rc, err, -EINVAL, NULL, NULL, NULL);
    rc = ckpt_shard_append(NULL, "x", 1, NULL, &err);
    EXPECT_ERR(rc, err, -EINVAL, "no shard", NULL, NULL);
    rc = ckpt_shard_sync(NULL, &err);
    EXPECT_ERR(rc, err, -EINVAL, "no shard", NULL, NULL);
    ck_assert_uint_eq(ckpt_shard_size(NULL), 0);
    ck_assert_ptr_null(ckpt_shard_path(NULL));
    ck_assert_int_eq(ckpt_shard_close(NULL, &err), 0);

    /* A NULL buffer with a length is refused and appends nothing. */
    char fresh[PATH_MAX];
    tpath(fresh, "fresh.bin");
    ck_assert_int_eq(ckpt_shard_create(&s, fresh, &err), 0);
    rc = ckpt_shard_append(s, NULL, 4, NULL, &err);
    EXPECT_ERR(rc, err, -EINVAL, NULL, NULL, NULL);
    ck_assert_uint_eq(ckpt_shard_size(s), 0);
    ck_assert_int_eq(ckpt_shard_close(s, &err), 0);
}
END_TEST

/* 3 x 16 MiB appends cross the 32 MiB writeback step once; an odd-sized
 * tail follows.  Each append starts at a different place of one buffer so
 * that the pieces differ, and the whole file is compared byte for byte. */
/* Pages of the file at fd that are in the page cache. */
static size_t resident_pages(int fd, size_t size)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = (size + pg - 1) / pg;
    void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(m, MAP_FAILED);
    unsigned char *v = xmalloc(n);
    ck_assert_int_eq(mincore(m, size, v), 0);
    size_t in = 0;
    for (size_t i = 0; i < n; i++)
        in += v[i] & 1;
    free(v);
    munmap(m, size);
    return in;
}

/* Appends past several writeback steps, syncs, and reads back; with
 * nocache, the synced file must have left the page cache (where the file
 * system keeps one: not on tmpfs). */
static void large_writeback(int nocache)
{
    enum { PIECE = 16 << 20, NBIG = 3, TAIL = 4097, SHIFT = 7 };
    char path[PATH_MAX];
    tpath(path, "big.bin");
    ckpt_error err = {0, ""};
    ckpt_shard *s = NULL;
    size_t buflen = (size_t)PIECE + NBIG * SHIFT + TAIL;
    unsigned char *buf = xmalloc(buflen);
    fill(buf, buflen, 42);

    const unsigned char *src[NBIG + 1];
    size_t len[NBIG + 1];
    for (int i = 0; i < NBIG; i++) {
        src[i] = buf + (size_t)i * SHIFT;
        len[i] = PIECE;
    }
    src[NBIG] = buf + PIECE;
    len[NBIG] = TAIL;

    ck_assert_int_eq(ckpt_shard_create(&s, path, &err), 0);
    ckpt_shard_set_nocache(s, nocache);
    uint64_t running = 0;
    for (int i = 0; i <= NBIG; i++) {
        uint64_t off = UINT64_MAX;
        int rc = ckpt_shard_append(s, src[i], len[i], &off, &err);
        ck_assert_msg(rc == 0, "append %d: %s", i, err.msg);
        ck_assert_uint_eq(off, running);
        running += len[i];
        ck_assert_uint_eq(ckpt_shard_size(s), running);
    }
    ck_assert_uint_eq(running, (uint64_t)NBIG * PIECE + TAIL);
    ck_assert_int_eq(ckpt_shard_sync(s, &err), 0);
    ck_assert_int_eq(ckpt_shard_close(s, &err), 0);

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_uint_eq((uint64_t)st.st_size, running);
    struct statfs sf;
    ck_assert_int_eq(fstatfs(fd, &sf), 0);
    if (nocache && sf.f_type != TMPFS_MAGIC) {
        size_t in = resident_pages(fd, (size_t)running);
        ck_assert_msg(in == 0, "%zu pages of the synced shard are still "
                      "cached", in);
    }
    enum { CHUNK = 1 << 20 };
    unsigned char *chunk = xmalloc(CHUNK);
    uint64_t pos = 0;
    for (int i = 0; i <= NBIG; i++) {
        for (size_t k = 0; k < len[i]; k += CHUNK) {
            size_t m = len[i] - k < CHUNK ? len[i] - k : CHUNK;
            read_exact(fd, chunk, m);
            ck_assert_msg(memcmp(chunk, src[i] + k, m) == 0,
                          "content differs in the %llu bytes at offset %llu",
                          (unsigned long long)m, (unsigned long long)pos);
            pos += m;
        }
    }
    ck_assert_int_eq(read(fd, chunk, 1), 0);
    ck_assert_int_eq(close(fd), 0);
    free(chunk);
    free(buf);
}

START_TEST(test_shard_large_writeback)
{
    large_writeback(0);
}
END_TEST

START_TEST(test_shard_large_writeback_nocache)
{
    large_writeback(1);
}
END_TEST

/* On a 64 KiB tmpfs: a 1 MiB append fails with -ENOSPC naming the file,
 * leaves the tracked size alone, and the next append lands where the
 * failed one started. */
START_TEST(test_shard_enospc)
{
    if (!g_mounted) {
        fprintf(stderr, "test_fileio: SKIP test_shard_enospc: %s\n",
                g_no_mount);
        return;
    }
    char path[PATH_MAX];
    int r = snprintf(path, sizeof path, "%s/shard.bin", g_mnt);
    ck_assert(r > 0 && r < (int)sizeof path);
    ckpt_error err = {0, ""};
    ckpt_shard *s = NULL;
    enum { BIG = 1 << 20, HEAD = 1000, NEXT = 10 };
    unsigned char *buf = xmalloc(BIG);
    fill(buf, BIG, 7);

    ck_assert_int_eq(ckpt_shard_create(&s, path, &err), 0);
    uint64_t off = UINT64_MAX;
    ck_assert_int_eq(ckpt_shard_append(s, buf, HEAD, &off, &err), 0);
    ck_assert_uint_eq(off, 0);

    off = 12345;
    int rc = ckpt_shard_append(s, buf, BIG, &off, &err);
    EXPECT_ERR(rc, err, -ENOSPC, path, strerror(ENOSPC), "cannot write");
    ck_assert_uint_eq(off, 12345);              /* not set on failure */
    ck_assert_uint_eq(ckpt_shard_size(s), HEAD);

    /* The partial bytes are overwritten by the next append. */
    ck_assert_int_eq(ckpt_shard_append(s, buf + HEAD + 500, NEXT, &off, &err),
                     0);
    ck_assert_uint_eq(off, HEAD);
    ck_assert_uint_eq(ckpt_shard_size(s), HEAD + NEXT);
    ck_assert_int_eq(ckpt_shard_close(s, &err), 0);

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    unsigned char got[HEAD + NEXT];
    read_exact(fd, got, sizeof got);
    ck_assert(memcmp(got, buf, HEAD) == 0);
    ck_assert(memcmp(got + HEAD, buf + HEAD + 500, NEXT) == 0);
    ck_assert_int_eq(close(fd), 0);
    free(buf);
}
END_TEST

/* ------------------------------------------------------------ read/write */

START_TEST(test_write_full)
{
    char path[PATH_MAX];
    tpath(path, "wf.bin");
    ckpt_error err = {0, ""};
    unsigned char data[70000];
    fill(data, sizeof data, 3);

    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ckpt_write_full(fd, data, 100, path, &err), 0);
    ck_assert_int_eq(ckpt_write_full(fd, NULL, 0, path, &err), 0);
    ck_assert_int_eq(ckpt_write_full(fd, data + 100, sizeof data - 100, path,
                                     &err), 0);
    int rc = ckpt_write_full(fd, NULL, 5, path, &err);
    EXPECT_ERR(rc, err, -EINVAL, path, "no buffer", NULL);
    ck_assert_int_eq(close(fd), 0);

    size_t n;
    unsigned char *got = slurp(path, &n);
    ck_assert_uint_eq(n, sizeof data);
    ck_assert(memcmp(got, data, n) == 0);
    free(got);

    /* A descriptor not open for writing. */
    fd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    rc = ckpt_write_full(fd, data, 10, path, &err);
    EXPECT_ERR(rc, err, -EBADF, path, "cannot write 10 bytes",
               strerror(EBADF));
    rc = ckpt_write_full(fd, data, 10, NULL, &err);
    EXPECT_ERR(rc, err, -EBADF, "(unnamed file)", NULL, NULL);
    ck_assert_int_eq(close(fd), 0);
}
END_TEST

/* /dev/full: every write fails with ENOSPC. */
START_TEST(test_write_full_enospc)
{
    int fd = open("/dev/full", O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "test_fileio: SKIP test_write_full_enospc: cannot "
                "open /dev/full: %s\n", strerror(errno));
        return;
    }
    ckpt_error err = {0, ""};
    unsigned char data[4096];
    memset(data, 0xab, sizeof data);
    int rc = ckpt_write_full(fd, data, sizeof data, "/dev/full", &err);
    EXPECT_ERR(rc, err, -ENOSPC, "/dev/full", strerror(ENOSPC),
               "cannot write 4096 bytes");
    ck_assert_int_eq(close(fd), 0);
}
END_TEST

START_TEST(test_pread_full)
{
    char path[PATH_MAX];
    tpath(path, "pr.bin");
    ckpt_error err = {0, ""};
    unsigned char data[100], got[100];
    fill(data, sizeof data, 9);
    write_file(path, data, sizeof data);

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ckpt_pread_full(fd, got, 100, 0, path, &err), 0);
    ck_assert(memcmp(got, data, 100) == 0);
    memset(got, 0, sizeof got);
    ck_assert_int_eq(ckpt_pread_full(fd, got, 30, 70, path, &err), 0);
    ck_assert(memcmp(got, data + 70, 30) == 0);
    ck_assert_int_eq(ckpt_pread_full(fd, NULL, 0, 5000, path, &err), 0);

    /* Past the end: 20 of the 50 bytes exist. */
    int rc = ckpt_pread_full(fd, got, 50, 80, path, &err);
    EXPECT_ERR(rc, err, -EIO, path, "truncated", "offset 80");
    ck_assert_ptr_nonnull(strstr(err.msg, "wanted 50 bytes"));
    ck_assert_ptr_nonnull(strstr(err.msg, "got 20"));

    /* Wholly past the end. */
    rc = ckpt_pread_full(fd, got, 10, 500, path, &err);
    EXPECT_ERR(rc, err, -EIO, path, "truncated", "offset 500");
    ck_assert_ptr_nonnull(strstr(err.msg, "got 0"));

    rc = ckpt_pread_full(fd, NULL, 10, 0, path, &err);
    EXPECT_ERR(rc, err, -EINVAL, path, "no buffer", NULL);
    rc = ckpt_pread_full(fd, got, 10, UINT64_MAX - 3, path, &err);
    EXPECT_ERR(rc, err, -EINVAL, path, "out of range", NULL);
    ck_assert_int_eq(close(fd), 0);

    /* A descriptor not open for reading. */
    fd = open(path, O_WRONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    rc = ckpt_pread_full(fd, got, 10, 0, path, &err);
    EXPECT_ERR(rc, err, -EBADF, path, "cannot read 10 bytes at offset 0",
               strerror(EBADF));
    ck_assert_int_eq(close(fd), 0);
}
END_TEST

/* ------------------------------------------------------------ fsync */

START_TEST(test_fsync)
{
    char file[PATH_MAX], missing[PATH_MAX];
    tpath(file, "f.bin");
    tpath(missing, "missing");
    ckpt_error err = {0, ""};
    write_file(file, "abc", 3);

    ck_assert_int_eq(ckpt_fsync_path(file, &err), 0);
    ck_assert_int_eq(ckpt_fsync_path(g_dir, &err), 0);
    int rc = ckpt_fsync_path(missing, &err);
    EXPECT_ERR(rc, err, -ENOENT, missing, "cannot open", strerror(ENOENT));
    rc = ckpt_fsync_path(NULL, &err);
    EXPECT_ERR(rc, err, -EINVAL, "no path", NULL, NULL);

    ck_assert_int_eq(ckpt_fsync_dir(g_dir, &err), 0);
    rc = ckpt_fsync_dir(file, &err);
    EXPECT_ERR(rc, err, -ENOTDIR, file, "cannot open directory",
               strerror(ENOTDIR));
    rc = ckpt_fsync_dir(missing, &err);
    EXPECT_ERR(rc, err, -ENOENT, missing, "cannot open directory",
               strerror(ENOENT));
    rc = ckpt_fsync_dir(NULL, &err);
    EXPECT_ERR(rc, err, -EINVAL, "no directory", NULL, NULL);
}
END_TEST

/* ------------------------------------------------------------ mkdir */

START_TEST(test_mkdir)
{
    char dir[PATH_MAX], file[PATH_MAX], orphan[PATH_MAX];
    tpath(dir, "d");
    tpath(file, "plain");
    tpath(orphan, "nope/child");
    ckpt_error err = {0, ""};

    mode_t mask = umask(022);
    ck_assert_int_eq(ckpt_mkdir(dir, &err), 0);
    umask(mask);
    struct stat st;
    ck_assert_int_eq(lstat(dir, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
    ck_assert_uint_eq(st.st_mode & 07777, 0755);

    ck_assert_int_eq(ckpt_mkdir(dir, &err), 0);         /* exists: fine */

    write_file(file, "x", 1);
    int rc = ckpt_mkdir(file, &err);
    EXPECT_ERR(rc, err, -EEXIST, file, "not a directory", NULL);
    ck_assert(!is_dir(file));

    rc = ckpt_mkdir(orphan, &err);
    EXPECT_ERR(rc, err, -ENOENT, orphan, "cannot create directory",
               strerror(ENOENT));

    rc = ckpt_mkdir(NULL, &err);
    EXPECT_ERR(rc, err, -EINVAL, "no path", NULL, NULL);
}
END_TEST

START_TEST(test_mkdirs)
{
    char abc[PATH_MAX], a[PATH_MAX], ab[PATH_MAX], p[PATH_MAX];
    ckpt_error err = {0, ""};
    tpath(abc, "a/b/c");
    tpath(a, "a");
    tpath(ab, "a/b");

    ck_assert_int_eq(ckpt_mkdirs(abc, &err), 0);
    ck_assert(is_dir(a) && is_dir(ab) && is_dir(abc));
    ck_assert_int_eq(ckpt_mkdirs(abc, &err), 0);        /* exists: fine */
    ck_assert_int_eq(ckpt_mkdirs(ab, &err), 0);

    /* A trailing slash and doubled slashes. */
    tpath(p, "a/b/c/d/");
    ck_assert_int_eq(ckpt_mkdirs(p, &err), 0);
    tpath(p, "a/b/c/d");
    ck_assert(is_dir(p));
    tpath(p, "x//y///z");
    ck_assert_int_eq(ckpt_mkdirs(p, &err), 0);
    tpath(p, "x/y/z");
    ck_assert(is_dir(p));

    /* A path through a regular file. */
    char file[PATH_MAX], through[PATH_MAX];
    tpath(file, "a/file");
    write_file(file, "x", 1);
    tpath(through, "a/file/m/n");
    int rc = ckpt_mkdirs(through, &err);
    EXPECT_ERR(rc, err, -EEXIST, file, "not a directory", NULL);
    ck_assert(!is_dir(file));

    /* Too long, and empty. */
    char *longp = xmalloc(PATH_MAX + 1);
    memset(longp, 'q', PATH_MAX);
    longp[PATH_MAX] = '\0';
    rc = ckpt_mkdirs(longp, &err);
    EXPECT_ERR(rc, err, -ENAMETOOLONG, "cannot create directory", "qqqq",
               NULL);
    free(longp);
    rc = ckpt_mkdirs("", &err);
    ck_assert_int_lt(rc, 0);
    ck_assert_int_eq(err.code, rc);
    rc = ckpt_mkdirs(NULL, &err);
    ck_assert_int_lt(rc, 0);
}
END_TEST

/* ------------------------------------------------------------ path join */

START_TEST(test_path_join)
{
    char buf[64];
    ckpt_error err = {0, ""};

    ck_assert_int_eq(ckpt_path_join(buf, sizeof buf, "a", "b", &err), 0);
    ck_assert_str_eq(buf, "a/b");
    ck_assert_int_eq(ckpt_path_join(buf, sizeof buf, "dir/", "f", &err), 0);
    ck_assert_str_eq(buf, "dir/f");
    ck_assert_int_eq(ckpt_path_join(buf, sizeof buf, "", "f", &err), 0);
    ck_assert_str_eq(buf, "f");
    ck_assert_int_eq(ckpt_path_join(buf, sizeof buf, "/", "f", &err), 0);
    ck_assert_str_eq(buf, "/f");

    /* Exactly fits: "ab/cd" is 5 bytes plus the NUL. */
    ck_assert_int_eq(ckpt_path_join(buf, 6, "ab", "cd", &err), 0);
    ck_assert_str_eq(buf, "ab/cd");

    /* One byte short. */
    strcpy(buf, "junk");
    int rc = ckpt_path_join(buf, 5, "ab", "cd", &err);
    EXPECT_ERR(rc, err, -ENAMETOOLONG, "ab/cd", "too long", "at most 4");
    ck_assert_str_eq(buf, "");

    /* Long parts. */
    char a[200], b[200];
    memset(a, 'a', sizeof a - 1);
    a[sizeof a - 1] = '\0';
    memset(b, 'b', sizeof b - 1);
    b[sizeof b - 1] = '\0';
    rc = ckpt_path_join(buf, sizeof buf, a, b, &err);
    EXPECT_ERR(rc, err, -ENAMETOOLONG, "too long", "399 bytes", NULL);
    ck_assert_str_eq(buf, "");

    rc = ckpt_path_join(buf, 0, "a", "b", &err);
    EXPECT_ERR(rc, err, -ENAMETOOLONG, NULL, NULL, NULL);
    rc = ckpt_path_join(buf, sizeof buf, NULL, "b", &err);
    EXPECT_ERR(rc, err, -EINVAL, NULL, NULL, NULL);
    rc = ckpt_path_join(buf, sizeof buf, "a", NULL, &err);
    EXPECT_ERR(rc, err, -EINVAL, NULL, NULL, NULL);
}
END_TEST

/* ------------------------------------------------------------ remove */

START_TEST(test_remove_tree)
{
    char p[PATH_MAX], tree[PATH_MAX], out_file[PATH_MAX], out_dir[PATH_MAX],
        out_inner[PATH_MAX];
    ckpt_error err = {0, ""};

    /* Outside the tree: a file and a directory with a file in it. */
    tpath(p, "outside");
    ck_assert_int_eq(mkdir(p, 0755), 0);
    tpath(out_file, "outside/keep.txt");
    write_file(out_file, "keep", 4);
    tpath(out_dir, "outside/keepdir");
    ck_assert_int_eq(mkdir(out_dir, 0755), 0);
    tpath(out_inner, "outside/keepdir/inner.txt");
    write_file(out_inner, "inner", 5);

    /* The tree: nested directories with files, an empty directory, a fifo,
     * and symlinks out of it (absolute and relative), plus a dangling one. */
    tpath(tree, "tree");
    tpath(p, "tree/a/b/c");
    ck_assert_int_eq(ckpt_mkdirs(p, &err), 0);
    tpath(p, "tree/empty");
    ck_assert_int_eq(mkdir(p, 0755), 0);
    tpath(p, "tree/top.txt");
    write_file(p, "t", 1);
    tpath(p, "tree/a/f1");
    write_file(p, "1", 1);
    tpath(p, "tree/a/b/c/deep.txt");
    write_file(p, "deep", 4);
    tpath(p, "tree/a/fifo");
    ck_assert_int_eq(mkfifo(p, 0644), 0);
    tpath(p, "tree/link_file");
    ck_assert_int_eq(symlink(out_file, p), 0);
    tpath(p, "tree/a/link_dir");
    ck_assert_int_eq(symlink(out_dir, p), 0);
    tpath(p, "tree/a/b/rel_link_dir");
    ck_assert_int_eq(symlink("../../../outside/keepdir", p), 0);
    ck_assert(is_dir(p) == 0 && exists(p));
    {
        struct stat st;
        ck_assert_int_eq(stat(p, &st), 0);   /* resolves to keepdir */
        ck_assert(S_ISDIR(st.st_mode));
    }
    tpath(p, "tree/a/b/dangling");
    ck_assert_int_eq(symlink("/nonexistent/ckpt/target", p), 0);

    ck_assert_int_eq(ckpt_remove_tree(tree, &err), 0);
    ck_assert_msg(!exists(tree), "%s still exists", tree);

    /* The symlink targets survive, content and all. */
    size_t n;
    unsigned char *got = slurp(out_file, &n);
    ck_assert_uint_eq(n, 4);
    ck_assert(memcmp(got, "keep", 4) == 0);
    free(got);
    ck_assert(is_dir(out_dir));
    got = slurp(out_inner, &n);
    ck_assert_uint_eq(n, 5);
    ck_assert(memcmp(got, "inner", 5) == 0);
    free(got);

    /* A missing path (and one under a missing parent) is success. */
    ck_assert_int_eq(ckpt_remove_tree(tree, &err), 0);
    tpath(p, "never/was/here");
    ck_assert_int_eq(ckpt_remove_tree(p, &err), 0);

    /* A top path that is a symlink to a directory: only the link goes. */
    tpath(p, "top_link");
    ck_assert_int_eq(symlink(out_dir, p), 0);
    ck_assert_int_eq(ckpt_remove_tree(p, &err), 0);
    ck_assert(!exists(p));
    ck_assert(exists(out_inner));

    /* A top path that is a regular file. */
    tpath(p, "lone.txt");
    write_file(p, "z", 1);
    ck_assert_int_eq(ckpt_remove_tree(p, &err), 0);
    ck_assert(!exists(p));

    /* A path through a regular file cannot be inspected. */
    tpath(p, "outside/keep.txt/sub");
    int rc = ckpt_remove_tree(p, &err);
    EXPECT_ERR(rc, err, -ENOTDIR, p, "cannot inspect", strerror(ENOTDIR));
    ck_assert(exists(out_file));

    rc = ckpt_remove_tree(NULL, &err);
    EXPECT_ERR(rc, err, -EINVAL, "no path", NULL, NULL);
}
END_TEST

/* Nesting deeper than the walk allows is refused with -ELOOP, not a crash
 * or a stack overflow. */
START_TEST(test_remove_tree_too_deep)
{
    enum { DEPTH = 300 };
    char top[PATH_MAX], p[PATH_MAX];
    ckpt_error err = {0, ""};
    tpath(top, "deep");
    ck_assert_int_eq(mkdir(top, 0755), 0);
    size_t len = strlen(top);
    memcpy(p, top, len + 1);
    for (int i = 0; i < DEPTH; i++) {
        ck_assert_uint_lt(len + 3, sizeof p);
        memcpy(p + len, "/d", 3);
        len += 2;
        ck_assert_msg(mkdir(p, 0755) == 0, "mkdir level %d: %s", i,
                      strerror(errno));
    }
    int rc = ckpt_remove_tree(top, &err);
    EXPECT_ERR(rc, err, -ELOOP, top, "deep", NULL);
}
END_TEST

/* ------------------------------------------------------------ main */

static void add_case(Suite *s, const TTest *t, void (*setup)(void),
                     double timeout)
{
    TCase *tc = tcase_create(t->name);
    tcase_add_unchecked_fixture(tc, setup, fixture_teardown);
    tcase_set_timeout(tc, timeout);
    tcase_add_test(tc, t);
    suite_add_tcase(s, tc);
}

static Suite *fileio_suite(void)
{
    Suite *s = suite_create("fileio");
    add_case(s, test_shard_append_and_read_back, dir_setup, 10);
    add_case(s, test_shard_append_alignments, dir_setup, 30);
    add_case(s, test_shard_create_refusals, dir_setup, 10);
    add_case(s, test_shard_large_writeback, dir_setup, 60);
    add_case(s, test_shard_large_writeback_nocache, dir_setup, 60);
    add_case(s, test_shard_enospc, mount_setup, 10);
    add_case(s, test_write_full, dir_setup, 10);
    add_case(s, test_write_full_enospc, dir_setup, 10);
    add_case(s, test_pread_full, dir_setup, 10);
    add_case(s, test_fsync, dir_setup, 10);
    add_case(s, test_mkdir, dir_setup, 10);
    add_case(s, test_mkdirs, dir_setup, 10);
    add_case(s, test_path_join, dir_setup, 10);
    add_case(s, test_remove_tree, dir_setup, 10);
    add_case(s, test_remove_tree_too_deep, dir_setup, 10);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(fileio_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (g_cleanup_failures)
        fprintf(stderr, "test_fileio: %d cleanup failure(s)\n",
                g_cleanup_failures);
    return failed || g_cleanup_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
