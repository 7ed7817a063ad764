/* Synthetic Llama-family GGUF models: every tensor name and metadata key a real llama.cpp GGUF of that
 * architecture uses, seeded random weights, and a small byte-level BPE vocabulary (256 byte tokens, merges
 * learned from a built-in English text, 3 control tokens), so the model runs end to end. Used by
 * tools/memra-mkgguf and tests/support/gguf_tiny. Weights: norms f32 in 1 +- 0.1, biases f32 +- 0.02,
 * matrices uniform in +- 1/sqrt(n_in) (activations stay O(1) through the layers). Deterministic: the same
 * parameters give the same bytes on every machine. */
#ifndef MDL_GGUF_SYNTH_H
#define MDL_GGUF_SYNTH_H

#include <stdint.h>
#include "device/err.h"
#include "model/gguf_write.h"

typedef struct mdl_gguf_synth {
    const char *arch;    /* "llama" (SmolLM2, Llama, Mistral) or "qwen2" (adds attn_q/k/v biases) */
    int n_layer;         /* blocks */
    int n_embd;          /* hidden size; a multiple of the weight types' block (32; 256 for q4_K/q5_K/q6_K) */
    int n_head;          /* query heads; divides n_embd, head_dim = n_embd / n_head even */
    int n_head_kv;       /* kv heads; divides n_head */
    int n_ff;            /* feed-forward size; a multiple of the block too (ffn_down rows are n_ff long) */
    int n_vocab;         /* >= 259 (3 control + 256 byte tokens); merges fill what the text allows, the rest
                          * are unused placeholder tokens */
    int n_ctx;           /* <arch>.context_length */
    int type;            /* krn_type of the 2-D layer weights and output.weight */
    int embd_type;       /* krn_type of token_embd.weight; -1 = type */
    uint64_t seed;       /* weight RNG seed */
    int tied;            /* 1: no output.weight (the head reuses token_embd, as SmolLM2 does) */
    float rms_eps;       /* <arch>.attention.layer_norm_rms_epsilon */
    float rope_base;     /* <arch>.rope.freq_base */
    const char *pre;     /* tokenizer.ggml.pre; NULL = "gpt-2" */
    uint32_t version;    /* GGUF version written, 2 or 3 */
} mdl_gguf_synth;

/* Small defaults (fast under sanitizers): llama, 4 layers, embd 64, 4 heads, 2 kv heads, ff 128, vocab 300,
 * ctx 256, q4_1 weights, q8_0 embeddings, seed 1, untied, eps 1e-5, rope base 10000, v3. */
void mdl_gguf_synth_defaults(mdl_gguf_synth *p);

/* Add the model's metadata and tensors to w (callers may add more keys after). Returns 0 or MEMRA_E_INVAL
 * (a parameter named with what is allowed) / MEMRA_E_NOMEM. Cost: O(parameters) time and memory. */
int mdl_gguf_synth_fill(mdl_gguf_writer *w, const mdl_gguf_synth *p, dev_err *err);
/* Build and save the model to path. */
int mdl_gguf_synth_write(const char *path, const mdl_gguf_synth *p, dev_err *err);

/* The GPT-2 byte-to-unicode mapping used by the vocab: the UTF-8 text (1-2 bytes + NUL) of byte b's
 * token in out. Returns its length. */
int mdl_gguf_synth_byte_token(uint8_t b, char out[4]);

#endif
