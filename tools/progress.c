/*
 * progress.c - the stderr progress bar and the summary line that stays
 * when it ends (see progress.h).
 */
#include "progress.h"
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define REDRAW_NS 100000000LL   /* 0.1 s */

static long long elapsed_ns(const struct timespec *a, const struct timespec *b)
{
    return (long long)(b->tv_sec - a->tv_sec) * 1000000000LL +
           (b->tv_nsec - a->tv_nsec);
}

static int term_width(void)
{
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        return ws.ws_col;
    return 80;
}

void progress_init(progress *p, const char *label, uint64_t total)
{
    memset(p, 0, sizeof *p);
    p->enabled = isatty(STDERR_FILENO);
    p->label = label;
    p->total = total;
    clock_gettime(CLOCK_MONOTONIC, &p->start);
    p->last = p->start;
}

/* Draws "label [####......]  45%  1.2 GiB/2.7 GiB  350.0 MiB/s". */
static void draw(progress *p, const struct timespec *now)
{
    char done[32], total[32], rate[32], tail[128];
    double secs = (double)elapsed_ns(&p->start, now) / 1e9;
    cli_human_size(done, sizeof done, (double)p->done);
    cli_human_size(total, sizeof total, (double)p->total);
    cli_human_size(rate, sizeof rate, secs > 0 ? (double)p->done / secs : 0);
    double frac = p->total ? (double)p->done / (double)p->total : 1.0;
    if (frac > 1.0)
        frac = 1.0;
    int n = snprintf(tail, sizeof tail, " %3d%%  %s/%s  %s/s",
                     (int)(frac * 100.0), done, total, rate);
    int width = term_width() - (int)strlen(p->label) - n - 4;
    if (width > 40)
        width = 40;
    char bar[64];
    int fill = width > 0 ? (int)(frac * width) : 0;
    for (int i = 0; i < width && i < (int)sizeof bar - 1; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width > 0 ? width : 0] = '\0';
    if (width > 0)
        fprintf(stderr, "\r%s [%s]%s\033[K", p->label, bar, tail);
    else
        fprintf(stderr, "\r%s%s\033[K", p->label, tail);
    fflush(stderr);
    p->drawn = 1;
    p->last = *now;
}

void progress_set(progress *p, uint64_t done)
{
    p->done = done;
    if (!p->enabled)
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    /* `last` starts at `start`: quick jobs never show a bar. */
    if (elapsed_ns(&p->last, &now) < REDRAW_NS)
        return;
    draw(p, &now);
}

void progress_add(progress *p, uint64_t n)
{
    progress_set(p, p->done + n);
}

void progress_clear(progress *p)
{
    if (p->enabled && p->drawn) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        p->drawn = 0;
    }
}

size_t progress_summary(char *buf, size_t cap, const char *verb,
                        uint64_t items, uint64_t raw, uint64_t stored,
                        double secs)
{
    char size[32], rate[32], ratio[32];
    cli_human_size(size, sizeof size, (double)raw);
    cli_format_ratio(ratio, sizeof ratio, raw, stored);
    if (secs > 0)
        cli_human_size(rate, sizeof rate, (double)raw / secs);
    int n = snprintf(buf, cap, "%s %" PRIu64 " tensor%s, %s in %.1f s "
                     "(%s%s), ratio %s", verb, items, items == 1 ? "" : "s",
                     size, secs, secs > 0 ? rate : "-",
                     secs > 0 ? "/s" : "", ratio);
    return n < 0 ? 0 : (size_t)n;
}

void progress_done(progress *p, const char *verb, const ckpt_reader *r)
{
    progress_clear(p);
    if (!p->enabled || !r)
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    cli_totals tot = cli_reader_totals(r);
    char line[256];
    progress_summary(line, sizeof line, verb, ckpt_reader_count(r),
                     tot.nbytes, tot.stored_bytes,
                     (double)elapsed_ns(&p->start, &now) / 1e9);
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
}

void progress_done_path(progress *p, const char *verb, const char *dir)
{
    ckpt_reader *r = NULL;
    ckpt_error err = { 0 };
    if (p->enabled && ckpt_reader_open(&r, dir, NULL, &err) != 0)
        r = NULL;           /* the summary is a courtesy: none then */
    progress_done(p, verb, r);
    ckpt_reader_close(r);
}
