/*
 * planfile.c - a writer's local plan, .pending/<writer>.plan (see planfile.h
 * and docs/FORMAT.md): a small SQLite file to which one writer appends, in
 * one transaction per call, the pieces it wrote with their frames, and its
 * metadata.  At commit every plan is read
 * back into one manifest for the planner.
 *
 * SQLite never syncs a plan (its journal still undoes an append that a
 * killed writer left half done).  What the commit needs durable it syncs
 * itself: a plan tells it how much of its shard the writer synced
 * already (info 'synced', "BYTES:FILE"), so that each shard is synced
 * once.  Its info 'unsynced' names the host and boot it was last written
 * in: a power loss may have cost it its last appends (or its directory
 * entry), so a commit on that host after a restart refuses it rather than
 * publish a checkpoint missing pieces.
 */
#include "format/planfile.h"
#include "format/db.h"
#include "format/chunkpack.h"
#include "format/layout.h"
#include "codec/codec.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/pool.h"
#include "common/shape.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DIMS_JSON_CAP (CKPT_MAX_DIMS * 21 + 3)
/* "HOST BOOT_ID" */
#define HOST_BOOT_CAP 320
/* How long a reader waits for a writer's append to finish. */
#define BUSY_TIMEOUT_MS 10000

static const char PLAN_SCHEMA[] =
    "CREATE TABLE info(key TEXT PRIMARY KEY, value TEXT NOT NULL)"
    " WITHOUT ROWID;"
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)"
    " WITHOUT ROWID;"
    "CREATE TABLE pieces(id INTEGER PRIMARY KEY, fqn TEXT NOT NULL,"
    " dtype TEXT NOT NULL, shape TEXT NOT NULL, offsets TEXT NOT NULL,"
    " sizes TEXT NOT NULL, file TEXT NOT NULL, raw_bytes INTEGER NOT NULL,"
    " stored_bytes INTEGER NOT NULL, data_hash INTEGER NOT NULL);"
    "CREATE TABLE frames(piece_id INTEGER NOT NULL REFERENCES pieces(id),"
    " seq INTEGER NOT NULL, file_offset INTEGER NOT NULL,"
    " stored_size INTEGER NOT NULL, raw_offset INTEGER NOT NULL,"
    " raw_size INTEGER NOT NULL, codec INTEGER NOT NULL,"
    " checksum INTEGER NOT NULL, base INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY(piece_id, seq)) WITHOUT ROWID;";

/* Tensors declared in the save (a file created or described through a
 * mount) and why their piece failed: a commit refuses one without any
 * piece.  Plans written before this table existed have none. */
static const char DECLARED_SCHEMA[] =
    "CREATE TABLE declared(fqn TEXT PRIMARY KEY, reason TEXT NOT NULL)"
    " WITHOUT ROWID;";
/* The pieces' frames again, one row per append, as the records of a
 * packed tensor (chunkpack.h, file id 0) in piece order: what a commit
 * that reuses the previous save's layout reads instead of the rows
 * (docs/FORMAT.md, "Layouts").  Plans written before it have none. */
static const char PACKED_SCHEMA[] =
    "CREATE TABLE packed(seq INTEGER PRIMARY KEY, pieces INTEGER NOT NULL,"
    " data BLOB NOT NULL);";
static const char DECLARE_SQL[] =
    "INSERT INTO declared(fqn, reason) VALUES(?,?) ON CONFLICT(fqn) DO"
    " UPDATE SET reason = excluded.reason WHERE excluded.reason <> ''";

enum { PS_INFO, PS_PIECE, PS_FRAME, PS_META, PS_PACKED, PS_N };

static const char *const PLAN_SQL[PS_N] = {
    "INSERT OR REPLACE INTO info(key, value) VALUES(?,?)",
    "INSERT INTO pieces(fqn, dtype, shape, offsets, sizes, file, raw_bytes,"
    " stored_bytes, data_hash) VALUES(?,?,?,?,?,?,?,?,?)",
    "INSERT INTO frames(piece_id, seq, file_offset, stored_size, raw_offset,"
    " raw_size, codec, checksum, base) VALUES(?,?,?,?,?,?,?,?,?)",
    "INSERT OR REPLACE INTO meta(key, value) VALUES(?,?)",
    "INSERT INTO packed(pieces, data) VALUES(?,?)",
};

struct ckpt_planfile {
    sqlite3 *db;
    char *path;
    sqlite3_stmt *st[PS_N];
    char synced[CKPT_PLAN_SYNCED_CAP];  /* "BYTES:FILE" for the next append,
                                           or "" */
    char boot[HOST_BOOT_CAP];           /* host_boot(), once */
    uint64_t layout, laid;      /* the digest of the pieces appended, and
                                   their count (layout.h) */
    int unpacked;               /* a piece could not be packed: no layout
                                   is claimed any more */
    ckpt_strbuf rec;            /* the packed records of an append */
};

static int run(ckpt_planfile *pf, int which, const ckpt_db_val *v, int n,
               ckpt_error *err)
{
    return ckpt_db_run(pf->st[which], v, n, pf->path,
                       "cannot write the local plan", err);
}

/* Where and when this process runs, "HOST BOOT_ID", into buf; "" when
 * the boot id cannot be read (then no restart can be told). */
