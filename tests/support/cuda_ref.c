/* Test references for the CUDA op table (tests/gpu_kernels.c): a seeded generator, the GGUF block layouts
 * of every krn_type, random valid rows and a double-precision dequantizer written from the GGUF layouts
 * independently of kernels/quant.c (so a layout slip in either shows up as a disagreement). Pure C. */
#include "support/cuda_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Shared mutable state: the generator's state, touched only by the (single) test thread. */
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

uint64_t cuda_ref_rand_u64(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
float cuda_ref_rand_unit(void) {
    return (float)((double)(cuda_ref_rand_u64() >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}
void cuda_ref_rand_floats(float *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = cuda_ref_rand_unit();
}

/* ---- half / bfloat16 ---- */

static float h2f(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0)
        v = ldexp((double)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp((double)(m | 1024), e - 25);
    return (float)(s ? -v : v);
}
static float bf2f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* A random normal f16 with exponent field in [elo, ehi] (value in [2^(elo-15), 2^(ehi-14))). */
static uint16_t rnd_f16(int elo, int ehi, int allow_neg) {
    const uint16_t s = allow_neg ? (uint16_t)((cuda_ref_rand_u64() & 1) << 15) : 0;
    const int e = elo + (int)(cuda_ref_rand_u64() % (uint64_t)(ehi - elo + 1));
    return (uint16_t)(s | (e << 10) | (int)(cuda_ref_rand_u64() & 1023));
}
static uint16_t rnd_bf16(void) {
    const uint16_t s = (uint16_t)((cuda_ref_rand_u64() & 1) << 15);
    const int e = 120 + (int)(cuda_ref_rand_u64() % 7); /* 2^-7 .. 2^-1 */
    return (uint16_t)(s | (e << 7) | (int)(cuda_ref_rand_u64() & 127));
}
static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static uint16_t get16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* ---- GGUF block layouts: sizes, random rows, reference dequantization ---- */


const cuda_ref_type CUDA_REF_TYPES[CUDA_REF_N_TYPES] = {
    {KRN_F32, "f32", 1, 4},         {KRN_F16, "f16", 1, 2},         {KRN_BF16, "bf16", 1, 2},
    {KRN_Q8_0, "q8_0", 32, 34},     {KRN_Q4_0, "q4_0", 32, 18},     {KRN_Q4_1, "q4_1", 32, 20},
    {KRN_Q4_K, "q4_k", 256, 144},   {KRN_Q6_K, "q6_k", 256, 210},   {KRN_Q5_K, "q5_k", 256, 176},
};

const cuda_ref_type *cuda_ref_type_of(int type) {
    for (int i = 0; i < CUDA_REF_N_TYPES; i++)
        if (CUDA_REF_TYPES[i].type == type)
            return &CUDA_REF_TYPES[i];
    return NULL;
}

/* A random valid row: random quant bytes, finite random scales. */
void cuda_ref_rand_row(const cuda_ref_type *t, uint8_t *row, int n) {
    const size_t bytes = (size_t)(n / t->be) * t->bb;
    for (size_t i = 0; i < bytes; i++)
        row[i] = (uint8_t)cuda_ref_rand_u64();
    for (int b = 0; b < n / t->be; b++) {
        uint8_t *bp = row + (size_t)b * t->bb;
        switch (t->type) {
        case KRN_F32: { float f = cuda_ref_rand_unit(); memcpy(bp, &f, 4); break; }
        case KRN_F16: put16(bp, rnd_f16(8, 14, 1)); break;
        case KRN_BF16: put16(bp, rnd_bf16()); break;
        case KRN_Q8_0: case KRN_Q4_0: put16(bp, rnd_f16(5, 11, 1)); break;
        case KRN_Q4_1: put16(bp, rnd_f16(5, 11, 1)); put16(bp + 2, rnd_f16(5, 11, 1)); break;
        case KRN_Q4_K: case KRN_Q5_K: put16(bp, rnd_f16(3, 9, 0)); put16(bp + 2, rnd_f16(3, 9, 0)); break;
        case KRN_Q6_K: put16(bp + 208, rnd_f16(3, 9, 1)); break;
        }
    }
}

static void q4k_scale_min(int j, const uint8_t *q, int *d, int *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* w[i] = weight i of the row; wabs[i] = |scale part| + |offset part| (bounds the summation error). */
void cuda_ref_dequant(const cuda_ref_type *t, const uint8_t *row, int n, double *w, double *wabs) {
    for (int b = 0; b < n / t->be; b++) {
        const uint8_t *bp = row + (size_t)b * t->bb;
        double *y = w + (size_t)b * t->be, *ya = wabs + (size_t)b * t->be;
        switch (t->type) {
        case KRN_F32: { float f; memcpy(&f, bp, 4); y[0] = f; ya[0] = fabs(f); break; }
        case KRN_F16: y[0] = h2f(get16(bp)); ya[0] = fabs(y[0]); break;
        case KRN_BF16: y[0] = bf2f(get16(bp)); ya[0] = fabs(y[0]); break;
        case KRN_Q8_0: {
            const double d = h2f(get16(bp));
            for (int j = 0; j < 32; j++) {
                y[j] = d * (int8_t)bp[2 + j];
                ya[j] = fabs(y[j]);
            }
            break;
        }
        case KRN_Q4_0: {
            const double d = h2f(get16(bp));
            for (int j = 0; j < 16; j++) {
                y[j] = d * ((bp[2 + j] & 0xF) - 8);
                y[j + 16] = d * ((bp[2 + j] >> 4) - 8);
                ya[j] = fabs(y[j]);
                ya[j + 16] = fabs(y[j + 16]);
            }
            break;
        }
        case KRN_Q4_1: {
            const double d = h2f(get16(bp)), m = h2f(get16(bp + 2));
            for (int j = 0; j < 16; j++) {
                y[j] = d * (bp[4 + j] & 0xF) + m;
                y[j + 16] = d * (bp[4 + j] >> 4) + m;
                ya[j] = fabs(d * (bp[4 + j] & 0xF)) + fabs(m);
                ya[j + 16] = fabs(d * (bp[4 + j] >> 4)) + fabs(m);
            }
            break;
        }
        case KRN_Q4_K: {
            const double d = h2f(get16(bp)), dmin = h2f(get16(bp + 2));
            const uint8_t *q = bp + 16;
            for (int j = 0; j < 4; j++) { /* 64 elements per pair of sub-blocks */
                int s1, m1, s2, m2;
                q4k_scale_min(2 * j, bp + 4, &s1, &m1);
                q4k_scale_min(2 * j + 1, bp + 4, &s2, &m2);
                for (int l = 0; l < 32; l++) {
                    const int lo = q[32 * j + l] & 0xF, hi = q[32 * j + l] >> 4;
                    y[64 * j + l] = d * s1 * lo - dmin * m1;
                    y[64 * j + 32 + l] = d * s2 * hi - dmin * m2;
                    ya[64 * j + l] = fabs(d * s1 * lo) + fabs(dmin * m1);
                    ya[64 * j + 32 + l] = fabs(d * s2 * hi) + fabs(dmin * m2);
                }
            }
            break;
        }
        case KRN_Q5_K: { /* q4_K's layout after qh[32] (byte 16): bit 4 of element 64j + l (+ 32) in bit 2j (+ 1) */
            const double d = h2f(get16(bp)), dmin = h2f(get16(bp + 2));
            const uint8_t *qh = bp + 16, *q = bp + 48;
            for (int j = 0; j < 4; j++) {
                int s1, m1, s2, m2;
                q4k_scale_min(2 * j, bp + 4, &s1, &m1);
                q4k_scale_min(2 * j + 1, bp + 4, &s2, &m2);
                for (int l = 0; l < 32; l++) {
                    const int lo = (q[32 * j + l] & 0xF) | ((qh[l] >> (2 * j)) & 1) << 4;
                    const int hi = (q[32 * j + l] >> 4) | ((qh[l] >> (2 * j + 1)) & 1) << 4;
                    y[64 * j + l] = d * s1 * lo - dmin * m1;
                    y[64 * j + 32 + l] = d * s2 * hi - dmin * m2;
                    ya[64 * j + l] = fabs(d * s1 * lo) + fabs(dmin * m1);
                    ya[64 * j + 32 + l] = fabs(d * s2 * hi) + fabs(dmin * m2);
                }
            }
            break;
        }
        case KRN_Q6_K: {
            const double d = h2f(get16(bp + 208));
            const uint8_t *ql = bp, *qh = bp + 128;
            const int8_t *sc = (const int8_t *)(bp + 192);
            for (int h = 0; h < 2; h++) {
                for (int l = 0; l < 32; l++) {
                    const int is = l / 16;
                    const int q1 = ((ql[64 * h + l] & 0xF) | (((qh[32 * h + l] >> 0) & 3) << 4)) - 32;
                    const int q2 = ((ql[64 * h + 32 + l] & 0xF) | (((qh[32 * h + l] >> 2) & 3) << 4)) - 32;
                    const int q3 = ((ql[64 * h + l] >> 4) | (((qh[32 * h + l] >> 4) & 3) << 4)) - 32;
                    const int q4 = ((ql[64 * h + 32 + l] >> 4) | (((qh[32 * h + l] >> 6) & 3) << 4)) - 32;
                    y[128 * h + l] = d * sc[8 * h + is + 0] * q1;
                    y[128 * h + l + 32] = d * sc[8 * h + is + 2] * q2;
                    y[128 * h + l + 64] = d * sc[8 * h + is + 4] * q3;
                    y[128 * h + l + 96] = d * sc[8 * h + is + 6] * q4;
                }
            }
            for (int i = 0; i < 256; i++)
                ya[i] = fabs(y[i]);
            break;
        }
        }
    }
}

uint8_t *cuda_ref_rand_blocks(const cuda_ref_type *t, int n_out, int n_in, size_t *bytes) {
    const size_t rb = (size_t)(n_in / t->be) * t->bb;
    *bytes = rb * (size_t)n_out;
    uint8_t *h = malloc(*bytes ? *bytes : 1);
    for (int r = 0; h && r < n_out; r++)
        cuda_ref_rand_row(t, h + (size_t)r * rb, n_in);
    return h;
}
