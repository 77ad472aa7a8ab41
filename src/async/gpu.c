/*
 * gpu.c - the CUDA calls of the staging engine (see gpu.h): the one file
 * of the library that includes the CUDA runtime's header.  With CUDA, each
 * function is a thin wrapper that clears CUDA's sticky last error when a
 * call fails; without it, the host fallback at the end.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"   /* HAVE_CUDA */
#endif
#include "async/gpu.h"

#include <errno.h>
#include <stdlib.h>

#include "common/error.h"

#define NO_CUDA "this libckptfs was built without CUDA"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>

/* 0 for cudaSuccess; else clears CUDA's sticky error, says why, -EIO. */
static int cuda_rc(cudaError_t e, const char **why)
{
    if (e == cudaSuccess)
        return 0;
    cudaGetLastError();
    *why = cudaGetErrorString(e);
    return -EIO;
}

int ckpt_gpu_built(void)
{
    return 1;
}

int ckpt_gpu_usable(const char **why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        *why = cudaGetErrorString(e);
        cudaGetLastError();
        return 0;
    }
    if (n == 0) {
        *why = "no device";
        return 0;
    }
    return 1;
}

int ckpt_gpu_is_device_ptr(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

void *ckpt_gpu_host_alloc(size_t n, int portable)
{
    void *p = NULL;
    if (cudaHostAlloc(&p, n, portable ? cudaHostAllocPortable : 0) !=
        cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

void ckpt_gpu_host_free(void *p)
{
    if (p)
        cudaFreeHost(p);
}

struct ckpt_gpu_stream {
    cudaStream_t s;
};

int ckpt_gpu_stream_create(ckpt_gpu_stream **out)
{
    ckpt_gpu_stream *s = malloc(sizeof *s);
    *out = NULL;
    if (!s)
        return -ENOMEM;
    if (cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking) !=
        cudaSuccess) {
        cudaGetLastError();
        free(s);
        return -EIO;
    }
    *out = s;
    return 0;
}

void ckpt_gpu_stream_destroy(ckpt_gpu_stream *s)
{
    if (!s)
        return;
    cudaStreamDestroy(s->s);
    free(s);
}

int ckpt_gpu_copy_async(ckpt_gpu_stream *s, void *dst, const void *src,
                        size_t n, const char **why)
{
    int rc = cuda_rc(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s->s),
                     why);
    if (rc)   /* what was queued must land before the memory is reused */
        cudaStreamSynchronize(s->s);
    return rc;
}

int ckpt_gpu_stream_sync(ckpt_gpu_stream *s, const char **why)
{
    return cuda_rc(cudaStreamSynchronize(s->s), why);
}

struct ckpt_gpu_event {
    cudaEvent_t e;
};

int ckpt_gpu_event_create(ckpt_gpu_event **out)
{
    ckpt_gpu_event *ev = malloc(sizeof *ev);
    *out = NULL;
    if (!ev)
        return -ENOMEM;
    if (cudaEventCreateWithFlags(&ev->e, cudaEventDisableTiming) !=
        cudaSuccess) {
        cudaGetLastError();
        free(ev);
        return -EIO;
    }
    *out = ev;
    return 0;
}

void ckpt_gpu_event_destroy(ckpt_gpu_event *ev)
{
    if (!ev)
        return;
    cudaEventDestroy(ev->e);
    free(ev);
}

int ckpt_gpu_event_record(ckpt_gpu_event *ev, ckpt_gpu_stream *s,
                          const char **why)
{
    return cuda_rc(cudaEventRecord(ev->e, s->s), why);
}

int ckpt_gpu_event_wait(ckpt_gpu_event *ev, const char **why)
{
    return cuda_rc(cudaEventSynchronize(ev->e), why);
}

int ckpt_gpu_copy_to_host(void *dst, const void *src, size_t n,
                          const char **why)
{
    return cuda_rc(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), why);
}

