/* The fast mode's matmul (MEMRA_CPU_X8): q4_0 / q4_1 / q8_0 weight rows against rows of x quantized to int8
 * blocks (kernels/krn.h "x quantized to int8"), GGUF runners' way, with a defined result so every path and
 * every tiling gives the same bits.
 *
 * The defined result of one weight row W (blocks j = 0 .. nb-1, scale dw_j, q4_1 min mw_j) against one x8 row
 * (quants q, block pairs (dx_j, sx_j = dx_j * sum q)):
 *  - per block the eight exact integer partial sums p_l = sum of w_i * q_i over i = 4l .. 4l+3 (w: q4_0
 *    nibble - 8, q4_1 nibble, q8_0 the int8), element i of a block in GGUF order (nibble i < 16: low nibble of
 *    byte i; else high nibble of byte i - 16);
 *  - sc_j = dw_j * dx_j (a rounded f32 product), then lane l: acc_l = fma((float)p_l, sc_j, acc_l) (one
 *    fused multiply-add, one rounding: C's fmaf, the vector FMA instructions; blocks in increasing j);
 *  - the lanes folded for s = 4, 2, 1: acc_l += acc_{l+s}; main = acc_0;
 *  - q4_1 only: m lanes k = j % 8: m_k = m_k + mw_j * sx_j, folded the same way; result = main + m_0.
 *  - acc = 1: y = y + result (the bits of a plain matmul then krn_cpu_add).
 * The integer sums are exact on every path (|p_l| < 2^16; AVX2 maddubs cannot saturate: |w| <= 128 and
 * |q| <= 127 give pairs within 32512) and the float steps are the same IEEE ops in the same order, so the
 * generic, AVX2 and VNNI paths agree bit for bit, and a (row, x row) result does not depend on the tile, on
 * B or on the rows around it (tests/test_quant.c checks all three).
 *
 * Cache blocking: weight rows are taken R at a time (their blocks stay in L1) against all x rows, C at a
 * time; each weight block is read and unpacked once per C x rows, each x block loaded once per R weight
 * rows. Shared mutable state: `x8_path_cached`, written at most once per value (relaxed atomic). */
#include "kernels/krn.h"
#include "kernels/quant_impl.h"
#include "kernels/quant_batch.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#pragma GCC diagnostic ignored "-Wpsabi"

#define AI inline __attribute__((always_inline))
#define X8_R 4 /* weight rows per tile */
#define X8_C 4 /* x rows per tile */
#define X8_PF 4 /* the first x tile of weight tile o prefetches weight tile o + X8_PF */

static AI uint16_t x8_ld16(const void *p) { uint16_t v; memcpy(&v, p, sizeof v); return v; }
static AI float x8_ldf(const void *p) { float v; memcpy(&v, p, sizeof v); return v; }

/* Bytes of one block and offset of its quants. */
static AI size_t blk_bytes(int t) { return t == KRN_Q4_1 ? sizeof(blk_q4_1) : t == KRN_Q4_0 ? sizeof(blk_q4_0) : sizeof(blk_q8_0); }
static AI size_t blk_qoff(int t) { return t == KRN_Q4_1 ? 4 : 2; }

/* The weight tile's per-block scales: dw[r * nb + j] (and mw, q4_1), h1 the path's exact f16 conversion. */
static AI void w_scales(const int t, const int R, float (*h1)(uint16_t), const uint8_t *w, size_t rb, int64_t nb,
                        float *dw, float *mw)
{
    const size_t bb = blk_bytes(t);
    for (int r = 0; r < R; r++)
        for (int64_t j = 0; j < nb; j++) {
            const uint8_t *blk = w + (size_t)r * rb + (size_t)j * bb;
            dw[r * nb + j] = h1(x8_ld16(blk));
            if (t == KRN_Q4_1)
                mw[r * nb + j] = h1(x8_ld16(blk + 2));
        }
}

/* The pairs' sc[(r * C + c) * nb + j] = dw[r * nb + j] * dx[c * nb + j]. */
static AI void x_scales(const int R, const int C, int64_t nb, const float *dw, const float *dx, float *sc)
{
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            float *restrict s = sc + (size_t)(r * C + c) * nb;
            const float *restrict a = dw + r * nb, *restrict b = dx + c * nb;
            for (int64_t j = 0; j < nb; j++)
                s[j] = a[j] * b[j];
        }
}

