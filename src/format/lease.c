/*
 * lease.c - shared leases on saves in progress, and gc's exclusive probe
 * of them (see lease.h): an open file description lock on
 * <save>/.pending/lease plus a heartbeat thread that touches the file.
 */
#include "format/lease.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/confine.h"
#include "common/error.h"
#include "common/fileio.h"
#include "format/pending.h"

/* A heartbeat thread: of one lease, or shared by all the leases taken
 * on a ckpt_heartbeat (a mount daemon's thousands of saves and writers:
 * one thread, not one each). */
typedef struct beater {
    pthread_t thread;
    int running;                 /* the thread was started */
    pthread_mutex_t mu;
    pthread_cond_t cv;           /* CLOCK_MONOTONIC */
    int stop;
    int beat_ms;
    ckpt_lease *leases;          /* those it beats (under mu) */
} beater;

struct ckpt_heartbeat {
    beater b;
};

struct ckpt_lease {
    int fd;
    char *path;
    int beat_ms;
    beater *own;                 /* its own heartbeat thread, or NULL */
    beater *on;                  /* the thread that beats it, or NULL */
    ckpt_lease *prev, *next;     /* in on->leases */
};

/* 1 for the errors of a file system that keeps no locks. */
static int no_locks(int e)
{
    return e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS;
}

/* Sets a lock of `type` on the whole of fd: an open file description lock
 * (falling back to a process lock on kernels without them).  Returns 0 or
 * -errno: -EAGAIN when another holder conflicts and wait is 0. */
static int lock_whole(int fd, short type, int wait)
{
    struct flock fl;
    int cmd = wait ? F_OFD_SETLKW : F_OFD_SETLK;
    for (;;) {
        memset(&fl, 0, sizeof fl);
        fl.l_type = type;
        fl.l_whence = SEEK_SET;
        if (fcntl(fd, cmd, &fl) == 0)
            return 0;
        int e = errno;
        if (e == EINTR)
            continue;
        if (e == EINVAL && (cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW)) {
            cmd = wait ? F_SETLKW : F_SETLK;   /* Linux before 3.15 */
            continue;
        }
        return e == EACCES ? -EAGAIN : -e;
    }
}

/* The lease file's path for dir, into buf. */
static int lease_path(char *buf, size_t cap, const char *dir,
                      ckpt_error *err)
{
    return ckpt_path_join(buf, cap, dir, CKPT_LEASE_PATH, err);
}

/* 1 when path still names the file open as fd. */
static int still_there(int fd, const char *path)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 &&
           a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Refreshes the heartbeat unless someone did within half a beat: with
 * thousands of writers on one save (an MPI job), most find it fresh and
 * cost the file server a read of cached attributes, not a write. */
static void beat(int fd, int beat_ms)
{
    struct stat st;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (fstat(fd, &st) == 0) {
        int64_t age_ms = ((int64_t)now.tv_sec - st.st_mtim.tv_sec) * 1000 +
                         (now.tv_nsec - st.st_mtim.tv_nsec) / 1000000;
        if (age_ms >= 0 && age_ms < beat_ms / 2)
            return;
    }
    (void)futimens(fd, NULL);   /* a heartbeat: best effort */
}

static void *beat_thread(void *arg)
{
    beater *b = arg;
    pthread_mutex_lock(&b->mu);
    while (!b->stop) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        t.tv_sec += b->beat_ms / 1000;
        t.tv_nsec += (long)(b->beat_ms % 1000) * 1000000L;
        if (t.tv_nsec >= 1000000000L) {
            t.tv_sec++;
            t.tv_nsec -= 1000000000L;
        }
        int rc = 0;
        while (!b->stop && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&b->cv, &b->mu, &t);
        for (ckpt_lease *l = b->leases; !b->stop && l; l = l->next)
            beat(l->fd, b->beat_ms);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

static int beater_start(beater *b, int beat_ms, ckpt_error *err)
{
    *b = (beater){ .beat_ms = beat_ms };
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&b->mu, NULL);
    int rc = pthread_create(&b->thread, NULL, beat_thread, b);
    if (rc) {
        pthread_cond_destroy(&b->cv);
        pthread_mutex_destroy(&b->mu);
        return ckpt_err_sys(err, -rc, "cannot start a lease heartbeat "
                            "thread");
    }
    b->running = 1;
    return 0;
}

