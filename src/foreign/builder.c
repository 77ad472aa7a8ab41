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
    for (size_t i = 0; f->src && i < f->nchunks; i++)
        free(f->src[i].strided);
    for (size_t i = 0; i < f->npend; i++) {
        free(f->pend[i].dims);
        free(f->pend[i].strided);
    }
    free(f->pend);
    for (size_t i = 0; i < f->nnames; i++)
        free(f->names[i]);
    free(f->names);
    free(f->src);
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
    /* the spare room is not zeroed: each element is set when added, and
     * pages never touched cost no memory */
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
    if (ckpt_index_tensor_name(t, fqn, ndim, shape))
        return ckpt_err(err, -ENOMEM, "out of memory");
    t->dtype = dt;
    return (long)f->d.ntensors++;
}

/* The pooled copy of file name `file`: the chunks of one file come
 * together, so the last name is the one asked for again. */
static const char *pool_name(ckpt_foreign *f, const char *file)
{
    if (f->nnames && strcmp(f->names[f->nnames - 1], file) == 0)
        return f->names[f->nnames - 1];
    if (grow((void **)&f->names, &f->names_cap, f->nnames + 1,
             sizeof *f->names))
        return NULL;
    char *s = strdup(file);
    if (s)
        f->names[f->nnames++] = s;
    return s;
}

/* Chunk c's offsets and sizes (t its tensor), whether kept or implied
 * (the whole tensor). */
static const int64_t *chunk_offsets(const ckpt_foreign_chunk *c)
{
    static const int64_t zero[CKPT_MAX_DIMS];
    return c->dims ? c->dims : zero;
}

