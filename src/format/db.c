/*
 * db.c - the SQLite helpers shared by the committed index (index.c) and
 * the writers' plan files (planfile.c): errors named by file and step,
 * statements run with bound values, row loops, new files created with
 * ckptfs's pragmas, and the check that a file is the kind of ckptfs file
 * expected (see db.h).
 */
#include "format/db.h"
#include "format/planlog.h"
#include "common/error.h"
#include "common/shape.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int errno_of(sqlite3 *db, int rc)
{
    int sys = db ? sqlite3_system_errno(db) : 0;
    switch (rc & 0xff) {
    case SQLITE_NOMEM:
        return -ENOMEM;
    case SQLITE_FULL:
        return -ENOSPC;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return -EBUSY;
    case SQLITE_READONLY:
    case SQLITE_PERM:
        return -EACCES;
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
        return -EINVAL;
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
        return sys > 0 ? -sys : -EIO;
    default:
        return -EIO;
    }
}

int ckpt_db_err(ckpt_error *err, sqlite3 *db, int rc, const char *path,
                const char *what)
{
    const char *msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    return ckpt_err(err, errno_of(db, rc), "%s: %s: %s", path, what, msg);
}

int ckpt_db_exec(sqlite3 *db, const char *sql, const char *path,
                 ckpt_error *err)
{
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        return 0;
    char what[96];
    snprintf(what, sizeof what, "cannot run \"%.60s%s\"", sql,
             strlen(sql) > 60 ? "..." : "");
    return ckpt_db_err(err, db, rc, path, what);
}

int ckpt_db_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st,
                    const char *path, ckpt_error *err)
{
    int rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, st,
                                NULL);
    if (rc == SQLITE_OK)
        return 0;
    *st = NULL;
    if (rc == SQLITE_ERROR)   /* no such table or column */
        return ckpt_err(err, -EINVAL, "%s: not the expected schema: %s",
                        path, sqlite3_errmsg(db));
    return ckpt_db_err(err, db, rc, path, "cannot prepare a statement");
}

int ckpt_db_each(sqlite3 *db, const char *sql, const char *path,
                 int (*fn)(void *arg, sqlite3_stmt *st), void *arg,
                 ckpt_error *err)
{
    sqlite3_stmt *st;
    int rc = ckpt_db_prepare(db, sql, &st, path, err);
    if (rc)
        return rc;
    int src;
    while (!rc && (src = sqlite3_step(st)) == SQLITE_ROW)
        rc = fn(arg, st);
    if (!rc && src != SQLITE_DONE)
        rc = ckpt_db_err(err, db, src, path, "cannot read");
    sqlite3_finalize(st);
    return rc;
}

int ckpt_db_col_u64(sqlite3_stmt *st, int i, uint64_t *out)
{
    if (sqlite3_column_type(st, i) != SQLITE_INTEGER)
        return -1;
    int64_t v = sqlite3_column_int64(st, i);
    *out = (uint64_t)v;
    return v < 0 ? -1 : 0;
}

static int bind_one(sqlite3_stmt *st, int i, const ckpt_db_val *v)
{
    if (!v->is_text)
        return sqlite3_bind_int64(st, i, v->i);
    if (!v->s)
        return sqlite3_bind_null(st, i);
    if (v->is_text == 2)
        return sqlite3_bind_blob64(st, i, v->s, (sqlite3_uint64)v->i,
                                   SQLITE_STATIC);
    return sqlite3_bind_text(st, i, v->s, -1, SQLITE_STATIC);
}

int ckpt_db_run(sqlite3_stmt *st, const ckpt_db_val *v, int n,
                const char *path, const char *what, ckpt_error *err)
{
    int rc = SQLITE_OK;
    for (int i = 0; i < n && rc == SQLITE_OK; i++)
        rc = bind_one(st, i + 1, &v[i]);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    int rrc = sqlite3_reset(st);
    int brc = sqlite3_clear_bindings(st);
    if (rc == SQLITE_DONE)
        rc = rrc != SQLITE_OK ? rrc : brc;
    if (rc == SQLITE_OK || rc == SQLITE_DONE)
        return 0;
    return ckpt_db_err(err, sqlite3_db_handle(st), rc, path, what);
}

int ckpt_db_open_rw(sqlite3 **out, const char *path, const char *journal,
                    ckpt_error *err)
{
    *out = NULL;
    sqlite3 *db = NULL;
    /* One thread at a time uses a connection (callers serialise). */
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE |
                             SQLITE_OPEN_NOMUTEX |
                             SQLITE_OPEN_NOFOLLOW, NULL);
    if (rc != SQLITE_OK) {
        rc = ckpt_db_err(err, db, rc, path, "cannot open the database");
    } else {
        /* Neither mode is kept in the file: set on every connection. */
        char sql[128];
        snprintf(sql, sizeof sql, "PRAGMA journal_mode=%s;"
                 "PRAGMA synchronous=OFF;", journal);
        rc = ckpt_db_exec(db, sql, path, err);
    }
    if (rc) {
        sqlite3_close(db);
        return rc;
    }
    *out = db;
    return 0;
}

