/*
 * wbase.c - the base of a delta save through a mount: the checkpoint
 * `user.ckpt.base` names, or the newest committed one of the root (see
 * wbase.h).
 */
#include "wbase.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckptfs.h"
#include "common/error.h"
#include "write/gc.h"

char *wbase_latest(const char *root, const char *self)
{
    DIR *d = opendir(root);
    if (!d)
        return NULL;
    char *best_path = NULL;
    ckpt_retain_item best = { 0 };
    char *best_name = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, self) == 0)
            continue;
        size_t n = strlen(root) + strlen(e->d_name) + 2;
        char *path = malloc(n), *name = strdup(e->d_name);
        ckpt_retain_item it = { .name = name };
        ckpt_error err = { 0 };
        if (path)
            snprintf(path, n, "%s/%s", root, e->d_name);
        if (!path || !name ||
            ckpt_dir_probe(path) != CKPT_DIR_COMMITTED ||
            ckpt_retain_probe(path, &it, &err) != 0 ||
            (best_path && !ckpt_retain_newer(&it, &best))) {
            free(path);
            free(name);
            continue;
        }
        free(best_path);
        free(best_name);
        best_path = path;
        best_name = name;
        best = it;
    }
    closedir(d);
    free(best_name);
    return best_path;
}

int wbase_named(const char *root, const char *self, const char *value,
                size_t len, char **out, ckpt_error *err)
{
    char name[256];
    *out = NULL;
    if (len >= sizeof name || memchr(value, '\0', len))
        return ckpt_err(err, -EINVAL, "user.ckpt.base: the value must be "
                        "the name of a checkpoint of the root (less than "
                        "%zu bytes of text)", sizeof name);
    memcpy(name, value, len);
    name[len] = '\0';
    if (len == 0)
        return 0;              /* no base: a whole save */
    if (strchr(name, '/') || strcmp(name, ".") == 0 ||
        strcmp(name, "..") == 0 || strcmp(name, self) == 0)
        return ckpt_err(err, -EINVAL, "user.ckpt.base '%s': a base is "
                        "another checkpoint of the same root, named by its "
                        "name there (e.g. step-000100)", name);
    size_t n = strlen(root) + len + 2;
    char *path = malloc(n);
    if (!path)
        return ckpt_err(err, -ENOMEM, "out of memory");
    snprintf(path, n, "%s/%s", root, name);
    if (ckpt_dir_probe(path) != CKPT_DIR_COMMITTED) {
        free(path);
        return ckpt_err(err, -ENOENT, "user.ckpt.base '%s': the root has no "
                        "committed checkpoint of that name", name);
    }
    *out = path;
    return 0;
}
