/*
 * ckpt.c - the `ckpt` command-line tool: dispatches to its commands (pack,
 * unpack, ls, info, cat, verify, gc, import, export) and answers the global --help
 * and --version.
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command COMMANDS[] = {
    { "pack", cmd_pack, "make a checkpoint from .npy and raw files" },
    { "unpack", cmd_unpack, "write a checkpoint's tensors as .npy files" },
    { "ls", cmd_ls, "list a checkpoint's tensors, or a root's checkpoints" },
    { "info", cmd_info, "show a checkpoint's summary, or a tensor's layout" },
    { "cat", cmd_cat, "write a tensor's bytes, or a slice's, to stdout" },
    { "verify", cmd_verify, "check every frame, checksum and coverage" },
    { "diff", cmd_diff, "what changed between two checkpoints, per tensor" },
    { "gc", cmd_gc, "remove the uncommitted saves of a root" },
    { "commit", cmd_commit, "commit what the writers of a save left" },
    { "import", cmd_import, "convert a PyTorch DCP or safetensors checkpoint" },
    { "export", cmd_export, "write a checkpoint as safetensors, torch.save or DCP" },
};

#define NCOMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

static void print_usage(FILE *f)
{
    fprintf(f, "usage: ckpt COMMAND [OPTIONS] ARGS...\n"
               "       ckpt --help | --version\n\n"
               "Commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-8s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
    fprintf(f, "\nRun 'ckpt COMMAND --help' for a command's options.\n");
}

static const command *find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(COMMANDS[i].name, name) == 0)
            return &COMMANDS[i];
    return NULL;
}

/* `ckpt help [COMMAND]`. */
static int help(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stdout);
        return CLI_OK;
    }
    const command *c = find_command(argv[1]);
    if (!c) {
        cli_warn("unknown command '%s'", argv[1]);
        print_usage(stderr);
        return CLI_USAGE;
    }
    char *args[] = { argv[1], (char *)"--help", NULL };
    return c->run(2, args);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        cli_warn("missing command");
        print_usage(stderr);
        return CLI_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0)
        return help(1, argv + 1);
    if (strcmp(name, "help") == 0)
        return help(argc - 1, argv + 1);
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
        printf("ckpt (ckptfs) %s\n", ckpt_version());
        return fflush(stdout) == 0 ? CLI_OK : CLI_FAIL;
    }
    const command *c = find_command(name);
    if (!c) {
        cli_warn("unknown command '%s'", name);
        print_usage(stderr);
        return CLI_USAGE;
    }
    return c->run(argc - 1, argv + 1);
}
