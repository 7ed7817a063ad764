/* The fast mode's matmul (MEMRA_CPU_X8): q4_0 / q4_1 / q8_0 weight rows against rows of x quantized to int8
 * blocks (kernels/krn.h "x quantized to int8"), GGUF runners' way, with a defined result so every path, every
 * layout and every tiling gives the same bits.
 *
 * The defined result of one weight row W (blocks j = 0 .. nb-1, scale dw_j, q4_1 min mw_j) against one x8 row
 * (quants q, block pairs (dx_j, sx_j = dx_j * sum q)):
 *  - per block the exact integer sum P_j = sum of w_i * q_i over its 32 elements (w: q4_0 nibble - 8, q4_1
 *    nibble, q8_0 the int8);
 *  - main = fma((float)P_j, dw_j * dx_j, main) over j = 0, 1, ... from 0 (the product dw_j * dx_j rounded, then
 *    one fused multiply-add: C's fmaf, the vector FMA instructions);
 *  - q4_1 only: mins = fma(mw_j, sx_j, mins) the same way, and the result is main + mins; else main;
 *  - acc = 1: y = y + result (the bits of a plain matmul then krn_cpu_add).
 * The integer sums are exact on every path (|P_j| <= 32 * 128 * 127; AVX2's int16 steps cannot wrap: 16 q4
 * products are within 16 * 15 * 127 = 30480, a q8_0 pair within 32512) and the float steps are the same IEEE
 * ops in the same order, so the generic, AVX2 and VNNI paths agree bit for bit, and a (row, x row) result does
 * not depend on the layout, the tile, B or the rows around it (tests/test_quant.c checks all of them).
 *
 * Tiles: 8 weight rows (one group of KRN_LAYOUT_ROWS8, kernels/krn.h) against up to 4 x rows. In that layout
 * 32 bytes hold 4 elements of each of the 8 rows, so one broadcast x dword times one weight vector gives the 8
 * rows' partial sums in their own lanes: per block and x row, 8 byte products, one widening, one convert and
 * one FMA serve 8 rows, where a row-major tile needs them per row. Weights in GGUF blocks (MEMRA_CPU_REPACK=0,
 * a shape the layout does not take) are packed into one group's buffer first, group by group, at the cost of
 * one pass over those bytes. Each weight group is read once per call; each x block once per group.
 * Shared mutable state: `x8_path_cached`, written at most once per value (relaxed atomic). */
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
#define X8_G 8 /* weight rows per group (KRN_LAYOUT_ROWS8) */
#define X8_C 4 /* x rows per tile */
#define X8_PF 1024 /* software prefetch distance in bytes: 6 to 7 blocks of a group ahead (docs/bench/cpu.md) */

static AI uint16_t x8_ld16(const void *p) { uint16_t v; memcpy(&v, p, sizeof v); return v; }
static AI float x8_ldf(const void *p) { float v; memcpy(&v, p, sizeof v); return v; }
static AI int32_t x8_ld32(const void *p) { int32_t v; memcpy(&v, p, sizeof v); return v; }

/* Bytes of one GGUF block; in a group's block (8 of them), the offset of the quant chunks (after d, q4_1 m). */
static AI size_t blk_bytes(int t) { return t == KRN_Q4_1 ? sizeof(blk_q4_1) : t == KRN_Q4_0 ? sizeof(blk_q4_0) : sizeof(blk_q8_0); }
static AI size_t grp_qoff(int t) { return t == KRN_Q4_1 ? 32 : 16; }

/* What one call shares with its tiles: the x rows and their per-block values, read once per call. */
typedef struct x8_xs {
    const uint8_t *xq; size_t xrb; /* the x8 rows */
    const float *dx, *sx;          /* dx_j, sx_j of x row b at b * nb + j */
    const int32_t *qsum8;          /* q4_0 only: 8 * sum q of block j of x row b (the offset), at b * nb + j */
} x8_xs;

/* ---- generic path: the defined result, one (row, x row) pair at a time, from a group's bytes ---- */

/* Weight w_i of row r, block j (element e) of group g. */
static AI int g_w(const int t, const uint8_t *gb, int r, int e)
{
    const uint8_t *q = gb + grp_qoff(t);
    if (t == KRN_Q8_0)
        return ((const int8_t *)q)[32 * (e / 4) + 4 * r + e % 4];
    const int b = e % 16; /* GGUF quant byte b: element b low, b + 16 high */
    const int v = e < 16 ? q[32 * (b / 4) + 4 * r + b % 4] & 0xF : q[32 * (b / 4) + 4 * r + b % 4] >> 4;
    return t == KRN_Q4_0 ? v - 8 : v;
}

