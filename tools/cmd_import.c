/*
 * cmd_import.c - `ckpt import`: converts a checkpoint the library can read
 * (a PyTorch distributed checkpoint, safetensors, or a ckptfs checkpoint)
 * into a new ckptfs checkpoint.  FQNs, dtypes, shapes and chunks are kept;
 * byte items stay byte objects.  The chunks of each source file are
 * written by one writer (DCP's __R_N.distcp files by writer rank<R>), so
 * the result has the source's layout.  Each chunk is read in bounded
 * blocks and streamed to its writer, whose encoder pool uses every core;
 * the source is read by the reader's own pool.  On failure OUT is
 * removed (or emptied again).
 */
#include "cli.h"
#include "codec/codec.h"
#include "outdir.h"
#include "progress.h"
#include "common/region.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cli_help HELP = {
    "import",
    "ckpt import [--codec CODEC[:LEVEL]] [--frame-size N[K|M]] "
    "[--threads N] SRC OUT",
    "Converts SRC into the ckptfs checkpoint OUT (it must not exist, or be\n"
    "empty).  SRC is a PyTorch distributed checkpoint (a directory with\n"
    ".metadata), a .safetensors file, a directory of them (with or without\n"
    "model.safetensors.index.json), or a ckptfs checkpoint.  FQNs, dtypes,\n"
    "shapes and chunks are kept; byte items become byte objects; SRC's\n"
    "metadata is copied (safetensors' __metadata__ included) and\n"
    "source_format says what SRC was.\n"
    "\n"
    "Options:\n"
    "  --codec CODEC        as for ckpt pack (default auto: by dtype)\n"
    "  --frame-size N       raw bytes per frame (default 1M, 4K to 1G)\n"
    "  --threads N          encoder threads (default 0: one per CPU)\n"
    "  --follow-links       read files of SRC that are symbolic links out of\n"
    "                       it (refused otherwise; docs/TRUST.md)\n"
    "  -h, --help           show this help\n",
};

/* Keys the library sets at commit: not copied from SRC. */
typedef struct import_job {
    ckpt_write_opts wopts;
    const char *src;
    cli_outdir out;
    ckpt_reader *r;
    char **writer_of;       /* per source file index: the writer's name */
    const char **files;     /* distinct source files, sorted */
    size_t nfiles;
    unsigned char *buf;     /* CLI_BLOCK bytes */
    progress prog;
} import_job;

/* ------------------------------------------------------------ writers */

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The writer of a source file: rank<R> for DCP's __R_N.distcp, else
 * file<i> by the file's position among SRC's files. */
static char *writer_name(const char *file, size_t i)
{
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    unsigned rank, n;
    char tail[16], *name;
    if (sscanf(base, "__%u_%u%15s", &rank, &n, tail) == 3 &&
        strcmp(tail, ".distcp") == 0)
        return asprintf(&name, "rank%u", rank) < 0 ? NULL : name;
    return asprintf(&name, "file%zu", i) < 0 ? NULL : name;
}

/* Lists SRC's files (those its chunks use) and names their writers. */
static int plan_writers(import_job *job)
{
    size_t total = 0, n = 0;
    ckpt_tensor_info ti;
    ckpt_chunk_info ci;
    for (size_t t = 0; t < ckpt_reader_count(job->r); t++)
        if (ckpt_reader_info(job->r, t, &ti) == 0)
            total += ti.nchunks;
    job->files = calloc(total + 1, sizeof *job->files);
    if (!job->files)
        return cli_fail("out of memory");
    for (size_t t = 0; t < ckpt_reader_count(job->r); t++) {
        ckpt_reader_info(job->r, t, &ti);
        ckpt_error why = { 0 };
        if (cli_tensor_refused(job->r, t, &ti, &why))
            return cli_fail("cannot import: %s", why.msg);
        /* Loads the tensor's chunks; later lookups of them cannot fail. */
        for (size_t c = 0; c < ti.nchunks; c++) {
            if (ckpt_reader_chunk(job->r, t, c, &ci) != 0)
                return cli_fail("%s: tensor '%s': its chunks cannot be "
                                "read (damaged index)", job->src, ti.fqn);
            job->files[n++] = ci.file;
        }
    }
    qsort(job->files, n, sizeof *job->files, cmp_cstr);
    for (size_t i = 0; i < n; i++)
        if (job->nfiles == 0 || strcmp(job->files[job->nfiles - 1],
                                       job->files[i]) != 0)
            job->files[job->nfiles++] = job->files[i];
    job->writer_of = calloc(job->nfiles + 1, sizeof *job->writer_of);
    if (!job->writer_of)
        return cli_fail("out of memory");
    for (size_t i = 0; i < job->nfiles; i++)
        if (!(job->writer_of[i] = writer_name(job->files[i], i)))
            return cli_fail("out of memory");
    return CLI_OK;
}

