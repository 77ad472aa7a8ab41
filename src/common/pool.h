/*
 * pool.h - a fixed pool of worker threads running submitted tasks, and a
 * task group to wait for a set of tasks.  Tasks learn their worker index so
 * that owners can keep per-worker scratch state (codec contexts).
 */
#ifndef CKPT_POOL_H
#define CKPT_POOL_H

#include <pthread.h>
#include "ckptfs.h"

typedef struct ckpt_pool ckpt_pool;
typedef void (*ckpt_task_fn)(void *arg, int worker);

/* nthreads <= 0 means the number of online CPUs. */
int ckpt_pool_create(ckpt_pool **out, int nthreads, ckpt_error *err);
/* Runs every task already submitted, then joins the threads and frees. */
void ckpt_pool_destroy(ckpt_pool *p);
int ckpt_pool_threads(const ckpt_pool *p);
/* Queues fn(arg, worker).  Returns 0 or -ENOMEM. */
int ckpt_pool_submit(ckpt_pool *p, ckpt_task_fn fn, void *arg);

/* A counter of outstanding tasks one can wait on. */
typedef struct ckpt_taskgroup {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long pending;
} ckpt_taskgroup;

void ckpt_tg_init(ckpt_taskgroup *g);
void ckpt_tg_destroy(ckpt_taskgroup *g);
void ckpt_tg_add(ckpt_taskgroup *g, long n);
void ckpt_tg_done(ckpt_taskgroup *g);
void ckpt_tg_wait(ckpt_taskgroup *g);    /* until pending == 0 */

/* Runs fn on each of the n task structs at `tasks` (`size` bytes apart),
 * each of which calls ckpt_tg_done(g) when finished: all but the first on
 * the pool (one the pool refuses runs here), the first in the calling
 * thread, and returns once every one is done. */
void ckpt_pool_run_tasks(ckpt_pool *p, ckpt_task_fn fn, void *tasks,
                         size_t n, size_t size, ckpt_taskgroup *g);

/* Number of online CPUs (at least 1). */
int ckpt_cpu_count(void);

#endif
