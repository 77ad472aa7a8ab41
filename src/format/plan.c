/*
 * plan.c - the planner (see plan.h): groups the pieces that all writers
 * recorded by fqn and, tensor by tensor in fqn order, checks dtype, shape,
 * bounds, byte counts, overlaps, replicas and coverage, then lists the
 * pieces to keep as chunks (row-major order of their offsets).
 *
 * Overlaps are found with a sweep along the dimension that separates the
 * boxes best, so only boxes whose ranges meet on that dimension are
 * compared (a grid of R x C pieces costs about R*C*min(R,C) box tests).
 */
#include "format/plan.h"
#include "common/error.h"
#include "common/region.h"
#include "common/shape.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FQN_MAX_BYTES 4096
/* Room for a JSON shape of CKPT_MAX_DIMS dims. */
#define DIMS_TEXT_CAP (CKPT_MAX_DIMS * 21 + 3)
/* Box tests spent looking for an uncovered element to name. */
#define HOLE_SEARCH_BUDGET ((uint64_t)1 << 24)
/* Writers listed by name in a coverage message. */
#define MAX_LISTED_WRITERS 8

static const int64_t ZEROS[CKPT_MAX_DIMS];

/* ------------------------------------------------------------ fqn rules */

/* Length of the valid UTF-8 sequence at s, or 0 when it is not valid
 * (overlong forms, surrogates and code points above U+10FFFF are not). */
static size_t utf8_len(const unsigned char *s)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    if (c < 0xc2 || c > 0xf4)
        return 0;
    size_t n = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0) ||
        (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90))
        return 0;
    return n;
}

/* Copies s into buf for quoting in a message: control characters and bytes
 * that are not valid UTF-8 become \xNN; long names are cut with "...". */
static void quote_fqn(char *buf, size_t cap, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    while (*p && o + 8 < cap) {
        size_t n = utf8_len(p);
        if (n == 0 || *p < 0x20 || *p == 0x7f) {
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", *p);
            p++;
            continue;
        }
        memcpy(buf + o, p, n);
        o += n;
        p += n;
    }
    if (*p)
        o += (size_t)snprintf(buf + o, cap - o, "...");
    buf[o] = '\0';
}

void ckpt_text_quote(char *buf, size_t cap, const char *s)
{
    quote_fqn(buf, cap, s);
}

static int fqn_err(ckpt_error *err, const char *fqn, const char *why,
                   size_t at)
{
    char q[256];
    quote_fqn(q, sizeof q, fqn);
    return ckpt_err(err, -EINVAL, "invalid fqn '%s': %s at byte %zu", q, why,
                    at);
}

int ckpt_fqn_check(const char *fqn, ckpt_error *err)
{
    if (!fqn || !*fqn)
        return ckpt_err(err, -EINVAL, "invalid fqn '': the name is empty");
    size_t len = strlen(fqn);
    if (len > FQN_MAX_BYTES) {
        char q[256];
        quote_fqn(q, sizeof q, fqn);
        return ckpt_err(err, -EINVAL,
                        "invalid fqn '%s': %zu bytes long (at most %d)", q,
                        len, FQN_MAX_BYTES);
    }
    const unsigned char *s = (const unsigned char *)fqn;
    for (size_t i = 0; i < len;) {
        size_t n = utf8_len(s + i);
        if (n == 0)
            return fqn_err(err, fqn, "not valid UTF-8", i);
        if (s[i] < 0x20 || s[i] == 0x7f)
            return fqn_err(err, fqn, "control character", i);
        if (s[i] == '/')
            return fqn_err(err, fqn, "'/' (use '.' between components)", i);
        if (s[i] == '.' && (i == 0 || s[i - 1] == '.' || i + 1 == len))
            return fqn_err(err, fqn, "empty dotted component", i);
        i += n;
    }
    return 0;
}

/* ------------------------------------------------------ one piece alone */

/* A piece as the checks and their messages see it, whether it comes from
 * a ckpt_piece_rec or from the table. */
typedef struct pview {
    const char *fqn, *writer;
    ckpt_dtype dtype;
    int ndim;
    const int64_t *shape, *offsets, *sizes;
    uint64_t raw_bytes, data_hash;
} pview;

static pview view_rec(const ckpt_piece_rec *p)
{
    return (pview){ p->fqn, p->writer, p->dtype, p->ndim, p->shape,
                    p->offsets, p->sizes, p->raw_bytes, p->data_hash };
}

static const char *name_of(const char *writer)
{
    return writer && *writer ? writer : "unnamed";
}

static const char *writer_of(const pview *p)
{
    return name_of(p->writer);
}

/* "offsets [0,4] sizes [2,4]" */
static void fmt_box(char *buf, size_t cap, int ndim, const int64_t *off,
                    const int64_t *size)
{
    char o[DIMS_TEXT_CAP], s[DIMS_TEXT_CAP];
    ckpt_shape_format_json(o, sizeof o, ndim, off);
    ckpt_shape_format_json(s, sizeof s, ndim, size);
    snprintf(buf, cap, "offsets %s sizes %s", o, s);
}

/* Valid dtype and a dimension count within [0, CKPT_MAX_DIMS]. */
static int check_kind(const pview *p, ckpt_error *err)
{
    if (p->dtype <= CKPT_DTYPE_INVALID || p->dtype >= CKPT_DTYPE_COUNT)
        return ckpt_err(err, -EINVAL, "tensor '%s': invalid dtype %d "
                        "(writer %s)", p->fqn, (int)p->dtype, writer_of(p));
    if (p->ndim < 0 || p->ndim > CKPT_MAX_DIMS)
        return ckpt_err(err, -EINVAL, "tensor '%s': %d dimensions (writer "
                        "%s); between 0 and %d allowed", p->fqn, p->ndim,
                        writer_of(p), CKPT_MAX_DIMS);
    return 0;
}

