/*
 * cmd_info.c - `ckpt info`: the summary of a checkpoint (metadata, tensors
 * with their codecs and ratios, raw and stored bytes, ratio, codecs, shard
 * files), or every detail of one tensor down to its chunks and frames.
 */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const cli_help HELP = {
    "info",
    "ckpt info CKPT [FQN]",
    "Without FQN, prints the checkpoint's summary:\n"
    "  metadata:            then one '  KEY = VALUE' line per key\n"
    "  tensors: N           then one '  FQN DTYPE CODECS RATIO' line per\n"
    "                       tensor, in FQN order (CODECS as below, RATIO\n"
    "                       its raw_bytes / stored_bytes)\n"
    "  raw_bytes: N         total bytes of the tensors' images\n"
    "  stored_bytes: N      total bytes of their frames in shard files\n"
    "  ratio: X.XX          raw_bytes / stored_bytes ('-' if 0)\n"
    "  codecs: raw+zstd     the codecs frames use\n"
    "  shards: N            then one '  FILE BYTES' line per shard file\n"
    "                       (BYTES is 'missing' for a file that is gone)\n"
    "With FQN, prints the tensor's fqn, dtype, shape, numel, raw_bytes,\n"
    "stored_bytes, ratio, codecs and chunks, then per chunk\n"
    "  chunk I: offsets=.. sizes=.. file=.. frames=N raw_bytes=N "
    "stored_bytes=N\n"
    "and per frame of the chunk\n"
    "  frame J: file_offset=N stored=N raw_offset=N raw_size=N codec=NAME "
    "checksum=HEX\n"
    "(offsets within the shard file and within the chunk's row-major image;\n"
    "the checksum is the XXH3-64 of the frame's raw bytes).\n"
    "\n"
    CLI_HELP_SOURCES
    "In PyTorch and safetensors checkpoints, frames are byte ranges of the\n"
    "original files (codec raw, checksum 0000000000000000: they carry none).\n"
    "\n"
    "Options:\n"
    "  --follow-links  read files that are symbolic links out of the\n"
    "                  checkpoint (refused otherwise; docs/TRUST.md)\n"
    "  -h, --help      show this help\n",
};

/* A sorted set of strings (codec names, shard files). */
typedef struct strset {
    char **v;
    size_t n, cap;
} strset;

static int strset_add(strset *s, const char *str, size_t len)
{
    for (size_t i = 0; i < s->n; i++)
        if (strlen(s->v[i]) == len && strncmp(s->v[i], str, len) == 0)
            return 0;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        char **v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    char *copy = strndup(str, len);
    if (!copy)
        return -ENOMEM;
    s->v[s->n++] = copy;
    return 0;
}

/* 1 when a tensor's codec list names no codec (it has no frames). */
static int no_codecs(const char *list)
{
    return !list || !*list || strcmp(list, "none") == 0;
}

