/*
 * staging.c - staging memory for asynchronous saves (see staging.h): the
 * slab pool with its cap, the copy engine (host copy threads; CUDA
 * copies into pinned slabs on the pool's streams), the staged stream that
 * a save's background writer reads.  Loads into device memory are
 * devload.c's.  The CUDA calls themselves are gpu.c's: this file
 * takes the same paths whether or not the library was built with CUDA.
 */
#include "async/staging.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "async/gpu.h"
#include "common/error.h"
#include "common/pool.h"

#define DEFAULT_SLAB ((size_t)16 << 20)
#define MIN_SLAB ((size_t)64 << 10)
#define MAX_COPY_THREADS 4
/* Host copies below this size are done by the producer itself. */
#define INLINE_COPY ((size_t)256 << 10)
/* The pinned bounce buffer that hashes device memory. */
#define BOUNCE_BYTES ((size_t)16 << 20)

struct ckpt_stage {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t slab;
    size_t max_slabs;            /* 0 = no cap */
    size_t nalloc;               /* slabs allocated (free or in use) */
    unsigned char **free;        /* free slabs, a stack */
    size_t nfree;
    ckpt_pool *copy;
    int ncopy;
    int cuda;                    /* a device is usable: pinned slabs */
    ckpt_gpu_stream *stream;     /* device-to-host copies, in order */
};

typedef struct slabent {
    unsigned char *p;            /* NULL once given back */
    size_t len;                  /* bytes appended */
    long pending;                /* host copies not landed */
    int sealed;                  /* no more bytes will be appended */
    int dev;                     /* device copies queued, not seen landed */
    ckpt_gpu_event *ev;          /* recorded after its last device copy */
} slabent;

struct ckpt_staged {
    ckpt_stage *st;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    slabent *v;
    size_t nv, cap;
    long inflight;               /* copies not landed, all slabs */
    int closed;
    int starved;                 /* the producer waited for a free slab */
    int host;                    /* some bytes come from host memory */
    int dropping;                /* the consumer discards: stop copying */
    int anydev;                  /* some bytes come from device memory */
    int rc;                      /* first copy error */
    ckpt_error err;
    size_t rslab, roff;          /* consumer cursor */
};

/* One copy into a slab. */
typedef struct ctask {
    ckpt_staged *s;
    size_t idx;
    void *dst;
    const void *src;
    size_t n;
} ctask;

/* Host slabs are their own mappings, kept until the pool is destroyed
 * (never handed to malloc, which could trim or unmap them between saves),
 * aligned to and advised for transparent huge pages: the first save that
 * touches a slab then takes one fault per 2 MiB instead of one per 4 KiB,
 * and later saves none. */
#define HUGE_PAGE ((size_t)2 << 20)

/* Bytes mapped for an n-byte slab: whole pages. */
static size_t slab_map_len(size_t n)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (n + pg - 1) / pg * pg;
}

