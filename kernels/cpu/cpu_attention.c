/* CPU causal GQA attention over a KV cache (f32, f16 or bf16 elements). Shared state: att_avx2's probe result
 * (a relaxed atomic, written once per value). */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/krn_cpu.h"
#include "kernels/quant.h"

#define ATT_STACK_POS 4096 /* scores on the stack up to this many (group x positions) */
#define ATT_TILE 256       /* positions of a 16-bit cache widened at a time */
#define ATT_CHAINS 8       /* positions whose scores are summed side by side */
#define ATT_OUT 16         /* output dims accumulated in registers over the positions */
#define ATT_KT 64          /* positions per K^T block (AVX2 scores): 64 x head_dim floats stay in L1 */

/* Keys or values t = 0..n_t-1 of one kv head, as f32 rows at base + t * stride: the cache itself (f32:
 * stride kv_dim), or (16-bit) the rows widened once into buf (stride head_dim, exact: the dequant row
 * kernel's AVX2+F16C path where the CPU has it), shared by the kv head's group of query heads. */
static const float *kv_rows(const void *cache, int type, size_t off, int n_t, int kv_dim, int hd, float *buf,
                            size_t *stride)
{
    if (type == KRN_F32) {
        *stride = (size_t)kv_dim;
        return (const float *)cache + off;
    }
    for (int t = 0; t < n_t; t++)
        krn_dequant_row(type, (const uint16_t *)cache + off + (size_t)t * kv_dim, buf + (size_t)t * hd, hd);
    *stride = (size_t)hd;
    return buf;
}

#if defined(__x86_64__)
#define ATT_WIDE 64 /* output dims per pass of att_pv_wide */
/* o[0..63] += p[t] * v[t * vs + 0..63] for t = 0..nt-1 in order: the scalar loop's product then sum per element
 * (no FMA: the build has no contraction), 64 sums in 8 AVX2 registers across the positions. */
static __attribute__((target("avx2"))) void att_pv_wide(float *o, const float *p, const float *v, size_t vs, int nt)
{
    float acc[ATT_WIDE];
    for (int i = 0; i < ATT_WIDE; i++)
        acc[i] = o[i];
    for (int t = 0; t < nt; t++) {
        const float *vt = v + (size_t)t * vs, pt = p[t];
        _Pragma("GCC unroll 8") for (int i = 0; i < ATT_WIDE; i++)
            acc[i] += pt * vt[i];
    }
    for (int i = 0; i < ATT_WIDE; i++)
        o[i] = acc[i];
}

/* K^T of positions t = 0..nt-1 (nt a multiple of 8, hd of 8): kt[i * nt + t] = k[t * ks + i], 8 x 8 blocks
 * through registers. */
static __attribute__((target("avx2"))) void att_kt(float *kt, const float *k, size_t ks, int nt, int hd)
{
    for (int t = 0; t < nt; t += 8)
        for (int i = 0; i < hd; i += 8) {
            __m256 r[8], u[8], v[8];
            for (int a = 0; a < 8; a++)
                r[a] = _mm256_loadu_ps(k + (size_t)(t + a) * ks + i);
            for (int a = 0; a < 8; a += 2) {
                u[a] = _mm256_unpacklo_ps(r[a], r[a + 1]);
                u[a + 1] = _mm256_unpackhi_ps(r[a], r[a + 1]);
            }
            for (int a = 0; a < 8; a += 4)
                for (int h = 0; h < 2; h++) {
                    v[a + h] = _mm256_shuffle_ps(u[a + h], u[a + 2 + h], 0x44);
                    v[a + 2 + h] = _mm256_shuffle_ps(u[a + h], u[a + 2 + h], 0xEE);
                }
            /* v[0]: dims i, i+4 of rows 0-3 | 0-3; the 128-bit halves pair rows 0-3 with 4-7 */
            const int ord[4] = {0, 2, 1, 3}; /* v index of dim i + ord position */
            for (int d = 0; d < 4; d++) {
                _mm256_storeu_ps(kt + (size_t)(i + d) * nt + t, _mm256_permute2f128_ps(v[ord[d]], v[4 + ord[d]], 0x20));
                _mm256_storeu_ps(kt + (size_t)(i + 4 + d) * nt + t,
                                 _mm256_permute2f128_ps(v[ord[d]], v[4 + ord[d]], 0x31));
            }
        }
}

