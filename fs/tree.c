/*
 * tree.c - building and querying the immutable namespace of one checkpoint
 * (see tree.h): nodes in one array, names in one arena, children of each
 * directory in a sorted run of one index array, and an open-addressing
 * hash of (parent, name) for lookups.
 */
#include "tree.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "names.h"
#include "views.h"

struct fs_tree {
    tree_node *nodes;
    uint32_t n, cap;
    char *names;              /* NUL-terminated names, back to back */
    size_t names_len, names_cap;
    uint32_t *children;       /* each directory's children, sorted */
    uint32_t *hash;           /* node number + 1; 0 is an empty slot */
    size_t hash_cap;          /* a power of two, at least twice n */
    views_blob *blobs;        /* per tensor, or NULL (views_bytesio) */
    size_t nblobs;
    views_st *st;             /* .safetensors/, or NULL */
};

/* ------------------------------------------------------------ queries */

uint32_t tree_size(const fs_tree *t)
{
    return t->n;
}

const tree_node *tree_node_at(const fs_tree *t, uint32_t i)
{
    return i < t->n ? &t->nodes[i] : NULL;
}

const char *tree_name(const fs_tree *t, const tree_node *n)
{
    return t->names + n->name;
}

uint32_t tree_child(const fs_tree *t, const tree_node *n, uint32_t k)
{
    return t->children[n->child0 + k];
}

