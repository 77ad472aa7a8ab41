/*
 * planfile.c - a writer's local plan, .pending/<writer>.plan (see planfile.h
 * and docs/FORMAT.md "Local plans"): a log of records (planlog.h) to which
 * one writer appends, one write per call, the pieces it wrote with their
 * frames, its metadata and the tensors it declares.  At commit every plan
 * is read back into one manifest for the planner.
 *
 * Nothing of a plan is synced, and no other file goes with it: a record
 * that a killed writer left half written is cut short at the end of the
 * file, and readers ignore it, so an append counts whole or not at all.
 * What the commit needs durable it syncs itself: a plan tells it how much
 * of its shard the writer synced already (the synced claim), so that each
 * shard is synced once.  Its header names the host and boot it was written
 * in: a power loss may have cost it its last appends (or its directory
 * entry), so a commit on that host after a restart refuses it rather than
 * publish a checkpoint missing pieces.
 */
#include "format/planfile.h"
#include "format/planlog.h"
#include "format/chunkpack.h"
#include "format/layout.h"
#include "codec/codec.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/pool.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* "HOST BOOT_ID" */
#define HOST_BOOT_CAP 320

/* APPEND record flags. */
#define APPEND_SYNCED 1u    /* a synced claim follows */
#define APPEND_LAYOUT 2u    /* a layout claim follows (else: none) */

struct ckpt_planfile {
    int fd;                     /* -1: closed for good after a failure */
    char *path;
    off_t end;                  /* where the complete records end */
    int broken;                 /* a failed write could not be undone */
    int has_synced;             /* a claim for the next append: */
    uint64_t synced_bytes;
    char synced_file[CKPT_PLAN_SYNCED_CAP];
    uint64_t layout, laid;      /* the digest of the pieces appended, and
                                   their count (layout.h) */
    int unpacked;               /* a piece could not be packed: no layout
                                   is claimed any more */
    ckpt_strbuf rec;            /* the record being written */
    ckpt_strbuf packed;         /* the packed records of an append */
    char **files;               /* the shard paths named in the plan: */
    size_t nfiles;              /* in records written */
    size_t files_n, files_cap;  /* and in the record being written */
};

/* Where and when this process runs, "HOST BOOT_ID", into buf; "" when
 * the boot id cannot be read (then no restart can be told). */
static void host_boot(char *buf, size_t cap)
{
    char host[HOST_BOOT_CAP - 64] = "", boot[64] = "";
    buf[0] = '\0';
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (!f)
        return;
    int ok = fgets(boot, sizeof boot, f) != NULL;
    fclose(f);
    boot[strcspn(boot, "\n")] = '\0';
    if (!ok || !*boot || gethostname(host, sizeof host - 1) != 0)
        return;
    snprintf(buf, cap, "%s %s", host, boot);
}

/* -------------------------------------------------------------- writing */

/* Writes pf->rec at the end of the plan in one call (the rest again after
 * a short write).  On failure the plan is cut back to its last complete
 * record, or, when that fails too, refuses every later append. */
static int put_record(ckpt_planfile *pf, ckpt_error *err)
{
    if (pf->fd < 0 || pf->broken)
        return ckpt_err(err, -EIO, "%s: the local plan failed earlier and "
                        "takes no more records", pf->path);
    const char *p = pf->rec.p;
    size_t left = pf->rec.len;
    off_t at = pf->end;
    while (left) {
        ssize_t n = pwrite(pf->fd, p, left, at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            if (ftruncate(pf->fd, pf->end) != 0)
                pf->broken = 1;
            return ckpt_err_sys(err, -e, "%s: cannot write the local plan",
                                pf->path);
        }
        p += n;
        left -= (size_t)n;
        at += n;
    }
    pf->end = at;
    return 0;
}

/* Ends the record in pf->rec (begun at 0 or after the preamble). */
static int end_record(ckpt_planfile *pf, size_t start, ckpt_error *err)
{
    int rc = ckpt_planlog_end(&pf->rec, start);
    if (rc == -EFBIG)
        return ckpt_err(err, rc, "%s: one append of more than 4 GiB to the "
                        "local plan", pf->path);
    if (rc)
        return ckpt_err(err, rc, "%s: out of memory", pf->path);
    return 0;
}

static void plan_free(ckpt_planfile *pf)
{
    if (pf->fd >= 0)
        close(pf->fd);
    ckpt_strbuf_free(&pf->rec);
    ckpt_strbuf_free(&pf->packed);
    for (size_t i = 0; i < pf->files_n; i++)
        free(pf->files[i]);
    free(pf->files);
    free(pf->path);
    free(pf);
}

/* Forgets the shard paths first named in a record that was not written. */
static void files_undo(ckpt_planfile *pf)
{
    while (pf->files_n > pf->nfiles)
        free(pf->files[--pf->files_n]);
}

/* The preamble and the header record: the writer, what wrote the plan,
 * the host and boot it is written in, and the save's metadata that the
 * writer implies (how its data hashes are made). */
