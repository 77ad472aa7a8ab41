/*
 * rendezvous.h - the commit of a save written through one or more mounts,
 * coordinated through the checkpoint directory alone (docs/MOUNT.md,
 * "Commit"): each rank that is done leaves a marker .pending/rank-R
 * (created exclusively, so a rank cannot be counted twice, whichever mount
 * it writes through); whoever completes the set of `world` markers runs
 * ckpt_commit(), which the library makes safe against a concurrent second
 * committer; a failed commit leaves its message in .pending/failed for
 * every mount's status file.  A save whose markers are all in but that
 * nobody commits (its committer was killed, or could not record its
 * failure) is committed by the next status read or repeated rank.  No
 * state besides the directory.
 */
#ifndef CKPTFS_FS_RENDEZVOUS_H
#define CKPTFS_FS_RENDEZVOUS_H

#include <stddef.h>

#include "ckptfs.h"

/* Records that `rank` has closed all its pieces.  -EINVAL (with a
 * message) for a rank outside 0..world-1, -EALREADY for one already
 * recorded; sets *complete when all world ranks now are. */
int rdv_mark(const char *dir, int rank, int world, int *complete,
             ckpt_error *err);

/* A new attempt of the save when `rank` has committed to it (its marker
 * is in) while other ranks have yet to (docs/MOUNT.md, "A rank runs
 * again"): every writer with a plan so far is listed in
 * .pending/superseded (of an earlier attempt), then every rank marker is
 * removed, so that every rank commits again.  Sets *had to the markers
 * removed (0: no new attempt: the rank had not committed, or every rank
 * is in and a repeated commit retries instead). */
int rdv_reopen(const char *dir, int rank, int world, int *had,
               ckpt_error *err);

/* Lists every writer with a plan so far in .pending/superseded (of an
 * earlier attempt): what a mount does that joins a save no writer holds
 * (its writers are gone).  *n: how many (0: none, nothing written). */
int rdv_supersede_all(const char *dir, int *n, ckpt_error *err);

/* Appends to the comma-separated list out (cap bytes) the writers of
 * `rank` (rank<R>, rank<R>-<k>) that .pending/superseded lists; returns
 * how many. */
int rdv_superseded(const char *dir, int rank, char *out, size_t cap);

/* Validates and commits dir (world_size = world).  0 once dir is
 * committed, by this call or a concurrent one; otherwise the planner's
 * error, which is also left in .pending/failed. */
int rdv_commit(const char *dir, int world, ckpt_error *err);

/* rdv_commit after forgetting the failure a previous commit recorded:
 * what a rank's repeated commit does once every rank is in. */
int rdv_retry(const char *dir, int world, ckpt_error *err);

/* The status line of dir, with its newline: "committed", "failed: MSG"
 * (a commit's failure, or a shard that could not be synced), "committing"
 * or "pending K/N" (K ranks recorded).  When every rank is in and no
 * commit runs, runs it first.  Like snprintf. */
int rdv_status(const char *dir, int world, char *buf, size_t cap);

/* Appends one line to the refused-piece notes of dir that writer group
 * `who` keeps (.pending/errors.WHO, one file per mount, so that no two
 * processes append to one file): "FILE: WHY (BY)".  Best effort: a note
 * that cannot be written is only missing from the list. */
void rdv_note_error(const char *dir, const char *who, const char *file,
                    const char *by, const char *why);

/* The text of .ckptfs/errors: every note of every mount (by file name),
 * then "commit refused: MSG" when a commit failed.  A new string in
 * *out (free() it) of *len bytes; "" when nothing was refused. */
int rdv_errors(const char *dir, char **out, size_t *len);

#endif
