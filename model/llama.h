/* The Llama-family model engine: load a GGUF (archs llama, qwen2) with each layer's weights on its device,
 * the KV cache, per-stream scratch, and the forward pass over any layer range [l0, l1) so a pipeline stage
 * runs exactly its layers. Forward calls only ENQUEUE ops (kernels/krn.h) on the caller's stream.
 *   x (B, n_embd) --layers [0,L)--> x --output_norm, lm_head--> logits (B, n_vocab)
 * Walking [0,a) then [a,L) gives the same bits as [0,L); a row's result never depends on the other rows
 * of its batch (every op is row-independent with a fixed order). */
#ifndef MDL_LLAMA_H
#define MDL_LLAMA_H

#include <stdint.h>
#include "device/dev.h"
#include "kernels/krn.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

typedef struct mdl_model mdl_model;
typedef struct mdl_kv mdl_kv;
typedef struct mdl_scratch mdl_scratch;

typedef enum mdl_arch { MDL_ARCH_LLAMA = 0, MDL_ARCH_QWEN2 = 1 } mdl_arch;

/* Hyper-parameters, from the GGUF metadata under "<arch>.". */
typedef struct mdl_hparams {
    int arch;             /* mdl_arch */
    int n_vocab;          /* rows of token_embd */
    int n_embd;           /* hidden size */
    int n_layer;          /* transformer blocks */
    int n_head;           /* query heads */
    int n_head_kv;        /* key/value heads (GQA: n_head % n_head_kv == 0) */
    int head_dim;         /* <arch>.attention.key_length, default n_embd / n_head */
    int n_ff;             /* feed-forward hidden size */
    int n_ctx_train;      /* <arch>.context_length */
    int n_rot;            /* rotated dims per head (<arch>.rope.dimension_count, default head_dim) */
    int rope_neox;        /* 0: pairs (2i, 2i+1) (llama); 1: pairs (i, i + n_rot/2) (qwen2) */
    float rope_freq_base; /* <arch>.rope.freq_base, default 10000 */
    float rope_freq_scale;/* 1 / <arch>.rope.scaling.factor when the scaling type is linear, else 1 */
    float rms_eps;        /* <arch>.attention.layer_norm_rms_epsilon */
    int has_qkv_bias;     /* qwen2: attn_q/k/v biases */
    int tied_embeddings;  /* 1 when output.weight is absent and lm_head reuses token_embd */
} mdl_hparams;

/* Bounds on the header's sizes, so every product of them (q_dim = n_head x head_dim, a matrix's elements, a
 * scratch of max_rows rows) is computed without overflow: each dimension and each row width (n_embd, n_ff,
 * head_dim, q_dim, kv_dim, head counts) is at most MDL_DIM_MAX (the widest real models use 2^16), n_layer
 * at most MDL_LAYER_MAX. A header beyond them is refused with the key's name. */
#define MDL_DIM_MAX (1 << 20)
#define MDL_LAYER_MAX 65536

/* Read and check the hparams of an open GGUF (everything but n_vocab and tied_embeddings, which come from
 * the tensors): every key in range, every product within the bounds above. 0, or MEMRA_E_FORMAT naming the
 * key(s) and the value(s), MEMRA_E_UNSUPPORTED for an architecture or rope scaling memra lacks. */
int mdl_hparams_read(const mdl_gguf *g, mdl_hparams *hp, dev_err *err);
/* "llama", "qwen2" for an mdl_arch; NULL otherwise. */
const char *mdl_arch_name(int arch);

typedef struct mdl_load_params {
    dev_platform *platform;        /* where devices live (required) */
    dev_device *const *layer_dev;  /* n_layer entries: the device of each layer's weights; NULL = all on device 0 */
    dev_device *head_dev;          /* output_norm + lm_head; NULL = layer_dev[n_layer-1] (partial: no head here) */
    int partial;                   /* 0: every layer and the head load here, a NULL layer_dev[il] is refused; 1: this
                                    * process holds only some (a pipeline rank, docs/scale-out.md): a NULL
                                    * layer_dev[il] leaves layer il out (no weights, and mdl_kv_create gives it no
                                    * cache), a NULL head_dev leaves the head out, and the host embedding table is
                                    * copied only when layer 0 is here (its gather feeds layer 0; a tied lm_head is
                                    * uploaded from the file, not from that copy). Needs layer_dev. */
    void (*progress)(float frac, void *ctx); /* called on the loading thread, frac in [0, 1]; may be NULL */
    void *progress_ctx;
} mdl_load_params;

/* Open the GGUF at path (mmapped while loading), read the hparams, build the tokenizer, upload each layer's
 * tensors (in their GGUF type, unconverted) to layer_dev[il] and the head to head_dev, and copy the embedding
 * table (what the host gather reads) into host memory the model owns; then unmap the file. A partial load
 * (p->partial) does each of these only for what this process holds. A loaded model
 * reads nothing from the file: truncating or overwriting it afterwards changes nothing. Cost of the copy:
 * n_vocab x row bytes of host memory, once (Llama 3 8B's q4_K table: 282 MiB). A file
 * whose size or mtime changed while it was read is refused (MEMRA_E_STATE).
 * Errors (NULL + err): MEMRA_E_IO (file), MEMRA_E_FORMAT (missing/misshaped tensor, bad metadata),
 * MEMRA_E_UNSUPPORTED (architecture or tensor type; the message lists the supported ones), NOMEM.
 * Cost: one pass over the weights (host-synchronous copies). */
