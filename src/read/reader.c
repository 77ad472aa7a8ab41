/*
 * reader.c - reading a committed checkpoint: tensor listing, byte-range and
 * region reads, verification.
 *
 * Opening reads the index's tensors; a tensor's chunks are loaded when
 * something first needs them (tensor_chunks), a chunk's frames likewise.
 *
 * A read is turned into segments (chunk, byte range of the chunk's image,
 * destination) by the region arithmetic; each segment is served frame by
 * frame.  A frame covered whole is decoded (or, if raw, pread) straight
 * into the destination; a partly covered frame comes from the shared
 * decoded-frame cache, which decodes it once however many threads ask.
 * Large reads are split across the pool; sequential reads prefetch the
 * following frames.  Every frame's checksum is verified when it is decoded.
 *
 * A directory without index.db that holds a PyTorch distributed checkpoint
 * or safetensors files is described by foreign.c with the same model and
 * read the same way: its frames are byte ranges of the original files
 * (raw, without checksums), and a chunk torch stored with strides is one
 * frame gathered into row-major order as it is read.
 */
#include "ckptfs.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "read/attach.h"
#include "read/cache.h"
#include "codec/codec.h"
#include "codec/zstream.h"
#include "common/confine.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/grow.h"
#include "foreign/foreign.h"
#include "format/index.h"
#include "format/delta.h"
#include "codec/xorframe.h"
#include "common/perm.h"
#include "format/plan.h"
#include "common/pool.h"
#include "common/region.h"
#include "common/shape.h"
#include "read/shardio.h"
#include "read/strided.h"
#include "common/optsize.h"

/* Scratch for one decoding thread: codec contexts and shard reading
 * buffers.  Kept on a free list so any thread (FUSE's, the pool's) can
 * borrow one. */
typedef struct scratch {
    struct scratch *next;
    ckpt_codec_ctx *codec;
    ckpt_sio *io;
    ckpt_delta_scratch delta;       /* delta frames: base frames' bytes */
} scratch;

/* What the reader keeps of a tensor once its chunks are loaded. */
typedef struct tensor_state {
    uint64_t key0;                  /* cache key of its first frame */
    uint64_t *frame0;               /* per chunk: the tensor's frames before
                                       it */
    _Atomic(ckpt_frame_rec *) *frames;   /* per chunk, lazily */
    ckpt_strided **strided;         /* foreign: per chunk, its strides, or
                                       NULL when row-major */
    _Atomic(ckpt_strided_map *) *maps;   /* per strided chunk: its storage
                                       mapped, on first read */
} tensor_state;

struct ckpt_reader {
    char *dir;
    ckpt_confine root;              /* dir: where files are opened */
    ckpt_read_opts opts;
    ckpt_index *ix;
    ckpt_bases *bases;              /* a delta checkpoint's, else NULL */
    pthread_mutex_t ix_mu;          /* the index handle, lazy loads */
    ckpt_index_data d;              /* tensors' chunks: see ts */
    /* Per tensor: NULL until its chunks are loaded (on first use, once,
     * under ix_mu), then its state; d.tensors[t].chunks is valid from
     * then on. */
    _Atomic(tensor_state *) *ts;
    uint64_t next_key;              /* cache keys given out (under ix_mu):
                                       frames are numbered across the
                                       checkpoint as tensors load */
    _Atomic int *fds;               /* per shard file, -1 until opened */
    ckpt_smap *maps;                /* per shard file: its mapping, set
                                       before its fd is published */
    pthread_mutex_t fd_mu;
    char (*codecs)[32];             /* each distinct codec set: "raw+zstd" */
    uint16_t *codec_of;             /* per tensor: its entry in codecs */
    _Atomic uint64_t *seq_end;      /* per tensor: end of the last read */
    _Atomic int *tiled;             /* per tensor: 1 once its chunks were
                                       found to tile it, -1 when not, 0
                                       before the first read */
    int foreign;                    /* not a ckptfs checkpoint: frames have
                                       no checksums */
    /* Foreign: per chunk (by its id), where its bytes are, until its
     * tensor's state makes its frames on first use: opening costs no
     * state per tensor. */
    ckpt_foreign_src *fsrc;
    size_t nfchunks;
    const char *index_file;         /* names the tensors: "index.db",
                                       ".metadata", ..., or NULL */
    int names_in_files;             /* safetensors: every file's header
                                       names tensors too */
    pthread_mutex_t perm_mu;        /* what follows */
    signed char *file_seen;         /* per file: 0 not looked at yet, 1 in
                                       file_st, -1 could not be */
    struct stat *file_st;
    int names_seen;                 /* names_perm is set */
    ckpt_perm names_perm;
    ckpt_cache *cache;
    ckpt_pool *pool;
    scratch *free_scratch;
    pthread_mutex_t attach_mu;      /* what follows */
    void *attached;                 /* read/attach.h */
    void (*attached_free)(void *);
    pthread_mutex_t scratch_mu;
    _Atomic uint64_t frames_decoded, bytes_decoded, bytes_read, bytes_served;
};

/* Where a frame is, for messages and cache keys. */
typedef struct frame_ref {
    ckpt_reader *r;
    size_t t, c;                    /* tensor, chunk within tensor */
    uint64_t i;                     /* frame number within chunk */
    const ckpt_frame_rec *f;
} frame_ref;

void ckpt_read_opts_init(ckpt_read_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->cache_bytes = (size_t)256 << 20;
    o->threads = 0;
    o->prefetch = 4;
}

/* ---------------------------------------------------------------- scratch */

static scratch *scratch_get(ckpt_reader *r)
{
    pthread_mutex_lock(&r->scratch_mu);
    scratch *s = r->free_scratch;
    if (s)
        r->free_scratch = s->next;
    pthread_mutex_unlock(&r->scratch_mu);
    if (s)
        return s;
    s = calloc(1, sizeof *s);
    if (s && (!(s->codec = ckpt_codec_ctx_new()) ||
              !(s->io = ckpt_sio_new()))) {
        ckpt_codec_ctx_free(s->codec);
        free(s);
        s = NULL;
    }
    return s;
}

static void scratch_put(ckpt_reader *r, scratch *s)
{
    pthread_mutex_lock(&r->scratch_mu);
    s->next = r->free_scratch;
    r->free_scratch = s;
    pthread_mutex_unlock(&r->scratch_mu);
}

static void scratch_free_all(ckpt_reader *r)
{
    while (r->free_scratch) {
        scratch *s = r->free_scratch;
        r->free_scratch = s->next;
        ckpt_codec_ctx_free(s->codec);
        ckpt_sio_free(s->io);
        ckpt_delta_scratch_free(&s->delta);
        free(s);
    }
}

/* ---------------------------------------------------------------- lookup */

static const ckpt_index_tensor *tensor_at(const ckpt_reader *r, size_t t)
{
    return &r->d.tensors[t];
}

static const ckpt_index_chunk *chunk_at(const ckpt_reader *r, size_t t,
                                        size_t c)
{
    return &r->d.tensors[t].chunks[c];
}

static const char *file_of(const ckpt_reader *r, size_t t, size_t c)
{
    return r->d.files[chunk_at(r, t, c)->file].path;
}

/* The state of tensor t, whose chunks the caller has loaded
 * (tensor_chunks). */
static tensor_state *state_of(const ckpt_reader *r, size_t t)
{
    return atomic_load_explicit(&r->ts[t], memory_order_acquire);
}

static void state_free(tensor_state *s, size_t nchunks)
{
    if (!s)
        return;
    for (size_t c = 0; s->frames && c < nchunks; c++) {
        free(atomic_load(&s->frames[c]));
        if (s->strided)
            free(s->strided[c]);
        ckpt_strided_map *m = s->maps ? atomic_load(&s->maps[c]) : NULL;
        if (m) {
            ckpt_strided_map_close(m);
            free(m);
        }
    }
    free(s->maps);
    free(s->frames);
    free(s->strided);
    free(s->frame0);
    free(s);
}

/* A foreign tensor's state: its chunks' frames, made from where their
 * bytes are, and their strides, taken from the reader.  -ENOMEM or -EIO
 * with nothing taken. */
static int take_foreign(ckpt_reader *r, const ckpt_index_tensor *tt,
                        tensor_state *s)
{
    size_t n = tt->nchunks, isz = ckpt_dtype_size(tt->dtype);
    if (!(s->strided = calloc(n + 1, sizeof *s->strided)) ||
        !(s->maps = calloc(n + 1, sizeof *s->maps)))
        return -ENOMEM;
    int rc = 0;
    for (size_t c = 0; rc == 0 && c < n; c++) {
        const ckpt_index_chunk *ch = &tt->chunks[c];
        ckpt_frame_rec *fr = NULL;
        uint64_t nf;
        if (ch->id < 0 || (uint64_t)ch->id >= r->nfchunks)
            rc = -EIO;
        else
            rc = ckpt_foreign_frames(&r->fsrc[ch->id], ch->raw_bytes, isz,
                                     &fr, &nf);
        if (rc == 0 && nf != ch->nframes)
            rc = -EIO;
        if (rc)
            free(fr);
        else
            atomic_store(&s->frames[c], fr);
        atomic_init(&s->maps[c], NULL);
    }
    for (size_t c = 0; rc && c < n; c++) {
        free(atomic_load(&s->frames[c]));
        atomic_store(&s->frames[c], NULL);
    }
    for (size_t c = 0; rc == 0 && c < n; c++) {
        s->strided[c] = r->fsrc[tt->chunks[c].id].strided;
        r->fsrc[tt->chunks[c].id].strided = NULL;
    }
    return rc;
}

/* A state for tensor t, whose chunks are in r->d, taking the next cache
 * keys (called under ix_mu, or before the reader is shared). */
