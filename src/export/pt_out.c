/*
 * pt_out.c - ckpt_export to a torch.save archive, as torch.save writes one
 * (serialization.py, _save): a zip of archive/data.pkl, a pickle
 * (protocol 2) of an OrderedDict whose values are _rebuild_tensor_v2 calls
 * on storages named by persistent id ('storage', torch.FloatStorage, key,
 * 'cpu', numel), or _rebuild_tensor_v3 with an UntypedStorage and the
 * dtype for the dtypes that have no legacy storage class (float8, uint16
 * to uint64: torch 2 only); archive/data/<key> for each storage, data on
 * 64-byte boundaries; and the small records torch writes (version,
 * byteorder, .format_version, .storage_alignment).  Names' dots make
 * nested dicts unless `flat`.  The pickle (small: names and shapes) is
 * made first; the storages then stream through the read blocks.
 * torch.load(..., weights_only=True) of torch 1.13 and 2.x opens it.
 */
#include "export/export.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "export/pkw.h"
#include "export/zipw.h"

#define ARCHIVE "archive/"

void exp_pickle_tensor(pkw *w, const exp_item *it, const char *key)
{
    const char *storage = exp_torch_storage(it->out);
    pkw_global(w, "torch._utils", storage ? "_rebuild_tensor_v2" :
                                            "_rebuild_tensor_v3");
    pkw_op(w, PK_MARK);
    /* The persistent id of the storage. */
    pkw_op(w, PK_MARK);
    pkw_str(w, "storage");
    if (storage)
        pkw_global(w, "torch", storage);
    else
        pkw_global(w, "torch.storage", "UntypedStorage");
    pkw_str(w, key);
    pkw_str(w, "cpu");
    pkw_int(w, (int64_t)(storage ? it->numel : it->out_bytes));
    pkw_op(w, PK_TUPLE);
    pkw_op(w, PK_BINPERSID);
    pkw_int(w, 0);                                    /* storage offset */
    int64_t stride[CKPT_MAX_DIMS];
    int64_t acc = 1;
    for (int d = it->ndim - 1; d >= 0; d--) {
        stride[d] = acc;
        acc *= it->shape[d] > 0 ? it->shape[d] : 1;
    }
    pkw_int_tuple(w, it->ndim, it->shape);
    pkw_int_tuple(w, it->ndim, stride);
    pkw_op(w, PK_NEWFALSE);                           /* requires_grad */
    pkw_global(w, "collections", "OrderedDict");      /* backward hooks */
    pkw_op(w, PK_EMPTY_TUPLE);
    pkw_op(w, PK_REDUCE);
    if (!storage)
        pkw_global(w, "torch", exp_torch_dtype(it->out));
    pkw_op(w, PK_TUPLE);
    pkw_op(w, PK_REDUCE);
}

int exp_torch_archive_begin(zipw *z, const pkw *pickle, ckpt_error *err)
{
    int rc = zipw_put(z, ARCHIVE "data.pkl", pickle->b.p, pickle->b.len, err);
    return rc ? rc : exp_torch_archive_records(z, err);
}

int exp_torch_archive_records(zipw *z, ckpt_error *err)
{
    int rc = zipw_put(z, ARCHIVE ".format_version", "1", 1, err);
    if (rc == 0)
        rc = zipw_put(z, ARCHIVE ".storage_alignment", "64", 2, err);
    if (rc == 0)
        rc = zipw_put(z, ARCHIVE "byteorder", "little", 6, err);
    return rc;
}

int exp_torch_archive_end(zipw *z, ckpt_error *err)
{
    int rc = zipw_put(z, ARCHIVE "version", "3\n", 2, err);
    return rc ? rc : zipw_finish(z, err);
}

/* ------------------------------------------------------------ keys */

/* Refuses (for nested keys) a name that is both a tensor and the prefix
 * of others, "a" beside "a.b": a dict cannot hold both. */
