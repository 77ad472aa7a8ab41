/*
 * wopts.c - write options from text, and their bounds (see wopts.h).
 */
#include "write/wopts.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "common/error.h"

/* The multiplier of a size suffix ("", "K", "KiB", "KB", ...), or 0. */
static uint64_t size_suffix(const char *s)
{
    static const char units[] = "KMGT";
    if (*s == '\0')
        return 1;
    const char *u = strchr(units, toupper((unsigned char)*s));
    if (!u)
        return 0;
    const char *rest = s + 1;
    if (strcmp(rest, "") != 0 && strcmp(rest, "B") != 0 &&
        strcmp(rest, "iB") != 0)
        return 0;
    return (uint64_t)1 << (10 * (u - units + 1));
}

int ckpt_parse_size(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -EINVAL;
    uint64_t mult = size_suffix(end);
    if (mult == 0 || v > UINT64_MAX / mult)
        return -EINVAL;
    *out = (uint64_t)v * mult;
    return 0;
}

/* A decimal count, all of s, from 0 to max. */
static int parse_count(const char *s, long max, long *out)
{
    if (!isdigit((unsigned char)*s))
        return -EINVAL;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || *end != '\0' || v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

int ckpt_write_opt_parse(ckpt_write_opts *o, const char *name,
                         const char *value, ckpt_error *err)
{
    if (!o || !name || !value)
        return ckpt_err(err, -EINVAL, "write option: NULL argument");
    if (strcmp(name, "codec") == 0)
        return ckpt_codec_parse(value, &o->codec, &o->level, err);
    if (strcmp(name, "frame_size") == 0) {
        uint64_t v;
        if (ckpt_parse_size(value, &v) || v < CKPT_MIN_FRAME_SIZE ||
            v > CKPT_MAX_FRAME_SIZE)
            return ckpt_err(err, -EINVAL, "bad frame size '%s': expected "
                            "4K to 1G, e.g. 1M or 65536", value);
        o->frame_size = (size_t)v;
        return 0;
    }
    if (strcmp(name, "full_every") == 0) {
        long n;
        if (parse_count(value, 64, &n) || n < 1)
            return ckpt_err(err, -EINVAL, "bad full_every '%s': expected 1 "
                            "to 64", value);
        o->full_every = (int)n;
        return 0;
    }
    if (strcmp(name, "threads") == 0) {
        long n;
        if (parse_count(value, CKPT_MAX_THREADS, &n))
            return ckpt_err(err, -EINVAL, "bad thread count '%s': expected "
                            "0 to %d", value, CKPT_MAX_THREADS);
        o->threads = (int)n;
        return 0;
    }
    return ckpt_err(err, -EINVAL, "unknown write option '%s'", name);
}

int ckpt_write_opts_check(const ckpt_write_opts *o, ckpt_error *err)
{
    if (o->codec != CKPT_CODEC_AUTO && !ckpt_codec_known(o->codec))
        return ckpt_err(err, -EINVAL, "unknown codec id %d", o->codec);
    if (o->frame_size < CKPT_MIN_FRAME_SIZE ||
        o->frame_size > CKPT_MAX_FRAME_SIZE)
        return ckpt_err(err, -EINVAL,
                        "frame size %zu is outside [%zu, 1 GiB]",
                        o->frame_size, CKPT_MIN_FRAME_SIZE);
    if (o->threads > CKPT_MAX_THREADS)
        return ckpt_err(err, -EINVAL, "%d encoder threads asked for, at "
                        "most %d allowed", o->threads, CKPT_MAX_THREADS);
    if (o->full_every < 1 || o->full_every > 64)
        return ckpt_err(err, -EINVAL, "full_every %d: 1 to 64 (the longest "
                        "chain of deltas a frame may need)", o->full_every);
    if (o->drop_cache < -1 || o->drop_cache > 1)
        return ckpt_err(err, -EINVAL, "drop_cache %d: 1, 0 or -1 (only for "
                        "asynchronous saves)", o->drop_cache);
    return 0;
}
