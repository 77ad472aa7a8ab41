/*
 * claim.c - the commit claim of a save (see claim.h): a file of the
 * committer's own linked to .pending/commit.claim, touched while the
 * commit runs, taken over with rename(2) once its committer is dead.
 */
#include "format/claim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "format/lease.h"
#include "format/pending.h"

#define CLAIM_NAME "commit.claim"
/* Rounds of link, look, take over before giving up as busy: each round
 * that does not end it saw the claim change hands. */
#define CLAIM_ROUNDS 64

struct ckpt_claim {
    char *dir;
    char token[33];
    char own[160];           /* .pending/claim.HOST.PID.TOKEN */
    int fd;                  /* open on the claim's file */
    ckpt_lease *beat;        /* touches it (a lock-less heartbeat) */
    int held;                /* linked to the claim's name */
};

/* Who holds a claim, as its file says, and how long ago it was touched. */
typedef struct holder {
    char host[64];
    char boot[64];
    char pidns[64];
    long pid;
    char token[40];
    int64_t idle_s;
} holder;

/* The first line of a small file, without its newline ("?" if none). */
static void read_line(const char *path, char *buf, size_t cap)
{
    snprintf(buf, cap, "?");
    FILE *f = fopen(path, "re");
    if (f) {
        if (fgets(buf, (int)cap, f))
            buf[strcspn(buf, "\n")] = '\0';
        fclose(f);
    }
}

/* This process's identity: host, boot id, pid namespace. */
static void whoami(holder *me)
{
    memset(me, 0, sizeof *me);
    ckpt_host_tag(me->host, sizeof me->host);
    read_line("/proc/sys/kernel/random/boot_id", me->boot, sizeof me->boot);
    ssize_t n = readlink("/proc/self/ns/pid", me->pidns,
                         sizeof me->pidns - 1);
    me->pidns[n > 0 ? n : 0] = '\0';
    if (n <= 0)
        snprintf(me->pidns, sizeof me->pidns, "?");
    me->pid = (long)getpid();
}

static void new_token(char *buf)
{
    unsigned char r[16];
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t k = getrandom(r + got, sizeof r - got, 0);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    if (got < sizeof r) {        /* no entropy call: time and pid */
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        uint64_t v[2] = { (uint64_t)t.tv_nsec ^ ((uint64_t)t.tv_sec << 30),
                          (uint64_t)getpid() };
        memcpy(r, v, sizeof r);
    }
    for (size_t i = 0; i < sizeof r; i++)
        snprintf(buf + 2 * i, 3, "%02x", r[i]);
}

/* Copies the value of "key VALUE" among the lines of text into out. */
static void field(const char *text, const char *key, char *out, size_t cap)
{
    size_t kl = strlen(key);
    out[0] = '\0';
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1
                                                                   : NULL)
        if (strncmp(p, key, kl) == 0 && p[kl] == ' ') {
            size_t n = strcspn(p + kl + 1, "\n");
            snprintf(out, cap, "%.*s", (int)n, p + kl + 1);
            return;
        }
}

/* Reads claim file `name` of pfd: 1 with *h, 0 when there is none. */
static int read_holder(int pfd, const char *name, holder *h)
{
    char text[1024], pid[32];
    struct stat st;
    memset(h, 0, sizeof *h);
    if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return 0;
    /* A claim that is not this user's regular file reads empty: it has
     * no token and is judged by its age alone. */
    (void)ckpt_pending_read(pfd, name, text, sizeof text);
    field(text, "host", h->host, sizeof h->host);
    field(text, "boot", h->boot, sizeof h->boot);
    field(text, "pidns", h->pidns, sizeof h->pidns);
    field(text, "token", h->token, sizeof h->token);
    field(text, "pid", pid, sizeof pid);
    h->pid = strtol(pid, NULL, 10);
    h->idle_s = (int64_t)time(NULL) - (int64_t)st.st_mtim.tv_sec;
    return 1;
}

/* 1 when the committer of h is dead: its process is gone (it ran on this
 * host, boot and pid namespace), or its claim went untouched too long. */
static int holder_dead(const holder *h)
{
    holder me;
    whoami(&me);
    if (h->host[0] && strcmp(h->host, me.host) == 0 &&
        strcmp(h->boot, me.boot) == 0 && strcmp(h->pidns, me.pidns) == 0 &&
        ckpt_pid_gone(h->pid))
        return 1;
    return h->idle_s > CKPT_CLAIM_STALE_S;
}