/* The q4_1 min term's tail (blocks from j on, lanes k = j % 8) and the fold of the 8 m lanes. */
static AI float m_tail_fold(float m[8], const float *mw, const float *sx, int64_t j, int64_t nb)
{
    for (int k = 0; j + k < nb; k++)
        m[k] = m[k] + mw[j + k] * sx[j + k];
    for (int s = 4; s >= 1; s >>= 1)
        for (int l = 0; l < s; l++)
            m[l] += m[l + s];
    return m[0];
}

/* Scratch floats: dw, mw (X8_R * nb each), sc (X8_R * X8_C * nb), then dx, sx of every x row (B * nb each). */
#define SCRATCH_FLOATS(nb, B) ((size_t)(nb) * (2 * X8_R + X8_R * X8_C + 2 * (size_t)(B)))

static AI float h1_generic(uint16_t h) { return krn_f16_to_f32_inl(h); }

/* ---- generic path ---- */

static AI void tile_generic(const int t, const int R, const int C, const uint8_t *w, size_t rb, const uint8_t *xq,
                            size_t xrb, int64_t n, float *y, int64_t ldy, int acc, float *scratch, const float *dx,
                            const float *sx, const uint8_t *pf)
{
    (void)pf;
    const int64_t nb = n / 32;
    const size_t bb = blk_bytes(t), qo = blk_qoff(t);
    const float *dw = scratch, *mw = dw + X8_R * nb;
    float *sc = scratch + 2 * X8_R * nb;
    x_scales(R, C, nb, dw, dx, sc);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            float lane[8] = {0};
            const int8_t *q = (const int8_t *)(xq + (size_t)c * xrb);
            const float *s = sc + (size_t)(r * C + c) * nb;
            for (int64_t j = 0; j < nb; j++) {
                const uint8_t *qw = w + (size_t)r * rb + (size_t)j * bb + qo;
                for (int l = 0; l < 8; l++) {
                    int32_t p = 0;
                    for (int i = 4 * l; i < 4 * l + 4; i++) {
                        const int wi = t == KRN_Q8_0 ? ((const int8_t *)qw)[i]
                                                     : (i < 16 ? qw[i] & 0xF : qw[i - 16] >> 4) - (t == KRN_Q4_0 ? 8 : 0);
                        p += wi * q[32 * j + i];
                    }
                    lane[l] = fmaf((float)p, s[j], lane[l]);
                }
            }
            for (int k = 4; k >= 1; k >>= 1)
                for (int l = 0; l < k; l++)
                    lane[l] += lane[l + k];
            float v = lane[0];
            if (t == KRN_Q4_1) {
                float m[8] = {0};
                int64_t j = 0;
                for (; j + 8 <= nb; j += 8)
                    for (int k = 0; k < 8; k++)
                        m[k] = m[k] + mw[r * nb + j + k] * sx[c * nb + j + k];
                v = v + m_tail_fold(m, mw + r * nb, sx + c * nb, j, nb);
            }
            float *yo = y + (size_t)c * ldy + r;
            *yo = acc ? *yo + v : v;
        }
}

/* ---- AVX2 (maddubs + madd) and VNNI (dpbusd) paths: one body, two integer dot primitives ---- */
#if defined(__x86_64__)
#define TGT_AVX2 "avx2,fma,f16c"
#define TGT_VNNI "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"

/* The weight block's bytes as u (unsigned, the maddubs/dpbusd first operand) and, for signed types, its sign. */
#define UNPACK_BODY                                                                                            \
    if (t == KRN_Q8_0) {                                                                                       \
        const __m256i v = _mm256_loadu_si256((const __m256i *)qw);                                              \
        *u = _mm256_sign_epi8(v, v);                                                                           \
        *sg = v;                                                                                               \
    } else {                                                                                                   \
        const __m128i b = _mm_loadu_si128((const __m128i *)qw), m = _mm_set1_epi8(0x0F);                      \
        __m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));             \
        if (t == KRN_Q4_0) {                                                                                   \
            v = _mm256_sub_epi8(v, _mm256_set1_epi8(8));                                                       \
            *u = _mm256_sign_epi8(v, v);                                                                       \
            *sg = v;                                                                                           \
        } else {                                                                                               \
            *u = v;                                                                                            \
            *sg = v; /* not read for q4_1 (unsigned weights); defined all the same */                          \
        }                                                                                                      \
    }

