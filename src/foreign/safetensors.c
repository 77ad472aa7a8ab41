/*
 * safetensors.c - safetensors files described for the reader (see
 * builder.h).  A file is an 8-byte little-endian header length N, N bytes
 * of JSON mapping each tensor name to {dtype, shape, data_offsets [b, e)}
 * (relative to the data after the header) plus an optional __metadata__
 * object of strings, then the data.  The header is validated as the format
 * requires: N at most 100,000,000 and inside the file, each tensor's
 * bytes in bounds and exactly numel * itemsize long, and the tensors
 * tiling the data without overlaps or holes; a tensor of a dtype ckptfs
 * lacks is listed but refused alone (ckpt_foreign_refuse), by name.  A
 * directory is the files its model.safetensors.index.json names (every
 * tensor of its weight_map must be in the file it names), or else all its
 * *.safetensors.
 */
#include "foreign/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/json.h"

#define ST_MAX_HEADER ((uint64_t)100000000)
#define ST_MAX_INDEX ((uint64_t)1 << 30)
#define INDEX_JSON "model.safetensors.index.json"

static const struct {
    const char *name;
    ckpt_dtype dt;
} DTYPES[] = {
    { "F64", CKPT_F64 }, { "F32", CKPT_F32 }, { "F16", CKPT_F16 },
    { "BF16", CKPT_BF16 }, { "F8_E4M3", CKPT_F8E4M3 },
    { "F8_E5M2", CKPT_F8E5M2 }, { "I64", CKPT_I64 }, { "I32", CKPT_I32 },
    { "I16", CKPT_I16 }, { "I8", CKPT_I8 }, { "U64", CKPT_U64 },
    { "U32", CKPT_U32 }, { "U16", CKPT_U16 }, { "U8", CKPT_U8 },
    { "BOOL", CKPT_BOOL }, { "C64", CKPT_C64 },
    { "F8_E4M3FNUZ", CKPT_F8E4M3FNUZ }, { "F8_E5M2FNUZ", CKPT_F8E5M2FNUZ },
    { "F8_E8M0", CKPT_F8E8M0 },
};

static ckpt_dtype st_dtype(const char *s)
{
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (strcmp(DTYPES[i].name, s) == 0)
            return DTYPES[i].dt;
    return CKPT_DTYPE_INVALID;
}

/* A tensor's byte range in the data, for the tiling check. */
typedef struct span {
    const char *name;
    uint64_t b, e;
} span;

static int cmp_span(const void *pa, const void *pb)
{
    const span *a = pa, *b = pb;
    if (a->b != b->b)
        return a->b < b->b ? -1 : 1;
    return a->e < b->e ? -1 : a->e > b->e;
}

static int cmp_name(const void *pa, const void *pb)
{
    return strcmp(((const span *)pa)->name, ((const span *)pb)->name);
}

/* Checks that the spans tile [0, data_len) exactly and that no name
 * repeats. */
static int check_tiling(span *v, size_t n, uint64_t data_len,
                        const char *path, ckpt_error *err)
{
    qsort(v, n, sizeof *v, cmp_name);
    for (size_t i = 1; i < n; i++)
        if (strcmp(v[i - 1].name, v[i].name) == 0)
            return ckpt_err(err, -EINVAL, "%s: tensor '%s' appears twice in "
                            "the header", path, v[i].name);
    qsort(v, n, sizeof *v, cmp_span);
    uint64_t end = 0;
    const char *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        if (v[i].b < end)
            return ckpt_err(err, -EINVAL, "%s: tensors '%s' and '%s' overlap "
                            "(data bytes %llu..%llu and %llu..%llu)", path,
                            prev, v[i].name, (unsigned long long)v[i - 1].b,
                            (unsigned long long)v[i - 1].e,
                            (unsigned long long)v[i].b,
                            (unsigned long long)v[i].e);
        if (v[i].b > end)
            return ckpt_err(err, -EINVAL, "%s: data bytes %llu..%llu belong "
                            "to no tensor (the format allows no holes)", path,
                            (unsigned long long)end,
                            (unsigned long long)v[i].b);
        end = v[i].e;
        prev = v[i].name;
    }
    if (end != data_len)
        return ckpt_err(err, -EINVAL, "%s: data bytes %llu..%llu after the "
                        "last tensor belong to no tensor", path,
                        (unsigned long long)end,
                        (unsigned long long)data_len);
    return 0;
}