static const char *chunk_writer(const import_job *job, const char *file)
{
    const char **f = bsearch(&file, job->files, job->nfiles,
                             sizeof *job->files, cmp_cstr);
    return f ? job->writer_of[f - job->files] : NULL;
}

/* ------------------------------------------------------------ copying */

typedef struct box_ctx {
    import_job *job;
    size_t t;
    const int64_t *base;    /* the chunk's offsets */
    int ndim;
    size_t isz;
    unsigned char *cursor;
    ckpt_error *err;
} box_ctx;

static int read_box(void *arg, const int64_t *off, const int64_t *size)
{
    box_ctx *b = arg;
    int64_t goff[CKPT_MAX_DIMS];
    for (int k = 0; k < b->ndim; k++)
        goff[k] = b->base[k] + off[k];
    int rc = ckpt_read_region(b->job->r, b->t, goff, size, b->cursor, b->err);
    if (rc == 0)
        b->cursor += ckpt_box_numel(b->ndim, size) * b->isz;
    return rc;
}

/* Streams chunk c of tensor t into writer w, CLI_BLOCK bytes at a time. */
static int copy_chunk(import_job *job, ckpt_writer *w, size_t t, size_t c,
                      const ckpt_tensor_info *ti)
{
    ckpt_chunk_info ci;
    ckpt_reader_chunk(job->r, t, c, &ci);
    ckpt_piece p = { ti->fqn, ti->dtype, ti->ndim, ti->shape, ci.offsets,
                     ci.sizes, NULL };
    ckpt_error err = { 0 };
    ckpt_stream *s;
    if (ckpt_writer_begin(w, &p, &s, &err))
        return cli_fail("%s", err.msg);
    size_t isz = ckpt_dtype_size(ti->dtype);
    uint64_t numel = ckpt_box_numel(ti->ndim, ci.sizes);
    uint64_t step = CLI_BLOCK / isz;
    box_ctx b = { job, t, ci.offsets, ti->ndim, isz, NULL, &err };
    for (uint64_t lo = 0; lo < numel; lo += step) {
        uint64_t hi = numel - lo < step ? numel : lo + step;
        b.cursor = job->buf;
        int rc = ckpt_region_linear_boxes(ti->ndim, ci.sizes, lo, hi,
                                          read_box, &b);
        if (rc && err.code == 0)
            ckpt_err(&err, rc, "tensor '%s': cannot split chunk %zu into "
                     "boxes", ti->fqn, c);
        size_t n = (size_t)(b.cursor - job->buf);
        if (rc == 0)
            rc = ckpt_stream_write(s, job->buf, n, &err);
        if (rc) {
            ckpt_stream_abort(s);
            return cli_fail("%s", err.msg);
        }
        progress_add(&job->prog, n);
    }
    if (ckpt_stream_end(s, &err))
        return cli_fail("%s", err.msg);
    return CLI_OK;
}

static int copy_meta(import_job *job, ckpt_writer *w)
{
    ckpt_error err = { 0 };
    for (size_t i = 0; i < ckpt_reader_meta_count(job->r); i++) {
        const char *k, *v;
        ckpt_reader_meta_at(job->r, i, &k, &v);
        if (!ckpt_meta_reserved(k) && ckpt_writer_set_meta(w, k, v, &err))
            return cli_fail("%s", err.msg);
    }
    if (!ckpt_reader_meta_get(job->r, "source_format") &&
        ckpt_writer_set_meta(w, "source_format", "ckptfs", &err))
        return cli_fail("%s", err.msg);
    return CLI_OK;
}

/* Writes every chunk whose writer is `name` (the first writer also
 * carries the metadata). */
