/*
 * wbase.c - the newest committed checkpoint of a root, the base of a
 * delta save through a mount (see wbase.h).
 */
#include "wbase.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckptfs.h"
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