int ckpt_db_create(sqlite3 **out, const char *path, uint32_t app_id,
                   const char *journal, ckpt_error *err)
{
    *out = NULL;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return ckpt_err_sys(err, -errno, "cannot create %s", path);
    if (close(fd))
        return ckpt_err_sys(err, -errno, "cannot close %s", path);
    sqlite3 *db = NULL;
    int rc = ckpt_db_open_rw(&db, path, journal, err);
    if (rc == 0) {
        char sql[160];
        snprintf(sql, sizeof sql, "PRAGMA page_size=4096;"
                 "PRAGMA application_id=%d;PRAGMA user_version=%d;",
                 (int)(int32_t)app_id, CKPT_DB_VERSION);
        rc = ckpt_db_exec(db, sql, path, err);
    }
    if (rc) {
        sqlite3_close(db);
        unlink(path);
        return rc;
    }
    *out = db;
    return 0;
}

static const char *kind_of(uint32_t app_id)
{
    return app_id == CKPT_INDEX_APP_ID ? "index"
           : app_id == CKPT_PLAN_APP_ID ? "local plan" : "file";
}

/* Runs a PRAGMA that answers one integer; a file that is not SQLite is
 * refused as not being a ckptfs `kind`. */
/* 1 when the file at path starts as a local plan does (planlog.h): no
 * SQLite file since plans are logs. */
static int is_plan(const char *path)
{
    char head[sizeof CKPT_PLANLOG_MAGIC] = "";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = pread(fd, head, sizeof head, 0);
    close(fd);
    return n == (ssize_t)sizeof head &&
           memcmp(head, CKPT_PLANLOG_MAGIC, sizeof head) == 0;
}

static int pragma_int(sqlite3 *db, const char *sql, const char *path,
                      const char *kind, int64_t *out, ckpt_error *err)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
            *out = sqlite3_column_int64(st, 0);
    }
    int frc = sqlite3_finalize(st);
    if (rc == SQLITE_ROW)
        rc = frc;
    if (rc == SQLITE_OK)
        return 0;
    if ((rc & 0xff) == SQLITE_NOTADB)
        return ckpt_err(err, -EINVAL, "%s is not a ckptfs %s (%s)", path,
                        kind, is_plan(path) ? "it is a ckptfs local plan"
                                            : "not a SQLite database");
    return ckpt_db_err(err, db, rc, path, "cannot read its header");
}

int ckpt_db_check_id(sqlite3 *db, const char *path, uint32_t app_id,
                     ckpt_error *err)
{
    const char *kind = kind_of(app_id);
    int64_t id = 0, version = 0;
    int rc = pragma_int(db, "PRAGMA application_id", path, kind, &id, err);
    if (rc)
        return rc;
    if ((uint32_t)id != app_id) {
        const char *other = kind_of((uint32_t)id);
        if (strcmp(other, "file"))
            return ckpt_err(err, -EINVAL, "%s is not a ckptfs %s (it is a "
                            "ckptfs %s)", path, kind, other);
        return ckpt_err(err, -EINVAL, "%s is not a ckptfs %s (application_id "
                        "0x%08x is not ckptfs's)", path, kind,
                        (unsigned)(uint32_t)id);
    }
    rc = pragma_int(db, "PRAGMA user_version", path, kind, &version, err);
    if (rc)
        return rc;
    if (version > CKPT_FORMAT_VERSION)
        return ckpt_err(err, -ENOTSUP, "%s: ckptfs %s format version %lld is "
                        "newer than this ckptfs supports (%d)", path, kind,
                        (long long)version, CKPT_FORMAT_VERSION);
    if (version < 1)
        return ckpt_err(err, -EINVAL, "%s: ckptfs %s format version %lld is "
                        "not valid", path, kind, (long long)version);
    return 0;
}

int ckpt_db_dims(const char *text, int64_t *dims, const char *path,
                 const char *what, ckpt_error *err)
{
    const char *p = text;
    while (p && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    ckpt_error perr = { 0 };
    int ndim = p && *p == '[' ? ckpt_shape_parse(p, dims, &perr) : -EINVAL;
    if (ndim >= 0)
        return ndim;
    return ckpt_err(err, -EIO, "%s: %s: '%.200s' is not a JSON array of "
                    "non-negative integers%s%s", path, what,
                    text ? text : "NULL", perr.msg[0] ? ": " : "", perr.msg);
}
