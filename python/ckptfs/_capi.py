"""_capi.py - the mirror of src/ckptfs.h for ctypes: its constants and
enums, every struct the package passes or receives, and the signature of
every function it calls.

This is the one place where the C layout is written down in Python.  A
change to a struct of ckptfs.h must be made here too.  Every options
struct begins with its `size`, set only by the library's *_opts_init: make
one with the class, then call its init function (as _opts.py does).
tests/python/test_abi.py compares every size and field offset below with
what the C compiler gives (tests/python/abi_layout.c) and fails on any
drift.
"""
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p,
                    c_double, c_int, c_int64, c_long, c_size_t, c_uint64,
                    c_void_p)

from . import _library

lib, LIBRARY_PATH, LIBRARY_ORIGIN = _library.load()

MAX_DIMS = 32
ERRMSG_CAP = 1024

# enum ckpt_dtype
DTYPE_INVALID = 0
F64, F32, F16, BF16, F8E4M3, F8E5M2 = 1, 2, 3, 4, 5, 6
I64, I32, I16, I8 = 7, 8, 9, 10
U64, U32, U16, U8 = 11, 12, 13, 14
BOOL, BYTES = 15, 16
C64, C128, C32, F8E4M3FNUZ, F8E5M2FNUZ, F8E8M0 = 17, 18, 19, 20, 21, 22
DTYPE_COUNT = 23

# enum ckpt_codec
CODEC_AUTO = -1
CODEC_RAW, CODEC_ZSTD = 0, 1
CODEC_LAST = 8        # CKPT_CODEC_BG_8, the highest id

# enum ckpt_dir_state
DIR_NONE, DIR_COMMITTED, DIR_PENDING = 0, 1, 2

# enum ckpt_format
FORMAT_NONE, FORMAT_CKPTFS, FORMAT_DCP, FORMAT_SAFETENSORS = 0, 1, 2, 3
FORMAT_TORCH = 4

I64P = POINTER(c_int64)


class Error(Structure):
    _fields_ = [("code", c_int), ("msg", c_char * ERRMSG_CAP)]


class WriteOpts(Structure):
    _fields_ = [("size", c_size_t),
                ("codec", c_int), ("level", c_int), ("frame_size", c_size_t),
                ("threads", c_int), ("sync", c_int), ("drop_cache", c_int),
                ("base", c_char_p), ("full_every", c_int)]


class Piece(Structure):
    _fields_ = [("fqn", c_char_p), ("dtype", c_int), ("ndim", c_int),
                ("shape", I64P), ("offsets", I64P), ("sizes", I64P),
                ("data", c_void_p)]


class CommitOpts(Structure):
    _fields_ = [("size", c_size_t), ("expect_writers", c_int),
                ("sync", c_int), ("world_size", c_int)]


class ReadOpts(Structure):
    _fields_ = [("size", c_size_t), ("cache_bytes", c_size_t),
                ("threads", c_int), ("prefetch", c_int),
                ("follow_links", c_int)]


class TensorInfo(Structure):
    _fields_ = [("fqn", c_char_p), ("dtype", c_int), ("ndim", c_int),
                ("shape", I64P), ("numel", c_uint64), ("nbytes", c_uint64),
                ("stored_bytes", c_uint64), ("nchunks", c_size_t),
                ("nframes", c_uint64), ("codecs", c_char_p)]


class ChunkInfo(Structure):
    _fields_ = [("offsets", I64P), ("sizes", I64P), ("file", c_char_p),
                ("nframes", c_uint64), ("raw_bytes", c_uint64),
                ("stored_bytes", c_uint64)]


class FrameInfo(Structure):
    _fields_ = [("file_offset", c_uint64), ("stored_size", c_uint64),
                ("raw_offset", c_uint64), ("raw_size", c_uint64),
                ("codec", c_int), ("checksum", c_uint64)]


