/*
 * gc.c - removing what `ckpt gc` may remove, safely against live writers
 * and committers, and the retention policy (see gc.h).
 *
 * An unfinished save is removed only while gc holds its lease exclusively:
 * no writer or committer works on it then, and any that arrives waits for
 * the lock, then finds the save gone.  Under the lock gc measures how long
 * the save has been idle, checks again that it is not committed, and
 * renames it out of the way (a hidden name in the same root, one atomic
 * step) before deleting anything; a committed checkpoint is retired the
 * same way.  A gc that dies midway leaves a hidden directory that the next
 * gc removes, never a half-deleted checkpoint or save under its own name.
 */
#include "write/gc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "format/lease.h"

#define NAME_MAX_LEN 255
#define CKPT_GC_MAX_WORLD (1 << 20)   /* ranks a marker may name */
#define PATH_CAP 4096

/* ------------------------------------------------------------ activity */

static int64_t mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
}

/* Takes the newest mtime of the regular files in dir (all of them but
 * `skip`) into *ns.  A missing dir is no error. */
static int newest_file(const char *dir, const char *skip, int64_t *ns,
                       ckpt_error *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT || errno == ENOTDIR
            ? 0 : ckpt_err_sys(err, -errno, "cannot list %s", dir);
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (errno = 0, e = readdir(d)) != NULL) {
        struct stat st;
        if (skip && strcmp(e->d_name, skip) == 0)
            continue;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT)
                rc = ckpt_err_sys(err, -errno, "cannot inspect %s/%s", dir,
                                  e->d_name);
            continue;
        }
        if (S_ISREG(st.st_mode) && mtime_ns(&st) > *ns)
            *ns = mtime_ns(&st);
    }
    if (rc == 0 && errno)
        rc = ckpt_err_sys(err, -errno, "cannot list %s", dir);
    closedir(d);
    return rc;
}

