/* latency.c - helper of tests/bench/mount.sh (the mount benchmark).
 *
 *   latency gen FILE MIB SEED [bf16]
 *                                  write MIB MiB of f32 ~ N(0, 0.02), little-
 *                                  endian, deterministic (xoshiro256+, polar);
 *                                  bf16: the same values rounded to bfloat16
 *                                  (nearest even), twice as many
 *   latency rand FILE COUNT SEED   COUNT preads of 4 KiB at random 4 KiB-
 *                                  aligned offsets of FILE, each timed with
 *                                  CLOCK_MONOTONIC; prints one RESULT line
 *                                  with p50/p99/mean/max in microseconds
 *   latency resident FILE          percent of FILE's pages in the page cache
 *                                  (mincore), to check that dropping worked
 *
 * No fadvise: the reads go through the kernel exactly as a plain program's
 * would (for a random 4 KiB miss the kernel asks the file system for about
 * that page, not a readahead window).  Exit status 0, or 1 with a message.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096u

/* Prints "latency: MESSAGE[: strerror(errno)]" and exits 1; clear errno
 * first for messages that are not about a failed call.  (Not bench_util's
 * die(): this one appends errno, and latency links no libckptfs.) */
__attribute__((format(printf, 1, 2), noreturn))
static void die(const char *fmt, ...)
{
    int err = errno;
    va_list ap;
    fputs("latency: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (err)
        fprintf(stderr, ": %s", strerror(err));
    fputc('\n', stderr);
    exit(1);
}

/* ------------------------------------------------------------ random */
static uint64_t rng_s[4];

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        rng_s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256+ */
static inline uint64_t rng_next(void)
{
    uint64_t r = rng_s[0] + rng_s[3], t = rng_s[1] << 17;
    rng_s[2] ^= rng_s[0];
    rng_s[3] ^= rng_s[1];
    rng_s[1] ^= rng_s[2];
    rng_s[0] ^= rng_s[3];
    rng_s[2] ^= t;
    rng_s[3] = rotl(rng_s[3], 45);
    return r;
}

/* uniform in (-1, 1) from the top 53 bits */
static inline double rng_sym(void)
{
    return (double)(rng_next() >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

static uint64_t parse_u64(const char *s, const char *what)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        errno = 0;
        die("bad %s", what);
    }
    return (uint64_t)v;
}

/* ------------------------------------------------------------ gen */
/* f32 -> bf16, round to nearest even (no NaNs here). */
static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static int cmd_gen(const char *path, uint64_t mib, uint64_t seed, int bf16)
{
    enum { BUF_FLOATS = 1 << 20 };   /* 4 MiB */
    float *buf = malloc(BUF_FLOATS * sizeof *buf);
    if (!buf)
        die("out of memory");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        die("cannot create %s", path);
    rng_seed(seed);
    uint64_t left = bf16 ? mib << 19 : mib << 18;    /* elements */
    while (left) {
        size_t n = left < BUF_FLOATS ? (size_t)left : BUF_FLOATS;
        for (size_t i = 0; i < n; i += 2) {   /* n is even */
            double u, v, s;
            do {
                u = rng_sym();
                v = rng_sym();
                s = u * u + v * v;
            } while (s >= 1.0 || s == 0.0);
            double m = 0.02 * sqrt(-2.0 * log(s) / s);
            buf[i] = (float)(u * m);
            buf[i + 1] = (float)(v * m);
        }
        size_t bytes = n * sizeof *buf;
        if (bf16) {   /* in place: element i moves down from 4i to 2i */
            for (size_t i = 0; i < n; i++) {
                uint16_t h = to_bf16(buf[i]);
                memcpy((char *)buf + 2 * i, &h, sizeof h);
            }
            bytes = n * sizeof(uint16_t);
        }
        const char *p = (const char *)buf;
        while (bytes) {
            ssize_t w = write(fd, p, bytes);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                if (w == 0)
                    errno = EIO;
                die("cannot write %s", path);
            }
            p += w;
            bytes -= (size_t)w;
        }
        left -= n;
    }
    if (close(fd) != 0)
        die("cannot close %s", path);
    free(buf);
    return 0;
}

