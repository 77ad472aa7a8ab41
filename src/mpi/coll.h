/*
 * coll.h - what the collective calls (save.c, load.c) share.
 *
 * Every call runs the same sequence of collectives on every rank, whatever
 * fails locally: each rank carries a local status (a ckpt_error) through
 * the steps, and at each agreement point (coll_agree) the ranks learn
 * with MPI_Allreduce which rank failed first; that rank broadcasts its
 * message.  So all ranks return the same code and message, and none waits
 * in a collective that another skipped.  Local failures read "rank R:
 * <cause>".
 *
 * Wire messages between ranks are built in a wbuf and parsed from an
 * rbuf (native byte order: the ranks of one job share it).
 */
#ifndef CKPT_MPI_COLL_H
#define CKPT_MPI_COLL_H

#include <stddef.h>
#include <stdint.h>
#include "ckptfs_mpi.h"

/* Room for a checkpoint directory's path (with its NUL). */
#define COLL_PATH_CAP 4096

typedef struct coll {
    MPI_Comm comm;
    int rank, size;
    int failed;          /* the ranks have agreed on a failure */
} coll;

/* Sets up c on comm: -EINVAL in st when comm is not a communicator. */
int coll_init(coll *c, MPI_Comm comm, ckpt_error *st);
/* Records e as this rank's failure, "rank R: <e's message>", unless the
 * rank has already failed (the first cause is the one reported). */
int coll_fail_with(const coll *c, ckpt_error *st, const ckpt_error *e);
/* The same from a code and a message. */
int coll_failf(const coll *c, ckpt_error *st, int code, const char *fmt,
               ...) __attribute__((format(printf, 4, 5)));
/* Turns the result of an MPI call into this rank's failure. */
void coll_check(const coll *c, ckpt_error *st, int mrc, const char *what);
/* The agreement point: every rank learns whether any rank failed; if so,
 * every rank's status becomes the first failing rank's.  Returns that
 * code (0 when all succeeded); once agreed on a failure, returns it. */
int coll_agree(coll *c, ckpt_error *st);
/* Sets the same failure on every rank (for problems all ranks see
 * alike). */
int coll_fail_all(ckpt_error *st, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Copies the status to the caller's err (when not NULL); its code. */
int coll_finish(const ckpt_error *st, ckpt_error *err);
/* Fills *dst with the defaults, then takes the caller's options *src
 * (when not NULL) by their size fields, the nested write/read options
 * too (common/optsize.h); a refusal is this rank's failure. */
void coll_take_save_opts(const coll *c, ckpt_mpi_save_opts *dst,
                         const ckpt_mpi_save_opts *src, ckpt_error *st);
void coll_take_load_opts(const coll *c, ckpt_mpi_load_opts *dst,
                         const ckpt_mpi_load_opts *src, ckpt_error *st);
/* Checks that every rank names the same checkpoint directory as rank 0. */
void coll_same_dir(const coll *c, const char *dir, ckpt_error *st);

/* A growing buffer being written; oom once an append failed (the rest
 * are dropped). */
typedef struct wbuf {
    unsigned char *p;
    size_t n, cap;
    int oom;
} wbuf;

void wb_put(wbuf *b, const void *v, size_t n);
void wb_i32(wbuf *b, int32_t v);
void wb_dims(wbuf *b, int ndim, const int64_t *v);

/* A buffer being read; bad once a read ran past its end (reads then give
 * zeros). */
typedef struct rbuf {
    const unsigned char *p;
    size_t n, at;
    int bad;
} rbuf;

void rb_get(rbuf *b, void *v, size_t n);
int32_t rb_i32(rbuf *b);

#endif