int ckpt_st_entry_parse(const ckpt_st_header *h, const char *path,
                        const char *name, const json_val *e,
                        ckpt_st_entry *out, ckpt_error *err)
{
    const json_val *dt = json_get(e, "dtype"), *sh = json_get(e, "shape");
    const json_val *off = json_get(e, "data_offsets");
    if (e->type != JSON_OBJECT || !dt || dt->type != JSON_STRING || !sh ||
        sh->type != JSON_ARRAY || !off || off->type != JSON_ARRAY ||
        off->n != 2)
        return ckpt_err(err, -EINVAL, "%s: tensor '%s': the header entry "
                        "needs dtype, shape and data_offsets [begin, end]",
                        path, name);
    if (sh->n > CKPT_MAX_DIMS)
        return ckpt_err(err, -EINVAL, "%s: tensor '%s': %zu dims (at most "
                        "%d)", path, name, sh->n, CKPT_MAX_DIMS);
    uint64_t numel = 1;
    for (size_t k = 0; k < sh->n; k++) {
        const json_val *x = &sh->items[k];
        if (x->type != JSON_NUMBER || !x->is_int || x->i < 0 ||
            __builtin_mul_overflow(numel, (uint64_t)x->i, &numel))
            return ckpt_err(err, -EINVAL, "%s: tensor '%s': bad shape", path,
                            name);
        out->shape[k] = x->i;
    }
    const json_val *b = &off->items[0], *en = &off->items[1];
    uint64_t nbytes;
    if (b->type != JSON_NUMBER || !b->is_int || b->i < 0 ||
        en->type != JSON_NUMBER || !en->is_int || en->i < b->i)
        return ckpt_err(err, -EINVAL, "%s: tensor '%s': bad data_offsets",
                        path, name);
    if ((uint64_t)en->i > h->data_len)
        return ckpt_err(err, -EINVAL, "%s: tensor '%s': data_offsets "
                        "[%lld, %lld] run past the end of the data (%llu "
                        "bytes)", path, name, (long long)b->i,
                        (long long)en->i, (unsigned long long)h->data_len);
    out->ndim = (int)sh->n;
    out->begin = (uint64_t)b->i;
    out->end = (uint64_t)en->i;
    /* checked last, so that a dtype ckptfs lacks leaves the rest of the
     * entry parsed and checked: the tensor can still be listed */
    ckpt_dtype d = out->dtype = st_dtype(dt->s);
    if (d == CKPT_DTYPE_INVALID)
        return ckpt_err(err, -ENOTSUP, "%s: tensor '%s': unsupported dtype "
                        "'%s'", path, name, dt->s);
    if (__builtin_mul_overflow(numel, ckpt_dtype_size(d), &nbytes) ||
        nbytes != (uint64_t)(en->i - b->i))
        return ckpt_err(err, -EINVAL, "%s: tensor '%s': data_offsets span "
                        "%lld bytes, but its dtype and shape need %llu", path,
                        name, (long long)(en->i - b->i),
                        (unsigned long long)nbytes);
    return 0;
}

/* One tensor entry of the header, added to f; one of a dtype ckptfs
 * lacks is listed and refused alone (its reads fail naming it and its
 * dtype), its bytes still counted in the file's tiling. */
static int add_entry(ckpt_foreign *f, const ckpt_st_header *h,
                     const char *path, const char *file, const char *name,
                     const json_val *e, span *sp, ckpt_error *err)
{
    ckpt_st_entry en;
    ckpt_error perr = { 0 };
    int64_t zero[CKPT_MAX_DIMS] = { 0 };
    int rc = ckpt_st_entry_parse(h, path, name, e, &en, &perr);
    if (rc && rc != -ENOTSUP)
        return ckpt_err(err, rc, "%s", perr.msg);
    *sp = (span){ name, en.begin, en.end };
    long t = ckpt_foreign_add_tensor(f, name, en.dtype, en.ndim, en.shape,
                                     err);
    if (t < 0)
        return (int)t;
    if (rc)
        return ckpt_foreign_refuse(f, (size_t)t, perr.msg, err);
    return ckpt_foreign_add_chunk(f, (size_t)t, zero, en.shape, file,
                                  h->data_start + en.begin, NULL,
                                  en.end - en.begin, err);
}