static unsigned char *host_slab_alloc(size_t want)
{
    size_t n = slab_map_len(want), len = n + HUGE_PAGE;
    unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    /* Keep the huge-page-aligned n bytes inside, unmap the rest. */
    uintptr_t a = ((uintptr_t)m + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
    unsigned char *p = (unsigned char *)a;
    size_t head = (size_t)(p - m), tail = len - head - n;
    if (head)
        munmap(m, head);
    if (tail)
        munmap(p + n, tail);
#ifdef MADV_HUGEPAGE
    (void)madvise(p, n, MADV_HUGEPAGE);   /* a hint: fine if refused */
#endif
    return p;
}

static unsigned char *slab_alloc(const ckpt_stage *st)
{
    if (st->cuda)
        return ckpt_gpu_host_alloc(st->slab, 1);
    return host_slab_alloc(st->slab);
}

static void slab_free(const ckpt_stage *st, unsigned char *p)
{
    if (st->cuda)
        ckpt_gpu_host_free(p);
    else
        munmap(p, slab_map_len(st->slab));
}

/* ------------------------------------------------------------ the pool */

int ckpt_stage_create(ckpt_stage **out, size_t cap, size_t slab,
                      int copy_threads, ckpt_error *err)
{
    *out = NULL;
    ckpt_stage *st = calloc(1, sizeof *st);
    if (!st)
        return ckpt_err(err, -ENOMEM, "out of memory");
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    /* A slab costs a hand-off between the caller and the background: with
     * slabs of a few bytes, a save would take one per few bytes.  So a
     * cap below one slab of the minimum size is raised to one. */
    if (cap && cap < MIN_SLAB)
        cap = MIN_SLAB;
    if (slab == 0) {
        slab = DEFAULT_SLAB;
        if (cap && slab > cap / 4)
            slab = cap / 4;
    }
    if (slab < MIN_SLAB)
        slab = MIN_SLAB;
    if (cap && slab > cap)
        slab = cap;
    st->slab = slab;
    st->max_slabs = cap ? (cap / slab ? cap / slab : 1) : 0;
    st->ncopy = copy_threads > 0 ? copy_threads : ckpt_cpu_count();
    if (copy_threads <= 0 && st->ncopy > MAX_COPY_THREADS)
        st->ncopy = MAX_COPY_THREADS;
    int rc = ckpt_pool_create(&st->copy, st->ncopy, err);
    const char *why = NULL;
    st->cuda = rc == 0 && ckpt_gpu_usable(&why);
    if (st->cuda && ckpt_gpu_stream_create(&st->stream) != 0) {
        rc = ckpt_err(err, -EIO, "staging: cannot create a CUDA stream");
        st->cuda = 0;
    }
    if (rc) {
        ckpt_stage_destroy(st);
        return rc;
    }
    *out = st;
    return 0;
}

void ckpt_stage_destroy(ckpt_stage *st)
{
    if (!st)
        return;
    if (st->copy)
        ckpt_pool_destroy(st->copy);
    for (size_t i = 0; i < st->nfree; i++)
        slab_free(st, st->free[i]);
    free(st->free);
    if (st->cuda)
        ckpt_gpu_stream_destroy(st->stream);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cv);
    free(st);
}

int ckpt_stage_cuda(const ckpt_stage *st)
{
    return st->cuda;
}

size_t ckpt_stage_slab_bytes(const ckpt_stage *st)
{
    return st->slab;
}

/* A free slab, waiting while the pool is at its cap; before the first
 * wait, calls starving(arg) (with no lock held). */
static int slab_get(ckpt_stage *st, unsigned char **out,
                    void (*starving)(void *), void *arg, ckpt_error *err)
{
    pthread_mutex_lock(&st->mu);
    while (st->nfree == 0 && st->max_slabs && st->nalloc >= st->max_slabs) {
        if (starving) {
            pthread_mutex_unlock(&st->mu);
            starving(arg);
            starving = NULL;
            pthread_mutex_lock(&st->mu);
            continue;
        }
        pthread_cond_wait(&st->cv, &st->mu);
    }
    if (st->nfree > 0) {
        *out = st->free[--st->nfree];
        pthread_mutex_unlock(&st->mu);
        return 0;
    }
    /* Room for one more: make sure it can be given back, then allocate. */
    unsigned char **f = realloc(st->free, (st->nalloc + 1) * sizeof *f);
    if (f) {
        st->free = f;
        st->nalloc++;
    }
    pthread_mutex_unlock(&st->mu);
    unsigned char *p = f ? slab_alloc(st) : NULL;
    if (!p) {
        if (f) {
            pthread_mutex_lock(&st->mu);
            st->nalloc--;
            pthread_cond_broadcast(&st->cv);
            pthread_mutex_unlock(&st->mu);
        }
        return ckpt_err(err, -ENOMEM, "staging: out of %smemory for a "
                        "%zu-byte slab (%zu allocated)",
                        st->cuda ? "pinned " : "", st->slab, st->nalloc);
    }
    *out = p;
    return 0;
}

static void slab_put(ckpt_stage *st, unsigned char *p)
{
    pthread_mutex_lock(&st->mu);
    st->free[st->nfree++] = p;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
}