static tensor_state *state_new(ckpt_reader *r, size_t t)
{
    const ckpt_index_tensor *tt = tensor_at(r, t);
    size_t n = tt->nchunks;
    tensor_state *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->frame0 = calloc(n + 1, sizeof *s->frame0);
    s->frames = calloc(n + 1, sizeof *s->frames);
    if (!s->frame0 || !s->frames) {
        state_free(s, 0);
        return NULL;
    }
    uint64_t frames = 0;
    for (size_t c = 0; c < n; c++) {
        s->frame0[c] = frames;
        frames += tt->chunks[c].nframes;
        atomic_init(&s->frames[c], NULL);
    }
    if (r->fsrc && take_foreign(r, tt, s)) {
        state_free(s, 0);
        return NULL;
    }
    s->key0 = r->next_key;
    r->next_key += frames;
    return s;
}

/* Loads the chunks of tensor t on its first use: once, whatever the
 * threads asking.  Everything that looks at a tensor's chunks (reads,
 * ckpt_reader_chunk/frame, verify) comes through here first. */
static int tensor_chunks(ckpt_reader *r, size_t t, ckpt_error *err)
{
    const char *why = r->d.tensors[t].refused;
    if (why)
        return ckpt_err(err, -ENOTSUP, "%s", why);
    if (state_of(r, t))
        return 0;
    int rc = 0;
    pthread_mutex_lock(&r->ix_mu);
    if (!atomic_load_explicit(&r->ts[t], memory_order_relaxed)) {
        tensor_state *s = NULL;
        rc = ckpt_index_load_chunks(r->ix, &r->d, t, err);
        if (rc == 0 && !(s = state_new(r, t)))
            rc = ckpt_err(err, -ENOMEM, "out of memory");
        /* A check of the loaded chunks before any byte is served belongs
         * here, under the lock, run once with its verdict kept. */
        if (rc == 0)
            atomic_store_explicit(&r->ts[t], s, memory_order_release);
    }
    pthread_mutex_unlock(&r->ix_mu);
    return rc;
}

/* Frames of chunk (t, c), loaded from the index on first use. */
static int chunk_frames(ckpt_reader *r, size_t t, size_t c,
                        const ckpt_frame_rec **out, ckpt_error *err)
{
    _Atomic(ckpt_frame_rec *) *slot = &state_of(r, t)->frames[c];
    ckpt_frame_rec *f = atomic_load_explicit(slot, memory_order_acquire);
    if (f) {
        *out = f;
        return 0;
    }
    const ckpt_index_chunk *ch = chunk_at(r, t, c);
    int rc = 0;
    pthread_mutex_lock(&r->ix_mu);
    f = atomic_load_explicit(slot, memory_order_acquire);
    if (!f) {
        rc = ckpt_index_load_frames(r->ix, ch->id, ch->nframes,
                                    ch->raw_bytes, &f, err);
        if (rc == 0)
            atomic_store_explicit(slot, f, memory_order_release);
    }
    pthread_mutex_unlock(&r->ix_mu);
    if (rc)
        return ckpt_err_wrap(err, rc, "tensor '%s' chunk %zu",
                             tensor_at(r, t)->fqn, c);
    *out = f;
    return 0;
}