/* The header's length at byte `base` of fd (in *len), refusing one over
 * the format's limit or past the file; sets h's data range. */
static int header_bounds(int fd, const char *path, uint64_t base,
                         ckpt_st_header *h, uint64_t *len, ckpt_error *err)
{
    struct stat st;
    unsigned char lenbuf[8];
    uint64_t n = 0, size = 0;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = ckpt_err_sys(err, -errno, "%s", path);
    else if ((size = (uint64_t)st.st_size) < base || size - base < 8)
        rc = ckpt_err(err, -EINVAL, "%s: %llu bytes from byte %llu: too "
                      "short for a safetensors header", path,
                      (unsigned long long)(size > base ? size - base : 0),
                      (unsigned long long)base);
    if (rc == 0)
        rc = ckpt_pread_full(fd, lenbuf, 8, base, path, err);
    for (int i = 7; rc == 0 && i >= 0; i--)
        n = n << 8 | lenbuf[i];
    if (rc == 0 && n > ST_MAX_HEADER)
        rc = ckpt_err(err, -EINVAL, "%s: header of %llu bytes is over the "
                      "format's limit of %llu", path, (unsigned long long)n,
                      (unsigned long long)ST_MAX_HEADER);
    else if (rc == 0 && n > size - base - 8)
        rc = ckpt_err(err, -EINVAL, "%s: header of %llu bytes is longer than "
                      "the file (%llu bytes)", path, (unsigned long long)n,
                      (unsigned long long)size);
    if (rc)
        return rc;
    h->data_start = base + 8 + n;
    h->data_len = size - h->data_start;
    *len = n;
    return 0;
}

/* The header begins as a JSON object: '{' is its first byte. */
static int header_starts(int fd, const char *path, uint64_t base,
                         uint64_t n, ckpt_error *err)
{
    char c = 0;
    int rc = n ? ckpt_pread_full(fd, &c, 1, base + 8, path, err) : 0;
    if (rc == 0 && c != '{')
        rc = ckpt_err(err, -EINVAL, "%s: the header is not a JSON object",
                      path);
    return rc;
}

int ckpt_st_header_read(int fd, const char *path, uint64_t base,
                        ckpt_st_header *h, ckpt_error *err)
{
    memset(h, 0, sizeof *h);
    char *hdr = NULL;
    uint64_t n;
    int rc = header_bounds(fd, path, base, h, &n, err);
    if (rc == 0)
        rc = header_starts(fd, path, base, n, err);
    if (rc == 0 && !(hdr = malloc(n + 1)))
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    if (rc == 0)
        rc = ckpt_pread_full(fd, hdr, n, base + 8, path, err);
    if (rc) {
        free(hdr);
        return rc;
    }
    rc = json_parse(hdr, n, path, &h->j, err);
    if (rc == 0 && h->j.type != JSON_OBJECT)
        rc = ckpt_err(err, -EINVAL, "%s: the header is not a JSON object",
                      path);
    free(hdr);
    if (rc)
        json_free(&h->j);
    return rc;
}

void ckpt_st_header_free(ckpt_st_header *h)
{
    json_free(&h->j);
}

/* What the walk of one file's header adds its members to. */
typedef struct file_walk {
    ckpt_foreign *f;
    const ckpt_st_header *h;
    const char *path, *file;
    int fd;
    span *spans;
    size_t nspans, cap;
} file_walk;

/* The header's text (from byte 8 of the file), piece by piece, for
 * json_walk. */
static int read_text(void *arg, char *buf, size_t n, uint64_t off,
                     ckpt_error *err)
{
    const file_walk *w = arg;
    return ckpt_pread_full(w->fd, buf, n, 8 + off, w->path, err);
}

/* One member of a header: an entry of __metadata__ (outer), a
 * __metadata__ that is not an object (refused), or a tensor. */
