/*
 * dcp.c - PyTorch distributed checkpoints (torch.distributed.checkpoint,
 * and torch.distributed._shard.checkpoint of PyTorch 1.13) described for
 * the reader (see builder.h).
 *
 * `.metadata` is a pickled Metadata: state_dict_metadata maps each FQN to
 * a TensorStorageMetadata (properties with the dtype, global size, chunks
 * with offsets and sizes) or a BytesStorageMetadata; storage_data maps a
 * MetadataIndex (fqn, chunk offsets) to a _StorageInfo (relative_path,
 * offset, length) saying where that item's bytes are.  A tensor item is a
 * torch.save archive, whose storage bytes (with the tensor's strides) are
 * the chunk's data; a byte item is its bytes as they are (for an object
 * DCP saved, those of torch.save of it).
 */
#include "foreign/dcp.h"
#include "foreign/dcp_planner.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/shape.h"
#include "foreign/dcpst.h"
#include "foreign/dcpzs.h"
#include "foreign/pickle.h"
#include "foreign/torchsave.h"

/* Bounds on .metadata and on what its pickle may build. */
#define MAX_METADATA ((uint64_t)1 << 30)
#define MAX_PICKLE_MEM ((size_t)4 << 30)

/* One storage_data entry, sorted by (fqn, offsets) for lookups. */
typedef struct item_ref {
    const char *fqn;
    int ndim;               /* -1: no offsets (a byte item) */
    int64_t offsets[CKPT_MAX_DIMS];
    const pk_val *info;     /* the _StorageInfo */
} item_ref;

typedef struct dcp {
    ckpt_foreign *f;
    const char *dir;
    item_ref *items;
    size_t nitems;
    /* the file of the last item read, kept open */
    char *cur_path;
    int cur_fd;
    uint64_t cur_size;
    dcp_st_cache st;        /* safetensors blobs (dcpst.h) */
    ckpt_error *err;
} dcp;

/* ---------------------------------------------------------------- .metadata */

static int read_metadata(ckpt_foreign *f, unsigned char **buf, size_t *len,
                         ckpt_error *err)
{
    f->index_file = ".metadata";
    return ckpt_foreign_slurp(f, ".metadata", MAX_METADATA, (char **)buf,
                              len, err);
}

static int is_metadata(int g)
{
    return g == PKG_DCP_METADATA || g == PKG_SH_METADATA;
}

static int cmp_item(const void *pa, const void *pb)
{
    const item_ref *a = pa, *b = pb;
    int c = strcmp(a->fqn, b->fqn);
    if (c)
        return c;
    if (a->ndim != b->ndim)
        return a->ndim < b->ndim ? -1 : 1;
    for (int k = 0; k < a->ndim; k++)
        if (a->offsets[k] != b->offsets[k])
            return a->offsets[k] < b->offsets[k] ? -1 : 1;
    return 0;
}

/* Indexes storage_data by (fqn, offsets). */
static int index_items(dcp *x, const pk_val *sd)
{
    if (!sd || sd->type != PK_DICT)
        return ckpt_err(x->err, -EINVAL, "%s/.metadata: storage_data is "
                        "missing or not a dict", x->dir);
    x->items = calloc(sd->n / 2 + 1, sizeof *x->items);
    if (!x->items)
        return ckpt_err(x->err, -ENOMEM, "out of memory");
    for (size_t i = 0; i + 1 < sd->n; i += 2) {
        const pk_val *k = sd->items[i];
        const pk_val *fqn = pk_attr(k, "fqn"), *off = pk_attr(k, "offset");
        int g = pk_global_of(k);
        if ((g != PKG_DCP_INDEX && g != PKG_SH_INDEX) || !fqn ||
            fqn->type != PK_STR)
            return ckpt_err(x->err, -EINVAL, "%s/.metadata: a storage_data "
                            "key is not a MetadataIndex", x->dir);
        item_ref *it = &x->items[x->nitems++];
        it->fqn = fqn->s;
        it->info = sd->items[i + 1];
        if (!off || off->type == PK_NONE)
            it->ndim = -1;
        else if ((it->ndim = pk_dims(off, it->offsets)) < 0)
            return ckpt_err(x->err, -EINVAL, "%s/.metadata: storage_data "
                            "of '%s': bad offsets", x->dir, fqn->s);
    }
    qsort(x->items, x->nitems, sizeof *x->items, cmp_item);
    return 0;
}

