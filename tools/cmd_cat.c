/*
 * cmd_cat.c - `ckpt cat`: writes a tensor's row-major little-endian bytes,
 * or those of a NumPy-style slice of it, to stdout in bounded blocks.
 * A reader that goes away (EPIPE) ends the command quietly.
 */
#include "cli.h"
#include "common/region.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const cli_help HELP = {
    "cat",
    "ckpt cat CKPT FQN [--slice SPEC]",
    "Writes the tensor's raw row-major little-endian bytes to stdout, or\n"
    "those of a NumPy-style slice: '0:10,:,5:7'; a bare index keeps its dim\n"
    "with size 1; negative indices count from the end; missing trailing dims\n"
    "are whole; no steps.  If the reader of stdout goes away, cat stops\n"
    "quietly with status 0.\n"
    "\n"
    CLI_HELP_SOURCES
    "A byte item of a PyTorch checkpoint is written as stored: the\n"
    "torch.save archive of the object.\n"
    "\n"
    "Options:\n"
    "  --slice SPEC   write only this region\n"
    "  --follow-links read files that are symbolic links out of CKPT\n"
    "  -h, --help     show this help\n",
};

/* Returned by the writers below when stdout's reader has gone. */
#define CAT_PIPE_CLOSED 3

typedef struct cat_job {
    ckpt_reader *r;
    size_t idx;
    ckpt_tensor_info t;
    unsigned char *buf;     /* CLI_BLOCK bytes */
} cat_job;

static int put_out(const void *buf, size_t n)
{
    int rc = cli_write_full(STDOUT_FILENO, buf, n);
    if (rc == -EPIPE)
        return CAT_PIPE_CLOSED;
    if (rc)
        return cli_fail("cannot write to stdout: %s", strerror(-rc));
    return CLI_OK;
}

/* The whole image, CLI_BLOCK bytes at a time. */
static int cat_all(cat_job *job)
{
    for (uint64_t off = 0; off < job->t.nbytes; off += CLI_BLOCK) {
        uint64_t want = job->t.nbytes - off;
        if (want > CLI_BLOCK)
            want = CLI_BLOCK;
        ckpt_error err = { 0 };
        int64_t got = ckpt_read(job->r, job->idx, job->buf, off, want, &err);
        if (got < 0)
            return cli_fail("%s", err.msg);
        if ((uint64_t)got != want)
            return cli_fail("tensor '%s': short read at byte %" PRIu64,
                            job->t.fqn, off + (uint64_t)got);
        int rc = put_out(job->buf, (size_t)want);
        if (rc)
            return rc;
    }
    return CLI_OK;
}

/* Reads the box (off, size) and writes it. */
static int cat_box(cat_job *job, const int64_t *off, const int64_t *size)
{
    ckpt_error err = { 0 };
    if (ckpt_read_region(job->r, job->idx, off, size, job->buf, &err) != 0)
        return cli_fail("%s", err.msg);
    size_t n = (size_t)ckpt_box_numel(job->t.ndim, size) *
               ckpt_dtype_size(job->t.dtype);
    return put_out(job->buf, n);
}

/* The region (off, size), in row-major order, as boxes of at most
 * CLI_BLOCK bytes: dims before `split` are walked one index at a time, dim
 * `split` in blocks of `step`, the dims after it whole. */
static int cat_region(cat_job *job, const int64_t *off, const int64_t *size)
{
    int nd = job->t.ndim;
    if (nd == 0)
        return cat_box(job, off, size);
    uint64_t inner = ckpt_dtype_size(job->t.dtype);
    int split = nd - 1;
    while (split > 0 && inner * (uint64_t)size[split] <= CLI_BLOCK)
        inner *= (uint64_t)size[split--];
    /* inner: bytes of one index of dim `split`, at most CLI_BLOCK. */
    int64_t step = (int64_t)(CLI_BLOCK / inner);
    int64_t idx[CKPT_MAX_DIMS] = { 0 }, bo[CKPT_MAX_DIMS], bs[CKPT_MAX_DIMS];
    memcpy(bo, off, (size_t)nd * sizeof *bo);
    memcpy(bs, size, (size_t)nd * sizeof *bs);
    for (int k = 0; k < split; k++)
        bs[k] = 1;
    for (;;) {
        for (int k = 0; k < split; k++)
            bo[k] = off[k] + idx[k];
        for (int64_t i = 0; i < size[split]; i += step) {
            bo[split] = off[split] + i;
            bs[split] = size[split] - i < step ? size[split] - i : step;
            int rc = cat_box(job, bo, bs);
            if (rc)
                return rc;
        }
        int k = split - 1;
        while (k >= 0 && ++idx[k] == size[k])
            idx[k--] = 0;
        if (k < 0)
            return CLI_OK;
    }
}

static int cat_slice(cat_job *job, const char *spec)
{
    int64_t off[CKPT_MAX_DIMS], size[CKPT_MAX_DIMS];
    ckpt_error err = { 0 };
    if (ckpt_slice_parse(spec, job->t.ndim, job->t.shape, off, size, &err))
        return cli_usage(&HELP, "%s", err.msg);
    for (int k = 0; k < job->t.ndim; k++)
        if (size[k] == 0)
            return CLI_OK;   /* an empty slice has no bytes */
    return cat_region(job, off, size);
}

static int cat_tensor(ckpt_reader *r, const char *ckpt, const char *fqn,
                      const char *slice)
{
    cat_job job = { r, 0, { 0 }, NULL };
    long idx = ckpt_reader_find(r, fqn);
    if (idx < 0)
        return cli_fail("%s: no tensor '%s'", ckpt, fqn);
    job.idx = (size_t)idx;
    if (ckpt_reader_info(r, job.idx, &job.t) != 0)
        return cli_fail("%s: cannot read tensor '%s'", ckpt, fqn);
    job.buf = malloc(CLI_BLOCK);
    if (!job.buf)
        return cli_fail("out of memory");
    int rc = slice ? cat_slice(&job, slice) : cat_all(&job);
    free(job.buf);
    return rc == CAT_PIPE_CLOSED ? CLI_OK : rc;
}

int cmd_cat(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "slice", required_argument, NULL, 's' },
        { "follow-links", no_argument, NULL, CLI_OPT_FOLLOW_LINKS },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *slice = NULL;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        if (c == 'h')
            return cli_help_print(&HELP);
        if (c == CLI_OPT_FOLLOW_LINKS)
            cli_set_follow_links();
        else if (c != 's')
            return cli_bad_option(&HELP, c, argv);
        else
            slice = optarg;
    }
    int rc = cli_want_args(&HELP, argc - optind, 2, 2);
    if (rc)
        return rc;
    /* A closed pipe shows up as EPIPE from write(), handled quietly. */
    signal(SIGPIPE, SIG_IGN);
    ckpt_reader *r;
    if (cli_open_reader(&r, argv[optind]) != CLI_OK)
        return CLI_FAIL;
    rc = cat_tensor(r, argv[optind], argv[optind + 1], slice);
    ckpt_reader_close(r);
    return rc;
}