static int add_member(void *arg, const char *outer, const char *key,
                      const json_val *v, ckpt_error *err)
{
    file_walk *w = arg;
    if (outer) {
        if (v->type != JSON_STRING)
            return ckpt_err(err, -EINVAL, "%s: __metadata__ value of '%s' is "
                            "not a string", w->path, key);
        return ckpt_foreign_set_meta(w->f, key, v->s, err);
    }
    if (strcmp(key, "__metadata__") == 0)   /* walked when an object */
        return ckpt_err(err, -EINVAL, "%s: __metadata__ is not an object",
                        w->path);
    if (w->nspans == w->cap) {
        size_t cap = w->cap ? w->cap + w->cap / 2 : 64;
        span *s = realloc(w->spans, cap * sizeof *s);
        if (!s)
            return ckpt_err(err, -ENOMEM, "out of memory");
        w->spans = s;
        w->cap = cap;
    }
    span *sp = &w->spans[w->nspans];
    int rc = add_entry(w->f, w->h, w->path, w->file, key, v, sp, err);
    if (rc == 0) {
        /* the key dies with the member: name the span by the tensor's
         * own copy */
        sp->name = w->f->d.tensors[w->f->d.ntensors - 1].fqn;
        w->nspans++;
    }
    return rc;
}

/* Reads the header of file `file` (in f->dir) and adds its tensors,
 * member by member as json_walk reads it: what it holds at a time is the
 * records made so far, a window of the text and one member, never the
 * whole header nor a tree of it. */
static int add_file(ckpt_foreign *f, const char *file, ckpt_error *err)
{
    char path[4096];
    int rc = ckpt_path_join(path, sizeof path, f->dir, file, err);
    if (rc)
        return rc;
    int fd = ckpt_foreign_openat(f, file, err);
    if (fd < 0)
        return fd;
    ckpt_st_header h = { 0 };
    uint64_t n;
    file_walk w = { f, &h, path, file, fd, NULL, 0, 0 };
    rc = header_bounds(fd, path, 0, &h, &n, err);
    if (rc == 0)
        rc = header_starts(fd, path, 0, n, err);
    if (rc == 0)
        rc = json_walk(n, read_text, &w, path, "__metadata__", add_member,
                       &w, err);
    close(fd);
    if (rc == 0)
        rc = check_tiling(w.spans, w.nspans, h.data_len, path, err);
    free(w.spans);
    return rc;
}

/* ---------------------------------------------------------------- dirs */

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The distinct file names of the weight_map, sorted. */
static int index_files(const json_val *wm, const char *path, char ***out,
                       size_t *n, ckpt_error *err)
{
    char **v = calloc(wm->n + 1, sizeof *v);
    if (!v)
        return ckpt_err(err, -ENOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < wm->n; i++) {
        if (wm->items[i].type != JSON_STRING) {
            free(v);
            return ckpt_err(err, -EINVAL, "%s: weight_map value of '%s' is "
                            "not a file name", path, wm->keys[i]);
        }
        v[k++] = wm->items[i].s;
    }
    qsort(v, k, sizeof *v, cmp_cstr);
    size_t u = 0;
    for (size_t i = 0; i < k; i++)
        if (u == 0 || strcmp(v[u - 1], v[i]) != 0)
            v[u++] = v[i];
    *out = v;
    *n = u;
    return 0;
}

/* Every weight_map entry must be a tensor of the file it names (under
 * `sub`/, when not NULL). */
static int check_weight_map(const ckpt_foreign *f, const json_val *wm,
                            const char *sub, const char *path,
                            ckpt_error *err)
{
    size_t skip = sub ? strlen(sub) + 1 : 0;
    span *v = calloc(f->npend + 1, sizeof *v);
    if (!v)
        return ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < f->npend; i++)
        v[i] = (span){ f->d.tensors[f->pend[i].tensor].fqn, i, 0 };
    qsort(v, f->npend, sizeof *v, cmp_name);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < wm->n; i++) {
        span key = { wm->keys[i], 0, 0 };
        const span *s = bsearch(&key, v, f->npend, sizeof *v, cmp_name);
        if (!s)
            rc = ckpt_err(err, -EINVAL, "%s: tensor '%s' is not in %s, the "
                          "file its weight_map names", path, wm->keys[i],
                          wm->items[i].s);
        else if (strcmp(f->pend[s->b].file + skip, wm->items[i].s) != 0)
            rc = ckpt_err(err, -EINVAL, "%s: tensor '%s' is in %s, not in %s "
                          "as its weight_map says", path, wm->keys[i],
                          f->pend[s->b].file, wm->items[i].s);
    }
    for (size_t i = 1; rc == 0 && i < f->npend; i++)
        if (strcmp(v[i - 1].name, v[i].name) == 0)
            rc = ckpt_err(err, -EINVAL, "tensor '%s' is in both %s and %s",
                          v[i].name, f->pend[v[i - 1].b].file,
                          f->pend[v[i].b].file);
    free(v);
    return rc;
}

