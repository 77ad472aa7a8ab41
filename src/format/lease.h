/*
 * lease.h - leases on saves in progress (docs/GUARANTEES.md, "Live
 * saves"): whoever writes or commits a save holds a shared lock on its
 * lease file, <save>/.pending/lease, for as long as it works on the save,
 * and refreshes the file's modification time (the heartbeat) while it
 * does, for file systems whose locks do not reach other nodes.  `ckpt gc`
 * takes the same lock exclusively, without waiting, before it retires a
 * save: it fails while any writer or committer lives, and a writer or
 * committer that arrives while gc holds it waits, then finds the save gone
 * (-ESTALE) instead of writing into a directory being removed.
 *
 * The locks are open file description locks (fcntl F_OFD_SETLK, which
 * NFSv4 carries to the server): each lease is its own lock, even within
 * one process, and the kernel drops it when the process dies, SIGKILL
 * included.  Where the file system has no locks, leases fall back to the
 * heartbeat alone.
 */
#ifndef CKPT_LEASE_H
#define CKPT_LEASE_H

#include <stdint.h>
#include "ckptfs.h"

/* The lease file, relative to the save's directory. */
#define CKPT_LEASE_PATH ".pending/lease"
/* Hidden names under which a save's directory is made before it is
 * renamed into place: ".ckpt-new.HOST.PID.TAG.NAME".  gc removes such a
 * leftover once its maker is gone: at once when HOST is this host and PID
 * is no process, else once it is CKPT_NEW_MIN_AGE_S old (making one takes
 * microseconds, so a live maker is done long before). */
#define CKPT_NEW_PREFIX ".ckpt-new."
#define CKPT_NEW_MIN_AGE_S 10
/* How often a lease refreshes the heartbeat, in milliseconds. */
#define CKPT_LEASE_BEAT_MS 30000

typedef struct ckpt_lease ckpt_lease;
/* One heartbeat thread for many leases (a mount daemon's): each lease
 * taken on it is touched by that thread every beat_ms milliseconds. */
typedef struct ckpt_heartbeat ckpt_heartbeat;

/* Starts the thread (beat_ms <= 0: CKPT_LEASE_BEAT_MS). */
int ckpt_heartbeat_new(ckpt_heartbeat **out, int beat_ms, ckpt_error *err);
/* Stops it; every lease taken on it must have been dropped (NULL is
 * fine). */
void ckpt_heartbeat_free(ckpt_heartbeat *h);

/* Takes a shared lease on the save in `dir`, whose .pending/ must exist:
 * opens (creating) its lease file, waits while a gc holds it exclusively,
 * then checks that `dir` still leads to the file it locked (-ESTALE, with
 * a message, when a gc retired the save meanwhile).  Touches the file, and
 * then every beat_ms milliseconds from a thread of its own (beat_ms <= 0:
 * no thread) -- each time unless another holder did within half a beat. */
int ckpt_lease_take(ckpt_lease **out, const char *dir, int beat_ms,
                    ckpt_error *err);
/* ckpt_lease_take with the heartbeat of h (NULL: a thread of its own
 * beating every CKPT_LEASE_BEAT_MS). */
int ckpt_lease_take_on(ckpt_lease **out, const char *dir, ckpt_heartbeat *h,
                       ckpt_error *err);
/* A heartbeat without a lock: the file open as fd (a descriptor of its
 * own is kept) is touched now and then every beat_ms milliseconds by a
 * thread of its own, until ckpt_lease_drop (the commit claim's, claim.h). */
int ckpt_lease_beat_fd(ckpt_lease **out, int fd, int beat_ms,
                       ckpt_error *err);
/* Releases the lease and stops its heartbeat (NULL is fine). */
void ckpt_lease_drop(ckpt_lease *l);

/* Makes the layout of a save in `dir` if it is missing (the directory
 * with its missing parents, .pending/ and data/) and takes a lease on it
 * with the default heartbeat.  Refuses a committed checkpoint (-EEXIST):
 * one with index.db, and one with data/ but no .pending/ (a checkpoint
 * another node committed, whose index.db a cached view may not show yet:
 * a .pending/ is never made beside an existing data/).  A missing
 * directory appears with its .pending/ in one step (made aside under a
 * name starting with CKPT_NEW_PREFIX, then renamed). */
int ckpt_save_begin(ckpt_lease **out, const char *dir, ckpt_error *err);
/* The same, the lease beaten by h (NULL: by a thread of its own). */
int ckpt_save_begin_on(ckpt_lease **out, const char *dir, ckpt_heartbeat *h,
                       ckpt_error *err);

/* gc's side: tries to lock the lease of the save in `dir` exclusively,
 * without waiting.  0 with *fd set (the lock lasts until close(*fd)) when
 * no lease is held; -EBUSY when one is; -ENOLCK when this file system
 * cannot tell (no locks: *fd is set all the same, and only the heartbeat
 * can show a live save).  A missing lease file is created when `create`
 * (*created then tells that its time is gc's own, not a heartbeat);
 * otherwise it is 0 with *fd = -1 (nobody ever took a lease); -ENOENT when
 * the save has no .pending/. */
int ckpt_lease_lock_exclusive(const char *dir, int create, int *fd,
                              int *created, ckpt_error *err);

/* Writes into buf (cap bytes) the hidden name under which this process
 * makes the directory of save `name` (tag tells apart its makers). */
int ckpt_new_name(char *buf, size_t cap, const char *tag, const char *name);
/* 1 when hidden name `name` (ckpt_new_name's) was made on this host by a
 * process that no longer exists. */
int ckpt_new_maker_gone(const char *name);
/* This host's name as hidden names carry it ([A-Za-z0-9-] only). */
void ckpt_host_tag(char *buf, size_t cap);
/* 1 when process pid of this host has exited (no such process, or a
 * zombie). */
int ckpt_pid_gone(long pid);

/* The mark of a save whose shard could not be synced (fdatasync failed):
 * after such a failure the kernel may have dropped the bytes while a later
 * sync reports success, so the save must never commit.  Written by the
 * writer or committer that saw the failure (the first message stays);
 * ckpt_commit refuses a save that has it. */
#define CKPT_UNSYNCED_PATH ".pending/unsynced"
/* Leaves the mark with `msg` (best effort: the disk may be failing). */
void ckpt_save_mark_unsynced(const char *dir, const char *msg);
/* 1 with the mark's message in buf (cap bytes) when dir has the mark,
 * else 0. */
int ckpt_save_unsynced(const char *dir, char *buf, size_t cap);

#endif