/* ------------------------------------------------------------ rand */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* nearest-rank percentile of sorted v[0..n) */
static uint64_t pct(const uint64_t *v, size_t n, double p)
{
    size_t k = (size_t)ceil(p / 100.0 * (double)n);
    return v[k ? k - 1 : 0];
}

static int cmd_rand(const char *path, uint64_t count, uint64_t seed)
{
    if (count == 0) {
        errno = 0;
        die("COUNT must be > 0");
    }
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die("cannot open %s", path);
    struct stat st;
    if (fstat(fd, &st) != 0)
        die("cannot stat %s", path);
    uint64_t pages = (uint64_t)st.st_size / PAGE;
    if (pages == 0) {
        errno = 0;
        die("%s is smaller than 4 KiB", path);
    }
    uint64_t *ns = malloc(count * sizeof *ns);
    char *buf = aligned_alloc(PAGE, PAGE);
    if (!ns || !buf)
        die("out of memory");
    rng_seed(seed);
    struct timespec all0, all1;
    clock_gettime(CLOCK_MONOTONIC, &all0);
    for (uint64_t i = 0; i < count; i++) {
        off_t off = (off_t)((rng_next() % pages) * PAGE);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        ssize_t r = pread(fd, buf, PAGE, off);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (r != (ssize_t)PAGE) {
            if (r >= 0)
                errno = EIO;
            die("short or failed pread of %s", path);
        }
        ns[i] = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u +
                (uint64_t)t1.tv_nsec - (uint64_t)t0.tv_nsec;
    }
    clock_gettime(CLOCK_MONOTONIC, &all1);
    close(fd);
    double sum = 0;
    for (uint64_t i = 0; i < count; i++)
        sum += (double)ns[i];
    qsort(ns, count, sizeof *ns, cmp_u64);
    double total = (double)(all1.tv_sec - all0.tv_sec) +
                   (double)(all1.tv_nsec - all0.tv_nsec) / 1e9;
    printf("RESULT n=%" PRIu64 " p50_us=%.1f p99_us=%.1f mean_us=%.1f max_us=%.1f seconds=%.4f\n",
           count, (double)pct(ns, count, 50) / 1e3, (double)pct(ns, count, 99) / 1e3,
           sum / (double)count / 1e3, (double)ns[count - 1] / 1e3, total);
    free(ns);
    free(buf);
    return 0;
}

/* ------------------------------------------------------------ resident */
static int cmd_resident(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die("cannot open %s", path);
    struct stat st;
    if (fstat(fd, &st) != 0)
        die("cannot stat %s", path);
    if (st.st_size == 0) {
        printf("0.0\n");
        return 0;
    }
    size_t len = (size_t)st.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
        die("cannot mmap %s", path);
    size_t pages = (len + PAGE - 1) / PAGE;
    unsigned char *vec = malloc(pages);
    if (!vec)
        die("out of memory");
    if (mincore(map, len, vec) != 0)
        die("mincore failed on %s", path);
    size_t in = 0;
    for (size_t i = 0; i < pages; i++)
        in += vec[i] & 1;
    printf("%.1f\n", 100.0 * (double)in / (double)pages);
    munmap(map, len);
    close(fd);
    free(vec);
    return 0;
}

int main(int argc, char **argv)
{
    errno = 0;
    if ((argc == 5 || (argc == 6 && strcmp(argv[5], "bf16") == 0)) &&
        strcmp(argv[1], "gen") == 0)
        return cmd_gen(argv[2], parse_u64(argv[3], "MIB"),
                       parse_u64(argv[4], "SEED"), argc == 6);
    if (argc == 5 && strcmp(argv[1], "rand") == 0)
        return cmd_rand(argv[2], parse_u64(argv[3], "COUNT"), parse_u64(argv[4], "SEED"));
    if (argc == 3 && strcmp(argv[1], "resident") == 0)
        return cmd_resident(argv[2]);
    fprintf(stderr,
            "usage: latency gen FILE MIB SEED [bf16]\n"
            "       latency rand FILE COUNT SEED\n"
            "       latency resident FILE\n");
    return 2;
}