/* Non-negative dims whose byte count fits in 2^63 - 1. */
static int check_shape(const pview *p, ckpt_error *err)
{
    char what[320];
    snprintf(what, sizeof what, "tensor '%.200s' (writer %.64s)", p->fqn,
             writer_of(p));
    uint64_t nbytes;
    return ckpt_shape_nbytes(p->dtype, p->ndim, p->shape, &nbytes, what, err);
}

static int check_bounds(const pview *p, ckpt_error *err)
{
    if (ckpt_box_contains(p->ndim, ZEROS, p->shape, p->offsets, p->sizes))
        return 0;
    char box[2 * DIMS_TEXT_CAP + 32], shape[DIMS_TEXT_CAP];
    fmt_box(box, sizeof box, p->ndim, p->offsets, p->sizes);
    ckpt_shape_format_json(shape, sizeof shape, p->ndim, p->shape);
    return ckpt_err(err, -EINVAL, "tensor '%s': piece %s (writer %s) is "
                    "outside shape %s", p->fqn, box, writer_of(p), shape);
}

/* raw_bytes == numel(sizes) * itemsize (the piece is within bounds, so the
 * product cannot overflow). */
static int check_bytes(const pview *p, ckpt_error *err)
{
    uint64_t numel = ckpt_box_numel(p->ndim, p->sizes);
    uint64_t want = numel * ckpt_dtype_size(p->dtype);
    if (p->raw_bytes == want)
        return 0;
    char box[2 * DIMS_TEXT_CAP + 32];
    fmt_box(box, sizeof box, p->ndim, p->offsets, p->sizes);
    return ckpt_err(err, -EINVAL, "tensor '%s': piece %s (writer %s) has "
                    "%llu bytes, expected %llu (%llu elements of %s)", p->fqn,
                    box, writer_of(p), (unsigned long long)p->raw_bytes,
                    (unsigned long long)want, (unsigned long long)numel,
                    ckpt_dtype_name(p->dtype));
}

/* raw_bytes is not checked here: a writer checks a piece before its bytes
 * arrive (the planner compares it).  In bounds of a shape whose byte count
 * fits, the piece's byte count fits too. */
int ckpt_plan_check_piece(const ckpt_piece_rec *rec, ckpt_error *err)
{
    pview p = view_rec(rec);
    int rc = ckpt_fqn_check(p.fqn, err);
    if (!rc)
        rc = check_kind(&p, err);
    if (!rc)
        rc = check_shape(&p, err);
    if (!rc)
        rc = check_bounds(&p, err);
    return rc;
}

/* ------------------------------------------------------- string ranks */

static int cmp_i64(const void *va, const void *vb)
{
    int64_t a = *(const int64_t *)va, b = *(const int64_t *)vb;
    return a < b ? -1 : a > b;
}

static int cmp_dims(int n, const int64_t *a, const int64_t *b)
{
    for (int d = 0; d < n; d++)
        if (a[d] != b[d])
            return a[d] < b[d] ? -1 : 1;
    return 0;
}

/* A string of the table with its id, for sorting. */
typedef struct sref {
    const char *s;
    uint32_t id;
} sref;

static int cmp_sref(const void *va, const void *vb)
{
    return strcmp(((const sref *)va)->s, ((const sref *)vb)->s);
}

/* A writer's name as the order of pieces sees it. */
static const char *sort_key(const char *s)
{
    return s ? s : "";
}

/* The string ids a piece names: its fqn, its writer's name. */
static uint32_t fqn_id(const ckpt_pieces *tab, size_t i)
{
    return tab->v[i].fqn;
}

/* Ranks, in strcmp order of key(string), the strings that field(tab, i)
 * of the pieces names:
 * rank[id] for id < nstr, rank[nstr] for NULL; strings with equal keys get
 * equal ranks.  Returns the number of distinct ranks, or 0 on out of
 * memory (with n > 0 pieces there is at least one). */
static uint32_t rank_strings(const ckpt_pieces *tab,
                             uint32_t (*field)(const ckpt_pieces *, size_t),
                             const char *(*key)(const char *),
                             uint32_t *rank)
{
    uint32_t ns = tab->nstr;
    unsigned char *used = calloc((size_t)ns + 1, 1);
    sref *v = malloc(((size_t)ns + 1) * sizeof *v);
    uint32_t k = 0, distinct = 0;
    if (!used || !v)
        goto out;
    for (size_t i = 0; i < tab->n; i++) {
        uint32_t id = field(tab, i);
        used[id == CKPT_PIECES_NONE ? ns : id] = 1;
    }
    for (uint32_t id = 0; id <= ns; id++)
        if (used[id])
            v[k++] = (sref){ key(ckpt_pieces_str(tab, id == ns
                                                     ? CKPT_PIECES_NONE : id)),
                             id };
    qsort(v, k, sizeof *v, cmp_sref);
    for (uint32_t j = 0; j < k; j++) {
        if (j == 0 || strcmp(v[j].s, v[j - 1].s))
            distinct++;
        rank[v[j].id] = distinct - 1;
    }
out:
    free(used);
    free(v);
    return distinct;
}

static uint32_t rank_of(const uint32_t *rank, const ckpt_pieces *tab,
                        uint32_t id)
{
    return rank[id == CKPT_PIECES_NONE ? tab->nstr : id];
}

/* ------------------------------------------------------- per tensor */

/* A piece of the tensor being planned, with what the checks read of it
 * copied beside the others' (the table holds a tensor's pieces far apart,
 * one per writer), so that sorting, checking and sweeping touch one
 * array: entries have a fixed stride for the tensor's largest ndim. */
