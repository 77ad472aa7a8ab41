/*
 * mount_write_bench.c - the C half of the write-mount benchmark (driven by
 * tests/bench/mount_write.sh): N rank processes save one state dict, each
 * its dim-0 shard of every tensor, either through ckptfs mounts in write
 * mode (plain open/fsetxattr/write/close, then the rank number written to
 * .ckptfs/commit) or with the library (one ckpt_writer per rank, then
 * ckpt_commit), so that the two are timed alike.
 *
 *   mount_write_bench mount STATE CKDIR [CKDIR2...] [--ranks N] [--name NAME]
 *                     [--attrs piece|four]
 *       CKDIR is a new checkpoint directory inside a `-o rw,world=N` mount;
 *       with several, rank r writes through CKDIR[r * NDIRS / N] (one mount
 *       per node).  Timed from the start signal to the exit of the last
 *       rank: the rank whose commit write completes the set returns only
 *       once the checkpoint is committed.  Each file's attributes are set
 *       with one setxattr of user.ckpt.piece, or with --attrs four one by
 *       one (user.ckpt.dtype, .shape, .offsets, .sizes).
 *   mount_write_bench lib STATE OUT [--ranks N] [--name NAME]
 *       Each rank: ckpt_writer_open(OUT, "rank<r>"), ckpt_writer_put of its
 *       pieces, ckpt_writer_close (shard and plan synced); then the parent
 *       runs ckpt_commit (expect_writers = N).  Timed the same way, commit
 *       included.  Default write options (codec auto), as the mount's.
 *   mount_write_bench check STATE CKPT
 *       Reads every tensor of CKPT with the library and compares it with
 *       STATE/state.bin (untimed); exit 1 on any difference.
 *
 * STATE is what `bench_core gen` writes: state.bin (every tensor's bytes,
 * back to back) and state.idx ("fqn dtype rows cols offset nbytes" per
 * line).  The rank processes are forked after state.bin is read into
 * memory shared with them (shared_state), so nothing is read from disk
 * inside the clock.  Rows are split as numpy.array_split does.
 *
 * Every timed command prints one line
 *   RESULT name=... seconds=... bytes_logical=... cpu_seconds=... ranks=...
 * (cpu_seconds: user + system of the rank processes and of this one; the
 * daemon's is added by the driver).  `mount` adds where the ranks' time
 * went, the largest over the ranks of each: open_s (mkdir -p, create,
 * setxattr), write_s, close_s (the close that records a piece) and
 * commit_s (the write to .ckptfs/commit).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "ckptfs.h"
#include "bench_util.h"

#define MAX_RANKS 64
#define MAX_DIRS 16

/* --attrs four: user.ckpt.dtype, .shape, .offsets and .sizes set one by
 * one, as before user.ckpt.piece (one setxattr) existed. */
static int four_attrs;

/* ------------------------------------------------------------ utilities */

