/*
 * zipw.c - the zip writer of zipw.h (APPNOTE 6.3: local headers, central
 * directory, zip64 extra fields and end records).
 */
#include "export/zipw.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/grow.h"
#include "export/crc32.h"

#define ZIP_ALIGN 64
#define U32_MAX_FIELD 0xFFFFFFFFu
#define DOS_DATE_1980 0x21      /* 1980-01-01, as torch writes */

/* Little-endian fields into a header being built. */
typedef struct hdr {
    unsigned char b[512];
    size_t n;
} hdr;

static void h16(hdr *h, uint32_t v)
{
    h->b[h->n++] = (unsigned char)v;
    h->b[h->n++] = (unsigned char)(v >> 8);
}

static void h32(hdr *h, uint32_t v)
{
    h16(h, v & 0xffff);
    h16(h, v >> 16);
}

static void h64(hdr *h, uint64_t v)
{
    h32(h, (uint32_t)v);
    h32(h, (uint32_t)(v >> 32));
}

static uint32_t clamp32(uint64_t v)
{
    return v >= U32_MAX_FIELD ? U32_MAX_FIELD : (uint32_t)v;
}

void zipw_init(zipw *z, exp_sink *out)
{
    memset(z, 0, sizeof *z);
    z->out = out;
    z->base = out->pos;
}

void zipw_free(zipw *z)
{
    for (size_t i = 0; i < z->n; i++)
        free(z->e[i].name);
    free(z->e);
    memset(z, 0, sizeof *z);
}

int zipw_begin(zipw *z, const char *name, uint64_t size, ckpt_error *err)
{
    size_t nlen = strlen(name);
    if (nlen > 256)
        return ckpt_err(err, -ENAMETOOLONG, "zip entry name '%s' too long",
                        name);
    zipw_entry *grown = ckpt_grow(z->e, z->n, &z->cap, sizeof *z->e, 8);
    if (!grown)
        return ckpt_err(err, -ENOMEM, "out of memory");
    z->e = grown;
    zipw_entry *e = &z->e[z->n];
    e->name = strdup(name);
    if (!e->name)
        return ckpt_err(err, -ENOMEM, "out of memory");
    e->local = z->out->pos - z->base;
    e->size = size;
    e->crc = 0;
    z->n++;

    int big = size >= U32_MAX_FIELD;
    hdr h = { .n = 0 };
    h32(&h, 0x04034b50);
    h16(&h, big ? 45 : 20);
    h16(&h, 0);                       /* flags */
    h16(&h, 0);                       /* STORED */
    h16(&h, 0);                       /* time */
    h16(&h, DOS_DATE_1980);
    h32(&h, 0);                       /* CRC, patched by zipw_end */
    h32(&h, clamp32(size));
    h32(&h, clamp32(size));
    h16(&h, (uint32_t)nlen);
    size_t xlen_at = h.n;
    h16(&h, 0);                       /* extra length, below */
    memcpy(h.b + h.n, name, nlen);
    h.n += nlen;
    size_t xstart = h.n;
    if (big) {
        h16(&h, 1);
        h16(&h, 16);
        h64(&h, size);
        h64(&h, size);
    }
    /* Padding extra field ("FB", as torch's writer) up to the boundary. */
    uint64_t end = e->local + h.n + 4;
    size_t pad = (size_t)((ZIP_ALIGN - end % ZIP_ALIGN) % ZIP_ALIGN);
    h16(&h, 0x4246);
    h16(&h, (uint32_t)pad);
    memset(h.b + h.n, 'Z', pad);
    h.n += pad;
    size_t xlen = h.n - xstart;
    h.b[xlen_at] = (unsigned char)xlen;
    h.b[xlen_at + 1] = (unsigned char)(xlen >> 8);
    z->open = 1;
    return exp_sink_write(z->out, h.b, h.n, err);
}

int zipw_end(zipw *z, uint32_t crc, ckpt_error *err)
{
    zipw_entry *e = &z->e[z->n - 1];
    z->open = 0;
    e->crc = crc;
    unsigned char b[4] = { (unsigned char)crc, (unsigned char)(crc >> 8),
                           (unsigned char)(crc >> 16),
                           (unsigned char)(crc >> 24) };
    return exp_sink_pwrite(z->out, b, 4, z->base + e->local + 14, err);
}

int zipw_put(zipw *z, const char *name, const void *data, size_t n,
             ckpt_error *err)
{
    int rc = zipw_begin(z, name, n, err);
    if (rc == 0)
        rc = exp_sink_write(z->out, data, n, err);
    if (rc == 0)
        rc = zipw_end(z, exp_crc32(0, data, n), err);
    return rc;
}

/* One central directory record. */
static int write_central(zipw *z, const zipw_entry *e, ckpt_error *err)
{
    size_t nlen = strlen(e->name);
    int big_size = e->size >= U32_MAX_FIELD;
    int big_off = e->local >= U32_MAX_FIELD;
    hdr h = { .n = 0 };
    h32(&h, 0x02014b50);
    h16(&h, 45);                      /* made by */
    h16(&h, big_size || big_off ? 45 : 20);
    h16(&h, 0);
    h16(&h, 0);
    h16(&h, 0);
    h16(&h, DOS_DATE_1980);
    h32(&h, e->crc);
    h32(&h, clamp32(e->size));
    h32(&h, clamp32(e->size));
    h16(&h, (uint32_t)nlen);
    uint32_t xlen = (big_size || big_off) ?
        4u + (big_size ? 16u : 0u) + (big_off ? 8u : 0u) : 0u;
    h16(&h, xlen);
    h16(&h, 0);                       /* comment */
    h16(&h, 0);                       /* disk */
    h16(&h, 0);                       /* internal attributes */
    h32(&h, 0);                       /* external attributes */
    h32(&h, clamp32(e->local));
    memcpy(h.b + h.n, e->name, nlen);
    h.n += nlen;
    if (xlen) {
        h16(&h, 1);
        h16(&h, xlen - 4);
        if (big_size) {
            h64(&h, e->size);
            h64(&h, e->size);
        }
        if (big_off)
            h64(&h, e->local);
    }
    return exp_sink_write(z->out, h.b, h.n, err);
}

int zipw_finish(zipw *z, ckpt_error *err)
{
    uint64_t cd = z->out->pos - z->base;
    for (size_t i = 0; i < z->n; i++) {
        int rc = write_central(z, &z->e[i], err);
        if (rc)
            return rc;
    }
    uint64_t cd_size = z->out->pos - z->base - cd;
    hdr h = { .n = 0 };
    if (z->n >= 0xFFFF || cd >= U32_MAX_FIELD || cd_size >= U32_MAX_FIELD) {
        uint64_t eocd64 = z->out->pos - z->base;
        h32(&h, 0x06064b50);
        h64(&h, 44);
        h16(&h, 45);
        h16(&h, 45);
        h32(&h, 0);
        h32(&h, 0);
        h64(&h, z->n);
        h64(&h, z->n);
        h64(&h, cd_size);
        h64(&h, cd);
        h32(&h, 0x07064b50);          /* locator */
        h32(&h, 0);
        h64(&h, eocd64);
        h32(&h, 1);
    }
    h32(&h, 0x06054b50);
    h16(&h, 0);
    h16(&h, 0);
    h16(&h, z->n >= 0xFFFF ? 0xFFFF : (uint32_t)z->n);
    h16(&h, z->n >= 0xFFFF ? 0xFFFF : (uint32_t)z->n);
    h32(&h, clamp32(cd_size));
    h32(&h, clamp32(cd));
    h16(&h, 0);
    return exp_sink_write(z->out, h.b, h.n, err);
}
