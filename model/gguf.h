/* GGUF reader (versions 2 and 3, little-endian) over a read-only mmap of the file.
 *
 * mdl_gguf_open validates the whole header before it returns: magic, version, counts against the file
 * size, every string and array inside the file, every metadata value type (nested arrays included, depth
 * <= MDL_GGUF_MAX_DEPTH), no duplicate keys or tensor names, tensor dims (1..4 dims, each > 0, no overflow),
 * tensor types (krn_type_supported, else MEMRA_E_UNSUPPORTED naming the tensor), general.alignment (u32,
 * a power of two; default 32), every tensor offset aligned and its data inside the file. A corrupt file
 * gives MEMRA_E_FORMAT with a message naming the file, what was wrong and at which byte; it never crashes.
 *
 * Ownership: everything a getter returns (keys, names, strings, array data, tensor data) points into the
 * mdl_gguf (its map or its tables) and lives until mdl_gguf_close. A mdl_gguf is immutable after open and
 * may be read from any number of threads at once. */
#ifndef MDL_GGUF_H
#define MDL_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include "device/err.h"

/* GGUF metadata value types (the numbers stored in the file). */
enum {
    MDL_GGUF_U8 = 0, MDL_GGUF_I8 = 1, MDL_GGUF_U16 = 2, MDL_GGUF_I16 = 3, MDL_GGUF_U32 = 4, MDL_GGUF_I32 = 5,
    MDL_GGUF_F32 = 6, MDL_GGUF_BOOL = 7, MDL_GGUF_STRING = 8, MDL_GGUF_ARRAY = 9, MDL_GGUF_U64 = 10,
    MDL_GGUF_I64 = 11, MDL_GGUF_F64 = 12,
};
#define MDL_GGUF_TYPE_COUNT 13
#define MDL_GGUF_MAX_DIMS 4
#define MDL_GGUF_MAX_DEPTH 8          /* arrays nested deeper than this are refused */
#define MDL_GGUF_DEFAULT_ALIGNMENT 32

typedef struct mdl_gguf mdl_gguf;

typedef struct mdl_gguf_tensor {
    const char *name;  /* NUL-terminated, e.g. "blk.0.attn_q.weight" */
    int n_dims;        /* 1..4 */
    int64_t ne[4];     /* elements per dim, ne[0] fastest (= row length n_in); unused dims are 1.
                        * A 2-D weight W (n_out, n_in) has ne = {n_in, n_out}. */
    int type;          /* krn_type */
    uint64_t offset;   /* byte offset of the data from the start of the data section */
    const void *data;  /* the bytes in the map (aligned to general.alignment) */
    size_t bytes;      /* krn_row_bytes(type, ne[0]) * ne[1] * ne[2] * ne[3] */
} mdl_gguf_tensor;

/* What identifies the file a mdl_gguf was opened from: its size and modification time (fstat of the descriptor
 * that was mapped) and a 64-bit FNV-1a hash of its header bytes [0, data section) (metadata, vocab and tensor
 * table). Weights are not hashed (gigabytes); a file rewritten with the same header, size and mtime is not
 * told apart. */
typedef struct mdl_gguf_id {
    uint64_t size;         /* bytes */
    int64_t mtime_s;       /* st_mtim */
    int64_t mtime_ns;
    uint64_t header_hash;  /* FNV-1a 64 of bytes [0, mdl_gguf_data_offset) */
} mdl_gguf_id;

/* Map and validate the file at path. Returns NULL and fills err: MEMRA_E_IO (cannot open/map),
 * MEMRA_E_FORMAT (corrupt / unsupported version), MEMRA_E_UNSUPPORTED (a tensor type memra lacks),
 * MEMRA_E_NOMEM. Cost: one pass over the header and metadata (O(file header), the vocab included), and its
 * hash (mdl_gguf_id: about 1 ms per MB of header). */
mdl_gguf *mdl_gguf_open(const char *path, dev_err *err);
/* Unmap and free; NULL is a no-op. Every pointer obtained from g dies here. */
void mdl_gguf_close(mdl_gguf *g);

