/*
 * mountinfo.h - the kernel's table of mounts (/proc/self/mountinfo) as
 * records: what is mounted where, its type and its device (for a ckptfs
 * mount, SOURCE).  Used by the daemon (is a mount point taken, which
 * device is its mount) and by the CLI (which mount a path lies in); the
 * engine itself does not need it.
 */
#ifndef CKPT_MOUNTINFO_H
#define CKPT_MOUNTINFO_H

#include <stddef.h>

/* One mount, with mountinfo's octal escapes undone. */
typedef struct ckpt_mount {
    char dev[64];           /* "major:minor" */
    char point[4096];       /* where it is mounted */
    char fstype[256];       /* "ext4", "fuse.ckptfs" */
    char source[4096];      /* the mount source ("device") field */
} ckpt_mount;

/* Calls fn(m, arg) for each mount, in the table's order (the later of two
 * mounts on one point is the one seen there), until fn returns non-zero.
 * Returns 0, or a negative errno when the table cannot be read. */
int ckpt_mountinfo_each(int (*fn)(const ckpt_mount *m, void *arg),
                        void *arg);

#endif
