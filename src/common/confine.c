/*
 * confine.c - opening a checkpoint's files without leaving its directory
 * (see confine.h): a walk from the directory's descriptor, one component
 * at a time with O_NOFOLLOW, and the Hugging Face cache's links read and
 * checked as text rather than followed.
 */
#include "common/confine.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif
#if defined(SYS_openat2) && __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#define HAVE_OPENAT2 1
#else
#define HAVE_OPENAT2 0
#endif

#include "common/error.h"

/* ------------------------------------------------------------ opening */

static int is_dot_name(const char *s, size_t n)
{
    return (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.');
}

/* The last component of path[0..n) (no trailing '/'). */
static const char *base_of(const char *path, size_t n, size_t *len)
{
    size_t e = n;
    while (e > 1 && path[e - 1] == '/')
        e--;
    size_t b = e;
    while (b > 0 && path[b - 1] != '/')
        b--;
    *len = e - b;
    return path + b;
}

/* When real (a canonical path) is .../models--X/snapshots/REV, opens the
 * repository's blobs/ below the directory fd, after checking that the
 * repository's snapshots/REV is that very directory. */
static int open_hf_blobs(int fd, const char *real)
{
    size_t n = strlen(real), rlen, slen, mlen;
    const char *rev = base_of(real, n, &rlen);
    const char *snaps = base_of(real, (size_t)(rev - real), &slen);
    const char *repo = base_of(real, (size_t)(snaps - real), &mlen);
    if (rlen == 0 || is_dot_name(rev, rlen) || slen != 9 ||
        memcmp(snaps, "snapshots", 9) != 0 || mlen <= 8 ||
        memcmp(repo, "models--", 8) != 0)
        return -1;
    char sub[NAME_MAX + 16];
    snprintf(sub, sizeof sub, "snapshots/%.*s", (int)rlen, rev);
    int repo_fd = openat(fd, "../..", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (repo_fd < 0)
        return -1;
    struct stat here, there;
    int blobs = -1;
    if (fstat(fd, &here) == 0 &&
        fstatat(repo_fd, sub, &there, AT_SYMLINK_NOFOLLOW) == 0 &&
        here.st_dev == there.st_dev && here.st_ino == there.st_ino)
        blobs = openat(repo_fd, "blobs", O_PATH | O_DIRECTORY | O_NOFOLLOW |
                       O_CLOEXEC);
    close(repo_fd);
    return blobs;
}

int ckpt_confine_open(ckpt_confine *c, const char *dir, int follow,
                      ckpt_error *err)
{
    *c = (ckpt_confine){ .fd = -1, .blobs_fd = -1, .follow = follow };
    if (!(c->dir = strdup(dir)))
        return ckpt_err(err, -ENOMEM, "out of memory");
    c->fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (c->fd < 0) {
        int rc = ckpt_err_sys(err, -errno, "cannot open directory %s", dir);
        ckpt_confine_close(c);
        return rc;
    }
    char *real = follow ? NULL : realpath(dir, NULL);
    if (real)
        c->blobs_fd = open_hf_blobs(c->fd, real);
    free(real);
    return 0;
}

void ckpt_confine_close(ckpt_confine *c)
{
    if (c->fd >= 0)
        close(c->fd);
    if (c->blobs_fd >= 0)
        close(c->blobs_fd);
    free(c->dir);
    *c = (ckpt_confine){ .fd = -1, .blobs_fd = -1 };
}

/* -ELOOP naming dir/rel: a link the walk does not follow. */
static int refuse_link(const ckpt_confine *c, const char *rel,
                       ckpt_error *err)
{
    return ckpt_err(err, -ELOOP, "%s/%s is, or lies under, a symbolic "
                    "link, which is not followed: only files inside the "
                    "checkpoint directory are read, unless ckpt "
                    "--follow-links or ckptfs -o follow_links is given",
                    c->dir, rel);
}

/* Opens the blob a Hugging Face snapshot link names, if `link` (the text
 * of the link at depth `depth` below the snapshot) is exactly
 * "../" x (depth + 2) "blobs/NAME". */
static int open_hf_link(const ckpt_confine *c, const char *link, int depth)
{
    for (int i = 0; i < depth + 2; i++, link += 3)
        if (strncmp(link, "../", 3) != 0)
            return -ELOOP;
    if (strncmp(link, "blobs/", 6) != 0)
        return -ELOOP;
    link += 6;
    if (!*link || strchr(link, '/') || is_dot_name(link, strlen(link)))
        return -ELOOP;
    int fd = openat(c->blobs_fd, link, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
                    O_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

/* The last component `name` of rel, in the directory dfd at `depth`:
 * opened without following it, unless it is a Hugging Face link. */
static int open_last(const ckpt_confine *c, int dfd, const char *name,
                     int depth)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
                    O_CLOEXEC);
    if (fd >= 0 || errno != ELOOP || c->blobs_fd < 0)
        return fd >= 0 ? fd : -errno;
    char link[PATH_MAX];
    ssize_t n = readlinkat(dfd, name, link, sizeof link - 1);
    if (n < 0)
        return -ELOOP;
    link[n] = '\0';
    return open_hf_link(c, link, depth);
}

/* Walks rel from the directory, component by component. */
static int walk(const ckpt_confine *c, const char *rel)
{
    int dfd = c->fd, depth = 0, rc;
    const char *s = rel;
    for (;;) {
        size_t n = strcspn(s, "/");
        char name[NAME_MAX + 1];
        if (n > NAME_MAX) {
            rc = -ENAMETOOLONG;
            break;
        }
        memcpy(name, s, n);
        name[n] = '\0';
        if (s[n] == '\0') {
            rc = open_last(c, dfd, name, depth);
            break;
        }
        if (n == 0 || (n == 1 && name[0] == '.')) {
            s += n + 1;          /* "a//b", "./a": nothing to walk */
            continue;
        }
        int next = openat(dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW |
                          O_CLOEXEC);
        if (next < 0) {
            struct stat st;
            rc = errno == ENOTDIR && fstatat(dfd, name, &st,
                                             AT_SYMLINK_NOFOLLOW) == 0 &&
                         S_ISLNK(st.st_mode) ? -ELOOP : -errno;
            break;
        }
        if (dfd != c->fd)
            close(dfd);
        dfd = next;
        depth++;
        s += n + 1;
    }
    if (dfd != c->fd)
        close(dfd);
    return rc;
}

/* A relative path that names something below the directory. */
static int inside(const char *rel)
{
    if (!*rel || rel[0] == '/')
        return 0;
    for (const char *s = rel; *s;) {
        size_t n = strcspn(s, "/");
        if (n == 2 && s[0] == '.' && s[1] == '.')
            return 0;
        s += n + (s[n] == '/');
    }
    return rel[strlen(rel) - 1] != '/';
}

int ckpt_confine_openat(const ckpt_confine *c, const char *rel,
                        ckpt_error *err)
{
    if (!inside(rel))
        return ckpt_err(err, -EINVAL, "%s: file name '%s' is not a path "
                        "inside the checkpoint directory", c->dir, rel);
    int fd = c->follow ? openat(c->fd, rel, O_RDONLY | O_NONBLOCK |
                                O_CLOEXEC)
                       : walk(c, rel);
    if (c->follow && fd < 0)
        fd = -errno;
    if (fd == -ELOOP)
        return refuse_link(c, rel, err);
    if (fd < 0)
        return ckpt_err_sys(err, fd, "%s/%s", c->dir, rel);
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = ckpt_err_sys(err, -errno, "%s/%s", c->dir, rel);
    else if (!S_ISREG(st.st_mode))
        rc = ckpt_err(err, -EINVAL, "%s/%s is not a regular file", c->dir,
                      rel);
    /* O_NONBLOCK only kept a FIFO from blocking the open. */
    else if (fcntl(fd, F_SETFL, 0) != 0)
        rc = ckpt_err_sys(err, -errno, "%s/%s", c->dir, rel);
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

int ckpt_confine_stat(const ckpt_confine *c, const char *rel,
                      struct stat *st, ckpt_error *err)
{
    int fd = ckpt_confine_openat(c, rel, err);
    if (fd < 0)
        return fd;
    int rc = fstat(fd, st) == 0 ? 0 : ckpt_err_sys(err, -errno, "%s/%s",
                                                   c->dir, rel);
    close(fd);
    return rc;
}

/* ------------------------------------------------------------ at a dirfd */

/* openat without following a link anywhere in name.  One component
 * (what the callers open) is openat with O_NOFOLLOW, which is exactly
 * that; a longer path takes openat2 with RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS where the kernel has it (Linux 5.6), and is refused
 * (-EINVAL) where it does not. */
static int open_beneath(int dfd, const char *name, int flags, mode_t mode)
{
    if (!strchr(name, '/')) {
        int fd = openat(dfd, name, flags, mode);
        return fd >= 0 ? fd : -errno;
    }
#if HAVE_OPENAT2
    struct open_how how = { .flags = (uint64_t)flags,
                            .mode = (flags & O_CREAT) ? mode : 0,
                            .resolve = RESOLVE_BENEATH |
                                       RESOLVE_NO_SYMLINKS |
                                       RESOLVE_NO_MAGICLINKS };
    int fd = (int)syscall(SYS_openat2, dfd, name, &how, sizeof how);
    if (fd >= 0 || (errno != ENOSYS && errno != EPERM))
        return fd >= 0 ? fd : -errno;
#endif
    return -EINVAL;
}

int ckpt_confine_at(int dfd, const char *name, int flags, mode_t mode,
                    uid_t owner)
{
    if (!*name || is_dot_name(name, strlen(name)))
        return -EINVAL;
    int fd = open_beneath(dfd, name, flags | O_NOFOLLOW | O_NONBLOCK |
                          O_CLOEXEC, mode);
    if (fd < 0)
        return fd;
    struct stat st;
    int want_dir = (flags & O_DIRECTORY) != 0;
    int rc = fstat(fd, &st) != 0 ? -errno
             : want_dir ? (S_ISDIR(st.st_mode) ? 0 : -EINVAL)
             : (S_ISREG(st.st_mode) ? 0 : -EINVAL);
    if (rc == 0 && owner != CKPT_ANY_OWNER && st.st_uid != owner)
        rc = -EPERM;
    if (rc == 0 && !want_dir && !(flags & O_PATH) &&
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
        rc = -errno;
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

ssize_t ckpt_read_bounded(int fd, char *buf, size_t cap)
{
    size_t got = 0;
    while (cap && got < cap - 1) {
        ssize_t n = pread(fd, buf + got, cap - 1 - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            buf[got] = '\0';
            return -errno;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    if (cap)
        buf[got] = '\0';
    return (ssize_t)got;
}
