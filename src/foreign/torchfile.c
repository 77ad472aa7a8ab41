/*
 * torchfile.c - torch.save archives described for the reader (see
 * torchfile.h): which files a path stands for, each archive's pickled
 * tree walked into tensors (torchsave.c describes each one) and
 * metadata values.
 */
#include "foreign/torchfile.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/json.h"
#include "foreign/torchsave.h"

/* data.pkl of a state dict is about 200 bytes a tensor: this is millions
 * of tensors. */
#define MAX_PKL ((uint64_t)64 << 20)
#define MAX_INDEX ((uint64_t)64 << 20)
/* The most values one archive's tree may name: shared containers (the
 * memo lets a pickle name one list from many places) must not multiply
 * a small pickle into a huge listing. */
#define MAX_LEAVES(pkl_size) (16 * (uint64_t)(pkl_size) + 4096)
/* Metadata values longer than this are cut. */
#define MAX_VALUE_TEXT 256

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcmp(s + n - m, suffix) == 0;
}

int ckpt_torchfile_name(const char *name)
{
    return name[0] != '.' && (ends_with(name, ".pt") ||
                              ends_with(name, ".pth") ||
                              ends_with(name, ".bin"));
}

/* ---------------------------------------------------------------- walk */

typedef struct walker {
    ckpt_foreign *f;
    const char *file;       /* relative to f->dir */
    const ckpt_torch_archive *a;
    uint64_t leaves, max_leaves;
    ckpt_error *err;
} walker;

/* Adds the tensor `call` describes as `fqn`; a tensor that cannot be
 * described (a dtype ckptfs lacks, a storage too small) is listed and
 * refused alone. */
static int add_tensor(walker *w, const char *fqn, const pk_val *call)
{
    char what[1400];
    snprintf(what, sizeof what, "tensor '%.600s' of %.600s", fqn, w->file);
    ckpt_torch_tensor tt;
    ckpt_error terr = { 0 };
    int rc = ckpt_torch_describe(call, &w->a->z, w->a->prefix, what, &tt,
                                 &terr);
    int64_t zero[CKPT_MAX_DIMS] = { 0 };
    /* refused, it keeps what describe found of its dtype and sizes */
    long t = ckpt_foreign_add_tensor(w->f, fqn, tt.dtype, tt.ndim, tt.size,
                                     w->err);
    if (t < 0)
        return (int)t;
    if (rc == -ENOMEM)
        return ckpt_err(w->err, rc, "%s", terr.msg);
    if (rc)
        return ckpt_foreign_refuse(w->f, (size_t)t, terr.msg, w->err);
    return ckpt_foreign_add_chunk(w->f, (size_t)t, zero, tt.size, w->file,
                                  tt.data_offset,
                                  tt.contiguous ? NULL : tt.stride,
                                  tt.span_bytes, w->err);
}

/* A short text for a value that is not a tensor. */
static void value_text(const pk_val *v, char *buf, size_t cap)
{
    switch (v->type) {
    case PK_NONE: snprintf(buf, cap, "None"); break;
    case PK_BOOL: snprintf(buf, cap, "%s", v->i ? "True" : "False"); break;
    case PK_INT: snprintf(buf, cap, "%" PRId64, v->i); break;
    case PK_FLOAT: snprintf(buf, cap, "%.17g", v->f); break;
    case PK_STR: snprintf(buf, cap, "%.*s", MAX_VALUE_TEXT, v->s); break;
    case PK_BYTES: snprintf(buf, cap, "<%zu bytes>", v->len); break;
    case PK_GLOBAL:
    case PK_OBJ: snprintf(buf, cap, "<%s>", pk_global_name(pk_global_of(v)));
        break;
    default: snprintf(buf, cap, "<%s>", v->type == PK_PERSID ? "storage"
                                                             : "value");
    }
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = ' ';
}

static int walk(walker *w, const pk_val *v, char *path, size_t len,
                size_t cap);

/* Walks child `v` under the name path + "." + key. */
static int walk_child(walker *w, const pk_val *v, const char *key,
                      char *path, size_t len, size_t cap)
{
    int n = snprintf(path + len, cap - len, "%s%s", len ? "." : "", key);
    if (n < 0 || (size_t)n >= cap - len)
        return ckpt_err(w->err, -ENAMETOOLONG, "%s: a name longer than %zu "
                        "bytes in its data.pkl", w->file, cap);
    int rc = walk(w, v, path, len + (size_t)n, cap);
    path[len] = '\0';
    return rc;
}

