/*
 * planlog.h - the framing of a writer's local plan (docs/FORMAT.md,
 * "Local plans"): a 16-byte preamble (magic, format version), then
 * records appended one write each.  A record is a 12-byte head (payload
 * length, type, a check of the head) and its payload, then the XXH3-64
 * of head and payload.  A record cut short at the end of the file (a
 * writer killed in its write, or still writing) is not there; a bad one
 * with more after it is damage.  Payloads are varints, 8-byte
 * little-endian words and strings (varint length, bytes, a NUL), read
 * with bounds checks: a plan is untrusted input.
 */
#ifndef CKPT_PLANLOG_H
#define CKPT_PLANLOG_H

#include <stddef.h>
#include <stdint.h>
#include "common/error.h"
#include "common/strbuf.h"

#define CKPT_PLANLOG_MAGIC "ckptfs plan"     /* 11 bytes and a NUL */
#define CKPT_PLANLOG_VERSION 1u
#define CKPT_PLANLOG_PREAMBLE 16             /* magic[12], u32 version */
#define CKPT_PLANLOG_HEAD 12                 /* u32 len, u8 type, 3 zero
                                                bytes, u32 head check */
#define CKPT_PLANLOG_TAIL 8                  /* u64 XXH3-64 */

/* Record types. */
enum {
    CKPT_PLANREC_HEADER = 1,    /* the first record: writer, host and boot */
    CKPT_PLANREC_APPEND = 2,    /* one ckpt_planfile_append */
    CKPT_PLANREC_DECLARE = 3,   /* one ckpt_planfile_declare */
};

/* Appends the preamble to b. */
void ckpt_planlog_preamble(ckpt_strbuf *b);
/* Starts a record of `type` in b (its head, filled by _end); returns
 * where it starts. */
size_t ckpt_planlog_begin(ckpt_strbuf *b, int type);
/* Ends the record begun at `start`: fills its head and appends its
 * checksum.  -EFBIG when its payload passes 4 GiB - 1, -ENOMEM on b->oom. */
int ckpt_planlog_end(ckpt_strbuf *b, size_t start);
void ckpt_planlog_u64(ckpt_strbuf *b, uint64_t v);    /* 8 bytes, LE */
void ckpt_planlog_str(ckpt_strbuf *b, const char *s); /* NULL: "" */

/* One record as read: its payload p[0..len) at file offset `at`. */
typedef struct ckpt_planlog_rec {
    int type;
    const uint8_t *p;
    size_t len;
    uint64_t at;
} ckpt_planlog_rec;

/* Checks the preamble of buf[0..size) (the file `path`): 0, or -EINVAL
 * naming what the file is instead (an older ckptfs's SQLite plan, a
 * newer format version, not a plan). */
int ckpt_planlog_check(const uint8_t *buf, size_t size, const char *path,
                       ckpt_error *err);
/* The record at *pos into *r, advancing *pos: 1; 0 at the end of the
 * file or at a record cut short there (*pos then tells where the
 * complete records end); -EIO for a bad record followed by more data
 * (naming path and offset). */
int ckpt_planlog_next(const uint8_t *buf, size_t size, size_t *pos,
                      ckpt_planlog_rec *r, const char *path, ckpt_error *err);

/* Reads a plan file whole (one open, up to its size then) into *buf
 * (malloc'd) and *size, checking its preamble. */
int ckpt_planlog_load(const char *path, uint8_t **buf, size_t *size,
                      ckpt_error *err);

/* A bounds-checked reader of a payload: once `bad`, every read returns
 * 0 or NULL. */
typedef struct ckpt_planlog_cur {
    const uint8_t *p;
    size_t len, pos;
    int bad;
} ckpt_planlog_cur;

uint64_t ckpt_planlog_get_varint(ckpt_planlog_cur *c);
uint64_t ckpt_planlog_get_u64(ckpt_planlog_cur *c);
/* A string (NUL-terminated in place, no NUL inside); NULL when bad. */
const char *ckpt_planlog_get_str(ckpt_planlog_cur *c);
/* n bytes in place; NULL when fewer are left. */
const uint8_t *ckpt_planlog_get_bytes(ckpt_planlog_cur *c, size_t n);

#endif
