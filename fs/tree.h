/*
 * tree.h - the namespace of one checkpoint as the mount shows it, built
 * once from the reader's tensor list and immutable afterwards (so any
 * number of threads may read it without locks):
 *
 *   /a/b/c                  tensor a.b.c (a/b.tensor when a.b is also a
 *                           module, see docs/MOUNT.md)
 *   /.npy/a/b/c.npy         its NumPy view
 *   /.ckptfs/metadata.json  the index as JSON
 *   /.ckptfs/stats          the reader's counters
 *   /.ckptfs/status         "committed", as in a save that was written
 *   /.safetensors/model.safetensors  every tensor in one safetensors file
 *                           (or model-0000i-of-0000n.safetensors and
 *                           model.safetensors.index.json past the shard
 *                           size; views.h)
 *   /.pt/a/b/c.pt           byte object a.b.c of a PyTorch distributed
 *                           checkpoint: its torch.save archive, as stored
 *                           (while /a/b/c shows the value of an io.BytesIO
 *                           that the archive holds)
 *
 * Nodes are numbered from 0 (the checkpoint's root directory); a node's
 * number is stable for the life of the tree, so it can be part of an inode
 * number.  Each directory's children are sorted by name (bytewise) for
 * readdir, and (parent, name) pairs are hashed for lookup.
 */
#ifndef CKPTFS_FS_TREE_H
#define CKPTFS_FS_TREE_H

#include <stddef.h>
#include <stdint.h>

#include "ckptfs.h"
#include "views.h"

#define TREE_ROOT 0u
/* The longest path component the kernel passes (NAME_MAX); tensors with a
 * longer component are left out of the tree, with a warning. */
#define TREE_NAME_MAX 255

typedef enum tree_kind {
    TREE_DIR,
    TREE_TENSOR,      /* the tensor's row-major image */
    TREE_NPY,         /* the tensor's .npy view */
    TREE_METADATA,    /* .ckptfs/metadata.json */
    TREE_STATS,       /* .ckptfs/stats */
    TREE_STATUS,      /* .ckptfs/status: "committed" (see wops.h) */
    TREE_ST,          /* a file of .safetensors/ (tensor: its shard) */
    TREE_ST_INDEX     /* .safetensors/model.safetensors.index.json */
} tree_kind;

typedef struct tree_node {
    uint64_t size;        /* TENSOR, NPY: file size */
    uint32_t parent;      /* the root is its own parent */
    uint32_t name;        /* offset of the NUL-terminated name */
    uint32_t child0;      /* DIR: first of its children in the child list */
    uint32_t nchild;      /* DIR: number of children */
    uint32_t nsubdirs;    /* DIR: children that are directories */
    uint32_t tensor;      /* TENSOR, NPY: the reader's tensor index */
    uint16_t npy_header;  /* NPY: header length (data starts there) */
    uint8_t kind;         /* tree_kind */
    uint8_t blob;         /* TENSOR, NPY: the content is in memory, from
                             tree_blob(tensor), not read through the reader */
} tree_node;

typedef struct fs_tree fs_tree;

/* Called for each tensor left out (its message names it and says why). */
typedef void (*tree_warn_fn)(void *arg, const char *msg);

/* Builds the tree of reader r.  blobs (from views_bytesio: one entry per
 * tensor, or NULL) are the byte objects shown from memory; st (or NULL:
 * no .safetensors/) the safetensors view; the tree takes both over in any
 * case.  Returns 0, -ENOMEM, or -EOVERFLOW when the
 * checkpoint has more nodes than 32 bits can number. */
int tree_build(fs_tree **out, const ckpt_reader *r, views_blob *blobs,
               views_st *st, tree_warn_fn warn, void *arg);
void tree_free(fs_tree *t);

/* Number of nodes; nodes are 0 .. tree_size() - 1. */
uint32_t tree_size(const fs_tree *t);
/* Node i, or NULL when out of range. */
const tree_node *tree_node_at(const fs_tree *t, uint32_t i);
const char *tree_name(const fs_tree *t, const tree_node *n);
/* The k-th child (by name) of directory n, k < n->nchild. */
uint32_t tree_child(const fs_tree *t, const tree_node *n, uint32_t k);
/* The in-memory content of tensor `tensor` (a node with `blob` set). */
const views_blob *tree_blob(const fs_tree *t, uint32_t tensor);
/* The safetensors view, or NULL. */
const views_st *tree_st(const fs_tree *t);
/* The child `name` of node dir: its number, -ENOENT, or -ENOTDIR when dir
 * is not a directory. */
long tree_lookup(const fs_tree *t, uint32_t dir, const char *name);

#endif
