/*
 * test_gc.c - leases on saves in progress (src/format/lease.c), what gc
 * removes and when (src/write/gc.c), the retention policy, and the commit's
 * refusals that protect saves: a save retired by gc while its committer
 * waited, a shard that could not be synced, a declared tensor without a piece.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckptfs.h"
#include "common/fileio.h"
#include "write/gc.h"
#include "write/spent.h"
#include "format/lease.h"
#include "write/writer.h"
#include "unit_util.h"

#define HOUR_NS (3600LL * 1000000000LL)

/* ------------------------------------------------------------ helpers */

static char *make_tmpdir(void)
{
    return make_tmpdir_tagged("gc");
}

static void join(char *buf, const char *a, const char *b)
{
    snprintf(buf, 4096, "%s/%s", a, b);
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* A save with one writer's piece "a" (16 floats = i), not committed. */
static void make_save(const char *dir, const char *writer)
{
    ckpt_writer *w;
    ckpt_error err = { 0 };
    float v[16];
    for (int i = 0; i < 16; i++)
        v[i] = (float)i;
    int64_t shape[1] = { 16 };
    ckpt_piece p = { "a", CKPT_F32, 1, shape, NULL, NULL, v };
    ck_assert_msg(ckpt_writer_open(&w, dir, writer, NULL, &err) == 0, "%s",
                  err.msg);
    ck_assert_msg(ckpt_writer_put(w, &p, &err) == 0, "%s", err.msg);
    ck_assert_msg(ckpt_writer_close(w, &err) == 0, "%s", err.msg);
}

/* Sets the mtime of path, and of every file directly in it, `ago_s`
 * seconds into the past. */
static void age_tree(const char *path, int ago_s)
{
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= ago_s;
    t[1] = t[0];
    const char *subs[] = { "", "/.pending", "/data", "/.pending/lease" };
    char p[4096];
    for (size_t i = 0; i < sizeof subs / sizeof *subs; i++) {
        snprintf(p, sizeof p, "%s%s", path, subs[i]);
        (void)utimensat(AT_FDCWD, p, t, AT_SYMLINK_NOFOLLOW);
    }
    const char *files[] = { "/.pending/w0.plan", "/data/w0.shard",
                            "/.pending/w1.plan", "/data/w1.shard" };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(p, sizeof p, "%s%s", path, files[i]);
        (void)utimensat(AT_FDCWD, p, t, AT_SYMLINK_NOFOLLOW);
    }
}

/* Number of entries of dir whose name starts with prefix. */
static int count_prefixed(const char *dir, const char *prefix)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -c '^%s' >/dev/null",
             dir, prefix);
    return system(cmd) == 0;
}

/* ------------------------------------------------------------ leases */

START_TEST(test_lease_blocks_gc)
{
    char *tmp = make_tmpdir(), dir[4096];
    join(dir, tmp, "s");
    ckpt_error err = { 0 };
    ckpt_lease *a, *b;
    ck_assert_msg(ckpt_save_begin(&a, dir, &err) == 0, "%s", err.msg);
    ck_assert_msg(ckpt_lease_take(&b, dir, 0, &err) == 0, "%s", err.msg);
    int fd, created;
    ck_assert_int_eq(ckpt_lease_lock_exclusive(dir, 1, &fd, &created, &err),
                     -EBUSY);
    ckpt_lease_drop(a);
    /* One lease left: still live. */
    ck_assert_int_eq(ckpt_lease_lock_exclusive(dir, 1, &fd, &created, &err),
                     -EBUSY);
    ckpt_lease_drop(b);
    ck_assert_int_eq(ckpt_lease_lock_exclusive(dir, 1, &fd, &created, &err),
                     0);
    ck_assert_int_eq(created, 0);
    ck_assert_int_ge(fd, 0);
    close(fd);
    remove_tmpdir(tmp);
}
END_TEST

