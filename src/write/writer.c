/*
 * writer.c - one writer's stream into a checkpoint directory.
 *
 * A writer owns data/<name>.shard and .pending/<name>.plan.  Each piece is
 * cut into frames of at most the frame size (on element boundaries); frames
 * are checksummed and encoded on the writer's thread pool while the caller
 * goes on, and appended to the shard in order by the encoder that finds
 * the oldest frame done (a delta stream's by the caller: drain_ready).  A
 * delta stream's frames that have a base frame are checksummed by the
 * caller, which records those identical to the base's as refs
 * (ref_at_submit).  Memory in flight is bounded by a ring of
 * (2 * threads + 2) frame slots per stream.  Closing a stream records
 * the piece in memory; ckpt_writer_flush records them in the plan
 * file (one transaction) after the shard's fdatasync, which the plan notes
 * so that the commit does not sync the shard again.  Neither the plan
 * nor the data/ directory is synced here: the commit syncs what the
 * index will point to (docs/GUARANTEES.md, "Which sync makes which
 * promise").
 */
#include "ckptfs.h"

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codec/codec.h"
#include "common/error.h"
#include "common/fileio.h"
#include "format/planfile.h"
#include "format/lease.h"
#include "format/model.h"
#include "format/plan.h"
#include "common/pool.h"
#include "common/shape.h"
#include "write/writer.h"
#include "format/index.h"
#include "common/optsize.h"
#include "write/wopts.h"
#include "write/deltasave.h"
#include "codec/xorframe.h"

#define MAX_NAME_LEN 128

/* What trying xor frames may cost a writer: each try spends a credit and
 * each xor frame kept earns XOR_WIN_CREDIT, up to XOR_CREDIT_MAX; without
 * credit, one candidate in XOR_PROBE is tried, whose win brings xor frames
 * back.  Where frames change little (rows of a table) nearly every try
 * wins and every frame is tried; where everything changes (dense
 * training), the tries stop after a few and cost one base decode in
 * XOR_PROBE frames.  The credit is spent in the order frames are
 * submitted (a ticket each, see xor_reserve; a ref, found at submission,
 * takes none) and settled in the order they are drained, both on the
 * caller's thread: which frames are tried does not depend on which
 * encoder gets to a frame first.  Each lane
 * (ckpt_writer_put_lane) has a budget of its own, so that this holds for
 * streams of two threads too. */
#define XOR_CREDIT 2
#define XOR_WIN_CREDIT 2
#define XOR_CREDIT_MAX 64
#define XOR_PROBE 32
/* A try is judged from its base frame's leading planes before the frame
 * is decoded (planes_hopeless) unless the writer's credit is above this
 * when its ticket is taken: a run of wins (embedding tables, where every
 * try wins) goes straight to the decode, which it needs anyway. */
#define XOR_PEEK_CREDIT (2 * XOR_CREDIT)

/* A lane's xor budget (see XOR_CREDIT). */
typedef struct xor_budget {
    _Atomic int credit;          /* xor frames the lane may still try;
                                    starts at XOR_CREDIT */
    _Atomic unsigned skipped;    /* candidates not tried since */
} xor_budget;

struct ckpt_writer {
    pthread_mutex_t mu;          /* guards everything below but opts/pool */
    char *dir;
    char *name;
    char *shard_rel;             /* "data/<name>.shard" */
    ckpt_shard *shard;
    ckpt_planfile *plan;
    ckpt_lease *lease;           /* held from open to free */
    ckpt_manifest pending;       /* recorded, not yet in the plan file */
    ckpt_write_opts opts;
    ckpt_pool *pool;
    ckpt_codec_ctx **ctx;        /* one per pool worker */
    ckpt_delta_scratch *dsc;     /* one per pool worker: base frames */
    int nworkers;
    ckpt_error failure;          /* sticky: set once the shard is broken */
    uint64_t synced;             /* shard bytes fdatasynced */
    int plan_dirty;              /* plan changed since ckpt_writer_sync */
    /* Frame buffers of the ring (copy and encoded output per slot), kept
     * for the next stream: a writer streams one piece at a time, and a
     * mount writes many small pieces. */
    unsigned char **spare;       /* 2 per slot: own, enc */
    int nspare;
    char *base;                  /* opts.base, copied */
    ckpt_bases *bases;           /* a delta save's (opts.base), or NULL */
    xor_budget xor[CKPT_WRITER_LANES];   /* one per lane */
};

/* One frame in flight. */
typedef struct slot {
    struct ckpt_stream *s;
    const unsigned char *src;    /* frame's raw bytes (own or borrowed) */
    unsigned char *own;          /* owned copy buffer, frame size */
    unsigned char *enc;          /* encoded output, codec bound */
    size_t n, enc_n;
    int codec;
    uint64_t checksum;
    int summed;                  /* checksum taken at submission */
    uint64_t seq;                /* frame number in the piece */
    int64_t base;                /* a delta frame's base id, else 0 */
    int ticket;                  /* delta saves: its xor_reserve */
    int peek;                    /* its try judges the base frame's
                                    leading planes first (planes_hopeless) */
    unsigned char *xenc;         /* delta saves: the xor frame */
    int rc;
    int done;
    ckpt_error err;
} slot;

struct ckpt_stream {
    ckpt_writer *w;
    ckpt_piece_rec rec;
    size_t itemsize, frame;
    int codec;                   /* opts.codec resolved for the dtype */
    uint64_t received;
    uint64_t raw_pos;            /* raw offset of the next frame submitted */
    slot *ring;
    int depth;
    uint64_t head, tail;         /* slots drained / submitted */
    size_t fill;                 /* bytes copied into ring[tail] so far */
    int borrowed;                /* submitted slots point into caller data */
    int lend;                    /* the caller's data outlives the stream:
                                    encode whole frames from it, uncopied */
    ckpt_base_frame *bf;         /* delta saves: the base chunk's frames */
    xor_budget *xb;              /* its lane's, for xor tries */
    size_t nbf;
    int tries;                   /* submitted slots holding an xor try,
                                    not drained yet */
    int self_drain;              /* the encoders append the frames (see
                                    drain_ready) */
    int appending;               /* a thread is appending the head */
    int waiters;                 /* lent writes not waited for yet
                                    (ckpt_stream_write_lent_async) */
    pthread_mutex_t mu;          /* guards head, tail, done, appending,
                                    rc, err, tries */
    pthread_cond_t cv;
    int rc;                      /* first error, sticky */
    ckpt_error err;
};

void ckpt_write_opts_init(ckpt_write_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->codec = CKPT_CODEC_AUTO;
    o->level = 1;
    o->frame_size = CKPT_DEFAULT_FRAME_SIZE;
    o->threads = 0;
    o->sync = 1;
    o->drop_cache = -1;
    o->base = NULL;
    o->full_every = 8;
}

/* ---------------------------------------------------------------- helpers */

