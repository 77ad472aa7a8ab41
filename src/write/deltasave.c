/*
 * deltasave.c - identities and the bases of a delta save at commit (see
 * deltasave.h).
 */
#include "write/deltasave.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/error.h"
#include "common/fileio.h"

int ckpt_identity_new(char out[33], ckpt_error *err)
{
    unsigned char r[16];
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t k = getrandom(r + got, sizeof r - got, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return ckpt_err_sys(err, -errno, "getrandom");
        got += (size_t)k;
    }
    for (size_t i = 0; i < sizeof r; i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
    return 0;
}

static const char *meta_get(const ckpt_kv *meta, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(meta[i].key, key) == 0)
            return meta[i].value;
    return NULL;
}

/* Marks in `seen` (one flag per entry of list) the bases frames use; a
 * frame naming another is refused. */
static int mark_used(const ckpt_pieces *all, const ckpt_index_base *list,
                     size_t nl, char *seen, ckpt_error *err)
{
    for (size_t i = 0; i < all->n; i++) {
        ckpt_frame_rec one;
        const ckpt_frame_rec *f = ckpt_pieces_frames(all, i, &one);
        for (uint64_t k = 0; k < ckpt_pieces_nframes(all, i); k++) {
            if (!f[k].base)
                continue;
            size_t j = 0;
            while (j < nl && list[j].id != f[k].base)
                j++;
            if (j == nl)
                return ckpt_err(err, -EINVAL, "tensor '%s' (writer %s): "
                                "frame %llu names base %lld, which the "
                                "save's base does not give",
                                ckpt_pieces_str(all, all->v[i].fqn),
                                ckpt_pieces_str(all,
                                                ckpt_pieces_writer(all, i)),
                                (unsigned long long)k, (long long)f[k].base);
            seen[j] = 1;
        }
    }
    return 0;
}

int ckpt_delta_commit_bases(const char *dir, const ckpt_kv *meta,
                            size_t nmeta, const ckpt_pieces *all,
                            ckpt_bases **hold, ckpt_index_base **used,
                            size_t *n, ckpt_error *err)
{
    *hold = NULL;
    *used = NULL;
    *n = 0;
    const char *name = meta_get(meta, nmeta, CKPT_META_BASE);
    const char *ident = meta_get(meta, nmeta, CKPT_META_BASE_IDENTITY);
    if (!name)
        return mark_used(all, NULL, 0, NULL, err);
    char path[PATH_MAX], root[PATH_MAX];
    const char *slash = strrchr(dir, '/');
    snprintf(root, sizeof root, "%.*s", slash ? (int)(slash - dir) : 1,
             slash ? dir : ".");
    if (slash == dir)
        strcpy(root, "/");
    int rc = ckpt_path_join(path, sizeof path, root, name, err);
    if (!rc)
        rc = ckpt_bases_for_save(hold, dir, path, err);
    size_t nl = 0;
    const ckpt_index_base *list = rc ? NULL : ckpt_bases_list(*hold, &nl);
    const ckpt_index_base *top = NULL;
    for (size_t j = 0; !rc && j < nl; j++)
        if (list[j].id == ckpt_bases_top(*hold))
            top = &list[j];
    if (!rc && (!top || !ident || strcmp(top->identity, ident) != 0))
        rc = ckpt_err(err, -ESTALE, "%s: base checkpoint '%s' changed while "
                      "the save was written (identity %s, the writers saw "
                      "%s)", dir, name, top ? top->identity : "none",
                      ident ? ident : "none");
    char *seen = rc ? NULL : calloc(nl + 1, 1);
    if (!rc && !seen)
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    if (!rc)
        rc = mark_used(all, list, nl, seen, err);
    ckpt_index_base *v = rc ? NULL : calloc(nl + 1, sizeof *v);
    if (!rc && !v)
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t j = 0; !rc && j < nl; j++)
        if (seen[j])
            v[(*n)++] = list[j];
    free(seen);
    if (rc) {
        free(v);
        ckpt_bases_free(*hold);
        *hold = NULL;
        *n = 0;
        return rc;
    }
    *used = v;
    return 0;
}
