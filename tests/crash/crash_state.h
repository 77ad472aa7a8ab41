/*
 * crash_state.h - the state every save of the crash and fault matrix
 * writes (tests/crash/crash_driver.c, crash_mpi.c): three small f32
 * tensors whose elements are a function of a seed alone, and the piece
 * of each that one of n writers (or ranks) holds.
 */
#ifndef CKPT_CRASH_STATE_H
#define CKPT_CRASH_STATE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ckptfs.h"

#define NT 3
/* Frame size of every save: small, so that a save makes many calls. */
#define FRAME 4096

typedef struct tdesc {
    const char *fqn;
    const char *file;        /* path of its file below a save */
    const char *npy;
    int ndim;
    int64_t shape[2];
    int split;               /* split by rows among writers/ranks */
} tdesc;

static const tdesc T[NT] = {
    { "model.w", "model/w", "w.npy", 2, { 64, 300 }, 1 },
    { "model.b", "model/b", "b.npy", 1, { 300, 0 }, 0 },
    { "opt.m", "opt/m", "m.npy", 2, { 40, 50 }, 1 },
};

static inline int64_t numel(const tdesc *t)
{
    return t->ndim == 1 ? t->shape[0] : t->shape[0] * t->shape[1];
}

static inline int64_t row_elems(const tdesc *t)
{
    return t->ndim == 1 ? 1 : t->shape[1];
}

/* Seeds from DELTA_SEED on are delta states: seed DELTA_SEED + s is the
 * state of s with one row in 7 changed, so that a save of it against a
 * checkpoint of s (CKPT_CRASH_BASE) stores references and XOR deltas. */
#define DELTA_SEED 1000

/* Element i of tensor k in the state of seed: a hash, exactly a float. */
static inline float value(uint64_t seed, int k, int64_t i)
{
    if (seed >= DELTA_SEED) {
        float v = value(seed - DELTA_SEED, k, i);
        return (i / row_elems(&T[k])) % 7 ? v : v + 0.5f;
    }
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL +
                 (uint64_t)k * 0x632BE59BD9B4E019ULL + (uint64_t)i;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 29;
    return (float)(x % 1000003) / 8.0f;
}

static inline float *image(uint64_t seed, int k)
{
    int64_t n = numel(&T[k]);
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; v && i < n; i++)
        v[i] = value(seed, k, i);
    return v;
}

/* Rows [*r0, *r1) of a split tensor for part p of n. */
static inline void rows_of(const tdesc *t, int p, int n, int64_t *r0,
                           int64_t *r1)
{
    *r0 = t->shape[0] * p / n;
    *r1 = t->shape[0] * (p + 1) / n;
}

/* ------------------------------------------------------------ pieces */

/* Piece of tensor k for part p of n (the whole tensor when not split). */
typedef struct part {
    int64_t off[2], size[2];
    ckpt_piece p;
} part;

static inline void make_part(part *pt, int k, const float *img, int p,
                             int n)
{
    const tdesc *t = &T[k];
    int64_t r0 = 0, r1 = t->shape[0];
    if (t->split)
        rows_of(t, p, n, &r0, &r1);
    pt->off[0] = r0;
    pt->off[1] = 0;
    pt->size[0] = r1 - r0;
    pt->size[1] = t->ndim == 2 ? t->shape[1] : 0;
    pt->p = (ckpt_piece){ t->fqn, CKPT_F32, t->ndim, t->shape, pt->off,
                          pt->size, img + r0 * row_elems(t) };
}

/* The checkpoint metadata every save of the matrix sets: step = seed
 * (so that `latest` is the newest save by any rule). */
typedef struct step_meta {
    char value[32];
    const char *keys[1], *values[1];
} step_meta;

static inline void step_meta_init(step_meta *m, uint64_t seed)
{
    snprintf(m->value, sizeof m->value, "%llu", (unsigned long long)seed);
    m->keys[0] = "step";
    m->values[0] = m->value;
}

#endif
