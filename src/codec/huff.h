/*
 * huff.h - a small static Huffman coder over bytes, for the byte planes of
 * the byte-grouped codecs (codec.c).
 *
 * One coded stream carries its own code (4-bit code lengths, at most
 * CKPT_HUF_MAX_BITS bits per code) and four interleaved bit streams, each
 * coding a quarter of the symbols, so that decoding runs four independent
 * chains.  The decoder looks up CKPT_HUF_MAX_BITS bits at a time in a table
 * that yields up to 7 symbols per lookup.  Decoding checks every length and
 * offset: garbage yields an error or wrong bytes (caught by the frame
 * checksum), never a read or write out of bounds.  The layout is in
 * docs/FORMAT.md ("Huffman stream").
 */
#ifndef CKPT_HUFF_H
#define CKPT_HUFF_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_HUF_MAX_BITS 11
/* Bytes an encoder may write past the end of what it returns. */
#define CKPT_HUF_SLACK 8

/* Counts the bytes of src[0..n) into hist (256 counters, overwritten). */
void ckpt_hist(const uint8_t *src, size_t n, uint32_t hist[256]);

/* Shannon entropy of a histogram of n symbols, in bits per symbol. */
double ckpt_hist_entropy(const uint32_t hist[256], size_t n);

/* An encoding code built from a histogram. */
typedef struct ckpt_huf_code {
    uint32_t enc[256];    /* bit-reversed code | length << 16 */
    uint8_t len[256];     /* 0 for symbols absent from the histogram */
    int first, count;     /* symbols first .. first+count-1 are described */
    size_t size;          /* exact bytes ckpt_huf_encode will return, at
                             most (it depends on where the streams cut) */
} ckpt_huf_code;

/* Builds a length-limited Huffman code for the symbols counted in hist.
 * Returns 0, or -1 when fewer than two distinct symbols occur (use a
 * constant stream instead). */
int ckpt_huf_build(const uint32_t hist[256], ckpt_huf_code *code);

/* Encodes src[0..n) (whose histogram built `code`) into dst.  dst must hold
 * code->size + CKPT_HUF_SLACK bytes.  Returns the bytes used (<= size). */
size_t ckpt_huf_encode(const ckpt_huf_code *code, const uint8_t *src,
                       size_t n, uint8_t *dst);

/* Decoding tables, about 20 KiB.  Keep one per thread (codec context),
 * zero-initialised.  They are rebuilt when a stream's code differs from
 * the last one decoded with them (consecutive frames of a tensor often
 * share their code: the rebuild is then skipped). */
typedef struct ckpt_huf_dtable {
    uint64_t multi[1u << CKPT_HUF_MAX_BITS];
    uint16_t single[1u << CKPT_HUF_MAX_BITS];
    uint8_t code[2 + 128];  /* the code description the tables hold */
    uint8_t code_len;       /* its bytes; 0: the tables hold nothing */
    uint8_t has_multi;      /* multi[] is built for it */
} ckpt_huf_dtable;

/* Decodes a stream of sn bytes at src into exactly n bytes at dst.
 * Returns 0, or -1 when the stream is malformed or does not decode to
 * exactly n symbols. */
int ckpt_huf_decode(ckpt_huf_dtable *t, const uint8_t *src, size_t sn,
                    uint8_t *dst, size_t n);

#endif
