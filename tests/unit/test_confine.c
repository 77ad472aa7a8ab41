/*
 * test_confine.c - unit tests of reading a checkpoint's files without leaving
 * its directory (src/common/confine.c): plain files and subdirectories, every
 * kind of symbolic link refused (out, in, through a directory, dangling),
 * paths that leave the directory, FIFOs, the Hugging Face cache snapshot
 * exception and its exact link form, and the opt-in; of one file opened at a
 * directory descriptor for a writer (ckpt_confine_at: links, FIFOs, owners,
 * creation) and a save's .pending/ control files (src/format/pending.c),
 * read with a bound; and of the owner and mode that stand for several files
 * (src/common/perm.c).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/confine.h"
#include "common/fileio.h"
#include "common/perm.h"
#include "format/lease.h"
#include "format/pending.h"
#include "unit_util.h"

static char base[4096];

static void path_of(char *out, const char *rel)
{
    snprintf(out, 4200, "%s/%s", base, rel);
}

static void mk(const char *rel, const char *content)
{
    char p[4200];
    path_of(p, rel);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(content, f);
    fclose(f);
}

static void mkd(const char *rel)
{
    char p[4200];
    path_of(p, rel);
    ck_assert_int_eq(mkdir(p, 0755), 0);
}

static void lnk(const char *target, const char *rel)
{
    char p[4200];
    path_of(p, rel);
    ck_assert_int_eq(symlink(target, p), 0);
}

static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(base, sizeof base, "%s/ckpt-confine.XXXXXX", tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(base));
    mkd("ck");
    mkd("ck/data");
    mk("ck/data/a.shard", "inside");
    mk("outside", "secret");
    mkd("outdir");
    mk("outdir/a.shard", "secret too");
}

static void teardown(void)
{
    ckpt_remove_tree(base, NULL);
}

/* Opens rel below dir (relative to base); returns the fd or -errno, and
 * checks the content when it opens. */
static int try_open(const char *dir, int follow, const char *rel,
                    const char *want, ckpt_error *err)
{
    char d[4200];
    path_of(d, dir);
    ckpt_confine c;
    ck_assert_int_eq(ckpt_confine_open(&c, d, follow, err), 0);
    int fd = ckpt_confine_openat(&c, rel, err);
    if (fd >= 0) {
        char buf[64] = { 0 };
        ck_assert_int_ge(read(fd, buf, sizeof buf - 1), 0);
        if (want)
            ck_assert_str_eq(buf, want);
        close(fd);
    }
    ckpt_confine_close(&c);
    return fd >= 0 ? 0 : fd;
}

START_TEST(test_plain_and_refused)
{
    ckpt_error err = { 0 };
    ck_assert_int_eq(try_open("ck", 0, "data/a.shard", "inside", &err), 0);
    ck_assert_int_eq(try_open("ck", 0, "./data//a.shard", "inside", &err), 0);
    ck_assert_int_eq(try_open("ck", 0, "data/none", NULL, &err), -ENOENT);

    lnk("../../outside", "ck/data/out.shard");           /* relative, out */
    ck_assert_int_eq(try_open("ck", 0, "data/out.shard", NULL, &err), -ELOOP);
    ck_assert_msg(strstr(err.msg, "data/out.shard is, or lies under, a "
                         "symbolic link"), "%s", err.msg);
    ck_assert_msg(!strstr(err.msg, "secret"), "%s", err.msg);
    lnk("a.shard", "ck/data/in.shard");                   /* inside, too */
    ck_assert_int_eq(try_open("ck", 0, "data/in.shard", NULL, &err), -ELOOP);
    lnk("../outdir", "ck/sub");                          /* a directory */
    ck_assert_int_eq(try_open("ck", 0, "sub/a.shard", NULL, &err), -ELOOP);
    lnk("/nonexistent/x", "ck/data/dangling");
    ck_assert_int_eq(try_open("ck", 0, "data/dangling", NULL, &err), -ELOOP);

    ck_assert_int_eq(try_open("ck", 0, "../outside", NULL, &err), -EINVAL);
    ck_assert_int_eq(try_open("ck", 0, "data/../../outside", NULL, &err),
                     -EINVAL);
    char abs[4200];
    path_of(abs, "outside");
    ck_assert_int_eq(try_open("ck", 0, abs, NULL, &err), -EINVAL);
    ck_assert_int_eq(try_open("ck", 0, "", NULL, &err), -EINVAL);
    ck_assert_int_eq(try_open("ck", 0, "data", NULL, &err), -EINVAL);

    char fifo[4200];
    path_of(fifo, "ck/data/fifo");
    ck_assert_int_eq(mkfifo(fifo, 0644), 0);
    ck_assert_int_eq(try_open("ck", 0, "data/fifo", NULL, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "not a regular file"), "%s", err.msg);

    /* the opt-in follows links wherever they lead */
    ck_assert_int_eq(try_open("ck", 1, "data/out.shard", "secret", &err), 0);
    ck_assert_int_eq(try_open("ck", 1, "sub/a.shard", "secret too", &err), 0);
    /* the directory itself may be reached through a link */
    lnk("ck", "cklink");
    ck_assert_int_eq(try_open("cklink", 0, "data/a.shard", "inside", &err),
                     0);
    struct stat st;
    char d[4200];
    path_of(d, "ck");
    ckpt_confine c;
    ck_assert_int_eq(ckpt_confine_open(&c, d, 0, &err), 0);
    ck_assert_int_eq(ckpt_confine_stat(&c, "data/a.shard", &st, &err), 0);
    ck_assert_int_eq(st.st_size, 6);
    ck_assert_int_eq(ckpt_confine_stat(&c, "data/out.shard", &st, &err),
                     -ELOOP);
    ckpt_confine_close(&c);
}
END_TEST

