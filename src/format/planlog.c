/*
 * planlog.c - the record framing of a local plan (planlog.h,
 * docs/FORMAT.md "Local plans"): writing records into a buffer, reading
 * them back with every length checked against the file.
 */
#include "format/planlog.h"
#include "common/le.h"
#include "format/db.h"
#include "format/chunkpack.h"
#include "common/xxh.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The header of an SQLite file: an older ckptfs's plan. */
static const char SQLITE_MAGIC[16] = "SQLite format 3";

/* The check of a record's head: its first 8 bytes' XXH3-64, low half. */
static uint32_t head_check(const uint8_t *head)
{
    return (uint32_t)XXH3_64bits(head, 8);
}

void ckpt_planlog_preamble(ckpt_strbuf *b)
{
    uint8_t pre[CKPT_PLANLOG_PREAMBLE] = { 0 };
    memcpy(pre, CKPT_PLANLOG_MAGIC, sizeof CKPT_PLANLOG_MAGIC);
    ckpt_put_le(pre + 12, CKPT_PLANLOG_VERSION, 4);
    ckpt_strbuf_add(b, pre, sizeof pre);
}

size_t ckpt_planlog_begin(ckpt_strbuf *b, int type)
{
    size_t start = b->len;
    uint8_t head[CKPT_PLANLOG_HEAD] = { 0 };
    head[4] = (uint8_t)type;
    ckpt_strbuf_add(b, head, sizeof head);
    return start;
}

int ckpt_planlog_end(ckpt_strbuf *b, size_t start)
{
    if (b->oom)
        return -ENOMEM;
    size_t len = b->len - start - CKPT_PLANLOG_HEAD;
    if (len > UINT32_MAX)
        return -EFBIG;
    uint8_t *head = (uint8_t *)b->p + start;
    ckpt_put_le(head, len, 4);
    ckpt_put_le(head + 8, head_check(head), 4);
    uint8_t sum[CKPT_PLANLOG_TAIL];
    ckpt_put_le(sum, XXH3_64bits(head, CKPT_PLANLOG_HEAD + len), 8);
    ckpt_strbuf_add(b, sum, sizeof sum);
    return b->oom ? -ENOMEM : 0;
}

void ckpt_planlog_u64(ckpt_strbuf *b, uint64_t v)
{
    uint8_t w[8];
    ckpt_put_le(w, v, 8);
    ckpt_strbuf_add(b, w, sizeof w);
}

void ckpt_planlog_str(ckpt_strbuf *b, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    ckpt_varint_put(b, n);
    ckpt_strbuf_add(b, s ? s : "", n + 1);
}

/* ---------------------------------------------------------------- reading */

/* An SQLite file with the plans' application_id (a big-endian word at
 * offset 68 of its header): a plan of an older ckptfs. */
static int old_plan(const uint8_t *buf, size_t size)
{
    return size >= 72 && memcmp(buf, SQLITE_MAGIC, sizeof SQLITE_MAGIC) == 0 &&
           ((uint32_t)buf[68] << 24 | (uint32_t)buf[69] << 16 |
            (uint32_t)buf[70] << 8 | buf[71]) == CKPT_PLAN_APP_ID;
}