struct ckpt_gpu_upload {
    unsigned char *buf[2];
    cudaEvent_t ev[2];          /* buffer b's last copies have landed */
    cudaStream_t stream;
    int k;                      /* buffers pushed */
    size_t buf_bytes;
    int dev;                    /* the device of the stream */
    int old_dev;                /* the caller's device, restored at end */
};

int ckpt_gpu_device_of(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) == cudaSuccess)
        return a.device;
    cudaGetLastError();
    return 0;
}

void ckpt_gpu_upload_free(void *arg)
{
    ckpt_gpu_upload *u = arg;
    if (!u)
        return;
    if (u->stream)
        cudaStreamDestroy(u->stream);
    for (int b = 0; b < 2; b++) {
        if (u->ev[b])
            cudaEventDestroy(u->ev[b]);
        if (u->buf[b])
            cudaFreeHost(u->buf[b]);
    }
    cudaGetLastError();
    free(u);
}

int ckpt_gpu_upload_end(ckpt_gpu_upload *u, int rc, ckpt_error *err)
{
    if (u->stream) {
        cudaError_t e = cudaStreamSynchronize(u->stream);
        if (rc == 0 && e != cudaSuccess)
            rc = ckpt_err(err, -EIO, "load: CUDA copy to the device failed: "
                          "%s", cudaGetErrorString(e));
    }
    cudaGetLastError();
    cudaSetDevice(u->old_dev);
    return rc;
}

int ckpt_gpu_upload_close(ckpt_gpu_upload *u, int rc, ckpt_error *err)
{
    rc = ckpt_gpu_upload_end(u, rc, err);
    ckpt_gpu_upload_free(u);
    return rc;
}

int ckpt_gpu_upload_fits(const ckpt_gpu_upload *u, const void *dev_hint,
                         size_t buf_bytes)
{
    return u->buf_bytes >= buf_bytes && u->dev == ckpt_gpu_device_of(dev_hint);
}

void ckpt_gpu_upload_begin(ckpt_gpu_upload *u)
{
    cudaGetDevice(&u->old_dev);
    cudaSetDevice(u->dev);
}

int ckpt_gpu_upload_open(ckpt_gpu_upload **out, const void *dev_hint,
                         size_t buf_bytes, ckpt_error *err)
{
    ckpt_gpu_upload *u = calloc(1, sizeof *u);
    *out = NULL;
    if (!u)
        return ckpt_err(err, -ENOMEM, "out of memory");
    u->buf_bytes = buf_bytes;
    u->dev = ckpt_gpu_device_of(dev_hint);
    ckpt_gpu_upload_begin(u);
    if (cudaStreamCreateWithFlags(&u->stream, cudaStreamNonBlocking) !=
            cudaSuccess ||
        cudaEventCreateWithFlags(&u->ev[0], cudaEventDisableTiming) !=
            cudaSuccess ||
        cudaEventCreateWithFlags(&u->ev[1], cudaEventDisableTiming) !=
            cudaSuccess ||
        cudaHostAlloc((void **)&u->buf[0], buf_bytes, 0) != cudaSuccess ||
        cudaHostAlloc((void **)&u->buf[1], buf_bytes, 0) != cudaSuccess)
        return ckpt_gpu_upload_close(u, ckpt_err(err, -ENOMEM, "load: cannot "
                                     "set up pinned bounce buffers and a "
                                     "stream: %s", cudaGetErrorString(
                                         cudaGetLastError())), err);
    *out = u;
    return 0;
}

int ckpt_gpu_upload_buffer(ckpt_gpu_upload *u, void **buf, ckpt_error *err)
{
    int b = u->k % 2;
    cudaError_t e = cudaEventSynchronize(u->ev[b]);   /* buffer b is free */
    if (e != cudaSuccess)
        return ckpt_err(err, -EIO, "load: CUDA copy to the device failed: "
                        "%s", cudaGetErrorString(e));
    *buf = u->buf[b];
    return 0;
}