/* Index of the frame holding byte `pos` of a chunk's image. */
static uint64_t find_frame(const ckpt_frame_rec *f, uint64_t n, uint64_t pos)
{
    uint64_t lo = 0, hi = n;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (f[mid].raw_offset <= pos)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* File descriptor of shard file `file`, opened on first use. */
static int shard_fd(ckpt_reader *r, int file, ckpt_error *err)
{
    int fd = atomic_load(&r->fds[file]);
    if (fd >= 0)
        return fd;
    int rc = 0;
    pthread_mutex_lock(&r->fd_mu);
    fd = atomic_load(&r->fds[file]);
    if (fd < 0) {
        fd = ckpt_confine_openat(&r->root, r->d.files[file].path, err);
        if (fd == -ENOENT)
            rc = ckpt_err(err, -EIO, "shard file %s is missing",
                          r->d.files[file].path);
        else if (fd < 0)
            rc = ckpt_err_wrap(err, fd, "shard file %s cannot be opened",
                               r->d.files[file].path);
        else {
            /* Reads mostly walk a shard forward: ask for a wide readahead
             * (a hint; failure changes nothing). */
            (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
            ckpt_smap_open(&r->maps[file], fd);
            atomic_store(&r->fds[file], fd);
        }
    }
    pthread_mutex_unlock(&r->fd_mu);
    return rc ? rc : fd;
}

/* ---------------------------------------------------------------- frames */

static int frame_fail(const frame_ref *fr, ckpt_error *err, int rc)
{
    const ckpt_reader *r = fr->r;
    return ckpt_err_wrap(err, rc, "tensor '%s' chunk %zu frame %llu (%s at "
                         "offset %llu)", tensor_at(r, fr->t)->fqn, fr->c,
                         (unsigned long long)fr->i, file_of(r, fr->t, fr->c),
                         (unsigned long long)fr->f->file_offset);
}

/* The strides of chunk (t, c) when it is stored strided, else NULL. */
static const ckpt_strided *strided_of(const ckpt_reader *r, size_t t,
                                      size_t c)
{
    const tensor_state *s = state_of(r, t);
    return s->strided ? s->strided[c] : NULL;
}

/* The strides of chunk (t, c) when its storage is in its file, read in
 * place (mapped); NULL when row-major or inside a zstd stream (DCP's
 * ZStandard extension), which is decoded as a frame. */
static const ckpt_strided *mapped_of(const ckpt_reader *r, size_t t,
                                     size_t c)
{
    const ckpt_strided *sd = strided_of(r, t, c);
    return sd && !sd->zstd ? sd : NULL;
}

/* The storage of strided chunk (t, c) (its one frame's bytes), mapped
 * on first use (once: of two threads mapping it, one keeps its
 * mapping). */
static int strided_map(ckpt_reader *r, size_t t, size_t c,
                       const ckpt_strided_map **out, ckpt_error *err)
{
    tensor_state *s = state_of(r, t);
    ckpt_strided_map *m = atomic_load(&s->maps[c]);
    if (m) {
        *out = m;
        return 0;
    }
    const ckpt_frame_rec *frames;
    const ckpt_index_chunk *ch = chunk_at(r, t, c);
    int rc = chunk_frames(r, t, c, &frames, err);
    int fd = rc ? rc : shard_fd(r, ch->file, err);
    if (fd < 0)
        return fd;
    if (!(m = calloc(1, sizeof *m)))
        return ckpt_err(err, -ENOMEM, "out of memory");
    rc = ch->nframes ? ckpt_strided_map_open(fd, frames[0].file_offset,
                                             frames[0].stored_size,
                                             file_of(r, t, c), m, err) : 0;
    if (rc) {
        free(m);
        return ckpt_err_wrap(err, rc, "tensor '%s' chunk %zu",
                             tensor_at(r, t)->fqn, c);
    }
    ckpt_strided_map *none = NULL;
    if (!atomic_compare_exchange_strong(&s->maps[c], &none, m)) {
        ckpt_strided_map_close(m);
        free(m);
        m = none;
    }
    *out = m;
    return 0;
}

/* The stored bytes of a zstd-stream frame, read as the stream asks. */
typedef struct zs_in {
    int fd;
    uint64_t base;
    const char *file;
} zs_in;

static int zs_pread(void *arg, void *buf, size_t n, uint64_t off,
                    ckpt_error *err)
{
    const zs_in *in = arg;
    return ckpt_pread_full(in->fd, buf, n, in->base + off, in->file, err);
}

/* Decodes the zstd stream of frame fr (DCP's ZStandard extension: one
 * stream per item) and keeps its decoded bytes [sd->skip, + sd->span) in
 * out: the whole stream is decoded, and must decode to the size it had
 * when the checkpoint was opened. */
static int decode_stream(const frame_ref *fr, int fd, const ckpt_strided *sd,
                         unsigned char *out, ckpt_error *err)
{
    const ckpt_frame_rec *f = fr->f;
    zs_in in = { fd, f->file_offset, file_of(fr->r, fr->t, fr->c) };
    ckpt_zs_window w = { sd->skip, sd->span, out };
    uint64_t total;
    int rc = ckpt_zstream_decode(zs_pread, &in, f->stored_size,
                                 ckpt_zs_window_out, &w, sd->decoded, &total,
                                 in.file, err);
    if (rc == 0 && total != sd->decoded)
        rc = ckpt_err(err, -EIO, "%s: the item's zstd stream decodes to "
                      "%llu bytes, not the %llu it did when the checkpoint "
                      "was opened", in.file, (unsigned long long)total,
                      (unsigned long long)sd->decoded);
    return rc;
}

/* Reads the chunk of frame fr that lies in a zstd stream (its one frame):
 * the stream decoded once, the elements kept (gathered when strided). */
static int read_zstd(const frame_ref *fr, int fd, const ckpt_strided *sd,
                     void *dst, ckpt_error *err)
{
    if (sd->row_major)
        return decode_stream(fr, fd, sd, dst, err);
    const ckpt_index_tensor *t = tensor_at(fr->r, fr->t);
    unsigned char *tmp = malloc(sd->span ? sd->span : 1);
    if (!tmp)
        return ckpt_err(err, -ENOMEM, "out of memory");
    int rc = decode_stream(fr, fd, sd, tmp, err);
    if (rc == 0)
        ckpt_strided_gather(dst, tmp, t->ndim,
                            chunk_at(fr->r, fr->t, fr->c)->sizes, sd->stride,
                            ckpt_dtype_size(t->dtype), 0, fr->f->raw_size);
    free(tmp);
    return rc;
}

/* Copies bytes [src, src + n) of strided chunk (t, c)'s row-major image
 * to dst, element by element from its mapped storage (strided.h). */
static int copy_strided(ckpt_reader *r, size_t t, size_t c, uint64_t src,
                        uint64_t n, void *dst, ckpt_error *err)
{
    const ckpt_strided_map *m;
    int rc = strided_map(r, t, c, &m, err);
    if (rc)
        return rc;
    const ckpt_index_tensor *tt = tensor_at(r, t);
    ckpt_strided_gather(dst, m->base, tt->ndim, chunk_at(r, t, c)->sizes,
                        strided_of(r, t, c)->stride,
                        ckpt_dtype_size(tt->dtype), src, n);
    atomic_fetch_add(&r->bytes_decoded, n);
    return 0;
}

/* The stored bytes of coded frame fr in *src: in place in the shard's
 * mapping when they are in the page cache, else read into the scratch's
 * buffer. */
static int frame_stored(const frame_ref *fr, int fd, scratch *s,
                        const unsigned char **src, ckpt_error *err)
{
    ckpt_reader *r = fr->r;
    const ckpt_frame_rec *f = fr->f;
    *src = ckpt_smap_resident(&r->maps[chunk_at(r, fr->t, fr->c)->file],
                              f->file_offset, f->stored_size);
    return *src ? 0 : ckpt_sio_stored(s->io, fd, f->stored_size,
                                      f->file_offset, src,
                                      file_of(r, fr->t, fr->c), err);
}

/* A delta frame (ref or xor) of fr into dst, its checksum in *sum: the
 * base frame at its place, decoded straight into dst, with an xor
 * frame's XOR applied over it.  The bytes under an xor frame are checked
 * only as its result; when that fails, the base frame is read again,
 * checked, to tell a damaged base from a damaged delta. */
static int decode_delta(const frame_ref *fr, int fd, void *dst, scratch *s,
                        uint64_t *sum, ckpt_error *err)
{
    ckpt_reader *r = fr->r;
    const ckpt_frame_rec *f = fr->f;
    const ckpt_index_tensor *t = tensor_at(r, fr->t);
    const ckpt_index_chunk *ch = chunk_at(r, fr->t, fr->c);
    ckpt_chunk_loc loc = { t->fqn, t->dtype, t->ndim, t->shape, ch->offsets,
                           ch->sizes };
    if (!r->bases)
        return ckpt_err(err, -EIO, "a '%s' frame in a checkpoint without "
                        "bases", ckpt_codec_name(f->codec));
    if (f->codec == CKPT_CODEC_REF)   /* checked against the base's sum */
        return ckpt_bases_read(r->bases, f->base, &loc, fr->i, f->raw_offset,
                               f->raw_size, dst, s->codec, &s->delta, sum,
                               err);
    const unsigned char *src;
    unsigned char *tmp = ckpt_delta_scratch_at(&s->delta, 0, f->raw_size);
    int rc = tmp ? ckpt_bases_read(r->bases, f->base, &loc, fr->i,
                                   f->raw_offset, f->raw_size, dst, s->codec,
                                   &s->delta, NULL, err)
                 : ckpt_err(err, -ENOMEM, "out of memory");
    if (!rc)
        rc = frame_stored(fr, fd, s, &src, err);
    if (!rc)
        rc = ckpt_xor_apply(s->codec, src, f->stored_size, dst, tmp,
                            f->raw_size, err);
    *sum = rc ? 0 : ckpt_checksum(dst, f->raw_size);
    if (rc == 0 && *sum != f->checksum) {
        uint64_t base_sum;
        rc = ckpt_bases_read(r->bases, f->base, &loc, fr->i, f->raw_offset,
                             f->raw_size, tmp, s->codec, &s->delta,
                             &base_sum, err);
    }
    return rc;
}

/* Reads and decodes frame fr into dst (raw_size bytes) and checks its
 * checksum.  A raw frame is read straight into dst and checksummed as it
 * lands (shardio.c); a coded one is read into the scratch's buffer and
 * decoded into dst. */
static int decode_frame(const frame_ref *fr, void *dst, scratch *s,
                        ckpt_error *err)
{
    ckpt_reader *r = fr->r;
    const ckpt_frame_rec *f = fr->f;
    const ckpt_index_chunk *ch = chunk_at(r, fr->t, fr->c);
    const ckpt_strided *sd = strided_of(r, fr->t, fr->c);
    const char *file = file_of(r, fr->t, fr->c);
    int fd = shard_fd(r, ch->file, err);
    if (fd < 0)
        return frame_fail(fr, err, fd);
    int rc = 0, summed = 0;
    uint64_t sum = 0;
    if (sd && sd->zstd) {
        rc = read_zstd(fr, fd, sd, dst, err);
    } else if (sd) {
        rc = copy_strided(r, fr->t, fr->c, 0, f->raw_size, dst, err);
    } else if (f->codec == CKPT_CODEC_REF || f->codec == CKPT_CODEC_XOR) {
        rc = decode_delta(fr, fd, dst, s, &sum, err);
        summed = 1;
    } else if (f->codec == CKPT_CODEC_RAW) {
        if (f->stored_size != f->raw_size)
            rc = ckpt_err(err, -EIO, "raw frame stores %llu bytes for %llu",
                          (unsigned long long)f->stored_size,
                          (unsigned long long)f->raw_size);
        else
            rc = ckpt_sio_read(s->io, fd, dst, f->raw_size, f->file_offset,
                               r->foreign ? NULL : &sum, file, err);
        summed = 1;
    } else {
        const unsigned char *src;
        rc = frame_stored(fr, fd, s, &src, err);
        if (rc == 0)
            rc = ckpt_codec_decode(s->codec, f->codec, src, f->stored_size,
                                   dst, f->raw_size, err);
    }
    if (rc)
        return frame_fail(fr, err, rc);
    atomic_fetch_add(&r->bytes_read, f->stored_size);
    atomic_fetch_add(&r->frames_decoded, 1);
    atomic_fetch_add(&r->bytes_decoded, f->raw_size);
    if (r->foreign)
        return 0;
    if (!summed)
        sum = ckpt_checksum(dst, f->raw_size);
    if (sum != f->checksum) {
        ckpt_err(err, -EIO, "checksum mismatch (index has %016llx, data "
                 "hashes to %016llx): the shard is corrupt",
                 (unsigned long long)f->checksum, (unsigned long long)sum);
        return frame_fail(fr, err, -EIO);
    }
    return 0;
}

/* Reads bytes [fo, fo + n) of raw frame fr straight into dst.  Only for
 * frames without a checksum (foreign checkpoints): a ckptfs frame is
 * checked whole, so a part of one comes from the decoded-frame cache. */
static int read_raw_part(const frame_ref *fr, uint64_t fo, uint64_t n,
                         void *dst, ckpt_error *err)
{
    ckpt_reader *r = fr->r;
    int fd = shard_fd(r, chunk_at(r, fr->t, fr->c)->file, err);
    if (fd < 0)
        return frame_fail(fr, err, fd);
    scratch *s = scratch_get(r);
    if (!s)
        return ckpt_err(err, -ENOMEM, "out of memory");
    int rc = ckpt_sio_read(s->io, fd, dst, n, fr->f->file_offset + fo, NULL,
                           file_of(r, fr->t, fr->c), err);
    scratch_put(r, s);
    if (rc)
        return frame_fail(fr, err, rc);
    atomic_fetch_add(&r->bytes_read, n);
    atomic_fetch_add(&r->bytes_decoded, n);
    return 0;
}

/* Segments at least this long read their parts of checksum-less raw
 * frames in place; shorter ones (rows of a region) come from one read of
 * the whole frame into the cache, rather than one pread each. */
#define PARTIAL_MIN ((uint64_t)64 << 10)

/* 1 when part of frame fr can be read without reading all of it: a raw,
 * row-major frame without a checksum. */
static int partial_ok(const frame_ref *fr)
{
    return fr->r->foreign && fr->f->codec == CKPT_CODEC_RAW &&
           fr->f->stored_size == fr->f->raw_size &&
           !strided_of(fr->r, fr->t, fr->c);
}

static int decode_with_scratch(const frame_ref *fr, void *dst,
                               ckpt_error *err)
{
    scratch *s = scratch_get(fr->r);
    if (!s)
        return ckpt_err(err, -ENOMEM, "out of memory");
    int rc = decode_frame(fr, dst, s, err);
    scratch_put(fr->r, s);
    return rc;
}

static int cache_load(void *arg, void *dst, size_t n, ckpt_error *err)
{
    (void)n;
    return decode_with_scratch(arg, dst, err);
}

/* Frames are numbered across the whole checkpoint, so keys never clash. */
static uint64_t frame_key(const ckpt_reader *r, size_t t, size_t c,
                          uint64_t i)
{
    const tensor_state *s = state_of(r, t);
    return s->key0 + s->frame0[c] + i;
}

/* ---------------------------------------------------------------- segments */

/* `n` bytes from byte `src` of chunk c's image go to `dst`. */
typedef struct segment {
    uint32_t c;
    uint64_t src, n;
    unsigned char *dst;
} segment;

typedef struct seg_list {
    ckpt_reader *r;
    size_t t;
    size_t isz;
    segment *v;
    size_t n, cap;
    uint64_t bytes;
    /* context for the run callback */
    uint32_t cur_chunk;
    unsigned char *dst_base;        /* destination of element 0 of d-box */
} seg_list;

/* Appends segment sg as it is (no merging with the previous one). */
static int seg_push(seg_list *l, segment sg)
{
    segment *v = ckpt_grow(l->v, l->n, &l->cap, sizeof *v, 64);
    if (!v)
        return -ENOMEM;
    l->v = v;
    l->v[l->n++] = sg;
    l->bytes += sg.n;
    return 0;
}

static int seg_add(seg_list *l, uint32_t c, uint64_t src, uint64_t n,
                   unsigned char *dst)
{
    if (l->n && l->v[l->n - 1].c == c &&
        l->v[l->n - 1].src + l->v[l->n - 1].n == src &&
        l->v[l->n - 1].dst + l->v[l->n - 1].n == dst) {
        l->v[l->n - 1].n += n;      /* contiguous with the previous run */
        l->bytes += n;
        return 0;
    }
    return seg_push(l, (segment){ c, src, n, dst });
}

static int on_run(void *arg, uint64_t src, uint64_t dst, uint64_t n)
{
    seg_list *l = arg;
    return seg_add(l, l->cur_chunk, src * l->isz, n * l->isz,
                   l->dst_base + dst * l->isz);
}

/* Adds the segments copying region (r_off, r_size) from every chunk it
 * overlaps into the destination box (d_off, d_size) at dst_base. */
static int add_region(seg_list *l, const int64_t *r_off,
                      const int64_t *r_size, const int64_t *d_off,
                      const int64_t *d_size)
{
    const ckpt_index_tensor *t = tensor_at(l->r, l->t);
    int64_t i_off[CKPT_MAX_DIMS], i_size[CKPT_MAX_DIMS];
    for (size_t c = 0; c < t->nchunks; c++) {
        const ckpt_index_chunk *ch = &t->chunks[c];
        if (ch->raw_bytes == 0 ||
            !ckpt_box_intersect(t->ndim, r_off, r_size, ch->offsets,
                                ch->sizes, i_off, i_size))
            continue;
        l->cur_chunk = (uint32_t)c;
        int rc = ckpt_region_runs(t->ndim, i_off, i_size, ch->offsets,
                                  ch->sizes, d_off, d_size, on_run, l);
        if (rc)
            return rc;
    }
    return 0;
}

typedef struct linear_ctx {
    seg_list *l;
    const int64_t *zero;
    const int64_t *shape;
} linear_ctx;

static int on_linear_box(void *arg, const int64_t *off, const int64_t *size)
{
    linear_ctx *lc = arg;
    return add_region(lc->l, off, size, lc->zero, lc->shape);
}

/* ---------------------------------------------------------------- copying */

/* A pinned cached frame kept across consecutive segments. */
typedef struct cursor {
    size_t c;
    uint64_t i;
    ckpt_cache_ref *ref;
    const unsigned char *data;
} cursor;

static void cursor_release(ckpt_reader *r, cursor *cur)
{
    if (cur->ref)
        ckpt_cache_release(r->cache, cur->ref);
    cur->ref = NULL;
}

static int copy_cached(const frame_ref *fr, cursor *cur, uint64_t fo,
                       uint64_t take, unsigned char *dst, ckpt_error *err)
{
    ckpt_reader *r = fr->r;
    if (!cur->ref || cur->c != fr->c || cur->i != fr->i) {
        cursor_release(r, cur);
        const void *data;
        int rc = ckpt_cache_get(r->cache, frame_key(r, fr->t, fr->c, fr->i),
                                fr->f->raw_size, cache_load, (void *)fr,
                                &data, &cur->ref, err);
        if (rc)
            return rc;
        cur->c = fr->c;
        cur->i = fr->i;
        cur->data = data;
    }
    memcpy(dst, cur->data + fo, take);
    return 0;
}

static int copy_segment(ckpt_reader *r, size_t t, const segment *sg,
                        cursor *cur, ckpt_error *err)
{
    const ckpt_frame_rec *frames;
    const ckpt_index_chunk *ch = chunk_at(r, t, sg->c);
    int rc = chunk_frames(r, t, sg->c, &frames, err);
    if (rc)
        return rc;
    if (mapped_of(r, t, sg->c))
        return copy_strided(r, t, sg->c, sg->src, sg->n, sg->dst, err);
    uint64_t src = sg->src, n = sg->n;
    unsigned char *dst = sg->dst;
    uint64_t i = find_frame(frames, ch->nframes, src);
    while (n) {
        frame_ref fr = { r, t, sg->c, i, &frames[i] };
        uint64_t fo = src - frames[i].raw_offset;
        uint64_t take = frames[i].raw_size - fo;
        if (take > n)
            take = n;
        int whole = fo == 0 && take == frames[i].raw_size;
        if (whole && !ckpt_cache_contains(r->cache, frame_key(r, t, sg->c, i)))
            rc = decode_with_scratch(&fr, dst, err);
        else if (!whole && sg->n >= PARTIAL_MIN && partial_ok(&fr))
            rc = read_raw_part(&fr, fo, take, dst, err);
        else
            rc = copy_cached(&fr, cur, fo, take, dst, err);
        if (rc)
            return rc;
        src += take;
        dst += take;
        n -= take;
        i++;
    }
    return 0;
}

static int copy_range(ckpt_reader *r, size_t t, const segment *v, size_t n,
                      ckpt_error *err)
{
    cursor cur = { 0 };
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++)
        rc = copy_segment(r, t, &v[k], &cur, err);
    cursor_release(r, &cur);
    return rc;
}

/* One share of a parallel copy.  (mpi.c's read_task has the same shape --
 * a share of work, its own rc/err, the taskgroup -- and so has the code
 * that runs the shares and keeps the first failure: the pattern of
 * ckpt_pool_run_tasks; the work differs, so each keeps its own.) */
typedef struct copy_task {
    ckpt_reader *r;
    size_t t;
    const segment *v;
    size_t n;
    int rc;
    ckpt_error err;
    ckpt_taskgroup *tg;
} copy_task;

static void copy_task_run(void *arg, int worker)
{
    (void)worker;
    copy_task *ct = arg;
    ct->rc = copy_range(ct->r, ct->t, ct->v, ct->n, &ct->err);
    ckpt_tg_done(ct->tg);
}

/* Splits segments into shares of about `share` bytes (cutting a segment
 * where needed) so the pool can copy them in parallel. */
static int split_segments(seg_list *l, uint64_t share)
{
    seg_list out = *l;
    out.v = NULL;
    out.n = out.cap = 0;
    out.bytes = 0;
    for (size_t k = 0; k < l->n; k++) {
        segment s = l->v[k];
        while (s.n) {
            uint64_t take = s.n > share ? share : s.n;
            /* no short tail: it would be read through the frame cache,
             * its whole frame, where a long part is read in place */
            if (s.n - take < PARTIAL_MIN)
                take = s.n;
            /* seg_add would merge the pieces back: append as they are */
            if (seg_push(&out, (segment){ s.c, s.src, take, s.dst })) {
                free(out.v);
                return -ENOMEM;
            }
            s.src += take;
            s.dst += take;
            s.n -= take;
        }
    }
    free(l->v);
    l->v = out.v;
    l->n = out.n;
    l->cap = out.cap;
    return 0;
}

/* End (exclusive) of the task that starts at segment k: consecutive
 * segments up to about `share` bytes, at least one. */
static size_t task_end(const seg_list *l, size_t k, uint64_t share)
{
    uint64_t b = 0;
    while (k < l->n && (b == 0 || b + l->v[k].n <= share))
        b += l->v[k++].n;
    return k;
}

/* The tasks of a parallel copy, for one tensor's segments or many. */
typedef struct task_vec {
    copy_task *v;
    size_t n, cap;
    ckpt_taskgroup *tg;
} task_vec;

/* Shares of a parallel copy hold at most this many frames. */
#define SHARE_MAX_FRAMES 4

/* The share of a parallel copy of `bytes` on nt threads: whole frames (of
 * the default size), two shares a thread, at most SHARE_MAX_FRAMES.  A
 * frame cut between two shares is decoded through the frame cache by
 * both, a decode and a copy more, where a whole frame is decoded straight
 * into place.  Small shares keep the threads reading next to each other,
 * in file order, where shares of a quarter of a large read (a whole
 * state's batch) had each thread read its own distant part of the shard
 * file through the one open file and its read-ahead: a cold 1 GiB auto
 * load took 0.616 s with those, 0.587 s with 4-frame shares (medians of
 * 5, interleaved; raw unchanged, warm 0.223 -> 0.201 s). */
static uint64_t share_of(uint64_t bytes, int nt)
{
    const uint64_t fsz = CKPT_DEFAULT_FRAME_SIZE;
    uint64_t share = bytes / (uint64_t)(nt * 2);
    if (share > SHARE_MAX_FRAMES * fsz)
        share = SHARE_MAX_FRAMES * fsz;
    return share < fsz ? fsz : (share + fsz - 1) / fsz * fsz;
}

/* Cuts l's segments into shares of about `share` bytes and appends a
 * task for each run of consecutive segments of about that size. */
static int plan_tasks(seg_list *l, uint64_t share, task_vec *tv)
{
    if (split_segments(l, share))
        return -ENOMEM;
    for (size_t k = 0; k < l->n;) {
        size_t end = task_end(l, k, share);
        copy_task *v = ckpt_grow(tv->v, tv->n, &tv->cap, sizeof *v, 16);
        if (!v)
            return -ENOMEM;
        tv->v = v;
        tv->v[tv->n++] = (copy_task){ l->r, l->t, &l->v[k], end - k, 0,
                                      { 0 }, tv->tg };
        k = end;
    }
    return 0;
}

/* Runs the tasks on the pool; the first failure (in task order) is
 * returned. */
static int run_tasks(ckpt_reader *r, task_vec *tv, ckpt_error *err)
{
    ckpt_pool_run_tasks(r->pool, copy_task_run, tv->v, tv->n, sizeof *tv->v,
                        tv->tg);
    for (size_t i = 0; i < tv->n; i++)
        if (tv->v[i].rc) {
            if (err)
                *err = tv->v[i].err;
            return tv->v[i].rc;
        }
    return 0;
}

/* Reads n segment lists (one read's, or a batch's) of `bytes` in all:
 * shared out among the pool's threads as one job when they hold more
 * than one frame (a frame's decode, ~0.3 ms, outweighs handing it over),
 * otherwise one after the other on this thread. */
static int run_batch(ckpt_reader *r, seg_list *ls, size_t n, uint64_t bytes,
                     ckpt_error *err)
{
    int nt = ckpt_pool_threads(r->pool);
    if (nt <= 1 || bytes <= (uint64_t)CKPT_DEFAULT_FRAME_SIZE) {
        for (size_t i = 0; i < n; i++) {
            int rc = copy_range(r, ls[i].t, ls[i].v, ls[i].n, err);
            if (rc)
                return rc;
        }
        return 0;
    }
    ckpt_taskgroup tg;
    task_vec tv = { .tg = &tg };
    ckpt_tg_init(&tg);
    uint64_t share = share_of(bytes, nt);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        if (plan_tasks(&ls[i], share, &tv))
            rc = ckpt_err(err, -ENOMEM, "out of memory planning a read");
    if (rc == 0)
        rc = run_tasks(r, &tv, err);
    ckpt_tg_destroy(&tg);
    free(tv.v);
    return rc;
}

/* ---------------------------------------------------------------- prefetch */

typedef struct prefetch_task {
    frame_ref fr;
} prefetch_task;

static void prefetch_run(void *arg, int worker)
{
    (void)worker;
    prefetch_task *pt = arg;
    ckpt_reader *r = pt->fr.r;
    const void *data;
    ckpt_cache_ref *ref;
    /* Errors surface when the frame is really read. */
    if (ckpt_cache_get(r->cache, frame_key(r, pt->fr.t, pt->fr.c, pt->fr.i),
                       pt->fr.f->raw_size, cache_load, &pt->fr, &data, &ref,
                       NULL) == 0)
        ckpt_cache_release(r->cache, ref);
    free(pt);
}

/* Queues decoding of the frames that follow the end of segment `last`. */
static void prefetch_after(ckpt_reader *r, size_t t, const segment *last)
{
    const ckpt_index_tensor *tt = tensor_at(r, t);
    size_t c = last->c;
    uint64_t pos = last->src + last->n;
    int want = r->opts.prefetch;
    while (want > 0 && c < tt->nchunks) {
        const ckpt_frame_rec *frames;
        const ckpt_index_chunk *ch = &tt->chunks[c];
        if (ch->nframes == 0 || chunk_frames(r, t, c, &frames, NULL) ||
            strided_of(r, t, c))
            break;   /* a strided chunk is read in place, when asked */
        uint64_t i = pos < ch->raw_bytes ? find_frame(frames, ch->nframes, pos)
                                         : ch->nframes;
        if (i < ch->nframes && frames[i].raw_offset < pos)
            i++;   /* the frame holding pos was just read */
        for (; i < ch->nframes && want > 0; i++, want--) {
            frame_ref fr = { r, t, c, i, &frames[i] };
            if (partial_ok(&fr))
                return;   /* read in place when asked for (a sequential
                             reader asks for large parts) */
            if (ckpt_cache_contains(r->cache, frame_key(r, t, c, i)))
                continue;
            prefetch_task *pt = malloc(sizeof *pt);
            if (!pt)
                return;
            pt->fr = fr;
            if (ckpt_pool_submit(r->pool, prefetch_run, pt)) {
                free(pt);
                return;
            }
        }
        c++;
        pos = 0;
    }
}

/* ---------------------------------------------------------------- reads */

static int run_segments(ckpt_reader *r, seg_list *l, ckpt_error *err)
{
    int rc = run_batch(r, l, 1, l->bytes, err);
    if (rc == 0)
        atomic_fetch_add(&r->bytes_served, l->bytes);
    return rc;
}

/* Whether the chunks of tensor t tile it exactly (pure: the planner's
 * rules on the chunks as the index lists them). */
static int tensor_tiling(const ckpt_index_tensor *t, ckpt_error *err)
{
    uint64_t numel = ckpt_box_numel(t->ndim, t->shape);
    if (t->nchunks == 0 && numel > 0)
        return ckpt_err(err, -EINVAL, "tensor '%s': no chunk holds any of "
                        "its %llu elements", t->fqn,
                        (unsigned long long)numel);
    /* one record, copied into a compact table chunk by chunk */
    ckpt_piece_rec p = { .fqn = t->fqn, .dtype = t->dtype, .ndim = t->ndim };
    memcpy(p.shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
    ckpt_pieces tab;
    ckpt_pieces_init(&tab);
    int rc = 0;
    for (size_t c = 0; !rc && c < t->nchunks; c++) {
        memcpy(p.offsets, t->chunks[c].offsets,
               (size_t)t->ndim * sizeof *p.offsets);
        memcpy(p.sizes, t->chunks[c].sizes, (size_t)t->ndim * sizeof *p.sizes);
        p.raw_bytes = t->chunks[c].raw_bytes;
        if (ckpt_pieces_add(&tab, &p))
            rc = ckpt_err(err, -ENOMEM, "out of memory checking the chunks "
                          "of tensor '%s'", t->fqn);
    }
    if (!rc)
        rc = ckpt_plan_check_chunks_pieces(&tab, err);
    ckpt_pieces_free(&tab);
    return rc;
}

/* A valid tensor index whose chunks are loaded and tile the tensor:
 * checked before the first byte of it is served, the verdict kept
 * (threads racing on the first read may both check: the check is
 * pure). */
static int check_tensor(ckpt_reader *r, size_t t, ckpt_error *err)
{
    if (t >= r->d.ntensors)
        return ckpt_err(err, -EINVAL, "tensor index %zu out of range (%zu "
                        "tensors)", t, r->d.ntensors);
    int rc = tensor_chunks(r, t, err);
    if (rc)
        return rc;
    int v = atomic_load_explicit(&r->tiled[t], memory_order_acquire);
    if (v > 0)
        return 0;
    rc = tensor_tiling(tensor_at(r, t), err);
    if (rc != -ENOMEM)
        atomic_store_explicit(&r->tiled[t], rc ? -1 : 1,
                              memory_order_release);
    if (rc == -EINVAL)
        rc = ckpt_err_wrap(err, -EIO, "%s: damaged %s", r->dir,
                           r->foreign ? "checkpoint" : "index");
    return rc;
}

/* Reads elements [lo, hi) of tensor t's image to dst. */
static int read_elems(ckpt_reader *r, size_t t, uint64_t lo, uint64_t hi,
                      unsigned char *dst, int sequential, ckpt_error *err)
{
    const ckpt_index_tensor *tt = tensor_at(r, t);
    int64_t zero[CKPT_MAX_DIMS] = { 0 };
    seg_list l = { .r = r, .t = t, .isz = ckpt_dtype_size(tt->dtype) };
    l.dst_base = dst - lo * l.isz;
    linear_ctx lc = { &l, zero, tt->shape };
    int rc = ckpt_region_linear_boxes(tt->ndim, tt->shape, lo, hi,
                                      on_linear_box, &lc);
    if (rc)
        rc = ckpt_err(err, rc, "out of memory planning a read");
    if (rc == 0)
        rc = run_segments(r, &l, err);
    if (rc == 0 && sequential && r->opts.prefetch > 0 && l.n)
        prefetch_after(r, t, &l.v[l.n - 1]);
    free(l.v);
    return rc;
}

int64_t ckpt_read(ckpt_reader *r, size_t t, void *dst, uint64_t off,
                  uint64_t len, ckpt_error *err)
{
    if (!r)
        return ckpt_err_null(err, "ckpt_read", "reader");
    if (!dst && len)
        return ckpt_err_null(err, "ckpt_read", "dst");
    int rc = check_tensor(r, t, err);
    if (rc)
        return rc;
    const ckpt_index_tensor *tt = tensor_at(r, t);
    uint64_t isz = ckpt_dtype_size(tt->dtype);
    if (off >= tt->nbytes || len == 0)
        return 0;
    if (len > tt->nbytes - off)
        len = tt->nbytes - off;
    uint64_t end = off + len;
    uint64_t prev = atomic_exchange(&r->seq_end[t], end);
    int sequential = prev == off;
    unsigned char *out = dst;
    uint64_t lo = off / isz, hi = (end + isz - 1) / isz;
    unsigned char tmp[16];
    if (off % isz) {   /* head: part of one element */
        rc = read_elems(r, t, lo, lo + 1, tmp, 0, err);
        if (rc)
            return rc;
        uint64_t skip = off % isz, take = isz - skip;
        if (take > len)
            take = len;
        memcpy(out, tmp + skip, take);
        out += take;
        lo++;
    }
    if (hi > lo && end % isz) {   /* tail: part of one element */
        rc = read_elems(r, t, hi - 1, hi, tmp, 0, err);
        if (rc)
            return rc;
        memcpy(dst + (len - end % isz), tmp, end % isz);
        hi--;
    }
    if (hi > lo)
        rc = read_elems(r, t, lo, hi, out, sequential, err);
    return rc ? rc : (int64_t)len;
}

/* Checks the region [offsets, offsets+sizes) of tensor t (NULL: zeros,
 * the shape) and lists the segments that read it to dst into l (left
 * empty for an empty region).  `call` names the API call in messages. */
static int region_segments(ckpt_reader *r, size_t t, const int64_t *offsets,
                           const int64_t *sizes, void *dst, const char *call,
                           seg_list *l, ckpt_error *err)
{
    int rc = check_tensor(r, t, err);
    if (rc)
        return rc;
    const ckpt_index_tensor *tt = tensor_at(r, t);
    static const int64_t zeros[CKPT_MAX_DIMS];
    if (!offsets)
        offsets = zeros;
    if (!sizes)
        sizes = tt->shape;
    if (!dst && ckpt_box_numel(tt->ndim, sizes) != 0)
        return ckpt_err_null(err, call, "dst");
    for (int k = 0; k < tt->ndim; k++)
        if (offsets[k] < 0 || sizes[k] < 0 ||
            sizes[k] > tt->shape[k] - offsets[k] ||
            offsets[k] > tt->shape[k])
            return ckpt_err(err, -EINVAL, "tensor '%s': region dim %d "
                            "[%lld, +%lld) is outside its size %lld",
                            tt->fqn, k, (long long)offsets[k],
                            (long long)sizes[k], (long long)tt->shape[k]);
    *l = (seg_list){ .r = r, .t = t, .isz = ckpt_dtype_size(tt->dtype) };
    if (ckpt_box_numel(tt->ndim, sizes) == 0)
        return 0;
    l->dst_base = dst;
    rc = add_region(l, offsets, sizes, offsets, sizes);
    if (rc)
        return ckpt_err(err, rc, "out of memory planning a read");
    return 0;
}

int ckpt_read_region(ckpt_reader *r, size_t t, const int64_t *offsets,
                     const int64_t *sizes, void *dst, ckpt_error *err)
{
    if (!r)
        return ckpt_err_null(err, "ckpt_read_region", "reader");
    seg_list l = { 0 };
    int rc = region_segments(r, t, offsets, sizes, dst, "ckpt_read_region",
                             &l, err);
    if (rc == 0 && l.n)
        rc = run_segments(r, &l, err);
    free(l.v);
    return rc;
}

int ckpt_read_batch(ckpt_reader *r, const ckpt_read_item *items, size_t n,
                    ckpt_error *err)
{
    if (!r)
        return ckpt_err_null(err, "ckpt_read_batch", "reader");
    if (!items && n)
        return ckpt_err_null(err, "ckpt_read_batch", "items");
    seg_list *ls = calloc(n ? n : 1, sizeof *ls);
    if (!ls)
        return ckpt_err(err, -ENOMEM, "out of memory planning a read of %zu "
                        "tensors", n);
    uint64_t bytes = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = region_segments(r, items[i].idx, items[i].offsets,
                             items[i].sizes, items[i].dst, "ckpt_read_batch",
                             &ls[i], err);
        if (rc)
            rc = ckpt_err_wrap(err, rc, "item %zu of %zu", i, n);
        bytes += ls[i].bytes;
    }
    if (rc == 0)
        rc = run_batch(r, ls, n, bytes, err);
    if (rc == 0)
        atomic_fetch_add(&r->bytes_served, bytes);
    for (size_t i = 0; i < n; i++)
        free(ls[i].v);
    free(ls);
    return rc;
}

/* ---------------------------------------------------------------- open */

static int not_a_checkpoint(const char *dir, ckpt_error *err)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return ckpt_err_sys(err, -errno, "cannot open checkpoint %s", dir);
    if (!S_ISDIR(st.st_mode))
        return ckpt_err(err, -ENOTDIR, "%s is not a directory", dir);
    if (ckpt_dir_probe(dir) == CKPT_DIR_PENDING)
        return ckpt_err(err, -ENOENT, "%s is not a committed checkpoint: it "
                        "has no index.db (a save that is in progress or was "
                        "interrupted; 'ckpt gc' removes interrupted ones)",
                        dir);
    return ckpt_err(err, -ENOENT, "%s is not a checkpoint: it has no "
                    "index.db (ckptfs), no .metadata (PyTorch distributed "
                    "checkpoint) and no *.safetensors", dir);
}

