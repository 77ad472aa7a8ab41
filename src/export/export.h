/*
 * export.h - what the format writers of ckpt_export share: the job (the
 * open source, the options, the tensors chosen, the two read blocks), the
 * names each dtype has in torch and safetensors, and the streaming copy
 * of one tensor's bytes into an output file.
 */
#ifndef CKPT_EXPORT_EXPORT_H
#define CKPT_EXPORT_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "ckptfs.h"
#include "common/npy.h"
#include "export/sink.h"

/* One object to write. */
typedef struct exp_item {
    size_t idx;             /* in the reader */
    const char *fqn;
    ckpt_dtype dtype;       /* as read */
    ckpt_dtype out;         /* as written */
    int widen;              /* out is a wider dtype: each element converted */
    int ndim;
    const int64_t *shape;
    uint64_t numel;
    uint64_t nbytes;        /* as read */
    uint64_t out_bytes;     /* as written */
} exp_item;

typedef struct exp_job {
    ckpt_reader *r;
    ckpt_export_opts o;
    const char *src;
    exp_item *items;        /* in FQN order */
    size_t n;
    unsigned char *blk[2];  /* read blocks, o.buffer_bytes each: one read
                               while the writer thread writes the other */
    struct exp_wthread *writer;
    npy_tables tables;      /* float8 -> float32 */
    uint64_t done, total;   /* bytes written of tensor data */
} exp_job;

/* Names of a dtype: torch's ("float32"), and the legacy storage class
 * torch.save names it by ("FloatStorage"; NULL for dtypes torch saves as
 * an UntypedStorage with _rebuild_tensor_v3).  safetensors' names are
 * st_dtype_name's (stlayout.h). */
const char *exp_torch_dtype(ckpt_dtype dt);
const char *exp_torch_storage(ckpt_dtype dt);

/* Appends item's bytes (converted to it->out) to s, adding their CRC-32 to
 * *crc when crc is not NULL. */
int exp_copy(exp_job *j, const exp_item *it, exp_sink *s, uint32_t *crc,
             ckpt_error *err);

/* The format writers: fill `tmp` (a file, or for a folder a directory
 * already made), named `out` in messages. */
int exp_write_safetensors(exp_job *j, const char *tmp, int folder,
                          ckpt_error *err);
int exp_write_pt(exp_job *j, const char *tmp, ckpt_error *err);
int exp_write_dcp(exp_job *j, const char *tmp, ckpt_error *err);

/* The pickle of one tensor as torch.save writes it (_rebuild_tensor_v2 of
 * a legacy storage, or _rebuild_tensor_v3 with the dtype), its storage
 * the archive's data/<key>. */
struct pkw;
void exp_pickle_tensor(struct pkw *w, const exp_item *it, const char *key);
/* A torch.save archive's records around the data: begins it (data.pkl
 * and the small records), and after the caller wrote the storages as
 * data/<key> entries, ends it. */
struct zipw;
int exp_torch_archive_begin(struct zipw *z, const struct pkw *pickle,
                            ckpt_error *err);
int exp_torch_archive_end(struct zipw *z, ckpt_error *err);
/* The small records alone (.format_version, .storage_alignment,
 * byteorder), for an archive whose data.pkl the caller streams. */
int exp_torch_archive_records(struct zipw *z, ckpt_error *err);

#endif