static void beater_stop(beater *b)
{
    if (!b->running)
        return;
    pthread_mutex_lock(&b->mu);
    b->stop = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->thread, NULL);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    b->running = 0;
}

static void beater_add(beater *b, ckpt_lease *l)
{
    pthread_mutex_lock(&b->mu);
    l->on = b;
    l->prev = NULL;
    l->next = b->leases;
    if (b->leases)
        b->leases->prev = l;
    b->leases = l;
    pthread_mutex_unlock(&b->mu);
}

static void beater_remove(ckpt_lease *l)
{
    beater *b = l->on;
    if (!b)
        return;
    pthread_mutex_lock(&b->mu);
    if (l->prev)
        l->prev->next = l->next;
    else
        b->leases = l->next;
    if (l->next)
        l->next->prev = l->prev;
    pthread_mutex_unlock(&b->mu);
    l->on = NULL;
}

int ckpt_heartbeat_new(ckpt_heartbeat **out, int beat_ms, ckpt_error *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return ckpt_err(err, -ENOMEM, "out of memory");
    int rc = beater_start(&(*out)->b, beat_ms > 0 ? beat_ms
                                                  : CKPT_LEASE_BEAT_MS, err);
    if (rc) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

void ckpt_heartbeat_free(ckpt_heartbeat *h)
{
    if (!h)
        return;
    beater_stop(&h->b);
    free(h);
}

void ckpt_lease_drop(ckpt_lease *l)
{
    if (!l)
        return;
    beater_remove(l);
    if (l->own) {
        beater_stop(l->own);
        free(l->own);
    }
    if (l->fd >= 0)
        close(l->fd);   /* releases the lock */
    free(l->path);
    free(l);
}

static int start_beat(ckpt_lease *l, ckpt_heartbeat *h, ckpt_error *err);

int ckpt_lease_beat_fd(ckpt_lease **out, int fd, int beat_ms,
                       ckpt_error *err)
{
    *out = NULL;
    ckpt_lease *l = calloc(1, sizeof *l);
    if (!l)
        return ckpt_err(err, -ENOMEM, "out of memory");
    l->beat_ms = beat_ms;
    l->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    int rc = l->fd < 0 ? ckpt_err_sys(err, -errno, "cannot keep a descriptor "
                                      "to beat") : 0;
    if (rc == 0) {
        (void)futimens(l->fd, NULL);
        rc = start_beat(l, NULL, err);
    }
    if (rc) {
        ckpt_lease_drop(l);
        return rc;
    }
    *out = l;
    return 0;
}

/* Starts l's heartbeat: on h's thread, or on one of its own. */
static int start_beat(ckpt_lease *l, ckpt_heartbeat *h, ckpt_error *err)
{
    if (h) {
        beater_add(&h->b, l);
        return 0;
    }
    if (l->beat_ms <= 0)
        return 0;
    if (!(l->own = malloc(sizeof *l->own)))
        return ckpt_err(err, -ENOMEM, "out of memory");
    int rc = beater_start(l->own, l->beat_ms, err);
    if (rc) {
        free(l->own);
        l->own = NULL;
        return rc;
    }
    beater_add(l->own, l);
    return 0;
}

static int take(ckpt_lease **out, const char *dir, int beat_ms,
                ckpt_heartbeat *h, ckpt_error *err);

int ckpt_lease_take(ckpt_lease **out, const char *dir, int beat_ms,
                    ckpt_error *err)
{
    return take(out, dir, beat_ms, NULL, err);
}

int ckpt_lease_take_on(ckpt_lease **out, const char *dir, ckpt_heartbeat *h,
                       ckpt_error *err)
{
    return take(out, dir, h ? h->b.beat_ms : CKPT_LEASE_BEAT_MS, h, err);
}

static int take(ckpt_lease **out, const char *dir, int beat_ms,
                ckpt_heartbeat *h, ckpt_error *err)
{
    char path[4096];
    *out = NULL;
    int rc = lease_path(path, sizeof path, dir, err);
    if (rc)
        return rc;
    ckpt_lease *l = calloc(1, sizeof *l);
    if (!l || !(l->path = strdup(path))) {
        free(l);
        return ckpt_err(err, -ENOMEM, "out of memory");
    }
    l->beat_ms = beat_ms;
    l->fd = -1;
    int pfd = ckpt_pending_open(dir, 1, err);
    if (pfd == -ENOENT)
        rc = ckpt_err(err, -ENOENT, "%s is not a save in progress (it has "
                      "no .pending/; a gc may have removed it)", dir);
    else if (pfd < 0)
        rc = pfd;
    if (rc == 0) {
        l->fd = ckpt_pending_file(pfd, dir, "lease", O_RDWR | O_CREAT, err);
        close(pfd);
        if (l->fd < 0)
            rc = l->fd;
    }
    if (rc == 0) {
        rc = lock_whole(l->fd, F_RDLCK, 1);
        if (no_locks(-rc))
            rc = 0;             /* the heartbeat alone, then */
        else if (rc)
            ckpt_err_sys(err, rc, "cannot lock the lease %s", path);
    }
    if (rc == 0 && !still_there(l->fd, path))
        rc = ckpt_err(err, -ESTALE, "%s was removed by ckpt gc (its save "
                      "had been idle longer than gc's --min-age) while this "
                      "process waited to take its lease", dir);
    if (rc == 0) {
        beat(l->fd, beat_ms > 0 ? beat_ms : CKPT_LEASE_BEAT_MS);
        rc = start_beat(l, h, err);
    }
    if (rc) {
        ckpt_lease_drop(l);
        return rc;
    }
    *out = l;
    return 0;
}

/* Makes the missing directory dir with its .pending/ and data/ in one
 * step: built aside under a hidden name in its parent, leased there, then
 * renamed into place, so that a process killed midway leaves nothing under
 * dir's name that is not a save (gc removes the hidden leftover), and no
 * gc can take the save between its appearance and its lease.  -EEXIST
 * when dir appeared meanwhile (then nothing is leased). */
static int make_layout_atomic(ckpt_lease **out, const char *dir,
                              ckpt_heartbeat *h, ckpt_error *err)
{
    char parent[4096], tmp[4096 + 300], sub[4096 + 320], base[256];
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    if (n >= sizeof parent)
        return ckpt_err(err, -ENAMETOOLONG, "%s: path too long", dir);
    memcpy(parent, dir, n);
    parent[n] = '\0';
    char *slash = strrchr(parent, '/');
    snprintf(base, sizeof base, "%.255s", slash ? slash + 1 : parent);
    if (slash == parent)
        parent[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        snprintf(parent, sizeof parent, ".");
    int rc = ckpt_mkdirs(parent, err);
    if (rc)
        return rc;
    char comp[256], tag[32];
    snprintf(tag, sizeof tag, "%lx", (unsigned long)pthread_self() & 0xffffff);
    ckpt_new_name(comp, sizeof comp, tag, base);
    snprintf(tmp, sizeof tmp, "%s/%s", parent, comp);
    if (mkdir(tmp, 0755) != 0)
        return ckpt_err_sys(err, -errno, "cannot create %s", tmp);
    snprintf(sub, sizeof sub, "%s/.pending", tmp);
    if (mkdir(sub, 0755) != 0)
        rc = ckpt_err_sys(err, -errno, "cannot create %s", sub);
    snprintf(sub, sizeof sub, "%s/data", tmp);
    if (rc == 0 && mkdir(sub, 0755) != 0)
        rc = ckpt_err_sys(err, -errno, "cannot create %s", sub);
    if (rc == 0)
        rc = ckpt_lease_take_on(out, tmp, h, err);
    if (rc == 0 && rename(tmp, dir) != 0) {
        rc = errno == ENOTEMPTY || errno == EEXIST
            ? -EEXIST : ckpt_err_sys(err, -errno, "cannot create %s", dir);
        ckpt_lease_drop(*out);
        *out = NULL;
    }
    if (rc)
        ckpt_remove_tree(tmp, NULL);
    return rc;
}

/* Makes dir/name, or takes it if it is a directory: not a symbolic link
 * (one left there would take the writers' files out of the checkpoint,
 * docs/TRUST.md). */
static int make_subdir(const char *dir, const char *name, ckpt_error *err)
{
    char path[4096];
    struct stat st;
    int rc = ckpt_path_join(path, sizeof path, dir, name, err);
    if (rc == 0)
        rc = ckpt_mkdir(path, err);
    if (rc == 0 && lstat(path, &st) != 0)
        rc = ckpt_err_sys(err, -errno, "%s", path);
    if (rc == 0 && !S_ISDIR(st.st_mode))
        rc = ckpt_err(err, -ELOOP, "%s is a symbolic link: a writer writes "
                      "only inside the checkpoint directory", path);
    return rc;
}

int ckpt_save_begin(ckpt_lease **out, const char *dir, ckpt_error *err)
{
    return ckpt_save_begin_on(out, dir, NULL, err);
}

int ckpt_save_begin_on(ckpt_lease **out, const char *dir, ckpt_heartbeat *h,
                       ckpt_error *err)
{
    char path[4096];
    struct stat st;
    *out = NULL;
    if (stat(dir, &st) != 0 && errno == ENOENT) {
        int rc = make_layout_atomic(out, dir, h, err);
        if (rc != -EEXIST)
            return rc;          /* else another writer made it: join it */
    }
    int rc = ckpt_path_join(path, sizeof path, dir, "index.db", err);
    if (rc == 0 && stat(path, &st) == 0)
        return ckpt_err(err, -EEXIST, "%s is already a committed checkpoint "
                        "(it has index.db); committed checkpoints are "
                        "immutable", dir);
    /* A save's data/ is made after its .pending/, and its commit removes
     * .pending/ once index.db is there: in a directory with data/, a
     * .pending/ is never made.  Its absence then means a checkpoint
     * committed by another node, whose index.db this node's cached view
     * may not show yet (while a create always asks the file server: no
     * .pending/ is ever made in a committed checkpoint, issue #25). */
    int had_data = rc == 0 &&
                   ckpt_path_join(path, sizeof path, dir, "data", err) == 0 &&
                   lstat(path, &st) == 0;
    /* .pending/ before data/: a directory with data/ alone is never a
     * save that someone could hold a lease on. */
    if (rc == 0 && !had_data)
        rc = make_subdir(dir, ".pending", err);
    if (rc == 0)
        rc = make_subdir(dir, "data", err);
    if (rc == 0)
        rc = ckpt_lease_take_on(out, dir, h, err);
    if (rc == -ENOENT && had_data)
        rc = ckpt_err(err, -EEXIST, "%s is a committed checkpoint (it has "
                      "data/ and no .pending/; this node may not see its "
                      "index.db yet); committed checkpoints are immutable",
                      dir);
    return rc;
}

int ckpt_lease_lock_exclusive(const char *dir, int create, int *fd,
                              int *created, ckpt_error *err)
{
    char path[4096];
    *fd = -1;
    *created = 0;
    int rc = lease_path(path, sizeof path, dir, err);
    if (rc)
        return rc;
    /* gc may retire another user's save (it only removes): any owner,
     * but never through a link or into a FIFO. */
    int pfd = ckpt_pending_open(dir, 0, err);
    if (pfd < 0)
        return pfd;
    int f = create ? ckpt_confine_at(pfd, "lease", O_RDWR | O_CREAT | O_EXCL,
                                     0644, CKPT_ANY_OWNER)
                   : -EEXIST;
    struct stat pst;
    if (f >= 0) {
        *created = 1;
        /* The lease is the save owner's, whoever runs gc (a root gc over
         * a user's young save leaves it for that user's writers, who
         * refuse a lease of another user's). */
        if (fstat(pfd, &pst) == 0 && pst.st_uid != geteuid() &&
            fchown(f, pst.st_uid, pst.st_gid) != 0) {
            (void)unlinkat(pfd, "lease", 0);
            close(f);
            f = -EPERM;
        }
    } else if (f == -EEXIST)
        f = ckpt_confine_at(pfd, "lease", O_RDWR, 0, CKPT_ANY_OWNER);
    close(pfd);
    if (f == -ENOENT && !create)
        return 0;
    if (f < 0)
        return ckpt_err_sys(err, f, "cannot open the lease %s (it must be a "
                            "regular file, not a link)", path);
    rc = lock_whole(f, F_WRLCK, 0);
    if (rc == -EAGAIN) {
        close(f);
        return ckpt_err(err, -EBUSY, "%s: a writer or committer holds its "
                        "lease", dir);
    }
    if (rc && !no_locks(-rc)) {
        close(f);
        return ckpt_err_sys(err, rc, "cannot lock the lease %s", path);
    }
    *fd = f;
    return rc ? -ENOLCK : 0;
}

/* ------------------------------------------------------------ new names */

void ckpt_host_tag(char *buf, size_t cap)
{
    char host[64] = "host";
    if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "host");
    host[sizeof host - 1] = '\0';
    size_t n = 0;
    for (const char *p = host; *p && n + 1 < cap && n < 40; p++)
        buf[n++] = (char)(((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')
                           || (*p >= '0' && *p <= '9') || *p == '-')
                          ? *p : '-');
    buf[n] = '\0';
}

/* 1 when process pid has exited but was not reaped yet (a zombie: an MPI
 * rank killed beside a launcher that does not wait for it).  Linux /proc;
 * 0 when that cannot be read. */
static int pid_is_zombie(long pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *end = strrchr(buf, ')');   /* "PID (COMM) STATE ..." */
    return end && end[1] == ' ' && (end[2] == 'Z' || end[2] == 'X');
}

int ckpt_new_name(char *buf, size_t cap, const char *tag, const char *name)
{
    char host[48];
    ckpt_host_tag(host, sizeof host);
    return snprintf(buf, cap, CKPT_NEW_PREFIX "%s.%ld.%.40s.%.150s", host,
                    (long)getpid(), tag, name);
}

int ckpt_new_maker_gone(const char *name)
{
    char host[48];
    size_t pl = strlen(CKPT_NEW_PREFIX);
    if (strncmp(name, CKPT_NEW_PREFIX, pl) != 0)
        return 0;
    ckpt_host_tag(host, sizeof host);
    size_t hl = strlen(host);
    const char *p = name + pl;
    if (strncmp(p, host, hl) != 0 || p[hl] != '.')
        return 0;                       /* made elsewhere: cannot tell */
    char *end;
    long pid = strtol(p + hl + 1, &end, 10);
    if (end == p + hl + 1 || *end != '.' || pid <= 0)
        return 0;
    return ckpt_pid_gone(pid);
}

int ckpt_pid_gone(long pid)
{
    if (pid <= 0)
        return 0;
    if (kill((pid_t)pid, 0) != 0)
        return errno == ESRCH;
    return pid_is_zombie(pid);
}

/* ------------------------------------------------------------ unsynced */

void ckpt_save_mark_unsynced(const char *dir, const char *msg)
{
    int pfd = ckpt_pending_open(dir, 1, NULL);
    if (pfd < 0)
        return;
    int fd = ckpt_confine_at(pfd, "unsynced", O_WRONLY | O_CREAT | O_EXCL,
                             0644, CKPT_ANY_OWNER);
    close(pfd);
    if (fd < 0)
        return;                 /* marked already, or cannot be */
    size_t n = strlen(msg);
    (void)ckpt_write_full(fd, msg, n < CKPT_CONTROL_MAX ? n
                          : CKPT_CONTROL_MAX, CKPT_UNSYNCED_PATH, NULL);
    (void)fsync(fd);
    close(fd);
}

int ckpt_save_unsynced(const char *dir, char *buf, size_t cap)
{
    if (cap)
        buf[0] = '\0';
    int pfd = ckpt_pending_open(dir, 0, NULL);
    if (pfd < 0)
        return 0;
    /* A mark that is a link, a FIFO or another user's file is no mark of
     * ours; but a save that has one anyway is not committed. */
    struct stat st;
    int there = fstatat(pfd, "unsynced", &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (there && !ckpt_pending_read(pfd, "unsynced", buf, cap) && cap)
        snprintf(buf, cap, "%s/" CKPT_UNSYNCED_PATH " is not a regular file "
                 "of this user", dir);
    close(pfd);
    return there;
}
