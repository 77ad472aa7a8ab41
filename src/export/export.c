/*
 * export.c - ckpt_export: opens the source, chooses the objects and the
 * dtypes they are written as (refusing, by name, what the format lacks),
 * has the format's writer fill a hidden temporary file or folder beside
 * OUT, and renames it to OUT only once complete.  Also the dtype names and
 * the streaming copy the writers share (export.h).
 */
#include "export/export.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/optsize.h"
#include "export/crc32.h"
#include "export/stlayout.h"
#include "export/wthread.h"

#define DEFAULT_BLOCK ((size_t)8 << 20)
#define MIN_BLOCK ((size_t)64 << 10)
#define DEFAULT_SHARD 5000000000ull   /* HF's max_shard_size "5GB" */

void ckpt_export_opts_init(ckpt_export_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->format = CKPT_EXPORT_SAFETENSORS;
    o->torch_major = 2;
    o->max_shard_size = DEFAULT_SHARD;
    o->buffer_bytes = DEFAULT_BLOCK;
}

/* ------------------------------------------------------------ dtype names */

typedef struct dtype_names {
    const char *torch, *storage;
} dtype_names;

static const dtype_names *names_of(ckpt_dtype dt)
{
    static const dtype_names t[CKPT_DTYPE_COUNT] = {
        [CKPT_F64] = { "float64", "DoubleStorage" },
        [CKPT_F32] = { "float32", "FloatStorage" },
        [CKPT_F16] = { "float16", "HalfStorage" },
        [CKPT_BF16] = { "bfloat16", "BFloat16Storage" },
        [CKPT_F8E4M3] = { "float8_e4m3fn", NULL },
        [CKPT_F8E5M2] = { "float8_e5m2", NULL },
        [CKPT_I64] = { "int64", "LongStorage" },
        [CKPT_I32] = { "int32", "IntStorage" },
        [CKPT_I16] = { "int16", "ShortStorage" },
        [CKPT_I8] = { "int8", "CharStorage" },
        [CKPT_U64] = { "uint64", NULL },
        [CKPT_U32] = { "uint32", NULL },
        [CKPT_U16] = { "uint16", NULL },
        [CKPT_U8] = { "uint8", "ByteStorage" },
        [CKPT_BOOL] = { "bool", "BoolStorage" },
        [CKPT_C64] = { "complex64", "ComplexFloatStorage" },
        [CKPT_C128] = { "complex128", "ComplexDoubleStorage" },
        [CKPT_C32] = { "complex32", NULL },
        [CKPT_F8E4M3FNUZ] = { "float8_e4m3fnuz", NULL },
        [CKPT_F8E5M2FNUZ] = { "float8_e5m2fnuz", NULL },
        [CKPT_F8E8M0] = { "float8_e8m0fnu", NULL },
    };
    return dt > CKPT_DTYPE_INVALID && dt < CKPT_DTYPE_COUNT &&
           dt != CKPT_BYTES ? &t[dt] : NULL;
}

const char *exp_torch_dtype(ckpt_dtype dt)
{
    return names_of(dt) ? names_of(dt)->torch : NULL;
}

const char *exp_torch_storage(ckpt_dtype dt)
{
    return names_of(dt) ? names_of(dt)->storage : NULL;
}

static const char *format_name(int f)
{
    return f == CKPT_EXPORT_PT ? "pt" : f == CKPT_EXPORT_DCP ? "dcp" :
           "safetensors";
}

/* Whether torch 1.x lacks dt (it has no float8 of any kind, no uint16 to
 * uint64, and complex32 only in name). */
static int torch1_lacks(ckpt_dtype dt)
{
    switch (dt) {
    case CKPT_F8E4M3: case CKPT_F8E5M2: case CKPT_F8E4M3FNUZ:
    case CKPT_F8E5M2FNUZ: case CKPT_F8E8M0: case CKPT_U16: case CKPT_U32:
    case CKPT_U64: case CKPT_C32:
        return 1;
    default:
        return 0;
    }
}

