/*
 * dcp_out.c - ckpt_export to a PyTorch distributed checkpoint, as one
 * rank's FileSystemWriter writes it: __0_0.distcp holds each tensor as a
 * torch.save archive of the whole tensor (one chunk at offset zero) and
 * each byte object as the torch.save stream DCP's loader unpickles (kept
 * as it is when it already is one, as a DCP imported into ckptfs holds;
 * else a torch.save of the Python bytes), one after the other; .metadata is
 * the pickle of a Metadata (state_dict_metadata: TensorStorageMetadata or
 * BytesStorageMetadata per FQN; planner_data: the FQN's path; storage_data:
 * a _StorageInfo per MetadataIndex).  The classes live in
 * torch.distributed.checkpoint (torch 2) or
 * torch.distributed._shard.checkpoint (torch 1.13, whose TensorProperties
 * is in torch.distributed._shard.sharded_tensor.metadata): torch_major
 * picks, since neither torch finds the other's module.
 */
#include "export/export.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "export/crc32.h"
#include "export/pkw.h"
#include "export/zipw.h"

#define DISTCP "__0_0.distcp"

/* Where an item landed in the .distcp. */
typedef struct span {
    uint64_t off, len;
} span;

/* The module paths of one torch generation. */
typedef struct dcp_modules {
    const char *metadata, *filesystem, *properties, *mem_format;
} dcp_modules;

static const dcp_modules TORCH2 = {
    "torch.distributed.checkpoint.metadata",
    "torch.distributed.checkpoint.filesystem",
    "torch.distributed.checkpoint.metadata",
    "_MEM_FORMAT_ENCODING",
};

static const dcp_modules TORCH1 = {
    "torch.distributed._shard.checkpoint.metadata",
    "torch.distributed._shard.checkpoint.filesystem",
    "torch.distributed._shard.sharded_tensor.metadata",
    "MEM_FORMAT_ENCODING",
};

/* ------------------------------------------------------------ data */

/* One tensor as a torch.save archive of it alone. */
static int write_tensor(exp_job *j, const exp_item *it, exp_sink *s,
                        ckpt_error *err)
{
    pkw w;
    pkw_init(&w);
    exp_pickle_tensor(&w, it, "0");
    int rc = pkw_finish(&w, it->fqn, err);
    zipw z;
    zipw_init(&z, s);
    if (rc == 0)
        rc = exp_torch_archive_begin(&z, &w, err);
    uint32_t crc = 0;
    if (rc == 0)
        rc = zipw_begin(&z, "archive/data/0", it->out_bytes, err);
    if (rc == 0)
        rc = exp_copy(j, it, s, &crc, err);
    if (rc == 0)
        rc = zipw_end(&z, crc, err);
    if (rc == 0)
        rc = exp_torch_archive_end(&z, err);
    zipw_free(&z);
    pkw_free(&w);
    return rc;
}

/* Whether a byte object already is what DCP keeps for one: a torch.save
 * stream (a zip, or the legacy pickle with torch's magic number), as a
 * DCP checkpoint imported into ckptfs holds. */
static int is_torch_save(exp_job *j, const exp_item *it, ckpt_error *err)
{
    static const unsigned char zip[4] = { 'P', 'K', 3, 4 };
    static const unsigned char legacy[4] = { 0x80, 0x02, 0x8a, 0x0a };
    unsigned char head[4];
    if (it->nbytes < sizeof head)
        return 0;
    int64_t got = ckpt_read(j->r, it->idx, head, 0, sizeof head, err);
    if (got < 0)
        return (int)got;
    return memcmp(head, zip, 4) == 0 || memcmp(head, legacy, 4) == 0;
}

/* A byte object that is not a torch.save stream, as DCP's loader wants
 * it (torch.load of the item): a torch.save archive whose data.pkl is the
 * pickle of a Python bytes object (BINBYTES, or BINBYTES8 past 4 GiB),
 * streamed. */
