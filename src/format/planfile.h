/*
 * planfile.h - .pending/<writer>.plan, a writer's local plan (schema in
 * docs/FORMAT.md): the pieces it wrote, with their frames, and its
 * metadata; appended durably as pieces close, read back by the commit.
 * It identifies itself with PRAGMA application_id CKPT_PLAN_APP_ID (db.h)
 * and carries the format version in PRAGMA user_version.
 */
#ifndef CKPT_PLANFILE_H
#define CKPT_PLANFILE_H

#include <stddef.h>
#include "format/model.h"
#include "format/plan.h"

typedef struct ckpt_planfile ckpt_planfile;

/* Creates `path` (must not exist) for `writer`. */
int ckpt_planfile_create(ckpt_planfile **out, const char *path,
                         const char *writer, int sync, ckpt_error *err);
/* Appends pieces (with frames) and metadata in one durable transaction. */
int ckpt_planfile_append(ckpt_planfile *pf, const ckpt_piece_rec *pieces,
                         size_t npieces, const ckpt_kv *meta, size_t nmeta,
                         ckpt_error *err);
/* Makes what was appended durable (the file, and its directory entry),
 * for plans created without sync. */
/* Records declared tensors (key = FQN, value = why its piece failed or
 * "") in one transaction; a later non-empty reason replaces an earlier
 * one. */
int ckpt_planfile_declare(ckpt_planfile *pf, const ckpt_kv *declared,
                          size_t n, ckpt_error *err);
int ckpt_planfile_sync(ckpt_planfile *pf, ckpt_error *err);
void ckpt_planfile_close(ckpt_planfile *pf);
/* Reads a whole plan file, appending its pieces and metadata to m (each
 * piece's and kv's writer set to the plan's writer name).  Refuses files
 * that are not ckptfs plans. */
int ckpt_planfile_read(const char *path, ckpt_manifest *m, ckpt_error *err);
/* The same into the compact table (the committer's): pieces are appended
 * to tab (on error it may hold some of them), metadata to meta. */
int ckpt_planfile_read_pieces(const char *path, ckpt_pieces *tab,
                              ckpt_manifest *meta, ckpt_error *err);
/* Reads the plans names[0..n) in folder dir into tab and meta, as
 * ckpt_planfile_read_pieces of each in that order would, on `threads`
 * threads (<= 0: one per CPU; the caller's is one of them): a 16k-rank
 * save's commit reads 16k plans.  The first plan in that order that
 * cannot be read is reported. */
int ckpt_planfile_read_many(const char *dir, char *const *names, size_t n,
                            int threads, ckpt_pieces *tab,
                            ckpt_manifest *meta, ckpt_error *err);

#endif
