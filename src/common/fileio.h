/*
 * fileio.h - the file operations every layer needs, with complete loops and
 * messages naming the file: an append-only shard file, full preads, fsync
 * of files and directories, recursive removal.
 */
#ifndef CKPT_FILEIO_H
#define CKPT_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include "ckptfs.h"

/* An append-only shard data file, written by one writer. */
typedef struct ckpt_shard ckpt_shard;

/* Creates `path` exclusively (O_CREAT|O_EXCL): -EEXIST if present. */
int ckpt_shard_create(ckpt_shard **out, const char *path, ckpt_error *err);
/* Appends all n bytes (retrying short writes and EINTR) and sets *offset to
 * where they start.  -ENOSPC etc. name the file. */
int ckpt_shard_append(ckpt_shard *s, const void *buf, size_t n,
                      uint64_t *offset, ckpt_error *err);
int ckpt_shard_sync(ckpt_shard *s, ckpt_error *err);   /* fdatasync */
/* on: as appends go, wait for the writeback of earlier ones and drop
 * their pages from the page cache (a background save's writes neither
 * fill the cache nor run ahead of the disk).  Off by default. */
void ckpt_shard_set_nocache(ckpt_shard *s, int on);
uint64_t ckpt_shard_size(const ckpt_shard *s);
const char *ckpt_shard_path(const ckpt_shard *s);
/* Closes and frees (also on error). */
int ckpt_shard_close(ckpt_shard *s, ckpt_error *err);

/* 1 when the kernel copies fast between page-cache bytes and user memory
 * that sit at `from` and `to` (a file offset and an address, either way
 * round): their offsets within a 64-byte cache line differ by 0, or put
 * `to` 32..63 bytes past `from`.  Otherwise the copy (rep movsb) runs at a
 * third of its speed on the CPUs measured, and shardio.c and
 * ckpt_shard_append go through a buffer placed to line up. */
int ckpt_copy_fast(uint64_t from, uint64_t to);

/* memcpy in blocks small enough that glibc copies them with vector loads
 * and stores (fast whatever the alignment), never with rep movsb. */
void ckpt_copy_blocks(void *dst, const void *src, size_t n);

/* Reads exactly n bytes at off.  A short read (file truncated) is -EIO with
 * a message naming `path`, the offset and the length. */
int ckpt_pread_full(int fd, void *buf, size_t n, uint64_t off,
                    const char *path, ckpt_error *err);

/* Writes all of buf to fd. */
int ckpt_write_full(int fd, const void *buf, size_t n, const char *path,
                    ckpt_error *err);

/* fsync of a file by path, and of a directory (so renames are durable). */
int ckpt_fsync_path(const char *path, ckpt_error *err);
int ckpt_fsync_dir(const char *dir, ckpt_error *err);
/* fsync of the directory holding `path` (its name's), "." for a name
 * without a slash. */
int ckpt_fsync_parent(const char *path, ckpt_error *err);

/* mkdir -p for one level with mode 0755; EEXIST is success. */
int ckpt_mkdir(const char *path, ckpt_error *err);

/* mkdir -p: creates path and its missing ancestors (mode 0755). */
int ckpt_mkdirs(const char *path, ckpt_error *err);

/* rm -rf of path (files and directories, not following symlinks). */
int ckpt_remove_tree(const char *path, ckpt_error *err);

/* snprintf into buf, -ENAMETOOLONG (naming the parts) if it does not fit. */
int ckpt_path_join(char *buf, size_t cap, const char *a, const char *b,
                   ckpt_error *err);

#endif
