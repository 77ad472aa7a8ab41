/*
 * rendezvous.c - rank markers, the commit they trigger and the status
 * they show, all in the checkpoint directory (see rendezvous.h).
 */
#include "rendezvous.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/confine.h"
#include "common/error.h"
#include "common/fileio.h"
#include "format/claim.h"
#include "format/lease.h"
#include "format/pending.h"

#define MARKER_PREFIX "rank-"
#define NOTES_PREFIX "errors."
/* The writers of earlier attempts of the save (docs/MOUNT.md, "A rank
 * runs again"): one name a line. */
#define SUPERSEDED_FILE "superseded"

/* The rank a marker's or a plan's name gives (MARKER_PREFIX "R", or
 * "rank" "R" ["-" K] ".plan"), or -1. */
static long name_rank(const char *name, const char *prefix,
                      const char *suffix)
{
    size_t pl = strlen(prefix), sl = strlen(suffix), n = strlen(name);
    if (strncmp(name, prefix, pl) != 0 || n <= pl + sl ||
        strcmp(name + n - sl, suffix) != 0 || name[pl] < '0' ||
        name[pl] > '9')
        return -1;
    char *end;
    long r = strtol(name + pl, &end, 10);
    if (*end == '-' && end[1] >= '0' && end[1] <= '9' && *suffix)
        strtol(end + 1, &end, 10);
    return end == name + n - sl ? r : -1;
}

/* Calls fn(arg, name) for each entry of the .pending/ descriptor pfd. */
static int each_pending(int pfd, void (*fn)(void *, int, const char *),
                        void *arg)
{
    int fd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int rc = -errno;
        if (fd >= 0)
            close(fd);
        return rc;
    }
    struct dirent *e;
    while ((e = readdir(d)))
        fn(arg, pfd, e->d_name);
    closedir(d);
    return 0;
}

typedef struct mark_count {
    int world, n;
} mark_count;

static void count_one(void *arg, int pfd, const char *name)
{
    mark_count *c = arg;
    long r = name_rank(name, MARKER_PREFIX, "");
    (void)pfd;
    if (r >= 0 && r < c->world)
        c->n++;
}

/* Number of rank markers in the .pending/ descriptor pfd. */
static int count_marks(int pfd, const char *dir, int world, int *count,
                       ckpt_error *err)
{
    mark_count c = { world, 0 };
    int rc = each_pending(pfd, count_one, &c);
    *count = c.n;
    return rc ? ckpt_err_sys(err, rc, "cannot list %s/.pending", dir) : 0;
}

int rdv_mark(const char *dir, int rank, int world, int *complete,
             ckpt_error *err)
{
    char name[64];
    *complete = 0;
    if (rank < 0 || rank >= world)
        return ckpt_err(err, -EINVAL, "%s: rank %d is outside 0..%d (the "
                        "mount's world=%d)", dir, rank, world - 1, world);
    snprintf(name, sizeof name, MARKER_PREFIX "%d", rank);
    int pfd = ckpt_pending_open(dir, 1, err);
    if (pfd < 0)
        return pfd;
    /* Created exclusively: a link planted under the name is not
     * followed, it only makes the rank count as in. */
    int fd = ckpt_confine_at(pfd, name, O_WRONLY | O_CREAT | O_EXCL, 0644,
                             geteuid());
    int again = fd == -EEXIST;
    int rc = 0;
    if (fd < 0 && !again)
        rc = ckpt_err_sys(err, fd, "cannot create %s/.pending/%s", dir, name);
    /* The world in the marker: gc leaves a save whose every rank is in
     * (its commit was cut short), src/write/gc.c. */
    if (fd >= 0) {
        char text[32];
        int n = snprintf(text, sizeof text, "world %d\n", world);
        rc = ckpt_write_full(fd, text, (size_t)n, name, err);
        if (close(fd) != 0 && rc == 0)
            rc = ckpt_err_sys(err, -errno, "cannot write %s/.pending/%s",
                              dir, name);
        if (rc)
            (void)unlinkat(pfd, name, 0);
    }
    int count = 0;
    if (rc == 0)
        rc = count_marks(pfd, dir, world, &count, err);
    close(pfd);
    if (rc == 0)
        *complete = count == world;
    if (rc == 0 && again)
        rc = ckpt_err(err, -EALREADY, "%s: rank %d has already committed "
                      "(%d of %d ranks are in); a run of the rank that "
                      "writes a piece after its commit begins a new attempt "
                      "of the save (docs/MOUNT.md, \"A rank runs again\")",
                      dir, rank, count, world);
    return rc;
}

