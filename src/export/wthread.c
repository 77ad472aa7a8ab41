/*
 * wthread.c - the export's writer thread (wthread.h).
 */
#include "export/wthread.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

struct exp_wthread {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    exp_sink *s;            /* the block in flight: s, buf, n */
    const void *buf;
    size_t n;
    int busy, quit;
    int rc;                 /* first write error, kept */
    ckpt_error err;
};

static void *run(void *arg)
{
    exp_wthread *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->busy && !w->quit)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->busy)
            break;
        pthread_mutex_unlock(&w->mu);
        ckpt_error err = { 0 };
        int rc = w->rc ? 0 : exp_sink_write(w->s, w->buf, w->n, &err);
        pthread_mutex_lock(&w->mu);
        if (rc && !w->rc) {
            w->rc = rc;
            w->err = err;
        }
        w->busy = 0;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int exp_wthread_start(exp_wthread **out, ckpt_error *err)
{
    exp_wthread *w = calloc(1, sizeof *w);
    if (!w)
        return ckpt_err(err, -ENOMEM, "out of memory");
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    int rc = pthread_create(&w->th, NULL, run, w);
    if (rc) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
        return ckpt_err(err, -rc, "cannot start the export's writer thread");
    }
    *out = w;
    return 0;
}

/* Under mu: waits for the block in flight; its error, once. */
static int settle(exp_wthread *w, ckpt_error *err)
{
    while (w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
    if (w->rc && err)
        *err = w->err;
    return w->rc;
}

int exp_wthread_put(exp_wthread *w, exp_sink *s, const void *buf, size_t n,
                    ckpt_error *err)
{
    pthread_mutex_lock(&w->mu);
    int rc = settle(w, err);
    if (rc == 0) {
        w->s = s;
        w->buf = buf;
        w->n = n;
        w->busy = 1;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int exp_wthread_wait(exp_wthread *w, ckpt_error *err)
{
    pthread_mutex_lock(&w->mu);
    int rc = settle(w, err);
    w->rc = 0;              /* reported: the next export starts clean */
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void exp_wthread_stop(exp_wthread *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    settle(w, NULL);
    w->quit = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}