static int walk(walker *w, const pk_val *v, char *path, size_t len,
                size_t cap)
{
    if (++w->leaves > w->max_leaves)
        return ckpt_err(w->err, -E2BIG, "%s: its data.pkl names more than "
                        "%llu values (containers shared many times over?)",
                        w->file, (unsigned long long)w->max_leaves);
    int g = pk_global_of(v);
    char key[64];
    switch (v->type) {
    case PK_DICT:
        for (size_t i = 0; i + 1 < v->n; i += 2) {
            const pk_val *k = v->items[i];
            const char *name = k->type == PK_STR ? k->s : key;
            if (k->type == PK_INT)
                snprintf(key, sizeof key, "%" PRId64, k->i);
            else if (k->type != PK_STR)
                return ckpt_err(w->err, -EINVAL, "%s: a dict key under '%s' "
                                "is neither a string nor an integer",
                                w->file, path);
            int rc = walk_child(w, v->items[i + 1], name, path, len, cap);
            if (rc)
                return rc;
        }
        return 0;
    case PK_LIST:
    case PK_TUPLE:
        for (size_t i = 0; i < v->n; i++) {
            snprintf(key, sizeof key, "%zu", i);
            int rc = walk_child(w, v->items[i], key, path, len, cap);
            if (rc)
                return rc;
        }
        return 0;
    default:
        break;
    }
    if (v->type == PK_OBJ && (g == PKG_REBUILD_V2 || g == PKG_REBUILD_V3 ||
                              g == PKG_REBUILD_PARAM))
        return add_tensor(w, path, v);
    char text[MAX_VALUE_TEXT + 64], mkey[4200];
    value_text(v, text, sizeof text);
    snprintf(mkey, sizeof mkey, "value:%s", path);
    return ckpt_foreign_set_meta(w->f, mkey, text, w->err);
}

/* ---------------------------------------------------------------- files */

static int fd_read(void *arg, void *buf, size_t n, uint64_t off,
                   ckpt_error *err)
{
    return ckpt_pread_full(*(int *)arg, buf, n, off, "torch.save archive",
                           err);
}

/* The stem of a file name: the tensor name of an archive holding one
 * tensor ("model.pt" -> "model"). */
static void stem(const char *file, char *out, size_t cap)
{
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    const char *dot = strrchr(base, '.');
    size_t n = dot && dot > base ? (size_t)(dot - base) : strlen(base);
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), base);
}

