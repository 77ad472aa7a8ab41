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
#include "plan.h"
#include "error.h"
#include "region.h"
#include "shape.h"

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

static const char *writer_of(const ckpt_piece_rec *p)
{
    return p->writer && *p->writer ? p->writer : "unnamed";
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
static int check_kind(const ckpt_piece_rec *p, ckpt_error *err)
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
static int check_shape(const ckpt_piece_rec *p, ckpt_error *err)
{
    char what[320];
    snprintf(what, sizeof what, "tensor '%.200s' (writer %.64s)", p->fqn,
             writer_of(p));
    uint64_t nbytes;
    return ckpt_shape_nbytes(p->dtype, p->ndim, p->shape, &nbytes, what, err);
}

static int check_bounds(const ckpt_piece_rec *p, ckpt_error *err)
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
static int check_bytes(const ckpt_piece_rec *p, ckpt_error *err)
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
int ckpt_plan_check_piece(const ckpt_piece_rec *p, ckpt_error *err)
{
    int rc = ckpt_fqn_check(p->fqn, err);
    if (!rc)
        rc = check_kind(p, err);
    if (!rc)
        rc = check_shape(p, err);
    if (!rc)
        rc = check_bounds(p, err);
    return rc;
}

/* --------------------------------------------------------------- sorting */

/* A piece with its input index, so comparators need no context. */
typedef struct pref {
    const ckpt_piece_rec *p;
    size_t i;
} pref;

static int clamp_ndim(int ndim)
{
    return ndim < 0 ? 0 : ndim > CKPT_MAX_DIMS ? CKPT_MAX_DIMS : ndim;
}

static int cmp_str(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "");
}

static int cmp_dims(int n, const int64_t *a, const int64_t *b)
{
    for (int d = 0; d < n; d++)
        if (a[d] != b[d])
            return a[d] < b[d] ? -1 : 1;
    return 0;
}

/* Same box: same ndim, offsets and sizes. */
static int cmp_box(const ckpt_piece_rec *a, const ckpt_piece_rec *b)
{
    if (a->ndim != b->ndim)
        return a->ndim < b->ndim ? -1 : 1;
    int n = clamp_ndim(a->ndim);
    int c = cmp_dims(n, a->offsets, b->offsets);
    return c ? c : cmp_dims(n, a->sizes, b->sizes);
}

/* fqn, then box (row-major order of offsets), then writer, then input
 * order: a total order that does not depend on the input order except
 * among replicas of one writer. */
static int cmp_pref(const void *va, const void *vb)
{
    const pref *a = va, *b = vb;
    int c = cmp_str(a->p->fqn, b->p->fqn);
    if (!c)
        c = cmp_box(a->p, b->p);
    if (!c)
        c = cmp_str(a->p->writer, b->p->writer);
    if (!c)
        c = a->i < b->i ? -1 : a->i > b->i;
    return c;
}

/* ------------------------------------------------------- per tensor */

/* A distinct box of a tensor: refs[start, end) are its replicas. */
typedef struct box_set {
    size_t start, end;
    size_t keep;        /* input index of the kept replica */
    uint64_t bytes;     /* raw bytes of one replica */
} box_set;

/* Work area of one ckpt_plan_build call. */
typedef struct planner {
    const ckpt_piece_rec *pieces;
    size_t n;
    const ckpt_plan_opts *opts;
    pref *refs;          /* sorted */
    box_set *sets;       /* all tensors' distinct boxes, in order */
    size_t nsets;
    size_t *tset;        /* per tensor: first set; tset[ntensors] = nsets */
    size_t ntensors;
    int chunks;          /* checking a committed tensor's chunks: pieces
                            are named by position, replicas refused */
    ckpt_error *err;
} planner;

