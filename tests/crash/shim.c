/*
 * shim.c - an LD_PRELOAD library for the crash and fault matrix
 * (tests/crash/README.md): it intercepts the file system calls a save
 * makes (opens, writes, syncs, renames, links, removals, directory
 * creation) on paths under CKPT_SHIM_ROOT, and, as the environment asks,
 *
 *   CKPT_SHIM_KILL_AT=K[,K1,...]  raises SIGKILL just before the K-th such
 *                                 call (in an MPI job, rank R takes the
 *                                 R-th number, or the last; 0: never);
 *   CKPT_SHIM_KILL_ON=OP:GLOB     raises SIGKILL before the first call OP
 *                                 on a path matching GLOB;
 *   CKPT_SHIM_FAIL=OP:GLOB:ERR[:N] fails the N-th (default first) and every
 *                                 later call OP on a path matching GLOB
 *                                 with errno ERR (EIO, ENOSPC, ...);
 *   CKPT_SHIM_FAIL2=...           a second such rule;
 *   CKPT_SHIM_DELAY=OP:GLOB:MS    sleeps MS milliseconds before each call
 *                                 OP on a path matching GLOB;
 *   CKPT_SHIM_COUNT=FILE          appends "CALLS RANK MATCHED" to FILE when
 *                                 the process exits: the calls counted,
 *                                 the MPI rank ("-" outside MPI), and the
 *                                 calls CKPT_SHIM_FAIL's rule matched;
 *   CKPT_SHIM_LOG=FILE            appends a line per fault, delay or kill;
 *   CKPT_SHIM_NOLOCK=1            makes every lock call succeed without
 *                                 locking, on any path: fcntl F_SETLK,
 *                                 F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW and
 *                                 flock (F_GETLK and F_OFD_GETLK answer
 *                                 F_UNLCK): a node of a shared file system
 *                                 whose locks do not reach the other nodes
 *                                 (tests/fs/mount_nolocks.sh).
 *
 * OP is one of: open (creating or writing), write (write, pwrite,
 * writev), fsync (fsync or fdatasync of a file), dirsync (fsync of a
 * directory), rename (rename or link: GLOB matches the new name), unlink,
 * mkdir, any.  Paths of descriptor calls come from the opens the shim saw.
 * Calls by the C library itself (stdio) are not seen.  The shim keeps no
 * state but a descriptor table and a counter, under one mutex.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_FD 65536

enum op { OP_OPEN, OP_WRITE, OP_FSYNC, OP_DIRSYNC, OP_RENAME, OP_UNLINK,
          OP_MKDIR, OP_ANY };
static const char *const op_names[] = { "open", "write", "fsync", "dirsync",
                                        "rename", "unlink", "mkdir", "any" };

typedef struct rule {
    int set;
    enum op op;
    char glob[PATH_MAX];
    int err;                 /* FAIL */
    long nth, seen;          /* FAIL: from the nth match on */
    long ms;                 /* DELAY */
} rule;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static char root[PATH_MAX];
static size_t root_len;
static long kill_at, counted;
static rule fail_rule, fail2_rule, delay_rule, kill_rule;
static char count_file[PATH_MAX], log_file[PATH_MAX];
static int no_locks;
static char *fd_path[MAX_FD];
static unsigned char fd_dir[MAX_FD];

/* ------------------------------------------------------------ real calls */