static void unmark(void *arg, int pfd, const char *name)
{
    if (name_rank(name, MARKER_PREFIX, "") >= 0 &&
        unlinkat(pfd, name, 0) == 0)      /* a name: nothing followed */
        ++*(int *)arg;
}

/* The writers with a plan in .pending/ (a name per line). */
typedef struct plan_names {
    char *buf;
    size_t len, cap;
    int n;
} plan_names;

static void add_plan(void *arg, int pfd, const char *name)
{
    plan_names *l = arg;
    size_t sl = strlen(".plan"), n = strlen(name);
    (void)pfd;
    if (n <= sl || strcmp(name + n - sl, ".plan") != 0 || name[0] == '.' ||
        l->len + n + 1 > l->cap)
        return;
    memcpy(l->buf + l->len, name, n - sl);
    l->len += n - sl;
    l->buf[l->len++] = '\n';
    l->buf[l->len] = '\0';
    l->n++;
}

/* Leaves text as control file `name` of dir's .pending/ (written aside
 * exclusively, synced, then renamed over): 0 or -errno. */
static int put_control(const char *dir, const char *name, const char *text)
{
    char tmp[64];
    int pfd = ckpt_pending_open(dir, 1, NULL);
    if (pfd < 0)
        return pfd;
    snprintf(tmp, sizeof tmp, "%s.%ld", name, (long)getpid());
    (void)unlinkat(pfd, tmp, 0);     /* ours, left by a crash: a name */
    int fd = ckpt_confine_at(pfd, tmp, O_WRONLY | O_CREAT | O_EXCL, 0644,
                             geteuid());
    size_t n = strlen(text);
    int rc = fd < 0 ? fd
             : ckpt_write_full(fd, text, n < CKPT_CONTROL_MAX ? n
                               : CKPT_CONTROL_MAX, tmp, NULL) != 0 ||
               fsync(fd) != 0 ? -EIO : 0;
    if (fd >= 0 && close(fd) != 0 && rc == 0)
        rc = -errno;
    if (fd >= 0 && rc == 0 && renameat(pfd, tmp, pfd, name) != 0)
        rc = -errno;
    if (fd >= 0 && rc)
        unlinkat(pfd, tmp, 0);
    close(pfd);
    return rc;
}

/* Lists every writer with a plan in the .pending/ descriptor pfd in
 * SUPERSEDED_FILE (as many as a control file holds; none: nothing is
 * written): 0 with *n the writers, or -errno. */
static int supersede_all(int pfd, const char *dir, int *n)
{
    plan_names l = { malloc(CKPT_CONTROL_MAX + 1), 0, CKPT_CONTROL_MAX, 0 };
    int rc = l.buf ? 0 : -ENOMEM;
    if (rc == 0) {
        l.buf[0] = '\0';
        rc = each_pending(pfd, add_plan, &l);
    }
    if (rc == 0 && l.n)
        rc = put_control(dir, SUPERSEDED_FILE, l.buf);
    *n = l.n;
    free(l.buf);
    return rc;
}

int rdv_reopen(const char *dir, int rank, int world, int *had,
               ckpt_error *err)
{
    char name[64];
    snprintf(name, sizeof name, MARKER_PREFIX "%d", rank);
    *had = 0;
    int pfd = ckpt_pending_open(dir, 1, err);
    if (pfd < 0)
        return pfd;
    struct stat st;
    int count = 0;
    int rc = fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 ? 0
             : count_marks(pfd, dir, world, &count, err);
    if (rc || count == 0 || count == world) {
        close(pfd);
        return rc;
    }
    /* Every writer so far is of an earlier attempt, then the commits go. */
    rc = supersede_all(pfd, dir, had);
    if (rc == 0) {
        *had = 0;
        rc = each_pending(pfd, unmark, had);
    }
    close(pfd);
    return rc ? ckpt_err_sys(err, rc, "%s: cannot begin a new attempt of "
                             "the save", dir) : 0;
}

