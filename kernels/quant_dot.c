/* The CPU inner loops: dequantize a row and dot a row with an f32 vector, for every krn_type.
 *
 * The defined result (every path computes exactly this, so all paths give the same bits):
 *  - element values are GGML's dequantize_row_* formulas, each an IEEE float expression evaluated as
 *    written (q4_0: d*(q-8); q4_1: d*q + m; q8_0: d*q; q4_K and q5_K: (d*sc)*q - dmin*m, q of 4 and 5 bits;
 *    q6_K: (d*sc)*(q-32));
 *  - q4_0, q4_1, q8_0 dots: per 32-element block the integer quants (q - 8, q, q) as floats against x in 8 lanes,
 *    lane l: s_l = fma(q_{l+24}, x_{l+24}, fma(q_{l+16}, x_{l+16}, fma(q_{l+8}, x_{l+8}, q_l * x_l))) (elements in
 *    GGUF order), paired p_l = s_l + s_{l+4} (l < 4), then acc_l = fma(d, p_l, acc_l) over the blocks in order,
 *    folded for s = 2, 1: acc[l] += acc[l + s]; the result is acc_0. q4_1 adds one more sum, M = fma(m, X, M) over
 *    the blocks in order, X the block's x sum: X_l = (x_l + x_{l+8}) + (x_{l+16} + x_{l+24}) folded for s = 4, 2, 1
 *    to X_0; the result is acc_0 + M. The quants stay integers, so dequantizing costs no multiply per element; one
 *    scaling FMA serves 8 products (the pairing's add runs beside the FMAs), and X depends on x alone;
 *  - the other types' dots keep 16 lane sums: element i is added to lane i % 16 in increasing i, as
 *    lane = lane + (w_i * x_i) (a rounded product, then a rounded sum: the build has no FP contraction);
 *    the lanes are then folded in a fixed tree: for s = 8, 4, 2, 1: lane[l] += lane[l + s] (l < s);
 *    the result is lane[0].
 * The block code (quant_dot_body.inc) is built twice over two sets of primitives (nibbles / int8 / f16 to
 * float, fused multiply-add): portable C for the baseline ISA (fmaf), and AVX2+F16C+FMA intrinsics; one path is
 * picked per process. Elementwise IEEE ops do not depend on the ISA, so
 * the paths agree bit for bit (tests/test_quant.c checks it).
 *
 * Shared mutable state: `path_cached` (the picked path), written at most once per value by any thread via
 * a relaxed atomic store of the same value; no other state. */
#include "kernels/quant_impl.h"
#include "kernels/quant_batch.h"

#include <math.h>
#include <stdatomic.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <string.h>

/* Every function passing vectors by value is static and always inlined: no ABI is involved. */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float v8f __attribute__((vector_size(32)));

#define AI inline __attribute__((always_inline))

/* 8 floats from p, unaligned. The block code calls it as P(ldf): each path has its own, compiled for that path's
 * ISA, since a 32-byte vector returned across ISAs changes the ABI (clang refuses it). */
static AI v8f ldf(const void *p) { v8f v; memcpy(&v, p, sizeof v); return v; }
#define g_ldf ldf
static AI uint16_t ld16(const void *p) { uint16_t v; memcpy(&v, p, sizeof v); return v; }

