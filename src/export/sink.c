/*
 * sink.c - an export's output file (sink.h).
 */
#include "export/sink.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"

int exp_sink_create(exp_sink *s, const char *path, ckpt_error *err)
{
    s->pos = 0;
    s->path = strdup(path);
    if (!s->path)
        return ckpt_err(err, -ENOMEM, "%s: out of memory", path);
    s->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                 0666);
    if (s->fd < 0) {
        int rc = -errno;
        free(s->path);
        s->path = NULL;
        return ckpt_err_sys(err, rc, "cannot create %s", path);
    }
    return 0;
}

int exp_sink_write(exp_sink *s, const void *buf, size_t n, ckpt_error *err)
{
    int rc = ckpt_write_full(s->fd, buf, n, s->path, err);
    if (rc == 0)
        s->pos += n;
    return rc;
}

int exp_sink_zeros(exp_sink *s, size_t n, ckpt_error *err)
{
    static const unsigned char zero[256];
    while (n) {
        size_t k = n < sizeof zero ? n : sizeof zero;
        int rc = exp_sink_write(s, zero, k, err);
        if (rc)
            return rc;
        n -= k;
    }
    return 0;
}

int exp_sink_pwrite(exp_sink *s, const void *buf, size_t n, uint64_t off,
                    ckpt_error *err)
{
    const unsigned char *p = buf;
    while (n) {
        ssize_t k = pwrite(s->fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return ckpt_err_sys(err, k < 0 ? -errno : -EIO,
                                "cannot write %s", s->path);
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

int exp_sink_close(exp_sink *s, int sync, ckpt_error *err)
{
    int rc = 0;
    if (s->fd >= 0) {
        if (sync && fsync(s->fd) != 0)
            rc = ckpt_err_sys(err, -errno, "cannot sync %s", s->path);
        if (close(s->fd) != 0 && rc == 0)
            rc = ckpt_err_sys(err, -errno, "cannot write %s", s->path);
    }
    s->fd = -1;
    free(s->path);
    s->path = NULL;
    return rc;
}

int exp_sink_file(const char *path, const void *data, size_t n, int sync,
                  ckpt_error *err)
{
    exp_sink s = { .fd = -1 };
    int rc = exp_sink_create(&s, path, err);
    if (rc)
        return rc;
    rc = exp_sink_write(&s, data, n, err);
    int crc = exp_sink_close(&s, sync, err);
    return rc ? rc : crc;
}