static const pk_val *find_item(const dcp *x, const char *fqn, int ndim,
                               const int64_t *offsets)
{
    item_ref key = { fqn, ndim, { 0 }, NULL };
    for (int k = 0; k < ndim; k++)
        key.offsets[k] = offsets[k];
    const item_ref *it = bsearch(&key, x->items, x->nitems, sizeof key,
                                 cmp_item);
    return it ? it->info : NULL;
}

/* ---------------------------------------------------------------- items */

typedef struct item_src {
    int fd;
    uint64_t base, len;
    const char *path;
} item_src;

static int item_read(void *arg, void *buf, size_t n, uint64_t off,
                     ckpt_error *err)
{
    const item_src *s = arg;
    if (off > s->len || s->len - off < n)
        return ckpt_err(err, -EINVAL, "%s: reading past the end of the item "
                        "at bytes %llu..%llu", s->path,
                        (unsigned long long)s->base,
                        (unsigned long long)(s->base + s->len));
    return ckpt_pread_full(s->fd, buf, n, s->base + off, s->path, err);
}

/* Where an item is: its file (checked to lie inside dir), offset, length,
 * and whether it is a zstd stream (refusing other transforms). */
typedef struct item_loc {
    const char *file;
    uint64_t offset, length;
    int zstd;               /* through DCP's ZStandard extension */
} item_loc;

static int locate(dcp *x, const char *fqn, const pk_val *info,
                  item_loc *loc)
{
    int g = pk_global_of(info);
    const pk_val *p = pk_attr(info, "relative_path");
    const pk_val *o = pk_attr(info, "offset"), *l = pk_attr(info, "length");
    const pk_val *tr = pk_attr(info, "transform_descriptors");
    if ((g != PKG_DCP_STORAGE_INFO && g != PKG_SH_STORAGE_INFO) || !p ||
        p->type != PK_STR || !o || o->type != PK_INT || o->i < 0 || !l ||
        l->type != PK_INT || l->i < 0)
        return ckpt_err(x->err, -EINVAL, "%s/.metadata: tensor '%s': its "
                        "storage is not described by a _StorageInfo "
                        "(relative_path, offset, length)", x->dir, fqn);
    int zstd, rc = dcp_zs_transforms(tr, fqn, &zstd, x->err);
    if (rc == 0)
        rc = ckpt_foreign_check_relpath(p->s, ".metadata", x->err);
    if (rc)
        return rc;
    *loc = (item_loc){ p->s, (uint64_t)o->i, (uint64_t)l->i, zstd };
    return 0;
}

/* Opens loc's file (keeping the last one open) and checks the item lies
 * inside it. */
static int open_item(dcp *x, const char *fqn, const item_loc *loc,
                     item_src *src)
{
    char path[4096];
    int rc = ckpt_path_join(path, sizeof path, x->dir, loc->file, x->err);
    if (rc)
        return rc;
    if (!x->cur_path || strcmp(x->cur_path, path) != 0) {
        if (x->cur_fd >= 0)
            close(x->cur_fd);
        free(x->cur_path);
        x->cur_path = NULL;
        x->cur_fd = ckpt_foreign_openat(x->f, loc->file, x->err);
        if (x->cur_fd < 0)
            return ckpt_err_wrap(x->err, x->cur_fd, "tensor '%s'", fqn);
        struct stat st;
        if (fstat(x->cur_fd, &st) != 0)
            return ckpt_err_sys(x->err, -errno, "tensor '%s': %s", fqn,
                                path);
        x->cur_size = (uint64_t)st.st_size;
        if (!(x->cur_path = strdup(path)))
            return ckpt_err(x->err, -ENOMEM, "out of memory");
    }
    if (loc->offset > x->cur_size || x->cur_size - loc->offset < loc->length)
        return ckpt_err(x->err, -EINVAL, "tensor '%s': its item at bytes "
                        "%llu..%llu of %s lies past the end of the file "
                        "(%llu bytes)", fqn,
                        (unsigned long long)loc->offset,
                        (unsigned long long)(loc->offset + loc->length),
                        loc->file, (unsigned long long)x->cur_size);
    *src = (item_src){ x->cur_fd, loc->offset, loc->length, x->cur_path };
    return 0;
}

