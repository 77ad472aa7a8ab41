/*
 * cmd_ls.c - `ckpt ls`: lists the tensors of a checkpoint (with their
 * sizes, codecs and compression ratio), or the checkpoints (committed or
 * interrupted) of a root directory with their size on disk.
 */
#include "cli.h"
#include "mounthint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const cli_help HELP = {
    "ls",
    "ckpt ls PATH",
    "For a checkpoint PATH: a header line, then one line per tensor:\n"
    "  FQN DTYPE SHAPE RAW_BYTES STORED_BYTES CODEC RATIO\n"
    "(SHAPE is comma-separated, \"()\" for a scalar; CODEC the codecs its\n"
    "frames use, '+'-joined, \"-\" for none; RATIO is RAW_BYTES /\n"
    "STORED_BYTES with 2 decimals, \"-\" when nothing is stored).  A\n"
    "tensor of another tool's checkpoint that ckptfs cannot read (a dtype\n"
    "it lacks) is listed, and a warning on stderr says why.\n"
    "For a root (a directory of checkpoints): one line per subdirectory that\n"
    "is a checkpoint or an interrupted save, in name order, no header:\n"
    "  NAME STATE SIZE_ON_DISK TENSORS\n"
    "STATE is committed or uncommitted (ckptfs), pytorch-dcp or safetensors\n"
    "(checkpoints of those tools); SIZE_ON_DISK is the bytes of disk blocks\n"
    "its files use; TENSORS is - for uncommitted ones.  A root in which\n"
    "nothing is a checkpoint is an error (exit 1).\n"
    "\n"
    "PATH is a checkpoint, or a root of checkpoints of any of these kinds.\n"
    CLI_HELP_SOURCES
    "\n"
    "Options:\n"
    "  --follow-links  read files that are symbolic links out of the\n"
    "                  checkpoint (refused otherwise; docs/TRUST.md)\n"
    "  -h, --help      show this help\n",
};

/* ------------------------------------------------------------ checkpoint */

/* One tensor's line, its columns formatted.  A listing makes one at a
 * time (twice: once for the column widths, once to print), so that it
 * costs no memory per tensor beyond the reader's. */
typedef struct ls_row {
    char *fqn;              /* escaped (cli_escape) */
    const char *dtype;
    char shape[CLI_SHAPE_MAX];
    char raw[24], stored[24];
    const char *codec;
    char ratio[32];
} ls_row;

static int max_int(int a, int b)
{
    return a > b ? a : b;
}

/* The codecs of a tensor's frames, "-" when it has none. */
static const char *codec_column(const char *codecs)
{
    return !codecs || !*codecs || strcmp(codecs, "none") == 0 ? "-" : codecs;
}

/* Formats tensor i's row (its fqn to free); warns once, when `warn`,
 * about a tensor whose reads fail.  CLI_OK or CLI_FAIL. */
static int make_row(ckpt_reader *r, const char *path, size_t i, int warn,
                    ls_row *row)
{
    ckpt_tensor_info t;
    row->fqn = NULL;
    if (ckpt_reader_info(r, i, &t) != 0)
        return cli_fail("%s: cannot read tensor %zu", path, i);
    if (!(row->fqn = cli_escape(t.fqn)))
        return cli_fail("out of memory");
    ckpt_error why = { 0 };
    if (cli_tensor_refused(r, i, &t, &why) && warn)
        cli_warn("listed, but its reads fail: %s", why.msg);
    row->dtype = ckpt_dtype_name(t.dtype);
    cli_format_shape(row->shape, sizeof row->shape, t.ndim, t.shape);
    snprintf(row->raw, sizeof row->raw, "%" PRIu64, t.nbytes);
    snprintf(row->stored, sizeof row->stored, "%" PRIu64, t.stored_bytes);
    row->codec = codec_column(t.codecs);
    cli_format_ratio(row->ratio, sizeof row->ratio, t.nbytes,
                     t.stored_bytes);
    return CLI_OK;
}

