/*
 * wsave.h - the saves in progress that one writable mount serves
 * (docs/MOUNT.md, "Writing"): for each, the namespace its writers created
 * through this mount (directories, tensor files, .ckptfs/commit and
 * .ckptfs/status), the piece attributes set on its files, the writers
 * (ckpt_writer, one shard each) that open files stream into, and the
 * commit rendezvous.  No FUSE types: ops.c and wops.c translate.
 *
 * A save is a directory of the root with a .pending/ and no index.db.
 * This mount starts one with ws_set_create (mkdir), or joins one that
 * another mount started when it is looked up by name.  Node 0 is the
 * save's directory; nodes are never removed, so their numbers can be
 * part of inode numbers.  Everything here is thread-safe.
 *
 * Pieces: every open for writing is one piece, its extent known before
 * its first byte (pattr.h), begun by its first write and recorded by the
 * write of its last byte (frames in the writer's shard, the piece in its
 * plan: it survives the daemon), whichever process or descriptor of the
 * open file writes it; a piece whose open file is released short records
 * nothing (ws_release).  The shards and plans are synced as each piece
 * ends with sync=1, else when a rank commits through this mount, and in
 * any case by the commit before index.db is written.  The
 * attributes a piece takes are those its writing process set on the file
 * (several ranks may write pieces of one file at once), or else the last
 * ones anybody set (a shell's setfattr, then cat).
 */
#ifndef CKPTFS_FS_WSAVE_H
#define CKPTFS_FS_WSAVE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "access.h"
#include "ckptfs.h"
#include "wlimits.h"

typedef struct ws_set ws_set;
typedef struct ws_save ws_save;
typedef struct ws_file ws_file;

typedef enum ws_kind {
    WS_DIR,
    WS_FILE,
    WS_COMMIT,          /* .ckptfs/commit: ranks write their numbers */
    WS_STATUS,          /* .ckptfs/status */
    WS_ERRORS           /* .ckptfs/errors: every refused piece, and why */
} ws_kind;

#define WS_ROOT 0u      /* the save's directory */

typedef struct ws_stat {
    ws_kind kind;
    uint64_t size;      /* WS_FILE: bytes of the largest piece so far */
    uint32_t nsubdirs;  /* WS_DIR */
    struct timespec mtime;
} ws_stat;

/* Starts serving saves under root: world ranks commit each; writers
 * stream with wo; lim bounds what users make it hold (NULL: the
 * defaults).  All the leases of the set are beaten by one thread. */
int ws_set_new(ws_set **out, const char *root, int world,
               const ckpt_write_opts *wo, const ws_limits *lim,
               ckpt_error *err);
/* Aborts every writer still open (their durable pieces stay on disk). */
void ws_set_free(ws_set *s);
/* -o delta=latest: each save is a delta against the newest committed
 * checkpoint of the root when its first writer opens (none: a full save). */
void ws_set_delta_latest(ws_set *s);
int ws_set_world(const ws_set *s);

/* The save named `name`: one of this mount's, or a save in progress on
 * disk (joined now).  NULL when there is none. */
ws_save *ws_set_find(ws_set *s, const char *name);
/* A lookup of save w by process pid: when pid has a rank (user.ckpt.rank,
 * or RANK in its environment), this mount joins the save as one of its
 * writers and holds its lease from now on (a `mkdir -p` of a save another
 * mount started), as it does from its mkdir of a save or its first write;
 * until the save commits, its commit is refused, or the mount goes. */
int ws_join(ws_save *w, pid_t pid, ckpt_error *err);
/* Starts save `name` (mkdir), its directory given to owner (NULL: the
 * daemon's own; access_give_dir).  -EEXIST when the name exists in the
 * root (a save in progress is joined, so *out is set then too); -EINVAL
 * for a name that cannot be a checkpoint's; -EDQUOT when the owner has
 * lim.max_saves saves in progress started here. */
int ws_set_create(ws_set *s, const char *name, const access_owner *owner,
                  ws_save **out, ckpt_error *err);
/* The save with id `id`, or NULL. */
ws_save *ws_set_by_id(ws_set *s, uint32_t id);
/* The saves of this mount not yet committed (a new array; free() it). */
int ws_set_list(ws_set *s, ws_save ***out, size_t *n);

uint32_t ws_save_id(const ws_save *w);
const char *ws_save_name(const ws_save *w);
/* 1 once committed (by this mount or another). */
int ws_save_committed(ws_save *w);

/* ------------------------------------------------------------ names */

/* Child `name` of directory dir: 0 with *node, -ENOENT, -ENOTDIR. */
int ws_lookup(ws_save *w, uint32_t dir, const char *name, uint32_t *node);
int ws_stat_node(ws_save *w, uint32_t node, ws_stat *st);
/* The k-th child of dir (creation order): 0, 1 past the end, -ENOTDIR.
 * Copies its name into name (cap bytes). */
int ws_child_at(ws_save *w, uint32_t dir, size_t k, uint32_t *node,
                char *name, size_t cap);
/* The parent of node (the save's directory is its own). */
uint32_t ws_parent(ws_save *w, uint32_t node);
/* node's path relative to the save's directory ("" for it), like
 * snprintf. */
