/*
 * torchsave.c - describing the tensor of a torch.save archive (see
 * torchsave.h).  data.pkl is `_rebuild_tensor_v2(storage, storage_offset,
 * size, stride, requires_grad, hooks)`, with the storage a persistent id
 * ('storage', <dtype>Storage, key, location, numel) whose bytes are the
 * entry `<prefix>/data/<key>`; `_rebuild_tensor_v3` adds the dtype as an
 * argument (with an untyped storage, whose size is in bytes, for the
 * dtypes that have no storage class).  A torch.save archive of anything
 * else (a state dict) holds such calls wherever a tensor is.
 */
#include "foreign/torchsave.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "foreign/pickle.h"

/* data.pkl of one tensor is a few hundred bytes; anything near this is
 * not a tensor's. */
#define MAX_PKL ((uint64_t)16 << 20)

ckpt_dtype ckpt_torch_dtype(int id)
{
    switch (id) {
    case PKG_DT_F64: case PKG_ST_F64: return CKPT_F64;
    case PKG_DT_F32: case PKG_ST_F32: return CKPT_F32;
    case PKG_DT_F16: case PKG_ST_F16: return CKPT_F16;
    case PKG_DT_BF16: case PKG_ST_BF16: return CKPT_BF16;
    case PKG_DT_F8E4M3: return CKPT_F8E4M3;
    case PKG_DT_F8E5M2: return CKPT_F8E5M2;
    case PKG_DT_F8E4M3FNUZ: return CKPT_F8E4M3FNUZ;
    case PKG_DT_F8E5M2FNUZ: return CKPT_F8E5M2FNUZ;
    case PKG_DT_F8E8M0: return CKPT_F8E8M0;
    case PKG_DT_C32: case PKG_ST_C32: return CKPT_C32;
    case PKG_DT_C64: case PKG_ST_C64: return CKPT_C64;
    case PKG_DT_C128: case PKG_ST_C128: return CKPT_C128;
    case PKG_DT_I64: case PKG_ST_I64: return CKPT_I64;
    case PKG_DT_I32: case PKG_ST_I32: return CKPT_I32;
    case PKG_DT_I16: case PKG_ST_I16: return CKPT_I16;
    case PKG_DT_I8: case PKG_ST_I8: return CKPT_I8;
    case PKG_DT_U64: return CKPT_U64;
    case PKG_DT_U32: return CKPT_U32;
    case PKG_DT_U16: return CKPT_U16;
    case PKG_DT_U8: case PKG_ST_U8: return CKPT_U8;
    case PKG_DT_BOOL: case PKG_ST_BOOL: return CKPT_BOOL;
    default: return CKPT_DTYPE_INVALID;
    }
}

/* The data.pkl entry and the prefix of every entry ("archive/"). */
static const ckpt_zip_entry *find_pkl(const ckpt_zip *z, size_t *prefix)
{
    const ckpt_zip_entry *found = NULL;
    for (size_t i = 0; i < z->n; i++) {
        size_t n = strlen(z->v[i].name);
        if (n >= 8 && strcmp(z->v[i].name + n - 8, "data.pkl") == 0 &&
            (n == 8 || z->v[i].name[n - 9] == '/')) {
            if (found)
                return NULL;   /* two: not one torch.save archive */
            found = &z->v[i];
            *prefix = n - 8;
        }
    }
    return found;
}

