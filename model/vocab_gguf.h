/* Glue: a tokenizer from a GGUF's tokenizer.* keys (model/tokenizer.h knows nothing of GGUF). */
#ifndef MDL_VOCAB_GGUF_H
#define MDL_VOCAB_GGUF_H

#include "device/err.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

/* Build the tokenizer from tokenizer.ggml.{model, pre, tokens, scores, token_type, merges, *_token_id,
 * add_bos_token, add_eos_token, add_space_prefix} and tokenizer.chat_template. The caller owns the result
 * (mdl_tokenizer_destroy). NULL + err: MEMRA_E_FORMAT for missing/mistyped keys, or the tokenizer's own
 * error (unsupported model/pre). Metadata that contradicts itself is refused, naming the key: a special id
 * (bos, eos, unknown, padding) of any integer type outside [0, n_tokens); a token_type outside 0..6; a
 * score that is not finite; a model kind the vocab evidently is not ('llama' over a byte-level BPE vocab,
 * 'gpt2' over a SentencePiece one); a merge that is not "left right" with left, right and left+right in
 * the vocab (its index). Cost: O(vocab + merges). */
mdl_tokenizer *mdl_tokenizer_from_gguf(const mdl_gguf *g, dev_err *err);

#endif
