/*
 * le.h - little-endian integers in byte buffers, whatever the host's byte
 * order: the on-disk fields of frames, plans and layouts.
 */
#ifndef CKPT_LE_H
#define CKPT_LE_H

#include <stdint.h>

/* Stores the low n bytes of v at p, least significant first (n <= 8). */
static inline void ckpt_put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* The n-byte little-endian value at p (n <= 8). */
static inline uint64_t ckpt_get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static inline void ckpt_put_le32(uint8_t *p, uint32_t v)
{
    ckpt_put_le(p, v, 4);
}

static inline uint32_t ckpt_get_le32(const uint8_t *p)
{
    return (uint32_t)ckpt_get_le(p, 4);
}

#endif
