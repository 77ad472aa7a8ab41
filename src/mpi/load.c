/*
 * load.c - collective loads over MPI (see ckptfs_mpi.h; the agreement
 * between ranks is coll.h's).
 *
 * Load (two-phase): every rank opens the index and checks its regions; the
 * regions are all-gathered and every rank computes the same exchange plan:
 * each frame that some region needs is owned by one of the ranks that need
 * it (greedily balancing their work: decoding, and a quarter as much per
 * byte sent), which decodes it once and sends the other ranks their parts
 * with MPI_Alltoallv, in rounds bounded by exchange_bytes per rank.  A
 * byte object is read by rank 0 and broadcast.
 */
#include "ckptfs_mpi.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/pool.h"
#include "common/region.h"
#include "common/shape.h"
#include "mpi/coll.h"

#define DEFAULT_EXCHANGE_BYTES ((size_t)64 << 20)
#define MIN_EXCHANGE_BYTES ((size_t)4 << 10)
#define MAX_EXCHANGE_BYTES ((size_t)1 << 30)
/* Own frames are handed to the thread pool in batches of about this many
 * raw bytes (or less, so that every thread gets several batches). */
#define TASK_BYTES ((uint64_t)4 << 20)
/* Broadcasts of more than this many bytes are cut in pieces. */
#define BCAST_PIECE ((size_t)1 << 30)

/* ================================================================== load */

/* One region of one rank, as every rank sees it after the all-gather. */
typedef struct lreq {
    int rank;            /* the rank that wants it */
    uint32_t idx;        /* its index among that rank's regions */
    uint32_t t;          /* tensor */
    size_t dims;         /* offsets at dims[dims], sizes at dims[dims+ndim] */
} lreq;

/* A region's overlap B with one chunk (global coordinates). */
typedef struct part {
    uint32_t req;
    uint32_t chunk;
    size_t dims;         /* B's offsets and sizes in the dims pool */
    uint64_t elo, ehi;   /* B's first and past-last chunk-linear elements */
} part;

/* Bytes [b0, b0 + n) of a part's row-major image, which one frame holds. */
typedef struct unit {
    uint32_t part;
    uint64_t b0, n;
    size_t at;           /* this round: offset in the send or receive buffer */
} unit;

/* The units of one frame, and the rank that reads it. */
typedef struct group {
    size_t u0, nu;
    int owner;
    int remote;          /* some unit goes to another rank */
    uint64_t raw;        /* the frame's raw bytes */
    uint64_t e0;         /* its first element, chunk-linear */
} group;

typedef struct loader {
    coll c;
    ckpt_reader *r;
    const char *dir;
    const ckpt_mpi_region *regions;
    size_t n;
    size_t exchange;
    lreq *req;
    size_t nreq;
    int64_t *dims;
    size_t ndims, dcap;
    part *parts;
    size_t nparts, pcap;
    unit *units;
    size_t nunits, ucap;
    group *groups;
    size_t ngroups, gcap;
    uint64_t *load;      /* per rank: work of the frames it owns */
    uint64_t *ov;        /* per rank: scratch */
    uint64_t *sendt, *recvt;     /* per rank: bytes in the current round */
    int *scount, *sdispl, *rcount, *rdispl;
    unsigned char *sbuf, *rbuf;
    size_t scap, rcap;
    ckpt_pool *pool;
    uint64_t requested;  /* bytes this rank's regions ask for */
} loader;

/* Returns v grown (realloc) to hold at least `need` elements of `elem`
 * bytes, updating *cap; v itself when it is large enough; NULL (v left
 * alone) when out of memory. */
static void *grow(void *v, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return v;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *p = realloc(v, n * elem);
    if (p)
        *cap = n;
    return p;
}

/* Reserves 2 * ndim entries in the dims pool; returns their index. */
static int dims_add(loader *ld, int ndim, size_t *at)
{
    int64_t *d = grow(ld->dims, &ld->dcap, ld->ndims + 2 * (size_t)ndim + 1,
                      sizeof *d);
    if (!d)
        return -ENOMEM;
    ld->dims = d;
    *at = ld->ndims;
    ld->ndims += 2 * (size_t)ndim;
    return 0;
}

static const int64_t *offs_of(const loader *ld, size_t at)
{
    return ld->dims + at;
}

static const int64_t *sizes_of(const loader *ld, size_t at, int ndim)
{
    return ld->dims + at + ndim;
}

static void tinfo(const loader *ld, size_t t, ckpt_tensor_info *ti)
{
    ckpt_reader_info(ld->r, t, ti);   /* t comes from ckpt_reader_find */
}

/* The rank whose region unit u belongs to. */
static int unit_rank(const loader *ld, const unit *u)
{
    return ld->req[ld->parts[u->part].req].rank;
}

/* ------------------------------------------------------ local regions */

/* Checks region i of this rank; returns its tensor index or a failure. */
static long check_region(loader *ld, size_t i, const int64_t **off,
                         const int64_t **size, ckpt_error *st)
{
    const coll *c = &ld->c;
    const ckpt_mpi_region *g = &ld->regions[i];
    if (!g->fqn)
        return coll_failf(c, st, -EINVAL, "region %zu has no fqn (NULL)", i);
    long t = ckpt_reader_find(ld->r, g->fqn);
    if (t < 0)
        return coll_failf(c, st, -ENOENT, "tensor '%s' is not in %s", g->fqn,
                          ld->dir);
    ckpt_tensor_info ti;
    tinfo(ld, (size_t)t, &ti);
    static const int64_t zeros[CKPT_MAX_DIMS];
    *off = g->offsets ? g->offsets : zeros;
    *size = g->sizes ? g->sizes : ti.shape;
    for (int d = 0; d < ti.ndim; d++)
        if ((*off)[d] < 0 || (*size)[d] < 0 || (*off)[d] > ti.shape[d] ||
            (*size)[d] > ti.shape[d] - (*off)[d])
            return coll_failf(c, st, -EINVAL,
                              "tensor '%s': region dim %d [%lld, "
                              "+%lld) is outside its size %lld", g->fqn, d,
                              (long long)(*off)[d], (long long)(*size)[d],
                              (long long)ti.shape[d]);
    uint64_t nbytes = ckpt_box_numel(ti.ndim, *size) *
                      ckpt_dtype_size(ti.dtype);
    if (nbytes > 0 && !g->dst)
        return coll_failf(c, st, -EINVAL, "tensor '%s': region %zu has no "
                          "destination buffer (NULL)", g->fqn, i);
    ld->requested += nbytes;
    return t;
}

