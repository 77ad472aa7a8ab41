/*
 * grow.h - appending to a heap array: room for one more element, the
 * array doubled when it is full.
 */
#ifndef CKPTFS_GROW_H
#define CKPTFS_GROW_H

#include <stddef.h>
#include <stdlib.h>

/* Array v holds n elements of `elem` bytes in room for *cap.  Returns v
 * when there is room for element n, else v reallocated to twice *cap
 * (`first` when *cap is 0) with *cap updated; NULL when out of memory, v
 * unchanged and still the caller's. */
static inline void *ckpt_grow(void *v, size_t n, size_t *cap, size_t elem,
                              size_t first)
{
    if (n < *cap)
        return v;
    size_t c = *cap ? *cap * 2 : first;
    if (c <= n)
        c = n + 1;
    void *nv = realloc(v, c * elem);
    if (nv)
        *cap = c;
    return nv;
}

#endif
