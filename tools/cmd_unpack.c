/*
 * cmd_unpack.c - `ckpt unpack`: writes every tensor of a checkpoint as
 * DIR/<fqn>.npy (bf16 and float8 widened to float32, exactly) and every
 * byte object as DIR/<fqn>.bin, streaming each through bounded buffers.
 */
#include "cli.h"
#include "npy.h"
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
    "  -h, --help   show this help\n",
};

typedef struct unpack_job {
    ckpt_reader *r;
    const char *dir;
    unsigned char *in;      /* raw bytes read, CLI_BLOCK */
    unsigned char *out;     /* widened bytes, CLI_BLOCK */
    progress prog;
} unpack_job;

/* Writes the .npy header of tensor t to fd. */
static int write_header(int fd, const char *path, const ckpt_tensor_info *t)
{
    ckpt_dtype stored;
    const char *descr = ckpt_dtype_npy_descr(t->dtype, &stored);
    char hdr[4096];
    int n = npy_format_header(hdr, sizeof hdr, descr, t->ndim, t->shape);
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
    size_t isz = ckpt_dtype_size(t->dtype);
    /* Widened output is 4/isz times the input: keep it within CLI_BLOCK. */
    size_t step = widen ? CLI_BLOCK / 4 * isz : CLI_BLOCK;
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
            npy_widen_f32(t->dtype, job->in, n / isz, job->out);
            p = job->out;
            n = n / isz * 4;
        }
        int rc = cli_write_full(fd, p, n);
        if (rc)
            return cli_fail("cannot write %s: %s", path, strerror(-rc));
        progress_add(&job->prog, want);
    }
    return CLI_OK;
}

/* The output file name of a tensor: DIR/<fqn>.npy or DIR/<fqn>.bin. */
static char *output_path(const char *dir, const ckpt_tensor_info *t)
{
    const char *ext = t->dtype == CKPT_BYTES ? ".bin" : ".npy";
    size_t n = strlen(t->fqn) + strlen(ext) + 1;
    char *name = malloc(n);
    if (!name)
        return NULL;
    snprintf(name, n, "%s%s", t->fqn, ext);
    char *path = cli_path_join(dir, name);
    free(name);
    return path;
}

/* Writes one tensor's file; a failed file is removed. */
static int unpack_one(unpack_job *job, size_t idx)
{
    ckpt_tensor_info t;
    if (ckpt_reader_info(job->r, idx, &t) != 0)
        return cli_fail("cannot read the description of tensor %zu", idx);
    char *path = output_path(job->dir, &t);
    if (!path)
        return cli_fail("out of memory");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    int rc = CLI_OK;
    if (fd < 0) {
        rc = cli_fail("cannot create %s: %s", path, strerror(errno));
    } else {
        if (t.dtype != CKPT_BYTES)
            rc = write_header(fd, path, &t);
        if (rc == CLI_OK)
            rc = write_data(job, idx, &t, fd, path);
        if (close(fd) != 0 && rc == CLI_OK)
            rc = cli_fail("cannot write %s: %s", path, strerror(errno));
        if (rc)
            unlink(path);
    }
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
    unpack_job job = { NULL, argv[optind + 1], NULL, NULL, { 0 } };
    if (cli_open_reader(&job.r, argv[optind]) != CLI_OK)
        return CLI_FAIL;
    rc = unpack_all(&job);
    ckpt_reader_close(job.r);
    free(job.in);
    free(job.out);
    return rc;
}