typedef struct entry {
    size_t i;            /* input index */
    uint64_t raw_bytes, data_hash;
    uint32_t fqn, writer;    /* string ids */
    uint32_t wrank;      /* rank of its writer's name (NULL as "") */
    int32_t ndim;        /* as given */
    int32_t dtype;
    int64_t box[];       /* offsets, sizes, shape: stored dims each */
} entry;

/* A distinct box of a tensor: entries [start, end) are its replicas. */
typedef struct box_set {
    size_t start, end;
    size_t keep;        /* input index of the kept replica */
    uint64_t bytes;     /* raw bytes of one replica */
    const int64_t *off, *size;
} box_set;

typedef struct sweep_item {
    int64_t lo;
    const box_set *set;
} sweep_item;

/* A box kept among replicas by the balancing pass, once all tensors are
 * checked: its members are rep_i[m0, m1). */
typedef struct rep_set {
    size_t tensor, chunk;
    size_t m0, m1;
    uint64_t bytes;
} rep_set;

/* Work area of one build. */
typedef struct planner {
    const ckpt_pieces *tab;
    size_t n;
    const ckpt_plan_opts *opts;
    ckpt_plan *out;
    int chunks;              /* checking a committed tensor's chunks:
                                pieces are named by position, replicas
                                refused */
    ckpt_error *err;
    uint32_t *wrank;         /* per string id: writer order (NULL as "") */
    uint32_t *brank;         /* balance: per string id, writer name rank
                                (NULL and "" as "unnamed") */
    uint64_t *kept;          /* balance: bytes kept per brank */
    /* scratch of the tensor being planned, grown to the largest */
    unsigned char *ent;
    size_t stride, ent_cap;  /* bytes */
    box_set *sets;
    size_t nsets, sets_cap;
    sweep_item *items;
    const box_set **active;
    int64_t *tmp;
    size_t aux_cap;
    /* balance: replicated boxes of all tensors */
    rep_set *reps;
    size_t nreps, reps_cap;
    size_t *rep_i;
    size_t nrep_i, rep_i_cap;
} planner;

static entry *ent_at(const planner *pl, size_t k)
{
    return (entry *)(pl->ent + k * pl->stride);
}

static pview ent_view(const planner *pl, size_t k)
{
    const entry *e = ent_at(pl, k);
    int n = e->ndim < 0 ? 0 : e->ndim > CKPT_MAX_DIMS ? CKPT_MAX_DIMS
                                                       : e->ndim;
    return (pview){ ckpt_pieces_str(pl->tab, e->fqn),
                    ckpt_pieces_str(pl->tab, e->writer),
                    (ckpt_dtype)e->dtype, e->ndim, e->box + 2 * n, e->box,
                    e->box + n, e->raw_bytes, e->data_hash };
}

static int oom(const planner *pl)
{
    return ckpt_err(pl->err, -ENOMEM, "planner: out of memory");
}

/* Same box: same ndim, offsets and sizes. */
static int cmp_entry_box(const entry *a, const entry *b)
{
    if (a->ndim != b->ndim)
        return a->ndim < b->ndim ? -1 : 1;
    int n = a->ndim < 0 ? 0 : a->ndim > CKPT_MAX_DIMS ? CKPT_MAX_DIMS
                                                       : a->ndim;
    return cmp_dims(2 * n, a->box, b->box);
}

/* Box (row-major order of offsets), then writer, then input order: a
 * total order that does not depend on the input order except among
 * replicas of one writer. */
static int cmp_entry(const void *va, const void *vb)
{
    const entry *a = va, *b = vb;
    int c = cmp_entry_box(a, b);
    if (!c)
        c = a->wrank < b->wrank ? -1 : a->wrank > b->wrank;
    if (!c)
        c = a->i < b->i ? -1 : a->i > b->i;
    return c;
}

/* Copies the pieces idx[0..k) of one tensor into sorted entries. */
static int load_entries(planner *pl, const uint32_t *idx, size_t k)
{
    int nd = 0;
    for (size_t j = 0; j < k; j++) {
        int n = ckpt_pieces_ndims(&pl->tab->v[idx[j]]);
        nd = n > nd ? n : nd;
    }
    pl->stride = sizeof(entry) + 3 * (size_t)nd * sizeof(int64_t);
    if (ckpt_array_reserve((void **)&pl->ent, &pl->ent_cap, k * pl->stride,
                           1))
        return oom(pl);
    for (size_t j = 0; j < k; j++) {
        const ckpt_pieces_rec *r = &pl->tab->v[idx[j]];
        entry *e = ent_at(pl, j);
        int n = ckpt_pieces_ndims(r);
        uint32_t w = ckpt_pieces_writer(pl->tab, idx[j]);
        *e = (entry){ idx[j], ckpt_pieces_raw(pl->tab, idx[j]),
                      ckpt_pieces_hash(pl->tab, idx[j]), r->fqn, w,
                      rank_of(pl->wrank, pl->tab, w), r->ndim, r->dtype };
        if (n) {
            int64_t off[CKPT_MAX_DIMS];
            memcpy(e->box, ckpt_pieces_offsets(pl->tab, idx[j], off),
                   (size_t)n * sizeof *e->box);
            memcpy(e->box + n, ckpt_pieces_sizes(pl->tab, idx[j]),
                   (size_t)n * sizeof *e->box);
            memcpy(e->box + 2 * n, ckpt_pieces_shape(pl->tab, idx[j]),
                   (size_t)n * sizeof *e->box);
        }
    }
    qsort(pl->ent, k, pl->stride, cmp_entry);
    return 0;
}