static void tile_generic(const int t, const int C, const uint8_t *G, int64_t nb, const x8_xs *xs, int b0,
                         float *y, int64_t ldy, int nr, int acc)
{
    const size_t gbb = X8_G * blk_bytes(t);
    for (int c = 0; c < C; c++) {
        const int8_t *q = (const int8_t *)(xs->xq + (size_t)(b0 + c) * xs->xrb);
        const float *dx = xs->dx + (size_t)(b0 + c) * nb, *sx = xs->sx + (size_t)(b0 + c) * nb;
        for (int r = 0; r < nr; r++) {
            float main = 0.0f, mins = 0.0f;
            for (int64_t j = 0; j < nb; j++) {
                const uint8_t *gb = G + (size_t)j * gbb;
                int32_t p = 0;
                for (int e = 0; e < 32; e++)
                    p += g_w(t, gb, r, e) * q[32 * j + e];
                main = fmaf((float)p, krn_f16_to_f32_inl(x8_ld16(gb + 2 * r)) * dx[j], main);
                if (t == KRN_Q4_1)
                    mins = fmaf(krn_f16_to_f32_inl(x8_ld16(gb + 16 + 2 * r)), sx[j], mins);
            }
            const float v = t == KRN_Q4_1 ? main + mins : main;
            float *yo = y + (size_t)c * ldy + r;
            *yo = acc ? *yo + v : v;
        }
    }
}

/* ---- AVX2 (maddubs) and VNNI (dpbusd) paths: one body, two integer step primitives ----
 * q4: S accumulates nibbles (unsigned) times x quants; AVX2 in int16 lanes (16 products each, see above) widened
 * once per block, VNNI in int32 lanes. q8_0: the weight's magnitude times x carrying the weight's sign. */
#if defined(__x86_64__)
#define TGT_AVX2 "avx2,fma,f16c"
#define TGT_VNNI "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"
#define XA2 static AI __attribute__((target(TGT_AVX2)))
#define XAV static AI __attribute__((target(TGT_VNNI)))
XA2 __m256i q4_step_avx2(__m256i s, __m256i w, __m256i x) { return _mm256_add_epi16(s, _mm256_maddubs_epi16(w, x)); }
XA2 __m256i q4_end_avx2(__m256i s) { return _mm256_madd_epi16(s, _mm256_set1_epi16(1)); }
XA2 __m256i q8_step_avx2(__m256i s, __m256i u, __m256i x)
{
    return _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1)));
}
XAV __m256i q4_step_vnni(__m256i s, __m256i w, __m256i x) { return _mm256_dpbusd_epi32(s, w, x); }
XAV __m256i q4_end_vnni(__m256i s) { return s; }
XAV __m256i q8_step_vnni(__m256i s, __m256i u, __m256i x) { return _mm256_dpbusd_epi32(s, u, x); }

/* One group (8 rows, nr of them stored) against x rows b0 .. b0 + C - 1. t and C are constants at each call. */
#define TILE8_BODY(Q4_STEP, Q4_END, Q8_STEP)                                                                   \
    const size_t gbb = X8_G * blk_bytes(t), qo = grp_qoff(t);                                                  \
    const uint8_t *xr[X8_C];                                                                                   \
    const float *dx[X8_C], *sx[X8_C];                                                                          \
    const int32_t *qsum8[X8_C];                                                                                \
    __m256 am[X8_C];                                                                                           \
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {                                                      \
        xr[c] = xs->xq + (size_t)(b0 + c) * xs->xrb;                                                           \
        dx[c] = xs->dx + (size_t)(b0 + c) * nb;                                                                \
        sx[c] = xs->sx + (size_t)(b0 + c) * nb;                                                                \
        qsum8[c] = xs->qsum8 + (size_t)(b0 + c) * nb;                                                          \
        am[c] = _mm256_setzero_ps();                                                                           \
    }                                                                                                          \
    const __m256i m4 = _mm256_set1_epi8(0x0F);                                                                 \
    for (int64_t j = 0; j < nb; j++) {                                                                         \
        const uint8_t *gb = G + (size_t)j * gbb, *qs = gb + qo;                                                \
        for (size_t pf = 0; pf < gbb; pf += 64) /* X8_PF bytes ahead (past the group: the next group's) */     \
            __builtin_prefetch(gb + X8_PF + pf, 0, 3);                                                         \
        __m256i S[X8_C];                                                                                       \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) S[c] = _mm256_setzero_si256();                     \
        if (t == KRN_Q8_0) {                                                                                   \
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {                                              \
                const __m256i w = _mm256_loadu_si256((const __m256i *)(qs + 32 * k));                          \
                const __m256i u = _mm256_sign_epi8(w, w);                                                      \
                _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {                                          \
                    const __m256i xb = _mm256_set1_epi32(x8_ld32(xr[c] + 32 * j + 4 * k));                     \
                    S[c] = Q8_STEP(S[c], u, _mm256_sign_epi8(xb, w));                                          \
                }                                                                                              \
            }                                                                                                  \
        } else {                                                                                               \
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {                                              \
                const __m256i ch = _mm256_loadu_si256((const __m256i *)(qs + 32 * k));                         \
                const __m256i lo = _mm256_and_si256(ch, m4), hi = _mm256_and_si256(_mm256_srli_epi16(ch, 4), m4); \
                _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {                                          \
                    S[c] = Q4_STEP(S[c], lo, _mm256_set1_epi32(x8_ld32(xr[c] + 32 * j + 4 * k)));              \
                    S[c] = Q4_STEP(S[c], hi, _mm256_set1_epi32(x8_ld32(xr[c] + 32 * j + 16 + 4 * k)));         \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)gb));                              \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {                                                  \
            __m256i p = t == KRN_Q8_0 ? S[c] : Q4_END(S[c]);                                                   \
            if (t == KRN_Q4_0) /* nibble * q - 8 * sum q: the weights are nibble - 8 */                        \
                p = _mm256_sub_epi32(p, _mm256_set1_epi32(qsum8[c][j]));                                       \
            const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(dx[c][j]));                                     \
            am[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sc, am[c]);                                         \
        }                                                                                                      \
    }                                                                                                          \
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {                                                      \
        if (t == KRN_Q4_1) { /* the min term: its own chain over the blocks, then main + mins */              \
            __m256 mn = _mm256_setzero_ps();                                                                   \
            for (int64_t j = 0; j < nb; j++)                                                                   \
                mn = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(G + (size_t)j * gbb + 16))), \
                                     _mm256_set1_ps(sx[c][j]), mn);                                            \
            am[c] = _mm256_add_ps(am[c], mn);                                                                  \
        }                                                                                                      \
        float v[X8_G], *yo = y + (size_t)c * ldy;                                                              \
        _mm256_storeu_ps(v, am[c]);                                                                            \
        for (int r = 0; r < nr; r++)                                                                           \
            yo[r] = acc ? yo[r] + v[r] : v[r];                                                                 \
    }