static int write_wrapped_bytes(exp_job *j, const exp_item *it, exp_sink *s,
                               ckpt_error *err)
{
    unsigned char head[11] = { 0x80, 2 };
    size_t hn = 2;
    int big = it->nbytes > UINT32_MAX;
    head[hn++] = big ? 0x8e : 'B';
    for (int i = 0; i < (big ? 8 : 4); i++)
        head[hn++] = (unsigned char)(it->nbytes >> (8 * i));
    const unsigned char stop = PK_STOP;
    zipw z;
    zipw_init(&z, s);
    uint32_t crc = exp_crc32(0, head, hn);
    int rc = zipw_begin(&z, "archive/data.pkl", hn + it->nbytes + 1, err);
    if (rc == 0)
        rc = exp_sink_write(s, head, hn, err);
    if (rc == 0)
        rc = exp_copy(j, it, s, &crc, err);
    if (rc == 0)
        rc = exp_sink_write(s, &stop, 1, err);
    if (rc == 0)
        rc = zipw_end(&z, exp_crc32(crc, &stop, 1), err);
    if (rc == 0)
        rc = exp_torch_archive_records(&z, err);
    if (rc == 0)
        rc = exp_torch_archive_end(&z, err);
    zipw_free(&z);
    return rc;
}

static int write_bytes_item(exp_job *j, const exp_item *it, exp_sink *s,
                            ckpt_error *err)
{
    int ts = is_torch_save(j, it, err);
    if (ts < 0)
        return ts;
    return ts ? exp_copy(j, it, s, NULL, err) :
                write_wrapped_bytes(j, it, s, err);
}

static int write_data(exp_job *j, const char *dir, span *at, ckpt_error *err)
{
    char *path = NULL;
    if (asprintf(&path, "%s/" DISTCP, dir) < 0)
        return ckpt_err(err, -ENOMEM, "out of memory");
    exp_sink s = { .fd = -1 };
    int rc = exp_sink_create(&s, path, err);
    for (size_t i = 0; i < j->n && rc == 0; i++) {
        at[i].off = s.pos;
        rc = j->items[i].out == CKPT_BYTES ?
             write_bytes_item(j, &j->items[i], &s, err) :
             write_tensor(j, &j->items[i], &s, err);
        at[i].len = s.pos - at[i].off;
        if (rc)
            rc = ckpt_err_wrap(err, rc, "tensor '%s'", j->items[i].fqn);
    }
    if (s.path) {
        int crc = exp_sink_close(&s, j->o.sync, err);
        if (rc == 0)
            rc = crc;
    }
    free(path);
    return rc;
}

/* ------------------------------------------------------------ .metadata */

static void pk_size(pkw *w, int n, const int64_t *v)
{
    pkw_global(w, "torch", "Size");
    pkw_int_tuple(w, n, v);
    pkw_op(w, PK_TUPLE1);
    pkw_op(w, PK_REDUCE);
}

static void pk_properties(pkw *w, const dcp_modules *m, const exp_item *it)
{
    pkw_newobj(w, m->properties, "TensorProperties");
    pkw_op(w, PK_MARK);
    pkw_global(w, "torch", exp_torch_dtype(it->out));
    pkw_global(w, "torch.serialization", "_get_layout");
    pkw_str(w, "torch.strided");
    pkw_op(w, PK_TUPLE1);
    pkw_op(w, PK_REDUCE);
    pkw_op(w, PK_NEWFALSE);                  /* requires_grad */
    pkw_global(w, m->properties, m->mem_format);
    pkw_int(w, 0);                           /* contiguous format */
    pkw_op(w, PK_TUPLE1);
    pkw_op(w, PK_REDUCE);
    pkw_op(w, PK_NEWFALSE);                  /* pin_memory */
    pkw_op(w, PK_TUPLE);
    pkw_op(w, PK_BUILD);
}

static void pk_tensor_md(pkw *w, const dcp_modules *m, const exp_item *it)
{
    int64_t zeros[CKPT_MAX_DIMS] = { 0 };
    pkw_newobj(w, m->metadata, "TensorStorageMetadata");
    pkw_op(w, PK_EMPTY_DICT);
    pkw_op(w, PK_MARK);
    pkw_str(w, "properties");
    pk_properties(w, m, it);
    pkw_str(w, "size");
    pk_size(w, it->ndim, it->shape);
    pkw_str(w, "chunks");
    pkw_op(w, PK_EMPTY_LIST);
    pkw_newobj(w, m->metadata, "ChunkStorageMetadata");
    pkw_op(w, PK_EMPTY_DICT);
    pkw_op(w, PK_MARK);
    pkw_str(w, "offsets");
    pk_size(w, it->ndim, zeros);
    pkw_str(w, "sizes");
    pk_size(w, it->ndim, it->shape);
    pkw_op(w, PK_SETITEMS);
    pkw_op(w, PK_BUILD);
    pkw_op(w, PK_APPEND);
    pkw_op(w, PK_SETITEMS);
    pkw_op(w, PK_BUILD);
}

