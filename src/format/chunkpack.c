/*
 * chunkpack.c - a tensor's chunks packed into one index record: the
 * regular grid's arithmetic and the per-chunk records (see chunkpack.h).
 */
#include "format/chunkpack.h"

#include <string.h>

uint64_t ckpt_grid_count(int ndim, const int64_t *shape, const int64_t *block)
{
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (block[d] < 1 || block[d] > shape[d])
            return 0;
        uint64_t k = (uint64_t)((shape[d] + block[d] - 1) / block[d]);
        if (n > UINT64_MAX / k)
            return 0;
        n *= k;
    }
    return n;
}

void ckpt_grid_box(int ndim, const int64_t *shape, const int64_t *block,
                   uint64_t k, int64_t *off, int64_t *size)
{
    for (int d = ndim - 1; d >= 0; d--) {
        uint64_t per = (uint64_t)((shape[d] + block[d] - 1) / block[d]);
        off[d] = (int64_t)(k % per) * block[d];
        size[d] = shape[d] - off[d] < block[d] ? shape[d] - off[d] : block[d];
        k /= per;
    }
}

static void put_varint(ckpt_strbuf *b, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;
    do {
        tmp[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        tmp[n] |= v ? 0x80 : 0;
        n++;
    } while (v);
    ckpt_strbuf_add(b, tmp, n);
}

static void put_u64(ckpt_strbuf *b, uint64_t v)
{
    uint8_t tmp[8];
    for (int i = 0; i < 8; i++)
        tmp[i] = (uint8_t)(v >> (8 * i));
    ckpt_strbuf_add(b, tmp, 8);
}

void ckpt_pack_put(ckpt_strbuf *b, uint64_t file_id,
                   const ckpt_frame_rec *frames, size_t nframes,
                   uint64_t data_hash)
{
    int own_hash = nframes != 1 || frames[0].checksum != data_hash;
    put_varint(b, file_id);
    put_varint(b, 2 * (uint64_t)nframes + (uint64_t)own_hash);
    uint64_t end = 0;
    for (size_t k = 0; k < nframes; k++) {
        const ckpt_frame_rec *f = &frames[k];
        /* The next frame usually starts where this one ends: 0. */
        put_varint(b, k && f->file_offset >= end ? f->file_offset - end
                                                 : f->file_offset);
        put_varint(b, f->stored_size);
        put_varint(b, f->raw_size);
        put_varint(b, (uint64_t)f->codec);
        put_u64(b, f->checksum);
        end = f->file_offset + f->stored_size;
    }
    if (own_hash)
        put_u64(b, data_hash);
}

static int get_varint(const uint8_t *p, size_t len, size_t *pos,
                      uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && *pos < len; shift += 7) {
        uint8_t c = p[(*pos)++];
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

static int get_u64(const uint8_t *p, size_t len, size_t *pos, uint64_t *out)
{
    if (len - *pos < 8)
        return -1;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[*pos + (size_t)i] << (8 * i);
    *pos += 8;
    *out = v;
    return 0;
}

/* One frame's record; *end is where the previous frame ended (0 before
 * the first), *raw the raw bytes before it. */
static int get_frame(const uint8_t *p, size_t len, size_t *pos, uint64_t k,
                     uint64_t *end, uint64_t *raw, ckpt_frame_rec *f)
{
    uint64_t at, stored, rawn, codec, sum;
    if (get_varint(p, len, pos, &at) || get_varint(p, len, pos, &stored) ||
        get_varint(p, len, pos, &rawn) || get_varint(p, len, pos, &codec) ||
        get_u64(p, len, pos, &sum) || rawn == 0 || codec > 31)
        return -1;
    if (k) {
        if (at > UINT64_MAX - *end)
            return -1;
        at += *end;
    }
    if (stored > INT64_MAX - at || rawn > UINT64_MAX - *raw)
        return -1;
    *f = (ckpt_frame_rec){ at, stored, *raw, rawn, sum, (int)codec, 0 };
    *end = at + stored;
    *raw += rawn;
    return 0;
}

void ckpt_varint_put(ckpt_strbuf *b, uint64_t v)
{
    put_varint(b, v);
}

int ckpt_varint_get(const uint8_t *p, size_t len, size_t *pos,
                    uint64_t *out)
{
    return get_varint(p, len, pos, out);
}

int ckpt_pack_get(const uint8_t *blob, size_t len, size_t *pos,
                  ckpt_pack_chunk *out, ckpt_frame_rec *frames,
                  uint64_t max_frames)
{
    uint64_t file, nf2, end = 0, raw = 0;
    if (get_varint(blob, len, pos, &file) || file > INT64_MAX ||
        get_varint(blob, len, pos, &nf2))
        return -1;
    uint64_t n = nf2 / 2;
    if (frames && n > max_frames)
        return -1;
    memset(out, 0, sizeof *out);
    out->file_id = (int64_t)file;
    out->nframes = n;
    for (uint64_t k = 0; k < n; k++) {
        ckpt_frame_rec f;
        if (get_frame(blob, len, pos, k, &end, &raw, &f))
            return -1;
        if (f.stored_size > UINT64_MAX - out->stored_bytes)
            return -1;
        out->stored_bytes += f.stored_size;
        out->codec_mask |= 1u << f.codec;
        if (k == 0)
            out->data_hash = f.checksum;
        if (frames)
            frames[k] = f;
    }
    out->raw_bytes = raw;
    out->file_end = end;
    out->own_hash = (int)(nf2 & 1);
    if (out->own_hash && get_u64(blob, len, pos, &out->data_hash))
        return -1;
    return 0;
}