START_TEST(test_hugging_face)
{
    ckpt_error err = { 0 };
    mkd("hub");
    mkd("hub/models--org--m");
    mkd("hub/models--org--m/blobs");
    mkd("hub/models--org--m/refs");
    mkd("hub/models--org--m/snapshots");
    mkd("hub/models--org--m/snapshots/rev1");
    mkd("hub/models--org--m/snapshots/rev1/sub");
    mk("hub/models--org--m/blobs/b1", "blob one");
    mk("hub/models--org--m/refs/main", "a ref");
    const char *snap = "hub/models--org--m/snapshots/rev1";
    lnk("../../blobs/b1", "hub/models--org--m/snapshots/rev1/m.st");
    lnk("../../../blobs/b1", "hub/models--org--m/snapshots/rev1/sub/m.st");
    lnk("../../blobs/b1", "hub/models--org--m/snapshots/rev1/sub/short");
    lnk("../../refs/main", "hub/models--org--m/snapshots/rev1/ref");
    lnk("../../blobs/../refs/main", "hub/models--org--m/snapshots/rev1/dots");
    lnk("../../blobs/", "hub/models--org--m/snapshots/rev1/dir");
    char blob[4200];
    path_of(blob, "hub/models--org--m/blobs/b1");
    lnk(blob, "hub/models--org--m/snapshots/rev1/abs");
    ck_assert_int_eq(try_open(snap, 0, "m.st", "blob one", &err), 0);
    ck_assert_int_eq(try_open(snap, 0, "sub/m.st", "blob one", &err), 0);
    ck_assert_int_eq(try_open(snap, 0, "sub/short", NULL, &err), -ELOOP);
    ck_assert_int_eq(try_open(snap, 0, "ref", NULL, &err), -ELOOP);
    ck_assert_int_eq(try_open(snap, 0, "dots", NULL, &err), -ELOOP);
    ck_assert_int_eq(try_open(snap, 0, "dir", NULL, &err), -ELOOP);
    ck_assert_int_eq(try_open(snap, 0, "abs", NULL, &err), -ELOOP);
    /* only below models--*: the same layout elsewhere is not trusted */
    mkd("other");
    mkd("other/blobs");
    mkd("other/snapshots");
    mkd("other/snapshots/rev1");
    mk("other/blobs/b1", "blob one");
    lnk("../../blobs/b1", "other/snapshots/rev1/m.st");
    ck_assert_int_eq(try_open("other/snapshots/rev1", 0, "m.st", NULL, &err),
                     -ELOOP);
    /* a blob that is itself a link is not followed */
    lnk("../../../outside", "hub/models--org--m/blobs/b2");
    lnk("../../blobs/b2", "hub/models--org--m/snapshots/rev1/b2");
    ck_assert_int_eq(try_open(snap, 0, "b2", NULL, &err), -ELOOP);
}
END_TEST