/* Lanes folded for s = 4, 2, 1 (lane l + lane l + s), then + the q4_1 min term, into y: the generic steps. */
#define FINISH_BODY                                                                                            \
    const __m128 f4 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));                    \
    const __m128 f2 = _mm_add_ps(f4, _mm_movehl_ps(f4, f4));                                                   \
    float v = _mm_cvtss_f32(_mm_add_ss(f2, _mm_movehdup_ps(f2)));                                             \
    if (t == KRN_Q4_1) {                                                                                       \
        __m256 mv = _mm256_setzero_ps();                                                                       \
        int64_t j = 0;                                                                                         \
        for (; j + 8 <= nb; j += 8)                                                                            \
            mv = _mm256_add_ps(mv, _mm256_mul_ps(_mm256_loadu_ps(mw + j), _mm256_loadu_ps(sx + j)));           \
        float m[8];                                                                                            \
        _mm256_storeu_ps(m, mv);                                                                               \
        v = v + m_tail_fold(m, mw, sx, j, nb);                                                                 \
    }                                                                                                          \
    *y = acc ? *y + v : v;

static AI __attribute__((target(TGT_AVX2))) void unpack_avx2(const int t, const uint8_t *qw, __m256i *u, __m256i *sg)
{
    UNPACK_BODY
}
static AI __attribute__((target(TGT_VNNI))) void unpack_vnni(const int t, const uint8_t *qw, __m256i *u, __m256i *sg)
{
    UNPACK_BODY
}
static AI __attribute__((target(TGT_AVX2))) void finish_avx2(const int t, __m256 a, const float *mw, const float *sx,
                                                            int64_t nb, float *y, int acc)
{
    FINISH_BODY
}
static AI __attribute__((target(TGT_VNNI))) void finish_vnni(const int t, __m256 a, const float *mw, const float *sx,
                                                            int64_t nb, float *y, int acc)
{
    FINISH_BODY
}

static AI __attribute__((target(TGT_AVX2))) float h1_avx2(uint16_t h) { return _cvtsh_ss(h); }
static AI __attribute__((target(TGT_VNNI))) float h1_vnni(uint16_t h) { return _cvtsh_ss(h); }

/* w_scales with 8 blocks per gather: one 32-bit load at each block's start holds d (low half) and, for q4_1,
 * m (high half); the f16 -> f32 conversions are exact, so the values are w_scales's. */
#define WS_BODY(H1)                                                                                            \
    const size_t bb = blk_bytes(t);                                                                            \
    const __m256i off = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)bb)); \
    const __m256i lo = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8, 9, \
                                        12, 13, -1, -1, -1, -1, -1, -1, -1, -1);                               \
    const __m256i hi = _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6, 7, 10, \
                                        11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);                           \
    for (int r = 0; r < R; r++) {                                                                              \
        const uint8_t *row = w + (size_t)r * rb;                                                               \
        int64_t j = 0;                                                                                         \
        for (; j + 8 <= nb && (int64_t)(j + 8) * (int64_t)bb <= (int64_t)INT32_MAX; j += 8) {                  \
            const __m256i g = _mm256_i32gather_epi32((const int *)(row + (size_t)j * bb), off, 1);             \
            const __m256i d = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(g, lo), 0x08);                     \
            _mm256_storeu_ps(dw + r * nb + j, _mm256_cvtph_ps(_mm256_castsi256_si128(d)));                    \
            if (t == KRN_Q4_1) {                                                                               \
                const __m256i m = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(g, hi), 0x08);                 \
                _mm256_storeu_ps(mw + r * nb + j, _mm256_cvtph_ps(_mm256_castsi256_si128(m)));                \
            }                                                                                                  \
        }                                                                                                      \
        for (; j < nb; j++) {                                                                                  \
            const uint8_t *blk = row + (size_t)j * bb;                                                         \
            dw[r * nb + j] = H1(x8_ld16(blk));                                                                 \
            if (t == KRN_Q4_1)                                                                                 \
                mw[r * nb + j] = H1(x8_ld16(blk + 2));                                                         \
        }                                                                                                      \
    }

