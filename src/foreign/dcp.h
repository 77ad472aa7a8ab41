/*
 * dcp.h - PyTorch distributed checkpoints (a directory with .metadata),
 * described for the reader with the builder (see dcp.c).
 */
#ifndef CKPT_FOREIGN_DCP_H
#define CKPT_FOREIGN_DCP_H

#include "ckptfs.h"
#include "foreign/builder.h"

/* Describes the DCP checkpoint in `dir` into f (whose dir, stamp and
 * follow the dispatcher has set), refusing anything malformed with a
 * message naming the file and the problem. */
int ckpt_dcp_open(const char *dir, ckpt_foreign *f, ckpt_error *err);

#endif
