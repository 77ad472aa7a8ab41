/*
 * pattr.h - the extended attributes that describe a piece written through
 * the mount (docs/MOUNT.md, "Writing"): user.ckpt.dtype, user.ckpt.shape,
 * user.ckpt.offsets and user.ckpt.sizes, and user.ckpt.replica (1: the
 * piece is a replica another writer holds; closed without bytes, it is
 * recorded as a reference to that piece), and user.ckpt.piece, all of
 * them in one value ("dtype=bf16 shape=1024,1024 offsets=256,0
 * sizes=256,1024": one round trip per file instead of four).  Parsing and
 * checking each value
 * as it is set, and turning a set of them into the piece a write stream
 * records, whose extent the attributes must give in full.  Pure
 * functions on plain structs.
 */
#ifndef CKPTFS_FS_PATTR_H
#define CKPTFS_FS_PATTR_H

#include <stddef.h>
#include <stdint.h>

#include "ckptfs.h"

enum {
    PATTR_DTYPE = 1,
    PATTR_SHAPE = 2,
    PATTR_OFFSETS = 4,
    PATTR_SIZES = 8,
    PATTR_REPLICA = 16,
    PATTR_PIECE = 32              /* user.ckpt.piece: several of the above */
};
#define PATTR_NKEYS 5             /* the single ones, named in pattr_names */

/* The attributes set on a file (by one process, or by anyone). */
typedef struct pattr {
    unsigned set;                 /* PATTR_* bits */
    ckpt_dtype dtype;
    int ndim;                     /* of shape */
    int64_t shape[CKPT_MAX_DIMS];
    int noff;
    int64_t offsets[CKPT_MAX_DIMS];
    int nsizes;
    int64_t sizes[CKPT_MAX_DIMS];
    int replica;                  /* user.ckpt.replica: 0 or 1 */
} pattr;

/* The PATTR_* bit of attribute `name` (PATTR_PIECE for user.ckpt.piece),
 * or 0 when it is not one of them. */
unsigned pattr_key(const char *name);
/* The names of the attributes, in the order of their bits. */
extern const char *const pattr_names[PATTR_NKEYS];

/* Sets attribute `key` from value[0..len) (not NUL-terminated), checking
 * it on its own and against the attributes already set: a dtype must be
 * known, a shape/offsets/sizes list must parse, offsets and sizes must
 * have the shape's rank and fit in it, replica is 0 or 1.  PATTR_PIECE:
 * KEY=VALUE pairs separated by spaces, KEY one of dtype, shape, offsets,
 * sizes, replica, each set as its own attribute would be, in the order
 * given; all of them or, on an error, none.  Returns 0 or -EINVAL with a
 * message naming the attribute and the value. */
int pattr_set(pattr *a, unsigned key, const char *value, size_t len,
              ckpt_error *err);

/* Writes attribute key's value (like snprintf); -ENODATA when not set.
 * PATTR_PIECE: the pairs of those set, in the order of pattr_names. */
int pattr_get(const pattr *a, unsigned key, char *buf, size_t cap);

/* A piece to stream: its extent is known before its first byte. */
typedef struct pattr_piece {
    ckpt_dtype dtype;
    int ndim;
    int64_t shape[CKPT_MAX_DIMS];
    int64_t offsets[CKPT_MAX_DIMS];
    int64_t sizes[CKPT_MAX_DIMS];
} pattr_piece;

/* The piece that attributes a (NULL: none) describe for tensor fqn.  A
 * dtype and a shape: a tensor; without user.ckpt.sizes, dimensions run
 * from their offset to the shape's end.  A 1-D shape without dtype: a byte
 * object of that many bytes.  Returns 0 or -EINVAL with a message: no
 * shape (the piece's extent would be unknown, so no close could tell a
 * whole piece from a truncated one), offsets or sizes without a shape. */
int pattr_resolve(const pattr *a, const char *fqn, pattr_piece *p,
                  ckpt_error *err);

/* The ckpt_piece (pointing into p) for the library's stream calls. */
void pattr_to_piece(const pattr_piece *p, const char *fqn, ckpt_piece *out);

#endif