#define REAL(name) real_##name
#define DECL_REAL(ret, name, ...) static ret (*real_##name)(__VA_ARGS__)
DECL_REAL(int, open, const char *, int, ...);
DECL_REAL(int, open64, const char *, int, ...);
DECL_REAL(int, openat, int, const char *, int, ...);
DECL_REAL(int, openat64, int, const char *, int, ...);
DECL_REAL(int, __open_2, const char *, int);
DECL_REAL(int, __open64_2, const char *, int);
DECL_REAL(int, __openat_2, int, const char *, int);
DECL_REAL(int, __openat64_2, int, const char *, int);
DECL_REAL(int, creat, const char *, mode_t);
DECL_REAL(int, creat64, const char *, mode_t);
DECL_REAL(ssize_t, write, int, const void *, size_t);
DECL_REAL(ssize_t, pwrite, int, const void *, size_t, off_t);
DECL_REAL(ssize_t, pwrite64, int, const void *, size_t, off_t);
DECL_REAL(ssize_t, writev, int, const struct iovec *, int);
DECL_REAL(int, fsync, int);
DECL_REAL(int, fdatasync, int);
DECL_REAL(int, close, int);
DECL_REAL(int, rename, const char *, const char *);
DECL_REAL(int, renameat, int, const char *, int, const char *);
DECL_REAL(int, renameat2, int, const char *, int, const char *, unsigned);
DECL_REAL(int, link, const char *, const char *);
DECL_REAL(int, linkat, int, const char *, int, const char *, int);
DECL_REAL(int, unlink, const char *);
DECL_REAL(int, unlinkat, int, const char *, int);
DECL_REAL(int, rmdir, const char *);
DECL_REAL(int, mkdir, const char *, mode_t);
DECL_REAL(int, mkdirat, int, const char *, mode_t);
DECL_REAL(int, ftruncate, int, off_t);
DECL_REAL(int, ftruncate64, int, off_t);
DECL_REAL(int, fcntl, int, int, ...);
DECL_REAL(int, fcntl64, int, int, ...);
DECL_REAL(int, flock, int, int);

#define RESOLVE(name) (real_##name = dlsym(RTLD_NEXT, #name))

static void resolve_all(void)
{
    RESOLVE(open); RESOLVE(open64); RESOLVE(openat); RESOLVE(openat64);
    RESOLVE(__open_2); RESOLVE(__open64_2); RESOLVE(__openat_2);
    RESOLVE(__openat64_2); RESOLVE(creat); RESOLVE(creat64);
    RESOLVE(write); RESOLVE(pwrite); RESOLVE(pwrite64); RESOLVE(writev);
    RESOLVE(fsync); RESOLVE(fdatasync); RESOLVE(close);
    RESOLVE(rename); RESOLVE(renameat); RESOLVE(renameat2); RESOLVE(link);
    RESOLVE(linkat); RESOLVE(unlink); RESOLVE(unlinkat); RESOLVE(rmdir);
    RESOLVE(mkdir); RESOLVE(mkdirat); RESOLVE(ftruncate);
    RESOLVE(ftruncate64); RESOLVE(fcntl); RESOLVE(fcntl64); RESOLVE(flock);
}

/* ------------------------------------------------------------ config */

