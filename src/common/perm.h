/*
 * perm.h - the owner, group and permission bits that stand for several
 * files at once: what a file system serving bytes read from all of them
 * shows, so that the kernel, checking those bits, lets nobody read what
 * they could not read from every one of the files themselves.
 */
#ifndef CKPT_PERM_H
#define CKPT_PERM_H

#include <sys/stat.h>
#include "ckptfs.h"

/* Starts from one file: its owner, group and permission bits. */
void ckpt_perm_init(ckpt_perm *p, const struct stat *st);

/* Folds in another file.  The owner and group shown stay p's; each class
 * keeps only the bits that the file grants to every user who may be in
 * that class: the owner shown may be the file's owner or not (then it
 * gets the file's group or other bits, whichever it is), a member of the
 * group shown may own the file or be in its group or not, anyone else
 * too.  So for files of one owner and group the result is the AND of
 * their modes. */
void ckpt_perm_add(ckpt_perm *p, const struct stat *st);

/* Folds in a directory that must be searched to reach the files: each
 * class keeps its bits only where the directory grants search (execute)
 * permission to every user who may be in it, as ckpt_perm_add. */
void ckpt_perm_add_search(ckpt_perm *p, const struct stat *dir);

/* Folds in a file that cannot be looked at: it grants nothing. */
void ckpt_perm_add_none(ckpt_perm *p);

#endif