/* Scalar value of element i of a float-type row (the tail past the last 16-element chunk). */
static AI float float_elem(const int t, const uint8_t *r, int64_t i)
{
    if (t == KRN_F32) {
        float v;
        memcpy(&v, r + 4 * i, 4);
        return v;
    }
    const uint16_t h = ld16(r + 2 * i);
    if (t == KRN_F16)
        return krn_f16_to_f32_inl(h);
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static AI int is_float_type(int t) { return t == KRN_F32 || t == KRN_F16 || t == KRN_BF16; }

/* Elements and bytes of one block (16 elements for float types); t is a constant at every call site. */
static AI int64_t chunk_elems(int t)
{
    return is_float_type(t) ? 16 : (t == KRN_Q4_K || t == KRN_Q5_K || t == KRN_Q6_K) ? QK_K : 32;
}
static AI size_t chunk_bytes(int t)
{
    switch (t) {
    case KRN_F32: return 64;
    case KRN_F16: case KRN_BF16: return 32;
    case KRN_Q4_0: return sizeof(blk_q4_0);
    case KRN_Q4_1: return sizeof(blk_q4_1);
    case KRN_Q8_0: return sizeof(blk_q8_0);
    case KRN_Q4_K: return sizeof(blk_q4_K);
    case KRN_Q5_K: return sizeof(blk_q5_K);
    case KRN_Q6_K: return sizeof(blk_q6_K);
    default: return 0;
    }
}

/* ---- portable primitives ---- */

/* 16 bytes -> w[0] = low nibbles of bytes 0..7, w[1] = of 8..15, w[2], w[3] = high nibbles of the same. */
static AI void g_nib16(const uint8_t *p, v8f w[4])
{
    float f[32];
    for (int k = 0; k < 16; k++) {
        f[k] = (float)(p[k] & 0xF);
        f[16 + k] = (float)(p[k] >> 4);
    }
    memcpy(w, f, sizeof f);
}

/* q5_K: as g_nib16 over 16 bytes q of nibbles, plus 16 where qh[k] has bit u (low nibbles) or bit u << 1 (high
 * nibbles): w[0..1] = the 5-bit values of the low nibbles, w[2..3] = of the high nibbles. */
static AI void g_q5x16(const uint8_t *q, const uint8_t *qh, unsigned u, v8f w[4])
{
    float f[32];
    for (int k = 0; k < 16; k++) {
        f[k] = (float)((q[k] & 0xF) | (qh[k] & u ? 16 : 0));
        f[16 + k] = (float)((q[k] >> 4) | (qh[k] & (u << 1) ? 16 : 0));
    }
    memcpy(w, f, sizeof f);
}

/* q4_K / q5_K: the 8 sub-block scales and mins of a super-block's 12 packed bytes q, times d and dmin:
 * d1[s] = d * sc_s, m1[s] = dmin * m_s. */
static AI void g_kscales(const uint8_t *q, float d, float dmin, float d1[8], float m1[8])
{
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        krn_q4k_scale_min(j, q, &sc, &m);
        d1[j] = d * (float)sc;
        m1[j] = dmin * (float)m;
    }
}

/* q6_K: its 16 signed 8-bit scales sc times d: ds[s] = d * sc_s. */
static AI void g_k6scales(const int8_t *sc, float d, float ds[16])
{
    for (int s = 0; s < 16; s++)
        ds[s] = d * (float)sc[s];
}

static AI v8f g_i8x8(const int8_t *p)
{
    float f[8];
    for (int k = 0; k < 8; k++)
        f[k] = (float)p[k];
    return ldf(f);
}

/* q6_K: 16 bytes of each of ql[l], ql[l + 32], qh[l] -> w[0..1] = q1 - 32, w[2..3] = q2 - 32, w[4..5] = q3
 * - 32, w[6..7] = q4 - 32 (the 6-bit values of elements l, l + 32, l + 64, l + 96). */
static AI void g_q6x16(const uint8_t *a, const uint8_t *b, const uint8_t *h, v8f w[8])
{
    float f[64];
    for (int k = 0; k < 16; k++) {
        f[k] = (float)((a[k] & 0xF) | ((h[k] & 3) << 4)) - 32.0f;
        f[16 + k] = (float)((b[k] & 0xF) | (((h[k] >> 2) & 3) << 4)) - 32.0f;
        f[32 + k] = (float)((a[k] >> 4) | (((h[k] >> 4) & 3) << 4)) - 32.0f;
        f[48 + k] = (float)((b[k] >> 4) | (((h[k] >> 6) & 3) << 4)) - 32.0f;
    }
    memcpy(w, f, sizeof f);
}

static AI v8f g_h8(const void *p)
{
    float f[8];
    for (int k = 0; k < 8; k++)
        f[k] = krn_f16_to_f32_inl(ld16((const uint8_t *)p + 2 * k));
    return ldf(f);
}

static AI v8f g_bf8(const void *p)
{
    float f[8];
    for (int k = 0; k < 8; k++)
        f[k] = float_elem(KRN_BF16, p, k);
    return ldf(f);
}

static AI float g_h1(uint16_t h) { return krn_f16_to_f32_inl(h); }

static AI v8f g_fma8(v8f a, v8f b, v8f c)
{
    for (int k = 0; k < 8; k++)
        c[k] = fmaf(a[k], b[k], c[k]);
    return c;
}

/* v with its two halves swapped: lane l holds lane (l + 4) % 8. */
static AI v8f g_swap4(v8f v)
{
    v8f r;
    for (int k = 0; k < 8; k++)
        r[k] = v[(k + 4) % 8];
    return r;
}