static void host_boot(char *buf, size_t cap)
{
    char host[HOST_BOOT_CAP - 64] = "", boot[64] = "";
    buf[0] = '\0';
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (!f)
        return;
    int ok = fgets(boot, sizeof boot, f) != NULL;
    fclose(f);
    boot[strcspn(boot, "\n")] = '\0';
    if (!ok || !*boot || gethostname(host, sizeof host - 1) != 0)
        return;
    snprintf(buf, cap, "%s %s", host, boot);
}

/* Records (in the caller's transaction) the host and boot of this
 * change, which no sync makes durable. */
static int mark_unsynced(ckpt_planfile *pf, ckpt_error *err)
{
    if (!pf->boot[0])
        return 0;
    ckpt_db_val v[] = { CKPT_DB_TEXT("unsynced"), CKPT_DB_TEXT(pf->boot) };
    return run(pf, PS_INFO, v, 2, err);
}

/* -------------------------------------------------------------- writing */

static int prepare_all(ckpt_planfile *pf, ckpt_error *err)
{
    int rc = 0;
    for (int i = 0; !rc && i < PS_N; i++)
        rc = ckpt_db_prepare(pf->db, PLAN_SQL[i], &pf->st[i], pf->path, err);
    return rc;
}

/* Closes the connection (its statements first, so that it does close). */
static void close_db(ckpt_planfile *pf)
{
    for (int i = 0; i < PS_N; i++) {
        sqlite3_finalize(pf->st[i]);
        pf->st[i] = NULL;
    }
    sqlite3_close(pf->db);
    pf->db = NULL;
}

static int plan_init(ckpt_planfile *pf, const char *writer, ckpt_error *err)
{
    int rc = ckpt_db_exec(pf->db, "BEGIN", pf->path, err);
    if (!rc)
        rc = ckpt_db_exec(pf->db, PLAN_SCHEMA, pf->path, err);
    if (!rc)
        rc = ckpt_db_exec(pf->db, DECLARED_SCHEMA, pf->path, err);
    if (!rc)
        rc = ckpt_db_exec(pf->db, PACKED_SCHEMA, pf->path, err);
    if (!rc)
        rc = prepare_all(pf, err);
    ckpt_db_val who[] = { CKPT_DB_TEXT("writer"), CKPT_DB_TEXT(writer) };
    ckpt_db_val producer[] = { CKPT_DB_TEXT("producer"),
                               CKPT_DB_TEXT("ckptfs " CKPT_VERSION_STRING) };
    /* How this writer's pieces' data_hash is made, read back as the
     * save's metadata (beside the other info rows: no page more to
     * write than before, where a tmpfs save is counted in pages). */
    ckpt_db_val hash[] = { CKPT_DB_TEXT(CKPT_META_DATA_HASH),
                           CKPT_DB_TEXT(CKPT_DATA_HASH_FRAMES) };
    if (!rc)
        rc = run(pf, PS_INFO, who, 2, err);
    if (!rc)
        rc = run(pf, PS_INFO, producer, 2, err);
    if (!rc)
        rc = run(pf, PS_INFO, hash, 2, err);
    if (!rc)
        rc = mark_unsynced(pf, err);
    if (!rc)
        rc = ckpt_db_exec(pf->db, "COMMIT", pf->path, err);
    return rc;
}

static void plan_free(ckpt_planfile *pf)
{
    close_db(pf);
    ckpt_strbuf_free(&pf->rec);
    free(pf->path);
    free(pf);
}

int ckpt_planfile_create(ckpt_planfile **out, const char *path,
                         const char *writer, ckpt_error *err)
{
    *out = NULL;
    if (!writer || !*writer)
        return ckpt_err(err, -EINVAL, "%s: a local plan needs a writer name",
                        path);
    ckpt_planfile *pf = calloc(1, sizeof *pf);
    if (!pf || !(pf->path = strdup(path))) {
        free(pf);
        return ckpt_err(err, -ENOMEM, "%s: out of memory", path);
    }
    host_boot(pf->boot, sizeof pf->boot);
    pf->layout = CKPT_LAYOUT_SEED;
    /* PERSIST: a transaction per flush (a piece closed through a mount)
     * reuses one journal file instead of creating and unlinking one. */
    int rc = ckpt_db_create(&pf->db, path, CKPT_PLAN_APP_ID, "PERSIST", err);
    if (rc) {
        plan_free(pf);
        return rc;
    }
    rc = plan_init(pf, writer, err);
    if (rc) {
        plan_free(pf);
        unlink(path);
        return rc;
    }
    *out = pf;
    return 0;
}

static int check_piece_fields(const ckpt_planfile *pf, const ckpt_piece_rec *p,
                              size_t i, ckpt_error *err)
{
    if (!p->fqn || !p->file)
        return ckpt_err(err, -EINVAL, "%s: piece %zu has no %s", pf->path, i,
                        p->fqn ? "shard file" : "fqn");
    if (p->ndim < 0 || p->ndim > CKPT_MAX_DIMS ||
        ckpt_dtype_size(p->dtype) == 0)
        return ckpt_err(err, -EINVAL, "%s: tensor '%s': bad dtype (%d) or "
                        "dimension count (%d)", pf->path, p->fqn,
                        (int)p->dtype, p->ndim);
    return 0;
}

