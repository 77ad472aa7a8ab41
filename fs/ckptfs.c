/*
 * ckptfs.c - the ckptfs daemon: parses the command line (ckptfs's -o
 * options, then FUSE's own), refuses a SOURCE that is not a checkpoint or
 * a root of checkpoints before mounting, mounts read-only, daemonizes
 * unless -f, runs the (multithreaded unless -s) FUSE loop, and after the
 * loop's threads are gone unmounts and closes every reader.
 *
 * Exit status: 0 after a clean unmount or a terminating signal, 1 when
 * SOURCE is refused or mounting fails, 2 for usage errors.
 */
#include "ops.h"

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>
#include <fuse3/fuse_log.h>

#include <fuse3/fuse_opt.h>

#include "codec/codec.h"
#include "common/mountinfo.h"
#include "write/wopts.h"
#include "source.h"
#include "wsave.h"

enum { EXIT_USAGE = 2 };

/* What the command line asks for. */
typedef struct cli {
    const char *source;
    int nonopts;           /* non-option arguments after SOURCE */
    int help, version;
    int bad;               /* a usage error was reported */
    ckpt_read_opts ro;
    int rw;                /* -o rw: saves may be written */
    int world;             /* -o world=N: ranks that commit a save */
    int delta_latest;      /* -o delta=latest: saves are deltas */
    ckpt_write_opts wo;
    ws_limits lim;         /* -o max_open_pieces=N ... */
    char write_opt[64];    /* the first option of writing given, for the
                              message when -o rw is missing */
    char log[4096];        /* -o log=FILE: messages appended there */
    size_t st_shard;       /* -o st_shard_size=N: .safetensors/ files */
} cli;

enum { KEY_CACHE, KEY_PREFETCH, KEY_THREADS, KEY_HELP, KEY_VERSION, KEY_RW,
       KEY_RO, KEY_WORLD, KEY_CODEC, KEY_FRAME, KEY_SYNC, KEY_FOLLOW,
       KEY_LOG, KEY_MAX_PIECES, KEY_MAX_SAVES, KEY_MAX_KEYS,
       KEY_MAX_META_BYTES, KEY_ST_SHARD, KEY_DELTA };

static const struct fuse_opt cli_opts[] = {
    FUSE_OPT_KEY("cache_size=", KEY_CACHE),
    FUSE_OPT_KEY("prefetch=", KEY_PREFETCH),
    FUSE_OPT_KEY("threads=", KEY_THREADS),
    FUSE_OPT_KEY("rw", KEY_RW),
    FUSE_OPT_KEY("ro", KEY_RO),
    FUSE_OPT_KEY("world=", KEY_WORLD),
    FUSE_OPT_KEY("codec=", KEY_CODEC),
    FUSE_OPT_KEY("frame_size=", KEY_FRAME),
    FUSE_OPT_KEY("sync=", KEY_SYNC),
    FUSE_OPT_KEY("delta=", KEY_DELTA),
    FUSE_OPT_KEY("follow_links", KEY_FOLLOW),
    FUSE_OPT_KEY("log=", KEY_LOG),
    FUSE_OPT_KEY("max_open_pieces=", KEY_MAX_PIECES),
    FUSE_OPT_KEY("max_saves=", KEY_MAX_SAVES),
    FUSE_OPT_KEY("max_meta_keys=", KEY_MAX_KEYS),
    FUSE_OPT_KEY("max_meta_bytes=", KEY_MAX_META_BYTES),
    FUSE_OPT_KEY("st_shard_size=", KEY_ST_SHARD),
    FUSE_OPT_KEY("-h", KEY_HELP),
    FUSE_OPT_KEY("--help", KEY_HELP),
    FUSE_OPT_KEY("-V", KEY_VERSION),
    FUSE_OPT_KEY("--version", KEY_VERSION),
    FUSE_OPT_END
};

/* ------------------------------------------------------------ options */

/* A decimal number, all of s, at most max. */
static int parse_count(const char *s, unsigned long long max,
                       unsigned long long *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE || v > max)
        return -ERANGE;
    *out = v;
    return *end ? -EINVAL : 0;
}