#define F(name) name##_generic
#define P(name) g_##name
#define ATTR static
#include "kernels/quant_dot_body.inc"
#undef F
#undef P
#undef ATTR

/* ---- AVX2 + F16C primitives (same values as the portable ones: integer ops and exact conversions) ---- */
#if defined(__x86_64__)
#include <immintrin.h>

#define XA static AI __attribute__((target("avx2,f16c,fma")))

XA v8f x_ldf(const void *p) { return (v8f)_mm256_loadu_ps((const float *)p); }

/* Bytes 8k .. 8k + 7 of p (k = 0, 1) widened to dwords straight from memory (one shuffle); a dword's low nibble
 * is then a mask away, its high nibble a shift. */
XA __m256i x_z8(const uint8_t *p, int k) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8 * k))); }

XA void x_nib16(const uint8_t *p, v8f w[4])
{
    const __m256i z0 = x_z8(p, 0), z1 = x_z8(p, 1), m = _mm256_set1_epi32(0x0F);
    w[0] = (v8f)_mm256_cvtepi32_ps(_mm256_and_si256(z0, m));
    w[1] = (v8f)_mm256_cvtepi32_ps(_mm256_and_si256(z1, m));
    w[2] = (v8f)_mm256_cvtepi32_ps(_mm256_srli_epi32(z0, 4));
    w[3] = (v8f)_mm256_cvtepi32_ps(_mm256_srli_epi32(z1, 4));
}

XA void x_kscales(const uint8_t *q, float d, float dmin, float d1[8], float m1[8])
{
    __m256 ds, ms;
    krn_q4k_scales_mins_avx2(q, d, dmin, &ds, &ms);
    _mm256_storeu_ps(d1, ds);
    _mm256_storeu_ps(m1, ms);
}

XA void x_k6scales(const int8_t *sc, float d, float ds[16])
{
    const __m128i b = _mm_loadu_si128((const __m128i *)sc);
    const __m256 dv = _mm256_set1_ps(d);
    _mm256_storeu_ps(ds, _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b))));
    _mm256_storeu_ps(ds + 8, _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)))));
}

XA void x_q5x16(const uint8_t *q, const uint8_t *qh, unsigned u, v8f w[4])
{
    const __m256i m = _mm256_set1_epi32(0x0F), c16 = _mm256_set1_epi32(16), vu = _mm256_set1_epi32((int)u);
    const __m256i u2 = _mm256_add_epi32(vu, vu); /* the high nibbles' bit, u << 1 */
    for (int k = 0; k < 2; k++) {
        const __m256i z = x_z8(q, k), h = x_z8(qh, k);
        /* 16 in each dword whose qh bit is set: (h & u) == u, an all-ones dword, masked to 16 */
        const __m256i h1 = _mm256_and_si256(_mm256_cmpeq_epi32(_mm256_and_si256(h, vu), vu), c16);
        const __m256i h2 = _mm256_and_si256(_mm256_cmpeq_epi32(_mm256_and_si256(h, u2), u2), c16);
        w[k] = (v8f)_mm256_cvtepi32_ps(_mm256_or_si256(_mm256_and_si256(z, m), h1));
        w[2 + k] = (v8f)_mm256_cvtepi32_ps(_mm256_or_si256(_mm256_srli_epi32(z, 4), h2));
    }
}