int ckpt_planlog_check(const uint8_t *buf, size_t size, const char *path,
                       ckpt_error *err)
{
    if (old_plan(buf, size))
        return ckpt_err(err, -EINVAL, "%s was written by an older ckptfs "
                        "(an SQLite plan): finish or abort that save with "
                        "the version that started it", path);
    if (size >= sizeof SQLITE_MAGIC &&
        memcmp(buf, SQLITE_MAGIC, sizeof SQLITE_MAGIC) == 0)
        return ckpt_err(err, -EINVAL, "%s is not a ckptfs local plan (an "
                        "SQLite database)", path);
    if (size < CKPT_PLANLOG_PREAMBLE ||
        memcmp(buf, CKPT_PLANLOG_MAGIC, sizeof CKPT_PLANLOG_MAGIC) != 0)
        return ckpt_err(err, -EINVAL, "%s is not a ckptfs local plan (%s)",
                        path, size == 0 ? "empty file"
                              : size < CKPT_PLANLOG_PREAMBLE ? "cut short"
                              : "no plan header");
    uint64_t v = ckpt_get_le(buf + 12, 4);
    if (v != CKPT_PLANLOG_VERSION)
        return ckpt_err(err, -EINVAL, "%s: local plan format version %llu "
                        "(this ckptfs reads version %u): finish or abort "
                        "that save with the version that started it", path,
                        (unsigned long long)v, CKPT_PLANLOG_VERSION);
    return 0;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

static int damaged(const char *path, uint64_t at, const char *what,
                   ckpt_error *err)
{
    return ckpt_err(err, -EIO, "%s: damaged local plan at offset %llu: %s, "
                    "with more records after it", path,
                    (unsigned long long)at, what);
}

int ckpt_planlog_next(const uint8_t *buf, size_t size, size_t *pos,
                      ckpt_planlog_rec *r, const char *path, ckpt_error *err)
{
    size_t at = *pos, left = size - at;
    if (left < CKPT_PLANLOG_HEAD)
        return 0;                   /* the end, or a head cut short */
    const uint8_t *head = buf + at;
    if (ckpt_get_le(head + 8, 4) != head_check(head) || head[5] || head[6] ||
        head[7] || head[4] == 0) {
        /* A power loss may leave zeros where a write did not land. */
        if (all_zero(head, left))
            return 0;
        return damaged(path, at, "bad record head", err);
    }
    uint64_t len = ckpt_get_le(head, 4);
    if (len > left - CKPT_PLANLOG_HEAD ||
        left - CKPT_PLANLOG_HEAD - len < CKPT_PLANLOG_TAIL)
        return 0;                   /* cut short: still being written */
    size_t end = at + CKPT_PLANLOG_HEAD + (size_t)len + CKPT_PLANLOG_TAIL;
    if (ckpt_get_le(buf + end - CKPT_PLANLOG_TAIL, 8) !=
        XXH3_64bits(head, CKPT_PLANLOG_HEAD + (size_t)len)) {
        if (end == size)
            return 0;               /* the last write, torn */
        return damaged(path, at, "checksum mismatch", err);
    }
    r->type = head[4];
    r->p = head + CKPT_PLANLOG_HEAD;
    r->len = (size_t)len;
    r->at = at;
    *pos = end;
    return 1;
}

int ckpt_planlog_load(const char *path, uint8_t **buf, size_t *size,
                      ckpt_error *err)
{
    *buf = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ELOOP)
        return ckpt_err(err, -EINVAL, "%s is not a ckptfs local plan (not "
                        "a regular file)", path);
    if (fd < 0)
        return ckpt_err_sys(err, -errno, "cannot open local plan %s", path);
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st))
        rc = ckpt_err_sys(err, -errno, "cannot stat local plan %s", path);
    else if (!S_ISREG(st.st_mode))
        rc = ckpt_err(err, -EINVAL, "%s is not a ckptfs local plan (not a "
                      "regular file)", path);
    size_t cap = rc ? 0 : (size_t)st.st_size;
    uint8_t *p = rc ? NULL : malloc(cap ? cap : 1);
    if (!rc && !p)
        rc = ckpt_err(err, -ENOMEM, "%s: out of memory", path);
    size_t got = 0;
    while (!rc && got < cap) {
        ssize_t n = pread(fd, p + got, cap - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            rc = ckpt_err_sys(err, -errno, "cannot read local plan %s", path);
        else if (n == 0)
            break;                  /* truncated meanwhile */
        else
            got += (size_t)n;
    }
    close(fd);
    if (!rc)
        rc = ckpt_planlog_check(p, got, path, err);
    if (rc) {
        free(p);
        return rc;
    }
    *buf = p;
    *size = got;
    return 0;
}

/* ---------------------------------------------------------------- payload */

uint64_t ckpt_planlog_get_varint(ckpt_planlog_cur *c)
{
    uint64_t v = 0;
    if (c->bad || ckpt_varint_get(c->p, c->len, &c->pos, &v)) {
        c->bad = 1;
        return 0;
    }
    return v;
}

const uint8_t *ckpt_planlog_get_bytes(ckpt_planlog_cur *c, size_t n)
{
    if (c->bad || n > c->len - c->pos) {
        c->bad = 1;
        return NULL;
    }
    const uint8_t *p = c->p + c->pos;
    c->pos += n;
    return p;
}

uint64_t ckpt_planlog_get_u64(ckpt_planlog_cur *c)
{
    const uint8_t *p = ckpt_planlog_get_bytes(c, 8);
    return p ? ckpt_get_le(p, 8) : 0;
}

const char *ckpt_planlog_get_str(ckpt_planlog_cur *c)
{
    uint64_t n = ckpt_planlog_get_varint(c);
    if (c->bad || n >= c->len - c->pos) {
        c->bad = 1;
        return NULL;
    }
    const char *s = (const char *)c->p + c->pos;
    if (s[n] != '\0' || memchr(s, '\0', (size_t)n)) {
        c->bad = 1;
        return NULL;
    }
    c->pos += (size_t)n + 1;
    return s;
}