/* ---------------------------------------------------------------- entries */

static ckpt_dtype props_dtype(const pk_val *props)
{
    int g = pk_global_of(props);
    if (g != PKG_ST_PROPS && g != PKG_DCP_PROPS)
        return CKPT_DTYPE_INVALID;
    const pk_val *st = props->state, *dt = NULL;
    if (st && st->type == PK_TUPLE && st->n >= 1 &&
        st->items[0]->type == PK_GLOBAL)
        dt = st->items[0];            /* __getstate__: (dtype, layout, ...) */
    else
        dt = pk_attr(props, "dtype");
    return dt ? ckpt_torch_dtype(pk_global_of(dt)) : CKPT_DTYPE_INVALID;
}

/* The tensor an item's archive holds matches its chunk in .metadata. */
static int check_archive(dcp *x, const char *what, const ckpt_torch_tensor *tt,
                         ckpt_dtype dt, int ndim, const int64_t *size)
{
    if (tt->dtype != dt)
        return ckpt_err(x->err, -EINVAL, "%s: holds %s data where .metadata "
                        "says %s", what, ckpt_dtype_name(tt->dtype),
                        ckpt_dtype_name(dt));
    int same = tt->ndim == ndim;
    for (int k = 0; same && k < ndim; k++)
        same = tt->size[k] == size[k];
    if (!same)
        return ckpt_err(x->err, -EINVAL, "%s: its tensor's sizes differ from "
                        "the chunk's in .metadata", what);
    return 0;
}

/* A chunk whose item is a zstd stream of a torch.save archive. */
static int add_zstd_chunk(dcp *x, long t, const char *what, ckpt_dtype dt,
                          int ndim, const int64_t *off, const int64_t *size,
                          const item_loc *loc, const item_src *src)
{
    uint64_t nbytes;
    ckpt_torch_tensor tt;
    ckpt_zstd_src z;
    dcp_zs_item it = { src->fd, src->path, what, loc->offset, loc->length };
    int rc = ckpt_shape_nbytes(dt, ndim, size, &nbytes, what, x->err);
    if (rc == 0)
        rc = dcp_zs_tensor(&it, nbytes, &tt, &z, x->err);
    if (rc == 0)
        rc = check_archive(x, what, &tt, dt, ndim, size);
    if (rc)
        return rc;
    return ckpt_foreign_add_zstd_chunk(x->f, (size_t)t, off, size, loc->file,
                                       &z, tt.contiguous ? NULL : tt.stride,
                                       x->err);
}

/* A chunk whose item may be a safetensors blob's (dcpst.h): added, 1;
 * not one, 0. */
static int add_st_chunk(dcp *x, long t, const char *fqn, ckpt_dtype dt,
                        int ndim, const int64_t *off, const int64_t *size,
                        const item_loc *loc, const item_src *src)
{
    unsigned char head[9];
    size_t nh = sizeof head;
    if (x->cur_size - loc->offset < nh)
        return 0;   /* a blob's header runs past a short item, not a file */
    int rc = ckpt_pread_full(src->fd, head, nh, loc->offset, src->path,
                             x->err);
    if (rc || !dcp_st_looks_like(head, nh))
        return rc;
    uint64_t at;
    dcp_st_item it = { fqn, dt, ndim, off, size, loc->file, src->path,
                       src->fd, loc->offset, loc->length };
    if ((rc = dcp_st_locate(&x->st, &it, &at, x->err)) != 0)
        return rc;
    rc = ckpt_foreign_add_chunk(x->f, (size_t)t, off, size, loc->file, at,
                                NULL, loc->length, x->err);
    return rc ? rc : 1;
}