/* N, NK, NM or NG (binary units, either case) in bytes. */
static int parse_size(const char *s, size_t *out)
{
    size_t len = strlen(s);
    unsigned shift = 0;
    char digits[32];
    if (len == 0 || len >= sizeof digits)
        return -EINVAL;
    switch (s[len - 1]) {
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    default: break;
    }
    memcpy(digits, s, len - (shift ? 1 : 0));
    digits[len - (shift ? 1 : 0)] = '\0';
    unsigned long long v;
    int rc = parse_count(digits, SIZE_MAX >> shift, &v);
    if (rc == 0)
        *out = (size_t)v << shift;
    return rc;
}

static int bad_value(cli *c, const char *arg, const char *expected)
{
    fprintf(stderr, "ckptfs: bad option '%s': expected %s\n", arg, expected);
    c->bad = 1;
    return -1;
}

/* Applies one of ckptfs's -o options ("name=value" in arg). */
static int cli_option(cli *c, const char *arg, int key)
{
    const char *v = strchr(arg, '=') + 1;
    unsigned long long n;
    switch (key) {
    case KEY_CACHE:
        return parse_size(v, &c->ro.cache_bytes) == 0
                   ? 0 : bad_value(c, arg, "cache_size=N[K|M|G]");
    case KEY_ST_SHARD:
        return parse_size(v, &c->st_shard) == 0 && c->st_shard > 0
                   ? 0 : bad_value(c, arg, "st_shard_size=N[K|M|G] above 0");
    case KEY_PREFETCH:
        if (parse_count(v, 1024, &n) != 0)
            return bad_value(c, arg, "prefetch=N with N from 0 to 1024");
        c->ro.prefetch = (int)n;
        return 0;
    case KEY_WORLD:
        if (parse_count(v, 1 << 20, &n) != 0 || n == 0)
            return bad_value(c, arg, "world=N with N from 1 to 1048576");
        c->world = (int)n;
        return 0;
    case KEY_CODEC:
        if (ckpt_codec_parse(v, &c->wo.codec, &c->wo.level, NULL) != 0)
            return bad_value(c, arg, "codec=auto|raw|zstd[:LEVEL]|a "
                             "byte-grouped codec (docs/CLI.md)");
        return 0;
    case KEY_SYNC:
        if (strcmp(v, "close") != 0 && strcmp(v, "commit") != 0)
            return bad_value(c, arg, "sync=close or sync=commit");
        c->wo.sync = strcmp(v, "close") == 0;
        return 0;
    case KEY_MAX_PIECES: case KEY_MAX_SAVES: case KEY_MAX_KEYS:
        if (parse_count(v, 1 << 24, &n) != 0 || n == 0)
            return bad_value(c, arg, "a count from 1 to 16777216");
        *(key == KEY_MAX_PIECES ? &c->lim.max_open_pieces
          : key == KEY_MAX_SAVES ? &c->lim.max_saves
          : &c->lim.max_meta_keys) = (size_t)n;
        return 0;
    case KEY_MAX_META_BYTES:
        return parse_size(v, &c->lim.max_meta_bytes) == 0 &&
                       c->lim.max_meta_bytes > 0
                   ? 0 : bad_value(c, arg, "max_meta_bytes=N[K|M|G], N > 0");
    case KEY_FRAME:
        if (ckpt_write_opt_parse(&c->wo, "frame_size", v, NULL) != 0)
            return bad_value(c, arg, "frame_size=N[K|M|G] from 4K to 1G");
        return 0;
    case KEY_DELTA:
        if (strcmp(v, "latest") != 0)
            return bad_value(c, arg, "delta=latest");
        c->delta_latest = 1;
        return 0;
    default:
        if (parse_count(v, CKPT_MAX_THREADS, &n) != 0)
            return bad_value(c, arg, "threads=N with N from 0 (one per "
                             "CPU) to 4096 (CKPT_MAX_THREADS)");
        c->ro.threads = (int)n;
        c->wo.threads = (int)n;
        return 0;
    }
}

/* fuse_opt_parse's callback: keeps FUSE's options and MOUNTPOINT in args
 * for fuse_parse_cmdline and fuse_session_new, takes out the rest. */
