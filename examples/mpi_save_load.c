/*
 * mpi_save_load.c - a model's parameters, sharded FSDP-style (dim 0) over
 * N MPI ranks, saved with one collective call, then loaded on a different
 * number of ranks with another.
 *
 *   mpirun -n 4 ./mpi_save_load save CKPT_DIR [LAYERS [DIM]]
 *   mpirun -n 3 ./mpi_save_load load CKPT_DIR
 *
 * save: each rank holds rows [lo, lo+n) of every 2-D parameter (as
 * numpy.array_split cuts them) and the whole of every norm vector (the same
 * on all ranks: replicas, written once), plus a small byte object with the
 * training step.  ckpt_mpi_save() checks, deduplicates, writes one shard per
 * rank in parallel and commits; every rank gets the same result.
 *
 * load: any number of ranks.  Each rank lists the checkpoint's tensors with
 * the (non-collective) reader API, asks ckpt_mpi_load() for its own dim-0
 * shard of each, and checks every value.  Values are a function of the
 * parameter and the element's global index, so no rank needs the saver's
 * layout: param p, element i is (p * 7919 + i) % 1000 / 1000.
 *
 * Build against the installed library:
 *   mpicc -std=c11 -O2 mpi_save_load.c $(pkg-config --cflags --libs ckptfs) \
 *       -o mpi_save_load
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ckptfs_mpi.h>

#define MAX_PARAMS 64

typedef struct param {
    char fqn[64];
    int ndim;
    int64_t shape[2];
} param;

/* A small transformer: per layer qkv, out, up, down, norm; final norm. */
static int model_params(param *p, int layers, int64_t d)
{
    int n = 0;
    for (int l = 0; l < layers && n + 5 <= MAX_PARAMS - 1; l++) {
        static const char *const names[] = { "attn.qkv", "attn.out",
                                             "mlp.up", "mlp.down" };
        static const int rows[] = { 3, 1, 4, 1 }, cols[] = { 1, 1, 1, 4 };
        for (int k = 0; k < 4; k++, n++) {
            snprintf(p[n].fqn, sizeof p[n].fqn, "model.layers.%d.%s.weight",
                     l, names[k]);
            p[n].ndim = 2;
            p[n].shape[0] = rows[k] * d;
            p[n].shape[1] = cols[k] * d;
        }
        snprintf(p[n].fqn, sizeof p[n].fqn, "model.layers.%d.norm.weight", l);
        p[n].ndim = 1;
        p[n++].shape[0] = d;
    }
    snprintf(p[n].fqn, sizeof p[n].fqn, "model.norm.weight");
    p[n].ndim = 1;
    p[n++].shape[0] = d;
    return n;
}

static uint64_t name_id(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h % 1000003;
}

static float value(uint64_t id, uint64_t i)
{
    return (float)((id * 7919 + i) % 1000) / 1000.0f;
}

/* Rows [*lo, *lo + *n) of `rows` for rank r of k, as numpy.array_split. */
static void my_rows(int64_t rows, int r, int k, int64_t *lo, int64_t *n)
{
    int64_t base = rows / k, extra = rows % k;
    *lo = r * base + (r < extra ? r : extra);
    *n = base + (r < extra ? 1 : 0);
}

/* The shard (off, size) of a parameter this rank holds: a dim-0 slice of a
 * matrix, the whole of a vector. */
static void shard_of(int ndim, const int64_t *shape, int r, int k,
                     int64_t *off, int64_t *size)
{
    off[0] = 0;
    size[0] = shape[0];
    if (ndim == 2) {
        my_rows(shape[0], r, k, &off[0], &size[0]);
        off[1] = 0;
        size[1] = shape[1];
    }
}

static size_t numel(int ndim, const int64_t *size)
{
    size_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= (size_t)size[d];
    return n;
}

static int do_save(const char *dir, int layers, int64_t d, int r, int k)
{
    param p[MAX_PARAMS];
    int n = model_params(p, layers, d);
    ckpt_piece pieces[MAX_PARAMS + 1];
    int64_t off[MAX_PARAMS][2], size[MAX_PARAMS][2], len;
    float *bufs[MAX_PARAMS];
    for (int i = 0; i < n; i++) {
        shard_of(p[i].ndim, p[i].shape, r, k, off[i], size[i]);
        size_t ne = numel(p[i].ndim, size[i]);
        bufs[i] = malloc(sizeof(float) * (ne ? ne : 1));
        int64_t cols = p[i].ndim == 2 ? p[i].shape[1] : 1;
        for (size_t e = 0; e < ne; e++)
            bufs[i][e] = value(name_id(p[i].fqn),
                               (uint64_t)(off[i][0] * cols) + e);
        pieces[i] = (ckpt_piece){ p[i].fqn, CKPT_F32, p[i].ndim, p[i].shape,
                                  off[i], size[i], bufs[i] };
    }
    const char state[] = "{\"step\": 1000, \"lr\": 0.0003}";
    ckpt_mpi_bytes_piece(&pieces[n], "train_state", state, &len,
                         sizeof state - 1);
    ckpt_mpi_save_opts o;
    ckpt_mpi_save_opts_init(&o);
    const char *keys[] = { "step" }, *vals[] = { "1000" };
    o.meta_keys = keys;
    o.meta_values = vals;
    o.nmeta = 1;
    ckpt_error err;
    int rc = ckpt_mpi_save(MPI_COMM_WORLD, dir, pieces, (size_t)n + 1, &o,
                           &err);
    for (int i = 0; i < n; i++)
        free(bufs[i]);
    if (rc != 0) {
        fprintf(stderr, "rank %d: save failed: %s\n", r, err.msg);
        return 1;
    }
    if (r == 0)
        printf("saved %d parameters and a byte object on %d ranks into %s\n",
               n, k, dir);
    return 0;
}

