/*
 * crash_mpi.c - the collective save of the crash and fault matrix
 * (tests/crash/kill_mpi.sh, faults.sh): every rank saves its rows of the
 * state of crash_state.h (model.b replicated on every rank) with
 * ckpt_mpi_save, or with ckpt_mpi_save_async and its wait.
 *
 *   mpirun -n N crash_mpi CKPT SEED [async]
 *
 * Exit 0 once committed; 1 (on every rank) with the error otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs_mpi.h"
#include "crash_state.h"

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 3) {
        if (rank == 0)
            fprintf(stderr, "usage: crash_mpi CKPT SEED [async]\n");
        MPI_Finalize();
        return 2;
    }
    uint64_t seed = strtoull(argv[2], NULL, 10);
    int async = argc > 3 && strcmp(argv[3], "async") == 0;
    float *img[NT];
    part pt[NT];
    ckpt_piece p[NT];
    for (int k = 0; k < NT; k++) {
        img[k] = image(seed, k);
        make_part(&pt[k], k, img[k], rank, size);
        p[k] = pt[k].p;
    }
    ckpt_mpi_save_opts o;
    ckpt_mpi_save_opts_init(&o);
    o.write.frame_size = FRAME;
    o.write.threads = 1;
    step_meta sm;
    step_meta_init(&sm, seed);
    o.meta_keys = sm.keys;
    o.meta_values = sm.values;
    o.nmeta = 1;
    ckpt_error err = { 0 };
    int rc;
    if (async) {
        ckpt_saver *sv;
        ckpt_mpi_async *h = NULL;
        rc = ckpt_saver_create(&sv, NULL, &err);
        if (rc == 0)
            rc = ckpt_mpi_save_async(MPI_COMM_WORLD, argv[1], p, NT, &o, sv,
                                     &h, &err);
        if (rc == 0)
            rc = ckpt_mpi_save_wait(h, &err);
        ckpt_saver_destroy(sv);
    } else {
        rc = ckpt_mpi_save(MPI_COMM_WORLD, argv[1], p, NT, &o, &err);
    }
    if (rc && rank == 0)
        fprintf(stderr, "crash_mpi: %s\n", err.msg);
    for (int k = 0; k < NT; k++)
        free(img[k]);
    MPI_Finalize();
    return rc ? 1 : 0;
}
