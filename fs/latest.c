/*
 * latest.c - the ordering behind `latest` (see latest.h).
 */
#include "latest.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int latest_parse_step(const char *v, int64_t *out)
{
    if (!v)
        return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || errno == ERANGE)
        return 0;
    while (*end == ' ' || *end == '\t' || *end == '\n')
        end++;
    if (*end)
        return 0;
    *out = x;
    return 1;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

int latest_name_step(const char *name, int64_t *out)
{
    const char *end = name + strlen(name);
    while (end > name && !is_digit(end[-1]))
        end--;
    if (end == name)
        return 0;
    const char *start = end;
    while (start > name && is_digit(start[-1]))
        start--;
    while (start < end - 1 && *start == '0')
        start++;
    if (end - start > 18)
        return 0;
    int64_t v = 0;
    for (const char *p = start; p < end; p++)
        v = v * 10 + (*p - '0');
    *out = v;
    return 1;
}

int latest_step(const char *meta, const char *name, int64_t *out)
{
    return latest_parse_step(meta, out) || latest_name_step(name, out);
}

int latest_newer(const latest_key *a, const latest_key *b)
{
    if (a->has_step != b->has_step)
        return a->has_step;
    if (a->has_step && a->step != b->step)
        return a->step > b->step;
    if (a->committed.tv_sec != b->committed.tv_sec)
        return a->committed.tv_sec > b->committed.tv_sec;
    if (a->committed.tv_nsec != b->committed.tv_nsec)
        return a->committed.tv_nsec > b->committed.tv_nsec;
    return strcmp(a->name, b->name) > 0;
}
