/*
 * outdir.c - making, and on failure removing again, the output directory
 * of pack and import (see outdir.h).
 */
#include "outdir.h"
#include "cli.h"
#include "common/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int dir_is_empty(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -errno;
    struct dirent *e;
    int empty = 1;
    while (empty && (e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            empty = 0;
    closedir(d);
    return empty;
}

/* Makes OUT's missing ancestors (mkdir -p of its parent), remembering the
 * topmost directory made, or else OUT itself (which the library makes
 * with its .pending/ in one step), so that a failure removes all of them. */
static int make_parents(cli_outdir *o)
{
    char *path = strdup(o->path);
    if (!path)
        return cli_fail("out of memory");
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        path[--n] = '\0';   /* "a/b/" is "a/b" */
    char *last = strrchr(path, '/');
    int rc = CLI_OK;
    for (char *s = path + 1; rc == CLI_OK && last && s <= last; s++) {
        if (s != last && *s != '/')
            continue;
        char c = *s;
        *s = '\0';
        if (mkdir(path, 0777) == 0) {
            if (!o->created && !(o->created = strdup(path)))
                rc = cli_fail("out of memory");
        } else if (errno != EEXIST) {
            rc = cli_fail("cannot create %s: %s", path, strerror(errno));
        }
        *s = c;
    }
    free(path);
    if (rc == CLI_OK && !o->created && !(o->created = strdup(o->path)))
        rc = cli_fail("out of memory");
    return rc;
}

int cli_outdir_prepare(cli_outdir *o)
{
    struct stat st;
    if (stat(o->path, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return cli_fail("%s exists and is not a directory", o->path);
        int e = dir_is_empty(o->path);
        if (e < 0)
            return cli_fail("cannot read %s: %s", o->path, strerror(-e));
        if (!e)
            return cli_fail("%s exists and is not empty", o->path);
        o->ready = 1;
    } else if (errno != ENOENT) {
        return cli_fail("%s: %s", o->path, strerror(errno));
    } else if (make_parents(o) != CLI_OK) {
        return CLI_FAIL;
    }
    o->ready = 1;
    ckpt_error err = { 0 };
    if (ckpt_save_begin(&o->lease, o->path, &err))
        return cli_fail("%s", err.msg);
    return CLI_OK;
}

void cli_outdir_remove(const cli_outdir *o)
{
    ckpt_error err = { 0 };
    if (!o->created && !o->ready)
        return;
    if (o->created) {
        if (ckpt_remove_tree(o->created, &err))
            cli_warn("could not remove %s: %s", o->created, err.msg);
        return;
    }
    DIR *d = opendir(o->path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char *p = cli_path_join(o->path, e->d_name);
        if (p && ckpt_remove_tree(p, &err))
            cli_warn("could not remove %s: %s", p, err.msg);
        free(p);
    }
    closedir(d);
}

void cli_outdir_free(cli_outdir *o)
{
    ckpt_lease_drop(o->lease);
    o->lease = NULL;
    free(o->created);
    o->created = NULL;
}
