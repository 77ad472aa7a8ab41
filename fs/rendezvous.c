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
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "format/lease.h"

#define MARKER_PREFIX "rank-"
#define NOTES_PREFIX "errors."

static int pending_path(char *out, size_t cap, const char *dir,
                        const char *name, ckpt_error *err)
{
    char pending[4096];
    int rc = ckpt_path_join(pending, sizeof pending, dir, ".pending", err);
    return rc ? rc : ckpt_path_join(out, cap, pending, name, err);
}

/* Number of rank markers in dir/.pending (0 when it is gone). */
static int count_marks(const char *dir, int world, int *count,
                       ckpt_error *err)
{
    char pending[4096];
    int rc = ckpt_path_join(pending, sizeof pending, dir, ".pending", err);
    if (rc)
        return rc;
    *count = 0;
    DIR *d = opendir(pending);
    if (!d)
        return errno == ENOENT ? 0 : ckpt_err_sys(err, -errno, "cannot list "
                                                  "%s", pending);
    struct dirent *e;
    size_t plen = strlen(MARKER_PREFIX);
    while ((e = readdir(d))) {
        char *end;
        if (strncmp(e->d_name, MARKER_PREFIX, plen) != 0)
            continue;
        long r = strtol(e->d_name + plen, &end, 10);
        if (*end == '\0' && r >= 0 && r < world)
            (*count)++;
    }
    closedir(d);
    return 0;
}

int rdv_mark(const char *dir, int rank, int world, int *complete,
             ckpt_error *err)
{
    char name[64], path[4096];
    *complete = 0;
    if (rank < 0 || rank >= world)
        return ckpt_err(err, -EINVAL, "%s: rank %d is outside 0..%d (the "
                        "mount's world=%d)", dir, rank, world - 1, world);
    snprintf(name, sizeof name, MARKER_PREFIX "%d", rank);
    int rc = pending_path(path, sizeof path, dir, name, err);
    if (rc)
        return rc;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    int again = fd < 0 && errno == EEXIST;
    if (fd < 0 && !again)
        return ckpt_err_sys(err, -errno, "cannot create %s", path);
    /* The world in the marker: gc leaves a save whose every rank is in
     * (its commit was cut short), src/write/gc.c. */
    if (fd >= 0) {
        char text[32];
        int n = snprintf(text, sizeof text, "world %d\n", world);
        rc = ckpt_write_full(fd, text, (size_t)n, path, err);
        if (close(fd) != 0 && rc == 0)
            rc = ckpt_err_sys(err, -errno, "cannot write %s", path);
        if (rc) {
            unlink(path);
            return rc;
        }
    }
    int count;
    rc = count_marks(dir, world, &count, err);
    if (rc == 0)
        *complete = count == world;
    if (rc == 0 && again)
        rc = ckpt_err(err, -EALREADY, "%s: rank %d has already committed "
                      "(%d of %d ranks are in)", dir, rank, count, world);
    return rc;
}

/* Leaves msg in .pending/failed (written aside, synced, then renamed
 * over); a failure to do so is logged by the caller's status. */
static void record_failure(const char *dir, const char *msg)
{
    char path[4096], tmp[4200];
    if (pending_path(path, sizeof path, dir, "failed", NULL))
        return;
    snprintf(tmp, sizeof tmp, "%s.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    int bad = ckpt_write_full(fd, msg, strlen(msg), tmp, NULL) != 0 ||
              fsync(fd) != 0;
    if (close(fd) != 0 || bad || rename(tmp, path) != 0)
        unlink(tmp);
}

/* 1 while some process runs the commit of dir (holds its commit.lock). */
static int commit_running(const char *dir)
{
    char path[4096];
    if (pending_path(path, sizeof path, dir, "commit.lock", NULL))
        return 0;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int busy = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd);
    return busy;
}


int rdv_retry(const char *dir, int world, ckpt_error *err)
{
    char path[4096];
    if (pending_path(path, sizeof path, dir, "failed", NULL) == 0)
        unlink(path);
    return rdv_commit(dir, world, err);
}

int rdv_commit(const char *dir, int world, ckpt_error *err)
{
    ckpt_commit_opts o;
    ckpt_commit_opts_init(&o);
    o.world_size = world;
    int rc = ckpt_commit(dir, &o, err);
    if (rc && ckpt_dir_probe(dir) == CKPT_DIR_COMMITTED)
        return 0;                 /* another mount committed it first */
    if (rc)
        record_failure(dir, err ? err->msg : "commit failed");
    return rc;
}

/* The message left in .pending/failed or the unsynced mark, into msg;
 * 0 when there is none. */
static int failure_of(const char *dir, char *msg, size_t cap)
{
    char path[4096];
    if (ckpt_save_unsynced(dir, msg, cap))
        return 1;
    if (pending_path(path, sizeof path, dir, "failed", NULL))
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, msg, cap - 1);
    close(fd);
    msg[n > 0 ? n : 0] = '\0';
    return 1;
}

int rdv_status(const char *dir, int world, char *buf, size_t cap)
{
    char msg[1100];
    if (ckpt_dir_probe(dir) == CKPT_DIR_COMMITTED)
        return snprintf(buf, cap, "committed\n");
    if (failure_of(dir, msg, sizeof msg)) {
        msg[strcspn(msg, "\n")] = '\0';
        return snprintf(buf, cap, "failed: %s\n", msg);
    }
    int count = 0;
    if (count_marks(dir, world, &count, NULL) != 0)
        count = 0;
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
    char name[300], path[4096], line[2048];
    snprintf(name, sizeof name, NOTES_PREFIX "%s", who);
    if (pending_path(path, sizeof path, dir, name, NULL))
        return;
    int n = snprintf(line, sizeof line, "%s: %s (%s)", file, why, by);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line - 1)
        n = (int)sizeof line - 2;
    line[n] = '\0';
    flatten(line);
    line[n++] = '\n';
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    (void)ckpt_write_full(fd, line, (size_t)n, path, NULL);
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

/* Appends the content of file path to *s. */
static int append_file(char **s, size_t *len, size_t *cap, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;              /* gone meanwhile: nothing to add */
    char buf[8192];
    ssize_t n;
    int rc = 0;
    while (rc == 0 && (n = read(fd, buf, sizeof buf)) > 0)
        rc = append(s, len, cap, buf, (size_t)n);
    close(fd);
    return rc;
}

int rdv_errors(const char *dir, char **out, size_t *len)
{
    char pending[4096], path[4400], msg[1100];
    size_t cap = 0;
    *out = NULL;
    *len = 0;
    int rc = append(out, len, &cap, "", 0);
    if (rc == 0 && ckpt_path_join(pending, sizeof pending, dir, ".pending",
                                  NULL) == 0) {
        struct dirent **v = NULL;
        int n = scandir(pending, &v, is_note, by_name);
        for (int i = 0; i < n; i++) {
            snprintf(path, sizeof path, "%s/%s", pending, v[i]->d_name);
            if (rc == 0)
                rc = append_file(out, len, &cap, path);
            free(v[i]);
        }
        free(v);
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
