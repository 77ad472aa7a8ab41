/*
 * db.h - the SQLite helpers shared by the committed index (index.c) and
 * the writers' plan files (planfile.c), internal to the format layer's
 * SQLite files, and the application ids that tell those files apart.
 */
#ifndef CKPT_DB_H
#define CKPT_DB_H

#include <stddef.h>
#include <stdint.h>
#include "ckptfs.h"

#define CKPT_INDEX_APP_ID 0x636b7074   /* "ckpt": index.db */
#define CKPT_PLAN_APP_ID  0x636b706c   /* "ckpl": a plan file of an older
                                          ckptfs (SQLite; now planlog.h) */
/* The user_version a new index or plan starts with; an index whose frames
 * refer to a base checkpoint's is raised to 2, one with packed tensors to
 * 3 (CKPT_FORMAT_VERSION). */
#define CKPT_DB_VERSION 1

struct sqlite3;
struct sqlite3_stmt;

/* A value to bind: an integer, text (NULL binds SQL NULL), or a BLOB of
 * i bytes at s. */
typedef struct ckpt_db_val {
    int is_text;
    int64_t i;
    const char *s;
} ckpt_db_val;
#define CKPT_DB_INT(x) ((ckpt_db_val){ 0, (int64_t)(x), NULL })
#define CKPT_DB_TEXT(x) ((ckpt_db_val){ 1, 0, (x) })
#define CKPT_DB_BLOB(p, n) \
    ((ckpt_db_val){ 2, (int64_t)(n), (const char *)(p) })

/* Sets err from SQLite result `rc` on db ("<path>: <what>: <errmsg>") and
 * returns the matching negative errno. */
int ckpt_db_err(ckpt_error *err, struct sqlite3 *db, int rc, const char *path,
                const char *what);
int ckpt_db_exec(struct sqlite3 *db, const char *sql, const char *path,
                 ckpt_error *err);
/* Creates `path` (which must not exist) as a new SQLite file with page size
 * 4096, the given journal mode, synchronous OFF, application_id `app_id`
 * and user_version CKPT_DB_VERSION.  On error the file is removed.
 * SQLite never syncs: the callers sync what must be durable, once, at the
 * point where it must be (docs/GUARANTEES.md, "Which sync makes which
 * promise").  A journal (other than OFF) still rolls back a transaction
 * that a killed process left half done. */
int ckpt_db_create(struct sqlite3 **out, const char *path, uint32_t app_id,
                   const char *journal, ckpt_error *err);
/* Opens the existing `path` read-write (no link followed) with the given
 * journal mode and synchronous OFF, as ckpt_db_create left it. */
int ckpt_db_open_rw(struct sqlite3 **out, const char *path,
                    const char *journal, ckpt_error *err);
/* Refuses a file that is not SQLite, has another application_id, or a
 * user_version newer than CKPT_FORMAT_VERSION (-ENOTSUP). */
int ckpt_db_check_id(struct sqlite3 *db, const char *path, uint32_t app_id,
                     ckpt_error *err);
int ckpt_db_prepare(struct sqlite3 *db, const char *sql,
                    struct sqlite3_stmt **st, const char *path,
                    ckpt_error *err);
/* Binds v[0..n) to st's parameters 1..n, steps it to completion and resets
 * it (an INSERT or UPDATE). */
int ckpt_db_run(struct sqlite3_stmt *st, const ckpt_db_val *v, int n,
                const char *path, const char *what, ckpt_error *err);
/* Runs the query `sql`, calling fn(arg, st) for each row until fn returns
 * non-zero (returned).  A query the schema cannot answer is -EINVAL. */
int ckpt_db_each(struct sqlite3 *db, const char *sql, const char *path,
                 int (*fn)(void *arg, struct sqlite3_stmt *st), void *arg,
                 ckpt_error *err);
/* Column i as a non-negative integer: 0, or -1 (wrong type, negative). */
int ckpt_db_col_u64(struct sqlite3_stmt *st, int i, uint64_t *out);
/* Parses a JSON array of non-negative integers ("[4,8]", "[]") into dims;
 * returns ndim or -EIO naming `path` and `what`. */
int ckpt_db_dims(const char *text, int64_t *dims, const char *path,
                 const char *what, ckpt_error *err);

#endif
