/*
 * cmd_pack.c - `ckpt pack`: makes a checkpoint from .npy files, raw files
 * and byte objects, optionally cut into a grid of pieces as if saved by
 * several ranks (one writer "rank<i>" per grid cell), then commits it.
 *
 * Inputs are checked before anything is created.  Each input file is
 * mmapped; a piece that is contiguous in the file is handed to the library
 * as is, any other piece (a grid cell of a C-order tensor, any piece of a
 * Fortran-order tensor) is gathered into a bounded buffer in row-major
 * order and streamed, so memory stays bounded whatever the tensor size.
 * Grid cells are written one writer at a time.  On any failure the writers
 * are aborted and OUT is removed (or emptied again, if it existed empty).
 */
#include "cli.h"
#include "codec/codec.h"
#include "common/dtype.h"
#include "common/fileio.h"
#include "common/npy.h"
#include "outdir.h"
#include "progress.h"
#include "common/region.h"
#include "common/shape.h"
#include "write/wopts.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The most grid cells (writers) a pack may use. */
#define MAX_CELLS 4096
/* Contiguous pieces larger than this are streamed from their mapping in
 * slices of this size (a multiple of every frame size up to 64 MiB). */
#define PUT_STEP ((uint64_t)64 << 20)

static const cli_help HELP = {
    "pack",
    "ckpt pack [--grid RxC[x...]] [--codec CODEC[:LEVEL]] "
    "[--frame-size N[K|M]]\n"
    "                 [--threads N] [--base DIR [--full-every K]]\n"
    "                 [--meta KEY=VALUE]... OUT NAME=FILE.npy...\n"
    "                 [NAME=FILE:DTYPE:D0,D1,...]... [NAME=FILE]...",
    "Makes the checkpoint directory OUT (it must not exist, or be empty) from\n"
    "NumPy .npy files (little-endian, C or Fortran order), raw files\n"
    "(FILE:DTYPE:SHAPE: exactly numel*itemsize bytes; an empty SHAPE is a\n"
    "scalar) and byte objects (any other NAME=FILE), then commits it.\n"
    "\n"
    "Options:\n"
    "  --grid RxC[x...]     cut dim 0 into R parts, dim 1 into C parts, ...\n"
    "                       (as numpy.array_split does), one writer rank<i>\n"
    "                       per grid cell, row-major (default 1)\n"
    "  --codec CODEC        auto (default): per tensor by dtype, bf16,\n"
    "                       f16, f32, f64 byte-grouped with the exponent\n"
    "                       split off (bgbf16, bgf16, bgf32, bgf64), 2-,\n"
    "                       4-, 8-byte integers byte-grouped (bg2, bg4,\n"
    "                       bg8), 1-byte types zstd; or one of those names,\n"
    "                       raw or zstd for every tensor.  :LEVEL sets the\n"
    "                       zstd level (1..22, -7..-1 fast; default 1)\n"
    "  --frame-size N       raw bytes per frame, K/M/G suffixes (default 1M,\n"
    "                       at least 4K)\n"
    "  --threads N          encoder threads per writer (default 0: one per\n"
    "                       online CPU)\n"
    "  --base DIR           a delta save: frames equal to the committed\n"
    "                       checkpoint DIR's (a sibling of OUT) are stored\n"
    "                       as references, changed ones as XOR deltas when\n"
    "                       smaller (docs/FORMAT.md, \"Delta checkpoints\")\n"
    "  --full-every K       with --base: store a frame whole once K-1 deltas\n"
    "                       would be needed to read it (1..64, default 8)\n"
    "  --meta KEY=VALUE     checkpoint metadata, e.g. step=100 (repeatable)\n"
    "  -h, --help           show this help\n",
};

typedef enum input_kind { INPUT_NPY, INPUT_RAW, INPUT_BYTES } input_kind;

/* One NAME=FILE argument, resolved. */
typedef struct pack_input {
    char *name;             /* the FQN */
    char *path;             /* the file */
    input_kind kind;
    ckpt_dtype dtype;       /* CKPT_BYTES for byte objects */
    int ndim;
    int64_t shape[CKPT_MAX_DIMS];
    int fortran;            /* data is column-major */
    uint64_t offset;        /* where the data starts in the file */
    uint64_t nbytes;
} pack_input;