static int cli_proc(void *data, const char *arg, int key,
                    struct fuse_args *outargs)
{
    cli *c = data;
    (void)outargs;
    switch (key) {
    case KEY_WORLD: case KEY_CODEC: case KEY_FRAME: case KEY_SYNC:
    case KEY_DELTA:
    case KEY_MAX_PIECES: case KEY_MAX_SAVES: case KEY_MAX_KEYS:
    case KEY_MAX_META_BYTES:
        if (!c->write_opt[0])
            snprintf(c->write_opt, sizeof c->write_opt, "%s", arg);
        return cli_option(c, arg, key);
    case KEY_CACHE: case KEY_PREFETCH: case KEY_THREADS: case KEY_ST_SHARD:
        return cli_option(c, arg, key);
    case KEY_RW:
        c->rw = 1;
        return 0;
    case KEY_RO:
        c->rw = 0;
        return 0;
    case KEY_FOLLOW:
        c->ro.follow_links = 1;
        return 0;
    case KEY_LOG: {
        const char *v = strchr(arg, '=') + 1;
        if (!*v || strlen(v) >= sizeof c->log)
            return bad_value(c, arg, "log=FILE");
        snprintf(c->log, sizeof c->log, "%s", v);
        return 0;
    }
    case KEY_HELP:
        c->help = 1;
        return 0;
    case KEY_VERSION:
        c->version = 1;
        return 0;
    case FUSE_OPT_KEY_NONOPT:
        if (!c->source) {
            c->source = arg;
            return 0;
        }
        if (c->nonopts++ == 0)
            return 1;
        fprintf(stderr, "ckptfs: unexpected argument '%s'\n", arg);
        c->bad = 1;
        return -1;
    default:
        return 1;
    }
}

static void print_help(void)
{
    printf("usage: ckptfs [options] SOURCE MOUNTPOINT\n"
           "\n"
           "Mounts the committed checkpoint SOURCE, or every checkpoint in "
           "the root\ndirectory SOURCE, read-only at MOUNTPOINT; with -o rw, "
           "new checkpoints are\nwritten there too (docs/MOUNT.md). "
           "Unmount with 'fusermount3 -u MOUNTPOINT'.\n"
           "\n"
           "SOURCE may be a ckptfs checkpoint (a directory with index.db), "
           "a PyTorch\ndistributed checkpoint (a directory with .metadata), "
           "a .safetensors file or a\ndirectory of them, or a root "
           "directory of any of these; the PyTorch and\nsafetensors ones "
           "are served read-only, as they are (docs/MOUNT.md, \"Foreign\n"
           "checkpoints\"). In a root, 'latest' points to the newest "
           "checkpoint\n(docs/MOUNT.md, \"latest\").\n"
           "\n"
           "ckptfs options:\n"
           "    -o cache_size=N[K|M|G] decoded-frame cache of each open "
           "checkpoint (256M)\n"
           "    -o prefetch=N          frames decoded ahead of a sequential "
           "reader (4; 0: off)\n"
           "    -o st_shard_size=N[K|M|G] tensor bytes per file of the "
           ".safetensors/ view\n"
           "                           (5000000000, as HF's \"5GB\")\n"
           "    -o threads=N           decoder (and encoder) threads per "
           "checkpoint (0: one per CPU)\n"
           "    -o rw,world=N          also write new checkpoints in the root "
           "SOURCE, each\n"
           "                           committed once its N ranks have "
           "written .ckptfs/commit\n"
           "    -o codec=C             codec of what is written (auto)\n"
           "    -o frame_size=N[K|M]   frame size of what is written (1M)\n"
           "    -o sync=commit|close   when pieces are fsynced (commit)\n"
           "    -o delta=latest        save each new checkpoint as a delta "
           "against the newest\n"
           "                           committed one (docs/MOUNT.md)\n"
           "    -o max_open_pieces=N   pieces one user may hold open for "
           "writing (512)\n"
           "    -o max_saves=N         saves in progress one user may start "
           "(64)\n"
           "    -o max_meta_keys=N     metadata keys of a save (4096)\n"
           "    -o max_meta_bytes=N[K|M] their bytes (1M)\n"
           "    -o follow_links        read checkpoint files that are "
           "symbolic links out of\n"
           "                           their directory (refused "
           "otherwise)\n"
           "    -o log=FILE            append the daemon's messages to FILE "
           "(with -f too;\n"
           "                           else stderr with -f, syslog in the "
           "background)\n"
           "                           (world, codec, frame_size, sync, "
           "delta, the max_\n"
           "                           options need -o rw)\n"
           "    -h   --help            print this help and exit\n"
           "    -V   --version         print the version and exit\n"
           "\n"
           "FUSE options:\n");
    fuse_cmdline_help();
    fuse_lowlevel_help();
}

