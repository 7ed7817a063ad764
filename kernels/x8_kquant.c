/* The fast mode's matmul (MEMRA_CPU_X8) for K-quant weights in GGUF blocks (q4_K, q5_K, q6_K): weight rows against rows
 * of x quantized to int8 per 32-block (kernels/krn.h "x quantized to int8"), with a defined result so the portable
 * and AVX2 paths, every tile and every B give the same bits.
 *
 * The defined result of one weight row (super-blocks of 256 in order, each 8 x blocks j of 32 elements, x block
 * values dx and sx = dx * the sum of its quants) against one x8 row:
 *  - per x block an exact integer I: q4_K / q5_K I = sum of q_i * xq_i (q the sub-block's 4-bit, or 5-bit, quant);
 *    q6_K I = sc_{2j} * P_{2j} + sc_{2j+1} * P_{2j+1}, P_s = sum of (q_i - 32) * xq_i over 16-element sub-block
 *    s, sc_s its int8 scale (|I| <= 2 * 128 * 65024 < 2^24, so (float)I is exact);
 *  - 8 lanes, lane j for x block j of every super-block: main_j = fma((float)I, F * dx, main_j) over the
 *    super-blocks in order from 0, F = d * sc_j for q4_K / q5_K (its 6-bit scale), d for q6_K; they also add mins_j =
 *    fma(dmin * m_j, sx, mins_j) (m_j its 6-bit min); every product rounded as written;
 *  - the lanes folded for s = 4, 2, 1: lane[l] += lane[l + s]; the result is main_0 - mins_0 (q4_K, q5_K) or
 *    main_0 (q6_K);
 *  - acc = 1: y = y + result (the bits of a plain matmul then krn_cpu_add).
 * The integers are exact on both paths (AVX2 maddubs pairs stay within int16: 2 * 63 * 127 for q6_K's unsigned
 * 6-bit q, whose - 32 is applied through the x sums) and the float steps are the same IEEE operations lane by
 * lane (no FP contraction in the build), so the paths agree bit for bit (tests/test_x8_kquant.c).
 *
 * Tiles: 4 weight rows against up to 4 x rows; a super-block's quants and scales are unpacked once per row for
 * the tile's x rows. Four rows stream at once, which the hardware prefetcher follows poorly: each super-block read
 * prefetches the next tile's (docs/bench/cpu.md, "K-quants in the fast mode"). No shared state. */
#include "kernels/krn.h"
#include "kernels/quant_batch.h"
#include "kernels/quant_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#pragma GCC diagnostic ignored "-Wpsabi"

#define AI inline __attribute__((always_inline))
#define KQ_R 4 /* weight rows per tile */
#define KQ_C 4 /* x rows per tile */

static AI uint16_t kq_ld16(const void *p) { uint16_t v; memcpy(&v, p, sizeof v); return v; }
static AI float kq_ldf(const void *p) { float v; memcpy(&v, p, sizeof v); return v; }

int krn_x8_kquant_type_ok(int t) { return t == KRN_Q4_K || t == KRN_Q5_K || t == KRN_Q6_K; }

/* q4_K / q5_K: where a super-block's nibbles start. */
static AI size_t kq_qs(int t) { return t == KRN_Q4_K ? offsetof(blk_q4_K, qs) : offsetof(blk_q5_K, qs); }

/* One call's x rows: quants, and per x row dx_j, sx_j (nb of them) and q6_K's 16-element quant sums. */
typedef struct kq_xs {
    const int8_t *xq; size_t xrb; const float *dx, *sx; const int32_t *s16; int64_t nb;
} kq_xs;

/* ---- portable path: the integers element by element ---- */

/* Weight quant e (0..255) of a super-block: q4_K the nibble, q5_K the 5-bit value, q6_K the unsigned 6-bit one. */
static AI int kq_q(const int t, const uint8_t *sb, int e)
{
    if (t != KRN_Q6_K) { /* qs bytes 32p .. 32p + 31: low nibbles elements 64p + l, high ones 64p + 32 + l */
        const uint8_t b = sb[kq_qs(t) + 32 * (e / 64) + e % 32];
        const int nib = (e / 32) % 2 ? b >> 4 : b & 0xF;
        if (t == KRN_Q4_K)
            return nib;
        return nib | ((sb[offsetof(blk_q5_K, qh) + e % 32] >> (e / 32)) & 1) << 4; /* q5_K: qh bit j, j = e / 32 */
    }
    const int h = e / 128, k = (e % 128) / 32, l = e % 32; /* ggml's q1..q4 of half h */
    const uint8_t *ql = sb + 64 * h, *qh = sb + offsetof(blk_q6_K, qh) + 32 * h;
    const int lo = k % 2 ? ql[l + 32] : ql[l];
    return (k < 2 ? lo & 0xF : lo >> 4) | (((qh[l] >> (2 * k)) & 3) << 4);
}