/* s[t] = (sum over i in order of q[i] * k_t[i]) * scale for t = 0..nt-1 (nt a multiple of 8) from K^T: 8
 * positions per vector, each lane a product then a sum per dim (no FMA), the scalar loop's bits. */
static __attribute__((target("avx2"))) void att_scores_kt(float *s, const float *q, const float *kt, int nt, int hd,
                                                         float scale)
{
    const __m256 sc = _mm256_set1_ps(scale);
    int t = 0;
    for (; t + 16 <= nt; t += 16) {
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        for (int i = 0; i < hd; i++) {
            const __m256 qi = _mm256_set1_ps(q[i]);
            a0 = _mm256_add_ps(a0, _mm256_mul_ps(qi, _mm256_loadu_ps(kt + (size_t)i * nt + t)));
            a1 = _mm256_add_ps(a1, _mm256_mul_ps(qi, _mm256_loadu_ps(kt + (size_t)i * nt + t + 8)));
        }
        _mm256_storeu_ps(s + t, _mm256_mul_ps(a0, sc));
        _mm256_storeu_ps(s + t + 8, _mm256_mul_ps(a1, sc));
    }
    for (; t < nt; t += 8) {
        __m256 a0 = _mm256_setzero_ps();
        for (int i = 0; i < hd; i++)
            a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_set1_ps(q[i]), _mm256_loadu_ps(kt + (size_t)i * nt + t)));
        _mm256_storeu_ps(s + t, _mm256_mul_ps(a0, sc));
    }
}

/* The CPU has AVX2: probed at first use; threads racing to it store the same value (relaxed atomic). */
static int att_avx2(void)
{
    static atomic_int have = -1;
    int h = atomic_load_explicit(&have, memory_order_relaxed);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("avx2") ? 1 : 0;
        atomic_store_explicit(&have, h, memory_order_relaxed);
    }
    return h;
}
#endif

/* For each row b, query head h (kv head h / (n_head / n_head_kv)), over t = 0..pos[b] of sequence seq[b]:
 *   s_t = q . k_t / sqrt(head_dim)      (f32, dims in order)
 *   p_t = exp(s_t - max s) / sum p      (f32, t in order)
 *   out = sum_t p_t v_t                 (f32, t in order, then one division by the sum)
 * q (B, n_head*head_dim); caches (n_seq, n_ctx, n_head_kv*head_dim); out (B, n_head*head_dim). A 16-bit
 * cache's rows are widened to f32 first (exactly, a tile of positions at a time, once per kv head group), so
 * the arithmetic is the f32 cache's. Every sum runs over t (or dims) in order, as above, whatever the tiling.
 * Each row depends only on its own q and its cache prefix, so a row gives the same bits whatever the
 * batch or chunk it is computed in. */
