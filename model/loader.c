/* mdl_model_load: GGUF metadata -> hparams, tensors -> per-layer device blocks, the head on its device,
 * the embedding table copied to host memory; the file is unmapped once loaded. No shared mutable state: the
 * model is immutable once loaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/llama_impl.h"
#include "model/vocab_gguf.h"
#include "model/repack.h"

#define ALIGN 64

static const char *const k_archs[] = { [MDL_ARCH_LLAMA] = "llama", [MDL_ARCH_QWEN2] = "qwen2" };
#define SUPPORTED_ARCHS "llama (SmolLM2, Llama 2/3, Mistral), qwen2"

/* ---- metadata ---- */

/* *out = <arch>.<key> as u32 in [0, max]; absent: *out = dflt, or MEMRA_E_FORMAT when dflt < 0 (required). A
 * present key of the wrong type, or above max, is an error either way. */
static int hp_u32(const mdl_gguf *g, const char *arch, const char *key, int dflt, int max, int *out, dev_err *err)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (mdl_gguf_find(g, full) < 0) {
        if (dflt < 0)
            return dev_err_set(err, MEMRA_E_FORMAT, "metadata key %s (u32) is missing", full);
        *out = dflt;
        return 0;
    }
    uint32_t v;
    int rc = mdl_gguf_get_u32(g, full, &v, err);
    if (rc)
        return rc;
    if (v > (uint32_t)max)
        return dev_err_set(err, MEMRA_E_FORMAT, "metadata %s = %u is out of range (allowed 0..%d)", full, v, max);
    *out = (int)v;
    return 0;
}

/* *out = <arch>.<key> as f32, or dflt when absent. */
static int hp_f32(const mdl_gguf *g, const char *arch, const char *key, float dflt, float *out, dev_err *err)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (mdl_gguf_find(g, full) < 0) {
        *out = dflt;
        return 0;
    }
    return mdl_gguf_get_f32(g, full, out, err);
}

/* Copy string key into buf (NUL-terminated, truncated to cap-1); 1 when present, 0 when absent, <0 error. */
static int get_cstr(const mdl_gguf *g, const char *key, char *buf, size_t cap, dev_err *err)
{
    if (mdl_gguf_find(g, key) < 0)
        return 0;
    const char *v;
    size_t len;
    int rc = mdl_gguf_get_str(g, key, &v, &len, err);
    if (rc)
        return rc;
    if (len >= cap)
        len = cap - 1;
    memcpy(buf, v, len);
    buf[len] = '\0';
    return 1;
}

/* a (key ka) x b (key kb) in 64 bits must be <= max: else MEMRA_E_FORMAT naming both keys and the product. */
static int hp_product(const char *arch, const char *ka, int64_t a, const char *kb, int64_t b, int64_t max,
                      const char *what, dev_err *err)
{
    if (a * b <= max) /* a, b <= MDL_DIM_MAX (2^20): the product fits 64 bits */
        return 0;
    return dev_err_set(err, MEMRA_E_FORMAT, "metadata %s.%s (%lld) x %s.%s (%lld) = %lld is more than %lld (%s)",
                       arch, ka, (long long)a, arch, kb, (long long)b, (long long)(a * b), (long long)max, what);
}