/* Checks and serialises this rank's regions: u32 tensor, then offsets and
 * sizes (the tensor's ndim int64 each). */
static void describe_regions(loader *ld, wbuf *b, ckpt_error *st)
{
    const coll *c = &ld->c;
    if (ld->n > 0 && !ld->regions) {
        coll_failf(c, st, -EINVAL, "%zu regions but no region array (NULL)",
                   ld->n);
        return;
    }
    if (ld->n > (size_t)INT_MAX) {
        coll_failf(c, st, -EINVAL, "%zu regions (at most %d per rank)", ld->n,
                   INT_MAX);
        return;
    }
    for (size_t i = 0; i < ld->n && st->code == 0; i++) {
        const int64_t *off = NULL, *size = NULL;
        long t = check_region(ld, i, &off, &size, st);
        if (t < 0)
            return;
        ckpt_tensor_info ti;
        tinfo(ld, (size_t)t, &ti);
        uint32_t t32 = (uint32_t)t;
        wb_put(b, &t32, sizeof t32);
        wb_dims(b, ti.ndim, off);
        wb_dims(b, ti.ndim, size);
    }
    if (st->code == 0 && b->oom)
        coll_failf(c, st, -ENOMEM, "out of memory describing %zu regions",
                   ld->n);
    if (st->code == 0 && b->n > (size_t)INT_MAX)
        coll_failf(c, st, -EINVAL,
                   "region descriptions take %zu bytes (at most "
                   "%d per rank)", b->n, INT_MAX);
}

/* ------------------------------------------------------ all-gather */

static int parse_regions(loader *ld, const unsigned char *wire,
                         const int *count, const int *nbytes,
                         const int *displ)
{
    size_t total = 0;
    for (int r = 0; r < ld->c.size; r++)
        total += (size_t)count[r];
    if (total > UINT32_MAX)
        return -E2BIG;
    ld->req = calloc(total ? total : 1, sizeof *ld->req);
    if (!ld->req)
        return -ENOMEM;
    for (int r = 0; r < ld->c.size; r++) {
        rbuf b = { wire + displ[r], (size_t)nbytes[r], 0, 0 };
        for (int i = 0; i < count[r]; i++) {
            lreq *q = &ld->req[ld->nreq++];
            uint32_t t;
            rb_get(&b, &t, sizeof t);
            if (b.bad || t >= ckpt_reader_count(ld->r))
                return -EPROTO;
            ckpt_tensor_info ti;
            tinfo(ld, t, &ti);
            *q = (lreq){ .rank = r, .idx = (uint32_t)i, .t = t };
            if (dims_add(ld, ti.ndim, &q->dims))
                return -ENOMEM;
            rb_get(&b, ld->dims + q->dims,
                   2 * (size_t)ti.ndim * sizeof *ld->dims);
            if (b.bad)
                return -EPROTO;
        }
    }
    return 0;
}

/* Sizes and displacements of the ranks' region descriptions. */
typedef struct wire_sizes {
    int *all, *count, *nbytes, *displ;
    int64_t total;
} wire_sizes;

static void wire_sizes_free(wire_sizes *ws)
{
    free(ws->all);
    free(ws->count);
    free(ws->nbytes);
    free(ws->displ);
}

static void gather_sizes(loader *ld, const wbuf *b, wire_sizes *ws,
                         ckpt_error *st)
{
    coll *c = &ld->c;
    size_t k = (size_t)c->size;
    int mine[2] = { (int)ld->n, (int)b->n };
    ws->all = calloc(2 * k, sizeof *ws->all);
    ws->count = calloc(k, sizeof *ws->count);
    ws->nbytes = calloc(k, sizeof *ws->nbytes);
    ws->displ = calloc(k, sizeof *ws->displ);
    if (!ws->all || !ws->count || !ws->nbytes || !ws->displ)
        coll_failf(c, st, -ENOMEM, "out of memory");
    if (coll_agree(c, st))
        return;
    coll_check(c, st, MPI_Allgather(mine, 2, MPI_INT, ws->all, 2, MPI_INT,
                                    c->comm), "MPI_Allgather");
    for (size_t r = 0; r < k; r++) {
        ws->count[r] = ws->all[2 * r];
        ws->nbytes[r] = ws->all[2 * r + 1];
        ws->displ[r] = ws->total < INT_MAX ? (int)ws->total : 0;
        ws->total += ws->nbytes[r];
    }
}

/* Every rank learns every rank's regions. */
static void gather_regions(loader *ld, const wbuf *b, ckpt_error *st)
{
    coll *c = &ld->c;
    wire_sizes ws = { 0 };
    unsigned char *wire = NULL, none[1];
    gather_sizes(ld, b, &ws, st);
    if (coll_agree(c, st) == 0 && ws.total > INT_MAX)
        coll_fail_all(st, -EINVAL, "the region descriptions of all ranks take "
                      "%lld bytes (at most %d)", (long long)ws.total, INT_MAX);
    if (st->code == 0 && !(wire = malloc(ws.total ? (size_t)ws.total : 1)))
        coll_failf(c, st, -ENOMEM, "out of memory for %lld bytes of regions",
                   (long long)ws.total);
    if (coll_agree(c, st) == 0) {
        coll_check(c, st, MPI_Allgatherv(b->p ? b->p : none, (int)b->n,
                                         MPI_BYTE, wire, ws.nbytes, ws.displ,
                                         MPI_BYTE, c->comm), "MPI_Allgatherv");
        int rc = st->code ? 0 : parse_regions(ld, wire, ws.count, ws.nbytes,
                                              ws.displ);
        if (rc)
            coll_failf(c, st, rc,
                       "cannot take in the regions of all ranks: %s",
                       rc == -ENOMEM ? "out of memory" : rc == -E2BIG
                       ? "more than 2^32 regions" : "malformed description");
    }
    free(wire);
    wire_sizes_free(&ws);
}

/* ------------------------------------------------------ exchange plan */

/* Number of elements of box (bo, bs), given relative to a chunk of sizes
 * cs, whose chunk-linear index is below e (e <= numel(cs)). */
