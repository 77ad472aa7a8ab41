/*
 * mpi_test.h - helpers shared by the MPI test programs: a failure counter
 * per rank, checks that all ranks got the same status, split arithmetic,
 * and the reference values every test element is compared with (a hash of
 * the tensor's name and the element's global row-major index, computed
 * without the library).
 */
#ifndef CKPT_MPI_TEST_H
#define CKPT_MPI_TEST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ckptfs_mpi.h"

typedef struct tctx {
    MPI_Comm world;
    int rank, size;
    int failures;        /* checks that failed on this rank */
} tctx;

void t_init(tctx *t, int *argc, char ***argv);
/* Sums the failures of all ranks, prints a summary on rank 0, finalizes
 * MPI and returns the process exit status. */
int t_finish(tctx *t, const char *name);
void t_fail(tctx *t, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define T_CHECK(t, cond) \
    do { \
        if (!(cond)) \
            t_fail((t), __FILE__, __LINE__, "%s", #cond); \
    } while (0)
#define T_CHECKF(t, cond, ...) \
    do { \
        if (!(cond)) \
            t_fail((t), __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)

/* Checks, over `comm`, that every rank got the same status code and the
 * same message; returns 1 when they agree. */
int t_same_status(tctx *t, MPI_Comm comm, int rc, const ckpt_error *err);

/* Part k of `parts` of [0, n), as numpy.array_split cuts it. */
void t_split(int64_t n, int parts, int k, int64_t *lo, int64_t *len);

/* 64-bit id of a tensor name (FNV-1a). */
uint64_t t_fqn_id(const char *fqn);

/* Writes the reference values of box (off, size) of a tensor of `shape`
 * and dtype dt, row-major, into buf. */
void t_fill(void *buf, ckpt_dtype dt, int ndim, const int64_t *shape,
            const int64_t *off, const int64_t *size, uint64_t tid);
/* Compares buf with the reference values of the box; returns the number of
 * elements that differ (and reports the first through t_fail). */
uint64_t t_compare(tctx *t, const void *buf, ckpt_dtype dt, int ndim,
                   const int64_t *shape, const int64_t *off,
                   const int64_t *size, uint64_t tid, const char *what);

/* numel * itemsize of a box. */
size_t t_box_bytes(ckpt_dtype dt, int ndim, const int64_t *size);

/* 1 when path exists. */
int t_exists(const char *path);

#endif
