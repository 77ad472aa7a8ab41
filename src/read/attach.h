/*
 * attach.h - one object of an upper layer kept with a reader, so that
 * what it costs to make is paid once per reader, not once per call:
 * async/devload.c keeps its pinned bounce buffers and copy stream there.
 * The reader frees it with its free function at ckpt_reader_close.
 */
#ifndef CKPT_ATTACH_H
#define CKPT_ATTACH_H

#include "ckptfs.h"

/* Takes the object out of r's slot: NULL when the slot is empty (or
 * another thread holds the object: the caller then makes its own). */
void *ckpt_reader_attached_take(ckpt_reader *r);
/* Puts obj in r's slot, to be freed by free_fn at ckpt_reader_close; when
 * the slot is full already, frees obj now. */
void ckpt_reader_attached_put(ckpt_reader *r, void *obj,
                              void (*free_fn)(void *));

#endif
