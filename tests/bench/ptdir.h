/* ptdir.h - what the pass-through FUSE file systems of the tests share
 * (tests/bench/passthrough.c, the benchmark's baseline, and
 * tests/fs/cachefs.c, a node's stale view): paths relative to SOURCE,
 * directory listing, and SOURCE taken from the command line.  Header-only
 * (static functions): each is one small program.  Include after <fuse.h>.
 */
#ifndef CKPT_TESTS_PTDIR_H
#define CKPT_TESTS_PTDIR_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The path relative to SOURCE ("/a/b" -> "a/b", "/" -> "."). */
static inline const char *pt_rel(const char *path)
{
    while (*path == '/')
        path++;
    return *path ? path : ".";
}

/* opendir: the directory path of root, kept open in fi->fh. */
static inline int pt_opendir_at(int root, const char *path,
                                struct fuse_file_info *fi)
{
    int fd = openat(root, pt_rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return -e;
    }
    fi->fh = (uint64_t)(uintptr_t)d;
    return 0;
}

/* readdir: the whole directory in one call (offsets 0: libfuse buffers
 * it). */
static inline int pt_readdir_all(void *buf, fuse_fill_dir_t fill,
                                 struct fuse_file_info *fi)
{
    DIR *d = (DIR *)(uintptr_t)fi->fh;
    struct dirent *de;
    rewinddir(d);
    errno = 0;
    while ((de = readdir(d)) != NULL) {
        if (fill(buf, de->d_name, NULL, 0, 0))
            break;
        errno = 0;
    }
    return -errno;
}

static inline int pt_releasedir_fh(struct fuse_file_info *fi)
{
    closedir((DIR *)(uintptr_t)fi->fh);
    return 0;
}

/* fuse_opt_parse's callback body: the first non-option argument is
 * SOURCE (into *source; 0), the rest goes to FUSE (1); -1 when out of
 * memory (said on stderr by program `prog`). */
static inline int pt_take_source(char **source, const char *arg, int key,
                                 const char *prog)
{
    if (key != FUSE_OPT_KEY_NONOPT || *source)
        return 1;
    if (!(*source = strdup(arg))) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return -1;
    }
    return 0;
}

#endif