static void describe_codecs(unsigned mask, char *buf, size_t cap)
{
    buf[0] = '\0';
    size_t n = 0;
    for (int c = 0; c < 32; c++) {
        if (!(mask & (1u << c)))
            continue;
        int w = snprintf(buf + n, cap - n, "%s%s", n ? "+" : "",
                         ckpt_codec_name(c));
        if (w < 0 || (size_t)w >= cap - n)
            break;
        n += (size_t)w;
    }
    if (n == 0)
        snprintf(buf, cap, "none");
}

/* The text of each distinct codec set of the tensors, and each
 * tensor's: a few strings, not one per tensor.  0 or -ENOMEM. */
static int codec_table(ckpt_reader *r)
{
    size_t nt = r->d.ntensors, n = 0;
    unsigned top = 0;
    for (size_t t = 0; t < nt; t++)
        if (r->d.tensors[t].codec_mask > top)
            top = r->d.tensors[t].codec_mask;
    if (top > UINT16_MAX)   /* a set of codec ids no index holds */
        return -ENOMEM;
    /* slot[mask]: its entry + 1, 0 before it is seen */
    uint16_t *slot = calloc((size_t)top + 1, sizeof *slot);
    r->codec_of = calloc(nt + 1, sizeof *r->codec_of);
    if (!slot || !r->codec_of) {
        free(slot);
        return -ENOMEM;
    }
    for (size_t t = 0; t < nt; t++) {
        unsigned m = r->d.tensors[t].codec_mask;
        if (!slot[m]) {
            char (*v)[32] = realloc(r->codecs, (n + 1) * sizeof *v);
            if (!v) {
                free(slot);
                return -ENOMEM;
            }
            r->codecs = v;
            describe_codecs(m, r->codecs[n], sizeof r->codecs[n]);
            slot[m] = (uint16_t)++n;
        }
        r->codec_of[t] = (uint16_t)(slot[m] - 1);
    }
    free(slot);
    return 0;
}

