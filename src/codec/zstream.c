/*
 * zstream.c - streaming decode of a zstd stream of unknown length (see
 * zstream.h), with libzstd's ZSTD_DStream: input in ZSTD_DStreamInSize()
 * pieces, output through a ZSTD_DStreamOutSize() buffer.  The bytes each
 * frame decodes to are counted against its header's content size when it
 * records one.
 */
#include "codec/zstream.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "common/error.h"

/* The longest zstd frame header (ZSTD_FRAMEHEADERSIZE_MAX, which zstd.h
 * shows only to static linking). */
#define FRAME_HEADER_MAX 18

typedef struct zs_state {
    ZSTD_DStream *ds;
    unsigned char *ibuf, *obuf;
    size_t isz, osz;
    uint64_t frame_start;   /* decoded offset where the frame began */
    unsigned long long frame_size;   /* its header's content size */
    int in_frame;
} zs_state;

/* Reads the header of the frame starting in ib (n bytes available). */
static int frame_begins(zs_state *z, const unsigned char *ib, size_t n,
                        uint64_t at, uint64_t pos, const char *what,
                        ckpt_error *err)
{
    unsigned long long fcs = ZSTD_getFrameContentSize(ib, n);
    if (fcs == ZSTD_CONTENTSIZE_ERROR)
        return ckpt_err(err, -EIO, "%s: not a zstd frame at its stored byte "
                        "%llu (after %llu decoded bytes)", what,
                        (unsigned long long)at, (unsigned long long)pos);
    z->frame_start = pos;
    z->frame_size = fcs;
    z->in_frame = 1;
    return 0;
}

static int frame_ends(zs_state *z, uint64_t pos, const char *what,
                      ckpt_error *err)
{
    z->in_frame = 0;
    if (z->frame_size != ZSTD_CONTENTSIZE_UNKNOWN &&
        z->frame_size != pos - z->frame_start)
        return ckpt_err(err, -EIO, "%s: a zstd frame's header says it holds "
                        "%llu bytes, but it decodes to %llu: the stream "
                        "lies about its size", what, z->frame_size,
                        (unsigned long long)(pos - z->frame_start));
    return 0;
}

static int run(zs_state *z, ckpt_zs_in_fn in, void *in_arg, uint64_t in_len,
               ckpt_zs_out_fn out, void *out_arg, uint64_t max_out,
               uint64_t *total, const char *what, ckpt_error *err)
{
    uint64_t at = 0, pos = 0;
    ZSTD_inBuffer ib = { z->ibuf, 0, 0 };
    int rc = 0;
    while (rc == 0 && (at < in_len || ib.pos < ib.size || z->in_frame)) {
        size_t left = ib.size - ib.pos;
        /* a frame's header whole in the buffer: refill when less is left */
        if (left == 0 || (!z->in_frame && left < FRAME_HEADER_MAX &&
                          at < in_len)) {
            if (left == 0 && at == in_len)
                return ckpt_err(err, -EIO, "%s: the zstd stream is cut short "
                                "(%llu stored bytes)", what,
                                (unsigned long long)in_len);
            memmove(z->ibuf, z->ibuf + ib.pos, left);
            size_t room = z->isz - left;
            size_t n = in_len - at < room ? (size_t)(in_len - at) : room;
            if ((rc = in(in_arg, z->ibuf + left, n, at, err)) != 0)
                return rc;
            at += n;
            ib = (ZSTD_inBuffer){ z->ibuf, left + n, 0 };
        }
        if (!z->in_frame &&
            (rc = frame_begins(z, z->ibuf + ib.pos, ib.size - ib.pos,
                               at - (ib.size - ib.pos), pos, what, err)) != 0)
            return rc;
        ZSTD_outBuffer ob = { z->obuf, z->osz, 0 };
        size_t r = ZSTD_decompressStream(z->ds, &ob, &ib);
        if (ZSTD_isError(r) && z->frame_size != ZSTD_CONTENTSIZE_UNKNOWN)
            return ckpt_err(err, -EIO, "%s: the zstd frame at decoded byte "
                            "%llu, whose header says it holds %llu bytes, "
                            "does not decode (%s): a damaged stream, or one "
                            "that lies about its size", what,
                            (unsigned long long)z->frame_start,
                            z->frame_size, ZSTD_getErrorName(r));
        if (ZSTD_isError(r))
            return ckpt_err(err, -EIO, "%s: corrupt zstd stream at decoded "
                            "byte %llu: %s", what, (unsigned long long)pos,
                            ZSTD_getErrorName(r));
        if (ob.pos > max_out - pos && ob.pos)
            return ckpt_err(err, -EFBIG, "%s: the zstd stream decodes to "
                            "more than %llu bytes", what,
                            (unsigned long long)max_out);
        if (ob.pos && (rc = out(out_arg, pos, z->obuf, ob.pos, err)) != 0)
            return rc;
        pos += ob.pos;
        if (r == 0)
            rc = frame_ends(z, pos, what, err);
    }
    *total = pos;
    return rc;
}

int ckpt_zstream_decode(ckpt_zs_in_fn in, void *in_arg, uint64_t in_len,
                        ckpt_zs_out_fn out, void *out_arg, uint64_t max_out,
                        uint64_t *total, const char *what, ckpt_error *err)
{
    *total = 0;
    if (in_len == 0)
        return ckpt_err(err, -EIO, "%s: an empty zstd stream", what);
    zs_state z = { 0 };
    z.isz = ZSTD_DStreamInSize();
    z.osz = ZSTD_DStreamOutSize();
    z.ds = ZSTD_createDStream();
    z.ibuf = malloc(z.isz);
    z.obuf = malloc(z.osz);
    int rc;
    if (!z.ds || !z.ibuf || !z.obuf ||
        ZSTD_isError(ZSTD_initDStream(z.ds)))
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    else
        rc = run(&z, in, in_arg, in_len, out, out_arg, max_out, total, what,
                 err);
    ZSTD_freeDStream(z.ds);
    free(z.ibuf);
    free(z.obuf);
    return rc;
}

int ckpt_zs_window_out(void *arg, uint64_t pos, const void *buf, size_t n,
                       ckpt_error *err)
{
    (void)err;
    const ckpt_zs_window *w = arg;
    uint64_t lo = pos > w->lo ? pos : w->lo;
    uint64_t hi = pos + n < w->lo + w->n ? pos + n : w->lo + w->n;
    if (lo < hi)
        memcpy(w->dst + (lo - w->lo), (const unsigned char *)buf + (lo - pos),
               (size_t)(hi - lo));
    return 0;
}