/* Adds each name of a '+'-joined list ("raw+zstd"). */
static int strset_add_list(strset *s, const char *list)
{
    if (no_codecs(list))
        return 0;
    while (*list) {
        size_t len = strcspn(list, "+");
        if (len && strset_add(s, list, len))
            return -ENOMEM;
        list += len;
        if (*list == '+')
            list++;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void strset_sort(strset *s)
{
    if (s->n)
        qsort(s->v, s->n, sizeof *s->v, cmp_str);
}

static void strset_free(strset *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
}

/* Prints a name or value read from the checkpoint, escaped (cli_escape). */
static void put_text(const char *s)
{
    char *e = cli_escape(s);
    fputs(e ? e : "?", stdout);
    free(e);
}

/* Prints the set joined by '+', or "-" when empty. */
static void print_joined(const char *label, const strset *s)
{
    printf("%s: ", label);
    for (size_t i = 0; i < s->n; i++)
        printf("%s%s", i ? "+" : "", s->v[i]);
    printf("%s\n", s->n ? "" : "-");
}

/* ------------------------------------------------------------ summary */

static void print_metadata(const ckpt_reader *r)
{
    printf("metadata:\n");
    for (size_t i = 0; i < ckpt_reader_meta_count(r); i++) {
        const char *k, *v;
        if (ckpt_reader_meta_at(r, i, &k, &v) != 0)
            continue;
        fputs("  ", stdout);
        put_text(k);
        fputs(" = ", stdout);
        put_text(v);
        fputs("\n", stdout);
    }
}

/* Prints "tensors: N", then per tensor its dtype, codecs and ratio. */
static int print_tensor_lines(const ckpt_reader *r)
{
    printf("tensors: %zu\n", ckpt_reader_count(r));
    for (size_t i = 0; i < ckpt_reader_count(r); i++) {
        ckpt_tensor_info t;
        if (ckpt_reader_info(r, i, &t) != 0)
            return cli_fail("cannot read tensor %zu", i);
        char ratio[32];
        cli_format_ratio(ratio, sizeof ratio, t.nbytes, t.stored_bytes);
        fputs("  ", stdout);
        put_text(t.fqn);
        printf(" %s %s %s\n", ckpt_dtype_name(t.dtype),
               no_codecs(t.codecs) ? "-" : t.codecs, ratio);
    }
    return CLI_OK;
}

/* Collects the totals, codecs and shard files of all tensors. */
static int collect(const ckpt_reader *r, uint64_t *raw, uint64_t *stored,
                   strset *codecs, strset *files)
{
    for (size_t i = 0; i < ckpt_reader_count(r); i++) {
        ckpt_tensor_info t;
        if (ckpt_reader_info(r, i, &t) != 0)
            return cli_fail("cannot read tensor %zu", i);
        *raw += t.nbytes;
        *stored += t.stored_bytes;
        if (strset_add_list(codecs, t.codecs))
            return cli_fail("out of memory");
        for (size_t c = 0; c < t.nchunks; c++) {
            ckpt_chunk_info ch;
            if (ckpt_reader_chunk(r, i, c, &ch) != 0)
                return cli_fail("tensor '%s': cannot read chunk %zu", t.fqn,
                                c);
            if (strset_add(files, ch.file, strlen(ch.file)))
                return cli_fail("out of memory");
        }
    }
    return CLI_OK;
}

/* Adds the shard files present in CKPT/data (a writer that stored no piece
 * still has one), as "data/<name>.shard". */
static int add_shard_files(const char *ckpt, strset *files)
{
    char *dir = cli_path_join(ckpt, "data");
    if (!dir)
        return cli_fail("out of memory");
    /* not through a symbolic link (docs/TRUST.md) */
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    free(dir);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return CLI_OK;   /* a missing data/ shows as missing files */
    }
    int rc = CLI_OK;
    struct dirent *e;
    while (rc == CLI_OK && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        char rel[NAME_MAX + 8];
        if (n <= 6 || strcmp(e->d_name + n - 6, ".shard") != 0)
            continue;
        snprintf(rel, sizeof rel, "data/%s", e->d_name);
        if (strset_add(files, rel, strlen(rel)))
            rc = cli_fail("out of memory");
    }
    closedir(d);
    return rc;
}

/* Each file's size now, looked at as the reader opens it (a symbolic
 * link out of the checkpoint is not followed: "refused"). */
static void print_shards(const ckpt_reader *r, const strset *files)
{
    printf("shards: %zu\n", files->n);
    for (size_t i = 0; i < files->n; i++) {
        struct stat st;
        int rc = ckpt_reader_file_stat(r, files->v[i], &st, NULL);
        fputs("  ", stdout);
        put_text(files->v[i]);
        if (rc == 0)
            printf(" %" PRIu64 "\n", (uint64_t)st.st_size);
        else
            printf(" %s\n", rc == -ENOENT ? "missing" : "refused");
    }
}

static int print_summary(const ckpt_reader *r, const char *ckpt)
{
    uint64_t raw = 0, stored = 0;
    strset codecs = { 0 }, files = { 0 };
    int rc = collect(r, &raw, &stored, &codecs, &files);
    if (rc == CLI_OK)
        rc = add_shard_files(ckpt, &files);
    if (rc == CLI_OK) {
        strset_sort(&codecs);
        strset_sort(&files);
        print_metadata(r);
        rc = print_tensor_lines(r);
    }
    if (rc == CLI_OK) {
        char ratio[32];
        cli_format_ratio(ratio, sizeof ratio, raw, stored);
        printf("raw_bytes: %" PRIu64 "\n", raw);
        printf("stored_bytes: %" PRIu64 "\n", stored);
        printf("ratio: %s\n", ratio);
        print_joined("codecs", &codecs);
        print_shards(r, &files);
    }
    strset_free(&codecs);
    strset_free(&files);
    return rc;
}

/* ------------------------------------------------------------ one tensor */

static int print_frames(ckpt_reader *r, size_t idx, size_t c,
                        const ckpt_chunk_info *ch)
{
    for (uint64_t j = 0; j < ch->nframes; j++) {
        ckpt_frame_info f;
        ckpt_error err = { 0 };
        if (ckpt_reader_frame(r, idx, c, j, &f, &err) != 0)
            return cli_fail("%s", err.msg);
        printf("  frame %" PRIu64 ": file_offset=%" PRIu64 " stored=%" PRIu64
               " raw_offset=%" PRIu64 " raw_size=%" PRIu64
               " codec=%s checksum=%016llx\n", j, f.file_offset,
               f.stored_size, f.raw_offset, f.raw_size,
               ckpt_codec_name(f.codec), (unsigned long long)f.checksum);
    }
    return CLI_OK;
}

static int print_chunks(ckpt_reader *r, size_t idx, const ckpt_tensor_info *t)
{
    for (size_t c = 0; c < t->nchunks; c++) {
        ckpt_chunk_info ch;
        if (ckpt_reader_chunk(r, idx, c, &ch) != 0)
            return cli_fail("tensor '%s': cannot read chunk %zu", t->fqn, c);
        char off[CLI_SHAPE_MAX], size[CLI_SHAPE_MAX];
        cli_format_shape(off, sizeof off, t->ndim, ch.offsets);
        cli_format_shape(size, sizeof size, t->ndim, ch.sizes);
        printf("chunk %zu: offsets=%s sizes=%s file=", c, off, size);
        put_text(ch.file);
        printf(" frames=%" PRIu64 " raw_bytes=%" PRIu64 " stored_bytes=%"
               PRIu64 "\n", ch.nframes, ch.raw_bytes, ch.stored_bytes);
        int rc = print_frames(r, idx, c, &ch);
        if (rc)
            return rc;
    }
    return CLI_OK;
}

static int print_tensor(ckpt_reader *r, const char *ckpt, const char *fqn)
{
    long idx = ckpt_reader_find(r, fqn);
    if (idx < 0)
        return cli_fail("%s: no tensor '%s'", ckpt, fqn);
    ckpt_tensor_info t;
    if (ckpt_reader_info(r, (size_t)idx, &t) != 0)
        return cli_fail("%s: cannot read tensor '%s'", ckpt, fqn);
    char shape[CLI_SHAPE_MAX], ratio[32];
    cli_format_shape(shape, sizeof shape, t.ndim, t.shape);
    cli_format_ratio(ratio, sizeof ratio, t.nbytes, t.stored_bytes);
    fputs("fqn: ", stdout);
    put_text(t.fqn);
    fputs("\n", stdout);
    printf("dtype: %s\n", ckpt_dtype_name(t.dtype));
    printf("shape: %s\n", shape);
    printf("numel: %" PRIu64 "\n", t.numel);
    printf("raw_bytes: %" PRIu64 "\n", t.nbytes);
    printf("stored_bytes: %" PRIu64 "\n", t.stored_bytes);
    printf("ratio: %s\n", ratio);
    printf("codecs: %s\n", no_codecs(t.codecs) ? "-" : t.codecs);
    printf("chunks: %zu\n", t.nchunks);
    return print_chunks(r, (size_t)idx, &t);
}

int cmd_info(int argc, char **argv)
{
    int rc = cli_parse_operands(&HELP, argc, argv, 1, 2);
    if (rc != CLI_GO_ON)
        return rc;
    const char *ckpt = argv[optind];
    ckpt_reader *r;
    if (cli_open_reader(&r, ckpt) != CLI_OK)
        return CLI_FAIL;
    if (argc - optind == 2)
        rc = print_tensor(r, ckpt, argv[optind + 1]);
    else
        rc = print_summary(r, ckpt);
    ckpt_reader_close(r);
    if (fflush(stdout) != 0 && rc == CLI_OK)
        rc = cli_fail("cannot write to stdout: %s", strerror(errno));
    return rc;
}
