/*
 * fuzz_parsers.c - libFuzzer target for the parsers of foreign checkpoint
 * files: the restricted pickle reader (and the DCP-style lookups done on
 * its values), the zip directory reader with torch.save's tensor
 * description on top, and the JSON reader of safetensors headers.  The
 * first input byte picks the parser; the rest is its input.  Built and run
 * by tests/fuzz/run_fuzz.sh.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "common/json.h"
#include "foreign/pickle.h"
#include "foreign/torchsave.h"
#include "foreign/zipread.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct mem {
    const uint8_t *p;
    size_t n;
} mem;

static int mem_read(void *arg, void *buf, size_t n, uint64_t off,
                    ckpt_error *err)
{
    const mem *m = arg;
    if (off > m->n || m->n - off < n)
        return ckpt_err(err, -EINVAL, "read past the end");
    memcpy(buf, m->p + off, n);
    return 0;
}

/* Walks what dcp.c would look at, without recursion. */
static void poke(const pk_val *root)
{
    int64_t dims[CKPT_MAX_DIMS];
    const pk_val *sdm = pk_attr(root, "state_dict_metadata");
    for (size_t i = 0; sdm && sdm->type == PK_DICT && i + 1 < sdm->n; i += 2) {
        const pk_val *md = sdm->items[i + 1];
        (void)pk_dims(pk_attr(md, "size"), dims);
        (void)pk_global_name(pk_global_of(pk_attr(md, "properties")));
        const pk_val *ch = pk_attr(md, "chunks");
        for (size_t k = 0; pk_item(ch, k); k++)
            (void)pk_dims(pk_attr(pk_item(ch, k), "offsets"), dims);
    }
    (void)pk_dict_get(pk_attr(root, "storage_data"), "x");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    ckpt_error err = { 0 };
    const uint8_t *in = data + 1;
    size_t n = size - 1;
    switch (data[0] % 3) {
    case 0: {
        pk_ctx *ctx;
        pk_val *root;
        if (pk_load(in, n, 64 * n + (1 << 20), "fuzz", &ctx, &root,
                    &err) == 0) {
            poke(root);
            pk_free(ctx);
        }
        break;
    }
    case 1: {
        mem m = { in, n };
        ckpt_torch_tensor t;
        (void)ckpt_torch_tensor_read(mem_read, &m, n, "fuzz", &t, &err);
        break;
    }
    default: {
        json_val v;
        if (json_parse((const char *)in, n, "fuzz", &v, &err) == 0)
            json_free(&v);
        break;
    }
    }
    return 0;
}
