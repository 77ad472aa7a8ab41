/* passthrough.c - the mount benchmark's baseline: the floor of FUSE's own
 * cost for a daemon that has to produce a file's bytes.
 *
 *   passthrough [FUSE options] [-o blksize=N] SOURCE MOUNTPOINT
 *
 * Serves directory SOURCE read-only (getattr, opendir, readdir, open,
 * read, release) with libfuse3's high-level API, multithreaded unless -s,
 * set up as ckptfs sets itself up (see init below), so that the two differ
 * only in how a read request is answered.  Each read is a pread(2) of the backing
 * file into the buffer libfuse hands the callback, which libfuse then writes
 * to /dev/fuse: the one user-space copy that ckptfs also makes when it
 * serves a raw frame straight from a shard file.  read_buf returning an
 * FUSE_BUF_IS_FD buffer would let libfuse splice pages without that copy;
 * it is left out on purpose, since ckptfs must hold the bytes in memory (to
 * check each frame's checksum, or to decode it) and so cannot splice.
 * Committed checkpoints never change, so open sets keep_cache (as ckptfs
 * does): a second read on the same mount comes from the page cache.  Open
 * also asks for sequential readahead on the backing file, as ckptfs does
 * on its shard files (and cat on its input): without it, the daemon's
 * threads reading one fd at interleaved offsets defeat the backing file's
 * readahead and the baseline would be unfairly slow.
 */
#define FUSE_USE_VERSION 35
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fuse.h>

#include "ptdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct pt {
    char *source;   /* SOURCE as given */
    int root;       /* directory fd of SOURCE */
    unsigned blksize;   /* st_blksize of every file (-o blksize=N) */
};

static struct pt *pt_of(void)
{
    return fuse_get_context()->private_data;
}

/* Mirrors fs/ops.c (op_init, the timeouts of fs/ops.h, st_blksize) so that
 * the kernel treats both file systems alike. */
#define PT_TIMEOUT 3600.0         /* OPS_CKPT_TIMEOUT */
#define PT_BLKSIZE (1 << 20)      /* OPS_BLKSIZE: cat's buffer size; -o
                                     blksize=131072 for OPS_BLKSIZE_FOREIGN */

static void *pt_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
    /* Nothing changes: names, attributes and misses are cached for long,
     * pages across opens (keep_cache in pt_open). */
    cfg->entry_timeout = PT_TIMEOUT;
    cfg->attr_timeout = PT_TIMEOUT;
    cfg->negative_timeout = PT_TIMEOUT;
    cfg->nullpath_ok = 1;     /* reads need no path (ckptfs builds none) */
    cfg->use_ino = 0;
    if (conn->capable & FUSE_CAP_ASYNC_READ)
        conn->want |= FUSE_CAP_ASYNC_READ;
    if (conn->max_background < 64)
        conn->max_background = 64;
    if (conn->congestion_threshold < 48)
        conn->congestion_threshold = 48;
    return pt_of();
}

static int pt_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
    /* path is NULL (nullpath_ok) only for an open regular file */
    int r = path ? fstatat(pt_of()->root, pt_rel(path), st, AT_SYMLINK_NOFOLLOW)
                 : fstat((int)fi->fh, st);
    if (r != 0)
        return -errno;
    st->st_mode &= ~(mode_t)0222;   /* read-only view */
    st->st_blksize = (blksize_t)pt_of()->blksize;
    return 0;
}

static int pt_opendir(const char *path, struct fuse_file_info *fi)
{
    return pt_opendir_at(pt_of()->root, path, fi);
}

/* Lists the whole directory in one call (offsets 0: libfuse buffers it). */
static int pt_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
    return pt_readdir_all(buf, fill, fi);
}

static int pt_releasedir(const char *path, struct fuse_file_info *fi)
{
    return pt_releasedir_fh(fi);
}

static int pt_open(const char *path, struct fuse_file_info *fi)
{
    if ((fi->flags & O_ACCMODE) != O_RDONLY)
        return -EROFS;
    int fd = openat(pt_of()->root, pt_rel(path), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    /* the hint ckptfs gives its shard files and cat its input */
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    fi->fh = (uint64_t)fd;
    fi->keep_cache = 1;
    return 0;
}

static int pt_read(const char *path, char *buf, size_t size, off_t off,
                   struct fuse_file_info *fi)
{
    size_t done = 0;
    while (done < size) {
        ssize_t n = pread((int)fi->fh, buf + done, size - done, off + (off_t)done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            break;
        done += (size_t)n;
    }
    return (int)done;
}

static int pt_release(const char *path, struct fuse_file_info *fi)
{
    close((int)fi->fh);
    return 0;
}

static const struct fuse_operations pt_ops = {
    .init = pt_init,
    .getattr = pt_getattr,
    .opendir = pt_opendir,
    .readdir = pt_readdir,
    .releasedir = pt_releasedir,
    .open = pt_open,
    .read = pt_read,
    .release = pt_release,
};

/* Takes the first non-option argument as SOURCE, leaves the rest to FUSE. */
static int opt_proc(void *data, const char *arg, int key,
                    struct fuse_args *outargs)
{
    return pt_take_source(&((struct pt *)data)->source, arg, key, "passthrough");
}

int main(int argc, char **argv)
{
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct pt pt = { .source = NULL, .root = -1, .blksize = PT_BLKSIZE };
    static const struct fuse_opt pt_opts[] = {
        { "blksize=%u", offsetof(struct pt, blksize), 0 },
        FUSE_OPT_END
    };
    if (fuse_opt_parse(&args, &pt, pt_opts, opt_proc) != 0)
        return 1;
    if (pt.blksize < 512 || pt.blksize > (1u << 30)) {
        fprintf(stderr, "passthrough: blksize=%u: 512 to 1 GiB\n", pt.blksize);
        fuse_opt_free_args(&args);
        return 1;
    }
    if (!pt.source) {
        fprintf(stderr, "usage: passthrough [FUSE options] [-o blksize=N] "
                "SOURCE MOUNTPOINT\n");
        fuse_opt_free_args(&args);
        return 1;
    }
    pt.root = open(pt.source, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pt.root < 0) {
        fprintf(stderr, "passthrough: cannot open directory %s: %s\n", pt.source,
                strerror(errno));
        fuse_opt_free_args(&args);
        free(pt.source);
        return 1;
    }
    /* Mount read-only, like ckptfs; "-o ro" is also accepted on the
     * command line. */
    if (fuse_opt_add_arg(&args, "-oro") != 0) {
        fprintf(stderr, "passthrough: out of memory\n");
        return 1;
    }
    int r = fuse_main(args.argc, args.argv, &pt_ops, &pt);
    fuse_opt_free_args(&args);
    close(pt.root);
    free(pt.source);
    return r;
}
