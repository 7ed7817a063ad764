/* x quantized to int8 per 32-element block (kernels/krn.h "x quantized to int8"): the host form, which is
 * the CPU backend's op and the reference the CUDA kernel (kernels/cuda/krn_cuda_matmul_x8.cu) must equal
 * bit for bit. No shared state. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/krn.h"
#include "kernels/quant_batch.h"

size_t krn_x8_row_bytes(int n)
{
    if (n <= 0 || n % 32)
        return 0;
    return ((size_t)n + (size_t)n / 4 + 15) / 16 * 16; /* n quants + n/32 (d, s) pairs of 8 bytes */
}

/* The NaN a non-finite block's d and s hold (the bits the CUDA kernel writes too). */
static float x8_nan(void)
{
    const uint32_t u = 0x7fc00000u;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* One block: the same operations, in the same order, as the CUDA kernel (max is exact in any order; the
 * quants and their sum are integers). */
static void quantize_block(int8_t *q, float *ds, const float *x)
{
    float amax = 0.0f;
    int finite = 1;
    for (int i = 0; i < 32; i++) {
        amax = fmaxf(amax, fabsf(x[i]));
        finite &= isfinite(x[i]) != 0;
    }
    if (!finite) { /* NaN or inf in the block: NaN products, never a silent 0 */
        memset(q, 0, 32);
        ds[0] = ds[1] = x8_nan();
        return;
    }
    const float d = amax / 127.0f;
    int sum = 0;
    for (int i = 0; i < 32; i++) {
        const int v = d > 0.0f ? (int)fminf(fmaxf(rintf(x[i] / d), -127.0f), 127.0f) : 0;
        q[i] = (int8_t)v;
        sum += v;
    }
    ds[0] = d;
    ds[1] = d * (float)sum;
}

#if defined(__x86_64__)
#include <immintrin.h>
/* quantize_block for a finite block with AVX2: the same IEEE ops per element (|x|, max, x / d, round to nearest
 * even, clamp) and an exact integer sum, so the same bytes; 0 (nothing written) for a non-finite block. */
static __attribute__((target("avx2"))) int quantize_block_avx2(int8_t *q, float *ds, const float *x)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), inf = _mm256_set1_ps(INFINITY);
    __m256 v[4], mx = _mm256_setzero_ps();
    int finite = 1;
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        const __m256 a = _mm256_andnot_ps(sign, v[k]);
        finite &= _mm256_movemask_ps(_mm256_cmp_ps(a, inf, _CMP_LT_OQ)) == 0xFF; /* NaN and inf fail */
        mx = _mm256_max_ps(mx, a);
    }
    if (!finite)
        return 0;
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float d = _mm_cvtss_f32(m4) / 127.0f;
    if (!(d > 0.0f)) {
        memset(q, 0, 32);
        ds[0] = d;
        ds[1] = d * 0.0f;
        return 1;
    }
    const __m256 dv = _mm256_set1_ps(d), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    __m256i i32[4];
    for (int k = 0; k < 4; k++) {
        const __m256 r = _mm256_round_ps(_mm256_div_ps(v[k], dv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        i32[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
    }
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(i32[0], i32[1]), _mm256_add_epi32(i32[2], i32[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    const __m256i p16 = _mm256_packs_epi32(i32[0], i32[1]), p16b = _mm256_packs_epi32(i32[2], i32[3]);
    const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16, p16b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p8);
    ds[0] = d;
    ds[1] = d * (float)_mm_cvtsi128_si32(s4);
    return 1;
}

#endif

void krn_x8_quantize_host(void *xq, const float *x, int B, int n)
{
    krn_x8_quantize_t_host(xq, x, KRN_F32, B, n);
}

void krn_x8_quantize_t_host(void *xq, const void *x, int xt, int B, int n)
{
    const size_t rb = krn_x8_row_bytes(n), eb = krn_act_bytes(xt);
    if (!rb || !eb || B <= 0)
        return;
#if defined(__x86_64__)
    const int avx2 = krn_x8_path() != KRN_X8_GENERIC; /* one CPU-feature probe: the GEMM's path */
#endif
    for (int b = 0; b < B; b++) {
        uint8_t *row = (uint8_t *)xq + (size_t)b * rb;
        float ds[2], xb[32];
        for (int j = 0; j < n / 32; j++) {
            const float *xs = xb;
            if (xt == KRN_F32)
                xs = (const float *)x + (size_t)b * n + 32 * (size_t)j;
            else
                krn_dequant_row(xt, (const uint8_t *)x + ((size_t)b * n + 32 * (size_t)j) * eb, xb, 32); /* exact */
#if defined(__x86_64__)
            if (!(avx2 && quantize_block_avx2((int8_t *)row + 32 * j, ds, xs)))
#endif
                quantize_block((int8_t *)row + 32 * j, ds, xs);
            memcpy(row + n + 8 * (size_t)j, ds, sizeof ds);
        }
        memset(row + n + (size_t)n / 4, 0, rb - (size_t)n - (size_t)n / 4); /* the padding: defined bytes */
    }
}