/* Per-tensor and per-file tables; then a state for every tensor whose
 * chunks are already loaded (an old index's; a foreign checkpoint's
 * tensors get theirs on first use, like a new index's). */
static int alloc_tables(ckpt_reader *r, ckpt_error *err)
{
    size_t nt = r->d.ntensors;
    int crc = codec_table(r);
    r->seq_end = calloc(nt + 1, sizeof *r->seq_end);
    r->ts = calloc(nt + 1, sizeof *r->ts);
    r->tiled = calloc(nt + 1, sizeof *r->tiled);
    r->fds = calloc(r->d.nfiles + 1, sizeof *r->fds);
    r->maps = calloc(r->d.nfiles + 1, sizeof *r->maps);
    if (crc || !r->seq_end || !r->ts || !r->tiled || !r->fds || !r->maps)
        return ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t t = 0; t < nt; t++) {
        atomic_init(&r->seq_end[t], UINT64_MAX);
        atomic_init(&r->ts[t], NULL);
        atomic_init(&r->tiled[t], 0);
    }
    for (size_t i = 0; i < r->d.nfiles; i++)
        atomic_init(&r->fds[i], -1);
    for (size_t t = 0; t < nt && !r->foreign; t++) {
        if (!r->d.tensors[t].chunks_loaded)
            continue;
        tensor_state *s = state_new(r, t);
        if (!s)
            return ckpt_err(err, -ENOMEM, "out of memory");
        atomic_store(&r->ts[t], s);
    }
    return 0;
}

