/*
 * claim.h - the commit claim of a save: which process runs its commit,
 * decided by operations that are atomic on any shared file system, not by
 * locks (docs/GUARANTEES.md, "What the shared file system must provide";
 * issue #25).  A would-be committer writes a file of its own,
 * .pending/claim.HOST.PID.TOKEN, saying who it is (host, boot id, pid,
 * token), syncs it, and link(2)s it to .pending/commit.claim: the link
 * succeeds for one process only (the others get EEXIST), and where a lost
 * reply makes it look failed, the own file's link count of 2 tells that it
 * succeeded (the NFS idiom).  The winner touches the claim every
 * CKPT_CLAIM_BEAT_MS while it works.
 *
 * A claim is a dead committer's when its host and boot are this one's and
 * its process is gone, or when it has not been touched for
 * CKPT_CLAIM_STALE_S.  Such a claim is taken over with rename(2): it is
 * renamed to a name of the taker's own, and only if what was renamed is
 * the dead claim (its token) is it removed and the claim tried again; a
 * live claim renamed by mistake (taken over by someone else meanwhile) is
 * linked back.  The committer checks that the claim is still its own
 * right before it publishes index.db (ckpt_claim_check).
 */
#ifndef CKPT_CLAIM_H
#define CKPT_CLAIM_H

#include <stddef.h>

#include "ckptfs.h"

/* The claim, relative to the save's directory. */
#define CKPT_CLAIM_PATH ".pending/commit.claim"
/* How often the holder touches its claim, in milliseconds. */
#define CKPT_CLAIM_BEAT_MS 2000
/* A claim untouched for this long (seconds) is a dead committer's. */
#define CKPT_CLAIM_STALE_S 30

typedef struct ckpt_claim ckpt_claim;

/* Claims the commit of the save in dir (whose .pending/ must be this
 * user's): 0 with *out; -EBUSY with a message naming the holder while a
 * live committer holds it; -ENOENT when dir has no .pending/ (committed
 * or removed meanwhile). */
int ckpt_claim_take(ckpt_claim **out, const char *dir, ckpt_error *err);

/* 0 while c is still the save's claim; -EBUSY with a message once another
 * process has taken it over (this one was taken for dead). */
int ckpt_claim_check(ckpt_claim *c, ckpt_error *err);

/* Gives the claim up (removed if it is still c's) and stops touching it;
 * NULL is fine. */
void ckpt_claim_drop(ckpt_claim *c);

/* The name under which c's committer writes index.db before linking it
 * into place, dir/.pending/index.db.tmp.TOKEN, into buf (cap bytes): no
 * two committers ever write one file, even one taken for dead, and what a
 * dead one left goes with .pending/. */
int ckpt_claim_tmp(const ckpt_claim *c, char *buf, size_t cap,
                   ckpt_error *err);

/* 1 when dir/index.db exists and no live committer may still withdraw
 * it: .pending/ is gone, or no live process holds the claim (or
 * .pending/ is another user's, whose claim cannot be read).  Changes
 * nothing: what a reader's listing asks. */
int ckpt_claim_settled(const char *dir);

/* 1 when the save in dir is committed for good: index.db is there and its
 * committer has finished (.pending/ is gone), or no live committer holds
 * the claim any more and index.db and dir were synced now (then the
 * .pending/ that committer left is removed); 0 when dir is not committed,
 * or its committer is still at it (it may yet withdraw index.db). */
int ckpt_claim_committed(const char *dir);

/* 1 when a live committer holds the claim of dir (then who, like
 * "host H pid P", in buf, cap bytes), else 0. */
int ckpt_claim_held(const char *dir, char *buf, size_t cap);

#endif
