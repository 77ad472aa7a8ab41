/*
 * crash_driver.c - the saves, checks and readers that the crash and fault
 * matrix (the scripts of tests/crash/) kills, fails and races.  Every save writes
 * the same small state, a function of SEED alone, so that a check can
 * compare what a checkpoint holds with it byte for byte:
 *
 *   model.w f32 [64, 300]   opt.m f32 [40, 50]   (split by rows)
 *   model.b f32 [300]       (replicated: every library writer has it)
 *
 * Usage (exit 0 on success, 1 with "crash_driver: <message>" otherwise):
 *   crash_driver gen DIR SEED            w.npy, b.npy, m.npy for ckpt pack
 *   crash_driver lib CKPT SEED N [nocommit]
 *                                        N writers in this process, then
 *                                        ckpt_commit (unless nocommit); a
 *                                        delta save against the checkpoint
 *                                        $CKPT_CRASH_BASE when it is set
 *   crash_driver async CKPT SEED         ckpt_save_async, 64 KiB staging cap
 *   crash_driver mount SAVE SEED RANK WORLD
 *                                        rank RANK's rows (and model.b for
 *                                        rank 0) written through a writable
 *                                        mount with plain POSIX calls, then
 *                                        RANK written to .ckptfs/commit
 *   crash_driver check CKPT SEED         the checkpoint holds exactly the
 *                                        state of SEED
 *   crash_driver read CKPT SEED READY GO opens CKPT, creates READY, waits
 *                                        for GO to exist, then reads every
 *                                        tensor: prints "ok" (right bytes)
 *                                        or "error: ..." (exit 0 either
 *                                        way); wrong bytes exit 2
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "ckptfs.h"
#include "crash_state.h"

static int die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int die(const char *fmt, ...)
{
    va_list ap;
    fputs("crash_driver: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

/* ------------------------------------------------------------ gen */

static int write_npy(const char *dir, const tdesc *t, const float *v)
{
    char path[4096], hdr[128], shape[64];
    snprintf(path, sizeof path, "%s/%s", dir, t->npy);
    if (t->ndim == 1)
        snprintf(shape, sizeof shape, "(%lld,)", (long long)t->shape[0]);
    else
        snprintf(shape, sizeof shape, "(%lld, %lld)",
                 (long long)t->shape[0], (long long)t->shape[1]);
    int n = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': "
                     "False, 'shape': %s, }", shape);
    int total = 10 + n + 1, pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f)
        return die("%s: %s", path, strerror(errno));
    uint16_t hl = (uint16_t)(n + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fwrite(&hl, 2, 1, f);
    fwrite(hdr, 1, (size_t)n, f);
    for (int i = 0; i < pad; i++)
        fputc(' ', f);
    fputc('\n', f);
    fwrite(v, sizeof(float), (size_t)numel(t), f);
    return fclose(f) == 0 ? 0 : die("%s: %s", path, strerror(errno));
}

static int cmd_gen(const char *dir, uint64_t seed)
{
    for (int k = 0; k < NT; k++) {
        float *v = image(seed, k);
        int rc = v ? write_npy(dir, &T[k], v) : die("out of memory");
        free(v);
        if (rc)
            return rc;
    }
    return 0;
}

static ckpt_write_opts small_frames(void)
{
    ckpt_write_opts o;
    ckpt_write_opts_init(&o);
    o.frame_size = FRAME;
    o.threads = 1;
    o.base = getenv("CKPT_CRASH_BASE");
    return o;
}

static int cmd_lib(const char *dir, uint64_t seed, int n, int commit)
{
    ckpt_error err = { 0 };
    ckpt_writer *w[16];
    float *img[NT];
    ckpt_write_opts o = small_frames();
    if (n < 1 || n > 16)
        return die("1 to 16 writers");
    for (int k = 0; k < NT; k++)
        if (!(img[k] = image(seed, k)))
            return die("out of memory");
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "rank%d", i);
        if (ckpt_writer_open(&w[i], dir, name, &o, &err))
            return die("%s", err.msg);
    }
    /* Interleaved: each writer's piece of each tensor in turn. */
    for (int k = 0; k < NT; k++)
        for (int i = 0; i < n; i++) {
            part pt;
            make_part(&pt, k, img[k], i, n);
            if (ckpt_writer_put(w[i], &pt.p, &err))
                return die("%s", err.msg);
        }
    step_meta sm;
    step_meta_init(&sm, seed);
    if (ckpt_writer_set_meta(w[0], "step", sm.value, &err))
        return die("%s", err.msg);
    for (int i = 0; i < n; i++)
        if (ckpt_writer_close(w[i], &err))
            return die("%s", err.msg);
    if (commit && ckpt_commit(dir, NULL, &err))
        return die("%s", err.msg);
    for (int k = 0; k < NT; k++)
        free(img[k]);
    return 0;
}

