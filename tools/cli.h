/*
 * cli.h - declarations shared by the parts of the `ckpt` command-line tool:
 * the commands, exit codes, error and usage reporting, argument parsing
 * helpers and formatting helpers (cli_util.c).
 */
#ifndef CKPT_CLI_H
#define CKPT_CLI_H

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include "ckptfs.h"
#include "common/error.h"

/* Exit statuses of every command. */
#define CLI_OK 0
#define CLI_FAIL 1
#define CLI_USAGE 2
/* Returned by argument parsers when --help was printed: exit 0 now. */
#define CLI_HELP_SHOWN (-1)

/* Bytes moved per step by the streaming commands (pack, unpack, cat): the
 * bound on the tool's own buffers, whatever the tensor size. */
#define CLI_BLOCK ((size_t)8 << 20)

/* Room for a shape printed by cli_format_shape (32 dims of 20 digits). */
#define CLI_SHAPE_MAX (CKPT_MAX_DIMS * 21 + 4)

/* What the reading commands (ls, info, cat, verify) accept, for their
 * --help texts. */
#define CLI_HELP_SOURCES \
    "A checkpoint may be ckptfs's (a directory with index.db), a PyTorch\n" \
    "distributed checkpoint (a directory with .metadata), a .safetensors\n" \
    "file, or a directory of .safetensors files (with or without\n" \
    "model.safetensors.index.json); see docs/MOUNT.md, \"Foreign\n" \
    "checkpoints\".\n"

/* The help of one command: its name, its synopsis (one or more lines, each
 * starting with "ckpt NAME") and the rest of its --help text. */
typedef struct cli_help {
    const char *name;
    const char *synopsis;
    const char *text;
} cli_help;

/* The commands: argv[0] is the command's name; they return an exit status. */
int cmd_pack(int argc, char **argv);
int cmd_unpack(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_cat(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_gc(int argc, char **argv);
int cmd_commit(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_export(int argc, char **argv);

/* ---- reporting (all on stderr, prefixed "ckpt: ") */

/* Prints "ckpt: <message>" and returns CLI_FAIL. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "ckpt: <message>" (a warning; nothing is returned). */
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "ckpt: <message>", the synopsis and a hint to --help; returns
 * CLI_USAGE. */
int cli_usage(const cli_help *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prints the whole help of a command on stdout; returns CLI_OK. */
int cli_help_print(const cli_help *h);
/* Reports what getopt_long returned for a bad option ('?' or ':', with the
 * argv being parsed); returns CLI_USAGE. */
int cli_bad_option(const cli_help *h, int c, char **argv);
/* Checks the count of positional arguments left after options. */
int cli_want_args(const cli_help *h, int have, int min, int max);
/* For a command whose only options are --help and --follow-links:
 * parses argv and checks that min..max operands follow.  Returns CLI_GO_ON when the command should go
 * on with its operands at argv[optind], else the exit status to return. */
#define CLI_GO_ON (-2)
int cli_parse_operands(const cli_help *h, int argc, char **argv, int min,
                       int max);

/* Opens the directory dirfd/name for reading, never through a symbolic
 * link (O_NOFOLLOW).  Returns the stream (closedir frees it and its
 * descriptor), or NULL with *rc set to the negative errno. */
DIR *cli_opendir_at(int dirfd, const char *name, int *rc);

/* Sums over the tensors of r. */
typedef struct cli_totals {
    uint64_t nbytes, stored_bytes, nframes;
} cli_totals;
cli_totals cli_reader_totals(const ckpt_reader *r);

struct option;
/* A command's handler of one option: getopt_long's c (optarg set);
 * returns CLI_OK or the exit status to return. */
typedef int (*cli_option_fn)(void *ctx, int c, char **argv);
/* Runs getopt_long over argv with longopts (short options: -h alone):
 * -h/--help prints h's help and returns CLI_HELP_SHOWN (CLI_FAIL if it
 * could not be printed); every other option goes to take(ctx, ...), the
 * first result other than CLI_OK ending the parse; then min..max operands
 * must follow (max -1: any number).  Returns CLI_OK with the operands at
 * argv[optind], or the status to return. */
int cli_getopt(const cli_help *h, int argc, char **argv,
               const struct option *longopts, cli_option_fn take, void *ctx,
               int min, int max);

/* ---- parsing */

/* Parses a byte count "4096", "64K", "1M", "2G" (also "64KiB", "1MB":
 * binary multiples).  Returns 0 or -EINVAL. */
int cli_parse_size(const char *s, uint64_t *out);
/* Applies --codec ('c'), --frame-size ('f') or --threads ('t') to *o
 * through the library's one write-option parser (src/wopts.h): CLI_OK, or
 * a usage error quoting the value and the bounds. */
int cli_write_opt(const cli_help *h, ckpt_write_opts *o, int opt,
                  const char *value);
/* Parses a decimal integer in [min, max].  Returns 0 or -EINVAL. */
int cli_parse_long(const char *s, long min, long max, long *out);

/* ---- formatting */

/* "4096,4096"; "()" for a scalar.  Returns buf. */
char *cli_format_shape(char *buf, size_t cap, int ndim, const int64_t *dims);
/* A name or value read from a checkpoint, fit to print: control
 * characters and bytes that are not UTF-8 as \xNN (ckpt_text_quote), so
 * that no name can move the cursor, forge lines or colour a terminal.  A
 * new string (free it), or NULL when out of memory. */
char *cli_escape(const char *s);
/* "1.5 MiB", "512 B". */
void cli_human_size(char *buf, size_t cap, double bytes);
/* "raw/stored" as "2.50", or "-" when stored is 0. */
void cli_format_ratio(char *buf, size_t cap, uint64_t raw, uint64_t stored);

/* ---- reading */

/* Decoded-frame cache of the streaming commands (cat, unpack, verify,
 * info): they read each frame about once, so a small cache bounds their
 * memory without slowing them. */
#define CLI_READ_CACHE ((size_t)32 << 20)

/* --follow-links, taken by the commands that read a checkpoint (ls, info,
 * cat, verify, unpack, import): its files are read even through symbolic
 * links that lead out of its directory, which are refused otherwise
 * (docs/TRUST.md).  getopt_long's value for the option, the call that
 * records it, and read options that apply it. */
#define CLI_OPT_FOLLOW_LINKS 'L'
void cli_set_follow_links(void);
void cli_read_opts_init(ckpt_read_opts *o);

/* Opens a committed checkpoint for streaming reads; prints the library's
 * message and returns CLI_FAIL when it cannot be opened. */
int cli_open_reader(ckpt_reader **r, const char *dir);

/* ---- files */

/* Writes all of buf to fd, retrying short writes and EINTR.  Returns 0 or
 * a negative errno. */
int cli_write_full(int fd, const void *buf, size_t n);
/* Joins "dir/name" into a new string (NULL on out of memory). */
char *cli_path_join(const char *dir, const char *name);

#endif
