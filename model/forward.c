/* The forward pass, llama2.c's run.c as a list of enqueued ops. Per-stream scratch is the only mutable
 * memory besides x and the KV cache; all three are touched only by ops on the caller's stream, in order. */
#include <stdlib.h>

#include "model/llama_impl.h"
#include "model/repack.h"

/* Whether any matrix of m is in the planar layout (the only one MEMRA_CUDA_X8 changes). Model-wide, not per
 * device: an unsplit arm on a device without layers still multiplies every layer's (peer-read) planes. */
static int has_planes(const mdl_model *m)
{
    for (int il = 0; il < m->hp.n_layer; il++) {
        const mdl_layer *L = &m->layers[il]; /* a layer not held here (a partial load) has zeroed weights: BLOCKS */
        const krn_weight *ws[7] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };
        for (int i = 0; i < 7; i++)
            if (ws[i]->layout == KRN_LAYOUT_PLANES)
                return 1;
    }
    return m->lm_head.layout == KRN_LAYOUT_PLANES;
}

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

mdl_scratch *mdl_scratch_create(const mdl_model *m, dev_device *d, int max_rows, dev_err *err)
{
    int x8 = 0, act_type = KRN_F32;
    if (mdl_x8_door(&x8, err) != 0 || mdl_act_type_from_env(&act_type, err) != 0)
        return NULL;
    return mdl_scratch_create_with(m, d, max_rows, x8, act_type, err);
}

mdl_scratch *mdl_scratch_create_with(const mdl_model *m, dev_device *d, int max_rows, int x8, int act_type,
                                     dev_err *err)
{
    if (!m || !d || max_rows <= 0 || !krn_act_type_ok(act_type)) {
        dev_err_set(err, MEMRA_E_INVAL, "mdl_scratch_create_with: need a model, a device, max_rows > 0 (got %d) and an "
                    "activation type f32 (%d), f16 (%d) or bf16 (%d) (got %d)", max_rows, KRN_F32, KRN_F16,
                    KRN_BF16, act_type);
        return NULL;
    }
    const mdl_hparams *hp = &m->hp;
    const size_t R = (size_t)max_rows, q_dim = (size_t)hp->n_head * hp->head_dim,
                 kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
    /* floats per buffer, in the order of the struct */
    const size_t n[7] = { R * hp->n_embd, R * q_dim, R * kv_dim, R * kv_dim, R * q_dim, R * hp->n_ff, R * hp->n_ff };
    size_t off[7], total = 0;
    for (int i = 0; i < 7; i++) {
        off[i] = total;
        total += (n[i] + 15) / 16 * 16; /* 64-byte aligned starts */
    }
    mdl_scratch *sc = calloc(1, sizeof *sc);
    if (!sc) {
        dev_err_set(err, MEMRA_E_NOMEM, "mdl_scratch_create: no host memory");
        return NULL;
    }
    sc->dev = d;
    sc->max_rows = max_rows;
    sc->act_type = act_type;
    sc->n_head = hp->n_head;
    sc->head_dim = hp->head_dim;
    if (!(sc->block = dev_malloc(d, total * sizeof(float), err))) {
        free(sc);
        return NULL;
    }
    float *f = sc->block;
    sc->xb = f + off[0];
    sc->q = f + off[1];
    sc->k = f + off[2];
    sc->v = f + off[3];
    sc->att = f + off[4];
    sc->hb = f + off[5];
    sc->hb2 = f + off[6];
    /* the widest matmul input that can be quantized (n % 32 == 0); the others read f32 x */
    const size_t row = max3(krn_x8_row_bytes(hp->n_embd), krn_x8_row_bytes((int)q_dim), krn_x8_row_bytes(hp->n_ff));
    if (x8 && row && has_planes(m) && !(sc->x8 = dev_malloc(d, R * row, err))) {
        dev_err_wrap(err, "MEMRA_CUDA_X8 buffer: %d rows x %zu bytes", max_rows, row);
        mdl_scratch_destroy(sc);
        return NULL;
    }
    /* 16-bit matmul inputs: one buffer for the widest (each is read by its matmuls before the next is made) */
    const size_t act = R * max3((size_t)hp->n_embd, q_dim, (size_t)hp->n_ff) * krn_act_bytes(act_type);
    if (act_type != KRN_F32 && !(sc->act = dev_malloc(d, (act + 63) / 64 * 64, err))) {
        dev_err_wrap(err, "activation buffer (act_type %s): %d rows", krn_type_name(act_type), max_rows);
        mdl_scratch_destroy(sc);
        return NULL;
    }
    return sc;
}

