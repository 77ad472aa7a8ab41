/*
 * test_claim.c - the commit claim (src/format/claim.c): one holder at a
 * time by link(2), a dead holder's claim taken over (its process gone, or
 * its claim untouched too long on another host), a holder that lost its
 * claim finds out before it publishes and never removes the new one, and
 * a status read's "committed" and a listing's checkpoint
 * (ckpt_claim_committed, ckpt_claim_settled) only once no live committer
 * may still withdraw index.db.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckptfs.h"
#include "common/fileio.h"
#include "format/claim.h"
#include "format/lease.h"
#include "unit_util.h"

/* A save directory with an empty .pending/, in a new temporary dir. */
static char *make_save(char *dir, size_t cap)
{
    char *tmp = make_tmpdir_tagged("claim");
    snprintf(dir, cap, "%s/step-1", tmp);
    char p[4200];
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    snprintf(p, sizeof p, "%s/.pending", dir);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    return tmp;
}

/* Writes a claim by hand: another committer's, as its file would say,
 * touched `age_s` seconds ago. */
static void plant_claim(const char *dir, const char *host, long pid,
                        const char *token, int age_s)
{
    char p[4200], text[256];
    snprintf(p, sizeof p, "%s/" CKPT_CLAIM_PATH, dir);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    snprintf(text, sizeof text, "ckptfs commit claim\nhost %s\nboot x\n"
             "pidns x\npid %ld\ntoken %s\n", host, pid, token);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= age_s;
    t[1] = t[0];
    ck_assert_int_eq(utimensat(AT_FDCWD, p, t, 0), 0);
}

/* The token the claim file of dir names, into buf. */
static void claim_token(const char *dir, char *buf, size_t cap)
{
    char p[4200], line[256];
    snprintf(p, sizeof p, "%s/" CKPT_CLAIM_PATH, dir);
    buf[0] = '\0';
    FILE *f = fopen(p, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "token ", 6) == 0)
            snprintf(buf, cap, "%.*s", (int)strcspn(line + 6, "\n"),
                     line + 6);
    fclose(f);
}

/* Names in dir/.pending other than the claim itself (the claimers' own
 * files and the names of takeovers must not be left behind). */
static int pending_extras(const char *dir)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/.pending", dir);
    DIR *d = opendir(p);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.' && strcmp(e->d_name, "commit.claim") != 0;
    closedir(d);
    return n;
}

START_TEST(test_one_holder)
{
    char dir[4096];
    char *tmp = make_save(dir, sizeof dir);
    ckpt_claim *a = NULL, *b = NULL;
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_claim_take(&a, dir, &err) == 0, "%s", err.msg);
    char who[128] = "";
    ck_assert_int_eq(ckpt_claim_held(dir, who, sizeof who), 1);
    ck_assert_ptr_nonnull(strstr(who, "pid"));
    ck_assert_int_eq(ckpt_claim_take(&b, dir, &err), -EBUSY);
    ck_assert_ptr_null(b);
    ck_assert_msg(strstr(err.msg, "is being committed by host"), "%s",
                  err.msg);
    ck_assert_int_eq(ckpt_claim_check(a, &err), 0);
    ck_assert_int_eq(pending_extras(dir), 0);
    ckpt_claim_drop(a);
    ck_assert_int_eq(ckpt_claim_held(dir, who, sizeof who), 0);
    ck_assert_msg(ckpt_claim_take(&b, dir, &err) == 0, "%s", err.msg);
    ckpt_claim_drop(b);
    ck_assert_int_eq(pending_extras(dir), 0);
    remove_tmpdir(tmp);
}
END_TEST

