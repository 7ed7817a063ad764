/* Test helper: byte-level GGUF checks shared by the gguf tests (write a buffer to a file, expect open to
 * fail with a code and message, find a tensor's info fields to damage them). Uses cmocka asserts. */
#ifndef TESTS_GGUF_CHECK_H
#define TESTS_GGUF_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include "model/gguf.h"
#include "model/gguf_write.h"

/* Write n bytes of p to path (fails the test on an I/O error). */
void gguf_check_save(const char *path, const void *p, size_t n);
/* Save buf to path and open it; the open must fail with code and a message containing want and path. */
void gguf_check_open_fails(const char *path, const void *buf, size_t n, int code, const char *want);
/* Save buf to path and open it; the open must succeed. The caller closes the result. */
mdl_gguf *gguf_check_open_buf(const char *path, const void *buf, size_t n);
/* The writer's file as a malloc'd buffer (caller frees), then destroy the writer. */
void gguf_check_finish(mdl_gguf_writer *w, void **buf, size_t *n);
/* Offset in buf of the field right after tensor info name `name` (its n_dims u32). */
size_t gguf_check_tensor_info_at(const uint8_t *buf, size_t n, const char *name);
void gguf_check_put_u64(uint8_t *p, uint64_t v); /* little-endian store at p */
void gguf_check_put_u32(uint8_t *p, uint32_t v);

#endif
