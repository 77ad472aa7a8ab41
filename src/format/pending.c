/*
 * pending.c - opening a save's .pending/ and its control files without
 * following what another user planted there (see pending.h).
 */
#include "format/pending.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/confine.h"
#include "common/error.h"

int ckpt_pending_open(const char *dir, int owned, ckpt_error *err)
{
    int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return ckpt_err_sys(err, -errno, "cannot open directory %s", dir);
    int pfd = ckpt_confine_at(dfd, ".pending", O_RDONLY | O_DIRECTORY, 0,
                              CKPT_ANY_OWNER);
    close(dfd);
    if (pfd == -ENOENT)
        return ckpt_err(err, pfd, "%s has no .pending/", dir);
    if (pfd == -ELOOP || pfd == -EINVAL || pfd == -ENOTDIR)
        return ckpt_err(err, -ENOTDIR, "%s/.pending"
                        " is not a directory (a symbolic link or another "
                        "file): it is not followed", dir);
    if (pfd < 0)
        return ckpt_err_sys(err, pfd, "cannot open %s/.pending", dir);
    struct stat st;
    if (owned && fstat(pfd, &st) == 0 && st.st_uid != geteuid()) {
        close(pfd);
        return ckpt_err(err, -EPERM, "%s/.pending belongs to user %ld, not "
                        "to user %ld who acts on it: a save is written and "
                        "committed only by the user who owns it (run as that "
                        "user; docs/TRUST.md)", dir, (long)st.st_uid,
                        (long)geteuid());
    }
    return pfd;
}

int ckpt_pending_file(int pfd, const char *dir, const char *name, int flags,
                      ckpt_error *err)
{
    int fd = ckpt_confine_at(pfd, name, flags, 0644, geteuid());
    if (fd >= 0)
        return fd;
    if (fd == -ELOOP)
        return ckpt_err(err, fd, "%s/.pending/%s is a symbolic link, which "
                        "is not followed", dir, name);
    if (fd == -EINVAL)
        return ckpt_err(err, fd, "%s/.pending/%s is not a regular file",
                        dir, name);
    if (fd == -EPERM)
        return ckpt_err(err, fd, "%s/.pending/%s belongs to another user "
                        "than %ld who acts on it", dir, name,
                        (long)geteuid());
    return ckpt_err_sys(err, fd, "cannot open %s/.pending/%s", dir, name);
}

int ckpt_pending_read(int pfd, const char *name, char *buf, size_t cap)
{
    if (cap)
        buf[0] = '\0';
    int fd = ckpt_confine_at(pfd, name, O_RDONLY, 0, geteuid());
    if (fd < 0)
        return 0;
    ssize_t n = ckpt_read_bounded(fd, buf, cap);
    close(fd);
    return n >= 0;
}
