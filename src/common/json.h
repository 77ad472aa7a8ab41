/*
 * json.h - a strict JSON reader (RFC 8259) for the headers of safetensors
 * files and model.safetensors.index.json: values in a tree, strings
 * unescaped to UTF-8, numbers kept as text plus an int64 when integral.
 * Nesting depth and memory are bounded; any bytes give a tree or an error
 * saying what and where.
 */
#ifndef CKPT_JSON_H
#define CKPT_JSON_H

#include <stddef.h>
#include <stdint.h>
#include "ckptfs.h"

typedef enum json_type {
    JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT
} json_type;

typedef struct json_val json_val;
struct json_val {
    json_type type;
    int boolean;
    int is_int;             /* NUMBER: integral and fits int64 */
    int64_t i;
    char *s;                /* STRING: unescaped; NUMBER: its text */
    size_t len;
    json_val *items;        /* ARRAY: n values; OBJECT: n values */
    char **keys;            /* OBJECT: n keys (unescaped) */
    size_t *key_lens;
    size_t n;
};

/* Parses the whole of text[0..len) (blanks around the value allowed).
 * On error, err names `what` and the byte offset. */
int json_parse(const char *text, size_t len, const char *what,
               json_val *out, ckpt_error *err);
void json_free(json_val *v);
/* Reads `n` bytes of the text from its byte `off` into buf: 0 or a
 * negative errno (filling err). */
typedef int (*json_read_fn)(void *arg, char *buf, size_t n, uint64_t off,
                            ckpt_error *err);
/* Gets one member of an object: its key and value (both freed when fn
 * returns), and `outer`, the key of the object it is in when that is a
 * member itself (json_walk's `nested`), else NULL.  Non-zero stops the
 * walk and is its result. */
typedef int (*json_member_fn)(void *arg, const char *outer, const char *key,
                              const json_val *v, ckpt_error *err);
/* Walks the object that is the whole of a `len`-byte text, read through
 * rd piece by piece, member by member without building it: fn gets each
 * member, and each member of the member named `nested` (when not NULL
 * and an object).  What it holds at a time is a window of the text as
 * large as the largest member (256 KiB at least) and one member, however
 * long the text.  Errors as json_parse's (byte offsets in the whole
 * text). */
int json_walk(uint64_t len, json_read_fn rd, void *rarg, const char *what,
              const char *nested, json_member_fn fn, void *arg,
              ckpt_error *err);

/* The value of `key` in OBJECT o (the first, when a key repeats), or
 * NULL.  Duplicate keys are not refused here. */
const json_val *json_get(const json_val *o, const char *key);

#endif