static AI __attribute__((target(TGT_AVX2))) void ws_avx2(const int t, const int R, float (*h1)(uint16_t),
                                                        const uint8_t *w, size_t rb, int64_t nb, float *dw, float *mw)
{
    WS_BODY(h1_avx2)
}
static AI __attribute__((target(TGT_VNNI))) void ws_vnni(const int t, const int R, float (*h1)(uint16_t),
                                                        const uint8_t *w, size_t rb, int64_t nb, float *dw, float *mw)
{
    WS_BODY(h1_vnni)
}

static AI __attribute__((target(TGT_AVX2))) __m256i dot_avx2(__m256i u, __m256i s)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
static AI __attribute__((target(TGT_VNNI))) __m256i dot_vnni(__m256i u, __m256i s)
{
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}

#define TILE_BODY(UNPACK, DOT, FINISH)                                                                         \
    const int64_t nb = n / 32;                                                                                 \
    const size_t bb = blk_bytes(t), qo = blk_qoff(t);                                                          \
    const float *dw = scratch, *mw = dw + X8_R * nb;                                                           \
    float *sc = scratch + 2 * X8_R * nb;                                                                       \
    x_scales(R, C, nb, dw, dx, sc);                                                                            \
    __m256 a[X8_R][X8_C];                                                                                      \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                                        \
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)                                                        \
        a[r][c] = _mm256_setzero_ps();                                                                         \
    for (int64_t j = 0; j < nb; j++) {                                                                         \
        __m256i u[X8_R], sg[X8_R];                                                                             \
        if (pf) /* a later weight tile's same block: the weights stream from memory */                        \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                                \
                __builtin_prefetch(pf + (size_t)r * rb + (size_t)j * bb, 0, 3);                                \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                                    \
            UNPACK(t, w + (size_t)r * rb + (size_t)j * bb + qo, &u[r], &sg[r]);                                \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {                                                  \
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + (size_t)c * xrb + 32 * (size_t)j));   \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                              \
                const __m256i p = DOT(u[r], t == KRN_Q4_1 ? xv : _mm256_sign_epi8(xv, sg[r]));                 \
                const __m256 s = _mm256_broadcast_ss(sc + (size_t)(r * C + c) * nb + j);                       \
                a[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, a[r][c]);                                 \
            }                                                                                                  \
        }                                                                                                      \
    }                                                                                                          \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                                        \
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)                                                        \
        FINISH(t, a[r][c], mw + r * nb, sx + c * nb, nb, y + (size_t)c * ldy + r, acc);

/* ---- VNNI on 512-bit vectors: two weight rows per vector ----
 * One zmm holds the same block of weight rows r and r + 1, its 128-bit lanes [r elements 0-15, r + 1 elements
 * 0-15, r elements 16-31, r + 1 elements 16-31] (q4: the bytes of both rows, then their high nibbles, one mask);
 * the x block is loaded as [0-15, 0-15, 16-31, 16-31] to match. 32-bit lane k of a product is the 4-element
 * sum p_l of row r (k in 0-3: l = k; 8-11: l = k - 4) or r + 1 (4-7: l = k - 4; 12-15: l = k - 8), so the
 * float steps per lane are the 256-bit path's and the fold below hands each row its eight lanes in order.
 * AVX-512 has no byte sign: the signed types shift the offset out of the unsigned operand instead, exactly:
 *  - q4_0: w = nibble - 8, p = dpbusd(nibble, x) - 8 * sum4(x) (the correction per x block, shared by rows);
 *  - q8_0: p = dpbusd(x + 128, w) - 128 * sum4(w) (x ^ 0x80 as unsigned; the correction per weight block).
 * All terms are integers below 2^18: the same p_l as the other paths. */
#define TGT_V512 TGT_VNNI

static AI __attribute__((target(TGT_V512))) __m512i v512_w2(const int t, const uint8_t *q0, const uint8_t *q1)
{
    if (t == KRN_Q8_0) { /* [r 0-15, r+1 0-15, r 16-31, r+1 16-31] */
        const __m512i a = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)q0));
        const __m512i b = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)q1));
        return _mm512_permutex2var_epi64(a, _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), b);
    }
    const __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)q0)),
                                              _mm_loadu_si128((const __m128i *)q1), 1);
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(b), _mm256_srli_epi16(b, 4), 1);
    return _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
}