static void usage_hint(void)
{
    fprintf(stderr, "usage: ckptfs [options] SOURCE MOUNTPOINT\n"
            "Try 'ckptfs --help' for more information.\n");
}

/* Parses argv into c (ckptfs's part) and fo (FUSE's).  Returns -1 to go
 * on mounting, or the exit status. */
static int parse_args(struct fuse_args *args, cli *c,
                      struct fuse_cmdline_opts *fo)
{
    if (fuse_opt_parse(args, c, cli_opts, cli_proc) != 0) {
        if (!c->bad)
            fprintf(stderr, "ckptfs: cannot parse the command line\n");
        usage_hint();
        return EXIT_USAGE;
    }
    if (c->help) {
        print_help();
        return EXIT_SUCCESS;
    }
    if (c->version) {
        printf("ckptfs (ckptfs) %s\nFUSE library version %s\n",
               ckpt_version(), fuse_pkgversion());
        return EXIT_SUCCESS;
    }
    if (fuse_parse_cmdline(args, fo) != 0)
        return EXIT_FAILURE;     /* libfuse said why: a bad MOUNTPOINT */
    if (c->rw && c->world == 0) {
        fprintf(stderr, "ckptfs: -o rw needs -o world=N, the number of "
                "ranks that commit each save\n");
        usage_hint();
        return EXIT_USAGE;
    }
    if (!c->rw && c->write_opt[0]) {
        fprintf(stderr, "ckptfs: -o %s is an option of writing: it needs "
                "-o rw (without it the mount is read-only)\n", c->write_opt);
        usage_hint();
        return EXIT_USAGE;
    }
    if (!c->source || !fo->mountpoint) {
        fprintf(stderr, "ckptfs: missing %s\n",
                c->source ? "MOUNTPOINT" : "SOURCE and MOUNTPOINT");
        usage_hint();
        return EXIT_USAGE;
    }
    return -1;
}

/* Mount options ckptfs adds before the user's (so those win): read-only,
 * "fuse.ckptfs" as the type and SOURCE as the device in /proc/mounts, and
 * default_permissions: the kernel checks every access against the owner
 * and mode the mount shows, which are those of the files read (so with
 * allow_other nobody reads through the mount what they could not read on
 * the disk). */
static int add_mount_defaults(struct fuse_args *args, const char *source,
                              int rw)
{
    char *opts = NULL, *fsname = NULL, *arg = NULL;
    int rc = -1;
    if (asprintf(&fsname, "fsname=%s", source) >= 0 &&
        fuse_opt_add_opt(&opts, rw ? "rw" : "ro") == 0 &&
        fuse_opt_add_opt(&opts, "subtype=ckptfs") == 0 &&
        fuse_opt_add_opt(&opts, "default_permissions") == 0 &&
        fuse_opt_add_opt_escaped(&opts, fsname) == 0 &&
        asprintf(&arg, "-o%s", opts) >= 0)
        rc = fuse_opt_insert_arg(args, 1, arg);
    free(fsname);
    free(opts);
    free(arg);
    return rc;
}

/* ------------------------------------------------------------ readahead */

/* The readahead ckptfs asks for: FUSE's largest request (256 pages with
 * libfuse 3.14), and the library's default frame size. */
#define READAHEAD_KB 1024

/* find_mount's search: the last mount on `point`. */
typedef struct mount_search {
    const char *point;
    ckpt_mount *found;
    int hit;
} mount_search;

static int match_point(const ckpt_mount *m, void *arg)
{
    mount_search *s = arg;
    if (strcmp(m->point, s->point) == 0) {
        *s->found = *m;
        s->hit = 1;
    }
    return 0;
}

