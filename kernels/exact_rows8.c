/* The exact mode's matmul over rows of 8 (KRN_LAYOUT_ROWS8, kernels/krn.h): for q4_0, q4_1 and q8_0 weights,
 * every (weight row, x row) result is the bits of krn_dot_row (the defined dot of kernels/quant_dot.c), with the
 * 8 rows of a group in the 8 float lanes of a vector.
 *
 * Why: the defined dot keeps 8 lane sums per row and block (lane l: elements l, l + 8, l + 16, l + 24), added in
 * pairs (l, l + 4) before the block's scale. Row by row, each 8 elements cost a widening, a convert and an FMA, and
 * every row ends in a horizontal fold. Here one vector holds lane l of 8 rows: the pairing and the fold are vertical
 * adds, one block scale vector serves 8 rows, and a q4 quant is converted where it lies.
 *
 * q4 quants in place. In a chunk (dword r = row r's 4 quant bytes) nibble j (bits 4j .. 4j + 3) of every dword,
 * masked, converts exactly to n * 2^(4j) (below 2^28); the top nibble is shifted down first. Against the x
 * element scaled by 2^-4j the FMA's exact product is n * x, the defined one, so the lane sums and every rounding
 * are those of the definition: one AND and one convert per 8 quants. The scaling is exact while x * 2^-24 stays
 * normal: every x of the call 0 or at least 2^-102 in magnitude, and finite; otherwise krn_rows8_exact returns 0
 * and the caller's unpacking path gives the bits. q4_0's n - 8 is one exact subtraction of 8 * 2^(4j). q8_0 bytes
 * are sign-extended in place (shifts) and converted; its x needs no scaling.
 *
 * Subnormal floats would save the convert (a masked low nibble is the float n * 2^-149), but Zen 3's FMA slows
 * on some subnormal operands (docs/bench/cpu.md, "The exact mode over rows of 8"); the convert costs less.
 *
 * Where the CPU has AVX-512F, two adjacent groups share one 16-float vector (group g in the low half, g + 1 in the
 * high half): each AND, convert and FMA serves 16 rows, the x element is a broadcast operand of the FMA, and 32
 * registers hold the sums of 4 x rows. Each half computes exactly what the 8-row vector does, so the bits do not
 * change; an odd last group takes the AVX2 code.
 *
 * Shared mutable state: `wide_cached` (whether AVX-512F is there), written at most once per value by any thread
 * via a relaxed atomic store of the same value. */
#include "kernels/krn.h"
#include "kernels/quant_batch.h"
#include "kernels/quant_impl.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC diagnostic ignored "-Wpsabi"

#define XA static inline __attribute__((always_inline, target("avx2,f16c,fma")))

/* Element e (0..31) of a q4 block: its nibble's bit position in its chunk dword (byte e % 4, the high nibble for
 * e >= 16), as extracted by q4_nib (the top nibble is shifted down to 0). */
static int q4_pos(int e)
{
    const int j = 2 * (e % 4) + (e >= 16);
    return j == 7 ? 0 : 4 * j;
}

/* Nibble j (0..7) of every dword of chunk c, in place, as floats n * 2^(4j) (exact: below 2^28); the top nibble as
 * n. j is a constant at each call. */
XA __m256 q4_nib(__m256i c, const int j)
{
    if (j == 7)
        return _mm256_cvtepi32_ps(_mm256_srli_epi32(c, 28));
    return _mm256_cvtepi32_ps(_mm256_and_si256(c, _mm256_set1_epi32(0xF << (4 * j))));
}

/* Byte i (0..3) of every dword of chunk c, sign-extended, as floats. */
XA __m256 q8_byte(__m256i c, const int i)
{
    const __m256i v = i == 3 ? c : _mm256_slli_epi32(c, 24 - 8 * i);
    return _mm256_cvtepi32_ps(_mm256_srai_epi32(v, 24));
}

/* Quant e's vector of the 8 rows for one block (chunks at q); t, e constant at each call. */
XA __m256 quant8(const int t, const uint8_t *q, const int e)
{
    if (t == KRN_Q8_0) /* element 4k + i: chunk k, byte i */
        return q8_byte(_mm256_loadu_si256((const __m256i *)(q + 32 * (e / 4))), e % 4);
    const int b = e % 16, j = 2 * (b % 4) + (e >= 16); /* GGUF quant byte b: chunk b / 4, byte b % 4 */
    const __m256 n = q4_nib(_mm256_loadu_si256((const __m256i *)(q + 32 * (b / 4))), j);
    if (t != KRN_Q4_0)
        return n;
    return _mm256_sub_ps(n, _mm256_set1_ps((float)(8 << q4_pos(e)))); /* (n - 8) * 2^pos, exact */
}