static int add_index_meta(ckpt_foreign *f, const json_val *m,
                          const char *path, ckpt_error *err)
{
    if (!m)
        return 0;
    if (m->type != JSON_OBJECT)
        return ckpt_err(err, -EINVAL, "%s: metadata is not an object", path);
    for (size_t i = 0; i < m->n; i++) {
        const json_val *x = &m->items[i];
        if (x->type != JSON_STRING && x->type != JSON_NUMBER)
            continue;   /* only scalars become metadata values */
        int rc = ckpt_foreign_set_meta(f, m->keys[i], x->s, err);
        if (rc)
            return rc;
    }
    return 0;
}

/* The checkpoint that dir's (or, with `sub`, dir/sub's) index names; its
 * files are named relative to dir either way. */
static int open_indexed(ckpt_foreign *f, const char *dir, const char *sub,
                        ckpt_error *err)
{
    char path[4096], rel[4096], *text = NULL, **files = NULL;
    size_t len = 0, nfiles = 0;
    json_val j = { 0 };
    f->index_file = sub ? CKPT_HF_SHARDED "/" INDEX_JSON : INDEX_JSON;
    int rc = ckpt_path_join(path, sizeof path, dir, f->index_file, err);
    if (rc == 0)
        rc = ckpt_foreign_slurp(f, f->index_file, ST_MAX_INDEX, &text, &len,
                                err);
    if (rc == 0)
        rc = json_parse(text, len, path, &j, err);
    const json_val *wm = json_get(&j, "weight_map");
    if (rc == 0 && (!wm || wm->type != JSON_OBJECT))
        rc = ckpt_err(err, -EINVAL, "%s: no weight_map object", path);
    if (rc == 0)
        rc = add_index_meta(f, json_get(&j, "metadata"), path, err);
    if (rc == 0)
        rc = index_files(wm, path, &files, &nfiles, err);
    for (size_t i = 0; rc == 0 && i < nfiles; i++) {
        rc = ckpt_foreign_check_relpath(files[i], path, err);
        if (rc == 0 && sub)
            rc = ckpt_path_join(rel, sizeof rel, sub, files[i], err);
        if (rc == 0)
            rc = add_file(f, sub ? rel : files[i], err);
    }
    if (rc == 0)
        rc = check_weight_map(f, wm, sub, path, err);
    free(files);
    json_free(&j);
    free(text);
    return rc;
}

static int open_all(ckpt_foreign *f, const char *dir, ckpt_error *err)
{
    struct dirent **ents;
    int n = scandir(dir, &ents, NULL, alphasort);
    if (n < 0)
        return ckpt_err_sys(err, -errno, "%s", dir);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        const char *name = ents[i]->d_name;
        size_t len = strlen(name);
        if (rc == 0 && name[0] != '.' && len > 12 &&
            strcmp(name + len - 12, ".safetensors") == 0)
            rc = add_file(f, name, err);
        free(ents[i]);
    }
    free(ents);
    if (rc == 0)
        rc = check_weight_map(f, &(json_val){ .type = JSON_OBJECT }, NULL,
                              dir, err);
    return rc;
}

int ckpt_safetensors_open_hf(const char *dir, ckpt_foreign *f,
                             ckpt_error *err)
{
    if (!(f->dir = strdup(dir)))
        return ckpt_err(err, -ENOMEM, "out of memory");
    int rc = open_indexed(f, dir, CKPT_HF_SHARDED, err);
    if (rc == 0)
        rc = ckpt_foreign_set_meta(f, "source_format", "safetensors", err);
    return rc;
}

int ckpt_safetensors_open(const char *path, ckpt_foreign *f, ckpt_error *err)
{
    const char *file;
    int rc = ckpt_foreign_set_dir(f, path, &file, err);
    if (rc == 0 && file) {
        rc = add_file(f, file, err);
    } else if (rc == 0) {
        rc = ckpt_foreign_dir_has(path, INDEX_JSON)
                 ? open_indexed(f, path, NULL, err) : open_all(f, path, err);
    }
    if (rc == 0)
        rc = ckpt_foreign_set_meta(f, "source_format", "safetensors", err);
    return rc;
}
