/*
 * abi_layout.c - prints, as JSON, the size and alignment of every public
 * struct of ckptfs.h with the offset of each field, and the values of the
 * enums the Python package mirrors.  tests/python/test_abi.py compares
 * them with python/ckptfs/_capi.py, so that a layout drift between the
 * header and the ctypes mirrors fails a test.
 */
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>

#include "ckptfs.h"

static int first = 1;

static void begin(const char *name, size_t size, size_t align)
{
    printf("%s\n  \"%s\": {\"size\": %zu, \"align\": %zu, \"fields\": {",
           first ? "" : ",", name, size, align);
    first = 0;
}

#define STRUCT(T) begin(#T, sizeof(T), alignof(T)); \
    { int f_ = 1; typedef T S_;
#define FIELD(m) printf("%s\"%s\": [%zu, %zu]", f_ ? "" : ", ", #m, \
                        offsetof(S_, m), sizeof(((S_ *)0)->m)); f_ = 0;
#define END printf("}}"); }

int main(void)
{
    printf("{\"structs\": {");
    STRUCT(ckpt_error) FIELD(code) FIELD(msg) END
    STRUCT(ckpt_write_opts) FIELD(size) FIELD(codec) FIELD(level) FIELD(frame_size)
        FIELD(threads) FIELD(sync) FIELD(drop_cache) FIELD(base)
        FIELD(full_every) END
    STRUCT(ckpt_piece) FIELD(fqn) FIELD(dtype) FIELD(ndim) FIELD(shape)
        FIELD(offsets) FIELD(sizes) FIELD(data) END
    STRUCT(ckpt_commit_opts) FIELD(size) FIELD(expect_writers) FIELD(sync)
        FIELD(world_size) END
    STRUCT(ckpt_read_opts) FIELD(size) FIELD(cache_bytes) FIELD(threads) FIELD(prefetch)
        FIELD(follow_links)
        END
    STRUCT(ckpt_tensor_info) FIELD(fqn) FIELD(dtype) FIELD(ndim) FIELD(shape)
        FIELD(numel) FIELD(nbytes) FIELD(stored_bytes) FIELD(nchunks)
        FIELD(nframes) FIELD(codecs) END
    STRUCT(ckpt_chunk_info) FIELD(offsets) FIELD(sizes) FIELD(file)
        FIELD(nframes) FIELD(raw_bytes) FIELD(stored_bytes) END
    STRUCT(ckpt_frame_info) FIELD(file_offset) FIELD(stored_size)
        FIELD(raw_offset) FIELD(raw_size) FIELD(codec) FIELD(checksum) END
    STRUCT(ckpt_stats) FIELD(frames_decoded) FIELD(bytes_decoded)
        FIELD(cache_hits) FIELD(cache_misses) FIELD(bytes_read)
        FIELD(bytes_served) END
    STRUCT(ckpt_saver_opts) FIELD(size) FIELD(staging_bytes) FIELD(copy_threads)
        FIELD(queue_depth) FIELD(nice) END
    STRUCT(ckpt_save_opts) FIELD(size) FIELD(write) FIELD(meta_keys) FIELD(meta_values)
        FIELD(nmeta) END
    STRUCT(ckpt_read_item) FIELD(idx) FIELD(offsets) FIELD(sizes) FIELD(dst) END
    STRUCT(ckpt_diff_entry) FIELD(fqn) FIELD(status) FIELD(same_type)
        FIELD(same_layout) FIELD(frames) FIELD(changed_frames)
        FIELD(changed_elems) FIELD(has_stats) FIELD(max_abs) FIELD(rel_l2)
        END
    STRUCT(ckpt_export_opts) FIELD(size) FIELD(format) FIELD(torch_major)
        FIELD(max_shard_size) FIELD(flat) FIELD(convert) FIELD(bytes_as_u8)
        FIELD(sync) FIELD(follow_links) FIELD(threads) FIELD(tensors)
        FIELD(ntensors) FIELD(prefix) FIELD(buffer_bytes) FIELD(progress)
        FIELD(note) FIELD(arg) END
    printf("},\n \"enums\": {\"MAX_DIMS\": %d, \"ERRMSG_CAP\": %zu, "
           "\"enum_size\": %zu,\n", CKPT_MAX_DIMS,
           sizeof(((ckpt_error *)0)->msg), sizeof(ckpt_dtype));
    printf("  \"DTYPE_INVALID\": %d, \"F64\": %d, \"F32\": %d, \"F16\": %d, "
           "\"BF16\": %d, \"F8E4M3\": %d, \"F8E5M2\": %d,\n", CKPT_DTYPE_INVALID,
           CKPT_F64, CKPT_F32, CKPT_F16, CKPT_BF16, CKPT_F8E4M3, CKPT_F8E5M2);
    printf("  \"I64\": %d, \"I32\": %d, \"I16\": %d, \"I8\": %d, \"U64\": %d, "
           "\"U32\": %d, \"U16\": %d, \"U8\": %d, \"BOOL\": %d, \"BYTES\": %d, "
           "\"DTYPE_COUNT\": %d,\n", CKPT_I64, CKPT_I32, CKPT_I16, CKPT_I8,
           CKPT_U64, CKPT_U32, CKPT_U16, CKPT_U8, CKPT_BOOL, CKPT_BYTES,
           CKPT_DTYPE_COUNT);
    printf("  \"C64\": %d, \"C128\": %d, \"C32\": %d, \"F8E4M3FNUZ\": %d, "
           "\"F8E5M2FNUZ\": %d, \"F8E8M0\": %d,\n", CKPT_C64, CKPT_C128,
           CKPT_C32, CKPT_F8E4M3FNUZ, CKPT_F8E5M2FNUZ, CKPT_F8E8M0);
    printf("  \"CODEC_AUTO\": %d, \"CODEC_RAW\": %d, \"CODEC_ZSTD\": %d, "
           "\"CODEC_LAST\": %d,\n", CKPT_CODEC_AUTO, CKPT_CODEC_RAW,
           CKPT_CODEC_ZSTD, CKPT_CODEC_BG_8);
    printf("  \"DIR_NONE\": %d, \"DIR_COMMITTED\": %d, \"DIR_PENDING\": %d,\n",
           CKPT_DIR_NONE, CKPT_DIR_COMMITTED, CKPT_DIR_PENDING);
    printf("  \"FORMAT_NONE\": %d, \"FORMAT_CKPTFS\": %d, \"FORMAT_DCP\": %d, "
           "\"FORMAT_SAFETENSORS\": %d,\n", CKPT_FORMAT_NONE,
           CKPT_FORMAT_CKPTFS, CKPT_FORMAT_DCP, CKPT_FORMAT_SAFETENSORS);
    printf("  \"EXPORT_SAFETENSORS\": %d, \"EXPORT_PT\": %d, "
           "\"EXPORT_DCP\": %d}}\n", CKPT_EXPORT_SAFETENSORS, CKPT_EXPORT_PT,
           CKPT_EXPORT_DCP);
    return 0;
}
