/*
 * cmd_diff.c - `ckpt diff A B`: what changed between two checkpoints,
 * tensor by tensor (ckpt_diff: equal frames told by their checksums with
 * no decode), as text or, with --json, one JSON object.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cli_help HELP = {
    "diff",
    "ckpt diff [--json] A B",
    "Compares the tensors of checkpoints A and B (ckptfs, or any format\n"
    "ckpt reads), in FQN order, one line each:\n"
    "  equal    FQN\n"
    "  changed  FQN  frames C/N  elems E  [max_abs X  rel_l2 Y]\n"
    "  only-a   FQN        (only-b: in B only)\n"
    "then a summary line.  Tensors stored with the same chunks and frames\n"
    "(a delta checkpoint and its base, or two saves of one job) are compared\n"
    "frame by frame by checksum: equal ones cost no decode, and C counts\n"
    "the frames whose checksums differ.  A changed tensor is read from both\n"
    "for E, its elements whose bytes differ, and for float tensors the\n"
    "largest absolute difference and ||B - A|| / ||A|| (L2).  A dtype or\n"
    "shape change is 'changed' with 'type differs'.  Exit status 0 whether\n"
    "or not they differ, 1 on errors.\n"
    "\n"
    "Options:\n"
    "  --json          one JSON object: {\"a\", \"b\", \"tensors\": [{\"fqn\",\n"
    "                  \"status\" (equal, changed, only_a, only_b),\n"
    "                  \"same_type\", \"same_layout\", \"frames\",\n"
    "                  \"changed_frames\", \"changed_elems\", and for floats\n"
    "                  \"max_abs\", \"rel_l2\"}], \"equal\", \"changed\",\n"
    "                  \"only_a\", \"only_b\"}\n"
    "  --follow-links  read files that are symbolic links out of the\n"
    "                  checkpoints (refused otherwise; docs/TRUST.md)\n"
    "  -h, --help      show this help\n",
};

static const char *const STATUS[] = { "equal", "changed", "only_a",
                                      "only_b" };

typedef struct diff_out {
    int json;
    int first;
    uint64_t count[4];
} diff_out;

/* s as a JSON string (UTF-8 passed through, controls escaped). */
static void json_str(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

/* A JSON number, or null for NaN and infinities. */
static void json_num(double v)
{
    if (isfinite(v))
        printf("%.9g", v);
    else
        printf("null");
}

static void print_json(diff_out *o, const ckpt_diff_entry *e)
{
    printf("%s\n  {\"fqn\": ", o->first ? "" : ",");
    o->first = 0;
    json_str(e->fqn);
    printf(", \"status\": \"%s\", \"frames\": %" PRIu64, STATUS[e->status],
           e->frames);
    if (e->status == CKPT_DIFF_EQUAL || e->status == CKPT_DIFF_CHANGED)
        printf(", \"same_type\": %s, \"same_layout\": %s, \"changed_frames\":"
               " %" PRIu64 ", \"changed_elems\": %" PRIu64,
               e->same_type ? "true" : "false",
               e->same_layout ? "true" : "false", e->changed_frames,
               e->changed_elems);
    if (e->has_stats) {
        printf(", \"max_abs\": ");
        json_num(e->max_abs);
        printf(", \"rel_l2\": ");
        json_num(e->rel_l2);
    }
    putchar('}');
}

static void print_text(const ckpt_diff_entry *e)
{
    static const char *const WORD[] = { "equal", "changed", "only-a",
                                        "only-b" };
    char *fqn = cli_escape(e->fqn);
    printf("%-8s %s", WORD[e->status], fqn ? fqn : "?");
    free(fqn);
    if (e->status == CKPT_DIFF_CHANGED && !e->same_type)
        printf("  type differs");
    else if (e->status == CKPT_DIFF_CHANGED) {
        printf("  frames %" PRIu64 "/%" PRIu64 "  elems %" PRIu64,
               e->changed_frames, e->frames, e->changed_elems);
        if (e->has_stats)
            printf("  max_abs %.6g  rel_l2 %.6g", e->max_abs, e->rel_l2);
    }
    putchar('\n');
}

static void on_entry(void *arg, const ckpt_diff_entry *e)
{
    diff_out *o = arg;
    o->count[e->status]++;
    if (o->json)
        print_json(o, e);
    else
        print_text(e);
}

static int diff(const char *a, const char *b, int json)
{
    ckpt_reader *ra, *rb;
    if (cli_open_reader(&ra, a) != CLI_OK)
        return CLI_FAIL;
    if (cli_open_reader(&rb, b) != CLI_OK) {
        ckpt_reader_close(ra);
        return CLI_FAIL;
    }
    diff_out o = { .json = json, .first = 1 };
    if (json) {
        printf("{\"a\": ");
        json_str(a);
        printf(", \"b\": ");
        json_str(b);
        printf(", \"tensors\": [");
    }
    ckpt_error err = { 0 };
    int64_t n = ckpt_diff(ra, rb, on_entry, &o, &err);
    ckpt_reader_close(ra);
    ckpt_reader_close(rb);
    if (n < 0) {
        fflush(stdout);
        return cli_fail("%s", err.msg);
    }
    if (json)
        printf("\n], \"equal\": %" PRIu64 ", \"changed\": %" PRIu64
               ", \"only_a\": %" PRIu64 ", \"only_b\": %" PRIu64 "}\n",
               o.count[0], o.count[1], o.count[2], o.count[3]);
    else
        printf("%" PRIu64 " equal, %" PRIu64 " changed, %" PRIu64
               " only in A, %" PRIu64 " only in B\n", o.count[0], o.count[1],
               o.count[2], o.count[3]);
    return CLI_OK;
}

static int take_option(void *ctx, int c, char **argv)
{
    int *json = ctx;
    if (c == 'j') {
        *json = 1;
        return CLI_OK;
    }
    if (c == CLI_OPT_FOLLOW_LINKS) {
        cli_set_follow_links();
        return CLI_OK;
    }
    return cli_bad_option(&HELP, c, argv);
}

int cmd_diff(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "json", no_argument, NULL, 'j' },
        { "follow-links", no_argument, NULL, CLI_OPT_FOLLOW_LINKS },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int json = 0;
    int rc = cli_getopt(&HELP, argc, argv, longopts, take_option, &json, 2,
                        2);
    if (rc)
        return rc == CLI_HELP_SHOWN ? CLI_OK : rc;
    rc = diff(argv[optind], argv[optind + 1], json);
    if (fflush(stdout) != 0 && rc == CLI_OK)
        rc = cli_fail("cannot write to stdout: %s", strerror(errno));
    return rc;
}