static int append_frames(ckpt_planfile *pf, const ckpt_piece_rec *p,
                         int64_t id, ckpt_error *err)
{
    for (size_t k = 0; k < p->nframes; k++) {
        const ckpt_frame_rec *f = &p->frames[k];
        ckpt_db_val v[] = {
            CKPT_DB_INT(id), CKPT_DB_INT(k), CKPT_DB_INT(f->file_offset),
            CKPT_DB_INT(f->stored_size), CKPT_DB_INT(f->raw_offset),
            CKPT_DB_INT(f->raw_size), CKPT_DB_INT(f->codec),
            CKPT_DB_INT((int64_t)f->checksum), CKPT_DB_INT(f->base),
        };
        int rc = run(pf, PS_FRAME, v, 9, err);
        if (rc)
            return rc;
    }
    return 0;
}

static int append_piece(ckpt_planfile *pf, const ckpt_piece_rec *p, size_t i,
                        ckpt_error *err)
{
    int rc = check_piece_fields(pf, p, i, err);
    if (rc)
        return rc;
    char shape[DIMS_JSON_CAP], off[DIMS_JSON_CAP], size[DIMS_JSON_CAP];
    ckpt_shape_format_json(shape, sizeof shape, p->ndim, p->shape);
    ckpt_shape_format_json(off, sizeof off, p->ndim, p->offsets);
    ckpt_shape_format_json(size, sizeof size, p->ndim, p->sizes);
    ckpt_db_val v[] = {
        CKPT_DB_TEXT(p->fqn), CKPT_DB_TEXT(ckpt_dtype_name(p->dtype)),
        CKPT_DB_TEXT(shape), CKPT_DB_TEXT(off), CKPT_DB_TEXT(size),
        CKPT_DB_TEXT(p->file), CKPT_DB_INT(p->raw_bytes),
        CKPT_DB_INT(p->stored_bytes), CKPT_DB_INT((int64_t)p->data_hash),
    };
    rc = run(pf, PS_PIECE, v, 9, err);
    return rc ? rc : append_frames(pf, p, sqlite3_last_insert_rowid(pf->db),
                                   err);
}

int ckpt_planfile_share(ckpt_planfile *pf, ckpt_error *err)
{
    close_db(pf);
    int rc = ckpt_db_open_rw(&pf->db, pf->path, "PERSIST", err);
    if (!rc)
        rc = prepare_all(pf, err);
    if (rc)
        close_db(pf);      /* the writer fails for good (writer.c) */
    return rc;
}

void ckpt_planfile_note_synced(ckpt_planfile *pf, const char *file,
                               uint64_t bytes)
{
    int n = snprintf(pf->synced, sizeof pf->synced, "%llu:%s",
                     (unsigned long long)bytes, file);
    if (n < 0 || (size_t)n >= sizeof pf->synced)
        pf->synced[0] = '\0';      /* no claim: the commit syncs it */
}

/* The claim noted by ckpt_planfile_note_synced, in the open transaction. */
static int write_synced(ckpt_planfile *pf, ckpt_error *err)
{
    if (!pf->synced[0])
        return 0;
    ckpt_db_val v[] = { CKPT_DB_TEXT("synced"), CKPT_DB_TEXT(pf->synced) };
    int rc = run(pf, PS_INFO, v, 2, err);
    if (!rc)
        pf->synced[0] = '\0';
    return rc;
}

/* 1 when piece p's frames can be a packed record: no delta frame, and
 * each frame after the previous one in the shard (the record stores the
 * distance). */
static int packable(const ckpt_piece_rec *p)
{
    uint64_t end = 0;
    for (size_t k = 0; k < p->nframes; k++) {
        const ckpt_frame_rec *f = &p->frames[k];
        if (f->base || f->codec == CKPT_CODEC_REF ||
            f->codec == CKPT_CODEC_XOR || (k && f->file_offset < end))
            return 0;
        end = f->file_offset + f->stored_size;
    }
    return 1;
}

/* In the open transaction: the pieces' layout added to the plan's digest
 * (into *layout, *unpacked) and their packed records as one row, and
 * info 'layout' ("PIECES:DIGEST", or "none" once a piece could not be
 * packed). */
static int append_layout(ckpt_planfile *pf, const ckpt_piece_rec *pieces,
                         size_t npieces, uint64_t *layout, int *unpacked,
                         ckpt_error *err)
{
    pf->rec.len = 0;
    for (size_t i = 0; i < npieces && !*unpacked; i++) {
        const ckpt_piece_rec *p = &pieces[i];
        *layout = ckpt_layout_step(*layout, p->fqn, p->dtype, p->ndim,
                                   p->shape, p->offsets, p->sizes, p->file);
        if (!packable(p))
            *unpacked = 1;
        else
            ckpt_pack_put(&pf->rec, 0, p->frames, p->nframes, p->data_hash);
    }
    if (pf->rec.oom)
        return ckpt_err(err, -ENOMEM, "%s: out of memory", pf->path);
    int rc = 0;
    if (!*unpacked && npieces) {
        ckpt_db_val v[] = { CKPT_DB_INT(npieces),
                            CKPT_DB_BLOB(pf->rec.p, pf->rec.len) };
        rc = run(pf, PS_PACKED, v, 2, err);
    }
    char claim[64] = "none";
    if (!*unpacked)
        snprintf(claim, sizeof claim, "%llu:%016llx",
                 (unsigned long long)(pf->laid + npieces),
                 (unsigned long long)*layout);
    ckpt_db_val v[] = { CKPT_DB_TEXT("layout"), CKPT_DB_TEXT(claim) };
    return rc ? rc : run(pf, PS_INFO, v, 2, err);
}