static int add_chunk(dcp *x, long t, const char *fqn, ckpt_dtype dt,
                     int ndim, const pk_val *chunk)
{
    int64_t off[CKPT_MAX_DIMS], size[CKPT_MAX_DIMS];
    int g = pk_global_of(chunk);
    if ((g != PKG_DCP_CHUNK_MD && g != PKG_SH_CHUNK_MD) ||
        pk_dims(pk_attr(chunk, "offsets"), off) != ndim ||
        pk_dims(pk_attr(chunk, "sizes"), size) != ndim)
        return ckpt_err(x->err, -EINVAL, "%s/.metadata: tensor '%s': a "
                        "chunk without offsets and sizes of %d dims", x->dir,
                        fqn, ndim);
    const pk_val *info = find_item(x, fqn, ndim, off);
    if (!info)
        return ckpt_err(x->err, -EINVAL, "%s/.metadata: tensor '%s': no "
                        "storage_data entry for a chunk", x->dir, fqn);
    item_loc loc;
    item_src src;
    ckpt_torch_tensor tt;
    char what[600];
    int rc = locate(x, fqn, info, &loc);
    if (rc == 0)
        rc = open_item(x, fqn, &loc, &src);
    if (rc)
        return rc;
    snprintf(what, sizeof what, "tensor '%.200s': item at bytes %llu..%llu "
             "of %.200s", fqn, (unsigned long long)loc.offset,
             (unsigned long long)(loc.offset + loc.length), loc.file);
    if (loc.zstd)
        return add_zstd_chunk(x, t, what, dt, ndim, off, size, &loc, &src);
    if ((rc = add_st_chunk(x, t, fqn, dt, ndim, off, size, &loc, &src)))
        return rc < 0 ? rc : 0;
    if ((rc = ckpt_torch_tensor_read(item_read, &src, loc.length, what, &tt,
                                     x->err)) != 0 ||
        (rc = check_archive(x, what, &tt, dt, ndim, size)) != 0)
        return rc;
    return ckpt_foreign_add_chunk(x->f, (size_t)t, off, size, loc.file,
                                  loc.offset + tt.data_offset,
                                  tt.contiguous ? NULL : tt.stride,
                                  tt.span_bytes, x->err);
}

/* Adds a tensor and its chunks; a tensor that cannot be read (a dtype
 * ckptfs lacks, an item that is not a tensor torch.save wrote, or that
 * needs a class outside the allowlist) is listed but refused alone
 * (ckpt_foreign_refuse), with the message naming it. */
static int add_tensor(dcp *x, const char *fqn, const pk_val *md)
{
    ckpt_dtype dt = props_dtype(pk_attr(md, "properties"));
    int64_t shape[CKPT_MAX_DIMS], none = 0;
    int ndim = pk_dims(pk_attr(md, "size"), shape);
    const pk_val *chunks = pk_attr(md, "chunks");
    if (ndim < 0 || !chunks || chunks->type != PK_LIST)
        return ckpt_err(x->err, -EINVAL, "%s/.metadata: tensor '%s': bad "
                        "size or chunks", x->dir, fqn);
    long t = dt == CKPT_DTYPE_INVALID
                 ? ckpt_foreign_add_tensor(x->f, fqn, CKPT_BYTES, 1, &none,
                                           x->err)
                 : ckpt_foreign_add_tensor(x->f, fqn, dt, ndim, shape,
                                           x->err);
    if (t < 0)
        return (int)t;
    int rc = 0;
    if (dt == CKPT_DTYPE_INVALID)
        rc = ckpt_err(x->err, -ENOTSUP, "%s/.metadata: tensor '%s': "
                      "missing or unsupported dtype", x->dir, fqn);
    for (size_t i = 0; rc == 0 && i < chunks->n; i++)
        rc = add_chunk(x, t, fqn, dt, ndim, chunks->items[i]);
    if (rc == 0 || rc == -ENOMEM || !x->err)
        return rc;
    char why[sizeof x->err->msg];
    snprintf(why, sizeof why, "%s", x->err->msg);
    ckpt_err_clear(x->err);
    return ckpt_foreign_refuse(x->f, (size_t)t, why, x->err);
}