/* What dtype an item is written as in the job's format: its own, a wider
 * one when o.convert allows, or a refusal naming the object. */
static int target_dtype(const exp_job *j, const exp_item *it, ckpt_error *err)
{
    ckpt_dtype dt = it->dtype;
    if (j->o.format == CKPT_EXPORT_SAFETENSORS) {
        if (st_dtype_name(dt))
            return dt;
        return ckpt_err(err, -ENOTSUP, "tensor '%s': %s has no safetensors "
                        "dtype: refused (export it as pt or dcp)", it->fqn,
                        ckpt_dtype_name(dt));
    }
    if (j->o.torch_major >= 2 || !torch1_lacks(dt))
        return dt;
    /* Exact widenings: every float8 to float32, complex32 to complex64
     * (common/npy.c's, as the .npy view's), uint16/32 to int32/64. */
    ckpt_dtype wide = dt == CKPT_U16 ? CKPT_I32 :
                      dt == CKPT_U32 ? CKPT_I64 :
                      dt == CKPT_C32 ? CKPT_C64 :
                      dt == CKPT_U64 ? CKPT_DTYPE_INVALID : CKPT_F32;
    if (j->o.convert && wide != CKPT_DTYPE_INVALID)
        return wide;
    return ckpt_err(err, -ENOTSUP, "tensor '%s': %s is a dtype torch 1.x "
                    "lacks: refused (%s; or export for torch 2)", it->fqn,
                    ckpt_dtype_name(dt), wide != CKPT_DTYPE_INVALID ?
                    "convert widens it exactly" : "no exact conversion");
}

/* ------------------------------------------------------------ the copy */

/* Converts n elements of `from` at src to `to` at dst (the pairs of
 * target_dtype). */
static void convert(const exp_job *j, ckpt_dtype from, ckpt_dtype to,
                    const void *src, size_t n, void *dst)
{
    if (to == CKPT_F32 || to == CKPT_C64) {
        npy_widen(&j->tables, from, src, n, dst);
    } else if (from == CKPT_U16) {
        const uint16_t *s = src;
        int32_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = s[i];
    } else {
        const uint32_t *s = src;
        int64_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = s[i];
    }
}

/* Reads [off, off + want) of the item into dst. */
static int read_block(exp_job *j, const exp_item *it, unsigned char *dst,
                      uint64_t off, uint64_t want, ckpt_error *err)
{
    int64_t got = ckpt_read(j->r, it->idx, dst, off, want, err);
    if (got < 0)
        return (int)got;
    if ((uint64_t)got != want)
        return ckpt_err(err, -EIO, "%s: tensor '%s': short read at byte "
                        "%llu", j->src, it->fqn,
                        (unsigned long long)(off + (uint64_t)got));
    return 0;
}

static void advance(exp_job *j, size_t n)
{
    j->done += n;
    if (j->o.progress)
        j->o.progress(j->o.arg, j->done, j->total);
}

/* A widened item: read into blk[0], widen into blk[1], write, in turn. */
static int copy_widened(exp_job *j, const exp_item *it, exp_sink *s,
                        uint32_t *crc, ckpt_error *err)
{
    size_t isz = ckpt_dtype_size(it->dtype), osz = ckpt_dtype_size(it->out);
    size_t step = j->o.buffer_bytes / osz * isz;
    for (uint64_t off = 0; off < it->nbytes; off += step) {
        uint64_t want = it->nbytes - off < step ? it->nbytes - off : step;
        int rc = read_block(j, it, j->blk[0], off, want, err);
        if (rc)
            return rc;
        size_t n = (size_t)want / isz * osz;
        convert(j, it->dtype, it->out, j->blk[0], (size_t)want / isz,
                j->blk[1]);
        if (crc)
            *crc = exp_crc32(*crc, j->blk[1], n);
        rc = exp_sink_write(s, j->blk[1], n, err);
        if (rc)
            return rc;
        advance(j, n);
    }
    return 0;
}

