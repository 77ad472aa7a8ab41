/*
 * foreign.h - checkpoints written by other tools (PyTorch distributed
 * checkpoints, safetensors files), described with the reader's own model
 * (builder.h).  The reader then serves, lists and verifies them like
 * ckptfs checkpoints, reading only the bytes asked for.
 *
 * The dispatcher: ckpt_foreign_open picks the format module (dcp.h,
 * safetensors.h) by what `path` is; the modules describe their files with
 * the builder and never call back into this file.
 */
#ifndef CKPT_FOREIGN_H
#define CKPT_FOREIGN_H

#include <stddef.h>
#include "ckptfs.h"
#include "foreign/builder.h"

/* What `path` is: a DCP directory, safetensors, or neither.  When stamp is
 * not NULL it receives the path of the file standing for the checkpoint. */
ckpt_foreign_kind ckpt_foreign_probe(const char *path, char *stamp,
                                     size_t cap);
/* Describes the checkpoint at `path` (refusing, with a message naming the
 * file and the problem, anything malformed).  Its files are read inside
 * its directory only (confine.h), unless `follow`. */
int ckpt_foreign_open(const char *path, int follow, ckpt_foreign *out,
                      ckpt_error *err);

#endif
