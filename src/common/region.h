/*
 * region.h - hyper-rectangle arithmetic and row-major run enumeration.
 *
 * A box is (off[ndim], size[ndim]) in global element coordinates.  A box
 * stored row-major is the layout of every chunk and every destination
 * buffer.  The enumerators here turn "copy region R out of source box S into
 * destination box D" into the fewest contiguous runs, merging trailing
 * dimensions that R spans fully in both S and D.  No per-element work.
 */
#ifndef CKPT_REGION_H
#define CKPT_REGION_H

#include <stdint.h>
#include "ckptfs.h"

/* Number of elements in a box of these sizes (1 for ndim == 0).  The caller
 * has already checked the shape for overflow. */
uint64_t ckpt_box_numel(int ndim, const int64_t *size);

/* Intersection of boxes a and b into (o_off, o_size).  Returns 1 when it is
 * non-empty, 0 when empty (o_* are then unspecified).  For ndim == 0 both
 * boxes are the single scalar element and the result is 1. */
int ckpt_box_intersect(int ndim, const int64_t *a_off, const int64_t *a_size,
                       const int64_t *b_off, const int64_t *b_size,
                       int64_t *o_off, int64_t *o_size);

/* 1 when box (in_off, in_size) lies within (out_off, out_size). */
int ckpt_box_contains(int ndim, const int64_t *out_off,
                      const int64_t *out_size, const int64_t *in_off,
                      const int64_t *in_size);

/* Row-major linear index (in elements) of point p inside box (off, size). */
uint64_t ckpt_box_linear(int ndim, const int64_t *off, const int64_t *size,
                         const int64_t *p);

/* Called once per contiguous run: `n` elements starting at element `src` of
 * the source box's row-major image and element `dst` of the destination
 * box's image.  A non-zero return stops the enumeration and is returned. */
typedef int (*ckpt_run_fn)(void *arg, uint64_t src, uint64_t dst, uint64_t n);

/* Enumerates, in row-major order of r, the runs that copy region r from the
 * row-major source box s to the row-major destination box d.  r must lie
 * within both s and d, and be non-empty.  Returns 0 or the callback's
 * non-zero value. */
int ckpt_region_runs(int ndim, const int64_t *r_off, const int64_t *r_size,
                     const int64_t *s_off, const int64_t *s_size,
                     const int64_t *d_off, const int64_t *d_size,
                     ckpt_run_fn fn, void *arg);

/* Called once per box of a decomposition. */
typedef int (*ckpt_box_fn)(void *arg, const int64_t *off, const int64_t *size);

/* Decomposes elements [lo, hi) of the row-major image of `shape` into at
 * most 2*ndim - 1 disjoint boxes, in increasing linear order, and calls fn
 * for each.  Nothing is called when lo >= hi.  For ndim == 0, [0,1) is the
 * scalar (fn gets ndim-0 arrays).  Returns 0 or fn's non-zero value. */
int ckpt_region_linear_boxes(int ndim, const int64_t *shape, uint64_t lo,
                             uint64_t hi, ckpt_box_fn fn, void *arg);

/* Parses a NumPy-style basic slice "0:10,:,5:7" (also "3" for a single
 * index that keeps its dimension with size 1, "-4:" and ":-1" counting from
 * the end, "..." is not supported; fewer entries than ndim leave the rest
 * whole; no steps) against `shape` into (off, size).  Bounds are clamped as
 * NumPy does for ranges; a single index out of range is -EINVAL.  Returns 0
 * or -EINVAL with a message quoting the spec. */
int ckpt_slice_parse(const char *spec, int ndim, const int64_t *shape,
                     int64_t *off, int64_t *size, ckpt_error *err);

#endif