static int parse_errno(const char *s)
{
    static const struct { const char *n; int e; } t[] = {
        { "EIO", EIO }, { "ENOSPC", ENOSPC }, { "EDQUOT", EDQUOT },
        { "EROFS", EROFS }, { "EACCES", EACCES }, { "ENOMEM", ENOMEM },
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        if (strcmp(s, t[i].n) == 0)
            return t[i].e;
    return atoi(s) > 0 ? atoi(s) : EIO;
}

/* "OP:GLOB[:A[:B]]" into r; a and b get the optional fields. */
static void parse_rule(rule *r, const char *spec, char *a, char *b)
{
    char buf[PATH_MAX + 64];
    a[0] = b[0] = '\0';
    if (!spec || !*spec)
        return;
    snprintf(buf, sizeof buf, "%s", spec);
    char *colon = strchr(buf, ':');
    if (!colon)
        return;
    *colon = '\0';
    for (int i = 0; i <= OP_ANY; i++)
        if (strcmp(buf, op_names[i]) == 0) {
            r->op = (enum op)i;
            r->set = 1;
        }
    char *glob = colon + 1, *f = strchr(glob, ':');
    if (f) {
        *f++ = '\0';
        char *g = strchr(f, ':');
        if (g) {
            *g++ = '\0';
            snprintf(b, 64, "%s", g);
        }
        snprintf(a, 64, "%s", f);
    }
    snprintf(r->glob, sizeof r->glob, "%s", glob);
}

/* This process's number in CKPT_SHIM_KILL_AT. */
static long kill_point(const char *list)
{
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    long want = rank ? atol(rank) : 0, v = 0;
    const char *p = list;
    for (long i = 0; p && *p; i++) {
        v = atol(p);
        if (i == want)
            return v;
        p = strchr(p, ',');
        if (p)
            p++;
    }
    return v;
}

static void configure(void)
{
    char a[64], b[64];
    resolve_all();
    const char *r = getenv("CKPT_SHIM_ROOT");
    if (r && *r) {
        snprintf(root, sizeof root, "%s", r);
        root_len = strlen(root);
        while (root_len > 1 && root[root_len - 1] == '/')
            root[--root_len] = '\0';
    }
    const char *k = getenv("CKPT_SHIM_KILL_AT");
    kill_at = k ? kill_point(k) : 0;
    parse_rule(&kill_rule, getenv("CKPT_SHIM_KILL_ON"), a, b);
    parse_rule(&fail_rule, getenv("CKPT_SHIM_FAIL"), a, b);
    fail_rule.err = a[0] ? parse_errno(a) : EIO;
    fail_rule.nth = b[0] ? atol(b) : 1;
    parse_rule(&fail2_rule, getenv("CKPT_SHIM_FAIL2"), a, b);
    fail2_rule.err = a[0] ? parse_errno(a) : EIO;
    fail2_rule.nth = b[0] ? atol(b) : 1;
    parse_rule(&delay_rule, getenv("CKPT_SHIM_DELAY"), a, b);
    delay_rule.ms = a[0] ? atol(a) : 0;
    const char *c = getenv("CKPT_SHIM_COUNT");
    snprintf(count_file, sizeof count_file, "%s", c ? c : "");
    const char *l = getenv("CKPT_SHIM_LOG");
    snprintf(log_file, sizeof log_file, "%s", l ? l : "");
    const char *nl = getenv("CKPT_SHIM_NOLOCK");
    no_locks = nl && strcmp(nl, "1") == 0;
}

static void setup(void)
{
    pthread_once(&once, configure);
}

/* Appends one line to a file with the real calls (never counted). */
static void append_line(const char *file, const char *line)
{
    if (!file[0])
        return;
    int fd = REAL(open)(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    (void)REAL(write)(fd, line, strlen(line));
    REAL(close)(fd);
}

static void note(const char *what, enum op op, const char *path)
{
    char line[PATH_MAX + 128];
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    snprintf(line, sizeof line, "%s %s %s pid=%ld rank=%s\n", what,
             op_names[op], path, (long)getpid(), rank ? rank : "-");
    append_line(log_file, line);
}

__attribute__((destructor)) static void report_count(void)
{
    char line[64];
    if (!count_file[0])
        return;
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    pthread_mutex_lock(&mu);
    snprintf(line, sizeof line, "%ld %s %ld\n", counted, rank ? rank : "-",
             fail_rule.seen);
    pthread_mutex_unlock(&mu);
    append_line(count_file, line);
}

/* ------------------------------------------------------------ paths */

static int under_root(const char *path)
{
    return root_len && path && strncmp(path, root, root_len) == 0 &&
           (path[root_len] == '/' || path[root_len] == '\0');
}

/* The absolute path of `name` relative to dirfd, into out. */
static void abs_path(int dirfd, const char *name, char *out, size_t cap)
{
    if (!name) {
        out[0] = '\0';
        return;
    }
    if (name[0] == '/') {
        snprintf(out, cap, "%s", name);
        return;
    }
    char base[PATH_MAX] = "";
    if (dirfd == AT_FDCWD) {
        if (!getcwd(base, sizeof base))
            base[0] = '\0';
    } else if (dirfd >= 0 && dirfd < MAX_FD) {
        pthread_mutex_lock(&mu);
        if (fd_path[dirfd])
            snprintf(base, sizeof base, "%s", fd_path[dirfd]);
        pthread_mutex_unlock(&mu);
    }
    snprintf(out, cap, "%s/%s", base, name);
}

static void fd_remember(int fd, const char *path, int flags)
{
    if (fd < 0 || fd >= MAX_FD || !under_root(path))
        return;
    char *copy = strdup(path);
    struct stat st;
    int isdir = (flags & O_DIRECTORY) ||
                (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode));
    pthread_mutex_lock(&mu);
    free(fd_path[fd]);
    fd_path[fd] = copy;
    fd_dir[fd] = (unsigned char)isdir;
    pthread_mutex_unlock(&mu);
}

/* The path open as fd (into out) and whether it is a directory; 0 when
 * the shim does not know it. */
static int fd_lookup(int fd, char *out, size_t cap, int *isdir)
{
    int known = 0;
    if (fd < 0 || fd >= MAX_FD)
        return 0;
    pthread_mutex_lock(&mu);
    if (fd_path[fd]) {
        snprintf(out, cap, "%s", fd_path[fd]);
        *isdir = fd_dir[fd];
        known = 1;
    }
    pthread_mutex_unlock(&mu);
    return known;
}

/* ------------------------------------------------------------ the gate */

static int matches(const rule *r, enum op op, const char *path)
{
    return r->set && (r->op == OP_ANY || r->op == op) &&
           fnmatch(r->glob, path, 0) == 0;
}

/* Decides the fate of one call OP on path: 0 to go on (after any delay),
 * or an errno to fail it with.  Never returns when the call is to die. */
static int gate(enum op op, const char *path)
{
    setup();
    if (!under_root(path))
        return 0;
    int die = 0, err = 0;
    long ms = 0;
    pthread_mutex_lock(&mu);
    counted++;
    if (kill_at > 0 && counted == kill_at)
        die = 1;
    if (matches(&kill_rule, op, path))
        die = 1;
    if (matches(&fail_rule, op, path) && ++fail_rule.seen >= fail_rule.nth)
        err = fail_rule.err;
    if (matches(&fail2_rule, op, path) &&
        ++fail2_rule.seen >= fail2_rule.nth)
        err = fail2_rule.err;
    if (matches(&delay_rule, op, path))
        ms = delay_rule.ms;
    pthread_mutex_unlock(&mu);
    if (die) {
        note("kill", op, path);
        raise(SIGKILL);
    }
    if (ms > 0) {
        note("delay", op, path);
        struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
        while (nanosleep(&t, &t) != 0 && errno == EINTR)
            ;
    }
    if (err)
        note("fail", op, path);
    return err;
}

static int fd_gate(enum op op, int fd)
{
    char path[PATH_MAX];
    int isdir = 0;
    setup();
    if (!fd_lookup(fd, path, sizeof path, &isdir))
        return 0;
    if (op == OP_FSYNC && isdir)
        op = OP_DIRSYNC;
    return gate(op, path);
}

#define FAIL_WITH(e) do { errno = (e); return -1; } while (0)

/* The fortified opens have no prototype outside _FORTIFY_SOURCE. */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);