static int cmd_async(const char *dir, uint64_t seed)
{
    ckpt_error err = { 0 };
    ckpt_saver_opts so;
    ckpt_saver_opts_init(&so);
    so.staging_bytes = (size_t)64 << 10;
    ckpt_saver *sv;
    if (ckpt_saver_create(&sv, &so, &err))
        return die("%s", err.msg);
    float *img[NT];
    part pt[NT];
    ckpt_piece p[NT];
    for (int k = 0; k < NT; k++) {
        if (!(img[k] = image(seed, k)))
            return die("out of memory");
        make_part(&pt[k], k, img[k], 0, 1);
        p[k] = pt[k].p;
    }
    ckpt_save_opts o;
    ckpt_save_opts_init(&o);
    o.write = small_frames();
    step_meta sm;
    step_meta_init(&sm, seed);
    o.meta_keys = sm.keys;
    o.meta_values = sm.values;
    o.nmeta = 1;
    ckpt_save *h;
    if (ckpt_save_async(sv, dir, p, NT, &o, &h, &err))
        return die("%s", err.msg);
    for (int k = 0; k < NT; k++)          /* the training step goes on */
        memset(img[k], 0xA5, sizeof(float) * (size_t)numel(&T[k]));
    int rc = ckpt_save_wait(h, &err);
    ckpt_saver_destroy(sv);
    for (int k = 0; k < NT; k++)
        free(img[k]);
    return rc ? die("%s", err.msg) : 0;
}

/* ------------------------------------------------------------ mount */

static int mkdirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return die("mkdir %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return die("mkdir %s: %s", buf, strerror(errno));
    return 0;
}

static int put_attr(int fd, const char *path, const char *name,
                    const char *v)
{
    if (fsetxattr(fd, name, v, strlen(v), 0) != 0)
        return die("setxattr %s %s: %s", path, name, strerror(errno));
    return 0;
}

/* Sets a dims attribute of t's rank: "d0" or "d0,d1". */
static int put_dims(int fd, const char *path, const char *name,
                    const tdesc *t, int64_t d0, int64_t d1)
{
    char v[64];
    if (t->ndim == 1)
        snprintf(v, sizeof v, "%lld", (long long)d0);
    else
        snprintf(v, sizeof v, "%lld,%lld", (long long)d0, (long long)d1);
    return put_attr(fd, path, name, v);
}

/* One piece through the mount: describe, write in 4 KiB pieces, close. */
static int mount_piece(const char *save, const part *pt, int k)
{
    const tdesc *t = &T[k];
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", save, t->file);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return die("open %s: %s", path, strerror(errno));
    /* shape, offsets and sizes: the piece's extent is known before its
     * first byte (docs/MOUNT.md, "When a piece ends"), so a writer killed
     * mid-piece records nothing. */
    int rc = put_attr(fd, path, "user.ckpt.dtype", "f32");
    if (rc == 0)
        rc = put_dims(fd, path, "user.ckpt.shape", t, t->shape[0],
                      t->shape[1]);
    if (rc == 0)
        rc = put_dims(fd, path, "user.ckpt.offsets", t, pt->off[0], 0);
    if (rc == 0)
        rc = put_dims(fd, path, "user.ckpt.sizes", t, pt->size[0],
                      t->shape[1]);
    const char *b = (const char *)pt->p.data;
    size_t n = (size_t)(pt->size[0] * row_elems(t)) * sizeof(float);
    for (size_t at = 0; rc == 0 && at < n;) {
        size_t c = n - at < 4096 ? n - at : 4096;
        ssize_t w = write(fd, b + at, c);
        if (w <= 0)
            rc = die("write %s: %s", path, strerror(errno));
        else
            at += (size_t)w;
    }
    if (close(fd) != 0 && rc == 0)
        rc = die("close %s: %s", path, strerror(errno));
    return rc;
}

