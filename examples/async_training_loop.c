/*
 * async_training_loop.c - a training loop that checkpoints asynchronously.
 *
 *   async_training_loop ROOT [STEPS [EVERY [MIB]]]
 *
 * The "model" is a few f32 tensors (MIB MiB in all, default 64) that every
 * step updates in place.  Every EVERY steps (default 5) the loop starts an
 * asynchronous save of the state into ROOT/step-NNNNNN and goes straight
 * on training: the step right after the call overwrites the very buffers
 * being saved.  Before the next save it collects the previous one's
 * result (a saver of queue depth 1 would also wait by itself).  At the end
 * it reopens every checkpoint and checks it holds the state of its step
 * (recomputed from scratch), printing one line per checkpoint.
 *
 * Build against the installed library:
 *     cc -std=c11 -O2 async_training_loop.c $(pkg-config --cflags --libs ckptfs)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ckptfs.h>

#define NT 4

/* The value of element i of tensor t after `step` steps. */
static float value(int t, uint64_t i, long step)
{
    return (float)((i * 2654435761u + (uint64_t)t * 97u) % 1000) * 0.001f +
           (float)step;
}

static void train_step(float **w, const int64_t *n, long step)
{
    for (int t = 0; t < NT; t++)
        for (int64_t i = 0; i < n[t]; i++)
            w[t][i] = value(t, (uint64_t)i, step);
}

static int verify(const char *dir, const int64_t *n, long step)
{
    ckpt_reader *r;
    ckpt_error err = { 0 };
    if (ckpt_reader_open(&r, dir, NULL, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int bad = 0;
    for (int t = 0; t < NT && !bad; t++) {
        char fqn[32];
        snprintf(fqn, sizeof fqn, "layers.%d.weight", t);
        long idx = ckpt_reader_find(r, fqn);
        float *got = malloc((size_t)n[t] * sizeof *got);
        if (idx < 0 || !got ||
            ckpt_load_region(r, (size_t)idx, NULL, NULL, got, &err)) {
            fprintf(stderr, "%s: cannot load %s: %s\n", dir, fqn, err.msg);
            bad = 1;
        }
        for (int64_t i = 0; !bad && i < n[t]; i++)
            if (got[i] != value(t, (uint64_t)i, step)) {
                fprintf(stderr, "%s: %s[%lld] = %g, expected %g\n", dir, fqn,
                        (long long)i, got[i], value(t, (uint64_t)i, step));
                bad = 1;
            }
        free(got);
    }
    const char *s = ckpt_reader_meta_get(r, "step");
    if (!bad && (!s || atol(s) != step)) {
        fprintf(stderr, "%s: metadata step is %s, expected %ld\n", dir,
                s ? s : "(none)", step);
        bad = 1;
    }
    ckpt_reader_close(r);
    if (!bad)
        printf("verified %s (step %ld)\n", dir, step);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s ROOT [STEPS [EVERY [MIB]]]\n", argv[0]);
        return 2;
    }
    const char *root = argv[1];
    long steps = argc > 2 ? atol(argv[2]) : 20;
    long every = argc > 3 ? atol(argv[3]) : 5;
    long mib = argc > 4 ? atol(argv[4]) : 64;
    if (steps < 1 || every < 1 || mib < 1) {
        fprintf(stderr, "STEPS, EVERY and MIB must be positive\n");
        return 2;
    }
    int64_t n[NT], shape[NT][1];
    float *w[NT];
    ckpt_piece p[NT];
    char names[NT][32];
    for (int t = 0; t < NT; t++) {
        n[t] = mib * (1 << 20) / NT / 4 + t;   /* uneven sizes */
        shape[t][0] = n[t];
        w[t] = malloc((size_t)n[t] * sizeof **w);
        if (!w[t])
            return 1;
        snprintf(names[t], sizeof names[t], "layers.%d.weight", t);
        p[t] = (ckpt_piece){ .fqn = names[t], .dtype = CKPT_F32, .ndim = 1,
                             .shape = shape[t], .data = w[t] };
    }

    ckpt_error err = { 0 };
    ckpt_saver *saver;
    if (ckpt_saver_create(&saver, NULL, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    ckpt_save *pending = NULL;
    long saved[1024];
    int nsaved = 0, failed = 0;
    char dir[4096], step_str[32];
    for (long step = 1; step <= steps; step++) {
        train_step(w, n, step);
        if (step % every != 0)
            continue;
        /* Collect the previous save: report its outcome. */
        if (pending && ckpt_save_wait(pending, &err)) {
            fprintf(stderr, "save failed: %s\n", err.msg);
            failed = 1;
        }
        pending = NULL;
        snprintf(dir, sizeof dir, "%s/step-%06ld", root, step);
        snprintf(step_str, sizeof step_str, "%ld", step);
        const char *k[] = { "step" }, *v[] = { step_str };
        ckpt_save_opts o;
        ckpt_save_opts_init(&o);
        o.meta_keys = k;
        o.meta_values = v;
        o.nmeta = 1;
        if (ckpt_save_async(saver, dir, p, NT, &o, &pending, &err)) {
            fprintf(stderr, "cannot start saving %s: %s\n", dir, err.msg);
            failed = 1;
        } else if (nsaved < 1024) {
            saved[nsaved++] = step;
        }
        /* Training goes on at once; the next step rewrites w[]. */
    }
    if (pending && ckpt_save_wait(pending, &err)) {
        fprintf(stderr, "save failed: %s\n", err.msg);
        failed = 1;
    }
    ckpt_saver_destroy(saver);
    for (int i = 0; i < nsaved && !failed; i++) {
        snprintf(dir, sizeof dir, "%s/step-%06ld", root, saved[i]);
        failed |= verify(dir, n, saved[i]);
    }
    for (int t = 0; t < NT; t++)
        free(w[t]);
    return failed;
}
