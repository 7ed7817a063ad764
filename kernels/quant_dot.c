/* The CPU inner loops: dequantize a row and dot a row with an f32 vector, for every krn_type.
 *
 * The defined result (every path computes exactly this, so all paths give the same bits):
 *  - element values are GGML's dequantize_row_* formulas, each an IEEE float expression evaluated as
 *    written (q4_0: d*(q-8); q4_1: d*q + m; q8_0: d*q; q4_K: (d*sc)*q - dmin*m; q6_K: (d*sc)*(q-32));
 *  - the dot keeps 16 lane sums: element i is added to lane i % 16 in increasing i, as
 *    lane = lane + (w_i * x_i) (a rounded product, then a rounded sum: the build has no FP contraction);
 *  - the lanes are then folded in a fixed tree: for s = 8, 4, 2, 1: lane[l] += lane[l + s] (l < s);
 *    the result is lane[0].
 * Written with GCC vector extensions (8 floats, two accumulators); the same source is built twice, for the baseline ISA and
 * for AVX2+F16C (no FMA), and one path is picked per process. Elementwise IEEE ops do not depend on the ISA, so
 * the paths agree bit for bit (tests/test_quant.c checks it).
 *
 * Shared mutable state: `path_cached` (the picked path), written at most once per value by any thread via
 * a relaxed atomic store of the same value; no other state. */
#include "kernels/quant_impl.h"

#include <stdatomic.h>
#include <string.h>

/* Every function passing vectors by value is static and always inlined: no ABI is involved. */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));
typedef uint8_t v8b __attribute__((vector_size(8)));
typedef int8_t v8c __attribute__((vector_size(8)));

#define AI static inline __attribute__((always_inline))

AI v8f ldf(const void *p) { v8f v; memcpy(&v, p, sizeof v); return v; }
AI v8b ldb(const void *p) { v8b v; memcpy(&v, p, sizeof v); return v; }
AI v8c ldc(const void *p) { v8c v; memcpy(&v, p, sizeof v); return v; }
AI v8h ldh(const void *p) { v8h v; memcpy(&v, p, sizeof v); return v; }
AI uint16_t ld16(const void *p) { uint16_t v; memcpy(&v, p, sizeof v); return v; }

/* Exact f16 -> f32 of 8 values at p (the vector form of krn_f16_to_f32). */
AI v8f h2f_v(const void *p)
{
    const v8u h = __builtin_convertvector(ldh(p), v8u);
    v8u o = (h & 0x7fffu) << 13;
    const v8u e = o & (0x7c00u << 13);
    o = o + ((127u - 15u) << 23);
    const v8u is_inf = (v8u)(e == (0x7c00u << 13));
    o = o + (is_inf & ((128u - 16u) << 23));
    const v8u is_sub = (v8u)(e == 0);
    const v8f magic = (v8f)((v8u){0} + (113u << 23));
    const v8u sub = (v8u)((v8f)(o + (1u << 23)) - magic);
    o = (is_sub & sub) | (~is_sub & o);
    o = o | ((h & 0x8000u) << 16);
    return (v8f)o;
}

AI v8f bf2f_v(const void *p) { return (v8f)(__builtin_convertvector(ldh(p), v8u) << 16); }

/* Scalar f16 -> f32: F16C on the AVX2 path, bit arithmetic elsewhere (both exact, so the same value). */
#if defined(__x86_64__)
AI float h2f(uint16_t h, const int isa)
{
    if (isa == KRN_PATH_AVX2) { /* inlined into an f16c-targeted function: one vcvtph2ps */
        _Float16 f;
        memcpy(&f, &h, 2);
        return (float)f;
    }
    return krn_f16_to_f32_inl(h);
}
#else
AI float h2f(uint16_t h, const int isa) { return krn_f16_to_f32_inl(h); }
#endif

AI v8f u8f(v8b q) { return __builtin_convertvector(__builtin_convertvector(q, v8i), v8f); } /* via int32: exact, one cvtdq2ps */
AI v8f u8f_off(v8b q, int off) { return __builtin_convertvector(__builtin_convertvector(q, v8i) - off, v8f); }

/* ---- one block -> its values as 8-float chunks w[0..elems/8) ---- */

AI void deq_q4_0(const uint8_t *p, v8f *w, const int isa)
{
    const float d = h2f(ld16(p), isa);
    const v8b q0 = ldb(p + 2), q1 = ldb(p + 10);
    w[0] = u8f_off(q0 & 0xF, 8) * d;
    w[1] = u8f_off(q1 & 0xF, 8) * d;
    w[2] = u8f_off(q0 >> 4, 8) * d;
    w[3] = u8f_off(q1 >> 4, 8) * d;
}

AI void deq_q4_1(const uint8_t *p, v8f *w, const int isa)
{
    const float d = h2f(ld16(p), isa), m = h2f(ld16(p + 2), isa);
    const v8b q0 = ldb(p + 4), q1 = ldb(p + 12);
    w[0] = u8f(q0 & 0xF) * d + m;
    w[1] = u8f(q1 & 0xF) * d + m;
    w[2] = u8f(q0 >> 4) * d + m;
    w[3] = u8f(q1 >> 4) * d + m;
}

