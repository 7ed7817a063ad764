/* GGUF writer (version 3 by default, little-endian): metadata of every type and tensors of every
 * krn_type, built in memory and written in one go. Used by tests and tools/memra-mkgguf for small files;
 * the whole file is held in memory until save.
 *
 * Errors are sticky: the first failing call records its error in the writer, later calls do nothing,
 * and save (or to_mem) returns it. So a caller may add everything and check once. Each add function also
 * returns 0 or the (first) MEMRA_E_* code. A writer is used by one thread at a time. */
#ifndef MDL_GGUF_WRITE_H
#define MDL_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>
#include "device/err.h"

typedef struct mdl_gguf_writer mdl_gguf_writer;

/* A new empty writer (version 3, alignment 32). Returns NULL + err (MEMRA_E_NOMEM). */
mdl_gguf_writer *mdl_gguf_writer_create(dev_err *err);
void mdl_gguf_writer_destroy(mdl_gguf_writer *w);

/* The header version to write (2 or 3; the layouts are the same little-endian bytes). */
int mdl_gguf_writer_set_version(mdl_gguf_writer *w, uint32_t version);
/* Tensor data alignment: writes general.alignment (u32) when it differs from 32. A power of two. Set it
 * before adding tensors. */
int mdl_gguf_writer_set_alignment(mdl_gguf_writer *w, uint32_t alignment);

/* ---- metadata (keys in call order; a key added twice is an error) ---- */
int mdl_gguf_writer_u8(mdl_gguf_writer *w, const char *key, uint8_t v);
int mdl_gguf_writer_i8(mdl_gguf_writer *w, const char *key, int8_t v);
int mdl_gguf_writer_u16(mdl_gguf_writer *w, const char *key, uint16_t v);
int mdl_gguf_writer_i16(mdl_gguf_writer *w, const char *key, int16_t v);
int mdl_gguf_writer_u32(mdl_gguf_writer *w, const char *key, uint32_t v);
int mdl_gguf_writer_i32(mdl_gguf_writer *w, const char *key, int32_t v);
int mdl_gguf_writer_u64(mdl_gguf_writer *w, const char *key, uint64_t v);
int mdl_gguf_writer_i64(mdl_gguf_writer *w, const char *key, int64_t v);
int mdl_gguf_writer_f32(mdl_gguf_writer *w, const char *key, float v);
int mdl_gguf_writer_f64(mdl_gguf_writer *w, const char *key, double v);
int mdl_gguf_writer_bool(mdl_gguf_writer *w, const char *key, int v);
int mdl_gguf_writer_str(mdl_gguf_writer *w, const char *key, const char *s);  /* NUL-terminated */
/* An array of n numeric/bool elements of type elem_type (MDL_GGUF_U8..F64 except STRING/ARRAY), data
 * packed as in the file (little-endian, bool = 1 byte). */
int mdl_gguf_writer_arr(mdl_gguf_writer *w, const char *key, int elem_type, const void *data, uint64_t n);
/* An array of n NUL-terminated strings. */
int mdl_gguf_writer_arr_str(mdl_gguf_writer *w, const char *key, const char *const *s, uint64_t n);
/* A value given as its encoded bytes (everything after the u32 type): nested arrays, or deliberately
 * malformed values in tests. */
int mdl_gguf_writer_raw(mdl_gguf_writer *w, const char *key, uint32_t type, const void *bytes, size_t len);

/* ---- tensors (written in call order, each at the next aligned offset) ---- */
/* A tensor of krn_type type with n_dims (1..4) dims ne (ne[0] fastest, a multiple of the type's block),
 * quantized from src (ne[0]*...*ne[n_dims-1] f32 values, row-major) with krn_quant_row. */
int mdl_gguf_writer_tensor_f32(mdl_gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                               const float *src);
/* The same with data already encoded in type (krn_row_bytes(type, ne[0]) * rows bytes). */
int mdl_gguf_writer_tensor_raw(mdl_gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                               const void *data);

/* The writer's sticky error: copies it into err (when err holds none yet) and returns its code, or 0. */
int mdl_gguf_writer_error(const mdl_gguf_writer *w, dev_err *err);

/* The finished file as one malloc'd buffer the caller frees. Returns 0 or the writer's error. */
int mdl_gguf_writer_to_mem(mdl_gguf_writer *w, void **buf, size_t *len, dev_err *err);
/* Write the file to path (created or truncated). Returns 0, the writer's error, or MEMRA_E_IO. */
int mdl_gguf_writer_save(mdl_gguf_writer *w, const char *path, dev_err *err);

#endif
