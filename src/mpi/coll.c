/*
 * coll.c - what the collective calls share (see coll.h): each rank's
 * status carried through the steps and the agreement points where the
 * ranks learn which failed first, and the byte buffers the ranks' wire
 * messages are written to and read from.
 */
#include "mpi/coll.h"
#include "common/optsize.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

/* ================================================================ status */

int coll_init(coll *c, MPI_Comm comm, ckpt_error *st)
{
    c->comm = comm;
    c->rank = 0;
    c->size = 1;
    c->failed = 0;
    if (MPI_Comm_rank(comm, &c->rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &c->size) != MPI_SUCCESS)
        return ckpt_err(st, -EINVAL, "invalid MPI communicator");
    return 0;
}

/* Records e as this rank's failure, "rank R: <e's message>", unless the
 * rank has already failed (the first cause is the one reported). */
int coll_fail_with(const coll *c, ckpt_error *st, const ckpt_error *e)
{
    if (st->code)
        return st->code;
    *st = *e;
    if (st->code == 0)
        st->code = -EIO;
    return ckpt_err_wrap(st, st->code, "rank %d", c->rank);
}

int coll_failf(const coll *c, ckpt_error *st, int code, const char *fmt,
                      ...)
{
    ckpt_error e = { .code = code };
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.msg, sizeof e.msg, fmt, ap);
    va_end(ap);
    return coll_fail_with(c, st, &e);
}

/* Turns the result of an MPI call into this rank's failure. */
void coll_check(const coll *c, ckpt_error *st, int mrc,
                       const char *what)
{
    if (mrc == MPI_SUCCESS)
        return;
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(mrc, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "MPI error %d", mrc);
    coll_failf(c, st, -EIO, "%s failed: %s", what, s);
}

/* The agreement point: every rank learns whether any rank failed; if so,
 * every rank's status becomes the first failing rank's, with a note of how
 * many others failed.  Returns that code (0 when all succeeded).  Once the
 * ranks agree on a failure, later calls (which every rank then makes
 * alike) just return it. */
int coll_agree(coll *c, ckpt_error *st)
{
    if (c->failed)
        return st->code;
    int mine = st->code ? c->rank : c->size, first = c->size;
    int mrc = MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, c->comm);
    if (mrc != MPI_SUCCESS) {
        coll_check(c, st, mrc, "MPI_Allreduce");
        return st->code;
    }
    if (first == c->size)
        return 0;
    int failed = st->code != 0, nfailed = 1;
    coll_check(c, st, MPI_Allreduce(&failed, &nfailed, 1, MPI_INT, MPI_SUM,
                                    c->comm), "MPI_Allreduce");
    coll_check(c, st, MPI_Bcast(st, (int)sizeof *st, MPI_BYTE, first, c->comm),
               "MPI_Bcast");
    if (nfailed > 1) {
        size_t len = strlen(st->msg);
        snprintf(st->msg + len, sizeof st->msg - len, " (and %d more rank%s "
                 "failed)", nfailed - 1, nfailed > 2 ? "s" : "");
    }
    if (st->code == 0)
        st->code = -EIO;
    c->failed = 1;
    return st->code;
}

/* Sets the same failure on every rank (for problems all ranks see alike). */
int coll_fail_all(ckpt_error *st, int code, const char *fmt, ...)
{
    if (st->code)
        return st->code;
    va_list ap;
    va_start(ap, fmt);
    st->code = code;
    vsnprintf(st->msg, sizeof st->msg, fmt, ap);
    va_end(ap);
    return code;
}

int coll_finish(const ckpt_error *st, ckpt_error *err)
{
    if (err)
        *err = *st;
    return st->code;
}

/* Checks that every rank names the same checkpoint directory as rank 0. */
void coll_same_dir(const coll *c, const char *dir, ckpt_error *st)
{
    char root[COLL_PATH_CAP];
    long len = -1;
    if (!dir)
        coll_failf(c, st, -EINVAL, "no checkpoint directory given (NULL)");
    else if (strlen(dir) >= sizeof root)
        coll_failf(c, st, -ENAMETOOLONG,
                   "checkpoint directory name is %zu bytes "
                   "long (at most %d)", strlen(dir), COLL_PATH_CAP - 1);
    if (c->rank == 0 && st->code == 0)
        len = (long)strlen(dir);
    coll_check(c, st, MPI_Bcast(&len, 1, MPI_LONG, 0, c->comm), "MPI_Bcast");
    if (len < 0 || len >= (long)sizeof root)
        return;
    if (c->rank == 0)
        memcpy(root, dir, (size_t)len + 1);
    coll_check(c, st, MPI_Bcast(root, (int)len + 1, MPI_CHAR, 0, c->comm),
               "MPI_Bcast");
    root[len] = '\0';
    if (st->code == 0 && strcmp(root, dir) != 0)
        coll_failf(c, st, -EINVAL,
                   "checkpoint directory '%s' differs from rank "
                   "0's '%s'", dir, root);
}

/* ============================================================ byte buffers */

void wb_put(wbuf *b, const void *v, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (n > b->cap - b->n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, v, n);
    b->n += n;
}

void wb_i32(wbuf *b, int32_t v)
{
    wb_put(b, &v, sizeof v);
}

void wb_dims(wbuf *b, int ndim, const int64_t *v)
{
    wb_put(b, v, (size_t)ndim * sizeof *v);
}

void rb_get(rbuf *b, void *v, size_t n)
{
    if (b->bad || n > b->n - b->at) {
        b->bad = 1;
        memset(v, 0, n);
        return;
    }
    memcpy(v, b->p + b->at, n);
    b->at += n;
}

int32_t rb_i32(rbuf *b)
{
    int32_t v;
    rb_get(b, &v, sizeof v);
    return v;
}

/* ------------------------------------------------------------ options */

/* A caller's options struct (`outer`) or the one nested in it (`inner`):
 * where it goes (holding the defaults), where it comes from, its size and
 * its name. */
typedef struct opts_part {
    void *dst;
    const void *src;
    size_t size;
    const char *name;
} opts_part;

static void take_opts(const coll *c, opts_part outer, opts_part inner,
                      ckpt_error *st)
{
    ckpt_error e = { 0 };
    if (ckpt_opts_take(outer.dst, outer.size, outer.src, outer.size,
                       outer.name, &e) ||
        ckpt_opts_take(inner.dst, inner.size, inner.src, inner.size,
                       inner.name, &e))
        coll_fail_with(c, st, &e);
}

void coll_take_save_opts(const coll *c, ckpt_mpi_save_opts *dst,
                         const ckpt_mpi_save_opts *src, ckpt_error *st)
{
    ckpt_mpi_save_opts_init(dst);
    if (!src)
        return;
    ckpt_write_opts w = dst->write;
    take_opts(c, (opts_part){ dst, src, sizeof *dst, "ckpt_mpi_save_opts" },
              (opts_part){ &w, &src->write, sizeof w,
                           "ckpt_mpi_save_opts.write" }, st);
    dst->write = w;
}

void coll_take_load_opts(const coll *c, ckpt_mpi_load_opts *dst,
                         const ckpt_mpi_load_opts *src, ckpt_error *st)
{
    ckpt_mpi_load_opts_init(dst);
    if (!src)
        return;
    ckpt_read_opts r = dst->read;
    take_opts(c, (opts_part){ dst, src, sizeof *dst, "ckpt_mpi_load_opts" },
              (opts_part){ &r, &src->read, sizeof r,
                           "ckpt_mpi_load_opts.read" }, st);
    dst->read = r;
}