int mdl_hparams_read(const mdl_gguf *g, mdl_hparams *hp, dev_err *err)
{
    char arch[64];
    memset(hp, 0, sizeof *hp);
    int rc = get_cstr(g, "general.architecture", arch, sizeof arch, err);
    if (rc <= 0)
        return rc ? rc : dev_err_set(err, MEMRA_E_FORMAT, "metadata key general.architecture is missing");
    hp->arch = -1;
    for (int i = 0; i < (int)(sizeof k_archs / sizeof k_archs[0]); i++)
        if (strcmp(arch, k_archs[i]) == 0)
            hp->arch = i;
    if (hp->arch < 0)
        return dev_err_set(err, MEMRA_E_UNSUPPORTED, "architecture '%s' is not supported; supported: %s", arch,
                           SUPPORTED_ARCHS);

    /* every size is bounded, so each product below fits 64 bits and each row width an int */
    if ((rc = hp_u32(g, arch, "block_count", -1, MDL_LAYER_MAX, &hp->n_layer, err)) ||
        (rc = hp_u32(g, arch, "embedding_length", -1, MDL_DIM_MAX, &hp->n_embd, err)) ||
        (rc = hp_u32(g, arch, "feed_forward_length", -1, MDL_DIM_MAX, &hp->n_ff, err)) ||
        (rc = hp_u32(g, arch, "attention.head_count", -1, MDL_DIM_MAX, &hp->n_head, err)) ||
        (rc = hp_u32(g, arch, "attention.head_count_kv", hp->n_head, MDL_DIM_MAX, &hp->n_head_kv, err)) ||
        (rc = hp_u32(g, arch, "context_length", 0, INT32_MAX, &hp->n_ctx_train, err)))
        return rc;
    if (hp->n_layer <= 0 || hp->n_embd <= 0 || hp->n_ff <= 0 || hp->n_head <= 0 || hp->n_head_kv <= 0 ||
        hp->n_head % hp->n_head_kv)
        return dev_err_set(err, MEMRA_E_FORMAT,
                           "bad shape metadata: n_layer %d, n_embd %d, n_ff %d, n_head %d, n_head_kv %d "
                           "(all must be > 0 and n_head a multiple of n_head_kv)",
                           hp->n_layer, hp->n_embd, hp->n_ff, hp->n_head, hp->n_head_kv);
    if ((rc = hp_u32(g, arch, "attention.key_length", hp->n_embd / hp->n_head, MDL_DIM_MAX, &hp->head_dim, err)) ||
        (rc = hp_u32(g, arch, "rope.dimension_count", hp->head_dim, MDL_DIM_MAX, &hp->n_rot, err)))
        return rc;
    if (hp->head_dim <= 0 || hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return dev_err_set(err, MEMRA_E_FORMAT, "bad rope metadata: n_rot %d, head_dim %d (need 0 < n_rot <= "
                           "head_dim, n_rot even)", hp->n_rot, hp->head_dim);
    /* q_dim = n_head x head_dim is a row width (attn_q's rows, attn_output's row length): an int, bounded */
    if ((rc = hp_product(arch, "attention.head_count", hp->n_head, "attention.key_length", hp->head_dim, MDL_DIM_MAX,
                         "the widest attention row memra supports", err)))
        return rc;
    if ((rc = hp_f32(g, arch, "attention.layer_norm_rms_epsilon", 1e-5f, &hp->rms_eps, err)) ||
        (rc = hp_f32(g, arch, "rope.freq_base", 10000.0f, &hp->rope_freq_base, err)))
        return rc;
    if (!(hp->rms_eps > 0.0f && hp->rms_eps < 1.0f) || !(hp->rope_freq_base > 0.0f && hp->rope_freq_base < 1e30f))
        return dev_err_set(err, MEMRA_E_FORMAT, "bad metadata: %s.attention.layer_norm_rms_epsilon %g must be in (0, 1) "
                           "and %s.rope.freq_base %g in (0, 1e30)", arch, hp->rms_eps, arch, hp->rope_freq_base);
    hp->rope_freq_scale = 1.0f;
    char key[128], scaling[32];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if ((rc = get_cstr(g, key, scaling, sizeof scaling, err)) < 0)
        return rc;
    float factor = 0.0f;
    const char *fkey = "rope.scaling.factor";
    if (rc == 1 && strcmp(scaling, "linear") == 0) {
        rc = hp_f32(g, arch, fkey, 1.0f, &factor, err);
    } else if (rc == 1 && strcmp(scaling, "none") != 0) {
        return dev_err_set(err, MEMRA_E_UNSUPPORTED, "%s = '%s' is not supported; supported: none, linear", key,
                           scaling);
    } else {
        fkey = "rope.scale_linear"; /* the older spelling */
        rc = hp_f32(g, arch, fkey, 0.0f, &factor, err);
    }
    if (rc)
        return rc;
    if (!(factor >= 0.0f) || factor > 1e6f)
        return dev_err_set(err, MEMRA_E_FORMAT, "metadata %s.%s %g is out of range (allowed 0..1e6; 0 = none)", arch,
                           fkey, factor);
    if (factor > 0.0f)
        hp->rope_freq_scale = 1.0f / factor;
    if (mdl_gguf_tensor_find(g, "rope_freqs.weight"))
        return dev_err_set(err, MEMRA_E_UNSUPPORTED, "tensor rope_freqs.weight (Llama 3.1-style frequency "
                           "factors) is not supported; supported rope scaling: none, linear");
    hp->rope_neox = hp->arch == MDL_ARCH_QWEN2;
    hp->has_qkv_bias = hp->arch == MDL_ARCH_QWEN2;
    return 0;
}

const char *mdl_arch_name(int arch)
{
    return arch >= 0 && arch < (int)(sizeof k_archs / sizeof k_archs[0]) ? k_archs[arch] : NULL;
}

static int read_hparams(mdl_model *m, dev_err *err)
{
    int rc = mdl_hparams_read(m->gguf, &m->hp, err);
    if (rc == 0)
        snprintf(m->arch_name, sizeof m->arch_name, "%s", k_archs[m->hp.arch]);
    return rc;
}

/* ---- tensors ---- */

/* Find name and check it is (n_out, n_in) (n_out = 0: a vector of n_in) of a supported type whose rows are
 * whole blocks. optional: a missing tensor gives *out = NULL and 0. */
static int get_tensor(const mdl_model *m, const char *name, int64_t n_out, int64_t n_in, int optional,
                      const mdl_gguf_tensor **out, dev_err *err)
{
    const mdl_gguf_tensor *t = mdl_gguf_tensor_find(m->gguf, name);
    *out = t;
    if (!t)
        return optional ? 0 : dev_err_set(err, MEMRA_E_FORMAT, "tensor %s is missing", name);
    int64_t got_out = t->n_dims >= 2 ? t->ne[1] : 0;
    for (int i = 2; i < t->n_dims; i++)
        if (t->ne[i] != 1)
            return dev_err_set(err, MEMRA_E_FORMAT, "tensor %s has %d dims; expected 2", name, t->n_dims);
    if (t->ne[0] != n_in || (n_out ? got_out != n_out : (t->n_dims >= 2 && t->ne[1] != 1)))
        return dev_err_set(err, MEMRA_E_FORMAT, "tensor %s is (%lld, %lld) [rows, row length]; expected (%lld, %lld)",
                           name, (long long)got_out, (long long)t->ne[0], (long long)n_out, (long long)n_in);
    if (!krn_type_supported(t->type))
        return dev_err_set(err, MEMRA_E_UNSUPPORTED, "tensor %s has type %d, not supported; supported: f32, f16, "
                           "bf16, q8_0, q4_0, q4_1, q4_k, q5_k, q6_k", name, t->type);
    if (krn_row_bytes(t->type, n_in) == 0)
        return dev_err_set(err, MEMRA_E_FORMAT, "tensor %s: row length %lld is not a multiple of the %s block "
                           "(%d)", name, (long long)n_in, krn_type_name(t->type), krn_type_block_elems(t->type));
    return 0;
}

/* One tensor to place in a device block: a matrix keeps its type; a vector becomes f32. */
typedef struct placed {
    const mdl_gguf_tensor *t;
    int vec;           /* 1: converted to f32 */
    size_t off, bytes; /* in the block */
} placed;

static size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* Lay out n tensors in one block on d, allocate it and upload each. Returns the block or NULL + err. */
static void *upload_block(dev_device *d, placed *ts, int n, dev_err *err)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (!ts[i].t)
            continue;
        ts[i].off = total;
        ts[i].bytes = ts[i].vec ? (size_t)ts[i].t->ne[0] * sizeof(float) : ts[i].t->bytes;
        total = align_up(total + ts[i].bytes);
    }
    unsigned char *block = dev_malloc(d, total, err);
    if (!block)
        return NULL;
    for (int i = 0; i < n; i++) {
        if (!ts[i].t)
            continue;
        const void *src = ts[i].t->data;
        float *tmp = NULL;
        if (ts[i].vec && ts[i].t->type != KRN_F32) {
            tmp = malloc(ts[i].bytes);
            if (!tmp) {
                dev_err_set(err, MEMRA_E_NOMEM, "no host memory to convert %s", ts[i].t->name);
                goto fail;
            }
            krn_dequant_row(ts[i].t->type, src, tmp, ts[i].t->ne[0]);
            src = tmp;
        }
        int rc = dev_copy_h2d_sync(d, block + ts[i].off, src, ts[i].bytes, err);
        free(tmp);
        if (rc)
            goto fail;
    }
    return block;
