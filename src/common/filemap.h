/*
 * filemap.h - a read-only shared mapping of a whole file (a shard file:
 * the reader's own and its delta bases'), and which of its bytes can be
 * read in place: those in the page cache now, within the file as it is
 * now.  Decoding a coded frame from the mapping saves the copy a pread
 * makes (read/shardio.c says what that costs and why cold bytes still go
 * through pread).
 */
#ifndef CKPT_FILEMAP_H
#define CKPT_FILEMAP_H

#include <stddef.h>
#include <stdint.h>

/* A read-only shared mapping of a whole shard file, as long as the file
 * was when it was mapped; base NULL when it could not be mapped (the
 * reads then all go through pread). */
typedef struct ckpt_smap {
    unsigned char *base;
    uint64_t len;
    int fd;                   /* the file's (not owned) */
} ckpt_smap;

/* Maps fd's file; never fails (an unmappable file leaves m->base NULL). */
void ckpt_smap_open(ckpt_smap *m, int fd);
void ckpt_smap_close(ckpt_smap *m);

/* The n stored bytes at `off`, in place in the mapping, when every page
 * of them is in the page cache now and within the file as it is now; NULL
 * when they are not (or lie past the mapped length), and the caller reads
 * them with pread. */
const unsigned char *ckpt_smap_resident(const ckpt_smap *m, uint64_t off,
                                        size_t n);

#endif