/* ckpt_confine_at: one component below a directory descriptor. */
START_TEST(test_confine_at)
{
    char d[4200], p[4200];
    path_of(d, "ck/data");
    int dfd = open(d, O_PATH | O_DIRECTORY);
    ck_assert_int_ge(dfd, 0);
    uid_t me = geteuid();
    int fd = ckpt_confine_at(dfd, "a.shard", O_RDONLY, 0, me);
    ck_assert_int_ge(fd, 0);
    char buf[4];
    ck_assert_int_eq(ckpt_read_bounded(fd, buf, sizeof buf), 3);
    ck_assert_str_eq(buf, "ins");                 /* cut at the bound */
    close(fd);
    /* another owner than the one wanted */
    ck_assert_int_eq(ckpt_confine_at(dfd, "a.shard", O_RDONLY, 0, me + 1),
                     -EPERM);
    ck_assert_int_ge(fd = ckpt_confine_at(dfd, "a.shard", O_RDONLY, 0,
                                          CKPT_ANY_OWNER), 0);
    close(fd);
    /* a link, to a file or to a missing one: neither followed nor made */
    lnk("../../outside", "ck/data/out");
    lnk("../../made", "ck/data/dangling");
    ck_assert_int_eq(ckpt_confine_at(dfd, "out", O_RDONLY, 0, me), -ELOOP);
    ck_assert_int_eq(ckpt_confine_at(dfd, "out", O_RDWR | O_CREAT, 0644, me),
                     -ELOOP);
    ck_assert_int_lt(ckpt_confine_at(dfd, "dangling", O_WRONLY | O_CREAT |
                                     O_APPEND, 0644, me), 0);
    path_of(p, "made");
    ck_assert_int_ne(access(p, F_OK), 0);
    /* a FIFO opens without blocking, and is refused */
    path_of(p, "ck/data/fifo");
    ck_assert_int_eq(mkfifo(p, 0644), 0);
    ck_assert_int_eq(ckpt_confine_at(dfd, "fifo", O_RDONLY, 0, me), -EINVAL);
    ck_assert_int_lt(ckpt_confine_at(dfd, "fifo", O_WRONLY | O_APPEND, 0, me),
                     0);                  /* -ENXIO: no reader; or -EINVAL */
    /* a directory only when asked for one; names that are no component */
    ck_assert_int_eq(ckpt_confine_at(dfd, "..", O_RDONLY, 0, me), -EINVAL);
    ck_assert_int_eq(ckpt_confine_at(dfd, "", O_RDONLY, 0, me), -EINVAL);
    ck_assert_int_lt(ckpt_confine_at(dfd, "../data/a.shard", O_RDONLY, 0, me),
                     0);
    /* created exclusively: a second creation is -EEXIST */
    ck_assert_int_ge(fd = ckpt_confine_at(dfd, "new", O_WRONLY | O_CREAT |
                                          O_EXCL, 0600, me), 0);
    close(fd);
    ck_assert_int_eq(ckpt_confine_at(dfd, "new", O_WRONLY | O_CREAT | O_EXCL,
                                     0600, me), -EEXIST);
    close(dfd);
}
END_TEST

/* A save's .pending/: its own user's directory, its control files read
 * with a bound, links and FIFOs counting as absent. */