mdl_model *mdl_model_load(const char *path, const mdl_load_params *p, dev_err *err);
/* The layer count of the GGUF at path (<arch>.block_count), to size a layer_dev array before loading.
 * Returns n_layer > 0, or a MEMRA_E_* code + err. Cost: opens and maps the file's header. */
int mdl_model_peek_n_layer(const char *path, dev_err *err);
/* What a decode step spends on each layer's and the head's weights, for a balanced pipeline cut
 * (MEMRA_PP_SPLITS=weights): cost[il] = krn_weight_cost of every blk.<il>. tensor, cost[n_layer] =
 * output_norm + the lm_head (output.weight, or token_embd.weight when tied); model is a krn_weight_cost cost
 * model (KRN_COST_*: bytes on CUDA, the CPU matmul's time per element in its mode). cap = entries of cost (>= n_layer + 1). Returns n_layer, or a
 * MEMRA_E_* code + err (MEMRA_E_INVAL when cap is too small). Cost: maps the GGUF, walks its tensor table. */
int mdl_model_peek_weight_cost(const char *path, int model, double *cost, int cap, dev_err *err);
struct mdl_gguf_synth;
/* A model of the given shape and weight type synthesized straight into device memory: each layer's seeded
 * weights are generated ON layer_dev[il] (kernels/fill.h: the same bytes on every backend), the head on
 * head_dev, the embedding table on the host; no file, no tokenizer. For real-shaped GPU runs (a 70B bf16
 * model fits no disk and no carry). Errors as mdl_model_load. Cost: one fill pass per device. */
mdl_model *mdl_model_synthesize(const struct mdl_gguf_synth *shape, const mdl_load_params *p, dev_err *err);
/* mdl_model_peek_weight_cost for a synthetic shape (the tensors mdl_model_synthesize makes). Returns
 * n_layer, or MEMRA_E_INVAL + err when cap < n_layer + 1 or the shape is inconsistent. */
int mdl_synth_weight_cost(const struct mdl_gguf_synth *shape, int model, double *cost, int cap, dev_err *err);
/* Fill *shape for a named shape: "llama3-8b", "llama3-70b", "mid" (16 x 2048), "tiny" (8 x 256), with weight
 * and embedding type `type`. Returns 0 or MEMRA_E_INVAL for an unknown name. */
int mdl_synth_named(const char *name, int type, struct mdl_gguf_synth *shape);
/* The same with the type by name ("bf16", "q4_k"; case-insensitive): MEMRA_E_INVAL names what is allowed. */
int mdl_synth_parse(const char *name, const char *type, struct mdl_gguf_synth *shape, dev_err *err);

/* Free the device weights and unmap the file. The caller guarantees no stream still uses them. */
void mdl_model_free(mdl_model *m);

const mdl_hparams *mdl_model_hparams(const mdl_model *m);
/* Bytes of every layer matrix plus the lm_head held by this process (a partial load counts only its layers, and
 * the head when it holds it): what one decode step of one row reads from this process's device memory. */
size_t mdl_model_weight_bytes(const mdl_model *m);
/* NULL when il is out of range or layer il is not held here (a partial load) */
dev_device *mdl_model_layer_device(const mdl_model *m, int il);
dev_device *mdl_model_head_device(const mdl_model *m); /* NULL when the head is not held here (a partial load) */
/* Layers this process holds: n_layer after a full load, fewer after a partial one. */
int mdl_model_layers_held(const mdl_model *m);
/* 1 when the host embedding table is here (mdl_embed_rows, mdl_embed_table_upload can run), else 0. */
int mdl_model_has_embeddings(const mdl_model *m);
/* Built from the GGUF's tokenizer.* keys; owned by the model. NULL when the file has no tokenizer.ggml.model
 * (weights-only test models); a tokenizer that is present but invalid fails the load instead. */
const mdl_tokenizer *mdl_model_tokenizer(const mdl_model *m);
/* Architecture name as in the GGUF ("llama", "qwen2"). */
const char *mdl_model_arch_name(const mdl_model *m);
/* The identity (size, mtime, header hash) of the file the model was loaded from, recorded at open. */
const mdl_gguf_id *mdl_model_file_id(const mdl_model *m);

/* Host-side gather: out (B, n_embd) host = rows tokens[0..B) of token_embd (the model's host copy,
 * dequantized per row). Synchronous. MEMRA_E_INVAL names the first token out of [0, n_vocab); MEMRA_E_STATE
 * when a partial load left the table out. */
