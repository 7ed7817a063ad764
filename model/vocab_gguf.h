/* Glue: a tokenizer from a GGUF's tokenizer.* keys (model/tokenizer.h knows nothing of GGUF). */
#ifndef MDL_VOCAB_GGUF_H
#define MDL_VOCAB_GGUF_H

#include "device/err.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

/* Build the tokenizer from tokenizer.ggml.{model, pre, tokens, scores, token_type, merges, *_token_id,
 * add_bos_token, add_eos_token, add_space_prefix} and tokenizer.chat_template. The caller owns the result
 * (mdl_tokenizer_destroy). NULL + err: MEMRA_E_FORMAT for missing/mistyped keys, or the tokenizer's own
 * error (unsupported model/pre). Cost: O(vocab + merges). */
mdl_tokenizer *mdl_tokenizer_from_gguf(const mdl_gguf *g, dev_err *err);

#endif