START_TEST(test_lease_dies_with_process)
{
    char *tmp = make_tmpdir(), dir[4096];
    join(dir, tmp, "s");
    int ready[2];
    ck_assert_int_eq(pipe(ready), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        ckpt_lease *l;
        if (ckpt_save_begin(&l, dir, NULL) != 0)
            _exit(1);
        (void)write(ready[1], "x", 1);
        for (;;)
            pause();
    }
    char c;
    ck_assert_int_eq(read(ready[0], &c, 1), 1);
    int fd, created;
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_lease_lock_exclusive(dir, 1, &fd, &created, &err),
                     -EBUSY);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    ck_assert_int_eq(ckpt_lease_lock_exclusive(dir, 1, &fd, &created, &err),
                     0);
    close(fd);
    close(ready[0]);
    close(ready[1]);
    remove_tmpdir(tmp);
}
END_TEST

START_TEST(test_lease_heartbeat)
{
    char *tmp = make_tmpdir(), dir[4096], path[4200];
    join(dir, tmp, "s");
    ckpt_error err = { 0 };
    ckpt_lease *l;
    ck_assert_msg(ckpt_save_begin(&l, dir, &err) == 0, "%s", err.msg);
    ckpt_lease_drop(l);
    ck_assert_msg(ckpt_lease_take(&l, dir, 50, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, "%s/" CKPT_LEASE_PATH, dir);
    int64_t t0 = 0, t1 = 0;
    for (int i = 0; i < 100 && t1 <= t0; i++) {
        age_tree(dir, 7200);
        ck_assert_int_eq(ckpt_save_activity(dir, 0, &t0, &err), 0);
        usleep(200000);
        ck_assert_int_eq(ckpt_save_activity(dir, 0, &t1, &err), 0);
    }
    ck_assert_msg(t1 > t0, "the heartbeat never touched the lease");
    ckpt_lease_drop(l);
    remove_tmpdir(tmp);
}
END_TEST

/* A thread that takes a lease (or commits) while the main thread holds
 * gc's exclusive lock. */
typedef struct waiter {
    const char *dir;
    int commit;
    int rc;
    ckpt_error err;
} waiter;

static void *waiter_run(void *arg)
{
    waiter *w = arg;
    if (w->commit) {
        w->rc = ckpt_commit(w->dir, NULL, &w->err);
    } else {
        ckpt_lease *l = NULL;
        w->rc = ckpt_lease_take(&l, w->dir, 0, &w->err);
        ckpt_lease_drop(l);
    }
    return NULL;
}

/* gc holds the lock; a commit (or lease) starts and waits; gc retires the
 * save or lets it go.  Returns the waiter's result. */
static int race_with_gc(const char *tmp, int commit, int retire, waiter *w)
{
    char dir[4096], moved[4096];
    join(dir, tmp, "s");
    join(moved, tmp, ".moved");
    make_save(dir, "w0");
    int fd, created;
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_lease_lock_exclusive(dir, 1, &fd, &created, &err),
                     0);
    *w = (waiter){ .dir = dir, .commit = commit };
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, waiter_run, w), 0);
    usleep(200000);          /* the waiter is blocked on the lock by now */
    if (retire)
        ck_assert_int_eq(rename(dir, moved), 0);
    close(fd);
    pthread_join(t, NULL);
    return w->rc;
}

START_TEST(test_commit_waits_for_gc)
{
    char *tmp = make_tmpdir(), idx[4200];
    waiter w;
    /* gc retires the save while the commit waits: the commit fails with
     * ESTALE and publishes nothing, neither here nor where gc put it. */
    ck_assert_int_eq(race_with_gc(tmp, 1, 1, &w), -ESTALE);
    ck_assert_msg(strstr(w.err.msg, "removed by ckpt gc"), "%s", w.err.msg);
    snprintf(idx, sizeof idx, "%s/.moved/index.db", tmp);
    ck_assert(!exists(idx));
    snprintf(idx, sizeof idx, "%s/s/index.db", tmp);
    ck_assert(!exists(idx));
    remove_tmpdir(tmp);
    /* gc finds the save young and lets go: the commit goes on. */
    tmp = make_tmpdir();
    ck_assert_msg(race_with_gc(tmp, 1, 0, &w) == 0, "%s", w.err.msg);
    snprintf(idx, sizeof idx, "%s/s/index.db", tmp);
    ck_assert(exists(idx));
    remove_tmpdir(tmp);
    /* A writer's lease the same way. */
    tmp = make_tmpdir();
    ck_assert_int_eq(race_with_gc(tmp, 0, 1, &w), -ESTALE);
    remove_tmpdir(tmp);
}
END_TEST