/* Row r's (lo = 0) or r + 1's (lo = 1) eight lanes of a, in lane order. */
static AI __attribute__((target(TGT_V512))) __m256 v512_row(__m512 a, int hi)
{
    const __m256 l = _mm512_castps512_ps256(a), h = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
    return hi ? _mm256_permute2f128_ps(l, h, 0x31) : _mm256_permute2f128_ps(l, h, 0x20);
}

static AI __attribute__((target(TGT_V512))) void tile_v512(const int t, const int R, const int C, const uint8_t *w,
                                                          size_t rb, const uint8_t *xq, size_t xrb, int64_t n,
                                                          float *y, int64_t ldy, int acc, float *scratch,
                                                          const float *dx, const float *sx, const uint8_t *pf)
{
    const int64_t nb = n / 32;
    const size_t bb = blk_bytes(t), qo = blk_qoff(t);
    const float *dw = scratch, *mw = dw + X8_R * nb;
    const int P = R / 2; /* row pairs */
    __m512 a[X8_R / 2][X8_C];
    _Pragma("GCC unroll 4") for (int p = 0; p < P; p++)
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)
        a[p][c] = _mm512_setzero_ps();
    const __m512i dup = _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3);
    for (int64_t j = 0; j < nb; j++) {
        /* a later weight tile's same bytes: one prefetch per row every other block covers every line of the
         * q4 rows (blocks of 18 and 20 bytes), one per block for q8_0 (34 bytes) */
        if (pf && (t == KRN_Q8_0 || (j & 1) == 0))
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
                __builtin_prefetch(pf + (size_t)r * rb + (size_t)j * bb, 0, 3);
        __m512i u[X8_R / 2], wc[X8_R / 2];
        __m512 dv[X8_R / 2]; /* [dw of row 2p x 4, of row 2p + 1 x 4] twice: the pair's lanes */
        _Pragma("GCC unroll 4") for (int p = 0; p < P; p++) {
            dv[p] = _mm512_mask_broadcastss_ps(_mm512_set1_ps(dw[2 * p * nb + j]), 0xF0F0,
                                               _mm_load_ss(dw + (2 * p + 1) * nb + j));
            const uint8_t *q0 = w + (size_t)(2 * p) * rb + (size_t)j * bb + qo;
            u[p] = v512_w2(t, q0, q0 + rb);
            if (t == KRN_Q8_0) /* 128 * sum4(w) */
                wc[p] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), u[p]);
        }
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
            const __m256i x2 = _mm256_loadu_si256((const __m256i *)(xq + (size_t)c * xrb + 32 * (size_t)j));
            const __m512i xv = _mm512_permutexvar_epi64(dup, _mm512_castsi256_si512(x2));
            const __m512 xd = _mm512_set1_ps(dx[c * nb + j]);
            __m512i xc = _mm512_setzero_si512(), xo = xv;
            if (t == KRN_Q4_0) /* 8 * sum4(x) */
                xc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(8), xv);
            if (t == KRN_Q8_0)
                xo = _mm512_xor_si512(xv, _mm512_set1_epi8((char)0x80));
            _Pragma("GCC unroll 4") for (int p = 0; p < P; p++) {
                __m512i q;
                if (t == KRN_Q8_0)
                    q = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), xo, u[p]), wc[p]);
                else if (t == KRN_Q4_0)
                    q = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u[p], xv), xc);
                else
                    q = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[p], xv);
                const __m512 sv = _mm512_mul_ps(dv[p], xd); /* sc_j = dw_j * dx_j, lane by lane */
                a[p][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), sv, a[p][c]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int p = 0; p < P; p++)
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)
        finish_vnni(t, v512_row(a[p][c], h), mw + (2 * p + h) * nb, sx + c * nb, nb,
                    y + (size_t)c * ldy + 2 * p + h, acc);
}