int ckpt_planfile_append(ckpt_planfile *pf, const ckpt_piece_rec *pieces,
                         size_t npieces, const ckpt_kv *meta, size_t nmeta,
                         ckpt_error *err)
{
    uint64_t layout = pf->layout;
    int unpacked = pf->unpacked;
    int rc = ckpt_db_exec(pf->db, "BEGIN IMMEDIATE", pf->path, err);
    if (!rc)
        rc = write_synced(pf, err);
    if (!rc)
        rc = mark_unsynced(pf, err);
    for (size_t i = 0; !rc && i < npieces; i++)
        rc = append_piece(pf, &pieces[i], i, err);
    if (!rc)
        rc = append_layout(pf, pieces, npieces, &layout, &unpacked, err);
    for (size_t i = 0; !rc && i < nmeta; i++) {
        if (!meta[i].key || !meta[i].value) {
            rc = ckpt_err(err, -EINVAL, "%s: metadata entry %zu has no %s",
                          pf->path, i, meta[i].key ? "value" : "key");
            break;
        }
        ckpt_db_val v[] = { CKPT_DB_TEXT(meta[i].key),
                            CKPT_DB_TEXT(meta[i].value) };
        rc = run(pf, PS_META, v, 2, err);
    }
    if (!rc)
        rc = ckpt_db_exec(pf->db, "COMMIT", pf->path, err);
    if (rc && !sqlite3_get_autocommit(pf->db))
        sqlite3_exec(pf->db, "ROLLBACK", NULL, NULL, NULL);  /* keeps rc */
    if (!rc) {
        pf->layout = layout;
        pf->unpacked = unpacked;
        pf->laid += npieces;
    }
    return rc;
}

int ckpt_planfile_declare(ckpt_planfile *pf, const ckpt_kv *declared,
                          size_t n, ckpt_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = ckpt_db_exec(pf->db, "BEGIN IMMEDIATE", pf->path, err);
    if (!rc)
        rc = mark_unsynced(pf, err);
    if (!rc)
        rc = ckpt_db_prepare(pf->db, DECLARE_SQL, &st, pf->path, err);
    for (size_t i = 0; !rc && i < n; i++) {
        ckpt_db_val v[] = { CKPT_DB_TEXT(declared[i].key),
                            CKPT_DB_TEXT(declared[i].value ? declared[i].value
                                                           : "") };
        rc = ckpt_db_run(st, v, 2, pf->path, "cannot write the local plan",
                         err);
    }
    sqlite3_finalize(st);
    if (!rc)
        rc = ckpt_db_exec(pf->db, "COMMIT", pf->path, err);
    if (rc && !sqlite3_get_autocommit(pf->db))
        sqlite3_exec(pf->db, "ROLLBACK", NULL, NULL, NULL);  /* keeps rc */
    return rc;
}

void ckpt_planfile_close(ckpt_planfile *pf)
{
    if (pf)
        plan_free(pf);
}

/* -------------------------------------------------------------- reading */

typedef struct preader {
    const char *path;
    char *writer;
    ckpt_pieces *tab;       /* where the pieces go */
    size_t base;            /* the plan's first piece in tab */
    ckpt_manifest m;        /* its metadata */
    int64_t *ids;           /* pieces.id per piece read, ascending */
    size_t nids, ids_cap;
    size_t next;            /* frames: the piece being filled */
    ckpt_plan_synced *synced;   /* its claim, or NULL: not asked */
    ckpt_error *err;
} preader;

static int plan_damaged(preader *r, const char *what, int64_t id)
{
    return ckpt_err(r->err, -EIO, "%s: damaged local plan: %s (piece %lld)",
                    r->path, what, (long long)id);
}

/* A plan last written on this host before it restarted is refused. */
static int check_unsynced(preader *r, const char *written)
{
    char now[HOST_BOOT_CAP];
    host_boot(now, sizeof now);
    size_t host = strcspn(now, " ");
    if (!*now || strncmp(now, written, host + 1) != 0 ||
        strcmp(now, written) == 0)
        return 0;
    return ckpt_err(r->err, -ESTALE, "%s was last written on this host "
                    "(%.*s) before it restarted: a save is not durable "
                    "before its commit, so it may have lost pieces; save "
                    "the step again", r->path, (int)host, now);
}

/* info 'layout' ("PIECES:DIGEST" or "none"). */
static int layout_row(preader *r, const char *v)
{
    unsigned long long n, d;
    int used = 0;
    if (strcmp(v, "none") == 0 || !r->synced)
        return 0;
    if (sscanf(v, "%llu:%16llx%n", &n, &d, &used) != 2 || v[used] ||
        strlen(v) != (size_t)used)
        return plan_damaged(r, "bad layout claim", 0);
    r->synced->has_layout = 1;
    r->synced->layout_pieces = n;
    r->synced->layout = d;
    return 0;
}

