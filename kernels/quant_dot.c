/* The CPU inner loops: dequantize a row and dot a row with an f32 vector, for every krn_type.
 *
 * The defined result (every path computes exactly this, so all paths give the same bits):
 *  - element values are GGML's dequantize_row_* formulas, each an IEEE float expression evaluated as
 *    written (q4_0: d*(q-8); q4_1: d*q + m; q8_0: d*q; q4_K: (d*sc)*q - dmin*m; q6_K: (d*sc)*(q-32));
 *  - the dot keeps 16 lane sums: element i is added to lane i % 16 in increasing i, as
 *    lane = lane + (w_i * x_i) (a rounded product, then a rounded sum: the build has no FP contraction);
 *  - the lanes are then folded in a fixed tree: for s = 8, 4, 2, 1: lane[l] += lane[l + s] (l < s);
 *    the result is lane[0].
 * The block code (quant_dot_body.inc) is built twice over two sets of primitives (nibbles / int8 / f16 to
 * float): portable C for the baseline ISA, and AVX2+F16C intrinsics (no FMA); one path is picked per
 * process. Elementwise IEEE ops do not depend on the ISA, so
 * the paths agree bit for bit (tests/test_quant.c checks it).
 *
 * Shared mutable state: `path_cached` (the picked path), written at most once per value by any thread via
 * a relaxed atomic store of the same value; no other state. */
#include "kernels/quant_impl.h"
#include "kernels/quant_batch.h"

#include <stdatomic.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <string.h>

/* Every function passing vectors by value is static and always inlined: no ABI is involved. */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float v8f __attribute__((vector_size(32)));

#define AI inline __attribute__((always_inline))

static AI v8f ldf(const void *p) { v8f v; memcpy(&v, p, sizeof v); return v; }
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
static AI int64_t chunk_elems(int t) { return is_float_type(t) ? 16 : (t == KRN_Q4_K || t == KRN_Q6_K) ? QK_K : 32; }
static AI size_t chunk_bytes(int t)
{
    switch (t) {
    case KRN_F32: return 64;
    case KRN_F16: case KRN_BF16: return 32;
    case KRN_Q4_0: return sizeof(blk_q4_0);
    case KRN_Q4_1: return sizeof(blk_q4_1);
    case KRN_Q8_0: return sizeof(blk_q8_0);
    case KRN_Q4_K: return sizeof(blk_q4_K);
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

#define XA static AI __attribute__((target("avx2,f16c")))

XA v8f x_u8x8(__m128i b) { return (v8f)_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)); }

XA void x_nib16(const uint8_t *p, v8f w[4])
{
    const __m128i b = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    w[0] = x_u8x8(lo);
    w[1] = x_u8x8(_mm_srli_si128(lo, 8));
    w[2] = x_u8x8(hi);
    w[3] = x_u8x8(_mm_srli_si128(hi, 8));
}

XA v8f x_i8x8(const int8_t *p)
{
    return (v8f)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

XA void x_q6pair(__m128i q, v8f *w)
{
    const __m256i c32 = _mm256_set1_epi32(32);
    w[0] = (v8f)_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(q), c32));
    w[1] = (v8f)_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(q, 8)), c32));
}

XA void x_q6x16(const uint8_t *a, const uint8_t *b, const uint8_t *h, v8f w[8])
{
    const __m128i A = _mm_loadu_si128((const __m128i *)a), B = _mm_loadu_si128((const __m128i *)b);
    const __m128i H = _mm_loadu_si128((const __m128i *)h);
    const __m128i m4 = _mm_set1_epi8(0x0F), m2 = _mm_set1_epi8(3);
    /* 16-bit shifts move bits across the bytes of a pair; the masks keep only each byte's own bits */
    const __m128i h0 = _mm_slli_epi16(_mm_and_si128(H, m2), 4);
    const __m128i h1 = _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(H, 2), m2), 4);
    const __m128i h2 = _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(H, 4), m2), 4);
    const __m128i h3 = _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(H, 6), m2), 4);
    x_q6pair(_mm_or_si128(_mm_and_si128(A, m4), h0), w + 0);
    x_q6pair(_mm_or_si128(_mm_and_si128(B, m4), h1), w + 2);
    x_q6pair(_mm_or_si128(_mm_and_si128(_mm_srli_epi16(A, 4), m4), h2), w + 4);
    x_q6pair(_mm_or_si128(_mm_and_si128(_mm_srli_epi16(B, 4), m4), h3), w + 6);
}

