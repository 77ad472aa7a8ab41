/*
 * foreign.c - telling what a foreign checkpoint is, and opening it with
 * the format module that reads it (see foreign.h): the dispatcher on top
 * of dcp.c and safetensors.c, which describe their files with the
 * builder (builder.c).
 */
#include "foreign/foreign.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"
#include "foreign/dcp.h"
#include "foreign/safetensors.h"
#include "foreign/torchfile.h"

/* ---------------------------------------------------------------- probe */

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int is_file(const char *dir, const char *name, char *out, size_t cap)
{
    struct stat st;
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof path || stat(path, &st) != 0 ||
        !S_ISREG(st.st_mode))
        return 0;
    if (out)
        snprintf(out, cap, "%s", path);
    return 1;
}

static int safetensors_name(const char *name)
{
    return name[0] != '.' && ends_with(name, ".safetensors");
}

/* 1 when dir holds a regular file whose name `want` accepts. */
static int has_file(const char *dir, int (*want)(const char *))
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d)))
        found = want(e->d_name) && is_file(dir, e->d_name, NULL, 0);
    closedir(d);
    return found;
}

/* 1 when dir holds a directory that is not hidden. */
static int has_subdir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d))) {
        struct stat st;
        char path[4096];
        int n = snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        found = e->d_name[0] != '.' && n > 0 && (size_t)n < sizeof path &&
                stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    }
    closedir(d);
    return found;
}

/* DCP's HuggingFaceStorageWriter(p, enable_consolidation=True) writes the
 * ranks' files to p/sharded (with their model.safetensors.index.json) and,
 * when several ranks saved, the consolidated files to p itself.  A p that
 * holds no checkpoint of its own but such a sharded/ is that checkpoint:
 * *sub receives "p/sharded". */
static int hf_sharded(const char *path, char *sub, size_t cap)
{
    int n = snprintf(sub, cap, "%s/" CKPT_HF_SHARDED, path);
    return n > 0 && (size_t)n < cap &&
           is_file(sub, "model.safetensors.index.json", NULL, 0) &&
           !is_file(sub, ".metadata", NULL, 0);
}

/* The probe of a directory that is itself the checkpoint. */
static ckpt_foreign_kind probe_dir(const char *path, char *stamp, size_t cap)
{
    if (is_file(path, ".metadata", stamp, cap))
        return CKPT_FOREIGN_DCP;
    if (is_file(path, "model.safetensors.index.json", stamp, cap))
        return CKPT_FOREIGN_SAFETENSORS;
    if (has_file(path, safetensors_name)) {
        snprintf(stamp, cap, "%s", path);
        return CKPT_FOREIGN_SAFETENSORS;
    }
    if (is_file(path, CKPT_TORCH_INDEX_JSON, stamp, cap))
        return CKPT_FOREIGN_TORCH;
    if (is_file(path, "pytorch_model.bin", stamp, cap))
        return CKPT_FOREIGN_TORCH;
    /* Other archives make a checkpoint of a folder with no folders in it:
     * a root of checkpoints with a stray optimizer.pt stays a root. */
    if (has_file(path, ckpt_torchfile_name) && !has_subdir(path)) {
        snprintf(stamp, cap, "%s", path);
        return CKPT_FOREIGN_TORCH;
    }
    return CKPT_FOREIGN_NONE;
}

ckpt_foreign_kind ckpt_foreign_probe(const char *path, char *stamp,
                                     size_t cap)
{
    struct stat st;
    char tmp[4096];
    if (!stamp) {
        stamp = tmp;
        cap = sizeof tmp;
    }
    if (stat(path, &st) != 0)
        return CKPT_FOREIGN_NONE;
    if (S_ISREG(st.st_mode)) {
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        ckpt_foreign_kind k = safetensors_name(base) ? CKPT_FOREIGN_SAFETENSORS
                              : ckpt_torchfile_name(base) ? CKPT_FOREIGN_TORCH
                              : CKPT_FOREIGN_NONE;
        if (k != CKPT_FOREIGN_NONE)
            snprintf(stamp, cap, "%s", path);
        return k;
    }
    if (!S_ISDIR(st.st_mode))
        return CKPT_FOREIGN_NONE;
    ckpt_foreign_kind k = probe_dir(path, stamp, cap);
    char sub[4096];
    if (k == CKPT_FOREIGN_NONE && hf_sharded(path, sub, sizeof sub))
        k = probe_dir(sub, stamp, cap);
    return k;
}

int ckpt_foreign_open(const char *path, int follow, ckpt_foreign *f,
                      ckpt_error *err)
{
    memset(f, 0, sizeof *f);
    f->follow = follow;
    char stamp[4096];
    f->kind = ckpt_foreign_probe(path, stamp, sizeof stamp);
    if (f->kind == CKPT_FOREIGN_NONE)
        return ckpt_err(err, -ENOENT, "%s is neither a ckptfs, a PyTorch "
                        "distributed, a safetensors nor a torch.save "
                        "checkpoint", path);
    if (!(f->stamp = strdup(stamp)))
        return ckpt_err(err, -ENOMEM, "out of memory");
    /* A file named as the source is read wherever its path leads: its
     * directory is the one the links end in. */
    struct stat st;
    char *real = stat(path, &st) == 0 && S_ISREG(st.st_mode)
                     ? realpath(path, NULL) : NULL;
    char sub[4096];
    int hf = !real && probe_dir(path, stamp, sizeof stamp) ==
                          CKPT_FOREIGN_NONE &&
             hf_sharded(path, sub, sizeof sub);
    int rc = f->kind == CKPT_FOREIGN_DCP
                 ? ckpt_dcp_open(path, f, err)
             : f->kind == CKPT_FOREIGN_TORCH
                 ? ckpt_torchfile_open(real ? real : path, f, err)
             : hf ? ckpt_safetensors_open_hf(path, f, err)
                  : ckpt_safetensors_open(real ? real : path, f, err);
    free(real);
    if (rc == 0)
        rc = ckpt_foreign_finish(f, err);
    if (rc)
        ckpt_foreign_free(f);
    return rc;
}
