/*
 * sink.h - one output file of an export: its descriptor, its path (for
 * messages) and how many bytes were appended, so that the zip writer knows
 * where each entry lands.
 */
#ifndef CKPT_EXPORT_SINK_H
#define CKPT_EXPORT_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "ckptfs.h"

typedef struct exp_sink {
    int fd;
    char *path;
    uint64_t pos;       /* bytes appended so far */
} exp_sink;

/* Creates `path`, or empties it (the export's own temporary file), never
 * through a symbolic link; mode 0666 & umask.  Returns 0 or a negative
 * errno naming the file. */
int exp_sink_create(exp_sink *s, const char *path, ckpt_error *err);
/* Appends n bytes. */
int exp_sink_write(exp_sink *s, const void *buf, size_t n, ckpt_error *err);
/* Appends n zero bytes. */
int exp_sink_zeros(exp_sink *s, size_t n, ckpt_error *err);
/* Overwrites n bytes at off (< pos). */
int exp_sink_pwrite(exp_sink *s, const void *buf, size_t n, uint64_t off,
                    ckpt_error *err);
/* A whole small file (an index, a .metadata) from memory. */
int exp_sink_file(const char *path, const void *data, size_t n, int sync,
                  ckpt_error *err);
/* fsync (when sync), then close; always closes and frees. */
int exp_sink_close(exp_sink *s, int sync, ckpt_error *err);

#endif
