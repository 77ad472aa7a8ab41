/*
 * fuzz_control.c - libFuzzer target for what a writable mount reads from
 * a save's .pending/ and from its users (docs/TRUST.md, "A shared root"):
 *
 *   selector 0: a .pending/ the input describes -- control files (failed,
 *               unsynced, errors.*, rank-N, lease, commit.lock) as regular
 *               files of the input's bytes, symbolic links to a file
 *               outside the save, FIFOs or directories -- then what the
 *               daemon does with them: the status line (which may run a
 *               commit), the .ckptfs/errors text, a rank marker, the
 *               unsynced mark.  Nothing may block, crash, read outside the
 *               save, or return more than the documented bounds.
 *   selector 1: the values users set as attributes: user.ckpt.dtype,
 *               shape, offsets, sizes, replica (pattr_set, then
 *               pattr_resolve of what was set) and user.ckpt.rank.
 *
 * The first input byte picks; the rest is the input.  Built and run by
 * tests/fuzz/run_fuzz.sh.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "format/lease.h"
#include "format/pending.h"
#include "pattr.h"
#include "rendezvous.h"
#include "wrank.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char base[4096];          /* this process's scratch directory */

static const char *const names[] = {
    "failed", "unsynced", "errors.a", "errors.b", "rank-0", "rank-1",
    "rank-2", "lease", "commit.lock", "failed.1", "errors.", "rank-x"
};
#define NNAMES (sizeof names / sizeof names[0])

static void remove_base(void)
{
    ckpt_remove_tree(base, NULL);
}

static void make_base(void)
{
    if (base[0])
        return;
    /* tmpfs where there is one: a commit's fsyncs cost nothing there */
    struct stat st;
    const char *t = stat("/dev/shm", &st) == 0 && access("/dev/shm", W_OK) == 0
                    ? "/dev/shm" : getenv("TMPDIR");
    snprintf(base, sizeof base, "%s/ckpt-fuzz-control.XXXXXX", t ? t : "/tmp");
    if (!mkdtemp(base))
        abort();
    atexit(remove_base);
    char p[4200];
    snprintf(p, sizeof p, "%s/outside", base);
    FILE *f = fopen(p, "w");
    if (!f)
        abort();
    fputs("OUTSIDE-SECRET\n", f);
    fclose(f);
}

/* Records of the input: [name index][kind][len][bytes...]. */
static void build_pending(const char *dir, const uint8_t *in, size_t n)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/.pending", dir);
    if (mkdir(dir, 0755) != 0 || mkdir(p, 0755) != 0)
        abort();
    while (n >= 3) {
        const char *name = names[in[0] % NNAMES];
        int kind = in[1] % 4;
        size_t len = in[2] < n - 3 ? in[2] : n - 3;
        snprintf(p, sizeof p, "%s/.pending/%s", dir, name);
        if (kind == 0) {
            int fd = open(p, O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (fd >= 0) {
                (void)ckpt_write_full(fd, in + 3, len, p, NULL);
                close(fd);
            }
        } else if (kind == 1) {
            (void)symlink("../../outside", p);
        } else if (kind == 2) {
            (void)mkfifo(p, 0644);
        } else {
            (void)mkdir(p, 0755);
        }
        in += 3 + len;
        n -= 3 + len;
    }
}

static void no_secret(const char *s, size_t n)
{
    if (memmem(s, n, "OUTSIDE-SECRET", 14))
        abort();                  /* read through a link */
}

static void control(const uint8_t *in, size_t n)
{
    make_base();
    if (n < 1)
        return;
    int world = 1 + in[0] % 3;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/save", base);
    ckpt_remove_tree(dir, NULL);
    build_pending(dir, in + 1, n - 1);

    char line[4096];
    int k = rdv_status(dir, world, line, sizeof line);
    if (k < 0 || strlen(line) >= sizeof line)
        abort();
    no_secret(line, strlen(line));
    char *text;
    size_t len;
    if (rdv_errors(dir, &text, &len) == 0) {
        if (len > CKPT_CONTROL_MAX + 1200 || strlen(text) != len)
            abort();
        no_secret(text, len);
        free(text);
    }
    int complete;
    ckpt_error err = { 0 };
    (void)rdv_mark(dir, in[0] % 4, world, &complete, &err);
    char why[256];
    if (ckpt_save_unsynced(dir, why, sizeof why))
        no_secret(why, strlen(why));
    ckpt_remove_tree(dir, NULL);
}

static void attrs(const uint8_t *in, size_t n)
{
    if (n < 1)
        return;
    pattr a = { 0 };
    ckpt_error err = { 0 };
    /* the value, split at each 0xff into the values of successive keys */
    const char *v = (const char *)in + 1;
    size_t left = n - 1;
    for (unsigned key = 1u << (in[0] % PATTR_NKEYS); left;
         key = key << 1 > PATTR_REPLICA ? PATTR_DTYPE : key << 1) {
        const char *end = memchr(v, 0xff, left);
        size_t len = end ? (size_t)(end - v) : left;
        (void)pattr_set(&a, key, v, len, &err);
        int rank;
        (void)wrank_parse(v, len, 1 + in[0] % 8, &rank);
        v += len + (end != NULL);
        left -= len + (end != NULL);
    }
    char buf[512];
    for (unsigned key = PATTR_DTYPE; key <= PATTR_REPLICA; key <<= 1)
        (void)pattr_get(&a, key, buf, sizeof buf);
    pattr_piece p;
    (void)pattr_resolve(&a, "fuzz.w", &p, &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] % 2 == 0)
        control(data + 1, size - 1);
    else
        attrs(data + 1, size - 1);
    return 0;
}