int mdl_embed_rows(const mdl_model *m, const int32_t *tokens, int B, float *out, dev_err *err);
/* A copy of the embedding table on device d (n_vocab rows of n_embd elements of its GGUF type, blocks layout):
 * *out describes it (out->data device memory of d, dev_free it). For krn_embed_rows_async, which gives the
 * rows mdl_embed_rows gives. 0 or MEMRA_E_* + err (no memory on d, copy failed). Cost: the table's bytes. */
int mdl_embed_table_upload(const mdl_model *m, dev_device *d, krn_weight *out, dev_err *err);

/* KV cache: per layer K and V (n_seq, n_ctx, n_head_kv*head_dim) of `type` (KRN_F32, KRN_F16 or KRN_BF16:
 * krn_kv_cache) on layer_dev[il] (NULL = the model's layer devices), for the layers the model holds only (a
 * partial load's absent layers get none; layer_dev[il] is not read for them). Zero-filled. Destroy after every stream
 * using it has synced. MEMRA_E_INVAL names a type outside those three. */
mdl_kv *mdl_kv_create(const mdl_model *m, dev_device *const *layer_dev, int n_seq, int n_ctx, int type,
                      dev_err *err);
/* The KV cache's element type from MEMRA_KV_TYPE (f32, f16, bf16; unset: f32) into *type. MEMRA_E_INVAL
 * names the value and what is allowed. */
int mdl_kv_type_from_env(int *type, dev_err *err);
/* The matmul inputs' element type from MEMRA_ACT_TYPE (f32, f16, bf16; unset: f32) into *type; as above. */
int mdl_act_type_from_env(int *type, dev_err *err);
void mdl_kv_destroy(mdl_kv *kv);
int mdl_kv_n_seq(const mdl_kv *kv);
int mdl_kv_n_ctx(const mdl_kv *kv);
/* 1 when the cache holds layer il's K and V, else 0 (il out of range, or a layer a partial load left out). */
int mdl_kv_has_layer(const mdl_kv *kv, int il);

/* Per-stream activations for up to max_rows rows on device d (one allocation). A scratch is used by one
 * stream at a time: two streams sharing one would race (the CPU backend's checker reports it). */
mdl_scratch *mdl_scratch_create(const mdl_model *m, dev_device *d, int max_rows, dev_err *err);
/* The same with MEMRA_CUDA_X8 and MEMRA_ACT_TYPE decided by the caller (read once per runtime with mdl_x8_door
 * and mdl_act_type_from_env, so every scratch of a runtime, a stage's or the unsplit arm's, computes alike):
 * with x8 and any PLANES matrix in the model, the scratch holds a buffer for a matmul input quantized to int8;
 * with act_type KRN_F16 / KRN_BF16 the matmul inputs (normed x, attention output, swiglu's h) are stored in
 * 16 bits (kernels/krn.h "activation types"). mdl_scratch_create reads both doors itself. */
mdl_scratch *mdl_scratch_create_with(const mdl_model *m, dev_device *d, int max_rows, int x8, int act_type,
                                     dev_err *err);
void mdl_scratch_destroy(mdl_scratch *sc);
/* Reserve attention's split-K workspace for steps of up to min(max_rows, MDL_ATT_WS_ROWS) rows over a KV
 * cache of n_ctx positions (krn_attention_ws_async), so a decode step allocates nothing and a captured
 * graph has no allocation nodes; larger steps allocate per call as before. 0 (also when n_ctx needs none),
 * or MEMRA_E_NOMEM / MEMRA_E_INVAL with err. Call before the scratch's first use; once. */
#define MDL_ATT_WS_ROWS 16
int mdl_scratch_reserve_attention(mdl_scratch *sc, int n_ctx, dev_err *err);
int mdl_scratch_max_rows(const mdl_scratch *sc);

/* Enqueue layers [l0, l1) on s (each held by this process: MEMRA_E_INVAL names one a partial load left out). x (B, n_embd) device, in/out (the residual stream); pos, seq (B,) int32
 * device: row b is token position pos[b] of sequence seq[b] (its K/V go to the cache there and it attends
 * over [0, pos[b]]). B <= the scratch's max_rows. keys: 0, or a bound on the rows' positions the caller
 * knows from its host copy, every pos[b] < keys <= n_ctx (krn_rope_store.keys: on CUDA attention's grid
 * then spans keys, not n_ctx; the same bits either way). Returns at once; errors: MEMRA_E_INVAL (shape,
 * range), or the enqueue error of an op. Host-side arguments are checked here; device-side pos/seq are the
 * caller's contract (0 <= pos < n_ctx, pos < keys when keys > 0, 0 <= seq < n_seq). */
int mdl_forward_layers_async(const mdl_model *m, mdl_kv *kv, mdl_scratch *sc, dev_stream *s, float *x,
                             const int32_t *pos, const int32_t *seq, int B, int keys, int l0, int l1, dev_err *err);

/* Enqueue output_norm + lm_head: x (B, n_embd) device -> logits (B, n_vocab) device. x is not modified.
 * MEMRA_E_INVAL when a partial load left the head out. */
int mdl_forward_head_async(const mdl_model *m, mdl_scratch *sc, dev_stream *s, const float *x, float *logits,
                           int B, dev_err *err);

#endif
