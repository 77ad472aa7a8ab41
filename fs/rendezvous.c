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
#include <unistd.h>

#include "error.h"
#include "fileio.h"

#define MARKER_PREFIX "rank-"

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
    if (fd < 0 && errno == EEXIST)
        return ckpt_err(err, -EINVAL, "%s: rank %d has already committed",
                        dir, rank);
    if (fd < 0)
        return ckpt_err_sys(err, -errno, "cannot create %s", path);
    close(fd);
    int count;
    rc = count_marks(dir, world, &count, err);
    if (rc == 0)
        *complete = count == world;
    return rc;
}

/* Leaves msg in .pending/failed (written aside, then renamed over). */
static void record_failure(const char *dir, const char *msg)
{
    char path[4096], tmp[4200];
    if (pending_path(path, sizeof path, dir, "failed", NULL))
        return;
    snprintf(tmp, sizeof tmp, "%s.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    int bad = fputs(msg, f) < 0;
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0)
        unlink(tmp);
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

int rdv_status(const char *dir, int world, char *buf, size_t cap)
{
    if (ckpt_dir_probe(dir) == CKPT_DIR_COMMITTED)
        return snprintf(buf, cap, "committed\n");
    char path[4096], msg[1100];
    FILE *f = pending_path(path, sizeof path, dir, "failed", NULL) == 0
                  ? fopen(path, "r") : NULL;
    if (f) {
        size_t n = fread(msg, 1, sizeof msg - 1, f);
        fclose(f);
        msg[n] = '\0';
        msg[strcspn(msg, "\n")] = '\0';
        return snprintf(buf, cap, "failed: %s\n", msg);
    }
    int count = 0;
    if (count_marks(dir, world, &count, NULL) != 0)
        count = 0;
    return snprintf(buf, cap, "pending %d/%d\n", count, world);
}
