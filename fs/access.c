/*
 * access.c - owners and modes of the directories the mount shows, and the
 * owner of a save in progress (see access.h).
 */
#include "access.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/perm.h"

mode_t access_read_search(mode_t mode)
{
    return (mode & 0444) | (mode & 0444) >> 2;
}

/* Folds into p a file or directory st that grants `mode` (0555 at most)
 * to its owner, group and others. */
static void fold(ckpt_perm *p, const struct stat *st, mode_t mode)
{
    struct stat as = *st;
    as.st_mode = (st->st_mode & ~(mode_t)0777) | mode;
    ckpt_perm_add(p, &as);
}

void access_fold_listing(ckpt_perm *p, const ckpt_perm *listing)
{
    struct stat st = { .st_uid = listing->uid, .st_gid = listing->gid,
                       .st_mode = S_IFREG };
    fold(p, &st, access_read_search(listing->mode));
}

/* Folds the search bits of every directory of real (an absolute path
 * without links) that the mount skips to reach it: those strictly between
 * root and real when real is inside root, else every ancestor of real. */
static void fold_reach(ckpt_perm *p, const char *root, const char *real)
{
    size_t rl = strlen(root);
    int inside = strncmp(real, root, rl) == 0 && real[rl] == '/';
    char prefix[PATH_MAX];
    size_t len = strlen(real);
    if (len >= sizeof prefix) {
        ckpt_perm_add_none(p);
        return;
    }
    for (size_t i = 0; i < len; i++) {
        if (real[i] != '/' || (inside && i <= rl))
            continue;
        memcpy(prefix, real, i ? i : 1);
        prefix[i ? i : 1] = '\0';
        struct stat st;
        if (stat(prefix, &st) != 0) {
            ckpt_perm_add_none(p);
            return;
        }
        ckpt_perm_add_search(p, &st);
    }
}

void access_ckpt_dir(const char *root, const char *dir,
                     const struct stat *index, ckpt_perm *out,
                     struct stat *seen)
{
    memset(seen, 0, sizeof *seen);
    ckpt_perm_init(out, index);
    out->mode = (uint32_t)access_read_search(index->st_mode);
    char *real = realpath(dir, NULL);
    struct stat st;
    if (!real || stat(real, &st) != 0) {
        ckpt_perm_add_none(out);        /* cannot be looked at */
    } else if (S_ISDIR(st.st_mode)) {
        /* The directory's own owner and bits first, the index's folded. */
        ckpt_perm_init(out, &st);
        out->mode &= 0555;
        fold(out, index, access_read_search(index->st_mode));
        if (root)
            fold_reach(out, root, real);
        *seen = st;
    }                                   /* a file SOURCE: the index's */
    free(real);
}

int access_same_dir(const struct stat *seen, const struct stat *st)
{
    return !S_ISDIR(seen->st_mode) ||
           (st->st_dev == seen->st_dev && st->st_ino == seen->st_ino);
}

int access_give_dir(const char *path, const access_owner *o,
                    ckpt_error *err)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return ckpt_err_sys(err, -errno, "%s", path);
    struct stat st;
    int rc = fstat(fd, &st) == 0 ? 0 : -errno;
    if (rc == 0 && st.st_uid != geteuid())
        rc = ckpt_err(err, -EPERM, "%s: not made by this daemon (owner "
                      "uid %u)", path, (unsigned)st.st_uid);
    /* Under a set-gid directory the group is inherited, as on the disk. */
    gid_t gid = (st.st_mode & S_ISGID) ? st.st_gid : o->gid;
    if (rc == 0 && st.st_uid != o->uid && fchown(fd, o->uid, gid) != 0)
        rc = ckpt_err(err, -EPERM, "%s: cannot give the save to uid %u "
                      "(%s): a daemon that is not root makes saves for its "
                      "own user only", path, (unsigned)o->uid,
                      strerror(errno));
    else if (rc == 0 && st.st_uid == o->uid && st.st_gid != gid)
        (void)!fchown(fd, (uid_t)-1, gid);  /* not a member: keep it */
    mode_t mode = (o->mode & 01777) | (st.st_mode & S_ISGID);
    if (rc == 0 && fchmod(fd, mode) != 0)
        rc = ckpt_err_sys(err, -errno, "%s: chmod", path);
    close(fd);
    return rc;
}

/* root/name into buf: 0 or -ENAMETOOLONG. */
static int save_path(char *buf, size_t cap, const char *root,
                     const char *name)
{
    int n = snprintf(buf, cap, "%s/%s", root, name);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int access_save_stat(const char *root, const char *name, struct stat *st)
{
    char path[PATH_MAX];
    int rc = save_path(path, sizeof path, root, name);
    if (rc == 0 && lstat(path, st) != 0)
        rc = -errno;
    return rc == 0 && !S_ISDIR(st->st_mode) ? -ENOTDIR : rc;
}

int access_chmod_save(const char *root, const char *name, mode_t mode)
{
    char path[PATH_MAX];
    int rc = save_path(path, sizeof path, root, name);
    if (rc)
        return rc;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    rc = fchmod(fd, mode & 03777) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}