/* Widens w to fit row's columns. */
static void fit_row(int w[7], const ls_row *row)
{
    w[0] = max_int(w[0], (int)strlen(row->fqn));
    w[1] = max_int(w[1], (int)strlen(row->dtype));
    w[2] = max_int(w[2], (int)strlen(row->shape));
    w[3] = max_int(w[3], (int)strlen(row->raw));
    w[4] = max_int(w[4], (int)strlen(row->stored));
    w[5] = max_int(w[5], (int)strlen(row->codec));
    w[6] = max_int(w[6], (int)strlen(row->ratio));
}

/* Prints the tensors in aligned columns under the header: a first pass
 * measures the columns, a second prints them. */
static int list_checkpoint(const char *path)
{
    ckpt_reader *r;
    if (cli_open_reader(&r, path) != CLI_OK)
        return CLI_FAIL;
    size_t n = ckpt_reader_count(r);
    int w[7] = { 3, 5, 5, 9, 12, 5, 5 };   /* widths of the header words */
    int rc = CLI_OK;
    ls_row row;
    for (size_t i = 0; i < n && rc == CLI_OK; i++) {
        rc = make_row(r, path, i, 1, &row);
        if (rc == CLI_OK)
            fit_row(w, &row);
        free(row.fqn);
        row.fqn = NULL;
    }
    if (rc == CLI_OK)
        printf("%-*s %-*s %-*s %*s %*s %-*s %*s\n", w[0], "FQN", w[1],
               "DTYPE", w[2], "SHAPE", w[3], "RAW_BYTES", w[4],
               "STORED_BYTES", w[5], "CODEC", w[6], "RATIO");
    for (size_t i = 0; i < n && rc == CLI_OK; i++) {
        rc = make_row(r, path, i, 0, &row);
        if (rc == CLI_OK)
            printf("%-*s %-*s %-*s %*s %*s %-*s %*s\n", w[0], row.fqn, w[1],
                   row.dtype, w[2], row.shape, w[3], row.raw, w[4],
                   row.stored, w[5], row.codec, w[6], row.ratio);
        free(row.fqn);
        row.fqn = NULL;
    }
    ckpt_reader_close(r);
    return rc;
}

/* ------------------------------------------------------------ root */

/* Adds the disk usage (st_blocks * 512) of everything under at/name,
 * not following symbolic links.  Returns 0 or a negative errno. */