/* info 'synced' ("BYTES:FILE"), 'unsynced' ("HOST BOOT_ID") and 'layout'. */
static int claim_row(void *arg, sqlite3_stmt *st)
{
    preader *r = arg;
    const char *k = (const char *)sqlite3_column_text(st, 0);
    const char *v = (const char *)sqlite3_column_text(st, 1);
    if (!k || !v)
        return plan_damaged(r, "info without key or value", 0);
    if (strcmp(k, "unsynced") == 0)
        return check_unsynced(r, v);
    if (strcmp(k, "layout") == 0)
        return layout_row(r, v);
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || end == v || *end != ':' ||
        strlen(end + 1) >= sizeof r->synced->file)
        return plan_damaged(r, "bad synced claim", 0);
    if (r->synced) {
        r->synced->has = 1;
        r->synced->bytes = n;
        snprintf(r->synced->file, sizeof r->synced->file, "%s", end + 1);
    }
    return 0;
}

static int info_row(void *arg, sqlite3_stmt *st)
{
    preader *r = arg;
    const char *w = (const char *)sqlite3_column_text(st, 0);
    if (!w || !*w || !(r->writer = strdup(w)))
        return ckpt_err(r->err, w && *w ? -ENOMEM : -EIO,
                        "%s: the local plan has no writer name", r->path);
    return 0;
}

/* dtype, shape, offsets and sizes of a piece row into p. */
static int piece_dims(preader *r, sqlite3_stmt *st, ckpt_piece_rec *p,
                      int64_t id)
{
    const char *dt = (const char *)sqlite3_column_text(st, 2);
    p->dtype = dt ? ckpt_dtype_parse(dt) : CKPT_DTYPE_INVALID;
    if (p->dtype == CKPT_DTYPE_INVALID)
        return ckpt_err(r->err, -EINVAL, "%s: tensor '%s' (piece %lld): "
                        "unknown dtype '%s'", r->path, p->fqn, (long long)id,
                        dt ? dt : "NULL");
    int64_t *dims[3] = { p->shape, p->offsets, p->sizes };
    for (int c = 0; c < 3; c++) {
        const char *text = (const char *)sqlite3_column_text(st, 3 + c);
        int n = ckpt_db_dims(text, dims[c], r->path, "", r->err);
        if (n < 0) {
            /* Again, for the message: named only when it is needed (a
             * committer reads millions of pieces). */
            char what[300];
            snprintf(what, sizeof what, "tensor '%.200s' piece %lld",
                     p->fqn, (long long)id);
            return ckpt_db_dims(text, dims[c], r->path, what, r->err);
        }
        if (c > 0 && n != p->ndim)
            return plan_damaged(r, "shape, offsets and sizes differ in "
                                "length", id);
        p->ndim = n;
    }
    return 0;
}

static int piece_row(void *arg, sqlite3_stmt *st)
{
    preader *r = arg;
    int64_t id = sqlite3_column_int64(st, 0);
    const char *fqn = (const char *)sqlite3_column_text(st, 1);
    const char *file = (const char *)sqlite3_column_text(st, 6);
    if (!fqn || !file)
        return plan_damaged(r, "piece without fqn or file", id);
    if (ckpt_array_reserve((void **)&r->ids, &r->ids_cap, r->nids + 1,
                           sizeof *r->ids))
        return ckpt_err(r->err, -ENOMEM, "%s: out of memory", r->path);
    int64_t *ids = r->ids;
    /* A record to copy into the table: its strings are only read. */
    ckpt_piece_rec p = { .fqn = (char *)fqn, .file = (char *)file,
                         .writer = r->writer };
    if (ckpt_db_col_u64(st, 7, &p.raw_bytes) ||
        ckpt_db_col_u64(st, 8, &p.stored_bytes))
        return plan_damaged(r, "negative or missing byte counts", id);
    p.data_hash = (uint64_t)sqlite3_column_int64(st, 9);
    int rc = piece_dims(r, st, &p, id);
    if (rc)
        return rc;
    if (ckpt_pieces_add(r->tab, &p))
        return ckpt_err(r->err, -ENOMEM, "%s: out of memory", r->path);
    ids[r->nids++] = id;
    return 0;
}

static int frame_row(void *arg, sqlite3_stmt *st)
{
    preader *r = arg;
    int64_t id = sqlite3_column_int64(st, 0);
    while (r->next < r->nids && r->ids[r->next] < id)
        r->next++;
    if (r->next == r->nids || r->ids[r->next] != id)
        return plan_damaged(r, "frame of a missing piece", id);
    size_t i = r->base + r->next;
    ckpt_frame_rec f = { 0 };
    int64_t codec = sqlite3_column_int64(st, 6);
    if (sqlite3_column_int64(st, 1) != (int64_t)r->tab->v[i].nframes ||
        ckpt_db_col_u64(st, 2, &f.file_offset) ||
        ckpt_db_col_u64(st, 3, &f.stored_size) ||
        ckpt_db_col_u64(st, 4, &f.raw_offset) ||
        ckpt_db_col_u64(st, 5, &f.raw_size) || codec < 0 || codec > INT_MAX)
        return plan_damaged(r, "bad frame", id);
    f.codec = (int)codec;
    f.checksum = (uint64_t)sqlite3_column_int64(st, 7);
    f.base = sqlite3_column_int64(st, 8);
    if (f.base < 0)
        return plan_damaged(r, "bad frame base", id);
    if (ckpt_pieces_add_frame(r->tab, i, &f))
        return ckpt_err(r->err, -ENOMEM, "%s: out of memory", r->path);
    return 0;
}