static int add_bytes(dcp *x, const char *fqn)
{
    const pk_val *info = find_item(x, fqn, -1, NULL);
    item_loc loc;
    item_src src;
    if (!info)
        return ckpt_err(x->err, -EINVAL, "%s/.metadata: byte item '%s' has "
                        "no storage_data entry", x->dir, fqn);
    int rc = locate(x, fqn, info, &loc);
    if (rc == 0)
        rc = open_item(x, fqn, &loc, &src);
    if (rc)
        return rc;
    ckpt_zstd_src z;
    char what[600];
    snprintf(what, sizeof what, "byte item '%.200s' at bytes %llu..%llu of "
             "%.200s", fqn, (unsigned long long)loc.offset,
             (unsigned long long)(loc.offset + loc.length), loc.file);
    dcp_zs_item it = { src.fd, src.path, what, loc.offset, loc.length };
    if (loc.zstd && (rc = dcp_zs_bytes(&it, &z, x->err)) != 0)
        return rc;
    int64_t len = (int64_t)(loc.zstd ? z.decoded : loc.length), zero = 0;
    long t = ckpt_foreign_add_tensor(x->f, fqn, CKPT_BYTES, 1, &len, x->err);
    if (t < 0)
        return (int)t;
    if (loc.zstd)
        return ckpt_foreign_add_zstd_chunk(x->f, (size_t)t, &zero, &len,
                                           loc.file, &z, NULL, x->err);
    return ckpt_foreign_add_chunk(x->f, (size_t)t, &zero, &len, loc.file,
                                  loc.offset, NULL, loc.length, x->err);
}

static int add_entries(dcp *x, const pk_val *sdm)
{
    if (!sdm || sdm->type != PK_DICT)
        return ckpt_err(x->err, -EINVAL, "%s/.metadata: state_dict_metadata "
                        "is missing or not a dict", x->dir);
    for (size_t i = 0; i + 1 < sdm->n; i += 2) {
        const pk_val *k = sdm->items[i], *md = sdm->items[i + 1];
        if (k->type != PK_STR)
            return ckpt_err(x->err, -EINVAL, "%s/.metadata: a "
                            "state_dict_metadata key is not a string",
                            x->dir);
        int g = pk_global_of(md), rc;
        if (g == PKG_DCP_TENSOR_MD || g == PKG_SH_TENSOR_MD)
            rc = add_tensor(x, k->s, md);
        else if (g == PKG_DCP_BYTES_MD || g == PKG_SH_BYTES_MD)
            rc = add_bytes(x, k->s);
        else
            rc = ckpt_err(x->err, -EINVAL, "%s/.metadata: '%s' is neither "
                          "tensor nor bytes storage metadata", x->dir, k->s);
        if (rc)
            return rc;
    }
    return 0;
}

/* Keeps DCP's planner data (the flattening mapping) as metadata, so that
 * nested loads and `ckpt import` keep it (dcp_planner.h). */
static int set_planner_data(ckpt_foreign *f, const pk_val *pd,
                            ckpt_error *err)
{
    char *json = NULL;
    int rc = ckpt_dcp_planner_json(pd, &json, err);
    if (rc == 0 && json)
        rc = ckpt_foreign_set_meta(f, CKPT_DCP_PLANNER_DATA_KEY, json, err);
    free(json);
    return rc;
}

int ckpt_dcp_open(const char *dir, ckpt_foreign *f, ckpt_error *err)
{
    unsigned char *buf = NULL;
    size_t len = 0;
    pk_ctx *ctx = NULL;
    pk_val *root = NULL;
    char what[4200];
    snprintf(what, sizeof what, "%s/.metadata", dir);
    if (!(f->dir = strdup(dir)))
        return ckpt_err(err, -ENOMEM, "out of memory");
    int rc = read_metadata(f, &buf, &len, err);
    if (rc == 0) {
        size_t lim = len < MAX_PICKLE_MEM / 64 ? 64 * len + ((size_t)16 << 20)
                                               : MAX_PICKLE_MEM;
        rc = pk_load(buf, len, lim, what, &ctx, &root, err);
    }
    if (rc == 0 && !is_metadata(pk_global_of(root)))
        rc = ckpt_err(err, -EINVAL, "%s: not PyTorch distributed checkpoint "
                      "metadata (it does not hold a Metadata object)", what);
    dcp x = { .f = f, .dir = dir, .cur_fd = -1, .err = err };
    if (rc == 0)
        rc = index_items(&x, pk_attr(root, "storage_data"));
    if (rc == 0)
        rc = add_entries(&x, pk_attr(root, "state_dict_metadata"));
    if (rc == 0)
        rc = ckpt_foreign_set_meta(f, "source_format", "pytorch-dcp", err);
    if (rc == 0)
        rc = set_planner_data(f, pk_attr(root, "planner_data"), err);
    if (x.cur_fd >= 0)
        close(x.cur_fd);
    dcp_st_cache_free(&x.st);
    free(x.cur_path);
    free(x.items);
    pk_free(ctx);
    free(buf);
    return rc;
}