/* ------------------------------------------------------------ gc */

START_TEST(test_gc_unfinished)
{
    char *tmp = make_tmpdir(), dir[4096], lease[4200];
    join(dir, tmp, "s");
    make_save(dir, "w0");
    ckpt_gc_result r;
    ckpt_error err = { 0 };
    /* Just written: young. */
    ck_assert_int_eq(ckpt_gc_unfinished(tmp, "s", HOUR_NS, 0, &r, &err), 0);
    ck_assert_int_eq(r.why, CKPT_GC_YOUNG);
    ck_assert(exists(dir));
    /* Idle for two hours but a writer holds a lease: live, whatever the
     * grace period. */
    ckpt_lease *l;
    ck_assert_int_eq(ckpt_lease_take(&l, dir, 0, &err), 0);
    age_tree(dir, 7200);
    ck_assert_int_eq(ckpt_gc_unfinished(tmp, "s", 0, 0, &r, &err), 0);
    ck_assert_int_eq(r.why, CKPT_GC_LIVE);
    ck_assert_int_ge(r.idle_ns, HOUR_NS);
    ckpt_lease_drop(l);
    age_tree(dir, 7200);
    /* A dry run says it would go, and changes nothing. */
    ck_assert_int_eq(ckpt_gc_unfinished(tmp, "s", HOUR_NS, 1, &r, &err), 0);
    ck_assert_int_eq(r.why, CKPT_GC_REMOVED);
    ck_assert(exists(dir));
    ck_assert_int_eq(ckpt_gc_unfinished(tmp, "s", HOUR_NS, 0, &r, &err), 0);
    ck_assert_int_eq(r.why, CKPT_GC_REMOVED);
    ck_assert(!exists(dir));
    ck_assert(!count_prefixed(tmp, CKPT_GC_PREFIX));
    /* A dry run does not create a lease file where there was none. */
    join(dir, tmp, "t");
    ck_assert_int_eq(ckpt_mkdirs(dir, NULL), 0);
    snprintf(lease, sizeof lease, "%s/.pending", dir);
    ck_assert_int_eq(ckpt_mkdir(lease, NULL), 0);
    age_tree(dir, 7200);
    ck_assert_int_eq(ckpt_gc_unfinished(tmp, "t", HOUR_NS, 1, &r, &err), 0);
    ck_assert_int_eq(r.why, CKPT_GC_REMOVED);
    snprintf(lease, sizeof lease, "%s/" CKPT_LEASE_PATH, dir);
    ck_assert(!exists(lease));
    remove_tmpdir(tmp);
}
END_TEST

START_TEST(test_gc_committed_meanwhile)
{
    char *tmp = make_tmpdir(), dir[4096];
    join(dir, tmp, "s");
    make_save(dir, "w0");
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_commit(dir, NULL, &err) == 0, "%s", err.msg);
    /* A gc that saw it unfinished in its scan finds it committed under
     * the lock, and keeps it. */
    ckpt_gc_result r;
    ck_assert_int_eq(ckpt_gc_unfinished(tmp, "s", 0, 0, &r, &err), 0);
    ck_assert_int_eq(r.why, CKPT_GC_COMMITTED);
    ck_assert_int_eq(ckpt_dir_probe(dir), CKPT_DIR_COMMITTED);
    remove_tmpdir(tmp);
}
END_TEST