static int declared_row(void *arg, sqlite3_stmt *st)
{
    preader *r = arg;
    const char *f = (const char *)sqlite3_column_text(st, 0);
    const char *why = (const char *)sqlite3_column_text(st, 1);
    if (!f)
        return plan_damaged(r, "declared tensor without fqn", 0);
    if (ckpt_manifest_declare(&r->m, f, why, r->writer))
        return ckpt_err(r->err, -ENOMEM, "%s: out of memory", r->path);
    return 0;
}

/* Counts the `declared` tables (0 in plans older than it). */
static int table_row(void *arg, sqlite3_stmt *st)
{
    (void)st;
    (*(int *)arg)++;
    return 0;
}

static int meta_row(void *arg, sqlite3_stmt *st)
{
    preader *r = arg;
    const char *k = (const char *)sqlite3_column_text(st, 0);
    const char *v = (const char *)sqlite3_column_text(st, 1);
    if (!k || !v)
        return plan_damaged(r, "metadata without key or value", 0);
    if (ckpt_manifest_set_meta(&r->m, k, v, r->writer))
        return ckpt_err(r->err, -ENOMEM, "%s: out of memory", r->path);
    return 0;
}

/* Reads everything inside one read transaction, so that a writer's append
 * is seen whole or not at all. */
/* Begins the read transaction and reads info: the writer, the claims. */
static int read_info(sqlite3 *db, preader *r)
{
    int rc = ckpt_db_exec(db, "BEGIN", r->path, r->err);
    if (!rc)
        rc = ckpt_db_each(db, "SELECT value FROM info WHERE key = 'writer'",
                          r->path, info_row, r, r->err);
    if (!rc && !r->writer)
        rc = ckpt_err(r->err, -EIO, "%s: the local plan has no writer name",
                      r->path);
    if (!rc)
        rc = ckpt_db_each(db, "SELECT key, value FROM info WHERE key IN "
                          "('synced', 'unsynced', 'layout')", r->path,
                          claim_row, r, r->err);
    return rc;
}

/* The plan's metadata, and how its data hashes are made (kept in info,
 * read back as metadata). */
static int read_meta(sqlite3 *db, preader *r)
{
    int rc = ckpt_db_each(db, "SELECT key, value FROM meta ORDER BY key",
                          r->path, meta_row, r, r->err);
    if (!rc)
        rc = ckpt_db_each(db, "SELECT key, value FROM info WHERE key = '"
                          CKPT_META_DATA_HASH "'", r->path, meta_row, r,
                          r->err);
    return rc;
}

static int read_all(sqlite3 *db, preader *r)
{
    int rc = read_info(db, r);
    if (!rc)
        rc = ckpt_db_each(db, "SELECT id, fqn, dtype, shape, offsets, sizes,"
                          " file, raw_bytes, stored_bytes, data_hash FROM "
                          "pieces ORDER BY id", r->path, piece_row, r, r->err);
    /* Plans older than delta saves have no frames.base. */
    int has_base = 0;
    if (!rc)
        rc = ckpt_db_each(db, "SELECT 1 FROM pragma_table_info('frames') "
                          "WHERE name = 'base'", r->path, table_row,
                          &has_base, r->err);
    if (!rc)
        rc = ckpt_db_each(db, has_base
                          ? "SELECT piece_id, seq, file_offset, stored_size,"
                            " raw_offset, raw_size, codec, checksum, base"
                            " FROM frames ORDER BY piece_id, seq"
                          : "SELECT piece_id, seq, file_offset, stored_size,"
                            " raw_offset, raw_size, codec, checksum, 0"
                            " FROM frames ORDER BY piece_id, seq", r->path,
                          frame_row, r, r->err);
    if (!rc)
        rc = read_meta(db, r);
    int has_declared = 0;
    if (!rc)
        rc = ckpt_db_each(db, "SELECT 1 FROM sqlite_master WHERE type = "
                          "'table' AND name = 'declared'", r->path,
                          table_row, &has_declared, r->err);
    if (!rc && has_declared)
        rc = ckpt_db_each(db, "SELECT fqn, reason FROM declared ORDER BY fqn",
                          r->path, declared_row, r, r->err);
    if (!rc)
        rc = ckpt_db_exec(db, "COMMIT", r->path, r->err);
    return rc;
}

/* Opens read-write when allowed, so that SQLite can roll back the journal
 * of an append that a crashed writer left half done. */
static int open_plan(sqlite3 **db, const char *path, ckpt_error *err)
{
    struct stat st;
    if (lstat(path, &st))
        return ckpt_err_sys(err, -errno, "cannot open local plan %s", path);
    if (!S_ISREG(st.st_mode) || st.st_size == 0)
        return ckpt_err(err, -EINVAL, "%s is not a ckptfs local plan (%s)",
                        path, S_ISREG(st.st_mode) ? "empty file"
                                                  : "not a regular file");
    int rc = sqlite3_open_v2(path, db, SQLITE_OPEN_READWRITE |
                             SQLITE_OPEN_NOMUTEX |
                             SQLITE_OPEN_NOFOLLOW, NULL);
    if (rc != SQLITE_OK)
        return ckpt_db_err(err, *db, rc, path, "cannot open local plan");
    rc = sqlite3_busy_timeout(*db, BUSY_TIMEOUT_MS);
    if (rc != SQLITE_OK)
        return ckpt_db_err(err, *db, rc, path, "cannot set a busy timeout");
    return ckpt_db_check_id(*db, path, CKPT_PLAN_APP_ID, err);
}