static int write_header(ckpt_planfile *pf, const char *writer,
                        ckpt_error *err)
{
    char boot[HOST_BOOT_CAP];
    host_boot(boot, sizeof boot);
    ckpt_planlog_preamble(&pf->rec);
    size_t start = ckpt_planlog_begin(&pf->rec, CKPT_PLANREC_HEADER);
    ckpt_planlog_str(&pf->rec, writer);
    ckpt_planlog_str(&pf->rec, "ckptfs " CKPT_VERSION_STRING);
    ckpt_planlog_str(&pf->rec, boot);
    ckpt_varint_put(&pf->rec, 1);
    ckpt_planlog_str(&pf->rec, CKPT_META_DATA_HASH);
    ckpt_planlog_str(&pf->rec, CKPT_DATA_HASH_FRAMES);
    int rc = end_record(pf, start, err);
    return rc ? rc : put_record(pf, err);
}

int ckpt_planfile_create(ckpt_planfile **out, const char *path,
                         const char *writer, ckpt_error *err)
{
    *out = NULL;
    if (!writer || !*writer)
        return ckpt_err(err, -EINVAL, "%s: a local plan needs a writer name",
                        path);
    ckpt_planfile *pf = calloc(1, sizeof *pf);
    if (!pf || !(pf->path = strdup(path))) {
        free(pf);
        return ckpt_err(err, -ENOMEM, "%s: out of memory", path);
    }
    pf->layout = CKPT_LAYOUT_SEED;
    pf->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                  0644);
    if (pf->fd < 0) {
        int rc = ckpt_err_sys(err, -errno, "%s: cannot create the local "
                              "plan", path);
        plan_free(pf);
        return rc;
    }
    int rc = write_header(pf, writer, err);
    if (rc) {
        plan_free(pf);
        unlink(path);
        return rc;
    }
    *out = pf;
    return 0;
}

static int check_piece_fields(const ckpt_planfile *pf, const ckpt_piece_rec *p,
                              size_t i, ckpt_error *err)
{
    if (!p->fqn || !p->file)
        return ckpt_err(err, -EINVAL, "%s: piece %zu has no %s", pf->path, i,
                        p->fqn ? "shard file" : "fqn");
    if (p->ndim < 0 || p->ndim > CKPT_MAX_DIMS ||
        ckpt_dtype_size(p->dtype) == 0)
        return ckpt_err(err, -EINVAL, "%s: tensor '%s': bad dtype (%d) or "
                        "dimension count (%d)", pf->path, p->fqn,
                        (int)p->dtype, p->ndim);
    for (int d = 0; d < p->ndim; d++)
        if (p->shape[d] < 0 || p->offsets[d] < 0 || p->sizes[d] < 0)
            return ckpt_err(err, -EINVAL, "%s: tensor '%s': negative shape, "
                            "offset or size", pf->path, p->fqn);
    for (size_t k = 0; k < p->nframes; k++)
        if (p->frames[k].codec < 0 || p->frames[k].base < 0)
            return ckpt_err(err, -EINVAL, "%s: tensor '%s': frame %zu has a "
                            "bad codec or base", pf->path, p->fqn, k);
    return 0;
}

/* A piece's shard as a reference into the plan's list of shard paths:
 * varint f > 0, the f-th path named before in the plan, or 0 and the
 * path (then numbered next).  -ENOMEM. */
static int put_file(ckpt_planfile *pf, const char *file)
{
    ckpt_strbuf *b = &pf->rec;
    for (size_t i = pf->files_n; i-- > 0;)  /* the newest first: usually 1 */
        if (strcmp(pf->files[i], file) == 0) {
            ckpt_varint_put(b, i + 1);
            return 0;
        }
    char *copy = strdup(file);
    if (!copy || ckpt_array_reserve((void **)&pf->files, &pf->files_cap,
                                    pf->files_n + 1, sizeof *pf->files)) {
        free(copy);
        return -ENOMEM;
    }
    pf->files[pf->files_n++] = copy;
    ckpt_varint_put(b, 0);
    ckpt_planlog_str(b, file);
    return 0;
}

/* A piece: its tensor, box and shard, then, unless its frames are in the
 * append's packed records, its sizes, data hash and frames. */
static int put_piece(ckpt_planfile *pf, const ckpt_piece_rec *p, int packed)
{
    ckpt_strbuf *b = &pf->rec;
    ckpt_planlog_str(b, p->fqn);
    ckpt_planlog_str(b, ckpt_dtype_name(p->dtype));
    ckpt_varint_put(b, (uint64_t)p->ndim);
    const int64_t *dims[3] = { p->shape, p->offsets, p->sizes };
    for (int c = 0; c < 3; c++)
        for (int d = 0; d < p->ndim; d++)
            ckpt_varint_put(b, (uint64_t)dims[c][d]);
    if (put_file(pf, p->file))
        return -ENOMEM;
    if (packed)
        return 0;
    ckpt_varint_put(b, p->raw_bytes);
    ckpt_varint_put(b, p->stored_bytes);
    /* As in a packed record: no data hash when it is the one frame's. */
    int own_hash = p->nframes != 1 || p->frames[0].checksum != p->data_hash;
    ckpt_varint_put(b, 2 * (uint64_t)p->nframes + (uint64_t)own_hash);
    if (own_hash)
        ckpt_planlog_u64(b, p->data_hash);
    for (size_t k = 0; k < p->nframes; k++) {
        const ckpt_frame_rec *f = &p->frames[k];
        ckpt_varint_put(b, f->file_offset);
        ckpt_varint_put(b, f->stored_size);
        ckpt_varint_put(b, f->raw_offset);
        ckpt_varint_put(b, f->raw_size);
        ckpt_varint_put(b, (uint64_t)f->codec);
        ckpt_planlog_u64(b, f->checksum);
        ckpt_varint_put(b, (uint64_t)f->base);
    }
    return 0;
}