/* Adds the tensors of archive `rel` (relative to f->dir). */
static int add_file(ckpt_foreign *f, const char *rel, ckpt_error *err)
{
    int fd = ckpt_foreign_openat(f, rel, err);
    if (fd < 0)
        return fd;
    char what[4200];
    snprintf(what, sizeof what, "%s/%s", f->dir, rel);
    struct stat st;
    unsigned char magic[4] = { 0 };
    int rc = fstat(fd, &st) == 0 ? 0 : ckpt_err_sys(err, -errno, "%s", what);
    if (rc == 0 && st.st_size >= 4)
        rc = ckpt_pread_full(fd, magic, 4, 0, what, err);
    if (rc == 0 && memcmp(magic, "PK\3\4", 4) != 0)
        rc = ckpt_err(err, -ENOTSUP, "%s: not a zip archive: %s", what,
                      magic[0] == 0x80 ? "the legacy torch.save format of "
                      "PyTorch < 1.6 (a pickle, not a zip), which ckptfs "
                      "does not read; re-save it with PyTorch >= 1.6"
                      : "not a torch.save archive");
    ckpt_torch_archive a;
    if (rc == 0)
        rc = ckpt_torch_archive_open(fd_read, &fd, (uint64_t)st.st_size,
                                     what, MAX_PKL, &a, err);
    if (rc == 0) {
        walker w = { f, rel, &a, 0, MAX_LEAVES(a.pkl_len), err };
        char path[4096] = "";
        int g = pk_global_of(a.root);
        if (a.root->type == PK_OBJ && (g == PKG_REBUILD_V2 ||
                                       g == PKG_REBUILD_V3 ||
                                       g == PKG_REBUILD_PARAM))
            stem(rel, path, sizeof path);   /* torch.save(tensor) */
        rc = walk(&w, a.root, path, strlen(path), sizeof path);
        ckpt_torch_archive_close(&a);
    }
    close(fd);
    return rc;
}

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The distinct files of the index's weight_map, each added. */
static int open_indexed(ckpt_foreign *f, ckpt_error *err)
{
    char *text = NULL, **files = NULL;
    size_t len = 0;
    json_val j = { 0 };
    char what[4200];
    snprintf(what, sizeof what, "%s/%s", f->dir, CKPT_TORCH_INDEX_JSON);
    f->index_file = CKPT_TORCH_INDEX_JSON;
    int rc = ckpt_foreign_slurp(f, CKPT_TORCH_INDEX_JSON, MAX_INDEX, &text,
                                &len, err);
    if (rc == 0)
        rc = json_parse(text, len, what, &j, err);
    const json_val *wm = rc == 0 ? json_get(&j, "weight_map") : NULL;
    if (rc == 0 && (!wm || wm->type != JSON_OBJECT))
        rc = ckpt_err(err, -EINVAL, "%s: no weight_map object", what);
    if (rc == 0 && !(files = calloc(wm->n + 1, sizeof *files)))
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; rc == 0 && i < wm->n; i++) {
        if (wm->items[i].type != JSON_STRING)
            rc = ckpt_err(err, -EINVAL, "%s: weight_map value of '%s' is "
                          "not a file name", what, wm->keys[i]);
        else
            files[i] = wm->items[i].s;
    }
    if (rc == 0)
        qsort(files, wm->n, sizeof *files, cmp_cstr);
    for (size_t i = 0; rc == 0 && i < wm->n; i++) {
        if (i && strcmp(files[i - 1], files[i]) == 0)
            continue;
        rc = ckpt_foreign_check_relpath(files[i], what, err);
        if (rc == 0)
            rc = add_file(f, files[i], err);
    }
    free(files);
    json_free(&j);
    free(text);
    return rc;
}

/* pytorch_model.bin when the folder has one, else every archive in it. */
static int open_all(ckpt_foreign *f, ckpt_error *err)
{
    struct dirent **ents;
    int n = scandir(f->dir, &ents, NULL, alphasort), rc = 0, main = 0;
    if (n < 0)
        return ckpt_err_sys(err, -errno, "%s", f->dir);
    for (int i = 0; i < n; i++)
        main |= strcmp(ents[i]->d_name, "pytorch_model.bin") == 0;
    for (int i = 0; i < n; i++) {
        const char *name = ents[i]->d_name;
        if (rc == 0 && (main ? strcmp(name, "pytorch_model.bin") == 0
                             : ckpt_torchfile_name(name)))
            rc = add_file(f, name, err);
        free(ents[i]);
    }
    free(ents);
    return rc;
}

/* Refuses a name given to two tensors: a key with a dot ("a.b") beside
 * the same path through nested dicts ({"a": {"b": ...}}), or a tensor in
 * two shards. */
static int check_unique(const ckpt_foreign *f, ckpt_error *err)
{
    const char **v = calloc(f->d.ntensors + 1, sizeof *v);
    if (!v)
        return ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < f->d.ntensors; i++)
        v[i] = f->d.tensors[i].fqn;
    qsort(v, f->d.ntensors, sizeof *v, cmp_cstr);
    int rc = 0;
    for (size_t i = 1; rc == 0 && i < f->d.ntensors; i++)
        if (strcmp(v[i - 1], v[i]) == 0)
            rc = ckpt_err(err, -EINVAL, "%s: two tensors are named '%s' (a "
                          "key holding a dot beside nested keys, or a tensor "
                          "in two files)", f->dir, v[i]);
    free(v);
    return rc;
}

int ckpt_torchfile_open(const char *path, ckpt_foreign *f, ckpt_error *err)
{
    const char *file;
    int rc = ckpt_foreign_set_dir(f, path, &file, err);
    if (rc == 0 && file) {
        rc = add_file(f, file, err);
    } else if (rc == 0) {
        rc = ckpt_foreign_dir_has(path, CKPT_TORCH_INDEX_JSON)
                 ? open_indexed(f, err) : open_all(f, err);
    }
    if (rc == 0)
        rc = check_unique(f, err);
    if (rc == 0)
        rc = ckpt_foreign_set_meta(f, "source_format", "torch-save", err);
    return rc;
}
