/*
 * builder.c - the builder that turns the format modules' tensors and
 * chunks into the reader's model (see builder.h): tensors in FQN order,
 * chunks checked by the planner (in bounds, no partial overlaps, no
 * holes; replicas kept once) and put in row-major order, row-major chunks
 * cut into frames of about 1 MiB on element boundaries; and the confined
 * file access the modules read their files with.
 */
#include "foreign/builder.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/region.h"
#include "format/plan.h"

/* ---------------------------------------------------------------- files */

void ckpt_foreign_free(ckpt_foreign *f)
{
    for (size_t i = 0; i < f->nchunks; i++) {
        if (f->frames)
            free(f->frames[i]);
        if (f->strided)
            free(f->strided[i]);
    }
    for (size_t i = 0; i < f->npend; i++) {
        free(f->pend[i].file);
        free(f->pend[i].strided);
    }
    free(f->pend);
    free(f->frames);
    free(f->strided);
    ckpt_index_data_free(&f->d);
    if (f->root.dir)
        ckpt_confine_close(&f->root);
    free(f->dir);
    free(f->stamp);
    memset(f, 0, sizeof *f);
}

int ckpt_foreign_check_relpath(const char *p, const char *what,
                               ckpt_error *err)
{
    if (!*p || p[0] == '/')
        goto bad;
    for (const char *s = p; *s;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if ((n == 2 && s[0] == '.' && s[1] == '.') || n == 0)
            goto bad;
        s += n + (e != NULL);
    }
    return 0;
bad:
    return ckpt_err(err, -EINVAL, "%s: file name '%s' is not a path inside "
                    "the checkpoint directory", what, p);
}

int ckpt_foreign_openat(ckpt_foreign *f, const char *rel, ckpt_error *err)
{
    if (!f->root.dir) {
        int rc = ckpt_confine_open(&f->root, f->dir, f->follow, err);
        if (rc)
            return rc;
    }
    return ckpt_confine_openat(&f->root, rel, err);
}

int ckpt_foreign_slurp(ckpt_foreign *f, const char *rel, uint64_t max,
                       char **buf, size_t *len, ckpt_error *err)
{
    int fd = ckpt_foreign_openat(f, rel, err);
    if (fd < 0)
        return fd;
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = ckpt_err_sys(err, -errno, "%s/%s", f->dir, rel);
    else if ((uint64_t)st.st_size > max)
        rc = ckpt_err(err, -EFBIG, "%s/%s: larger than %llu bytes", f->dir,
                      rel, (unsigned long long)max);
    else if (!(*buf = malloc((size_t)st.st_size + 1)))
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    else if ((rc = ckpt_pread_full(fd, *buf, (size_t)st.st_size, 0, rel,
                                   err)) != 0) {
        free(*buf);
        *buf = NULL;
    }
    if (rc == 0)
        *len = (size_t)st.st_size;
    close(fd);
    return rc;
}
/* ---------------------------------------------------------------- builder */

static int grow(void **v, size_t *cap, size_t need, size_t sz)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void *p = realloc(*v, n * sz);
    if (!p)
        return -ENOMEM;
    memset((char *)p + *cap * sz, 0, (n - *cap) * sz);
    *v = p;
    *cap = n;
    return 0;
}

long ckpt_foreign_add_tensor(ckpt_foreign *f, const char *fqn,
                             ckpt_dtype dt, int ndim, const int64_t *shape,
                             ckpt_error *err)
{
    if (ndim < 0 || ndim > CKPT_MAX_DIMS)
        return ckpt_err(err, -EINVAL, "tensor '%s': %d dims (at most %d)",
                        fqn, ndim, CKPT_MAX_DIMS);
    if (grow((void **)&f->d.tensors, &f->tensors_cap, f->d.ntensors + 1,
             sizeof *f->d.tensors))
        return ckpt_err(err, -ENOMEM, "out of memory");
    ckpt_index_tensor *t = &f->d.tensors[f->d.ntensors];
    memset(t, 0, sizeof *t);
    if (!(t->fqn = strdup(fqn)))
        return ckpt_err(err, -ENOMEM, "out of memory");
    t->dtype = dt;
    t->ndim = ndim;
    for (int k = 0; k < ndim; k++)
        t->shape[k] = shape[k];
    return (long)f->d.ntensors++;
}

