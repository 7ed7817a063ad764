/* CPU kernels of the row-wise ops: rmsnorm, add_bias, rope, kv_store, swiglu, add, argmax.
 * Pure functions over host pointers, single-threaded, fixed loop order (deterministic). No shared state. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/krn_cpu.h"
#include "kernels/quant.h"

/* Element i of an activation row of type t (KRN_F32, KRN_F16, KRN_BF16) = v, rounded to nearest even. */
static void act_put(void *y, int t, size_t i, float v)
{
    if (t == KRN_F32)
        ((float *)y)[i] = v;
    else
        ((uint16_t *)y)[i] = t == KRN_F16 ? krn_f32_to_f16(v) : krn_f32_to_bf16(v);
}

/* y (B, n) = x (B, n) / sqrt(mean(x^2) + eps) * w (n,); the sum of squares accumulates in double, in order.
 * Each y is stored once, after its row's sum: an f32 y may be x (in place). */
void krn_cpu_rmsnorm(const krn_cpu_rmsnorm_args *a)
{
    for (int b = 0; b < a->B; b++) {
        const float *x = a->x + (size_t)b * a->n;
        const size_t y0 = (size_t)b * a->n;
        double ss = 0.0;
        for (int i = 0; i < a->n; i++)
            ss += (double)x[i] * x[i];
        float inv = (float)(1.0 / sqrt(ss / a->n + (double)a->eps));
        for (int i = 0; i < a->n; i++)
            act_put(a->y, a->yt, y0 + i, x[i] * inv * a->w[i]);
    }
}

/* y (B, n) += bias (n,) */
void krn_cpu_add_bias(const krn_cpu_add_bias_args *a)
{
    for (int b = 0; b < a->B; b++) {
        float *y = a->y + (size_t)b * a->n;
        for (int i = 0; i < a->n; i++)
            y[i] += a->bias[i];
    }
}

/* x (B, n_heads*head_dim) rotated in place; angle of pair i: pos * freq_scale * freq_base^(-2i/n_rot),
 * computed in double so large positions keep their precision. Pair members: (2i, 2i+1) normal,
 * (i, i + n_rot/2) neox. Dims >= n_rot pass through. */
void krn_cpu_rope(const krn_cpu_rope_args *a)
{
    const int half = a->n_rot / 2;
    for (int b = 0; b < a->B; b++) {
        const double p = (double)a->pos[b] * a->freq_scale;
        for (int i = 0; i < half; i++) {
            const double theta = p * pow((double)a->freq_base, -2.0 * i / a->n_rot);
            const float c = (float)cos(theta), s = (float)sin(theta);
            const int i0 = a->neox ? i : 2 * i, i1 = a->neox ? i + half : 2 * i + 1;
            for (int h = 0; h < a->n_heads; h++) {
                float *x = a->x + ((size_t)b * a->n_heads + h) * a->head_dim;
                const float x0 = x[i0], x1 = x[i1];
                x[i0] = x0 * c - x1 * s;
                x[i1] = x0 * s + x1 * c;
            }
        }
    }
}

/* Row `off` (in elements) of a cache of `type` (krn_kv_cache) = x (n floats): copied (f32) or rounded to
 * nearest even (krn_quant_row of the 16-bit types). */
static void kv_put_row(void *cache, int type, size_t off, const float *x, int n)
{
    krn_quant_row(type, x, (uint8_t *)cache + off * krn_kv_elem_bytes(type), n);
}

/* caches (n_seq, n_ctx, kv_dim): row [seq[b], pos[b]] = k[b], v[b]. Rows with an out-of-range pos or a
 * negative seq are skipped (the caller validates; the kernel never writes out of bounds). The seq upper
 * bound is the caller's contract (the cache's n_seq is not an argument of the op). */
void krn_cpu_kv_store(const krn_cpu_kv_store_args *a)
{
    for (int b = 0; b < a->B; b++) {
        if (a->seq[b] < 0 || a->pos[b] < 0 || a->pos[b] >= a->n_ctx)
            continue;
        const size_t off = ((size_t)a->seq[b] * a->n_ctx + (size_t)a->pos[b]) * a->kv_dim;
        kv_put_row(a->c.k, a->c.type, off, a->k + (size_t)b * a->kv_dim, a->kv_dim);
        kv_put_row(a->c.v, a->c.type, off, a->v + (size_t)b * a->kv_dim, a->kv_dim);
    }
}

/* y (B, n) = gate / (1 + exp(-gate)) * up */
void krn_cpu_swiglu(const krn_cpu_swiglu_args *a)
{
    const size_t n = (size_t)a->B * a->n;
    for (size_t i = 0; i < n; i++) {
        const float g = a->gate[i];
        act_put(a->y, a->yt, i, g / (1.0f + expf(-g)) * a->up[i]);
    }
}

/* y (B, n) += a (B, n) */
void krn_cpu_add(const krn_cpu_add_args *a)
{
    const size_t n = (size_t)a->B * a->n;
    for (size_t i = 0; i < n; i++)
        a->y[i] += a->a[i];
}

/* out (B,) = first index of the max of each row (NaN never wins: `>` is false for it); -1 for a row with
 * nothing above -inf */
void krn_cpu_argmax(const krn_cpu_argmax_args *a)
{
    for (int b = 0; b < a->B; b++) {
        const float *x = a->x + (size_t)b * a->n;
        int best = 0;
        for (int i = 1; i < a->n; i++)
            if (x[i] > x[best] || (x[best] != x[best] && x[i] == x[i]))
                best = i;
        a->out[b] = x[best] > -INFINITY ? best : -1;
        const int32_t at = a->dup_at ? a->dup_at[b] : b;
        if (a->dup && at >= 0 && at < a->n_dup)
            a->dup[at] = a->out[b];
    }
}
