/*
 * fileio.c - file operations with complete loops and messages naming the
 * file: the append-only shard file, full reads and writes, fsync of files
 * and directories, one-level mkdir, recursive removal, path joining (see
 * fileio.h).
 *
 * Choices made here:
 *  - A shard appends with pwrite at its tracked size, so a failed append
 *    (ENOSPC midway) leaves the tracked size where it was and the next
 *    successful append overwrites the partial bytes; offsets handed out
 *    always match the file's content.
 *  - fsync of a directory tolerates EINVAL/EOPNOTSUPP, which some
 *    filesystems answer for directories that have nothing to sync.
 *  - close() failing with EINTR is success: on Linux the descriptor is gone.
 *  - An append whose bytes the kernel would copy slowly (their address and
 *    the file offset 1..31 bytes apart within a cache line, see
 *    ckpt_copy_fast) goes through a 128 KiB bounce buffer that lines up.
 */
#include "common/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

/* Deepest directory nesting ckpt_remove_tree descends into. */
#define REMOVE_MAX_DEPTH 256

/* Writeback of appended data is started every this many bytes, so that
 * the disk works while later frames are still being encoded and the final
 * fdatasync has little left to wait for: at most a step and what the disk
 * has not finished (a delta save of 42.5 MiB waited 20 ms in its
 * fdatasync with 32 MiB steps, 6 ms with 8 MiB; #28). */
#define WRITEBACK_STEP ((uint64_t)8 << 20)
/* A shard that keeps out of the page cache (ckpt_shard_set_nocache)
 * waits for and drops its writeback in steps of this size: at most two
 * of them are cached, while the disk has one step of work queued. */
#define NOCACHE_STEP ((uint64_t)32 << 20)
/* Appends whose bytes the kernel would copy slowly (ckpt_copy_fast) go
 * through a bounce buffer of this size, placed to line up with the file. */
#define BOUNCE ((size_t)128 << 10)
#define LINE 64

struct ckpt_shard {
    int fd;
    uint64_t size;
    uint64_t flushed;   /* writeback started for [0, flushed) */
    uint64_t dropped;   /* [0, dropped) written back and out of the cache */
    int nocache;
    char *path;
    unsigned char *bounce;   /* BOUNCE + LINE bytes, line-aligned; lazily */
};

static const char *nm(const char *path)
{
    return path ? path : "(unnamed file)";
}

static int close_fd(int fd)
{
    if (close(fd) != 0 && errno != EINTR)
        return -errno;
    return 0;
}

int ckpt_shard_create(ckpt_shard **out, const char *path, ckpt_error *err)
{
    if (!out || !path)
        return ckpt_err(err, -EINVAL, "shard: no path given");
    ckpt_shard *s = calloc(1, sizeof *s);
    char *p = strdup(path);
    if (!s || !p) {
        free(s);
        free(p);
        return ckpt_err(err, -ENOMEM, "out of memory opening shard %s", path);
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = -errno;
        free(s);
        free(p);
        return ckpt_err_sys(err, e, "cannot create shard file %s", path);
    }
    s->fd = fd;
    s->path = p;
    *out = s;
    return 0;
}

