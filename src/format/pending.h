/*
 * pending.h - a save's .pending/ directory and its control files (the
 * lease, commit.lock, rank markers, failed, unsynced, errors.*), opened so
 * that nothing another user planted there is followed, blocked on or read
 * whole (docs/TRUST.md, "A shared root"):
 *
 * - .pending/ is opened from the save's directory without following a
 *   link and, for anyone who writes or commits the save, must belong to
 *   the user acting (the effective uid): a save is written and committed
 *   by the user who owns its .pending/, never by another one, root
 *   included -- root's daemon or `ckpt commit` refuses another user's save
 *   rather than act on files that user controls;
 * - every file in it is opened relative to its descriptor with
 *   ckpt_confine_at: no symbolic link, no FIFO or device, and a regular
 *   file of the acting user;
 * - control files are read with a bound (CKPT_CONTROL_MAX bytes): a
 *   sparse 100 GiB file costs what its first bytes cost.
 */
#ifndef CKPT_PENDING_H
#define CKPT_PENDING_H

#include <stddef.h>
#include <sys/types.h>

#include "ckptfs.h"

/* The most bytes read from one control file (failed, unsynced, each
 * errors.* note file); a note file that reached it takes no more notes. */
#define CKPT_CONTROL_MAX (64 * 1024)

/* Opens dir/.pending (O_RDONLY | O_DIRECTORY).  With `owned`, it must be
 * a directory of the effective user (-EPERM with a message naming its
 * owner otherwise); without (gc, which only removes), any owner.
 * -ENOENT when it does not exist. */
int ckpt_pending_open(const char *dir, int owned, ckpt_error *err);

/* Opens control file `name` of the .pending/ descriptor pfd with flags
 * (O_CREAT: mode 0644), a regular file of the effective user; returns the
 * descriptor or -errno, with a message naming dir/.pending/name. */
int ckpt_pending_file(int pfd, const char *dir, const char *name, int flags,
                      ckpt_error *err);

/* Reads control file `name` (at most cap - 1 bytes, cut there) into buf.
 * 1 when it exists and is a regular file of the effective user, else 0
 * (a link, a FIFO or another user's file counts as absent). */
int ckpt_pending_read(int pfd, const char *name, char *buf, size_t cap);

#endif
