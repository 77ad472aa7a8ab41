/*
 * spent.c - a committed save's .pending/ moved aside and removed later
 * (see spent.h).
 */
#include "write/spent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/pool.h"

/* Threads that unlink a spent directory's files: an unlink's cost is the
 * freeing of the file's blocks (on a file system that discards them, a
 * wait for the device), which the kernel does outside the directory's
 * lock, so unlinks of one directory overlap (4,096 plans: 0.75-2.3 s by
 * one thread, 0.3-0.46 s by 8, 0.33-0.41 s by 32; tests/bench/README.md). */
#define REMOVE_THREADS 8

/* dir split into its parent (into parent, cap bytes) and its last name. */
static const char *split(const char *dir, char *parent, size_t cap)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    size_t s = n;
    while (s > 0 && dir[s - 1] != '/')
        s--;
    if (s == 0)
        snprintf(parent, cap, ".");
    else
        snprintf(parent, cap, "%.*s", s == 1 ? 1 : (int)(s - 1), dir);
    static const char none[] = "";
    return s < n ? dir + s : none;
}

int ckpt_spent_move(const char *dir)
{
    char parent[4096], from[4096], to[4096];
    const char *name = split(dir, parent, sizeof parent);
    size_t len = strcspn(name, "/");
    if (ckpt_path_join(from, sizeof from, dir, ".pending", NULL))
        return -ENAMETOOLONG;
    for (unsigned n = 0; n < 1000; n++) {
        if ((size_t)snprintf(to, sizeof to, "%s/" CKPT_SPENT_PREFIX
                             "%ld.%u.%.*s", parent, (long)getpid(), n,
                             (int)(len > 128 ? 128 : len), name) >=
            sizeof to)
            return -ENAMETOOLONG;
        if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
            return 0;
        if (errno == EINVAL || errno == ENOSYS) {
            /* No RENAME_NOREPLACE here: take a name nobody has. */
            struct stat st;
            if (lstat(to, &st) == 0)
                continue;
            if (rename(from, to) == 0)
                return 0;
        }
        if (errno != EEXIST && errno != ENOTEMPTY)
            return -errno;
    }
    return -EEXIST;
}

typedef struct unlink_task {
    int dfd;
    const char *name;
    ckpt_taskgroup *g;
} unlink_task;

static void unlink_one(void *arg, int worker)
{
    (void)worker;
    unlink_task *t = arg;
    (void)unlinkat(t->dfd, t->name, 0);
    ckpt_tg_done(t->g);
}

/* The names of the entries e of the directory dfd that keep(dfd, e)
 * holds, into *names and *n; 0 or -errno. */
static int list_names(int dfd, int (*keep)(int, const struct dirent *),
                      char ***names, size_t *n)
{
    int fd = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return -e;
    }
    size_t cap = 0;
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (!keep(dfd, e))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            char **v = realloc(*names, cap * sizeof *v);
            if (!v) {
                rc = -ENOMEM;
                break;
            }
            *names = v;
        }
        if (!((*names)[*n] = strdup(e->d_name)))
            rc = -ENOMEM;
        else
            (*n)++;
    }
    closedir(d);
    return rc;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* A regular file: unlinked in parallel (the rest goes with
 * ckpt_remove_tree). */
static int is_file(int dfd, const struct dirent *e)
{
    (void)dfd;
    return e->d_type == DT_REG;
}

int ckpt_spent_remove(const char *path, ckpt_error *err)
{
    char **names = NULL;
    size_t n = 0;
    ckpt_pool *pool = NULL;
    /* The files by the directory's descriptor: a link put in its place
     * is not followed (ckpt_remove_tree follows none either). */
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd >= 0 && list_names(dfd, is_file, &names, &n) == 0 &&
        n >= 2 * REMOVE_THREADS &&
        ckpt_pool_create(&pool, REMOVE_THREADS, NULL) == 0) {
        unlink_task *t = calloc(n, sizeof *t);
        ckpt_taskgroup g;
        ckpt_tg_init(&g);
        for (size_t i = 0; t && i < n; i++)
            t[i] = (unlink_task){ dfd, names[i], &g };
        if (t)
            ckpt_pool_run_tasks(pool, unlink_one, t, n, sizeof *t, &g);
        ckpt_tg_destroy(&g);
        ckpt_pool_destroy(pool);
        free(t);
    }
    if (dfd >= 0)
        close(dfd);
    free_names(names, n);
    return ckpt_remove_tree(path, err);
}

struct ckpt_spent_sweep {
    pthread_t thread;
    char parent[4096];
    char **names;       /* the spent directories there when it began */
    size_t n;
};

/* A spent directory of this user's. */
static int is_spent(int pfd, const struct dirent *e)
{
    struct stat st;
    return strncmp(e->d_name, CKPT_SPENT_PREFIX,
                   strlen(CKPT_SPENT_PREFIX)) == 0 &&
           fstatat(pfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
           S_ISDIR(st.st_mode) && st.st_uid == geteuid();
}

static void *sweep_thread(void *arg)
{
    ckpt_spent_sweep *s = arg;
    for (size_t i = 0; i < s->n; i++) {
        char path[4096];
        if (ckpt_path_join(path, sizeof path, s->parent, s->names[i],
                           NULL) == 0)
            (void)ckpt_spent_remove(path, NULL);   /* else gc's */
    }
    return NULL;
}

static void sweep_free(ckpt_spent_sweep *s)
{
    free_names(s->names, s->n);
    free(s);
}

ckpt_spent_sweep *ckpt_spent_sweep_start(const char *dir)
{
    ckpt_spent_sweep *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    (void)split(dir, s->parent, sizeof s->parent);
    /* Listed here, not on the thread: what this commit moves aside
     * itself stays for the next one. */
    int pfd = open(s->parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = pfd < 0 ? -errno : list_names(pfd, is_spent, &s->names, &s->n);
    if (pfd >= 0)
        close(pfd);
    if (rc || s->n == 0 ||
        pthread_create(&s->thread, NULL, sweep_thread, s) != 0) {
        sweep_free(s);
        return NULL;
    }
    return s;
}

void ckpt_spent_sweep_join(ckpt_spent_sweep *s)
{
    if (!s)
        return;
    pthread_join(s->thread, NULL);
    sweep_free(s);
}
