/*
 * crc32.h - the CRC-32 of zip (ISO 3309, reflected 0xEDB88320), which the
 * torch.save archives that ckpt_export writes carry for every entry.
 */
#ifndef CKPT_EXPORT_CRC32_H
#define CKPT_EXPORT_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* The running CRC after n more bytes; start from 0. */
uint32_t exp_crc32(uint32_t crc, const void *buf, size_t n);

#endif