fail:
    dev_free(d, block);
    return NULL;
}

static krn_weight weight_at(void *block, const placed *p, int n_out, int n_in)
{
    return (krn_weight){ .type = p->t->type, .n_out = n_out, .n_in = n_in,
                         .data = (unsigned char *)block + p->off };
}

static float *vec_at(void *block, const placed *p)
{
    return p->t ? (float *)((unsigned char *)block + p->off) : NULL;
}

enum { T_ATTN_NORM, T_Q, T_K, T_V, T_BQ, T_BK, T_BV, T_O, T_FFN_NORM, T_GATE, T_UP, T_DOWN, T_COUNT };

static int load_layer(mdl_model *m, int il, dev_device *d, dev_err *err)
{
    const mdl_hparams *hp = &m->hp;
    const int q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    static const struct { const char *name; int vec, bias; } spec[T_COUNT] = {
        [T_ATTN_NORM] = { "attn_norm.weight", 1, 0 }, [T_Q] = { "attn_q.weight", 0, 0 },
        [T_K] = { "attn_k.weight", 0, 0 },            [T_V] = { "attn_v.weight", 0, 0 },
        [T_BQ] = { "attn_q.bias", 1, 1 },             [T_BK] = { "attn_k.bias", 1, 1 },
        [T_BV] = { "attn_v.bias", 1, 1 },             [T_O] = { "attn_output.weight", 0, 0 },
        [T_FFN_NORM] = { "ffn_norm.weight", 1, 0 },   [T_GATE] = { "ffn_gate.weight", 0, 0 },
        [T_UP] = { "ffn_up.weight", 0, 0 },           [T_DOWN] = { "ffn_down.weight", 0, 0 },
    };
    /* (n_out, n_in) of each; vectors have n_out = 0 */
    const int shape[T_COUNT][2] = {
        [T_ATTN_NORM] = { 0, hp->n_embd }, [T_Q] = { q_dim, hp->n_embd },   [T_K] = { kv_dim, hp->n_embd },
        [T_V] = { kv_dim, hp->n_embd },    [T_BQ] = { 0, q_dim },           [T_BK] = { 0, kv_dim },
        [T_BV] = { 0, kv_dim },            [T_O] = { hp->n_embd, q_dim },   [T_FFN_NORM] = { 0, hp->n_embd },
        [T_GATE] = { hp->n_ff, hp->n_embd }, [T_UP] = { hp->n_ff, hp->n_embd }, [T_DOWN] = { hp->n_embd, hp->n_ff },
    };
    placed ts[T_COUNT] = { 0 };
    for (int i = 0; i < T_COUNT; i++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%d.%s", il, spec[i].name);
        if (spec[i].bias && !hp->has_qkv_bias)
            continue;
        int rc = get_tensor(m, name, shape[i][0], shape[i][1], 0, &ts[i].t, err);
        if (rc)
            return rc;
        ts[i].vec = spec[i].vec;
    }
    mdl_layer *L = &m->layers[il];
    L->dev = d;
    L->block = upload_block(d, ts, T_COUNT, err);
    if (!L->block)
        return dev_err_wrap(err, "layer %d on %s", il, dev_device_name(d));
    L->attn_norm = vec_at(L->block, &ts[T_ATTN_NORM]);
    L->ffn_norm = vec_at(L->block, &ts[T_FFN_NORM]);
    L->bq = vec_at(L->block, &ts[T_BQ]);
    L->bk = vec_at(L->block, &ts[T_BK]);
    L->bv = vec_at(L->block, &ts[T_BV]);
    L->wq = weight_at(L->block, &ts[T_Q], q_dim, hp->n_embd);
    L->wk = weight_at(L->block, &ts[T_K], kv_dim, hp->n_embd);
    L->wv = weight_at(L->block, &ts[T_V], kv_dim, hp->n_embd);
    L->wo = weight_at(L->block, &ts[T_O], hp->n_embd, q_dim);
    L->w_gate = weight_at(L->block, &ts[T_GATE], hp->n_ff, hp->n_embd);
    L->w_up = weight_at(L->block, &ts[T_UP], hp->n_ff, hp->n_embd);
    L->w_down = weight_at(L->block, &ts[T_DOWN], hp->n_embd, hp->n_ff);
    krn_weight *const ws[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };
    if (mdl_repack_weights(d, ws, 7, err)) /* on this layer's own device */
        return dev_err_wrap(err, "layer %d on %s", il, dev_device_name(d));
    return 0;
}