START_TEST(test_pending)
{
    char d[4200], p[4200];
    ckpt_error err = { 0 };
    path_of(d, "ck");
    ck_assert_int_eq(ckpt_pending_open(d, 1, &err), -ENOENT);
    mkd("ck/.pending");
    int pfd = ckpt_pending_open(d, 1, &err);
    ck_assert_int_ge(pfd, 0);
    mk("ck/.pending/failed", "why it failed\n");
    lnk("../../outside", "ck/.pending/unsynced");
    path_of(p, "ck/.pending/errors.f");
    ck_assert_int_eq(mkfifo(p, 0644), 0);
    mk("ck/.pending/errors.z", "");
    path_of(p, "ck/.pending/errors.z");
    ck_assert_int_eq(truncate(p, (off_t)1 << 36), 0);   /* 64 GiB, sparse */
    char buf[64];
    ck_assert_int_eq(ckpt_pending_read(pfd, "failed", buf, sizeof buf), 1);
    ck_assert_str_eq(buf, "why it failed\n");
    ck_assert_int_eq(ckpt_pending_read(pfd, "unsynced", buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(ckpt_pending_read(pfd, "errors.f", buf, sizeof buf), 0);
    ck_assert_int_eq(ckpt_pending_read(pfd, "errors.z", buf, sizeof buf), 1);
    ck_assert_int_eq(ckpt_pending_file(pfd, d, "unsynced", O_RDONLY, &err),
                     -ELOOP);
    ck_assert_ptr_nonnull(strstr(err.msg, "symbolic link"));
    /* the unsynced mark: a link is a mark (never read), a real one is read */
    ck_assert_int_eq(ckpt_save_unsynced(d, buf, sizeof buf), 1);
    ck_assert_ptr_null(strstr(buf, "secret"));
    close(pfd);
    /* .pending/ itself a link: refused */
    path_of(p, "ck/.pending");
    ck_assert_int_eq(ckpt_remove_tree(p, NULL), 0);
    mkd("elsewhere");
    lnk("../elsewhere", "ck/.pending");
    ck_assert_int_eq(ckpt_pending_open(d, 0, &err), -ENOTDIR);
    ck_assert_ptr_nonnull(strstr(err.msg, "not followed"));
}
END_TEST

static struct stat st_of(uid_t uid, gid_t gid, mode_t mode)
{
    struct stat st;
    memset(&st, 0, sizeof st);
    st.st_uid = uid;
    st.st_gid = gid;
    st.st_mode = S_IFREG | mode;
    return st;
}

START_TEST(test_perm)
{
    ckpt_perm p;
    struct stat a = st_of(10, 20, 0644), b = st_of(10, 20, 0600);
    ckpt_perm_init(&p, &a);
    ck_assert_uint_eq(p.mode, 0644);
    ckpt_perm_add(&p, &b);         /* one owner and group: the AND */
    ck_assert_uint_eq(p.mode, 0600);
    ck_assert_uint_eq(p.uid, 10);
    ck_assert_uint_eq(p.gid, 20);

    /* another owner's 0640 file: our owner may or may not be in its group
     * (r or nothing: nothing), others nothing */
    struct stat c = st_of(11, 20, 0640);
    ckpt_perm_init(&p, &a);
    ckpt_perm_add(&p, &c);
    ck_assert_uint_eq(p.mode, 0040);
    /* another owner's 0644: everyone reads it, but only its owner may
     * write it, whom ours may not be */
    struct stat d = st_of(11, 21, 0644);
    ckpt_perm_init(&p, &a);
    ckpt_perm_add(&p, &d);
    ck_assert_uint_eq(p.mode, 0444);
    /* a file whose group is denied what others get (0604): a member of
     * our group may be in its group */
    struct stat e = st_of(10, 21, 0604);
    ckpt_perm_init(&p, &a);
    ckpt_perm_add(&p, &e);
    ck_assert_uint_eq(p.mode, 0600);
    /* a file that cannot be looked at grants nothing */
    ckpt_perm_init(&p, &a);
    ckpt_perm_add_none(&p);
    ck_assert_uint_eq(p.mode, 0);
    /* bits beyond rwx are not carried */
    struct stat f = st_of(10, 20, 04755);
    ckpt_perm_init(&p, &f);
    ck_assert_uint_eq(p.mode, 0755);

    /* a directory to search on the way: 0711 lets everyone through, so
     * the file's own bits stand; 0700 of the same owner keeps only the
     * owner's; 0750 of another owner and our group: our owner may be in
     * that group or not (nothing), our group's members are (kept) */
    struct stat g = st_of(10, 20, 0711), h = st_of(10, 20, 0700);
    struct stat k = st_of(11, 20, 0750);
    ckpt_perm_init(&p, &a);
    ckpt_perm_add_search(&p, &g);
    ck_assert_uint_eq(p.mode, 0644);
    ckpt_perm_add_search(&p, &h);
    ck_assert_uint_eq(p.mode, 0600);
    ckpt_perm_init(&p, &a);
    ckpt_perm_add_search(&p, &k);
    ck_assert_uint_eq(p.mode, 0040);
}
END_TEST

static Suite *confine_suite(void)
{
    Suite *s = suite_create("confine");
    TCase *tc = tcase_create("confine");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_plain_and_refused);
    tcase_add_test(tc, test_hugging_face);
    tcase_add_test(tc, test_confine_at);
    tcase_add_test(tc, test_pending);
    tcase_add_test(tc, test_perm);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(confine_suite());
}