static AI void kq_ints_generic(const int t, const uint8_t *sb, const int8_t *xq, const int32_t *s16, int32_t I[8])
{
    for (int j = 0; j < 8; j++) {
        if (t != KRN_Q6_K) {
            int32_t p = 0;
            for (int i = 0; i < 32; i++)
                p += kq_q(t, sb, 32 * j + i) * xq[32 * j + i];
            I[j] = p;
        } else {
            const int8_t *sc = (const int8_t *)(sb + offsetof(blk_q6_K, scales));
            int32_t v = 0;
            for (int h = 0; h < 2; h++) {
                const int s = 2 * j + h;
                int32_t p = 0;
                for (int i = 0; i < 16; i++)
                    p += kq_q(t, sb, 16 * s + i) * xq[16 * s + i];
                v += sc[s] * (p - 32 * s16[s]);
            }
            I[j] = v;
        }
    }
}

/* The defined fold of a (row, x row) pair's 8 lanes (for s = 4, 2, 1: lane[l] += lane[l + s]) and its result. */
static AI float kq_fold(const int t, float main[8], float mins[8])
{
    for (int s = 4; s >= 1; s >>= 1)
        for (int l = 0; l < s; l++) {
            main[l] += main[l + s];
            mins[l] += mins[l + s];
        }
    return t != KRN_Q6_K ? main[0] - mins[0] : main[0];
}

static void kq_gemm_generic(const int t, const uint8_t *w, size_t rb, int n_out, const kq_xs *xs, int B, float *y,
                            int64_t ldy, int acc)
{
    const int64_t ns = xs->nb / 8;
    const size_t sbb = krn_type_block_bytes(t);
    for (int o = 0; o < n_out; o++)
        for (int b = 0; b < B; b++) {
            float main[8] = {0}, mins[8] = {0};
            for (int64_t s = 0; s < ns; s++) {
                const uint8_t *sb = w + (size_t)o * rb + (size_t)s * sbb;
                const float *dx = xs->dx + (size_t)b * xs->nb + 8 * s, *sx = xs->sx + (size_t)b * xs->nb + 8 * s;
                int32_t I[8];
                kq_ints_generic(t, sb, xs->xq + (size_t)b * xs->xrb + 256 * s, xs->s16 + ((size_t)b * ns + s) * 16, I);
                if (t == KRN_Q6_K) {
                    const float d = krn_f16_to_f32_inl(kq_ld16(sb + offsetof(blk_q6_K, d)));
                    for (int j = 0; j < 8; j++)
                        main[j] = fmaf((float)I[j], d * dx[j], main[j]);
                    continue;
                }
                const float d = krn_f16_to_f32_inl(kq_ld16(sb)), dmin = krn_f16_to_f32_inl(kq_ld16(sb + 2));
                uint8_t sc[8], m[8];
                krn_q4k_scales_mins(sb + 4, sc, m);
                for (int j = 0; j < 8; j++) {
                    main[j] = fmaf((float)I[j], (d * (float)sc[j]) * dx[j], main[j]);
                    mins[j] = fmaf(dmin * (float)m[j], sx[j], mins[j]);
                }
            }
            const float v = kq_fold(t, main, mins);
            float *yo = y + (size_t)b * ldy + o;
            *yo = acc ? *yo + v : v;
        }
}

/* ---- AVX2 path: the integers by maddubs, 32 products per block in one step ---- */
#if defined(__x86_64__)
#define XA static AI __attribute__((target("avx2,fma,f16c")))

/* The 8 blocks' int32 lane vectors v[j] (lanes 0-3: elements 0-15 of block j, 4-7: 16-31) -> I of the 8 blocks,
 * lane j (see the header). q6_K: scv, x16 hold sc_s and the x sums of sub-blocks s in lane order 0, 2, 4, 6, 1, 3,
 * 5, 7 for the first 4 blocks (scv[0], x16[0]) and the last 4 (scv[1], x16[1]). */