int exp_copy(exp_job *j, const exp_item *it, exp_sink *s, uint32_t *crc,
             ckpt_error *err)
{
    if (it->widen)
        return copy_widened(j, it, s, crc, err);
    /* Block k is read into blk[k % 2] while the writer thread writes
     * block k - 1 from the other. */
    size_t step = j->o.buffer_bytes;
    int cur = 0, rc = 0;
    for (uint64_t off = 0; off < it->nbytes && rc == 0; off += step) {
        uint64_t want = it->nbytes - off < step ? it->nbytes - off : step;
        rc = read_block(j, it, j->blk[cur], off, want, err);
        if (rc)
            break;
        if (crc)
            *crc = exp_crc32(*crc, j->blk[cur], (size_t)want);
        rc = exp_wthread_put(j->writer, s, j->blk[cur], (size_t)want, err);
        cur ^= 1;
        if (rc == 0)
            advance(j, (size_t)want);
    }
    int wrc = exp_wthread_wait(j->writer, rc ? NULL : err);
    return rc ? rc : wrc;
}

/* ------------------------------------------------------------ choosing */

static int wanted(const exp_job *j, const char *fqn)
{
    const char *p = j->o.prefix;
    return !p || strncmp(fqn, p, strlen(p)) == 0;
}

/* Marks the tensors named by o.tensors; refuses a name SRC lacks. */
static int mark_named(exp_job *j, char *mark, ckpt_error *err)
{
    size_t n = ckpt_reader_count(j->r);
    if (!j->o.tensors) {
        memset(mark, 1, n);
        return 0;
    }
    memset(mark, 0, n);
    for (size_t i = 0; i < j->o.ntensors; i++) {
        const char *name = j->o.tensors[i];
        long k = name ? ckpt_reader_find(j->r, name) : -EINVAL;
        if (k < 0)
            return ckpt_err(err, -ENOENT, "%s has no tensor '%s'", j->src,
                            name ? name : "(null)");
        mark[k] = 1;
    }
    return 0;
}

/* Keeps an object, or leaves a byte object out (reported) where the
 * format has no place for it.  Returns 1 kept, 0 left out, or < 0. */
static int choose(exp_job *j, exp_item *it, ckpt_error *err)
{
    if (it->dtype == CKPT_BYTES) {
        if (j->o.format == CKPT_EXPORT_DCP)
            return it->out = CKPT_BYTES, 1;
        if (j->o.bytes_as_u8)
            return it->out = CKPT_U8, 1;
        if (j->o.note)
            j->o.note(j->o.arg, it->fqn, j->o.format == CKPT_EXPORT_PT ?
                      "byte object left out: a torch.save state dict "
                      "holds tensors (bytes_as_u8 writes it as a uint8 "
                      "tensor)" :
                      "byte object left out: safetensors holds tensors "
                      "(bytes_as_u8 writes it as a U8 tensor)");
        return 0;
    }
    int dt = target_dtype(j, it, err);
    if (dt < 0)
        return dt;
    it->out = (ckpt_dtype)dt;
    it->widen = it->out != it->dtype;
    return 1;
}