/* Head on head_dev: output_norm (f32) + lm_head (output.weight, or token_embd when tied). */
static int load_head(mdl_model *m, dev_err *err)
{
    const mdl_hparams *hp = &m->hp;
    placed ts[2] = { 0 };
    int rc = get_tensor(m, "output_norm.weight", 0, hp->n_embd, 0, &ts[0].t, err);
    if (rc)
        return rc;
    ts[0].vec = 1;
    if ((rc = get_tensor(m, "output.weight", hp->n_vocab, hp->n_embd, 1, &ts[1].t, err)))
        return rc;
    m->hp.tied_embeddings = ts[1].t == NULL;
    if (!ts[1].t)
        ts[1].t = mdl_gguf_tensor_find(m->gguf, "token_embd.weight");
    m->head_block = upload_block(m->head_dev, ts, 2, err);
    if (!m->head_block)
        return dev_err_wrap(err, "output head on %s", dev_device_name(m->head_dev));
    m->output_norm = vec_at(m->head_block, &ts[0]);
    m->lm_head = weight_at(m->head_block, &ts[1], hp->n_vocab, hp->n_embd);
    krn_weight *const ws[] = { &m->lm_head };
    if (mdl_repack_weights(m->head_dev, ws, 1, err)) /* on the head's own device */
        return dev_err_wrap(err, "output head on %s", dev_device_name(m->head_dev));
    return 0;
}