static AI __attribute__((target(TGT_AVX2))) void tile_avx2(const int t, const int C, const uint8_t *G, int64_t nb,
                                                          const x8_xs *xs, int b0, float *y, int64_t ldy, int nr,
                                                          int acc)
{
    TILE8_BODY(q4_step_avx2, q4_end_avx2, q8_step_avx2)
}
static AI __attribute__((target(TGT_VNNI))) void tile_vnni(const int t, const int C, const uint8_t *G, int64_t nb,
                                                          const x8_xs *xs, int b0, float *y, int64_t ldy, int nr,
                                                          int acc)
{
    TILE8_BODY(q4_step_vnni, q4_end_vnni, q8_step_vnni)
}
#endif

/* ---- the loop over groups, one per path; t and C are constants in each tile call ---- */
typedef struct x8_job {
    int layout; const uint8_t *w; size_t rb; int n_out; int B; int64_t n; float *y; int64_t ldy; int acc;
    uint8_t *pack; /* one group's bytes (8 * rb) for BLOCKS weights */
    x8_xs xs;
} x8_job;

#define LOOPS(TILE, T)                                                                                         \
    do {                                                                                                       \
        const int64_t nb = j->n / 32;                                                                          \
        for (int o = 0; o < j->n_out; o += X8_G) {                                                             \
            const int nr = j->n_out - o < X8_G ? j->n_out - o : X8_G;                                          \
            const uint8_t *G = j->w + (size_t)o * j->rb;                                                       \
            if (j->layout != KRN_LAYOUT_ROWS8 || nr < X8_G) { /* GGUF rows: the tail of rows of 8 too */      \
                krn_rows8_pack_group(T, j->n, G, nr, j->rb, j->pack);                                          \
                G = j->pack;                                                                                   \
            }                                                                                                  \
            float *yo = j->y + o;                                                                              \
            int b = 0;                                                                                         \
            for (; b + X8_C <= j->B; b += X8_C)                                                                \
                TILE(T, X8_C, G, nb, &j->xs, b, yo + (size_t)b * j->ldy, j->ldy, nr, j->acc);                  \
            if (j->B - b == 3)                                                                                 \
                TILE(T, 3, G, nb, &j->xs, b, yo + (size_t)b * j->ldy, j->ldy, nr, j->acc);                     \
            else if (j->B - b == 2)                                                                            \
                TILE(T, 2, G, nb, &j->xs, b, yo + (size_t)b * j->ldy, j->ldy, nr, j->acc);                     \
            else if (j->B - b == 1)                                                                            \
                TILE(T, 1, G, nb, &j->xs, b, yo + (size_t)b * j->ldy, j->ldy, nr, j->acc);                     \
        }                                                                                                      \
    } while (0)

