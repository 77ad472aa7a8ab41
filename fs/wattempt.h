/*
 * wattempt.h - who wrote what through this mount, per save: the pieces
 * each rank's processes recorded (file, box, writer) and whether those
 * processes still run, so that a rank that runs again is told from one
 * still running (docs/MOUNT.md, "A rank runs again").  A process is its
 * thread group and start time (FUSE reports thread ids; pids are reused).
 * Thread-safe.
 */
#ifndef CKPTFS_FS_WATTEMPT_H
#define CKPTFS_FS_WATTEMPT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct wa_table wa_table;

int wa_new(wa_table **out);
void wa_free(wa_table *t);
/* Forgets everything (the save committed: nothing more is written). */
void wa_forget(wa_table *t);

/* Process pid (a thread id) acts for `rank`: it starts a piece. */
int wa_note_proc(wa_table *t, int rank, pid_t pid);
/* Process pid of `rank` recorded a piece of file `node`, box (ndim, off,
 * size), in writer `writer`. */
int wa_note_piece(wa_table *t, uint32_t node, int rank, pid_t pid,
                  const char *writer, int ndim, const int64_t *off,
                  const int64_t *size);
/* 1 when a process noted for rank still runs (pid's own, when it was
 * noted: a process that acts for its rank again is the same run). */
int wa_rank_live(wa_table *t, int rank, pid_t pid);
/* Before process pid of `rank` writes box (ndim, off, size) of file
 * `node`: into out (cap bytes, comma-separated) the writers whose
 * overlapping pieces it takes the place of -- the rank's earlier pieces
 * of that file through this mount when every process that wrote them is
 * gone (a re-run; none when one of them, pid's own included, still
 * runs).  1 when out is not empty. */
int wa_earlier(wa_table *t, uint32_t node, int rank, pid_t pid, int ndim,
               const int64_t *off, const int64_t *size, char *out,
               size_t cap);

#endif