void *ckpt_reader_attached_take(ckpt_reader *r)
{
    pthread_mutex_lock(&r->attach_mu);
    void *obj = r->attached;
    r->attached = NULL;
    pthread_mutex_unlock(&r->attach_mu);
    return obj;
}

void ckpt_reader_attached_put(ckpt_reader *r, void *obj,
                              void (*free_fn)(void *))
{
    pthread_mutex_lock(&r->attach_mu);
    int full = r->attached != NULL;
    if (!full) {
        r->attached = obj;
        r->attached_free = free_fn;
    }
    pthread_mutex_unlock(&r->attach_mu);
    if (full)
        free_fn(obj);
}

void ckpt_reader_close(ckpt_reader *r)
{
    if (!r)
        return;
    if (r->attached)
        r->attached_free(r->attached);
    if (r->pool)
        ckpt_pool_destroy(r->pool);   /* finishes queued prefetches */
    if (r->cache)
        ckpt_cache_destroy(r->cache);
    for (size_t t = 0; r->ts && t < r->d.ntensors; t++)
        state_free(atomic_load(&r->ts[t]), r->d.tensors[t].nchunks);
    for (size_t i = 0; r->fds && i < r->d.nfiles; i++)
        if (atomic_load(&r->fds[i]) >= 0) {
            ckpt_smap_close(&r->maps[i]);
            close(atomic_load(&r->fds[i]));
        }
    for (size_t i = 0; i < r->nfchunks; i++)
        free(r->fsrc[i].strided);
    free(r->fsrc);
    scratch_free_all(r);
    ckpt_bases_free(r->bases);
    if (r->ix)
        ckpt_index_close(r->ix);
    ckpt_index_data_free(&r->d);
    free(r->ts);
    free(r->fds);
    free(r->maps);
    free(r->codecs);
    free(r->codec_of);
    free(r->seq_end);
    free(r->tiled);
    if (r->root.dir)
        ckpt_confine_close(&r->root);
    free(r->dir);
    pthread_mutex_destroy(&r->ix_mu);
    pthread_mutex_destroy(&r->fd_mu);
    pthread_mutex_destroy(&r->perm_mu);
    free(r->file_seen);
    free(r->file_st);
    pthread_mutex_destroy(&r->scratch_mu);
    pthread_mutex_destroy(&r->attach_mu);
    free(r);
}

/* Takes the model of a foreign checkpoint (see foreign.h) in place of an
 * index: tensors, files and metadata, and every chunk's frames (handed to
 * each tensor's state on its first use). */
static int open_foreign(ckpt_reader *r, const char *path, ckpt_error *err)
{
    ckpt_foreign f;
    int rc = ckpt_foreign_open(path, r->opts.follow_links, &f, err);
    if (rc)
        return rc;
    r->foreign = 1;
    r->index_file = f.index_file;
    r->names_in_files = f.kind == CKPT_FOREIGN_SAFETENSORS ||
                        f.kind == CKPT_FOREIGN_TORCH;
    r->d = f.d;
    memset(&f.d, 0, sizeof f.d);
    free(r->dir);
    r->dir = f.dir;
    f.dir = NULL;
    r->fsrc = f.src;
    r->nfchunks = f.nchunks;
    f.src = NULL;
    f.nchunks = 0;
    rc = alloc_tables(r, err);
    ckpt_foreign_free(&f);
    return rc;
}

/* index.db is read in the checkpoint's directory like its shards: not
 * through a symbolic link (SQLite opens it by name; this check comes
 * first). */
static int check_index_file(ckpt_reader *r, ckpt_error *err)
{
    struct stat st;
    int rc = ckpt_confine_stat(&r->root, "index.db", &st, err);
    return rc ? ckpt_err_wrap(err, rc, "cannot open the index") : 0;
}

