/*
 * wattempt.c - the pieces and processes of each rank seen by a mount in
 * one save (see wattempt.h): two growing arrays under a mutex (the
 * pieces chained by file), and /proc for whether a process still runs.
 */
#include "wattempt.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"
#include "common/grow.h"
#include "common/region.h"
#include "write/supersede.h"

/* A process: thread group id and start time (clock ticks after boot). */
typedef struct proc_id {
    pid_t tgid;
    unsigned long long start;
} proc_id;

typedef struct wa_proc {
    int rank;
    proc_id id;
} wa_proc;

typedef struct wa_piece {
    uint32_t node;
    size_t next;               /* the next piece of its bucket + 1, or 0 */
    int rank;
    proc_id by;
    char writer[160];
    int ndim;
    int64_t off[CKPT_MAX_DIMS], size[CKPT_MAX_DIMS];
} wa_piece;

/* Pieces are chained by file (node % WA_BUCKETS): a piece's start looks
 * at the pieces of its file only. */
#define WA_BUCKETS 1024

struct wa_table {
    pthread_mutex_t mu;
    wa_proc *procs;            /* processes that may still run */
    size_t nprocs, capprocs;
    wa_piece *pieces;
    size_t npieces, cappieces;
    size_t *heads;             /* WA_BUCKETS first pieces + 1 (0: none) */
};

int wa_new(wa_table **out)
{
    wa_table *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    pthread_mutex_init(&t->mu, NULL);
    *out = t;
    return 0;
}

void wa_free(wa_table *t)
{
    if (!t)
        return;
    wa_forget(t);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

void wa_forget(wa_table *t)
{
    pthread_mutex_lock(&t->mu);
    free(t->procs);
    free(t->pieces);
    free(t->heads);
    t->procs = NULL;
    t->pieces = NULL;
    t->heads = NULL;
    t->nprocs = t->capprocs = t->npieces = t->cappieces = 0;
    pthread_mutex_unlock(&t->mu);
}

/* Field 22 of /proc/PID/stat (the start time) and its state into *state:
 * 0, or -1 when the process is gone. */
static int proc_stat(pid_t pid, unsigned long long *start, char *state)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');    /* the name may hold spaces */
    if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
                     "%*u %*u %*d %*d %*d %*d %*d %*d %llu", state,
                     start) != 2)
        return -1;
    return 0;
}

/* The process of thread pid, or tgid 0 when it is gone already. */
static proc_id proc_of(pid_t pid)
{
    proc_id id = { 0, 0 };
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return id;
    long tgid = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Tgid: %ld", &tgid) == 1)
            break;
    fclose(f);
    char state;
    if (tgid > 0 && proc_stat((pid_t)tgid, &id.start, &state) == 0)
        id.tgid = (pid_t)tgid;
    return id;
}

/* 1 while process id runs (not a zombie, not another process that got
 * its number). */
static int proc_runs(proc_id id)
{
    unsigned long long start;
    char state;
    return id.tgid > 0 && proc_stat(id.tgid, &start, &state) == 0 &&
           start == id.start && state != 'Z' && state != 'X';
}

/* A process the daemon cannot see (another PID namespace: FUSE reports
 * no pid) is no process: it counts as ended. */
static int same_proc(proc_id a, proc_id b)
{
    return a.tgid && a.tgid == b.tgid && a.start == b.start;
}

int wa_note_proc(wa_table *t, int rank, pid_t pid)
{
    proc_id id = proc_of(pid);
    if (!id.tgid)
        return 0;
    pthread_mutex_lock(&t->mu);
    int rc = 0;
    size_t i = 0;
    while (i < t->nprocs && !(t->procs[i].rank == rank &&
                              same_proc(t->procs[i].id, id)))
        i++;
    if (i == t->nprocs) {
        wa_proc *v = ckpt_grow(t->procs, t->nprocs, &t->capprocs,
                               sizeof *v, 16);
        if (v) {
            t->procs = v;
            t->procs[t->nprocs++] = (wa_proc){ rank, id };
        } else {
            rc = -ENOMEM;
        }
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int wa_note_piece(wa_table *t, uint32_t node, int rank, pid_t pid,
                  const char *writer, int ndim, const int64_t *off,
                  const int64_t *size)
{
    if (ndim < 0 || ndim > CKPT_MAX_DIMS)
        return -EINVAL;
    wa_piece p = { .node = node, .rank = rank, .by = proc_of(pid),
                   .ndim = ndim };
    snprintf(p.writer, sizeof p.writer, "%s", writer);
    memcpy(p.off, off, (size_t)ndim * sizeof *off);
    memcpy(p.size, size, (size_t)ndim * sizeof *size);
    pthread_mutex_lock(&t->mu);
    int rc = 0;
    wa_piece *v = ckpt_grow(t->pieces, t->npieces, &t->cappieces, sizeof *v,
                            16);
    if (v)
        t->pieces = v;
    if (!t->heads)
        t->heads = calloc(WA_BUCKETS, sizeof *t->heads);
    if (v && t->heads) {
        size_t *head = &t->heads[node % WA_BUCKETS];
        p.next = *head;
        t->pieces[t->npieces++] = p;
        *head = t->npieces;
    } else {
        rc = -ENOMEM;
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int wa_rank_live(wa_table *t, int rank, pid_t pid)
{
    proc_id me = proc_of(pid);
    pthread_mutex_lock(&t->mu);
    int live = 0;
    for (size_t i = 0; !live && i < t->nprocs;) {
        const wa_proc *q = &t->procs[i];
        if (q->rank != rank) {
            i++;
        } else if (same_proc(q->id, me) || proc_runs(q->id)) {
            live = 1;
        } else {                      /* gone for good: forgotten */
            t->procs[i] = t->procs[--t->nprocs];
        }
    }
    pthread_mutex_unlock(&t->mu);
    return live;
}

/* Appends name to the comma-separated list out (len used) unless it is
 * there or does not fit. */
static void add_name(char *out, size_t cap, size_t *len, const char *name)
{
    size_t n = strlen(name);
    if (ckpt_supersede_listed(out, name) || *len + n + 2 > cap)
        return;
    if (*len)
        out[(*len)++] = ',';
    memcpy(out + *len, name, n + 1);
    *len += n;
}

int wa_earlier(wa_table *t, uint32_t node, int rank, pid_t pid, int ndim,
               const int64_t *off, const int64_t *size, char *out,
               size_t cap)
{
    proc_id me = proc_of(pid);
    size_t len = 0;
    int live = 0;
    if (cap)
        out[0] = '\0';
    pthread_mutex_lock(&t->mu);
    size_t first = t->heads ? t->heads[node % WA_BUCKETS] : 0;
    for (size_t i = first; !live && i; i = t->pieces[i - 1].next) {
        const wa_piece *p = &t->pieces[i - 1];
        int64_t o[CKPT_MAX_DIMS], z[CKPT_MAX_DIMS];
        if (p->node != node || p->rank != rank || p->ndim != ndim ||
            !ckpt_box_intersect(ndim, p->off, p->size, off, size, o, z))
            continue;
        live = same_proc(p->by, me) || proc_runs(p->by);
        add_name(out, cap, &len, p->writer);
    }
    if (live && cap) {
        len = 0;
        out[0] = '\0';
    }
    pthread_mutex_unlock(&t->mu);
    return len > 0;
}