/* Moves the claim out of the way if it is still the one whose token is
 * `token`: renamed to `aside` (a name of the caller's own), then removed
 * when it was that one, linked back when it was another's.  1 when the
 * claim is gone, -EBUSY when it is another's (left in place, or taken by
 * yet another process meanwhile). */
static int move_aside(int pfd, const char *token, const char *aside)
{
    if (renameat(pfd, CLAIM_NAME, pfd, aside) != 0)
        return errno == ENOENT ? 1 : -EBUSY;
    holder moved;
    int was = read_holder(pfd, aside, &moved) &&
              strcmp(moved.token, token) == 0;
    if (!was)
        (void)linkat(pfd, aside, pfd, CLAIM_NAME, 0);
    (void)unlinkat(pfd, aside, 0);
    return was ? 1 : -EBUSY;
}

/* Writes who we are into the claim's own file, then closes and reopens
 * it: a close is what makes the bytes visible to other clients of a
 * network file system (close-to-open), before the link publishes the
 * name.  Not synced: a claim need not survive a crash (its host's boot id
 * changes, which makes it dead), and a save makes at most shards + 4 sync
 * calls (docs/GUARANTEES.md). */
static int write_claim(ckpt_claim *c, int pfd, const holder *me,
                       ckpt_error *err)
{
    char text[512];
    int n = snprintf(text, sizeof text, "ckptfs commit claim\nhost %s\n"
                     "boot %s\npidns %s\npid %ld\ntoken %s\ntime %lld\n",
                     me->host, me->boot, me->pidns, me->pid, c->token,
                     (long long)time(NULL));
    int rc = ckpt_write_full(c->fd, text, (size_t)n, c->own, err);
    if (rc)
        return rc;
    int closed = close(c->fd);
    c->fd = -1;
    if (closed != 0)
        return ckpt_err_sys(err, -errno, "cannot write %s/.pending/%s",
                            c->dir, c->own);
    int fd = ckpt_pending_file(pfd, c->dir, c->own, O_RDWR, err);
    if (fd < 0)
        return fd;
    c->fd = fd;
    return 0;
}

/* The link of the own file to the claim's name, until it holds or a live
 * committer is found.  0 once linked. */
static int link_claim(ckpt_claim *c, int pfd, ckpt_error *err)
{
    char aside[200];
    snprintf(aside, sizeof aside, "claim-dead.%s", c->token);
    for (int round = 0; round < CLAIM_ROUNDS; round++) {
        struct stat st;
        if (linkat(pfd, c->own, pfd, CLAIM_NAME, 0) == 0)
            return 0;
        int e = errno;
        /* A link whose reply was lost (NFS) did happen: two names. */
        if (fstat(c->fd, &st) == 0 && st.st_nlink >= 2)
            return 0;
        if (e != EEXIST)
            return ckpt_err_sys(err, -e, "cannot claim the commit of %s "
                                "(link to %s)", c->dir, CKPT_CLAIM_PATH);
        holder h;
        if (!read_holder(pfd, CLAIM_NAME, &h))
            continue;           /* given up meanwhile: try again */
        if (!holder_dead(&h))
            return ckpt_err(err, -EBUSY, "%s is being committed by host %s "
                            "pid %ld (its %s, touched %llds ago)", c->dir,
                            h.host[0] ? h.host : "?", h.pid, CKPT_CLAIM_PATH,
                            (long long)h.idle_s);
        if (move_aside(pfd, h.token, aside) < 0)
            return ckpt_err(err, -EBUSY, "%s: another process took over the "
                            "commit claim of a dead committer first",
                            c->dir);
    }
    return ckpt_err(err, -EBUSY, "%s: its commit claim kept changing hands",
                    c->dir);
}

int ckpt_claim_take(ckpt_claim **out, const char *dir, ckpt_error *err)
{
    *out = NULL;
    ckpt_claim *c = calloc(1, sizeof *c);
    if (!c || !(c->dir = strdup(dir))) {
        free(c);
        return ckpt_err(err, -ENOMEM, "out of memory");
    }
    c->fd = -1;
    holder me;
    whoami(&me);
    new_token(c->token);
    snprintf(c->own, sizeof c->own, "claim.%.64s.%ld.%s", me.host, me.pid,
             c->token);
    int pfd = ckpt_pending_open(dir, 1, err);
    int rc = pfd < 0 ? pfd : 0;
    if (rc == 0) {
        c->fd = ckpt_pending_file(pfd, dir, c->own,
                                  O_RDWR | O_CREAT | O_EXCL, err);
        rc = c->fd < 0 ? c->fd : write_claim(c, pfd, &me, err);
    }
    if (rc == 0)
        rc = link_claim(c, pfd, err);
    c->held = rc == 0;
    if (pfd >= 0) {
        if (c->fd >= 0)
            (void)unlinkat(pfd, c->own, 0);  /* the claim's name stays */
        close(pfd);
    }
    if (rc == 0)
        rc = ckpt_lease_beat_fd(&c->beat, c->fd, CKPT_CLAIM_BEAT_MS, err);
    if (rc) {
        ckpt_claim_drop(c);
        return rc;
    }
    *out = c;
    return 0;
}