START_TEST(test_gc_retire_and_tidy)
{
    char *tmp = make_tmpdir(), dir[4096], p[4200];
    join(dir, tmp, "c");
    make_save(dir, "w0");
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_commit(dir, NULL, &err) == 0, "%s", err.msg);
    /* What a committer killed after publishing leaves. */
    snprintf(p, sizeof p, "%s/.pending", dir);
    ck_assert_int_eq(ckpt_mkdir(p, NULL), 0);
    snprintf(p, sizeof p, "%s/.pending/w0.plan", dir);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    int found;
    ck_assert_int_eq(ckpt_gc_tidy(tmp, "c", 1, &found, &err), 0);
    ck_assert_int_eq(found, 1);
    ck_assert(exists(p));
    ckpt_lease *l;
    ck_assert_int_eq(ckpt_lease_take(&l, dir, 0, &err), 0);
    ck_assert_int_eq(ckpt_gc_tidy(tmp, "c", 0, &found, &err), -EBUSY);
    ckpt_lease_drop(l);
    ck_assert_int_eq(ckpt_gc_tidy(tmp, "c", 0, &found, &err), 0);
    snprintf(p, sizeof p, "%s/.pending", dir);
    ck_assert(!exists(p));
    ck_assert_int_eq(ckpt_dir_probe(dir), CKPT_DIR_COMMITTED);
    /* Retiring: gone, nothing hidden left but the plans its commit moved
     * aside (write/spent.h), which are no retired directory. */
    ck_assert_msg(ckpt_gc_retire(tmp, "c", &err) == 0, "%s", err.msg);
    ck_assert(!exists(dir));
    ck_assert_int_eq(count_prefixed(tmp, CKPT_GC_PREFIX),
                     count_prefixed(tmp, CKPT_SPENT_PREFIX));
    ck_assert_int_eq(count_prefixed(tmp, CKPT_SPENT_PREFIX), 1);
    ck_assert(ckpt_gc_is_retired(".ckpt-gc.12.0.c"));
    ck_assert(!ckpt_gc_is_retired("c"));
    remove_tmpdir(tmp);
}
END_TEST

/* ------------------------------------------------------------ retention */

START_TEST(test_retain_key)
{
    int64_t k = 0;
    ck_assert_int_eq(ckpt_retain_key("step-000300", NULL, &k), 1);
    ck_assert_int_eq(k, 300);
    ck_assert_int_eq(ckpt_retain_key("step-000300", " 12 ", &k), 1);
    ck_assert_int_eq(k, 12);                       /* metadata wins */
    ck_assert_int_eq(ckpt_retain_key("ep3-step500", "1e3", &k), 1);
    ck_assert_int_eq(k, 500);                      /* not an integer */
    ck_assert_int_eq(ckpt_retain_key("final", NULL, &k), 0);
    ck_assert_int_eq(ckpt_retain_key("s0000000000000000000000001", NULL, &k),
                     1);
    ck_assert_int_eq(k, 1);                        /* leading zeros */
    ck_assert_int_eq(ckpt_retain_key("x1234567890123456789", NULL, &k), 0);
}
END_TEST

