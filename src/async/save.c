/*
 * save.c - ckpt_save_sync: a whole single-process checkpoint saved in one
 * call, synchronously (one writer, then the commit).  It checks the pieces and
 * the target before creating anything and, when a later step fails,
 * removes what it created, as an asynchronous save does (async.c provides
 * both).
 */
#include "ckptfs.h"

#include <errno.h>

#include "async/async.h"
#include "common/error.h"

#define SAVE_WRITER "rank0"

static int check_args(const char *dir, const ckpt_piece *pieces, size_t n,
                      const ckpt_save_opts *o, ckpt_error *err)
{
    if (!dir)
        return ckpt_err_null(err, "ckpt_save_sync", "dir");
    if (!*dir)
        return ckpt_err(err, -EINVAL, "save: no checkpoint directory");
    if (n > 0 && !pieces)
        return ckpt_err_null(err, "ckpt_save_sync", "pieces");
    if (o->nmeta && (!o->meta_keys || !o->meta_values))
        return ckpt_err(err, -EINVAL, "save: %zu metadata entries but no "
                        "keys or values (NULL)", o->nmeta);
    for (size_t i = 0; i < n; i++) {
        uint64_t nbytes = 0;
        int rc = ckpt_async_check_piece(&pieces[i], i, &nbytes, err);
        if (rc)
            return rc;
        if (nbytes && !pieces[i].data)
            return ckpt_err(err, -EINVAL, "tensor '%s': no data (NULL) for "
                            "%llu bytes", pieces[i].fqn,
                            (unsigned long long)nbytes);
    }
    return 0;
}

/* Writes the pieces and the metadata through writer `w`, then closes it
 * (the writer is freed either way). */
static int write_all(ckpt_writer *w, const ckpt_piece *pieces, size_t n,
                     const ckpt_save_opts *o, ckpt_error *err)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < o->nmeta; i++)
        rc = ckpt_writer_set_meta(w, o->meta_keys[i], o->meta_values[i], err);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = ckpt_writer_put(w, &pieces[i], err);
    if (rc) {
        ckpt_writer_abort(w);
        return rc;
    }
    return ckpt_writer_close(w, err);
}

int ckpt_save_sync(const char *dir, const ckpt_piece *pieces, size_t n,
                   const ckpt_save_opts *opts, ckpt_error *err)
{
    ckpt_save_opts taken;
    int rc = ckpt_save_opts_take(&taken, opts, err);
    if (rc)
        return rc;
    const ckpt_save_opts *o = &taken;
    int made_dir = 0;
    rc = check_args(dir, pieces, n, o, err);
    if (rc == 0)
        rc = ckpt_async_check_target(dir, &made_dir, err);
    if (rc)
        return rc;
    ckpt_writer *w;
    rc = ckpt_writer_open(&w, dir, SAVE_WRITER, &o->write, err);
    int owned = rc != -EEXIST;
    if (rc == 0)
        rc = write_all(w, pieces, n, o, err);
    if (rc == 0) {
        ckpt_commit_opts co;
        ckpt_commit_opts_init(&co);
        co.expect_writers = 1;
        co.sync = o->write.sync;
        rc = ckpt_commit(dir, &co, err);
    }
    if (rc)
        ckpt_async_cleanup(dir, SAVE_WRITER, owned, made_dir);
    return rc;
}
