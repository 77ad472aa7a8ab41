/*
 * dirs.c - telling what a directory is (committed checkpoint, interrupted
 * or in-progress save, or neither) without opening its index, what
 * format a checkpoint is in, and the library's version.
 */
#include "ckptfs.h"

#include <stdio.h>

#include "foreign/foreign.h"
#include <sys/stat.h>

static int has_entry(const char *dir, const char *name)
{
    char path[4096];
    struct stat st;
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof path)
        return 0;
    return lstat(path, &st) == 0;
}

ckpt_dir_state ckpt_dir_probe(const char *dir)
{
    struct stat st;
    if (!dir || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return CKPT_DIR_NONE;
    if (has_entry(dir, "index.db"))
        return CKPT_DIR_COMMITTED;
    if (has_entry(dir, ".pending") || has_entry(dir, "data") ||
        has_entry(dir, "index.db.tmp"))
        return CKPT_DIR_PENDING;
    return CKPT_DIR_NONE;
}

ckpt_format ckpt_format_probe(const char *path, char *stamp, size_t cap)
{
    if (!path)
        return CKPT_FORMAT_NONE;
    if (ckpt_dir_probe(path) == CKPT_DIR_COMMITTED) {
        if (stamp)
            snprintf(stamp, cap, "%s/index.db", path);
        return CKPT_FORMAT_CKPTFS;
    }
    switch (ckpt_foreign_probe(path, stamp, cap)) {
    case CKPT_FOREIGN_DCP:
        return CKPT_FORMAT_DCP;
    case CKPT_FOREIGN_SAFETENSORS:
        return CKPT_FORMAT_SAFETENSORS;
    case CKPT_FOREIGN_TORCH:
        return CKPT_FORMAT_TORCH;
    default:
        return CKPT_FORMAT_NONE;
    }
}

const char *ckpt_version(void)
{
    return CKPT_VERSION_STRING;
}
