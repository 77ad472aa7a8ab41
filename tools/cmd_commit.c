/*
 * cmd_commit.c - `ckpt commit`: commits what the writers of a save left
 * in its .pending/ (through the library or a writable mount), with the
 * planner's full validation; the command-line twin of the last rank's
 * write to .ckptfs/commit.
 */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>

static const cli_help HELP = {
    "commit",
    "ckpt commit [--world N] [--writers K] [--no-sync] DIR",
    "Validates every writer plan under DIR/.pending (same dtype and shape per\n"
    "tensor, pieces in bounds, no partial overlap, every tensor covered,\n"
    "replicas identical, no tensor declared through a mount left without a\n"
    "piece, no shard that failed to sync) and commits DIR atomically:\n"
    "index.db appears, and .pending/ goes.  On any error nothing is\n"
    "committed and the plans stay for inspection (or `ckpt gc`).\n"
    "\n"
    "Options:\n"
    "  -w, --world N     record world_size N (the ranks of the job; default:\n"
    "                    the number of writer plans)\n"
    "  -k, --writers K   refuse unless exactly K writer plans are present\n"
    "      --no-sync     do not fsync the index and the directory\n"
    "  -h, --help        show this help\n",
};

int cmd_commit(int argc, char **argv)
{
    static const struct option opts[] = {
        { "world", required_argument, NULL, 'w' },
        { "writers", required_argument, NULL, 'k' },
        { "no-sync", no_argument, NULL, 'S' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    ckpt_commit_opts co;
    ckpt_commit_opts_init(&co);
    long v;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":w:k:h", opts, NULL)) != -1) {
        switch (c) {
        case 'w':
            if (cli_parse_long(optarg, 1, 1 << 20, &v) != 0)
                return cli_usage(&HELP, "--world takes a rank count from 1 "
                                 "to 1048576, not '%s'", optarg);
            co.world_size = (int)v;
            break;
        case 'k':
            if (cli_parse_long(optarg, 1, 1 << 20, &v) != 0)
                return cli_usage(&HELP, "--writers takes a count from 1, not "
                                 "'%s'", optarg);
            co.expect_writers = (int)v;
            break;
        case 'S':
            co.sync = 0;
            break;
        case 'h':
            return cli_help_print(&HELP);
        default:
            return cli_bad_option(&HELP, c, argv);
        }
    }
    int rc = cli_want_args(&HELP, argc - optind, 1, 1);
    if (rc != CLI_OK)
        return rc;
    const char *dir = argv[optind];
    ckpt_error err = { 0 };
    if (ckpt_commit(dir, &co, &err) != 0)
        return cli_fail("%s", err.msg);
    printf("committed %s\n", dir);
    return CLI_OK;
}