int ckpt_reader_open(ckpt_reader **out, const char *dir,
                     const ckpt_read_opts *opts, ckpt_error *err)
{
    if (!out)
        return ckpt_err_null(err, "ckpt_reader_open", "out");
    *out = NULL;
    if (!dir)
        return ckpt_err_null(err, "ckpt_reader_open", "dir");
    ckpt_read_opts ro;
    ckpt_read_opts_init(&ro);
    if (opts) {
        int orc = ckpt_opts_take(&ro, sizeof ro, opts, sizeof *opts,
                                 "ckpt_read_opts", err);
        if (orc)
            return orc;
    }
    char path[4096];
    int rc = ckpt_path_join(path, sizeof path, dir, "index.db", err);
    if (rc)
        return rc;
    int foreign = access(path, F_OK) != 0;
    if (foreign && ckpt_foreign_probe(dir, NULL, 0) == CKPT_FOREIGN_NONE)
        return not_a_checkpoint(dir, err);
    ckpt_reader *r = calloc(1, sizeof *r);
    if (!r)
        return ckpt_err(err, -ENOMEM, "out of memory");
    pthread_mutex_init(&r->ix_mu, NULL);
    pthread_mutex_init(&r->fd_mu, NULL);
    pthread_mutex_init(&r->perm_mu, NULL);
    r->index_file = "index.db";
    pthread_mutex_init(&r->scratch_mu, NULL);
    pthread_mutex_init(&r->attach_mu, NULL);
    r->opts = ro;
    if (!(r->dir = strdup(dir)))
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    if (rc == 0 && foreign) {
        rc = open_foreign(r, dir, err);
        if (rc == 0)
            rc = ckpt_confine_open(&r->root, r->dir, r->opts.follow_links,
                                   err);
    } else if (rc == 0) {
        rc = ckpt_confine_open(&r->root, r->dir, r->opts.follow_links, err);
        if (rc == 0)
            rc = check_index_file(r, err);
        if (rc == 0)
            rc = ckpt_index_open(&r->ix, path, err);
        if (rc == 0)
            rc = ckpt_index_load_tensors(r->ix, &r->d, err);
        if (rc == 0)
            rc = ckpt_bases_open(&r->bases, dir, r->ix,
                                 ckpt_index_identity(&r->d), err);
        if (rc == 0)
            rc = alloc_tables(r, err);
    }
    if (rc == 0)
        rc = ckpt_cache_create(&r->cache, r->opts.cache_bytes, err);
    if (rc == 0)
        rc = ckpt_pool_create(&r->pool, r->opts.threads, err);
    if (rc) {
        ckpt_reader_close(r);
        return rc;
    }
    *out = r;
    return 0;
}

/* ---------------------------------------------------------------- listing */

ckpt_format ckpt_reader_format(const ckpt_reader *r)
{
    if (!r)
        return CKPT_FORMAT_NONE;
    if (!r->foreign)
        return CKPT_FORMAT_CKPTFS;
    const char *f = ckpt_reader_meta_get(r, "source_format");
    return f && strcmp(f, "safetensors") == 0 ? CKPT_FORMAT_SAFETENSORS
           : f && strcmp(f, "torch-save") == 0 ? CKPT_FORMAT_TORCH
                                               : CKPT_FORMAT_DCP;
}

size_t ckpt_reader_count(const ckpt_reader *r)
{
    return r ? r->d.ntensors : 0;
}

int ckpt_reader_info(const ckpt_reader *r, size_t idx, ckpt_tensor_info *out)
{
    if (!r || !out || idx >= r->d.ntensors)
        return -EINVAL;
    const ckpt_index_tensor *t = tensor_at(r, idx);
    *out = (ckpt_tensor_info){
        .fqn = t->fqn, .dtype = t->dtype, .ndim = t->ndim, .shape = t->shape,
        .numel = ckpt_box_numel(t->ndim, t->shape), .nbytes = t->nbytes,
        .stored_bytes = t->stored_bytes, .nchunks = t->nchunks,
        .nframes = t->nframes, .codecs = r->codecs[r->codec_of[idx]],
    };
    return 0;
}

long ckpt_reader_find(const ckpt_reader *r, const char *fqn)
{
    if (!r || !fqn)
        return -EINVAL;
    size_t lo = 0, hi = r->d.ntensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(r->d.tensors[mid].fqn, fqn);
        if (c == 0)
            return (long)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -ENOENT;
}

int ckpt_reader_chunk(const ckpt_reader *r, size_t idx, size_t chunk,
                      ckpt_chunk_info *out)
{
    if (!r || !out || idx >= r->d.ntensors ||
        chunk >= r->d.tensors[idx].nchunks)
        return -EINVAL;
    /* The reader itself is not const: loading chunks on first use is
     * what a lookup does. */
    int rc = tensor_chunks((ckpt_reader *)r, idx, NULL);
    if (rc)
        return rc;
    const ckpt_index_chunk *ch = chunk_at(r, idx, chunk);
    *out = (ckpt_chunk_info){
        .offsets = ch->offsets, .sizes = ch->sizes,
        .file = r->d.files[ch->file].path, .nframes = ch->nframes,
        .raw_bytes = ch->raw_bytes, .stored_bytes = ch->stored_bytes,
    };
    return 0;
}

int ckpt_reader_frame(ckpt_reader *r, size_t idx, size_t chunk, uint64_t frame,
                      ckpt_frame_info *out, ckpt_error *err)
{
    if (!r || !out)
        return ckpt_err_null(err, "ckpt_reader_frame", !r ? "reader" : "out");
    if (idx >= r->d.ntensors || chunk >= r->d.tensors[idx].nchunks)
        return ckpt_err(err, -EINVAL, "no chunk %zu in tensor %zu", chunk,
                        idx);
    int rc = tensor_chunks(r, idx, err);
    if (rc)
        return rc;
    if (frame >= chunk_at(r, idx, chunk)->nframes)
        return ckpt_err(err, -EINVAL, "no frame %llu in chunk %zu of tensor "
                        "%zu", (unsigned long long)frame, chunk, idx);
    const ckpt_frame_rec *f;
    rc = chunk_frames(r, idx, chunk, &f, err);
    if (rc)
        return rc;
    f += frame;
    *out = (ckpt_frame_info){
        .file_offset = f->file_offset, .stored_size = f->stored_size,
        .raw_offset = f->raw_offset, .raw_size = f->raw_size,
        .codec = f->codec, .checksum = f->checksum,
    };
    return 0;
}

size_t ckpt_reader_meta_count(const ckpt_reader *r)
{
    return r ? r->d.nmeta : 0;
}

int ckpt_reader_meta_at(const ckpt_reader *r, size_t i, const char **key,
                        const char **value)
{
    if (!r || !key || !value || i >= r->d.nmeta)
        return -EINVAL;
    *key = r->d.meta[i].key;
    *value = r->d.meta[i].value;
    return 0;
}

const char *ckpt_reader_meta_get(const ckpt_reader *r, const char *key)
{
    for (size_t i = 0; r && key && i < r->d.nmeta; i++)
        if (strcmp(r->d.meta[i].key, key) == 0)
            return r->d.meta[i].value;
    return NULL;
}

void ckpt_reader_stats(const ckpt_reader *r, ckpt_stats *out)
{
    if (!out)
        return;
    if (!r) {
        *out = (ckpt_stats){ 0 };
        return;
    }
    ckpt_cache_stats cs;
    ckpt_cache_stats_get(r->cache, &cs);
    *out = (ckpt_stats){
        .frames_decoded = atomic_load(&r->frames_decoded),
        .bytes_decoded = atomic_load(&r->bytes_decoded),
        .cache_hits = cs.hits, .cache_misses = cs.misses,
        .bytes_read = atomic_load(&r->bytes_read),
        .bytes_served = atomic_load(&r->bytes_served),
    };
}

/* ---------------------------------------------------------------- access */

int ckpt_reader_file_stat(const ckpt_reader *r, const char *file,
                          struct stat *st, ckpt_error *err)
{
    if (!r || !file || !st)
        return ckpt_err_null(err, "ckpt_reader_file_stat",
                             !r ? "reader" : !file ? "file" : "st");
    if (strcmp(file, ".") == 0)
        return fstat(r->root.fd, st) == 0
                   ? 0 : ckpt_err_sys(err, -errno, "%s", r->root.dir);
    return ckpt_confine_stat(&r->root, file, st, err);
}

/* Folds the status of `rel` into p (the first file sets it). */
static void perm_fold(ckpt_perm *p, int *first, const struct stat *st)
{
    if (!st)
        ckpt_perm_add_none(p);
    else if (*first)
        ckpt_perm_init(p, st);
    else
        ckpt_perm_add(p, st);
    *first = 0;
}

/* The status of shard/data file i, looked at once (under perm_mu). */
static const struct stat *file_status(ckpt_reader *r, size_t i)
{
    if (!r->file_seen) {
        r->file_seen = calloc(r->d.nfiles + 1, sizeof *r->file_seen);
        r->file_st = calloc(r->d.nfiles + 1, sizeof *r->file_st);
        if (!r->file_seen || !r->file_st) {
            free(r->file_seen);
            free(r->file_st);
            r->file_seen = NULL;
            r->file_st = NULL;
            return NULL;
        }
    }
    if (!r->file_seen[i])
        r->file_seen[i] = ckpt_confine_stat(&r->root, r->d.files[i].path,
                                            &r->file_st[i], NULL) ? -1 : 1;
    return r->file_seen[i] > 0 ? &r->file_st[i] : NULL;
}

/* The permission of the listing (under perm_mu). */
static const ckpt_perm *names_perm(ckpt_reader *r)
{
    if (r->names_seen)
        return &r->names_perm;
    int first = 1;
    struct stat st;
    if (r->index_file)
        perm_fold(&r->names_perm, &first,
                  ckpt_confine_stat(&r->root, r->index_file, &st, NULL)
                      ? NULL : &st);
    for (size_t i = 0; r->names_in_files && i < r->d.nfiles; i++)
        perm_fold(&r->names_perm, &first, file_status(r, i));
    if (first)   /* no file at all: the directory's own */
        perm_fold(&r->names_perm, &first,
                  fstat(r->root.fd, &st) ? NULL : &st);
    r->names_seen = 1;
    return &r->names_perm;
}

