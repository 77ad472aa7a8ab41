/*
 * wrank.h - which rank a process writing through the mount is
 * (docs/MOUNT.md, "Writer names"): the rank it declared (user.ckpt.rank
 * on a save's directory), or else the one its launcher put in its
 * environment (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK,
 * SLURM_PROCID), or 0 when the mount's world is 1.  Shard files and
 * planner messages then name the rank (rank<R>).  Thread-safe.
 */
#ifndef CKPTFS_FS_WRANK_H
#define CKPTFS_FS_WRANK_H

#include <sys/types.h>

typedef struct wrank_table wrank_table;

int wrank_new(wrank_table **out);
void wrank_free(wrank_table *t);

/* Records that process pid is rank `rank` (0..world-1, checked by the
 * caller). */
int wrank_set(wrank_table *t, pid_t pid, int rank);

/* The rank of process pid in a job of `world` ranks, or -1 when it is
 * not known.  The environment of pid is read once (a number outside
 * 0..world-1 there is ignored). */
int wrank_of(wrank_table *t, pid_t pid, int world);

/* Parses a rank in 0..world-1 from value[0..len): 0 with *rank, or
 * -EINVAL. */
int wrank_parse(const char *value, size_t len, int world, int *rank);

#endif