int rdv_supersede_all(const char *dir, int *n, ckpt_error *err)
{
    *n = 0;
    int pfd = ckpt_pending_open(dir, 1, err);
    if (pfd < 0)
        return pfd;
    int rc = supersede_all(pfd, dir, n);
    close(pfd);
    return rc ? ckpt_err_sys(err, rc, "%s: cannot list the writers of its "
                             "earlier attempt", dir) : 0;
}

int rdv_superseded(const char *dir, int rank, char *out, size_t cap)
{
    size_t len = strlen(out);
    struct stat st;
    int pfd = ckpt_pending_open(dir, 1, NULL);
    /* Read only where there is one (a piece's start asks every time). */
    char *buf = pfd >= 0 && fstatat(pfd, SUPERSEDED_FILE, &st,
                                    AT_SYMLINK_NOFOLLOW) == 0
                ? malloc(CKPT_CONTROL_MAX + 1) : NULL;
    int n = 0;
    if (buf && ckpt_pending_read(pfd, SUPERSEDED_FILE, buf,
                                 CKPT_CONTROL_MAX + 1)) {
        char *save = NULL;
        for (char *w = strtok_r(buf, "\n", &save); w;
             w = strtok_r(NULL, "\n", &save)) {
            size_t wl = strlen(w);
            char plan[200];
            snprintf(plan, sizeof plan, "%s.plan", w);
            if (name_rank(plan, "rank", ".plan") != rank ||
                len + wl + 2 > cap)
                continue;
            if (len)
                out[len++] = ',';
            memcpy(out + len, w, wl + 1);
            len += wl;
            n++;
        }
    }
    free(buf);
    if (pfd >= 0)
        close(pfd);
    return n;
}

/* Leaves msg in .pending/failed; a failure to do so is logged by the
 * caller's status. */
static void record_failure(const char *dir, const char *msg)
{
    (void)put_control(dir, "failed", msg);
}

/* 1 while some process runs the commit of dir: a live committer holds
 * its claim (format/claim.h), or, where locks work, its commit.lock. */
static int commit_running(const char *dir)
{
    char who[128];
    if (ckpt_claim_held(dir, who, sizeof who))
        return 1;
    int pfd = ckpt_pending_open(dir, 1, NULL);
    if (pfd < 0)
        return 0;
    int fd = ckpt_confine_at(pfd, "commit.lock", O_RDWR, 0, geteuid());
    close(pfd);
    if (fd < 0)
        return 0;
    int busy = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd);
    return busy;
}


int rdv_retry(const char *dir, int world, ckpt_error *err)
{
    int pfd = ckpt_pending_open(dir, 1, NULL);
    if (pfd >= 0) {
        (void)unlinkat(pfd, "failed", 0);   /* a name: nothing followed */
        close(pfd);
    }
    return rdv_commit(dir, world, err);
}

int rdv_commit(const char *dir, int world, ckpt_error *err)
{
    ckpt_commit_opts o;
    ckpt_commit_opts_init(&o);
    o.world_size = world;
    int rc = ckpt_commit(dir, &o, err);
    if (rc && ckpt_claim_committed(dir) == 1)
        return 0;                 /* another mount committed it first */
    if (rc)
        record_failure(dir, err ? err->msg : "commit failed");
    return rc;
}

/* The message left in .pending/failed or the unsynced mark, into msg;
 * 0 when there is none. */
static int failure_of(const char *dir, char *msg, size_t cap)
{
    if (ckpt_save_unsynced(dir, msg, cap))
        return 1;
    int pfd = ckpt_pending_open(dir, 1, NULL);
    if (pfd < 0)
        return 0;
    int there = ckpt_pending_read(pfd, "failed", msg, cap);
    close(pfd);
    return there;
}

int rdv_status(const char *dir, int world, char *buf, size_t cap)
{
    char msg[1100];
    /* "committed" only once index.db is durable: its committer finished,
     * or what a dead one published was synced here.  A committer still at
     * it may yet withdraw index.db. */
    if (ckpt_claim_committed(dir) == 1)
        return snprintf(buf, cap, "committed\n");
    if (ckpt_dir_probe(dir) == CKPT_DIR_COMMITTED)
        return snprintf(buf, cap, "committing\n");
    if (failure_of(dir, msg, sizeof msg)) {
        msg[strcspn(msg, "\n")] = '\0';
        return snprintf(buf, cap, "failed: %s\n", msg);
    }
    int count = 0;
    int pfd = ckpt_pending_open(dir, 1, NULL);
    if (pfd < 0 || count_marks(pfd, dir, world, &count, NULL) != 0)
        count = 0;
    if (pfd >= 0)
        close(pfd);
    if (count < world)
        return snprintf(buf, cap, "pending %d/%d\n", count, world);
    if (commit_running(dir))
        return snprintf(buf, cap, "committing\n");
    /* Every rank is in but nobody commits: the committer died (or could
     * not even record its failure).  Commit now. */
    ckpt_error e = { 0 };
    if (rdv_commit(dir, world, &e) == 0)
        return snprintf(buf, cap, "committed\n");
    e.msg[strcspn(e.msg, "\n")] = '\0';
    return snprintf(buf, cap, "failed: %s\n", e.msg);
}

