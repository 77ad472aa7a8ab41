/*
 * cmd_gc.c - `ckpt gc`: removes the unfinished saves of a root that no
 * writer is working on (no lease held, idle longer than --min-age), the
 * debris of interrupted commits and gcs, and, with --keep-last or
 * --keep-every, the committed checkpoints a retention policy lets go.
 * The library's gc module (src/write/gc.c) does the removing, always by
 * renaming out of the way first; this file picks the candidates and
 * reports what it did and why it kept what it kept.
 *
 * Before removing an unfinished save it checks that the directory looks
 * like a save and nothing more: no index.db anywhere inside it (a
 * committed checkpoint is never removed as a save, even nested) and no
 * top-level subdirectory other than data/ and .pending/ (so a root that
 * merely holds a checkpoint named "data" is not mistaken for a save).
 * Symbolic links are never followed.
 */
#include "cli.h"
#include "mounthint.h"
#include "common/fileio.h"
#include "write/gc.h"
#include "format/lease.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Default grace period of an unfinished save: one hour of no activity. */
#define DEFAULT_MIN_AGE_S 3600
/* The least idle time of an unfinished save gc removes on a file system
 * whose locks may not reach other nodes, unless --trust-locks: three
 * lease heartbeats, so that a live save elsewhere, which only its
 * heartbeat shows there, is never taken for abandoned. */
#define UNTRUSTED_MIN_AGE_NS (3LL * CKPT_LEASE_BEAT_MS * 1000000LL)

static const cli_help HELP = {
    "gc",
    "ckpt gc [--dry-run] [--min-age AGE] [--keep-last N] [--keep-every K] "
    "ROOT",
    "Removes, from the root ROOT (a directory of checkpoints):\n"
    "  - unfinished saves (data/ or .pending/ but no index.db) that no\n"
    "    writer or committer holds a lease on and that nobody has written to\n"
    "    for --min-age (default 1h): the saves of crashed or killed jobs;\n"
    "  - what interrupted commits, saves and gcs left (a .pending/ in a\n"
    "    committed checkpoint, hidden .ckpt-gc.* and .ckpt-new.* directories,\n"
    "    a committed save's plans moved aside: .ckpt-gc.plans.*);\n"
    "  - with --keep-last or --keep-every, the committed checkpoints that\n"
    "    retention does not keep, oldest first.  The newest checkpoint (the\n"
    "    one `latest` points to) is always kept.\n"
    "Prints 'removed NAME: why' for each (with --dry-run 'would remove NAME:\n"
    "why'), and 'kept NAME: why' for each unfinished save it keeps.\n"
    "Everything is renamed out of the way before it is deleted, so readers\n"
    "and listings never see a half-removed checkpoint.  ROOT may also be a\n"
    "single unfinished save.  Never touches unrelated directories or\n"
    "symbolic links; a directory holding anything but a save's files is\n"
    "skipped with a warning (exit 1).\n"
    "\n"
    "Checkpoints are ordered as `latest` orders them: by their `step`\n"
    "metadata, or else the number in their name (step-000300), then by\n"
    "commit time.\n"
    "\n"
    "Options:\n"
    "  -n, --dry-run        only print what would be removed and what is kept\n"
    "  -a, --min-age AGE    idle time before an unfinished save without a\n"
    "                       lease is removed: N[s|m|h|d] (default 1h; 0 trusts\n"
    "                       the leases alone; on NFS or FUSE file systems,\n"
    "                       whose locks may not reach other nodes, at least\n"
    "                       3 lease heartbeats (1m30s) unless --trust-locks)\n"
    "  -t, --trust-locks    trust the file system's locks where gc would not\n"
    "                       (its NFS or FUSE locks do reach every node)\n"
    "  -l, --keep-last N    keep the N newest committed checkpoints (N >= 1),\n"
    "                       remove older ones\n"
    "  -e, --keep-every K   also keep every checkpoint whose step is a\n"
    "                       multiple of K (with it alone, --keep-last is 1)\n"
    "  -h, --help           show this help\n",
};