static int disk_usage_at(int at, const char *name, uint64_t *sum)
{
    struct stat st;
    if (fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    *sum += (uint64_t)st.st_blocks * 512;
    if (!S_ISDIR(st.st_mode))
        return 0;
    int rc = 0;
    DIR *d = cli_opendir_at(at, name, &rc);
    if (!d)
        return rc;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            rc = disk_usage_at(dirfd(d), e->d_name, sum);
    closedir(d);
    return rc;
}

/* The STATE column of a subdirectory of a root: committed or uncommitted
 * for ckptfs, the format of a checkpoint of another tool (complete once it
 * is recognised), or NULL when it is none of these. */
static const char *entry_state(const char *path, ckpt_dir_state *st)
{
    *st = ckpt_dir_probe(path);
    if (*st == CKPT_DIR_COMMITTED)
        return "committed";
    if (*st == CKPT_DIR_PENDING)
        return "uncommitted";
    switch (ckpt_format_probe(path, NULL, 0)) {
    case CKPT_FORMAT_DCP:
        return "pytorch-dcp";
    case CKPT_FORMAT_SAFETENSORS:
        return "safetensors";
    case CKPT_FORMAT_TORCH:
        return "torch-save";
    default:
        return NULL;
    }
}

/* Prints the line of one subdirectory of a root, if it is a checkpoint (of
 * ckptfs or another tool) or an interrupted save, counting it in *listed;
 * sets *failed when something could not be read. */
static void list_entry(const char *root, const char *name, int *failed,
                       size_t *listed)
{
    char *path = cli_path_join(root, name);
    if (!path) {
        *failed = 1;
        cli_warn("out of memory");
        return;
    }
    ckpt_dir_state st;
    const char *state = entry_state(path, &st);
    if (!state) {
        free(path);
        return;
    }
    uint64_t size = 0;
    int rc = disk_usage_at(AT_FDCWD, path, &size);
    if (rc) {
        cli_warn("%s: %s", path, strerror(-rc));
        *failed = 1;
    }
    char tensors[24] = "-";
    if (st != CKPT_DIR_PENDING) {
        ckpt_reader *r;
        ckpt_error err = { 0 };
        ckpt_read_opts opts;
        cli_read_opts_init(&opts);   /* --follow-links */
        if (ckpt_reader_open(&r, path, &opts, &err) == 0) {
            snprintf(tensors, sizeof tensors, "%zu", ckpt_reader_count(r));
            ckpt_reader_close(r);
        } else {
            cli_warn("%s", err.msg);
            snprintf(tensors, sizeof tensors, "?");
            *failed = 1;
        }
    }
    char *shown = cli_escape(name);
    printf("%s %s %" PRIu64 " %s\n", shown ? shown : "?", state, size,
           tensors);
    free(shown);
    (*listed)++;
    free(path);
}

/* 1 when root/name is a directory (not a symbolic link to one). */
static int is_subdir(const char *root, const char *name)
{
    struct stat st;
    char *path = cli_path_join(root, name);
    int yes = path && lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
    free(path);
    return yes;
}

static int cmp_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* A root that lists nothing is an error: say what was looked for (and,
 * inside a ckptfs mount, where the checkpoint is on disk). */
static int nothing_listed(const char *root)
{
    char hint[3 * 4096];
    if (cli_mount_hint(root, hint, sizeof hint))
        return cli_fail("%s: nothing to list: %s", root, hint);
    return cli_fail("%s holds no checkpoint: neither it nor any of its "
                    "subdirectories is a ckptfs checkpoint (index.db) or "
                    "save (data/, .pending/), a PyTorch distributed "
                    "checkpoint (.metadata) or safetensors", root);
}

static int list_root(const char *root)
{
    struct dirent **ents;
    int n = scandir(root, &ents, NULL, cmp_name);
    if (n < 0)
        return cli_fail("cannot read %s: %s", root, strerror(errno));
    int failed = 0;
    size_t listed = 0;
    for (int i = 0; i < n; i++) {
        const char *name = ents[i]->d_name;
        /* Hidden entries are no checkpoints of the root: a save being
         * made or retired (.ckpt-new.*, gc's), or a mount's views
         * (.npy/, .safetensors/, .ckptfs/). */
        if (name[0] != '.' && is_subdir(root, name))
            list_entry(root, name, &failed, &listed);
        free(ents[i]);
    }
    free(ents);
    if (listed == 0 && !failed)
        return nothing_listed(root);
    return failed ? CLI_FAIL : CLI_OK;
}

/* ------------------------------------------------------------ main */

static int list_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return cli_fail("%s: %s", path, strerror(errno));
    ckpt_format fmt = ckpt_format_probe(path, NULL, 0);
    if (fmt == CKPT_FORMAT_DCP || fmt == CKPT_FORMAT_SAFETENSORS ||
        fmt == CKPT_FORMAT_TORCH)
        return list_checkpoint(path);
    if (!S_ISDIR(st.st_mode))
        return cli_fail("%s is not a directory", path);
    switch (ckpt_dir_probe(path)) {
    case CKPT_DIR_COMMITTED:
        return list_checkpoint(path);
    case CKPT_DIR_PENDING:
        return cli_fail("%s is an uncommitted checkpoint (an interrupted or "
                        "unfinished save; 'ckpt gc' removes it)", path);
    default:
        return list_root(path);
    }
}

int cmd_ls(int argc, char **argv)
{
    int rc = cli_parse_operands(&HELP, argc, argv, 1, 1);
    if (rc != CLI_GO_ON)
        return rc;
    rc = list_path(argv[optind]);
    if (fflush(stdout) != 0 && rc == CLI_OK)
        rc = cli_fail("cannot write the listing: %s", strerror(errno));
    return rc;
}
