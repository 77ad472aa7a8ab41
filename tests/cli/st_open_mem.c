/*
 * st_open_mem.c - what opening a checkpoint through the library costs in
 * memory, for tests/cli/st_header_memory.sh: opens PATH with
 * ckpt_reader_open, lists every tensor (ckpt_reader_info), reads the
 * tensors named on the command line (and the metadata keys given as
 * @KEY), and prints
 *
 *     tensors N
 *     bytes B             (the tensors' bytes, all together)
 *     hwm_kb K            (VmHWM: the peak resident size so far)
 *     NAME HEX            (each named tensor's bytes, in hex)
 *     @KEY VALUE          (each named metadata value)
 *
 * Exit status 0, or 1 with the library's message on stderr.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"

/* The peak resident size of this process in kB, or -1. */
static long hwm_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0)
            kb = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kb;
}

/* Prints tensor `name`'s bytes in hex. */
static int print_tensor(ckpt_reader *r, const char *name)
{
    ckpt_error err = { 0 };
    ckpt_tensor_info t;
    long idx = ckpt_reader_find(r, name);
    if (idx < 0 || ckpt_reader_info(r, (size_t)idx, &t) != 0) {
        fprintf(stderr, "st_open_mem: no tensor '%s'\n", name);
        return 1;
    }
    unsigned char *buf = malloc(t.nbytes ? t.nbytes : 1);
    int64_t got = buf ? ckpt_read(r, (size_t)idx, buf, 0, t.nbytes, &err)
                      : -1;
    if (got != (int64_t)t.nbytes) {
        fprintf(stderr, "st_open_mem: %s: %s\n", name, err.msg);
        free(buf);
        return 1;
    }
    printf("%s ", name);
    for (uint64_t i = 0; i < t.nbytes; i++)
        printf("%02x", buf[i]);
    printf("\n");
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: st_open_mem PATH [TENSOR...]\n");
        return 2;
    }
    ckpt_reader *r;
    ckpt_error err = { 0 };
    if (ckpt_reader_open(&r, argv[1], NULL, &err) != 0) {
        fprintf(stderr, "st_open_mem: %s\n", err.msg);
        return 1;
    }
    size_t n = ckpt_reader_count(r);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        ckpt_tensor_info t;
        if (ckpt_reader_info(r, i, &t) == 0)
            total += t.nbytes;
    }
    printf("tensors %zu\nbytes %" PRIu64 "\nhwm_kb %ld\n", n, total,
           hwm_kb());
    int rc = 0;
    for (int i = 2; i < argc; i++) {
        if (argv[i][0] == '@') {
            const char *v = ckpt_reader_meta_get(r, argv[i] + 1);
            printf("%s %s\n", argv[i], v ? v : "(none)");
        } else {
            rc |= print_tensor(r, argv[i]);
        }
    }
    ckpt_reader_close(r);
    return rc;
}