static int select_items(exp_job *j, ckpt_error *err)
{
    size_t n = ckpt_reader_count(j->r);
    char *mark = malloc(n ? n : 1);
    j->items = calloc(n ? n : 1, sizeof *j->items);
    if (!mark || !j->items) {
        free(mark);
        return ckpt_err(err, -ENOMEM, "out of memory");
    }
    int rc = mark_named(j, mark, err);
    size_t matched = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        ckpt_tensor_info t;
        if (!mark[i] || ckpt_reader_info(j->r, i, &t) != 0 ||
            !wanted(j, t.fqn))
            continue;
        matched++;
        exp_item *it = &j->items[j->n];
        *it = (exp_item){ .idx = i, .fqn = t.fqn, .dtype = t.dtype,
                          .ndim = t.ndim, .shape = t.shape,
                          .numel = t.numel, .nbytes = t.nbytes };
        rc = choose(j, it, err);
        if (rc <= 0)
            continue;
        rc = 0;
        size_t isz = it->dtype == CKPT_BYTES ? 1 : ckpt_dtype_size(it->dtype);
        size_t osz = it->out == CKPT_BYTES ? 1 : ckpt_dtype_size(it->out);
        it->out_bytes = it->nbytes / isz * osz;
        j->total += it->out_bytes;
        j->n++;
    }
    free(mark);
    if (rc == 0 && matched == 0)
        rc = ckpt_err(err, -ENOENT, "%s: no tensor to export%s%s%s", j->src,
                      j->o.prefix ? " (none starts with '" : "",
                      j->o.prefix ? j->o.prefix : "",
                      j->o.prefix ? "')" : "");
    return rc;
}

/* ------------------------------------------------------------ OUT */

static int is_folder_output(const exp_job *j, const char *out)
{
    if (j->o.format == CKPT_EXPORT_DCP)
        return 1;
    if (j->o.format == CKPT_EXPORT_PT)
        return 0;
    size_t n = strlen(out);
    return !(n > 12 && strcmp(out + n - 12, ".safetensors") == 0);
}

/* "DIR/.BASE.export-XXXXXX" beside out, for mkstemp/mkdtemp. */
static char *temp_template(const char *out)
{
    char *a = strdup(out), *b = strdup(out), *t = NULL;
    if (a && b && asprintf(&t, "%s/.%s.export-XXXXXX", dirname(a),
                           basename(b)) < 0)
        t = NULL;
    free(a);
    free(b);
    return t;
}

/* Makes the temporary file or folder; returns its path or NULL. */
static char *make_temp(const char *out, int folder, ckpt_error *err)
{
    char *t = temp_template(out);
    if (!t) {
        ckpt_err(err, -ENOMEM, "out of memory");
        return NULL;
    }
    int ok;
    if (folder) {
        ok = mkdtemp(t) != NULL;
    } else {
        int fd = mkostemp(t, O_CLOEXEC);
        ok = fd >= 0;
        if (ok)
            close(fd);
    }
    if (!ok) {
        ckpt_err_sys(err, -errno, "cannot create a temporary %s beside %s",
                     folder ? "folder" : "file", out);
        free(t);
        return NULL;
    }
    return t;
}

/* mkdtemp/mkstemp make 0700/0600; give the output the mode a plain
 * creation would have (0777/0666 less the umask). */
static void plain_mode(const char *path, int folder)
{
    mode_t um = umask(022);
    umask(um);
    chmod(path, (folder ? 0777 : 0666) & ~um);
}

static int rename_noreplace(const char *from, const char *to, ckpt_error *err)
{
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno == EEXIST)
        return ckpt_err(err, -EEXIST, "%s appeared during the export: "
                        "left as it is (the export is not kept)", to);
    if (errno != EINVAL && errno != ENOSYS)
        return ckpt_err_sys(err, -errno, "cannot rename the export to %s",
                            to);
    /* A file system without RENAME_NOREPLACE. */
    struct stat st;
    if (lstat(to, &st) == 0)
        return ckpt_err(err, -EEXIST, "%s appeared during the export", to);
    if (rename(from, to) != 0)
        return ckpt_err_sys(err, -errno, "cannot rename the export to %s",
                            to);
    return 0;
}

static int write_format(exp_job *j, const char *tmp, int folder,
                        ckpt_error *err)
{
    switch (j->o.format) {
    case CKPT_EXPORT_PT:
        return exp_write_pt(j, tmp, err);
    case CKPT_EXPORT_DCP:
        return exp_write_dcp(j, tmp, err);
    default:
        return exp_write_safetensors(j, tmp, folder, err);
    }
}