static int check_writer_name(const char *name, ckpt_error *err)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > MAX_NAME_LEN || name[0] == '.')
        return ckpt_err(err, -EINVAL,
                        "writer name '%s' must be 1-%d characters of "
                        "[A-Za-z0-9._-] not starting with '.'",
                        name ? name : "", MAX_NAME_LEN);
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
        if (!ok)
            return ckpt_err(err, -EINVAL,
                            "writer name '%s' has a character outside "
                            "[A-Za-z0-9._-]", name);
    }
    return 0;
}

/* Returns the writer's sticky failure, if any. */
static int writer_failed(ckpt_writer *w, ckpt_error *err)
{
    if (w->failure.code == 0)
        return 0;
    if (err)
        *err = w->failure;
    return w->failure.code;
}

static int open_files(ckpt_writer *w, ckpt_error *err)
{
    char rel[MAX_NAME_LEN + 32], path[4096];
    snprintf(rel, sizeof rel, "data/%s.shard", w->name);
    w->shard_rel = strdup(rel);
    if (!w->shard_rel)
        return ckpt_err(err, -ENOMEM, "out of memory");
    int rc = ckpt_path_join(path, sizeof path, w->dir, rel, err);
    if (rc == 0)
        rc = ckpt_shard_create(&w->shard, path, err);
    if (rc == 0)
        ckpt_shard_set_nocache(w->shard, w->opts.drop_cache > 0);
    if (rc == -EEXIST)
        return ckpt_err(err, rc, "writer name '%s' is already in use in %s "
                        "(%s exists)", w->name, w->dir, rel);
    if (rc)
        return rc;
    snprintf(rel, sizeof rel, ".pending/%s.plan", w->name);
    rc = ckpt_path_join(path, sizeof path, w->dir, rel, err);
    if (rc == 0) {
        rc = ckpt_planfile_create(&w->plan, path, w->name, err);
        if (rc)
            ckpt_err_wrap(err, rc, "cannot create the local plan");
    }
    return rc;
}

static int make_workers(ckpt_writer *w, ckpt_error *err)
{
    int rc = ckpt_pool_create(&w->pool, w->opts.threads, err);
    if (rc)
        return rc;
    w->nworkers = ckpt_pool_threads(w->pool);
    w->ctx = calloc((size_t)w->nworkers, sizeof *w->ctx);
    w->dsc = calloc((size_t)w->nworkers, sizeof *w->dsc);
    if (!w->ctx || !w->dsc)
        return ckpt_err(err, -ENOMEM, "out of memory");
    for (int i = 0; i < w->nworkers; i++)
        if (!(w->ctx[i] = ckpt_codec_ctx_new()))
            return ckpt_err(err, -ENOMEM, "out of memory");
    return 0;
}

static void writer_free(ckpt_writer *w)
{
    for (int i = 0; i < w->nspare; i++)
        free(w->spare[i]);
    free(w->spare);
    if (w->pool)
        ckpt_pool_destroy(w->pool);
    for (int i = 0; w->ctx && i < w->nworkers; i++)
        ckpt_codec_ctx_free(w->ctx[i]);
    for (int i = 0; w->dsc && i < w->nworkers; i++)
        ckpt_delta_scratch_free(&w->dsc[i]);
    free(w->ctx);
    free(w->dsc);
    if (w->shard)
        ckpt_shard_close(w->shard, NULL);
    if (w->plan)
        ckpt_planfile_close(w->plan);
    ckpt_manifest_free(&w->pending);
    ckpt_bases_free(w->bases);
    free(w->base);
    ckpt_lease_drop(w->lease);
    pthread_mutex_destroy(&w->mu);
    free(w->dir);
    free(w->name);
    free(w->shard_rel);
    free(w);
}

/* ---------------------------------------------------------------- writer */

/* A delta save: opens the base and records it in the save's metadata
 * (the committer checks every writer saw the same one). */
static int open_base(ckpt_writer *w, ckpt_error *err)
{
    int rc = ckpt_bases_for_save(&w->bases, w->dir, w->base, err);
    if (rc)
        return ckpt_err_wrap(err, rc, "delta save into %s", w->dir);
    for (int i = 0; i < CKPT_WRITER_LANES; i++)
        atomic_store(&w->xor[i].credit, XOR_CREDIT);
    size_t n;
    const ckpt_index_base *list = ckpt_bases_list(w->bases, &n);
    for (size_t i = 0; i < n; i++) {
        if (list[i].id != ckpt_bases_top(w->bases))
            continue;
        if (ckpt_manifest_set_meta(&w->pending, CKPT_META_BASE,
                                   list[i].path, w->name) ||
            ckpt_manifest_set_meta(&w->pending, CKPT_META_BASE_IDENTITY,
                                   list[i].identity, w->name))
            return ckpt_err(err, -ENOMEM, "out of memory");
    }
    return 0;
}

int ckpt_writer_open(ckpt_writer **out, const char *dir, const char *name,
                     const ckpt_write_opts *opts, ckpt_error *err)
{
    return ckpt_writer_open_on(out, dir, name, opts, NULL, err);
}