/* Dtype, then shape (and ndim), of every piece against the first. */
static int check_agreement(const planner *pl, size_t k)
{
    pview a = ent_view(pl, 0);
    for (size_t j = 1; j < k; j++) {
        pview b = ent_view(pl, j);
        if (b.dtype != a.dtype)
            return ckpt_err(pl->err, -EINVAL, "tensor '%s': dtype %s "
                            "(writer %s) vs %s (writer %s)", a.fqn,
                            ckpt_dtype_name(a.dtype), writer_of(&a),
                            ckpt_dtype_name(b.dtype), writer_of(&b));
    }
    for (size_t j = 1; j < k; j++) {
        pview b = ent_view(pl, j);
        if (b.ndim == a.ndim && !cmp_dims(a.ndim, a.shape, b.shape))
            continue;
        char sa[DIMS_TEXT_CAP], sb[DIMS_TEXT_CAP];
        ckpt_shape_format_json(sa, sizeof sa, a.ndim, a.shape);
        ckpt_shape_format_json(sb, sizeof sb, b.ndim, b.shape);
        if (b.ndim != a.ndim)
            return ckpt_err(pl->err, -EINVAL, "tensor '%s': shape %s (%d "
                            "dims, writer %s) vs %s (%d dims, writer %s)",
                            a.fqn, sa, a.ndim, writer_of(&a), sb, b.ndim,
                            writer_of(&b));
        return ckpt_err(pl->err, -EINVAL, "tensor '%s': shape %s (writer %s) "
                        "vs %s (writer %s)", a.fqn, sa, writer_of(&a), sb,
                        writer_of(&b));
    }
    return 0;
}

/* The checks a piece must pass on its own, rule by rule over the tensor
 * so that the first problem reported does not depend on the input
 * order. */
static int check_group_pieces(const planner *pl, size_t k)
{
    pview first = ent_view(pl, 0);
    int rc = ckpt_fqn_check(first.fqn, pl->err);
    for (size_t j = 0; !rc && j < k; j++) {
        pview p = ent_view(pl, j);
        rc = check_kind(&p, pl->err);
    }
    if (!rc)
        rc = check_agreement(pl, k);
    if (!rc)
        rc = check_shape(&first, pl->err);
    for (size_t j = 0; !rc && j < k; j++) {
        pview p = ent_view(pl, j);
        rc = check_bounds(&p, pl->err);
    }
    for (size_t j = 0; !rc && j < k; j++) {
        pview p = ent_view(pl, j);
        rc = check_bytes(&p, pl->err);
    }
    return rc;
}

/* The distinct boxes of the sorted entries (replicas are adjacent). */
static int add_sets(planner *pl, size_t k)
{
    pl->nsets = 0;
    if (ckpt_array_reserve((void **)&pl->sets, &pl->sets_cap, k,
                           sizeof *pl->sets))
        return oom(pl);
    for (size_t j = 0; j < k; j++) {
        const entry *e = ent_at(pl, j);
        if (j > 0 && !cmp_entry_box(e, ent_at(pl, j - 1))) {
            pl->sets[pl->nsets - 1].end = j + 1;
            continue;
        }
        pl->sets[pl->nsets++] = (box_set){ j, j + 1, e->i, e->raw_bytes,
                                           e->box, e->box + e->ndim };
    }
    return 0;
}

static pview set_view(const planner *pl, const box_set *s)
{
    return ent_view(pl, s->start);
}

static int overlap_err(const planner *pl, const box_set *a, const box_set *b)
{
    if (a > b) {
        const box_set *t = a;
        a = b;
        b = t;
    }
    pview pa = set_view(pl, a), pb = set_view(pl, b);
    char ba[2 * DIMS_TEXT_CAP + 32], bb[2 * DIMS_TEXT_CAP + 32];
    fmt_box(ba, sizeof ba, pa.ndim, pa.offsets, pa.sizes);
    fmt_box(bb, sizeof bb, pb.ndim, pb.offsets, pb.sizes);
    if (pl->chunks)
        return ckpt_err(pl->err, -EINVAL, "tensor '%s': chunks %zu (%s) and "
                        "%zu (%s) overlap", pa.fqn, ent_at(pl, a->start)->i,
                        ba, ent_at(pl, b->start)->i, bb);
    return ckpt_err(pl->err, -EINVAL, "tensor '%s': pieces partly overlap: "
                    "%s (writer %s) and %s (writer %s)", pa.fqn, ba,
                    writer_of(&pa), bb, writer_of(&pb));
}

/* Number of distinct values in v[0..k) (sorts v). */
static size_t count_distinct(int64_t *v, size_t k)
{
    qsort(v, k, sizeof *v, cmp_i64);
    size_t n = 0;
    for (size_t j = 0; j < k; j++)
        n += j == 0 || v[j] != v[j - 1];
    return n;
}

/* The dimension with the most distinct offsets among the boxes: sweeping
 * along it keeps the fewest boxes active at once. */
static int sweep_dim(const box_set **bx, size_t k, int ndim, int64_t *tmp)
{
    int best = 0;
    size_t best_n = 0;
    for (int d = 0; d < ndim; d++) {
        for (size_t j = 0; j < k; j++)
            tmp[j] = bx[j]->off[d];
        size_t n = count_distinct(tmp, k);
        if (n > best_n) {
            best_n = n;
            best = d;
        }
    }
    return best;
}

static int cmp_sweep(const void *va, const void *vb)
{
    const sweep_item *a = va, *b = vb;
    if (a->lo != b->lo)
        return a->lo < b->lo ? -1 : 1;
    return a->set < b->set ? -1 : a->set > b->set;
}

static int boxes_meet(int ndim, const box_set *a, const box_set *b)
{
    int64_t o[CKPT_MAX_DIMS], s[CKPT_MAX_DIMS];
    return ckpt_box_intersect(ndim, a->off, a->size, b->off, b->size, o, s);
}

/* Sweeps the boxes bx[0..k) (non-empty, distinct) in order of their start
 * on dimension d, testing each against the boxes still open there. */