static int export_to(exp_job *j, const char *out, ckpt_error *err)
{
    int folder = is_folder_output(j, out);
    char *tmp = make_temp(out, folder, err);
    if (!tmp)
        return err ? err->code : -EIO;
    plain_mode(tmp, folder);
    int rc = write_format(j, tmp, folder, err);
    if (rc == 0 && j->o.sync && folder)
        rc = ckpt_fsync_path(tmp, err);
    if (rc == 0)
        rc = rename_noreplace(tmp, out, err);
    if (rc == 0 && j->o.sync) {
        char *d = strdup(out);
        rc = d ? ckpt_fsync_dir(dirname(d), err) : -ENOMEM;
        free(d);
    }
    if (rc != 0)
        ckpt_remove_tree(tmp, NULL);
    free(tmp);
    return rc;
}

/* ------------------------------------------------------------ the call */

static int check_opts(const ckpt_export_opts *o, ckpt_error *err)
{
    if (o->format < CKPT_EXPORT_SAFETENSORS || o->format > CKPT_EXPORT_DCP)
        return ckpt_err(err, -EINVAL, "ckpt_export: format %d is none of "
                        "safetensors (1), pt (2), dcp (3)", o->format);
    if (o->torch_major != 1 && o->torch_major != 2)
        return ckpt_err(err, -EINVAL, "ckpt_export: torch_major %d is "
                        "neither 1 nor 2", o->torch_major);
    if (o->max_shard_size == 0)
        return ckpt_err(err, -EINVAL, "ckpt_export: max_shard_size is 0");
    if (o->buffer_bytes < MIN_BLOCK)
        return ckpt_err(err, -EINVAL, "ckpt_export: buffer_bytes %zu is "
                        "below %zu", o->buffer_bytes, MIN_BLOCK);
    if (o->ntensors && !o->tensors)
        return ckpt_err_null(err, "ckpt_export", "opts->tensors");
    return 0;
}

static int open_source(exp_job *j, const char *src, ckpt_error *err)
{
    ckpt_read_opts ro;
    ckpt_read_opts_init(&ro);
    ro.follow_links = j->o.follow_links;
    ro.threads = j->o.threads;
    ro.cache_bytes = (size_t)64 << 20;
    ro.prefetch = 0;   /* each block is read once, whole */
    int rc = ckpt_reader_open(&j->r, src, &ro, err);
    if (rc)
        return rc;
    for (int i = 0; i < 2; i++)
        if (!(j->blk[i] = malloc(j->o.buffer_bytes)))
            return ckpt_err(err, -ENOMEM, "out of memory for the export's "
                            "buffers (%zu bytes)", j->o.buffer_bytes);
    return exp_wthread_start(&j->writer, err);
}

int ckpt_export(const char *src, const char *out,
                const ckpt_export_opts *opts, ckpt_error *err)
{
    if (!src)
        return ckpt_err_null(err, "ckpt_export", "src");
    if (!out)
        return ckpt_err_null(err, "ckpt_export", "out");
    exp_job j = { .src = src };
    ckpt_export_opts_init(&j.o);
    int rc = opts ? ckpt_opts_take(&j.o, sizeof j.o, opts,
                                   sizeof j.o, "ckpt_export_opts", err) : 0;
    if (rc == 0)
        rc = check_opts(&j.o, err);
    if (rc)
        return rc;
    struct stat st;
    if (lstat(out, &st) == 0)
        return ckpt_err(err, -EEXIST, "%s exists: refused (export writes a "
                        "new %s; remove it or choose another name)", out,
                        format_name(j.o.format));
    npy_tables_init(&j.tables);
    rc = open_source(&j, src, err);
    if (rc == 0)
        rc = select_items(&j, err);
    if (rc == 0)
        rc = export_to(&j, out, err);
    exp_wthread_stop(j.writer);
    ckpt_reader_close(j.r);
    free(j.items);
    free(j.blk[0]);
    free(j.blk[1]);
    return rc;
}
