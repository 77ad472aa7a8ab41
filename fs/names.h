/*
 * names.h - the mapping between tensor FQNs and mount paths (docs/MOUNT.md,
 * "Names: from FQN to path"): splitting an FQN at its dots, and escaping
 * one dotted component into one path component and back.
 *
 * Within a component '%' is written "%25", '/' is "%2F", bytes below 0x20
 * and 0x7F are "%XX" (uppercase hex); an empty component is "%".  Decoding
 * accepts exactly what encoding produces, so the mapping is one-to-one, and
 * refuses any name holding a '.', which therefore stays free for the names
 * ckptfs adds (".tensor", ".npy", ".ckptfs").  Pure functions, no state.
 */
#ifndef CKPTFS_FS_NAMES_H
#define CKPTFS_FS_NAMES_H

#include <stddef.h>
#include <sys/types.h>

/* Escapes the FQN component [comp, comp + len) into out (cap bytes), like
 * snprintf: writes at most cap - 1 bytes plus a NUL (when cap > 0) and
 * returns the length the whole escaped name needs, NUL excluded. */
size_t names_escape(const char *comp, size_t len, char *out, size_t cap);

/* Decodes the path component `name` into the FQN component it stands for:
 * its bytes go to out followed by a NUL.  Returns the component's length,
 * -EINVAL when `name` is not an escaped component (empty, holds '.', a
 * control byte or '/', a '%' not followed by two uppercase hex digits
 * naming a byte that must be escaped, or a lone '%' inside a longer name),
 * or -ENAMETOOLONG when cap cannot hold the result and its NUL. */
ssize_t names_unescape(const char *name, char *out, size_t cap);

/* Walks the dotted components of an FQN: "a..b" is "a", "", "b"; "" is one
 * empty component. */
typedef struct names_iter {
    const char *next;   /* start of the next component; NULL when done */
} names_iter;

void names_iter_init(names_iter *it, const char *fqn);
/* Sets comp/len to the next component; returns 0 when there is none. */
int names_iter_next(names_iter *it, const char **comp, size_t *len);
/* Number of components (at least 1). */
size_t names_count(const char *fqn);

/* The relative path "a/b/c" of FQN "a.b.c" (each component escaped; no
 * ".tensor" rule applied), like snprintf. */
size_t names_fqn_to_path(const char *fqn, char *out, size_t cap);
/* The inverse: the FQN of a relative path of escaped components separated
 * by single '/'.  Returns its length, -EINVAL for a malformed path or
 * component, -ENAMETOOLONG when it does not fit in cap. */
ssize_t names_path_to_fqn(const char *path, char *out, size_t cap);

#endif