static int write_one(import_job *job, const char *name, int first)
{
    ckpt_error err = { 0 };
    ckpt_writer *w;
    if (ckpt_writer_open(&w, job->out.path, name, &job->wopts, &err))
        return cli_fail("%s", err.msg);
    int rc = first ? copy_meta(job, w) : CLI_OK;
    ckpt_tensor_info ti;
    ckpt_chunk_info ci;
    for (size_t t = 0; rc == CLI_OK && t < ckpt_reader_count(job->r); t++) {
        ckpt_reader_info(job->r, t, &ti);
        for (size_t c = 0; rc == CLI_OK && c < ti.nchunks; c++) {
            ckpt_reader_chunk(job->r, t, c, &ci);
            if (strcmp(chunk_writer(job, ci.file), name) == 0)
                rc = copy_chunk(job, w, t, c, &ti);
        }
    }
    if (rc != CLI_OK) {
        ckpt_writer_abort(w);
        return rc;
    }
    if (ckpt_writer_close(w, &err))
        return cli_fail("%s", err.msg);
    return CLI_OK;
}

static int write_all(import_job *job)
{
    uint64_t total = 0;
    ckpt_tensor_info ti;
    for (size_t t = 0; t < ckpt_reader_count(job->r); t++)
        if (ckpt_reader_info(job->r, t, &ti) == 0)
            total += ti.nbytes;
    if (!(job->buf = malloc(CLI_BLOCK)))
        return cli_fail("out of memory");
    progress_init(&job->prog, "importing", total);
    int rc = CLI_OK;
    for (size_t i = 0; rc == CLI_OK && i < job->nfiles; i++) {
        int seen = 0;   /* several files may share a writer (rank) */
        for (size_t j = 0; j < i && !seen; j++)
            seen = strcmp(job->writer_of[j], job->writer_of[i]) == 0;
        if (!seen)
            rc = write_one(job, job->writer_of[i], i == 0);
    }
    if (rc == CLI_OK && job->nfiles == 0)
        rc = write_one(job, "rank0", 1);   /* no data: metadata only */
    progress_clear(&job->prog);
    ckpt_error err = { 0 };
    if (rc == CLI_OK && ckpt_commit(job->out.path, NULL, &err))
        rc = cli_fail("%s", err.msg);
    if (rc == CLI_OK)
        progress_done_path(&job->prog, "imported", job->out.path);
    return rc;
}

/* ------------------------------------------------------------ main */

static int take_option(void *ctx, int c, char **argv)
{
    import_job *job = ctx;
    switch (c) {
    case 'c': case 'f': case 't':
        return cli_write_opt(&HELP, &job->wopts, c, optarg);
    case CLI_OPT_FOLLOW_LINKS:
        cli_set_follow_links();
        return CLI_OK;
    default:
        return cli_bad_option(&HELP, c, argv);
    }
}

static int parse_args(import_job *job, int argc, char **argv)
{
    static const struct option longopts[] = {
        { "codec", required_argument, NULL, 'c' },
        { "frame-size", required_argument, NULL, 'f' },
        { "threads", required_argument, NULL, 't' },
        { "follow-links", no_argument, NULL, CLI_OPT_FOLLOW_LINKS },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int rc = cli_getopt(&HELP, argc, argv, longopts, take_option, job, 2, 2);
    if (rc)
        return rc;
    job->src = argv[optind];
    job->out.path = argv[optind + 1];
    return CLI_OK;
}

static int open_source(import_job *job)
{
    ckpt_read_opts o;
    ckpt_error err = { 0 };
    cli_read_opts_init(&o);
    o.prefetch = 0;   /* each block is read once, whole */
    if (ckpt_reader_open(&job->r, job->src, &o, &err))
        return cli_fail("%s", err.msg);
    return CLI_OK;
}

int cmd_import(int argc, char **argv)
{
    import_job job;
    memset(&job, 0, sizeof job);
    ckpt_write_opts_init(&job.wopts);
    int rc = parse_args(&job, argc, argv);
    if (rc == CLI_OK)
        rc = open_source(&job);
    if (rc == CLI_OK)
        rc = plan_writers(&job);
    if (rc == CLI_OK)
        rc = cli_outdir_prepare(&job.out);
    if (rc == CLI_OK)
        rc = write_all(&job);
    if (rc != CLI_OK)
        cli_outdir_remove(&job.out);
    for (size_t i = 0; job.writer_of && i < job.nfiles; i++)
        free(job.writer_of[i]);
    free(job.writer_of);
    free(job.files);
    free(job.buf);
    cli_outdir_free(&job.out);
    ckpt_reader_close(job.r);
    return rc == CLI_HELP_SHOWN ? CLI_OK : rc;
}