XA __m256i kq_reduce(const int t, const __m256i v[8], const __m256i scv[2], const __m256i x16[2])
{
    const __m256i a01 = _mm256_hadd_epi32(v[0], v[1]), a23 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i a45 = _mm256_hadd_epi32(v[4], v[5]), a67 = _mm256_hadd_epi32(v[6], v[7]);
    /* lanes k (k < 4): the first 16 elements of block k (b0) or 4 + k (b4); lanes 4 + k: the last 16 */
    __m256i b0 = _mm256_hadd_epi32(a01, a23), b4 = _mm256_hadd_epi32(a45, a67);
    if (t == KRN_Q6_K) { /* P_s = raw - 32 * x sum, times sc_s */
        b0 = _mm256_mullo_epi32(scv[0], _mm256_sub_epi32(b0, _mm256_slli_epi32(x16[0], 5)));
        b4 = _mm256_mullo_epi32(scv[1], _mm256_sub_epi32(b4, _mm256_slli_epi32(x16[1], 5)));
    }
    return _mm256_add_epi32(_mm256_permute2x128_si256(b0, b4, 0x20), _mm256_permute2x128_si256(b0, b4, 0x31));
}

/* Block j's 32 weight quants as unsigned bytes (q4_K nibbles, q5_K 5-bit values, q6_K 6-bit ones). */
XA __m256i kq_wq(const int t, const uint8_t *sb, int j)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    if (t != KRN_Q6_K) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(sb + kq_qs(t) + 32 * (j / 2)));
        const __m256i nib = j % 2 ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) : _mm256_and_si256(v, m4);
        if (t == KRN_Q4_K)
            return nib;
        /* q5_K: bit j of qh[l] is bit 4 of element l (16-bit shifts: the mask keeps each byte's own bit) */
        const __m256i H = _mm256_loadu_si256((const __m256i *)(sb + offsetof(blk_q5_K, qh)));
        return _mm256_or_si256(nib, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, j), _mm256_set1_epi8(1)), 4));
    }
    const int h = j / 4, k = j % 4;
    const __m256i L = _mm256_loadu_si256((const __m256i *)(sb + 64 * h + 32 * (k % 2)));
    const __m256i H = _mm256_loadu_si256((const __m256i *)(sb + offsetof(blk_q6_K, qh) + 32 * h));
    const __m256i lo = k < 2 ? _mm256_and_si256(L, m4) : _mm256_and_si256(_mm256_srli_epi16(L, 4), m4);
    /* 16-bit shifts move bits across the bytes of a pair; the masks keep each byte's own */
    const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 2 * k), m2), 4);
    return _mm256_or_si256(lo, hi);
}

XA void kq_gemm_avx2_type(const int t, const uint8_t *w, size_t rb, int n_out, const kq_xs *xs, int B, float *y,
                          int64_t ldy, int acc)
{
    const int64_t ns = xs->nb / 8;
    const size_t sbb = krn_type_block_bytes(t);
    const __m256i ones = _mm256_set1_epi16(1), ord = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    for (int o0 = 0; o0 < n_out; o0 += KQ_R) {
        const int R = n_out - o0 < KQ_R ? n_out - o0 : KQ_R;
        for (int b0 = 0; b0 < B; b0 += KQ_C) {
            const int C = B - b0 < KQ_C ? B - b0 : KQ_C;
            __m256 main[KQ_R][KQ_C], mins[KQ_R][KQ_C];
            for (int r = 0; r < R; r++)
                for (int c = 0; c < C; c++)
                    main[r][c] = mins[r][c] = _mm256_setzero_ps();
            for (int64_t s = 0; s < ns; s++)
                for (int r = 0; r < R; r++) {
                    const uint8_t *sb = w + (size_t)(o0 + r) * rb + (size_t)s * sbb;
                    for (size_t pf = 0; pf < sbb; pf += 64) /* the next tile's row r, the same super-block (past */
                        __builtin_prefetch(sb + KQ_R * rb + pf, 0, 3); /* the last row: a prefetch, never a read) */
                    __m256i wq[8], scv[2];
                    for (int j = 0; j < 8; j++)
                        wq[j] = kq_wq(t, sb, j);
                    __m256 F, G = _mm256_setzero_ps();
                    if (t == KRN_Q6_K) {
                        F = _mm256_set1_ps(_cvtsh_ss(kq_ld16(sb + offsetof(blk_q6_K, d))));
                        const int8_t *sc = (const int8_t *)(sb + offsetof(blk_q6_K, scales));
                        for (int q = 0; q < 2; q++)
                            scv[q] = _mm256_permutevar8x32_epi32(
                                _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 8 * q))), ord);
                    } else
                        krn_q4k_scales_mins_avx2(sb + 4, _cvtsh_ss(kq_ld16(sb)), _cvtsh_ss(kq_ld16(sb + 2)), &F, &G);
                    for (int c = 0; c < C; c++) {
                        const int b = b0 + c;
                        const int8_t *xr = xs->xq + (size_t)b * xs->xrb + 256 * s;
                        __m256i v[8], x16[2];
                        for (int j = 0; j < 8; j++)
                            v[j] = _mm256_madd_epi16(
                                _mm256_maddubs_epi16(wq[j], _mm256_loadu_si256((const __m256i *)(xr + 32 * j))), ones);
                        if (t == KRN_Q6_K)
                            for (int q = 0; q < 2; q++)
                                x16[q] = _mm256_permutevar8x32_epi32(
                                    _mm256_loadu_si256((const __m256i *)(xs->s16 + ((size_t)b * ns + s) * 16 + 8 * q)),
                                    ord);
                        const __m256 I = _mm256_cvtepi32_ps(kq_reduce(t, v, scv, x16));
                        const float *dx = xs->dx + (size_t)b * xs->nb + 8 * s;
                        main[r][c] = _mm256_fmadd_ps(I, _mm256_mul_ps(F, _mm256_loadu_ps(dx)), main[r][c]);
                        if (t != KRN_Q6_K)
                            mins[r][c] = _mm256_fmadd_ps(G, _mm256_loadu_ps(xs->sx + (size_t)b * xs->nb + 8 * s),
                                                         mins[r][c]);
                    }
                }
            for (int r = 0; r < R; r++)
                for (int c = 0; c < C; c++) {
                    float mv[8], nv[8];
                    _mm256_storeu_ps(mv, main[r][c]);
                    _mm256_storeu_ps(nv, mins[r][c]);
                    const float v = kq_fold(t, mv, nv);
                    float *yo = y + (size_t)(b0 + c) * ldy + o0 + r;
                    *yo = acc ? *yo + v : v;
                }
        }
    }
}

