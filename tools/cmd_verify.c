/*
 * cmd_verify.c - `ckpt verify`: decodes every frame of a checkpoint, checks
 * every checksum, the coverage of every tensor and the shard files' sizes,
 * printing one FAULT line per problem on stdout (exit 1) or an "ok:" line.
 */
#include "cli.h"
#include "progress.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

static const cli_help HELP = {
    "verify",
    "ckpt verify CKPT",
    "Decodes every frame, checks every checksum, the coverage of every tensor\n"
    "by its chunks and the shard files' sizes.  Prints\n"
    "  ok: N tensors, M frames, B bytes verified\n"
    "and exits 0 when all is intact (B counts the tensors' raw bytes);\n"
    "otherwise prints one line per fault on stdout,\n"
    "  FAULT tensor=<fqn> chunk=<i> frame=<j> file=<shard> offset=<o>: <what>\n"
    "('-' for a field that does not apply), and exits 1.\n"
    "\n"
    CLI_HELP_SOURCES
    "PyTorch and safetensors checkpoints carry no checksums: every byte is\n"
    "read, and bounds, file sizes and the chunks' coverage are checked.\n"
    "\n"
    "Options:\n"
    "  --follow-links  read files that are symbolic links out of the\n"
    "                  checkpoint (refused otherwise; docs/TRUST.md)\n"
    "  -h, --help      show this help\n",
};

/* Shared with the callbacks, which the library may call from its threads. */
typedef struct verify_ctx {
    pthread_mutex_t mu;
    progress prog;
    int64_t faults;
} verify_ctx;

/* A name, or "-" when there is none (NULL or empty). */
static const char *str_or_dash(const char *s)
{
    return s && *s ? s : "-";
}

/* Formats a chunk or frame number, or "-" when it is -1. */
static const char *num_or_dash(char *buf, size_t cap, long v)
{
    if (v < 0)
        return "-";
    snprintf(buf, cap, "%ld", v);
    return buf;
}

static void on_fault(void *arg, const ckpt_fault *f)
{
    verify_ctx *v = arg;
    char chunk[24], frame[24], offset[24] = "-";
    if (f->file && *f->file)
        snprintf(offset, sizeof offset, "%" PRIu64, f->file_offset);
    /* names and messages come from the checkpoint: escaped */
    char *fqn = cli_escape(str_or_dash(f->fqn));
    char *file = cli_escape(str_or_dash(f->file));
    char *msg = cli_escape(f->msg && *f->msg ? f->msg : "fault");
    pthread_mutex_lock(&v->mu);
    progress_clear(&v->prog);
    printf("FAULT tensor=%s chunk=%s frame=%s file=%s offset=%s: %s\n",
           fqn ? fqn : "?", num_or_dash(chunk, sizeof chunk, f->chunk),
           num_or_dash(frame, sizeof frame, f->frame), file ? file : "?",
           offset, msg ? msg : "?");
    fflush(stdout);
    v->faults++;
    pthread_mutex_unlock(&v->mu);
    free(fqn);
    free(file);
    free(msg);
}

static void on_progress(void *arg, uint64_t done, uint64_t total)
{
    verify_ctx *v = arg;
    pthread_mutex_lock(&v->mu);
    v->prog.total = total;
    progress_set(&v->prog, done);
    pthread_mutex_unlock(&v->mu);
}

/* Prints the "ok:" line: tensors, frames and raw bytes. */
static void print_ok(const ckpt_reader *r)
{
    cli_totals tot = cli_reader_totals(r);
    printf("ok: %zu tensors, %" PRIu64 " frames, %" PRIu64
           " bytes verified\n", ckpt_reader_count(r), tot.nframes,
           tot.nbytes);
}

static int verify(ckpt_reader *r, const char *ckpt)
{
    verify_ctx v;
    memset(&v, 0, sizeof v);
    pthread_mutex_init(&v.mu, NULL);
    progress_init(&v.prog, "verifying", 0);
    ckpt_error err = { 0 };
    int64_t faults = ckpt_verify(r, on_fault, &v, on_progress, &err);
    progress_clear(&v.prog);
    pthread_mutex_destroy(&v.mu);
    if (faults < 0)
        return cli_fail("%s", err.msg);
    if (faults < v.faults)
        faults = v.faults;
    if (faults > 0) {
        fflush(stdout);
        return cli_fail("%s: %" PRId64 " fault%s found", ckpt, faults,
                        faults == 1 ? "" : "s");
    }
    print_ok(r);
    fflush(stdout);
    progress_done(&v.prog, "verified", r);
    return CLI_OK;
}

int cmd_verify(int argc, char **argv)
{
    int rc = cli_parse_operands(&HELP, argc, argv, 1, 1);
    if (rc != CLI_GO_ON)
        return rc;
    ckpt_reader *r;
    if (cli_open_reader(&r, argv[optind]) != CLI_OK)
        return CLI_FAIL;
    rc = verify(r, argv[optind]);
    ckpt_reader_close(r);
    if (fflush(stdout) != 0 && rc == CLI_OK)
        rc = cli_fail("cannot write to stdout: %s", strerror(errno));
    return rc;
}
