/*
 * cli_util.c - the helpers every `ckpt` command shares: error and usage
 * reporting ("ckpt: <message>" on stderr), parsing of sizes and integers,
 * formatting of shapes, sizes and ratios, and complete writes.
 */
#include "cli.h"
#include "mounthint.h"
#include "format/plan.h"
#include "write/wopts.h"

#include <ctype.h>
#include <getopt.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* "ckpt: <message>" on one line: the message may quote names read from a
 * checkpoint, so it is escaped (cli_escape). */
static void vreport(const char *fmt, va_list ap)
{
    char *msg = NULL, *shown = NULL;
    if (vasprintf(&msg, fmt, ap) >= 0)
        shown = cli_escape(msg);
    fprintf(stderr, "ckpt: %s\n", shown ? shown : msg ? msg : fmt);
    free(shown);
    free(msg);
}

int cli_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(fmt, ap);
    va_end(ap);
    return CLI_FAIL;
}

void cli_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(fmt, ap);
    va_end(ap);
}

/* Prints each line of the synopsis, the first after "usage: " and the
 * others indented under it. */
static void print_synopsis(FILE *f, const char *synopsis)
{
    fprintf(f, "usage: %s\n", synopsis);
}

int cli_usage(const cli_help *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(fmt, ap);
    va_end(ap);
    print_synopsis(stderr, h->synopsis);
    fprintf(stderr, "Try 'ckpt %s --help' for more information.\n", h->name);
    return CLI_USAGE;
}

int cli_help_print(const cli_help *h)
{
    print_synopsis(stdout, h->synopsis);
    fputs("\n", stdout);
    fputs(h->text, stdout);
    return fflush(stdout) == 0 ? CLI_OK : CLI_FAIL;
}

int cli_bad_option(const cli_help *h, int c, char **argv)
{
    const char *arg = optind > 0 ? argv[optind - 1] : "?";
    if (c == ':')
        return cli_usage(h, "option '%s' needs an argument", arg);
    if (strncmp(arg, "--", 2) == 0)
        return cli_usage(h, "unknown option '%s'", arg);
    if (optopt)
        return cli_usage(h, "unknown option '-%c'", optopt);
    return cli_usage(h, "unknown option '%s'", arg);
}

int cli_want_args(const cli_help *h, int have, int min, int max)
{
    if (have < min)
        return cli_usage(h, "missing argument");
    if (max >= 0 && have > max)
        return cli_usage(h, "too many arguments");
    return CLI_OK;
}

int cli_parse_size(const char *s, uint64_t *out)
{
    return ckpt_parse_size(s, out);
}

int cli_write_opt(const cli_help *h, ckpt_write_opts *o, int opt,
                  const char *value)
{
    const char *name = opt == 'c' ? "codec" : opt == 'f' ? "frame_size"
                                                         : "threads";
    ckpt_error err = { 0 };
    if (ckpt_write_opt_parse(o, name, value, &err))
        return cli_usage(h, "%s", err.msg);
    return CLI_OK;
}

int cli_parse_long(const char *s, long min, long max, long *out)
{
    if (*s == '\0' || isspace((unsigned char)*s))
        return -EINVAL;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || *end != '\0' || v < min || v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

char *cli_format_shape(char *buf, size_t cap, int ndim, const int64_t *dims)
{
    if (cap == 0)
        return buf;
    if (ndim == 0) {
        snprintf(buf, cap, "()");
        return buf;
    }
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < ndim && n < cap; i++) {
        int k = snprintf(buf + n, cap - n, "%s%" PRId64, i ? "," : "",
                         dims[i]);
        if (k < 0)
            break;
        n += (size_t)k;
    }
    return buf;
}

int cli_tensor_refused(ckpt_reader *r, size_t idx, const ckpt_tensor_info *t,
                       ckpt_error *err)
{
    if (t->nchunks || !t->nbytes)
        return 0;
    unsigned char b;
    return ckpt_read(r, idx, &b, 0, 1, err) < 0;
}

char *cli_escape(const char *s)
{
    size_t cap = 4 * strlen(s) + 9;
    char *buf = malloc(cap);
    if (buf)
        ckpt_text_quote(buf, cap, s);
    return buf;
}

void cli_human_size(char *buf, size_t cap, double bytes)
{
    static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB",
                                         "PiB", "EiB" };
    size_t u = 0;
    while (bytes >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
        bytes /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%.0f %s", bytes, units[u]);
    else
        snprintf(buf, cap, "%.1f %s", bytes, units[u]);
}

void cli_format_ratio(char *buf, size_t cap, uint64_t raw, uint64_t stored)
{
    if (stored == 0)
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, "%.2f", (double)raw / (double)stored);
}

/* The tool runs one command: --follow-links holds for all it reads. */
static int follow_links;

void cli_set_follow_links(void)
{
    follow_links = 1;
}

void cli_read_opts_init(ckpt_read_opts *o)
{
    ckpt_read_opts_init(o);
    o->cache_bytes = CLI_READ_CACHE;
    o->follow_links = follow_links;
}

int cli_open_reader(ckpt_reader **r, const char *dir)
{
    ckpt_read_opts opts;
    ckpt_error err = { 0 };
    cli_read_opts_init(&opts);
    if (ckpt_reader_open(r, dir, &opts, &err) != 0) {
        char hint[3 * 4096];
        if (cli_mount_hint(dir, hint, sizeof hint))
            return cli_fail("%s; %s", err.msg, hint);
        return cli_fail("%s", err.msg);
    }
    return CLI_OK;
}

int cli_write_full(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

char *cli_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    size_t n = a;
    if (a > 0 && dir[a - 1] != '/')
        p[n++] = '/';
    memcpy(p + n, name, b + 1);
    return p;
}

cli_totals cli_reader_totals(const ckpt_reader *r)
{
    cli_totals tot = { 0 };
    size_t n = ckpt_reader_count(r);
    for (size_t i = 0; i < n; i++) {
        ckpt_tensor_info t;
        if (ckpt_reader_info(r, i, &t) == 0) {
            tot.nbytes += t.nbytes;
            tot.stored_bytes += t.stored_bytes;
            tot.nframes += t.nframes;
        }
    }
    return tot;
}

DIR *cli_opendir_at(int dirfd, const char *name, int *rc)
{
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                    O_CLOEXEC);
    if (fd < 0) {
        *rc = -errno;
        return NULL;
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        *rc = -errno;
        close(fd);
    }
    return d;
}

int cli_getopt(const cli_help *h, int argc, char **argv,
               const struct option *longopts, cli_option_fn take, void *ctx,
               int min, int max)
{
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        if (c == 'h')
            return cli_help_print(h) == CLI_OK ? CLI_HELP_SHOWN : CLI_FAIL;
        int rc = take(ctx, c, argv);
        if (rc)
            return rc;
    }
    return cli_want_args(h, argc - optind, min, max);
}

int cli_parse_operands(const cli_help *h, int argc, char **argv, int min,
                       int max)
{
    static const struct option longopts[] = {
        { "help", no_argument, NULL, 'h' },
        { "follow-links", no_argument, NULL, CLI_OPT_FOLLOW_LINKS },
        { NULL, 0, NULL, 0 },
    };
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        if (c == 'h')
            return cli_help_print(h);
        if (c != CLI_OPT_FOLLOW_LINKS)
            return cli_bad_option(h, c, argv);
        cli_set_follow_links();
    }
    int rc = cli_want_args(h, argc - optind, min, max);
    return rc ? rc : CLI_GO_ON;
}