/* An input file mapped for reading. */
typedef struct mapping {
    void *addr;
    size_t len;
    const unsigned char *data;   /* the tensor's first byte */
} mapping;

typedef struct pack_job {
    ckpt_write_opts wopts;
    int ngrid;
    int64_t grid[CKPT_MAX_DIMS];
    long ncells;
    char **meta;            /* KEY=VALUE arguments */
    size_t nmeta;
    const char *out;
    pack_input *inputs;
    size_t ninputs;
    cli_outdir outdir;      /* OUT, made or emptied by this pack */
    unsigned char *buf;     /* gather buffer, CLI_BLOCK bytes */
    progress prog;
} pack_job;

/* ------------------------------------------------------------ options */

/* Parses "2x3x1" into job->grid. */
static int parse_grid(pack_job *job, const char *s)
{
    const char *p = s;
    long cells = 1;
    job->ngrid = 0;
    for (;;) {
        char *end = (char *)p;
        errno = 0;
        long f = isdigit((unsigned char)*p) ? strtol(p, &end, 10) : 0;
        if (f < 1 || errno || job->ngrid >= CKPT_MAX_DIMS ||
            (*end != '\0' && *end != 'x' && *end != 'X'))
            return cli_usage(&HELP, "bad grid '%s': expected factors >= 1 "
                             "joined by 'x', e.g. 2x3", s);
        if (f > MAX_CELLS || (cells *= f) > MAX_CELLS)
            return cli_usage(&HELP, "grid '%s' has more than %d cells", s,
                             MAX_CELLS);
        job->grid[job->ngrid++] = f;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    job->ncells = cells;
    return CLI_OK;
}

static int add_meta(pack_job *job, char *kv)
{
    char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        return cli_usage(&HELP, "bad --meta '%s': expected KEY=VALUE", kv);
    char **m = realloc(job->meta, (job->nmeta + 1) * sizeof *m);
    if (!m)
        return cli_fail("out of memory");
    job->meta = m;
    job->meta[job->nmeta++] = kv;
    return CLI_OK;
}

/* Handles one option returned by getopt_long (cli_getopt). */
static int take_option(void *ctx, int c, char **argv)
{
    pack_job *job = ctx;
    ckpt_error e = { 0 };
    switch (c) {
    case 'g': return parse_grid(job, optarg);
    case 'c': case 'f': case 't':
        return cli_write_opt(&HELP, &job->wopts, c, optarg);
    case 'm': return add_meta(job, optarg);
    case 'b': job->wopts.base = optarg; return CLI_OK;
    case 'F':
        if (ckpt_write_opt_parse(&job->wopts, "full_every", optarg, &e))
            return cli_usage(&HELP, "%s", e.msg);
        return CLI_OK;
    default: return cli_bad_option(&HELP, c, argv);
    }
}

/* ------------------------------------------------------------ arguments */

/* Reads "FILE:DTYPE:SHAPE" (spec) whose last two colons are c1 and c2. */
static int parse_raw_spec(const char *arg, const char *spec, const char *c1,
                          const char *c2, pack_input *in)
{
    char dt[64];
    size_t n = (size_t)(c2 - c1 - 1);
    if (n >= sizeof dt)
        n = sizeof dt - 1;
    memcpy(dt, c1 + 1, n);
    dt[n] = '\0';
    in->dtype = ckpt_dtype_parse(dt);
    ckpt_error err = { 0 };
    if (in->dtype == CKPT_DTYPE_INVALID) {
        ckpt_dtype_unknown(&err, arg, dt);
        return cli_usage(&HELP, "%s", err.msg);
    }
    int nd = ckpt_shape_parse(c2 + 1, in->shape, &err);
    if (nd < 0)
        return cli_usage(&HELP, "bad shape in '%s': %s", arg, err.msg);
    in->ndim = nd;
    if (in->dtype == CKPT_BYTES && nd != 1)
        return cli_usage(&HELP, "'%s': a bytes object has one dimension",
                         arg);
    in->kind = INPUT_RAW;
    in->path = strndup(spec, (size_t)(c1 - spec));
    return in->path ? CLI_OK : cli_fail("out of memory");
}

/* 1 when spec has the form FILE:DTYPE:SHAPE (and is not itself a file). */
static int is_raw_spec(const char *spec, const char **c1, const char **c2)
{
    *c2 = strrchr(spec, ':');
    if (!*c2 || *c2 == spec)
        return 0;
    *c1 = *c2 - 1;
    while (*c1 > spec && **c1 != ':')
        (*c1)--;
    if (*c1 == spec)
        return 0;
    return access(spec, F_OK) != 0;
}

static int ends_with_npy(const char *s)
{
    size_t n = strlen(s);
    return n >= 4 && strcasecmp(s + n - 4, ".npy") == 0;
}

/* Classifies one NAME=SPEC argument. */
static int parse_input(const char *arg, pack_input *in)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq[1] == '\0')
        return cli_usage(&HELP, "bad input '%s': expected NAME=FILE", arg);
    if (eq == arg)
        return cli_usage(&HELP, "bad input '%s': the tensor name (FQN) is "
                         "empty", arg);
    in->name = strndup(arg, (size_t)(eq - arg));
    if (!in->name)
        return cli_fail("out of memory");
    const char *spec = eq + 1, *c1, *c2;
    if (is_raw_spec(spec, &c1, &c2))
        return parse_raw_spec(arg, spec, c1, c2, in);
    in->kind = ends_with_npy(spec) ? INPUT_NPY : INPUT_BYTES;
    in->dtype = in->kind == INPUT_BYTES ? CKPT_BYTES : CKPT_DTYPE_INVALID;
    in->path = strdup(spec);
    return in->path ? CLI_OK : cli_fail("out of memory");
}