class Stats(Structure):
    _fields_ = [("frames_decoded", c_uint64), ("bytes_decoded", c_uint64),
                ("cache_hits", c_uint64), ("cache_misses", c_uint64),
                ("bytes_read", c_uint64), ("bytes_served", c_uint64)]


class SaverOpts(Structure):
    _fields_ = [("size", c_size_t), ("staging_bytes", c_size_t),
                ("copy_threads", c_int),
                ("queue_depth", c_int), ("nice", c_int)]


class SaveOpts(Structure):
    _fields_ = [("size", c_size_t), ("write", WriteOpts),
                ("meta_keys", POINTER(c_char_p)),
                ("meta_values", POINTER(c_char_p)), ("nmeta", c_size_t)]


class DiffEntry(Structure):
    _fields_ = [("fqn", c_char_p), ("status", c_int), ("same_type", c_int),
                ("same_layout", c_int), ("frames", c_uint64),
                ("changed_frames", c_uint64), ("changed_elems", c_uint64),
                ("has_stats", c_int), ("max_abs", c_double),
                ("rel_l2", c_double)]


DIFF_FN = CFUNCTYPE(None, c_void_p, POINTER(DiffEntry))


class ReadItem(Structure):
    _fields_ = [("idx", c_size_t), ("offsets", I64P), ("sizes", I64P),
                ("dst", c_void_p)]


# enum ckpt_export_format
EXPORT_SAFETENSORS, EXPORT_PT, EXPORT_DCP = 1, 2, 3

PROGRESS_FN = CFUNCTYPE(None, c_void_p, c_uint64, c_uint64)
NOTE_FN = CFUNCTYPE(None, c_void_p, c_char_p, c_char_p)


class ExportOpts(Structure):
    _fields_ = [("size", c_size_t), ("format", c_int),
                ("torch_major", c_int), ("max_shard_size", c_uint64),
                ("flat", c_int), ("convert", c_int), ("bytes_as_u8", c_int),
                ("sync", c_int), ("follow_links", c_int), ("threads", c_int),
                ("tensors", POINTER(c_char_p)), ("ntensors", c_size_t),
                ("prefix", c_char_p), ("buffer_bytes", c_size_t),
                ("progress", PROGRESS_FN), ("note", NOTE_FN),
                ("arg", c_void_p)]


# Every struct above, by its C name (for the layout test).
STRUCTS = {
    "ckpt_error": Error, "ckpt_write_opts": WriteOpts, "ckpt_piece": Piece,
    "ckpt_commit_opts": CommitOpts, "ckpt_read_opts": ReadOpts,
    "ckpt_tensor_info": TensorInfo, "ckpt_chunk_info": ChunkInfo,
    "ckpt_frame_info": FrameInfo, "ckpt_stats": Stats,
    "ckpt_saver_opts": SaverOpts, "ckpt_save_opts": SaveOpts,
    "ckpt_read_item": ReadItem, "ckpt_diff_entry": DiffEntry,
    "ckpt_export_opts": ExportOpts,
}

_ERR = POINTER(Error)
_P = c_void_p        # an opaque handle: ckpt_writer *, ckpt_reader *, ...
_PP = POINTER(c_void_p)

