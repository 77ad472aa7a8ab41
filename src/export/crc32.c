/*
 * crc32.c - zip's CRC-32, eight bytes a step (slicing-by-8), so that the
 * checksum costs little beside the write of a tensor's bytes.
 */
#include "export/crc32.h"

#include <pthread.h>
#include <string.h>

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

/* The tables are constants, computed once (not mutable state). */
static void make_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^
                          table[0][table[t - 1][i] & 0xff];
}

uint32_t exp_crc32(uint32_t crc, const void *buf, size_t n)
{
    pthread_once(&table_once, make_table);
    const unsigned char *p = buf;
    uint32_t c = ~crc;
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= c;     /* little-endian host (ckptfs's format assumes it) */
        c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^
            table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24] ^
            table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
            table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}