/* Row b into out_b (f32): sc holds group * (pos[b] + 1) scores, tbuf ATT_TILE widened rows (16-bit caches). */
static void att_row(const krn_cpu_attention_args *a, int b, float *out_b, float *sc, float *tbuf, float *ktbuf)
{
    const int kv_dim = a->n_head_kv * a->head_dim, group = a->n_head / a->n_head_kv, hd = a->head_dim;
    const float scale = 1.0f / sqrtf((float)hd);
    const int n_t = a->pos[b] + 1;
    const size_t c0 = (size_t)a->seq[b] * a->n_ctx * kv_dim; /* this sequence's first cache row */
    for (int g = 0; g < a->n_head_kv; g++) {
        const float *qg = a->q + ((size_t)b * a->n_head + (size_t)g * group) * hd;
        float *og = out_b + (size_t)g * group * hd;
        for (int t0 = 0; t0 < n_t; t0 += ATT_TILE) { /* scores: K widened once per tile for the group */
            const int nt = n_t - t0 < ATT_TILE ? n_t - t0 : ATT_TILE;
            size_t ks;
            const float *kg = kv_rows(a->c.k, a->c.type, c0 + (size_t)t0 * kv_dim + (size_t)g * hd, nt, kv_dim,
                                      hd, tbuf, &ks);
            int t8 = 0; /* positions scored from K^T (AVX2: 8 per vector), ATT_KT at a time for the group */
#if defined(__x86_64__)
            if (ktbuf)
                for (t8 = 0; t8 + 8 <= nt; t8 += ATT_KT) {
                    const int w = (nt & ~7) - t8 < ATT_KT ? (nt & ~7) - t8 : ATT_KT;
                    att_kt(ktbuf, kg + (size_t)t8 * ks, ks, w, hd);
                    for (int j = 0; j < group; j++)
                        att_scores_kt(sc + (size_t)j * n_t + t0 + t8, qg + (size_t)j * hd, ktbuf, w, hd, scale);
                    if (w < ATT_KT) {
                        t8 += w;
                        break;
                    }
                }
#endif
            for (int j = 0; j < group; j++) {
                const float *q = qg + (size_t)j * hd;
                float *sj = sc + (size_t)j * n_t + t0;
                int t = t8;
                /* ATT_CHAINS positions at once: independent sums, each still over dims in order (the same
                 * bits as one at a time), so the adds overlap instead of waiting on each other */
                for (; t + ATT_CHAINS <= nt; t += ATT_CHAINS) {
                    float d[ATT_CHAINS] = {0.0f};
                    const float *k = kg + (size_t)t * ks;
                    for (int i = 0; i < hd; i++)
                        for (int u = 0; u < ATT_CHAINS; u++)
                            d[u] += q[i] * k[(size_t)u * ks + i];
                    for (int u = 0; u < ATT_CHAINS; u++)
                        sj[t + u] = d[u] * scale;
                }
                for (; t < nt; t++) {
                    const float *k = kg + (size_t)t * ks;
                    float d = 0.0f;
                    for (int i = 0; i < hd; i++)
                        d += q[i] * k[i];
                    sj[t] = d * scale;
                }
            }
        }
        for (int j = 0; j < group; j++) { /* p_t = exp(s_t - max), unnormalized; o = 0 */
            float *s = sc + (size_t)j * n_t, mx = -INFINITY;
            for (int t = 0; t < n_t; t++)
                if (s[t] > mx)
                    mx = s[t];
            for (int t = 0; t < n_t; t++)
                s[t] = expf(s[t] - mx);
            for (int i = 0; i < hd; i++)
                og[(size_t)j * hd + i] = 0.0f;
        }
        for (int t0 = 0; t0 < n_t; t0 += ATT_TILE) { /* values: V widened once per tile for the group */
            const int nt = n_t - t0 < ATT_TILE ? n_t - t0 : ATT_TILE;
            size_t vs;
            const float *vg = kv_rows(a->c.v, a->c.type, c0 + (size_t)t0 * kv_dim + (size_t)g * hd, nt, kv_dim,
                                      hd, tbuf, &vs);
            for (int j = 0; j < group; j++) {
                const float *p = sc + (size_t)j * n_t + t0;
                float *o = og + (size_t)j * hd;
                int i0 = 0;
#if defined(__x86_64__)
                if (att_avx2()) /* 64 dims per pass over the positions: a V row's lines read together */
                    for (; i0 + ATT_WIDE <= hd; i0 += ATT_WIDE)
                        att_pv_wide(o + i0, p, vg + i0, vs, nt);
#endif
                /* ATT_OUT dims at a time held in registers across the positions (each dim's sum still runs
                 * over t in order: the bits of one dim at a time) */
                for (; i0 + ATT_OUT <= hd; i0 += ATT_OUT) {
                    float acc[ATT_OUT];
                    for (int i = 0; i < ATT_OUT; i++)
                        acc[i] = o[i0 + i];
                    for (int t = 0; t < nt; t++) {
                        const float *v = vg + (size_t)t * vs + i0;
                        for (int i = 0; i < ATT_OUT; i++)
                            acc[i] += p[t] * v[i];
                    }
                    for (int i = 0; i < ATT_OUT; i++)
                        o[i0 + i] = acc[i];
                }
                for (int t = 0; t < nt; t++) {
                    const float *v = vg + (size_t)t * vs;
                    for (int i = i0; i < hd; i++)
                        o[i] += p[t] * v[i];
                }
            }
        }
        for (int j = 0; j < group; j++) { /* one division by the sum (t in order) */
            const float *s = sc + (size_t)j * n_t;
            float sum = 0.0f;
            for (int t = 0; t < n_t; t++)
                sum += s[t];
            const float inv = 1.0f / sum;
            for (int i = 0; i < hd; i++)
                og[(size_t)j * hd + i] *= inv;
        }
    }
}

