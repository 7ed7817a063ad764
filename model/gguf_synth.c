/* Synthetic Llama-family GGUF models (see gguf_synth.h). No shared mutable state. */
#include "model/gguf_synth_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "model/gguf.h"

void mdl_gguf_synth_defaults(mdl_gguf_synth *p)
{
    *p = (mdl_gguf_synth){
        .arch = "llama", .n_layer = 4, .n_embd = 64, .n_head = 4, .n_head_kv = 2, .n_ff = 128, .n_vocab = 300,
        .n_ctx = 256, .type = KRN_Q4_1, .embd_type = KRN_Q8_0, .seed = 1, .tied = 0, .rms_eps = 1e-5f,
        .rope_base = 10000.0f, .pre = NULL, .version = 3,
    };
}

/* splitmix64: a portable, seedable stream. */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1), exactly representable steps of 2^-23 (same floats everywhere). */
static float uniform(uint64_t *s) { return (float)((int64_t)(next_u64(s) >> 40) - (1 << 23)) / (float)(1 << 23); }

/* llama.cpp's general.file_type for "mostly <type>" */
static uint32_t file_type(int t)
{
    switch (t) {
    case KRN_F32: return 0;
    case KRN_F16: return 1;
    case KRN_Q4_0: return 2;
    case KRN_Q4_1: return 3;
    case KRN_Q8_0: return 7;
    case KRN_Q4_K: return 15; /* Q4_K_M */
    case KRN_Q5_K: return 17; /* Q5_K_M */
    case KRN_Q6_K: return 18;
    case KRN_BF16: return 32;
    default: return 0;
    }
}

static int check_params(const mdl_gguf_synth *p, int embd_type, dev_err *err)
{
#define BAD(...) return dev_err_set(err, MEMRA_E_INVAL, __VA_ARGS__)
    if (!p->arch || (strcmp(p->arch, "llama") != 0 && strcmp(p->arch, "qwen2") != 0))
        BAD("arch '%s': allowed llama, qwen2", p->arch ? p->arch : "(null)");
    if (p->n_layer < 1 || p->n_layer > 4096)
        BAD("layers %d: allowed 1..4096", p->n_layer);
    if (p->n_embd < 1 || p->n_ff < 1 || p->n_ctx < 1)
        BAD("embd %d, ff %d, ctx %d: each must be >= 1", p->n_embd, p->n_ff, p->n_ctx);
    if ((int64_t)p->n_embd * p->n_vocab > (int64_t)1 << 34 || (int64_t)p->n_embd * p->n_ff > (int64_t)1 << 34)
        BAD("embd %d x vocab %d / ff %d: too large for a synthetic model", p->n_embd, p->n_vocab, p->n_ff);
    if (p->n_head < 1 || p->n_embd % p->n_head != 0 || (p->n_embd / p->n_head) % 2 != 0)
        BAD("heads %d: must divide embd %d into an even head size", p->n_head, p->n_embd);
    if (p->n_head_kv < 1 || p->n_head % p->n_head_kv != 0)
        BAD("kv-heads %d: must divide heads %d", p->n_head_kv, p->n_head);
    if (!krn_type_supported(p->type) || !krn_type_supported(embd_type))
        BAD("type %d / embd type %d: unsupported", p->type, embd_type);
    const int be = krn_type_block_elems(p->type), ee = krn_type_block_elems(embd_type);
    if (p->n_embd % be != 0 || p->n_ff % be != 0 || p->n_embd % ee != 0)
        BAD("embd %d and ff %d must be multiples of the %s block (%d) and embd of the %s block (%d)", p->n_embd,
            p->n_ff, krn_type_name(p->type), be, krn_type_name(embd_type), ee);
    if (p->version != 2 && p->version != 3)
        BAD("version %u: allowed 2, 3", p->version);
    return 0;
#undef BAD
}

/* One tensor of random values: kind 0 = matrix (+- 1/sqrt(n_in)), 1 = norm (1 +- 0.1), 2 = bias (+- 0.02). */
static int add_random(mdl_gguf_writer *w, uint64_t *rng, const char *name, int type, int kind, int64_t n_in,
                      int64_t n_out, dev_err *err)
{
    const size_t n = (size_t)(n_in * n_out);
    float *x = malloc(n * sizeof *x);
    if (!x)
        return dev_err_set(err, MEMRA_E_NOMEM, "synthetic model: out of memory for '%s'", name);
    const float scale = kind == 0 ? 1.0f / sqrtf((float)n_in) : kind == 1 ? 0.1f : 0.02f;
    for (size_t i = 0; i < n; i++)
        x[i] = (kind == 1 ? 1.0f : 0.0f) + scale * uniform(rng);
    const int64_t ne[2] = {n_in, n_out};
    const int rc = mdl_gguf_writer_tensor_f32(w, name, type, n_out == 1 ? 1 : 2, ne, x);
    free(x);
    return rc;
}

