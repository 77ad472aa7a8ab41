/*
 * gcbases.c - retention and delta checkpoints (see gc.h, "delta bases"):
 * a checkpoint that a kept delta checkpoint refers to is kept with it.
 * Kept apart from gc.c's removal of saves and checkpoints.
 */
#include "write/gc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileio.h"
#include "format/index.h"

int ckpt_retain_bases(const char *dir, ckpt_retain_item *item,
                      ckpt_error *err)
{
    item->bases = NULL;
    item->nbases = 0;
    char path[4096];
    int rc = ckpt_path_join(path, sizeof path, dir, "index.db", err);
    ckpt_index *ix = NULL;
    if (!rc)
        rc = ckpt_index_open(&ix, path, err);
    ckpt_index_base *rows = NULL;
    size_t n = 0;
    if (!rc)
        rc = ckpt_index_bases(ix, &rows, &n, err);
    ckpt_index_close(ix);
    if (rc)
        return rc;
    if (n && !(item->bases = calloc(n, sizeof *item->bases)))
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < n; i++) {
        item->bases[i] = rows[i].path;   /* moved */
        rows[i].path = NULL;
        item->nbases++;
    }
    ckpt_index_bases_free(rows, n);
    if (rc)
        ckpt_retain_item_free_bases(item);
    return rc;
}

void ckpt_retain_item_free_bases(ckpt_retain_item *item)
{
    for (size_t i = 0; i < item->nbases; i++)
        free(item->bases[i]);
    free(item->bases);
    item->bases = NULL;
    item->nbases = 0;
}

static long find_name(const ckpt_retain_item *v, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].name, name) == 0)
            return (long)i;
    return -1;
}

void ckpt_retain_keep_bases(const ckpt_retain_item *v, size_t n,
                            ckpt_retain_why *why, size_t *needed_by)
{
    /* Until nothing changes: a base kept for one delta keeps its own. */
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t i = 0; i < n; i++) {
            if (why[i] == CKPT_RETAIN_DROP)
                continue;
            for (size_t k = 0; k < v[i].nbases; k++) {
                long j = find_name(v, n, v[i].bases[k]);
                if (j < 0 || why[j] != CKPT_RETAIN_DROP)
                    continue;
                why[j] = CKPT_RETAIN_BASE;
                if (needed_by)
                    needed_by[j] = i;
                changed = 1;
            }
        }
    }
}