static int sweep(const planner *pl, const box_set **bx, size_t k, int ndim,
                 int d)
{
    sweep_item *it = pl->items;
    const box_set **active = pl->active;
    for (size_t j = 0; j < k; j++)
        it[j] = (sweep_item){ bx[j]->off[d], bx[j] };
    qsort(it, k, sizeof *it, cmp_sweep);
    size_t na = 0;
    for (size_t j = 0; j < k; j++) {
        const box_set *p = it[j].set;
        size_t w = 0;
        for (size_t a = 0; a < na; a++) {
            const box_set *q = active[a];
            if (q->off[d] + q->size[d] <= p->off[d])
                continue;   /* closed before p starts: drop it */
            if (boxes_meet(ndim, p, q))
                return overlap_err(pl, q, p);
            active[w++] = q;
        }
        na = w;
        active[na++] = p;
    }
    return 0;
}

/* Refuses two distinct boxes of the tensor that share an element. */
static int check_overlaps(planner *pl, int ndim)
{
    size_t m = pl->nsets, k = 0;
    if (ndim == 0 || m < 2)
        return 0;
    if (ckpt_array_reserve((void **)&pl->items, &pl->aux_cap, m,
                           sizeof *pl->items))
        return oom(pl);
    size_t cap = pl->aux_cap;
    /* active (and bx after it) and tmp are sized like items */
    const box_set **bx = realloc(pl->active, 2 * cap * sizeof *bx);
    if (!bx)
        return oom(pl);
    pl->active = bx;
    int64_t *tmp = realloc(pl->tmp, cap * sizeof *tmp);
    if (!tmp)
        return oom(pl);
    pl->tmp = tmp;
    bx = pl->active + cap;
    for (size_t s = 0; s < m; s++)
        if (ckpt_box_numel(ndim, pl->sets[s].size) > 0)
            bx[k++] = &pl->sets[s];
    return sweep(pl, bx, k, ndim, sweep_dim(bx, k, ndim, tmp));
}

static int check_replicas(const planner *pl, const box_set *s)
{
    pview a = ent_view(pl, s->start);
    for (size_t j = s->start + 1; j < s->end; j++) {
        pview b = ent_view(pl, j);
        if (b.data_hash == a.data_hash)
            continue;
        char box[2 * DIMS_TEXT_CAP + 32];
        fmt_box(box, sizeof box, a.ndim, a.offsets, a.sizes);
        /* Never "writer X vs writer X": one writer wrote it twice. */
        if (strcmp(writer_of(&a), writer_of(&b)) == 0)
            return ckpt_err(pl->err, -EINVAL, "tensor '%s': writer %s wrote "
                            "piece %s twice with different bytes (hash "
                            "%016llx and %016llx): write each piece once "
                            "(through a mount, a rank that runs again once "
                            "its earlier processes are gone replaces its "
                            "earlier pieces: docs/MOUNT.md, \"A rank runs "
                            "again\")", a.fqn, writer_of(&a), box,
                            (unsigned long long)a.data_hash,
                            (unsigned long long)b.data_hash);
        return ckpt_err(pl->err, -EINVAL, "tensor '%s': replicas of piece %s "
                        "have different bytes: writer %s (hash %016llx) vs "
                        "writer %s (hash %016llx)", a.fqn, box,
                        writer_of(&a), (unsigned long long)a.data_hash,
                        writer_of(&b), (unsigned long long)b.data_hash);
    }
    return 0;
}

/* ------------------------------------------------------------- coverage */

static int box_has_point(int ndim, const box_set *s, const int64_t *pt)
{
    for (int d = 0; d < ndim; d++)
        if (pt[d] < s->off[d] || pt[d] - s->off[d] >= s->size[d])
            return 0;
    return 1;
}

/* Fills cand[d*(m+1) ...] with the sorted distinct coordinates 0 and
 * offset+size (below the shape) of the boxes; ncand[d] their counts. */
static void hole_candidates(const planner *pl, const pview *p0,
                            int64_t *cand, size_t *ncand)
{
    size_t m = pl->nsets;
    for (int d = 0; d < p0->ndim; d++) {
        int64_t *c = cand + (size_t)d * (m + 1);
        size_t n = 0;
        c[n++] = 0;
        for (size_t s = 0; s < m; s++) {
            const box_set *b = &pl->sets[s];
            if (b->off[d] + b->size[d] < p0->shape[d])
                c[n++] = b->off[d] + b->size[d];
        }
        qsort(c, n, sizeof *c, cmp_i64);
        size_t u = 0;
        for (size_t j = 0; j < n; j++)
            if (j == 0 || c[j] != c[u - 1])
                c[u++] = c[j];
        ncand[d] = u;
    }
}

/* Looks for an element that no box of the tensor holds, trying in
 * row-major order only the points whose every coordinate is 0 or the end
 * of a box: the first uncovered element is such a point.  Returns 1 with
 * the point in pt, or 0 when the search budget runs out first. */
static int find_hole(const planner *pl, const pview *p0, int64_t *pt)
{
    int ndim = p0->ndim;
    size_t m = pl->nsets, ncand[CKPT_MAX_DIMS], at[CKPT_MAX_DIMS] = { 0 };
    int64_t *cand = malloc(((size_t)ndim * (m + 1) + 1) * sizeof *cand);
    if (!cand)
        return 0;
    hole_candidates(pl, p0, cand, ncand);
    int found = 0;
    for (uint64_t spent = 0; spent < HOLE_SEARCH_BUDGET && !found;) {
        for (int d = 0; d < ndim; d++)
            pt[d] = cand[(size_t)d * (m + 1) + at[d]];
        found = 1;
        for (size_t s = 0; s < m && found; s++, spent++)
            found = !box_has_point(ndim, &pl->sets[s], pt);
        int d = ndim - 1;
        while (d >= 0 && ++at[d] == ncand[d])
            at[d--] = 0;
        if (d < 0)
            break;
    }
    free(cand);
    return found;
}

