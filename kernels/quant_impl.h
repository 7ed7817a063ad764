/* Private to kernels/quant*.c: GGML block layouts (ggml-common.h) and the per-block kernels shared by the
 * dequantizer, the dot product and the reference quantizers. Not for use outside kernels/quant*.c. */
#ifndef KRN_QUANT_IMPL_H
#define KRN_QUANT_IMPL_H

#include <stdint.h>
#include <string.h>
#include "kernels/quant.h"

#define QK4_0 32
#define QK4_1 32
#define QK8_0 32
#define QK_K 256
#define K_SCALE_SIZE 12

/* Block layouts, byte for byte as GGML stores them (little-endian f16 as uint16_t). */
typedef struct { uint16_t d; uint8_t qs[QK4_0 / 2]; } blk_q4_0;                  /* 18 B  */
typedef struct { uint16_t d, m; uint8_t qs[QK4_1 / 2]; } blk_q4_1;               /* 20 B  */
typedef struct { uint16_t d; int8_t qs[QK8_0]; } blk_q8_0;                       /* 34 B  */
typedef struct { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; } blk_q4_K; /* 144 B */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[K_SCALE_SIZE]; /* q4_K's packed 6-bit scales and mins */
    uint8_t qh[QK_K / 8];         /* bit 4 of each quant */
    uint8_t qs[QK_K / 2];         /* the low 4 bits, q4_K's nibble order */
} blk_q5_K;                       /* 176 B */
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; } blk_q6_K; /* 210 B */

_Static_assert(sizeof(blk_q4_0) == 18, "block_q4_0 is 18 bytes");
_Static_assert(sizeof(blk_q4_1) == 20, "block_q4_1 is 20 bytes");
_Static_assert(sizeof(blk_q8_0) == 34, "block_q8_0 is 34 bytes");
_Static_assert(sizeof(blk_q4_K) == 144, "block_q4_K is 144 bytes");
_Static_assert(sizeof(blk_q5_K) == 176, "block_q5_K is 176 bytes");
_Static_assert(sizeof(blk_q6_K) == 210, "block_q6_K is 210 bytes");

/* Exact f16 -> f32 (inline form of krn_f16_to_f32). */
static inline float krn_f16_to_f32_inl(uint16_t h)
{
    union { uint32_t u; float f; } o, sub;
    o.u = (uint32_t)(h & 0x7fff) << 13;
    const uint32_t e = o.u & (0x7c00u << 13);
    o.u += (127u - 15u) << 23;
    if (e == (0x7c00u << 13)) {
        o.u += (128u - 16u) << 23; /* inf / nan */
    } else if (e == 0) {           /* zero / subnormal: exact */
        o.u += 1u << 23;
        sub.u = 113u << 23;
        o.f -= sub.f;
    }
    o.u |= (uint32_t)(h & 0x8000) << 16;
    return o.f;
}

/* q4_1's block x sum X of the defined dot (kernels/quant_dot.c) from its 8 lane sums v[l] = (x_l + x_{l+8}) +
 * (x_{l+16} + x_{l+24}): the fold for s = 4, 2, 1 (v[l] += v[l + s]), in place; returns v[0]. */
static inline float krn_q4_1_xsum_fold(float v[8])
{
    for (int s = 4; s >= 1; s >>= 1)
        for (int l = 0; l < s; l++)
            v[l] += v[l + s];
    return v[0];
}

/* ggml's get_scale_min_k4: the j-th (0..7) 6-bit scale and min of a Q4_K or Q5_K super-block (same packing). */
static inline void krn_q4k_scale_min(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

/* All 8 of them at once, four bytes per 32-bit step: scale j < 4 is the low 6 bits of byte j, j >= 4 the low
 * nibble of byte j + 4 with the top 2 bits of byte j - 4 above it; the mins the same from bytes j + 4 and the high
 * nibbles. The values of krn_q4k_scale_min. */
static inline void krn_q4k_scales_mins(const uint8_t *q, uint8_t sc[8], uint8_t m[8])
{
    uint32_t u[3], o[4];
    memcpy(u, q, 12);
    o[0] = u[0] & 0x3f3f3f3fu;
    o[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    o[2] = u[1] & 0x3f3f3f3fu;
    o[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    memcpy(sc, o, 8);
    memcpy(m, o + 2, 8);
}

#if defined(__x86_64__)
#include <immintrin.h>
/* The same 8 scales and mins as floats times d and dmin (*ds = d * sc, *ms = dmin * m, lane j for sub-block j):
 * one widening and one convert each. For the AVX2 paths (quant_dot.c, x8_kquant.c). */
static inline __attribute__((always_inline, target("avx2"))) void
krn_q4k_scales_mins_avx2(const uint8_t *q, float d, float dmin, __m256 *ds, __m256 *ms)
{
    uint8_t sc[8], m[8];
    krn_q4k_scales_mins(q, sc, m);
    const __m256i s8 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)sc));
    const __m256i m8 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)m));
    *ds = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s8));
    *ms = _mm256_mul_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(m8));
}
#endif

/* Vector paths (quant_dot.c). The value of every element and the lane order of every dot are defined once
 * (see quant_dot.c); each path computes exactly those IEEE operations (no FMA, no contraction), so the paths
 * agree bit for bit. KRN_PATH_GENERIC is the baseline-ISA build, KRN_PATH_AVX2 the same code built for AVX2. */
enum { KRN_PATH_GENERIC = 0, KRN_PATH_AVX2 = 1, KRN_PATH_COUNT = 2 };

/* The path this process uses (picked once, at first use, from the CPU's features). */
int krn_quant_path(void);
/* 1 when path p can run on this CPU. */
int krn_quant_path_available(int p);
/* krn_dot_row / krn_dequant_row on an explicit path (tests compare paths); p must be available. */
float krn_dot_row_path(int p, int t, const void *row, const float *x, int64_t n);
void krn_dot_row_batch_path(int p, int t, const void *row, const float *x, int64_t ldx, int B, float *out,
                            int64_t n);
void krn_dequant_row_path(int p, int t, const void *src, float *dst, int64_t n);

#endif
