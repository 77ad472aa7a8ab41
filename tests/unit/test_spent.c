/*
 * test_spent.c - a committed save's .pending/ off the commit's path
 * (src/write/spent.c): the commit moves it aside, whole, to a hidden
 * spent directory beside the checkpoint; the next commit beside it
 * removes every spent directory it finds there, whole or half removed (a
 * crash midway), and nothing else: not a link that bears the name, not
 * a file, not what a link points to (also when the link stands where the
 * directory was).  When no spent name can be taken, the commit removes
 * .pending/ in place.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptfs.h"
#include "common/fileio.h"
#include "write/spent.h"
#include "unit_util.h"

/* Writes and commits root/name: one writer, one 4 x 4 f32 tensor whose
 * values are seed + i. */
static void save(const char *root, const char *name, float seed)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    float v[16];
    for (int i = 0; i < 16; i++)
        v[i] = seed + (float)i;
    int64_t shape[2] = { 4, 4 }, off[2] = { 0, 0 };
    ckpt_piece p = { "w", CKPT_F32, 2, shape, off, shape, v };
    ckpt_writer *w;
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_writer_open(&w, dir, "rank0", NULL, &err) == 0, "%s",
                  err.msg);
    ck_assert_msg(ckpt_writer_put(w, &p, &err) == 0, "%s", err.msg);
    ck_assert_msg(ckpt_writer_close(w, &err) == 0, "%s", err.msg);
    ck_assert_msg(ckpt_commit(dir, NULL, &err) == 0, "%s", err.msg);
}

/* The values of root/name's tensor are seed + i. */
static void check_values(const char *root, const char *name, float seed)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    ckpt_reader *r;
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_reader_open(&r, dir, NULL, &err) == 0, "%s", err.msg);
    float v[16];
    long idx = ckpt_reader_find(r, "w");
    ck_assert_int_ge(idx, 0);
    ck_assert_msg(ckpt_read_region(r, (size_t)idx, NULL, NULL, v, &err) == 0,
                  "%s", err.msg);
    for (int i = 0; i < 16; i++)
        ck_assert_float_eq(v[i], seed + (float)i);
    ckpt_reader_close(r);
}

/* How many entries of root are spent directories; the last one's name
 * into last (cap bytes). */
static int spent_dirs(const char *root, char *last, size_t cap)
{
    DIR *d = opendir(root);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char p[1024];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", root, e->d_name);
        if (strncmp(e->d_name, CKPT_SPENT_PREFIX,
                    strlen(CKPT_SPENT_PREFIX)) == 0 &&
            lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            n++;
            snprintf(last, cap, "%s", e->d_name);
        }
    }
    closedir(d);
    return n;
}

static int exists(const char *root, const char *rel)
{
    char p[1024];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", root, rel);
    return lstat(p, &st) == 0;
}

static void put_file(const char *root, const char *rel)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs("x\n", f);
    ck_assert_int_eq(fclose(f), 0);
}

static void put_dir(const char *root, const char *rel)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    ck_assert_int_eq(mkdir(p, 0755), 0);
}

/* Makes root/dir with n plan files, rank0.plan ... */
static void put_plans(const char *root, const char *dir, int n)
{
    put_dir(root, dir);
    for (int i = 0; i < n; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "%s/rank%d.plan", dir, i);
        put_file(root, rel);
    }
}

/* 1 when root/dir still has its n plan files. */
static int has_plans(const char *root, const char *dir, int n)
{
    for (int i = 0; i < n; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "%s/rank%d.plan", dir, i);
        if (!exists(root, rel))
            return 0;
    }
    return 1;
}

START_TEST(test_commit_moves_pending_aside)
{
    char *root = make_tmpdir_tagged("spent");
    save(root, "step-1", 1);
    /* Committed, no .pending/ left in it: what a status read and the
     * listings call committed. */
    ck_assert(exists(root, "step-1/index.db"));
    ck_assert(!exists(root, "step-1/.pending"));
    check_values(root, "step-1", 1);
    /* Its plans are beside it, whole, under one spent name. */
    char name[256], rel[600];
    ck_assert_int_eq(spent_dirs(root, name, sizeof name), 1);
    ck_assert_msg(strstr(name, "step-1") != NULL, "%s", name);
    snprintf(rel, sizeof rel, "%s/rank0.plan", name);
    ck_assert_msg(exists(root, rel), "%s has no rank0.plan", name);
    remove_tmpdir(root);
}
END_TEST