static int cmp_name(const void *va, const void *vb)
{
    return strcmp(*(const char *const *)va, *(const char *const *)vb);
}

/* ", "-separated distinct writers of the tensor's entries [0, k), at most
 * a few named. */
static void list_writers(const planner *pl, size_t k, char *buf, size_t cap)
{
    const char **names = malloc(k * sizeof *names);
    buf[0] = '\0';
    if (!names)
        return;
    for (size_t j = 0; j < k; j++)
        names[j] = name_of(ckpt_pieces_str(pl->tab, ent_at(pl, j)->writer));
    qsort(names, k, sizeof *names, cmp_name);
    size_t o = 0, shown = 0, total = 0;
    for (size_t j = 0; j < k; j++) {
        if (j && !strcmp(names[j], names[j - 1]))
            continue;
        if (total++ < MAX_LISTED_WRITERS && o < cap) {
            o += (size_t)snprintf(buf + o, cap - o, "%s%s", shown ? ", " : "",
                                  names[j]);
            shown++;
        }
    }
    if (total > shown && o < cap)
        snprintf(buf + o, cap - o, " and %zu more", total - shown);
    free(names);
}

static int coverage_err(const planner *pl, size_t k, uint64_t covered,
                        uint64_t numel)
{
    pview p0 = ent_view(pl, 0);
    char shape[DIMS_TEXT_CAP], where[DIMS_TEXT_CAP + 64], writers[512];
    int64_t pt[CKPT_MAX_DIMS];
    ckpt_shape_format_json(shape, sizeof shape, p0.ndim, p0.shape);
    if (find_hole(pl, &p0, pt)) {
        char at[DIMS_TEXT_CAP];
        ckpt_shape_format_json(at, sizeof at, p0.ndim, pt);
        snprintf(where, sizeof where, "element %s is not covered", at);
    } else {
        snprintf(where, sizeof where, "some elements are not covered");
    }
    if (pl->chunks)
        return ckpt_err(pl->err, -EINVAL, "tensor '%s': its %zu chunks cover "
                        "%llu of %llu elements of shape %s; %s", p0.fqn,
                        pl->nsets, (unsigned long long)covered,
                        (unsigned long long)numel, shape, where);
    list_writers(pl, k, writers, sizeof writers);
    return ckpt_err(pl->err, -EINVAL, "tensor '%s': pieces cover %llu of "
                    "%llu elements of shape %s; %s (pieces from writers %s)",
                    p0.fqn, (unsigned long long)covered,
                    (unsigned long long)numel, shape, where, writers);
}

/* With no overlaps and every box in bounds, the boxes cover the tensor
 * exactly when their volumes add up to its element count. */
static int check_coverage(const planner *pl, size_t k)
{
    pview p0 = ent_view(pl, 0);
    uint64_t numel = ckpt_box_numel(p0.ndim, p0.shape), covered = 0;
    for (size_t s = 0; s < pl->nsets; s++)
        covered += ckpt_box_numel(p0.ndim, pl->sets[s].size);
    return covered == numel ? 0 : coverage_err(pl, k, covered, numel);
}

/* A committed tensor lists each box once: a chunk listed twice is a
 * damaged index, not a replica. */
static int check_no_replicas(const planner *pl)
{
    for (size_t s = 0; s < pl->nsets; s++) {
        const box_set *bs = &pl->sets[s];
        if (bs->end - bs->start < 2)
            continue;
        pview p = set_view(pl, bs);
        char box[2 * DIMS_TEXT_CAP + 32];
        fmt_box(box, sizeof box, p.ndim, p.offsets, p.sizes);
        size_t i = ent_at(pl, bs->start)->i, j = ent_at(pl, bs->start + 1)->i;
        return ckpt_err(pl->err, -EINVAL, "tensor '%s': chunks %zu and %zu "
                        "are the same box (%s)", p.fqn, i < j ? i : j,
                        i < j ? j : i, box);
    }
    return 0;
}

/* --------------------------------------------------------- replicas */

/* The replica with the smallest input index. */
static size_t first_replica(const planner *pl, const box_set *s)
{
    size_t keep = ent_at(pl, s->start)->i;
    for (size_t j = s->start + 1; j < s->end; j++)
        if (ent_at(pl, j)->i < keep)
            keep = ent_at(pl, j)->i;
    return keep;
}

static uint32_t brank_of(const planner *pl, size_t i)
{
    return rank_of(pl->brank, pl->tab, ckpt_pieces_writer(pl->tab, i));
}

/* Balance: a box with one piece counts for its writer now; a replicated
 * one is placed once every tensor is checked (keep_balanced). */
static int note_for_balance(planner *pl, const box_set *s, size_t tensor,
                            size_t chunk)
{
    if (s->end - s->start == 1) {
        pl->kept[rank_of(pl->brank, pl->tab, ent_at(pl, s->start)->writer)] +=
            s->bytes;
        return 0;
    }
    size_t m = s->end - s->start;
    if (ckpt_array_reserve((void **)&pl->reps, &pl->reps_cap, pl->nreps + 1,
                           sizeof *pl->reps) ||
        ckpt_array_reserve((void **)&pl->rep_i, &pl->rep_i_cap,
                           pl->nrep_i + m, sizeof *pl->rep_i))
        return oom(pl);
    pl->reps[pl->nreps++] = (rep_set){ tensor, chunk, pl->nrep_i,
                                       pl->nrep_i + m, s->bytes };
    for (size_t j = s->start; j < s->end; j++)
        pl->rep_i[pl->nrep_i++] = ent_at(pl, j)->i;
    return 0;
}