static AI __attribute__((target(TGT_AVX2))) void tile_avx2(const int t, const int R, const int C, const uint8_t *w,
                                                          size_t rb, const uint8_t *xq, size_t xrb, int64_t n,
                                                          float *y, int64_t ldy, int acc, float *scratch,
                                                          const float *dx, const float *sx, const uint8_t *pf)
{
    TILE_BODY(unpack_avx2, dot_avx2, finish_avx2)
}
static AI __attribute__((target(TGT_VNNI))) void tile_vnni(const int t, const int R, const int C, const uint8_t *w,
                                                          size_t rb, const uint8_t *xq, size_t xrb, int64_t n,
                                                          float *y, int64_t ldy, int acc, float *scratch,
                                                          const float *dx, const float *sx, const uint8_t *pf)
{
    if (R % 2 == 0) {
        tile_v512(t, R, C, w, rb, xq, xrb, n, y, ldy, acc, scratch, dx, sx, pf);
        return;
    }
    TILE_BODY(unpack_vnni, dot_vnni, finish_vnni)
}
#endif

/* ---- the loops over tiles, one per path; t, R and C are constants in each tile call ---- */

typedef struct x8_job {
    const uint8_t *w; size_t rb; int n_out; const uint8_t *xq; size_t xrb; int B; int64_t n; float *y;
    int64_t ldy; int acc; float *scratch; const float *dx, *sx; /* dx, sx: B * nb each */
} x8_job;

#define TILE_CALL(TILE, T, R, C, o, b)                                                                          \
    TILE(T, R, C, j->w + (size_t)(o) * j->rb, j->rb, j->xq + (size_t)(b) * j->xrb, j->xrb, j->n,             \
         j->y + (size_t)(b) * j->ldy + (o), j->ldy, j->acc, j->scratch, j->dx + (size_t)(b) * nb,             \
         j->sx + (size_t)(b) * nb,                                                                             \
         (b) == 0 && (o) + (X8_PF + 1) * X8_R <= j->n_out ? j->w + (size_t)((o) + X8_PF * X8_R) * j->rb : NULL)

/* Weight tiles outer (their blocks and scales stay in L1 across every x row), x tiles inner. */
#define LOOPS(TILE, WS, H1, T)                                                                                     \
    do {                                                                                                       \
        const int64_t nb = j->n / 32;                                                                          \
        int o = 0;                                                                                             \
        for (; o + X8_R <= j->n_out; o += X8_R) {                                                              \
            WS(T, X8_R, H1, j->w + (size_t)o * j->rb, j->rb, nb, j->scratch, j->scratch + X8_R * nb);   \
            int b = 0;                                                                                         \
            for (; b + X8_C <= j->B; b += X8_C)                                                                \
                TILE_CALL(TILE, T, X8_R, X8_C, o, b);                                                          \
            for (; b + 2 <= j->B; b += 2) /* micro-batches of 2 rows: each weight block unpacked once */        \
                TILE_CALL(TILE, T, X8_R, 2, o, b);                                                             \
            for (; b < j->B; b++)                                                                              \
                TILE_CALL(TILE, T, X8_R, 1, o, b);                                                             \
        }                                                                                                      \
        for (; o < j->n_out; o++) {                                                                            \
            WS(T, 1, H1, j->w + (size_t)o * j->rb, j->rb, nb, j->scratch, j->scratch + X8_R * nb);      \
            int b = 0;                                                                                         \
            for (; b + X8_C <= j->B; b += X8_C)                                                                \
                TILE_CALL(TILE, T, 1, X8_C, o, b);                                                             \
            for (; b < j->B; b++)                                                                              \
                TILE_CALL(TILE, T, 1, 1, o, b);                                                                \
        }                                                                                                      \
    } while (0)

static void gemm_generic(int t, const x8_job *j)
{
    switch (t) {
    case KRN_Q4_0: LOOPS(tile_generic, w_scales, h1_generic, KRN_Q4_0); break;
    case KRN_Q4_1: LOOPS(tile_generic, w_scales, h1_generic, KRN_Q4_1); break;
    default: LOOPS(tile_generic, w_scales, h1_generic, KRN_Q8_0); break;
    }
}

#if defined(__x86_64__)
static __attribute__((target(TGT_AVX2))) void gemm_avx2(int t, const x8_job *j)
{
    switch (t) {
    case KRN_Q4_0: LOOPS(tile_avx2, ws_avx2, h1_avx2, KRN_Q4_0); break;
    case KRN_Q4_1: LOOPS(tile_avx2, ws_avx2, h1_avx2, KRN_Q4_1); break;
    default: LOOPS(tile_avx2, ws_avx2, h1_avx2, KRN_Q8_0); break;
    }
}
static __attribute__((target(TGT_VNNI))) void gemm_vnni(int t, const x8_job *j)
{
    switch (t) {
    case KRN_Q4_0: LOOPS(tile_vnni, ws_vnni, h1_vnni, KRN_Q4_0); break;
    case KRN_Q4_1: LOOPS(tile_vnni, ws_vnni, h1_vnni, KRN_Q4_1); break;
    default: LOOPS(tile_vnni, ws_vnni, h1_vnni, KRN_Q8_0); break;
    }
}
#endif

