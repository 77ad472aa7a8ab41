/*
 * writer.h - what the library's other parts (and the mount) use of a
 * writer beyond the public API in ckptfs.h.
 */
#ifndef CKPT_WRITER_H
#define CKPT_WRITER_H

#include "ckptfs.h"

/* Declares tensor fqn in the save: ckpt_commit refuses it unless some
 * writer records a piece of it.  `reason` (NULL or "" when there is none)
 * says why a piece of it failed, and replaces an earlier reason.  Kept
 * with the pieces until the next flush, which writes it to the plan. */
int ckpt_writer_declare(ckpt_writer *w, const char *fqn, const char *reason,
                        ckpt_error *err);

#endif