/* Lane pairs p0 .. p0 + NP - 1 of one group against C x rows: a[c][dp] = sum over blocks of fma(d_j, s_l + s_{l+4},
 * .) in block order, l = p0 + dp, s_l the defined lane sum. xs: the (scaled) x rows, n apart; ds: the group's block
 * scales, 8 per block. t, C, NP, p0 constant at each call (C * NP accumulators and 2 * C sums stay in registers). */
XA void group_lanes(const int t, const int C, const int NP, const int p0, const uint8_t *G, size_t gbb, size_t qo,
                    int64_t nb, const float *ds, const float *xs, int64_t n, __m256 a[4][4])
{
    for (int c = 0; c < C; c++)
        for (int dp = 0; dp < NP; dp++)
            a[c][dp] = _mm256_setzero_ps();
    for (int64_t j = 0; j < nb; j++) {
        const uint8_t *q = G + (size_t)j * gbb + qo;
        for (size_t pf = 0; pf < gbb; pf += 64) /* every pass fetches the next group's block j (past the last group: */
            __builtin_prefetch(G + (size_t)(nb + j) * gbb + pf, 0, 3); /* a prefetch, never a read) */
        const __m256 d = _mm256_loadu_ps(ds + 8 * j);
        for (int dp = 0; dp < NP; dp++) {
            const int l = p0 + dp;
            __m256 v[8]; /* quants l, l + 8, l + 16, l + 24, then l + 4, l + 12, l + 20, l + 28 */
            for (int k = 0; k < 8; k++)
                v[k] = quant8(t, q, l + 4 * (k / 4) + 8 * (k % 4));
            for (int c = 0; c < C; c++) {
                const float *xb = xs + c * n + 32 * j + l;
                __m256 s[2];
                for (int h = 0; h < 2; h++) {
                    s[h] = _mm256_mul_ps(v[4 * h], _mm256_broadcast_ss(xb + 4 * h));
                    for (int k = 1; k < 4; k++)
                        s[h] = _mm256_fmadd_ps(v[4 * h + k], _mm256_broadcast_ss(xb + 4 * h + 8 * k), s[h]);
                }
                a[c][dp] = _mm256_fmadd_ps(d, _mm256_add_ps(s[0], s[1]), a[c][dp]);
            }
        }
    }
}

/* q4_1's min sums of one group against x rows [0, C): m[c] = sum over blocks of fma(m_j, X_cj, .), in block order
 * (xsum: X_cj at c * nb + j, the block's x sum); C chains side by side. */
XA void group_mins(const int C, const float *ms, const float *xsum, int64_t nb, __m256 m[4])
{
    for (int c = 0; c < C; c++)
        m[c] = _mm256_setzero_ps();
    for (int64_t j = 0; j < nb; j++) {
        const __m256 mv = _mm256_loadu_ps(ms + 8 * j);
        for (int c = 0; c < C; c++)
            m[c] = _mm256_fmadd_ps(mv, _mm256_set1_ps(xsum[c * nb + j]), m[c]);
    }
}

/* The defined fold (for s = 2, 1: acc[l] += acc[l + s]) of 4 lane vectors. */
XA __m256 fold4(const __m256 v[4]) { return _mm256_add_ps(_mm256_add_ps(v[0], v[2]), _mm256_add_ps(v[1], v[3])); }