/* Replicated boxes, largest first, then in plan order. */
static int cmp_rep_size(const void *va, const void *vb)
{
    const rep_set *a = *(rep_set *const *)va, *b = *(rep_set *const *)vb;
    if (a->bytes != b->bytes)
        return a->bytes > b->bytes ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* Keeps, for each replicated box, the replica whose writer holds the fewest
 * kept bytes so far (ties: the smallest input index): boxes with one piece
 * were counted first, replicated boxes are placed largest first (greedy,
 * deterministic). */
static int keep_balanced(planner *pl)
{
    rep_set **order = malloc((pl->nreps + 1) * sizeof *order);
    if (!order)
        return oom(pl);
    for (size_t r = 0; r < pl->nreps; r++)
        order[r] = &pl->reps[r];
    qsort(order, pl->nreps, sizeof *order, cmp_rep_size);
    for (size_t r = 0; r < pl->nreps; r++) {
        const rep_set *rs = order[r];
        size_t best = pl->rep_i[rs->m0];
        uint64_t best_kept = pl->kept[brank_of(pl, best)];
        for (size_t m = rs->m0 + 1; m < rs->m1; m++) {
            size_t i = pl->rep_i[m];
            uint64_t kept = pl->kept[brank_of(pl, i)];
            if (kept < best_kept || (kept == best_kept && i < best)) {
                best = i;
                best_kept = kept;
            }
        }
        pl->kept[brank_of(pl, best)] += rs->bytes;
        pl->out->tensors[rs->tensor].chunks[rs->chunk] = (uint32_t)best;
        for (size_t m = rs->m0; m < rs->m1; m++)
            pl->out->kept_as[pl->rep_i[m]] = (uint32_t)best;
    }
    free(order);
    return 0;
}

/* ------------------------------------------------------------ the build */

/* Records the kept pieces of the checked tensor as plan tensor t. */
static int emit_tensor(planner *pl, size_t t)
{
    ckpt_plan_tensor *pt = &pl->out->tensors[t];
    size_t i0 = ent_at(pl, 0)->i;
    const ckpt_pieces_rec *r = &pl->tab->v[i0];
    pt->chunks = malloc((pl->nsets + 1) * sizeof *pt->chunks);
    if (!pt->chunks)
        return oom(pl);
    pl->out->ntensors = t + 1;
    pt->fqn = ckpt_pieces_str(pl->tab, r->fqn);
    pt->dtype = (ckpt_dtype)r->dtype;
    pt->ndim = r->ndim;
    pt->shape = ckpt_pieces_shape(pl->tab, i0);
    pt->nchunks = pl->nsets;
    for (size_t s = 0; s < pl->nsets; s++) {
        box_set *bs = &pl->sets[s];
        if (!pl->opts->balance_replicas)
            bs->keep = first_replica(pl, bs);
        else if (note_for_balance(pl, bs, t, s))
            return -ENOMEM;
        pt->chunks[s] = (uint32_t)bs->keep;
        for (size_t j = bs->start; j < bs->end; j++)
            pl->out->kept_as[ent_at(pl, j)->i] = (uint32_t)bs->keep;
    }
    return 0;
}

/* Checks the pieces idx[0..k) of one tensor, leaving its distinct boxes
 * in pl->sets. */
static int check_tensor(planner *pl, const uint32_t *idx, size_t k)
{
    int rc = load_entries(pl, idx, k);
    if (rc)
        return rc;
    rc = check_group_pieces(pl, k);
    if (rc == -EOVERFLOW) {   /* plan.h: every refusal is -EINVAL */
        if (pl->err)
            pl->err->code = -EINVAL;
        return -EINVAL;
    }
    if (!rc)
        rc = add_sets(pl, k);
    if (!rc && pl->chunks)
        rc = check_no_replicas(pl);
    if (!rc)
        rc = check_overlaps(pl, ent_at(pl, 0)->ndim);
    for (size_t s = 0; !rc && s < pl->nsets; s++)
        if (pl->opts->check_replica_hashes)
            rc = check_replicas(pl, &pl->sets[s]);
    if (!rc)
        rc = check_coverage(pl, k);
    return rc;
}

/* Checks the pieces idx[0..k) of one tensor and records it as plan
 * tensor t. */
static int plan_tensor(planner *pl, const uint32_t *idx, size_t k,
                       size_t t)
{
    int rc = check_tensor(pl, idx, k);
    return rc ? rc : emit_tensor(pl, t);
}

/* Groups the pieces by fqn (a counting sort on the rank of their fqn) and
 * plans the tensors in fqn order. */
static int plan_tensors(planner *pl)
{
    const ckpt_pieces *tab = pl->tab;
    uint32_t *frank = malloc(((size_t)tab->nstr + 1) * sizeof *frank);
    uint32_t *order = malloc(pl->n * sizeof *order);
    size_t *start = NULL;
    uint32_t nt = 0;
    int rc = 0;
    if (!frank || !order ||
        !(nt = rank_strings(tab, fqn_id, sort_key,
                            frank)) ||
        !(start = calloc((size_t)nt + 1, sizeof *start)) ||
        !(pl->out->tensors = calloc(nt, sizeof *pl->out->tensors)))
        rc = oom(pl);
    for (size_t i = 0; !rc && i < pl->n; i++)
        start[rank_of(frank, tab, tab->v[i].fqn) + 1]++;
    for (uint32_t t = 0; !rc && t < nt; t++)
        start[t + 1] += start[t];
    for (size_t i = 0; !rc && i < pl->n; i++)
        order[start[rank_of(frank, tab, tab->v[i].fqn)]++] = (uint32_t)i;
    /* start[t] is now the end of tensor t's pieces */
    for (uint32_t t = 0; !rc && t < nt; t++) {
        size_t a = t ? start[t - 1] : 0;
        rc = plan_tensor(pl, order + a, start[t] - a, t);
    }
    free(frank);
    free(order);
    free(start);
    return rc;
}

static int planner_init(planner *pl)
{
    const ckpt_pieces *tab = pl->tab;
    size_t ns = (size_t)tab->nstr + 1;
    pl->wrank = malloc(ns * sizeof *pl->wrank);
    pl->out->kept_as = malloc(pl->n * sizeof *pl->out->kept_as);
    if (!pl->wrank || !pl->out->kept_as ||
        !rank_strings(tab, ckpt_pieces_writer, sort_key,
                      pl->wrank))
        return oom(pl);
    pl->out->npieces = pl->n;
    if (!pl->opts->balance_replicas)
        return 0;
    /* Writers by name: NULL, "" and "unnamed" are one writer. */
    pl->brank = malloc(ns * sizeof *pl->brank);
    uint32_t nb = 0;
    if (!pl->brank ||
        !(nb = rank_strings(tab, ckpt_pieces_writer, name_of,
                            pl->brank)) ||
        !(pl->kept = calloc(nb, sizeof *pl->kept)))
        return oom(pl);
    return 0;
}

static void planner_free(planner *pl)
{
    free(pl->wrank);
    free(pl->brank);
    free(pl->kept);
    free(pl->ent);
    free(pl->sets);
    free(pl->items);
    free(pl->active);
    free(pl->tmp);
    free(pl->reps);
    free(pl->rep_i);
}

int ckpt_plan_build_pieces(const ckpt_pieces *tab, const ckpt_plan_opts *opts,
                           ckpt_plan *out, ckpt_error *err)
{
    static const ckpt_plan_opts defaults;
    memset(out, 0, sizeof *out);
    if (tab->n == 0)
        return 0;
    if (tab->n >= CKPT_PLAN_MAX_PIECES)   /* numbered in 32 bits */
        return ckpt_err(err, -ENOMEM, "planner: %zu pieces, more than a "
                        "plan can number", tab->n);
    planner pl = { .tab = tab, .n = tab->n, .opts = opts ? opts : &defaults,
                   .out = out, .err = err };
    int rc = planner_init(&pl);
    if (!rc)
        rc = plan_tensors(&pl);
    if (!rc && pl.opts->balance_replicas)
        rc = keep_balanced(&pl);
    planner_free(&pl);
    if (rc)
        ckpt_plan_free(out);
    return rc;
}

int ckpt_plan_build(const ckpt_piece_rec *pieces, size_t n,
                    const ckpt_plan_opts *opts, ckpt_plan *out,
                    ckpt_error *err)
{
    ckpt_pieces tab;
    ckpt_pieces_init(&tab);
    memset(out, 0, sizeof *out);
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i++)
        if (ckpt_pieces_add(&tab, &pieces[i]))
            rc = ckpt_err(err, -ENOMEM, "planner: out of memory");
    if (!rc)
        rc = ckpt_plan_build_pieces(&tab, opts, out, err);
    /* The plan points into the caller's pieces, not the table. */
    for (size_t t = 0; !rc && t < out->ntensors; t++) {
        const ckpt_piece_rec *p = &pieces[out->tensors[t].chunks[0]];
        out->tensors[t].fqn = p->fqn;
        out->tensors[t].shape = p->shape;
    }
    ckpt_pieces_free(&tab);
    return rc;
}

