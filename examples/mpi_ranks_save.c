/*
 * mpi_ranks_save.c - N MPI ranks save one sharded checkpoint with the
 * per-rank writer API of libckptfs, then rank 0 commits it.
 *
 * Each rank owns a dim-0 slice (FSDP style) of every weight matrix, and
 * every rank holds the same bias vectors (replicated tensors: the planner
 * keeps one copy).  Values are a function of the global index, so any
 * reader can check them:  w[i][j] = layer + i * 0.001 + j * 0.000001.
 *
 *   mpirun -n 4 ./mpi_ranks_save OUTDIR [ROWS COLS LAYERS]
 *
 * This is the simplest way to save from MPI: no collective calls inside the
 * library, one writer per rank, a barrier, and a commit that validates what
 * all ranks wrote.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"

static int fail(const char *what, const ckpt_error *e)
{
    fprintf(stderr, "mpi_ranks_save: %s: %s\n", what, e->msg);
    return 1;
}

/* Rows [*lo, *lo + *n) of `rows`, split as numpy.array_split would. */
static void my_rows(int64_t rows, int rank, int size, int64_t *lo, int64_t *n)
{
    int64_t base = rows / size, extra = rows % size;
    *lo = rank * base + (rank < extra ? rank : extra);
    *n = base + (rank < extra ? 1 : 0);
}

static int save_layer(ckpt_writer *w, int layer, int64_t rows, int64_t cols,
                      int rank, int size, ckpt_error *e)
{
    char name[64];
    int64_t shape[2] = { rows, cols }, off[2] = { 0, 0 }, sz[2] = { 0, cols };
    my_rows(rows, rank, size, &off[0], &sz[0]);
    float *buf = malloc(sizeof(float) * (size_t)(sz[0] * cols + 1));
    if (!buf)
        return -1;
    for (int64_t i = 0; i < sz[0]; i++)
        for (int64_t j = 0; j < cols; j++)
            buf[i * cols + j] = (float)layer + (float)(off[0] + i) * 0.001f +
                                (float)j * 0.000001f;
    snprintf(name, sizeof name, "model.layers.%d.weight", layer);
    ckpt_piece p = { name, CKPT_F32, 2, shape, off, sz, buf };
    int rc = ckpt_writer_put(w, &p, e);
    free(buf);
    if (rc)
        return rc;
    /* The bias is replicated: every rank passes the whole of it. */
    float *bias = malloc(sizeof(float) * (size_t)cols);
    if (!bias)
        return -1;
    for (int64_t j = 0; j < cols; j++)
        bias[j] = (float)layer * 0.5f + (float)j;
    snprintf(name, sizeof name, "model.layers.%d.bias", layer);
    ckpt_piece b = { name, CKPT_F32, 1, &cols, NULL, NULL, bias };
    rc = ckpt_writer_put(w, &b, e);
    free(bias);
    return rc;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, rc = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: %s OUTDIR [ROWS COLS LAYERS]\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    int64_t rows = argc > 2 ? atoll(argv[2]) : 1024;
    int64_t cols = argc > 3 ? atoll(argv[3]) : 1024;
    int layers = argc > 4 ? atoi(argv[4]) : 4;

    char wname[32];
    snprintf(wname, sizeof wname, "rank%d", rank);
    ckpt_writer *w;
    ckpt_error e = { 0 };
    if (ckpt_writer_open(&w, argv[1], wname, NULL, &e) != 0) {
        rc = fail("open", &e);
    } else {
        for (int l = 0; l < layers && rc == 0; l++)
            if (save_layer(w, l, rows, cols, rank, size, &e) != 0)
                rc = fail("put", &e);
        if (rc == 0 && rank == 0 &&
            ckpt_writer_set_meta(w, "step", "100", &e) != 0)
            rc = fail("meta", &e);
        if (rc)
            ckpt_writer_abort(w);
        else if (ckpt_writer_close(w, &e) != 0)
            rc = fail("close", &e);
    }
    /* Every rank learns whether all ranks wrote and synced their pieces. */
    int any_failed = 0;
    MPI_Allreduce(&rc, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && !any_failed) {
        ckpt_commit_opts co;
        ckpt_commit_opts_init(&co);
        co.expect_writers = size;
        if (ckpt_commit(argv[1], &co, &e) != 0)
            rc = fail("commit", &e);
        else
            printf("rank 0: committed %s (%d ranks, %d layers of %lldx%lld)\n",
                   argv[1], size, layers, (long long)rows, (long long)cols);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return rc || any_failed;
}