/* Groups [0, ng) of type t against x rows [0, B): the whole product, with the per-call scratch prepared. */
XA void rows8_exact_type(const int t, const uint8_t *w, size_t row_bytes, int ng, int64_t n, const float *xs,
                         const float *xsum, int B, float *ds, float *ms, float *y, int64_t ldy, int acc)
{
    const int64_t nb = n / 32;
    const size_t gbb = 8 * krn_type_block_bytes(t), qo = t == KRN_Q4_1 ? 32 : 16;
    for (int g = 0; g < ng; g++) {
        const uint8_t *G = w + (size_t)g * 8 * row_bytes;
        for (int64_t j = 0; j < nb; j++) { /* the 8 rows' d, q4_1's m */
            const uint8_t *gb = G + (size_t)j * gbb;
            _mm256_storeu_ps(ds + 8 * j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)gb)));
            if (t == KRN_Q4_1)
                _mm256_storeu_ps(ms + 8 * j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gb + 16))));
        }
        for (int b0 = 0; b0 < B; b0 += 4) {
            __m256 lane[4][4], a[4][4];
            const float *xb = xs + (size_t)b0 * n;
            const int C = B - b0 < 4 ? B - b0 : 4;
            /* passes of NP lane pairs against C x rows (2 * C * NP sums in flight): 2 x 2 pairs for C <= 2, else
             * 4 x 1 pair */
#define PASS(C, NP, P0)                                                                                           \
    do {                                                                                                          \
        group_lanes(t, C, NP, P0, G, gbb, qo, nb, ds, xb, n, a);                                                  \
        for (int c = 0; c < C; c++)                                                                               \
            for (int p = 0; p < NP; p++)                                                                          \
                lane[c][P0 + p] = a[c][p];                                                                        \
    } while (0)
            switch (C) {
            case 1: PASS(1, 2, 0); PASS(1, 2, 2); break;
            case 2: PASS(2, 2, 0); PASS(2, 2, 2); break;
            case 3: PASS(3, 1, 0); PASS(3, 1, 1); PASS(3, 1, 2); PASS(3, 1, 3); break;
            default: PASS(4, 1, 0); PASS(4, 1, 1); PASS(4, 1, 2); PASS(4, 1, 3); break;
            }
#undef PASS
            __m256 m[4];
            if (t == KRN_Q4_1)
                group_mins(C, ms, xsum + (size_t)b0 * nb, nb, m);
            for (int c = 0; c < C; c++) {
                __m256 r = fold4(lane[c]);
                if (t == KRN_Q4_1)
                    r = _mm256_add_ps(r, m[c]);
                float *yo = y + (size_t)(b0 + c) * ldy + (size_t)g * 8;
                if (acc)
                    r = _mm256_add_ps(_mm256_loadu_ps(yo), r);
                _mm256_storeu_ps(yo, r);
            }
        }
    }
}

__attribute__((target("avx2,f16c,fma"))) static void rows8_exact_avx2(int t, const uint8_t *w, size_t row_bytes,
                                                                       int ng, int64_t n, const float *xs,
                                                                       const float *xsum, int B, float *ds,
                                                                       float *ms, float *y, int64_t ldy, int acc)
{
    switch (t) {
    case KRN_Q4_0: rows8_exact_type(KRN_Q4_0, w, row_bytes, ng, n, xs, xsum, B, ds, ms, y, ldy, acc); break;
    case KRN_Q4_1: rows8_exact_type(KRN_Q4_1, w, row_bytes, ng, n, xs, xsum, B, ds, ms, y, ldy, acc); break;
    default: rows8_exact_type(KRN_Q8_0, w, row_bytes, ng, n, xs, xsum, B, ds, ms, y, ldy, acc); break;
    }
}

/* ---- pairs of groups in AVX-512 vectors: the code above, 16 rows per vector ---- */
#define XZ static inline __attribute__((always_inline, target("avx512f,avx2,f16c,fma")))

/* Chunk k of the two groups' blocks at q0 and q1 (group g's low, g + 1's high). */
XZ __m512i chunk16(const uint8_t *q0, const uint8_t *q1, int k)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(q0 + 32 * k))),
                              _mm256_loadu_si256((const __m256i *)(q1 + 32 * k)), 1);
}

/* quant8 for 16 rows: quant e of the two groups' blocks (chunks at q0, q1). */
XZ __m512 quant16(const int t, const uint8_t *q0, const uint8_t *q1, const int e)
{
    if (t == KRN_Q8_0) {
        const int i = e % 4;
        const __m512i c = chunk16(q0, q1, e / 4), v = i == 3 ? c : _mm512_slli_epi32(c, 24 - 8 * i);
        return _mm512_cvtepi32_ps(_mm512_srai_epi32(v, 24));
    }
    const int b = e % 16, j = 2 * (b % 4) + (e >= 16);
    const __m512i c = chunk16(q0, q1, b / 4);
    const __m512 n = j == 7 ? _mm512_cvtepi32_ps(_mm512_srli_epi32(c, 28))
                            : _mm512_cvtepi32_ps(_mm512_and_si512(c, _mm512_set1_epi32(0xF << (4 * j))));
    if (t != KRN_Q4_0)
        return n;
    return _mm512_sub_ps(n, _mm512_set1_ps((float)(8 << q4_pos(e))));
}

