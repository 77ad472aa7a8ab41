/*
 * filemap.c - read-only mappings of whole files, and their resident
 * ranges (see filemap.h).
 */
#include "common/filemap.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void ckpt_smap_open(ckpt_smap *m, int fd)
{
    struct stat st;
    m->base = NULL;
    m->len = 0;
    m->fd = fd;
    if (fstat(fd, &st) != 0 || st.st_size <= 0 ||
        (uint64_t)st.st_size > SIZE_MAX)
        return;
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return;
    m->base = p;
    m->len = (uint64_t)st.st_size;
}

void ckpt_smap_close(ckpt_smap *m)
{
    if (m->base)
        munmap(m->base, (size_t)m->len);
    m->base = NULL;
    m->len = 0;
}

/* Pages asked about per mincore() call. */
#define VEC 256

const unsigned char *ckpt_smap_resident(const ckpt_smap *m, uint64_t off,
                                        size_t n)
{
    struct stat st;
    if (!m->base || n == 0 || off > m->len || n > m->len - off)
        return NULL;
    /* the file as it is now: a page past its end would raise SIGBUS, and
     * mincore() may still count it (a large folio that straddled the end
     * the file was truncated to) */
    if (fstat(m->fd, &st) != 0 || st.st_size < 0 ||
        off + n > (uint64_t)st.st_size)
        return NULL;
    uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t a = off / pg * pg, end = off + n;
    unsigned char vec[VEC];
    while (a < end) {
        uint64_t len = end - a < VEC * pg ? end - a : VEC * pg;
        size_t np = (size_t)((len + pg - 1) / pg);
        if (mincore(m->base + a, (size_t)len, vec) != 0)
            return NULL;
        for (size_t i = 0; i < np; i++)
            if (!(vec[i] & 1))
                return NULL;
        a += len;
    }
    return m->base + off;
}
