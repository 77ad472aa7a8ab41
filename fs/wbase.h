/*
 * wbase.h - the base of a save written through a mount with -o
 * delta=latest (docs/MOUNT.md, "Options", `-o delta=latest`): the newest committed
 * checkpoint of the root, as `latest` orders them, when the save begins.
 */
#ifndef CKPTFS_WBASE_H
#define CKPTFS_WBASE_H

/* The path (malloc'd) of the newest committed checkpoint of `root` other
 * than `self` (a name in root), or NULL when there is none. */
char *wbase_latest(const char *root, const char *self);

#endif