START_TEST(test_commit_removes_pending_when_no_move)
{
    /* Every name the move could take is held (by files, which no sweep
     * removes): the move fails, and the commit removes .pending/ in
     * place instead of leaving it in the checkpoint. */
    char *root = make_tmpdir_tagged("spent");
    for (unsigned n = 0; n < 1000; n++) {
        char rel[256];
        snprintf(rel, sizeof rel, CKPT_SPENT_PREFIX "%ld.%u.step-1",
                 (long)getpid(), n);
        put_file(root, rel);
    }
    save(root, "step-1", 1);
    ck_assert(exists(root, "step-1/index.db"));
    ck_assert(!exists(root, "step-1/.pending"));
    char name[256];
    ck_assert_int_eq(spent_dirs(root, name, sizeof name), 0);
    check_values(root, "step-1", 1);
    remove_tmpdir(root);
}
END_TEST

START_TEST(test_next_commit_removes_spent)
{
    char *root = make_tmpdir_tagged("spent");
    save(root, "step-1", 1);
    /* What a crash left: a spent directory half removed (files, a
     * subdirectory), and things that bear the name but are not spent
     * directories: a file, and a link to a directory outside. */
    put_dir(root, CKPT_SPENT_PREFIX "1.0.step-0");
    put_file(root, CKPT_SPENT_PREFIX "1.0.step-0/rank7.plan");
    put_dir(root, CKPT_SPENT_PREFIX "1.0.step-0/sub");
    put_file(root, CKPT_SPENT_PREFIX "1.0.step-0/sub/lease");
    put_file(root, CKPT_SPENT_PREFIX "2.0.file");
    put_dir(root, "outside");
    put_file(root, "outside/keep");
    char link[600], target[600];
    snprintf(link, sizeof link, "%s/" CKPT_SPENT_PREFIX "3.0.link", root);
    snprintf(target, sizeof target, "%s/outside", root);
    ck_assert_int_eq(symlink(target, link), 0);
    char before[256], name[256];
    ck_assert_int_eq(spent_dirs(root, before, sizeof before), 2);

    save(root, "step-2", 2);
    /* Only step-2's own is left; both earlier ones went, the rest stays. */
    ck_assert_int_eq(spent_dirs(root, name, sizeof name), 1);
    ck_assert_msg(strstr(name, "step-2") != NULL, "%s", name);
    ck_assert(!exists(root, CKPT_SPENT_PREFIX "1.0.step-0"));
    ck_assert(exists(root, CKPT_SPENT_PREFIX "2.0.file"));
    ck_assert(exists(root, CKPT_SPENT_PREFIX "3.0.link"));
    ck_assert(exists(root, "outside/keep"));
    check_values(root, "step-1", 1);
    check_values(root, "step-2", 2);
    remove_tmpdir(root);
}
END_TEST

START_TEST(test_remove_many)
{
    /* More files than the unlink threads take at once, and a
     * subdirectory: all of it goes. */
    char *root = make_tmpdir_tagged("spent");
    put_plans(root, "d", 100);
    put_dir(root, "d/sub");
    put_file(root, "d/sub/x");
    char p[600];
    snprintf(p, sizeof p, "%s/d", root);
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_spent_remove(p, &err) == 0, "%s", err.msg);
    ck_assert(!exists(root, "d"));
    remove_tmpdir(root);
}
END_TEST

START_TEST(test_remove_link_not_followed)
{
    /* A link in the place of the directory to remove (another user's,
     * swapped in after it was looked at): the link goes, not the files
     * of what it points to. */
    char *root = make_tmpdir_tagged("spent");
    put_plans(root, "target", 40);
    char link[600], target[600];
    snprintf(link, sizeof link, "%s/d", root);
    snprintf(target, sizeof target, "%s/target", root);
    ck_assert_int_eq(symlink(target, link), 0);
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_spent_remove(link, &err) == 0, "%s", err.msg);
    ck_assert(!exists(root, "d"));
    ck_assert_msg(has_plans(root, "target", 40), "the link was followed");
    remove_tmpdir(root);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("spent");
    TCase *tc = tcase_create("spent");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_commit_moves_pending_aside);
    tcase_add_test(tc, test_commit_removes_pending_when_no_move);
    tcase_add_test(tc, test_next_commit_removes_spent);
    tcase_add_test(tc, test_remove_many);
    tcase_add_test(tc, test_remove_link_not_followed);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(suite());
}