/* ------------------------------------------------------------ opens */

static int open_gate(int dirfd, const char *name, int flags, char *abs)
{
    abs_path(dirfd, name, abs, PATH_MAX);
    int writes = (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) != 0;
    return writes ? gate(OP_OPEN, abs) : (setup(), 0);
}

static mode_t mode_arg(int flags, va_list ap)
{
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

#define OPEN_BODY(call, dirfd, name, flags, mode)                          \
    char abs[PATH_MAX];                                                    \
    int e = open_gate((dirfd), (name), (flags), abs);                      \
    if (e)                                                                 \
        FAIL_WITH(e);                                                      \
    int fd = (call);                                                       \
    if (fd >= 0)                                                           \
        fd_remember(fd, abs, (flags));                                     \
    (void)(mode);                                                          \
    return fd

int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    OPEN_BODY(REAL(open)(path, flags, mode), AT_FDCWD, path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    OPEN_BODY(REAL(open64)(path, flags, mode), AT_FDCWD, path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    OPEN_BODY(REAL(openat)(dirfd, path, flags, mode), dirfd, path, flags,
              mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    OPEN_BODY(REAL(openat64)(dirfd, path, flags, mode), dirfd, path, flags,
              mode);
}

int __open_2(const char *path, int flags)
{
    OPEN_BODY(REAL(__open_2)(path, flags), AT_FDCWD, path, flags, 0);
}

int __open64_2(const char *path, int flags)
{
    OPEN_BODY(REAL(__open64_2)(path, flags), AT_FDCWD, path, flags, 0);
}

int __openat_2(int dirfd, const char *path, int flags)
{
    OPEN_BODY(REAL(__openat_2)(dirfd, path, flags), dirfd, path, flags, 0);
}

int __openat64_2(int dirfd, const char *path, int flags)
{
    OPEN_BODY(REAL(__openat64_2)(dirfd, path, flags), dirfd, path, flags, 0);
}

int creat(const char *path, mode_t mode)
{
    int flags = O_CREAT | O_WRONLY | O_TRUNC;
    OPEN_BODY(REAL(creat)(path, mode), AT_FDCWD, path, flags, mode);
}

int creat64(const char *path, mode_t mode)
{
    int flags = O_CREAT | O_WRONLY | O_TRUNC;
    OPEN_BODY(REAL(creat64)(path, mode), AT_FDCWD, path, flags, mode);
}

int close(int fd)
{
    setup();
    if (fd >= 0 && fd < MAX_FD) {
        pthread_mutex_lock(&mu);
        char *p = fd_path[fd];
        fd_path[fd] = NULL;
        pthread_mutex_unlock(&mu);
        free(p);
    }
    return REAL(close)(fd);
}

/* ------------------------------------------------------------ writes */

ssize_t write(int fd, const void *buf, size_t n)
{
    int e = fd_gate(OP_WRITE, fd);
    if (e)
        FAIL_WITH(e);
    return REAL(write)(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    int e = fd_gate(OP_WRITE, fd);
    if (e)
        FAIL_WITH(e);
    return REAL(pwrite)(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    int e = fd_gate(OP_WRITE, fd);
    if (e)
        FAIL_WITH(e);
    return REAL(pwrite64)(fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int n)
{
    int e = fd_gate(OP_WRITE, fd);
    if (e)
        FAIL_WITH(e);
    return REAL(writev)(fd, iov, n);
}

int ftruncate(int fd, off_t len)
{
    int e = fd_gate(OP_WRITE, fd);
    if (e)
        FAIL_WITH(e);
    return REAL(ftruncate)(fd, len);
}

int ftruncate64(int fd, off_t len)
{
    int e = fd_gate(OP_WRITE, fd);
    if (e)
        FAIL_WITH(e);
    return REAL(ftruncate64)(fd, len);
}

int fsync(int fd)
{
    int e = fd_gate(OP_FSYNC, fd);
    if (e)
        FAIL_WITH(e);
    return REAL(fsync)(fd);
}

int fdatasync(int fd)
{
    int e = fd_gate(OP_FSYNC, fd);
    if (e)
        FAIL_WITH(e);
    return REAL(fdatasync)(fd);
}

/* ------------------------------------------------------------ names */

static int path_gate(enum op op, int dirfd, const char *name)
{
    char abs[PATH_MAX];
    abs_path(dirfd, name, abs, sizeof abs);
    return gate(op, abs);
}

int rename(const char *from, const char *to)
{
    int e = path_gate(OP_RENAME, AT_FDCWD, to);
    if (e)
        FAIL_WITH(e);
    return REAL(rename)(from, to);
}

int renameat(int fd1, const char *from, int fd2, const char *to)
{
    int e = path_gate(OP_RENAME, fd2, to);
    if (e)
        FAIL_WITH(e);
    return REAL(renameat)(fd1, from, fd2, to);
}

int renameat2(int fd1, const char *from, int fd2, const char *to,
              unsigned flags)
{
    int e = path_gate(OP_RENAME, fd2, to);
    if (e)
        FAIL_WITH(e);
    return REAL(renameat2)(fd1, from, fd2, to, flags);
}

int link(const char *from, const char *to)
{
    int e = path_gate(OP_RENAME, AT_FDCWD, to);
    if (e)
        FAIL_WITH(e);
    return REAL(link)(from, to);
}

int linkat(int fd1, const char *from, int fd2, const char *to, int flags)
{
    int e = path_gate(OP_RENAME, fd2, to);
    if (e)
        FAIL_WITH(e);
    return REAL(linkat)(fd1, from, fd2, to, flags);
}

int unlink(const char *path)
{
    int e = path_gate(OP_UNLINK, AT_FDCWD, path);
    if (e)
        FAIL_WITH(e);
    return REAL(unlink)(path);
}

int unlinkat(int dirfd, const char *path, int flags)
{
    int e = path_gate(OP_UNLINK, dirfd, path);
    if (e)
        FAIL_WITH(e);
    return REAL(unlinkat)(dirfd, path, flags);
}

int rmdir(const char *path)
{
    int e = path_gate(OP_UNLINK, AT_FDCWD, path);
    if (e)
        FAIL_WITH(e);
    return REAL(rmdir)(path);
}

int mkdir(const char *path, mode_t mode)
{
    int e = path_gate(OP_MKDIR, AT_FDCWD, path);
    if (e)
        FAIL_WITH(e);
    return REAL(mkdir)(path, mode);
}

int mkdirat(int dirfd, const char *path, mode_t mode)
{
    int e = path_gate(OP_MKDIR, dirfd, path);
    if (e)
        FAIL_WITH(e);
    return REAL(mkdirat)(dirfd, path, mode);
}

/* ------------------------------------------------------------ locks */

/* The answer of a lock command under CKPT_SHIM_NOLOCK: 1 when cmd was
 * answered (a set lock "taken", a test lock found free), else 0. */
static int fake_lock(int cmd, void *arg)
{
    setup();
    if (!no_locks)
        return 0;
    switch (cmd) {
    case F_SETLK: case F_SETLKW: case F_OFD_SETLK: case F_OFD_SETLKW:
        return 1;
    case F_GETLK: case F_OFD_GETLK:
        ((struct flock *)arg)->l_type = F_UNLCK;
        return 1;
    default:
        return 0;
    }
}

/* Every fcntl command passes its third argument as a long or a pointer,
 * which share one register: it is read as a pointer-sized value. */
#define FCNTL_BODY(real)                                                   \
    va_list ap;                                                            \
    va_start(ap, cmd);                                                     \
    void *arg = va_arg(ap, void *);                                        \
    va_end(ap);                                                            \
    if (fake_lock(cmd, arg))                                               \
        return 0;                                                          \
    return (real)(fd, cmd, arg)

int fcntl(int fd, int cmd, ...)
{
    FCNTL_BODY(REAL(fcntl));
}

int fcntl64(int fd, int cmd, ...)
{
    FCNTL_BODY(REAL(fcntl64) ? REAL(fcntl64) : REAL(fcntl));
}

int flock(int fd, int op)
{
    setup();
    if (no_locks)
        return 0;
    return REAL(flock)(fd, op);
}