typedef struct gc_opts {
    int dry_run;
    int trust_locks;         /* --trust-locks */
    int guarded;             /* min_age_ns raised: locks not trusted */
    int64_t min_age_ns;
    int retain;              /* --keep-last or --keep-every given */
    int keep_last;
    int64_t keep_every;
} gc_opts;

/* 1 when name is "." or "..". */
static int dot_or_dotdot(const char *name)
{
    return strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

/* Looks under at/name for an index.db; sets *found to its path.
 * Returns 0 or a negative errno. */
static int find_index_at(int at, const char *name, char *found, size_t cap,
                         const char *shown)
{
    int rc = 0;
    DIR *d = cli_opendir_at(at, name, &rc);
    if (!d)
        return rc;
    int fd = dirfd(d);
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

/* ------------------------------------------------------------ durations */

/* "90", "90s", "15m", "1h", "2d" into nanoseconds. */
static int parse_age(const char *s, int64_t *ns)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    int64_t unit = 1;
    switch (*end) {
    case '\0': case 's': unit = 1; break;
    case 'm': unit = 60; break;
    case 'h': unit = 3600; break;
    case 'd': unit = 86400; break;
    default: return -EINVAL;
    }
    if (errno || (*end && end[1]) || v > INT64_MAX / 1000000000LL / unit)
        return -EINVAL;
    *ns = (int64_t)v * unit * 1000000000LL;
    return 0;
}

/* "45s", "12m05s", "3h07m", "2d04h". */
static void fmt_age(char *buf, size_t cap, int64_t ns)
{
    int64_t s = ns > 0 ? ns / 1000000000LL : 0;
    if (s < 60)
        snprintf(buf, cap, "%" PRId64 "s", s);
    else if (s < 3600)
        snprintf(buf, cap, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
    else if (s < 86400)
        snprintf(buf, cap, "%" PRId64 "h%02" PRId64 "m", s / 3600,
                 s / 60 % 60);
    else
        snprintf(buf, cap, "%" PRId64 "d%02" PRId64 "h", s / 86400,
                 s / 3600 % 24);
}

static const char *removed(const gc_opts *o)
{
    return o->dry_run ? "would remove" : "removed";
}

/* ------------------------------------------------------------ unfinished */

/* Reports what ckpt_gc_unfinished decided about `shown`. */
static void report_unfinished(const gc_opts *o, const char *shown,
                              const ckpt_gc_result *r)
{
    char idle[32], age[32];
    fmt_age(idle, sizeof idle, r->idle_ns);
    fmt_age(age, sizeof age, o->min_age_ns);
    switch (r->why) {
    case CKPT_GC_REMOVED:
        printf("%s %s: unfinished save, %s, idle %s\n", removed(o), shown,
               r->locks ? "no writer holds its lease"
                        : "no heartbeat (this file system has no locks)",
               idle);
        break;
    case CKPT_GC_LIVE:
        printf("kept %s: save in progress (a writer or committer holds its "
               "lease; last written %s ago)\n", shown, idle);
        break;
    case CKPT_GC_YOUNG:
        if (o->guarded)
            printf("kept %s: unfinished save written %s ago, less than %s "
                   "(no lease seen, but this file system's locks may not "
                   "reach the node writing it; if its job is gone, "
                   "--trust-locks --min-age 0 removes it now)\n", shown,
                   idle, age);
        else
            printf("kept %s: unfinished save written %s ago, less than "
                   "--min-age %s (no writer holds its lease; if its job is "
                   "gone, --min-age 0 removes it now)\n", shown, idle, age);
        break;
    case CKPT_GC_COMMITTED:
        printf("kept %s: it was committed meanwhile\n", shown);
        break;
    case CKPT_GC_ALL_IN:
        printf("kept %s: all %d ranks are in but its commit was cut short; "
               "read its .ckptfs/status through a writable mount, or run "
               "`ckpt commit --world %d %s`, to finish it\n", shown,
               r->world, r->world, shown);
        break;
    }
}

/* The unfinished save root/name (shown as `shown`). */
static int collect_unfinished(const gc_opts *o, const char *root,
                              const char *name, const char *shown)
{
    char *path = cli_path_join(root, name);
    if (!path)
        return cli_fail("out of memory");
    int rc = check_removable(path);
    free(path);
    if (rc)
        return rc;
    ckpt_gc_result r;
    ckpt_error err = { 0 };
    if (ckpt_gc_unfinished(root, name, o->min_age_ns, o->dry_run, &r, &err))
        return cli_fail("cannot remove %s: %s", shown, err.msg);
    report_unfinished(o, shown, &r);
    return CLI_OK;
}

/* ------------------------------------------------------------ committed */

/* The committed checkpoints of a root, for retention. */
typedef struct committed {
    ckpt_retain_item *v;
    size_t n, cap;
} committed;

static void committed_free(committed *c)
{
    for (size_t i = 0; i < c->n; i++) {
        free((char *)c->v[i].name);
        ckpt_retain_item_free_bases(&c->v[i]);
    }
    free(c->v);
}

/* Removes what an interrupted commit left in root/name. */
static int tidy(const gc_opts *o, const char *root, const char *name)
{
    int found = 0;
    ckpt_error err = { 0 };
    int rc = ckpt_gc_tidy(root, name, o->dry_run, &found, &err);
    if (rc == -EBUSY)
        return CLI_OK;           /* its committer is finishing */
    if (rc)
        return cli_fail("cannot tidy %s: %s", name, err.msg);
    if (found)
        printf("%s %s/%s: what its commit left behind\n", removed(o), name,
               found == CKPT_GC_TIDY_PENDING ? ".pending"
               : found == CKPT_GC_TIDY_TMP ? "index.db.tmp"
               : ".pending and index.db.tmp");
    return CLI_OK;
}

/* Adds root/name to the checkpoints retention considers. */
static int add_committed(committed *c, const char *root, const char *name)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        ckpt_retain_item *v = realloc(c->v, cap * sizeof *v);
        if (!v)
            return cli_fail("out of memory");
        c->v = v;
        c->cap = cap;
    }
    ckpt_retain_item *it = &c->v[c->n];
    memset(it, 0, sizeof *it);
    char *path = cli_path_join(root, name);
    if (!path || !(it->name = strdup(name))) {
        free(path);
        return cli_fail("out of memory");
    }
    ckpt_error err = { 0 };
    int rc = ckpt_retain_probe(path, it, &err);
    if (rc == 0)
        rc = ckpt_retain_bases(path, it, &err);
    free(path);
    if (rc) {
        free((char *)it->name);
        return cli_fail("skipping %s: its index cannot be read, so "
                        "retention leaves it: %s", name, err.msg);
    }
    c->n++;
    return CLI_OK;
}