static int cmp_input_name(const void *a, const void *b)
{
    const pack_input *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

/* Refuses a NAME given twice. */
static int check_duplicates(const pack_job *job)
{
    if (job->ninputs < 2)
        return CLI_OK;
    const pack_input **v = malloc(job->ninputs * sizeof *v);
    if (!v)
        return cli_fail("out of memory");
    for (size_t i = 0; i < job->ninputs; i++)
        v[i] = &job->inputs[i];
    qsort(v, job->ninputs, sizeof *v, cmp_input_name);
    int rc = CLI_OK;
    for (size_t i = 1; i < job->ninputs && rc == CLI_OK; i++)
        if (strcmp(v[i - 1]->name, v[i]->name) == 0)
            rc = cli_usage(&HELP, "tensor '%s' is given twice", v[i]->name);
    free(v);
    return rc;
}

static int parse_inputs(pack_job *job, int argc, char **argv)
{
    job->inputs = calloc((size_t)argc, sizeof *job->inputs);
    if (!job->inputs)
        return cli_fail("out of memory");
    for (int i = 0; i < argc; i++) {
        int rc = parse_input(argv[i], &job->inputs[job->ninputs++]);
        if (rc)
            return rc;
    }
    return check_duplicates(job);
}

/* ------------------------------------------------------------ input files */

static int open_regular(const char *path, struct stat *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cli_fail("cannot open %s: %s", path, strerror(errno)), -1;
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        cli_fail("%s: not a regular file", path);
        close(fd);
        return -1;
    }
    return fd;
}

