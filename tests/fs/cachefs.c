/* cachefs.c - a writable pass-through FUSE file system that caches names,
 * attributes and misses for a long time: one node's stale view of a shared
 * directory, as a network file system's client caches (NFS's actimeo, a
 * FUSE network file system's attr_timeout).  tests/fs/mount_nolocks.sh
 * mounts it over the shared ROOT and gives it to one "node" as its ROOT.
 *
 *   cachefs [FUSE options] [-o cache_s=N] SOURCE MOUNTPOINT
 *
 * Every request is answered from SOURCE by path (libfuse3's high-level
 * API), so what the kernel still believes (a name that is gone, a file it
 * has not seen appear) reaches SOURCE as it would a server: an operation
 * on a vanished directory fails there, a create in it never makes it.
 * Entries, attributes and misses are kept by the kernel for N seconds
 * (default 3).  Locks are left to the kernel: they are this mount's alone,
 * like the locks of a client without a lock service.
 */
#define FUSE_USE_VERSION 35
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fuse.h>

#include "../bench/ptdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <unistd.h>

struct cfs {
    char *source;     /* SOURCE as given */
    int root;         /* directory fd of SOURCE */
    int cache_s;      /* -o cache_s=N */
};

static struct cfs *cfs(void)
{
    return fuse_get_context()->private_data;
}

#define RET(call) return (call) == 0 ? 0 : -errno

static void *cfs_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
    struct cfs *c = cfs();
    cfg->entry_timeout = c->cache_s;
    cfg->attr_timeout = c->cache_s;
    cfg->negative_timeout = c->cache_s;
    cfg->use_ino = 0;
    cfg->hard_remove = 1;     /* no .fuse_hidden files */
    (void)conn;
    return c;
}

static int cfs_getattr(const char *path, struct stat *st,
                       struct fuse_file_info *fi)
{
    if (fi)
        RET(fstat((int)fi->fh, st));
    RET(fstatat(cfs()->root, pt_rel(path), st, AT_SYMLINK_NOFOLLOW));
}

static int cfs_access(const char *path, int mask)
{
    RET(faccessat(cfs()->root, pt_rel(path), mask, 0));
}

static int cfs_readlink(const char *path, char *buf, size_t size)
{
    ssize_t n = readlinkat(cfs()->root, pt_rel(path), buf, size - 1);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    return 0;
}

static int cfs_mkdir(const char *path, mode_t mode)
{
    RET(mkdirat(cfs()->root, pt_rel(path), mode));
}

static int cfs_unlink(const char *path)
{
    RET(unlinkat(cfs()->root, pt_rel(path), 0));
}

static int cfs_rmdir(const char *path)
{
    RET(unlinkat(cfs()->root, pt_rel(path), AT_REMOVEDIR));
}

static int cfs_symlink(const char *to, const char *path)
{
    RET(symlinkat(to, cfs()->root, pt_rel(path)));
}

static int cfs_rename(const char *from, const char *to, unsigned flags)
{
    int r = flags ? renameat2(cfs()->root, pt_rel(from), cfs()->root, pt_rel(to),
                              flags)
                  : renameat(cfs()->root, pt_rel(from), cfs()->root, pt_rel(to));
    return r == 0 ? 0 : -errno;
}

static int cfs_link(const char *from, const char *to)
{
    RET(linkat(cfs()->root, pt_rel(from), cfs()->root, pt_rel(to), 0));
}

static int cfs_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
    if (fi)
        RET(fchmod((int)fi->fh, mode));
    RET(fchmodat(cfs()->root, pt_rel(path), mode, 0));
}

static int cfs_chown(const char *path, uid_t uid, gid_t gid,
                     struct fuse_file_info *fi)
{
    if (fi)
        RET(fchown((int)fi->fh, uid, gid));
    RET(fchownat(cfs()->root, pt_rel(path), uid, gid, AT_SYMLINK_NOFOLLOW));
}

