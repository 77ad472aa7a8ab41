/*
 * strided.c - strided chunks mapped and gathered (see strided.h).
 */
#include "read/strided.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

int ckpt_strided_map_open(int fd, uint64_t off, uint64_t span,
                          const char *file, ckpt_strided_map *m,
                          ckpt_error *err)
{
    memset(m, 0, sizeof *m);
    struct stat st;
    if (span == 0)
        return 0;
    if (fstat(fd, &st) != 0)
        return ckpt_err_sys(err, -errno, "%s", file);
    if (off > (uint64_t)st.st_size || (uint64_t)st.st_size - off < span)
        return ckpt_err(err, -EIO, "%s: bytes %llu..%llu lie past its end "
                        "(%llu bytes): cut short since it was opened?",
                        file, (unsigned long long)off,
                        (unsigned long long)(off + span),
                        (unsigned long long)st.st_size);
    long page = sysconf(_SC_PAGESIZE);
    uint64_t start = off - off % (uint64_t)(page > 0 ? page : 4096);
    uint64_t len = off - start + span;
    if (len > SIZE_MAX)
        return ckpt_err(err, -EFBIG, "%s: %llu bytes to map", file,
                        (unsigned long long)len);
    void *a = mmap(NULL, (size_t)len, PROT_READ, MAP_SHARED, fd,
                   (off_t)start);
    if (a == MAP_FAILED)
        return ckpt_err_sys(err, -errno, "%s: mapping bytes %llu..%llu",
                            file, (unsigned long long)off,
                            (unsigned long long)(off + span));
    m->addr = a;
    m->len = (size_t)len;
    m->base = (const unsigned char *)a + (off - start);
    return 0;
}

void ckpt_strided_map_close(ckpt_strided_map *m)
{
    if (m->addr)
        munmap(m->addr, m->len);
    memset(m, 0, sizeof *m);
}

void ckpt_strided_gather(unsigned char *dst, const unsigned char *base,
                         int ndim, const int64_t *sizes,
                         const int64_t *stride, size_t isz, uint64_t src,
                         uint64_t n)
{
    if (n == 0)
        return;
    if (ndim == 0) {
        memcpy(dst, base + src, n);
        return;
    }
    /* the index of the element holding byte src, and where it is */
    int64_t idx[CKPT_MAX_DIMS];
    uint64_t e = src / isz, skip = src % isz;
    int64_t pos = 0;
    for (int k = ndim - 1; k >= 0; k--) {
        idx[k] = (int64_t)(e % (uint64_t)sizes[k]);
        e /= (uint64_t)sizes[k];
        pos += idx[k] * stride[k];
    }
    int last = ndim - 1;
    int64_t s_last = stride[last];
    while (n) {
        const unsigned char *p = base + (uint64_t)pos * isz + skip;
        uint64_t take;
        if (s_last == 1) {
            /* the rest of this row is contiguous in the storage */
            take = (uint64_t)(sizes[last] - idx[last]) * isz - skip;
            if (take > n)
                take = n;
        } else {
            take = isz - skip < n ? isz - skip : n;
        }
        memcpy(dst, p, take);
        dst += take;
        n -= take;
        /* step to the element after the last byte copied */
        uint64_t adv = (skip + take) / isz;
        skip = (skip + take) % isz;
        idx[last] += (int64_t)adv;
        pos += (int64_t)adv * s_last;
        for (int k = last; k > 0 && idx[k] == sizes[k]; k--) {
            pos += stride[k - 1] - idx[k] * stride[k];
            idx[k] = 0;
            idx[k - 1]++;
        }
    }
}