int ckpt_foreign_add_chunk(ckpt_foreign *f, size_t t, const int64_t *offsets,
                           const int64_t *sizes, const char *file,
                           uint64_t data_offset, const int64_t *stride,
                           uint64_t span, ckpt_error *err)
{
    if (grow((void **)&f->pend, &f->pend_cap, f->npend + 1, sizeof *f->pend))
        return ckpt_err(err, -ENOMEM, "out of memory");
    ckpt_foreign_chunk *c = &f->pend[f->npend];
    memset(c, 0, sizeof *c);
    int nd = f->d.tensors[t].ndim;
    c->tensor = t;
    for (int k = 0; k < nd; k++) {
        c->offsets[k] = offsets[k];
        c->sizes[k] = sizes[k];
    }
    c->data_offset = data_offset;
    c->span = span;
    if (!(c->file = strdup(file)))
        return ckpt_err(err, -ENOMEM, "out of memory");
    f->npend++;
    if (stride) {
        if (!(c->strided = calloc(1, sizeof *c->strided)))
            return ckpt_err(err, -ENOMEM, "out of memory");
        for (int k = 0; k < nd; k++)
            c->strided->stride[k] = stride[k];
    }
    return 0;
}

int ckpt_foreign_add_zstd_chunk(ckpt_foreign *f, size_t t,
                                const int64_t *offsets, const int64_t *sizes,
                                const char *file, const ckpt_zstd_src *z,
                                const int64_t *stride, ckpt_error *err)
{
    int64_t none[CKPT_MAX_DIMS] = { 0 };
    int rc = ckpt_foreign_add_chunk(f, t, offsets, sizes, file, z->offset,
                                    stride ? stride : none, z->length, err);
    if (rc)
        return rc;
    ckpt_strided *sd = f->pend[f->npend - 1].strided;
    sd->row_major = stride == NULL;
    sd->zstd = 1;
    sd->skip = z->skip;
    sd->span = z->span;
    sd->decoded = z->decoded;
    return 0;
}

int ckpt_foreign_refuse(ckpt_foreign *f, size_t t, const char *why,
                        ckpt_error *err)
{
    size_t k = 0;
    for (size_t i = 0; i < f->npend; i++) {
        if (f->pend[i].tensor == t) {
            free(f->pend[i].file);
            free(f->pend[i].strided);
        } else {
            f->pend[k++] = f->pend[i];
        }
    }
    f->npend = k;
    /* Listed with its dtype and shape where they are sound, else as one
     * byte: either way a tensor of some bytes, whose every read fails. */
    ckpt_index_tensor *ti = &f->d.tensors[t];
    uint64_t numel = 1;
    int sound = ckpt_dtype_size(ti->dtype) > 0;
    for (int d = 0; sound && d < ti->ndim; d++)
        sound = ti->shape[d] > 0 &&
                !__builtin_mul_overflow(numel, (uint64_t)ti->shape[d], &numel);
    if (sound && numel > (uint64_t)INT64_MAX / ckpt_dtype_size(ti->dtype))
        sound = 0;
    if (!sound) {
        ti->dtype = CKPT_BYTES;
        ti->ndim = 1;
        ti->shape[0] = 1;
        numel = 1;
    }
    ti->nbytes = numel * ckpt_dtype_size(ti->dtype);
    free(f->d.tensors[t].refused);
    if (!(f->d.tensors[t].refused = strdup(why)))
        return ckpt_err(err, -ENOMEM, "out of memory");
    return 0;
}