int ckpt_planfile_read_pieces(const char *path, ckpt_pieces *tab,
                              ckpt_manifest *meta, ckpt_error *err)
{
    return ckpt_planfile_read_synced(path, tab, meta, NULL, err);
}

int ckpt_planfile_read_synced(const char *path, ckpt_pieces *tab,
                              ckpt_manifest *meta, ckpt_plan_synced *synced,
                              ckpt_error *err)
{
    preader r = { .path = path, .tab = tab, .base = tab->n,
                  .synced = synced, .err = err };
    if (synced)
        memset(synced, 0, sizeof *synced);
    ckpt_manifest_init(&r.m);
    sqlite3 *db = NULL;
    int rc = open_plan(&db, path, err);
    if (!rc)
        rc = read_all(db, &r);
    sqlite3_close(db);   /* also ends a read transaction left open */
    if (!rc && ckpt_manifest_take(meta, &r.m))
        rc = ckpt_err(err, -ENOMEM, "%s: out of memory", path);
    ckpt_manifest_free(&r.m);
    free(r.ids);
    free(r.writer);
    return rc;
}

/* One plan read by a worker of ckpt_planfile_read_many into its own
 * table. */
typedef struct read_slot {
    char path[4096];
    ckpt_pieces tab;
    ckpt_manifest meta;
    ckpt_plan_synced synced;
    ckpt_plan_packed *packed;   /* read as ckpt_planfile_read_packed_many
                                   does, not into tab, meta, synced */
    ckpt_error err;
    int rc;
    ckpt_taskgroup *g;
} read_slot;

static int read_packed(const char *path, ckpt_plan_packed *out,
                       ckpt_error *err);

static void read_task(void *arg, int worker)
{
    (void)worker;
    read_slot *s = arg;
    if (s->packed)
        s->rc = read_packed(s->path, s->packed, &s->err);
    else
        s->rc = ckpt_planfile_read_synced(s->path, &s->tab, &s->meta,
                                          &s->synced, &s->err);
    ckpt_tg_done(s->g);
}

/* Reads slots[0..m), plans names[0..m) under dir, on the pool, then
 * appends them in order, each one's claim to synced[k] and the table's
 * size after it to ends[k] (either may be NULL); the first failure in that
 * order is reported. */
static int read_batch(ckpt_pool *pool, read_slot *slots, size_t m,
                      const char *dir, char *const *names, ckpt_pieces *tab,
                      ckpt_manifest *meta, ckpt_plan_synced *synced,
                      size_t *ends, ckpt_error *err)
{
    ckpt_taskgroup g;
    ckpt_tg_init(&g);
    int rc = 0;
    for (size_t k = 0; k < m && !rc; k++) {
        ckpt_pieces_init(&slots[k].tab);
        ckpt_manifest_init(&slots[k].meta);
        slots[k].err = (ckpt_error){ 0 };
        slots[k].g = &g;
        rc = ckpt_path_join(slots[k].path, sizeof slots[k].path, dir,
                            names[k], err);
    }
    if (!rc)
        ckpt_pool_run_tasks(pool, read_task, slots, m, sizeof *slots, &g);
    ckpt_tg_destroy(&g);
    for (size_t k = 0; k < m; k++) {
        if (!rc && slots[k].rc) {
            *err = slots[k].err;
            rc = slots[k].rc;
        }
        if (!rc && (ckpt_pieces_append(tab, &slots[k].tab) ||
                    ckpt_manifest_take(meta, &slots[k].meta)))
            rc = ckpt_err(err, -ENOMEM, "%s: out of memory", slots[k].path);
        if (!rc && synced)
            synced[k] = slots[k].synced;
        if (!rc && ends)
            ends[k] = tab->n;
        ckpt_pieces_free(&slots[k].tab);
        ckpt_manifest_free(&slots[k].meta);
    }
    return rc;
}

int ckpt_planfile_read_many(const char *dir, char *const *names, size_t n,
                            int threads, ckpt_pieces *tab,
                            ckpt_manifest *meta, ckpt_plan_synced *synced,
                            size_t *ends, ckpt_error *err)
{
    if (threads <= 0)
        threads = ckpt_cpu_count();
    if ((size_t)threads > n)
        threads = n ? (int)n : 1;
    /* A few plans per thread at a time: little memory held twice. */
    size_t batch = 4 * (size_t)threads;
    read_slot *slots = calloc(batch, sizeof *slots);
    ckpt_pool *pool = NULL;
    if (!slots)
        return ckpt_err(err, -ENOMEM, "out of memory");
    int rc = ckpt_pool_create(&pool, threads > 1 ? threads - 1 : 1, err);
    for (size_t at = 0; !rc && at < n; at += batch)
        rc = read_batch(pool, slots, n - at < batch ? n - at : batch, dir,
                        names + at, tab, meta, synced ? synced + at : NULL,
                        ends ? ends + at : NULL, err);
    if (pool)
        ckpt_pool_destroy(pool);
    free(slots);
    return rc;
}

/* -------------------------------------------- reading for a reused layout */