/* Fills dtype, shape, offset and nbytes of an input from its file. */
static int probe_input(pack_input *in)
{
    struct stat st;
    int fd = open_regular(in->path, &st);
    if (fd < 0)
        return CLI_FAIL;
    int rc = CLI_OK;
    ckpt_error err = { 0 };
    if (in->kind == INPUT_NPY) {
        npy_header h;
        if (npy_read_header(fd, in->path, &h, &err) != 0) {
            rc = cli_fail("%s", err.msg);
        } else {
            in->dtype = h.dtype;
            in->ndim = h.ndim;
            memcpy(in->shape, h.shape, sizeof h.shape);
            in->fortran = h.fortran_order;
            in->offset = h.data_offset;
            in->nbytes = h.nbytes;
        }
    } else if (in->kind == INPUT_BYTES) {
        in->ndim = 1;
        in->shape[0] = (int64_t)st.st_size;
        in->nbytes = (uint64_t)st.st_size;
    } else if (ckpt_shape_nbytes(in->dtype, in->ndim, in->shape, &in->nbytes,
                                 in->name, &err) != 0) {
        rc = cli_fail("%s", err.msg);
    } else if ((uint64_t)st.st_size != in->nbytes) {
        char shape[CLI_SHAPE_MAX];
        cli_format_shape(shape, sizeof shape, in->ndim, in->shape);
        rc = cli_fail("%s: holds %" PRIu64 " bytes, but %s of shape %s "
                      "needs %" PRIu64, in->path, (uint64_t)st.st_size,
                      ckpt_dtype_name(in->dtype), shape, in->nbytes);
    }
    close(fd);
    return rc;
}

/* Maps an input's file; an input of no bytes maps nothing. */
static int map_input(const pack_input *in, mapping *m)
{
    static const unsigned char nothing[1];
    memset(m, 0, sizeof *m);
    m->data = nothing;
    size_t len = (size_t)(in->offset + in->nbytes);
    if (in->nbytes == 0)
        return CLI_OK;
    struct stat st;
    int fd = open_regular(in->path, &st);
    if (fd < 0)
        return CLI_FAIL;
    if ((uint64_t)st.st_size < in->offset + in->nbytes) {
        close(fd);
        return cli_fail("%s: file shrank while packing", in->path);
    }
    void *a = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (a == MAP_FAILED)
        return cli_fail("cannot map %s: %s", in->path, strerror(e));
    if (!in->fortran)
        madvise(a, len, MADV_SEQUENTIAL);
    m->addr = a;
    m->len = len;
    m->data = (const unsigned char *)a + in->offset;
    return CLI_OK;
}