int krn_x8_path_available(int p)
{
    if (p == KRN_X8_GENERIC)
        return 1;
#if defined(__x86_64__)
    __builtin_cpu_init();
    unsigned a, b, c, d;
    const int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    const int fma = __builtin_cpu_supports("fma");
    if (p == KRN_X8_AVX2)
        return __builtin_cpu_supports("avx2") && fma && f16c ? 1 : 0;
    if (p == KRN_X8_VNNI)
        return __builtin_cpu_supports("avx2") && fma && f16c && __builtin_cpu_supports("avx512f") &&
                       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512vnni")
                   ? 1
                   : 0;
#endif
    return 0;
}

static atomic_int x8_path_cached = -1;

int krn_x8_path(void)
{
    int p = atomic_load_explicit(&x8_path_cached, memory_order_relaxed);
    if (p < 0) {
        p = krn_x8_path_available(KRN_X8_VNNI) ? KRN_X8_VNNI
            : krn_x8_path_available(KRN_X8_AVX2) ? KRN_X8_AVX2 : KRN_X8_GENERIC;
        atomic_store_explicit(&x8_path_cached, p, memory_order_relaxed); /* same value from every thread */
    }
    return p;
}

int krn_x8_type_ok(int t) { return t == KRN_Q4_0 || t == KRN_Q4_1 || t == KRN_Q8_0; }

int krn_x8_gemm_path(int p, int t, const void *w, size_t row_bytes, int n_out, const void *xq, int B, int64_t n,
                     float *y, int64_t ldy, int acc)
{
    if (!krn_x8_type_ok(t) || n <= 0 || n % 32 || n > INT32_MAX || n_out <= 0 || B <= 0)
        return -1;
    const int64_t nb = n / 32;
    float *scratch = malloc(SCRATCH_FLOATS(nb, B) * sizeof(float));
    if (!scratch)
        return -1;
    const size_t xrb = krn_x8_row_bytes((int)n);
    float *dx = scratch + (size_t)nb * (2 * X8_R + X8_R * X8_C), *sx = dx + (size_t)B * nb;
    for (int b = 0; b < B; b++) /* every x row's block pairs, once per call */
        for (int64_t k = 0; k < nb; k++) {
            const uint8_t *ds = (const uint8_t *)xq + (size_t)b * xrb + (size_t)n + 8 * (size_t)k;
            dx[(size_t)b * nb + k] = x8_ldf(ds);
            sx[(size_t)b * nb + k] = x8_ldf(ds + 4);
        }
    const x8_job j = {w, row_bytes, n_out, xq, xrb, B, n, y, ldy, acc, scratch, dx, sx};
#if defined(__x86_64__)
    if (p == KRN_X8_VNNI)
        gemm_vnni(t, &j);
    else if (p == KRN_X8_AVX2)
        gemm_avx2(t, &j);
    else
#endif
        gemm_generic(t, &j);
    free(scratch);
    return 0;
}

int krn_x8_gemm(int t, const void *w, size_t row_bytes, int n_out, const void *xq, int B, int64_t n, float *y,
                int64_t ldy, int acc)
{
    return krn_x8_gemm_path(krn_x8_path(), t, w, row_bytes, n_out, xq, B, n, y, ldy, acc);
}

float krn_dot_row_x8_path(int p, int t, const void *row, const void *xq, int64_t n)
{
    float y;
    if (!krn_x8_type_ok(t) || n <= 0 || n % 32 ||
        krn_x8_gemm_path(p, t, row, krn_row_bytes(t, n), 1, xq, 1, n, &y, 1, 0) != 0)
        return __builtin_nanf("");
    return y;
}

float krn_dot_row_x8(int t, const void *row, const void *xq, int64_t n)
{
    return krn_dot_row_x8_path(krn_x8_path(), t, row, xq, n);
}
