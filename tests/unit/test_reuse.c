/*
 * test_reuse.c - commits that reuse the previous save's layout (issue
 * #26, src/write/reuse.h): 64 writers save three tensors (dim-0 rows, a
 * 2-D grid of blocks, one element each), so that every tensor is packed
 * and the first commit records each plan's layout; the next save of the
 * same layout is committed from it (meta 'layout.reused'), and every
 * byte read back is the one the writers wrote.  A changed layout on some
 * ranks, a damaged or missing layout record, a damaged packed record:
 * the commit plans afresh and the checkpoint is still right, or refused
 * as the planner refuses it.
 */
#include <check.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckptfs.h"
#include "unit_util.h"
#include "planedit.h"

#define W 64
#define NT 3

static const char *const FQN[NT] = { "model.a.weight", "model.b.weight",
                                     "model.c.bias" };
static const int NDIM[NT] = { 2, 2, 1 };
static const int64_t SHAPE[NT][2] = { { W, 16 }, { 16, 32 }, { W, 0 } };

/* A save's layout: rank r's box of tensor t, with ranks `swap_a` and
 * `swap_b` exchanged in tensor 0 (-1: none), rank `grow` (-1: none)
 * given two rows of tensor 0, and rank `split` (-1: none) writing its row
 * of tensor 0 as two pieces of 8 columns. */
typedef struct layout {
    int swap_a, swap_b, grow, split;
} layout;

static const layout SAME = { -1, -1, -1, -1 };

/* Tensors saved after the NT above (set by a test before its saves):
 * "model.e<i>.weight", each shaped and cut as tensor 1. */
static int extra;

static int kind(int t)
{
    return t < NT ? t : 1;
}

/* Tensor t's name (in buf when an extra one). */
static const char *tensor_name(int t, char *buf, size_t cap)
{
    if (t < NT)
        return FQN[t];
    snprintf(buf, cap, "model.e%d.weight", t - NT);
    return buf;
}

static void box(const layout *l, int r, int t, int64_t *off, int64_t *size)
{
    if (t == 0) {
        int row = r == l->swap_a ? l->swap_b : r == l->swap_b ? l->swap_a : r;
        off[0] = row, off[1] = 0;
        size[0] = r == l->grow ? 2 : 1, size[1] = 16;
    } else if (t == 1) {               /* an 8 x 8 grid of 2 x 4 blocks */
        off[0] = 2 * (r / 8), off[1] = 4 * (r % 8);
        size[0] = 2, size[1] = 4;
    } else {
        off[0] = r, size[0] = 1;
    }
}

/* Element i (row-major in the tensor) of tensor t at step s. */
static float value(int s, int t, int64_t i)
{
    return (float)(s * 100000 + t * 10000 + i);
}

static void fill(int s, int t, const int64_t *off, const int64_t *size,
                 float *out)
{
    int k = kind(t);
    int64_t cols = NDIM[k] == 2 ? SHAPE[k][1] : 1;
    int64_t rows = size[0], w = NDIM[k] == 2 ? size[1] : 1;
    for (int64_t y = 0; y < rows; y++)
        for (int64_t x = 0; x < w; x++) {
            int64_t row = off[0] + y, col = NDIM[k] == 2 ? off[1] + x : 0;
            /* rows past the shape (a grown box) hold anything */
            out[y * w + x] = value(s, t, row * cols + col);
        }
}

static void step_dir(char *dir, size_t cap, const char *root, int s)
{
    snprintf(dir, cap, "%s/step-%d", root, s);
}

