/*
 * bench_util.h - what every benchmark program needs and used to carry its
 * own copy of: dying with a message, memory that cannot fail, clocks, the
 * median, full positional reads and writes, and the generated state
 * (`bench_core gen`: DIR/state.idx, one "FQN DTYPE ROWS COLS OFFSET NBYTES"
 * line per tensor, and DIR/state.bin, the tensors back to back).
 */
#ifndef CKPT_BENCH_UTIL_H
#define CKPT_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "ckptfs.h"

#define FQN_MAX 96

typedef struct tensor_desc {
    char fqn[FQN_MAX];
    ckpt_dtype dtype;
    int64_t shape[2];
    uint64_t offset;                  /* within state.bin */
    uint64_t nbytes;
} tensor_desc;

typedef struct state_dict {
    tensor_desc *t;
    size_t n;
    uint64_t total;                   /* logical bytes */
    unsigned char *data;              /* state.bin, whole (state_load) */
} state_dict;

/* Prints "<program>: MESSAGE" to stderr and exits 1 (after the hook set by
 * bench_die_hook, e.g. MPI_Abort). */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void die_ckpt(const char *what, const ckpt_error *err)
    __attribute__((noreturn));
/* Called by die() before it exits. */
void bench_die_hook(void (*fn)(void));

void *xmalloc(size_t n);

/* Monotonic wall-clock seconds. */
double now_s(void);
/* User + system CPU seconds of the process (all threads) so far. */
double cpu_s(void);
/* The median of v[0..n) (sorts v); 0 for n = 0. */
double median(double *v, int n);

/* Reads or writes exactly len bytes at off, or dies naming path. */
void pread_full(int fd, void *buf, size_t len, uint64_t off,
                const char *path);
void pwrite_full(int fd, const void *buf, size_t len, uint64_t off,
                 const char *path);

/* Reads DIR/state.idx into *sd (data NULL), or dies naming the line. */
void state_read(state_dict *sd, const char *dir);
/* Reads all of DIR/state.bin into sd->data. */
void state_load(state_dict *sd, const char *dir);
void state_free(state_dict *sd);

#endif
