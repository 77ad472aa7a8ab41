/*
 * npy.h - the NumPy .npy format, one copy for `ckpt` and the mount: reading
 * the header of a file (versions 1.0, 2.0 and 3.0) to find its dtype, order,
 * shape and where its data starts; writing a version 1.0 header; widening
 * the dtypes NumPy lacks to the NumPy type that holds their values exactly:
 * bf16 and the five float8 formats to float32, c32 (complex32, two
 * binary16) to complex64.  `ckpt unpack`
 * and the mount's .npy/ view both write through here, so they give the
 * same bytes for every tensor (tests/cli/npy_same.sh).
 *
 * Widening is exact for every number (each value of those dtypes is a
 * float32) and keeps the sign of everything, zeros and NaNs included.  NaN
 * bits are defined as follows, the bits NumPy gives (and the Python
 * package's load(widen=True)):
 *  - bf16: the top half of the float32, every bit kept: a NaN keeps its
 *    payload and its quiet bit (a signalling NaN stays signalling);
 *  - f8e5m2 (the top byte of an IEEE binary16): as NumPy's float16 to
 *    float32, every bit kept too: S.11111.mm -> S | 0x7f800000 | mm << 21
 *    (mm = 01, a signalling NaN, stays signalling; nothing is quieted);
 *  - f8e4m3fn has one NaN per sign, S.1111.111: the default quiet NaN with
 *    that sign, S | 0x7fc00000 (it has no payload to keep);
 *  - f8e4m3fnuz and f8e5m2fnuz (bias 8 and 16, no infinities, no negative
 *    zero) have one NaN, 0x80: 0x7fc00000;
 *  - f8e8m0 (an exponent alone, bias 127: 2^(e-127)) has one NaN, 0xff:
 *    0x7fc00000; 0x00 is 2^-127, a float32 subnormal;
 *  - c32: each binary16 half as NumPy's float16 to float32, every bit kept
 *    (S.11111.m10 -> S | 0x7f800000 | m10 << 13).
 * f16 needs no widening: NumPy has it ('<f2').
 */
#ifndef CKPT_NPY_H
#define CKPT_NPY_H

#include <stddef.h>
#include <stdint.h>
#include "ckptfs.h"
#include "common/dtype.h"


/* Bytes of the fixed prefix: magic (6), version (2), header length (2 in
 * version 1.0, 4 in 2.0 and 3.0). */
#define NPY_PREFIX_V1 10
#define NPY_PREFIX_V2 12
/* The largest header dictionary accepted when reading. */
#define NPY_MAX_HEADER ((size_t)1 << 20)

typedef struct npy_header {
    int major, minor;           /* format version */
    ckpt_dtype dtype;
    int fortran_order;          /* 1 when the data is column-major */
    int ndim;
    int64_t shape[CKPT_MAX_DIMS];
    uint64_t data_offset;       /* where the array's bytes start */
    uint64_t nbytes;            /* numel * itemsize */
} npy_header;

/* Parses the header at the start of buf (len bytes, the file's first
 * bytes; it need not hold the data).  Needs at least the prefix; when buf
 * is shorter than the whole header, returns -EAGAIN with *need set to the
 * header's full length.  Refuses, with a message naming `what`, a file that
 * is not .npy, an unknown version, big-endian data, object, string,
 * structured and raw-void dtypes, and shapes that overflow.  Returns 0 or a
 * negative errno. */
int npy_parse_header(const void *buf, size_t len, const char *what,
                     npy_header *h, size_t *need, ckpt_error *err);

/* Reads and parses the header of the open file fd (named `path` in
 * messages) and checks that the file holds at least the array's bytes. */
int npy_read_header(int fd, const char *path, npy_header *h, ckpt_error *err);

/* Formats a version 1.0 header for (descr, shape) into buf: the total
 * length is a multiple of 64 and it ends with '\n', as NumPy writes it.
 * Returns its length, or -ENAMETOOLONG when cap is too small. */
int npy_format_header(char *buf, size_t cap, const char *descr, int ndim,
                      const int64_t *shape);

/* Formats the version 1.0 header of a tensor of dtype dt and shape
 * (ndim, shape) as its .npy image has it: the descr of
 * ckpt_dtype_npy_descr (float32 for the widened dtypes).  Returns the
 * length, -EINVAL for a dtype without a NumPy spelling or a bad shape,
 * -ENAMETOOLONG when cap is too small. */
int npy_tensor_header(ckpt_dtype dt, int ndim, const int64_t *shape,
                      char *buf, size_t cap);

/* float32 bit patterns of every float8 value, built once by
 * npy_tables_init (5 KiB) and then only read. */
typedef struct npy_tables {
    uint32_t f8e4m3[256];
    uint32_t f8e5m2[256];
    uint32_t f8e4m3fnuz[256];
    uint32_t f8e5m2fnuz[256];
    uint32_t f8e8m0[256];
} npy_tables;

void npy_tables_init(npy_tables *t);

/* Widens n elements of dt (one whose ckpt_dtype_npy_descr shows it as
 * another dtype: bf16, a float8, c32) at src to little-endian elements of
 * that dtype at dst (n * its size bytes: float32, or complex64 for c32),
 * by the rules above.  Returns 0, or -EINVAL for another dtype. */
int npy_widen(const npy_tables *t, ckpt_dtype dt, const void *src,
              size_t n, void *dst);

/* The float32 bit patterns of the 8-bit float formats and of binary16. */
uint32_t npy_f8e4m3_bits(uint8_t b);
uint32_t npy_f8e5m2_bits(uint8_t b);
uint32_t npy_f8e4m3fnuz_bits(uint8_t b);
uint32_t npy_f8e5m2fnuz_bits(uint8_t b);
uint32_t npy_f8e8m0_bits(uint8_t b);
uint32_t npy_f16_bits(uint16_t h);

#endif