mdl_model *mdl_model_load(const char *path, const mdl_load_params *p, dev_err *err)
{
    if (!path || !p || !p->platform) {
        dev_err_set(err, MEMRA_E_INVAL, "mdl_model_load: path and params->platform are required");
        return NULL;
    }
    mdl_model *m = calloc(1, sizeof *m);
    if (!m) {
        dev_err_set(err, MEMRA_E_NOMEM, "mdl_model_load: no memory");
        return NULL;
    }
    m->platform = p->platform;
    if (!(m->gguf = mdl_gguf_open(path, err)))
        goto fail;
    if (read_hparams(m, err))
        goto fail;
    mdl_hparams *hp = &m->hp;

    const mdl_gguf_tensor *embd;
    if (!(embd = mdl_gguf_tensor_find(m->gguf, "token_embd.weight"))) {
        dev_err_set(err, MEMRA_E_FORMAT, "tensor token_embd.weight is missing");
        goto fail;
    }
    if (embd->n_dims < 2 || embd->ne[1] <= 0 || embd->ne[1] > INT32_MAX) {
        dev_err_set(err, MEMRA_E_FORMAT, "tensor token_embd.weight must be (n_vocab, n_embd)");
        goto fail;
    }
    hp->n_vocab = (int)embd->ne[1];
    if (get_tensor(m, "token_embd.weight", hp->n_vocab, hp->n_embd, 0, &embd, err))
        goto fail;
    m->embd_type = embd->type;
    m->embd_row_bytes = krn_row_bytes(embd->type, hp->n_embd);
    if (p->partial && !p->layer_dev) {
        dev_err_set(err, MEMRA_E_INVAL, "mdl_model_load: a partial load needs layer_dev (NULL entries: the layers "
                    "left out)");
        goto fail;
    }
    /* the host gather reads the table for the model's life: an owned copy, so nothing at run time reads the
     * file (truncating it would raise SIGBUS, overwriting it would change the text). Only layer 0's process
     * gathers; a tied lm_head is uploaded from the map by load_head, so a partial load without layer 0 skips it */
    if (!p->partial || p->layer_dev[0]) {
        if (!(m->embd_owned = malloc(embd->bytes))) {
            dev_err_set(err, MEMRA_E_NOMEM, "no host memory for the embedding table copy (%zu bytes)", embd->bytes);
            goto fail;
        }
        memcpy(m->embd_owned, embd->data, embd->bytes);
        m->embd = m->embd_owned;
    }

    /* a GGUF without tokenizer.* keys (tiny test models) loads with no tokenizer */
    if (mdl_gguf_find(m->gguf, "tokenizer.ggml.model") >= 0 && !(m->tok = mdl_tokenizer_from_gguf(m->gguf, err)))
        goto fail;
    if (m->tok && mdl_tokenizer_n_vocab(m->tok) > hp->n_vocab) { /* fewer is fine: padded embedding rows */
        dev_err_set(err, MEMRA_E_FORMAT, "tokenizer.ggml.tokens has %d entries, more than the %d rows of "
                    "token_embd.weight", mdl_tokenizer_n_vocab(m->tok), hp->n_vocab);
        goto fail;
    }

    dev_device *dev0 = dev_platform_device(p->platform, 0);
    if (!(m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers))) {
        dev_err_set(err, MEMRA_E_NOMEM, "mdl_model_load: no memory for %d layers", hp->n_layer);
        goto fail;
    }
    for (int il = 0; il < hp->n_layer; il++) {
        dev_device *d = p->layer_dev ? p->layer_dev[il] : dev0;
        if (!d && !p->partial) {
            dev_err_set(err, MEMRA_E_INVAL, "mdl_model_load: layer_dev[%d] is NULL (allowed only in a partial load, "
                        "mdl_load_params.partial = 1)", il);
            goto fail;
        }
        if (d && load_layer(m, il, d, err)) /* a partial load's absent layer: an empty mdl_layer (dev NULL) */
            goto fail;
        if (p->progress)
            p->progress((float)(il + 1) / (float)(hp->n_layer + 1), p->progress_ctx);
    }
    m->head_dev = p->head_dev || p->partial ? p->head_dev : m->layers[hp->n_layer - 1].dev;
    if (m->head_dev && load_head(m, err))
        goto fail;
    if (!m->head_dev) /* what load_head learns from the tensor table, for a process without the head */
        hp->tied_embeddings = mdl_gguf_tensor_find(m->gguf, "output.weight") == NULL;
    /* everything is copied out of the map: a file changed while it was read is refused, then it is unmapped */
    m->file_id = *mdl_gguf_identity(m->gguf);
    if (mdl_gguf_id_check_path(path, &m->file_id, "it was opened", err))
        goto fail;
    mdl_gguf_close(m->gguf);
    m->gguf = NULL;
    if (p->progress)
        p->progress(1.0f, p->progress_ctx);
    return m;
