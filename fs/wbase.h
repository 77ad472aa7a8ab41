/*
 * wbase.h - the base of a delta save written through a mount: the one its
 * directory's `user.ckpt.base` names (docs/MOUNT.md, "Writing
 * checkpoints through the mount", "Delta saves"), or
 * with -o delta=latest (docs/MOUNT.md, "Options") the newest committed
 * checkpoint of the root, as `latest` orders them, when the save begins.
 */
#ifndef CKPTFS_WBASE_H
#define CKPTFS_WBASE_H

#include <stddef.h>

#include "ckptfs.h"

/* The path (malloc'd) of the newest committed checkpoint of `root` other
 * than `self` (a name in root), or NULL when there is none. */
char *wbase_latest(const char *root, const char *self);

/* The base `user.ckpt.base` names (value, len bytes, not terminated) for
 * the save `self` of `root`: *out is root/NAME (malloc'd), NAME one name
 * of a committed checkpoint of the root other than self; or NULL for an
 * empty value (a whole save).  -EINVAL or -ENOENT with a message. */
int wbase_named(const char *root, const char *self, const char *value,
                size_t len, char **out, ckpt_error *err);

#endif