/* group_lanes for the pair at G (group g; g + 1 at G + nb * gbb): ds holds 16 scales per block. */
XZ void pair_lanes(const int t, const int C, const int NP, const int p0, const uint8_t *G, size_t gbb, size_t qo,
                   int64_t nb, const float *ds, const float *xs, int64_t n, __m512 a[4][4])
{
    for (int c = 0; c < C; c++)
        for (int dp = 0; dp < NP; dp++)
            a[c][dp] = _mm512_setzero_ps();
    const size_t gb = (size_t)nb * gbb; /* one group's bytes */
    for (int64_t j = 0; j < nb; j++) {
        const uint8_t *q0 = G + (size_t)j * gbb + qo, *q1 = q0 + gb;
        for (size_t pf = 0; pf < gbb; pf += 64) { /* the next pair's block j (past the last pair: never a read) */
            __builtin_prefetch(G + 2 * gb + (size_t)j * gbb + pf, 0, 3);
            __builtin_prefetch(G + 3 * gb + (size_t)j * gbb + pf, 0, 3);
        }
        const __m512 d = _mm512_loadu_ps(ds + 16 * j);
        for (int dp = 0; dp < NP; dp++) {
            const int l = p0 + dp;
            __m512 v[8]; /* as in group_lanes */
            for (int k = 0; k < 8; k++)
                v[k] = quant16(t, q0, q1, l + 4 * (k / 4) + 8 * (k % 4));
            for (int c = 0; c < C; c++) {
                const float *xb = xs + c * n + 32 * j + l;
                __m512 s[2];
                for (int h = 0; h < 2; h++) {
                    s[h] = _mm512_mul_ps(v[4 * h], _mm512_set1_ps(xb[4 * h]));
                    for (int k = 1; k < 4; k++)
                        s[h] = _mm512_fmadd_ps(v[4 * h + k], _mm512_set1_ps(xb[4 * h + 8 * k]), s[h]);
                }
                a[c][dp] = _mm512_fmadd_ps(d, _mm512_add_ps(s[0], s[1]), a[c][dp]);
            }
        }
    }
}

/* group_mins for a pair (ms: 16 mins per block). */
XZ void pair_mins(const int C, const float *ms, const float *xsum, int64_t nb, __m512 m[4])
{
    for (int c = 0; c < C; c++)
        m[c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < nb; j++) {
        const __m512 mv = _mm512_loadu_ps(ms + 16 * j);
        for (int c = 0; c < C; c++)
            m[c] = _mm512_fmadd_ps(mv, _mm512_set1_ps(xsum[c * nb + j]), m[c]);
    }
}

XZ __m512 fold4z(const __m512 v[4]) { return _mm512_add_ps(_mm512_add_ps(v[0], v[2]), _mm512_add_ps(v[1], v[3])); }