/* The writers of step s (layout l) write into root/step-s; no commit. */
static void write_step(const char *root, int s, const layout *l)
{
    char dir[512];
    step_dir(dir, sizeof dir, root, s);
    ckpt_write_opts o;
    ckpt_write_opts_init(&o);
    o.threads = 1;
    ckpt_error err = { 0 };
    for (int r = 0; r < W; r++) {
        char name[32];
        snprintf(name, sizeof name, "rank%d", r);
        ckpt_writer *w;
        ck_assert_msg(ckpt_writer_open(&w, dir, name, &o, &err) == 0, "%s",
                      err.msg);
        for (int t = 0; t < NT + extra; t++) {
            int64_t off[2], size[2];
            float buf[64];
            char fqn[64];
            box(l, r, kind(t), off, size);
            int halves = t == 0 && r == l->split ? 2 : 1;
            if (halves == 2)
                size[1] /= 2;
            for (int h = 0; h < halves; h++) {
                if (halves == 2)
                    off[1] = h * size[1];
                fill(s, t, off, size, buf);
                ckpt_piece p = { tensor_name(t, fqn, sizeof fqn),
                                 CKPT_F32, NDIM[kind(t)], SHAPE[kind(t)],
                                 off, size, buf };
                ck_assert_msg(ckpt_writer_put(w, &p, &err) == 0, "%s",
                              err.msg);
            }
        }
        ck_assert_msg(ckpt_writer_close(w, &err) == 0, "%s", err.msg);
    }
}

static int commit_step(const char *root, int s, ckpt_error *err)
{
    char dir[512];
    step_dir(dir, sizeof dir, root, s);
    return ckpt_commit(dir, NULL, err);
}

/* Writes and commits step s, which must succeed. */
static void save(const char *root, int s, const layout *l)
{
    ckpt_error err = { 0 };
    write_step(root, s, l);
    ck_assert_msg(commit_step(root, s, &err) == 0, "%s", err.msg);
}

/* Step s's metadata value of key (malloc'd), or NULL. */
static char *meta_of(const char *root, int s, const char *key)
{
    char dir[512];
    step_dir(dir, sizeof dir, root, s);
    ckpt_reader *r;
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_reader_open(&r, dir, NULL, &err) == 0, "%s", err.msg);
    const char *v = ckpt_reader_meta_get(r, key);
    char *out = v ? strdup(v) : NULL;
    ckpt_reader_close(r);
    return out;
}

/* Every tensor of step s read back whole is what its writers wrote. */
static void check_data(const char *root, int s)
{
    char dir[512];
    step_dir(dir, sizeof dir, root, s);
    ckpt_reader *r;
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_reader_open(&r, dir, NULL, &err) == 0, "%s", err.msg);
    for (int t = 0; t < NT + extra; t++) {
        char name[64];
        const char *fqn = tensor_name(t, name, sizeof name);
        int k = kind(t);
        int64_t n = SHAPE[k][0] * (NDIM[k] == 2 ? SHAPE[k][1] : 1);
        float *got = xmalloc((size_t)n * 4);
        long idx = ckpt_reader_find(r, fqn);
        ck_assert_int_ge(idx, 0);
        ck_assert_int_eq(ckpt_read(r, (size_t)idx, got, 0, (uint64_t)n * 4,
                                   &err), n * 4);
        for (int64_t i = 0; i < n; i++)
            ck_assert_msg(got[i] == value(s, t, i), "step %d %s [%lld]: %g, "
                          "want %g", s, fqn, (long long)i, got[i],
                          value(s, t, i));
        free(got);
    }
    ck_assert_msg(ckpt_verify(r, NULL, NULL, NULL, &err) == 0, "%s", err.msg);
    ckpt_reader_close(r);
}

/* Runs sql on root/step-s/index.db; returns the rows it changed (plans
 * are edited with planedit.h). */
static int edit_index(const char *root, int s, const char *sql)
{
    char path[600];
    snprintf(path, sizeof path, "%s/step-%d/index.db", root, s);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    ck_assert_msg(rc == SQLITE_OK, "%s: %s", sql, msg ? msg : "?");
    int n = sqlite3_changes(db);
    sqlite3_close(db);
    return n;
}