int ckpt_foreign_set_dir(ckpt_foreign *f, const char *path,
                         const char **file, ckpt_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return ckpt_err_sys(err, -errno, "%s", path);
    *file = NULL;
    if (S_ISREG(st.st_mode)) {
        const char *slash = strrchr(path, '/');
        f->dir = slash ? strndup(path, (size_t)(slash - path + (slash == path)))
                       : strdup(".");
        *file = slash ? slash + 1 : path;
    } else {
        f->dir = strdup(path);
    }
    return f->dir ? 0 : ckpt_err(err, -ENOMEM, "out of memory");
}

int ckpt_foreign_set_meta(ckpt_foreign *f, const char *key,
                          const char *value, ckpt_error *err)
{
    for (size_t i = 0; i < f->d.nmeta; i++)
        if (strcmp(f->d.meta[i].key, key) == 0) {
            char *v = strdup(value);
            if (!v)
                return ckpt_err(err, -ENOMEM, "out of memory");
            free(f->d.meta[i].value);
            f->d.meta[i].value = v;
            return 0;
        }
    if (grow((void **)&f->d.meta, &f->meta_cap, f->d.nmeta + 1,
             sizeof *f->d.meta))
        return ckpt_err(err, -ENOMEM, "out of memory");
    ckpt_kv *kv = &f->d.meta[f->d.nmeta];
    kv->key = strdup(key);
    kv->value = strdup(value);
    kv->writer = NULL;
    f->d.nmeta++;
    if (!kv->key || !kv->value)
        return ckpt_err(err, -ENOMEM, "out of memory");
    return 0;
}

/* ---------------------------------------------------------------- finish */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_kv(const void *a, const void *b)
{
    return strcmp(((const ckpt_kv *)a)->key, ((const ckpt_kv *)b)->key);
}


/* Records the distinct files of the chunks, sorted, with their sizes. */
static int build_files(ckpt_foreign *f, ckpt_error *err)
{
    char **names = calloc(f->npend + 1, sizeof *names);
    if (!names)
        return ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < f->npend; i++)
        names[i] = f->pend[i].file;
    qsort(names, f->npend, sizeof *names, cmp_str);
    f->d.files = calloc(f->npend + 1, sizeof *f->d.files);
    int rc = f->d.files ? 0 : ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; rc == 0 && i < f->npend; i++) {
        if (f->d.nfiles && strcmp(f->d.files[f->d.nfiles - 1].path,
                                  names[i]) == 0)
            continue;
        struct stat st;
        int fd = ckpt_foreign_openat(f, names[i], err);
        if (fd < 0 || fstat(fd, &st) != 0) {
            rc = fd < 0 ? fd : ckpt_err_sys(err, -errno, "%s/%s", f->dir,
                                             names[i]);
            if (fd >= 0)
                close(fd);
            ckpt_err_wrap(err, rc, "a file the checkpoint's metadata names");
            break;
        }
        close(fd);
        ckpt_index_file *fi = &f->d.files[f->d.nfiles];
        if (!(fi->path = strdup(names[i]))) {
            rc = ckpt_err(err, -ENOMEM, "out of memory");
            break;
        }
        fi->size = (uint64_t)st.st_size;
        f->d.nfiles++;
    }
    free(names);
    return rc;
}

static int file_index(const ckpt_foreign *f, const char *name)
{
    size_t lo = 0, hi = f->d.nfiles;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->d.files[mid].path, name);
        if (c == 0)
            return (int)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* Runs the planner over all chunks: bounds, overlaps, coverage, dtype and
 * shape agreement; chunks that are replicas of others are dropped. */