static double cpu_of(int who)
{
    struct rusage ru;
    if (getrusage(who, &ru) != 0)
        return 0;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static double cpu_all(void)
{
    return cpu_of(RUSAGE_SELF) + cpu_of(RUSAGE_CHILDREN);
}

/* ------------------------------------------------------------ the state */

/* Moves sd->data into memory shared with the rank processes to come.
 * Private pages inherited by fork are copy-on-write, and the kernel
 * unshares (copies) such a page before pinning it for a direct-I/O write:
 * every write through the mount would copy its bytes once more, CPU that
 * a training process writing tensors it owns does not spend.  Shared
 * pages are pinned as they are, for the mount, and read as they are by
 * the library. */
static void shared_state(state_dict *sd)
{
    void *m = mmap(NULL, sd->total ? sd->total : 1, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        die("mmap %llu shared bytes: %s", (unsigned long long)sd->total,
            strerror(errno));
    memcpy(m, sd->data, sd->total);
    free(sd->data);
    sd->data = m;
}

/* Reads the state's index, and with with_data its bytes too (into shared
 * memory: shared_state). */
static void state_open(state_dict *sd, const char *dir, int with_data)
{
    state_read(sd, dir);
    if (with_data) {
        state_load(sd, dir);
        shared_state(sd);
    }
}

static void state_close(state_dict *sd)
{
    if (sd->data)
        munmap(sd->data, sd->total ? sd->total : 1);
    sd->data = NULL;
    state_free(sd);
}

/* Rows [*lo, *lo + *n) of `rows` for rank r of k, as numpy.array_split. */
static void my_rows(int64_t rows, int r, int k, int64_t *lo, int64_t *n)
{
    int64_t base = rows / k, extra = rows % k;
    *lo = r * base + (r < extra ? r : extra);
    *n = base + (r < extra ? 1 : 0);
}

/* ------------------------------------------------------------ rank processes */

typedef int (*rank_fn)(const state_dict *sd, int r, int k, void *arg);

/* Forks k ranks that wait for a start signal, starts the clock, signals,
 * and waits for every rank; returns the seconds, or dies if a rank failed. */
static double run_ranks(const state_dict *sd, int k, rank_fn fn, void *arg)
{
    int go[2];
    pid_t pid[MAX_RANKS];
    if (pipe(go) != 0)
        die("pipe: %s", strerror(errno));
    fflush(NULL);
    for (int r = 0; r < k; r++) {
        pid[r] = fork();
        if (pid[r] < 0)
            die("fork: %s", strerror(errno));
        if (pid[r] == 0) {
            char c;
            close(go[1]);
            while (read(go[0], &c, 1) < 0 && errno == EINTR)
                ;                      /* EOF: the parent's start signal */
            _exit(fn(sd, r, k, arg) ? 1 : 0);
        }
    }
    close(go[0]);
    double t0 = now_s();
    close(go[1]);
    int failed = 0;
    for (int r = 0; r < k; r++) {
        int st;
        while (waitpid(pid[r], &st, 0) < 0)
            if (errno != EINTR)
                die("waitpid: %s", strerror(errno));
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed++;
    }
    double secs = now_s() - t0;
    if (failed)
        die("%d of %d ranks failed (messages above)", failed, k);
    return secs;
}

/* ------------------------------------------------------------ through the mount */

/* Where a rank through the mount spends its time (seconds, summed over its
 * pieces), in memory shared with the parent: create + setxattr, write,
 * close (which records the piece), and the commit write. */
typedef struct phase_times {
    double open, write, close, commit;
} phase_times;

typedef struct mount_args {
    char **dirs;
    int ndirs;
    phase_times *times;               /* one per rank, MAP_SHARED */
} mount_args;

static int rank_fail(int r, const char *what, const char *path)
{
    fprintf(stderr, "mount_write_bench: rank %d: %s %s: %s\n", r, what, path,
            strerror(errno));
    return 1;
}

/* mkdir -p of the directories of `path` below `dir` (other ranks may be
 * making the same ones). */
static int make_parents(const char *dir, char *path, int r)
{
    for (char *p = path + strlen(dir) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        int bad = mkdir(path, 0755) != 0 && errno != EEXIST;
        if (bad)
            rank_fail(r, "mkdir", path);
        *p = '/';
        if (bad)
            return 1;
    }
    return 0;
}

static int setattr(int fd, const char *name, const char *val, int r,
                   const char *path)
{
    if (fsetxattr(fd, name, val, strlen(val), 0) != 0)
        return rank_fail(r, name, path);
    return 0;
}

static int mount_piece(const char *dir, const tensor_desc *t,
                       const unsigned char *data, int r, int k,
                       phase_times *pt)
{
    char path[4096], val[160];
    int64_t lo, n;
    my_rows(t->shape[0], r, k, &lo, &n);
    if (n == 0)
        return 0;
    snprintf(path, sizeof path, "%s/%s", dir, t->fqn);
    for (char *p = path + strlen(dir) + 1; *p; p++)
        if (*p == '.')
            *p = '/';
    double t0 = now_s();
    if (make_parents(dir, path, r))
        return 1;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return rank_fail(r, "create", path);
    int bad = 0;
    if (four_attrs) {
        bad = setattr(fd, "user.ckpt.dtype", ckpt_dtype_name(t->dtype), r,
                      path);
        snprintf(val, sizeof val, "%lld,%lld", (long long)t->shape[0],
                 (long long)t->shape[1]);
        bad = bad || setattr(fd, "user.ckpt.shape", val, r, path);
        snprintf(val, sizeof val, "%lld,0", (long long)lo);
        bad = bad || setattr(fd, "user.ckpt.offsets", val, r, path);
        snprintf(val, sizeof val, "%lld,%lld", (long long)n,
                 (long long)t->shape[1]);
        bad = bad || setattr(fd, "user.ckpt.sizes", val, r, path);
    } else {
        snprintf(val, sizeof val, "dtype=%s shape=%lld,%lld offsets=%lld,0 "
                 "sizes=%lld,%lld", ckpt_dtype_name(t->dtype),
                 (long long)t->shape[0], (long long)t->shape[1],
                 (long long)lo, (long long)n, (long long)t->shape[1]);
        bad = setattr(fd, "user.ckpt.piece", val, r, path);
    }
    size_t row = t->nbytes / (uint64_t)t->shape[0];
    const unsigned char *p = data + t->offset + (uint64_t)lo * row;
    size_t len = (size_t)n * row;
    double t1 = now_s();
    pt->open += t1 - t0;
    while (!bad && len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            bad = rank_fail(r, "write", path);
        else {
            p += w;
            len -= (size_t)w;
        }
    }
    double t2 = now_s();
    pt->write += t2 - t1;
    if (close(fd) != 0 && !bad)
        bad = rank_fail(r, "close", path);
    pt->close += now_s() - t2;
    return bad;
}

static int mount_rank(const state_dict *sd, int r, int k, void *arg)
{
    const mount_args *a = arg;
    const char *dir = a->dirs[(long)r * a->ndirs / k];
    char path[4096], txt[16];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return rank_fail(r, "mkdir", dir);
    phase_times *pt = &a->times[r];
    for (size_t i = 0; i < sd->n; i++)
        if (mount_piece(dir, &sd->t[i], sd->data, r, k, pt))
            return 1;
    double t0 = now_s();
    snprintf(path, sizeof path, "%s/.ckptfs/commit", dir);
    int fd = open(path, O_WRONLY);
    if (fd < 0)
        return rank_fail(r, "open", path);
    int n = snprintf(txt, sizeof txt, "%d\n", r);
    int bad = write(fd, txt, (size_t)n) != n;
    if (bad)
        rank_fail(r, "commit: write to", path);
    if (close(fd) != 0 && !bad)
        bad = rank_fail(r, "commit: close", path);
    pt->commit = now_s() - t0;
    return bad;
}

/* ------------------------------------------------------------ the library */

static int lib_rank(const state_dict *sd, int r, int k, void *arg)
{
    const char *out = arg;
    char name[32];
    ckpt_writer *w;
    ckpt_error err;
    snprintf(name, sizeof name, "rank%d", r);
    if (ckpt_writer_open(&w, out, name, NULL, &err) != 0) {
        fprintf(stderr, "mount_write_bench: rank %d: %s\n", r, err.msg);
        return 1;
    }
    for (size_t i = 0; i < sd->n; i++) {
        const tensor_desc *t = &sd->t[i];
        int64_t off[2] = { 0, 0 }, sz[2] = { 0, t->shape[1] };
        my_rows(t->shape[0], r, k, &off[0], &sz[0]);
        if (sz[0] == 0)
            continue;
        size_t row = t->nbytes / (uint64_t)t->shape[0];
        ckpt_piece p = { t->fqn, t->dtype, 2, t->shape, off, sz,
                         sd->data + t->offset + (uint64_t)off[0] * row };
        if (ckpt_writer_put(w, &p, &err) != 0) {
            fprintf(stderr, "mount_write_bench: rank %d: %s\n", r, err.msg);
            ckpt_writer_abort(w);
            return 1;
        }
    }
    if (ckpt_writer_close(w, &err) != 0) {
        fprintf(stderr, "mount_write_bench: rank %d: %s\n", r, err.msg);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------ check */

static int cmd_check(const char *state, const char *ckpt)
{
    state_dict sd;
    ckpt_reader *rd;
    ckpt_error err;
    char path[4096];
    state_open(&sd, state, 0);
    snprintf(path, sizeof path, "%s/state.bin", state);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die("cannot open %s: %s", path, strerror(errno));
    if (ckpt_reader_open(&rd, ckpt, NULL, &err) != 0)
        die("%s: %s", ckpt, err.msg);
    if (ckpt_reader_count(rd) != sd.n)
        die("%s holds %zu tensors, want %zu", ckpt, ckpt_reader_count(rd), sd.n);
    for (size_t i = 0; i < sd.n; i++) {
        const tensor_desc *t = &sd.t[i];
        unsigned char *want = malloc(t->nbytes), *got = malloc(t->nbytes);
        long idx = ckpt_reader_find(rd, t->fqn);
        if (!want || !got)
            die("out of memory");
        if (idx < 0)
            die("%s: tensor %s is missing", ckpt, t->fqn);
        pread_full(fd, want, t->nbytes, t->offset, path);
        int64_t n = ckpt_read(rd, (size_t)idx, got, 0, t->nbytes, &err);
        if (n < 0)
            die("%s: %s: %s", ckpt, t->fqn, err.msg);
        if ((uint64_t)n != t->nbytes || memcmp(want, got, t->nbytes) != 0)
            die("VERIFY FAILED: %s: %s differs from the saved bytes", ckpt,
                t->fqn);
        free(want);
        free(got);
    }
    ckpt_reader_close(rd);
    close(fd);
    printf("%s: all %zu tensors equal state.bin\n", ckpt, sd.n);
    free(sd.t);
    return 0;
}

/* ------------------------------------------------------------ main */

static void usage(void)
{
    fputs("usage: mount_write_bench mount STATE CKDIR [CKDIR...] [--ranks N] "
          "[--name NAME]\n"
          "             [--attrs piece|four]\n"
          "       mount_write_bench lib STATE OUT [--ranks N] [--name NAME]\n"
          "       mount_write_bench check STATE CKPT\n", stderr);
    exit(2);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 4)
        usage();
    const char *cmd = argv[1], *state = argv[2], *name = NULL;
    char *dirs[MAX_DIRS];
    int ndirs = 0, ranks = 4;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc)
            ranks = atoi(argv[++i]);
        else if (strcmp(argv[i], "--name") == 0 && i + 1 < argc)
            name = argv[++i];
        else if (strcmp(argv[i], "--attrs") == 0 && i + 1 < argc)
            four_attrs = strcmp(argv[++i], "four") == 0;
        else if (argv[i][0] != '-' && ndirs < MAX_DIRS)
            dirs[ndirs++] = argv[i];
        else
            usage();
    }
    if (ranks < 1 || ranks > MAX_RANKS || ndirs < 1)
        usage();
    if (strcmp(cmd, "check") == 0 && ndirs == 1)
        return cmd_check(state, dirs[0]);

    state_dict sd;
    double secs, cpu0;
    char phases[256] = "";
    if (strcmp(cmd, "mount") == 0) {
        mount_args a = { dirs, ndirs, NULL };
        a.times = mmap(NULL, sizeof *a.times * (size_t)ranks,
                       PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (a.times == MAP_FAILED)
            die("mmap: %s", strerror(errno));
        memset(a.times, 0, sizeof *a.times * (size_t)ranks);
        state_open(&sd, state, 1);
        cpu0 = cpu_all();
        secs = run_ranks(&sd, ranks, mount_rank, &a);
        if (!name)
            name = ndirs > 1 ? "mount_save_2mounts" : "mount_save";
        phase_times mx = { 0, 0, 0, 0 };
        for (int r = 0; r < ranks; r++) {
            const phase_times *p = &a.times[r];
            mx.open = p->open > mx.open ? p->open : mx.open;
            mx.write = p->write > mx.write ? p->write : mx.write;
            mx.close = p->close > mx.close ? p->close : mx.close;
            mx.commit = p->commit > mx.commit ? p->commit : mx.commit;
        }
        snprintf(phases, sizeof phases, " open_s=%.3f write_s=%.3f "
                 "close_s=%.3f commit_s=%.3f", mx.open, mx.write, mx.close,
                 mx.commit);
        munmap(a.times, sizeof *a.times * (size_t)ranks);
    } else if (strcmp(cmd, "lib") == 0 && ndirs == 1) {
        ckpt_commit_opts co;
        ckpt_error err;
        ckpt_commit_opts_init(&co);
        co.expect_writers = ranks;
        state_open(&sd, state, 1);
        cpu0 = cpu_all();
        secs = run_ranks(&sd, ranks, lib_rank, dirs[0]);
        double t0 = now_s();        /* the clock goes on: the commit */
        if (ckpt_commit(dirs[0], &co, &err) != 0)
            die("ckpt_commit %s: %s", dirs[0], err.msg);
        secs += now_s() - t0;
        if (!name)
            name = "lib_save";
    } else {
        usage();
    }
    printf("RESULT name=%s seconds=%.4f bytes_logical=%llu cpu_seconds=%.3f "
           "ranks=%d dirs=%d%s\n", name, secs, (unsigned long long)sd.total,
           cpu_all() - cpu0, ranks, ndirs, phases);
    state_close(&sd);
    return 0;
}
