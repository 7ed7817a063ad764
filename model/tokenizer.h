/* Tokenizers for Llama-family GGUF models: GPT-2 byte-level BPE (tokenizer.ggml.model = "gpt2": SmolLM2,
 * Llama 3, Qwen2) and SentencePiece-style BPE over scores with byte fallback ("llama": Llama 1/2, Mistral).
 * The constructor takes plain arrays (what a GGUF holds under tokenizer.*), so this file knows nothing of
 * the GGUF reader; the caller keeps ownership of the arrays, the tokenizer copies what it needs.
 * A tokenizer is immutable after create: every call below may run on any thread concurrently.
 * Behaviour follows HF `tokenizers` / llama.cpp; see docs/tokenizer.md for the details and departures. */
#ifndef MDL_TOKENIZER_H
#define MDL_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "device/err.h"

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
enum {
    MDL_TOKEN_NORMAL = 1,
    MDL_TOKEN_UNKNOWN = 2,
    MDL_TOKEN_CONTROL = 3,      /* <|im_start|>, <s>: split out of text only when parse_special */
    MDL_TOKEN_USER_DEFINED = 4, /* added tokens: always split out of text, rendered as their text */
    MDL_TOKEN_UNUSED = 5,
    MDL_TOKEN_BYTE = 6,         /* SPM byte-fallback tokens <0x00>..<0xFF> */
};

/* What a GGUF says about its tokenizer; every pointer is borrowed for the duration of create only. */
typedef struct mdl_vocab_src {
    const char *model;              /* tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece) */
    const char *pre;                /* tokenizer.ggml.pre ("smollm", "llama-bpe", "qwen2", "gpt2", "default"...); NULL = "default" */
    uint32_t n_tokens;              /* number of entries in tokens */
    const char *const *tokens;      /* tokenizer.ggml.tokens: token text (not NUL-terminated when token_lens is set) */
    const size_t *token_lens;       /* byte length of each token, or NULL when tokens are NUL-terminated */
    const float *scores;            /* tokenizer.ggml.scores (SPM merge priority) or NULL */
    const int32_t *token_types;     /* tokenizer.ggml.token_type (MDL_TOKEN_*) or NULL (all normal) */
    uint32_t n_merges;              /* number of entries in merges (BPE only) */
    const char *const *merges;      /* tokenizer.ggml.merges: "left right", rank = index */
    const size_t *merge_lens;       /* byte length of each merge, or NULL when NUL-terminated */
    int32_t bos, eos, unk, pad;     /* special ids, -1 when absent */
    int add_bos, add_eos;           /* tokenizer.ggml.add_bos_token / add_eos_token; -1 = model default */
    int add_space_prefix;           /* tokenizer.ggml.add_space_prefix (SPM only); -1 = default (1 for SPM) */
    const char *chat_template;      /* tokenizer.chat_template or NULL (kept, see mdl_tokenizer_chat_template) */
} mdl_vocab_src;

/* Set every field of src to "absent" (NULL, 0, -1). */
void mdl_vocab_src_init(mdl_vocab_src *src);

typedef struct mdl_tokenizer mdl_tokenizer;

/* Build a tokenizer. Fails (NULL + err) on an unknown model or pre type (the message lists the supported
 * ones), out-of-range special ids, add_bos/add_eos set without the id, or memory. Merges over tokens the
 * vocab lacks are ignored; a byte whose byte-level symbol is missing is dropped from the output (as
 * llama.cpp does). Cost: O(n_tokens + n_merges) hashing, a few MB for a 50k vocab. */
mdl_tokenizer *mdl_tokenizer_create(const mdl_vocab_src *src, dev_err *err);
void mdl_tokenizer_destroy(mdl_tokenizer *t);

/* Tokenize len bytes of text (need not be NUL-terminated, need not be valid UTF-8: invalid bytes are
 * tokenized as single bytes; a byte the vocab has no byte token for as U+FFFD, docs/tokenizer.md).
 * add_special: prepend BOS / append EOS as the model asks (add_bos/add_eos).
 * parse_special: control tokens written in the text (e.g. "<|im_start|>") become their id; otherwise
 * they are tokenized as plain text. User-defined tokens are always matched.
 * Returns the number of ids written to out; when they do not fit (the first cap ids are written):
 * with cap > 0 tokenizing stops at the first id past cap and returns -(cap + 1), so the work is bounded by
 * cap (byte-level BPE; SPM merges each run between special tokens whole); with cap 0, -(needed).
 * MEMRA_E_INVAL on bad arguments (len over 512 MiB included), MEMRA_E_NOMEM.
 * Cost: O(len log len) at worst (regex split + heap BPE per word); a few allocations per call. */
int mdl_tokenize(const mdl_tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
                 int32_t *out, int cap);

/* The bytes of one token, not NUL-terminated. Control/unknown tokens render as their text only when
 * special != 0 (else 0 bytes). Returns bytes written; -(needed) when cap is too small; MEMRA_E_INVAL for
 * an id out of range. */
int mdl_token_to_piece(const mdl_tokenizer *t, int32_t id, char *buf, int cap, int special);

/* Concatenate the pieces of n ids (special as above) into buf, not NUL-terminated. For SPM vocabularies
 * the space added by the space prefix is dropped from the first piece, as HF's decoder does.
 * Returns bytes written, -(needed) when cap is too small, MEMRA_E_INVAL for an id out of range. */
int mdl_detokenize(const mdl_tokenizer *t, const int32_t *ids, int n, char *buf, int cap, int special);

/* Look up a token by its exact vocab text; -1 when absent. */
int32_t mdl_tokenizer_find(const mdl_tokenizer *t, const char *text, size_t len);

int32_t mdl_tokenizer_n_vocab(const mdl_tokenizer *t);
int32_t mdl_tokenizer_bos(const mdl_tokenizer *t); /* -1 when absent */
int32_t mdl_tokenizer_eos(const mdl_tokenizer *t); /* -1 when absent */
int mdl_tokenizer_add_bos(const mdl_tokenizer *t); /* whether mdl_tokenize(add_special=1) prepends BOS */
int mdl_tokenizer_token_type(const mdl_tokenizer *t, int32_t id); /* MDL_TOKEN_*, 0 when out of range */

/* End of generation: eos, and control tokens that end a turn (<|im_end|>, <|endoftext|>, <|eot_id|>,
 * <|eom_id|>, <end_of_turn>, <|end|>, </s>). */
int mdl_tokenizer_is_eog(const mdl_tokenizer *t, int32_t id);

/* The chat template text given at create (copied; lives as long as t), or NULL. */
const char *mdl_tokenizer_chat_template(const mdl_tokenizer *t);

#endif
