/*
 * bench_util.c - the helpers the benchmark programs share (bench_util.h).
 */
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* The one piece of state here: what die() runs first (set once by main). */
static void (*die_hook)(void);

void bench_die_hook(void (*fn)(void))
{
    die_hook = fn;
}

void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", program_invocation_short_name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (die_hook)
        die_hook();
    exit(1);
}

void die_ckpt(const char *what, const ckpt_error *err)
{
    die("%s: %s (%d)", what, err->msg, err->code);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("out of memory (%zu bytes)", n);
    return p;
}

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double median(double *v, int n)
{
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void pread_full(int fd, void *buf, size_t len, uint64_t off, const char *path)
{
    char *p = buf;
    while (len > 0) {
        ssize_t k = pread(fd, p, len, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            die("read %s at %llu: %s", path, (unsigned long long)off,
                k < 0 ? strerror(errno) : "short file");
        p += k;
        len -= (size_t)k;
        off += (uint64_t)k;
    }
}

void pwrite_full(int fd, const void *buf, size_t len, uint64_t off,
                 const char *path)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t k = pwrite(fd, p, len, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            die("write %s: %s", path, strerror(errno));
        p += k;
        len -= (size_t)k;
        off += (uint64_t)k;
    }
}

void state_read(state_dict *sd, const char *dir)
{
    char path[4096], fqn[FQN_MAX], dt[16];
    long long r0, r1;
    unsigned long long off, nb;
    size_t cap = 64;
    if (snprintf(path, sizeof path, "%s/state.idx", dir) >= (int)sizeof path)
        die("path too long: %s/state.idx", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        die("cannot open %s: %s (run `bench_core gen` first)", path,
            strerror(errno));
    memset(sd, 0, sizeof *sd);
    sd->t = xmalloc(cap * sizeof *sd->t);
    while (fscanf(f, "%95s %15s %lld %lld %llu %llu", fqn, dt, &r0, &r1, &off,
                  &nb) == 6) {
        if (sd->n == cap) {
            cap *= 2;
            tensor_desc *t = realloc(sd->t, cap * sizeof *sd->t);
            if (!t)
                die("out of memory");
            sd->t = t;
        }
        tensor_desc *t = &sd->t[sd->n++];
        snprintf(t->fqn, sizeof t->fqn, "%s", fqn);
        t->dtype = ckpt_dtype_parse(dt);
        t->shape[0] = r0;
        t->shape[1] = r1;
        t->offset = off;
        t->nbytes = nb;
        if (t->dtype == CKPT_DTYPE_INVALID || off != sd->total || r0 < 1 ||
            r1 < 1 ||
            nb != (uint64_t)r0 * (uint64_t)r1 * ckpt_dtype_size(t->dtype))
            die("%s: bad line for %s", path, fqn);
        sd->total += nb;
    }
    fclose(f);
    if (sd->n == 0)
        die("%s: no tensors", path);
}

void state_load(state_dict *sd, const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/state.bin", dir) >= (int)sizeof path)
        die("path too long: %s/state.bin", dir);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die("cannot open %s: %s", path, strerror(errno));
    sd->data = xmalloc(sd->total);
    pread_full(fd, sd->data, sd->total, 0, path);
    close(fd);
}

void state_free(state_dict *sd)
{
    free(sd->t);
    free(sd->data);
    memset(sd, 0, sizeof *sd);
}
