/*
 * pickle.h - a restricted reader of Python pickles: exactly what PyTorch's
 * distributed-checkpoint metadata (.metadata) and torch.save's data.pkl
 * hold (a tensor, or an io.BytesIO), turned into plain values.  It never executes anything: a global
 * is accepted only when it is on the allowlist below (anything else is
 * refused with a message naming it), and calling one (REDUCE, NEWOBJ)
 * only records the call as an object.  Memory, stack, memo and nesting are
 * bounded, and any byte string gives either values or an error.
 */
#ifndef CKPT_PICKLE_H
#define CKPT_PICKLE_H

#include <stddef.h>
#include <stdint.h>
#include "ckptfs.h"

/* The allowlisted globals: id, module, name. */
#define PK_GLOBALS(X) \
    X(PKG_DCP_METADATA, "torch.distributed.checkpoint.metadata", "Metadata") \
    X(PKG_DCP_TENSOR_MD, "torch.distributed.checkpoint.metadata", "TensorStorageMetadata") \
    X(PKG_DCP_BYTES_MD, "torch.distributed.checkpoint.metadata", "BytesStorageMetadata") \
    X(PKG_DCP_CHUNK_MD, "torch.distributed.checkpoint.metadata", "ChunkStorageMetadata") \
    X(PKG_DCP_INDEX, "torch.distributed.checkpoint.metadata", "MetadataIndex") \
    X(PKG_DCP_PROPS, "torch.distributed.checkpoint.metadata", "TensorProperties") \
    X(PKG_DCP_STORAGE_META, "torch.distributed.checkpoint.metadata", "StorageMeta") \
    X(PKG_DCP_MEMFMT, "torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING") \
    X(PKG_DCP_STORAGE_INFO, "torch.distributed.checkpoint.filesystem", "_StorageInfo") \
    X(PKG_SH_METADATA, "torch.distributed._shard.checkpoint.metadata", "Metadata") \
    X(PKG_SH_TENSOR_MD, "torch.distributed._shard.checkpoint.metadata", "TensorStorageMetadata") \
    X(PKG_SH_BYTES_MD, "torch.distributed._shard.checkpoint.metadata", "BytesStorageMetadata") \
    X(PKG_SH_CHUNK_MD, "torch.distributed._shard.checkpoint.metadata", "ChunkStorageMetadata") \
    X(PKG_SH_INDEX, "torch.distributed._shard.checkpoint.metadata", "MetadataIndex") \
    X(PKG_SH_STORAGE_INFO, "torch.distributed._shard.checkpoint.filesystem", "_StorageInfo") \
    X(PKG_ST_PROPS, "torch.distributed._shard.sharded_tensor.metadata", "TensorProperties") \
    X(PKG_ST_MEMFMT, "torch.distributed._shard.sharded_tensor.metadata", "MEM_FORMAT_ENCODING") \
    X(PKG_TORCH_SIZE, "torch", "Size") \
    X(PKG_GET_LAYOUT, "torch.serialization", "_get_layout") \
    X(PKG_GETATTR, "builtins", "getattr") \
    X(PKG_ORDERED_DICT, "collections", "OrderedDict") \
    X(PKG_REBUILD_V2, "torch._utils", "_rebuild_tensor_v2") \
    X(PKG_REBUILD_V3, "torch._utils", "_rebuild_tensor_v3") \
    X(PKG_REBUILD_PARAM, "torch._utils", "_rebuild_parameter") \
    X(PKG_POSIX_PATH, "pathlib", "PosixPath") \
    X(PKG_PURE_POSIX_PATH, "pathlib", "PurePosixPath") \
    X(PKG_PATH, "pathlib", "Path") \
    X(PKG_POSIX_PATH313, "pathlib._local", "PosixPath") \
    X(PKG_PURE_POSIX_PATH313, "pathlib._local", "PurePosixPath") \
    X(PKG_PATH313, "pathlib._local", "Path") \
    X(PKG_STRIDED, "torch", "strided") \
    X(PKG_CONTIGUOUS, "torch", "contiguous_format") \
    X(PKG_CHANNELS_LAST, "torch", "channels_last") \
    X(PKG_PRESERVE, "torch", "preserve_format") \
    X(PKG_UNTYPED_STORAGE, "torch", "UntypedStorage") \
    X(PKG_UNTYPED_STORAGE2, "torch.storage", "UntypedStorage") \
    X(PKG_DT_F64, "torch", "float64") X(PKG_DT_F32, "torch", "float32") \
    X(PKG_DT_F16, "torch", "float16") X(PKG_DT_BF16, "torch", "bfloat16") \
    X(PKG_DT_F8E4M3, "torch", "float8_e4m3fn") \
    X(PKG_DT_F8E5M2, "torch", "float8_e5m2") \
    X(PKG_DT_F8E4M3FNUZ, "torch", "float8_e4m3fnuz") \
    X(PKG_DT_F8E5M2FNUZ, "torch", "float8_e5m2fnuz") \
    X(PKG_DT_F8E8M0, "torch", "float8_e8m0fnu") \
    X(PKG_DT_C32, "torch", "complex32") X(PKG_DT_C64, "torch", "complex64") \
    X(PKG_DT_C128, "torch", "complex128") \
    X(PKG_DT_I64, "torch", "int64") X(PKG_DT_I32, "torch", "int32") \
    X(PKG_DT_I16, "torch", "int16") X(PKG_DT_I8, "torch", "int8") \
    X(PKG_DT_U64, "torch", "uint64") X(PKG_DT_U32, "torch", "uint32") \
    X(PKG_DT_U16, "torch", "uint16") X(PKG_DT_U8, "torch", "uint8") \
    X(PKG_DT_BOOL, "torch", "bool") \
    X(PKG_ST_F64, "torch", "DoubleStorage") X(PKG_ST_F32, "torch", "FloatStorage") \
    X(PKG_ST_F16, "torch", "HalfStorage") X(PKG_ST_BF16, "torch", "BFloat16Storage") \
    X(PKG_ST_I64, "torch", "LongStorage") X(PKG_ST_I32, "torch", "IntStorage") \
    X(PKG_ST_I16, "torch", "ShortStorage") X(PKG_ST_I8, "torch", "CharStorage") \
    X(PKG_ST_U8, "torch", "ByteStorage") \
    X(PKG_ST_C32, "torch", "ComplexHalfStorage") \
    X(PKG_ST_C64, "torch", "ComplexFloatStorage") \
    X(PKG_ST_C128, "torch", "ComplexDoubleStorage") \
    X(PKG_ST_BOOL, "torch", "BoolStorage") \
    X(PKG_BYTESIO, "_io", "BytesIO") \
    X(PKG_CODECS_ENCODE, "_codecs", "encode") \
    X(PKG_BUILTIN_BYTES, "__builtin__", "bytes")

