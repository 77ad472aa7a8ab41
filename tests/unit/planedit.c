/*
 * planedit.c - changes to local plans for tests (planedit.h), with the
 * plan's own framing (src/format/planlog.h).
 */
#include "planedit.h"
#include "format/planlog.h"
#include "format/chunkpack.h"
#include "common/strbuf.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Builds a record's new payload into out from its payload p[0..len);
 * returns 1 when it changed it, 0 to keep the record. */
typedef int (*edit_fn)(int type, const uint8_t *p, size_t len,
                       ckpt_strbuf *out, void *arg);

static uint8_t *load(const char *path, size_t *size)
{
    uint8_t *buf;
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_planlog_load(path, &buf, size, &err) == 0, "%s",
                  err.msg);
    return buf;
}

static int rewrite(const char *path, edit_fn fn, void *arg)
{
    size_t size, pos = CKPT_PLANLOG_PREAMBLE;
    uint8_t *buf = load(path, &size);
    ckpt_strbuf out = { 0 }, pay = { 0 };
    ckpt_strbuf_add(&out, buf, CKPT_PLANLOG_PREAMBLE);
    ckpt_planlog_rec r;
    ckpt_error err = { 0 };
    int changed = 0, rc;
    while ((rc = ckpt_planlog_next(buf, size, &pos, &r, path, &err)) == 1) {
        pay.len = 0;
        int c = fn(r.type, r.p, r.len, &pay, arg);
        changed += c;
        size_t start = ckpt_planlog_begin(&out, r.type);
        ckpt_strbuf_add(&out, c ? pay.p : (const char *)r.p,
                        c ? pay.len : r.len);
        ck_assert_int_eq(ckpt_planlog_end(&out, start), 0);
    }
    ck_assert_msg(rc == 0, "%s", err.msg);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(out.p, 1, out.len, f), out.len);
    ck_assert_int_eq(fclose(f), 0);
    ckpt_strbuf_free(&out);
    ckpt_strbuf_free(&pay);
    free(buf);
    return changed;
}

static int boot_fn(int type, const uint8_t *p, size_t len, ckpt_strbuf *out,
                   void *arg)
{
    if (type != CKPT_PLANREC_HEADER)
        return 0;
    ckpt_planlog_cur c = { p, len, 0, 0 };
    ckpt_planlog_str(out, ckpt_planlog_get_str(&c));    /* writer */
    ckpt_planlog_str(out, ckpt_planlog_get_str(&c));    /* producer */
    ckpt_planlog_get_str(&c);
    ckpt_planlog_str(out, arg);
    ck_assert(!c.bad);
    ckpt_strbuf_add(out, p + c.pos, len - c.pos);
    return 1;
}

void planedit_set_boot(const char *path, const char *boot)
{
    ck_assert_int_eq(rewrite(path, boot_fn, (void *)boot), 1);
}

/* An APPEND record's claims: its flags and where its packed part starts. */
typedef struct claims {
    uint64_t flags, bytes;
    const char *file;
    size_t end;
} claims;

static void read_claims(const uint8_t *p, size_t len, claims *cl)
{
    ckpt_planlog_cur c = { p, len, 0, 0 };
    cl->flags = ckpt_planlog_get_varint(&c);
    if (cl->flags & 1) {
        cl->bytes = ckpt_planlog_get_varint(&c);
        cl->file = ckpt_planlog_get_str(&c);
    }
    if (cl->flags & 2) {
        ckpt_planlog_get_varint(&c);
        ckpt_planlog_get_u64(&c);
    }
    ck_assert(!c.bad);
    cl->end = c.pos;
}

static void put_claims(ckpt_strbuf *out, const claims *cl, uint64_t flags)
{
    ckpt_varint_put(out, flags);
    if (flags & 1) {
        ckpt_varint_put(out, cl->bytes);
        ckpt_planlog_str(out, cl->file);
    }
}

typedef struct layout_arg {
    uint64_t pieces, digest;
} layout_arg;