int ckpt_writer_open_on(ckpt_writer **out, const char *dir, const char *name,
                        const ckpt_write_opts *opts, ckpt_heartbeat *h,
                        ckpt_error *err)
{
    if (!out)
        return ckpt_err_null(err, "ckpt_writer_open", "out");
    *out = NULL;
    if (!dir)
        return ckpt_err_null(err, "ckpt_writer_open", "dir");
    int rc = check_writer_name(name, err);
    if (rc)
        return rc;
    ckpt_writer *w = calloc(1, sizeof *w);
    if (!w)
        return ckpt_err(err, -ENOMEM, "out of memory");
    pthread_mutex_init(&w->mu, NULL);
    ckpt_manifest_init(&w->pending);
    ckpt_write_opts_init(&w->opts);
    /* The oldest layout a caller may pass ends before the delta fields. */
    if (opts)
        rc = ckpt_opts_take(&w->opts, sizeof w->opts, opts,
                            offsetof(ckpt_write_opts, base),
                            "ckpt_write_opts", err);
    if (rc == 0 && w->opts.base && !(w->base = strdup(w->opts.base)))
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    w->opts.base = w->base;
    w->dir = strdup(dir);
    w->name = strdup(name);
    if (!w->dir || !w->name)
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    if (rc == 0)
        rc = ckpt_write_opts_check(&w->opts, err);
    if (rc == 0)
        rc = ckpt_save_begin_on(&w->lease, dir, h, err);
    if (rc == 0)
        rc = open_files(w, err);
    if (rc == 0 && w->base)
        rc = open_base(w, err);
    if (rc == 0)
        rc = make_workers(w, err);
    if (rc) {
        writer_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

int ckpt_meta_reserved(const char *key)
{
    static const char *const reserved[] = {
        "format_version", "created", "producer", "world_size", "identity",
        CKPT_META_BASE, CKPT_META_BASE_IDENTITY, CKPT_META_DATA_HASH,
        "layout.reused", NULL
    };
    for (int i = 0; key && reserved[i]; i++)
        if (strcmp(key, reserved[i]) == 0)
            return 1;
    return 0;
}

int ckpt_writer_set_meta(ckpt_writer *w, const char *key, const char *value,
                         ckpt_error *err)
{
    if (!w)
        return ckpt_err_null(err, "ckpt_writer_set_meta", "writer");
    if (!key || !*key || !value)
        return ckpt_err(err, -EINVAL, "metadata key and value must be "
                        "non-empty strings");
    if (ckpt_meta_reserved(key))
        return ckpt_err(err, -EINVAL, "metadata key '%s' is reserved "
                        "(ckptfs sets it at commit)", key);
    pthread_mutex_lock(&w->mu);
    int rc = ckpt_manifest_set_meta(&w->pending, key, value, w->name);
    pthread_mutex_unlock(&w->mu);
    return rc ? ckpt_err(err, rc, "out of memory") : 0;
}

/* Syncs the shard (under mu) unless nothing was appended since the last
 * sync, and notes in the plan how much is synced.  A failed fdatasync may
 * have cost bytes that a later one would not report: the writer fails for
 * good, and the save is marked so that nobody commits it. */
static int sync_shard(ckpt_writer *w, ckpt_error *err)
{
    uint64_t size = ckpt_shard_size(w->shard);
    if (size == w->synced)
        return 0;
    ckpt_error e = { 0 };
    int rc = ckpt_shard_sync(w->shard, &e);
    if (rc == 0) {
        w->synced = size;
        ckpt_planfile_note_synced(w->plan, w->shard_rel, size);
        return 0;
    }
    ckpt_save_mark_unsynced(w->dir, e.msg);
    if (w->failure.code == 0)
        w->failure = e;
    if (err)
        *err = e;
    return rc;
}

int ckpt_writer_declare(ckpt_writer *w, const char *fqn, const char *reason,
                        ckpt_error *err)
{
    if (!fqn || !*fqn)
        return ckpt_err(err, -EINVAL, "declare: no tensor name");
    pthread_mutex_lock(&w->mu);
    int rc = ckpt_manifest_declare(&w->pending, fqn, reason, w->name);
    pthread_mutex_unlock(&w->mu);
    return rc ? ckpt_err(err, rc, "out of memory") : 0;
}

/* Declares key "FQN" mark "HEAD;OFFSETS;SIZES" (HEAD NULL: none) for
 * piece p, with the shape before the offsets when with_shape. */
static int declare_marked(ckpt_writer *w, const ckpt_piece *p,
                          const char *mark, const char *head,
                          int with_shape, ckpt_error *err)
{
    int64_t zero[CKPT_MAX_DIMS] = { 0 };
    if (!p || !p->fqn || !*p->fqn || !p->shape || p->ndim < 0 ||
        p->ndim > CKPT_MAX_DIMS)
        return ckpt_err(err, -EINVAL, "piece reference: no tensor name or "
                        "shape");
    char dims[3][CKPT_MAX_DIMS * 21 + 1];
    ckpt_shape_format(dims[0], sizeof dims[0], p->ndim, p->shape);
    ckpt_shape_format(dims[1], sizeof dims[1], p->ndim,
                      p->offsets ? p->offsets : zero);
    ckpt_shape_format(dims[2], sizeof dims[2], p->ndim,
                      p->sizes ? p->sizes : p->shape);
    size_t cap = strlen(p->fqn) + strlen(mark) + strlen(head) + 8 +
                 3 * sizeof dims[0];
    char *key = malloc(cap);
    if (!key)
        return ckpt_err(err, -ENOMEM, "out of memory");
    if (with_shape)
        snprintf(key, cap, "%s%s%s;%s;%s;%s", p->fqn, mark, head, dims[0],
                 dims[1], dims[2]);
    else
        snprintf(key, cap, "%s%s%s;%s;%s", p->fqn, mark, head, dims[1],
                 dims[2]);
    pthread_mutex_lock(&w->mu);
    int rc = ckpt_manifest_declare(&w->pending, key, "", w->name);
    pthread_mutex_unlock(&w->mu);
    free(key);
    return rc ? ckpt_err(err, rc, "out of memory") : 0;
}

int ckpt_writer_declare_replica(ckpt_writer *w, const ckpt_piece *p,
                                ckpt_error *err)
{
    return declare_marked(w, p, CKPT_REPLICA_MARK,
                          p ? ckpt_dtype_name(p->dtype) : "", 1, err);
}

int ckpt_writer_declare_supersede(ckpt_writer *w, const ckpt_piece *p,
                                  const char *writers, ckpt_error *err)
{
    if (!writers || !*writers || strpbrk(writers, ";"))
        return ckpt_err(err, -EINVAL, "supersede: no writer names");
    return declare_marked(w, p, CKPT_SUPERSEDE_MARK, writers, 0, err);
}

int ckpt_writer_flush(ckpt_writer *w, ckpt_error *err)
{
    if (!w)
        return ckpt_err_null(err, "ckpt_writer_flush", "writer");
    pthread_mutex_lock(&w->mu);
    int rc = writer_failed(w, err);
    if (rc == 0 && w->opts.sync)
        rc = sync_shard(w, err);
    if (rc == 0 && (w->pending.npieces || w->pending.nmeta))
        rc = ckpt_planfile_append(w->plan, w->pending.pieces,
                                  w->pending.npieces, w->pending.meta,
                                  w->pending.nmeta, err);
    if (rc == 0 && w->pending.ndeclared)
        rc = ckpt_planfile_declare(w->plan, w->pending.declared,
                                   w->pending.ndeclared, err);
    if (w->pending.npieces || w->pending.nmeta || w->pending.ndeclared)
        w->plan_dirty = 1;
    if (rc && w->failure.code == 0 && (w->pending.npieces ||
                                       w->pending.nmeta ||
                                       w->pending.ndeclared))
        ckpt_err_wrap(err, rc, "cannot record pieces in the local plan");
    if (rc == 0) {
        ckpt_manifest_free(&w->pending);
    } else if (w->failure.code == 0 && err) {
        w->failure = *err;
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int ckpt_writer_sync(ckpt_writer *w, ckpt_error *err)
{
    if (!w)
        return ckpt_err_null(err, "ckpt_writer_sync", "writer");
    pthread_mutex_lock(&w->mu);
    int rc = writer_failed(w, err);
    int grew = ckpt_shard_size(w->shard) != w->synced;
    if (rc == 0 && (grew || w->plan_dirty)) {
        ckpt_error e = { 0 };
        rc = sync_shard(w, &e);
        /* The claim, then the plan shared with other nodes. */
        if (rc == 0 &&
            (rc = ckpt_planfile_append(w->plan, NULL, 0, NULL, 0, &e)))
            ckpt_err_wrap(&e, rc, "cannot record pieces in the local plan");
        if (rc == 0)
            rc = ckpt_planfile_share(w->plan, &e);
        if (rc == 0)
            w->plan_dirty = 0;
        else if (w->failure.code == 0)
            w->failure = e;     /* the plan may be closed: no more appends */
        if (rc && err)
            *err = e;
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int ckpt_writer_close(ckpt_writer *w, ckpt_error *err)
{
    if (!w)
        return ckpt_err_null(err, "ckpt_writer_close", "writer");
    int rc = ckpt_writer_flush(w, err);
    ckpt_error cerr = { 0 };
    /* Join the encoders before closing the files they feed. */
    ckpt_pool_destroy(w->pool);
    w->pool = NULL;
    int crc = ckpt_shard_close(w->shard, &cerr);
    w->shard = NULL;
    if (rc == 0 && crc) {
        rc = crc;
        if (err)
            *err = cerr;
    }
    writer_free(w);
    return rc;
}

void ckpt_writer_abort(ckpt_writer *w)
{
    if (w)
        writer_free(w);
}

/* ---------------------------------------------------------------- encode */

/* The base frame at sl's place, when a delta save has one of sl's size. */
static const ckpt_base_frame *base_frame(const slot *sl)
{
    const ckpt_stream *s = sl->s;
    if (sl->seq >= s->nbf)
        return NULL;
    const ckpt_base_frame *bf = &s->bf[sl->seq];
    return bf->raw_offset == sl->seq * s->frame && bf->raw_size == sl->n
           ? bf : NULL;
}

static ckpt_chunk_loc loc_of(const ckpt_stream *s)
{
    return (ckpt_chunk_loc){ s->rec.fqn, s->rec.dtype, s->rec.ndim,
                             s->rec.shape, s->rec.offsets, s->rec.sizes };
}

/* Coded planes of a base frame that a try decodes to judge it
 * (ckpt_bases_leading_planes) before decoding the whole frame: the low
 * mantissa bytes, which a dense step turns to noise. */
#define PEEK_CODED 2

/* 1 when sl's xor frame against bf surely cannot be coded in `limit`
 * bytes, judged from the base frame's leading planes (into xbuf, whose
 * stored ones are only read): a try that would lose by far costs those
 * planes, not a decode of the frame.  0 when it may pay, when the base
 * frame has no such planes, or on error (sl->rc set). */
static int planes_hopeless(slot *sl, const ckpt_base_frame *bf,
                           const ckpt_chunk_loc *loc, size_t limit,
                           unsigned char *xbuf, int worker)
{
    ckpt_writer *w = sl->s->w;
    int layout;
    int np = ckpt_bases_leading_planes(w->bases, bf->holder, loc, sl->seq,
                                       sl->n, PEEK_CODED, xbuf, &layout,
                                       w->ctx[worker], &w->dsc[worker],
                                       &sl->err);
    if (np < 0)
        sl->rc = np;
    return np > 0 && ckpt_xor_planes_hopeless(layout, sl->src, sl->n, xbuf,
                                              np, limit);
}

/* The xor frame of sl against bf into sl->xenc: its stored size, or 0
 * when it would not be coded in `limit` bytes (planes_hopeless and
 * ckpt_xor_hopeless: not coded at all, which would cost more than coding
 * the frame whole) or on error (sl->rc set).  The base frame, XORed, is
 * made in the worker's scratch (slot 0): kept for the writer's life, not
 * faulted in again for every stream. */
static size_t encode_xor(slot *sl, const ckpt_base_frame *bf, size_t limit,
                         int worker)
{
    ckpt_stream *s = sl->s;
    ckpt_writer *w = s->w;
    size_t cap = CKPT_XOR_HEAD + ckpt_codec_bound(s->frame);
    unsigned char *xbuf = ckpt_delta_scratch_at(&w->dsc[worker], 0,
                                                s->frame);
    if (!sl->xenc)
        sl->xenc = malloc(cap);
    if (!xbuf || !sl->xenc) {
        sl->rc = ckpt_err(&sl->err, -ENOMEM, "out of memory");
        return 0;
    }
    ckpt_chunk_loc loc = loc_of(s);
    if (s->codec != CKPT_CODEC_RAW && sl->peek &&
        (planes_hopeless(sl, bf, &loc, limit, xbuf, worker) || sl->rc))
        return 0;
    uint64_t base_sum;   /* checked: no delta is made over damaged bytes */
    sl->rc = ckpt_bases_read(w->bases, bf->holder, &loc, sl->seq,
                             bf->raw_offset, sl->n, xbuf,
                             w->ctx[worker], &w->dsc[worker], &base_sum,
                             &sl->err);
    if (sl->rc)
        return 0;
    ckpt_xor_bytes(xbuf, xbuf, sl->src, sl->n);
    if (s->codec != CKPT_CODEC_RAW &&
        ckpt_xor_hopeless(xbuf, sl->n, s->itemsize, limit))
        return 0;
    size_t n = 0;
    int codec = s->codec == CKPT_CODEC_RAW ? CKPT_CODEC_ZSTD : s->codec;
    sl->rc = ckpt_xor_encode(w->ctx[worker], codec, w->opts.level,
                             s->itemsize, xbuf, sl->n, sl->xenc, cap, &n,
                             &sl->err);
    return sl->rc ? 0 : n;
}

/* An xor frame costs each read of it a second decode (its base frame's),
 * and its save a first: it is kept only when it saves a third of the
 * frame stored whole.  (Frames of a model trained a few steps, where
 * every element moves a little, save about a quarter: they stay whole,
 * and their save and load cost what a full one's do.) */
static int xor_pays(size_t xn, size_t whole)
{
    return xn && xn * 3 <= whole * 2;
}

/* A frame's ticket to try an xor frame. */
enum {
    TICKET_NONE,        /* no base frame it could be xor against, or a ref */
    TICKET_SKIP,        /* a candidate, not to be tried (no credit) */
    TICKET_CREDIT,      /* to be tried: a credit spent */
    TICKET_PROBE,       /* to be tried: the probe of XOR_PROBE candidates */
};

/* At submission, in frame order: the ticket of a frame that has a base
 * frame it may be xor against. */
static int xor_reserve(xor_budget *b, int *peek)
{
    *peek = atomic_load(&b->credit) <= XOR_PEEK_CREDIT;
    if (atomic_load(&b->credit) > 0) {
        atomic_fetch_sub(&b->credit, 1);
        return TICKET_CREDIT;
    }
    if (atomic_fetch_add(&b->skipped, 1) % XOR_PROBE != XOR_PROBE - 1)
        return TICKET_SKIP;
    atomic_fetch_sub(&b->credit, 1);
    return TICKET_PROBE;
}

/* At drain, in frame order: an xor frame kept earns credit.  (Refs are
 * found before tickets are handed out: ref_at_submit.) */
static void xor_settle(xor_budget *b, int codec)
{
    if (codec == CKPT_CODEC_XOR) {
        int c = atomic_fetch_add(&b->credit, XOR_WIN_CREDIT);
        if (c + XOR_WIN_CREDIT > XOR_CREDIT_MAX)
            atomic_store(&b->credit, XOR_CREDIT_MAX);
    }
}

/* A delta save's choice for sl, not a ref (ref_at_submit): when its
 * ticket allows, its xor
 * frame when that pays (xor_pays) against the base frame's own stored
 * size, a fair guess of what this frame costs whole, so that the frame
 * need not be coded twice.  *xor_n is the xor frame's size (0: none
 * coded).  Returns 1 when the slot is settled (an xor frame, or an
 * error). */
static int choose_delta(slot *sl, int worker, size_t *xor_n)
{
    const ckpt_base_frame *bf = base_frame(sl);
    *xor_n = 0;
    if (!bf)
        return 0;
    if (sl->ticket != TICKET_CREDIT && sl->ticket != TICKET_PROBE)
        return 0;
    size_t whole = bf->plain_size ? bf->plain_size : sl->n / 4;
    *xor_n = encode_xor(sl, bf, whole * 2 / 3, worker);
    if (sl->rc)
        return 1;
    sl->base = bf->holder;
    if (xor_pays(*xor_n, whole)) {
        sl->codec = CKPT_CODEC_XOR;
        sl->enc_n = *xor_n;
        return 1;
    }
    return 0;
}

static void encode_done(slot *sl);

static void encode_task(void *arg, int worker)
{
    slot *sl = arg;
    ckpt_stream *s = sl->s;
    ckpt_writer *w = s->w;
    size_t out_n = 0, xor_n = 0;
    int out_codec = CKPT_CODEC_RAW;
    if (!sl->summed)
        sl->checksum = ckpt_checksum(sl->src, sl->n);
    sl->rc = 0;
    sl->base = 0;
    if (s->nbf && choose_delta(sl, worker, &xor_n))
        goto done;
    if (s->codec != CKPT_CODEC_RAW)
        sl->rc = ckpt_codec_encode(w->ctx[worker], s->codec,
                                   w->opts.level, s->itemsize, sl->src,
                                   sl->n, sl->enc, ckpt_codec_bound(sl->n),
                                   &out_n, &out_codec, &sl->err);
    sl->codec = out_codec;
    sl->enc_n = out_codec == CKPT_CODEC_RAW ? sl->n : out_n;
    if (xor_pays(xor_n, sl->enc_n)) {
        sl->codec = CKPT_CODEC_XOR;
        sl->enc_n = xor_n;
    } else {
        sl->base = 0;
    }
done:
    encode_done(sl);
}

/* Records the stream's first error (under s->mu). */
static void stream_fail(ckpt_stream *s, const ckpt_error *e)
{
    if (s->rc == 0) {
        s->rc = e->code ? e->code : -EIO;
        s->err = *e;
    }
}

/* Appends sl's frame (the oldest in flight, encoded) to the shard and
 * records it; called by one thread at a time (s->appending), without
 * s->mu.  After an error of the stream it only lets the slot go. */
static void append_slot(ckpt_stream *s, slot *sl, int failed)
{
    ckpt_writer *w = s->w;
    if (sl->rc == 0)
        xor_settle(s->xb, sl->codec);
    if (failed || sl->rc)
        return;
    ckpt_frame_rec f = {
        .stored_size = sl->enc_n, .raw_offset = s->raw_pos,
        .raw_size = sl->n, .checksum = sl->checksum, .codec = sl->codec,
        .base = sl->base,
    };
    const void *data = sl->codec == CKPT_CODEC_RAW ? sl->src
                       : sl->codec == CKPT_CODEC_XOR ? sl->xenc : sl->enc;
    ckpt_error e = { 0 };
    pthread_mutex_lock(&w->mu);
    int rc = writer_failed(w, &e);
    if (rc == 0 && sl->codec != CKPT_CODEC_REF) {
        rc = ckpt_shard_append(w->shard, data, sl->enc_n, &f.file_offset, &e);
        if (rc)
            w->failure = e;   /* the shard's tail is now unknown */
    }
    pthread_mutex_unlock(&w->mu);
    if (rc == 0 && ckpt_piece_add_frame(&s->rec, &f))
        rc = ckpt_err(&e, -ENOMEM, "out of memory");
    if (rc) {
        pthread_mutex_lock(&s->mu);
        stream_fail(s, &e);
        pthread_mutex_unlock(&s->mu);
        return;
    }
    s->raw_pos += sl->n;
    s->rec.stored_bytes += sl->enc_n;
}

/* Under s->mu: appends the encoded frames at the head of the ring, in
 * order, unless another thread is appending (it takes these too).  Run
 * by the caller when it waits for a slot, and, in a stream whose encoders
 * append (self_drain), by each encoder once its frame is done: the caller
 * then only copies, and a frame reaches the shard as soon as it and the
 * frames before it are encoded. */
static void drain_ready(ckpt_stream *s)
{
    while (!s->appending && s->head < s->tail &&
           s->ring[s->head % (uint64_t)s->depth].done) {
        slot *sl = &s->ring[s->head % (uint64_t)s->depth];
        int failed = s->rc != 0;
        s->appending = 1;
        pthread_mutex_unlock(&s->mu);
        append_slot(s, sl, failed);
        pthread_mutex_lock(&s->mu);
        if (sl->rc)
            stream_fail(s, &sl->err);
        if (sl->ticket == TICKET_CREDIT || sl->ticket == TICKET_PROBE)
            s->tries--;
        s->head++;
        s->appending = 0;
        pthread_cond_broadcast(&s->cv);
    }
}

static void encode_done(slot *sl)
{
    ckpt_stream *s = sl->s;
    pthread_mutex_lock(&s->mu);
    sl->done = 1;
    if (s->self_drain)
        drain_ready(s);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Waits until fewer than `left` frames are in flight (appended to the
 * shard, or let go after an error), appending those it finds encoded. */
static void drain_until(ckpt_stream *s, uint64_t left)
{
    pthread_mutex_lock(&s->mu);
    for (;;) {
        drain_ready(s);
        if (s->tail - s->head < left)
            break;
        pthread_cond_wait(&s->cv, &s->mu);
    }
    pthread_mutex_unlock(&s->mu);
}

static void drain_one(ckpt_stream *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t left = s->tail - s->head;
    pthread_mutex_unlock(&s->mu);
    if (left)
        drain_until(s, left);
}

static void drain_all(ckpt_stream *s)
{
    drain_until(s, 1);
    s->borrowed = 0;
}

/* The stream's first error so far (0: none), into err. */
static int stream_error(ckpt_stream *s, ckpt_error *err)
{
    pthread_mutex_lock(&s->mu);
    int rc = s->rc;
    if (rc && err)
        *err = s->err;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* The ticket of sl (about to be submitted) to try an xor frame.  Out of
 * credit while tries of the stream are in flight, it waits for them to
 * be drained: their results decide, rather than how far ahead of them
 * frames were handed out (otherwise, the frames submitted while the
 * first tries are coded would all be skipped, even where every try wins). */
static int xor_ticket(ckpt_stream *s, slot *sl)
{
    const ckpt_base_frame *bf = s->nbf ? base_frame(sl) : NULL;
    if (!bf || bf->depth + 1 >= s->w->opts.full_every)
        return TICKET_NONE;
    while (atomic_load(&s->xb->credit) <= 0 && s->tries > 0)
        drain_one(s);
    int t = xor_reserve(s->xb, &sl->peek);
    if (t == TICKET_CREDIT || t == TICKET_PROBE)
        s->tries++;
    return t;
}

/* A delta stream's frame that has a base frame is checksummed here, on
 * the submitting thread, and when its bytes are the base frame's it is
 * settled here as a ref: a frozen tensor's frames (most of a partly
 * frozen model) then cost the pass over their bytes, which memory
 * bandwidth bounds, and no hand-off to an encoder and back (two
 * wake-ups per frame, #28).  A ref takes no xor ticket: which frames
 * are tried depends on the data only.  Returns 1 when sl is a ref. */
static int ref_at_submit(ckpt_stream *s, slot *sl)
{
    const ckpt_base_frame *bf = s->nbf ? base_frame(sl) : NULL;
    sl->summed = bf != NULL;
    if (!bf)
        return 0;
    sl->checksum = ckpt_checksum(sl->src, sl->n);
    if (bf->checksum != sl->checksum)
        return 0;
    sl->codec = CKPT_CODEC_REF;
    sl->enc_n = 0;
    sl->base = bf->holder;
    sl->rc = 0;
    sl->ticket = TICKET_NONE;
    return 1;
}

/* Hands ring[tail] (holding n bytes at src) to the pool, or settles it
 * as a ref (ref_at_submit). */
static void submit_slot(ckpt_stream *s, const unsigned char *src, size_t n)
{
    slot *sl = &s->ring[s->tail % (uint64_t)s->depth];
    sl->src = src;
    sl->n = n;
    sl->seq = s->tail;
    sl->done = 0;
    s->fill = 0;
    if (ref_at_submit(s, sl)) {
        pthread_mutex_lock(&s->mu);
        s->tail++;
        sl->done = 1;
        pthread_mutex_unlock(&s->mu);
        drain_until(s, (uint64_t)s->depth);
        return;
    }
    sl->ticket = xor_ticket(s, sl);
    pthread_mutex_lock(&s->mu);
    s->tail++;
    pthread_mutex_unlock(&s->mu);
    if (ckpt_pool_submit(s->w->pool, encode_task, sl)) {
        sl->rc = ckpt_err(&sl->err, -ENOMEM, "out of memory queueing a "
                          "frame");
        encode_done(sl);
    }
    /* The next slot must be free: at most depth - 1 frames in flight. */
    drain_until(s, (uint64_t)s->depth);
}

static int alloc_ring(ckpt_stream *s, ckpt_error *err)
{
    s->depth = 2 * ckpt_pool_threads(s->w->pool) + 2;
    s->ring = calloc((size_t)s->depth, sizeof *s->ring);
    if (!s->ring)
        return ckpt_err(err, -ENOMEM, "out of memory");
    ckpt_writer *w = s->w;
    size_t fs = w->opts.frame_size;   /* s->frame <= fs, whatever dtype */
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < s->depth; i++) {
        s->ring[i].s = s;
        s->ring[i].done = 1;
        if (w->nspare >= 2) {
            s->ring[i].enc = w->spare[--w->nspare];
            s->ring[i].own = w->spare[--w->nspare];
        } else {
            s->ring[i].own = malloc(fs);
            s->ring[i].enc = malloc(ckpt_codec_bound(fs));
        }
    }
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < s->depth; i++)
        if (!s->ring[i].own || !s->ring[i].enc)
            return ckpt_err(err, -ENOMEM, "out of memory for frame buffers");
    return 0;
}

/* Gives the ring's buffers back to the writer for its next stream. */
static void keep_buffers(ckpt_stream *s)
{
    ckpt_writer *w = s->w;
    pthread_mutex_lock(&w->mu);
    if (!w->spare)
        w->spare = calloc(2 * (size_t)s->depth, sizeof *w->spare);
    for (int i = 0; w->spare && i < s->depth && w->nspare + 2 <= 2 * s->depth;
         i++) {
        if (!s->ring[i].own || !s->ring[i].enc)
            continue;
        w->spare[w->nspare++] = s->ring[i].own;
        w->spare[w->nspare++] = s->ring[i].enc;
        s->ring[i].own = s->ring[i].enc = NULL;
    }
    pthread_mutex_unlock(&w->mu);
}

static void stream_free(ckpt_stream *s)
{
    /* Every frame is drained: the lenders waiting for theirs leave. */
    pthread_mutex_lock(&s->mu);
    while (s->waiters)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    if (s->ring)
        keep_buffers(s);
    for (int i = 0; s->ring && i < s->depth; i++) {
        free(s->ring[i].own);
        free(s->ring[i].enc);
        free(s->ring[i].xenc);
    }
    free(s->bf);
    free(s->ring);
    ckpt_piece_clear(&s->rec);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* ---------------------------------------------------------------- streams */

/* The pointers a piece description needs, refused alike by every call
 * taking one: the writer, the piece, its fqn, and its shape when it has
 * dimensions. */
static int piece_args(const char *call, const ckpt_writer *w,
                      const ckpt_piece *d, ckpt_error *err)
{
    if (!w)
        return ckpt_err_null(err, call, "writer");
    if (!d)
        return ckpt_err_null(err, call, "piece (desc)");
    if (!d->fqn)
        return ckpt_err_null(err, call, "piece fqn");
    if (d->ndim > 0 && !d->shape)
        return ckpt_err_null(err, call, "piece shape");
    return 0;
}

static int fill_record(ckpt_writer *w, const ckpt_piece *d, ckpt_piece_rec *r,
                       ckpt_error *err)
{
    if (d->ndim < 0 || d->ndim > CKPT_MAX_DIMS)
        return ckpt_err(err, -EINVAL, "tensor '%s': %d dimensions (at most "
                        "%d)", d->fqn ? d->fqn : "", d->ndim, CKPT_MAX_DIMS);
    r->dtype = d->dtype;
    r->ndim = d->ndim;
    for (int i = 0; i < d->ndim; i++) {
        r->shape[i] = d->shape[i];
        r->offsets[i] = d->offsets ? d->offsets[i] : 0;
        r->sizes[i] = d->sizes ? d->sizes[i] : d->shape[i];
    }
    r->fqn = strdup(d->fqn ? d->fqn : "");
    r->file = strdup(w->shard_rel);
    r->writer = strdup(w->name);
    if (!r->fqn || !r->file || !r->writer)
        return ckpt_err(err, -ENOMEM, "out of memory");
    int rc = ckpt_plan_check_piece(r, err);
    if (rc)
        return rc;
    return ckpt_shape_nbytes(r->dtype, r->ndim, r->sizes, &r->raw_bytes,
                             r->fqn, err);
}

/* ckpt_writer_begin of a stream whose xor tries spend lane's budget. */
static int begin_lane(ckpt_writer *w, const ckpt_piece *desc, int lane,
                      ckpt_stream **out, ckpt_error *err)
{
    int rc;
    if (!out)
        return ckpt_err_null(err, "ckpt_writer_begin", "out");
    *out = NULL;
    pthread_mutex_lock(&w->mu);
    rc = writer_failed(w, err);
    pthread_mutex_unlock(&w->mu);
    if (rc)
        return rc;
    ckpt_stream *s = calloc(1, sizeof *s);
    if (!s)
        return ckpt_err(err, -ENOMEM, "out of memory");
    s->w = w;
    s->xb = &w->xor[lane];
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    rc = fill_record(w, desc, &s->rec, err);
    if (rc == 0) {
        s->itemsize = ckpt_dtype_size(s->rec.dtype);
        s->codec = ckpt_codec_resolve(w->opts.codec, s->rec.dtype);
        s->frame = w->opts.frame_size - w->opts.frame_size % s->itemsize;
    }
    if (rc == 0 && w->bases) {
        ckpt_chunk_loc loc = loc_of(s);
        rc = ckpt_bases_chunk(w->bases, &loc, &s->bf, &s->nbf, err);
    }
    /* A delta stream's tries are settled on the caller's thread, in the
     * order of its frames (xor_ticket): its encoders do not append. */
    s->self_drain = s->nbf == 0;
    if (rc == 0)
        rc = alloc_ring(s, err);
    if (rc) {
        stream_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int ckpt_writer_begin(ckpt_writer *w, const ckpt_piece *desc,
                      ckpt_stream **out, ckpt_error *err)
{
    int rc = piece_args("ckpt_writer_begin", w, desc, err);
    if (rc)
        return rc;
    return begin_lane(w, desc, 0, out, err);
}

/* ckpt_stream_write, and with lend ckpt_stream_write_lent (named `call`
 * in messages); with ticket (and lend), ckpt_stream_write_lent_async. */
static int stream_write(ckpt_stream *s, const void *buf, size_t len,
                        int lend, uint64_t *ticket, const char *call,
                        ckpt_error *err)
{
    const unsigned char *p = buf;
    if (!s)
        return ckpt_err_null(err, call, "stream");
    if (!buf && len)
        return ckpt_err_null(err, call, "buf");
    int rc = stream_error(s, err);
    if (rc)
        return rc;
    if (len > s->rec.raw_bytes - s->received)
        return ckpt_err(err, -EINVAL, "tensor '%s': piece holds %llu bytes; "
                        "writing %zu more after %llu is past its end",
                        s->rec.fqn, (unsigned long long)s->rec.raw_bytes, len,
                        (unsigned long long)s->received);
    s->received += len;
    while (len && !stream_error(s, NULL)) {
        if (s->fill == 0 && len >= s->frame &&
            (lend || s->lend || len >= (size_t)s->depth * s->frame)) {
            /* Whole frames straight from the caller's buffer: worth it
             * for a buffer larger than the ring, which copying could not
             * take in without waiting anyway, and for ckpt_writer_put,
             * which waits for its frames anyway.  A smaller one is copied,
             * so that the caller goes on while its frames are encoded. */
            s->borrowed = 1;
            submit_slot(s, p, s->frame);
            p += s->frame;
            len -= s->frame;
            continue;
        }
        if (s->fill == 0 && (lend || s->lend) &&
            s->received == s->rec.raw_bytes) {
            /* The piece's last, short frame, lent too: copying it would
             * cost a pass over bytes that may turn out a ref. */
            s->borrowed = 1;
            submit_slot(s, p, len);
            break;
        }
        slot *sl = &s->ring[s->tail % (uint64_t)s->depth];  /* free */
        size_t take = s->frame - s->fill;
        if (take > len)
            take = len;
        memcpy(sl->own + s->fill, p, take);
        s->fill += take;
        p += take;
        len -= take;
        if (s->fill == s->frame)
            submit_slot(s, sl->own, s->frame);
    }
    /* The caller may reuse buf once we return: finish frames borrowed it,
     * or, when its encoders append them, once the caller has waited. */
    rc = stream_error(s, err);
    if (s->borrowed && ticket && rc == 0 && s->self_drain) {
        pthread_mutex_lock(&s->mu);
        s->waiters++;
        *ticket = s->tail;
        pthread_mutex_unlock(&s->mu);
        s->borrowed = 0;
    } else if (s->borrowed) {
        drain_all(s);
        rc = stream_error(s, err);
    }
    return rc;
}

int ckpt_stream_write(ckpt_stream *s, const void *buf, size_t len,
                      ckpt_error *err)
{
    return stream_write(s, buf, len, 0, NULL, "ckpt_stream_write", err);
}

int ckpt_stream_write_lent(ckpt_stream *s, const void *buf, size_t len,
                           ckpt_error *err)
{
    return stream_write(s, buf, len, 1, NULL, "ckpt_stream_write_lent", err);
}

int ckpt_stream_write_lent_async(ckpt_stream *s, const void *buf, size_t len,
                                 uint64_t *ticket, ckpt_error *err)
{
    if (!ticket)
        return ckpt_err_null(err, "ckpt_stream_write_lent_async", "ticket");
    *ticket = 0;
    return stream_write(s, buf, len, 1, ticket,
                        "ckpt_stream_write_lent_async", err);
}

void ckpt_stream_wait_lent(ckpt_stream *s, uint64_t ticket)
{
    if (!s || !ticket)
        return;
    pthread_mutex_lock(&s->mu);
    while (s->head < ticket)
        pthread_cond_wait(&s->cv, &s->mu);
    s->waiters--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int ckpt_stream_wait(ckpt_stream *s, ckpt_error *err)
{
    if (!s)
        return ckpt_err_null(err, "ckpt_stream_wait", "stream");
    drain_all(s);
    return stream_error(s, err);
}

/* Makes s record `actual` instead of the piece it began with (see
 * ckpt_stream_end_as). */
static int restate_piece(ckpt_stream *s, const ckpt_piece *actual,
                         ckpt_error *err)
{
    ckpt_piece_rec r;
    memset(&r, 0, sizeof r);
    int rc = fill_record(s->w, actual, &r, err);
    if (rc == 0 && r.dtype != s->rec.dtype)
        rc = ckpt_err(err, -EINVAL, "tensor '%s': a stream begun as %s "
                      "cannot end as %s", r.fqn, ckpt_dtype_name(s->rec.dtype),
                      ckpt_dtype_name(r.dtype));
    /* Delta frames were matched to the base chunk of the box begun with. */
    for (size_t k = 0; rc == 0 && k < s->rec.nframes; k++)
        if (s->rec.frames[k].base && (strcmp(r.fqn, s->rec.fqn) ||
            r.ndim != s->rec.ndim ||
            memcmp(r.shape, s->rec.shape, sizeof r.shape) ||
            memcmp(r.offsets, s->rec.offsets, sizeof r.offsets) ||
            memcmp(r.sizes, s->rec.sizes, sizeof r.sizes)))
            rc = ckpt_err(err, -EINVAL, "tensor '%s': a delta stream cannot "
                          "end as another piece than it began", r.fqn);
    if (rc == 0) {
        free(s->rec.fqn);
        s->rec.fqn = r.fqn;
        r.fqn = NULL;
        s->rec.ndim = r.ndim;
        memcpy(s->rec.shape, r.shape, sizeof r.shape);
        memcpy(s->rec.offsets, r.offsets, sizeof r.offsets);
        memcpy(s->rec.sizes, r.sizes, sizeof r.sizes);
        s->rec.raw_bytes = r.raw_bytes;
    }
    ckpt_piece_clear(&r);
    return rc;
}

int ckpt_stream_end(ckpt_stream *s, ckpt_error *err)
{
    if (!s)
        return ckpt_err_null(err, "ckpt_stream_end", "stream");
    return ckpt_stream_end_as(s, NULL, err);
}

int ckpt_stream_end_as(ckpt_stream *s, const ckpt_piece *actual,
                       ckpt_error *err)
{
    if (!s)
        return ckpt_err_null(err, "ckpt_stream_end_as", "stream");
    ckpt_writer *w = s->w;
    if (stream_error(s, NULL) == 0 && s->fill > 0) {
        slot *sl = &s->ring[s->tail % (uint64_t)s->depth];
        submit_slot(s, sl->own, s->fill);
    }
    drain_all(s);
    int rc = stream_error(s, err);
    if (rc == 0 && actual)
        rc = restate_piece(s, actual, err);
    if (rc == 0 && s->received != s->rec.raw_bytes)
        rc = ckpt_err(err, -EINVAL, "tensor '%s': piece holds %llu bytes but "
                      "%llu were written", s->rec.fqn,
                      (unsigned long long)s->rec.raw_bytes,
                      (unsigned long long)s->received);
    /* The piece's hash from its frames' checksums, which the encoders
     * computed: the raw bytes are hashed once (#28). */
    if (rc == 0 && ckpt_frames_hash(s->rec.frames, s->rec.nframes,
                                    &s->rec.data_hash))
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    if (rc == 0) {
        pthread_mutex_lock(&w->mu);
        ckpt_piece_rec *r = ckpt_manifest_add_piece(&w->pending);
        if (r) {
            *r = s->rec;   /* ownership moves to the manifest */
            memset(&s->rec, 0, sizeof s->rec);
        } else {
            rc = ckpt_err(err, -ENOMEM, "out of memory");
        }
        pthread_mutex_unlock(&w->mu);
    }
    stream_free(s);
    return rc;
}

void ckpt_stream_abort(ckpt_stream *s)
{
    if (!s)
        return;
    ckpt_error e = { 0 };
    e.code = -ECANCELED;         /* frames not appended yet stay out */
    pthread_mutex_lock(&s->mu);
    stream_fail(s, &e);
    pthread_mutex_unlock(&s->mu);
    drain_all(s);
    stream_free(s);
}

int ckpt_writer_put(ckpt_writer *w, const ckpt_piece *p, ckpt_error *err)
{
    return ckpt_writer_put_lane(w, p, 0, err);
}

int ckpt_writer_put_lane(ckpt_writer *w, const ckpt_piece *p, int lane,
                         ckpt_error *err)
{
    ckpt_stream *s;
    int rc = piece_args("ckpt_writer_put", w, p, err);
    if (rc == 0 && (lane < 0 || lane >= CKPT_WRITER_LANES))
        rc = ckpt_err(err, -EINVAL, "ckpt_writer_put_lane: lane %d, not "
                      "0-%d", lane, CKPT_WRITER_LANES - 1);
    if (rc == 0)
        rc = begin_lane(w, p, lane, &s, err);
    if (rc)
        return rc;
    if (s->rec.raw_bytes && !p->data) {
        ckpt_stream_abort(s);
        return ckpt_err(err, -EINVAL, "tensor '%s': piece has no data",
                        p->fqn);
    }
    s->lend = 1;   /* p->data stays valid until the stream ends below */
    if (s->rec.raw_bytes)
        rc = ckpt_stream_write(s, p->data, s->rec.raw_bytes, err);
    if (rc) {
        ckpt_stream_abort(s);
        return rc;
    }
    return ckpt_stream_end(s, err);
}

/* Pieces of fewer frames are not worth a lane of their own: their first
 * frame is not checksummed ahead (ckpt_writer_unchanged_start). */
#define LANE_MIN_FRAMES 4

int ckpt_writer_unchanged_start(ckpt_writer *w, const ckpt_piece *p,
                                ckpt_error *err)
{
    int rc = piece_args("ckpt_writer_unchanged_start", w, p, err);
    if (rc || !w->bases || !p->data)
        return rc;
    ckpt_piece_rec r;
    memset(&r, 0, sizeof r);
    rc = fill_record(w, p, &r, err);
    size_t item = rc ? 0 : ckpt_dtype_size(r.dtype);
    size_t frame = item ? w->opts.frame_size - w->opts.frame_size % item : 0;
    ckpt_base_frame *bf = NULL;
    size_t nbf = 0;
    /* Small pieces are not worth the base query, let alone the lane. */
    if (rc == 0 && frame && r.raw_bytes >= (uint64_t)LANE_MIN_FRAMES * frame) {
        ckpt_chunk_loc loc = { r.fqn, r.dtype, r.ndim, r.shape, r.offsets,
                               r.sizes };
        rc = ckpt_bases_chunk(w->bases, &loc, &bf, &nbf, err);
    }
    int same = rc == 0 && nbf >= LANE_MIN_FRAMES &&
               bf[0].raw_offset == 0 && bf[0].raw_size == frame &&
               ckpt_checksum(p->data, frame) == bf[0].checksum;
    free(bf);
    ckpt_piece_clear(&r);
    return rc ? rc : same;
}

int ckpt_writer_put_bytes(ckpt_writer *w, const char *fqn, const void *data,
                          size_t len, ckpt_error *err)
{
    if (!w || !fqn || (!data && len))
        return ckpt_err_null(err, "ckpt_writer_put_bytes",
                             !w ? "writer" : !fqn ? "fqn" : "data");
    int64_t shape = (int64_t)len;
    ckpt_piece p = {
        .fqn = fqn, .dtype = CKPT_BYTES, .ndim = 1, .shape = &shape,
        .data = data,
    };
    return ckpt_writer_put(w, &p, err);
}