int mdl_scratch_reserve_attention(mdl_scratch *sc, int n_ctx, dev_err *err)
{
    if (!sc || n_ctx <= 0 || sc->att_ws)
        return dev_err_set(err, MEMRA_E_INVAL, "mdl_scratch_reserve_attention: need a scratch without a workspace "
                           "and n_ctx > 0 (got %d)", n_ctx);
    const int rows = sc->max_rows < MDL_ATT_WS_ROWS ? sc->max_rows : MDL_ATT_WS_ROWS;
    const size_t bytes = krn_attention_ws_bytes(rows, sc->n_head, sc->head_dim, n_ctx);
    if (bytes == 0)
        return 0;
    /* dev_malloc zero-fills: the tickets start at zero, as krn_attention_ws_bytes asks */
    if (!(sc->att_ws = dev_malloc(sc->dev, bytes, err)))
        return dev_err_wrap(err, "attention workspace: %d rows x %d heads at n_ctx %d", rows, sc->n_head, n_ctx);
    sc->att_ws_bytes = bytes;
    return 0;
}

void mdl_scratch_destroy(mdl_scratch *sc)
{
    if (!sc)
        return;
    if (sc->att_ws)
        dev_free(sc->dev, sc->att_ws);
    if (sc->x8)
        dev_free(sc->dev, sc->x8);
    if (sc->act)
        dev_free(sc->dev, sc->act);
    dev_free(sc->dev, sc->block);
    free(sc);
}

int mdl_scratch_max_rows(const mdl_scratch *sc) { return sc->max_rows; }

/* Stop at the first failed enqueue; the message names the op and the layer. */
#define ENQ(call, what)                                                                                   \
    do {                                                                                                  \
        int rc_ = (call);                                                                                 \
        if (rc_)                                                                                          \
            return dev_err_set(err, rc_, "layer %d: enqueue of %s failed (%s)", il, what,                 \
                               memra_status_str(rc_));                                                    \
    } while (0)

/* Where a producer writes a matmul input (B, n): f32 into its own buffer, a 16-bit act type into sc->act. */
static void *act_out(const mdl_scratch *sc, float *f32_buf)
{
    return sc->act_type == KRN_F32 ? (void *)f32_buf : sc->act;
}

/* The matmul input *in = x (B, n) of sc's act type, and, with MEMRA_CUDA_X8, x quantized into sc->x8 for
 * matmuls whose first weight W is PLANES (n a multiple of 32; else in->x8 = NULL and the matmuls read x).
 * sc->x8 and sc->act are reused by the next input: ops on s run in order, so the matmuls reading one input end
 * before the next is written. */
static int matmul_input(mdl_scratch *sc, dev_stream *s, const krn_weight *W, const void *x, int B, int n,
                        krn_mm_x *in)
{
    *in = (krn_mm_x){ .x = x, .type = sc->act_type };
    if (!sc->x8 || W->layout != KRN_LAYOUT_PLANES || !krn_x8_row_bytes(n))
        return 0;
    in->x8 = sc->x8;
    return krn_quantize_x8_t_async(s, sc->x8, x, sc->act_type, B, n);
}