static int plan_chunks(ckpt_foreign *f, ckpt_plan *plan, ckpt_error *err)
{
    ckpt_piece_rec *p = calloc(f->npend + 1, sizeof *p);
    if (!p)
        return ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < f->npend; i++) {
        const ckpt_index_tensor *t = &f->d.tensors[f->pend[i].tensor];
        p[i].fqn = t->fqn;
        p[i].dtype = t->dtype;
        p[i].ndim = t->ndim;
        memcpy(p[i].shape, t->shape, sizeof p[i].shape);
        memcpy(p[i].offsets, f->pend[i].offsets, sizeof p[i].offsets);
        memcpy(p[i].sizes, f->pend[i].sizes, sizeof p[i].sizes);
        p[i].raw_bytes = ckpt_box_numel(t->ndim, p[i].sizes) *
                         ckpt_dtype_size(t->dtype);
        p[i].file = f->pend[i].file;
        p[i].writer = f->pend[i].file;
    }
    ckpt_plan_opts po = { 0 };
    int rc = ckpt_plan_build(p, f->npend, &po, plan, err);
    free(p);
    return rc;
}

/* Frames of pending chunk c: one per ~1 MiB of a row-major chunk, one
 * for a strided chunk. */
static int make_frames(const ckpt_foreign_chunk *c, uint64_t raw,
                       size_t isz, ckpt_frame_rec **out, uint64_t *n)
{
    uint64_t step = CKPT_DEFAULT_FRAME_SIZE / isz * isz;
    *n = raw == 0 ? 0 : c->strided ? 1 : (raw + step - 1) / step;
    *out = calloc(*n + 1, sizeof **out);
    if (!*out)
        return -ENOMEM;
    if (c->strided && raw) {
        (*out)[0] = (ckpt_frame_rec){ c->data_offset, c->span, 0, raw, 0,
                                      c->strided->zstd ? CKPT_CODEC_ZSTD
                                                       : CKPT_CODEC_RAW,
                                      0 };
        return 0;
    }
    for (uint64_t i = 0; i < *n; i++) {
        uint64_t off = i * step, len = raw - off < step ? raw - off : step;
        (*out)[i] = (ckpt_frame_rec){ c->data_offset + off, len, off, len, 0,
                                      CKPT_CODEC_RAW, 0 };
    }
    return 0;
}

/* Moves the kept chunks of plan tensor pt into tensor t. */
static int fill_tensor(ckpt_foreign *f, ckpt_index_tensor *t,
                       const ckpt_plan_tensor *pt, size_t *g,
                       ckpt_error *err)
{
    size_t isz = ckpt_dtype_size(t->dtype);
    if (ckpt_index_tensor_alloc_chunks(t, pt->nchunks))
        return ckpt_err(err, -ENOMEM, "out of memory");
    t->nbytes = ckpt_box_numel(t->ndim, t->shape) * isz;
    for (size_t k = 0; k < pt->nchunks; k++, (*g)++) {
        ckpt_foreign_chunk *c = &f->pend[pt->chunks[k]];
        ckpt_index_chunk *ch = &t->chunks[k];
        ch->id = (int64_t)*g;
        memcpy(ch->offsets, c->offsets, (size_t)t->ndim * sizeof *c->offsets);
        memcpy(ch->sizes, c->sizes, (size_t)t->ndim * sizeof *c->sizes);
        ch->file = file_index(f, c->file);
        ch->raw_bytes = ckpt_box_numel(t->ndim, c->sizes) * isz;
        if (make_frames(c, ch->raw_bytes, isz, &f->frames[*g], &ch->nframes))
            return ckpt_err(err, -ENOMEM, "out of memory");
        for (uint64_t i = 0; i < ch->nframes; i++)
            ch->stored_bytes += f->frames[*g][i].stored_size;
        f->strided[*g] = c->strided;
        c->strided = NULL;
        t->stored_bytes += ch->stored_bytes;
        t->nframes += ch->nframes;
        if (ch->nframes)
            t->codec_mask |= 1u << f->frames[*g][0].codec;
        uint64_t fsize = f->d.files[ch->file].size;
        if (ch->stored_bytes && (c->data_offset > fsize ||
                                 fsize - c->data_offset < c->span))
            return ckpt_err(err, -EINVAL, "tensor '%s': chunk at bytes "
                            "%llu..%llu of %s runs past the end of the file "
                            "(%llu bytes)", t->fqn,
                            (unsigned long long)c->data_offset,
                            (unsigned long long)(c->data_offset + c->span),
                            c->file, (unsigned long long)fsize);
    }
    return 0;
}

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp(((const ckpt_index_tensor *)a)->fqn,
                  ((const ckpt_index_tensor *)b)->fqn);
}

