/*
 * writer.h - what the library's other parts (and the mount) use of a
 * writer beyond the public API in ckptfs.h.
 */
#ifndef CKPT_WRITER_H
#define CKPT_WRITER_H

#include "ckptfs.h"
#include "format/lease.h"

/* ckpt_writer_open whose lease is beaten by h (a mount daemon's shared
 * heartbeat; NULL: a thread of the writer's own). */
int ckpt_writer_open_on(ckpt_writer **out, const char *dir, const char *name,
                        const ckpt_write_opts *opts, ckpt_heartbeat *h,
                        ckpt_error *err);

/* Declares tensor fqn in the save: ckpt_commit refuses it unless some
 * writer records a piece of it.  `reason` (NULL or "" when there is none)
 * says why a piece of it failed, and replaces an earlier reason.  Kept
 * with the pieces until the next flush, which writes it to the plan. */
int ckpt_writer_declare(ckpt_writer *w, const char *fqn, const char *reason,
                        ckpt_error *err);

/* A replica reference: a declaration whose key is the piece's fqn, this
 * mark, then "DTYPE;SHAPE;OFFSETS;SIZES" (comma-separated lists).  An fqn
 * holds no control character, so no plain declaration looks like one. */
#define CKPT_REPLICA_MARK "\x1freplica:"

/* Declares that this writer's piece p (its data is not read) is a
 * replica another writer writes: nothing is stored, and ckpt_commit
 * refuses the save unless some writer records a piece of p->fqn with the
 * same dtype, shape, offsets and sizes.  Written to the plan with the
 * next flush, like ckpt_writer_declare. */
int ckpt_writer_declare_replica(ckpt_writer *w, const ckpt_piece *p,
                                ckpt_error *err);

/* A supersession (a rank that ran again, docs/MOUNT.md "A rank runs
 * again"): a declaration whose key is the piece's fqn, this mark, then
 * "WRITERS;OFFSETS;SIZES" (WRITERS comma-separated writer names; writer
 * names hold neither ',' nor ';'). */
#define CKPT_SUPERSEDE_MARK "\x1fsupersedes:"

/* Declares that this writer's piece p (its fqn, offsets and sizes) takes
 * the place of every piece of p->fqn that overlaps it and that one of
 * `writers` (comma-separated names, not this writer's) recorded: the
 * commit drops those (src/write/supersede.h).  Written to the plan with
 * the next flush, like ckpt_writer_declare. */
int ckpt_writer_declare_supersede(ckpt_writer *w, const ckpt_piece *p,
                                  const char *writers, ckpt_error *err);

/* Like ckpt_stream_write_lent, but returns once buf's whole frames are
 * handed to the encoders, which append them to the shard: *ticket is
 * then not 0, buf must stay as it is until ckpt_stream_wait_lent(s,
 * *ticket) returns, and that call must be made exactly once, by any
 * thread, without the stream's own (ending or aborting the stream waits
 * for it; so the write that ends the piece must not use this).  Errors
 * of those frames come back from the stream's later calls.  *ticket is 0
 * when nothing is left to wait for (buf was copied, or the stream's
 * caller appends: a delta stream, which waits here). */
int ckpt_stream_write_lent_async(ckpt_stream *s, const void *buf, size_t len,
                                 uint64_t *ticket, ckpt_error *err);
/* Waits until the frames of ticket's write are in the shard (or let go
 * after an error of the stream); s may then be ended and freed. */
void ckpt_stream_wait_lent(ckpt_stream *s, uint64_t ticket);

/* Waits until every whole frame written to s so far is in the shard
 * (a frame still being filled is not), and returns the stream's first
 * error: what an encoder or a shard write found after the write that
 * brought the frame's bytes had returned (the mount's fsync). */
int ckpt_stream_wait(ckpt_stream *s, ckpt_error *err);

/* Lanes: streams of a writer that two threads feed at once
 * (ckpt_save_sync's delta saves), each with an xor budget of its own, so
 * that which frames a lane tries depends only on its own frames, in the
 * order it writes them.  ckpt_writer_put is lane 0. */
#define CKPT_WRITER_LANES 2

/* ckpt_writer_put in lane `lane` (0 or 1). */
int ckpt_writer_put_lane(ckpt_writer *w, const ckpt_piece *p, int lane,
                         ckpt_error *err);

/* 1 when the first frame of piece p (p->data) is its base frame's, the
 * same size at the same place with the same checksum (a frozen tensor:
 * its frames will likely all be refs); 0 when it is not, when the piece
 * has fewer than 4 frames (not worth a lane), or when w saves no delta;
 * < 0 for a piece ckpt_writer_put would refuse. */
int ckpt_writer_unchanged_start(ckpt_writer *w, const ckpt_piece *p,
                                ckpt_error *err);

#endif