static int count_row(void *arg, sqlite3_stmt *st)
{
    *(size_t *)arg = (size_t)sqlite3_column_int64(st, 0);
    return 0;
}

/* A packed row: its records appended to out's. */
typedef struct packed_reader {
    preader *r;
    ckpt_plan_packed *out;
    ckpt_strbuf data;
} packed_reader;

static int packed_row(void *arg, sqlite3_stmt *st)
{
    packed_reader *pr = arg;
    uint64_t n;
    const void *p = sqlite3_column_blob(st, 1);
    size_t len = (size_t)sqlite3_column_bytes(st, 1);
    if (ckpt_db_col_u64(st, 0, &n) || n > UINT64_MAX - pr->out->pieces ||
        (!p && len))
        return plan_damaged(pr->r, "bad packed row", 0);
    pr->out->pieces += n;
    ckpt_strbuf_add(&pr->data, p, len);
    return pr->data.oom ? ckpt_err(pr->r->err, -ENOMEM, "%s: out of memory",
                                   pr->r->path) : 0;
}

/* Everything but the piece rows, in one read transaction. */
static int read_packed_all(sqlite3 *db, packed_reader *pr)
{
    preader *r = pr->r;
    int rc = read_info(db, r);
    if (!rc)
        rc = read_meta(db, r);
    int has_declared = 0;
    if (!rc)
        rc = ckpt_db_each(db, "SELECT 1 FROM sqlite_master WHERE type = "
                          "'table' AND name IN ('declared', 'packed')",
                          r->path, table_row, &has_declared, r->err);
    /* Both tables came in before layouts were claimed. */
    pr->out->has_packed = has_declared == 2;
    if (!rc && pr->out->has_packed)
        rc = ckpt_db_each(db, "SELECT count(*) FROM declared", r->path,
                          count_row, &pr->out->declared, r->err);
    if (!rc && pr->out->has_packed)
        rc = ckpt_db_each(db, "SELECT pieces, data FROM packed ORDER BY seq",
                          r->path, packed_row, pr, r->err);
    if (!rc)
        rc = ckpt_db_exec(db, "COMMIT", r->path, r->err);
    return rc;
}

static int read_packed(const char *path, ckpt_plan_packed *out,
                       ckpt_error *err)
{
    preader r = { .path = path, .synced = &out->claim, .err = err };
    packed_reader pr = { .r = &r, .out = out };
    ckpt_manifest_init(&r.m);
    sqlite3 *db = NULL;
    int rc = open_plan(&db, path, err);
    if (!rc)
        rc = read_packed_all(db, &pr);
    sqlite3_close(db);
    if (!rc && ckpt_manifest_take(&out->meta, &r.m))
        rc = ckpt_err(err, -ENOMEM, "%s: out of memory", path);
    ckpt_manifest_free(&r.m);
    out->writer = r.writer;
    out->data = (uint8_t *)pr.data.p;
    out->len = pr.data.len;
    return rc;
}

int ckpt_planfile_read_packed_many(const char *dir, char *const *names,
                                   size_t n, int threads,
                                   ckpt_plan_packed *out, ckpt_error *err)
{
    if (threads <= 0)
        threads = ckpt_cpu_count();
    read_slot *slots = calloc(n ? n : 1, sizeof *slots);
    ckpt_pool *pool = NULL;
    if (!slots)
        return ckpt_err(err, -ENOMEM, "out of memory");
    int rc = ckpt_pool_create(&pool, threads > 1 ? threads - 1 : 1, err);
    ckpt_taskgroup g;
    ckpt_tg_init(&g);
    for (size_t k = 0; k < n && !rc; k++) {
        ckpt_manifest_init(&out[k].meta);
        slots[k].packed = &out[k];
        slots[k].g = &g;
        rc = ckpt_path_join(slots[k].path, sizeof slots[k].path, dir,
                            names[k], err);
    }
    if (!rc && n)
        ckpt_pool_run_tasks(pool, read_task, slots, n, sizeof *slots, &g);
    ckpt_tg_destroy(&g);
    for (size_t k = 0; k < n && !rc; k++)
        if (slots[k].rc) {
            if (err)
                *err = slots[k].err;
            rc = slots[k].rc;
        }
    if (pool)
        ckpt_pool_destroy(pool);
    free(slots);
    return rc;
}

void ckpt_plan_packed_free(ckpt_plan_packed *p)
{
    ckpt_manifest_free(&p->meta);
    free(p->data);
    free(p->writer);
    p->data = NULL;
    p->writer = NULL;
}

int ckpt_planfile_read(const char *path, ckpt_manifest *m, ckpt_error *err)
{
    ckpt_pieces tab;
    ckpt_manifest got;
    ckpt_pieces_init(&tab);
    ckpt_manifest_init(&got);
    int rc = ckpt_planfile_read_pieces(path, &tab, &got, err);
    for (size_t i = 0; !rc && i < tab.n; i++) {
        ckpt_piece_rec *p = ckpt_manifest_add_piece(&got);
        if (!p || ckpt_pieces_get(&tab, i, p))
            rc = ckpt_err(err, -ENOMEM, "%s: out of memory", path);
    }
    if (!rc && ckpt_manifest_take(m, &got))
        rc = ckpt_err(err, -ENOMEM, "%s: out of memory", path);
    ckpt_manifest_free(&got);
    ckpt_pieces_free(&tab);
    return rc;
}