int ckpt_stage_reserve(ckpt_stage *st, size_t bytes, ckpt_error *err)
{
    size_t want = bytes / st->slab + (bytes % st->slab != 0);
    if (st->max_slabs && want > st->max_slabs)
        want = st->max_slabs;
    for (;;) {
        pthread_mutex_lock(&st->mu);
        int more = st->nalloc < want;
        pthread_mutex_unlock(&st->mu);
        if (!more)
            return 0;
        /* A fresh slab (the free list is empty while nalloc < want only
         * if saves hold the others), straight back into the pool. */
        unsigned char *p = NULL;
        pthread_mutex_lock(&st->mu);
        unsigned char **f = realloc(st->free, (st->nalloc + 1) * sizeof *f);
        if (f) {
            st->free = f;
            st->nalloc++;
        }
        pthread_mutex_unlock(&st->mu);
        p = f ? slab_alloc(st) : NULL;
        if (!p) {
            pthread_mutex_lock(&st->mu);
            if (f)
                st->nalloc--;
            pthread_mutex_unlock(&st->mu);
            return ckpt_err(err, -ENOMEM, "staging: out of %smemory "
                            "reserving %zu bytes (%zu slabs of %zu made)",
                            st->cuda ? "pinned " : "", bytes, st->nalloc,
                            st->slab);
        }
        slab_put(st, p);
    }
}

/* ------------------------------------------------------------ memory kinds */

/* 0 when byte *p can be read (and, if `writable`, written back) by the
 * kernel on our behalf: a pipe round trip that fails with EFAULT instead
 * of faulting. */
static int probe_byte(const unsigned char *p, int writable)
{
    int fd[2];
    if (pipe2(fd, O_CLOEXEC | O_NONBLOCK) != 0)
        return 0;   /* cannot probe: assume readable */
    int bad = 0;
    if (write(fd[1], p, 1) != 1)
        bad = errno == EFAULT;
    else if (writable && read(fd[0], (unsigned char *)p, 1) != 1)
        bad = errno == EFAULT;   /* writes back the byte it read */
    close(fd[0]);
    close(fd[1]);
    return bad ? -EFAULT : 0;
}

int ckpt_mem_kind(const ckpt_stage *st, const void *p, size_t n,
                  int writable, const char *what, ckpt_error *err)
{
    const char *why = NULL;
    if (n == 0)
        return CKPT_MEM_HOST;
    if (!p)
        return ckpt_err(err, -EINVAL, "%s: no data (NULL) for %zu bytes",
                        what, n);
    int cuda = st ? st->cuda : ckpt_gpu_usable(&why);
    if (cuda && ckpt_gpu_is_device_ptr(p))
        return CKPT_MEM_DEVICE;
    if (cuda)
        why = "and it is not CUDA memory either";
    else if (st)
        why = ckpt_gpu_built() ? "no CUDA device is usable"
                               : "this libckptfs was built without CUDA";
    const unsigned char *b = p;
    if (probe_byte(b, writable) || probe_byte(b + n - 1, writable))
        return ckpt_err(err, -EFAULT, "%s: %s at %p (%zu bytes) is not %s "
                        "host memory (a CUDA device pointer? %s)", what,
                        writable ? "destination" : "data", p, n,
                        writable ? "writable" : "readable", why);
    return CKPT_MEM_HOST;
}

/* ------------------------------------------------------------ hashing */

/* XXH3-64 of device memory, copied to the host a bounce buffer at a
 * time. */
static int device_hash(const void *p, size_t n, uint64_t *out,
                       const char *what, ckpt_error *err)
{
    unsigned char *buf = ckpt_gpu_host_alloc(BOUNCE_BYTES, 0);
    XXH3_state_t *h = XXH3_createState();
    int rc = 0;
    if (!h || XXH3_64bits_reset(h) != XXH_OK || !buf)
        rc = ckpt_err(err, -ENOMEM, "%s: out of memory hashing %zu bytes of "
                      "device memory", what, n);
    for (size_t at = 0; rc == 0 && at < n;) {
        size_t k = n - at < BOUNCE_BYTES ? n - at : BOUNCE_BYTES;
        const char *why = NULL;
        if (ckpt_gpu_copy_to_host(buf, (const unsigned char *)p + at, k,
                                  &why) != 0) {
            rc = ckpt_err(err, -EIO, "%s: device-to-host copy of %zu bytes "
                          "failed: %s", what, k, why);
        } else {
            XXH3_64bits_update(h, buf, k);
            at += k;
        }
    }
    if (rc == 0)
        *out = XXH3_64bits_digest(h);
    ckpt_gpu_host_free(buf);
    XXH3_freeState(h);
    return rc;
}

