/*
 * wlimits.c - the default bounds of a writable mount and per-user counts
 * (see wlimits.h): a short array of (uid, count) under a mutex; a mount
 * has few users.
 */
#include "wlimits.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

typedef struct wl_entry {
    uid_t uid;
    size_t n;
} wl_entry;

struct wl_counts {
    pthread_mutex_t mu;
    wl_entry *v;
    size_t n, cap;
};

void wl_limits_default(ws_limits *l)
{
    *l = (ws_limits){ .max_open_pieces = WL_DEFAULT_OPEN_PIECES,
                      .max_saves = WL_DEFAULT_SAVES,
                      .max_meta_keys = WL_DEFAULT_META_KEYS,
                      .max_meta_bytes = WL_DEFAULT_META_BYTES };
}

int wl_counts_new(wl_counts **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return -ENOMEM;
    pthread_mutex_init(&(*out)->mu, NULL);
    return 0;
}

void wl_counts_free(wl_counts *t)
{
    if (!t)
        return;
    pthread_mutex_destroy(&t->mu);
    free(t->v);
    free(t);
}

/* uid's entry, made if missing (under mu); NULL when out of memory. */
static wl_entry *entry_of(wl_counts *t, uid_t uid)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].uid == uid)
            return &t->v[i];
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 8;
        wl_entry *v = realloc(t->v, cap * sizeof *v);
        if (!v)
            return NULL;
        t->v = v;
        t->cap = cap;
    }
    t->v[t->n] = (wl_entry){ .uid = uid };
    return &t->v[t->n++];
}

int wl_take(wl_counts *t, uid_t uid, size_t max)
{
    pthread_mutex_lock(&t->mu);
    wl_entry *e = entry_of(t, uid);
    int rc = e && e->n < max ? 0 : -1;
    if (rc == 0)
        e->n++;
    pthread_mutex_unlock(&t->mu);
    return rc;
}

void wl_give(wl_counts *t, uid_t uid)
{
    pthread_mutex_lock(&t->mu);
    wl_entry *e = entry_of(t, uid);
    if (e && e->n > 0)
        e->n--;
    pthread_mutex_unlock(&t->mu);
}