/* One line: newlines and tabs of the parts become spaces. */
static void flatten(char *s)
{
    for (; *s; s++)
        if (*s == '\n' || *s == '\r' || *s == '\t')
            *s = ' ';
}

void rdv_note_error(const char *dir, const char *who, const char *file,
                    const char *by, const char *why)
{
    char name[300], line[2048];
    snprintf(name, sizeof name, NOTES_PREFIX "%s", who);
    int n = snprintf(line, sizeof line, "%s: %s (%s)", file, why, by);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line - 1)
        n = (int)sizeof line - 2;
    line[n] = '\0';
    flatten(line);
    line[n++] = '\n';
    int pfd = ckpt_pending_open(dir, 1, NULL);
    if (pfd < 0)
        return;
    int fd = ckpt_confine_at(pfd, name, O_WRONLY | O_CREAT | O_APPEND, 0644,
                             geteuid());
    close(pfd);
    if (fd < 0)
        return;
    /* Past the bound on a control file the notes stop: .ckptfs/errors
     * would not show more of them anyway. */
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size + n <= CKPT_CONTROL_MAX)
        (void)ckpt_write_full(fd, line, (size_t)n, name, NULL);
    close(fd);
}

/* Appends n bytes to the growing string *s (len, cap). */
static int append(char **s, size_t *len, size_t *cap, const char *p,
                  size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = (*len + n + 1) * 2;
        char *v = realloc(*s, c);
        if (!v)
            return -ENOMEM;
        *s = v;
        *cap = c;
    }
    memcpy(*s + *len, p, n);
    *len += n;
    (*s)[*len] = '\0';
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int is_note(const struct dirent *e)
{
    return strncmp(e->d_name, NOTES_PREFIX, strlen(NOTES_PREFIX)) == 0;
}

/* Appends control file `name` of pfd to *s, at most what remains of
 * CKPT_CONTROL_MAX bytes in all (*s ends with a note that the rest was
 * cut). */
static int append_file(char **s, size_t *len, size_t *cap, int pfd,
                       const char *name)
{
    size_t room = *len < CKPT_CONTROL_MAX ? CKPT_CONTROL_MAX - *len : 0;
    char *buf = malloc(room + 1);
    if (!buf)
        return -ENOMEM;
    int rc = 0;
    if (room && ckpt_pending_read(pfd, name, buf, room + 1))
        rc = append(s, len, cap, buf, strlen(buf));
    free(buf);
    return rc;
}

int rdv_errors(const char *dir, char **out, size_t *len)
{
    char msg[1100];
    size_t cap = 0;
    *out = NULL;
    *len = 0;
    int rc = append(out, len, &cap, "", 0);
    int pfd = rc == 0 ? ckpt_pending_open(dir, 1, NULL) : -1;
    if (pfd >= 0) {
        int fd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct dirent **v = NULL;
        int n = fd >= 0 ? scandirat(fd, ".", &v, is_note, by_name) : 0;
        for (int i = 0; i < n; i++) {
            if (rc == 0)
                rc = append_file(out, len, &cap, pfd, v[i]->d_name);
            free(v[i]);
        }
        free(v);
        if (fd >= 0)
            close(fd);
        close(pfd);
    }
    if (rc == 0 && failure_of(dir, msg, sizeof msg)) {
        msg[strcspn(msg, "\n")] = '\0';
        char line[1200];
        int n = snprintf(line, sizeof line, "commit refused: %s\n", msg);
        rc = append(out, len, &cap, line, (size_t)n < sizeof line ?
                    (size_t)n : sizeof line - 1);
    }
    if (rc) {
        free(*out);
        *out = NULL;
        *len = 0;
    }
    return rc;
}