static int layout_fn(int type, const uint8_t *p, size_t len,
                     ckpt_strbuf *out, void *arg)
{
    const layout_arg *a = arg;
    if (type != CKPT_PLANREC_APPEND)
        return 0;
    claims cl = { 0 };
    read_claims(p, len, &cl);
    put_claims(out, &cl, cl.flags | 2);
    ckpt_varint_put(out, a->pieces);
    ckpt_planlog_u64(out, a->digest);
    ckpt_strbuf_add(out, p + cl.end, len - cl.end);
    return 1;
}

int planedit_set_layout(const char *path, uint64_t pieces, uint64_t digest)
{
    layout_arg a = { pieces, digest };
    return rewrite(path, layout_fn, &a);
}

/* Builds an APPEND record's new packed records into recs from its
 * packed records packed[0..plen). */
typedef void (*recs_fn)(const uint8_t *packed, size_t plen,
                        ckpt_strbuf *recs, const void *arg);

typedef struct packed_edit {
    recs_fn fn;
    const void *arg;
} packed_edit;

/* An APPEND record with packed records, those rebuilt by the edit. */
static int packed_fn(int type, const uint8_t *p, size_t len,
                     ckpt_strbuf *out, void *arg)
{
    const packed_edit *e = arg;
    if (type != CKPT_PLANREC_APPEND)
        return 0;
    claims cl = { 0 };
    read_claims(p, len, &cl);
    ckpt_planlog_cur c = { p, len, cl.end, 0 };
    uint64_t n = ckpt_planlog_get_varint(&c);
    if (!n)
        return 0;
    uint64_t plen = ckpt_planlog_get_varint(&c);
    const uint8_t *packed = ckpt_planlog_get_bytes(&c, plen);
    ck_assert(!c.bad);
    ckpt_strbuf recs = { 0 };
    e->fn(packed, plen, &recs, e->arg);
    ckpt_strbuf_add(out, p, cl.end);
    ckpt_varint_put(out, n);
    ckpt_varint_put(out, recs.len);
    ckpt_strbuf_add(out, recs.p, recs.len);
    ckpt_strbuf_add(out, p + c.pos, len - c.pos);
    ckpt_strbuf_free(&recs);
    return 1;
}

static void cut_recs(const uint8_t *packed, size_t plen, ckpt_strbuf *recs,
                     const void *arg)
{
    size_t cut = *(const size_t *)arg;
    ck_assert(plen >= cut);
    ckpt_strbuf_add(recs, packed, plen - cut);
}

int planedit_cut_packed(const char *path, size_t n)
{
    packed_edit e = { cut_recs, &n };
    return rewrite(path, packed_fn, &e);
}

/* The first record's first frame re-encoded with more raw bytes. */
static void grow_recs(const uint8_t *packed, size_t plen, ckpt_strbuf *recs,
                      const void *arg)
{
    ckpt_frame_rec f[16];
    ckpt_pack_chunk rec;
    size_t at = 0;
    ck_assert_int_eq(ckpt_pack_get(packed, plen, &at, &rec, f, 16), 0);
    ck_assert(rec.nframes >= 1 && rec.file_id == 0);
    f[0].raw_size += *(const uint64_t *)arg;
    ckpt_pack_put(recs, 0, f, rec.nframes, rec.data_hash);
    ckpt_strbuf_add(recs, packed + at, plen - at);
}

int planedit_grow_packed_raw(const char *path, uint64_t more)
{
    packed_edit e = { grow_recs, &more };
    return rewrite(path, packed_fn, &e);
}

size_t planedit_last_record(const char *path, size_t *size)
{
    size_t pos = CKPT_PLANLOG_PREAMBLE, last = 0;
    uint8_t *buf = load(path, size);
    ckpt_planlog_rec r;
    ckpt_error err = { 0 };
    while (ckpt_planlog_next(buf, *size, &pos, &r, path, &err) == 1)
        last = (size_t)r.at;
    ck_assert_uint_eq(pos, *size);
    free(buf);
    return last;
}