/* rows8_exact_type over the pairs of groups [0, ng / 2 * 2); ds and ms hold 16 floats per block. */
XZ void pairs_exact_type(const int t, const uint8_t *w, size_t row_bytes, int ng, int64_t n, const float *xs,
                         const float *xsum, int B, float *ds, float *ms, float *y, int64_t ldy, int acc)
{
    const int64_t nb = n / 32;
    const size_t gbb = 8 * krn_type_block_bytes(t), qo = t == KRN_Q4_1 ? 32 : 16;
    for (int g = 0; g + 1 < ng; g += 2) {
        const uint8_t *G = w + (size_t)g * 8 * row_bytes;
        for (int h = 0; h < 2; h++)
            for (int64_t j = 0; j < nb; j++) { /* the 16 rows' d, q4_1's m */
                const uint8_t *gb = G + (size_t)(h * nb + j) * gbb;
                _mm256_storeu_ps(ds + 16 * j + 8 * h, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)gb)));
                if (t == KRN_Q4_1)
                    _mm256_storeu_ps(ms + 16 * j + 8 * h,
                                     _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gb + 16))));
            }
        for (int b0 = 0; b0 < B; b0 += 4) {
            __m512 lane[4][4], a[4][4];
            const float *xb = xs + (size_t)b0 * n;
            const int C = B - b0 < 4 ? B - b0 : 4;
            /* passes of 2 lane pairs against C x rows (4 * C sums in flight, 2 * C accumulators): one pass of all 4
             * pairs is slower, its 32 quant vectors and 8 sums spill (docs/bench/cpu.md, "The exact mode in AVX-512
             * vectors") */
#define PASS(C, P0)                                                                                               \
    do {                                                                                                          \
        pair_lanes(t, C, 2, P0, G, gbb, qo, nb, ds, xb, n, a);                                                    \
        for (int c = 0; c < C; c++)                                                                               \
            for (int p = 0; p < 2; p++)                                                                           \
                lane[c][P0 + p] = a[c][p];                                                                        \
    } while (0)
            switch (C) {
            case 1: PASS(1, 0); PASS(1, 2); break;
            case 2: PASS(2, 0); PASS(2, 2); break;
            case 3: PASS(3, 0); PASS(3, 2); break;
            default: PASS(4, 0); PASS(4, 2); break;
            }
#undef PASS
            __m512 m[4];
            if (t == KRN_Q4_1)
                pair_mins(C, ms, xsum + (size_t)b0 * nb, nb, m);
            for (int c = 0; c < C; c++) {
                __m512 r = fold4z(lane[c]);
                if (t == KRN_Q4_1)
                    r = _mm512_add_ps(r, m[c]);
                float *yo = y + (size_t)(b0 + c) * ldy + (size_t)g * 8;
                if (acc)
                    r = _mm512_add_ps(_mm512_loadu_ps(yo), r);
                _mm512_storeu_ps(yo, r);
            }
        }
    }
}

__attribute__((target("avx512f,avx2,f16c,fma"))) static void pairs_exact_avx512(int t, const uint8_t *w,
                                                                                 size_t row_bytes, int ng, int64_t n,
                                                                                 const float *xs, const float *xsum,
                                                                                 int B, float *ds, float *ms, float *y,
                                                                                 int64_t ldy, int acc)
{
    switch (t) {
    case KRN_Q4_0: pairs_exact_type(KRN_Q4_0, w, row_bytes, ng, n, xs, xsum, B, ds, ms, y, ldy, acc); break;
    case KRN_Q4_1: pairs_exact_type(KRN_Q4_1, w, row_bytes, ng, n, xs, xsum, B, ds, ms, y, ldy, acc); break;
    default: pairs_exact_type(KRN_Q8_0, w, row_bytes, ng, n, xs, xsum, B, ds, ms, y, ldy, acc); break;
    }
}
#endif

static atomic_int wide_cached = -1;

int krn_rows8_exact_wide_available(void)
{
    int v = atomic_load_explicit(&wide_cached, memory_order_relaxed);
    if (v < 0) {
#if defined(__x86_64__)
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx512f") ? 1 : 0;
#else
        v = 0;
#endif
        atomic_store_explicit(&wide_cached, v, memory_order_relaxed); /* same value from every thread */
    }
    return v;
}

#if defined(__x86_64__)
/* The kernels' x scratch in one pass over the B rows: xs (each x times its q4 element's 2^-pos, exact; q8_0's as
 * it is), q4_1's block sums X (lane l: (x_l + x_{l+8}) + (x_{l+16} + x_{l+24}) is one vector add tree of the block's
 * 4 vectors, then the defined fold). Returns 1 when every x is finite and, unless `any_size`, 0 or at least 2^-102
 * in magnitude: the range in which the scaled q4 x are exact (see the header); else 0, the scratch unused. */
