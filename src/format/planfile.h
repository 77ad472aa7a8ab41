/*
 * planfile.h - .pending/<writer>.plan, a writer's local plan (schema in
 * docs/FORMAT.md): the pieces it wrote, with their frames, and its
 * metadata; appended as pieces close (one record per call, planlog.h),
 * read back by the commit.  Its preamble names it and its format
 * version; an older ckptfs's SQLite plan (application_id
 * CKPT_PLAN_APP_ID, db.h) is refused by name.
 */
#ifndef CKPT_PLANFILE_H
#define CKPT_PLANFILE_H

#include <stddef.h>
#include <stdint.h>
#include "format/model.h"
#include "format/plan.h"

typedef struct ckpt_planfile ckpt_planfile;

/* "BYTES:FILE" of a synced-shard claim, with its terminating NUL. */
#define CKPT_PLAN_SYNCED_CAP 256

/* What a plan says of its writer's shard: the first `bytes` bytes of
 * `file` were synced by the writer (has = 0: nothing is claimed); and of
 * its pieces: `layout_pieces` pieces whose layout digest (layout.h) is
 * `layout` (has_layout = 0: none claimed, the plan predates layouts or a
 * piece could not be packed). */
typedef struct ckpt_plan_synced {
    int has;
    uint64_t bytes;
    char file[CKPT_PLAN_SYNCED_CAP];
    int has_layout;
    uint64_t layout_pieces, layout;
} ckpt_plan_synced;

/* Creates `path` (must not exist) for `writer`.  Nothing of a plan is
 * synced (planfile.c says why). */
int ckpt_planfile_create(ckpt_planfile **out, const char *path,
                         const char *writer, ckpt_error *err);
/* Appends pieces (with frames), metadata and a noted synced-shard claim
 * as one record, written by one call (a process that dies in it leaves a
 * record cut short, which readers ignore; a failed write is cut back). */
int ckpt_planfile_append(ckpt_planfile *pf, const ckpt_piece_rec *pieces,
                         size_t npieces, const ckpt_kv *meta, size_t nmeta,
                         ckpt_error *err);
/* Notes that the first `bytes` bytes of shard `file` (relative to the
 * checkpoint) are synced: the next append records it, and the commit
 * does not sync them again. */
void ckpt_planfile_note_synced(ckpt_planfile *pf, const char *file,
                               uint64_t bytes);
/* Records declared tensors (key = FQN, value = why its piece failed or
 * "") as one record; a later non-empty reason replaces an earlier one. */
int ckpt_planfile_declare(ckpt_planfile *pf, const ckpt_kv *declared,
                          size_t n, ckpt_error *err);
/* Closes the file and opens it again: by close-to-open consistency, a
 * committer on another node that opens the plan afterwards reads what was
 * appended (an NFS client writes it to the server at the close; a local
 * or coherent file system needs nothing).  The plan is not made durable:
 * it need not be, a restart of this host makes the commit refuse it.  On
 * failure the plan is closed for good. */
int ckpt_planfile_share(ckpt_planfile *pf, ckpt_error *err);
void ckpt_planfile_close(ckpt_planfile *pf);
/* Reads a whole plan file, appending its pieces and metadata to m (each
 * piece's and kv's writer set to the plan's writer name): its complete
 * records, as a writer may still append.  Refuses files that are not
 * ckptfs plans (-EINVAL) and damage before the last record (-EIO, naming
 * the offset). */
int ckpt_planfile_read(const char *path, ckpt_manifest *m, ckpt_error *err);
/* The same into the compact table (the committer's): pieces are appended
 * to tab (on error it may hold some of them), metadata to meta. */
int ckpt_planfile_read_pieces(const char *path, ckpt_pieces *tab,
                              ckpt_manifest *meta, ckpt_error *err);
/* The same, and what the plan claims of its shard into *synced (the
 * committer's).  A plan written on this host before it restarted is
 * refused (-ESTALE): it may have lost its last appends. */
int ckpt_planfile_read_synced(const char *path, ckpt_pieces *tab,
                              ckpt_manifest *meta, ckpt_plan_synced *synced,
                              ckpt_error *err);
/* Reads the plans names[0..n) in folder dir into tab and meta, as
 * ckpt_planfile_read_pieces of each in that order would, on `threads`
 * threads (<= 0: one per CPU; the caller's is one of them): a 16k-rank
 * save's commit reads 16k plans.  The first plan in that order that
 * cannot be read is reported.  When not NULL, synced[i] receives plan i's
 * claim (as ckpt_planfile_read_synced) and ends[i] the table's size after
 * plan i's pieces. */
int ckpt_planfile_read_many(const char *dir, char *const *names, size_t n,
                            int threads, ckpt_pieces *tab,
                            ckpt_manifest *meta, ckpt_plan_synced *synced,
                            size_t *ends, ckpt_error *err);

/* What a commit that reuses the previous save's layout reads of a plan:
 * no piece rows, only its claims, metadata, the number of tensors it
 * declares, and its pieces' frames as packed records (docs/FORMAT.md,
 * "Layouts"). */
typedef struct ckpt_plan_packed {
    ckpt_plan_synced claim;
    char *writer;               /* its writer's name */
    ckpt_manifest meta;         /* writer set to the plan's writer */
    size_t declared;            /* rows of its declared table */
    int has_packed;             /* the plan has the packed table */
    uint64_t pieces;            /* pieces of its packed rows */
    uint8_t *data;              /* their records, in piece order */
    size_t len;
} ckpt_plan_packed;

/* Reads plans names[0..n) of folder dir so into out[0..n) (zeroed by the
 * caller), on `threads` threads (<= 0: one per CPU).  A plan written on
 * this host before it restarted is refused (-ESTALE), as by
 * ckpt_planfile_read_synced; the first failure in name order is
 * reported. */
int ckpt_planfile_read_packed_many(const char *dir, char *const *names,
                                   size_t n, int threads,
                                   ckpt_plan_packed *out, ckpt_error *err);
void ckpt_plan_packed_free(ckpt_plan_packed *p);

#endif
