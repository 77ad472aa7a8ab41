/*
 * cmd_export.c - `ckpt export`: writes a checkpoint the library reads as
 * safetensors (a file, or a Hugging Face folder, sharded past a size), a
 * torch.save archive or a PyTorch distributed checkpoint, for the tools
 * that know no ckptfs.  The work is ckpt_export's (src/export/); this
 * parses the options, draws progress on a terminal and reports what was
 * left out.
 */
#include "cli.h"
#include "progress.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cli_help HELP = {
    "export",
    "ckpt export [--format safetensors|pt|dcp] [--torch 1|2] [--flat]\n"
    "            [--max-shard-size N] [--tensors A,B,...] [--prefix P]\n"
    "            [--convert] [--bytes-as-u8] [--sync] SRC OUT",
    "Writes the checkpoint SRC in another tool's format as OUT, which must\n"
    "not exist.  OUT is written under a hidden temporary name beside it and\n"
    "renamed only once complete: a failed or killed export leaves nothing\n"
    "named OUT.  Tensor data streams through two read blocks of 8 MiB.\n"
    "\n"
    "Formats (--format; default from OUT's name: .safetensors, .pt, .pth):\n"
    "  safetensors  OUT ending in .safetensors: one file; otherwise a folder\n"
    "               as Hugging Face writes it: model.safetensors, or past\n"
    "               --max-shard-size model-0000I-of-0000N.safetensors and\n"
    "               model.safetensors.index.json.  __metadata__ holds SRC's\n"
    "               metadata and \"format\": \"pt\".\n"
    "  pt           a torch.save archive that torch.load(OUT,\n"
    "               weights_only=True) opens: a dict whose keys nest by the\n"
    "               names' dots ({'a': {'b': tensor}}), or with --flat\n"
    "               {'a.b': tensor}.\n"
    "  dcp          a PyTorch distributed checkpoint folder (.metadata,\n"
    "               __0_0.distcp) that torch.distributed.checkpoint's\n"
    "               FileSystemReader loads; --torch 1 writes it for torch\n"
    "               1.13's torch.distributed._shard.checkpoint instead.\n"
    "\n"
    "A dtype the format lacks (safetensors: complex128, complex32, fnuz\n"
    "float8; --torch 1: float8, uint16 to uint64, complex32) is refused by\n"
    "name; for torch 1 --convert widens it exactly instead (float8 to\n"
    "float32, complex32 to complex64, uint16 to int32, uint32 to int64).\n"
    "Byte objects go to DCP as\n"
    "byte items; safetensors and pt hold tensors only, so byte objects are\n"
    "left out and each is reported, or with --bytes-as-u8 written as 1-D\n"
    "uint8 tensors.\n"
    "\n"
    CLI_HELP_SOURCES
    "\n"
    "Options:\n"
    "  --format F          safetensors, pt or dcp\n"
    "  --torch N           pt, dcp: the torch that loads OUT, 1 or 2\n"
    "                      (default 2)\n"
    "  --flat              pt: keys are the dotted names\n"
    "  --max-shard-size N  safetensors folder: tensor bytes per shard at most\n"
    "                      (default 5000000000, HF's \"5GB\"; K, M, G: 2^10..)\n"
    "  --tensors A,B,...   export these tensors only (repeatable)\n"
    "  --prefix P          export only the tensors whose names start with P\n"
    "  --convert           widen dtypes the format lacks, exactly\n"
    "  --bytes-as-u8       safetensors, pt: byte objects as uint8 tensors\n"
    "  --sync              fsync OUT before it is renamed into place\n"
    "  --threads N         decoder threads (default 0: one per CPU)\n"
    "  --follow-links      read files of SRC that are symbolic links out of\n"
    "                      it (refused otherwise; docs/TRUST.md)\n"
    "  -h, --help          show this help\n",
};

enum {
    OPT_FORMAT = 256, OPT_TORCH, OPT_FLAT, OPT_SHARD, OPT_TENSORS,
    OPT_PREFIX, OPT_CONVERT, OPT_BYTES, OPT_SYNC, OPT_THREADS,
};

typedef struct export_job {
    ckpt_export_opts o;
    int format_given;
    char **names;           /* --tensors, split at commas */
    size_t nnames;
    progress prog;
    int left_out;
} export_job;

static int parse_format(const char *s)
{
    return strcmp(s, "safetensors") == 0 ? CKPT_EXPORT_SAFETENSORS :
           strcmp(s, "pt") == 0 ? CKPT_EXPORT_PT :
           strcmp(s, "dcp") == 0 ? CKPT_EXPORT_DCP : 0;
}

/* Appends the comma-separated names of one --tensors. */
static int add_names(export_job *job, const char *list)
{
    char *copy = strdup(list), *save = NULL;
    if (!copy)
        return cli_fail("out of memory");
    for (char *t = strtok_r(copy, ",", &save); t;
         t = strtok_r(NULL, ",", &save)) {
        char **n = realloc(job->names, (job->nnames + 1) * sizeof *n);
        if (!n || !(n[job->nnames] = strdup(t))) {
            if (n)
                job->names = n;
            free(copy);
            return cli_fail("out of memory");
        }
        job->names = n;
        job->nnames++;
    }
    free(copy);
    return CLI_OK;
}

