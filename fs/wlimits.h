/*
 * wlimits.h - the bounds a writable mount keeps on what its users may
 * make it hold (docs/MOUNT.md, "Limits"): pieces open per user, saves in
 * progress per user, metadata keys and bytes per save; and a table of
 * per-user counts to enforce the first.  Thread-safe.
 */
#ifndef CKPTFS_FS_WLIMITS_H
#define CKPTFS_FS_WLIMITS_H

#include <stddef.h>
#include <sys/types.h>

typedef struct ws_limits {
    size_t max_open_pieces;  /* pieces open for writing, per user */
    size_t max_saves;        /* saves in progress started here, per user */
    size_t max_meta_keys;    /* user.ckpt.meta.* keys of a save */
    size_t max_meta_bytes;   /* the bytes of their keys and values */
} ws_limits;

#define WL_DEFAULT_OPEN_PIECES 512
#define WL_DEFAULT_SAVES 64
#define WL_DEFAULT_META_KEYS 4096
#define WL_DEFAULT_META_BYTES (1024 * 1024)
/* Writers a save keeps open between pieces, for the next piece of their
 * rank; one more is closed when its piece ends (its pieces are on disk
 * already), so that pieces a user once held open do not keep their
 * descriptors and threads. */
#define WL_IDLE_WRITERS 16

/* The defaults above. */
void wl_limits_default(ws_limits *l);

typedef struct wl_counts wl_counts;

int wl_counts_new(wl_counts **out);
void wl_counts_free(wl_counts *t);
/* Counts one more for uid unless it has max already: 0, or -1. */
int wl_take(wl_counts *t, uid_t uid, size_t max);
/* Counts one less for uid. */
void wl_give(wl_counts *t, uid_t uid);

#endif