int ckpt_plan_check_chunks_pieces(const ckpt_pieces *tab, ckpt_error *err)
{
    static const ckpt_plan_opts defaults;
    size_t n = tab->n;
    if (n == 0)
        return 0;
    const char *fqn0 = sort_key(ckpt_pieces_str(tab, tab->v[0].fqn));
    for (size_t i = 1; i < n; i++) {
        const char *fqn = sort_key(ckpt_pieces_str(tab, tab->v[i].fqn));
        if (strcmp(fqn, fqn0))
            return ckpt_err(err, -EINVAL, "chunks of tensor '%s' and of '%s' "
                            "checked together", fqn0, fqn);
    }
    ckpt_plan unused = { 0 };
    uint32_t *idx = malloc(n * sizeof *idx);
    planner pl = { .tab = tab, .n = n, .opts = &defaults, .out = &unused,
                   .chunks = 1, .err = err };
    int rc = idx ? planner_init(&pl)
                 : ckpt_err(err, -ENOMEM, "planner: out of memory");
    if (!rc && n >= CKPT_PLAN_MAX_PIECES)
        rc = ckpt_err(err, -ENOMEM, "planner: %zu chunks, more than a plan "
                      "can number", n);
    for (size_t i = 0; !rc && i < n; i++)
        idx[i] = (uint32_t)i;
    if (!rc)
        rc = check_tensor(&pl, idx, n);
    planner_free(&pl);
    ckpt_plan_free(&unused);
    free(idx);
    return rc;
}

int ckpt_plan_check_chunks(const ckpt_piece_rec *chunks, size_t n,
                           ckpt_error *err)
{
    ckpt_pieces tab;
    ckpt_pieces_init(&tab);
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i++)
        if (ckpt_pieces_add(&tab, &chunks[i]))
            rc = ckpt_err(err, -ENOMEM, "planner: out of memory");
    if (!rc)
        rc = ckpt_plan_check_chunks_pieces(&tab, err);
    ckpt_pieces_free(&tab);
    return rc;
}

void ckpt_plan_free(ckpt_plan *p)
{
    if (!p)
        return;
    for (size_t t = 0; t < p->ntensors; t++)
        free(p->tensors[t].chunks);
    free(p->tensors);
    free(p->kept_as);
    memset(p, 0, sizeof *p);
}