/* Dtype, then shape (and ndim), of every piece against the first. */
static int check_agreement(const pref *g, size_t k, ckpt_error *err)
{
    const ckpt_piece_rec *a = g[0].p;
    for (size_t j = 1; j < k; j++) {
        const ckpt_piece_rec *b = g[j].p;
        if (b->dtype != a->dtype)
            return ckpt_err(err, -EINVAL, "tensor '%s': dtype %s (writer %s) "
                            "vs %s (writer %s)", a->fqn,
                            ckpt_dtype_name(a->dtype), writer_of(a),
                            ckpt_dtype_name(b->dtype), writer_of(b));
    }
    for (size_t j = 1; j < k; j++) {
        const ckpt_piece_rec *b = g[j].p;
        if (b->ndim == a->ndim && !cmp_dims(a->ndim, a->shape, b->shape))
            continue;
        char sa[DIMS_TEXT_CAP], sb[DIMS_TEXT_CAP];
        ckpt_shape_format_json(sa, sizeof sa, a->ndim, a->shape);
        ckpt_shape_format_json(sb, sizeof sb, b->ndim, b->shape);
        if (b->ndim != a->ndim)
            return ckpt_err(err, -EINVAL, "tensor '%s': shape %s (%d dims, "
                            "writer %s) vs %s (%d dims, writer %s)", a->fqn,
                            sa, a->ndim, writer_of(a), sb, b->ndim,
                            writer_of(b));
        return ckpt_err(err, -EINVAL, "tensor '%s': shape %s (writer %s) vs "
                        "%s (writer %s)", a->fqn, sa, writer_of(a), sb,
                        writer_of(b));
    }
    return 0;
}

/* The checks a piece must pass on its own, rule by rule over the group so
 * that the first problem reported does not depend on the input order. */
static int check_group_pieces(const pref *g, size_t k, ckpt_error *err)
{
    int rc = ckpt_fqn_check(g[0].p->fqn, err);
    for (size_t j = 0; !rc && j < k; j++)
        rc = check_kind(g[j].p, err);
    if (!rc)
        rc = check_agreement(g, k, err);
    if (!rc)
        rc = check_shape(g[0].p, err);
    for (size_t j = 0; !rc && j < k; j++)
        rc = check_bounds(g[j].p, err);
    for (size_t j = 0; !rc && j < k; j++)
        rc = check_bytes(g[j].p, err);
    return rc;
}

static const ckpt_piece_rec *set_piece(const planner *pl, const box_set *s)
{
    return pl->refs[s->start].p;
}

static int overlap_err(const planner *pl, const box_set *a, const box_set *b)
{
    if (a > b) {
        const box_set *t = a;
        a = b;
        b = t;
    }
    const ckpt_piece_rec *pa = set_piece(pl, a), *pb = set_piece(pl, b);
    char ba[2 * DIMS_TEXT_CAP + 32], bb[2 * DIMS_TEXT_CAP + 32];
    fmt_box(ba, sizeof ba, pa->ndim, pa->offsets, pa->sizes);
    fmt_box(bb, sizeof bb, pb->ndim, pb->offsets, pb->sizes);
    if (pl->chunks)
        return ckpt_err(pl->err, -EINVAL, "tensor '%s': chunks %zu (%s) and "
                        "%zu (%s) overlap", pa->fqn, pl->refs[a->start].i, ba,
                        pl->refs[b->start].i, bb);
    return ckpt_err(pl->err, -EINVAL, "tensor '%s': pieces partly overlap: "
                    "%s (writer %s) and %s (writer %s)", pa->fqn, ba,
                    writer_of(pa), bb, writer_of(pb));
}