static void print_kept(const gc_opts *o, const ckpt_retain_item *it,
                       ckpt_retain_why why, const ckpt_retain_item *user)
{
    if (why == CKPT_RETAIN_BASE)
        printf("kept %s: a base of %s, a delta checkpoint kept (its frames "
               "refer to %s's)\n", it->name, user->name, it->name);
    else if (why == CKPT_RETAIN_LATEST)
        printf("kept %s: the newest checkpoint (latest)\n", it->name);
    else if (why == CKPT_RETAIN_LAST)
        printf("kept %s: one of the %d newest (--keep-last)\n", it->name,
               o->keep_last);
    else
        printf("kept %s: step %" PRId64 " is a multiple of --keep-every %"
               PRId64 "\n", it->name, it->key, o->keep_every);
}

/* Retires the committed checkpoints that retention does not keep. */
static int retain(const gc_opts *o, const char *root, committed *c)
{
    ckpt_retain_why *why = calloc(c->n ? c->n : 1, sizeof *why);
    size_t *user = calloc(c->n ? c->n : 1, sizeof *user);
    if (!why || !user || ckpt_retain_select(c->v, c->n, o->keep_last,
                                            o->keep_every, why)) {
        free(why);
        free(user);
        return cli_fail("out of memory");
    }
    ckpt_retain_keep_bases(c->v, c->n, why, user);
    int rc = CLI_OK;
    for (size_t i = 0; i < c->n; i++) {
        const ckpt_retain_item *it = &c->v[i];
        if (why[i] != CKPT_RETAIN_DROP) {
            if (o->dry_run || why[i] == CKPT_RETAIN_BASE)
                print_kept(o, it, why[i], &c->v[user[i]]);
            continue;
        }
        ckpt_error err = { 0 };
        if (!o->dry_run && ckpt_gc_retire(root, it->name, &err)) {
            rc = cli_fail("cannot remove %s: %s", it->name, err.msg);
            continue;
        }
        char step[40] = "no step";
        if (it->has_key)
            snprintf(step, sizeof step, "step %" PRId64, it->key);
        printf("%s %s: committed checkpoint (%s), not among the %d newest%s\n",
               removed(o), it->name, step, o->keep_last,
               o->keep_every > 0 ? " nor a multiple of --keep-every" : "");
        fflush(stdout);
    }
    free(why);
    free(user);
    return rc;
}