/* Folds into p the search bits of the directories between the
 * checkpoint's directory and file `path` (data/ of data/rank0.shard):
 * whoever may not search them may not read the file on the disk.  A
 * directory that cannot be looked at grants nothing. */
static void fold_dirs(const ckpt_reader *r, ckpt_perm *p, const char *path)
{
    char dir[4096];
    for (const char *s = strchr(path, '/'); s; s = strchr(s + 1, '/')) {
        size_t n = (size_t)(s - path);
        struct stat st;
        if (n >= sizeof dir) {
            ckpt_perm_add_none(p);
            return;
        }
        memcpy(dir, path, n);
        dir[n] = '\0';
        if (fstatat(r->root.fd, dir, &st,
                    r->root.follow ? 0 : AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISDIR(st.st_mode)) {
            ckpt_perm_add_none(p);
            return;
        }
        ckpt_perm_add_search(p, &st);
    }
}

typedef struct perm_fold_ctx {
    ckpt_reader *r;
    ckpt_perm *out;
    int first;
} perm_fold_ctx;

static void fold_file(void *arg, size_t pos)
{
    perm_fold_ctx *f = arg;
    perm_fold(f->out, &f->first, file_status(f->r, pos));
    fold_dirs(f->r, f->out, f->r->d.files[pos].path);
}

int ckpt_reader_perm(ckpt_reader *r, size_t idx, ckpt_perm *out,
                     ckpt_error *err)
{
    if (!r || !out)
        return ckpt_err_null(err, "ckpt_reader_perm", !r ? "reader" : "out");
    if (idx != (size_t)-1 && idx >= r->d.ntensors)
        return ckpt_err(err, -EINVAL, "tensor index %zu out of range (%zu "
                        "tensors)", idx, r->d.ntensors);
    pthread_mutex_lock(&r->perm_mu);
    *out = *names_perm(r);
    perm_fold_ctx f = { r, out, 0 };
    int rc = 0;
    if (idx != (size_t)-1) {
        /* The tensor's files, without loading its chunks: a listing asks
         * this of every tensor. */
        pthread_mutex_lock(&r->ix_mu);
        rc = ckpt_index_tensor_files(r->ix, &r->d, idx, fold_file, &f, err);
        pthread_mutex_unlock(&r->ix_mu);
    }
    pthread_mutex_unlock(&r->perm_mu);
    return rc;
}

/* ---------------------------------------------------------------- verify */

typedef struct verifier {
    ckpt_reader *r;
    ckpt_fault_fn fn;
    void *arg;
    void (*progress)(void *, uint64_t, uint64_t);
    pthread_mutex_t mu;
    int64_t faults;
    uint64_t done, total;
} verifier;

static void report(verifier *v, size_t t, long c, long f, const char *file,
                   uint64_t off, const char *msg)
{
    ckpt_fault fault = {
        .fqn = tensor_at(v->r, t)->fqn, .chunk = c, .frame = f,
        .file = file, .file_offset = off, .msg = msg,
    };
    pthread_mutex_lock(&v->mu);
    v->faults++;
    if (v->fn)
        v->fn(v->arg, &fault);
    pthread_mutex_unlock(&v->mu);
}

/* Checks that the chunks of tensor t tile it exactly, with the planner. */
static void verify_coverage(verifier *v, size_t t)
{
    ckpt_error e = { 0 };
    if (tensor_tiling(tensor_at(v->r, t), &e))
        report(v, t, -1, -1, NULL, 0, e.msg);
}

typedef struct verify_task {
    verifier *v;
    size_t t, c;
    ckpt_taskgroup *tg;
} verify_task;

static void verify_frames(verifier *v, size_t t, size_t c, scratch *s,
                          unsigned char **buf, size_t *cap)
{
    ckpt_reader *r = v->r;
    const ckpt_index_chunk *ch = chunk_at(r, t, c);
    const char *file = file_of(r, t, c);
    const ckpt_frame_rec *frames;
    ckpt_error e = { 0 };
    if (ch->nframes == 0)
        return;
    if (chunk_frames(r, t, c, &frames, &e)) {
        report(v, t, (long)c, -1, file, 0, e.msg);
        return;
    }
    if (mapped_of(r, t, c)) {
        /* no checksum to check: its storage is in the file (mapped), and
         * gathering it whole would cost its declared size */
        const ckpt_strided_map *m;
        if (strided_map(r, t, c, &m, &e))
            report(v, t, (long)c, 0, file, frames[0].file_offset, e.msg);
        pthread_mutex_lock(&v->mu);
        v->done += ch->raw_bytes;
        if (v->progress)
            v->progress(v->arg, v->done, v->total);
        pthread_mutex_unlock(&v->mu);
        return;
    }
    for (uint64_t i = 0; i < ch->nframes; i++) {
        const ckpt_frame_rec *f = &frames[i];
        if (f->raw_size > *cap) {
            unsigned char *nb = realloc(*buf, f->raw_size);
            if (!nb) {
                report(v, t, (long)c, (long)i, file, f->file_offset,
                       "out of memory");
                return;
            }
            *buf = nb;
            *cap = f->raw_size;
        }
        frame_ref fr = { r, t, c, i, f };
        ckpt_error fe = { 0 };
        if (decode_frame(&fr, *buf, s, &fe))
            report(v, t, (long)c, (long)i, file, f->file_offset, fe.msg);
        pthread_mutex_lock(&v->mu);
        v->done += f->raw_size;
        if (v->progress)
            v->progress(v->arg, v->done, v->total);
        pthread_mutex_unlock(&v->mu);
    }
}

static void verify_task_run(void *arg, int worker)
{
    (void)worker;
    verify_task *vt = arg;
    scratch *s = scratch_get(vt->v->r);
    unsigned char *buf = NULL;
    size_t cap = 0;
    if (s) {
        verify_frames(vt->v, vt->t, vt->c, s, &buf, &cap);
        scratch_put(vt->v->r, s);
    } else {
        report(vt->v, vt->t, (long)vt->c, -1, NULL, 0, "out of memory");
    }
    free(buf);
    ckpt_tg_done(vt->tg);
}

/* Shard files shorter than recorded at commit are reported once each. */
static void verify_files(verifier *v)
{
    ckpt_reader *r = v->r;
    for (size_t i = 0; i < r->d.nfiles; i++) {
        char msg[1200];
        struct stat st;
        ckpt_error e = { 0 };
        int rc = ckpt_confine_stat(&r->root, r->d.files[i].path, &st, &e);
        const char *what = NULL;
        if (rc == -ENOENT)
            what = "is missing";
        else if (rc)
            what = e.msg;
        else if ((uint64_t)st.st_size != r->d.files[i].size)
            what = (uint64_t)st.st_size < r->d.files[i].size ? "is truncated"
                                                             : "has grown";
        if (!what)
            continue;
        if (rc && rc != -ENOENT)
            snprintf(msg, sizeof msg, "shard file %s cannot be read: %s",
                     r->d.files[i].path, what);
        else
            snprintf(msg, sizeof msg, "shard file %s %s (recorded %llu "
                     "bytes)", r->d.files[i].path, what,
                     (unsigned long long)r->d.files[i].size);
        ckpt_fault fault = { .fqn = "-", .chunk = -1, .frame = -1,
                             .file = r->d.files[i].path, .msg = msg };
        v->faults++;
        if (v->fn)
            v->fn(v->arg, &fault);
    }
}

/* Chunks verified at once: the tasks of one batch are in memory together
 * (a checkpoint may have millions of chunks). */
#define VERIFY_BATCH 4096

/* Runs tasks[0..n) on the pool and waits for them. */
static void verify_batch(ckpt_reader *r, verify_task *tasks, size_t n)
{
    ckpt_taskgroup tg;
    ckpt_tg_init(&tg);
    for (size_t k = 0; k < n; k++) {
        tasks[k].tg = &tg;
        ckpt_tg_add(&tg, 1);
        if (ckpt_pool_submit(r->pool, verify_task_run, &tasks[k]))
            verify_task_run(&tasks[k], -1);
    }
    ckpt_tg_wait(&tg);
    ckpt_tg_destroy(&tg);
}

int64_t ckpt_verify(ckpt_reader *r, ckpt_fault_fn fn, void *arg,
                    void (*progress)(void *arg, uint64_t done, uint64_t total),
                    ckpt_error *err)
{
    if (!r)
        return ckpt_err_null(err, "ckpt_verify", "reader");
    verifier v = { .r = r, .fn = fn, .arg = arg, .progress = progress };
    for (size_t t = 0; t < r->d.ntensors; t++)
        v.total += r->d.tensors[t].nbytes;
    verify_task *tasks = calloc(VERIFY_BATCH, sizeof *tasks);
    if (!tasks)
        return ckpt_err(err, -ENOMEM, "out of memory");
    pthread_mutex_init(&v.mu, NULL);
    verify_files(&v);
    size_t k = 0;
    for (size_t t = 0; t < r->d.ntensors; t++) {
        ckpt_error e = { 0 };
        if (tensor_chunks(r, t, &e)) {
            report(&v, t, -1, -1, NULL, 0, e.msg);
            continue;
        }
        verify_coverage(&v, t);
        for (size_t c = 0; c < r->d.tensors[t].nchunks; c++) {
            tasks[k++] = (verify_task){ &v, t, c, NULL };
            if (k == VERIFY_BATCH) {
                verify_batch(r, tasks, k);
                k = 0;
            }
        }
    }
    verify_batch(r, tasks, k);
    pthread_mutex_destroy(&v.mu);
    free(tasks);
    return v.faults;
}