int ckpt_planfile_share(ckpt_planfile *pf, ckpt_error *err)
{
    if (pf->fd >= 0)
        close(pf->fd);
    pf->fd = open(pf->path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (pf->fd < 0)       /* the writer fails for good (writer.c) */
        return ckpt_err_sys(err, -errno, "%s: cannot open the local plan "
                            "again", pf->path);
    return 0;
}

void ckpt_planfile_note_synced(ckpt_planfile *pf, const char *file,
                               uint64_t bytes)
{
    size_t n = strlen(file);
    pf->has_synced = n < sizeof pf->synced_file;  /* else: the commit
                                                      syncs it */
    if (pf->has_synced) {
        memcpy(pf->synced_file, file, n + 1);
        pf->synced_bytes = bytes;
    }
}

/* 1 when piece p's frames can be a packed record, which the plan then
 * holds instead of them, so that the record gives back exactly what was
 * appended: no delta frame, each frame after the previous one in the
 * shard (the record stores the distance), raw offsets the running sum of
 * raw sizes (the record does not store them), and the piece's raw and
 * stored bytes the sums of its frames'. */
static int packable(const ckpt_piece_rec *p)
{
    uint64_t end = 0, raw = 0, stored = 0;
    for (size_t k = 0; k < p->nframes; k++) {
        const ckpt_frame_rec *f = &p->frames[k];
        if (f->base || f->codec == CKPT_CODEC_REF ||
            f->codec == CKPT_CODEC_XOR || f->codec > 31 ||
            f->raw_size == 0 || f->raw_offset != raw ||
            (k && f->file_offset < end) ||
            f->stored_size > INT64_MAX - f->file_offset ||
            f->raw_size > UINT64_MAX - raw ||
            f->stored_size > UINT64_MAX - stored)
            return 0;
        end = f->file_offset + f->stored_size;
        raw += f->raw_size;
        stored += f->stored_size;
    }
    return raw == p->raw_bytes && stored == p->stored_bytes;
}

/* The pieces' layout added to the plan's digest (into *layout,
 * *unpacked) and their packed records into pf->packed. */
static void pack_layout(ckpt_planfile *pf, const ckpt_piece_rec *pieces,
                        size_t npieces, uint64_t *layout, int *unpacked)
{
    pf->packed.len = 0;
    for (size_t i = 0; i < npieces && !*unpacked; i++) {
        const ckpt_piece_rec *p = &pieces[i];
        *layout = ckpt_layout_step(*layout, p->fqn, p->dtype, p->ndim,
                                   p->shape, p->offsets, p->sizes, p->file);
        if (!packable(p))
            *unpacked = 1;
        else
            ckpt_pack_put(&pf->packed, 0, p->frames, p->nframes,
                          p->data_hash);
    }
}

/* An APPEND record's payload: flags, the claims, the packed records,
 * the metadata, then the pieces (last, so that a reader of the packed
 * records stops before them). */
static int put_append(ckpt_planfile *pf, const ckpt_piece_rec *pieces,
                      size_t npieces, const ckpt_kv *meta, size_t nmeta,
                      uint64_t layout, int unpacked)
{
    ckpt_strbuf *b = &pf->rec;
    ckpt_varint_put(b, (pf->has_synced ? APPEND_SYNCED : 0) |
                       (unpacked ? 0 : APPEND_LAYOUT));
    if (pf->has_synced) {
        ckpt_varint_put(b, pf->synced_bytes);
        ckpt_planlog_str(b, pf->synced_file);
    }
    if (!unpacked) {
        ckpt_varint_put(b, pf->laid + npieces);
        ckpt_planlog_u64(b, layout);
    }
    uint64_t npacked = !unpacked ? npieces : 0;
    ckpt_varint_put(b, npacked);
    if (npacked) {
        ckpt_varint_put(b, pf->packed.len);
        ckpt_strbuf_add(b, pf->packed.p, pf->packed.len);
    }
    ckpt_varint_put(b, nmeta);
    for (size_t i = 0; i < nmeta; i++) {
        ckpt_planlog_str(b, meta[i].key);
        ckpt_planlog_str(b, meta[i].value);
    }
    ckpt_varint_put(b, npieces);
    for (size_t i = 0; i < npieces; i++)
        if (put_piece(pf, &pieces[i], npacked != 0))
            return -ENOMEM;
    return 0;
}

int ckpt_planfile_append(ckpt_planfile *pf, const ckpt_piece_rec *pieces,
                         size_t npieces, const ckpt_kv *meta, size_t nmeta,
                         ckpt_error *err)
{
    for (size_t i = 0; i < npieces; i++) {
        int rc = check_piece_fields(pf, &pieces[i], i, err);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < nmeta; i++)
        if (!meta[i].key || !meta[i].value)
            return ckpt_err(err, -EINVAL, "%s: metadata entry %zu has no %s",
                            pf->path, i, meta[i].key ? "value" : "key");
    uint64_t layout = pf->layout;
    int unpacked = pf->unpacked;
    pack_layout(pf, pieces, npieces, &layout, &unpacked);
    pf->rec.len = 0;
    size_t start = ckpt_planlog_begin(&pf->rec, CKPT_PLANREC_APPEND);
    int rc = put_append(pf, pieces, npieces, meta, nmeta, layout, unpacked);
    rc = rc || pf->packed.oom ? ckpt_err(err, -ENOMEM, "%s: out of memory",
                                         pf->path)
                              : end_record(pf, start, err);
    if (!rc)
        rc = put_record(pf, err);
    if (rc)
        files_undo(pf);
    if (!rc) {
        pf->nfiles = pf->files_n;
        pf->layout = layout;
        pf->unpacked = unpacked;
        pf->laid += npieces;
        pf->has_synced = 0;
    }
    return rc;
}

int ckpt_planfile_declare(ckpt_planfile *pf, const ckpt_kv *declared,
                          size_t n, ckpt_error *err)
{
    for (size_t i = 0; i < n; i++)
        if (!declared[i].key)
            return ckpt_err(err, -EINVAL, "%s: declared tensor %zu has no "
                            "name", pf->path, i);
    pf->rec.len = 0;
    size_t start = ckpt_planlog_begin(&pf->rec, CKPT_PLANREC_DECLARE);
    ckpt_varint_put(&pf->rec, n);
    for (size_t i = 0; i < n; i++) {
        ckpt_planlog_str(&pf->rec, declared[i].key);
        ckpt_planlog_str(&pf->rec, declared[i].value);
    }
    int rc = end_record(pf, start, err);
    return rc ? rc : put_record(pf, err);
}

void ckpt_planfile_close(ckpt_planfile *pf)
{
    if (pf)
        plan_free(pf);
}

/* -------------------------------------------------------------- reading */

/* A declared tensor as read, in the plan's buffer. */
typedef struct decl_ref {
    const char *fqn, *reason;
    size_t seq;
} decl_ref;

typedef struct preader {
    const char *path;
    char *writer;
    ckpt_pieces *tab;       /* where the pieces go, or NULL: not read */
    ckpt_manifest m;        /* the plan's metadata and declared tensors */
    ckpt_plan_synced *synced;   /* its claims, or NULL: not asked */
    ckpt_plan_packed *packed;   /* its packed records, or NULL: not asked */
    ckpt_strbuf data;       /* the packed records read */
    decl_ref *decl;         /* declared tensors, in record order */
    size_t ndecl, decl_cap;
    ckpt_frame_rec *frames; /* a piece's frames being read */
    size_t frames_cap;
    const char **files;     /* the shard paths named so far, in the plan's
                               buffer */
    size_t nfiles, files_cap;
    const uint8_t *recs;    /* the packed records of the append being read */
    size_t recs_len, recs_pos;
    uint64_t nrecs;
    const char *dtype_name; /* the last dtype read, parsed: */
    ckpt_dtype dtype;
    const char *info_key, *info_value;   /* the header's metadata (one) */
    ckpt_error *err;
} preader;

static int plan_damaged(preader *r, const char *what, uint64_t at)
{
    return ckpt_err(r->err, -EIO, "%s: damaged local plan: %s (record at "
                    "offset %llu)", r->path, what, (unsigned long long)at);
}

static int oom(preader *r)
{
    return ckpt_err(r->err, -ENOMEM, "%s: out of memory", r->path);
}

/* A plan written on this host before it restarted is refused. */
static int check_unsynced(preader *r, const char *written)
{
    char now[HOST_BOOT_CAP];
    host_boot(now, sizeof now);
    size_t host = strcspn(now, " ");
    if (!*now || strncmp(now, written, host + 1) != 0 ||
        strcmp(now, written) == 0)
        return 0;
    return ckpt_err(r->err, -ESTALE, "%s was last written on this host "
                    "(%.*s) before it restarted: a save is not durable "
                    "before its commit, so it may have lost pieces; save "
                    "the step again", r->path, (int)host, now);
}

/* The HEADER record: the writer, the producer, host and boot, metadata. */
static int read_header(preader *r, const ckpt_planlog_rec *rec)
{
    ckpt_planlog_cur c = { rec->p, rec->len, 0, 0 };
    const char *w = ckpt_planlog_get_str(&c);
    ckpt_planlog_get_str(&c);                       /* producer */
    const char *boot = ckpt_planlog_get_str(&c);
    uint64_t n = ckpt_planlog_get_varint(&c);
    for (uint64_t i = 0; !c.bad && i < n; i++) {
        const char *k = ckpt_planlog_get_str(&c);
        const char *v = ckpt_planlog_get_str(&c);
        if (i == 0) {
            r->info_key = k;
            r->info_value = v;
        }
    }
    if (c.bad || n > 1 || c.pos != c.len)
        return plan_damaged(r, "bad header", rec->at);
    if (!*w)
        return ckpt_err(r->err, -EIO, "%s: the local plan has no writer name",
                        r->path);
    if (!(r->writer = strdup(w)))
        return oom(r);
    return *boot ? check_unsynced(r, boot) : 0;
}

/* A piece's dtype, by name (the last one's parse reused). */
static int read_dtype(preader *r, ckpt_planlog_cur *c, ckpt_piece_rec *p,
                      uint64_t at)
{
    const char *dt = ckpt_planlog_get_str(c);
    if (!dt)
        return plan_damaged(r, "bad piece", at);
    if (!r->dtype_name || strcmp(dt, r->dtype_name) != 0) {
        r->dtype = ckpt_dtype_parse(dt);
        r->dtype_name = dt;
    }
    p->dtype = r->dtype;
    if (p->dtype == CKPT_DTYPE_INVALID)
        return ckpt_err(r->err, -EINVAL, "%s: tensor '%s': unknown dtype "
                        "'%.40s'", r->path, p->fqn, dt);
    return 0;
}

/* A piece's shard into *file: a reference to a path named before in the
 * plan, or a new one (put_file). */
static int read_file(preader *r, ckpt_planlog_cur *c, const char **file,
                     uint64_t at)
{
    uint64_t f = ckpt_planlog_get_varint(c);
    if (c->bad || f > r->nfiles)
        return plan_damaged(r, "bad shard file reference", at);
    if (f) {
        *file = r->files[f - 1];
        return 0;
    }
    const char *s = ckpt_planlog_get_str(c);
    if (!s)
        return plan_damaged(r, "bad piece", at);
    if (ckpt_array_reserve((void **)&r->files, &r->files_cap, r->nfiles + 1,
                           sizeof *r->files))
        return oom(r);
    r->files[r->nfiles++] = s;
    *file = s;
    return 0;
}

/* Piece p's sizes, data hash and frames (into r->frames) from the
 * append's next packed record. */
static int read_packed_frames(preader *r, ckpt_piece_rec *p, uint64_t at)
{
    size_t pos = r->recs_pos;
    uint64_t file, nf2;
    if (ckpt_varint_get(r->recs, r->recs_len, &pos, &file) ||
        ckpt_varint_get(r->recs, r->recs_len, &pos, &nf2) ||
        nf2 / 2 > (r->recs_len - pos) / 12)   /* 12 bytes a frame at least */
        return plan_damaged(r, "bad packed record", at);
    if (ckpt_array_reserve((void **)&r->frames, &r->frames_cap,
                           nf2 / 2 ? (size_t)(nf2 / 2) : 1,
                           sizeof *r->frames))
        return oom(r);
    ckpt_pack_chunk pc;
    if (ckpt_pack_get(r->recs, r->recs_len, &r->recs_pos, &pc, r->frames,
                      r->frames_cap) ||
        pc.file_id != 0 || (!pc.own_hash && pc.nframes != 1))
        return plan_damaged(r, "bad packed record", at);
    p->raw_bytes = pc.raw_bytes;
    p->stored_bytes = pc.stored_bytes;
    p->data_hash = pc.data_hash;
    p->nframes = (size_t)pc.nframes;
    return 0;
}

/* Piece p's sizes, data hash and frames (into r->frames) as written in
 * the piece (an append without packed records). */
static int read_own_frames(preader *r, ckpt_planlog_cur *c, ckpt_piece_rec *p,
                           uint64_t at)
{
    p->raw_bytes = ckpt_planlog_get_varint(c);
    p->stored_bytes = ckpt_planlog_get_varint(c);
    uint64_t nf2 = ckpt_planlog_get_varint(c), nf = nf2 / 2;
    if (nf2 & 1)
        p->data_hash = ckpt_planlog_get_u64(c);
    /* A frame takes at least 14 bytes: no count past what is left. */
    if (c->bad || nf > (c->len - c->pos) / 14 || (!(nf2 & 1) && nf != 1))
        return plan_damaged(r, "bad piece", at);
    if (ckpt_array_reserve((void **)&r->frames, &r->frames_cap,
                           nf ? (size_t)nf : 1, sizeof *r->frames))
        return oom(r);
    for (uint64_t k = 0; k < nf; k++) {
        ckpt_frame_rec *f = &r->frames[k];
        f->file_offset = ckpt_planlog_get_varint(c);
        f->stored_size = ckpt_planlog_get_varint(c);
        f->raw_offset = ckpt_planlog_get_varint(c);
        f->raw_size = ckpt_planlog_get_varint(c);
        uint64_t codec = ckpt_planlog_get_varint(c);
        f->checksum = ckpt_planlog_get_u64(c);
        uint64_t base = ckpt_planlog_get_varint(c);
        if (c->bad || codec > INT_MAX || base > INT64_MAX)
            return plan_damaged(r, "bad frame", at);
        f->codec = (int)codec;
        f->base = (int64_t)base;
    }
    if (!(nf2 & 1))
        p->data_hash = r->frames[0].checksum;
    p->nframes = (size_t)nf;
    return 0;
}

/* One piece with its frames into r->tab. */
static int read_piece(preader *r, ckpt_planlog_cur *c, uint64_t at)
{
    ckpt_piece_rec p = { .writer = r->writer };
    p.fqn = (char *)ckpt_planlog_get_str(c);
    if (!p.fqn)
        return plan_damaged(r, "bad piece", at);
    int rc = read_dtype(r, c, &p, at);
    if (rc)
        return rc;
    uint64_t ndim = ckpt_planlog_get_varint(c);
    if (ndim > CKPT_MAX_DIMS)
        return plan_damaged(r, "bad dimension count", at);
    p.ndim = (int)ndim;
    int64_t *dims[3] = { p.shape, p.offsets, p.sizes };
    for (int k = 0; k < 3; k++)
        for (int d = 0; d < p.ndim; d++) {
            uint64_t v = ckpt_planlog_get_varint(c);
            if (v > INT64_MAX)
                c->bad = 1;
            dims[k][d] = (int64_t)v;
        }
    if (c->bad)
        return plan_damaged(r, "bad piece", at);
    const char *file = NULL;
    if ((rc = read_file(r, c, &file, at)))
        return rc;
    p.file = (char *)file;
    rc = r->nrecs ? read_packed_frames(r, &p, at)
                  : read_own_frames(r, c, &p, at);
    if (rc)
        return rc;
    p.frames = r->frames;
    return ckpt_pieces_add(r->tab, &p) ? oom(r) : 0;
}

/* The claims of an APPEND record (each one replaces the last). */
static int read_claims(preader *r, ckpt_planlog_cur *c, uint64_t at)
{
    uint64_t flags = ckpt_planlog_get_varint(c);
    uint64_t bytes = 0, pieces = 0, digest = 0;
    const char *file = NULL;
    if (flags & APPEND_SYNCED) {
        bytes = ckpt_planlog_get_varint(c);
        file = ckpt_planlog_get_str(c);
    }
    if (flags & APPEND_LAYOUT) {
        pieces = ckpt_planlog_get_varint(c);
        digest = ckpt_planlog_get_u64(c);
    }
    if (c->bad || flags > (APPEND_SYNCED | APPEND_LAYOUT) ||
        (file && strlen(file) >= CKPT_PLAN_SYNCED_CAP))
        return plan_damaged(r, "bad claims", at);
    if (!r->synced)
        return 0;
    if (file) {
        r->synced->has = 1;
        r->synced->bytes = bytes;
        snprintf(r->synced->file, sizeof r->synced->file, "%s", file);
    }
    r->synced->has_layout = (flags & APPEND_LAYOUT) != 0;
    r->synced->layout_pieces = pieces;
    r->synced->layout = digest;
    return 0;
}

/* The packed records of an APPEND record, kept when asked for. */
static int read_packed_recs(preader *r, ckpt_planlog_cur *c, uint64_t at)
{
    uint64_t n = ckpt_planlog_get_varint(c);
    if (!n)
        return 0;
    uint64_t len = ckpt_planlog_get_varint(c);
    const uint8_t *p = len <= SIZE_MAX ? ckpt_planlog_get_bytes(c, len) : NULL;
    if (!p)
        return plan_damaged(r, "bad packed records", at);
    r->recs = p;
    r->recs_len = (size_t)len;
    r->recs_pos = 0;
    r->nrecs = n;
    if (!r->packed)
        return 0;
    if (n > UINT64_MAX - r->packed->pieces)
        return plan_damaged(r, "bad packed records", at);
    r->packed->pieces += n;
    ckpt_strbuf_add(&r->data, p, (size_t)len);
    return r->data.oom ? oom(r) : 0;
}

static int read_append(preader *r, const ckpt_planlog_rec *rec)
{
    ckpt_planlog_cur c = { rec->p, rec->len, 0, 0 };
    r->nrecs = 0;
    int rc = read_claims(r, &c, rec->at);
    if (!rc)
        rc = read_packed_recs(r, &c, rec->at);
    uint64_t nmeta = rc ? 0 : ckpt_planlog_get_varint(&c);
    for (uint64_t i = 0; !rc && i < nmeta; i++) {
        const char *k = ckpt_planlog_get_str(&c);
        const char *v = ckpt_planlog_get_str(&c);
        if (!k || !v)
            return plan_damaged(r, "bad metadata", rec->at);
        if (ckpt_manifest_set_meta(&r->m, k, v, r->writer))
            return oom(r);
    }
    if (rc || !r->tab)
        return rc;
    uint64_t n = ckpt_planlog_get_varint(&c);
    if (r->nrecs && n != r->nrecs)
        return plan_damaged(r, "as many packed records as pieces expected",
                            rec->at);
    for (uint64_t i = 0; !rc && !c.bad && i < n; i++)
        rc = read_piece(r, &c, rec->at);
    if (!rc && (c.bad || c.pos != c.len || r->recs_pos != r->recs_len))
        rc = plan_damaged(r, "bad pieces", rec->at);
    return rc;
}

static int read_declare(preader *r, const ckpt_planlog_rec *rec)
{
    ckpt_planlog_cur c = { rec->p, rec->len, 0, 0 };
    uint64_t n = ckpt_planlog_get_varint(&c);
    for (uint64_t i = 0; !c.bad && i < n; i++) {
        const char *f = ckpt_planlog_get_str(&c);
        const char *why = ckpt_planlog_get_str(&c);
        if (c.bad)
            break;
        if (ckpt_array_reserve((void **)&r->decl, &r->decl_cap, r->ndecl + 1,
                               sizeof *r->decl))
            return oom(r);
        r->decl[r->ndecl] = (decl_ref){ f, why, r->ndecl };
        r->ndecl++;
    }
    if (c.bad || c.pos != c.len)
        return plan_damaged(r, "bad declared tensors", rec->at);
    return 0;
}

static int decl_cmp(const void *a, const void *b)
{
    const decl_ref *x = a, *y = b;
    int c = strcmp(x->fqn, y->fqn);
    return c ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

static int meta_cmp(const void *a, const void *b)
{
    return strcmp(((const ckpt_kv *)a)->key, ((const ckpt_kv *)b)->key);
}

/* The declared tensors into r->m in fqn order, once each, with the last
 * non-empty reason given. */
static int take_declared(preader *r)
{
    if (r->ndecl)
        qsort(r->decl, r->ndecl, sizeof *r->decl, decl_cmp);
    ckpt_manifest *m = &r->m;
    for (size_t i = 0, j; i < r->ndecl; i = j) {
        const char *why = "";
        for (j = i; j < r->ndecl && strcmp(r->decl[j].fqn, r->decl[i].fqn) == 0;
             j++)
            if (*r->decl[j].reason)
                why = r->decl[j].reason;
        if (ckpt_array_reserve((void **)&m->declared, &m->declared_cap,
                               m->ndeclared + 1, sizeof *m->declared))
            return oom(r);
        ckpt_kv *d = &m->declared[m->ndeclared];
        d->key = strdup(r->decl[i].fqn);
        d->value = strdup(why);
        d->writer = strdup(r->writer);
        m->ndeclared++;
        if (!d->key || !d->value || !d->writer)
            return oom(r);
    }
    return 0;
}

/* Every complete record of the plan buf[0..size). */
static int read_records(preader *r, const uint8_t *buf, size_t size)
{
    size_t pos = CKPT_PLANLOG_PREAMBLE;
    ckpt_planlog_rec rec;
    int rc = ckpt_planlog_next(buf, size, &pos, &rec, r->path, r->err);
    if (rc == 0 || (rc == 1 && rec.type != CKPT_PLANREC_HEADER))
        return ckpt_err(r->err, -EINVAL, "%s is not a ckptfs local plan (%s)",
                        r->path, rc ? "no header record" : "cut short");
    rc = rc < 0 ? rc : read_header(r, &rec);
    while (!rc && (rc = ckpt_planlog_next(buf, size, &pos, &rec, r->path,
                                          r->err)) == 1) {
        if (rec.type == CKPT_PLANREC_APPEND)
            rc = read_append(r, &rec);
        else if (rec.type == CKPT_PLANREC_DECLARE)
            rc = read_declare(r, &rec);
        else
            rc = plan_damaged(r, "unknown record type", rec.at);
    }
    if (rc < 0)
        return rc;
    /* In key order, then the header's (as the SQLite plans had it). */
    if (r->m.nmeta)
        qsort(r->m.meta, r->m.nmeta, sizeof *r->m.meta, meta_cmp);
    if (r->info_key &&
        ckpt_manifest_set_meta(&r->m, r->info_key, r->info_value, r->writer))
        return oom(r);
    return 0;
}

/* Reads the plan at r->path into r (its buffer freed before returning:
 * everything kept is copied). */
static int read_plan(preader *r)
{
    uint8_t *buf;
    size_t size;
    ckpt_manifest_init(&r->m);
    int rc = ckpt_planlog_load(r->path, &buf, &size, r->err);
    if (!rc)
        rc = read_records(r, buf, size);
    if (!rc && r->packed) {
        if (r->ndecl)
            qsort(r->decl, r->ndecl, sizeof *r->decl, decl_cmp);
        for (size_t i = 0; i < r->ndecl; i++)
            r->packed->declared += i == 0 ||
                strcmp(r->decl[i].fqn, r->decl[i - 1].fqn) != 0;
    } else if (!rc) {
        rc = take_declared(r);
    }
    free(buf);
    free(r->decl);
    free(r->frames);
    free(r->files);
    return rc;
}

int ckpt_planfile_read_pieces(const char *path, ckpt_pieces *tab,
                              ckpt_manifest *meta, ckpt_error *err)
{
    return ckpt_planfile_read_synced(path, tab, meta, NULL, err);
}

int ckpt_planfile_read_synced(const char *path, ckpt_pieces *tab,
                              ckpt_manifest *meta, ckpt_plan_synced *synced,
                              ckpt_error *err)
{
    preader r = { .path = path, .tab = tab, .synced = synced, .err = err };
    if (synced)
        memset(synced, 0, sizeof *synced);
    int rc = read_plan(&r);
    if (!rc && ckpt_manifest_take(meta, &r.m))
        rc = ckpt_err(err, -ENOMEM, "%s: out of memory", path);
    ckpt_manifest_free(&r.m);
    free(r.writer);
    return rc;
}

/* What ckpt_planfile_read_packed_many reads of one plan. */
static int read_packed(const char *path, ckpt_plan_packed *out,
                       ckpt_error *err)
{
    preader r = { .path = path, .synced = &out->claim, .packed = out,
                  .err = err };
    out->has_packed = 1;
    int rc = read_plan(&r);
    if (!rc && ckpt_manifest_take(&out->meta, &r.m))
        rc = ckpt_err(err, -ENOMEM, "%s: out of memory", path);
    ckpt_manifest_free(&r.m);
    out->writer = r.writer;
    out->data = (uint8_t *)r.data.p;
    out->len = r.data.len;
    return rc;
}

/* One plan read by a worker of ckpt_planfile_read_many into its own
 * table. */
typedef struct read_slot {
    char path[4096];
    ckpt_pieces tab;
    ckpt_manifest meta;
    ckpt_plan_synced synced;
    ckpt_plan_packed *packed;   /* read as ckpt_planfile_read_packed_many
                                   does, not into tab, meta, synced */
    ckpt_error err;
    int rc;
    ckpt_taskgroup *g;
} read_slot;

static void read_task(void *arg, int worker)
{
    (void)worker;
    read_slot *s = arg;
    if (s->packed)
        s->rc = read_packed(s->path, s->packed, &s->err);
    else
        s->rc = ckpt_planfile_read_synced(s->path, &s->tab, &s->meta,
                                          &s->synced, &s->err);
    ckpt_tg_done(s->g);
}

/* Reads slots[0..m), plans names[0..m) under dir, on the pool, then
 * appends them in order, each one's claim to synced[k] and the table's
 * size after it to ends[k] (either may be NULL); the first failure in that
 * order is reported. */
static int read_batch(ckpt_pool *pool, read_slot *slots, size_t m,
                      const char *dir, char *const *names, ckpt_pieces *tab,
                      ckpt_manifest *meta, ckpt_plan_synced *synced,
                      size_t *ends, ckpt_error *err)
{
    ckpt_taskgroup g;
    ckpt_tg_init(&g);
    int rc = 0;
    for (size_t k = 0; k < m && !rc; k++) {
        ckpt_pieces_init(&slots[k].tab);
        ckpt_manifest_init(&slots[k].meta);
        slots[k].err = (ckpt_error){ 0 };
        slots[k].g = &g;
        rc = ckpt_path_join(slots[k].path, sizeof slots[k].path, dir,
                            names[k], err);
    }
    if (!rc)
        ckpt_pool_run_tasks(pool, read_task, slots, m, sizeof *slots, &g);
    ckpt_tg_destroy(&g);
    for (size_t k = 0; k < m; k++) {
        if (!rc && slots[k].rc) {
            *err = slots[k].err;
            rc = slots[k].rc;
        }
        if (!rc && (ckpt_pieces_append(tab, &slots[k].tab) ||
                    ckpt_manifest_take(meta, &slots[k].meta)))
            rc = ckpt_err(err, -ENOMEM, "%s: out of memory", slots[k].path);
        if (!rc && synced)
            synced[k] = slots[k].synced;
        if (!rc && ends)
            ends[k] = tab->n;
        ckpt_pieces_free(&slots[k].tab);
        ckpt_manifest_free(&slots[k].meta);
    }
    return rc;
}

int ckpt_planfile_read_many(const char *dir, char *const *names, size_t n,
                            int threads, ckpt_pieces *tab,
                            ckpt_manifest *meta, ckpt_plan_synced *synced,
                            size_t *ends, ckpt_error *err)
{
    if (threads <= 0)
        threads = ckpt_cpu_count();
    if ((size_t)threads > n)
        threads = n ? (int)n : 1;
    /* A few plans per thread at a time: little memory held twice. */
    size_t batch = 4 * (size_t)threads;
    read_slot *slots = calloc(batch, sizeof *slots);
    ckpt_pool *pool = NULL;
    if (!slots)
        return ckpt_err(err, -ENOMEM, "out of memory");
    int rc = ckpt_pool_create(&pool, threads > 1 ? threads - 1 : 1, err);
    for (size_t at = 0; !rc && at < n; at += batch)
        rc = read_batch(pool, slots, n - at < batch ? n - at : batch, dir,
                        names + at, tab, meta, synced ? synced + at : NULL,
                        ends ? ends + at : NULL, err);
    if (pool)
        ckpt_pool_destroy(pool);
    free(slots);
    return rc;
}

int ckpt_planfile_read_packed_many(const char *dir, char *const *names,
                                   size_t n, int threads,
                                   ckpt_plan_packed *out, ckpt_error *err)
{
    if (threads <= 0)
        threads = ckpt_cpu_count();
    read_slot *slots = calloc(n ? n : 1, sizeof *slots);
    ckpt_pool *pool = NULL;
    if (!slots)
        return ckpt_err(err, -ENOMEM, "out of memory");
    int rc = ckpt_pool_create(&pool, threads > 1 ? threads - 1 : 1, err);
    ckpt_taskgroup g;
    ckpt_tg_init(&g);
    for (size_t k = 0; k < n && !rc; k++) {
        ckpt_manifest_init(&out[k].meta);
        slots[k].packed = &out[k];
        slots[k].g = &g;
        rc = ckpt_path_join(slots[k].path, sizeof slots[k].path, dir,
                            names[k], err);
    }
    if (!rc && n)
        ckpt_pool_run_tasks(pool, read_task, slots, n, sizeof *slots, &g);
    ckpt_tg_destroy(&g);
    for (size_t k = 0; k < n && !rc; k++)
        if (slots[k].rc) {
            if (err)
                *err = slots[k].err;
            rc = slots[k].rc;
        }
    if (pool)
        ckpt_pool_destroy(pool);
    free(slots);
    return rc;
}

void ckpt_plan_packed_free(ckpt_plan_packed *p)
{
    ckpt_manifest_free(&p->meta);
    free(p->data);
    free(p->writer);
    p->data = NULL;
    p->writer = NULL;
}

int ckpt_planfile_read(const char *path, ckpt_manifest *m, ckpt_error *err)
{
    ckpt_pieces tab;
    ckpt_manifest got;
    ckpt_pieces_init(&tab);
    ckpt_manifest_init(&got);
    int rc = ckpt_planfile_read_pieces(path, &tab, &got, err);
    for (size_t i = 0; !rc && i < tab.n; i++) {
        ckpt_piece_rec *p = ckpt_manifest_add_piece(&got);
        if (!p || ckpt_pieces_get(&tab, i, p))
            rc = ckpt_err(err, -ENOMEM, "%s: out of memory", path);
    }
    if (!rc && ckpt_manifest_take(m, &got))
        rc = ckpt_err(err, -ENOMEM, "%s: out of memory", path);
    ckpt_manifest_free(&got);
    ckpt_pieces_free(&tab);
    return rc;
}