static __attribute__((target("avx2,fma,f16c"))) void kq_gemm_avx2(int t, const uint8_t *w, size_t rb, int n_out,
                                                                   const kq_xs *xs, int B, float *y, int64_t ldy,
                                                                   int acc)
{
    if (t == KRN_Q4_K)
        kq_gemm_avx2_type(KRN_Q4_K, w, rb, n_out, xs, B, y, ldy, acc);
    else if (t == KRN_Q5_K)
        kq_gemm_avx2_type(KRN_Q5_K, w, rb, n_out, xs, B, y, ldy, acc);
    else
        kq_gemm_avx2_type(KRN_Q6_K, w, rb, n_out, xs, B, y, ldy, acc);
}
#endif

int krn_x8_kquant_gemm_path(int p, int t, const void *w, size_t row_bytes, int n_out, const void *xq, int B,
                            int64_t n, float *y, int64_t ldy, int acc)
{
    if (!krn_x8_kquant_type_ok(t) || n <= 0 || n % 256 || n > INT32_MAX || n_out <= 0 || B <= 0 ||
        row_bytes != krn_row_bytes(t, n))
        return -1;
    const int64_t nb = n / 32, ns = n / 256;
    const size_t xrb = krn_x8_row_bytes((int)n);
    float *dx = malloc((size_t)B * (2 * (size_t)nb * sizeof(float) + 16 * (size_t)ns * sizeof(int32_t)));
    if (!dx)
        return -1;
    float *sx = dx + (size_t)B * nb;
    int32_t *s16 = (int32_t *)(sx + (size_t)B * nb);
    for (int b = 0; b < B; b++) { /* every x row's block values, once per call */
        const uint8_t *row = (const uint8_t *)xq + (size_t)b * xrb;
        for (int64_t k = 0; k < nb; k++) {
            dx[(size_t)b * nb + k] = kq_ldf(row + n + 8 * k);
            sx[(size_t)b * nb + k] = kq_ldf(row + n + 8 * k + 4);
        }
        for (int64_t s = 0; s < 16 * ns; s++) {
            int32_t v = 0;
            for (int i = 0; i < 16; i++)
                v += ((const int8_t *)row)[16 * s + i];
            s16[(size_t)b * 16 * ns + s] = v;
        }
    }
    const kq_xs xs = {(const int8_t *)xq, xrb, dx, sx, s16, nb};
#if defined(__x86_64__)
    if (p != KRN_X8_GENERIC)
        kq_gemm_avx2(t, w, row_bytes, n_out, &xs, B, y, ldy, acc);
    else
#endif
        kq_gemm_generic(t, w, row_bytes, n_out, &xs, B, y, ldy, acc);
    free(dx);
    return 0;
}