static int cmd_mount(const char *save, uint64_t seed, int rank, int world)
{
    char path[4096], r[16];
    step_meta sm;
    step_meta_init(&sm, seed);
    if (mkdirs(save))
        return 1;
    if (setxattr(save, "user.ckpt.meta.step", sm.value, strlen(sm.value),
                 0) != 0)
        return die("setxattr %s user.ckpt.meta.step: %s", save,
                   strerror(errno));
    for (int k = 0; k < NT; k++) {
        snprintf(path, sizeof path, "%s/%.*s", save,
                 (int)(strchr(T[k].file, '/') - T[k].file), T[k].file);
        if (mkdirs(path))
            return 1;
    }
    for (int k = 0; k < NT; k++) {
        if (!T[k].split && rank != 0)
            continue;
        float *img = image(seed, k);
        part pt;
        make_part(&pt, k, img, rank, world);
        int rc = img ? mount_piece(save, &pt, k) : die("out of memory");
        free(img);
        if (rc)
            return rc;
    }
    snprintf(path, sizeof path, "%s/.ckptfs/commit", save);
    int fd = open(path, O_WRONLY);
    if (fd < 0)
        return die("open %s: %s", path, strerror(errno));
    int n = snprintf(r, sizeof r, "%d", rank);
    int rc = write(fd, r, (size_t)n) == n ? 0
             : die("commit rank %d: %s", rank, strerror(errno));
    if (close(fd) != 0 && rc == 0)
        rc = die("close %s: %s", path, strerror(errno));
    return rc;
}

/* ------------------------------------------------------------ checks */

/* 0 when every tensor of r holds the state of seed; -1 with *err set when
 * a read failed; 1 with a message when some bytes are wrong. */
static int compare(ckpt_reader *r, uint64_t seed, ckpt_error *err,
                   char *why, size_t cap)
{
    if (ckpt_reader_count(r) != NT) {
        snprintf(why, cap, "%zu tensors, want %d", ckpt_reader_count(r), NT);
        return 1;
    }
    for (int k = 0; k < NT; k++) {
        long idx = ckpt_reader_find(r, T[k].fqn);
        ckpt_tensor_info ti;
        if (idx < 0 || ckpt_reader_info(r, (size_t)idx, &ti) != 0 ||
            ti.dtype != CKPT_F32 || ti.nbytes != (uint64_t)numel(&T[k]) * 4) {
            snprintf(why, cap, "tensor %s missing or of another kind",
                     T[k].fqn);
            return 1;
        }
        float *want = image(seed, k), *got = malloc(ti.nbytes);
        int64_t n = want && got ? ckpt_read(r, (size_t)idx, got, 0,
                                            ti.nbytes, err)
                                : -ENOMEM;
        int bad = n >= 0 && memcmp(want, got, ti.nbytes) != 0;
        free(want);
        free(got);
        if (n < 0)
            return -1;
        if (bad || (uint64_t)n != ti.nbytes) {
            snprintf(why, cap, "tensor %s holds other bytes", T[k].fqn);
            return 1;
        }
    }
    return 0;
}

static int cmd_check(const char *dir, uint64_t seed)
{
    ckpt_reader *r;
    ckpt_error err = { 0 };
    char why[256];
    if (ckpt_reader_open(&r, dir, NULL, &err))
        return die("%s", err.msg);
    int rc = compare(r, seed, &err, why, sizeof why);
    ckpt_reader_close(r);
    if (rc < 0)
        return die("%s", err.msg);
    return rc ? die("%s: %s", dir, why) : 0;
}

static int cmd_read(const char *dir, uint64_t seed, const char *ready,
                    const char *go)
{
    ckpt_reader *r;
    ckpt_error err = { 0 };
    char why[256];
    struct stat st;
    if (ckpt_reader_open(&r, dir, NULL, &err))
        return die("%s", err.msg);
    int fd = open(ready, O_WRONLY | O_CREAT, 0644);
    if (fd < 0)
        return die("%s: %s", ready, strerror(errno));
    close(fd);
    for (int i = 0; i < 6000 && stat(go, &st) != 0; i++)
        usleep(10000);
    int rc = compare(r, seed, &err, why, sizeof why);
    ckpt_reader_close(r);
    if (rc > 0) {
        printf("WRONG BYTES: %s\n", why);
        return 2;
    }
    if (rc < 0)
        printf("error: %s\n", err.msg);
    else
        printf("ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return die("usage: crash_driver gen|lib|async|mount|check|read ...");
    const char *cmd = argv[1], *dir = argv[2];
    uint64_t seed = strtoull(argv[3], NULL, 10);
    if (strcmp(cmd, "gen") == 0)
        return cmd_gen(dir, seed);
    if (strcmp(cmd, "lib") == 0 && argc >= 5)
        return cmd_lib(dir, seed, atoi(argv[4]),
                       !(argc > 5 && strcmp(argv[5], "nocommit") == 0));
    if (strcmp(cmd, "async") == 0)
        return cmd_async(dir, seed);
    if (strcmp(cmd, "mount") == 0 && argc >= 6)
        return cmd_mount(dir, seed, atoi(argv[4]), atoi(argv[5]));
    if (strcmp(cmd, "check") == 0)
        return cmd_check(dir, seed);
    if (strcmp(cmd, "read") == 0 && argc >= 6)
        return cmd_read(dir, seed, argv[4], argv[5]);
    return die("unknown command or missing arguments: %s", cmd);
}