int ckpt_mem_hash(const ckpt_stage *st, const void *p, size_t n,
                  uint64_t *out, const char *what, ckpt_error *err)
{
    int kind = ckpt_mem_kind(st, p, n, 0, what, err);
    if (kind < 0)
        return kind;
    if (kind == CKPT_MEM_DEVICE)
        return device_hash(p, n, out, what, err);
    *out = XXH3_64bits(n ? p : NULL, n);
    return 0;
}

/* ------------------------------------------------------------ the stream */

int ckpt_staged_new(ckpt_staged **out, ckpt_stage *st, ckpt_error *err)
{
    ckpt_staged *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s)
        return ckpt_err(err, -ENOMEM, "out of memory");
    s->st = st;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    *out = s;
    return 0;
}

static void copy_failed(ckpt_staged *s, const ckpt_error *e)
{
    if (s->rc == 0) {
        s->rc = e->code ? e->code : -EIO;
        s->err = *e;
    }
}

/* A copy landed (or failed: e != NULL). */
static void copy_done(ckpt_staged *s, size_t idx, const ckpt_error *e)
{
    pthread_mutex_lock(&s->mu);
    if (e)
        copy_failed(s, e);
    s->v[idx].pending--;
    s->inflight--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void host_copy_task(void *arg, int worker)
{
    ctask *t = arg;
    memcpy(t->dst, t->src, t->n);
    copy_done(t->s, t->idx, NULL);
    free(t);
}

/* Queues a device-to-host copy into slab idx on the pool's one stream
 * and records the slab's event after it.  No host callback follows a
 * copy: the copies run back to back at the link's speed, whatever the
 * CPUs are doing, and whoever needs the slab waits for its event. */
static int device_copy(ckpt_staged *s, size_t idx, void *dst, const void *src,
                       size_t n, ckpt_error *err)
{
    ckpt_stage *st = s->st;
    const char *why = NULL;
    pthread_mutex_lock(&s->mu);
    ckpt_gpu_event *ev = s->v[idx].ev;
    s->anydev = 1;
    pthread_mutex_unlock(&s->mu);
    int rc = ev ? 0 : ckpt_gpu_event_create(&ev);
    if (rc)
        return ckpt_err(err, -EIO, "staging: cannot create a CUDA event");
    pthread_mutex_lock(&s->mu);
    s->v[idx].ev = ev;               /* only the producer sets it */
    pthread_mutex_unlock(&s->mu);
    /* On failure, what was queued on the stream has landed. */
    rc = ckpt_gpu_copy_async(st->stream, dst, src, n, &why);
    if (rc == 0)
        rc = ckpt_gpu_event_record(ev, st->stream, &why);
    if (rc)
        return ckpt_err(err, -EIO, "staging: device-to-host copy of %zu "
                        "bytes from %p failed: %s", n, src, why);
    pthread_mutex_lock(&s->mu);
    s->v[idx].dev = 1;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* With s->mu held: waits (without it) until slab k's device copies have
 * landed; a failed copy fails the stream. */
static void settle(ckpt_staged *s, size_t k)
{
    if (!s->v[k].dev)
        return;
    ckpt_gpu_event *ev = s->v[k].ev;
    const char *why = NULL;
    pthread_mutex_unlock(&s->mu);
    int rc = ckpt_gpu_event_wait(ev, &why);
    pthread_mutex_lock(&s->mu);
    if (rc) {
        ckpt_error e = { 0 };
        ckpt_err(&e, -EIO, "staging: a device-to-host copy failed: %s", why);
        copy_failed(s, &e);
    }
    s->v[k].dev = 0;
    pthread_cond_broadcast(&s->cv);
}

/* Queues one copy of n bytes into slab idx. */
static int submit_copy(ckpt_staged *s, size_t idx, void *dst, const void *src,
                       size_t n, int kind, ckpt_error *err)
{
    if (kind == CKPT_MEM_HOST && n < INLINE_COPY) {
        memcpy(dst, src, n);
        return 0;
    }
    if (kind == CKPT_MEM_DEVICE) {
        int rc = device_copy(s, idx, dst, src, n, err);
        if (rc) {
            pthread_mutex_lock(&s->mu);
            copy_failed(s, err ? err : &(ckpt_error){ .code = rc });
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
        }
        return rc;
    }
    ctask *t = malloc(sizeof *t);
    if (!t)
        return ckpt_err(err, -ENOMEM, "out of memory");
    *t = (ctask){ s, idx, dst, src, n };
    pthread_mutex_lock(&s->mu);
    s->v[idx].pending++;
    s->inflight++;
    pthread_mutex_unlock(&s->mu);
    int rc = ckpt_pool_submit(s->st->copy, host_copy_task, t);
    if (rc) {
        /* Queue full of memory: copy here instead. */
        host_copy_task(t, 0);
    }
    return 0;
}

/* Seals the last slab: the consumer may read it once its copies land. */
static void seal_last(ckpt_staged *s)
{
    pthread_mutex_lock(&s->mu);
    if (s->nv)
        s->v[s->nv - 1].sealed = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* The producer is about to wait for a slab that only the consumer can
 * free: let the consumer start. */
static void starving(void *arg)
{
    ckpt_staged *s = arg;
    pthread_mutex_lock(&s->mu);
    s->starved = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Adds a fresh slab at the end of the stream. */
static int push_slab(ckpt_staged *s, ckpt_error *err)
{
    unsigned char *p = NULL;
    seal_last(s);
    int rc = slab_get(s->st, &p, starving, s, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&s->mu);
    if (s->nv == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        slabent *v = realloc(s->v, cap * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&s->mu);
            slab_put(s->st, p);
            return ckpt_err(err, -ENOMEM, "out of memory");
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->nv++] = (slabent){ .p = p };
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int ckpt_staged_append(ckpt_staged *s, const void *src, size_t n, int kind,
                       ckpt_error *err)
{
    const unsigned char *from = src;
    size_t slab = s->st->slab;
    if (kind == CKPT_MEM_HOST && n > 0 && !s->host) {
        pthread_mutex_lock(&s->mu);
        s->host = 1;
        pthread_mutex_unlock(&s->mu);
    }
    size_t part = slab / (size_t)s->st->ncopy;
    if (part < INLINE_COPY)
        part = INLINE_COPY;
    while (n > 0) {
        pthread_mutex_lock(&s->mu);
        int stop = s->dropping, full = s->nv == 0 || s->v[s->nv - 1].len == slab;
        int rc = s->rc;
        if (rc && err)
            *err = s->err;
        pthread_mutex_unlock(&s->mu);
        if (rc || stop)
            return rc;
        if (full && (rc = push_slab(s, err)) != 0)
            return rc;
        /* Only the producer changes v[idx].len and s->nv: no lock needed to
         * read them, but the array may move under a concurrent reader's
         * realloc-free view, so take addresses under the lock. */
        pthread_mutex_lock(&s->mu);
        size_t idx = s->nv - 1;
        size_t take = slab - s->v[idx].len;
        if (take > n)
            take = n;
        if (kind == CKPT_MEM_HOST && take > part)
            take = part;
        unsigned char *dst = s->v[idx].p + s->v[idx].len;
        s->v[idx].len += take;
        pthread_mutex_unlock(&s->mu);
        rc = submit_copy(s, idx, dst, from, take, kind, err);
        if (rc)
            return rc;
        from += take;
        n -= take;
    }
    return 0;
}

int ckpt_staged_close(ckpt_staged *s, ckpt_error *err)
{
    pthread_mutex_lock(&s->mu);
    if (s->nv)
        s->v[s->nv - 1].sealed = 1;
    s->closed = 1;
    pthread_cond_broadcast(&s->cv);
    while (s->inflight > 0)
        pthread_cond_wait(&s->cv, &s->mu);
    if (s->anydev) {
        /* Every device copy must have landed before the caller may
         * overwrite its memory: one wait for the whole stream. */
        const char *why = NULL;
        pthread_mutex_unlock(&s->mu);
        int drc = ckpt_gpu_stream_sync(s->st->stream, &why);
        pthread_mutex_lock(&s->mu);
        if (drc) {
            ckpt_error e = { 0 };
            ckpt_err(&e, -EIO, "staging: a device-to-host copy failed: %s",
                     why);
            copy_failed(s, &e);
        }
        for (size_t k = 0; k < s->nv; k++)
            s->v[k].dev = 0;
        pthread_cond_broadcast(&s->cv);
    }
    int rc = s->rc;
    if (rc && err)
        *err = s->err;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int slab_ready(const slabent *e)
{
    return e->sealed && e->pending == 0;
}

/* With s->mu held: gives slab k back to the pool (its device copies
 * have landed: settle, or the producer's close). */
static void give_back(ckpt_staged *s, size_t k)
{
    if (s->v[k].p) {
        slab_put(s->st, s->v[k].p);
        s->v[k].p = NULL;
    }
    if (s->v[k].ev) {
        ckpt_gpu_event_destroy(s->v[k].ev);
        s->v[k].ev = NULL;
    }
}

int ckpt_staged_read(ckpt_staged *s, size_t want, const void **p, size_t *n,
                     ckpt_error *err)
{
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->rc) {
            int rc = ckpt_err(err, -EIO, "staging failed: %s", s->err.msg);
            pthread_mutex_unlock(&s->mu);
            return rc;
        }
        if (s->rslab == s->nv) {
            if (s->closed) {
                pthread_mutex_unlock(&s->mu);
                return ckpt_err(err, -ENODATA, "staging: read past the end "
                                "of the staged data");
            }
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        slabent *e = &s->v[s->rslab];
        /* Host copies take the CPUs: wait for the staging to end (or to
         * need the slabs back) before encoding, so that the copies have
         * the CPUs and the memory bandwidth to themselves and the caller's
         * stall is the copy alone.  Device copies (DMA) overlap with the
         * encoding of what has landed. */
        if (!slab_ready(e) || (s->host && !s->closed && !s->starved)) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        if (e->dev) {
            settle(s, s->rslab);
            continue;
        }
        if (s->roff == e->len) {
            give_back(s, s->rslab);
            s->rslab++;
            s->roff = 0;
            continue;
        }
        size_t take = e->len - s->roff;
        if (take > want)
            take = want;
        *p = e->p + s->roff;
        *n = take;
        s->roff += take;
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
}

void ckpt_staged_fail(ckpt_staged *s, const ckpt_error *e)
{
    pthread_mutex_lock(&s->mu);
    copy_failed(s, e);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void ckpt_staged_drain(ckpt_staged *s)
{
    pthread_mutex_lock(&s->mu);
    s->dropping = 1;
    for (;;) {
        while (s->rslab < s->nv && slab_ready(&s->v[s->rslab])) {
            settle(s, s->rslab);
            give_back(s, s->rslab);
            s->rslab++;
            s->roff = 0;
        }
        if (s->closed && s->inflight == 0 && s->rslab == s->nv)
            break;
        if (s->closed && s->rslab < s->nv && s->v[s->rslab].pending == 0) {
            s->v[s->rslab].sealed = 1;   /* closed: nothing more comes */
            continue;
        }
        pthread_cond_wait(&s->cv, &s->mu);
    }
    pthread_mutex_unlock(&s->mu);
}

void ckpt_staged_free(ckpt_staged *s)
{
    if (!s)
        return;
    for (size_t k = 0; k < s->nv; k++)
        give_back(s, k);
    free(s->v);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