static int check_nesting(const exp_job *j, ckpt_error *err)
{
    for (size_t i = 0; i + 1 < j->n; i++) {
        const char *a = j->items[i].fqn;
        size_t n = strlen(a);
        /* Names starting "a." follow "a" in FQN order, after any "a" +
         * a byte below '.'; look ahead past those. */
        for (size_t k = i + 1; k < j->n; k++) {
            const char *b = j->items[k].fqn;
            if (strncmp(a, b, n) != 0)
                break;
            if (b[n] == '.')
                return ckpt_err(err, -EINVAL, "'%s' is a tensor and a "
                                "prefix of '%s': nested dicts cannot hold "
                                "both (export with flat keys)", a, b);
        }
    }
    return 0;
}

/* Items [a, b), all of which start with the `plen` bytes of a common
 * prefix, as SETITEMS of a dict: a name's next component is a key, its
 * value the tensor or a nested dict of the names below it. */
static void pickle_level(pkw *w, const exp_job *j, size_t a, size_t b,
                         size_t plen)
{
    pkw_op(w, PK_MARK);
    for (size_t i = a; i < b;) {
        const char *name = j->items[i].fqn + plen;
        const char *dot = strchr(name, '.');
        if (!dot) {
            pkw_str(w, name);
            char key[24];
            snprintf(key, sizeof key, "%zu", i);
            exp_pickle_tensor(w, &j->items[i], key);
            i++;
            continue;
        }
        size_t clen = (size_t)(dot - name) + 1;     /* with the dot */
        size_t k = i + 1;
        while (k < b && strncmp(j->items[k].fqn + plen, name, clen) == 0)
            k++;
        char *comp = strndup(name, clen - 1);
        if (!comp) {
            w->b.oom = 1;
            return;
        }
        pkw_str(w, comp);
        free(comp);
        pkw_op(w, PK_EMPTY_DICT);
        pickle_level(w, j, i, k, plen + clen);
        i = k;
    }
    pkw_op(w, PK_SETITEMS);
}

static void pickle_flat(pkw *w, const exp_job *j)
{
    pkw_op(w, PK_MARK);
    for (size_t i = 0; i < j->n; i++) {
        char key[24];
        snprintf(key, sizeof key, "%zu", i);
        pkw_str(w, j->items[i].fqn);
        exp_pickle_tensor(w, &j->items[i], key);
    }
    pkw_op(w, PK_SETITEMS);
}

/* ------------------------------------------------------------ archive */

static int write_storages(exp_job *j, zipw *z, ckpt_error *err)
{
    for (size_t i = 0; i < j->n; i++) {
        char name[48];
        snprintf(name, sizeof name, ARCHIVE "data/%zu", i);
        uint32_t crc = 0;
        int rc = zipw_begin(z, name, j->items[i].out_bytes, err);
        if (rc == 0)
            rc = exp_copy(j, &j->items[i], z->out, &crc, err);
        if (rc == 0)
            rc = zipw_end(z, crc, err);
        if (rc)
            return ckpt_err_wrap(err, rc, "tensor '%s'", j->items[i].fqn);
    }
    return 0;
}

int exp_write_pt(exp_job *j, const char *tmp, ckpt_error *err)
{
    int rc = j->o.flat ? 0 : check_nesting(j, err);
    if (rc)
        return rc;
    pkw w;
    pkw_init(&w);
    pkw_global(&w, "collections", "OrderedDict");
    pkw_op(&w, PK_EMPTY_TUPLE);
    pkw_op(&w, PK_REDUCE);
    if (j->o.flat)
        pickle_flat(&w, j);
    else
        pickle_level(&w, j, 0, j->n, 0);
    rc = pkw_finish(&w, tmp, err);
    exp_sink s = { .fd = -1 };
    if (rc == 0)
        rc = exp_sink_create(&s, tmp, err);
    if (rc == 0) {
        zipw z;
        zipw_init(&z, &s);
        rc = exp_torch_archive_begin(&z, &w, err);
        if (rc == 0)
            rc = write_storages(j, &z, err);
        if (rc == 0)
            rc = exp_torch_archive_end(&z, err);
        zipw_free(&z);
        int crc = exp_sink_close(&s, j->o.sync, err);
        if (rc == 0)
            rc = crc;
    }
    pkw_free(&w);
    return rc;
}
