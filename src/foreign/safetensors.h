/*
 * safetensors.h - safetensors files (one file, or a directory of them),
 * described for the reader with the builder (see safetensors.c).
 */
#ifndef CKPT_FOREIGN_SAFETENSORS_H
#define CKPT_FOREIGN_SAFETENSORS_H

#include "ckptfs.h"
#include "foreign/builder.h"

/* Describes the safetensors file or directory at `path` into f, refusing
 * anything malformed with a message naming the file and the problem. */
int ckpt_safetensors_open(const char *path, ckpt_foreign *f,
                          ckpt_error *err);

#endif