int ws_path(ws_save *w, uint32_t node, char *out, size_t cap);
/* Makes directory `name` in dir (-EEXIST, -EINVAL for a name that is no
 * FQN component, -EACCES inside .ckptfs). */
int ws_mkdir(ws_save *w, uint32_t dir, const char *name, uint32_t *node,
             ckpt_error *err);
/* The tensor file `name` in dir, made if new (*created says which) by
 * process pid. */
int ws_mkfile(ws_save *w, uint32_t dir, const char *name, pid_t pid,
              uint32_t *node, int *created, ckpt_error *err);

/* ------------------------------------------------------------ attributes */

/* Sets a piece attribute of a file (for process pid and as the file's
 * default), or on the save's directory user.ckpt.meta.KEY of the save or
 * user.ckpt.rank, the rank of process pid (which names the shard files
 * of what it writes: rank<R>.shard).  -EINVAL with a message for a value
 * that does not parse or fit (also kept as the file's user.ckpt.error
 * and noted in .ckptfs/errors), -ENOTSUP for any other attribute name. */
int ws_setxattr(ws_save *w, uint32_t node, pid_t pid, const char *name,
                const char *value, size_t len, ckpt_error *err);
/* Its value as pid sees it, like snprintf; -ENODATA when not set.
 * user.ckpt.error of a file: why its last piece or attribute was
 * refused. */
int ws_getxattr(ws_save *w, uint32_t node, pid_t pid, const char *name,
                char *buf, size_t cap);
/* The names of the attributes set (NUL-separated), like snprintf. */
int ws_listxattr(ws_save *w, uint32_t node, pid_t pid, char *buf,
                 size_t cap);

/* ------------------------------------------------------------ pieces */

/* Opens file `node` for writing one piece, for process pid of user uid:
 * -EMFILE when uid holds lim.max_open_pieces open already (until
 * ws_release). */
int ws_open(ws_save *w, uint32_t node, pid_t pid, uid_t uid, ws_file **out,
            ckpt_error *err);
/* A write's buffer, lent to the encoders past the write's return. */
typedef struct ws_lent {
    ckpt_stream *stream;
    uint64_t ticket;
} ws_lent;

/* Writes at off, which must be where the previous write ended (-EINVAL
 * otherwise); past the piece's end is -EFBIG; the write of the piece's
 * last byte records it (and reports that), its frames in the shard.  Any
 * error fails the piece for good.  buf's whole frames are encoded from
 * buf itself, uncopied (the rest is copied into the stream's frames),
 * and appended to the shard by the encoders while the caller goes on:
 * unless it is the last, the write returns once they are handed over,
 * and the caller, once it has replied, calls ws_lent_wait(lent) before
 * buf may change.  Errors of those frames come back from the next write,
 * the fsync or the close. */
int ws_write(ws_file *f, pid_t pid, const void *buf, size_t len,
             uint64_t off, ws_lent *lent, ckpt_error *err);
/* Waits until the frames a write lent buf to are in the shard (nothing
 * when none were).  Touches only the stream, whose end waits for this:
 * the file may have been closed and released meanwhile. */
void ws_lent_wait(const ws_lent *lent);
/* A close (a flush: of any descriptor of the open file, by any process):
 * reports the piece's error, if it failed, also one found after the
 * writes returned (it waits for the frames of the bytes so far, as
 * ws_fsync); otherwise never ends a piece that has begun (another
 * descriptor may write on).  Before any byte, a
 * replica reference or an empty piece the attributes describe is
 * recorded here; otherwise nothing changes. */
int ws_close(ws_file *f, ckpt_error *err);
/* An fsync: waits until the frames of the bytes written so far are in
 * the writer's shard, and reports the piece's error, also one an encoder
 * or a shard write found after the write(2) that brought the bytes had
 * returned (the piece then fails for good).  Nothing is synced: the
 * checkpoint is made durable by its commit (docs/GUARANTEES.md). */
int ws_fsync(ws_file *f, ckpt_error *err);
/* Frees f once the kernel releases the open file (its last descriptor is
 * gone): a piece begun and not complete fails there, recording why
 * (user.ckpt.error, .ckptfs/errors, the writer's plan) and nothing else. */
void ws_release(ws_file *f);
/* Why the last failed piece of file `node` failed (like snprintf), or
 * -ENODATA.  A file created or described in a save is declared (in a
 * writer's plan, so that it outlives this daemon), and the reason its
 * piece failed is recorded there too: the commit refuses a declared tensor
 * that no piece holds, naming that reason. */
int ws_piece_error(ws_save *w, uint32_t node, char *buf, size_t cap);

/* ------------------------------------------------------------ commit */

/* A write to .ckptfs/commit: one or more rank numbers.  Returns once the
 * ranks are recorded and, when they complete the set, the save is
 * committed: -EINVAL for a bad or repeated rank, -EIO when the commit
 * failed (err holds the planner's message either way). */
int ws_commit_ranks(ws_save *w, const char *text, size_t len,
                    ckpt_error *err);
/* .ckptfs/status's content, like snprintf. */
int ws_status(ws_save *w, char *buf, size_t cap);
/* .ckptfs/errors's content: a new string (free() it) of *len bytes. */
int ws_errors(ws_save *w, char **out, size_t *len);

#endif