int mdl_gguf_version(const mdl_gguf *g);             /* 2 or 3 */
const char *mdl_gguf_path(const mdl_gguf *g);
size_t mdl_gguf_file_size(const mdl_gguf *g);
uint32_t mdl_gguf_alignment(const mdl_gguf *g);       /* general.alignment or 32 */
size_t mdl_gguf_data_offset(const mdl_gguf *g);       /* file offset of the data section */
/* The identity recorded at open (above). */
const mdl_gguf_id *mdl_gguf_identity(const mdl_gguf *g);
/* Whether path still has want's size and mtime (one stat; no read): 0, or MEMRA_E_STATE naming the path and
 * what changed (MEMRA_E_IO when it cannot be stat'ed). `since` names the call that recorded want. */
int mdl_gguf_id_check_path(const char *path, const mdl_gguf_id *want, const char *since, dev_err *err);
/* Whether two identities are the same file contents (size, mtime and header hash all equal): 0, or
 * MEMRA_E_STATE naming path and the first field that differs. */
int mdl_gguf_id_compare(const char *path, const mdl_gguf_id *got, const mdl_gguf_id *want, const char *since,
                        dev_err *err);

/* ---- metadata ---- */
int mdl_gguf_kv_count(const mdl_gguf *g);
const char *mdl_gguf_kv_key(const mdl_gguf *g, int i);   /* NULL when i is out of range */
int mdl_gguf_kv_type(const mdl_gguf *g, int i);          /* MDL_GGUF_*; -1 when i is out of range */
int mdl_gguf_find(const mdl_gguf *g, const char *key);   /* index or -1; O(log n_kv) */

/* Typed getters: 0 or MEMRA_E_FORMAT ("missing key" / wrong type / out of range), err names file and key.
 * get_u32 and get_i64 accept any integer type whose value fits; get_f32 accepts f32 and f64. */
int mdl_gguf_get_u32(const mdl_gguf *g, const char *key, uint32_t *out, dev_err *err);
int mdl_gguf_get_i64(const mdl_gguf *g, const char *key, int64_t *out, dev_err *err);
int mdl_gguf_get_f32(const mdl_gguf *g, const char *key, float *out, dev_err *err);
int mdl_gguf_get_bool(const mdl_gguf *g, const char *key, int *out, dev_err *err);
/* *s points into the map and is NOT NUL-terminated; *len is its length in bytes. */
int mdl_gguf_get_str(const mdl_gguf *g, const char *key, const char **s, size_t *len, dev_err *err);
/* An array's element type (MDL_GGUF_*) and element count. */
int mdl_gguf_get_arr(const mdl_gguf *g, const char *key, int *elem_type, uint64_t *n, dev_err *err);
/* Element i of a string array (the vocab, the merges): O(1) (an index is built at open). *s is not
 * NUL-terminated. Returns 0, or MEMRA_E_INVAL when key is missing, not a string array, or i >= n. */
int mdl_gguf_arr_str(const mdl_gguf *g, const char *key, uint64_t i, const char **s, size_t *len);
/* The elements of a numeric or bool array (scores f32, token_type i32), aligned for the element type
 * (copied at open when the file's placement is not aligned). NULL for a missing key, a string array or
 * an array of arrays. */
const void *mdl_gguf_arr_data(const mdl_gguf *g, const char *key);

/* ---- tensors ---- */
int mdl_gguf_tensor_count(const mdl_gguf *g);
const mdl_gguf_tensor *mdl_gguf_tensor_at(const mdl_gguf *g, int i);            /* NULL if out of range */
const mdl_gguf_tensor *mdl_gguf_tensor_find(const mdl_gguf *g, const char *name); /* NULL if absent; O(log n) */

/* Size in bytes of a scalar value type (u8..f64, bool); 0 for string, array or an invalid type. */
size_t mdl_gguf_scalar_size(int type);
/* Name of a GGUF metadata value type ("u32", "string"; "invalid" otherwise). */
const char *mdl_gguf_type_name(int type);

#endif
