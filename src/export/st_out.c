/*
 * st_out.c - ckpt_export to safetensors: one file, or a Hugging Face
 * folder of model.safetensors, or of model-0000i-of-0000n.safetensors
 * shards with model.safetensors.index.json, laid out by stlayout.c (which
 * the mount's .safetensors/ view shares); each file is its header, then
 * its tensors' bytes streamed in layout order.
 */
#include "export/export.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "export/sink.h"
#include "export/stlayout.h"

/* The item of each reader index (items are in FQN order, as the reader's
 * tensors, so a binary search finds it). */
static const exp_item *item_of(const exp_job *j, size_t idx)
{
    size_t lo = 0, hi = j->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (j->items[mid].idx < idx)
            lo = mid + 1;
        else
            hi = mid;
    }
    return &j->items[lo];
}

static int write_shard(exp_job *j, const st_layout *l, const st_shard *s,
                       const char *path, ckpt_error *err)
{
    exp_sink out = { .fd = -1 };
    int rc = exp_sink_create(&out, path, err);
    if (rc)
        return rc;
    rc = exp_sink_write(&out, s->header, s->header_len, err);
    for (size_t i = s->first; i < s->first + s->count && rc == 0; i++)
        rc = exp_copy(j, item_of(j, l->e[i].idx), &out, NULL, err);
    int crc = exp_sink_close(&out, j->o.sync, err);
    return rc ? rc : crc;
}

static int write_folder(exp_job *j, const st_layout *l, const char *dir,
                        ckpt_error *err)
{
    int rc = 0;
    for (size_t s = 0; s < l->nshards && rc == 0; s++) {
        char *path = NULL;
        rc = asprintf(&path, "%s/%s", dir, l->s[s].name) < 0 ?
             ckpt_err(err, -ENOMEM, "out of memory") :
             write_shard(j, l, &l->s[s], path, err);
        free(path);
    }
    if (rc == 0 && l->nshards > 1) {
        char *path = NULL;
        rc = asprintf(&path, "%s/model.safetensors.index.json", dir) < 0 ?
             ckpt_err(err, -ENOMEM, "out of memory") :
             exp_sink_file(path, l->index, l->index_len, j->o.sync, err);
        free(path);
    }
    return rc;
}

int exp_write_safetensors(exp_job *j, const char *tmp, int folder,
                          ckpt_error *err)
{
    st_input *in = calloc(j->n ? j->n : 1, sizeof *in);
    if (!in)
        return ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < j->n; i++)
        in[i] = (st_input){ j->items[i].idx, j->items[i].out };
    st_layout l;
    int rc = st_layout_build(&l, j->r, in, j->n,
                             folder ? j->o.max_shard_size : UINT64_MAX, err);
    free(in);
    if (rc)
        return rc;
    rc = folder ? write_folder(j, &l, tmp, err) :
                  write_shard(j, &l, &l.s[0], tmp, err);
    st_layout_free(&l);
    return rc;
}