/* Puts the refused tensors (at the end) in FQN order among the others,
 * whose order, and so the order of their chunks, stays (refused ones
 * have no chunks); refuses a name given twice. */
static int merge_refused(ckpt_foreign *f, ckpt_error *err)
{
    qsort(f->d.tensors, f->d.ntensors, sizeof *f->d.tensors, cmp_tensor);
    for (size_t i = 1; i < f->d.ntensors; i++)
        if (strcmp(f->d.tensors[i - 1].fqn, f->d.tensors[i].fqn) == 0)
            return ckpt_err(err, -EINVAL, "tensor '%s' is named twice",
                            f->d.tensors[i].fqn);
    return 0;
}

int ckpt_foreign_finish(ckpt_foreign *f, ckpt_error *err)
{
    ckpt_plan plan;
    int rc = build_files(f, err);
    if (rc == 0)
        rc = plan_chunks(f, &plan, err);
    if (rc)
        return rc;
    /* Tensors with no chunk at all are not in the plan: refuse them too
     * (a plan tensor exists for every tensor that has a chunk), unless
     * they are refused already. */
    size_t nrefused = 0;
    for (size_t i = 0; i < f->d.ntensors; i++)
        nrefused += f->d.tensors[i].refused != NULL;
    if (plan.ntensors + nrefused != f->d.ntensors) {
        ckpt_plan_free(&plan);
        return ckpt_err(err, -EINVAL, "%zu of the %zu tensors have no data "
                        "in the checkpoint's files",
                        f->d.ntensors - nrefused - plan.ntensors,
                        f->d.ntensors);
    }
    size_t kept = 0;
    for (size_t i = 0; i < plan.ntensors; i++)
        kept += plan.tensors[i].nchunks;
    f->frames = calloc(kept + 1, sizeof *f->frames);
    f->strided = calloc(kept + 1, sizeof *f->strided);
    ckpt_index_tensor *sorted = calloc(f->d.ntensors + 1, sizeof *sorted);
    if (!f->frames || !f->strided || !sorted) {
        free(sorted);
        ckpt_plan_free(&plan);
        return ckpt_err(err, -ENOMEM, "out of memory");
    }
    f->nchunks = kept;
    /* plan tensors are in fqn order; find each one's tensor record */
    for (size_t i = 0; i < plan.ntensors; i++) {
        size_t src = f->pend[plan.tensors[i].chunks[0]].tensor;
        sorted[i] = f->d.tensors[src];
        f->d.tensors[src].fqn = NULL;
    }
    /* the refused ones after them, merged in by merge_refused */
    for (size_t i = 0, k = plan.ntensors; i < f->d.ntensors; i++)
        if (f->d.tensors[i].refused) {
            sorted[k] = f->d.tensors[i];
            sorted[k++].chunks_loaded = 1;   /* it has none */
            f->d.tensors[i].fqn = NULL;
            f->d.tensors[i].refused = NULL;
        }
    for (size_t i = 0; i < f->d.ntensors; i++)
        free(f->d.tensors[i].fqn);
    free(f->d.tensors);
    f->d.tensors = sorted;
    f->tensors_cap = f->d.ntensors;
    size_t g = 0;
    for (size_t i = 0; rc == 0 && i < plan.ntensors; i++)
        rc = fill_tensor(f, &f->d.tensors[i], &plan.tensors[i], &g, err);
    ckpt_plan_free(&plan);
    if (rc == 0 && nrefused)
        rc = merge_refused(f, err);
    qsort(f->d.meta, f->d.nmeta, sizeof *f->d.meta, cmp_kv);
    return rc;
}
