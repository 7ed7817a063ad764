/* Internal layout of the model, KV cache and scratch, shared by model/loader.c, model/kv.c and
 * model/forward.c only. Everything here is immutable after mdl_model_load returns (weights are load-time
 * state no stream can precede), so any number of streams may read it concurrently. */
#ifndef MDL_LLAMA_IMPL_H
#define MDL_LLAMA_IMPL_H

#include "kernels/krn.h"
#include "model/gguf.h"
#include "model/llama.h"

/* One transformer block's weights, all inside one dev_malloc block on dev. Shapes (n_out, n_in): */
typedef struct mdl_layer {
    dev_device *dev;    /* NULL: not held by this process (a partial load); every field below is then empty */
    void *block;        /* the allocation holding every tensor below */
    float *attn_norm;   /* (n_embd,) */
    krn_weight wq;      /* (n_head*head_dim, n_embd) */
    krn_weight wk;      /* (n_head_kv*head_dim, n_embd) */
    krn_weight wv;      /* (n_head_kv*head_dim, n_embd) */
    float *bq, *bk, *bv;/* (n_head*head_dim,), (kv_dim,), (kv_dim,): qwen2 only, else NULL */
    krn_weight wo;      /* (n_embd, n_head*head_dim) */
    float *ffn_norm;    /* (n_embd,) */
    krn_weight w_gate;  /* (n_ff, n_embd) */
    krn_weight w_up;    /* (n_ff, n_embd) */
    krn_weight w_down;  /* (n_embd, n_ff) */
} mdl_layer;

struct mdl_model {
    mdl_hparams hp;
    char arch_name[64];
    mdl_gguf *gguf;             /* the mmapped file while loading; NULL once loaded (nothing reads it after) */
    mdl_gguf_id file_id;        /* the loaded file's identity (zero for a synthetic model) */
    mdl_tokenizer *tok;
    dev_platform *platform;
    mdl_layer *layers;          /* n_layer */
    dev_device *head_dev;       /* NULL: the head is not held by this process (a partial load) */
    void *head_block;           /* on head_dev: output_norm + lm_head */
    float *output_norm;         /* (n_embd,) */
    krn_weight lm_head;         /* (n_vocab, n_embd): output.weight, or a copy of token_embd when tied */
    const void *embd;           /* host: token_embd (n_vocab, n_embd) of type embd_type (= embd_owned); NULL when a
                                 * partial load left it out */
    void *embd_owned;           /* the host embedding table (malloc'd): copied from the file, or synthesized */
    int embd_type;
    size_t embd_row_bytes;
};

struct mdl_kv {
    int n_layer, n_seq, n_ctx, kv_dim;
    struct mdl_kv_layer {
        dev_device *dev;
        krn_kv_cache c;         /* K, V (n_seq, n_ctx, kv_dim) each, of c.type (the same for every layer) */
    } *layer;
};

struct mdl_scratch {
    dev_device *dev;
    int max_rows;
    int n_head, head_dim;       /* for the attention workspace's size */
    void *block;                /* one allocation; the buffers below point into it */
    float *xb;                  /* (B, n_embd): normed input, then a matmul output */
    float *q;                   /* (B, n_head*head_dim) */
    float *k, *v;               /* (B, kv_dim) */
    float *att;                 /* (B, n_head*head_dim) */
    float *hb, *hb2;            /* (B, n_ff): gate (then swiglu), up */
    float *att_ws;              /* attention's split-K workspace (mdl_scratch_reserve_attention), or NULL */
    size_t att_ws_bytes;
    int act_type;               /* MEMRA_ACT_TYPE: the matmul inputs' element type (KRN_F32, KRN_F16, KRN_BF16) */
    void *act;                  /* 16-bit act_type: the matmul input being read (max_rows x the widest of
                                   n_embd, q_dim, n_ff), or NULL: f32 inputs live in xb, att, hb */
    void *x8;                   /* MEMRA_CUDA_X8: a matmul input quantized (max_rows x krn_x8_row_bytes of the
                                   widest input), or NULL: every matmul reads f32 x */
};

#endif
