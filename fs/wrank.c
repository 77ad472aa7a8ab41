/*
 * wrank.c - the rank of each process writing through the mount (see
 * wrank.h): a small table of pid -> rank, filled by declarations and by
 * reading /proc/PID/environ once per process.
 */
#include "wrank.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The processes remembered: a training job has a few per node; the
 * oldest entry is reused beyond this. */
#define WRANK_CAP 4096
#define ENV_CAP (256 << 10)

typedef struct entry {
    pid_t pid;
    int rank;             /* -1: not known */
    int declared;
} entry;

struct wrank_table {
    pthread_mutex_t mu;
    entry *v;
    size_t n, next;       /* next: the slot reused when full */
};

int wrank_new(wrank_table **out)
{
    wrank_table *t = calloc(1, sizeof *t);
    if (!t || !(t->v = calloc(WRANK_CAP, sizeof *t->v))) {
        free(t);
        return -ENOMEM;
    }
    pthread_mutex_init(&t->mu, NULL);
    *out = t;
    return 0;
}

void wrank_free(wrank_table *t)
{
    if (!t)
        return;
    pthread_mutex_destroy(&t->mu);
    free(t->v);
    free(t);
}

int wrank_parse(const char *value, size_t len, int world, int *rank)
{
    char buf[32];
    while (len && (value[len - 1] == '\n' || value[len - 1] == ' '))
        len--;
    if (len == 0 || len >= sizeof buf)
        return -EINVAL;
    memcpy(buf, value, len);
    buf[len] = '\0';
    char *end;
    errno = 0;
    long r = strtol(buf, &end, 10);
    if (*end || errno || buf[0] < '0' || buf[0] > '9' || r >= world)
        return -EINVAL;
    *rank = (int)r;
    return 0;
}

/* The entry of pid (under mu), or NULL. */
static entry *find(wrank_table *t, pid_t pid)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].pid == pid)
            return &t->v[i];
    return NULL;
}

static entry *add(wrank_table *t, pid_t pid)
{
    entry *e = t->n < WRANK_CAP ? &t->v[t->n++] : &t->v[t->next++ %
                                                         WRANK_CAP];
    *e = (entry){ pid, -1, 0 };
    return e;
}

int wrank_set(wrank_table *t, pid_t pid, int rank)
{
    pthread_mutex_lock(&t->mu);
    entry *e = find(t, pid);
    if (!e)
        e = add(t, pid);
    e->rank = rank;
    e->declared = 1;
    pthread_mutex_unlock(&t->mu);
    return 0;
}

/* The rank the launcher gave process pid in its environment, or -1. */
static int rank_from_env(pid_t pid, int world)
{
    static const char *const keys[] = {
        "RANK=", "OMPI_COMM_WORLD_RANK=", "PMI_RANK=", "PMIX_RANK=",
        "SLURM_PROCID=", NULL
    };
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/environ", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char *buf = malloc(ENV_CAP);
    size_t n = 0;
    ssize_t got;
    while (buf && n < ENV_CAP - 1 &&
           (got = read(fd, buf + n, ENV_CAP - 1 - n)) > 0)
        n += (size_t)got;
    close(fd);
    if (!buf)
        return -1;
    buf[n] = '\0';
    int rank = -1;
    for (int k = 0; keys[k] && rank < 0; k++) {
        size_t kl = strlen(keys[k]);
        for (size_t i = 0; i < n; i += strlen(buf + i) + 1)
            if (strncmp(buf + i, keys[k], kl) == 0) {
                const char *v = buf + i + kl;
                if (wrank_parse(v, strlen(v), world, &rank) != 0)
                    rank = -1;
                break;
            }
    }
    free(buf);
    return rank;
}

int wrank_of(wrank_table *t, pid_t pid, int world)
{
    pthread_mutex_lock(&t->mu);
    entry *e = find(t, pid);
    int rank = e ? e->rank : -2;
    pthread_mutex_unlock(&t->mu);
    if (rank == -2) {
        rank = pid > 0 ? rank_from_env(pid, world) : -1;
        pthread_mutex_lock(&t->mu);
        if (!(e = find(t, pid)))
            (e = add(t, pid))->rank = rank;
        rank = e->rank;
        pthread_mutex_unlock(&t->mu);
    }
    return rank >= 0 ? rank : world == 1 ? 0 : -1;
}