static void unmap_input(mapping *m)
{
    if (m->addr)
        munmap(m->addr, m->len);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------ gathering */

/* Copies a rows x cols block whose source is strided (ss_r, ss_c elements)
 * to a destination strided (ds_r, 1), in 16x16 tiles so that both sides
 * stay in cache: the transpose Fortran-order data needs. */
#define TILE 16
#define DEFINE_TILE_COPY(NAME, T)                                             \
    static void NAME(unsigned char *dst, int64_t ds_r,                        \
                     const unsigned char *src, int64_t ss_r, int64_t ss_c,    \
                     int64_t rows, int64_t cols)                              \
    {                                                                         \
        for (int64_t r0 = 0; r0 < rows; r0 += TILE) {                         \
            int64_t r1 = r0 + TILE < rows ? r0 + TILE : rows;                 \
            for (int64_t c0 = 0; c0 < cols; c0 += TILE) {                     \
                int64_t c1 = c0 + TILE < cols ? c0 + TILE : cols;             \
                for (int64_t r = r0; r < r1; r++) {                           \
                    unsigned char *d = dst + (size_t)(r * ds_r) * sizeof(T);  \
                    const unsigned char *s =                                  \
                        src + (size_t)(r * ss_r) * sizeof(T);                 \
                    for (int64_t c = c0; c < c1; c++) {                       \
                        T v;                                                  \
                        memcpy(&v, s + (size_t)(c * ss_c) * sizeof(T),       \
                               sizeof v);                                     \
                        memcpy(d + (size_t)c * sizeof(T), &v, sizeof v);      \
                    }                                                         \
                }                                                             \
            }                                                                 \
        }                                                                     \
    }
DEFINE_TILE_COPY(tile_copy_1, uint8_t)
DEFINE_TILE_COPY(tile_copy_2, uint16_t)
DEFINE_TILE_COPY(tile_copy_4, uint32_t)
DEFINE_TILE_COPY(tile_copy_8, uint64_t)
typedef struct { unsigned char b[16]; } elem16;   /* c128 */
DEFINE_TILE_COPY(tile_copy_16, elem16)

static void tile_copy(size_t isz, unsigned char *dst, int64_t ds_r,
                      const unsigned char *src, int64_t ss_r, int64_t ss_c,
                      int64_t rows, int64_t cols)
{
    switch (isz) {
    case 1: tile_copy_1(dst, ds_r, src, ss_r, ss_c, rows, cols); break;
    case 2: tile_copy_2(dst, ds_r, src, ss_r, ss_c, rows, cols); break;
    case 4: tile_copy_4(dst, ds_r, src, ss_r, ss_c, rows, cols); break;
    case 8: tile_copy_8(dst, ds_r, src, ss_r, ss_c, rows, cols); break;
    default: tile_copy_16(dst, ds_r, src, ss_r, ss_c, rows, cols); break;
    }
}

/* Advances the odometer idx over dims [lo, hi) of size; 0 when it wraps. */
static int odometer_next(int64_t *idx, const int64_t *size, int lo, int hi)
{
    for (int k = hi - 1; k >= lo; k--) {
        if (++idx[k] < size[k])
            return 1;
        idx[k] = 0;
    }
    return 0;
}

/* Copies the box of `size` at src, whose elements lie `stride` elements
 * apart per dim, to dst in row-major order; returns the end of dst.  When
 * the last dim is contiguous in the source, rows are copied whole;
 * otherwise (Fortran order) dims 0 and ndim-1 are transposed in tiles, for
 * each index of the dims between them. */
static unsigned char *gather_box(unsigned char *dst, const unsigned char *src,
                                 size_t isz, int ndim, const int64_t *size,
                                 const int64_t *stride)
{
    int64_t idx[CKPT_MAX_DIMS] = { 0 };
    if (ndim == 0) {
        memcpy(dst, src, isz);
        return dst + isz;
    }
    int last = ndim - 1;
    int64_t row = size[last];
    if (stride[last] == 1 || ndim == 1) {
        unsigned char *d = dst;
        do {
            const unsigned char *s = src;
            for (int k = 0; k < last; k++)
                s += (size_t)(idx[k] * stride[k]) * isz;
            if (stride[last] == 1)
                memcpy(d, s, (size_t)row * isz);
            else
                tile_copy(isz, d, 0, s, 0, stride[last], 1, row);
            d += (size_t)row * isz;
        } while (odometer_next(idx, size, 0, last));
        return d;
    }
    int64_t plane = 1;   /* dst elements per index of dim 0 */
    for (int k = 1; k < ndim; k++)
        plane *= size[k];
    unsigned char *d = dst;
    do {
        const unsigned char *s = src;
        for (int k = 1; k < last; k++)
            s += (size_t)(idx[k] * stride[k]) * isz;
        tile_copy(isz, d, plane, s, stride[0], stride[last], size[0], row);
        d += (size_t)row * isz;
    } while (odometer_next(idx, size, 1, last));
    return dst + (size_t)(size[0] * plane) * isz;
}

/* State of the gathering of one piece into the buffer. */
typedef struct gather_ctx {
    const unsigned char *base;     /* element (0,...,0) of the tensor */
    size_t isz;
    int ndim;
    const int64_t *piece_off;
    int64_t stride[CKPT_MAX_DIMS]; /* of the tensor in the file */
    unsigned char *cursor;         /* next byte of the buffer */
} gather_ctx;

/* ckpt_box_fn: gathers one box (in piece coordinates) into the buffer. */
static int gather_cb(void *arg, const int64_t *off, const int64_t *size)
{
    gather_ctx *g = arg;
    const unsigned char *s = g->base;
    for (int k = 0; k < g->ndim; k++)
        s += (size_t)((g->piece_off[k] + off[k]) * g->stride[k]) * g->isz;
    g->cursor = gather_box(g->cursor, s, g->isz, g->ndim, size, g->stride);
    return 0;
}

/* Element strides of the tensor as laid out in its file. */
static void file_strides(const pack_input *in, int64_t *stride)
{
    int64_t s = 1;
    if (in->fortran) {
        for (int k = 0; k < in->ndim; k++) {
            stride[k] = s;
            s *= in->shape[k];
        }
    } else {
        for (int k = in->ndim - 1; k >= 0; k--) {
            stride[k] = s;
            s *= in->shape[k];
        }
    }
}

/* 1 when the data is row-major: C order, or Fortran order with at most one
 * dim longer than 1 (then both orders are the same). */
static int row_major_data(const pack_input *in)
{
    int longer = 0;
    for (int k = 0; k < in->ndim; k++)
        longer += in->shape[k] > 1;
    return !in->fortran || longer <= 1;
}

/* 1 when the piece is one contiguous run of row-major data: every dim
 * after the last partial one is whole and every dim before it has size 1. */
static int piece_contiguous(const pack_input *in, const int64_t *size)
{
    int j = in->ndim - 1;
    while (j >= 0 && size[j] == in->shape[j])
        j--;
    for (int k = 0; k < j; k++)
        if (size[k] != 1)
            return 0;
    return 1;
}

/* ------------------------------------------------------------ writing */

/* Feeds n bytes at buf to stream s, unless rc (with err) says an earlier
 * step failed, and moves the progress bar; any failure aborts s and is
 * printed. */
static int feed(pack_job *job, ckpt_stream *s, int rc, const void *buf,
                size_t n, ckpt_error *err)
{
    if (rc == 0)
        rc = ckpt_stream_write(s, buf, n, err);
    if (rc) {
        ckpt_stream_abort(s);
        return cli_fail("%s", err->msg);
    }
    progress_add(&job->prog, n);
    return CLI_OK;
}

/* Ends stream s: its piece is recorded, or the failure printed. */
static int end_stream(ckpt_stream *s)
{
    ckpt_error err = { 0 };
    if (ckpt_stream_end(s, &err))
        return cli_fail("%s", err.msg);
    return CLI_OK;
}

/* Streams a piece: gathers it block by block into job->buf. */
static int stream_piece(pack_job *job, ckpt_writer *w, const ckpt_piece *p,
                        const pack_input *in, const unsigned char *data)
{
    ckpt_error err = { 0 };
    ckpt_stream *s;
    if (ckpt_writer_begin(w, p, &s, &err))
        return cli_fail("%s", err.msg);
    gather_ctx g = { data, ckpt_dtype_size(in->dtype), in->ndim, p->offsets,
                     { 0 }, NULL };
    file_strides(in, g.stride);
    uint64_t numel = ckpt_box_numel(in->ndim, p->sizes);
    uint64_t step = CLI_BLOCK / g.isz;
    for (uint64_t lo = 0; lo < numel; lo += step) {
        uint64_t hi = numel - lo < step ? numel : lo + step;
        g.cursor = job->buf;
        int rc = ckpt_region_linear_boxes(in->ndim, p->sizes, lo, hi,
                                          gather_cb, &g);
        size_t n = (size_t)(g.cursor - job->buf);
        if (rc == 0 && n != (hi - lo) * g.isz)
            rc = ckpt_err(&err, -EIO, "tensor '%s': gathered %zu bytes "
                               "of a %" PRIu64 "-byte block", in->name, n,
                               (hi - lo) * g.isz);
        else if (rc)
            ckpt_err(&err, rc, "tensor '%s': cannot split the piece "
                          "into boxes", in->name);
        if (feed(job, s, rc, job->buf, n, &err) != CLI_OK)
            return CLI_FAIL;
    }
    return end_stream(s);
}

/* Writes a piece whose bytes lie contiguous at p->data: whole with
 * ckpt_writer_put when small, else streamed straight from the mapping in
 * PUT_STEP slices (no copy) so that the progress bar moves. */
static int put_contiguous(pack_job *job, ckpt_writer *w, const ckpt_piece *p,
                          uint64_t nbytes)
{
    ckpt_error err = { 0 };
    if (nbytes <= PUT_STEP) {
        if (ckpt_writer_put(w, p, &err))
            return cli_fail("%s", err.msg);
        progress_add(&job->prog, nbytes);
        return CLI_OK;
    }
    ckpt_stream *s;
    if (ckpt_writer_begin(w, p, &s, &err))
        return cli_fail("%s", err.msg);
    const unsigned char *data = p->data;
    for (uint64_t off = 0; off < nbytes; off += PUT_STEP) {
        size_t n = (size_t)(nbytes - off < PUT_STEP ? nbytes - off : PUT_STEP);
        if (feed(job, s, 0, data + off, n, &err) != CLI_OK)
            return CLI_FAIL;
    }
    return end_stream(s);
}

/* Writes the piece [off, off+size) of an input with writer w. */
static int put_piece(pack_job *job, ckpt_writer *w, const pack_input *in,
                     const mapping *m, const int64_t *off, const int64_t *size)
{
    ckpt_piece p = { in->name, in->dtype, in->ndim, in->shape, off, size,
                     NULL };
    if (!row_major_data(in) || !piece_contiguous(in, size))
        return stream_piece(job, w, &p, in, m->data);
    int64_t stride[CKPT_MAX_DIMS];
    file_strides(in, stride);
    size_t isz = ckpt_dtype_size(in->dtype);
    uint64_t at = 0;
    for (int k = 0; k < in->ndim; k++)
        at += (uint64_t)(off[k] * stride[k]);
    p.data = m->data + at * isz;
    return put_contiguous(job, w, &p, ckpt_box_numel(in->ndim, size) * isz);
}

/* Writes a byte object, a scalar or an empty tensor whole. */
static int put_whole(pack_job *job, ckpt_writer *w, const pack_input *in,
                     const mapping *m)
{
    ckpt_error err = { 0 };
    if (in->dtype == CKPT_BYTES) {
        if (ckpt_writer_put_bytes(w, in->name, m->data, (size_t)in->nbytes,
                                  &err))
            return cli_fail("%s", err.msg);
        progress_add(&job->prog, in->nbytes);
        return CLI_OK;
    }
    int64_t zero[CKPT_MAX_DIMS] = { 0 };
    return put_piece(job, w, in, m, zero, in->shape);
}

/* The grid coordinates of cell c. */
static void cell_coords(const pack_job *job, long c, int64_t *coord)
{
    for (int k = job->ngrid - 1; k >= 0; k--) {
        coord[k] = c % job->grid[k];
        c /= job->grid[k];
    }
}

/* The piece of grid cell `coord` of an input: 0 when the cell holds none
 * (an unsplit grid dim with a non-zero coordinate, or a dim shorter than
 * its factor).  Splits as numpy.array_split does. */
static int cell_piece(const pack_job *job, const pack_input *in,
                      const int64_t *coord, int64_t *off, int64_t *size)
{
    int nd = in->ndim < job->ngrid ? in->ndim : job->ngrid;
    for (int k = nd; k < job->ngrid; k++)
        if (coord[k] != 0)
            return 0;
    for (int k = 0; k < in->ndim; k++) {
        off[k] = 0;
        size[k] = in->shape[k];
        if (k >= nd)
            continue;
        int64_t n = in->shape[k], f = job->grid[k], p = coord[k];
        int64_t base = n / f, extra = n % f;
        if (p >= (n < f ? n : f))
            return 0;
        size[k] = base + (p < extra);
        off[k] = p * base + (p < extra ? p : extra);
    }
    return 1;
}

/* 1 when an input is written whole by rank0 rather than cut by the grid. */
static int written_whole(const pack_input *in)
{
    if (in->dtype == CKPT_BYTES || in->ndim == 0)
        return 1;
    for (int k = 0; k < in->ndim; k++)
        if (in->shape[k] == 0)
            return 1;
    return 0;
}

/* Writes what grid cell c holds of one input. */
static int write_cell_input(pack_job *job, ckpt_writer *w, long c,
                            const pack_input *in)
{
    int64_t coord[CKPT_MAX_DIMS], off[CKPT_MAX_DIMS], size[CKPT_MAX_DIMS];
    if (written_whole(in) && c != 0)
        return CLI_OK;
    cell_coords(job, c, coord);
    if (!written_whole(in) && !cell_piece(job, in, coord, off, size))
        return CLI_OK;
    mapping m;
    int rc = map_input(in, &m);
    if (rc)
        return rc;
    if (written_whole(in))
        rc = put_whole(job, w, in, &m);
    else
        rc = put_piece(job, w, in, &m, off, size);
    unmap_input(&m);
    return rc;
}

static int set_meta(pack_job *job, ckpt_writer *w)
{
    ckpt_error err = { 0 };
    for (size_t i = 0; i < job->nmeta; i++) {
        char *kv = job->meta[i], *eq = strchr(kv, '=');
        *eq = '\0';
        int rc = ckpt_writer_set_meta(w, kv, eq + 1, &err);
        *eq = '=';
        if (rc)
            return cli_fail("%s", err.msg);
    }
    return CLI_OK;
}

/* Opens writer rank<c>, writes all it holds, and closes it. */
static int write_cell(pack_job *job, long c)
{
    char name[32];
    snprintf(name, sizeof name, "rank%ld", c);
    ckpt_error err = { 0 };
    ckpt_writer *w;
    if (ckpt_writer_open(&w, job->out, name, &job->wopts, &err))
        return cli_fail("%s", err.msg);
    int rc = c == 0 ? set_meta(job, w) : CLI_OK;
    for (size_t i = 0; i < job->ninputs && rc == CLI_OK; i++)
        rc = write_cell_input(job, w, c, &job->inputs[i]);
    if (rc) {
        ckpt_writer_abort(w);
        return rc;
    }
    if (ckpt_writer_close(w, &err))
        return cli_fail("%s", err.msg);
    return CLI_OK;
}

/* ------------------------------------------------------------ main */

static int write_and_commit(pack_job *job)
{
    uint64_t total = 0;
    for (size_t i = 0; i < job->ninputs; i++)
        total += job->inputs[i].nbytes;
    job->buf = malloc(CLI_BLOCK);
    if (!job->buf)
        return cli_fail("out of memory");
    progress_init(&job->prog, "packing", total);
    int rc = CLI_OK;
    for (long c = 0; c < job->ncells && rc == CLI_OK; c++)
        rc = write_cell(job, c);
    progress_clear(&job->prog);
    ckpt_error err = { 0 };
    if (rc == CLI_OK && ckpt_commit(job->out, NULL, &err))
        rc = cli_fail("%s", err.msg);
    if (rc == CLI_OK)
        progress_done_path(&job->prog, "packed", job->out);
    return rc;
}

static void job_free(pack_job *job)
{
    for (size_t i = 0; i < job->ninputs; i++) {
        free(job->inputs[i].name);
        free(job->inputs[i].path);
    }
    free(job->inputs);
    free(job->meta);
    free(job->buf);
    cli_outdir_free(&job->outdir);
}

static int parse_args(pack_job *job, int argc, char **argv)
{
    static const struct option longopts[] = {
        { "grid", required_argument, NULL, 'g' },
        { "codec", required_argument, NULL, 'c' },
        { "frame-size", required_argument, NULL, 'f' },
        { "threads", required_argument, NULL, 't' },
        { "meta", required_argument, NULL, 'm' },
        { "base", required_argument, NULL, 'b' },
        { "full-every", required_argument, NULL, 'F' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int rc = cli_getopt(&HELP, argc, argv, longopts, take_option, job, 2,
                        -1);
    if (rc)
        return rc;
    job->out = job->outdir.path = argv[optind];
    return parse_inputs(job, argc - optind - 1, argv + optind + 1);
}

int cmd_pack(int argc, char **argv)
{
    pack_job job;
    memset(&job, 0, sizeof job);
    ckpt_write_opts_init(&job.wopts);
    job.ngrid = 1;
    job.grid[0] = 1;
    job.ncells = 1;
    int rc = parse_args(&job, argc, argv);
    for (size_t i = 0; rc == CLI_OK && i < job.ninputs; i++)
        rc = probe_input(&job.inputs[i]);
    if (rc == CLI_OK)
        rc = cli_outdir_prepare(&job.outdir);
    if (rc == CLI_OK)
        rc = write_and_commit(&job);
    if (rc != CLI_OK)
        cli_outdir_remove(&job.outdir);
    job_free(&job);
    return rc == CLI_HELP_SHOWN ? CLI_OK : rc;
}
