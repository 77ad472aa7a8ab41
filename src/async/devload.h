/*
 * devload.h - loads into CUDA device memory: regions of tensors read by
 * the reader's threads into pinned bounce buffers, several regions to a
 * buffer, and copied to the device while the next buffer is read.
 */
#ifndef CKPT_DEVLOAD_H
#define CKPT_DEVLOAD_H

#include <stddef.h>
#include "ckptfs.h"

/* Reads the n items (each checked already: tensor, region, a device dst)
 * into device memory.  On failure some destinations may have been
 * written; every copy queued has landed when this returns. */
int ckpt_devload(ckpt_reader *r, const ckpt_read_item *items, size_t n,
                 ckpt_error *err);

#endif