XA v8f x_i8x8(const int8_t *p)
{
    return (v8f)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* q6_K: dwords of the 4-bit halves (a: ql[l], b: ql[l + 32]) and the 2-bit pairs (h) of 8 elements, widened
 * from memory; the four 6-bit values - 32 per element come out as 8-float vectors. */
XA void x_q6x16(const uint8_t *a, const uint8_t *b, const uint8_t *h, v8f w[8])
{
    const __m256i m4 = _mm256_set1_epi32(0x0F), m30 = _mm256_set1_epi32(0x30), c32 = _mm256_set1_epi32(32);
    for (int k = 0; k < 2; k++) {
        const __m256i A = x_z8(a, k), B = x_z8(b, k), H = x_z8(h, k);
        const __m256i q1 = _mm256_or_si256(_mm256_and_si256(A, m4), _mm256_and_si256(_mm256_slli_epi32(H, 4), m30));
        const __m256i q2 = _mm256_or_si256(_mm256_and_si256(B, m4), _mm256_and_si256(_mm256_slli_epi32(H, 2), m30));
        const __m256i q3 = _mm256_or_si256(_mm256_srli_epi32(A, 4), _mm256_and_si256(H, m30));
        const __m256i q4 = _mm256_or_si256(_mm256_srli_epi32(B, 4), _mm256_and_si256(_mm256_srli_epi32(H, 2), m30));
        w[0 + k] = (v8f)_mm256_cvtepi32_ps(_mm256_sub_epi32(q1, c32));
        w[2 + k] = (v8f)_mm256_cvtepi32_ps(_mm256_sub_epi32(q2, c32));
        w[4 + k] = (v8f)_mm256_cvtepi32_ps(_mm256_sub_epi32(q3, c32));
        w[6 + k] = (v8f)_mm256_cvtepi32_ps(_mm256_sub_epi32(q4, c32));
    }
}

XA v8f x_h8(const void *p) { return (v8f)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

XA v8f x_bf8(const void *p)
{
    return (v8f)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16);
}

XA float x_h1(uint16_t h) { return _cvtsh_ss(h); }

XA v8f x_fma8(v8f a, v8f b, v8f c) { return (v8f)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c); }

XA v8f x_swap4(v8f v) { return (v8f)_mm256_permute2f128_ps((__m256)v, (__m256)v, 1); }

#define F(name) name##_avx2
#define P(name) x_##name
#define ATTR static __attribute__((target("avx2,f16c,fma")))
#include "kernels/quant_dot_body.inc"
#undef F
#undef P
#undef ATTR
#endif

int krn_quant_path_available(int p)
{
    if (p == KRN_PATH_GENERIC)
        return 1;
#if defined(__x86_64__)
    if (p == KRN_PATH_AVX2) {
        __builtin_cpu_init();
        unsigned a, b, c, d; /* F16C from CPUID leaf 1: clang before 16 has no "f16c" for __builtin_cpu_supports */
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __get_cpuid(1, &a, &b, &c, &d) &&
                       (c & bit_F16C)
                   ? 1
                   : 0;
    }
#endif
    return 0;
}

static atomic_int path_cached = -1;

int krn_quant_path(void)
{
    int p = atomic_load_explicit(&path_cached, memory_order_relaxed);
    if (p < 0) {
        p = krn_quant_path_available(KRN_PATH_AVX2) ? KRN_PATH_AVX2 : KRN_PATH_GENERIC;
        atomic_store_explicit(&path_cached, p, memory_order_relaxed); /* same value from every thread */
    }
    return p;
}

static int valid_n(int t, int64_t n)
{
    const int be = krn_type_block_elems(t);
    return be > 0 && n >= 0 && n % be == 0;
}

void krn_dot_row_batch_path(int p, int t, const void *row, const float *x, int64_t ldx, int B, float *out,
                            int64_t n)
{
    if (B <= 0)
        return;
    if (!valid_n(t, n)) {
        for (int k = 0; k < B; k++)
            out[k] = __builtin_nanf("");
        return;
    }
#if defined(__x86_64__)
    if (p == KRN_PATH_AVX2) {
        dot_batch_avx2(t, row, x, ldx, B, out, n);
        return;
    }
#endif
    dot_batch_generic(t, row, x, ldx, B, out, n);
}

float krn_dot_row_path(int p, int t, const void *row, const float *x, int64_t n)
{
    float out;
    krn_dot_row_batch_path(p, t, row, x, 0, 1, &out, n);
    return out;
}

void krn_dequant_row_path(int p, int t, const void *src, float *dst, int64_t n)
{
    if (!valid_n(t, n))
        return;
#if defined(__x86_64__)
    if (p == KRN_PATH_AVX2) {
        deq_avx2(t, src, dst, n);
        return;
    }
#endif
    deq_generic(t, src, dst, n);
}

void krn_dot_row_batch(int t, const void *row, const float *x, int64_t ldx, int B, float *out, int64_t n)
{
    krn_dot_row_batch_path(krn_quant_path(), t, row, x, ldx, B, out, n);
}

float krn_dot_row(int t, const void *row, const float *x, int64_t n)
{
    return krn_dot_row_path(krn_quant_path(), t, row, x, n);
}

void krn_dequant_row(int t, const void *src, float *dst, int64_t n)
{
    krn_dequant_row_path(krn_quant_path(), t, src, dst, n);
}
