/*
 * spent.h - a committed save's spent .pending/ (its writers' plans, the
 * claim, the lease), off the commit's critical path: once index.db is
 * published the plans are history, so the commit moves .pending/ aside in
 * one rename - to a hidden name in the checkpoint's parent,
 * CKPT_SPENT_PREFIX<pid>.<n>.<name> - and returns; the next commit beside
 * it removes what it finds there on a thread of its own, while it reads
 * and checks its plans, and `ckpt gc` removes what is left (the prefix is
 * gc's, CKPT_GC_PREFIX: whatever it names is debris).  A crash at any
 * point leaves .pending/ in the checkpoint (finished by a status read or
 * gc, as before) or a spent directory beside it, whole or in part: never
 * a checkpoint without its index, nothing a reader or listing shows
 * (docs/GUARANTEES.md, "Which sync makes which promise").
 */
#ifndef CKPT_SPENT_H
#define CKPT_SPENT_H

#include "ckptfs.h"
#include "write/gc.h"

/* Moves dir/.pending to a new spent name beside dir: 0, or -errno (no
 * rename happened: the caller removes .pending/ in place). */
int ckpt_spent_move(const char *dir);

/* Removes the directory tree at path, its files unlinked on several
 * threads (an unlink waits for the freeing of the file's blocks, which
 * overlaps across files).  Best effort: 0, or the first error. */
int ckpt_spent_remove(const char *path, ckpt_error *err);

/* Lists every spent directory of this user's in the parent of dir and
 * starts removing them on a thread; NULL when there is none, or no
 * thread could start (then the next commit or gc removes them). */
typedef struct ckpt_spent_sweep ckpt_spent_sweep;
ckpt_spent_sweep *ckpt_spent_sweep_start(const char *dir);

/* Waits for the sweep s (NULL: none) and frees it. */
void ckpt_spent_sweep_join(ckpt_spent_sweep *s);

#endif
