/* CPU causal GQA attention over a KV cache (f32, f16 or bf16 elements). No shared state. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/krn_cpu.h"
#include "kernels/quant.h"

#define ATT_STACK_POS 4096
#define ATT_STACK_DIM 512

/* Row `off` (n elements) of a cache of `type` as f32: the row itself (f32), or widened into tmp (exact). */
static const float *kv_row(const void *cache, int type, size_t off, float *tmp, int n)
{
    if (type == KRN_F32)
        return (const float *)cache + off;
    const uint16_t *r = (const uint16_t *)cache + off;
    for (int i = 0; i < n; i++)
        tmp[i] = type == KRN_F16 ? krn_f16_to_f32(r[i]) : krn_bf16_to_f32(r[i]);
    return tmp;
}

/* For each row b, query head h (kv head h / (n_head / n_head_kv)), over t = 0..pos[b] of sequence seq[b]:
 *   s_t = q . k_t / sqrt(head_dim)      (f32, dims in order)
 *   p_t = exp(s_t - max s) / sum p      (f32, t in order)
 *   out = sum_t p_t v_t                 (f32, t in order, then one division by the sum)
 * q (B, n_head*head_dim); caches (n_seq, n_ctx, n_head_kv*head_dim); out (B, n_head*head_dim). A 16-bit
 * cache's rows are widened to f32 first (exactly), so the arithmetic is the f32 cache's.
 * Each row depends only on its own q and its cache prefix, so a row gives the same bits whatever the
 * batch or chunk it is computed in. */
void krn_cpu_attention(const krn_cpu_attention_args *a)
{
    const int kv_dim = a->n_head_kv * a->head_dim, group = a->n_head / a->n_head_kv, hd = a->head_dim;
    const float scale = 1.0f / sqrtf((float)hd);
    float stack[ATT_STACK_POS], tmp_stack[ATT_STACK_DIM];
    float *tmp = hd <= ATT_STACK_DIM ? tmp_stack : malloc((size_t)hd * sizeof(float));
    for (int b = 0; b < a->B; b++) {
        const int n_t = a->pos[b] + 1;
        float *out_b = a->out + (size_t)b * a->n_head * hd;
        float *sc = n_t <= ATT_STACK_POS ? stack : malloc((size_t)n_t * sizeof(float));
        if (a->pos[b] < 0 || a->pos[b] >= a->n_ctx || a->seq[b] < 0 || !sc || !tmp) {
            for (int i = 0; i < a->n_head * hd; i++)
                out_b[i] = NAN; /* invalid row or no scratch: visible, never silent */
            if (sc != stack)
                free(sc);
            continue;
        }
        const size_t c0 = (size_t)a->seq[b] * a->n_ctx * kv_dim; /* this sequence's first cache row */
        for (int h = 0; h < a->n_head; h++) {
            const float *q = a->q + ((size_t)b * a->n_head + h) * hd;
            const size_t kvo = (size_t)(h / group) * hd;
            float mx = -INFINITY;
            for (int t = 0; t < n_t; t++) {
                const float *k = kv_row(a->c.k, a->c.type, c0 + (size_t)t * kv_dim + kvo, tmp, hd);
                float d = 0.0f;
                for (int i = 0; i < hd; i++)
                    d += q[i] * k[i];
                sc[t] = d * scale;
                if (sc[t] > mx)
                    mx = sc[t];
            }
            float sum = 0.0f;
            for (int t = 0; t < n_t; t++) {
                sc[t] = expf(sc[t] - mx);
                sum += sc[t];
            }
            float *o = out_b + (size_t)h * hd;
            for (int i = 0; i < hd; i++)
                o[i] = 0.0f;
            for (int t = 0; t < n_t; t++) {
                const float *v = kv_row(a->c.v, a->c.type, c0 + (size_t)t * kv_dim + kvo, tmp, hd);
                for (int i = 0; i < hd; i++)
                    o[i] += sc[t] * v[i];
            }
            const float inv = 1.0f / sum;
            for (int i = 0; i < hd; i++)
                o[i] *= inv;
        }
        if (sc != stack)
            free(sc);
    }
    if (tmp != tmp_stack)
        free(tmp);
}