typedef enum pk_global {
#define PK_ENUM_(id, mod, name) id,
    PK_GLOBALS(PK_ENUM_)
#undef PK_ENUM_
    PKG_COUNT
} pk_global;

typedef enum pk_type {
    PK_NONE, PK_BOOL, PK_INT, PK_FLOAT, PK_STR, PK_BYTES,
    PK_TUPLE, PK_LIST, PK_DICT,
    PK_GLOBAL,   /* an allowlisted global: `i` is its pk_global */
    PK_OBJ,      /* cls(args) recorded, plus the BUILD state if any;
                    but _codecs.encode(str, "latin1") and
                    __builtin__.bytes(), protocol 2's spelling of bytes,
                    give the BYTES they make */
    PK_PERSID    /* a persistent id (torch.save's storages): `args` */
} pk_type;

typedef struct pk_val pk_val;
struct pk_val {
    pk_type type;
    int64_t i;              /* BOOL, INT, GLOBAL */
    double f;               /* FLOAT */
    char *s;                /* STR (UTF-8), BYTES: NUL-terminated copy */
    size_t len;
    pk_val **items;         /* TUPLE, LIST: n items; DICT: n/2 pairs as
                               key, value, key, value, ... */
    size_t n, cap;
    pk_val *cls;            /* OBJ: the GLOBAL called */
    pk_val *args;           /* OBJ: a TUPLE; PERSID: the id */
    pk_val *state;          /* OBJ, DICT (an OrderedDict's attributes):
                               BUILD's argument, or NULL */
};

typedef struct pk_ctx pk_ctx;

/* Runs the pickle `data` (len bytes) with at most `mem_limit` bytes of
 * values; *root is the value STOP returns, owned by *ctx.  On error *ctx
 * is NULL and err says what and at which offset.  `what` names the input
 * in messages. */
int pk_load(const void *data, size_t len, size_t mem_limit, const char *what,
            pk_ctx **ctx, pk_val **root, ckpt_error *err);
void pk_free(pk_ctx *ctx);

/* "module.name" of an allowlisted global. */
const char *pk_global_name(int id);
/* The global id of v (a GLOBAL or the class of an OBJ), or -1. */
int pk_global_of(const pk_val *v);
/* The value of string key `key` in DICT d, or NULL. */
const pk_val *pk_dict_get(const pk_val *d, const char *key);
/* The attribute `name` of OBJ o: from its BUILD state when that is a dict
 * (or a (dict, slots) pair), else NULL. */
const pk_val *pk_attr(const pk_val *o, const char *name);
/* Item i of a TUPLE or LIST, or NULL. */
const pk_val *pk_item(const pk_val *v, size_t i);
/* v is a TUPLE or LIST of at most CKPT_MAX_DIMS non-negative INTs: fills
 * dims and returns their count; -1 otherwise. */
int pk_dims(const pk_val *v, int64_t *dims);

#endif