/* The path of plan `name` of step s (in a static buffer). */
static const char *plan_path(const char *root, int s, const char *name)
{
    static char path[600];
    snprintf(path, sizeof path, "%s/step-%d/.pending/%s", root, s, name);
    return path;
}

/* The rows of `sql` on root/step-s/index.db as text, blobs in hex
 * (malloc'd). */
static char *dump(const char *root, int s, const char *sql)
{
    char path[600];
    snprintf(path, sizeof path, "%s/step-%d/index.db", root, s);
    sqlite3 *db;
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    size_t len = 0, cap = 1 << 16;
    char *out = xmalloc(cap);
    out[0] = '\0';
    while (sqlite3_step(st) == SQLITE_ROW) {
        for (int c = 0; c < sqlite3_column_count(st); c++) {
            const unsigned char *v = sqlite3_column_text(st, c);
            size_t n = v ? strlen((const char *)v) : 4;
            while (len + n + 3 > cap) {
                out = realloc(out, cap *= 2);
                ck_assert_ptr_nonnull(out);
            }
            len += (size_t)sprintf(out + len, "%s|", v ? (const char *)v
                                                       : "NULL");
        }
        out[len++] = '\n';
        out[len] = '\0';
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
}

/* The integer the first row of `sql` on step s's index starts with. */
static int count(const char *root, int s, const char *sql)
{
    char *rows = dump(root, s, sql);
    int n = atoi(rows);
    free(rows);
    return n;
}

static void assert_reused(const char *root, int s, const char *from)
{
    char *got = meta_of(root, s, "layout.reused");
    if (from)
        ck_assert_msg(got && strcmp(got, from) == 0, "step %d reused %s, "
                      "want %s", s, got ? got : "nothing", from);
    else
        ck_assert_msg(!got, "step %d reused %s, want a fresh plan", s, got);
    free(got);
}

/* Step s was refused: no index.db; step 1 still reads. */
static void assert_refused(const char *root, int s)
{
    char dir[4096], idx[4200];
    step_dir(dir, sizeof dir, root, s);
    snprintf(idx, sizeof idx, "%s/index.db", dir);
    ck_assert_int_ne(access(idx, F_OK), 0);
    check_data(root, 1);
}

/* ------------------------------------------------------------ tests */

START_TEST(test_second_save_reuses)
{
    char *root = make_tmpdir_tagged("reuse");
    save(root, 1, &SAME);
    assert_reused(root, 1, NULL);
    ck_assert_int_eq(count(root, 1, "SELECT count(*) FROM layouts"), W);
    ck_assert_int_eq(count(root, 1, "SELECT count(*) FROM packs"), NT);
    save(root, 2, &SAME);
    assert_reused(root, 2, "step-1");
    check_data(root, 2);
    /* the writers' metadata as a fresh commit has it */
    char *h1 = meta_of(root, 1, "data_hash"), *h2 = meta_of(root, 2,
                                                            "data_hash");
    ck_assert_msg(h1 && h2 && strcmp(h1, h2) == 0, "data_hash %s, %s",
                  h1 ? h1 : "none", h2 ? h2 : "none");
    free(h1);
    free(h2);
    /* and the next one from that one, which recorded the layouts again */
    ck_assert_int_eq(count(root, 2, "SELECT count(*) FROM layouts"), W);
    save(root, 3, &SAME);
    assert_reused(root, 3, "step-2");
    check_data(root, 3);
    check_data(root, 1);
    remove_tmpdir(root);
}
END_TEST

/* Ranks 0 and 1 exchange their rows of tensor 0: a valid save whose
 * layout differs on two ranks. */
START_TEST(test_changed_layout_plans_afresh)
{
    char *root = make_tmpdir_tagged("reuse");
    save(root, 1, &SAME);
    layout swapped = { 0, 1, -1, -1 };
    save(root, 2, &swapped);
    assert_reused(root, 2, NULL);
    check_data(root, 2);
    /* the next save of the new layout reuses it */
    save(root, 3, &swapped);
    assert_reused(root, 3, "step-2");
    check_data(root, 3);
    remove_tmpdir(root);
}
END_TEST

/* Rank 9 alone writes its row of tensor 0 as two pieces: a valid save
 * whose layout differs on one rank only. */
START_TEST(test_changed_layout_on_one_rank_plans_afresh)
{
    char *root = make_tmpdir_tagged("reuse");
    save(root, 1, &SAME);
    layout split = { -1, -1, -1, 9 };
    save(root, 2, &split);
    assert_reused(root, 2, NULL);
    check_data(root, 2);
    /* and back: step 3 has step 1's layout, not step 2's */
    save(root, 3, &SAME);
    assert_reused(root, 3, NULL);
    check_data(root, 3);
    remove_tmpdir(root);
}
END_TEST

/* Rank 5 writes two rows of tensor 0, overlapping rank 6's: the planner's
 * checks run and refuse it; nothing is committed. */
START_TEST(test_changed_layout_on_one_rank_is_checked)
{
    char *root = make_tmpdir_tagged("reuse");
    save(root, 1, &SAME);
    layout grown = { -1, -1, 5, -1 };
    write_step(root, 2, &grown);
    ckpt_error err = { 0 };
    ck_assert_int_eq(commit_step(root, 2, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "model.a.weight") &&
                  strstr(err.msg, "overlap"), "%s", err.msg);
    assert_refused(root, 2);
    remove_tmpdir(root);
}
END_TEST

/* The previous checkpoint's layout records damaged or missing: the
 * commit plans afresh, and the checkpoint is right. */
START_TEST(test_damaged_layout_record)
{
    static const char *const damage[] = {
        /* two plans' maps exchanged, their digests kept: the map no
         * longer describes the plan's pieces */
        "CREATE TEMP TABLE m AS SELECT plan, map FROM layouts;"
        "UPDATE layouts SET map = (SELECT map FROM m WHERE m.plan = CASE "
        "layouts.plan WHEN 'rank0.plan' THEN 'rank1.plan' ELSE "
        "'rank0.plan' END) WHERE plan IN ('rank0.plan', 'rank1.plan')",
        /* a map cut short */
        "UPDATE layouts SET map = substr(map, 1, length(map) - 1) WHERE "
        "plan = 'rank7.plan'",
        /* a copy of a later plan's map */
        "UPDATE layouts SET map = X'00' || X'3C' || X'00' WHERE "
        "plan = 'rank3.plan'",
        /* one record missing */
        "DELETE FROM layouts WHERE plan = 'rank9.plan'",
        /* none */
        "DROP TABLE layouts",
    };
    for (size_t d = 0; d < sizeof damage / sizeof damage[0]; d++) {
        char *root = make_tmpdir_tagged("reuse");
        save(root, 1, &SAME);
        /* (a DROP changes no row) */
        ck_assert(edit_index(root, 1, damage[d]) > 0 ||
                  strncmp(damage[d], "DROP", 4) == 0);
        save(root, 2, &SAME);
        assert_reused(root, 2, NULL);
        check_data(root, 2);
        remove_tmpdir(root);
    }
}
END_TEST

/* A plan's packed records damaged: they are its pieces' frames (no
 * other copy of them is in the plan), so the commit refuses the plan by
 * name, publishes nothing, and the save before it still reads.  Cut
 * short, the plan is damaged; a record whose frames hold more raw bytes
 * than its box (its layout claim unchanged) is not reused, and refused
 * as the planner refuses it. */
START_TEST(test_damaged_packed_record)
{
    static const struct {
        int grow, rc;
        const char *name, *says;
    } damage[] = {
        { 0, -EIO, "rank3.plan", "damaged local plan" },
        { 1, -EINVAL, "rank3", "has 68 bytes, expected 64" },
    };
    for (size_t d = 0; d < sizeof damage / sizeof damage[0]; d++) {
        char *root = make_tmpdir_tagged("reuse");
        save(root, 1, &SAME);
        write_step(root, 2, &SAME);
        const char *plan = plan_path(root, 2, "rank3.plan");
        if (damage[d].grow)
            ck_assert_int_ge(planedit_grow_packed_raw(plan, 4), 1);
        else
            ck_assert_int_eq(planedit_cut_packed(plan, 5), 1);
        ckpt_error err = { 0 };
        ck_assert_int_eq(commit_step(root, 2, &err), damage[d].rc);
        ck_assert_msg(strstr(err.msg, damage[d].name) &&
                      strstr(err.msg, damage[d].says), "%s", err.msg);
        assert_refused(root, 2);
        remove_tmpdir(root);
    }
}
END_TEST

/* The index of a commit that reuses a layout holds what a fresh commit
 * of the same save holds: files, tensors with their totals, packed
 * records, codecs, layouts, metadata (but for the time, identity and
 * layout.reused).  Two saves of step 2, one beside step 1 (reused), one
 * alone (planned afresh); with more tensors than the reusing commit
 * builds records for at once. */
START_TEST(test_reused_index_is_fresh_index)
{
    static const char *const query[] = {
        "SELECT id, path, size, writer FROM files ORDER BY id",
        "SELECT * FROM tensors ORDER BY id",
        "SELECT tensor_id, grid, hex(chunks) FROM packs ORDER BY tensor_id",
        "SELECT * FROM codecs ORDER BY id",
        "SELECT plan, pieces, digest, file_id, hex(map) FROM layouts "
        "ORDER BY plan",
        "SELECT key, value FROM meta WHERE key NOT IN ('created', "
        "'identity', 'layout.reused') ORDER BY key",
        "SELECT count(*) FROM chunks",
    };
    extra = 80;
    char *root = make_tmpdir_tagged("reuse");
    char *alone = make_tmpdir_tagged("reuse");
    save(root, 1, &SAME);
    save(root, 2, &SAME);
    assert_reused(root, 2, "step-1");
    save(alone, 2, &SAME);
    assert_reused(alone, 2, NULL);
    for (size_t q = 0; q < sizeof query / sizeof query[0]; q++) {
        char *a = dump(root, 2, query[q]), *b = dump(alone, 2, query[q]);
        ck_assert_msg(a[0] != '\0', "%s: no rows", query[q]);
        ck_assert_msg(strcmp(a, b) == 0, "%s:\nreused:\n%.2000s\nfresh:\n"
                      "%.2000s", query[q], a, b);
        free(a);
        free(b);
    }
    check_data(root, 2);
    remove_tmpdir(root);
    remove_tmpdir(alone);
}
END_TEST

/* A plan whose claimed layout is not its pieces' (a damaged plan) is
 * planned afresh, and records no layout for the next save. */
START_TEST(test_plan_claim_checked)
{
    char *root = make_tmpdir_tagged("reuse");
    write_step(root, 1, &SAME);
    ck_assert_int_ge(planedit_set_layout(plan_path(root, 1, "rank2.plan"),
                                         3, 0x0123456789abcdefull), 1);
    ckpt_error err = { 0 };
    ck_assert_msg(commit_step(root, 1, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(count(root, 1, "SELECT count(*) FROM sqlite_master "
                           "WHERE name = 'layouts'"), 0);
    check_data(root, 1);
    remove_tmpdir(root);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("reuse");
    TCase *tc = tcase_create("reuse");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_second_save_reuses);
    tcase_add_test(tc, test_changed_layout_plans_afresh);
    tcase_add_test(tc, test_changed_layout_on_one_rank_plans_afresh);
    tcase_add_test(tc, test_changed_layout_on_one_rank_is_checked);
    tcase_add_test(tc, test_damaged_layout_record);
    tcase_add_test(tc, test_damaged_packed_record);
    tcase_add_test(tc, test_plan_claim_checked);
    tcase_add_test(tc, test_reused_index_is_fresh_index);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(suite());
}