/* ------------------------------------------------------------ roots */

/* One entry of a root: CLI_OK when it is none of gc's business or was
 * handled. */
static int collect_entry(const gc_opts *o, const char *root,
                         const char *name, committed *c)
{
    struct stat st;
    char *path = cli_path_join(root, name);
    if (!path)
        return cli_fail("out of memory");
    int rc = CLI_OK;
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        free(path);
        return CLI_OK;
    }
    if (ckpt_gc_is_retired(name)) {
        ckpt_error err = { 0 };
        if (!o->dry_run && ckpt_remove_tree(path, &err))
            rc = cli_fail("cannot remove %s: %s", name, err.msg);
        else
            printf("%s %s: %s\n", removed(o), name,
                   strncmp(name, CKPT_SPENT_PREFIX,
                           strlen(CKPT_SPENT_PREFIX)) == 0
                       ? "the plans of a committed save"
                       : "what an interrupted gc left");
    } else if (strncmp(name, CKPT_NEW_PREFIX, strlen(CKPT_NEW_PREFIX)) == 0) {
        /* A save's directory being made: its maker holds no lease yet. */
        gc_opts no = *o;
        int64_t floor = (int64_t)CKPT_NEW_MIN_AGE_S * 1000000000LL;
        if (!ckpt_new_maker_gone(name) && no.min_age_ns < floor)
            no.min_age_ns = floor;
        rc = collect_unfinished(&no, root, name, name);
    } else {
        switch (ckpt_dir_probe(path)) {
        case CKPT_DIR_PENDING:
            rc = collect_unfinished(o, root, name, name);
            break;
        case CKPT_DIR_COMMITTED:
            rc = tidy(o, root, name);
            if (o->retain && add_committed(c, root, name) != CLI_OK)
                rc = CLI_FAIL;
            break;
        default:
            break;
        }
    }
    free(path);
    fflush(stdout);
    return rc;
}

static int cmp_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int collect_root(const gc_opts *o, const char *root)
{
    struct dirent **ents;
    committed c = { 0 };
    int n = scandir(root, &ents, NULL, cmp_name);
    if (n < 0)
        return cli_fail("cannot read %s: %s", root, strerror(errno));
    int rc = CLI_OK;
    for (int i = 0; i < n; i++) {
        if (!dot_or_dotdot(ents[i]->d_name) &&
            collect_entry(o, root, ents[i]->d_name, &c) != CLI_OK)
            rc = CLI_FAIL;
        free(ents[i]);
    }
    free(ents);
    if (o->retain && retain(o, root, &c) != CLI_OK)
        rc = CLI_FAIL;
    committed_free(&c);
    return rc;
}