static uint64_t count_below(int ndim, const int64_t *bo, const int64_t *bs,
                            const int64_t *cs, uint64_t e)
{
    uint64_t cnumel = ckpt_box_numel(ndim, cs), bnumel = ckpt_box_numel(ndim,
                                                                         bs);
    if (bnumel == 0 || e == 0)
        return 0;
    if (e >= cnumel)
        return bnumel;
    uint64_t x[CKPT_MAX_DIMS], count = 0, inner = bnumel;
    for (int d = ndim - 1; d >= 0; d--) {
        x[d] = e % (uint64_t)cs[d];
        e /= (uint64_t)cs[d];
    }
    for (int d = 0; d < ndim; d++) {
        uint64_t lo = (uint64_t)bo[d], hi = lo + (uint64_t)bs[d];
        inner /= (uint64_t)bs[d];
        uint64_t below = x[d] <= lo ? 0 : (x[d] < hi ? x[d] : hi) - lo;
        count += below * inner;
        if (x[d] < lo || x[d] >= hi)
            break;
    }
    return count;
}

typedef struct chunk_view {
    size_t t, c;
    int ndim;
    size_t isz;
    const int64_t *off, *size;
    uint64_t nframes;
} chunk_view;

/* The parts of chunk cv: its overlaps with the regions reqs[0..k). */
static int add_parts(loader *ld, const chunk_view *cv, const size_t *reqs,
                     size_t k)
{
    for (size_t j = 0; j < k; j++) {
        const lreq *q = &ld->req[reqs[j]];
        int64_t bo[CKPT_MAX_DIMS], bs[CKPT_MAX_DIMS], last[CKPT_MAX_DIMS];
        if (!ckpt_box_intersect(cv->ndim, offs_of(ld, q->dims),
                                sizes_of(ld, q->dims, cv->ndim), cv->off,
                                cv->size, bo, bs))
            continue;
        if (ld->nparts >= UINT32_MAX || cv->c > UINT32_MAX)
            return -E2BIG;
        part p = { .req = (uint32_t)reqs[j], .chunk = (uint32_t)cv->c };
        part *v = grow(ld->parts, &ld->pcap, ld->nparts + 1, sizeof *v);
        if (!v)
            return -ENOMEM;
        ld->parts = v;
        if (dims_add(ld, cv->ndim, &p.dims))
            return -ENOMEM;
        memcpy(ld->dims + p.dims, bo, (size_t)cv->ndim * sizeof *bo);
        memcpy(ld->dims + p.dims + cv->ndim, bs,
               (size_t)cv->ndim * sizeof *bs);
        for (int d = 0; d < cv->ndim; d++)
            last[d] = bo[d] + bs[d] - 1;
        p.elo = ckpt_box_linear(cv->ndim, cv->off, cv->size, bo);
        p.ehi = ckpt_box_linear(cv->ndim, cv->off, cv->size, last) + 1;
        ld->parts[ld->nparts++] = p;
    }
    return 0;
}

/* Work of a rank that owns a frame of `raw` bytes and needs `ov` of them:
 * decoding it, plus sending the rest, counted a quarter (moving a byte
 * costs much less than decoding it, within a node or over a network). */
static uint64_t owner_cost(uint64_t raw, uint64_t ov)
{
    return raw + (raw > ov ? raw - ov : 0) / 4;
}

/* The owner of a frame: among the ranks that need it, the one with the
 * least work once it takes the frame (greedy; ties: the rank that needs
 * more of it, then the lowest).  Frames that several ranks need alike are
 * spread over them; a rank needing a frame much more than the others
 * takes it unless it is already busier.  Adds the work to the owner and
 * resets the ov entries. */
static int choose_owner(loader *ld, const group *g)
{
    int best = -1;
    uint64_t best_key = 0, best_ov = 0;
    for (size_t u = g->u0; u < g->u0 + g->nu; u++) {
        int r = unit_rank(ld, &ld->units[u]);
        uint64_t ov = ld->ov[r];
        uint64_t key = ld->load[r] + owner_cost(g->raw, ov);
        int tie = key == best_key &&
                  (ov > best_ov || (ov == best_ov && r < best));
        if (best < 0 || key < best_key || tie) {
            best = r;
            best_key = key;
            best_ov = ov;
        }
    }
    ld->load[best] = best_key;
    for (size_t u = g->u0; u < g->u0 + g->nu; u++)
        ld->ov[unit_rank(ld, &ld->units[u])] = 0;
    return best;
}

/* Adds the group of units of frame i of chunk cv (parts p0..p1). */
static int add_group(loader *ld, const chunk_view *cv, size_t p0, size_t p1,
                     const ckpt_frame_info *f)
{
    uint64_t e0 = f->raw_offset / cv->isz;
    uint64_t e1 = (f->raw_offset + f->raw_size) / cv->isz;
    group g = { .u0 = ld->nunits, .e0 = e0 };
    for (size_t p = p0; p < p1; p++) {
        const part *pp = &ld->parts[p];
        if (pp->ehi <= e0 || pp->elo >= e1)
            continue;
        int64_t rel[CKPT_MAX_DIMS];
        const int64_t *bo = offs_of(ld, pp->dims);
        const int64_t *bs = sizes_of(ld, pp->dims, cv->ndim);
        for (int d = 0; d < cv->ndim; d++)
            rel[d] = bo[d] - cv->off[d];
        uint64_t a = count_below(cv->ndim, rel, bs, cv->size, e0);
        uint64_t b = count_below(cv->ndim, rel, bs, cv->size, e1);
        if (b <= a)
            continue;
        unit *v = grow(ld->units, &ld->ucap, ld->nunits + 1, sizeof *v);
        if (!v)
            return -ENOMEM;
        ld->units = v;
        ld->units[ld->nunits++] = (unit){ (uint32_t)p, a * cv->isz,
                                          (b - a) * cv->isz, 0 };
        ld->ov[ld->req[pp->req].rank] += (b - a) * cv->isz;
        g.nu++;
    }
    if (g.nu == 0)
        return 0;
    g.raw = f->raw_size;
    g.owner = choose_owner(ld, &g);
    for (size_t u = g.u0; u < g.u0 + g.nu; u++)
        if (ld->req[ld->parts[ld->units[u].part].req].rank != g.owner)
            g.remote = 1;
    group *v = grow(ld->groups, &ld->gcap, ld->ngroups + 1, sizeof *v);
    if (!v)
        return -ENOMEM;
    ld->groups = v;
    ld->groups[ld->ngroups++] = g;
    return 0;
}