/* One transformer block on rows x (B, n_embd), in place. */
static int layer_forward(const mdl_model *m, mdl_kv *kv, mdl_scratch *sc, dev_stream *s, float *x,
                         const int32_t *pos, const int32_t *seq, int B, int keys, int il, dev_err *err)
{
    const mdl_hparams *hp = &m->hp;
    const mdl_layer *L = &m->layers[il];
    const int q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    const krn_kv_cache *kvc = &kv->layer[il].c; /* this layer's K, V on this stage's device */
    const int at = sc->act_type;                           /* of xb, att, hb: the matmul inputs */
    void *xb = act_out(sc, sc->xb), *att = act_out(sc, sc->att), *hb = act_out(sc, sc->hb);
    krn_mm_x in; /* the current matmul input */

    /* attention: xb = rmsnorm(x) * attn_norm; q,k,v = W xb (+ b); rope(q, k); cache k, v; att = attend */
    ENQ(krn_rmsnorm_t_async(s, xb, at, x, L->attn_norm, B, hp->n_embd, hp->rms_eps), "attn_norm");
    const krn_mm_part qkv[3] = { { sc->q, &L->wq }, { sc->k, &L->wk }, { sc->v, &L->wv } };
    ENQ(matmul_input(sc, s, &L->wq, xb, B, hp->n_embd, &in), "x8 of attn_norm");
    ENQ(krn_matmul_parts_x_async(s, qkv, 3, &in, B), "attn_q/k/v"); /* (B, q_dim), (B, kv_dim), (B, kv_dim) */
    if (L->bq) {
        ENQ(krn_add_bias_async(s, sc->q, L->bq, B, q_dim), "attn_q.bias");
        ENQ(krn_add_bias_async(s, sc->k, L->bk, B, kv_dim), "attn_k.bias");
        ENQ(krn_add_bias_async(s, sc->v, L->bv, B, kv_dim), "attn_v.bias");
    }
    const krn_rope_store rs = { .q = sc->q, .k = sc->k, .v = sc->v, .cache = *kvc, .seq = seq,
                                .pos = pos, .B = B, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv,
                                .head_dim = hp->head_dim, .n_rot = hp->n_rot, .neox = hp->rope_neox,
                                .n_ctx = kv->n_ctx, .freq_base = hp->rope_freq_base,
                                .freq_scale = hp->rope_freq_scale, .keys = keys };
    /* rope q, k + kv_store, then attention (on CUDA at B = 1 one kernel: krn_rope_attention_t_async) */
    ENQ(krn_rope_attention_t_async(s, att, at, &rs, sc->att_ws, sc->att_ws_bytes), "rope + kv_store + attention");
    /* x += Wo att   (the residual add fused into the GEMV's store) */
    ENQ(matmul_input(sc, s, &L->wo, att, B, q_dim, &in), "x8 of attention");
    ENQ(krn_matmul_acc_x_async(s, x, &L->wo, &in, B), "attn_output + residual"); /* x (B, n_embd) */

    /* feed-forward: xb = rmsnorm(x) * ffn_norm; x += W_down (silu(W_gate xb) * W_up xb) */
    ENQ(krn_rmsnorm_t_async(s, xb, at, x, L->ffn_norm, B, hp->n_embd, hp->rms_eps), "ffn_norm");
    ENQ(matmul_input(sc, s, &L->w_gate, xb, B, hp->n_embd, &in), "x8 of ffn_norm");
    /* hb (B, n_ff) = silu(W_gate xb) * W_up xb; sc->hb, sc->hb2 the op's f32 scratch (f32 hb: in place) */
    ENQ(krn_matmul_swiglu_x_async(s, hb, at, sc->hb, sc->hb2, &L->w_gate, &L->w_up, &in, B), "ffn_gate/up + swiglu");
    ENQ(matmul_input(sc, s, &L->w_down, hb, B, hp->n_ff, &in), "x8 of swiglu");
    ENQ(krn_matmul_acc_x_async(s, x, &L->w_down, &in, B), "ffn_down + residual"); /* x (B, n_embd) */
    return 0;
}

