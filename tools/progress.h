/*
 * progress.h - a one-line progress bar on stderr for long commands (pack,
 * unpack, verify): bytes done of total, percentage and rate.  It draws only
 * when stderr is a terminal, and at most about ten times a second.
 */
#ifndef CKPT_PROGRESS_H
#define CKPT_PROGRESS_H

#include <stdint.h>
#include <time.h>

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
/* Erases the bar (before printing other lines, and when done). */
void progress_clear(progress *p);

#endif