static uint64_t hash_of(uint32_t parent, const char *name, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull ^
                 ((uint64_t)parent * 0x9e3779b97f4a7c15ull);
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)name[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

/* Node number of (parent, name[0..len)), or -ENOENT. */
static long find(const fs_tree *t, uint32_t parent, const char *name,
                 size_t len)
{
    size_t mask = t->hash_cap - 1;
    for (size_t i = hash_of(parent, name, len) & mask;; i = (i + 1) & mask) {
        uint32_t v = t->hash[i];
        if (v == 0)
            return -ENOENT;
        const tree_node *nd = &t->nodes[v - 1];
        const char *s = t->names + nd->name;
        if (v - 1 != TREE_ROOT && nd->parent == parent &&
            strncmp(s, name, len) == 0 && s[len] == '\0')
            return (long)(v - 1);
    }
}

const views_blob *tree_blob(const fs_tree *t, uint32_t tensor)
{
    return t->blobs && tensor < t->nblobs && t->blobs[tensor].npy
               ? &t->blobs[tensor] : NULL;
}

const views_st *tree_st(const fs_tree *t)
{
    return t->st;
}

long tree_lookup(const fs_tree *t, uint32_t dir, const char *name)
{
    const tree_node *d = tree_node_at(t, dir);
    if (!d)
        return -ENOENT;
    if (d->kind != TREE_DIR)
        return -ENOTDIR;
    return find(t, dir, name, strlen(name));
}

/* ------------------------------------------------------------ building */

typedef struct builder {
    fs_tree *t;
    const ckpt_reader *r;
    tree_warn_fn warn;
    void *arg;
    uint32_t npy_root;
    int dcp;                  /* a PyTorch DCP checkpoint: byte objects get
                                 their archive in .pt/ */
} builder;

static void warn(builder *b, const char *fmt, const char *fqn)
{
    char msg[512];
    snprintf(msg, sizeof msg, fmt, fqn);
    if (b->warn)
        b->warn(b->arg, msg);
}

static void hash_put(fs_tree *t, uint32_t node)
{
    const tree_node *nd = &t->nodes[node];
    const char *name = t->names + nd->name;
    size_t mask = t->hash_cap - 1;
    size_t i = hash_of(nd->parent, name, strlen(name)) & mask;
    while (t->hash[i])
        i = (i + 1) & mask;
    t->hash[i] = node + 1;
}

/* Doubles the hash table and re-inserts every node. */
static int hash_grow(fs_tree *t)
{
    size_t cap = t->hash_cap ? t->hash_cap * 2 : 1024;
    uint32_t *h = calloc(cap, sizeof *h);
    if (!h)
        return -ENOMEM;
    free(t->hash);
    t->hash = h;
    t->hash_cap = cap;
    for (uint32_t i = 1; i < t->n; i++)
        hash_put(t, i);
    return 0;
}

/* Copies name[0..len) and suffix into the arena; returns its offset. */
static int64_t add_name(fs_tree *t, const char *name, size_t len,
                        const char *suffix)
{
    size_t slen = strlen(suffix), need = t->names_len + len + slen + 1;
    if (need > UINT32_MAX)
        return -EOVERFLOW;
    if (need > t->names_cap) {
        size_t cap = t->names_cap ? t->names_cap * 2 : 4096;
        while (cap < need)
            cap *= 2;
        char *p = realloc(t->names, cap);
        if (!p)
            return -ENOMEM;
        t->names = p;
        t->names_cap = cap;
    }
    int64_t off = (int64_t)t->names_len;
    memcpy(t->names + off, name, len);
    memcpy(t->names + off + len, suffix, slen + 1);
    t->names_len = need;
    return off;
}

/* Appends a node named name[0..len) + suffix under parent; returns its
 * number. */
static int64_t add_node(fs_tree *t, uint32_t parent, const char *name,
                        size_t len, const char *suffix, tree_kind kind)
{
    if (t->n >= UINT32_MAX - 1)
        return -EOVERFLOW;
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 256;
        if (cap < t->cap)
            cap = UINT32_MAX;
        tree_node *v = realloc(t->nodes, (size_t)cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        t->nodes = v;
        t->cap = cap;
    }
    if (((size_t)t->n + 1) * 2 > t->hash_cap && hash_grow(t))
        return -ENOMEM;
    int64_t off = add_name(t, name, len, suffix);
    if (off < 0)
        return off;
    uint32_t i = t->n++;
    t->nodes[i] = (tree_node){ .parent = parent, .name = (uint32_t)off,
                               .kind = (uint8_t)kind };
    if (i != TREE_ROOT)
        hash_put(t, i);
    return i;
}

/* The directory `name` under parent, made if missing; -EEXIST when a file
 * has that name. */
static int64_t get_dir(fs_tree *t, uint32_t parent, const char *name,
                       size_t len)
{
    long i = find(t, parent, name, len);
    if (i >= 0)
        return t->nodes[i].kind == TREE_DIR ? i : -EEXIST;
    return add_node(t, parent, name, len, "", TREE_DIR);
}

/* The fixed part: root, .npy/, .ckptfs/ and its files. */
static int add_fixed(builder *b)
{
    fs_tree *t = b->t;
    int64_t rc = add_node(t, TREE_ROOT, "", 0, "", TREE_DIR);
    int64_t npy = rc < 0 ? rc : add_node(t, TREE_ROOT, ".npy", 4, "",
                                         TREE_DIR);
    int64_t dot = npy < 0 ? npy : add_node(t, TREE_ROOT, ".ckptfs", 7, "",
                                           TREE_DIR);
    if (dot < 0)
        return (int)dot;
    b->npy_root = (uint32_t)npy;
    rc = add_node(t, (uint32_t)dot, "metadata.json", 13, "", TREE_METADATA);
    if (rc >= 0)
        rc = add_node(t, (uint32_t)dot, "stats", 5, "", TREE_STATS);
    if (rc >= 0)
        rc = add_node(t, (uint32_t)dot, "status", 6, "", TREE_STATUS);
    return rc < 0 ? (int)rc : 0;
}

/* Compares FQN s with the string "<fqn>." (fqn of length len). */
static int cmp_module(const char *s, const char *fqn, size_t len)
{
    int c = strncmp(s, fqn, len);
    if (c)
        return c;
    return (int)(unsigned char)s[len] - '.';
}

/* Whether some tensor's FQN starts with "<fqn of t>.", that is, whether
 * tensor t is also a module.  Tensors are sorted by FQN, so those with
 * that prefix follow t; binary search for the first one >= "<fqn>.". */
static int is_module(const ckpt_reader *r, size_t t, const char *fqn)
{
    size_t len = strlen(fqn), lo = t + 1, hi = ckpt_reader_count(r);
    ckpt_tensor_info ti;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ckpt_reader_info(r, mid, &ti) != 0)
            return 0;
        if (cmp_module(ti.fqn, fqn, len) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < ckpt_reader_count(r) && ckpt_reader_info(r, lo, &ti) == 0 &&
           cmp_module(ti.fqn, fqn, len) == 0;
}

/* Whether every component of fqn, escaped, fits in a path component (the
 * last one with the longest suffix it may get, ".tensor"). */
static int names_fit(const char *fqn)
{
    names_iter it;
    const char *comp;
    size_t len;
    names_iter_init(&it, fqn);
    while (names_iter_next(&it, &comp, &len)) {
        size_t need = names_escape(comp, len, NULL, 0);
        if (!it.next)
            need += strlen(".tensor");
        if (need > TREE_NAME_MAX)
            return 0;
    }
    return 1;
}

/* Adds the leaf files of tensor t (its image and its .npy view) under dir
 * and npy_dir; esc is the escaped last component. */
static int add_leaves(builder *b, size_t t, const ckpt_tensor_info *ti,
                      uint32_t dir, uint32_t npy_dir, const char *esc)
{
    fs_tree *tr = b->t;
    char name[TREE_NAME_MAX + 1];
    const char *suffix = is_module(b->r, t, ti->fqn) ? ".tensor" : "";
    size_t len = (size_t)snprintf(name, sizeof name, "%s%s", esc, suffix);
    if (find(tr, dir, name, len) >= 0) {
        warn(b, "tensor '%s' is left out: its path is taken", ti->fqn);
        return 0;
    }
    int64_t f = add_node(tr, dir, name, len, "", TREE_TENSOR);
    if (f < 0)
        return (int)f;
    tr->nodes[f].tensor = (uint32_t)t;
    tr->nodes[f].size = ti->nbytes;
    const views_blob *blob = tree_blob(tr, (uint32_t)t);
    if (blob) {
        tr->nodes[f].size = blob->len;
        tr->nodes[f].blob = 1;
        int64_t v = add_node(tr, npy_dir, esc, strlen(esc), ".npy",
                             TREE_NPY);
        if (v < 0)
            return (int)v;
        tr->nodes[v].tensor = (uint32_t)t;
        tr->nodes[v].size = blob->header_len + blob->len;
        tr->nodes[v].npy_header = (uint16_t)blob->header_len;
        tr->nodes[v].blob = 1;
        return 0;
    }
    views_npy lay;
    if (views_npy_layout(ti, &lay) != 0) {
        warn(b, "tensor '%s' has no .npy view: it would be too large",
             ti->fqn);
        return 0;
    }
    int64_t v = add_node(tr, npy_dir, esc, strlen(esc), ".npy", TREE_NPY);
    if (v < 0)
        return (int)v;
    tr->nodes[v].tensor = (uint32_t)t;
    tr->nodes[v].size = lay.size;
    tr->nodes[v].npy_header = (uint16_t)lay.header_len;
    return 0;
}

/* Adds tensor t: a directory per module component (in both the tensor
 * tree and the .npy mirror), then its two files. */
static int add_tensor(builder *b, size_t t)
{
    ckpt_tensor_info ti;
    int rc = ckpt_reader_info(b->r, t, &ti);
    if (rc)
        return rc;
    if (t >= UINT32_MAX)
        return -EOVERFLOW;
    if (!names_fit(ti.fqn)) {
        warn(b, "tensor '%s' is left out: a component of its path would be "
             "longer than 255 bytes", ti.fqn);
        return 0;
    }
    char esc[TREE_NAME_MAX + 1];
    names_iter it;
    const char *comp, *next;
    size_t len, next_len;
    uint32_t dir = TREE_ROOT, npy_dir = b->npy_root;
    names_iter_init(&it, ti.fqn);
    names_iter_next(&it, &comp, &len);
    for (;;) {
        names_escape(comp, len, esc, sizeof esc);
        if (!names_iter_next(&it, &next, &next_len))
            return add_leaves(b, t, &ti, dir, npy_dir, esc);
        int64_t d = get_dir(b->t, dir, esc, strlen(esc));
        int64_t nd = d < 0 ? d : get_dir(b->t, npy_dir, esc, strlen(esc));
        if (nd == -EEXIST) {
            warn(b, "tensor '%s' is left out: its path is taken", ti.fqn);
            return 0;
        }
        if (nd < 0)
            return (int)nd;
        dir = (uint32_t)d;
        npy_dir = (uint32_t)nd;
        comp = next;
        len = next_len;
    }
}

/* Adds .pt/<path>.pt, the torch.save archive of byte object t of a
 * PyTorch DCP checkpoint (its plain file may show a BytesIO's value). */
static int add_archive(builder *b, size_t t)
{
    ckpt_tensor_info ti;
    int rc = ckpt_reader_info(b->r, t, &ti);
    if (rc || ti.dtype != CKPT_BYTES || !names_fit(ti.fqn))
        return rc;
    char esc[TREE_NAME_MAX + 1];
    names_iter it;
    const char *comp;
    size_t len;
    int64_t dir = get_dir(b->t, TREE_ROOT, ".pt", 3);
    names_iter_init(&it, ti.fqn);
    while (dir >= 0 && names_iter_next(&it, &comp, &len)) {
        names_escape(comp, len, esc, sizeof esc);
        if (!it.next) {
            int64_t f = add_node(b->t, (uint32_t)dir, esc, strlen(esc),
                                 ".pt", TREE_TENSOR);
            if (f < 0)
                return (int)f;
            b->t->nodes[f].tensor = (uint32_t)t;
            b->t->nodes[f].size = ti.nbytes;
            return 0;
        }
        dir = get_dir(b->t, (uint32_t)dir, esc, strlen(esc));
    }
    return dir == -EEXIST ? 0 : (int)dir;
}

/* .safetensors/ and its files (views.h). */
static int add_safetensors(fs_tree *t)
{
    size_t n = views_st_count(t->st);
    if (n == 0)
        return 0;
    int64_t dir = add_node(t, TREE_ROOT, ".safetensors", 12, "", TREE_DIR);
    for (size_t i = 0; i < n && dir >= 0; i++) {
        const char *name = views_st_name(t->st, i);
        int64_t f = add_node(t, (uint32_t)dir, name, strlen(name), "",
                             TREE_ST);
        if (f < 0)
            return (int)f;
        t->nodes[f].tensor = (uint32_t)i;
        t->nodes[f].size = views_st_size(t->st, i);
    }
    size_t len;
    if (dir >= 0 && views_st_index(t->st, &len)) {
        int64_t f = add_node(t, (uint32_t)dir, "model.safetensors.index.json",
                             28, "", TREE_ST_INDEX);
        if (f < 0)
            return (int)f;
        t->nodes[f].size = len;
    }
    return dir < 0 ? (int)dir : 0;
}

static int by_name(const void *a, const void *b, void *arg)
{
    const fs_tree *t = arg;
    return strcmp(t->names + t->nodes[*(const uint32_t *)a].name,
                  t->names + t->nodes[*(const uint32_t *)b].name);
}

/* Fills each directory's sorted run of children and its counts. */
static int link_children(fs_tree *t)
{
    t->children = malloc(((size_t)t->n + 1) * sizeof *t->children);
    if (!t->children)
        return -ENOMEM;
    for (uint32_t i = 1; i < t->n; i++) {
        tree_node *p = &t->nodes[t->nodes[i].parent];
        p->nchild++;
        p->nsubdirs += t->nodes[i].kind == TREE_DIR;
    }
    uint32_t next = 0;
    for (uint32_t i = 0; i < t->n; i++) {
        t->nodes[i].child0 = next;
        next += t->nodes[i].nchild;
        t->nodes[i].nchild = 0;
    }
    for (uint32_t i = 1; i < t->n; i++) {
        tree_node *p = &t->nodes[t->nodes[i].parent];
        t->children[p->child0 + p->nchild++] = i;
    }
    for (uint32_t i = 0; i < t->n; i++)
        if (t->nodes[i].nchild > 1)
            qsort_r(t->children + t->nodes[i].child0, t->nodes[i].nchild,
                    sizeof *t->children, by_name, t);
    return 0;
}

int tree_build(fs_tree **out, const ckpt_reader *r, views_blob *blobs,
               views_st *st, tree_warn_fn warn_fn, void *arg)
{
    *out = NULL;
    fs_tree *t = calloc(1, sizeof *t);
    if (!t) {
        views_blobs_free(blobs, ckpt_reader_count(r));
        views_st_free(st);
        return -ENOMEM;
    }
    t->st = st;
    t->blobs = blobs;
    t->nblobs = ckpt_reader_count(r);
    const char *fmt = ckpt_reader_meta_get(r, "source_format");
    builder b = { .t = t, .r = r, .warn = warn_fn, .arg = arg,
                  .dcp = fmt && strcmp(fmt, "pytorch-dcp") == 0 };
    int rc = hash_grow(t);
    if (rc == 0)
        rc = add_fixed(&b);
    for (size_t i = 0; rc == 0 && i < ckpt_reader_count(r); i++)
        rc = add_tensor(&b, i);
    for (size_t i = 0; b.dcp && rc == 0 && i < ckpt_reader_count(r); i++)
        rc = add_archive(&b, i);
    if (rc == 0)
        rc = add_safetensors(t);
    if (rc == 0)
        rc = link_children(t);
    if (rc) {
        tree_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void tree_free(fs_tree *t)
{
    if (!t)
        return;
    free(t->nodes);
    free(t->names);
    free(t->children);
    free(t->hash);
    views_blobs_free(t->blobs, t->nblobs);
    views_st_free(t->st);
    free(t);
}
