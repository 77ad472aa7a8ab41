/*
 * zipread.c - reading a zip archive's central directory (see zipread.h),
 * following APPNOTE.TXT: end of central directory record (searched for
 * backwards through the comment), zip64 locator and record when a field
 * is saturated, central directory entries with their zip64 extra field,
 * and each entry's local header, whose name and extra lengths say where
 * its data starts.
 */
#include "foreign/zipread.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

#define EOCD_SIG 0x06054b50u
#define EOCD64_SIG 0x06064b50u
#define LOC64_SIG 0x07064b50u
#define CDIR_SIG 0x02014b50u
#define LOCAL_SIG 0x04034b50u
#define EOCD_LEN 22
#define MAX_COMMENT 65535
#define MAX_ENTRIES ((uint64_t)1 << 20)
#define MAX_CDIR ((uint64_t)64 << 20)

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t x = 0;
    for (int i = n - 1; i >= 0; i--)
        x = x << 8 | p[i];
    return x;
}

typedef struct eocd {
    uint64_t entries, cd_size, cd_off;
    uint64_t pos;           /* where the record starts */
} eocd;

/* Finds the end-of-central-directory record in the archive's tail. */
static int find_eocd(ckpt_zip_read_fn rd, void *arg, uint64_t len,
                     const char *what, eocd *e, ckpt_error *err)
{
    if (len < EOCD_LEN)
        return ckpt_err(err, -EINVAL, "%s: too short for a zip archive "
                        "(%llu bytes)", what, (unsigned long long)len);
    size_t tail = len < EOCD_LEN + MAX_COMMENT ? (size_t)len
                                                : EOCD_LEN + MAX_COMMENT;
    unsigned char *buf = malloc(tail);
    if (!buf)
        return ckpt_err(err, -ENOMEM, "out of memory");
    int rc = rd(arg, buf, tail, len - tail, err);
    if (rc) {
        free(buf);
        return rc;
    }
    rc = ckpt_err(err, -EINVAL, "%s: not a zip archive, or cut short (no end "
                  "of central directory record)", what);
    for (size_t i = tail - EOCD_LEN + 1; i-- > 0;) {
        const unsigned char *p = buf + i;
        if (le(p, 4) != EOCD_SIG || i + EOCD_LEN + le(p + 20, 2) != tail)
            continue;
        if (le(p + 4, 2) != 0 || le(p + 6, 2) != 0) {
            rc = ckpt_err(err, -EINVAL, "%s: multi-disk zip archive", what);
            break;
        }
        e->entries = le(p + 10, 2);
        e->cd_size = le(p + 12, 4);
        e->cd_off = le(p + 16, 4);
        e->pos = len - tail + i;
        rc = 0;
        break;
    }
    free(buf);
    return rc;
}

/* Takes the fields from the zip64 record when a zip64 locator precedes
 * the end record (torch.save always writes one; it is required when a
 * field is saturated).  The directory then ends where that record
 * starts. */
static int read_zip64(ckpt_zip_read_fn rd, void *arg, const char *what,
                      eocd *e, ckpt_error *err)
{
    int saturated = e->entries == 0xffff || e->cd_size == 0xffffffffu ||
                    e->cd_off == 0xffffffffu;
    unsigned char loc[20], rec[56];
    int rc = 0;
    if (e->pos >= sizeof loc)
        rc = rd(arg, loc, sizeof loc, e->pos - sizeof loc, err);
    if (rc)
        return rc;
    if (e->pos < sizeof loc || le(loc, 4) != LOC64_SIG)
        return saturated ? ckpt_err(err, -EINVAL, "%s: zip64 locator "
                                    "missing", what) : 0;
    uint64_t off = le(loc + 8, 8);
    if (off > e->pos - sizeof loc || e->pos - sizeof loc - off < sizeof rec)
        return ckpt_err(err, -EINVAL, "%s: zip64 record out of place",
                        what);
    if ((rc = rd(arg, rec, sizeof rec, off, err)) != 0)
        return rc;
    if (le(rec, 4) != EOCD64_SIG)
        return ckpt_err(err, -EINVAL, "%s: bad zip64 end of central "
                        "directory record", what);
    e->entries = le(rec + 32, 8);
    e->cd_size = le(rec + 40, 8);
    e->cd_off = le(rec + 48, 8);
    e->pos = off;
    return 0;
}

/* Takes the zip64 extra field's values for the saturated fields. */
static int zip64_extra(const unsigned char *x, size_t xlen, uint64_t *usize,
                       uint64_t *csize, uint64_t *lho)
{
    while (xlen >= 4) {
        uint64_t id = le(x, 2), n = le(x + 2, 2);
        if (n > xlen - 4)
            return -1;
        if (id == 1) {
            const unsigned char *q = x + 4;
            uint64_t left = n;
            uint64_t *f[3] = { usize, csize, lho };
            for (int i = 0; i < 3; i++) {
                if (*f[i] != 0xffffffffu)
                    continue;
                if (left < 8)
                    return -1;
                *f[i] = le(q, 8);
                q += 8;
                left -= 8;
            }
            return 0;
        }
        x += 4 + n;
        xlen -= 4 + n;
    }
    return 0;
}

typedef struct walk {
    ckpt_zip_read_fn rd;
    void *arg;
    uint64_t len;
    int64_t delta;          /* bytes prepended before the archive */
    const char *what;
    ckpt_error *err;
} walk;

/* Fills entry *out from the central directory entry at p (avail bytes
 * left); *used gets its length. */
