/*
 * mounthint.c - where a path inside a ckptfs mount comes from on disk
 * (see mounthint.h), from /proc/self/mountinfo: the deepest mount of type
 * fuse.ckptfs above the path, whose device field is its SOURCE.
 */
#include "mounthint.h"
#include "cli.h"
#include "common/mountinfo.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The length of mount point m when it is path or an ancestor of it, else
 * 0 ("/" counts as length 1). */
static size_t covers(const char *m, const char *path)
{
    size_t n = strlen(m);
    if (strcmp(m, "/") == 0)
        return 1;
    if (strncmp(m, path, n) != 0 || (path[n] != '\0' && path[n] != '/'))
        return 0;
    return n;
}

/* The search for the deepest ckptfs mount above `path`. */
typedef struct hint_search {
    const char *path;
    size_t best;
    ckpt_mount found;
} hint_search;

static int match_ckptfs(const ckpt_mount *m, void *arg)
{
    hint_search *s = arg;
    size_t n = covers(m->point, s->path);
    if (n && n >= s->best && strcmp(m->fstype, "fuse.ckptfs") == 0) {
        s->best = n;
        s->found = *m;
    }
    return 0;
}

static int match_any(const ckpt_mount *m, void *arg)
{
    hint_search *s = arg;
    size_t n = covers(m->point, s->path);
    if (n && n >= s->best) {
        s->best = n;
        s->found = *m;
    }
    return 0;
}

int cli_mount_hint(const char *path, char *buf, size_t cap)
{
    char disk[2 * PATH_MAX];
    hint_search *s = calloc(1, sizeof *s);
    char *abs = s ? realpath(path, NULL) : NULL;
    if (abs) {
        s->path = abs;
        if (ckpt_mountinfo_each(match_ckptfs, s) != 0)
            s->best = 0;
    }
    if (!abs || s->best == 0) {
        free(abs);
        free(s);
        return 0;
    }
    const char *mnt = s->found.point, *src = s->found.source;
    /* The checkpoint: SOURCE itself, or its subdirectory named by the
     * first component below the mount point (a root mount). */
    const char *rel = abs + strlen(mnt);
    while (*rel == '/')
        rel++;
    size_t first = strcspn(rel, "/");
    snprintf(disk, sizeof disk, "%s/%.*s", src, (int)first, rel);
    if (first == 0 || ckpt_format_probe(disk, NULL, 0) == CKPT_FORMAT_NONE)
        snprintf(disk, sizeof disk, "%s", src);
    if (ckpt_format_probe(disk, NULL, 0) != CKPT_FORMAT_NONE)
        snprintf(buf, cap, "it is inside the ckptfs mount of %s on %s, "
                 "which shows tensors as files; ckpt reads checkpoints on "
                 "disk: try %s", src, mnt, disk);
    else
        snprintf(buf, cap, "it is inside the ckptfs mount of %s on %s, "
                 "which shows tensors as files; ckpt reads checkpoints on "
                 "disk, in %s", src, mnt, src);
    free(abs);
    free(s);
    return 1;
}

int cli_fstype(const char *path, char *buf, size_t cap)
{
    hint_search *s = calloc(1, sizeof *s);
    char *abs = s ? realpath(path, NULL) : NULL;
    int rc = -1;
    if (abs) {
        s->path = abs;
        if (ckpt_mountinfo_each(match_any, s) == 0 && s->best) {
            snprintf(buf, cap, "%s", s->found.fstype);
            rc = 0;
        }
    }
    free(abs);
    free(s);
    return rc;
}
