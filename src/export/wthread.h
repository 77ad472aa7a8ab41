/*
 * wthread.h - the export's writer thread: it appends one block to a sink
 * while the caller reads and decodes the next, so that an export takes
 * about the longer of its reads and its writes, not their sum.  One block
 * is handed over at a time; a write error is kept and returned at the
 * next hand-over or at the wait.
 */
#ifndef CKPT_EXPORT_WTHREAD_H
#define CKPT_EXPORT_WTHREAD_H

#include <stddef.h>

#include "ckptfs.h"
#include "export/sink.h"

typedef struct exp_wthread exp_wthread;

int exp_wthread_start(exp_wthread **out, ckpt_error *err);
/* Waits for the block in flight, then hands over buf[0..n) to append to
 * s (buf must stay untouched until the next call or wait).  Returns the
 * error of the block before, if any. */
int exp_wthread_put(exp_wthread *w, exp_sink *s, const void *buf, size_t n,
                    ckpt_error *err);
/* Waits until the block in flight is written; returns its error. */
int exp_wthread_wait(exp_wthread *w, ckpt_error *err);
void exp_wthread_stop(exp_wthread *w);

#endif
