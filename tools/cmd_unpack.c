/*
 * cmd_unpack.c - `ckpt unpack`: writes every tensor of a checkpoint as
 * DIR/<fqn>.npy (bf16 and float8 widened to float32, exactly) and every
 * byte object as DIR/<fqn>.bin, streaming each through bounded buffers.
 */
#include "cli.h"
#include "common/npy.h"
#include "progress.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const cli_help HELP = {
    "unpack",
    "ckpt unpack CKPT DIR",
    "Writes DIR/<fqn>.npy for each tensor of the checkpoint CKPT (DIR is\n"
    "created if needed; existing files of those names are replaced).  bf16,\n"
    "f8e4m3 and f8e5m2 become float32 (exactly: every value is\n"
    "representable), since NumPy has no such dtypes; byte objects become\n"
    "DIR/<fqn>.bin.\n"
    "\n"
    "Options:\n"
    "  --follow-links  read files that are symbolic links out of the\n"
    "                  checkpoint (refused otherwise; docs/TRUST.md)\n"
    "  -h, --help      show this help\n",
};

typedef struct unpack_job {
    ckpt_reader *r;
    const char *dir;
    int dirfd;              /* DIR: every file is made in it, by name */
    unsigned char *in;      /* raw bytes read, CLI_BLOCK */
    unsigned char *out;     /* widened bytes, CLI_BLOCK */
    npy_tables tables;      /* float8 -> float32 */
    progress prog;
} unpack_job;

/* Writes the .npy header of tensor t to fd. */
static int write_header(int fd, const char *path, const ckpt_tensor_info *t)
{
    char hdr[4096];
    int n = npy_tensor_header(t->dtype, t->ndim, t->shape, hdr, sizeof hdr);
    if (n < 0)
        return cli_fail("%s: cannot format the .npy header", path);
    int rc = cli_write_full(fd, hdr, (size_t)n);
    if (rc)
        return cli_fail("cannot write %s: %s", path, strerror(-rc));
    return CLI_OK;
}

/* Streams tensor idx's image to fd, widening it to float32 if needed. */
static int write_data(unpack_job *job, size_t idx, const ckpt_tensor_info *t,
                      int fd, const char *path)
{
    ckpt_dtype stored = t->dtype;
    if (t->dtype != CKPT_BYTES)
        ckpt_dtype_npy_descr(t->dtype, &stored);
    int widen = stored != t->dtype;
    size_t isz = ckpt_dtype_size(t->dtype), osz = ckpt_dtype_size(stored);
    /* Widened output is osz/isz times the input: keep it within CLI_BLOCK. */
    size_t step = widen ? CLI_BLOCK / osz * isz : CLI_BLOCK;
    for (uint64_t off = 0; off < t->nbytes; off += step) {
        uint64_t want = t->nbytes - off < step ? t->nbytes - off : step;
        ckpt_error err = { 0 };
        int64_t got = ckpt_read(job->r, idx, job->in, off, want, &err);
        if (got < 0)
            return cli_fail("%s", err.msg);
        if ((uint64_t)got != want)
            return cli_fail("tensor '%s': short read at byte %" PRIu64,
                            t->fqn, off + (uint64_t)got);
        const unsigned char *p = job->in;
        size_t n = (size_t)want;
        if (widen) {
            npy_widen(&job->tables, t->dtype, job->in, n / isz, job->out);
            p = job->out;
            n = n / isz * osz;
        }
        int rc = cli_write_full(fd, p, n);
        if (rc)
            return cli_fail("cannot write %s: %s", path, strerror(-rc));
        progress_add(&job->prog, want);
    }
    return CLI_OK;
}

/* The output file name of a tensor: <fqn>.npy or <fqn>.bin. */
static char *output_name(const ckpt_tensor_info *t)
{
    const char *ext = t->dtype == CKPT_BYTES ? ".bin" : ".npy";
    char *name;
    return asprintf(&name, "%s%s", t->fqn, ext) < 0 ? NULL : name;
}