# name: (restype, argtypes)
_SIGNATURES = {
    "ckpt_version": (c_char_p, []),
    "ckpt_dtype_name": (c_char_p, [c_int]),
    "ckpt_dtype_size": (c_size_t, [c_int]),
    "ckpt_dtype_parse": (c_int, [c_char_p]),
    "ckpt_codec_name": (c_char_p, [c_int]),
    "ckpt_dir_probe": (c_int, [c_char_p]),
    "ckpt_format_probe": (c_int, [c_char_p, c_char_p, c_size_t]),
    # writing
    "ckpt_write_opts_init": (None, [POINTER(WriteOpts)]),
    "ckpt_writer_open": (c_int, [_PP, c_char_p, c_char_p,
                                 POINTER(WriteOpts), _ERR]),
    "ckpt_writer_put": (c_int, [_P, POINTER(Piece), _ERR]),
    "ckpt_writer_put_bytes": (c_int, [_P, c_char_p, c_void_p, c_size_t,
                                      _ERR]),
    "ckpt_writer_set_meta": (c_int, [_P, c_char_p, c_char_p, _ERR]),
    "ckpt_writer_close": (c_int, [_P, _ERR]),
    "ckpt_writer_abort": (None, [_P]),
    "ckpt_commit_opts_init": (None, [POINTER(CommitOpts)]),
    "ckpt_commit": (c_int, [c_char_p, POINTER(CommitOpts), _ERR]),
    "ckpt_save_opts_init": (None, [POINTER(SaveOpts)]),
    "ckpt_save_sync": (c_int, [c_char_p, POINTER(Piece), c_size_t,
                               POINTER(SaveOpts), _ERR]),
    # reading
    "ckpt_read_opts_init": (None, [POINTER(ReadOpts)]),
    "ckpt_reader_open": (c_int, [_PP, c_char_p, POINTER(ReadOpts), _ERR]),
    "ckpt_reader_close": (None, [_P]),
    "ckpt_reader_format": (c_int, [_P]),
    "ckpt_reader_count": (c_size_t, [_P]),
    "ckpt_reader_info": (c_int, [_P, c_size_t, POINTER(TensorInfo)]),
    "ckpt_reader_find": (c_long, [_P, c_char_p]),
    "ckpt_reader_chunk": (c_int, [_P, c_size_t, c_size_t,
                                  POINTER(ChunkInfo)]),
    "ckpt_reader_frame": (c_int, [_P, c_size_t, c_size_t, c_uint64,
                                  POINTER(FrameInfo), _ERR]),
    "ckpt_reader_meta_count": (c_size_t, [_P]),
    "ckpt_reader_meta_at": (c_int, [_P, c_size_t, POINTER(c_char_p),
                                    POINTER(c_char_p)]),
    "ckpt_read": (c_int64, [_P, c_size_t, c_void_p, c_uint64, c_uint64,
                            _ERR]),
    "ckpt_read_region": (c_int, [_P, c_size_t, I64P, I64P, c_void_p, _ERR]),
    "ckpt_read_batch": (c_int, [_P, POINTER(ReadItem), c_size_t, _ERR]),
    "ckpt_load_region": (c_int, [_P, c_size_t, I64P, I64P, c_void_p, _ERR]),
    "ckpt_load_batch": (c_int, [_P, POINTER(ReadItem), c_size_t, _ERR]),
    "ckpt_reader_stats": (None, [_P, POINTER(Stats)]),
    "ckpt_diff": (c_int64, [_P, _P, DIFF_FN, c_void_p, _ERR]),
    # asynchronous saves
    "ckpt_saver_opts_init": (None, [POINTER(SaverOpts)]),
    "ckpt_saver_create": (c_int, [_PP, POINTER(SaverOpts), _ERR]),
    "ckpt_saver_destroy": (None, [_P]),
    "ckpt_saver_cuda": (c_int, [_P]),
    "ckpt_saver_reserve": (c_int, [_P, c_uint64, _ERR]),
    "ckpt_save_async": (c_int, [_P, c_char_p, POINTER(Piece), c_size_t,
                                POINTER(SaveOpts), _PP, _ERR]),
    "ckpt_save_poll": (c_int, [_P]),
    "ckpt_save_wait": (c_int, [_P, _ERR]),
    # export
    "ckpt_export_opts_init": (None, [POINTER(ExportOpts)]),
    "ckpt_export": (c_int, [c_char_p, c_char_p, POINTER(ExportOpts), _ERR]),
}


def _bind():
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


_bind()


def int64_array(values):
    """A C int64_t array holding `values` (at least one element, so that
    its address is valid even for a 0-d shape)."""
    values = [int(v) for v in values]
    return (c_int64 * max(1, len(values)))(*values)


def fsencode(path):
    """A path (str, bytes or os.PathLike) as the bytes the C calls take."""
    return os.fsencode(path)
