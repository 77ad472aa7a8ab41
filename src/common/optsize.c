/*
 * optsize.c - options structs read by their size field (see optsize.h).
 */
#include "common/optsize.h"

#include <errno.h>
#include <string.h>

#include "common/error.h"

int ckpt_opts_take(void *dst, size_t known, const void *src, size_t oldest,
                   const char *name, ckpt_error *err)
{
    size_t got;
    memcpy(&got, src, sizeof got);
    if (got > known)
        return ckpt_err(err, -EINVAL, "%s of %zu bytes comes from a newer "
                        "ckptfs.h than this libckptfs %s (%zu bytes): run "
                        "the program with the libckptfs it was built "
                        "against", name, got, CKPT_VERSION_STRING, known);
    if (got < oldest)
        return ckpt_err(err, -EINVAL, "%s.size is %zu, not the size of any "
                        "layout of it (%zu bytes): initialise the struct "
                        "with its _init function before setting fields",
                        name, got, oldest);
    memcpy(dst, src, got);
    memcpy(dst, &known, sizeof known);
    return 0;
}
