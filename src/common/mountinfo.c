/*
 * mountinfo.c - reading /proc/self/mountinfo (see mountinfo.h).  A line
 * is "ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE
 * SUPER_OPTIONS", with spaces and other odd bytes in paths written as
 * octal escapes ("\040").
 */
#include "common/mountinfo.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Undoes mountinfo's octal escapes in place. */
static void unescape(char *s)
{
    char *out = s;
    for (; *s; s++) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' &&
            s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
            *out++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 |
                            (s[3] - '0'));
            s += 3;
        } else {
            *out++ = *s;
        }
    }
    *out = '\0';
}

/* Fills m from one line; 0, or -1 for a line of another shape. */
static int parse_line(const char *line, ckpt_mount *m)
{
    const char *sep = strstr(line, " - ");
    if (!sep || sscanf(line, "%*s %*s %63s %*s %4095s", m->dev,
                       m->point) != 2)
        return -1;
    m->source[0] = '\0';
    if (sscanf(sep, " - %255s %4095s", m->fstype, m->source) < 1)
        return -1;
    unescape(m->point);
    unescape(m->source);
    return 0;
}

int ckpt_mountinfo_each(int (*fn)(const ckpt_mount *m, void *arg),
                        void *arg)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    if (!f)
        return -errno;
    ckpt_mount *m = malloc(sizeof *m);
    if (!m) {
        fclose(f);
        return -ENOMEM;
    }
    char *line = NULL;
    size_t len = 0;
    while (getline(&line, &len, f) > 0)
        if (parse_line(line, m) == 0 && fn(m, arg) != 0)
            break;
    free(line);
    free(m);
    fclose(f);
    return 0;
}
