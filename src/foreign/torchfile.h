/*
 * torchfile.h - plain torch.save archives (zip format, torch >= 1.6) as
 * checkpoints: `model.pt`, `pytorch_model.bin`, a folder holding such
 * files, a Hugging Face sharded folder with `pytorch_model.bin.index.json`.
 * Each archive's data.pkl goes through the restricted pickle reader
 * (pickle.h): every tensor in it, wherever it sits in nested dicts, lists
 * and tuples, becomes a tensor named by its path (dotted, list indices as
 * numbers), its bytes those of its storage entry read in place (with its
 * strides and storage offset; views of one storage share its bytes).
 * Other values (numbers, strings, None) become metadata `value:<path>`.
 */
#ifndef CKPT_FOREIGN_TORCHFILE_H
#define CKPT_FOREIGN_TORCHFILE_H

#include "foreign/builder.h"

/* The name of the index of a sharded folder. */
#define CKPT_TORCH_INDEX_JSON "pytorch_model.bin.index.json"

/* 1 when `name` is a file name torch.save archives go by (*.pt, *.pth,
 * *.bin), not hidden. */
int ckpt_torchfile_name(const char *name);

/* Describes the archive at `path` (a regular file), or the folder `path`
 * (its index's files, else pytorch_model.bin, else every archive in it). */
int ckpt_torchfile_open(const char *path, ckpt_foreign *f, ckpt_error *err);

#endif
