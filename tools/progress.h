/*
 * progress.h - a one-line progress bar on stderr for long commands (pack,
 * unpack, verify, import): bytes done of total, percentage and rate; and
 * when the command succeeds, one summary line that stays (tensors, bytes,
 * time, rate, compression ratio).  Both only when stderr is a terminal;
 * the bar is drawn at most about ten times a second.
 */
#ifndef CKPT_PROGRESS_H
#define CKPT_PROGRESS_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "ckptfs.h"

typedef struct progress {
    int enabled;            /* stderr is a terminal */
    int drawn;              /* a bar is on the screen */
    const char *label;
    uint64_t total, done;
    struct timespec start, last;
} progress;

/* Starts a bar for `total` bytes (drawn only if stderr is a terminal). */
void progress_init(progress *p, const char *label, uint64_t total);
/* Sets the bytes done and redraws if the last draw is ~0.1 s old. */
void progress_set(progress *p, uint64_t done);
/* Adds n bytes done. */
void progress_add(progress *p, uint64_t n);
/* Erases the bar (before printing other lines, and on failure). */
void progress_clear(progress *p);

/* Erases the bar and, on a terminal, prints the summary of the checkpoint
 * r the command made or read: "<verb> N tensors, SIZE in T s (RATE/s),
 * ratio R" (R as ckpt ls's RATIO: raw bytes over stored bytes).  Nothing
 * is printed for a NULL r. */
void progress_done(progress *p, const char *verb, const ckpt_reader *r);
/* The same for the checkpoint at `dir`, opened only on a terminal (no
 * summary if it does not open). */
void progress_done_path(progress *p, const char *verb, const char *dir);

/* The summary line (no newline) into buf, like snprintf: `items` tensors
 * of `raw` bytes in `secs` seconds, `stored` bytes stored. */
size_t progress_summary(char *buf, size_t cap, const char *verb,
                        uint64_t items, uint64_t raw, uint64_t stored,
                        double secs);

#endif