static void gemm_generic(int t, const x8_job *j)
{
    switch (t) {
    case KRN_Q4_0: LOOPS(tile_generic, KRN_Q4_0); break;
    case KRN_Q4_1: LOOPS(tile_generic, KRN_Q4_1); break;
    default: LOOPS(tile_generic, KRN_Q8_0); break;
    }
}
#if defined(__x86_64__)
static __attribute__((target(TGT_AVX2))) void gemm_avx2(int t, const x8_job *j)
{
    switch (t) {
    case KRN_Q4_0: LOOPS(tile_avx2, KRN_Q4_0); break;
    case KRN_Q4_1: LOOPS(tile_avx2, KRN_Q4_1); break;
    default: LOOPS(tile_avx2, KRN_Q8_0); break;
    }
}
static __attribute__((target(TGT_VNNI))) void gemm_vnni(int t, const x8_job *j)
{
    switch (t) {
    case KRN_Q4_0: LOOPS(tile_vnni, KRN_Q4_0); break;
    case KRN_Q4_1: LOOPS(tile_vnni, KRN_Q4_1); break;
    default: LOOPS(tile_vnni, KRN_Q8_0); break;
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

int krn_x8_type_ok(int t) { return t == KRN_Q4_0 || t == KRN_Q4_1 || t == KRN_Q8_0 || krn_x8_kquant_type_ok(t); }

int krn_x8_gemm_path(int p, int t, int layout, const void *w, size_t row_bytes, int n_out, const void *xq, int B,
                     int64_t n, float *y, int64_t ldy, int acc)
{
    if (krn_x8_kquant_type_ok(t)) /* K-quants: GGUF blocks only (kernels/x8_kquant.c) */
        return layout == KRN_LAYOUT_BLOCKS ? krn_x8_kquant_gemm_path(p, t, w, row_bytes, n_out, xq, B, n, y, ldy, acc)
                                           : -1;
    if (!krn_x8_type_ok(t) || n <= 0 || n % 32 || n > INT32_MAX || n_out <= 0 || B <= 0 ||
        row_bytes != krn_row_bytes(t, n) || (layout != KRN_LAYOUT_BLOCKS && layout != KRN_LAYOUT_ROWS8) ||
        (layout == KRN_LAYOUT_ROWS8 && !krn_rows8_supported(t, n_out, n)))
        return -1;
    const int64_t nb = n / 32;
    const size_t per_b = (size_t)nb * (2 * sizeof(float) + sizeof(int32_t));
    const size_t pack = layout == KRN_LAYOUT_ROWS8 && n_out % X8_G == 0 ? 0 : X8_G * row_bytes; /* GGUF rows to pack */
    uint8_t *scratch = malloc((size_t)B * per_b + pack);
    if (!scratch)
        return -1;
    const size_t xrb = krn_x8_row_bytes((int)n);
    float *dx = (float *)scratch, *sx = dx + (size_t)B * nb;
    int32_t *qsum8 = (int32_t *)(sx + (size_t)B * nb);
    for (int b = 0; b < B; b++) /* every x row's block values, once per call */
        for (int64_t k = 0; k < nb; k++) {
            const uint8_t *row = (const uint8_t *)xq + (size_t)b * xrb, *ds = row + (size_t)n + 8 * (size_t)k;
            dx[(size_t)b * nb + k] = x8_ldf(ds);
            sx[(size_t)b * nb + k] = x8_ldf(ds + 4);
            if (t == KRN_Q4_0) {
                int32_t s = 0;
                for (int i = 0; i < 32; i++)
                    s += ((const int8_t *)row)[32 * k + i];
                qsum8[(size_t)b * nb + k] = 8 * s;
            }
        }
    const x8_job j = {layout, w, row_bytes, n_out, B, n, y, ldy, acc, scratch + (size_t)B * per_b,
                      {xq, xrb, dx, sx, qsum8}};
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

int krn_x8_gemm(int t, int layout, const void *w, size_t row_bytes, int n_out, const void *xq, int B, int64_t n,
                float *y, int64_t ldy, int acc)
{
    return krn_x8_gemm_path(krn_x8_path(), t, layout, w, row_bytes, n_out, xq, B, n, y, ldy, acc);
}

float krn_dot_row_x8_path(int p, int t, const void *row, const void *xq, int64_t n)
{
    float y;
    if (!krn_x8_type_ok(t) || n <= 0 || n % 32 ||
        krn_x8_gemm_path(p, t, KRN_LAYOUT_BLOCKS, row, krn_row_bytes(t, n), 1, xq, 1, n, &y, 1, 0) != 0)
        return __builtin_nanf("");
    return y;
}

float krn_dot_row_x8(int t, const void *row, const void *xq, int64_t n)
{
    return krn_dot_row_x8_path(krn_x8_path(), t, row, xq, n);
}
