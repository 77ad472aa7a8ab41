/*
 * handles.c - the session's context and its list of open handles, and
 * the replies to reads of bytes a handle owns and to xattrs (see
 * handles.h).
 */
#include "handles.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void fs_ctx_init(fs_ctx *c)
{
    memset(c, 0, sizeof *c);
    views_tables_init(&c->tables);
    pthread_mutex_init(&c->handles_mu, NULL);
}

void fs_ctx_destroy(fs_ctx *c)
{
    while (c->handles) {
        fs_handle *h = c->handles;
        c->handles = h->next;
        h->free(h);
    }
    pthread_mutex_destroy(&c->handles_mu);
}

void fs_handle_add(fs_ctx *c, fs_handle *h, fs_handle_kind kind,
                   void (*free_fn)(fs_handle *h))
{
    h->kind = kind;
    h->free = free_fn;
    h->prev = NULL;
    pthread_mutex_lock(&c->handles_mu);
    h->next = c->handles;
    if (h->next)
        h->next->prev = h;
    c->handles = h;
    pthread_mutex_unlock(&c->handles_mu);
}

void fs_handle_remove(fs_ctx *c, fs_handle *h)
{
    pthread_mutex_lock(&c->handles_mu);
    if (h->prev)
        h->prev->next = h->next;
    else
        c->handles = h->next;
    if (h->next)
        h->next->prev = h->prev;
    pthread_mutex_unlock(&c->handles_mu);
}

void fs_reply_owned(fuse_req_t req, const char *data, size_t n)
{
    char *copy = malloc(n ? n : 1);
    if (!copy) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    memcpy(copy, data, n);
    fuse_reply_buf(req, copy, n);
    free(copy);
}

void fs_reply_xattr(fuse_req_t req, const char *val, size_t len,
                    size_t size)
{
    if (size == 0)
        fuse_reply_xattr(req, len);
    else if (size < len)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, val, len);
}