static int cmp_i64(const void *va, const void *vb)
{
    int64_t a = *(const int64_t *)va, b = *(const int64_t *)vb;
    return a < b ? -1 : a > b;
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
static int sweep_dim(const planner *pl, const box_set **bx, size_t k,
                     int ndim, int64_t *tmp)
{
    int best = 0;
    size_t best_n = 0;
    for (int d = 0; d < ndim; d++) {
        for (size_t j = 0; j < k; j++)
            tmp[j] = set_piece(pl, bx[j])->offsets[d];
        size_t n = count_distinct(tmp, k);
        if (n > best_n) {
            best_n = n;
            best = d;
        }
    }
    return best;
}

typedef struct sweep_item {
    int64_t lo;
    const box_set *set;
} sweep_item;

static int cmp_sweep(const void *va, const void *vb)
{
    const sweep_item *a = va, *b = vb;
    if (a->lo != b->lo)
        return a->lo < b->lo ? -1 : 1;
    return a->set < b->set ? -1 : a->set > b->set;
}

static int boxes_meet(const ckpt_piece_rec *a, const ckpt_piece_rec *b)
{
    int64_t o[CKPT_MAX_DIMS], s[CKPT_MAX_DIMS];
    return ckpt_box_intersect(a->ndim, a->offsets, a->sizes, b->offsets,
                              b->sizes, o, s);
}

/* Sweeps the boxes bx[0..k) (non-empty, distinct) in order of their start
 * on dimension d, testing each against the boxes still open there. */
static int sweep(const planner *pl, const box_set **bx, size_t k, int d,
                 sweep_item *it, const box_set **active)
{
    for (size_t j = 0; j < k; j++)
        it[j] = (sweep_item){ set_piece(pl, bx[j])->offsets[d], bx[j] };
    qsort(it, k, sizeof *it, cmp_sweep);
    size_t na = 0;
    for (size_t j = 0; j < k; j++) {
        const ckpt_piece_rec *p = set_piece(pl, it[j].set);
        size_t w = 0;
        for (size_t a = 0; a < na; a++) {
            const ckpt_piece_rec *q = set_piece(pl, active[a]);
            if (q->offsets[d] + q->sizes[d] <= p->offsets[d])
                continue;   /* closed before p starts: drop it */
            if (boxes_meet(p, q))
                return overlap_err(pl, active[a], it[j].set);
            active[w++] = active[a];
        }
        na = w;
        active[na++] = it[j].set;
    }
    return 0;
}

/* Refuses two distinct boxes of sets[s0, s1) that share an element. */
static int check_overlaps(const planner *pl, size_t s0, size_t s1)
{
    int ndim = set_piece(pl, &pl->sets[s0])->ndim;
    size_t k = 0, m = s1 - s0;
    if (ndim == 0 || m < 2)
        return 0;
    const box_set **bx = malloc(2 * m * sizeof *bx);
    sweep_item *it = malloc(m * sizeof *it);
    int64_t *tmp = malloc(m * sizeof *tmp);
    int rc = -ENOMEM;
    if (!bx || !it || !tmp) {
        ckpt_err(pl->err, rc, "planner: out of memory");
        goto out;
    }
    for (size_t s = s0; s < s1; s++)
        if (ckpt_box_numel(ndim, set_piece(pl, &pl->sets[s])->sizes) > 0)
            bx[k++] = &pl->sets[s];
    rc = sweep(pl, bx, k, sweep_dim(pl, bx, k, ndim, tmp), it, bx + m);
out:
    free(bx);
    free(it);
    free(tmp);
    return rc;
}

static int check_replicas(const planner *pl, const box_set *s)
{
    const ckpt_piece_rec *a = pl->refs[s->start].p;
    for (size_t j = s->start + 1; j < s->end; j++) {
        const ckpt_piece_rec *b = pl->refs[j].p;
        if (b->data_hash == a->data_hash)
            continue;
        char box[2 * DIMS_TEXT_CAP + 32];
        fmt_box(box, sizeof box, a->ndim, a->offsets, a->sizes);
        return ckpt_err(pl->err, -EINVAL, "tensor '%s': replicas of piece %s "
                        "have different bytes: writer %s (hash %016llx) vs "
                        "writer %s (hash %016llx)", a->fqn, box,
                        writer_of(a), (unsigned long long)a->data_hash,
                        writer_of(b), (unsigned long long)b->data_hash);
    }
    return 0;
}

/* ------------------------------------------------------------- coverage */

static int box_has_point(const ckpt_piece_rec *p, const int64_t *pt)
{
    for (int d = 0; d < p->ndim; d++)
        if (pt[d] < p->offsets[d] || pt[d] - p->offsets[d] >= p->sizes[d])
            return 0;
    return 1;
}

/* Fills cand[d*(m+1) ...] with the sorted distinct coordinates 0 and
 * offset+size (below the shape) of the boxes; ncand[d] their counts. */
static void hole_candidates(const planner *pl, size_t s0, size_t s1,
                            int64_t *cand, size_t *ncand)
{
    const ckpt_piece_rec *p0 = set_piece(pl, &pl->sets[s0]);
    size_t m = s1 - s0;
    for (int d = 0; d < p0->ndim; d++) {
        int64_t *c = cand + (size_t)d * (m + 1);
        size_t n = 0;
        c[n++] = 0;
        for (size_t s = s0; s < s1; s++) {
            const ckpt_piece_rec *p = set_piece(pl, &pl->sets[s]);
            if (p->offsets[d] + p->sizes[d] < p0->shape[d])
                c[n++] = p->offsets[d] + p->sizes[d];
        }
        qsort(c, n, sizeof *c, cmp_i64);
        size_t u = 0;
        for (size_t j = 0; j < n; j++)
            if (j == 0 || c[j] != c[u - 1])
                c[u++] = c[j];
        ncand[d] = u;
    }
}

/* Looks for an element that no box of sets[s0, s1) holds, trying in
 * row-major order only the points whose every coordinate is 0 or the end
 * of a box: the first uncovered element is such a point.  Returns 1 with
 * the point in pt, or 0 when the search budget runs out first. */
static int find_hole(const planner *pl, size_t s0, size_t s1, int64_t *pt)
{
    int ndim = set_piece(pl, &pl->sets[s0])->ndim;
    size_t m = s1 - s0, ncand[CKPT_MAX_DIMS], at[CKPT_MAX_DIMS] = { 0 };
    int64_t *cand = malloc(((size_t)ndim * (m + 1) + 1) * sizeof *cand);
    if (!cand)
        return 0;
    hole_candidates(pl, s0, s1, cand, ncand);
    int found = 0;
    for (uint64_t spent = 0; spent < HOLE_SEARCH_BUDGET && !found;) {
        for (int d = 0; d < ndim; d++)
            pt[d] = cand[(size_t)d * (m + 1) + at[d]];
        found = 1;
        for (size_t s = s0; s < s1 && found; s++, spent++)
            found = !box_has_point(set_piece(pl, &pl->sets[s]), pt);
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

/* ", "-separated distinct writers of refs[a, b), at most a few named. */
static void list_writers(const planner *pl, size_t a, size_t b, char *buf,
                         size_t cap)
{
    const char **names = malloc((b - a) * sizeof *names);
    buf[0] = '\0';
    if (!names)
        return;
    for (size_t j = a; j < b; j++)
        names[j - a] = writer_of(pl->refs[j].p);
    qsort(names, b - a, sizeof *names, cmp_name);
    size_t o = 0, shown = 0, total = 0;
    for (size_t j = 0; j < b - a; j++) {
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

static int coverage_err(const planner *pl, size_t s0, size_t s1,
                        uint64_t covered, uint64_t numel)
{
    const ckpt_piece_rec *p0 = set_piece(pl, &pl->sets[s0]);
    char shape[DIMS_TEXT_CAP], where[DIMS_TEXT_CAP + 64], writers[512];
    int64_t pt[CKPT_MAX_DIMS];
    ckpt_shape_format_json(shape, sizeof shape, p0->ndim, p0->shape);
    if (find_hole(pl, s0, s1, pt)) {
        char at[DIMS_TEXT_CAP];
        ckpt_shape_format_json(at, sizeof at, p0->ndim, pt);
        snprintf(where, sizeof where, "element %s is not covered", at);
    } else {
        snprintf(where, sizeof where, "some elements are not covered");
    }
    if (pl->chunks)
        return ckpt_err(pl->err, -EINVAL, "tensor '%s': its %zu chunks cover "
                        "%llu of %llu elements of shape %s; %s", p0->fqn,
                        s1 - s0, (unsigned long long)covered,
                        (unsigned long long)numel, shape, where);
    list_writers(pl, pl->sets[s0].start, pl->sets[s1 - 1].end, writers,
                 sizeof writers);
    return ckpt_err(pl->err, -EINVAL, "tensor '%s': pieces cover %llu of "
                    "%llu elements of shape %s; %s (pieces from writers %s)",
                    p0->fqn, (unsigned long long)covered,
                    (unsigned long long)numel, shape, where, writers);
}

/* With no overlaps and every box in bounds, the boxes cover the tensor
 * exactly when their volumes add up to its element count. */
static int check_coverage(const planner *pl, size_t s0, size_t s1)
{
    const ckpt_piece_rec *p0 = set_piece(pl, &pl->sets[s0]);
    uint64_t numel = ckpt_box_numel(p0->ndim, p0->shape), covered = 0;
    for (size_t s = s0; s < s1; s++) {
        const ckpt_piece_rec *p = set_piece(pl, &pl->sets[s]);
        covered += ckpt_box_numel(p->ndim, p->sizes);
    }
    return covered == numel ? 0 : coverage_err(pl, s0, s1, covered, numel);
}

/* ------------------------------------------------------------ the build */

/* Appends the distinct boxes of refs[a, b) (replicas are adjacent). */
static void add_sets(planner *pl, size_t a, size_t b)
{
    for (size_t j = a; j < b; j++) {
        if (j > a && !cmp_box(pl->refs[j].p, pl->refs[j - 1].p)) {
            pl->sets[pl->nsets - 1].end = j + 1;
            continue;
        }
        pl->sets[pl->nsets++] =
            (box_set){ j, j + 1, pl->refs[j].i, pl->refs[j].p->raw_bytes };
    }
}

/* A committed tensor lists each box once: a chunk listed twice is a
 * damaged index, not a replica. */
static int check_no_replicas(const planner *pl, size_t s0, size_t s1)
{
    for (size_t s = s0; s < s1; s++) {
        const box_set *bs = &pl->sets[s];
        if (bs->end - bs->start < 2)
            continue;
        const ckpt_piece_rec *p = set_piece(pl, bs);
        char box[2 * DIMS_TEXT_CAP + 32];
        fmt_box(box, sizeof box, p->ndim, p->offsets, p->sizes);
        size_t i = pl->refs[bs->start].i, j = pl->refs[bs->start + 1].i;
        return ckpt_err(pl->err, -EINVAL, "tensor '%s': chunks %zu and %zu "
                        "are the same box (%s)", p->fqn, i < j ? i : j,
                        i < j ? j : i, box);
    }
    return 0;
}

static int check_tensor(planner *pl, size_t a, size_t b)
{
    int rc = check_group_pieces(pl->refs + a, b - a, pl->err);
    if (rc == -EOVERFLOW) {   /* plan.h: every refusal is -EINVAL */
        if (pl->err)
            pl->err->code = -EINVAL;
        return -EINVAL;
    }
    if (rc)
        return rc;
    size_t s0 = pl->nsets;
    add_sets(pl, a, b);
    if (pl->chunks)
        rc = check_no_replicas(pl, s0, pl->nsets);
    if (!rc)
        rc = check_overlaps(pl, s0, pl->nsets);
    for (size_t s = s0; !rc && s < pl->nsets; s++)
        if (pl->opts->check_replica_hashes)
            rc = check_replicas(pl, &pl->sets[s]);
    if (!rc)
        rc = check_coverage(pl, s0, pl->nsets);
    return rc;
}

static int check_tensors(planner *pl)
{
    for (size_t a = 0, b; a < pl->n; a = b) {
        for (b = a + 1; b < pl->n; b++)
            if (cmp_str(pl->refs[b].p->fqn, pl->refs[a].p->fqn))
                break;
        pl->tset[pl->ntensors++] = pl->nsets;
        int rc = check_tensor(pl, a, b);
        if (rc)
            return rc;
    }
    pl->tset[pl->ntensors] = pl->nsets;
    return 0;
}

/* --------------------------------------------------------- replicas */

/* The replica with the smallest input index. */
static void keep_first(planner *pl, box_set *s)
{
    s->keep = pl->refs[s->start].i;
    for (size_t j = s->start + 1; j < s->end; j++)
        if (pl->refs[j].i < s->keep)
            s->keep = pl->refs[j].i;
}

typedef struct balance {
    const char **names;    /* sorted distinct writer names */
    size_t nnames;
    uint64_t *kept;        /* bytes kept per name */
} balance;

static size_t writer_id(const balance *bl, const ckpt_piece_rec *p)
{
    const char *w = writer_of(p);
    const char **hit = bsearch(&w, bl->names, bl->nnames, sizeof *bl->names,
                               cmp_name);
    return (size_t)(hit - bl->names);
}

static int balance_init(balance *bl, const planner *pl)
{
    bl->names = malloc(pl->n * sizeof *bl->names);
    bl->kept = calloc(pl->n, sizeof *bl->kept);
    if (!bl->names || !bl->kept)
        return ckpt_err(pl->err, -ENOMEM, "planner: out of memory");
    for (size_t j = 0; j < pl->n; j++)
        bl->names[j] = writer_of(&pl->pieces[j]);
    qsort(bl->names, pl->n, sizeof *bl->names, cmp_name);
    bl->nnames = 0;
    for (size_t j = 0; j < pl->n; j++)
        if (!bl->nnames || strcmp(bl->names[j], bl->names[bl->nnames - 1]))
            bl->names[bl->nnames++] = bl->names[j];
    return 0;
}

/* Replica sets, largest first, then in plan order. */
static int cmp_set_size(const void *va, const void *vb)
{
    const box_set *a = *(box_set *const *)va, *b = *(box_set *const *)vb;
    if (a->bytes != b->bytes)
        return a->bytes > b->bytes ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* The replica in s whose writer holds the fewest kept bytes (ties: the
 * smallest input index). */
static size_t lightest_replica(const planner *pl, const balance *bl,
                               const box_set *s)
{
    size_t best = s->start;
    uint64_t best_kept = bl->kept[writer_id(bl, pl->refs[best].p)];
    for (size_t j = s->start + 1; j < s->end; j++) {
        uint64_t kept = bl->kept[writer_id(bl, pl->refs[j].p)];
        if (kept < best_kept ||
            (kept == best_kept && pl->refs[j].i < pl->refs[best].i)) {
            best = j;
            best_kept = kept;
        }
    }
    return best;
}

/* Keeps, for each replicated box, the replica whose writer holds the fewest
 * kept bytes so far: boxes with one piece are counted first, then
 * replicated boxes are placed largest first (greedy, deterministic). */
static int keep_balanced(planner *pl)
{
    balance bl = { 0 };
    box_set **rep = malloc(pl->nsets * sizeof *rep);
    int rc = balance_init(&bl, pl);
    if (!rc && !rep)
        rc = ckpt_err(pl->err, -ENOMEM, "planner: out of memory");
    size_t nrep = 0;
    for (size_t s = 0; !rc && s < pl->nsets; s++) {
        box_set *bs = &pl->sets[s];
        if (bs->end - bs->start == 1)
            bl.kept[writer_id(&bl, set_piece(pl, bs))] += bs->bytes;
        else
            rep[nrep++] = bs;
    }
    if (!rc)
        qsort(rep, nrep, sizeof *rep, cmp_set_size);
    for (size_t r = 0; !rc && r < nrep; r++) {
        size_t best = lightest_replica(pl, &bl, rep[r]);
        rep[r]->keep = pl->refs[best].i;
        bl.kept[writer_id(&bl, pl->refs[best].p)] += rep[r]->bytes;
    }
    free(rep);
    free(bl.names);
    free(bl.kept);
    return rc;
}

/* ------------------------------------------------------------- output */

static int emit(const planner *pl, ckpt_plan *out)
{
    out->tensors = calloc(pl->ntensors, sizeof *out->tensors);
    out->kept_as = malloc(pl->n * sizeof *out->kept_as);
    if (!out->tensors || !out->kept_as)
        return ckpt_err(pl->err, -ENOMEM, "planner: out of memory");
    out->npieces = pl->n;
    for (size_t t = 0; t < pl->ntensors; t++) {
        size_t s0 = pl->tset[t], s1 = pl->tset[t + 1];
        const ckpt_piece_rec *p0 = set_piece(pl, &pl->sets[s0]);
        ckpt_plan_tensor *pt = &out->tensors[out->ntensors];
        pt->chunks = malloc((s1 - s0) * sizeof *pt->chunks);
        if (!pt->chunks)
            return ckpt_err(pl->err, -ENOMEM, "planner: out of memory");
        out->ntensors++;
        pt->fqn = p0->fqn;
        pt->dtype = p0->dtype;
        pt->ndim = p0->ndim;
        pt->shape = p0->shape;
        pt->nchunks = s1 - s0;
        for (size_t s = s0; s < s1; s++) {
            const box_set *bs = &pl->sets[s];
            pt->chunks[s - s0] = bs->keep;
            for (size_t j = bs->start; j < bs->end; j++)
                out->kept_as[pl->refs[j].i] = bs->keep;
        }
    }
    return 0;
}

static int planner_init(planner *pl)
{
    pl->refs = malloc(pl->n * sizeof *pl->refs);
    pl->sets = malloc(pl->n * sizeof *pl->sets);
    pl->tset = malloc((pl->n + 1) * sizeof *pl->tset);
    if (!pl->refs || !pl->sets || !pl->tset)
        return ckpt_err(pl->err, -ENOMEM, "planner: out of memory");
    for (size_t j = 0; j < pl->n; j++)
        pl->refs[j] = (pref){ &pl->pieces[j], j };
    qsort(pl->refs, pl->n, sizeof *pl->refs, cmp_pref);
    return 0;
}

int ckpt_plan_build(const ckpt_piece_rec *pieces, size_t n,
                    const ckpt_plan_opts *opts, ckpt_plan *out,
                    ckpt_error *err)
{
    static const ckpt_plan_opts defaults;
    memset(out, 0, sizeof *out);
    if (n == 0)
        return 0;
    planner pl = { .pieces = pieces, .n = n, .opts = opts ? opts : &defaults,
                   .err = err };
    int rc = planner_init(&pl);
    if (!rc)
        rc = check_tensors(&pl);
    if (!rc && pl.opts->balance_replicas)
        rc = keep_balanced(&pl);
    for (size_t s = 0; !rc && !pl.opts->balance_replicas && s < pl.nsets; s++)
        keep_first(&pl, &pl.sets[s]);
    if (!rc)
        rc = emit(&pl, out);
    free(pl.refs);
    free(pl.sets);
    free(pl.tset);
    if (rc)
        ckpt_plan_free(out);
    return rc;
}

int ckpt_plan_check_chunks(const ckpt_piece_rec *chunks, size_t n,
                           ckpt_error *err)
{
    if (n == 0)
        return 0;
    planner pl = { .pieces = chunks, .n = n, .chunks = 1, .err = err };
    static const ckpt_plan_opts defaults;
    pl.opts = &defaults;
    int rc = planner_init(&pl);
    for (size_t i = 1; !rc && i < n; i++)
        if (cmp_str(chunks[i].fqn, chunks[0].fqn))
            rc = ckpt_err(err, -EINVAL, "chunks of tensor '%s' and of '%s' "
                          "checked together", chunks[0].fqn, chunks[i].fqn);
    if (!rc)
        rc = check_tensor(&pl, 0, n);
    free(pl.refs);
    free(pl.sets);
    free(pl.tset);
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