AI void deq_q8_0(const uint8_t *p, v8f *w, const int isa)
{
    const float d = h2f(ld16(p), isa);
    for (int c = 0; c < 4; c++)
        w[c] = __builtin_convertvector(__builtin_convertvector(ldc(p + 2 + 8 * c), v8i), v8f) * d;
}

AI void deq_q4_K(const uint8_t *p, v8f *w, const int isa)
{
    const uint8_t *scales = p + 4, *qs = p + 4 + K_SCALE_SIZE;
    const float d = h2f(ld16(p), isa), dmin = h2f(ld16(p + 2), isa);
    for (int j = 0; j < 4; j++, qs += 32, w += 8) {
        uint8_t sc, m;
        krn_q4k_scale_min(2 * j, scales, &sc, &m);
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        krn_q4k_scale_min(2 * j + 1, scales, &sc, &m);
        const float d2 = d * (float)sc, m2 = dmin * (float)m;
        for (int c = 0; c < 4; c++) {
            const v8b q = ldb(qs + 8 * c);
            w[c] = u8f(q & 0xF) * d1 - m1;
            w[4 + c] = u8f(q >> 4) * d2 - m2;
        }
    }
}

AI void deq_q6_K(const uint8_t *p, v8f *w, const int isa)
{
    const uint8_t *ql = p, *qh = p + QK_K / 2;
    const int8_t *sc = (const int8_t *)(p + QK_K / 2 + QK_K / 4);
    const float d = h2f(ld16(p + QK_K / 2 + QK_K / 4 + QK_K / 16), isa);
    for (int half = 0; half < 2; half++, ql += 64, qh += 32, sc += 8, w += 16) {
        for (int c = 0; c < 4; c++) { /* elements 8c..8c+7 of each 32-run; scale index c / 2 */
            const int is = c / 2;
            const v8b a = ldb(ql + 8 * c), b = ldb(ql + 32 + 8 * c), h = ldb(qh + 8 * c);
            w[c + 0] = u8f_off((a & 0xF) | ((h & 3) << 4), 32) * (d * (float)sc[is + 0]);
            w[c + 4] = u8f_off((b & 0xF) | (((h >> 2) & 3) << 4), 32) * (d * (float)sc[is + 2]);
            w[c + 8] = u8f_off((a >> 4) | (((h >> 4) & 3) << 4), 32) * (d * (float)sc[is + 4]);
            w[c + 12] = u8f_off((b >> 4) | (((h >> 6) & 3) << 4), 32) * (d * (float)sc[is + 6]);
        }
    }
}

/* One block of type t at p -> chunks w; returns the number of 8-float chunks (always even). Float types
 * use 16-element blocks here. */
AI int deq_block(const int t, const uint8_t *p, v8f *w, const int isa)
{
    switch (t) {
    case KRN_F32: w[0] = ldf(p); w[1] = ldf(p + 32); return 2;
    case KRN_F16: w[0] = h2f_v(p); w[1] = h2f_v(p + 16); return 2;
    case KRN_BF16: w[0] = bf2f_v(p); w[1] = bf2f_v(p + 16); return 2;
    case KRN_Q4_0: deq_q4_0(p, w, isa); return 4;
    case KRN_Q4_1: deq_q4_1(p, w, isa); return 4;
    case KRN_Q8_0: deq_q8_0(p, w, isa); return 4;
    case KRN_Q4_K: deq_q4_K(p, w, isa); return 32;
    case KRN_Q6_K: deq_q6_K(p, w, isa); return 32;
    default: return 0;
    }
}

/* Scalar value of element i of a float-type row (the tail past the last 16-element chunk). */
AI float float_elem(const int t, const uint8_t *r, int64_t i)
{
    if (t == KRN_F32) {
        float v;
        memcpy(&v, r + 4 * i, 4);
        return v;
    }
    const uint16_t h = ld16(r + 2 * i);
    return t == KRN_F16 ? krn_f16_to_f32_inl(h) : krn_bf16_to_f32(h);
}

AI int is_float_type(int t) { return t == KRN_F32 || t == KRN_F16 || t == KRN_BF16; }

/* Elements and bytes of one chunk-group (a block; 16 elements for float types); t is a constant at every
 * call site, so these fold. */
AI int64_t chunk_elems(int t) { return is_float_type(t) ? 16 : (t == KRN_Q4_K || t == KRN_Q6_K) ? QK_K : 32; }
AI size_t chunk_bytes(int t)
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

