/*
 * perm.c - combining the owners and modes of several files into one (see
 * perm.h).
 */
#include "common/perm.h"

/* The rwx triple of class `shift` (6 owner, 3 group, 0 other). */
static unsigned bits(mode_t m, int shift)
{
    return ((unsigned)m >> shift) & 7u;
}

void ckpt_perm_init(ckpt_perm *p, const struct stat *st)
{
    p->uid = (uint32_t)st->st_uid;
    p->gid = (uint32_t)st->st_gid;
    p->mode = (uint32_t)st->st_mode & 0777u;
}

void ckpt_perm_add(ckpt_perm *p, const struct stat *st)
{
    unsigned u = bits(st->st_mode, 6), g = bits(st->st_mode, 3);
    unsigned o = bits(st->st_mode, 0);
    int same_owner = (uint32_t)st->st_uid == p->uid;
    int same_group = (uint32_t)st->st_gid == p->gid;
    /* The owner shown: the file's owner, or else in its group or not. */
    unsigned ou = same_owner ? u : (g & o);
    /* A member of the group shown (not its owner): maybe the file's owner;
     * in the file's group for sure when the groups agree, else maybe. */
    unsigned og = (same_owner ? 7u : u) & (same_group ? g : (g & o));
    /* Anyone else: maybe the file's owner, maybe in its group. */
    unsigned oo = o & (same_owner ? 7u : u) & (same_group ? 7u : g);
    p->mode &= ou << 6 | og << 3 | oo;
}

void ckpt_perm_add_search(ckpt_perm *p, const struct stat *dir)
{
    struct stat st = *dir;
    mode_t x = dir->st_mode & 0111;
    st.st_mode = (dir->st_mode & ~(mode_t)0777) | x | x << 1 | x << 2;
    ckpt_perm_add(p, &st);
}

void ckpt_perm_add_none(ckpt_perm *p)
{
    p->mode = 0;
}