static int add_metadata(mdl_gguf_writer *w, const mdl_gguf_synth *p, dev_err *err)
{
    char k[128], name[64];
    const char *a = p->arch;
    snprintf(name, sizeof name, "memra synthetic %s", a);
    mdl_gguf_writer_str(w, "general.architecture", a);
    mdl_gguf_writer_str(w, "general.type", "model");
    mdl_gguf_writer_str(w, "general.name", name);
    mdl_gguf_writer_u32(w, "general.file_type", file_type(p->type));
    mdl_gguf_writer_u32(w, "general.quantization_version", 2);
#define KEY(suffix) (snprintf(k, sizeof k, "%s." suffix, a), k)
    mdl_gguf_writer_u32(w, KEY("block_count"), (uint32_t)p->n_layer);
    mdl_gguf_writer_u32(w, KEY("context_length"), (uint32_t)p->n_ctx);
    mdl_gguf_writer_u32(w, KEY("embedding_length"), (uint32_t)p->n_embd);
    mdl_gguf_writer_u32(w, KEY("feed_forward_length"), (uint32_t)p->n_ff);
    mdl_gguf_writer_u32(w, KEY("attention.head_count"), (uint32_t)p->n_head);
    mdl_gguf_writer_u32(w, KEY("attention.head_count_kv"), (uint32_t)p->n_head_kv);
    mdl_gguf_writer_f32(w, KEY("rope.freq_base"), p->rope_base);
    mdl_gguf_writer_f32(w, KEY("attention.layer_norm_rms_epsilon"), p->rms_eps);
    mdl_gguf_writer_u32(w, KEY("vocab_size"), (uint32_t)p->n_vocab);
    mdl_gguf_writer_u32(w, KEY("rope.dimension_count"), (uint32_t)(p->n_embd / p->n_head));
#undef KEY
    mdl_synth_vocab v;
    int rc = mdl_synth_vocab_build(&v, p->n_vocab, err);
    if (rc)
        return rc;
    mdl_gguf_writer_str(w, "tokenizer.ggml.model", "gpt2");
    mdl_gguf_writer_str(w, "tokenizer.ggml.pre", p->pre ? p->pre : "gpt-2");
    mdl_gguf_writer_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tokens, (uint64_t)v.n);
    mdl_gguf_writer_arr(w, "tokenizer.ggml.token_type", MDL_GGUF_I32, v.types, (uint64_t)v.n);
    mdl_gguf_writer_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merges, (uint64_t)v.n_merges);
    mdl_gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", 1);
    mdl_gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", 2);
    mdl_gguf_writer_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    mdl_gguf_writer_u32(w, "tokenizer.ggml.padding_token_id", 2);
    mdl_gguf_writer_bool(w, "tokenizer.ggml.add_bos_token", 0);
    rc = mdl_gguf_writer_bool(w, "tokenizer.ggml.add_space_prefix", 0);
    mdl_synth_vocab_free(&v);
    return rc;
}

int mdl_gguf_synth_fill(mdl_gguf_writer *w, const mdl_gguf_synth *p, dev_err *err)
{
    const int embd_type = p->embd_type < 0 ? p->type : p->embd_type;
    int rc = check_params(p, embd_type, err);
    if (rc)
        return rc;
    mdl_gguf_writer_set_version(w, p->version);
    if ((rc = add_metadata(w, p, err)))
        return mdl_gguf_writer_error(w, err) ? mdl_gguf_writer_error(w, err) : rc;
    const int64_t E = p->n_embd, F = p->n_ff, V = p->n_vocab, hd = E / p->n_head, KV = hd * p->n_head_kv;
    const int qwen2 = strcmp(p->arch, "qwen2") == 0;
    uint64_t rng = p->seed;
    char n[96];
#define T0(name, type, kind, n_in, n_out)                                                    \
    do {                                                                                     \
        if ((rc = add_random(w, &rng, name, type, kind, n_in, n_out, err)))                  \
            goto out;                                                                        \
    } while (0)
#define T(fmt, type, kind, n_in, n_out)                                                      \
    do {                                                                                     \
        snprintf(n, sizeof n, fmt, l);                                                       \
        T0(n, type, kind, n_in, n_out);                                                      \
    } while (0)
    T0("token_embd.weight", embd_type, 0, E, V);
    for (int l = 0; l < p->n_layer; l++) {
        T("blk.%d.attn_norm.weight", KRN_F32, 1, E, 1);
        T("blk.%d.attn_q.weight", p->type, 0, E, E);
        T("blk.%d.attn_k.weight", p->type, 0, E, KV);
        T("blk.%d.attn_v.weight", p->type, 0, E, KV);
        if (qwen2) {
            T("blk.%d.attn_q.bias", KRN_F32, 2, E, 1);
            T("blk.%d.attn_k.bias", KRN_F32, 2, KV, 1);
            T("blk.%d.attn_v.bias", KRN_F32, 2, KV, 1);
        }
        T("blk.%d.attn_output.weight", p->type, 0, E, E);
        T("blk.%d.ffn_norm.weight", KRN_F32, 1, E, 1);
        T("blk.%d.ffn_gate.weight", p->type, 0, E, F);
        T("blk.%d.ffn_up.weight", p->type, 0, E, F);
        T("blk.%d.ffn_down.weight", p->type, 0, F, E);
    }
    T0("output_norm.weight", KRN_F32, 1, E, 1);
    if (!p->tied)
        T0("output.weight", p->type, 0, E, V);
#undef T
#undef T0
out:
    return rc ? mdl_gguf_writer_error(w, err) : 0;
}

int mdl_gguf_synth_write(const char *path, const mdl_gguf_synth *p, dev_err *err)
{
    mdl_gguf_writer *w = mdl_gguf_writer_create(err);
    if (!w)
        return err ? err->code : MEMRA_E_NOMEM;
    int rc = mdl_gguf_synth_fill(w, p, err);
    if (rc == 0)
        rc = mdl_gguf_writer_save(w, path, err);
    mdl_gguf_writer_destroy(w);
    return rc;
}