START_TEST(test_dead_process_taken_over)
{
    char dir[4096];
    char *tmp = make_save(dir, sizeof dir);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        ckpt_claim *c = NULL;
        _exit(ckpt_claim_take(&c, dir, NULL) == 0 ? 0 : 1);  /* dies holding */
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char who[128];
    ck_assert_int_eq(ckpt_claim_held(dir, who, sizeof who), 0);
    ckpt_claim *c = NULL;
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_claim_take(&c, dir, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(ckpt_claim_check(c, &err), 0);
    ck_assert_int_eq(pending_extras(dir), 0);
    ckpt_claim_drop(c);
    remove_tmpdir(tmp);
}
END_TEST

START_TEST(test_other_host)
{
    char dir[4096], tok[64];
    char *tmp = make_save(dir, sizeof dir);
    ckpt_claim *c = NULL;
    ckpt_error err = { 0 };
    /* touched 1 s ago on another host: live, whatever its pid */
    plant_claim(dir, "elsewhere", 1, "feed", 1);
    ck_assert_int_eq(ckpt_claim_take(&c, dir, &err), -EBUSY);
    ck_assert_msg(strstr(err.msg, "host elsewhere pid 1"), "%s", err.msg);
    claim_token(dir, tok, sizeof tok);
    ck_assert_str_eq(tok, "feed");
    /* untouched for longer than CKPT_CLAIM_STALE_S: a dead committer's */
    plant_claim(dir, "elsewhere", 1, "feed", CKPT_CLAIM_STALE_S + 5);
    ck_assert_msg(ckpt_claim_take(&c, dir, &err) == 0, "%s", err.msg);
    claim_token(dir, tok, sizeof tok);
    ck_assert_str_ne(tok, "feed");
    ck_assert_int_eq(pending_extras(dir), 0);
    ckpt_claim_drop(c);
    remove_tmpdir(tmp);
}
END_TEST

START_TEST(test_lost_claim)
{
    char dir[4096], p[4200], tok[64];
    char *tmp = make_save(dir, sizeof dir);
    ckpt_claim *c = NULL;
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_claim_take(&c, dir, &err) == 0, "%s", err.msg);
    /* another process took it for dead and took it over */
    snprintf(p, sizeof p, "%s/" CKPT_CLAIM_PATH, dir);
    ck_assert_int_eq(unlink(p), 0);
    plant_claim(dir, "elsewhere", 7, "beef", 0);
    ck_assert_int_eq(ckpt_claim_check(c, &err), -EBUSY);
    ck_assert_msg(strstr(err.msg, "was taken over"), "%s", err.msg);
    ckpt_claim_drop(c);           /* must not remove the new holder's */
    claim_token(dir, tok, sizeof tok);
    ck_assert_str_eq(tok, "beef");
    ck_assert_int_eq(pending_extras(dir), 0);
    remove_tmpdir(tmp);
}
END_TEST

START_TEST(test_committed_only_when_settled)
{
    char dir[4096], p[4200];
    char *tmp = make_save(dir, sizeof dir);
    ck_assert_int_eq(ckpt_claim_committed(dir), 0);     /* no index.db */
    snprintf(p, sizeof p, "%s/index.db", dir);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    /* index.db published, its committer still at it: it may withdraw */
    ckpt_claim *c = NULL;
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_claim_take(&c, dir, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(ckpt_claim_settled(dir), 0);
    ck_assert_int_eq(ckpt_claim_committed(dir), 0);
    snprintf(p, sizeof p, "%s/.pending", dir);
    struct stat st;
    ck_assert_int_eq(stat(p, &st), 0);
    /* no live committer any more (it gave up its claim, or died there):
     * the reader syncs what was published and finishes */
    ckpt_claim_drop(c);
    ck_assert_int_eq(ckpt_claim_settled(dir), 1);       /* changes nothing */
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_int_eq(ckpt_claim_committed(dir), 1);
    ck_assert_int_ne(stat(p, &st), 0);
    ck_assert_int_eq(ckpt_claim_committed(dir), 1);
    remove_tmpdir(tmp);
}
END_TEST

static Suite *claim_suite(void)
{
    Suite *s = suite_create("claim");
    TCase *tc = tcase_create("claim");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_one_holder);
    tcase_add_test(tc, test_dead_process_taken_over);
    tcase_add_test(tc, test_other_host);
    tcase_add_test(tc, test_lost_claim);
    tcase_add_test(tc, test_committed_only_when_settled);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(claim_suite());
}