int mdl_forward_layers_async(const mdl_model *m, mdl_kv *kv, mdl_scratch *sc, dev_stream *s, float *x,
                             const int32_t *pos, const int32_t *seq, int B, int keys, int l0, int l1, dev_err *err)
{
    if (!m || !kv || !sc || !s || !x || !pos || !seq)
        return dev_err_set(err, MEMRA_E_INVAL, "mdl_forward_layers_async: model, kv, scratch, stream, x, pos "
                           "and seq are required");
    if (B <= 0 || B > sc->max_rows)
        return dev_err_set(err, MEMRA_E_INVAL, "mdl_forward_layers_async: B = %d rows; allowed 1..%d (the "
                           "scratch's max_rows)", B, sc->max_rows);
    if (l0 < 0 || l0 > l1 || l1 > m->hp.n_layer)
        return dev_err_set(err, MEMRA_E_INVAL, "mdl_forward_layers_async: layer range [%d, %d) is not inside "
                           "[0, %d]", l0, l1, m->hp.n_layer);
    if (kv->n_layer != m->hp.n_layer)
        return dev_err_set(err, MEMRA_E_INVAL, "mdl_forward_layers_async: the KV cache has %d layers, the "
                           "model %d", kv->n_layer, m->hp.n_layer);
    if (keys < 0 || keys > kv->n_ctx)
        return dev_err_set(err, MEMRA_E_INVAL, "mdl_forward_layers_async: keys = %d; allowed 0 (no bound) or a "
                           "bound on the rows' positions in 1..%d (the KV cache's n_ctx)", keys, kv->n_ctx);
    for (int il = l0; il < l1; il++)
        if (!m->layers[il].dev || !kv->layer[il].c.k)
            return dev_err_set(err, MEMRA_E_INVAL, "mdl_forward_layers_async: layer %d of [%d, %d) is not in this "
                               "process (its %s left out by a partial load)", il, l0, l1,
                               !m->layers[il].dev ? "weights were" : "KV cache was");
    for (int il = l0; il < l1; il++) {
        int rc = layer_forward(m, kv, sc, s, x, pos, seq, B, keys, il, err);
        if (rc)
            return rc;
    }
    return 0;
}

int mdl_forward_head_async(const mdl_model *m, mdl_scratch *sc, dev_stream *s, const float *x, float *logits,
                           int B, dev_err *err)
{
    if (!m || !sc || !s || !x || !logits)
        return dev_err_set(err, MEMRA_E_INVAL, "mdl_forward_head_async: model, scratch, stream, x and logits "
                           "are required");
    if (B <= 0 || B > sc->max_rows)
        return dev_err_set(err, MEMRA_E_INVAL, "mdl_forward_head_async: B = %d rows; allowed 1..%d (the "
                           "scratch's max_rows)", B, sc->max_rows);
    if (!m->head_dev)
        return dev_err_set(err, MEMRA_E_INVAL, "mdl_forward_head_async: the head (output_norm, lm_head) is not in "
                           "this process (left out by a partial load)");
    const int il = m->hp.n_layer; /* named "layer n_layer" in messages: the head */
    void *xb = act_out(sc, sc->xb);
    ENQ(krn_rmsnorm_t_async(s, xb, sc->act_type, x, m->output_norm, B, m->hp.n_embd, m->hp.rms_eps), "output_norm");
    krn_mm_x in;
    ENQ(matmul_input(sc, s, &m->lm_head, xb, B, m->hp.n_embd, &in), "x8 of output_norm");
    const krn_mm_part head = { logits, &m->lm_head };
    ENQ(krn_matmul_parts_x_async(s, &head, 1, &in, B), "lm_head"); /* (B, n_vocab) */
    return 0;
}