static const int64_t *chunk_sizes(const ckpt_index_tensor *t,
                                  const ckpt_foreign_chunk *c)
{
    return c->dims ? c->dims + t->ndim : t->shape;
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
    const ckpt_index_tensor *ti = &f->d.tensors[t];
    int nd = ti->ndim, whole = 1;
    for (int k = 0; k < nd; k++)
        whole &= offsets[k] == 0 && sizes[k] == ti->shape[k];
    c->tensor = t;
    c->data_offset = data_offset;
    c->span = span;
    if (!(c->file = pool_name(f, file)))
        return ckpt_err(err, -ENOMEM, "out of memory");
    if (!whole && !(c->dims = malloc(2 * (size_t)nd * sizeof *c->dims)))
        return ckpt_err(err, -ENOMEM, "out of memory");
    for (int k = 0; !whole && k < nd; k++) {
        c->dims[k] = offsets[k];
        c->dims[nd + k] = sizes[k];
    }
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
            free(f->pend[i].dims);
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

int ckpt_foreign_dir_has(const char *dir, const char *name)
{
    char p[4096];
    int n = snprintf(p, sizeof p, "%s/%s", dir, name);
    return n > 0 && (size_t)n < sizeof p && access(p, F_OK) == 0;
}

/* Appended, whether the key is set already or not: finish keeps the
 * last value of each key (a search here would make a header of many keys
 * cost their square). */
int ckpt_foreign_set_meta(ckpt_foreign *f, const char *key,
                          const char *value, ckpt_error *err)
{
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

/* A metadata entry and when it was set, for meta_finish's sort. */
typedef struct kv_at {
    const ckpt_kv *kv;
    size_t at;
} kv_at;

static int cmp_kv_at(const void *pa, const void *pb)
{
    const kv_at *a = pa, *b = pb;
    int c = strcmp(a->kv->key, b->kv->key);
    return c ? c : a->at < b->at ? -1 : a->at > b->at;
}

/* Sorts the metadata by key, keeping of a key set several times the
 * value set last. */
static int meta_finish(ckpt_foreign *f, ckpt_error *err)
{
    size_t n = f->d.nmeta, k = 0;
    kv_at *v = calloc(n + 1, sizeof *v);
    ckpt_kv *out = calloc(n + 1, sizeof *out);
    if (!v || !out) {
        free(v);
        free(out);
        return ckpt_err(err, -ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        v[i] = (kv_at){ &f->d.meta[i], i };
    qsort(v, n, sizeof *v, cmp_kv_at);
    for (size_t i = 0; i < n; i++) {
        ckpt_kv *kv = (ckpt_kv *)v[i].kv;
        if (i + 1 < n && strcmp(kv->key, v[i + 1].kv->key) == 0) {
            free(kv->key);      /* set again later */
            free(kv->value);
            free(kv->writer);
        } else {
            out[k++] = *kv;
        }
    }
    free(v);
    free(f->d.meta);
    f->d.meta = out;
    f->d.nmeta = k;
    f->meta_cap = n + 1;
    return 0;
}


/* Records the distinct files of the chunks, sorted, with their sizes. */
static int build_files(ckpt_foreign *f, ckpt_error *err)
{
    /* the chunks' names, once per run of chunks of one file */
    const char **names = calloc(f->npend + 1, sizeof *names);
    if (!names)
        return ckpt_err(err, -ENOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < f->npend; i++)
        if (n == 0 || names[n - 1] != f->pend[i].file)
            names[n++] = f->pend[i].file;
    qsort(names, n, sizeof *names, cmp_str);
    f->d.files = calloc(n + 1, sizeof *f->d.files);
    int rc = f->d.files ? 0 : ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; rc == 0 && i < n; i++) {
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
    free((void *)names);
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

/* The kept chunks of the tensors that have any, tensors in FQN order:
 * tensor i's are chunk[start[i] .. start[i + 1]) (indices into f->pend),
 * in row-major order of their offsets. */
typedef struct groups {
    size_t n;
    size_t *start;
    size_t *chunk;
} groups;

static void groups_free(groups *g)
{
    free(g->start);
    free(g->chunk);
    memset(g, 0, sizeof *g);
}

static int groups_alloc(groups *g, size_t n, size_t nchunks)
{
    g->n = n;
    g->start = calloc(n + 1, sizeof *g->start);
    g->chunk = calloc(nchunks + 1, sizeof *g->chunk);
    return g->start && g->chunk ? 0 : -ENOMEM;
}

/* Runs the planner over all chunks: bounds, overlaps, coverage, dtype and
 * shape agreement; chunks that are replicas of others are dropped. */
static int plan_chunks(ckpt_foreign *f, groups *g, ckpt_error *err)
{
    ckpt_piece_rec *p = calloc(f->npend + 1, sizeof *p);
    if (!p)
        return ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < f->npend; i++) {
        const ckpt_foreign_chunk *c = &f->pend[i];
        const ckpt_index_tensor *t = &f->d.tensors[c->tensor];
        size_t nd = (size_t)t->ndim * sizeof *t->shape;
        p[i].fqn = t->fqn;
        p[i].dtype = t->dtype;
        p[i].ndim = t->ndim;
        memcpy(p[i].shape, t->shape, nd);
        memcpy(p[i].offsets, chunk_offsets(c), nd);
        memcpy(p[i].sizes, chunk_sizes(t, c), nd);
        p[i].raw_bytes = ckpt_box_numel(t->ndim, p[i].sizes) *
                         ckpt_dtype_size(t->dtype);
        p[i].file = (char *)c->file;
        p[i].writer = (char *)c->file;
    }
    ckpt_plan_opts po = { 0 };
    ckpt_plan plan;
    int rc = ckpt_plan_build(p, f->npend, &po, &plan, err);
    free(p);
    if (rc)
        return rc;
    size_t kept = 0;
    for (size_t i = 0; i < plan.ntensors; i++)
        kept += plan.tensors[i].nchunks;
    if (groups_alloc(g, plan.ntensors, kept))
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0, k = 0; rc == 0 && i < plan.ntensors; i++) {
        g->start[i] = k;
        for (size_t j = 0; j < plan.tensors[i].nchunks; j++)
            g->chunk[k++] = plan.tensors[i].chunks[j];
        g->start[i + 1] = k;
    }
    ckpt_plan_free(&plan);
    return rc;
}

/* A tensor's name and its one chunk, for the sort of whole_chunks. */
typedef struct named {
    const char *fqn;
    size_t chunk;
} named;

static int cmp_named(const void *a, const void *b)
{
    return strcmp(((const named *)a)->fqn, ((const named *)b)->fqn);
}

/* What the planner would make of chunks that are each a whole tensor, one
 * per tensor, under distinct names (a safetensors or torch.save
 * checkpoint): each kept, tensors in name order, after the same checks of
 * each one alone (name, dtype, shape).  Costs a few words per tensor,
 * where the planner's records cost a kilobyte.  Returns 1 when it made
 * *g, 0 when the chunks are not so (the planner decides), or a negative
 * errno. */
static int whole_chunks(ckpt_foreign *f, groups *g, ckpt_error *err)
{
    for (size_t i = 0; i < f->npend; i++)
        if (f->pend[i].dims)
            return 0;
    unsigned char *seen = calloc(f->d.ntensors + 1, 1);
    named *v = calloc(f->npend + 1, sizeof *v);
    int rc = seen && v ? 1 : ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; rc == 1 && i < f->npend; i++) {
        size_t t = f->pend[i].tensor;
        if (seen[t]++)
            rc = 0;   /* replicas */
        v[i] = (named){ f->d.tensors[t].fqn, i };
    }
    free(seen);
    if (rc == 1)
        qsort(v, f->npend, sizeof *v, cmp_named);
    for (size_t i = 1; rc == 1 && i < f->npend; i++)
        if (strcmp(v[i - 1].fqn, v[i].fqn) == 0)
            rc = 0;   /* one name, several tensors */
    ckpt_piece_rec p = { 0 };
    for (size_t i = 0; rc == 1 && i < f->npend; i++) {
        const ckpt_foreign_chunk *c = &f->pend[v[i].chunk];
        const ckpt_index_tensor *t = &f->d.tensors[c->tensor];
        p.fqn = t->fqn;
        p.dtype = t->dtype;
        p.ndim = t->ndim;
        memcpy(p.shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
        p.writer = (char *)c->file;
        if (ckpt_plan_check_piece(&p, err))
            rc = -EINVAL;
    }
    if (rc == 1 && groups_alloc(g, f->npend, f->npend))
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; rc == 1 && i < f->npend; i++) {
        g->start[i] = i;
        g->chunk[i] = v[i].chunk;
    }
    if (rc == 1)
        g->start[f->npend] = f->npend;
    else
        groups_free(g);
    free(v);
    return rc;
}

int ckpt_foreign_frames(const ckpt_foreign_src *src, uint64_t raw,
                        size_t isz, ckpt_frame_rec **out, uint64_t *n)
{
    uint64_t step = CKPT_DEFAULT_FRAME_SIZE / isz * isz;
    const ckpt_strided *sd = src->strided;
    *n = raw == 0 ? 0 : sd ? 1 : (raw + step - 1) / step;
    if (!out)
        return 0;
    if (*n > SIZE_MAX / sizeof **out ||
        !(*out = calloc(*n ? (size_t)*n : 1, sizeof **out)))
        return -ENOMEM;
    if (sd && raw) {
        (*out)[0] = (ckpt_frame_rec){ src->data_offset, src->span, 0, raw, 0,
                                      sd->zstd ? CKPT_CODEC_ZSTD
                                               : CKPT_CODEC_RAW, 0 };
        return 0;
    }
    for (uint64_t i = 0; i < *n; i++) {
        uint64_t off = i * step, len = raw - off < step ? raw - off : step;
        (*out)[i] = (ckpt_frame_rec){ src->data_offset + off, len, off, len,
                                      0, CKPT_CODEC_RAW, 0 };
    }
    return 0;
}

/* Where each kept chunk's bytes are (f->src, in the groups' order) and
 * its file (file[]); the chunks' strides move there.  Sets *whole when
 * every chunk is its whole tensor: their pending records are then no
 * longer needed. */
static void place_chunks(ckpt_foreign *f, const groups *gr, int *file,
                         int *whole)
{
    *whole = 1;
    for (size_t k = 0; k < gr->start[gr->n]; k++) {
        ckpt_foreign_chunk *c = &f->pend[gr->chunk[k]];
        f->src[k] = (ckpt_foreign_src){ c->data_offset, c->span,
                                        c->strided };
        c->strided = NULL;
        file[k] = file_index(f, c->file);
        *whole &= c->dims == NULL;
    }
}

/* Gives tensor t (the groups' i-th) its n chunks, the kept chunks
 * *g.. (their pending records in f->pend through gr, unless every
 * chunk is its whole tensor and they are gone: gr->chunk NULL). */
static int fill_tensor(ckpt_foreign *f, ckpt_index_tensor *t,
                       const groups *gr, size_t i, const int *file,
                       size_t *g, ckpt_error *err)
{
    static const int64_t zero[CKPT_MAX_DIMS];
    size_t n = gr->start[i + 1] - gr->start[i];
    size_t isz = ckpt_dtype_size(t->dtype);
    size_t nd = (size_t)t->ndim * sizeof *t->shape;
    if (ckpt_index_tensor_alloc_chunks(t, n))
        return ckpt_err(err, -ENOMEM, "out of memory");
    t->nbytes = ckpt_box_numel(t->ndim, t->shape) * isz;
    for (size_t k = 0; k < n; k++, (*g)++) {
        const ckpt_foreign_chunk *c =
            gr->chunk ? &f->pend[gr->chunk[gr->start[i] + k]] : NULL;
        const ckpt_foreign_src *src = &f->src[*g];
        ckpt_index_chunk *ch = &t->chunks[k];
        ch->id = (int64_t)*g;
        memcpy(ch->offsets, c ? chunk_offsets(c) : zero, nd);
        memcpy(ch->sizes, c ? chunk_sizes(t, c) : t->shape, nd);
        ch->file = file[*g];
        ch->raw_bytes = ckpt_box_numel(t->ndim, ch->sizes) * isz;
        ckpt_foreign_frames(src, ch->raw_bytes, isz, NULL, &ch->nframes);
        ch->stored_bytes = !ch->nframes ? 0
                           : src->strided ? src->span : ch->raw_bytes;
        t->stored_bytes += ch->stored_bytes;
        t->nframes += ch->nframes;
        if (ch->nframes)
            t->codec_mask |= 1u << (src->strided && src->strided->zstd
                                        ? CKPT_CODEC_ZSTD : CKPT_CODEC_RAW);
        const ckpt_index_file *fi = &f->d.files[ch->file];
        if (ch->stored_bytes && (src->data_offset > fi->size ||
                                 fi->size - src->data_offset < src->span))
            return ckpt_err(err, -EINVAL, "tensor '%s': chunk at bytes "
                            "%llu..%llu of %s runs past the end of the file "
                            "(%llu bytes)", t->fqn,
                            (unsigned long long)src->data_offset,
                            (unsigned long long)(src->data_offset +
                                                 src->span),
                            fi->path, (unsigned long long)fi->size);
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

/* The pending chunks and their file names, once finish has made the
 * model: nothing needs them any more. */
static void drop_pending(ckpt_foreign *f)
{
    for (size_t i = 0; i < f->npend; i++) {
        free(f->pend[i].dims);
        free(f->pend[i].strided);
    }
    free(f->pend);
    f->pend = NULL;
    f->npend = f->pend_cap = 0;
    for (size_t i = 0; i < f->nnames; i++)
        free(f->names[i]);
    free(f->names);
    f->names = NULL;
    f->nnames = f->names_cap = 0;
}

/* Puts tensor perm[i] at place i, for every i, in place (perm is a
 * permutation; it is consumed): a copy of the records would double
 * them. */
static void permute_tensors(ckpt_index_tensor *v, size_t *perm, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (perm[i] == SIZE_MAX || perm[i] == i)
            continue;
        ckpt_index_tensor tmp = v[i];
        size_t j = i;
        while (perm[j] != i) {
            size_t k = perm[j];
            v[j] = v[k];
            perm[j] = SIZE_MAX;   /* placed */
            j = k;
        }
        v[j] = tmp;
        perm[j] = SIZE_MAX;
    }
}

int ckpt_foreign_finish(ckpt_foreign *f, ckpt_error *err)
{
    groups gr = { 0 };
    int rc = build_files(f, err);
    if (rc == 0 && (rc = whole_chunks(f, &gr, err)) == 0)
        rc = plan_chunks(f, &gr, err);
    if (rc < 0)
        return rc;
    rc = 0;
    /* Tensors with no chunk at all are not in the plan: refuse them too
     * (a plan tensor exists for every tensor that has a chunk), unless
     * they are refused already. */
    size_t nrefused = 0;
    for (size_t i = 0; i < f->d.ntensors; i++)
        nrefused += f->d.tensors[i].refused != NULL;
    if (gr.n + nrefused != f->d.ntensors) {
        groups_free(&gr);
        return ckpt_err(err, -EINVAL, "%zu of the %zu tensors have no data "
                        "in the checkpoint's files",
                        f->d.ntensors - nrefused - gr.n, f->d.ntensors);
    }
    size_t kept = gr.start[gr.n];
    f->src = calloc(kept + 1, sizeof *f->src);
    size_t *perm = calloc(f->d.ntensors + 1, sizeof *perm);
    if (!f->src || !perm) {
        free(perm);
        groups_free(&gr);
        return ckpt_err(err, -ENOMEM, "out of memory");
    }
    f->nchunks = kept;
    /* the groups are in fqn order: each one's tensor record goes to its
     * place, the refused ones after them (merged in by merge_refused) */
    for (size_t i = 0; i < gr.n; i++)
        perm[i] = f->pend[gr.chunk[gr.start[i]]].tensor;
    for (size_t i = 0, k = gr.n; i < f->d.ntensors; i++)
        if (f->d.tensors[i].refused) {
            f->d.tensors[i].chunks_loaded = 1;   /* it has none */
            perm[k++] = i;
        }
    permute_tensors(f->d.tensors, perm, f->d.ntensors);
    free(perm);
    int whole, *file = calloc(kept + 1, sizeof *file);
    if (!file) {
        groups_free(&gr);
        return ckpt_err(err, -ENOMEM, "out of memory");
    }
    place_chunks(f, &gr, file, &whole);
    if (whole) {
        /* nothing left in them: gone before the chunks are made */
        drop_pending(f);
        free(gr.chunk);
        gr.chunk = NULL;
    }
    size_t g = 0;
    for (size_t i = 0; rc == 0 && i < gr.n; i++)
        rc = fill_tensor(f, &f->d.tensors[i], &gr, i, file, &g, err);
    free(file);
    groups_free(&gr);
    if (rc == 0)
        drop_pending(f);
    if (rc == 0 && nrefused)
        rc = merge_refused(f, err);
    if (rc == 0)
        rc = meta_finish(f, err);
    return rc;
}