START_TEST(test_retain_select)
{
    ckpt_retain_item v[] = {
        { "step-4", 1, 4, 4000, NULL, 0 },
        { "best", 0, 0, 99000, NULL, 0 },                      /* no step: oldest */
        { "step-2", 1, 2, 2000, NULL, 0 },
        { "step-10", 1, 10, 10000, NULL, 0 },
        { "step-8", 1, 8, 8000, NULL, 0 },
        { "step-6", 1, 6, 6000, NULL, 0 },
        { "step-6b", 1, 6, 7000, NULL, 0 },                    /* same step, later */
    };
    size_t n = sizeof v / sizeof *v;
    ckpt_retain_why why[7];
    ck_assert_int_eq(ckpt_retain_select(v, n, 2, 0, why), 0);
    ck_assert_int_eq(why[3], CKPT_RETAIN_LATEST);     /* step-10 */
    ck_assert_int_eq(why[4], CKPT_RETAIN_LAST);       /* step-8 */
    for (size_t i = 0; i < n; i++)
        if (i != 3 && i != 4)
            ck_assert_int_eq(why[i], CKPT_RETAIN_DROP);
    ck_assert_int_eq(ckpt_retain_select(v, n, 1, 4, why), 0);
    ck_assert_int_eq(why[3], CKPT_RETAIN_LATEST);
    ck_assert_int_eq(why[4], CKPT_RETAIN_EVERY);      /* 8 = 2 * 4 */
    ck_assert_int_eq(why[0], CKPT_RETAIN_EVERY);      /* 4 */
    ck_assert_int_eq(why[2], CKPT_RETAIN_DROP);
    ck_assert_int_eq(why[1], CKPT_RETAIN_DROP);
    /* keep_last 0 still keeps the newest; the later of equal steps is the
     * newer. */
    ck_assert_int_eq(ckpt_retain_select(v, n, 0, 0, why), 0);
    ck_assert_int_eq(why[3], CKPT_RETAIN_LATEST);
    ck_assert(ckpt_retain_newer(&v[6], &v[5]));
    ck_assert(!ckpt_retain_newer(&v[1], &v[2]));
    ck_assert_int_eq(ckpt_retain_select(v, n, 100, 0, why), 0);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_ne(why[i], CKPT_RETAIN_DROP);
    ck_assert_int_eq(ckpt_retain_select(v, 0, 3, 0, why), 0);
}
END_TEST

/* ------------------------------------------------------------ commit */

START_TEST(test_commit_refuses_unsynced)
{
    char *tmp = make_tmpdir(), dir[4096];
    join(dir, tmp, "s");
    make_save(dir, "w0");
    ckpt_save_mark_unsynced(dir, "cannot sync shard file X: Input/output "
                            "error");
    ckpt_save_mark_unsynced(dir, "a later failure");   /* the first stays */
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_commit(dir, NULL, &err), -EIO);
    ck_assert_msg(strstr(err.msg, "could not be synced") &&
                  strstr(err.msg, "cannot sync shard file X"), "%s", err.msg);
    ck_assert_int_ne(ckpt_dir_probe(dir), CKPT_DIR_COMMITTED);
    remove_tmpdir(tmp);
}
END_TEST

START_TEST(test_commit_refuses_declared)
{
    char *tmp = make_tmpdir(), dir[4096];
    join(dir, tmp, "s");
    ckpt_error err = { 0 };
    ckpt_writer *w;
    float v[16] = { 0 };
    int64_t shape[1] = { 16 }, off[1] = { 8 }, size[1] = { 8 };
    ck_assert_int_eq(ckpt_writer_open(&w, dir, "w0", NULL, &err), 0);
    /* "a" arrives whole; "w" was declared and its only piece failed; "h"
     * has half its rows and the failure of the other half. */
    ckpt_piece a = { "a", CKPT_F32, 1, shape, NULL, NULL, v };
    ckpt_piece h = { "h", CKPT_F32, 1, shape, off, size, v };
    ck_assert_int_eq(ckpt_writer_put(w, &a, &err), 0);
    ck_assert_int_eq(ckpt_writer_put(w, &h, &err), 0);
    ck_assert_int_eq(ckpt_writer_declare(w, "a", NULL, &err), 0);
    ck_assert_int_eq(ckpt_writer_declare(w, "w", NULL, &err), 0);
    ck_assert_int_eq(ckpt_writer_declare(w, "w", "the piece holds 64 bytes "
                                         "but 10 were written", &err), 0);
    ck_assert_int_eq(ckpt_writer_declare(w, "w", NULL, &err), 0);
    ck_assert_int_eq(ckpt_writer_declare(w, "h", "write past the end (EFBIG)",
                                         &err), 0);
    ck_assert_int_eq(ckpt_writer_close(w, &err), 0);
    ck_assert_int_eq(ckpt_commit(dir, NULL, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "tensor 'w' has no piece") &&
                  strstr(err.msg, "but 10 were written"), "%s", err.msg);
    ck_assert_int_ne(ckpt_dir_probe(dir), CKPT_DIR_COMMITTED);
    /* With a piece of w from another writer, the refusal is h's hole, and
     * it says why h's piece failed. */
    ck_assert_int_eq(ckpt_writer_open(&w, dir, "w1", NULL, &err), 0);
    ckpt_piece wp = { "w", CKPT_F32, 1, shape, NULL, NULL, v };
    ck_assert_int_eq(ckpt_writer_put(w, &wp, &err), 0);
    ck_assert_int_eq(ckpt_writer_close(w, &err), 0);
    ck_assert_int_eq(ckpt_commit(dir, NULL, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "tensor 'h'") &&
                  strstr(err.msg, "not covered") &&
                  strstr(err.msg, "a piece of it failed: write past the end"),
                  "%s", err.msg);
    /* The rest of h: committed, declarations and all. */
    ck_assert_int_eq(ckpt_writer_open(&w, dir, "w2", NULL, &err), 0);
    int64_t off0[1] = { 0 };
    ckpt_piece h0 = { "h", CKPT_F32, 1, shape, off0, size, v };
    ck_assert_int_eq(ckpt_writer_put(w, &h0, &err), 0);
    ck_assert_int_eq(ckpt_writer_close(w, &err), 0);
    ck_assert_msg(ckpt_commit(dir, NULL, &err) == 0, "%s", err.msg);
    remove_tmpdir(tmp);
}
END_TEST