XA v8f x_h8(const void *p) { return (v8f)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

XA v8f x_bf8(const void *p)
{
    return (v8f)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16);
}

XA float x_h1(uint16_t h) { return _cvtsh_ss(h); }

#define F(name) name##_avx2
#define P(name) x_##name
#define ATTR static __attribute__((target("avx2,f16c")))
#include "kernels/quant_dot_body.inc"
#undef F
#undef P
#undef ATTR
#endif

/* ---- the fast mode's dot: a legacy weight row against x quantized to int8 blocks (kernels/krn.h "x
 * quantized to int8": 32 int8 q, then per block the f32 pair (d, s = d * sum q)) ----
 * Defined result: per 32-element block j, eight exact integer partial sums p_l = sum of qw_i * q_i over
 * i = 4l .. 4l+3 (qw: q4_0 nibble - 8, q4_1 nibble, q8_0 the int8; the byte order of the AVX2 maddubs/madd
 * pair), then lane l of accumulator a[j % 2] += (d_w * d) * (float)p_l; for q4_1 also mj[j % 4] += m_w * s.
 * At the end a = a[0] + a[1], folded for s = 4, 2, 1 (a[l] += a[l + s]), and the result is a[0] +
 * ((mj0 + mj2) + (mj1 + mj3)). Every op is a rounded IEEE op in that order and the integer sums are exact,
 * so the paths give the same bits. */

/* The eight partial sums of one block for the portable path. */
static AI v8f g_psum(int t, const uint8_t *qw, const int8_t *q)
{
    float f[8];
    for (int l = 0; l < 8; l++) {
        int32_t sum = 0;
        for (int i = 4 * l; i < 4 * l + 4; i++) {
            const int w = t == KRN_Q8_0 ? ((const int8_t *)qw)[i]
                          : (i < 16 ? qw[i] & 0xF : qw[i - 16] >> 4) - (t == KRN_Q4_0 ? 8 : 0);
            sum += w * q[i];
        }
        f[l] = (float)sum;
    }
    return ldf(f);
}

#if defined(__x86_64__)
/* The same sums with AVX2: nibbles (or int8) widened to 32 bytes in element order, maddubs (|products| <= 2 *
 * 128 * 127 fit int16), madd into 8 int32 (exactly the p_l), converted exactly (|p_l| < 2^24). */
static AI __attribute__((target("avx2"))) v8f x_psum(int t, const uint8_t *qw, const int8_t *q)
{
    const __m256i xv = _mm256_loadu_si256((const __m256i *)q);
    __m256i w;
    if (t == KRN_Q8_0) {
        w = _mm256_loadu_si256((const __m256i *)qw);
    } else {
        const __m128i b = _mm_loadu_si128((const __m128i *)qw), m = _mm_set1_epi8(0x0F);
        w = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
        if (t == KRN_Q4_0)
            w = _mm256_sub_epi8(w, _mm256_set1_epi8(8));
    }
    __m256i p16;
    if (t == KRN_Q4_1)
        p16 = _mm256_maddubs_epi16(w, xv); /* w in 0..15: unsigned as maddubs wants */
    else /* signed w: |w| times x with w's sign */
        p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w));
    return (v8f)_mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}
#endif

/* One type's loop; `psum` is the path's partial sums and `h1` its f16 conversion (both exact; the float
 * steps are shared, hence the same bits). */