static int cfs_truncate(const char *path, off_t size,
                        struct fuse_file_info *fi)
{
    if (fi)
        RET(ftruncate((int)fi->fh, size));
    int fd = openat(cfs()->root, pt_rel(path), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int r = ftruncate(fd, size) == 0 ? 0 : -errno;
    close(fd);
    return r;
}

static int cfs_utimens(const char *path, const struct timespec tv[2],
                       struct fuse_file_info *fi)
{
    if (fi)
        RET(futimens((int)fi->fh, tv));
    RET(utimensat(cfs()->root, pt_rel(path), tv, AT_SYMLINK_NOFOLLOW));
}

static int cfs_open(const char *path, struct fuse_file_info *fi)
{
    int fd = openat(cfs()->root, pt_rel(path), fi->flags | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    fi->fh = (uint64_t)fd;
    return 0;
}

static int cfs_create(const char *path, mode_t mode,
                      struct fuse_file_info *fi)
{
    int fd = openat(cfs()->root, pt_rel(path), fi->flags | O_CREAT | O_CLOEXEC,
                    mode);
    if (fd < 0)
        return -errno;
    fi->fh = (uint64_t)fd;
    return 0;
}

static int cfs_read(const char *path, char *buf, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    ssize_t n = pread((int)fi->fh, buf, size, off);
    return n < 0 ? -errno : (int)n;
}

static int cfs_write(const char *path, const char *buf, size_t size,
                     off_t off, struct fuse_file_info *fi)
{
    ssize_t n = pwrite((int)fi->fh, buf, size, off);
    return n < 0 ? -errno : (int)n;
}

static int cfs_statfs(const char *path, struct statvfs *st)
{
    RET(fstatvfs(cfs()->root, st));
}

static int cfs_release(const char *path, struct fuse_file_info *fi)
{
    close((int)fi->fh);
    return 0;
}

static int cfs_fsync(const char *path, int datasync,
                     struct fuse_file_info *fi)
{
    RET(datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh));
}

static int cfs_opendir(const char *path, struct fuse_file_info *fi)
{
    return pt_opendir_at(cfs()->root, path, fi);
}

static int cfs_readdir(const char *path, void *buf, fuse_fill_dir_t fill,
                       off_t off, struct fuse_file_info *fi,
                       enum fuse_readdir_flags flags)
{
    return pt_readdir_all(buf, fill, fi);
}

static int cfs_releasedir(const char *path, struct fuse_file_info *fi)
{
    return pt_releasedir_fh(fi);
}

static int cfs_fsyncdir(const char *path, int datasync,
                        struct fuse_file_info *fi)
{
    RET(fsync(dirfd((DIR *)(uintptr_t)fi->fh)));
}

static const struct fuse_operations cfs_ops = {
    .init = cfs_init,
    .getattr = cfs_getattr,
    .access = cfs_access,
    .readlink = cfs_readlink,
    .mkdir = cfs_mkdir,
    .unlink = cfs_unlink,
    .rmdir = cfs_rmdir,
    .symlink = cfs_symlink,
    .rename = cfs_rename,
    .link = cfs_link,
    .chmod = cfs_chmod,
    .chown = cfs_chown,
    .truncate = cfs_truncate,
    .utimens = cfs_utimens,
    .open = cfs_open,
    .create = cfs_create,
    .read = cfs_read,
    .write = cfs_write,
    .statfs = cfs_statfs,
    .release = cfs_release,
    .fsync = cfs_fsync,
    .opendir = cfs_opendir,
    .readdir = cfs_readdir,
    .releasedir = cfs_releasedir,
    .fsyncdir = cfs_fsyncdir,
};

/* Takes the first non-option argument as SOURCE, leaves the rest to FUSE. */
static int opt_proc(void *data, const char *arg, int key,
                    struct fuse_args *outargs)
{
    return pt_take_source(&((struct cfs *)data)->source, arg, key, "cachefs");
}

int main(int argc, char **argv)
{
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct cfs c = { .source = NULL, .root = -1, .cache_s = 3 };
    static const struct fuse_opt opts[] = {
        { "cache_s=%d", offsetof(struct cfs, cache_s), 0 },
        FUSE_OPT_END
    };
    if (fuse_opt_parse(&args, &c, opts, opt_proc) != 0)
        return 1;
    if (!c.source || c.cache_s < 0) {
        fprintf(stderr, "usage: cachefs [FUSE options] [-o cache_s=N] "
                "SOURCE MOUNTPOINT\n");
        fuse_opt_free_args(&args);
        return 1;
    }
    c.root = open(c.source, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (c.root < 0) {
        fprintf(stderr, "cachefs: %s: %s\n", c.source, strerror(errno));
        fuse_opt_free_args(&args);
        return 1;
    }
    umask(0);
    int rc = fuse_main(args.argc, args.argv, &cfs_ops, &c);
    fuse_opt_free_args(&args);
    close(c.root);
    free(c.source);
    return rc;
}