int ckpt_save_activity(const char *dir, int skip_lease, int64_t *ns,
                       ckpt_error *err)
{
    char sub[PATH_CAP];
    struct stat st;
    if (stat(dir, &st) != 0)
        return ckpt_err_sys(err, -errno, "cannot inspect %s", dir);
    *ns = mtime_ns(&st);
    int rc = newest_file(dir, NULL, ns, err);
    if (rc == 0)
        rc = ckpt_path_join(sub, sizeof sub, dir, ".pending", err);
    if (rc == 0)
        rc = newest_file(sub, skip_lease ? "lease" : NULL, ns, err);
    if (rc == 0)
        rc = ckpt_path_join(sub, sizeof sub, dir, "data", err);
    if (rc == 0)
        rc = newest_file(sub, NULL, ns, err);
    return rc;
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* ------------------------------------------------------------ retiring */

int ckpt_gc_is_retired(const char *name)
{
    return strncmp(name, CKPT_GC_PREFIX, strlen(CKPT_GC_PREFIX)) == 0;
}

/* Renames root/name to a new hidden name of root (into `hidden`) and
 * syncs root.  Nothing is renamed over. */
static int retire(const char *root, const char *name, char *hidden,
                  size_t cap, ckpt_error *err)
{
    char path[PATH_CAP], comp[NAME_MAX_LEN + 1];
    int rc = ckpt_path_join(path, sizeof path, root, name, err);
    for (unsigned n = 0; rc == 0; n++) {
        snprintf(comp, sizeof comp, CKPT_GC_PREFIX "%ld.%u.%s",
                 (long)getpid(), n, name);   /* truncated to fit */
        rc = ckpt_path_join(hidden, cap, root, comp, err);
        if (rc)
            break;
        if (renameat2(AT_FDCWD, path, AT_FDCWD, hidden, RENAME_NOREPLACE) == 0)
            break;
        if (errno == EINVAL || errno == ENOSYS) {
            /* No RENAME_NOREPLACE here: take a name nobody has. */
            struct stat st;
            if (lstat(hidden, &st) == 0)
                continue;
            if (rename(path, hidden) == 0)
                break;
        }
        if (errno == EEXIST && n < 1000)
            continue;
        return ckpt_err_sys(err, -errno, "cannot retire %s (rename to %s)",
                            path, hidden);
    }
    return rc ? rc : ckpt_fsync_dir(root, err);
}

/* Retires root/name and removes it.  Once it is retired, a failure to
 * remove it is reported, and the next gc finishes the job. */
static int retire_and_remove(const char *root, const char *name,
                             ckpt_error *err)
{
    char hidden[PATH_CAP];
    ckpt_error e = { 0 };
    hidden[0] = '\0';
    int rc = retire(root, name, hidden, sizeof hidden, &e);
    if (rc && hidden[0] == '\0') {
        if (err)
            *err = e;
        return rc;
    }
    int rrc = ckpt_remove_tree(hidden, rc ? NULL : &e);
    if (rc == 0 && rrc)
        rc = rrc;
    if (rc && err)
        *err = e;
    return rc;
}

int ckpt_gc_retire(const char *root, const char *name, ckpt_error *err)
{
    return retire_and_remove(root, name, err);
}

/* ------------------------------------------------------------ saves */

/* 1 when dir has index.db. */
static int has_index(const char *dir)
{
    char path[PATH_CAP];
    struct stat st;
    return ckpt_path_join(path, sizeof path, dir, "index.db", NULL) == 0 &&
           lstat(path, &st) == 0;
}

/* The world of a writable mount's save whose every rank is in (each
 * .pending/rank-R marker holds "world N", fs/rendezvous.c), else 0. */
static int all_ranks_in(const char *dir)
{
    char pending[PATH_CAP];
    if (ckpt_path_join(pending, sizeof pending, dir, ".pending", NULL))
        return 0;
    int pfd = open(pending, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (pfd >= 0 && fstatat(pfd, "failed", &st, AT_SYMLINK_NOFOLLOW) == 0) {
        close(pfd);     /* refused, not cut short: nothing will finish it */
        return 0;
    }
    DIR *d = pfd >= 0 ? fdopendir(pfd) : NULL;
    if (!d) {
        if (pfd >= 0)
            close(pfd);
        return 0;
    }
    int world = 0, bad = 0;
    unsigned char seen[CKPT_GC_MAX_WORLD / 8] = { 0 };
    long count = 0;
    struct dirent *e;
    while (!bad && (e = readdir(d))) {
        char *end, text[32] = { 0 };
        if (strncmp(e->d_name, "rank-", 5) != 0)
            continue;
        long r = strtol(e->d_name + 5, &end, 10);
        int fd = openat(pfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
                        O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, text, sizeof text - 1) : -1;
        if (fd >= 0)
            close(fd);
        int w = 0;
        if (*end || r < 0 || n <= 0 || sscanf(text, "world %d", &w) != 1 ||
            w <= 0 || w > CKPT_GC_MAX_WORLD || r >= w ||
            (world && w != world)) {
            bad = 1;        /* not a marker of ours: decide nothing */
            break;
        }
        world = w;
        if (!(seen[r / 8] & (1u << (r % 8)))) {
            seen[r / 8] |= (unsigned char)(1u << (r % 8));
            count++;
        }
    }
    closedir(d);
    return !bad && world && count == world ? world : 0;
}

int ckpt_gc_unfinished(const char *root, const char *name, int64_t min_age_ns,
                       int dry_run, ckpt_gc_result *res, ckpt_error *err)
{
    char path[PATH_CAP];
    int fd = -1, created = 0;
    int64_t t = 0;
    memset(res, 0, sizeof *res);
    res->locks = 1;
    int rc = ckpt_path_join(path, sizeof path, root, name, err);
    if (rc)
        return rc;
    /* A dry run creates nothing: without a lease file nobody holds one. */
    ckpt_error le = { 0 };
    rc = ckpt_lease_lock_exclusive(path, !dry_run, &fd, &created, &le);
    if (rc == -EBUSY) {
        res->why = CKPT_GC_LIVE;
        if (ckpt_save_activity(path, 0, &t, NULL) == 0)
            res->idle_ns = now_ns() - t;
        return 0;
    }
    if (rc == -ENOLCK || rc == -ENOENT) {
        res->locks = rc == -ENOLCK;   /* -ENOENT: no .pending/, no leases */
        rc = 0;
    }
    if (rc) {
        if (err)
            *err = le;
        return rc;
    }
    /* Holding the lock: no writer or committer is at work. */
    rc = ckpt_save_activity(path, created, &t, err);
    if (rc == 0) {
        res->idle_ns = now_ns() - t;
        if (res->idle_ns < min_age_ns)
            res->why = CKPT_GC_YOUNG;
        else if (has_index(path))
            res->why = CKPT_GC_COMMITTED;
        else if ((res->world = all_ranks_in(path)) > 0)
            res->why = CKPT_GC_ALL_IN;
        else if (!dry_run)
            rc = retire_and_remove(root, name, err);
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

int ckpt_gc_tidy(const char *root, const char *name, int dry_run, int *found,
                 ckpt_error *err)
{
    char path[PATH_CAP], pending[PATH_CAP], tmp[PATH_CAP];
    struct stat st;
    *found = 0;
    int rc = ckpt_path_join(path, sizeof path, root, name, err);
    if (rc == 0)
        rc = ckpt_path_join(pending, sizeof pending, path, ".pending", err);
    if (rc == 0)
        rc = ckpt_path_join(tmp, sizeof tmp, path, "index.db.tmp", err);
    if (rc)
        return rc;
    int has_pending = lstat(pending, &st) == 0 && S_ISDIR(st.st_mode);
    int has_tmp = lstat(tmp, &st) == 0;
    *found = (has_pending ? CKPT_GC_TIDY_PENDING : 0) |
             (has_tmp ? CKPT_GC_TIDY_TMP : 0);
    if (!*found || dry_run)
        return 0;
    int fd = -1, created = 0;
    if (has_pending) {
        rc = ckpt_lease_lock_exclusive(path, 0, &fd, &created, err);
        if (rc == -ENOLCK || rc == -ENOENT)
            rc = 0;
        if (rc)
            return rc;
    }
    if (has_tmp && unlink(tmp) != 0 && errno != ENOENT)
        rc = ckpt_err_sys(err, -errno, "cannot remove %s", tmp);
    if (rc == 0 && has_pending)
        rc = ckpt_remove_tree(pending, err);
    if (rc == 0)
        rc = ckpt_fsync_dir(path, err);
    if (fd >= 0)
        close(fd);
    return rc;
}

/* ------------------------------------------------------------ retention */

int ckpt_retain_parse_step(const char *v, int64_t *out)
{
    if (!v)
        return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || errno == ERANGE)
        return 0;
    while (*end == ' ' || *end == '\t' || *end == '\n')
        end++;
    if (*end)
        return 0;
    *out = x;
    return 1;
}

int ckpt_retain_key(const char *name, const char *step_meta, int64_t *key)
{
    if (ckpt_retain_parse_step(step_meta, key))
        return 1;
    const char *end = NULL;
    for (const char *p = name; *p; p++)
        if (*p >= '0' && *p <= '9')
            end = p + 1;
    if (!end)
        return 0;
    const char *start = end;
    while (start > name && start[-1] >= '0' && start[-1] <= '9')
        start--;
    while (start < end - 1 && *start == '0')
        start++;
    if (end - start > 18)
        return 0;               /* not a step: too many digits */
    int64_t v = 0;
    for (const char *p = start; p < end; p++)
        v = v * 10 + (*p - '0');
    *key = v;
    return 1;
}

int ckpt_retain_probe(const char *dir, ckpt_retain_item *item,
                      ckpt_error *err)
{
    ckpt_read_opts o;
    ckpt_read_opts_init(&o);
    o.threads = 1;
    o.prefetch = 0;
    o.cache_bytes = (size_t)1 << 20;
    char idx[PATH_CAP];
    struct stat st;
    int rc = ckpt_path_join(idx, sizeof idx, dir, "index.db", err);
    if (rc == 0 && stat(idx, &st) != 0)
        rc = ckpt_err_sys(err, -errno, "cannot inspect %s", idx);
    ckpt_reader *r;
    if (rc == 0)
        rc = ckpt_reader_open(&r, dir, &o, err);
    if (rc)
        return rc;
    item->has_key = ckpt_retain_key(item->name,
                                    ckpt_reader_meta_get(r, "step"),
                                    &item->key);
    item->committed_ns = mtime_ns(&st);
    ckpt_reader_close(r);
    return 0;
}

int ckpt_retain_newer(const ckpt_retain_item *a, const ckpt_retain_item *b)
{
    if (a->has_key != b->has_key)
        return a->has_key;
    if (a->has_key && a->key != b->key)
        return a->key > b->key;
    if (a->committed_ns != b->committed_ns)
        return a->committed_ns > b->committed_ns;
    return strcmp(a->name, b->name) > 0;
}

/* Newest first. */
static int by_age(const void *x, const void *y)
{
    const ckpt_retain_item *a = *(const ckpt_retain_item *const *)x;
    const ckpt_retain_item *b = *(const ckpt_retain_item *const *)y;
    return ckpt_retain_newer(a, b) ? -1 : ckpt_retain_newer(b, a) ? 1 : 0;
}

int ckpt_retain_select(const ckpt_retain_item *v, size_t n, int keep_last,
                       int64_t keep_every, ckpt_retain_why *why)
{
    const ckpt_retain_item **order = malloc((n ? n : 1) * sizeof *order);
    if (!order)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        order[i] = &v[i];
    qsort(order, n, sizeof *order, by_age);
    if (keep_last < 1)
        keep_last = 1;
    for (size_t r = 0; r < n; r++) {
        size_t i = (size_t)(order[r] - v);
        if (r == 0)
            why[i] = CKPT_RETAIN_LATEST;
        else if (r < (size_t)keep_last)
            why[i] = CKPT_RETAIN_LAST;
        else if (keep_every > 0 && v[i].has_key && v[i].key % keep_every == 0)
            why[i] = CKPT_RETAIN_EVERY;
        else
            why[i] = CKPT_RETAIN_DROP;
    }
    free(order);
    return 0;
}
