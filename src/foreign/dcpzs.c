/*
 * dcpzs.c - DCP's ZStandard extension items (see dcpzs.h).  A tensor
 * item's stream holds a torch.save archive whose data.pkl and local
 * headers come first and whose zip directory comes last, so opening
 * decodes the stream once, keeping only its first HEAD and last TAIL
 * bytes, and reads the archive's description from those: the reader then
 * decodes the stream again on each read of the item (codec/zstream.h),
 * a slice of it costing the whole stream.
 */
#include "foreign/dcpzs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "codec/zstream.h"
#include "common/error.h"
#include "common/fileio.h"

#define HEAD ((uint64_t)1 << 20)
#define TAIL ((uint64_t)128 << 10)
#define ZSTD_NAME "stream.zstd"

int dcp_zs_transforms(const pk_val *tr, const char *fqn, int *zstd,
                      ckpt_error *err)
{
    *zstd = 0;
    if (!tr || tr->type == PK_NONE)
        return 0;
    if (tr->type != PK_LIST && tr->type != PK_TUPLE)
        return ckpt_err(err, -EINVAL, "tensor '%s': its transform_descriptors "
                        "are not a list", fqn);
    for (size_t i = 0; i < tr->n; i++) {
        const pk_val *d = tr->items[i];
        if (d->type != PK_STR)
            return ckpt_err(err, -EINVAL, "tensor '%s': a transform "
                            "descriptor is not a string", fqn);
        size_t n = strlen(ZSTD_NAME);
        /* "extension_name[@local-domain][/version]": ours is
         * stream.zstd/1 (any 1.x) */
        int ok = strncmp(d->s, ZSTD_NAME, n) == 0 && d->s[n] == '/' &&
                 d->s[n + 1] == '1' &&
                 (d->s[n + 2] == '\0' || d->s[n + 2] == '.');
        if (!ok)
            return ckpt_err(err, -ENOTSUP, "tensor '%s': its item is stored "
                            "through the transform '%.100s', which ckptfs "
                            "does not read (it reads " ZSTD_NAME "/1, DCP's "
                            "ZStandard extension)", fqn, d->s);
        if (i > 0)
            return ckpt_err(err, -ENOTSUP, "tensor '%s': its item is stored "
                            "through %zu transforms; ckptfs reads one "
                            ZSTD_NAME, fqn, tr->n);
        *zstd = 1;
    }
    return 0;
}

/* The item's stored bytes, read as the stream asks. */
static int item_in(void *arg, void *buf, size_t n, uint64_t off,
                   ckpt_error *err)
{
    const dcp_zs_item *it = arg;
    return ckpt_pread_full(it->fd, buf, n, it->offset + off, it->path, err);
}

/* The first HEAD and last TAIL decoded bytes. */
typedef struct ends {
    unsigned char *head, *tail;
    uint64_t total;
} ends;

static int ends_out(void *arg, uint64_t pos, const void *buf, size_t n,
                    ckpt_error *err)
{
    ends *e = arg;
    ckpt_zs_window w = { 0, HEAD, e->head };
    ckpt_zs_window_out(&w, pos, buf, n, err);
    const unsigned char *p = buf;
    if (n >= TAIL) {
        memcpy(e->tail, p + n - TAIL, TAIL);
    } else {
        memmove(e->tail, e->tail + n, TAIL - n);
        memcpy(e->tail + TAIL - n, p, n);
    }
    e->total = pos + n;
    return 0;
}

/* Reads the archive inside the decoded stream from its kept ends. */
static int ends_read(void *arg, void *buf, size_t n, uint64_t off,
                     ckpt_error *err)
{
    const ends *e = arg;
    uint64_t tail_lo = e->total > TAIL ? e->total - TAIL : 0;
    if (off <= e->total && n <= e->total - off) {
        if (off + n <= HEAD) {
            memcpy(buf, e->head + off, n);
            return 0;
        }
        if (off >= tail_lo) {
            memcpy(buf, e->tail + TAIL - (e->total - off), n);
            return 0;
        }
    }
    return ckpt_err(err, -EINVAL, "the archive in the zstd stream asks for "
                    "its bytes %llu..%llu, outside its first %llu and last "
                    "%llu bytes (where torch.save puts its description)",
                    (unsigned long long)off, (unsigned long long)(off + n),
                    (unsigned long long)HEAD, (unsigned long long)TAIL);
}

static int decode_ends(const dcp_zs_item *it, uint64_t max, ends *e,
                       ckpt_error *err)
{
    e->head = calloc(1, HEAD);
    e->tail = calloc(1, TAIL);
    e->total = 0;
    if (!e->head || !e->tail)
        return ckpt_err(err, -ENOMEM, "out of memory");
    uint64_t total;
    return ckpt_zstream_decode(item_in, (void *)it, it->length, ends_out, e,
                               max, &total, it->what, err);
}

int dcp_zs_tensor(const dcp_zs_item *it, uint64_t chunk_bytes,
                  ckpt_torch_tensor *tt, ckpt_zstd_src *z, ckpt_error *err)
{
    ends e;
    uint64_t max = chunk_bytes > (UINT64_MAX >> 2) ? UINT64_MAX
                                                     : 2 * chunk_bytes + HEAD;
    int rc = decode_ends(it, max, &e, err);
    if (rc == 0 && e.total == 0)
        rc = ckpt_err(err, -ENOTSUP, "%s: its zstd stream is empty (torch "
                      "writes that for SerializationFormat.SAFETENSORS with "
                      "the ZStandard extension, putting the tensor outside "
                      "the stream, where its own reader does not find it "
                      "either)", it->what);
    if (rc == 0)
        rc = ckpt_torch_tensor_read(ends_read, &e, e.total, it->what, tt,
                                    err);
    if (rc == 0)
        *z = (ckpt_zstd_src){ it->offset, it->length, e.total,
                              tt->data_offset, tt->span_bytes };
    free(e.head);
    free(e.tail);
    return rc;
}

int dcp_zs_bytes(const dcp_zs_item *it, ckpt_zstd_src *z, ckpt_error *err)
{
    ends e;
    int rc = decode_ends(it, DCP_ZS_BYTES_MAX, &e, err);
    if (rc == 0)
        *z = (ckpt_zstd_src){ it->offset, it->length, e.total, 0, e.total };
    free(e.head);
    free(e.tail);
    return rc;
}