static int take_option(void *ctx, int c, char **argv)
{
    export_job *job = ctx;
    long v;
    uint64_t size;
    switch (c) {
    case OPT_FORMAT:
        if (!(job->o.format = parse_format(optarg)))
            return cli_usage(&HELP, "--format '%s': not safetensors, pt or "
                             "dcp", optarg);
        job->format_given = 1;
        return CLI_OK;
    case OPT_TORCH:
        if (cli_parse_long(optarg, 1, 2, &v) != 0)
            return cli_usage(&HELP, "--torch '%s': 1 or 2", optarg);
        job->o.torch_major = (int)v;
        return CLI_OK;
    case OPT_SHARD:
        if (cli_parse_size(optarg, &size) != 0 || size == 0)
            return cli_usage(&HELP, "--max-shard-size '%s': not a byte "
                             "count above 0", optarg);
        job->o.max_shard_size = size;
        return CLI_OK;
    case OPT_THREADS:
        if (cli_parse_long(optarg, 0, CKPT_MAX_THREADS, &v) != 0)
            return cli_usage(&HELP, "--threads '%s': 0 to %d", optarg,
                             CKPT_MAX_THREADS);
        job->o.threads = (int)v;
        return CLI_OK;
    case OPT_TENSORS:
        return add_names(job, optarg);
    case OPT_PREFIX:
        job->o.prefix = optarg;
        return CLI_OK;
    case OPT_FLAT:
        job->o.flat = 1;
        return CLI_OK;
    case OPT_CONVERT:
        job->o.convert = 1;
        return CLI_OK;
    case OPT_BYTES:
        job->o.bytes_as_u8 = 1;
        return CLI_OK;
    case OPT_SYNC:
        job->o.sync = 1;
        return CLI_OK;
    case CLI_OPT_FOLLOW_LINKS:
        job->o.follow_links = 1;
        return CLI_OK;
    default:
        return cli_bad_option(&HELP, c, argv);
    }
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n > k && strcmp(s + n - k, tail) == 0;
}

/* --format from OUT's name when not given. */
static int infer_format(export_job *job, const char *out)
{
    if (job->format_given)
        return CLI_OK;
    if (ends_with(out, ".safetensors"))
        job->o.format = CKPT_EXPORT_SAFETENSORS;
    else if (ends_with(out, ".pt") || ends_with(out, ".pth"))
        job->o.format = CKPT_EXPORT_PT;
    else
        return cli_usage(&HELP, "which format? give --format safetensors, "
                         "pt or dcp (OUT '%s' does not say)", out);
    return CLI_OK;
}

static int parse_args(export_job *job, int argc, char **argv)
{
    static const struct option longopts[] = {
        { "format", required_argument, NULL, OPT_FORMAT },
        { "torch", required_argument, NULL, OPT_TORCH },
        { "flat", no_argument, NULL, OPT_FLAT },
        { "max-shard-size", required_argument, NULL, OPT_SHARD },
        { "tensors", required_argument, NULL, OPT_TENSORS },
        { "prefix", required_argument, NULL, OPT_PREFIX },
        { "convert", no_argument, NULL, OPT_CONVERT },
        { "bytes-as-u8", no_argument, NULL, OPT_BYTES },
        { "sync", no_argument, NULL, OPT_SYNC },
        { "threads", required_argument, NULL, OPT_THREADS },
        { "follow-links", no_argument, NULL, CLI_OPT_FOLLOW_LINKS },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int rc = cli_getopt(&HELP, argc, argv, longopts, take_option, job, 2, 2);
    if (rc == CLI_OK)
        rc = infer_format(job, argv[optind + 1]);
    return rc;
}

static void on_progress(void *arg, uint64_t done, uint64_t total)
{
    export_job *job = arg;
    job->prog.total = total;
    progress_set(&job->prog, done);
}

static void on_note(void *arg, const char *fqn, const char *why)
{
    export_job *job = arg;
    char *name = cli_escape(fqn);
    progress_clear(&job->prog);
    cli_warn("'%s': %s", name ? name : "?", why);
    free(name);
    job->left_out++;
}

int cmd_export(int argc, char **argv)
{
    export_job job;
    memset(&job, 0, sizeof job);
    ckpt_export_opts_init(&job.o);
    int rc = parse_args(&job, argc, argv);
    if (rc == CLI_OK) {
        const char *src = argv[optind], *out = argv[optind + 1];
        job.o.tensors = (const char *const *)job.names;
        job.o.ntensors = job.nnames;
        job.o.progress = on_progress;
        job.o.note = on_note;
        job.o.arg = &job;
        progress_init(&job.prog, "exporting", 0);
        ckpt_error err = { 0 };
        if (ckpt_export(src, out, &job.o, &err) != 0) {
            progress_clear(&job.prog);
            rc = cli_fail("%s", err.msg);
        } else {
            progress_done_path(&job.prog, "exported", src);
            if (job.left_out)
                cli_warn("%d byte object%s left out of %s (--bytes-as-u8 "
                         "keeps them)", job.left_out,
                         job.left_out == 1 ? "" : "s", out);
        }
    }
    for (size_t i = 0; i < job.nnames; i++)
        free(job.names[i]);
    free(job.names);
    return rc == CLI_HELP_SHOWN ? CLI_OK : rc;
}