/* Creates (or truncates) the file `name` right in DIR: a name with a '/'
 * is refused, and an existing symbolic link of that name is replaced by
 * the file, never followed, so nothing is written outside DIR.  Returns
 * the descriptor, or -1 (the problem printed). */
static int create_in_dir(const unpack_job *job, const char *name,
                         const char *path)
{
    if (strchr(name, '/')) {
        cli_fail("tensor file name '%s' would leave %s: refused", name,
                 job->dir);
        return -1;
    }
    int flags = O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK |
                O_CLOEXEC;
    int fd = openat(job->dirfd, name, flags, 0666);
    if (fd < 0 && errno == ELOOP && unlinkat(job->dirfd, name, 0) == 0)
        fd = openat(job->dirfd, name, flags | O_EXCL, 0666);
    if (fd < 0) {
        cli_fail("cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        fcntl(fd, F_SETFL, 0) != 0) {
        close(fd);
        cli_fail("cannot create %s: it exists and is not a regular file",
                 path);
        return -1;
    }
    return fd;
}

/* Writes one tensor's file; a failed file is removed. */
static int unpack_one(unpack_job *job, size_t idx)
{
    ckpt_tensor_info t;
    if (ckpt_reader_info(job->r, idx, &t) != 0)
        return cli_fail("cannot read the description of tensor %zu", idx);
    char *name = output_name(&t);
    char *path = name ? cli_path_join(job->dir, name) : NULL;
    if (!path) {
        free(name);
        return cli_fail("out of memory");
    }
    int fd = create_in_dir(job, name, path);
    int rc = fd < 0 ? CLI_FAIL : CLI_OK;
    if (fd >= 0) {
        if (t.dtype != CKPT_BYTES)
            rc = write_header(fd, path, &t);
        if (rc == CLI_OK)
            rc = write_data(job, idx, &t, fd, path);
        if (close(fd) != 0 && rc == CLI_OK)
            rc = cli_fail("cannot write %s: %s", path, strerror(errno));
        if (rc)
            unlinkat(job->dirfd, name, 0);
    }
    free(name);
    free(path);
    return rc;
}

static int make_dir(const char *dir)
{
    struct stat st;
    if (mkdir(dir, 0777) == 0)
        return CLI_OK;
    if (errno == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        return CLI_OK;
    if (errno == EEXIST)
        return cli_fail("%s exists and is not a directory", dir);
    return cli_fail("cannot create %s: %s", dir, strerror(errno));
}

static int unpack_all(unpack_job *job)
{
    size_t n = ckpt_reader_count(job->r);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        ckpt_tensor_info t;
        if (ckpt_reader_info(job->r, i, &t) == 0)
            total += t.nbytes;
    }
    job->in = malloc(CLI_BLOCK);
    job->out = malloc(CLI_BLOCK);
    if (!job->in || !job->out)
        return cli_fail("out of memory");
    int rc = make_dir(job->dir);
    if (rc == CLI_OK &&
        (job->dirfd = open(job->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        rc = cli_fail("cannot open %s: %s", job->dir, strerror(errno));
    progress_init(&job->prog, "unpacking", total);
    for (size_t i = 0; i < n && rc == CLI_OK; i++)
        rc = unpack_one(job, i);
    if (rc == CLI_OK)
        progress_done(&job->prog, "unpacked", job->r);
    else
        progress_clear(&job->prog);
    return rc;
}

int cmd_unpack(int argc, char **argv)
{
    int rc = cli_parse_operands(&HELP, argc, argv, 2, 2);
    if (rc != CLI_GO_ON)
        return rc;
    unpack_job job = { .dir = argv[optind + 1], .dirfd = -1 };
    npy_tables_init(&job.tables);
    if (cli_open_reader(&job.r, argv[optind]) != CLI_OK)
        return CLI_FAIL;
    rc = unpack_all(&job);
    if (job.dirfd >= 0)
        close(job.dirfd);
    ckpt_reader_close(job.r);
    free(job.in);
    free(job.out);
    return rc;
}
