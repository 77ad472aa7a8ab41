/*
 * fuzz_parsers.c - libFuzzer target for the parsers of foreign checkpoint
 * files: the restricted pickle reader (and the DCP-style lookups done on
 * its values), the zip directory reader with torch.save's tensor
 * description on top, a whole torch.save archive (its pickled tree
 * walked, every tensor in it described and its first bytes gathered with
 * its strides, as torchfile.c and read/strided.c do), the JSON reader of
 * safetensors headers, and the readers of torch 2.x DCP items: a .distcp
 * file ending in a safetensors blob (the header read at an offset, each
 * tensor located by name as dcpst.c does), a zstd item (codec/zstream.c's
 * bounded stream decode, then dcpzs.c's description of the torch.save
 * archive inside), and the transform_descriptors of a _StorageInfo.  The
 * first input byte picks the parser; the rest is its input.  Built and
 * run by tests/fuzz/run_fuzz.sh.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "codec/zstream.h"
#include "common/error.h"
#include "common/json.h"
#include "foreign/dcpst.h"
#include "foreign/dcpzs.h"
#include "foreign/pickle.h"
#include "foreign/safetensors.h"
#include "foreign/torchsave.h"
#include "foreign/zipread.h"
#include "read/strided.h"

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

/* The input as a file (the DCP item readers read descriptors). */
static int mem_file(const uint8_t *p, size_t n)
{
    int fd = memfd_create("fuzz", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    if (write(fd, p, n) != (ssize_t)n) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A .distcp file ending in a safetensors blob at byte 0: every entry
 * located as a DCP item of its own dtype and shape would be. */
static void dcp_blob(const uint8_t *p, size_t n)
{
    int fd = mem_file(p, n);
    if (fd < 0)
        return;
    ckpt_error err = { 0 };
    ckpt_st_header h;
    dcp_st_cache c = { 0 };
    if (ckpt_st_header_read(fd, "fuzz", 0, &h, &err) == 0) {
        for (size_t i = 0; i < h.j.n && i < 64; i++) {
            ckpt_st_entry e;
            int64_t zero[CKPT_MAX_DIMS] = { 0 };
            uint64_t at;
            if (ckpt_st_entry_parse(&h, "fuzz", h.j.keys[i], &h.j.items[i],
                                    &e, &err))
                continue;
            dcp_st_item it = { h.j.keys[i], e.dtype, e.ndim, zero, e.shape,
                               "f", "fuzz", fd, 0, e.end - e.begin };
            (void)dcp_st_locate(&c, &it, &at, &err);
        }
        ckpt_st_header_free(&h);
    }
    dcp_st_cache_free(&c);
    close(fd);
}

/* A zstd item: the stream decoded into a window, and described as a
 * tensor item (a torch.save archive inside) and as a byte item. */
static void dcp_zstd(const uint8_t *p, size_t n)
{
    ckpt_error err = { 0 };
    mem m = { p, n };
    unsigned char win[256];
    ckpt_zs_window w = { 7, sizeof win, win };
    uint64_t total;
    (void)ckpt_zstream_decode(mem_read, &m, n, ckpt_zs_window_out, &w,
                              (uint64_t)4 << 20, &total, "fuzz", &err);
    int fd = mem_file(p, n);
    if (fd < 0)
        return;
    dcp_zs_item it = { fd, "fuzz", "fuzz", 0, n };
    ckpt_torch_tensor tt;
    ckpt_zstd_src z;
    (void)dcp_zs_tensor(&it, 1 << 16, &tt, &z, &err);
    close(fd);
}

/* Describes every tensor of a torch.save archive's tree (an explicit
 * stack, bounded) and gathers the first bytes of each from the input. */
static void archive(const uint8_t *in, size_t n)
{
    mem m = { in, n };
    ckpt_error err = { 0 };
    ckpt_torch_archive a;
    if (ckpt_torch_archive_open(mem_read, &m, n, "fuzz", 1 << 20, &a,
                                &err))
        return;
    const pk_val *stack[256];
    size_t sp = 0, visited = 0;
    stack[sp++] = a.root;
    while (sp && visited++ < 4096) {
        const pk_val *v = stack[--sp];
        if (v->type == PK_DICT || v->type == PK_LIST || v->type == PK_TUPLE) {
            for (size_t i = 0; i < v->n && sp < 256; i++)
                stack[sp++] = v->items[i];
            continue;
        }
        ckpt_torch_tensor t;
        if (v->type != PK_OBJ ||
            ckpt_torch_describe(v, &a.z, a.prefix, "fuzz", &t, &err))
            continue;
        unsigned char out[256];
        uint64_t numel = 1;
        for (int k = 0; k < t.ndim; k++)
            numel *= (uint64_t)t.size[k];
        uint64_t nb = numel * ckpt_dtype_size(t.dtype);
        if (t.data_offset <= n && n - t.data_offset >= t.span_bytes)
            ckpt_strided_gather(out, in + t.data_offset, t.ndim, t.size,
                                t.stride, ckpt_dtype_size(t.dtype), 0,
                                nb < sizeof out ? nb : sizeof out);
    }
    ckpt_torch_archive_close(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    ckpt_error err = { 0 };
    const uint8_t *in = data + 1;
    size_t n = size - 1;
    switch (data[0] % 6) {
    case 0: {
        pk_ctx *ctx;
        pk_val *root;
        if (pk_load(in, n, 64 * n + (1 << 20), "fuzz", &ctx, &root,
                    &err) == 0) {
            int zstd;
            poke(root);
            (void)dcp_zs_transforms(root, "fuzz", &zstd, &err);
            (void)dcp_zs_transforms(pk_attr(root, "transform_descriptors"),
                                    "fuzz", &zstd, &err);
            pk_free(ctx);
        }
        break;
    }
    case 4:
        dcp_blob(in, n);
        break;
    case 5:
        dcp_zstd(in, n);
        break;
    case 1: {
        mem m = { in, n };
        ckpt_torch_tensor t;
        (void)ckpt_torch_tensor_read(mem_read, &m, n, "fuzz", &t, &err);
        break;
    }
    case 3:
        archive(in, n);
        break;
    case 2: {
        json_val v;
        if (json_parse((const char *)in, n, "fuzz", &v, &err) == 0)
            json_free(&v);
        break;
    }
    }
    return 0;
}