void krn_cpu_attention(const krn_cpu_attention_args *a)
{
    const int group = a->n_head / a->n_head_kv, hd = a->head_dim;
    const size_t row_n = (size_t)a->n_head * hd; /* out elements of one row */
    int n_max = 0; /* the longest valid row: the scores' scratch is sized once per call */
    for (int b = 0; b < a->B; b++)
        if (a->pos[b] >= 0 && a->pos[b] < a->n_ctx && a->seq[b] >= 0 && a->pos[b] + 1 > n_max)
            n_max = a->pos[b] + 1;
    float stack[ATT_STACK_POS];
    const size_t nsc = (size_t)group * n_max; /* a row's scores, head after head of a kv head's group */
    float *sc = nsc <= ATT_STACK_POS ? stack : malloc(nsc * sizeof(float));
    /* 16-bit caches: ATT_TILE positions of one kv head widened at a time (memory O(tile), not O(context)) */
    float *tbuf = a->c.type != KRN_F32 ? malloc((size_t)ATT_TILE * hd * sizeof(float)) : NULL;
    /* a 16-bit out: each row computed in f32, then rounded (the f32 op's bits, rounded to nearest even) */
    float *rowf = a->out_t != KRN_F32 ? malloc(row_n * sizeof(float)) : NULL;
    float *ktbuf = NULL; /* K^T of a tile (AVX2, head_dim a multiple of 8); without it the scalar scores */
#if defined(__x86_64__)
    if (att_avx2() && hd % 8 == 0)
        ktbuf = malloc((size_t)ATT_KT * hd * sizeof(float));
#endif
    const int scratch = sc && (a->c.type == KRN_F32 || tbuf) && (a->out_t == KRN_F32 || rowf);
    for (int b = 0; b < a->B; b++) {
        const int ok = a->pos[b] >= 0 && a->pos[b] < a->n_ctx && a->seq[b] >= 0;
        float *out_b = a->out_t == KRN_F32 ? (float *)a->out + (size_t)b * row_n : rowf;
        uint16_t *out16 = (uint16_t *)a->out + (size_t)b * row_n; /* a 16-bit out's row */
        if (ok && scratch)
            att_row(a, b, out_b, sc, tbuf, ktbuf);
        else if (out_b) /* invalid row or no scratch: NaN, visible, never silent */
            for (size_t i = 0; i < row_n; i++)
                out_b[i] = NAN;
        else /* no f32 row for a 16-bit out: the NaN rounded element by element */
            for (size_t i = 0; i < row_n; i++)
                krn_quant_row(a->out_t, &(const float){NAN}, out16 + i, 1);
        if (rowf)
            krn_quant_row(a->out_t, rowf, out16, (int64_t)row_n);
    }
    if (sc != stack)
        free(sc);
    free(tbuf);
    free(rowf);
    free(ktbuf);
}