/* The regions this rank loads: its dim-0 shard of every f32 tensor. */
typedef struct plan {
    ckpt_mpi_region g[MAX_PARAMS];
    int64_t off[MAX_PARAMS][2], size[MAX_PARAMS][2], cols[MAX_PARAMS];
    char fqn[MAX_PARAMS][64];
    int n;
} plan;

/* Lists the checkpoint's tensors with the reader (no collective). */
static int plan_load(const char *dir, int r, int k, plan *pl)
{
    ckpt_reader *rd;
    ckpt_error err;
    if (ckpt_reader_open(&rd, dir, NULL, &err) != 0) {
        fprintf(stderr, "rank %d: %s\n", r, err.msg);
        return -1;
    }
    pl->n = 0;
    for (size_t t = 0; t < ckpt_reader_count(rd) && pl->n < MAX_PARAMS; t++) {
        ckpt_tensor_info ti;
        ckpt_reader_info(rd, t, &ti);
        if (ti.dtype != CKPT_F32 || ti.ndim < 1 || ti.ndim > 2)
            continue;
        int i = pl->n++;
        snprintf(pl->fqn[i], sizeof pl->fqn[i], "%s", ti.fqn);
        shard_of(ti.ndim, ti.shape, r, k, pl->off[i], pl->size[i]);
        pl->cols[i] = ti.ndim == 2 ? ti.shape[1] : 1;
        size_t ne = numel(ti.ndim, pl->size[i]);
        pl->g[i] = (ckpt_mpi_region){ pl->fqn[i], pl->off[i], pl->size[i],
                                      malloc(sizeof(float) * (ne ? ne : 1)) };
    }
    ckpt_reader_close(rd);
    return 0;
}

static long check_values(const plan *pl)
{
    long bad = 0;
    for (int i = 0; i < pl->n; i++) {
        const float *v = pl->g[i].dst;
        size_t ne = (size_t)pl->size[i][0] *
                    (size_t)(pl->cols[i] == 1 ? 1 : pl->size[i][1]);
        for (size_t e = 0; e < ne; e++)
            bad += v[e] != value(name_id(pl->fqn[i]),
                                 (uint64_t)(pl->off[i][0] * pl->cols[i]) + e);
    }
    return bad;
}

static int do_load(const char *dir, int r, int k)
{
    plan pl;
    ckpt_error err;
    ckpt_stats st;
    int rc = plan_load(dir, r, k, &pl) ? 1 : 0, any = 0;
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any)
        return 1;
    rc = ckpt_mpi_load(MPI_COMM_WORLD, dir, pl.g, (size_t)pl.n, NULL, &st,
                       &err);
    long bad = rc == 0 ? check_values(&pl) : 0;
    void *state = NULL;
    size_t len = 0;
    if (rc == 0)
        rc = ckpt_mpi_load_bytes(MPI_COMM_WORLD, dir, "train_state", &state,
                                 &len, &err);
    for (int i = 0; i < pl.n; i++)
        free(pl.g[i].dst);
    if (rc != 0) {
        fprintf(stderr, "rank %d: load failed: %s\n", r, err.msg);
        return 1;
    }
    printf("rank %d of %d: %d tensors, %llu bytes decoded, %ld wrong values; "
           "train_state %.*s\n", r, k, pl.n,
           (unsigned long long)st.bytes_decoded, bad, (int)len,
           (const char *)state);
    free(state);
    return bad != 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int r, k, rc = 2;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &k);
    if (argc >= 3 && strcmp(argv[1], "save") == 0)
        rc = do_save(argv[2], argc > 3 ? atoi(argv[3]) : 4,
                     argc > 4 ? atoll(argv[4]) : 256, r, k);
    else if (argc >= 3 && strcmp(argv[1], "load") == 0)
        rc = do_load(argv[2], r, k);
    else if (r == 0)
        fprintf(stderr, "usage: %s save DIR [LAYERS [DIM]] | load DIR\n",
                argv[0]);
    int any = 0;
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}