/* The file system mounted last on mountpoint (the one that is seen there),
 * from /proc/self/mountinfo, without touching the mount itself (which may
 * not answer yet, or ever).  0, -ENOENT when nothing is mounted there. */
static int find_mount(const char *mountpoint, ckpt_mount *m)
{
    mount_search s = { mountpoint, m, 0 };
    int rc = ckpt_mountinfo_each(match_point, &s);
    return rc ? rc : s.hit ? 0 : -ENOENT;
}

/* Refuses a MOUNTPOINT where a ckptfs is mounted already: a second mount
 * would hide the first (and pile up with each retry of a script).  Other
 * file systems there (a container's volume) may be mounted over. */
static int check_mountpoint(const char *mountpoint)
{
    ckpt_mount m;
    if (find_mount(mountpoint, &m) != 0 || strcmp(m.fstype, "fuse.ckptfs"))
        return 0;
    fprintf(stderr, "ckptfs: %s is already a ckptfs mount (of %s); unmount "
            "it first: fusermount3 -u %s\n", mountpoint, m.source,
            mountpoint);
    return -1;
}

/* Raises the mount's readahead to READAHEAD_KB so that sequential reads
 * come in requests of 1 MiB rather than the kernel's default 128 KiB
 * (op_init then keeps it).  Best effort: writing sysfs needs root; a
 * failure is only reported with -d. */
static void raise_readahead(const char *mountpoint, int debug)
{
    char path[128];
    ckpt_mount m;
    int rc = find_mount(mountpoint, &m);
    if (rc == 0 && strncmp(m.fstype, "fuse", 4) != 0)
        rc = -ENOENT;
    if (rc == 0)
        snprintf(path, sizeof path, "/sys/class/bdi/%s/read_ahead_kb", m.dev);
    FILE *f = rc == 0 ? fopen(path, "r+") : NULL;
    unsigned long kb = 0;
    if (f && fscanf(f, "%lu", &kb) == 1 && kb < READAHEAD_KB) {
        rewind(f);
        fprintf(f, "%d\n", READAHEAD_KB);
    }
    if ((!f || fclose(f) != 0) && debug)
        fuse_log(FUSE_LOG_DEBUG, "ckptfs: readahead left at the kernel's "
                 "default (%s)\n", rc ? strerror(-rc) : strerror(errno));
}

/* ------------------------------------------------------------ running */

/* Once daemonized, messages go to syslog (fuse_log levels are syslog's). */
static void log_to_syslog(enum fuse_log_level level, const char *fmt,
                          va_list ap)
{
    vsyslog((int)level, fmt, ap);
}

/* -o log=FILE: fuse_log has no argument for its function, so the file is
 * the daemon's one piece of global state (set once, before any thread). */
static FILE *log_file;

/* A line "YYYY-MM-DDTHH:MM:SS [PID] MESSAGE" appended to FILE (one
 * write per message, so lines of threads never mix). */
static void log_to_file(enum fuse_log_level level, const char *fmt,
                        va_list ap)
{
    (void)level;
    char line[4096], when[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S",
             localtime_r(&now, &tm));
    int n = snprintf(line, sizeof line, "%s [%ld] ", when, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof line)
        return;
    int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    if (m < 0)
        return;
    size_t len = (size_t)n + (size_t)m < sizeof line - 1
                 ? (size_t)n + (size_t)m : sizeof line - 2;
    if (line[len - 1] != '\n')
        line[len++] = '\n';
    fwrite(line, 1, len, log_file);
    fflush(log_file);
}

/* Opens FILE for -o log=FILE (before daemonizing changes directory). */
static int open_log(const char *path)
{
    log_file = fopen(path, "ae");
    if (!log_file) {
        fprintf(stderr, "ckptfs: cannot open the log file %s: %s\n", path,
                strerror(errno));
        return -1;
    }
    setvbuf(log_file, NULL, _IOFBF, 8192);
    fuse_set_log_func(log_to_file);
    return 0;
}