/* pwrite of all n bytes at off, retrying EINTR and short writes. */
static int pwrite_full(int fd, const void *buf, size_t n, uint64_t off,
                       const char *path, ckpt_error *err)
{
    const char *p = buf;
    size_t done = 0;
    if (n > (uint64_t)INT64_MAX || off > (uint64_t)INT64_MAX - n)
        return ckpt_err(err, -EFBIG, "file %s would grow past the largest "
                        "offset", nm(path));
    while (done < n) {
        ssize_t r = pwrite(fd, p + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return ckpt_err_sys(err, -errno,
                                "cannot write %zu bytes at offset %llu of %s",
                                n - done, (unsigned long long)(off + done),
                                nm(path));
        if (r == 0)
            return ckpt_err(err, -EIO,
                            "cannot write %zu bytes at offset %llu of %s: "
                            "the write made no progress", n - done,
                            (unsigned long long)(off + done), nm(path));
        done += (size_t)r;
    }
    return 0;
}

/* Asks the kernel to start writing what was appended since the last call
 * (without waiting).  Only a hint: durability comes from ckpt_shard_sync,
 * so a failure here is not an error. */
static void start_writeback(ckpt_shard *s)
{
    if (s->size - s->flushed < (s->nocache ? NOCACHE_STEP : WRITEBACK_STEP))
        return;
    if (s->nocache && s->flushed > s->dropped) {
        /* Wait for the previous step's writeback, then drop its pages:
         * the shard keeps at most two steps in the page cache, and the
         * writer goes no faster than the disk. */
        (void)sync_file_range(s->fd, (off64_t)s->dropped,
                              (off64_t)(s->flushed - s->dropped),
                              SYNC_FILE_RANGE_WAIT_BEFORE |
                              SYNC_FILE_RANGE_WRITE |
                              SYNC_FILE_RANGE_WAIT_AFTER);
        (void)posix_fadvise(s->fd, (off_t)s->dropped,
                            (off_t)(s->flushed - s->dropped),
                            POSIX_FADV_DONTNEED);
        s->dropped = s->flushed;
    }
    (void)sync_file_range(s->fd, (off64_t)s->flushed,
                          (off64_t)(s->size - s->flushed),
                          SYNC_FILE_RANGE_WRITE);
    s->flushed = s->size;
}

void ckpt_shard_set_nocache(ckpt_shard *s, int on)
{
    s->nocache = on;
}

int ckpt_copy_fast(uint64_t from, uint64_t to)
{
    unsigned rel = (unsigned)((to - from) % LINE);
    return rel == 0 || rel >= LINE / 2;
}

/* Blocks below glibc's rep-movsb threshold (2 KiB at the least).  The
 * volatile size keeps the compiler from fusing the loop back into one
 * large memcpy. */
void ckpt_copy_blocks(void *dst, const void *src, size_t n)
{
    volatile size_t block = 2048;
    size_t b = block;
    unsigned char *d = dst;
    const unsigned char *p = src;
    while (n > b) {
        memcpy(d, p, b);
        d += b;
        p += b;
        n -= b;
    }
    memcpy(d, p, n);
}

/* pwrite of n bytes at off through the bounce buffer, placed so that the
 * kernel's copy from it lines up with the file (filled with
 * ckpt_copy_blocks, so the slow rep movsb is avoided on both sides). */
static int pwrite_bounced(ckpt_shard *s, const unsigned char *buf, size_t n,
                          uint64_t off, ckpt_error *err)
{
    if (!s->bounce && posix_memalign((void **)&s->bounce, LINE,
                                     BOUNCE + LINE) != 0) {
        s->bounce = NULL;
        return pwrite_full(s->fd, buf, n, off, s->path, err);
    }
    for (size_t k = 0; k < n; k += BOUNCE) {
        size_t m = n - k < BOUNCE ? n - k : BOUNCE;
        unsigned char *b = s->bounce + (off + k) % LINE;
        ckpt_copy_blocks(b, buf + k, m);
        int rc = pwrite_full(s->fd, b, m, off + k, s->path, err);
        if (rc)
            return rc;
    }
    return 0;
}

int ckpt_shard_append(ckpt_shard *s, const void *buf, size_t n,
                      uint64_t *offset, ckpt_error *err)
{
    if (!s || (!buf && n))
        return ckpt_err(err, -EINVAL, "shard append: no shard or buffer");
    int rc = n >= 4096 && !ckpt_copy_fast((uintptr_t)buf, s->size)
                 ? pwrite_bounced(s, buf, n, s->size, err)
                 : pwrite_full(s->fd, buf, n, s->size, s->path, err);
    if (rc)
        return rc;
    if (offset)
        *offset = s->size;
    s->size += n;
    start_writeback(s);
    return 0;
}

int ckpt_shard_sync(ckpt_shard *s, ckpt_error *err)
{
    if (!s)
        return ckpt_err(err, -EINVAL, "shard sync: no shard");
    int r;
    do
        r = fdatasync(s->fd);
    while (r != 0 && errno == EINTR);
    if (r != 0)
        return ckpt_err_sys(err, -errno, "cannot sync shard file %s",
                            s->path);
    if (s->nocache) {   /* all written back now: drop the rest too */
        (void)posix_fadvise(s->fd, (off_t)s->dropped, 0, POSIX_FADV_DONTNEED);
        s->dropped = s->flushed = s->size;
    }
    return 0;
}

uint64_t ckpt_shard_size(const ckpt_shard *s)
{
    return s ? s->size : 0;
}

const char *ckpt_shard_path(const ckpt_shard *s)
{
    return s ? s->path : NULL;
}

int ckpt_shard_close(ckpt_shard *s, ckpt_error *err)
{
    if (!s)
        return 0;
    int rc = close_fd(s->fd);
    if (rc)
        ckpt_err_sys(err, rc, "cannot close shard file %s", s->path);
    free(s->bounce);
    free(s->path);
    free(s);
    return rc;
}

int ckpt_pread_full(int fd, void *buf, size_t n, uint64_t off,
                    const char *path, ckpt_error *err)
{
    char *p = buf;
    size_t done = 0;
    if (!buf && n)
        return ckpt_err(err, -EINVAL, "read of %s: no buffer", nm(path));
    if (n > (uint64_t)INT64_MAX || off > (uint64_t)INT64_MAX - n)
        return ckpt_err(err, -EINVAL, "read of %s: offset %llu out of range",
                        nm(path), (unsigned long long)off);
    while (done < n) {
        ssize_t r = pread(fd, p + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return ckpt_err_sys(err, -errno,
                                "cannot read %zu bytes at offset %llu of %s",
                                n, (unsigned long long)off, nm(path));
        if (r == 0)
            return ckpt_err(err, -EIO,
                            "file %s truncated: wanted %zu bytes at offset "
                            "%llu, got %zu", nm(path), n,
                            (unsigned long long)off, done);
        done += (size_t)r;
    }
    return 0;
}

int ckpt_write_full(int fd, const void *buf, size_t n, const char *path,
                    ckpt_error *err)
{
    const char *p = buf;
    size_t done = 0;
    if (!buf && n)
        return ckpt_err(err, -EINVAL, "write of %s: no buffer", nm(path));
    while (done < n) {
        ssize_t r = write(fd, p + done, n - done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return ckpt_err_sys(err, -errno, "cannot write %zu bytes to %s",
                                n - done, nm(path));
        if (r == 0)
            return ckpt_err(err, -EIO, "cannot write %zu bytes to %s: the "
                            "write made no progress", n - done, nm(path));
        done += (size_t)r;
    }
    return 0;
}

/* fsync of an open fd, retrying EINTR. */
static int fsync_fd(int fd)
{
    int r;
    do
        r = fsync(fd);
    while (r != 0 && errno == EINTR);
    return r != 0 ? -errno : 0;
}

int ckpt_fsync_path(const char *path, ckpt_error *err)
{
    if (!path)
        return ckpt_err(err, -EINVAL, "fsync: no path given");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ckpt_err_sys(err, -errno, "cannot open %s to sync it", path);
    int rc = fsync_fd(fd);
    int crc = close_fd(fd);
    if (rc)
        return ckpt_err_sys(err, rc, "cannot sync %s", path);
    if (crc)
        return ckpt_err_sys(err, crc, "cannot close %s after syncing it",
                            path);
    return 0;
}

int ckpt_fsync_dir(const char *dir, ckpt_error *err)
{
    if (!dir)
        return ckpt_err(err, -EINVAL, "fsync: no directory given");
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return ckpt_err_sys(err, -errno, "cannot open directory %s to sync "
                            "it", dir);
    int rc = fsync_fd(fd);
    if (rc == -EINVAL || rc == -EOPNOTSUPP)
        rc = 0;                 /* directory syncs not supported here */
    int crc = close_fd(fd);
    if (rc)
        return ckpt_err_sys(err, rc, "cannot sync directory %s", dir);
    if (crc)
        return ckpt_err_sys(err, crc, "cannot close directory %s", dir);
    return 0;
}

int ckpt_fsync_parent(const char *path, ckpt_error *err)
{
    char dir[PATH_MAX];
    size_t n = path ? strlen(path) : 0;
    while (n > 1 && path[n - 1] == '/')
        n--;                    /* "a/b/" is "a/b" */
    while (n > 0 && path[n - 1] != '/')
        n--;                    /* its last component */
    while (n > 1 && path[n - 1] == '/')
        n--;                    /* "a//b": the parent is "a" */
    if (!path || !*path)
        return ckpt_err(err, -EINVAL, "fsync: no path given");
    if (n >= sizeof dir)
        return ckpt_err(err, -ENAMETOOLONG, "%.300s: path too long", path);
    if (n == 0)
        return ckpt_fsync_dir(".", err);
    memcpy(dir, path, n);
    dir[n] = '\0';
    return ckpt_fsync_dir(dir, err);
}

int ckpt_mkdir(const char *path, ckpt_error *err)
{
    if (!path)
        return ckpt_err(err, -EINVAL, "mkdir: no path given");
    if (mkdir(path, 0755) == 0)
        return 0;
    int e = -errno;
    if (e != -EEXIST)
        return ckpt_err_sys(err, e, "cannot create directory %s", path);
    struct stat st;
    if (stat(path, &st) != 0)
        return ckpt_err_sys(err, -errno, "cannot create directory %s", path);
    if (!S_ISDIR(st.st_mode))
        return ckpt_err(err, -EEXIST, "cannot create directory %s: it exists "
                        "and is not a directory", path);
    return 0;
}

int ckpt_mkdirs(const char *path, ckpt_error *err)
{
    char buf[PATH_MAX];
    size_t n = path ? strlen(path) : 0;
    if (n == 0 || n >= sizeof buf)
        return ckpt_err(err, -ENAMETOOLONG, "cannot create directory "
                        "'%.300s': empty or too long a path (%zu bytes)",
                        path ? path : "", n);
    memcpy(buf, path, n + 1);
    /* Create each missing ancestor, then the directory itself. */
    for (size_t i = 1; i < n; i++) {
        if (buf[i] != '/' || buf[i - 1] == '/')
            continue;
        buf[i] = '\0';
        int rc = ckpt_mkdir(buf, err);
        buf[i] = '/';
        if (rc)
            return rc;
    }
    return ckpt_mkdir(buf, err);
}

/* State of one ckpt_remove_tree: the path of the entry being worked on,
 * kept for messages (truncated if it ever outgrows the buffer). */
typedef struct rm_walk {
    char path[PATH_MAX];
    size_t len;
    ckpt_error *err;
} rm_walk;

/* Appends "/name" to w->path; returns the old length to restore. */
static size_t walk_push(rm_walk *w, const char *name)
{
    size_t old = w->len;
    int r = snprintf(w->path + old, sizeof w->path - old, "/%s", name);
    if (r > 0)
        w->len = old + (size_t)r < sizeof w->path ? old + (size_t)r
                                                   : sizeof w->path - 1;
    return old;
}

static void walk_pop(rm_walk *w, size_t old)
{
    w->len = old;
    w->path[old] = '\0';
}

static int remove_contents(rm_walk *w, int dfd, int depth);

/* Whether entry `name` of directory dfd is a directory (not following
 * symlinks); 1, 0, or a negative errno (-ENOENT: it is already gone). */
static int entry_is_dir(int dfd, const struct dirent *de)
{
    if (de->d_type != DT_UNKNOWN)
        return de->d_type == DT_DIR;
    struct stat st;
    if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    return S_ISDIR(st.st_mode) ? 1 : 0;
}

/* Removes the subdirectory `name` of dfd and everything under it. */
static int remove_subdir(rm_walk *w, int dfd, const char *name, int depth)
{
    int fd = openat(dfd, name,
                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        return ckpt_err_sys(w->err, -errno, "cannot open directory %s",
                            w->path);
    }
    int rc = remove_contents(w, fd, depth + 1);   /* closes fd */
    if (rc)
        return rc;
    if (unlinkat(dfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
        return ckpt_err_sys(w->err, -errno, "cannot remove directory %s",
                            w->path);
    return 0;
}

/* Removes one directory entry (file, symlink or directory tree). */
static int remove_entry(rm_walk *w, int dfd, const struct dirent *de,
                        int depth)
{
    int isdir = entry_is_dir(dfd, de);
    if (isdir == -ENOENT)
        return 0;
    if (isdir < 0)
        return ckpt_err_sys(w->err, isdir, "cannot inspect %s", w->path);
    if (isdir)
        return remove_subdir(w, dfd, de->d_name, depth);
    if (unlinkat(dfd, de->d_name, 0) != 0 && errno != ENOENT)
        return ckpt_err_sys(w->err, -errno, "cannot remove %s", w->path);
    return 0;
}

/* Removes everything inside the directory open as dfd, and closes dfd. */
static int remove_contents(rm_walk *w, int dfd, int depth)
{
    if (depth > REMOVE_MAX_DEPTH) {
        (void)close_fd(dfd);   /* already failing */
        return ckpt_err(w->err, -ELOOP, "cannot remove %s: nested more than "
                        "%d directories deep", w->path, REMOVE_MAX_DEPTH);
    }
    DIR *d = fdopendir(dfd);
    if (!d) {
        int e = -errno;
        (void)close_fd(dfd);   /* already failing */
        return ckpt_err_sys(w->err, e, "cannot list directory %s", w->path);
    }
    int rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno)
                rc = ckpt_err_sys(w->err, -errno, "cannot list directory %s",
                                  w->path);
            break;
        }
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        size_t old = walk_push(w, de->d_name);
        rc = remove_entry(w, dirfd(d), de, depth);
        walk_pop(w, old);
        if (rc)
            break;
    }
    (void)closedir(d);   /* a read-only stream: nothing to lose */
    return rc;
}

int ckpt_remove_tree(const char *path, ckpt_error *err)
{
    if (!path)
        return ckpt_err(err, -EINVAL, "remove: no path given");
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT)
            return 0;
        return ckpt_err_sys(err, -errno, "cannot inspect %s", path);
    }
    if (!S_ISDIR(st.st_mode)) {
        if (unlink(path) != 0 && errno != ENOENT)
            return ckpt_err_sys(err, -errno, "cannot remove %s", path);
        return 0;
    }
    rm_walk *w = malloc(sizeof *w);
    if (!w)
        return ckpt_err(err, -ENOMEM, "out of memory removing %s", path);
    w->err = err;
    snprintf(w->path, sizeof w->path, "%s", path);
    w->len = strlen(w->path);
    int rc = 0;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        rc = ckpt_err_sys(err, -errno, "cannot open directory %s", path);
    else
        rc = remove_contents(w, fd, 0);
    if (rc == 0 && rmdir(path) != 0 && errno != ENOENT)
        rc = ckpt_err_sys(err, -errno, "cannot remove directory %s", path);
    free(w);
    return rc;
}

int ckpt_path_join(char *buf, size_t cap, const char *a, const char *b,
                   ckpt_error *err)
{
    if (!buf || !a || !b)
        return ckpt_err(err, -EINVAL, "path join: missing argument");
    size_t la = strlen(a);
    const char *sep = (la == 0 || a[la - 1] == '/') ? "" : "/";
    int r = snprintf(buf, cap, "%s%s%s", a, sep, b);
    if (r < 0 || (size_t)r >= cap) {
        if (cap)
            buf[0] = '\0';
        return ckpt_err(err, -ENAMETOOLONG,
                        "path %.300s%s%.300s is too long (%zu bytes, at most "
                        "%zu)", a, sep, b, r < 0 ? (size_t)0 : (size_t)r,
                        cap ? cap - 1 : 0);
    }
    return 0;
}
