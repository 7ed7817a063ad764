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

/* 8 f16 at p as floats. */
XA __m256 f16x8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* ---- 8 rows per vector (AVX2) ---- */
#define U 1
#define V __m256
#define ATTR XA
#define F(name) rows8_##name
#define VZERO() _mm256_setzero_ps()
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
#define VSET1(x) _mm256_set1_ps(x)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VADD(a, b) _mm256_add_ps(a, b)
#define QUANT(t, q, gb, e) quant8(t, q, e)
#define NP_MANY 1
#define TARGET "avx2,f16c,fma"
#include "kernels/exact_rows8_body.inc"

/* ---- 16 rows per vector (AVX-512): pairs of groups ---- */
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

#define U 2
#define V __m512
#define ATTR XZ
#define F(name) pairs_##name
#define VZERO() _mm512_setzero_ps()
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, v) _mm512_storeu_ps(p, v)
#define VSET1(x) _mm512_set1_ps(x)
#define VMUL(a, b) _mm512_mul_ps(a, b)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VADD(a, b) _mm512_add_ps(a, b)
#define QUANT(t, q, gb, e) quant16(t, q, (q) + (gb), e)
#define NP_MANY 2
#define TARGET "avx512f,avx2,f16c,fma"
#include "kernels/exact_rows8_body.inc"
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
    __m256 good = _mm256_castsi256_ps(_mm256_set1_epi32(-1)); /* lanes whose x were all in range (NaN fails every
                                                                * ordered compare) */
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
                good = _mm256_and_ps(good, ok);
                _mm256_storeu_ps(xs + (size_t)b * n + 32 * j + 8 * k, _mm256_mul_ps(v[k], sc[k]));
            }
            if (xsum) {
                float l8[8];
                _mm256_storeu_ps(l8, _mm256_add_ps(_mm256_add_ps(v[0], v[1]), _mm256_add_ps(v[2], v[3])));
                xsum[(size_t)b * nb + j] = krn_q4_1_xsum_fold(l8);
            }
        }
    return _mm256_movemask_ps(good) == 0xFF;
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
        pairs_matmul(t, w, row_bytes, n_groups, n, xs, xsum, B, ds, ms, y, ldy, acc);
        g0 = n_groups / 2 * 2;
    }
    if (g0 < n_groups)
        rows8_matmul(t, (const uint8_t *)w + (size_t)g0 * 8 * row_bytes, row_bytes, n_groups - g0, n, xs, xsum, B,
                         ds, ms, y + (size_t)g0 * 8, ldy, acc);
    free(xs);
    return 1;
#else
    (void)wide, (void)t, (void)w, (void)row_bytes, (void)n_groups, (void)n, (void)x, (void)ldx, (void)B, (void)y,
        (void)ldy, (void)acc;
    return 0;
#endif
}