/* First frame of chunk cv holding chunk-linear element e. */
static int first_frame(loader *ld, const chunk_view *cv, uint64_t e,
                       uint64_t *out, ckpt_error *err)
{
    uint64_t lo = 0, hi = cv->nframes;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        ckpt_frame_info f;
        int rc = ckpt_reader_frame(ld->r, cv->t, cv->c, mid, &f, err);
        if (rc)
            return rc;
        if (f.raw_offset / cv->isz <= e)
            lo = mid;
        else
            hi = mid;
    }
    *out = lo;
    return 0;
}

/* The groups of chunk cv's frames that the parts p0..p1 need. */
static int plan_frames(loader *ld, const chunk_view *cv, size_t p0,
                       size_t p1, ckpt_error *err)
{
    uint64_t lo = UINT64_MAX, hi = 0, i;
    for (size_t p = p0; p < p1; p++) {
        lo = ld->parts[p].elo < lo ? ld->parts[p].elo : lo;
        hi = ld->parts[p].ehi > hi ? ld->parts[p].ehi : hi;
    }
    int rc = first_frame(ld, cv, lo, &i, err);
    for (; rc == 0 && i < cv->nframes; i++) {
        ckpt_frame_info f;
        rc = ckpt_reader_frame(ld->r, cv->t, cv->c, i, &f, err);
        if (rc || f.raw_offset / cv->isz >= hi)
            break;
        rc = add_group(ld, cv, p0, p1, &f);
        if (rc)
            ckpt_err(err, rc, "out of memory planning the exchange");
    }
    return rc;
}

/* Parts and groups of tensor t, wanted by the regions reqs[0..k). */
static int plan_tensor(loader *ld, size_t t, const size_t *reqs, size_t k,
                       ckpt_error *err)
{
    ckpt_tensor_info ti;
    tinfo(ld, t, &ti);
    for (size_t c = 0; c < ti.nchunks; c++) {
        ckpt_chunk_info ci;
        if (ckpt_reader_chunk(ld->r, t, c, &ci))   /* loads them once */
            return ckpt_err(err, -EIO, "tensor '%s': its chunks cannot be "
                            "loaded from the index (damaged index)", ti.fqn);
        chunk_view cv = { t, c, ti.ndim, ckpt_dtype_size(ti.dtype),
                          ci.offsets, ci.sizes, ci.nframes };
        size_t p0 = ld->nparts;
        int rc = add_parts(ld, &cv, reqs, k);
        if (rc)
            return ckpt_err(err, rc, "%s planning the exchange", rc == -E2BIG
                            ? "too many region pieces" : "out of memory");
        if (ld->nparts > p0 && cv.nframes > 0)
            rc = plan_frames(ld, &cv, p0, ld->nparts, err);
        if (rc)
            return rc;
    }
    return 0;
}

typedef struct req_ref {
    uint32_t t;
    size_t i;
} req_ref;

