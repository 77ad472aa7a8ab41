/*
 * outdir.c - making, and on failure removing again, the output directory
 * of pack and import (see outdir.h).
 */
#include "outdir.h"
#include "cli.h"
#include "fileio.h"

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

/* Makes OUT and its missing ancestors (mkdir -p), remembering the topmost
 * one made so that a failure removes all of them. */
static int make_dirs(cli_outdir *o)
{
    char *path = strdup(o->path);
    if (!path)
        return cli_fail("out of memory");
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        path[--n] = '\0';   /* "a/b/" is "a/b" */
    int rc = CLI_OK;
    for (char *s = path + 1; rc == CLI_OK; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        if (mkdir(path, 0777) == 0) {
            if (!o->created && !(o->created = strdup(path)))
                rc = cli_fail("out of memory");
        } else if (errno != EEXIST || c == '\0') {
            rc = cli_fail("cannot create %s: %s", path, strerror(errno));
        }
        *s = c;
        if (c == '\0')
            break;
    }
    free(path);
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
        return CLI_OK;
    }
    if (errno != ENOENT)
        return cli_fail("%s: %s", o->path, strerror(errno));
    int rc = make_dirs(o);
    o->ready = rc == CLI_OK;
    return rc;
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
    free(o->created);
    o->created = NULL;
}