int ckpt_claim_check(ckpt_claim *c, ckpt_error *err)
{
    holder h;
    int pfd = ckpt_pending_open(c->dir, 1, NULL);
    int ours = pfd >= 0 && read_holder(pfd, CLAIM_NAME, &h) &&
               strcmp(h.token, c->token) == 0;
    if (pfd >= 0)
        close(pfd);
    if (ours)
        return 0;
    return ckpt_err(err, -EBUSY, "%s: the commit claim of this committer "
                    "was taken over (it was taken for dead: its %s went "
                    "untouched for %ds); nothing was published", c->dir,
                    CKPT_CLAIM_PATH, CKPT_CLAIM_STALE_S);
}

void ckpt_claim_drop(ckpt_claim *c)
{
    if (!c)
        return;
    ckpt_lease_drop(c->beat);
    if (c->held) {
        char aside[200];
        snprintf(aside, sizeof aside, "claim-done.%s", c->token);
        int pfd = ckpt_pending_open(c->dir, 1, NULL);
        if (pfd >= 0) {
            (void)move_aside(pfd, c->token, aside);
            close(pfd);
        }
    }
    if (c->fd >= 0)
        close(c->fd);
    free(c->dir);
    free(c);
}

int ckpt_claim_held(const char *dir, char *buf, size_t cap)
{
    holder h;
    int pfd = ckpt_pending_open(dir, 1, NULL);
    if (pfd < 0)
        return 0;
    int live = read_holder(pfd, CLAIM_NAME, &h) && !holder_dead(&h);
    close(pfd);
    if (live && cap)
        snprintf(buf, cap, "host %s pid %ld", h.host[0] ? h.host : "?",
                 h.pid);
    return live;
}

int ckpt_claim_tmp(const ckpt_claim *c, char *buf, size_t cap,
                   ckpt_error *err)
{
    char name[80];
    snprintf(name, sizeof name, ".pending/index.db.tmp.%s", c->token);
    return ckpt_path_join(buf, cap, c->dir, name, err);
}

/* Syncs index.db of dir and dir itself: 0 once both are durable. */
static int sync_published(const char *dir, const char *idx)
{
    int fd = open(idx, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    return rc ? rc : ckpt_fsync_dir(dir, NULL);
}

/* 1 when dir/index.db is a regular file. */
static int has_index(const char *dir, char *idx, size_t cap)
{
    struct stat st;
    return ckpt_path_join(idx, cap, dir, "index.db", NULL) == 0 &&
           lstat(idx, &st) == 0 && S_ISREG(st.st_mode);
}

int ckpt_claim_settled(const char *dir)
{
    char idx[4096], who[128];
    if (!has_index(dir, idx, sizeof idx))
        return 0;
    int pfd = ckpt_pending_open(dir, 1, NULL);
    if (pfd < 0)
        return 1;           /* gone, or not this user's: nobody to wait for */
    close(pfd);
    return !ckpt_claim_held(dir, who, sizeof who);
}

int ckpt_claim_committed(const char *dir)
{
    char idx[4096], pending[4096];
    if (!ckpt_claim_settled(dir) ||
        ckpt_path_join(pending, sizeof pending, dir, ".pending", NULL) != 0 ||
        !has_index(dir, idx, sizeof idx))
        return 0;
    int pfd = ckpt_pending_open(dir, 1, NULL);
    if (pfd == -ENOENT)
        return 1;
    if (pfd < 0)
        return 0;           /* not this user's to finish */
    close(pfd);
    /* Its committer died after publishing (or finished just now): what it
     * published is made durable here before anyone is told. */
    if (sync_published(dir, idx) != 0)
        return 0;
    if (ckpt_remove_tree(pending, NULL) == 0)
        (void)ckpt_fsync_dir(dir, NULL);
    return 1;
}