START_TEST(test_new_names)
{
    char mine[256], other[256], dead[256];
    ck_assert_int_gt(ckpt_new_name(mine, sizeof mine, "t1", "step-5"), 0);
    ck_assert(strncmp(mine, CKPT_NEW_PREFIX, strlen(CKPT_NEW_PREFIX)) == 0);
    ck_assert(strstr(mine, ".step-5") != NULL);
    ck_assert_int_eq(ckpt_new_maker_gone(mine), 0);        /* we live */
    /* A process of this host that is gone: first a zombie (exited, not
     * yet reaped), then reaped. */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(0);
    char *at = strchr(mine + strlen(CKPT_NEW_PREFIX), '.');
    ck_assert_ptr_nonnull(at);
    snprintf(dead, sizeof dead, "%.*s.%ld.t1.step-5",
             (int)(at - mine), mine, (long)pid);
    for (int i = 0; i < 200 && !ckpt_new_maker_gone(dead); i++)
        usleep(10000);                   /* until the child has exited */
    ck_assert_int_eq(ckpt_new_maker_gone(dead), 1);
    waitpid(pid, NULL, 0);
    ck_assert_int_eq(ckpt_new_maker_gone(dead), 1);
    /* Another host: cannot tell. */
    snprintf(other, sizeof other, CKPT_NEW_PREFIX "elsewhere-xyz.%ld.t1.s",
             (long)pid);
    ck_assert_int_eq(ckpt_new_maker_gone(other), 0);
    ck_assert_int_eq(ckpt_new_maker_gone("step-5"), 0);
}
END_TEST

static Suite *gc_suite(void)
{
    Suite *s = suite_create("gc");
    TCase *tc = tcase_create("leases");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_lease_blocks_gc);
    tcase_add_test(tc, test_lease_dies_with_process);
    tcase_add_test(tc, test_lease_heartbeat);
    tcase_add_test(tc, test_commit_waits_for_gc);
    suite_add_tcase(s, tc);
    tc = tcase_create("gc");
    tcase_add_test(tc, test_gc_unfinished);
    tcase_add_test(tc, test_gc_committed_meanwhile);
    tcase_add_test(tc, test_gc_retire_and_tidy);
    tcase_add_test(tc, test_retain_key);
    tcase_add_test(tc, test_retain_select);
    tcase_add_test(tc, test_new_names);
    suite_add_tcase(s, tc);
    tc = tcase_create("commit");
    tcase_add_test(tc, test_commit_refuses_unsynced);
    tcase_add_test(tc, test_commit_refuses_declared);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(gc_suite());
}