int ckpt_gpu_upload_copy(ckpt_gpu_upload *u, void *dst, size_t off, size_t n,
                         ckpt_error *err)
{
    cudaError_t e = cudaMemcpyAsync(dst, u->buf[u->k % 2] + off, n,
                                    cudaMemcpyDefault, u->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return ckpt_err(err, -EIO, "load: host-to-device copy of %zu bytes "
                        "to %p failed: %s", n, dst, cudaGetErrorString(e));
    }
    return 0;
}

int ckpt_gpu_upload_push(ckpt_gpu_upload *u, ckpt_error *err)
{
    int b = u->k++ % 2;
    cudaError_t e = cudaEventRecord(u->ev[b], u->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return ckpt_err(err, -EIO, "load: CUDA event record failed: %s",
                        cudaGetErrorString(e));
    }
    return 0;
}

#else /* the host fallback: no device, ever */

int ckpt_gpu_built(void)
{
    return 0;
}

int ckpt_gpu_usable(const char **why)
{
    *why = NO_CUDA;
    return 0;
}

int ckpt_gpu_is_device_ptr(const void *p)
{
    return 0;
}

int ckpt_gpu_device_of(const void *p)
{
    return 0;
}

void *ckpt_gpu_host_alloc(size_t n, int portable)
{
    return NULL;
}

void ckpt_gpu_host_free(void *p)
{
}

int ckpt_gpu_stream_create(ckpt_gpu_stream **out)
{
    *out = NULL;
    return -ENOTSUP;
}

void ckpt_gpu_stream_destroy(ckpt_gpu_stream *s)
{
}

int ckpt_gpu_copy_async(ckpt_gpu_stream *s, void *dst, const void *src,
                        size_t n, const char **why)
{
    *why = NO_CUDA;
    return -ENOTSUP;
}

int ckpt_gpu_stream_sync(ckpt_gpu_stream *s, const char **why)
{
    *why = NO_CUDA;
    return -ENOTSUP;
}

int ckpt_gpu_event_create(ckpt_gpu_event **out)
{
    *out = NULL;
    return -ENOTSUP;
}

void ckpt_gpu_event_destroy(ckpt_gpu_event *ev)
{
}

int ckpt_gpu_event_record(ckpt_gpu_event *ev, ckpt_gpu_stream *s,
                          const char **why)
{
    *why = NO_CUDA;
    return -ENOTSUP;
}

int ckpt_gpu_event_wait(ckpt_gpu_event *ev, const char **why)
{
    *why = NO_CUDA;
    return -ENOTSUP;
}

int ckpt_gpu_copy_to_host(void *dst, const void *src, size_t n,
                          const char **why)
{
    *why = NO_CUDA;
    return -ENOTSUP;
}

int ckpt_gpu_upload_open(ckpt_gpu_upload **out, const void *dev_hint,
                         size_t buf_bytes, ckpt_error *err)
{
    *out = NULL;
    return ckpt_err(err, -ENOTSUP, "load into device memory: " NO_CUDA);
}

int ckpt_gpu_upload_buffer(ckpt_gpu_upload *u, void **buf, ckpt_error *err)
{
    return ckpt_err(err, -ENOTSUP, "load into device memory: " NO_CUDA);
}

int ckpt_gpu_upload_copy(ckpt_gpu_upload *u, void *dst, size_t off, size_t n,
                         ckpt_error *err)
{
    return ckpt_err(err, -ENOTSUP, "load into device memory: " NO_CUDA);
}

int ckpt_gpu_upload_push(ckpt_gpu_upload *u, ckpt_error *err)
{
    return ckpt_err(err, -ENOTSUP, "load into device memory: " NO_CUDA);
}

int ckpt_gpu_upload_end(ckpt_gpu_upload *u, int rc, ckpt_error *err)
{
    return rc;
}

int ckpt_gpu_upload_fits(const ckpt_gpu_upload *u, const void *dev_hint,
                         size_t buf_bytes)
{
    return 0;
}

void ckpt_gpu_upload_begin(ckpt_gpu_upload *u)
{
}

int ckpt_gpu_upload_close(ckpt_gpu_upload *u, int rc, ckpt_error *err)
{
    return rc;
}

void ckpt_gpu_upload_free(void *u)
{
}

#endif
