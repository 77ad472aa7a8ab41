/*
 * cmd_gc.c - `ckpt gc`: removes the uncommitted saves (directories with
 * data/ or .pending/ but no index.db) of a root, or one such directory.
 *
 * Before removing anything it checks that the directory looks like a save
 * and nothing more: no index.db anywhere inside it (a committed checkpoint
 * is never removed, even nested) and no top-level subdirectory other than
 * data/ and .pending/ (so a root that merely holds a checkpoint named
 * "data" is not mistaken for a save).  Symbolic links are never followed.
 */
#include "cli.h"
#include "fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const cli_help HELP = {
    "gc",
    "ckpt gc [--dry-run] ROOT",
    "Removes every subdirectory of ROOT that is an uncommitted save (it has\n"
    "data/ or .pending/ but no index.db), printing 'removed NAME' (or 'would\n"
    "remove NAME' with --dry-run).  Never touches committed checkpoints,\n"
    "unrelated directories or symbolic links; a directory holding anything\n"
    "but a save's files is skipped with a warning (exit 1).  ROOT may also be\n"
    "a single uncommitted checkpoint directory.\n"
    "\n"
    "Options:\n"
    "  -n, --dry-run   only print what would be removed\n"
    "  -h, --help      show this help\n",
};

/* 1 when name is "." or "..". */
static int dot_or_dotdot(const char *name)
{
    return strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

/* Looks under dirfd/name for an index.db; sets *found to its path.
 * Returns 0 or a negative errno. */
static int find_index_at(int dirfd, const char *name, char *found, size_t cap,
                         const char *shown)
{
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                    O_CLOEXEC);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = -errno;
        close(fd);
        return e;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && !found[0] && (e = readdir(d)) != NULL) {
        struct stat st;
        if (dot_or_dotdot(e->d_name))
            continue;
        if (strcmp(e->d_name, "index.db") == 0) {
            snprintf(found, cap, "%s/%s", shown, e->d_name);
            break;
        }
        if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            rc = -errno;
        } else if (S_ISDIR(st.st_mode)) {
            char sub[4096];
            snprintf(sub, sizeof sub, "%s/%s", shown, e->d_name);
            rc = find_index_at(fd, e->d_name, found, cap, sub);
        }
    }
    closedir(d);
    return rc;
}

/* The name of a top-level subdirectory of a save other than data/ and
 * .pending/, into `odd` (empty when there is none). */
static int find_odd_subdir(const char *path, char *odd, size_t cap)
{
    DIR *d = opendir(path);
    if (!d)
        return -errno;
    int rc = 0;
    struct dirent *e;
    odd[0] = '\0';
    while (rc == 0 && !odd[0] && (e = readdir(d)) != NULL) {
        struct stat st;
        if (dot_or_dotdot(e->d_name) || strcmp(e->d_name, "data") == 0 ||
            strcmp(e->d_name, ".pending") == 0)
            continue;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            rc = -errno;
        else if (S_ISDIR(st.st_mode))
            snprintf(odd, cap, "%s", e->d_name);
    }
    closedir(d);
    return rc;
}

/* Checks that path is safe to remove as an uncommitted save.  Returns
 * CLI_OK, or CLI_FAIL after a warning. */
static int check_removable(const char *path)
{
    char found[4096] = "", odd[256];
    int rc = find_index_at(AT_FDCWD, path, found, sizeof found, path);
    if (rc)
        return cli_fail("skipping %s: %s", path, strerror(-rc));
    if (found[0])
        return cli_fail("skipping %s: it holds a committed checkpoint (%s)",
                        path, found);
    rc = find_odd_subdir(path, odd, sizeof odd);
    if (rc)
        return cli_fail("skipping %s: %s", path, strerror(-rc));
    if (odd[0])
        return cli_fail("skipping %s: it holds the directory '%s', which is "
                        "not part of a save", path, odd);
    return CLI_OK;
}

/* Removes one uncommitted save (shown as `name`). */
static int collect_one(const char *path, const char *name, int dry_run)
{
    int rc = check_removable(path);
    if (rc)
        return rc;
    if (dry_run) {
        printf("would remove %s\n", name);
        return CLI_OK;
    }
    ckpt_error err = { 0 };
    if (ckpt_remove_tree(path, &err) != 0)
        return cli_fail("cannot remove %s: %s", path, err.msg);
    printf("removed %s\n", name);
    return CLI_OK;
}

/* The candidate root/name: CLI_OK when it is not a save or was removed. */
static int collect_entry(const char *root, const char *name, int dry_run)
{
    struct stat st;
    char *path = cli_path_join(root, name);
    if (!path)
        return cli_fail("out of memory");
    int rc = CLI_OK;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
        ckpt_dir_probe(path) == CKPT_DIR_PENDING)
        rc = collect_one(path, name, dry_run);
    free(path);
    fflush(stdout);
    return rc;
}

static int cmp_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int collect_root(const char *root, int dry_run)
{
    struct dirent **ents;
    int n = scandir(root, &ents, NULL, cmp_name);
    if (n < 0)
        return cli_fail("cannot read %s: %s", root, strerror(errno));
    int rc = CLI_OK;
    for (int i = 0; i < n; i++) {
        if (!dot_or_dotdot(ents[i]->d_name) &&
            collect_entry(root, ents[i]->d_name, dry_run) != CLI_OK)
            rc = CLI_FAIL;
        free(ents[i]);
    }
    free(ents);
    return rc;
}

static int collect(const char *root, int dry_run)
{
    struct stat st;
    if (stat(root, &st) != 0)
        return cli_fail("%s: %s", root, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return cli_fail("%s is not a directory", root);
    switch (ckpt_dir_probe(root)) {
    case CKPT_DIR_COMMITTED:
        return cli_fail("%s is a committed checkpoint, not a root; nothing "
                        "removed", root);
    case CKPT_DIR_PENDING:
        return collect_one(root, root, dry_run);
    default:
        return collect_root(root, dry_run);
    }
}

int cmd_gc(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "dry-run", no_argument, NULL, 'n' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int dry_run = 0, c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hn", longopts, NULL)) != -1) {
        if (c == 'h')
            return cli_help_print(&HELP);
        if (c != 'n')
            return cli_bad_option(&HELP, c, argv);
        dry_run = 1;
    }
    int rc = cli_want_args(&HELP, argc - optind, 1, 1);
    if (rc)
        return rc;
    rc = collect(argv[optind], dry_run);
    if (fflush(stdout) != 0 && rc == CLI_OK)
        rc = cli_fail("cannot write to stdout: %s", strerror(errno));
    return rc;
}