static AI float x8_dot_type(const int t, v8f (*psum)(int, const uint8_t *, const int8_t *),
                            float (*h1)(uint16_t), const uint8_t *row, const uint8_t *xq, int64_t n)
{
    const size_t cb = chunk_bytes(t);
    const int64_t nb = n / 32;
    const int8_t *q = (const int8_t *)xq;
    v8f a0 = {0}, a1 = {0}; /* a[0], a[1]: named, so they stay in registers */
    float m0 = 0.0f, m1 = 0.0f, m2 = 0.0f, m3 = 0.0f;
#define X8_BLOCK(j, A, M)                                                                                     \
    do {                                                                                                      \
        const uint8_t *blk = row + (size_t)(j) * cb;                                                          \
        float ds[2];                                                                                          \
        memcpy(ds, xq + n + 8 * (j), sizeof ds);                                                              \
        A += psum(t, blk + (t == KRN_Q4_1 ? 4 : 2), q + 32 * (j)) * (h1(ld16(blk)) * ds[0]);                 \
        if (t == KRN_Q4_1)                                                                                    \
            M += h1(ld16(blk + 2)) * ds[1];                                                                   \
    } while (0)
    int64_t j = 0;
    for (; j + 4 <= nb; j += 4) {
        X8_BLOCK(j, a0, m0);
        X8_BLOCK(j + 1, a1, m1);
        X8_BLOCK(j + 2, a0, m2);
        X8_BLOCK(j + 3, a1, m3);
    }
    if (j < nb)
        X8_BLOCK(j, a0, m0);
    if (j + 1 < nb)
        X8_BLOCK(j + 1, a1, m1);
    if (j + 2 < nb)
        X8_BLOCK(j + 2, a0, m2);
#undef X8_BLOCK
    const v8f acc[2] = {a0, a1};
    const float mj[4] = {m0, m1, m2, m3};
    float lane[8];
    const v8f a = acc[0] + acc[1];
    memcpy(lane, &a, sizeof lane);
    for (int s = 4; s >= 1; s >>= 1)
        for (int l = 0; l < s; l++)
            lane[l] += lane[l + s];
    return lane[0] + ((mj[0] + mj[2]) + (mj[1] + mj[3]));
}

static float x8_dot_generic(int t, const void *row, const void *xq, int64_t n)
{
    switch (t) {
    case KRN_Q4_0: return x8_dot_type(KRN_Q4_0, g_psum, g_h1, row, xq, n);
    case KRN_Q4_1: return x8_dot_type(KRN_Q4_1, g_psum, g_h1, row, xq, n);
    default: return x8_dot_type(KRN_Q8_0, g_psum, g_h1, row, xq, n);
    }
}

#if defined(__x86_64__)
static __attribute__((target("avx2,f16c"))) float x8_dot_avx2(int t, const void *row, const void *xq, int64_t n)
{
    switch (t) {
    case KRN_Q4_0: return x8_dot_type(KRN_Q4_0, x_psum, x_h1, row, xq, n);
    case KRN_Q4_1: return x8_dot_type(KRN_Q4_1, x_psum, x_h1, row, xq, n);
    default: return x8_dot_type(KRN_Q8_0, x_psum, x_h1, row, xq, n);
    }
}
#endif

float krn_dot_row_x8_path(int p, int t, const void *row, const void *xq, int64_t n)
{
    if ((t != KRN_Q4_0 && t != KRN_Q4_1 && t != KRN_Q8_0) || n < 0 || n % 32)
        return __builtin_nanf("");
#if defined(__x86_64__)
    if (p == KRN_PATH_AVX2)
        return x8_dot_avx2(t, row, xq, n);
#endif
    return x8_dot_generic(t, row, xq, n);
}

float krn_dot_row_x8(int t, const void *row, const void *xq, int64_t n)
{
    return krn_dot_row_x8_path(krn_quant_path(), t, row, xq, n);
}

int krn_quant_path_available(int p)
{
    if (p == KRN_PATH_GENERIC)
        return 1;
#if defined(__x86_64__)
    if (p == KRN_PATH_AVX2) {
        __builtin_cpu_init();
        unsigned a, b, c, d; /* F16C from CPUID leaf 1: clang before 16 has no "f16c" for __builtin_cpu_supports */
        return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) ? 1 : 0;
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