fail:
    dev_err_wrap(err, "loading %s", path);
    mdl_model_free(m);
    return NULL;
}

int mdl_model_peek_n_layer(const char *path, dev_err *err)
{
    mdl_model m = { 0 };
    if (!path)
        return dev_err_set(err, MEMRA_E_INVAL, "mdl_model_peek_n_layer: path is required");
    if (!(m.gguf = mdl_gguf_open(path, err)))
        return err ? err->code : MEMRA_E_IO;
    int rc = read_hparams(&m, err);
    mdl_gguf_close(m.gguf);
    return rc ? rc : m.hp.n_layer;
}

int mdl_model_peek_weight_cost(const char *path, int model, double *cost, int cap, dev_err *err)
{
    mdl_model m = { 0 };
    if (!path || !cost)
        return dev_err_set(err, MEMRA_E_INVAL, "mdl_model_peek_weight_cost: path and cost are required");
    if (!(m.gguf = mdl_gguf_open(path, err)))
        return err ? err->code : MEMRA_E_IO;
    int rc = read_hparams(&m, err);
    const int L = m.hp.n_layer;
    if (!rc && cap < L + 1)
        rc = dev_err_set(err, MEMRA_E_INVAL, "mdl_model_peek_weight_cost: %d entries for %d layers + head", cap, L);
    for (int i = 0; !rc && i <= L; i++)
        cost[i] = 0.0;
    for (int i = 0; !rc && i < mdl_gguf_tensor_count(m.gguf); i++) {
        const mdl_gguf_tensor *t = mdl_gguf_tensor_at(m.gguf, i);
        int64_t rows = 1;
        for (int d = 1; d < t->n_dims; d++)
            rows *= t->ne[d];
        const double c = krn_weight_cost(t->type, rows, t->ne[0], model);
        char *end = NULL;
        if (strncmp(t->name, "blk.", 4) == 0) {
            const long il = strtol(t->name + 4, &end, 10);
            if (end != t->name + 4 && *end == '.' && il >= 0 && il < L)
                cost[il] += c;
        } else if (!strcmp(t->name, "output.weight") || !strcmp(t->name, "output_norm.weight") ||
                   (!strcmp(t->name, "token_embd.weight") && !mdl_gguf_tensor_find(m.gguf, "output.weight"))) {
            cost[L] += c; /* the head (a tied head reads the embedding table) */
        }
    }
    mdl_gguf_close(m.gguf);
    return rc ? rc : L;
}