/* Body of one type's dot loop; `t` is a constant in each instantiation below, so the switch folds away. */
AI float dot_type(const int t, const uint8_t *r, const float *x, int64_t n, const int isa)
{
    const int64_t ce = chunk_elems(t);
    const size_t cb = chunk_bytes(t);
    const int64_t nb = n / ce;
    v8f acc0 = {0}, acc1 = {0}, w[32]; /* lanes 0..7 and 8..15 */
    for (int64_t b = 0; b < nb; b++) {
        const int nc = deq_block(t, r + (size_t)b * cb, w, isa);
        const float *xb = x + b * ce;
        for (int c = 0; c < nc; c += 2) {
            acc0 += w[c] * ldf(xb + 8 * c);
            acc1 += w[c + 1] * ldf(xb + 8 * c + 8);
        }
    }
    float lane[16];
    memcpy(lane, &acc0, 32);
    memcpy(lane + 8, &acc1, 32);
    for (int64_t i = nb * ce; i < n; i++) /* float types only: n need not be a multiple of 16 */
        lane[i % 16] += float_elem(t, r, i) * x[i];
    for (int s = 8; s >= 1; s >>= 1)
        for (int l = 0; l < s; l++)
            lane[l] += lane[l + s];
    return lane[0];
}

AI void deq_type(const int t, const uint8_t *r, float *dst, int64_t n, const int isa)
{
    const int64_t ce = chunk_elems(t);
    const size_t cb = chunk_bytes(t);
    const int64_t nb = n / ce;
    v8f w[32];
    for (int64_t b = 0; b < nb; b++) {
        const int nc = deq_block(t, r + (size_t)b * cb, w, isa);
        memcpy(dst + b * ce, w, (size_t)nc * sizeof(v8f));
    }
    for (int64_t i = nb * ce; i < n; i++)
        dst[i] = float_elem(t, r, i);
}

#define PATH_FUNCS(NAME, ISA, ATTR)                                                                       \
    ATTR static float dot_##NAME(int t, const void *row, const float *x, int64_t n)                  \
    {                                                                                                \
        switch (t) {                                                                                 \
        case KRN_F32: return dot_type(KRN_F32, row, x, n, ISA);                                           \
        case KRN_F16: return dot_type(KRN_F16, row, x, n, ISA);                                           \
        case KRN_BF16: return dot_type(KRN_BF16, row, x, n, ISA);                                         \
        case KRN_Q4_0: return dot_type(KRN_Q4_0, row, x, n, ISA);                                         \
        case KRN_Q4_1: return dot_type(KRN_Q4_1, row, x, n, ISA);                                         \
        case KRN_Q8_0: return dot_type(KRN_Q8_0, row, x, n, ISA);                                         \
        case KRN_Q4_K: return dot_type(KRN_Q4_K, row, x, n, ISA);                                         \
        case KRN_Q6_K: return dot_type(KRN_Q6_K, row, x, n, ISA);                                         \
        default: return __builtin_nanf("");                                                          \
        }                                                                                            \
    }                                                                                                \
    ATTR static void deq_##NAME(int t, const void *src, float *dst, int64_t n)                       \
    {                                                                                                \
        switch (t) {                                                                                 \
        case KRN_F32: deq_type(KRN_F32, src, dst, n, ISA); break;                                         \
        case KRN_F16: deq_type(KRN_F16, src, dst, n, ISA); break;                                         \
        case KRN_BF16: deq_type(KRN_BF16, src, dst, n, ISA); break;                                       \
        case KRN_Q4_0: deq_type(KRN_Q4_0, src, dst, n, ISA); break;                                       \
        case KRN_Q4_1: deq_type(KRN_Q4_1, src, dst, n, ISA); break;                                       \
        case KRN_Q8_0: deq_type(KRN_Q8_0, src, dst, n, ISA); break;                                       \
        case KRN_Q4_K: deq_type(KRN_Q4_K, src, dst, n, ISA); break;                                       \
        case KRN_Q6_K: deq_type(KRN_Q6_K, src, dst, n, ISA); break;                                       \
        default: break;                                                                              \
        }                                                                                            \
    }

PATH_FUNCS(generic, KRN_PATH_GENERIC, )
#if defined(__x86_64__)
PATH_FUNCS(avx2, KRN_PATH_AVX2, __attribute__((target("avx2,f16c"))))
#endif

int krn_quant_path_available(int p)
{
    if (p == KRN_PATH_GENERIC)
        return 1;
#if defined(__x86_64__)
    if (p == KRN_PATH_AVX2) {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") ? 1 : 0;
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

float krn_dot_row_path(int p, int t, const void *row, const float *x, int64_t n)
{
    if (!valid_n(t, n))
        return __builtin_nanf("");
#if defined(__x86_64__)
    if (p == KRN_PATH_AVX2)
        return dot_avx2(t, row, x, n);
#endif
    return dot_generic(t, row, x, n);
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

float krn_dot_row(int t, const void *row, const float *x, int64_t n)
{
    return krn_dot_row_path(krn_quant_path(), t, row, x, n);
}

void krn_dequant_row(int t, const void *src, float *dst, int64_t n)
{
    krn_dequant_row_path(krn_quant_path(), t, src, dst, n);
}