/* ROOT given as one unfinished save: its parent is the root. */
static int collect_single(const gc_opts *o, const char *given)
{
    if (o->retain)
        return cli_fail("%s is an unfinished save, not a root: --keep-last "
                        "and --keep-every need a root", given);
    char *a = strdup(given), *b = strdup(given);
    if (!a || !b) {
        free(a);
        free(b);
        return cli_fail("out of memory");
    }
    size_t n = strlen(b);
    while (n > 1 && b[n - 1] == '/')
        b[--n] = '\0';
    int rc = collect_unfinished(o, dirname(a), basename(b), given);
    free(a);
    free(b);
    return rc;
}

/* 1 for a file system type whose locks may not reach other nodes: NFS
 * before version 4 (lockd may be missing; "nfs4" carries locks), FUSE
 * (network file systems in user space, most without shared locks), 9p. */
static int locks_untrusted(const char *fstype)
{
    return strcmp(fstype, "nfs") == 0 || strcmp(fstype, "fuse") == 0 ||
           strncmp(fstype, "fuse.", 5) == 0 || strcmp(fstype, "9p") == 0;
}

/* On a file system whose locks gc cannot trust, warns and raises the
 * least idle time of a save it removes to UNTRUSTED_MIN_AGE_NS. */
static void guard_untrusted_locks(gc_opts *o, const char *root)
{
    char fstype[256], age[32];
    if (o->trust_locks || cli_fstype(root, fstype, sizeof fstype) != 0 ||
        !locks_untrusted(fstype))
        return;
    int raised = o->min_age_ns < UNTRUSTED_MIN_AGE_NS;
    if (raised) {
        o->min_age_ns = UNTRUSTED_MIN_AGE_NS;
        o->guarded = 1;
    }
    fmt_age(age, sizeof age, o->min_age_ns);
    fprintf(stderr, "ckpt: warning: %s is on a %s file system, whose locks "
            "may not reach other nodes: a save written on another node may "
            "hold a lease gc cannot see, and only its heartbeat (every %ds) "
            "shows it live; unfinished saves idle less than %s are kept%s "
            "(--trust-locks if this file system's locks reach every node)\n",
            root, fstype, CKPT_LEASE_BEAT_MS / 1000, age,
            raised ? ", whatever --min-age says" : "");
}

static int collect(const gc_opts *o, const char *root)
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
        return collect_single(o, root);
    default:
        return collect_root(o, root);
    }
}

int cmd_gc(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "dry-run", no_argument, NULL, 'n' },
        { "min-age", required_argument, NULL, 'a' },
        { "trust-locks", no_argument, NULL, 't' },
        { "keep-last", required_argument, NULL, 'l' },
        { "keep-every", required_argument, NULL, 'e' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    gc_opts o = { .min_age_ns = (int64_t)DEFAULT_MIN_AGE_S * 1000000000LL };
    long v;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hnta:l:e:", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            return cli_help_print(&HELP);
        case 'n':
            o.dry_run = 1;
            break;
        case 't':
            o.trust_locks = 1;
            break;
        case 'a':
            if (parse_age(optarg, &o.min_age_ns))
                return cli_usage(&HELP, "--min-age takes a duration such as "
                                 "0, 90s, 15m, 1h or 2d, not '%s'", optarg);
            break;
        case 'l':
            if (cli_parse_long(optarg, 1, 1L << 30, &v))
                return cli_usage(&HELP, "--keep-last takes a count of at "
                                 "least 1, not '%s'", optarg);
            o.keep_last = (int)v;
            o.retain = 1;
            break;
        case 'e':
            if (cli_parse_long(optarg, 1, 1L << 62, &v))
                return cli_usage(&HELP, "--keep-every takes a step count of "
                                 "at least 1, not '%s'", optarg);
            o.keep_every = v;
            o.retain = 1;
            break;
        default:
            return cli_bad_option(&HELP, c, argv);
        }
    }
    if (o.retain && o.keep_last == 0)
        o.keep_last = 1;
    int rc = cli_want_args(&HELP, argc - optind, 1, 1);
    if (rc)
        return rc;
    guard_untrusted_locks(&o, argv[optind]);
    rc = collect(&o, argv[optind]);
    if (fflush(stdout) != 0 && rc == CLI_OK)
        rc = cli_fail("cannot write to stdout: %s", strerror(errno));
    return rc;
}