__attribute__((target("avx2,fma"))) static int prep_x(int t, const float *x, int64_t ldx, int B, int64_t n,
                                                       int any_size, float *xs, float *xsum)
{
    __m256 sc[4];
    for (int k = 0; k < 4; k++) {
        float v[8];
        for (int i = 0; i < 8; i++)
            v[i] = t == KRN_Q8_0 ? 1.0f : ldexpf(1.0f, -q4_pos(8 * k + i));
        sc[k] = _mm256_loadu_ps(v);
    }
    const __m256 lo = _mm256_set1_ps(any_size ? 0.0f : 0x1p-102f), hi = _mm256_set1_ps(0x1.fffffep127f),
                 zero = _mm256_setzero_ps(), sign = _mm256_set1_ps(-0.0f);
    __m256 bad = zero; /* lanes that saw an x out of range: NaN fails every ordered compare */
    const int64_t nb = n / 32;
    for (int b = 0; b < B; b++)
        for (int64_t j = 0; j < nb; j++) {
            const float *xb = x + (size_t)b * ldx + 32 * j;
            __m256 v[4];
            for (int k = 0; k < 4; k++) {
                v[k] = _mm256_loadu_ps(xb + 8 * k);
                const __m256 a = _mm256_andnot_ps(sign, v[k]);
                const __m256 ok = _mm256_or_ps(_mm256_cmp_ps(a, zero, _CMP_EQ_OQ),
                                               _mm256_and_ps(_mm256_cmp_ps(a, lo, _CMP_GE_OQ),
                                                             _mm256_cmp_ps(a, hi, _CMP_LE_OQ)));
                bad = _mm256_or_ps(bad, _mm256_andnot_ps(ok, _mm256_castsi256_ps(_mm256_set1_epi32(-1))));
                _mm256_storeu_ps(xs + (size_t)b * n + 32 * j + 8 * k, _mm256_mul_ps(v[k], sc[k]));
            }
            if (xsum) {
                float l8[8];
                _mm256_storeu_ps(l8, _mm256_add_ps(_mm256_add_ps(v[0], v[1]), _mm256_add_ps(v[2], v[3])));
                for (int s = 4; s >= 1; s >>= 1)
                    for (int l = 0; l < s; l++)
                        l8[l] += l8[l + s];
                xsum[(size_t)b * nb + j] = l8[0]; /* X, the defined block sum */
            }
        }
    return _mm256_movemask_ps(bad) == 0;
}
#endif

int krn_rows8_exact(int t, const void *w, size_t row_bytes, int n_groups, int64_t n, const float *x, int64_t ldx,
                    int B, float *y, int64_t ldy, int acc)
{
    return krn_rows8_exact_path(krn_rows8_exact_wide_available(), t, w, row_bytes, n_groups, n, x, ldx, B, y, ldy,
                                acc);
}

int krn_rows8_exact_path(int wide, int t, const void *w, size_t row_bytes, int n_groups, int64_t n, const float *x,
                         int64_t ldx, int B, float *y, int64_t ldy, int acc)
{
#if defined(__x86_64__)
    if ((t != KRN_Q4_0 && t != KRN_Q4_1 && t != KRN_Q8_0) || n <= 0 || n % 32 || n_groups <= 0 || B <= 0 ||
        krn_quant_path() != KRN_PATH_AVX2)
        return 0;
    const int64_t nb = n / 32;
    /* scratch: the x rows (scaled for q4), q4_1's block x sums, one pair of groups' scales and mins */
    const size_t nx = (size_t)B * n, nsum = t == KRN_Q4_1 ? (size_t)B * nb : 0;
    float *xs = malloc((nx + nsum + 32 * (size_t)nb) * sizeof(float));
    if (!xs)
        return 0;
    float *xsum = xs + nx, *ds = xsum + nsum, *ms = ds + 16 * nb;
    if (!prep_x(t, x, ldx, B, n, t == KRN_Q8_0, xs, nsum ? xsum : NULL)) {
        free(xs);
        return 0;
    }
    int g0 = 0; /* groups [0, g0) done in pairs */
    if (wide && krn_rows8_exact_wide_available() && n_groups >= 2) {
        pairs_exact_avx512(t, w, row_bytes, n_groups, n, xs, xsum, B, ds, ms, y, ldy, acc);
        g0 = n_groups / 2 * 2;
    }
    if (g0 < n_groups)
        rows8_exact_avx2(t, (const uint8_t *)w + (size_t)g0 * 8 * row_bytes, row_bytes, n_groups - g0, n, xs, xsum, B,
                         ds, ms, y + (size_t)g0 * 8, ldy, acc);
    free(xs);
    return 1;
#else
    (void)wide, (void)t, (void)w, (void)row_bytes, (void)n_groups, (void)n, (void)x, (void)ldx, (void)B, (void)y,
        (void)ldy, (void)acc;
    return 0;
#endif
}