static void pk_index(pkw *w, const dcp_modules *m, const exp_item *it)
{
    int64_t zeros[CKPT_MAX_DIMS] = { 0 };
    pkw_newobj(w, m->metadata, "MetadataIndex");
    pkw_op(w, PK_EMPTY_DICT);
    pkw_op(w, PK_MARK);
    pkw_str(w, "fqn");
    pkw_str(w, it->fqn);
    pkw_str(w, "offset");
    if (it->out == CKPT_BYTES)
        pkw_op(w, PK_NONE);
    else
        pk_size(w, it->ndim, zeros);
    pkw_str(w, "index");
    pkw_int(w, 0);
    pkw_op(w, PK_SETITEMS);
    pkw_op(w, PK_BUILD);
}

static void pk_storage_info(pkw *w, const dcp_modules *m, const span *at)
{
    pkw_newobj(w, m->filesystem, "_StorageInfo");
    pkw_op(w, PK_EMPTY_DICT);
    pkw_op(w, PK_MARK);
    pkw_str(w, "relative_path");
    pkw_str(w, DISTCP);
    pkw_str(w, "offset");
    pkw_int(w, (int64_t)at->off);
    pkw_str(w, "length");
    pkw_int(w, (int64_t)at->len);
    pkw_op(w, PK_SETITEMS);
    pkw_op(w, PK_BUILD);
}

static void pk_metadata(pkw *w, const exp_job *j, const span *at)
{
    const dcp_modules *m = j->o.torch_major == 1 ? &TORCH1 : &TORCH2;
    pkw_newobj(w, m->metadata, "Metadata");
    pkw_op(w, PK_EMPTY_DICT);
    pkw_op(w, PK_MARK);
    pkw_str(w, "state_dict_metadata");
    pkw_op(w, PK_EMPTY_DICT);
    pkw_op(w, PK_MARK);
    for (size_t i = 0; i < j->n; i++) {
        pkw_str(w, j->items[i].fqn);
        if (j->items[i].out == CKPT_BYTES)
            pkw_newobj(w, m->metadata, "BytesStorageMetadata");
        else
            pk_tensor_md(w, m, &j->items[i]);
    }
    pkw_op(w, PK_SETITEMS);
    pkw_str(w, "planner_data");
    pkw_op(w, PK_EMPTY_DICT);
    pkw_op(w, PK_MARK);
    for (size_t i = 0; i < j->n; i++) {
        pkw_str(w, j->items[i].fqn);
        pkw_str(w, j->items[i].fqn);
        pkw_op(w, PK_TUPLE1);
    }
    pkw_op(w, PK_SETITEMS);
    pkw_str(w, "storage_data");
    pkw_op(w, PK_EMPTY_DICT);
    pkw_op(w, PK_MARK);
    for (size_t i = 0; i < j->n; i++) {
        pk_index(w, m, &j->items[i]);
        pk_storage_info(w, m, &at[i]);
    }
    pkw_op(w, PK_SETITEMS);
    pkw_op(w, PK_SETITEMS);
    pkw_op(w, PK_BUILD);
}

static int write_metadata(exp_job *j, const char *dir, const span *at,
                          ckpt_error *err)
{
    pkw w;
    pkw_init(&w);
    pk_metadata(&w, j, at);
    char *path = NULL;
    int rc = pkw_finish(&w, ".metadata", err);
    if (rc == 0 && asprintf(&path, "%s/.metadata", dir) < 0)
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    if (rc == 0)
        rc = exp_sink_file(path, w.b.p, w.b.len, j->o.sync, err);
    free(path);
    pkw_free(&w);
    return rc;
}

int exp_write_dcp(exp_job *j, const char *tmp, ckpt_error *err)
{
    span *at = calloc(j->n ? j->n : 1, sizeof *at);
    if (!at)
        return ckpt_err(err, -ENOMEM, "out of memory");
    int rc = write_data(j, tmp, at, err);
    if (rc == 0)
        rc = write_metadata(j, tmp, at, err);
    free(at);
    return rc;
}
