/*
 * gpu.h - the CUDA calls of the staging engine behind one small interface,
 * so that staging.c carries no #ifdef: device detection, pinned host
 * memory, copy streams, a device-to-host copy, and the double-buffered
 * upload of a device load.  Built without CUDA (config.h's HAVE_CUDA
 * unset), gpu.c is the host fallback: no device is ever usable, no
 * pointer is device memory, and whatever needs a device fails with
 * -ENOTSUP; callers reach those only after a device was found.
 */
#ifndef CKPT_GPU_H
#define CKPT_GPU_H

#include <stddef.h>
#include "ckptfs.h"

/* 1 when this libckptfs was built with CUDA. */
int ckpt_gpu_built(void);
/* 1 when some CUDA device is usable; otherwise 0 with *why saying why
 * ("this libckptfs was built without CUDA", "no device", CUDA's error). */
int ckpt_gpu_usable(const char **why);
/* 1 when p is CUDA device (or managed) memory. */
int ckpt_gpu_is_device_ptr(const void *p);
/* The device that holds memory p (0 when CUDA cannot tell). */
int ckpt_gpu_device_of(const void *p);

/* n bytes of pinned host memory (portable: usable from every device's
 * context), or NULL. */
void *ckpt_gpu_host_alloc(size_t n, int portable);
void ckpt_gpu_host_free(void *p);

/* A non-blocking copy stream. */
typedef struct ckpt_gpu_stream ckpt_gpu_stream;
/* 0, or -EIO (-ENOTSUP without CUDA). */
int ckpt_gpu_stream_create(ckpt_gpu_stream **out);
void ckpt_gpu_stream_destroy(ckpt_gpu_stream *s);
/* Queues a copy of n bytes from src to dst (either may be device or
 * host memory) on s; an event recorded after it says when it has landed.
 * On failure, waits for what s had queued and returns -EIO with *why
 * set. */
int ckpt_gpu_copy_async(ckpt_gpu_stream *s, void *dst, const void *src,
                        size_t n, const char **why);
/* Waits for everything queued on s: 0, or -EIO with *why set (a copy
 * failed). */
int ckpt_gpu_stream_sync(ckpt_gpu_stream *s, const char **why);

/* A point in a stream: recorded after some copies, waited for by another
 * thread, so that no host callback sits between the copies. */
typedef struct ckpt_gpu_event ckpt_gpu_event;
/* 0, or -EIO (-ENOTSUP without CUDA). */
int ckpt_gpu_event_create(ckpt_gpu_event **out);
void ckpt_gpu_event_destroy(ckpt_gpu_event *e);
/* Records e after what s has queued so far (replacing an earlier record):
 * 0, or -EIO with *why set. */
int ckpt_gpu_event_record(ckpt_gpu_event *e, ckpt_gpu_stream *s,
                          const char **why);
/* Waits until what e was recorded after has landed: 0, or -EIO with *why
 * set (a copy failed). */
int ckpt_gpu_event_wait(ckpt_gpu_event *e, const char **why);

/* Copies n bytes of device memory at src to host memory at dst, waiting
 * for the copy: 0, or -EIO with *why set. */
int ckpt_gpu_copy_to_host(void *dst, const void *src, size_t n,
                          const char **why);

/* Uploads into device memory through two pinned bounce buffers of
 * `buf_bytes` each, used in turn, on a stream of the device that holds
 * `dev_hint`: the caller fills the buffer ckpt_gpu_upload_buffer gives,
 * queues copies out of it (ckpt_gpu_upload_copy) and pushes it, which lets
 * those copies run while the caller fills the other buffer. */
typedef struct ckpt_gpu_upload ckpt_gpu_upload;
/* 0, or -ENOMEM (-ENOTSUP without CUDA) with a message; nothing is left
 * to close on failure. */
int ckpt_gpu_upload_open(ckpt_gpu_upload **out, const void *dev_hint,
                         size_t buf_bytes, ckpt_error *err);
/* The next buffer to fill, once the copies queued out of it last have
 * landed. */
int ckpt_gpu_upload_buffer(ckpt_gpu_upload *u, void **buf, ckpt_error *err);
/* Queues the copy of n bytes at offset `off` of the current buffer to
 * device memory at dst. */
int ckpt_gpu_upload_copy(ckpt_gpu_upload *u, void *dst, size_t off, size_t n,
                         ckpt_error *err);
/* Done with the current buffer: the next ckpt_gpu_upload_buffer gives the
 * other one. */
int ckpt_gpu_upload_push(ckpt_gpu_upload *u, ckpt_error *err);
/* Waits for every copy and restores the caller's device, keeping u for
 * another load (ckpt_gpu_upload_begin).  Returns rc when it is an error
 * already, else 0 or the error of a copy that failed. */
int ckpt_gpu_upload_end(ckpt_gpu_upload *u, int rc, ckpt_error *err);
/* 1 when u serves a load into the device of dev_hint with buffers of at
 * least buf_bytes; the load then starts with ckpt_gpu_upload_begin. */
int ckpt_gpu_upload_fits(const ckpt_gpu_upload *u, const void *dev_hint,
                         size_t buf_bytes);
void ckpt_gpu_upload_begin(ckpt_gpu_upload *u);
/* ckpt_gpu_upload_end, then frees u. */
int ckpt_gpu_upload_close(ckpt_gpu_upload *u, int rc, ckpt_error *err);
/* Frees u (a ckpt_gpu_upload *) after an end; NULL does nothing. */
void ckpt_gpu_upload_free(void *u);

#endif
