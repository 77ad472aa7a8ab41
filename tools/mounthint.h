/*
 * mounthint.h - telling a user who points ckpt at a path inside a ckptfs
 * mount (MNT/latest, say) where that checkpoint is on disk: ckpt reads
 * checkpoint directories, and the mount shows tensors as files instead.
 */
#ifndef CKPT_MOUNTHINT_H
#define CKPT_MOUNTHINT_H

#include <stddef.h>

/* When `path` lies inside a ckptfs mount, writes into buf a clause ("it is
 * inside the ckptfs mount of SOURCE ...") naming the mount's SOURCE and,
 * when it can tell, the checkpoint's directory on disk, and returns 1;
 * otherwise returns 0 (buf untouched).
 * The mount is found in /proc/self/mountinfo (type fuse.ckptfs). */
int cli_mount_hint(const char *path, char *buf, size_t cap);

/* The type of the file system `path` lies on ("ext4", "nfs",
 * "fuse.sshfs"), from the deepest mount above it, into buf; 0, or -1 when
 * it cannot be told. */
int cli_fstype(const char *path, char *buf, size_t cap);

#endif