static int cmp_req_ref(const void *a, const void *b)
{
    const req_ref *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* The whole exchange plan, the same on every rank: tensor by tensor, the
 * regions that want it. */
static int plan_exchange(loader *ld, ckpt_error *err)
{
    size_t n = ld->nreq;
    req_ref *refs = malloc((n ? n : 1) * sizeof *refs);
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    int rc = 0;
    if (!refs || !order)
        rc = ckpt_err(err, -ENOMEM, "out of memory planning the exchange");
    for (size_t i = 0; rc == 0 && i < n; i++)
        refs[i] = (req_ref){ ld->req[i].t, i };
    if (rc == 0)
        qsort(refs, n, sizeof *refs, cmp_req_ref);
    for (size_t i = 0; rc == 0 && i < n; i++)
        order[i] = refs[i].i;
    for (size_t a = 0, b; rc == 0 && a < n; a = b) {
        for (b = a + 1; b < n && refs[b].t == refs[a].t; b++)
            ;
        rc = plan_tensor(ld, refs[a].t, order + a, b - a, err);
    }
    free(refs);
    free(order);
    return rc;
}

/* ------------------------------------------------------ reading units */

/* A pool thread's buffers: a shared frame, decoded once, and a box on
 * its way to a region it is not contiguous in. */
typedef struct scratch {
    unsigned char *frame, *box;
    size_t fcap, bcap;
} scratch;

static int reserve(unsigned char **p, size_t *cap, size_t n, ckpt_error *err)
{
    if (n <= *cap)
        return 0;
    unsigned char *q = realloc(*p, n);
    if (!q)
        return ckpt_err(err, -ENOMEM, "out of memory (%zu bytes)", n);
    *p = q;
    *cap = n;
    return 0;
}

enum walk_mode {
    WALK_TO_STREAM,      /* read from the checkpoint into the stream */
    WALK_TO_DST,         /* read from the checkpoint into the region */
    WALK_FROM_STREAM,    /* copy the stream into the region */
    WALK_FRAME_TO_STREAM,/* copy from the decoded frame into the stream */
    WALK_FRAME_TO_DST    /* copy from the decoded frame into the region */
};

/* Walks the boxes of a unit (bytes [b0, b0+n) of its part's row-major
 * image: a sequence of row-major boxes) moving each one. */
typedef struct walk {
    loader *ld;
    size_t t;
    int ndim;
    size_t isz;
    const int64_t *boff;          /* the part's global offsets */
    const int64_t *qoff, *qsize;  /* the destination region */
    unsigned char *qdst;
    unsigned char *stream;        /* the unit's bytes, box after box */
    size_t pos;
    const int64_t *coff, *csize;  /* the chunk (frame modes) */
    const unsigned char *frame;   /* its decoded frame ... */
    uint64_t e0;                  /* ... which starts at this element */
    enum walk_mode mode;
    scratch *tmp;
    ckpt_error *err;
} walk;

static int place_run(void *arg, uint64_t src, uint64_t dst, uint64_t n)
{
    walk *w = arg;
    memcpy(w->qdst + dst * w->isz, w->stream + w->pos + src * w->isz,
           n * w->isz);
    return 0;
}

/* Copies the row-major box (off, size) at w->stream + w->pos into the
 * destination region. */
static void place_box(walk *w, const int64_t *off, const int64_t *size)
{
    ckpt_region_runs(w->ndim, off, size, off, size, w->qoff, w->qsize,
                     place_run, w);
}

static int frame_run(void *arg, uint64_t src, uint64_t dst, uint64_t n)
{
    walk *w = arg;
    unsigned char *to = w->mode == WALK_FRAME_TO_DST ? w->qdst
                                                     : w->stream + w->pos;
    memcpy(to + dst * w->isz, w->frame + (src - w->e0) * w->isz,
           n * w->isz);
    return 0;
}

/* Copies box (off, size), which lies in the decoded frame, into the
 * stream or the destination region. */
static void frame_box(walk *w, const int64_t *off, const int64_t *size)
{
    if (w->mode == WALK_FRAME_TO_DST)
        ckpt_region_runs(w->ndim, off, size, w->coff, w->csize, w->qoff,
                         w->qsize, frame_run, w);
    else
        ckpt_region_runs(w->ndim, off, size, w->coff, w->csize, off, size,
                         frame_run, w);
}

/* 1 when box (off, size) is one contiguous run of the destination region's
 * image; *at is then its first element there. */
static int contiguous_in(const walk *w, const int64_t *off,
                         const int64_t *size, uint64_t *at)
{
    int d = 0;
    while (d < w->ndim && size[d] == 1)
        d++;
    for (int k = d + 1; k < w->ndim; k++)
        if (size[k] != w->qsize[k])
            return 0;
    *at = ckpt_box_linear(w->ndim, w->qoff, w->qsize, off);
    return 1;
}

static int read_to_dst(walk *w, const int64_t *off, const int64_t *size,
                       size_t bytes)
{
    uint64_t at;
    if (contiguous_in(w, off, size, &at))
        return ckpt_read_region(w->ld->r, w->t, off, size,
                                w->qdst + at * w->isz, w->err);
    int rc = reserve(&w->tmp->box, &w->tmp->bcap, bytes, w->err);
    if (rc == 0)
        rc = ckpt_read_region(w->ld->r, w->t, off, size, w->tmp->box, w->err);
    if (rc == 0) {
        walk pw = *w;
        pw.stream = w->tmp->box;
        pw.pos = 0;
        place_box(&pw, off, size);
    }
    return rc;
}

static int walk_box(void *arg, const int64_t *rel, const int64_t *size)
{
    walk *w = arg;
    int64_t off[CKPT_MAX_DIMS];
    for (int d = 0; d < w->ndim; d++)
        off[d] = w->boff[d] + rel[d];
    size_t bytes = (size_t)ckpt_box_numel(w->ndim, size) * w->isz;
    int rc = 0;
    switch (w->mode) {
    case WALK_TO_STREAM:
        rc = ckpt_read_region(w->ld->r, w->t, off, size, w->stream + w->pos,
                              w->err);
        break;
    case WALK_TO_DST:
        rc = read_to_dst(w, off, size, bytes);
        break;
    case WALK_FROM_STREAM:
        place_box(w, off, size);
        break;
    case WALK_FRAME_TO_STREAM:
    case WALK_FRAME_TO_DST:
        frame_box(w, off, size);
        break;
    }
    w->pos += bytes;
    return rc;
}

/* The walk of unit u in `mode`; the caller sets the frame fields. */
static walk unit_walk(loader *ld, const unit *u, enum walk_mode mode,
                      unsigned char *stream, scratch *tmp, ckpt_error *err)
{
    const part *p = &ld->parts[u->part];
    const lreq *q = &ld->req[p->req];
    ckpt_tensor_info ti;
    tinfo(ld, q->t, &ti);
    walk w = { .ld = ld, .t = q->t, .ndim = ti.ndim,
               .isz = ckpt_dtype_size(ti.dtype), .boff = offs_of(ld, p->dims),
               .stream = stream, .mode = mode, .tmp = tmp, .err = err };
    if (mode != WALK_TO_STREAM && mode != WALK_FRAME_TO_STREAM) {
        w.qoff = offs_of(ld, q->dims);
        w.qsize = sizes_of(ld, q->dims, ti.ndim);
        w.qdst = ld->regions[q->idx].dst;
    }
    return w;
}

static int run_walk(loader *ld, const unit *u, walk *w)
{
    const part *p = &ld->parts[u->part];
    return ckpt_region_linear_boxes(w->ndim, sizes_of(ld, p->dims, w->ndim),
                                    u->b0 / w->isz, (u->b0 + u->n) / w->isz,
                                    walk_box, w);
}

/* Moves unit u: reads it into `stream`, reads it into this rank's region,
 * or places `stream` into the region. */
static int move_unit(loader *ld, const unit *u, enum walk_mode mode,
                     unsigned char *stream, scratch *tmp, ckpt_error *err)
{
    walk w = unit_walk(ld, u, mode, stream, tmp, err);
    return run_walk(ld, u, &w);
}

/* Reads the whole frame of group g (its chunk-linear elements) into
 * tmp->frame: one decode, whatever the reader's cache holds. */
typedef struct frame_read {
    loader *ld;
    size_t t;
    int ndim;
    size_t isz;
    const int64_t *coff;
    unsigned char *buf;
    size_t pos;
    ckpt_error *err;
} frame_read;

static int frame_read_box(void *arg, const int64_t *rel, const int64_t *size)
{
    frame_read *fr = arg;
    int64_t off[CKPT_MAX_DIMS];
    for (int d = 0; d < fr->ndim; d++)
        off[d] = fr->coff[d] + rel[d];
    int rc = ckpt_read_region(fr->ld->r, fr->t, off, size, fr->buf + fr->pos,
                              fr->err);
    fr->pos += (size_t)ckpt_box_numel(fr->ndim, size) * fr->isz;
    return rc;
}

/* Group g's frame, decoded into tmp->frame; *ci receives its chunk. */
static int read_frame(loader *ld, const group *g, scratch *tmp,
                      ckpt_chunk_info *ci, ckpt_error *err)
{
    const part *p = &ld->parts[ld->units[g->u0].part];
    size_t t = ld->req[p->req].t;
    ckpt_tensor_info ti;
    tinfo(ld, t, &ti);
    if (ckpt_reader_chunk(ld->r, t, p->chunk, ci))  /* loaded by planning */
        return ckpt_err(err, -EIO, "tensor '%s': its chunks cannot be loaded",
                        ti.fqn);
    int rc = reserve(&tmp->frame, &tmp->fcap, g->raw, err);
    if (rc)
        return rc;
    frame_read fr = { ld, t, ti.ndim, ckpt_dtype_size(ti.dtype), ci->offsets,
                      tmp->frame, 0, err };
    return ckpt_region_linear_boxes(ti.ndim, ci->sizes, g->e0,
                                    g->e0 + g->raw / fr.isz, frame_read_box,
                                    &fr);
}

/* This rank owns group g.  A frame one unit needs is read straight where
 * it goes; a frame several units share is decoded once into a buffer and
 * each unit copied out of it. */
static int read_group(loader *ld, const group *g, scratch *tmp,
                      ckpt_error *err)
{
    unit *u = &ld->units[g->u0];
    int me = ld->c.rank;
    if (g->nu == 1)
        return unit_rank(ld, u) == me
                   ? move_unit(ld, u, WALK_TO_DST, NULL, tmp, err)
                   : move_unit(ld, u, WALK_TO_STREAM, ld->sbuf + u->at, tmp,
                               err);
    ckpt_chunk_info ci;
    int rc = read_frame(ld, g, tmp, &ci, err);
    for (size_t k = g->u0; k < g->u0 + g->nu && rc == 0; k++) {
        u = &ld->units[k];
        int own = unit_rank(ld, u) == me;
        walk w = unit_walk(ld, u, own ? WALK_FRAME_TO_DST
                                      : WALK_FRAME_TO_STREAM,
                           own ? NULL : ld->sbuf + u->at, tmp, err);
        w.coff = ci.offsets;
        w.csize = ci.sizes;
        w.frame = tmp->frame;
        w.e0 = g->e0;
        rc = run_walk(ld, u, &w);
    }
    return rc;
}

/* ------------------------------------------------------ rounds */

/* A batch of this rank's groups, read by one pool thread (shaped like
 * reader.c's copy_task on purpose: see there). */
typedef struct read_task {
    loader *ld;
    const size_t *groups;
    size_t n;
    int rc;
    ckpt_error err;
    ckpt_taskgroup *tg;
} read_task;

static void read_task_run(void *arg, int worker)
{
    (void)worker;
    read_task *rt = arg;
    scratch tmp = { 0 };
    for (size_t i = 0; i < rt->n && rt->rc == 0; i++)
        rt->rc = read_group(rt->ld, &rt->ld->groups[rt->groups[i]], &tmp,
                            &rt->err);
    free(tmp.frame);
    free(tmp.box);
    ckpt_tg_done(rt->tg);
}

/* Reads the groups g0..g1 this rank owns, on the pool. */
static int read_owned(loader *ld, size_t g0, size_t g1, ckpt_error *err)
{
    size_t n = 0, ntasks = 0;
    uint64_t bytes = 0;
    size_t *mine = malloc((g1 - g0 + 1) * sizeof *mine);
    read_task *tasks = calloc(g1 - g0 + 1, sizeof *tasks);
    if (!mine || !tasks) {
        free(mine);
        free(tasks);
        return ckpt_err(err, -ENOMEM, "out of memory");
    }
    for (size_t g = g0; g < g1; g++)
        if (ld->groups[g].owner == ld->c.rank) {
            mine[n++] = g;
            bytes += ld->groups[g].raw;
        }
    uint64_t share = bytes / (uint64_t)(4 * ckpt_pool_threads(ld->pool));
    share = share > TASK_BYTES ? TASK_BYTES : share;
    ckpt_taskgroup tg;
    ckpt_tg_init(&tg);
    for (size_t i = 0; i < n;) {
        read_task *rt = &tasks[ntasks++];
        *rt = (read_task){ .ld = ld, .groups = mine + i, .tg = &tg };
        for (uint64_t b = 0; i < n && (rt->n == 0 || b < share); i++, rt->n++)
            b += ld->groups[mine[i]].raw;
    }
    ckpt_pool_run_tasks(ld->pool, read_task_run, tasks, ntasks, sizeof *tasks,
                        &tg);
    ckpt_tg_destroy(&tg);
    int rc = 0;
    for (size_t i = 0; i < ntasks && rc == 0; i++)
        if (tasks[i].rc) {
            rc = tasks[i].rc;
            *err = tasks[i].err;
        }
    free(mine);
    free(tasks);
    return rc;
}

/* Adds group g's remote bytes to the round's per-rank totals, or takes
 * them away again. */
static void count_group(loader *ld, const group *g, int add)
{
    for (size_t u = g->u0; u < g->u0 + g->nu; u++) {
        int to = unit_rank(ld, &ld->units[u]);
        if (to == g->owner)
            continue;
        uint64_t n = ld->units[u].n;
        ld->sendt[g->owner] = add ? ld->sendt[g->owner] + n
                                  : ld->sendt[g->owner] - n;
        ld->recvt[to] = add ? ld->recvt[to] + n : ld->recvt[to] - n;
    }
}

/* 1 when a rank that group g sends from or to has more than limit bytes
 * in the round. */
static int group_over(const loader *ld, const group *g, uint64_t limit)
{
    for (size_t u = g->u0; u < g->u0 + g->nu; u++) {
        int to = unit_rank(ld, &ld->units[u]);
        if (to != g->owner &&
            (ld->sendt[g->owner] > limit || ld->recvt[to] > limit))
            return 1;
    }
    return 0;
}

/* End of the round that starts at group g0 (the same on every rank):
 * whole groups while no rank sends or receives more than the exchange
 * bound (a group over the bound on its own makes a round alone); *remote
 * tells whether any bytes move between ranks. */
static size_t round_end(loader *ld, size_t g0, int *remote, ckpt_error *st)
{
    size_t g = g0;
    memset(ld->sendt, 0, (size_t)ld->c.size * sizeof *ld->sendt);
    memset(ld->recvt, 0, (size_t)ld->c.size * sizeof *ld->recvt);
    *remote = 0;
    for (; g < ld->ngroups; g++) {
        const group *gr = &ld->groups[g];
        count_group(ld, gr, 1);
        if (!group_over(ld, gr, ld->exchange)) {
            *remote |= gr->remote;
            continue;
        }
        if (g > g0) {
            count_group(ld, gr, 0);
            return g;
        }
        *remote |= gr->remote;
        if (group_over(ld, gr, INT_MAX)) {
            ckpt_tensor_info ti;
            tinfo(ld, ld->req[ld->parts[ld->units[gr->u0].part].req].t, &ti);
            coll_fail_all(st, -E2BIG,
                          "tensor '%s': a frame has more than %d bytes "
                          "to send to other ranks", ti.fqn, INT_MAX);
        }
        return g + 1;
    }
    return g;
}

/* Offsets of this round's units in the send and receive buffers. */
static int layout_round(loader *ld, size_t g0, size_t g1)
{
    int k = ld->c.size, me = ld->c.rank;
    memset(ld->scount, 0, (size_t)k * sizeof *ld->scount);
    memset(ld->rcount, 0, (size_t)k * sizeof *ld->rcount);
    for (size_t g = g0; g < g1; g++) {
        const group *gr = &ld->groups[g];
        for (size_t u = gr->u0; u < gr->u0 + gr->nu; u++) {
            unit *un = &ld->units[u];
            int to = unit_rank(ld, un);
            if (gr->owner == me && to != me) {
                un->at = (size_t)ld->scount[to];
                ld->scount[to] += (int)un->n;
            } else if (to == me && gr->owner != me) {
                un->at = (size_t)ld->rcount[gr->owner];
                ld->rcount[gr->owner] += (int)un->n;
            }
        }
    }
    size_t stot = 0, rtot = 0;
    for (int r = 0; r < k; r++) {
        ld->sdispl[r] = (int)stot;
        ld->rdispl[r] = (int)rtot;
        stot += (size_t)ld->scount[r];
        rtot += (size_t)ld->rcount[r];
    }
    for (size_t g = g0; g < g1; g++) {
        const group *gr = &ld->groups[g];
        for (size_t u = gr->u0; u < gr->u0 + gr->nu; u++) {
            unit *un = &ld->units[u];
            int to = unit_rank(ld, un);
            if (gr->owner == me && to != me)
                un->at += (size_t)ld->sdispl[to];
            else if (to == me && gr->owner != me)
                un->at += (size_t)ld->rdispl[gr->owner];
        }
    }
    unsigned char *sb = grow(ld->sbuf, &ld->scap, stot + 1, 1);
    if (sb)
        ld->sbuf = sb;
    unsigned char *rb = sb ? grow(ld->rbuf, &ld->rcap, rtot + 1, 1) : NULL;
    if (rb)
        ld->rbuf = rb;
    if (!sb || !rb)
        return -ENOMEM;
    return 0;
}

/* Places what this rank received in the round into its regions. */
static void place_received(loader *ld, size_t g0, size_t g1)
{
    for (size_t g = g0; g < g1; g++) {
        const group *gr = &ld->groups[g];
        if (gr->owner == ld->c.rank)
            continue;
        for (size_t u = gr->u0; u < gr->u0 + gr->nu; u++)
            if (unit_rank(ld, &ld->units[u]) == ld->c.rank)
                move_unit(ld, &ld->units[u], WALK_FROM_STREAM,
                          ld->rbuf + ld->units[u].at, NULL, NULL);
    }
}

/* One round: read what this rank owns, agree, exchange, place.  Returns
 * the agreed status (an MPI failure of the exchange is agreed later). */
static int run_round(loader *ld, size_t g0, size_t g1, int remote,
                     ckpt_error *st)
{
    coll *c = &ld->c;
    ckpt_error e = { 0 };
    if (st->code == 0 && layout_round(ld, g0, g1))
        coll_failf(c, st, -ENOMEM, "out of memory for the exchange buffers");
    if (st->code == 0 && read_owned(ld, g0, g1, &e))
        coll_fail_with(c, st, &e);
    if (coll_agree(c, st))
        return st->code;
    if (remote)
        coll_check(c, st, MPI_Alltoallv(ld->sbuf, ld->scount, ld->sdispl,
                                        MPI_BYTE, ld->rbuf, ld->rcount,
                                        ld->rdispl, MPI_BYTE, c->comm),
                   "MPI_Alltoallv");
    if (st->code == 0 && remote)
        place_received(ld, g0, g1);
    return 0;
}

static int alloc_rank_arrays(loader *ld)
{
    size_t k = (size_t)ld->c.size;
    ld->load = calloc(k, sizeof *ld->load);
    ld->ov = calloc(k, sizeof *ld->ov);
    ld->sendt = calloc(k, sizeof *ld->sendt);
    ld->recvt = calloc(k, sizeof *ld->recvt);
    ld->scount = calloc(k, sizeof *ld->scount);
    ld->sdispl = calloc(k, sizeof *ld->sdispl);
    ld->rcount = calloc(k, sizeof *ld->rcount);
    ld->rdispl = calloc(k, sizeof *ld->rdispl);
    return ld->load && ld->ov && ld->sendt && ld->recvt && ld->scount &&
           ld->sdispl && ld->rcount && ld->rdispl ? 0 : -ENOMEM;
}

static void loader_free(loader *ld)
{
    if (ld->pool)
        ckpt_pool_destroy(ld->pool);
    if (ld->r)
        ckpt_reader_close(ld->r);
    free(ld->req);
    free(ld->dims);
    free(ld->parts);
    free(ld->units);
    free(ld->groups);
    free(ld->load);
    free(ld->ov);
    free(ld->sendt);
    free(ld->recvt);
    free(ld->scount);
    free(ld->sdispl);
    free(ld->rcount);
    free(ld->rdispl);
    free(ld->sbuf);
    free(ld->rbuf);
}

/* Opens the reader and the pool, checks and all-gathers the regions, and
 * plans the exchange. */
static int load_prepare(loader *ld, const ckpt_mpi_load_opts *o,
                        ckpt_error *st)
{
    coll *c = &ld->c;
    ckpt_error e = { 0 };
    wbuf b = { 0 };
    /* The reader reads one frame at a time here; the pool below runs
     * frames in parallel, so the reader needs no threads of its own. */
    ckpt_read_opts ro = o->read;
    ro.threads = 1;
    if (st->code == 0 && ckpt_reader_open(&ld->r, ld->dir, &ro, &e))
        coll_fail_with(c, st, &e);
    if (st->code == 0 && ckpt_pool_create(&ld->pool, o->read.threads, &e))
        coll_fail_with(c, st, &e);
    if (st->code == 0 && alloc_rank_arrays(ld))
        coll_failf(c, st, -ENOMEM, "out of memory");
    if (st->code == 0)
        describe_regions(ld, &b, st);
    if (coll_agree(c, st) == 0)
        gather_regions(ld, &b, st);
    free(b.p);
    if (coll_agree(c, st) == 0 && plan_exchange(ld, &e))
        coll_fail_with(c, st, &e);
    return coll_agree(c, st);
}

void ckpt_mpi_load_opts_init(ckpt_mpi_load_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    ckpt_read_opts_init(&o->read);
    o->exchange_bytes = DEFAULT_EXCHANGE_BYTES;
}

static size_t clamp_exchange(size_t v)
{
    if (v == 0)
        return DEFAULT_EXCHANGE_BYTES;
    return v < MIN_EXCHANGE_BYTES ? MIN_EXCHANGE_BYTES
         : v > MAX_EXCHANGE_BYTES ? MAX_EXCHANGE_BYTES : v;
}

int ckpt_mpi_load(MPI_Comm comm, const char *dir,
                  const ckpt_mpi_region *regions, size_t n,
                  const ckpt_mpi_load_opts *opts, ckpt_stats *stats,
                  ckpt_error *err)
{
    ckpt_error st = { 0 };
    loader ld = { .dir = dir, .regions = regions, .n = n };
    if (stats)
        memset(stats, 0, sizeof *stats);
    if (coll_init(&ld.c, comm, &st))
        return coll_finish(&st, err);
    ckpt_mpi_load_opts taken;
    coll_take_load_opts(&ld.c, &taken, opts, &st);
    const ckpt_mpi_load_opts *o = &taken;
    ld.exchange = clamp_exchange(o->exchange_bytes);
    coll_same_dir(&ld.c, dir, &st);
    /* rc is agreed, so every rank leaves the loop at the same round. */
    int rc = load_prepare(&ld, o, &st);
    for (size_t g0 = 0, g1; rc == 0 && g0 < ld.ngroups; g0 = g1) {
        int remote;
        g1 = round_end(&ld, g0, &remote, &st);
        rc = st.code ? st.code : run_round(&ld, g0, g1, remote, &st);
    }
    if (rc == 0)
        coll_agree(&ld.c, &st);   /* the last exchange */
    if (stats && ld.r)
        ckpt_reader_stats(ld.r, stats);
    loader_free(&ld);
    return coll_finish(&st, err);
}

/* ================================================================= bytes */

/* Rank 0 reads byte object fqn whole into *buf (length *len). */
static void read_bytes_root(const coll *c, const char *dir, const char *fqn,
                            unsigned char **buf, uint64_t *len,
                            ckpt_error *st)
{
    ckpt_reader *r = NULL;
    ckpt_error e = { 0 };
    ckpt_tensor_info ti;
    long t = -ENOENT;
    if (!fqn)
        coll_failf(c, st, -EINVAL, "no byte object name given (NULL)");
    else if (ckpt_reader_open(&r, dir, NULL, &e))
        coll_fail_with(c, st, &e);
    else if ((t = ckpt_reader_find(r, fqn)) < 0)
        coll_failf(c, st, -ENOENT, "byte object '%s' is not in %s", fqn, dir);
    else if (ckpt_reader_info(r, (size_t)t, &ti) == 0 &&
             ti.dtype != CKPT_BYTES)
        coll_failf(c, st, -EINVAL,
                   "'%s' in %s is a %s tensor, not a byte object",
                   fqn, dir, ckpt_dtype_name(ti.dtype));
    else if (ti.nbytes > SIZE_MAX - 1 || !(*buf = malloc(ti.nbytes + 1)))
        coll_failf(c, st, -ENOMEM, "out of memory for byte object '%s' (%llu "
                   "bytes)", fqn, (unsigned long long)ti.nbytes);
    else if (ckpt_read(r, (size_t)t, *buf, 0, ti.nbytes, &e) !=
             (int64_t)ti.nbytes)
        coll_failf(c, st, e.code ? e.code : -EIO, "byte object '%s': %s", fqn,
                   e.code ? e.msg : "short read");
    else
        *len = ti.nbytes;
    ckpt_reader_close(r);
}

int ckpt_mpi_load_bytes(MPI_Comm comm, const char *dir, const char *fqn,
                        void **out, size_t *len, ckpt_error *err)
{
    ckpt_error st = { 0 };
    coll c;
    unsigned char *buf = NULL;
    uint64_t n = 0;
    if (out)
        *out = NULL;
    if (len)
        *len = 0;
    if (coll_init(&c, comm, &st))
        return coll_finish(&st, err);
    if (!out || !len)
        coll_failf(&c, &st, -EINVAL, "load of a byte object: no %s pointer "
                   "(NULL)", !out ? "out" : "len");
    coll_same_dir(&c, dir, &st);
    if (c.rank == 0 && st.code == 0)
        read_bytes_root(&c, dir, fqn, &buf, &n, &st);
    coll_check(&c, &st, MPI_Bcast(&n, 1, MPI_UINT64_T, 0, comm), "MPI_Bcast");
    if (c.rank != 0 && st.code == 0 && (n >= SIZE_MAX ||
                                        !(buf = malloc(n + 1))))
        coll_failf(&c, &st, -ENOMEM,
                   "out of memory for byte object '%s' (%llu "
                   "bytes)", fqn ? fqn : "", (unsigned long long)n);
    if (coll_agree(&c, &st) == 0)
        for (uint64_t at = 0; at < n; at += BCAST_PIECE) {
            uint64_t k = n - at < BCAST_PIECE ? n - at : BCAST_PIECE;
            coll_check(&c, &st, MPI_Bcast(buf + at, (int)k, MPI_BYTE, 0, comm),
                       "MPI_Bcast");
        }
    if (coll_agree(&c, &st)) {
        free(buf);
        return coll_finish(&st, err);
    }
    *out = buf;
    *len = (size_t)n;
    return coll_finish(&st, err);
}
