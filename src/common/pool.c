/*
 * pool.c - a fixed pool of worker threads taking tasks from one FIFO queue,
 * and task groups to wait for a set of tasks (see pool.h).
 *
 * Destroying the pool lets the workers drain the queue (tasks may still
 * submit more tasks while it drains), then joins them.
 */
#include "common/pool.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/error.h"

/* More threads than this is a caller's mistake, not a wish. */
#define POOL_MAX_THREADS CKPT_MAX_THREADS

typedef struct pool_task {
    ckpt_task_fn fn;
    void *arg;
    struct pool_task *next;
} pool_task;

typedef struct pool_worker {
    struct ckpt_pool *pool;
    int index;
    pthread_t tid;
} pool_worker;

struct ckpt_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* work arrived, or stopping */
    pool_task *head, *tail;
    int stopping;
    int nthreads;               /* threads started */
    pool_worker *workers;
};

int ckpt_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        return 1;
    return n > INT_MAX ? INT_MAX : (int)n;
}

/* Takes the next task, waiting for one; NULL once stopping and empty. */
static pool_task *pool_take(ckpt_pool *p)
{
    pthread_mutex_lock(&p->mu);
    while (!p->head && !p->stopping)
        pthread_cond_wait(&p->cv, &p->mu);
    pool_task *t = p->head;
    if (t) {
        p->head = t->next;
        if (!p->head)
            p->tail = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    return t;
}

static void *pool_main(void *arg)
{
    pool_worker *w = arg;
    pool_task *t;
    while ((t = pool_take(w->pool)) != NULL) {
        ckpt_task_fn fn = t->fn;
        void *targ = t->arg;
        free(t);
        fn(targ, w->index);
    }
    return NULL;
}

/* Stops the workers started so far (after the queue drains), joins them. */
static void pool_stop(ckpt_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nthreads; i++)
        pthread_join(p->workers[i].tid, NULL);
}

static void pool_free(ckpt_pool *p)
{
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

/* Allocates the pool and its sync objects, no threads yet; NULL on
 * failure, with the error in *code and err. */
static ckpt_pool *pool_alloc(int n, int *code, ckpt_error *err)
{
    ckpt_pool *p = calloc(1, sizeof *p);
    if (p)
        p->workers = calloc((size_t)n, sizeof *p->workers);
    if (!p || !p->workers) {
        free(p);
        *code = ckpt_err(err, -ENOMEM, "out of memory creating a pool of %d "
                         "threads", n);
        return NULL;
    }
    int rc = pthread_mutex_init(&p->mu, NULL);
    if (rc == 0 && (rc = pthread_cond_init(&p->cv, NULL)) != 0)
        pthread_mutex_destroy(&p->mu);
    if (rc) {
        free(p->workers);
        free(p);
        *code = ckpt_err_sys(err, -rc, "cannot create a thread pool");
        return NULL;
    }
    return p;
}

int ckpt_pool_create(ckpt_pool **out, int nthreads, ckpt_error *err)
{
    if (!out)
        return ckpt_err(err, -EINVAL, "pool: no output pointer");
    int n = nthreads > 0 ? nthreads : ckpt_cpu_count();
    if (n > POOL_MAX_THREADS)
        return ckpt_err(err, -EINVAL, "pool: %d threads asked for, at most "
                        "%d allowed", n, POOL_MAX_THREADS);
    int rc = 0;
    ckpt_pool *p = pool_alloc(n, &rc, err);
    if (!p)
        return rc;
    for (int i = 0; i < n; i++) {
        p->workers[i].pool = p;
        p->workers[i].index = i;
        rc = pthread_create(&p->workers[i].tid, NULL, pool_main,
                            &p->workers[i]);
        if (rc) {
            pool_stop(p);
            pool_free(p);
            return ckpt_err_sys(err, -rc, "cannot start pool thread %d of %d",
                                i + 1, n);
        }
        p->nthreads = i + 1;
    }
    *out = p;
    return 0;
}

void ckpt_pool_destroy(ckpt_pool *p)
{
    if (!p)
        return;
    pool_stop(p);
    pool_free(p);
}

int ckpt_pool_threads(const ckpt_pool *p)
{
    return p ? p->nthreads : 0;
}

int ckpt_pool_submit(ckpt_pool *p, ckpt_task_fn fn, void *arg)
{
    if (!p || !fn)
        return -EINVAL;
    pool_task *t = malloc(sizeof *t);
    if (!t)
        return -ENOMEM;
    t->fn = fn;
    t->arg = arg;
    t->next = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->tail)
        p->tail->next = t;
    else
        p->head = t;
    p->tail = t;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void ckpt_tg_init(ckpt_taskgroup *g)
{
    /* Default attributes: cannot fail on the platforms we build for. */
    (void)pthread_mutex_init(&g->mu, NULL);
    (void)pthread_cond_init(&g->cv, NULL);
    g->pending = 0;
}

void ckpt_tg_destroy(ckpt_taskgroup *g)
{
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}

void ckpt_tg_add(ckpt_taskgroup *g, long n)
{
    pthread_mutex_lock(&g->mu);
    g->pending += n;
    if (g->pending <= 0)
        pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void ckpt_tg_done(ckpt_taskgroup *g)
{
    /* Signal while holding the lock: once it is released, the waiter may
     * return and destroy the group. */
    pthread_mutex_lock(&g->mu);
    if (--g->pending <= 0)
        pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void ckpt_tg_wait(ckpt_taskgroup *g)
{
    pthread_mutex_lock(&g->mu);
    while (g->pending > 0)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

void ckpt_pool_run_tasks(ckpt_pool *p, ckpt_task_fn fn, void *tasks,
                         size_t n, size_t size, ckpt_taskgroup *g)
{
    char *t = tasks;
    ckpt_tg_add(g, (long)n);
    for (size_t i = 1; i < n; i++)
        if (ckpt_pool_submit(p, fn, t + i * size))
            fn(t + i * size, -1);
    if (n)
        fn(t, -1);
    ckpt_tg_wait(g);
}
