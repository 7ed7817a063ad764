/* Test helper: write a tiny synthetic Llama-family GGUF model (model/gguf_synth) to a file. The defaults
 * are small enough for sanitizer runs: llama, 4 layers, embd 64, 4 heads, 2 kv heads, ff 128, vocab 300,
 * ctx 256, q4_1 weights, q8_0 token_embd, f32 norms, seed 1, untied (output.weight present). Change any
 * field of the params (e.g. .arch = "qwen2", .tied = 1, .type = KRN_F32) before writing. */
#ifndef TESTS_GGUF_TINY_H
#define TESTS_GGUF_TINY_H

#include <stddef.h>
#include "device/err.h"
#include "model/gguf_synth.h"

typedef mdl_gguf_synth gguf_tiny_params;

/* Fill p with the defaults above. */
void gguf_tiny_defaults(gguf_tiny_params *p);

/* Write the model to path. Returns 0 or MEMRA_E_* with err filled. p == NULL means the defaults. */
int gguf_tiny_write(const char *path, const gguf_tiny_params *p, dev_err *err);

/* Write the model to a new unique file under $TMPDIR (or /tmp); its name goes to path (cap >= 64 bytes).
 * The caller removes it (unlink). Returns 0 or MEMRA_E_*. */
int gguf_tiny_write_temp(char *path, size_t cap, const gguf_tiny_params *p, dev_err *err);

/* A new unique empty file under $TMPDIR (or /tmp) named memra-<tag>-XXXXXX; its name goes to path.
 * Returns 0 or MEMRA_E_IO. */
int gguf_tiny_temp_path(char *path, size_t cap, const char *tag, dev_err *err);

#endif
