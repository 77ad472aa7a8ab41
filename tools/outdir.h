/*
 * outdir.h - the output directory of the commands that make a checkpoint
 * (pack, import): OUT must not exist (it is made with its missing parents)
 * or be empty; on failure everything the command made is removed again,
 * so no half-made checkpoint is left.
 */
#ifndef CKPT_OUTDIR_H
#define CKPT_OUTDIR_H

#include "format/lease.h"

typedef struct cli_outdir {
    const char *path;       /* OUT, as given */
    char *created;          /* the topmost directory made (OUT or an
                               ancestor), or NULL */
    int ready;              /* OUT exists, is empty and is ours to fill */
    ckpt_lease *lease;      /* held from prepare to free: no gc takes the
                               save between its writers and its commit */
} cli_outdir;

/* Makes OUT, or accepts it if it is an empty directory, and takes the
 * lease of the save to be made there; prints the problem and returns
 * CLI_FAIL otherwise. */
int cli_outdir_prepare(cli_outdir *o);
/* Removes what was made: the directories created, or else everything
 * inside OUT (it was empty when prepared).  Nothing if not prepared. */
void cli_outdir_remove(const cli_outdir *o);
/* Releases the lease and frees what prepare allocated. */
void cli_outdir_free(cli_outdir *o);

#endif