static int loop(struct fuse_session *se, const struct fuse_cmdline_opts *fo)
{
    if (fo->singlethread)
        return fuse_session_loop(se);
    /* libfuse's defaults unless -o clone_fd or -o max_idle_threads=N
     * (its "unset" idle count is refused when passed back explicitly). */
    if (!fo->clone_fd && fo->max_idle_threads == UINT_MAX)
        return fuse_session_loop_mt(se, NULL);
    struct fuse_loop_config cfg = {
        .clone_fd = fo->clone_fd,
        .max_idle_threads = fo->max_idle_threads,
    };
    return fuse_session_loop_mt(se, &cfg);
}

/* Mounts, serves until unmounted or signalled, unmounts.  Returns the
 * exit status. */
static int serve(struct fuse_args *args, const struct fuse_cmdline_opts *fo,
                 fs_ctx *ctx)
{
    struct fuse_lowlevel_ops ops;
    ops_fill(&ops);
    struct fuse_session *se = fuse_session_new(args, &ops, sizeof ops, ctx);
    if (!se)
        return EXIT_USAGE;     /* libfuse said why (an unknown option) */
    int status = EXIT_FAILURE;
    if (fuse_set_signal_handlers(se) != 0)
        goto out;
    if (fuse_session_mount(se, fo->mountpoint) != 0)
        goto out_signals;
    raise_readahead(fo->mountpoint, fo->debug);
    if (!fo->foreground && !log_file) {
        openlog("ckptfs", LOG_PID, LOG_DAEMON);
        fuse_set_log_func(log_to_syslog);
    }
    if (fuse_daemonize(fo->foreground) == 0)
        status = loop(se, fo) < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
    fuse_session_unmount(se);
out_signals:
    fuse_remove_signal_handlers(se);
out:
    fuse_session_destroy(se);   /* every worker thread has ended */
    return status;
}

/* The daemon decodes frames of up to 1 MiB into buffers that live briefly.
 * With glibc's default mmap threshold each of them is a fresh mmap, and
 * filling it costs ~256 page faults: keep such buffers in the heap and let
 * freed ones be reused (measured: half the faults, a third less CPU per
 * GiB read). */
static void tune_allocator(void)
{
    /* Tuning only: if glibc refuses, its defaults are merely slower. */
    (void)mallopt(M_MMAP_THRESHOLD, 64 << 20);
    (void)mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

int main(int argc, char **argv)
{
    tune_allocator();
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct fuse_cmdline_opts fo;
    cli c = { 0 };
    memset(&fo, 0, sizeof fo);
    ckpt_read_opts_init(&c.ro);
    ckpt_write_opts_init(&c.wo);
    c.wo.sync = 0;             /* -o sync=commit, the default */
    wl_limits_default(&c.lim);
    int status = parse_args(&args, &c, &fo);
    if (status >= 0)
        goto out;
    if (check_mountpoint(fo.mountpoint) != 0 ||
        (c.log[0] && open_log(c.log) != 0)) {
        status = EXIT_FAILURE;
        goto out;
    }
    fs_ctx ctx;
    ckpt_error err = { 0 };
    fs_ctx_init(&ctx);
    if (source_open(&ctx.src, c.source, &c.ro, c.rw, &err) != 0 ||
        (c.rw && ws_set_new(&ctx.ws, source_path(ctx.src), c.world, &c.wo,
                            &c.lim, &err) != 0)) {
        fprintf(stderr, "ckptfs: %s\n", err.msg);
        fs_ctx_destroy(&ctx);
        source_free(ctx.src);
        status = EXIT_FAILURE;
        goto out;
    }
    if (c.rw && c.delta_latest)
        ws_set_delta_latest(ctx.ws);
    if (c.st_shard)
        source_set_st_shard(ctx.src, c.st_shard);
    if (add_mount_defaults(&args, source_path(ctx.src), c.rw) != 0) {
        fprintf(stderr, "ckptfs: out of memory\n");
        status = EXIT_FAILURE;
    } else {
        status = serve(&args, &fo, &ctx);
    }
    fs_ctx_destroy(&ctx);     /* files still open when the session ended */
    ws_set_free(ctx.ws);
    source_free(ctx.src);
out:
    if (log_file)
        fclose(log_file);
    free(fo.mountpoint);
    fuse_opt_free_args(&args);
    return status;
}