void mdl_model_free(mdl_model *m)
{
    if (!m)
        return;
    if (m->layers)
        for (int il = 0; il < m->hp.n_layer; il++)
            if (m->layers[il].block)
                dev_free(m->layers[il].dev, m->layers[il].block);
    free(m->layers);
    if (m->head_block)
        dev_free(m->head_dev, m->head_block);
    mdl_tokenizer_destroy(m->tok);
    if (m->gguf)
        mdl_gguf_close(m->gguf);
    free(m->embd_owned);
    free(m);
}

const mdl_hparams *mdl_model_hparams(const mdl_model *m) { return &m->hp; }

static size_t weight_bytes(const krn_weight *w) { return (size_t)w->n_out * krn_row_bytes(w->type, w->n_in); }

size_t mdl_model_weight_bytes(const mdl_model *m)
{
    size_t n = m->head_dev ? weight_bytes(&m->lm_head) : 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const mdl_layer *L = &m->layers[il];
        if (!L->dev) /* not held here (a partial load) */
            continue;
        n += weight_bytes(&L->wq) + weight_bytes(&L->wk) + weight_bytes(&L->wv) + weight_bytes(&L->wo) +
             weight_bytes(&L->w_gate) + weight_bytes(&L->w_up) + weight_bytes(&L->w_down);
    }
    return n;
}
const char *mdl_model_arch_name(const mdl_model *m) { return m->arch_name; }
const mdl_gguf_id *mdl_model_file_id(const mdl_model *m) { return &m->file_id; }
const mdl_tokenizer *mdl_model_tokenizer(const mdl_model *m) { return m->tok; }
dev_device *mdl_model_head_device(const mdl_model *m) { return m->head_dev; }
int mdl_model_has_embeddings(const mdl_model *m) { return m->embd != NULL; }

int mdl_model_layers_held(const mdl_model *m)
{
    int n = 0;
    for (int il = 0; il < m->hp.n_layer; il++)
        n += m->layers[il].dev != NULL;
    return n;
}

dev_device *mdl_model_layer_device(const mdl_model *m, int il)
{
    return il >= 0 && il < m->hp.n_layer ? m->layers[il].dev : NULL;
}

int mdl_embed_rows(const mdl_model *m, const int32_t *tokens, int B, float *out, dev_err *err)
{
    if (!m || !tokens || !out || B <= 0)
        return dev_err_set(err, MEMRA_E_INVAL, "mdl_embed_rows: need a model, B > 0 tokens and an output");
    if (!m->embd)
        return dev_err_set(err, MEMRA_E_STATE, "mdl_embed_rows: the embedding table is not in this process (a "
                           "partial load without layer 0)");
    for (int b = 0; b < B; b++)
        if (tokens[b] < 0 || tokens[b] >= m->hp.n_vocab)
            return dev_err_set(err, MEMRA_E_INVAL, "mdl_embed_rows: token %d (row %d) is outside [0, %d)",
                               tokens[b], b, m->hp.n_vocab);
    for (int b = 0; b < B; b++)
        krn_dequant_row(m->embd_type, (const unsigned char *)m->embd + (size_t)tokens[b] * m->embd_row_bytes,
                        out + (size_t)b * m->hp.n_embd, m->hp.n_embd);
    return 0;
}

int mdl_embed_table_upload(const mdl_model *m, dev_device *d, krn_weight *out, dev_err *err)
{
    if (!m || !d || !out)
        return dev_err_set(err, MEMRA_E_INVAL, "mdl_embed_table_upload: need a model, a device and an output");
    if (!m->embd)
        return dev_err_set(err, MEMRA_E_STATE, "mdl_embed_table_upload: the embedding table is not in this process "
                           "(a partial load without layer 0)");
    const size_t bytes = (size_t)m->hp.n_vocab * m->embd_row_bytes;
    void *p = dev_malloc(d, bytes, err);
    if (!p)
        return dev_err_wrap(err, "embedding table copy (%zu bytes) on %s", bytes, dev_device_name(d));
    int r = dev_copy_h2d_sync(d, p, m->embd, bytes, err);
    if (r) {
        dev_free(d, p);
        return r;
    }
    *out = (krn_weight){ .type = m->embd_type, .n_out = m->hp.n_vocab, .n_in = m->hp.n_embd, .data = p,
                         .layout = KRN_LAYOUT_BLOCKS };
    return 0;
}