static int parse_entry(const walk *w, const unsigned char *p, size_t avail,
                       ckpt_zip_entry *out, size_t *used)
{
    if (avail < 46 || le(p, 4) != CDIR_SIG)
        return ckpt_err(w->err, -EINVAL, "%s: damaged zip central directory",
                        w->what);
    uint64_t flags = le(p + 8, 2), method = le(p + 10, 2);
    uint64_t csize = le(p + 20, 4), usize = le(p + 24, 4);
    size_t nlen = le(p + 28, 2), xlen = le(p + 30, 2), clen = le(p + 32, 2);
    uint64_t lho = le(p + 42, 4);
    if (46 + nlen + xlen + clen > avail)
        return ckpt_err(w->err, -EINVAL, "%s: damaged zip central directory",
                        w->what);
    *used = 46 + nlen + xlen + clen;
    if (zip64_extra(p + 46 + nlen, xlen, &usize, &csize, &lho))
        return ckpt_err(w->err, -EINVAL, "%s: bad zip64 extra field",
                        w->what);
    if (!(out->name = malloc(nlen + 1)))
        return ckpt_err(w->err, -ENOMEM, "out of memory");
    memcpy(out->name, p + 46, nlen);
    out->name[nlen] = '\0';
    if (flags & 1)
        return ckpt_err(w->err, -ENOTSUP, "%s: zip entry '%s' is encrypted",
                        w->what, out->name);
    if (method != 0 || csize != usize)
        return ckpt_err(w->err, -ENOTSUP, "%s: zip entry '%s' is compressed "
                        "(method %llu); torch.save stores entries "
                        "uncompressed", w->what, out->name,
                        (unsigned long long)method);
    unsigned char loc[30];
    uint64_t at = lho + (uint64_t)w->delta;
    if (at > w->len || w->len - at < sizeof loc)
        return ckpt_err(w->err, -EINVAL, "%s: zip entry '%s' has its header "
                        "outside the archive", w->what, out->name);
    int rc = w->rd(w->arg, loc, sizeof loc, at, w->err);
    if (rc)
        return rc;
    if (le(loc, 4) != LOCAL_SIG)
        return ckpt_err(w->err, -EINVAL, "%s: zip entry '%s' has no local "
                        "header where the directory says", w->what,
                        out->name);
    uint64_t data = at + 30 + le(loc + 26, 2) + le(loc + 28, 2);
    if (data > w->len || w->len - data < usize)
        return ckpt_err(w->err, -EINVAL, "%s: zip entry '%s' (%llu bytes) "
                        "runs past the end of the archive (%llu bytes): "
                        "it is cut short", w->what, out->name,
                        (unsigned long long)usize,
                        (unsigned long long)w->len);
    out->offset = data;
    out->size = usize;
    return 0;
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const ckpt_zip_entry *)a)->name,
                  ((const ckpt_zip_entry *)b)->name);
}

/* Sorts the entries by name for lookups, refusing a name given twice
 * (which of two entries a reader takes is up to it: torch's takes one,
 * another tool the other). */
static int sort_names(ckpt_zip *z, const char *what, ckpt_error *err)
{
    qsort(z->v, z->n, sizeof *z->v, cmp_entry);
    for (size_t i = 1; i < z->n; i++)
        if (strcmp(z->v[i - 1].name, z->v[i].name) == 0)
            return ckpt_err(err, -EINVAL, "%s: zip entry '%.200s' is there "
                            "twice", what, z->v[i].name);
    return 0;
}

int ckpt_zip_open(ckpt_zip_read_fn rd, void *arg, uint64_t len,
                  const char *what, ckpt_zip *out, ckpt_error *err)
{
    memset(out, 0, sizeof *out);
    eocd e = { 0 };
    int rc = find_eocd(rd, arg, len, what, &e, err);
    if (rc == 0)
        rc = read_zip64(rd, arg, what, &e, err);
    if (rc)
        return rc;
    if (e.entries > MAX_ENTRIES || e.cd_size > MAX_CDIR ||
        e.cd_size > e.pos || e.entries * 46 > e.cd_size)
        return ckpt_err(err, -EINVAL, "%s: damaged zip directory (%llu "
                        "entries in %llu bytes)", what,
                        (unsigned long long)e.entries,
                        (unsigned long long)e.cd_size);
    walk w = { rd, arg, len, 0, what, err };
    uint64_t cd_start = e.pos - e.cd_size;
    w.delta = (int64_t)(cd_start - e.cd_off);   /* 0 unless prepended */
    unsigned char *cd = malloc(e.cd_size + 1);
    out->v = calloc(e.entries + 1, sizeof *out->v);
    if (!cd || !out->v) {
        free(cd);
        return ckpt_err(err, -ENOMEM, "out of memory");
    }
    rc = rd(arg, cd, e.cd_size, cd_start, err);
    size_t pos = 0;
    for (uint64_t i = 0; rc == 0 && i < e.entries; i++) {
        size_t used = 0;
        rc = parse_entry(&w, cd + pos, e.cd_size - pos, &out->v[i], &used);
        out->n++;
        pos += used;
    }
    free(cd);
    if (rc == 0)
        rc = sort_names(out, what, err);
    if (rc)
        ckpt_zip_free(out);
    return rc;
}

void ckpt_zip_free(ckpt_zip *z)
{
    for (size_t i = 0; z->v && i < z->n; i++)
        free(z->v[i].name);
    free(z->v);
    memset(z, 0, sizeof *z);
}

const ckpt_zip_entry *ckpt_zip_find(const ckpt_zip *z, const char *name)
{
    ckpt_zip_entry key = { (char *)name, 0, 0 };
    return z->n ? bsearch(&key, z->v, z->n, sizeof *z->v, cmp_entry) : NULL;
}