static int read_small(ckpt_zip_read_fn rd, void *arg,
                      const ckpt_zip_entry *e, unsigned char **out,
                      ckpt_error *err)
{
    *out = malloc(e->size + 1);
    if (!*out)
        return ckpt_err(err, -ENOMEM, "out of memory");
    int rc = rd(arg, *out, e->size, e->offset, err);
    if (rc) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

static int refuse_big_endian(ckpt_zip_read_fn rd, void *arg,
                             const ckpt_zip *z, const char *prefix,
                             const char *what, ckpt_error *err)
{
    char name[1100];
    snprintf(name, sizeof name, "%sbyteorder", prefix);
    const ckpt_zip_entry *e = ckpt_zip_find(z, name);
    if (!e || e->size > 16)
        return 0;
    unsigned char *b;
    int rc = read_small(rd, arg, e, &b, err);
    if (rc)
        return rc;
    if (e->size == 3 && memcmp(b, "big", 3) == 0)
        rc = ckpt_err(err, -ENOTSUP, "%s: saved on a big-endian machine "
                      "(only little-endian data is read)", what);
    free(b);
    return rc;
}

/* 1 when sizes/strides lay the tensor out row-major without gaps. */
static int is_contiguous(const ckpt_torch_tensor *t)
{
    int64_t want = 1;
    for (int k = t->ndim - 1; k >= 0; k--) {
        if (t->size[k] == 0)
            return 1;
        if (t->size[k] != 1 && t->stride[k] != want)
            return 0;
        want *= t->size[k];
    }
    return 1;
}

/* Checks that every element lies in a storage of `numel` elements and
 * sets the tensor's byte span. */
static int check_bounds(ckpt_torch_tensor *t, uint64_t storage_off,
                        uint64_t numel, const char *what, ckpt_error *err)
{
    uint64_t last = 0, count = 1;
    for (int k = 0; k < t->ndim; k++) {
        uint64_t step;
        if (__builtin_mul_overflow((uint64_t)t->size[k], count, &count))
            goto overflow;
        if (t->size[k] == 0)
            continue;
        if (__builtin_mul_overflow((uint64_t)(t->size[k] - 1),
                                   (uint64_t)t->stride[k], &step) ||
            __builtin_add_overflow(last, step, &last))
            goto overflow;
    }
    size_t isz = ckpt_dtype_size(t->dtype);
    if (count > (uint64_t)INT64_MAX / isz)
        goto overflow;   /* its row-major image would not be addressable */
    if (count == 0) {
        t->span_bytes = 0;
        return 0;
    }
    if (storage_off > numel || last >= numel - storage_off)
        return ckpt_err(err, -EINVAL, "%s: the tensor's sizes and strides "
                        "reach element %llu of a storage of %llu elements",
                        what, (unsigned long long)(storage_off + last),
                        (unsigned long long)numel);
    t->span_bytes = (last + 1) * isz;
    return 0;
overflow:
    return ckpt_err(err, -EINVAL, "%s: tensor sizes and strides overflow",
                    what);
}

static int is_untyped(int g)
{
    return g == PKG_UNTYPED_STORAGE || g == PKG_UNTYPED_STORAGE2;
}

/* The name of the dtype (or storage class) that `v` names, for messages. */
static const char *dtype_text(const pk_val *v)
{
    int g = pk_global_of(v);
    return g >= 0 ? pk_global_name(g) : "(not a torch dtype)";
}

int ckpt_torch_describe(const pk_val *call, const ckpt_zip *z,
                        const char *prefix, const char *what,
                        ckpt_torch_tensor *t, ckpt_error *err)
{
    memset(t, 0, sizeof *t);
    int fn = pk_global_of(call);
    if (call && call->type == PK_OBJ && fn == PKG_REBUILD_PARAM) {
        /* nn.Parameter(data, requires_grad, hooks): its data */
        call = pk_item(call->args, 0);
        fn = pk_global_of(call);
    }
    if (!call || call->type != PK_OBJ ||
        (fn != PKG_REBUILD_V2 && fn != PKG_REBUILD_V3))
        return ckpt_err(err, -EINVAL, "%s: not a tensor as torch.save "
                        "pickles one (_rebuild_tensor_v2/v3)", what);
    const pk_val *a = call->args;
    const pk_val *pid = pk_item(a, 0), *off = pk_item(a, 1);
    const pk_val *kind = pid && pid->type == PK_PERSID ?
                         pk_item(pid->args, 0) : NULL;
    const pk_val *stype = kind ? pk_item(pid->args, 1) : NULL;
    const pk_val *key = kind ? pk_item(pid->args, 2) : NULL;
    const pk_val *numel = kind ? pk_item(pid->args, 4) : NULL;
    if (!kind || kind->type != PK_STR || strcmp(kind->s, "storage") != 0 ||
        !stype || !key || key->type != PK_STR || !numel ||
        numel->type != PK_INT || numel->i < 0 || !off ||
        off->type != PK_INT || off->i < 0)
        return ckpt_err(err, -EINVAL, "%s: data.pkl: the tensor's storage "
                        "is not described as torch.save does", what);
    const pk_val *dtv = fn == PKG_REBUILD_V3 ? pk_item(a, 6) : stype;
    t->dtype = ckpt_torch_dtype(pk_global_of(dtv));
    if (t->dtype == CKPT_DTYPE_INVALID)
        return ckpt_err(err, -ENOTSUP, "%s: data.pkl: dtype %s has no ckptfs "
                        "equivalent", what, dtype_text(dtv));
    int nd = pk_dims(pk_item(a, 2), t->size);
    int ns = pk_dims(pk_item(a, 3), t->stride);
    if (nd < 0 || ns != nd)
        return ckpt_err(err, -EINVAL, "%s: data.pkl: bad tensor sizes or "
                        "strides", what);
    t->ndim = nd;
    char name[1200];
    snprintf(name, sizeof name, "%sdata/%.1000s", prefix, key->s);
    const ckpt_zip_entry *e = ckpt_zip_find(z, name);
    if (!e)
        return ckpt_err(err, -EINVAL, "%s: storage entry '%s' is missing",
                        what, name);
    size_t isz = ckpt_dtype_size(t->dtype);
    /* a typed storage counts elements, an untyped one (the dtypes that
     * have no storage class: uint16, float8, ...) bytes */
    uint64_t elems = is_untyped(pk_global_of(stype))
                         ? (uint64_t)numel->i / isz : (uint64_t)numel->i;
    if (elems > e->size / isz)
        return ckpt_err(err, -EINVAL, "%s: storage entry '%s' holds %llu "
                        "bytes, not the %llu elements of %zu bytes data.pkl "
                        "says", what, name, (unsigned long long)e->size,
                        (unsigned long long)elems, isz);
    int rc = check_bounds(t, (uint64_t)off->i, elems, what, err);
    if (rc)
        return rc;
    t->contiguous = is_contiguous(t);
    t->data_offset = e->offset + (uint64_t)off->i * isz;
    t->storage = e;
    return 0;
}

int ckpt_torch_archive_open(ckpt_zip_read_fn rd, void *arg, uint64_t len,
                            const char *what, uint64_t pkl_max,
                            ckpt_torch_archive *a, ckpt_error *err)
{
    memset(a, 0, sizeof *a);
    int rc = ckpt_zip_open(rd, arg, len, what, &a->z, err);
    if (rc)
        return rc;
    size_t plen = 0;
    const ckpt_zip_entry *pkl = find_pkl(&a->z, &plen);
    if (!pkl || plen >= sizeof a->prefix)
        rc = ckpt_err(err, -EINVAL, "%s: not a torch.save archive (no single "
                      "data.pkl)", what);
    else if (pkl->size > pkl_max)
        rc = ckpt_err(err, -EFBIG, "%s: its data.pkl is larger than %llu "
                      "bytes", what, (unsigned long long)pkl_max);
    if (rc == 0) {
        memcpy(a->prefix, pkl->name, plen);
        a->prefix[plen] = '\0';
        rc = refuse_big_endian(rd, arg, &a->z, a->prefix, what, err);
    }
    if (rc == 0)
        rc = read_small(rd, arg, pkl, &a->pkl, err);
    a->pkl_len = rc == 0 ? pkl->size : 0;
    if (rc == 0)
        rc = pk_load(a->pkl, pkl->size, 64 * pkl->size + ((size_t)1 << 20),
                     what, &a->ctx, &a->root, err);
    if (rc)
        ckpt_torch_archive_close(a);
    return rc;
}

void ckpt_torch_archive_close(ckpt_torch_archive *a)
{
    pk_free(a->ctx);
    free(a->pkl);
    ckpt_zip_free(&a->z);
    memset(a, 0, sizeof *a);
}

int ckpt_torch_tensor_read(ckpt_zip_read_fn rd, void *arg, uint64_t len,
                           const char *what, ckpt_torch_tensor *out,
                           ckpt_error *err)
{
    memset(out, 0, sizeof *out);
    ckpt_torch_archive a;
    int rc = ckpt_torch_archive_open(rd, arg, len, what, MAX_PKL, &a, err);
    if (rc)
        return rc;
    rc = ckpt_torch_describe(a.root, &a.z, a.prefix, what, out, err);
    out->storage = NULL;   /* the directory goes with the archive */
    ckpt_torch_archive_close(&a);
    return rc;
}

/* The value of the BytesIO that root is, or NULL: BytesIO() built with the
 * state (value, position, attributes) that its __getstate__ gives. */
static const pk_val *bytesio_value(const pk_val *root)
{
    if (!root || root->type != PK_OBJ ||
        pk_global_of(root) != PKG_BYTESIO || !root->args ||
        root->args->n != 0 || !root->state)
        return NULL;
    const pk_val *st = root->state, *v = pk_item(st, 0), *pos = pk_item(st, 1);
    if (st->type != PK_TUPLE || st->n != 3 || !v || v->type != PK_BYTES ||
        !pos || pos->type != PK_INT)
        return NULL;
    return v;
}

int ckpt_torch_bytesio_read(ckpt_zip_read_fn rd, void *arg, uint64_t len,
                            const char *what, unsigned char **out,
                            size_t *n, ckpt_error *err)
{
    *out = NULL;
    *n = 0;
    ckpt_zip z;
    int rc = ckpt_zip_open(rd, arg, len, what, &z, err);
    if (rc)
        return rc == -ENOMEM ? rc : 0;
    size_t plen = 0;
    const ckpt_zip_entry *pkl = find_pkl(&z, &plen);
    unsigned char *buf = NULL;
    pk_ctx *ctx = NULL;
    pk_val *root = NULL;
    /* A BytesIO of N bytes pickles as at most 2N bytes of UTF-8. */
    if (!pkl || pkl->size > 2 * CKPT_BYTESIO_MAX + 4096)
        rc = ckpt_err(err, -EINVAL, "%s: not a torch.save archive of a "
                      "BytesIO of at most %llu bytes", what,
                      (unsigned long long)CKPT_BYTESIO_MAX);
    if (rc == 0)
        rc = read_small(rd, arg, pkl, &buf, err);
    if (rc == 0)
        rc = pk_load(buf, pkl->size, 4 * pkl->size + ((size_t)1 << 20),
                     what, &ctx, &root, err);
    const pk_val *v = rc == 0 ? bytesio_value(root) : NULL;
    int found = 0;
    if (rc == 0 && !v)
        ckpt_err(err, -EINVAL, "%s: data.pkl holds something other than an "
                 "io.BytesIO", what);
    if (v && v->len > CKPT_BYTESIO_MAX)
        ckpt_err(err, -EFBIG, "%s: the io.BytesIO holds more than %llu "
                 "bytes", what, (unsigned long long)CKPT_BYTESIO_MAX);
    if (v && v->len <= CKPT_BYTESIO_MAX) {
        if ((*out = malloc(v->len + 1))) {
            memcpy(*out, v->s, v->len + 1);
            *n = v->len;
            found = 1;
        } else {
            found = ckpt_err(err, -ENOMEM, "out of memory");
        }
    }
    pk_free(ctx);
    free(buf);
    ckpt_zip_free(&z);
    return rc == -ENOMEM ? rc : found;
}
