/* kernels/quant: block layouts, conversions, quantizers and the deterministic dot product. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/quant.h"
#include "kernels/quant_impl.h"
#include "kernels/quant_batch.h"
#include "kernels/krn.h"
#include "kernels/cpu/krn_cpu.h"

static const int all_types[] = {KRN_F32, KRN_F16, KRN_BF16, KRN_Q4_0, KRN_Q4_1, KRN_Q8_0, KRN_Q4_K, KRN_Q5_K, KRN_Q6_K};
#define N_TYPES (int)(sizeof all_types / sizeof all_types[0])

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) /* [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static void fill(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = frand() * scale * (1.0f + (float)(i % 7)); /* uneven magnitudes inside a block */
}

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static void test_type_table_sizes_match_ggml(void **state)
{
    (void)state;
    assert_int_equal(krn_row_bytes(KRN_Q4_1, 576), 18 * 20);
    assert_int_equal(krn_row_bytes(KRN_Q4_0, 64), 2 * 18);
    assert_int_equal(krn_row_bytes(KRN_Q8_0, 32), 34);
    assert_int_equal(krn_row_bytes(KRN_Q4_K, 512), 2 * 144);
    assert_int_equal(krn_row_bytes(KRN_Q5_K, 512), 2 * 176);
    assert_int_equal(krn_row_bytes(KRN_Q6_K, 256), 210);
    assert_int_equal(krn_row_bytes(KRN_F32, 3), 12);
    assert_int_equal(krn_row_bytes(KRN_F16, 3), 6);
    assert_int_equal(krn_row_bytes(KRN_BF16, 3), 6);
    assert_int_equal(krn_row_bytes(KRN_Q4_1, 33), 0);  /* not a multiple of the block */
    assert_int_equal(krn_row_bytes(KRN_Q4_K, 32), 0);
    assert_int_equal(krn_row_bytes(KRN_Q5_K, 128), 0);
    assert_int_equal(krn_row_bytes(7, 32), 0);          /* q5_1: unsupported */
    assert_int_equal(krn_type_supported(KRN_Q6_K), 1);
    assert_int_equal(krn_type_supported(KRN_Q5_K), 1);
    assert_int_equal(KRN_Q5_K, 13); /* GGML's number */
    assert_string_equal(krn_type_name(KRN_Q5_K), "q5_K");
    assert_int_equal(krn_type_parse("Q5_k"), KRN_Q5_K);
    assert_int_equal(krn_type_block_elems(KRN_Q5_K), 256);
    assert_int_equal(krn_type_supported(6), 0);
    assert_int_equal(krn_type_supported(-1), 0);
    assert_string_equal(krn_type_name(KRN_Q4_1), "q4_1");
    assert_string_equal(krn_type_name(99), "unknown");
    assert_int_equal(krn_type_block_elems(99), 0);
}

static void test_f16_and_bf16_convert_exactly_and_round_to_nearest_even(void **state)
{
    (void)state;
    assert_true(krn_f16_to_f32(0x3C00) == 1.0f);
    assert_true(krn_f16_to_f32(0xC000) == -2.0f);
    assert_true(krn_f16_to_f32(0x7BFF) == 65504.0f);
    assert_true(krn_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    assert_true(krn_f16_to_f32(0x03FF) == ldexpf(1023.0f, -24));
    assert_true(isinf(krn_f16_to_f32(0x7C00)) && krn_f16_to_f32(0xFC00) < 0);
    assert_true(isnan(krn_f16_to_f32(0x7E00)));
    assert_int_equal(fbits(krn_f16_to_f32(0x8000)), 0x80000000u);
    assert_int_equal(krn_f32_to_f16(1.0f), 0x3C00);
    assert_int_equal(krn_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3C00);     /* tie -> even */
    assert_int_equal(krn_f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)), 0x3C02); /* tie -> even (up) */
    assert_int_equal(krn_f32_to_f16(65519.0f), 0x7BFF);
    assert_int_equal(krn_f32_to_f16(65520.0f), 0x7C00);
    assert_int_equal(krn_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);            /* tie -> even (zero) */
    assert_int_equal(krn_f32_to_f16(ldexpf(3.0f, -25)), 0x0002);
    assert_int_equal(krn_f32_to_f16(-INFINITY), 0xFC00);
    assert_int_equal(krn_f32_to_f16(NAN) & 0x7E00, 0x7E00);
    for (uint32_t h = 0; h < 0x10000; h++) /* every finite half survives a round trip */
        if ((h & 0x7C00) != 0x7C00)
            assert_int_equal(krn_f32_to_f16(krn_f16_to_f32((uint16_t)h)), h);
    assert_true(krn_bf16_to_f32(0x3F80) == 1.0f);
    assert_int_equal(krn_f32_to_bf16(1.0f), 0x3F80);
    assert_int_equal(krn_f32_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3F80);     /* tie -> even */
    assert_int_equal(krn_f32_to_bf16(1.0f + 3 * ldexpf(1.0f, -8)), 0x3F82);
    assert_true(isnan(krn_bf16_to_f32(krn_f32_to_bf16(NAN))));
}

/* Worst per-element error allowed, relative to the largest |x| of the row (a loose upper bound of each
 * format's step), and the RMS error allowed relative to the RMS of x. */
static void tolerance(int t, double *max_rel, double *rms_rel)
{
    switch (t) {
    case KRN_F32: *max_rel = 0; *rms_rel = 0; break;
    case KRN_F16: *max_rel = 1.0 / 2048; *rms_rel = 1.0 / 2048; break;
    case KRN_BF16: *max_rel = 1.0 / 256; *rms_rel = 1.0 / 256; break;
    case KRN_Q8_0: *max_rel = 0.5 / 127 + 1e-3; *rms_rel = 0.01; break;
    case KRN_Q4_0: *max_rel = 1.0 / 8 + 1e-3; *rms_rel = 0.12; break;
    case KRN_Q4_1: *max_rel = 1.0 / 15 + 1e-3; *rms_rel = 0.08; break;
    case KRN_Q4_K: *max_rel = 1.0 / 15 + 0.02; *rms_rel = 0.09; break;
    case KRN_Q5_K: *max_rel = 1.0 / 31 + 0.02; *rms_rel = 0.045; break;
    case KRN_Q6_K: *max_rel = 1.0 / 63 + 0.01; *rms_rel = 0.03; break;
    default: fail();
    }
}

static void test_every_type_round_trips_within_its_tolerance(void **state)
{
    (void)state;
    enum { N = 1024 };
    float x[N], y[N];
    fill(x, N, 0.05f);
    for (int k = 0; k < N_TYPES; k++) {
        const int t = all_types[k];
        unsigned char *q = malloc(krn_row_bytes(t, N));
        assert_non_null(q);
        krn_quant_row(t, x, q, N);
        memset(y, 0xFF, sizeof y); /* nan: a dequantizer that writes nothing fails */
        krn_dequant_row(t, q, y, N);
        double amax = 0, se = 0, sx = 0, emax = 0;
        for (int i = 0; i < N; i++) {
            amax = fmax(amax, fabs(x[i]));
            const double e = fabs((double)y[i] - x[i]);
            assert_false(isnan(y[i]));
            emax = fmax(emax, e);
            se += e * e;
            sx += (double)x[i] * x[i];
        }
        double max_rel = 0, rms_rel = 0;
        tolerance(t, &max_rel, &rms_rel);
        const double rms = sqrt(se / sx);
        if (emax > max_rel * amax || rms > rms_rel)
            fail_msg("%s: max error %g (allowed %g), rms error %g (allowed %g)", krn_type_name(t), emax / amax,
                     max_rel, rms, rms_rel);
        /* all zeros and a constant row come back exactly */
        float z[256] = {0}, c[256], out[256];
        for (int i = 0; i < 256; i++)
            c[i] = 0.5f;
        krn_quant_row(t, z, q, 256);
        krn_dequant_row(t, q, out, 256);
        for (int i = 0; i < 256; i++)
            assert_true(out[i] == 0.0f);
        krn_quant_row(t, c, q, 256);
        krn_dequant_row(t, q, out, 256);
        for (int i = 0; i < 256; i++)
            assert_true(fabsf(out[i] - 0.5f) <= 0.5f * (float)max_rel + 1e-6f);
        free(q);
    }
}

/* GGML's quantize_row_{q4_0,q4_1,q8_0}_ref bytes for this block (computed with the gguf python package,
 * whose quantizers are bit-exact with ggml's). */
static void test_legacy_quantizers_match_ggml_bytes(void **state)
{
    (void)state;
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(((j * 7) % 32 - 13) / 8.0 + (j % 5 == 0 ? 0.03 : 0.0));
    static const uint8_t q4_0[] = {0x80, 0xb4, 0x7e, 0x4b, 0x08, 0xc4, 0x81, 0x5c, 0x29, 0xd6, 0xa3, 0x70,
                                   0x4b, 0x18, 0xc5, 0x92, 0x6d, 0x3a};
    static const uint8_t q4_1[] = {0x1a, 0x34, 0x61, 0xbe, 0x80, 0xb3, 0xf7, 0x2a, 0x6e, 0x91, 0xd5, 0x08,
                                   0x4c, 0x7f, 0xb3, 0xe6, 0x2a, 0x5d, 0x91, 0xc4};
    static const uint8_t q8_0[] = {0x89, 0x24, 0xa6, 0xd6, 0x07, 0x38, 0x6a, 0xbb, 0xeb, 0x1c, 0x4e, 0x7f,
                                   0xd0, 0x00, 0x31, 0x63, 0xb2, 0xe5, 0x15, 0x47, 0x78, 0xc8, 0xfb, 0x2a,
                                   0x5c, 0xab, 0xdd, 0x10, 0x40, 0x71, 0xc0, 0xf2, 0x25, 0x55};
    uint8_t out[64];
    krn_quant_row(KRN_Q4_0, x, out, 32);
    assert_memory_equal(out, q4_0, sizeof q4_0);
    krn_quant_row(KRN_Q4_1, x, out, 32);
    assert_memory_equal(out, q4_1, sizeof q4_1);
    krn_quant_row(KRN_Q8_0, x, out, 32);
    assert_memory_equal(out, q8_0, sizeof q8_0);
}

static void test_hand_made_legacy_blocks_dequantize_exactly(void **state)
{
    (void)state;
    float y[32];
    uint8_t b[34];
    /* q4_0: d = 0.5; qs[j] = j | (15 - j) << 4 -> y[j] = 0.5 (j - 8), y[j + 16] = 0.5 (7 - j) */
    b[0] = 0x00, b[1] = 0x38;
    for (int j = 0; j < 16; j++)
        b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    krn_dequant_row(KRN_Q4_0, b, y, 32);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == 0.5f * (float)(j - 8));
        assert_true(y[j + 16] == 0.5f * (float)(7 - j));
    }
    /* q4_1: d = 0.25, m = -1 -> y = 0.25 q - 1 */
    b[0] = 0x00, b[1] = 0x34, b[2] = 0x00, b[3] = 0xBC;
    for (int j = 0; j < 16; j++)
        b[4 + j] = (uint8_t)(((j * 3) & 15) | (((j * 5 + 1) & 15) << 4));
    krn_dequant_row(KRN_Q4_1, b, y, 32);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == 0.25f * (float)((j * 3) & 15) - 1.0f);
        assert_true(y[j + 16] == 0.25f * (float)((j * 5 + 1) & 15) - 1.0f);
    }
    /* q8_0: d = 2, q = j - 16 */
    b[0] = 0x00, b[1] = 0x40;
    for (int j = 0; j < 32; j++)
        b[2 + j] = (uint8_t)(int8_t)(j - 16);
    krn_dequant_row(KRN_Q8_0, b, y, 32);
    for (int j = 0; j < 32; j++)
        assert_true(y[j] == 2.0f * (float)(j - 16));
}

/* q4_K laid out from the format description (6-bit scales/mins packed in 12 bytes), independent of the
 * quantizer's packing code. */
static void test_hand_made_q4_K_block_dequantizes_exactly(void **state)
{
    (void)state;
    uint8_t b[144] = {0};
    float y[256];
    int sc[8], mn[8];
    b[0] = 0x00, b[1] = 0x3C; /* d = 1 */
    b[2] = 0x00, b[3] = 0x38; /* dmin = 0.5 */
    for (int j = 0; j < 8; j++) {
        sc[j] = 7 * j + 5;  /* 5..54 (needs the high bits for j >= 4 once > 15) */
        mn[j] = 63 - 8 * j; /* 63..7 */
    }
    uint8_t *s = b + 4;
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)(mn[j] | ((mn[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
    }
    for (int k = 0; k < 128; k++)
        b[16 + k] = (uint8_t)(k * 37 + 11);
    krn_dequant_row(KRN_Q4_K, b, y, 256);
    for (int e = 0; e < 256; e++) {
        const int chunk = e / 64, hi = (e % 64) >= 32, l = e % 32;
        const int sub = 2 * chunk + hi;
        const uint8_t byte = b[16 + 32 * chunk + l];
        const int q = hi ? byte >> 4 : byte & 15;
        const double want = 1.0 * sc[sub] * q - 0.5 * mn[sub];
        if ((double)y[e] != want)
            fail_msg("q4_K element %d: got %g want %g", e, y[e], want);
    }
}

/* q5_K laid out from the format description (q4_K's scales, bit 4 of each quant in qh), checked against a
 * transcription of GGML's dequantize_row_q5_K (its u1 / u2 bit walk) and against the per-element formula. */
static void test_hand_made_q5_K_block_dequantizes_exactly(void **state)
{
    (void)state;
    uint8_t b[176] = {0};
    float y[256];
    int sc[8], mn[8], q[256];
    b[0] = 0x00, b[1] = 0x3C; /* d = 1 */
    b[2] = 0x00, b[3] = 0x38; /* dmin = 0.5 */
    for (int j = 0; j < 8; j++) {
        sc[j] = 7 * j + 5;  /* 5..54 (needs the high bits for j >= 4 once > 15) */
        mn[j] = 63 - 8 * j; /* 63..7 */
    }
    uint8_t *s = b + 4, *qh = b + 16, *qs = b + 48;
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)(mn[j] | ((mn[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
    }
    for (int e = 0; e < 256; e++) { /* every value 0..31, each sub-block with and without bit 4 */
        q[e] = (e * 13 + 7) % 32;
        const int chunk = e / 64, hi = (e % 64) >= 32, l = e % 32;
        qs[32 * chunk + l] |= (uint8_t)(hi ? (q[e] & 15) << 4 : q[e] & 15);
        qh[l] |= (uint8_t)((q[e] >> 4) << (2 * chunk + hi));
    }
    krn_dequant_row(KRN_Q5_K, b, y, 256);
    /* GGML's loop, in float (every value here is exact) */
    float want[256], *w = want;
    const uint8_t *ql = qs;
    int is = 0;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 256; j += 64) {
        uint8_t scu, mu;
        krn_q4k_scale_min(is + 0, s, &scu, &mu);
        const float d1 = 1.0f * scu, m1 = 0.5f * mu;
        krn_q4k_scale_min(is + 1, s, &scu, &mu);
        const float d2 = 1.0f * scu, m2 = 0.5f * mu;
        for (int l = 0; l < 32; ++l)
            *w++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
        for (int l = 0; l < 32; ++l)
            *w++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        ql += 32;
        is += 2;
        u1 <<= 2;
        u2 <<= 2;
    }
    for (int e = 0; e < 256; e++) {
        const int sub = e / 32;
        const double formula = 1.0 * sc[sub] * q[e] - 0.5 * mn[sub];
        if ((double)y[e] != formula || want[e] != y[e])
            fail_msg("q5_K element %d: got %g, GGML's loop %g, formula %g", e, y[e], want[e], formula);
    }
}

/* The fifth bit is used: on the same rows q5_K's RMS error is well under q4_K's (about half: a step half as
 * large), and the quantizer reaches both ends of 0..31. */
static void test_q5_K_round_trip_error_is_about_half_of_q4_K(void **state)
{
    (void)state;
    enum { N = 4096 };
    static float x[N], y[N];
    static uint8_t q[N];
    fill(x, N, 0.05f);
    double rms[2];
    const int ts[2] = {KRN_Q4_K, KRN_Q5_K};
    for (int k = 0; k < 2; k++) {
        krn_quant_row(ts[k], x, q, N);
        krn_dequant_row(ts[k], q, y, N);
        double se = 0, sx = 0;
        for (int i = 0; i < N; i++) {
            se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
            sx += (double)x[i] * x[i];
        }
        rms[k] = sqrt(se / sx);
    }
    if (!(rms[1] < 0.6 * rms[0]))
        fail_msg("q5_K rms error %g is not under 0.6 x q4_K's %g", rms[1], rms[0]);
    krn_quant_row(KRN_Q5_K, x, q, N);
    int seen0 = 0, seen31 = 0;
    for (int blk = 0; blk < N / 256; blk++) {
        const uint8_t *b = q + 176 * blk;
        for (int e = 0; e < 256; e++) {
            const int v = (b[48 + 32 * (e / 64) + e % 32] >> ((e % 64) >= 32 ? 4 : 0) & 15) |
                          ((b[16 + e % 32] >> (e / 32)) & 1) << 4;
            seen0 += v == 0;
            seen31 += v == 31;
        }
    }
    assert_true(seen0 > 0 && seen31 > 0);
}

static void test_hand_made_q6_K_block_dequantizes_exactly(void **state)
{
    (void)state;
    uint8_t b[210] = {0};
    float y[256];
    int q[256];
    int8_t *scales = (int8_t *)(b + 192);
    for (int k = 0; k < 16; k++)
        scales[k] = (int8_t)(k - 8);
    b[208] = 0x00, b[209] = 0x34; /* d = 0.25 */
    for (int e = 0; e < 256; e++) {
        q[e] = (e * 7 + 3) % 64;
        /* element e: half e/128; inside, group g = (e%128)/32 and l = e%32. Low 4 bits in ql[64 half +
         * l + 32 (g & 1)] (low nibble for g < 2, high for g >= 2); high 2 bits in qh[32 half + l] at 2g. */
        const int half = e / 128, g = (e % 128) / 32, l = e % 32;
        uint8_t *ql = b + 64 * half + l + 32 * (g & 1);
        *ql |= (uint8_t)(g < 2 ? (q[e] & 15) : (q[e] & 15) << 4);
        b[128 + 32 * half + l] |= (uint8_t)((q[e] >> 4) << (2 * g));
    }
    krn_dequant_row(KRN_Q6_K, b, y, 256);
    for (int e = 0; e < 256; e++) {
        const double want = 0.25 * scales[e / 16] * (q[e] - 32);
        if ((double)y[e] != want)
            fail_msg("q6_K element %d: got %g want %g", e, y[e], want);
    }
}

/* The documented order: lane i % 16 in increasing i, lane += w * x, then the fixed fold. */
static float lane_reference(const float *w, const float *x, int64_t n)
{
    float lane[16] = {0};
    for (int64_t i = 0; i < n; i++) {
        const float p = w[i] * x[i];
        lane[i % 16] = lane[i % 16] + p;
    }
    for (int s = 8; s >= 1; s >>= 1)
        for (int l = 0; l < s; l++)
            lane[l] = lane[l] + lane[l + s];
    return lane[0];
}

/* The documented order of q4_0 / q4_1 / q8_0 (kernels/quant_dot.c): integer quants against x in 8 lanes per block
 * with fused multiply-adds, lanes l and l + 4 added, scaled by d into 4 lanes, q4_1's min times the block's x sum
 * into one sum of its own. */
static float q32_reference(int t, const unsigned char *row, const float *x, int64_t n)
{
    const size_t bb = krn_row_bytes(t, 32);
    float acc[4] = {0}, mins = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        const unsigned char *p = row + b * bb, *qs = p + (t == KRN_Q4_1 ? 4 : 2);
        uint16_t dh, mh;
        memcpy(&dh, p, 2);
        memcpy(&mh, p + 2, 2);
        const float d = krn_f16_to_f32(dh), m = krn_f16_to_f32(mh), *xb = x + 32 * b;
        float s[8];
        for (int l = 0; l < 8; l++)
            for (int c = 0; c < 4; c++) {
                const int e = l + 8 * c;
                const float q = t == KRN_Q8_0 ? (float)(int8_t)qs[e]
                                              : (float)((e < 16 ? qs[e] & 0xF : qs[e - 16] >> 4) - (t == KRN_Q4_0 ? 8 : 0));
                s[l] = c == 0 ? q * xb[e] : fmaf(q, xb[e], s[l]);
            }
        for (int l = 0; l < 4; l++)
            acc[l] = fmaf(d, s[l] + s[l + 4], acc[l]);
        float xs[8];
        for (int l = 0; l < 8; l++)
            xs[l] = (xb[l] + xb[l + 8]) + (xb[l + 16] + xb[l + 24]);
        for (int s = 4; s >= 1; s >>= 1)
            for (int l = 0; l < s; l++)
                xs[l] += xs[l + s];
        mins = fmaf(m, xs[0], mins);
    }
    for (int s = 2; s >= 1; s >>= 1)
        for (int l = 0; l < s; l++)
            acc[l] += acc[l + s];
    return t == KRN_Q4_1 ? acc[0] + mins : acc[0];
}

static void test_dot_equals_the_documented_lane_sum_and_the_double_sum(void **state)
{
    (void)state;
    enum { N = 1536 };
    static float x[N], w[N], v[N];
    fill(w, N, 0.1f);
    fill(x, N, 1.0f);
    for (int k = 0; k < N_TYPES; k++) {
        const int t = all_types[k];
        const int64_t n = (t == KRN_F32 || t == KRN_F16 || t == KRN_BF16) ? N - 5 : N; /* a ragged tail */
        unsigned char *q = malloc(krn_row_bytes(t, n));
        krn_quant_row(t, w, q, n);
        krn_dequant_row(t, q, v, n);
        double sum = 0, mag = 0;
        for (int64_t i = 0; i < n; i++) {
            sum += (double)v[i] * x[i];
            mag += fabs((double)v[i] * x[i]);
        }
        const float d = krn_dot_row(t, q, x, n);
        if (fabs(d - sum) > 1e-5 * mag)
            fail_msg("%s: dot %.9g, double sum %.9g", krn_type_name(t), d, sum);
        const int q32 = t == KRN_Q4_0 || t == KRN_Q4_1 || t == KRN_Q8_0;
        const float ref = q32 ? q32_reference(t, q, x, n) : lane_reference(v, x, n);
        if (fbits(d) != fbits(ref))
            fail_msg("%s: dot %.9g is not the lane-order sum %.9g", krn_type_name(t), d, ref);
        for (int p = 0; p < KRN_PATH_COUNT; p++) { /* every path this CPU runs gives the same bits */
            if (!krn_quant_path_available(p))
                continue;
            assert_int_equal(fbits(krn_dot_row_path(p, t, q, x, n)), fbits(d));
            float *v2 = malloc(sizeof(float) * (size_t)n);
            krn_dequant_row_path(p, t, q, v2, n);
            assert_memory_equal(v2, v, sizeof(float) * (size_t)n);
            free(v2);
        }
        free(q);
    }
}

/* At the ends of the quant range (every quant 31: all nibbles and qh bits set; every quant 0) and on random
 * bytes, the q5_K dot of every path is the documented 16-lane sum of the dequantized row, bit for bit. */
static void test_q5_K_dot_is_the_lane_sum_on_every_path_at_the_ends_of_its_range(void **state)
{
    (void)state;
    enum { NB = 6, N = NB * 256 };
    static uint8_t row[NB * 176];
    static float x[N], v[N], v2[N];
    fill(x, N, 1.0f);
    for (int pass = 0; pass < 3; pass++) {
        for (int blk = 0; blk < NB; blk++) {
            uint8_t *b = row + 176 * blk;
            for (int i = 4; i < 176; i++)
                b[i] = pass == 0 ? 0xFF : pass == 1 ? (i < 16 ? 0xFF : 0x00) : (uint8_t)(frand() * 128 + 128);
            const uint16_t d = krn_f32_to_f16(0.001f * (float)(blk + 1));
            const uint16_t dmin = krn_f32_to_f16(0.003f * (float)(blk + 2));
            memcpy(b, &d, 2);
            memcpy(b + 2, &dmin, 2);
        }
        krn_dequant_row(KRN_Q5_K, row, v, N);
        const float want = lane_reference(v, x, N);
        for (int p = 0; p < KRN_PATH_COUNT; p++) {
            if (!krn_quant_path_available(p))
                continue;
            krn_dequant_row_path(p, KRN_Q5_K, row, v2, N);
            assert_memory_equal(v2, v, sizeof v);
            const float got = krn_dot_row_path(p, KRN_Q5_K, row, x, N);
            if (fbits(got) != fbits(want))
                fail_msg("pass %d path %d: dot %.9g, lane sum %.9g", pass, p, got, want);
        }
    }
}

static void test_dot_is_bit_identical_across_calls_and_buffer_alignments(void **state)
{
    (void)state;
    enum { N = 512 };
    static float w[N], x[N];
    fill(w, N, 0.1f);
    fill(x, N, 1.0f);
    for (int k = 0; k < N_TYPES; k++) {
        const int t = all_types[k];
        const size_t rb = krn_row_bytes(t, N);
        unsigned char *q = malloc(rb), *qbuf = malloc(rb + 64);
        float *xbuf = malloc(sizeof(float) * (N + 16));
        krn_quant_row(t, w, q, N);
        const uint32_t want = fbits(krn_dot_row(t, q, x, N));
        for (int rep = 0; rep < 3; rep++)
            assert_int_equal(fbits(krn_dot_row(t, q, x, N)), want);
        const int row_align = (t == KRN_F32) ? 4 : (t == KRN_F16 || t == KRN_BF16) ? 2 : 1;
        for (int ro = 0; ro < 64; ro += row_align) {
            memcpy(qbuf + ro, q, rb);
            for (int xo = 0; xo < 16; xo += 5) {
                memcpy(xbuf + xo, x, sizeof x);
                assert_int_equal(fbits(krn_dot_row(t, qbuf + ro, xbuf + xo, N)), want);
            }
        }
        free(q);
        free(qbuf);
        free(xbuf);
    }
}

static void test_bad_length_or_type_gives_nan_not_a_crash(void **state)
{
    (void)state;
    float x[64] = {0};
    uint8_t row[64] = {0};
    assert_true(isnan(krn_dot_row(KRN_Q4_1, row, x, 33)));
    assert_true(isnan(krn_dot_row(6, row, x, 32)));
    assert_true(krn_dot_row(KRN_Q4_1, row, x, 0) == 0.0f);
}

/* The K-quant scales and mins unpacked 8 at a time are the one-at-a-time values for every byte pattern, and
 * K-quant blocks of arbitrary bytes (every scale, min, qh and sign bit, finite d) dequantize and dot to the same
 * bits on every path. A local generator: the shared one belongs to the last test. */
static void test_k_quant_blocks_of_any_bytes_agree_on_every_path(void **state)
{
    (void)state;
    uint64_t r = 0x9e3779b97f4a7c15u;
#define NEXT() (r = r * 6364136223846793005u + 1442695040888963407u, (uint8_t)(r >> 56))
    for (int n = 0; n < 20000; n++) {
        uint8_t q[12], sc[8], m[8];
        for (int i = 0; i < 12; i++)
            q[i] = NEXT();
        krn_q4k_scales_mins(q, sc, m);
        for (int j = 0; j < 8; j++) {
            uint8_t s1, m1;
            krn_q4k_scale_min(j, q, &s1, &m1);
            assert_int_equal(sc[j], s1);
            assert_int_equal(m[j], m1);
        }
    }
    enum { NB = 3, N = NB * 256 };
    static float x[N], want[N], got[N];
    fill(x, N, 1.0f);
    const int types[] = {KRN_Q4_K, KRN_Q5_K, KRN_Q6_K};
    for (int k = 0; k < 3; k++) {
        const int t = types[k];
        const size_t bb = krn_type_block_bytes(t);
        uint8_t blk[NB * 256];
        for (int round = 0; round < 50; round++) {
            for (size_t i = 0; i < NB * bb; i++)
                blk[i] = NEXT();
            for (int b = 0; b < NB; b++) { /* d (and dmin) finite f16s: exponent bits below 0x7c00 */
                uint8_t *d = blk + b * bb + (t == KRN_Q6_K ? bb - 2 : 0);
                d[1] &= 0x3b;
                if (t != KRN_Q6_K)
                    blk[b * bb + 3] &= 0x3b;
            }
            const float want_dot = krn_dot_row_path(KRN_PATH_GENERIC, t, blk, x, N);
            krn_dequant_row_path(KRN_PATH_GENERIC, t, blk, want, N);
            for (int p = 1; p < KRN_PATH_COUNT; p++) {
                if (!krn_quant_path_available(p))
                    continue;
                krn_dequant_row_path(p, t, blk, got, N);
                for (int i = 0; i < N; i++)
                    if (fbits(got[i]) != fbits(want[i]))
                        fail_msg("%s path %d round %d: element %d is %a, the portable path's %a", krn_type_name(t), p,
                                 round, i, got[i], want[i]);
                assert_int_equal(fbits(krn_dot_row_path(p, t, blk, x, N)), fbits(want_dot));
            }
        }
    }
#undef NEXT
}

static void test_batched_dot_gives_the_bits_of_single_dots(void **state)
{
    (void)state;
    enum { N = 512, LDX = N + 3, BMAX = 9 };
    static float w[N], xs[BMAX * LDX];
    fill(w, N, 0.1f);
    fill(xs, BMAX * LDX, 1.0f);
    for (int k = 0; k < N_TYPES; k++) {
        const int t = all_types[k];
        const int64_t n = (t == KRN_F32 || t == KRN_F16 || t == KRN_BF16) ? N - 7 : N;
        uint8_t *q = malloc(krn_row_bytes(t, N));
        krn_quant_row(t, w, q, n);
        for (int B = 1; B <= BMAX; B++)
            for (int p = 0; p < KRN_PATH_COUNT; p++) {
                if (!krn_quant_path_available(p))
                    continue;
                float out[BMAX + 1];
                out[B] = 123.0f; /* must stay untouched */
                krn_dot_row_batch_path(p, t, q, xs, LDX, B, out, n);
                for (int b = 0; b < B; b++)
                    if (fbits(out[b]) != fbits(krn_dot_row(t, q, xs + b * LDX, n)))
                        fail_msg("%s B=%d path %d: vector %d differs", krn_type_name(t), B, p, b);
                assert_true(out[B] == 123.0f);
            }
        float o[3];
        krn_dot_row_batch(t, q, xs, LDX, 3, o, n);
        assert_int_equal(fbits(o[2]), fbits(krn_dot_row(t, q, xs + 2 * LDX, n)));
        free(q);
    }
    float o[2] = {0, 0};
    krn_dot_row_batch(KRN_Q4_1, w, xs, LDX, 2, o, 33);
    assert_true(isnan(o[0]) && isnan(o[1]));
}

/* The fast mode's dot: the same bits on every path, the defined per-block sums (checked in double), and within
 * half an x quantum per element of the exact f32 dot: |x8 - f32| <= sum_j d_j / 2 * sum_{i in j} |w_i|. */
static void test_int8_x_dot_gives_the_same_bits_on_every_path_and_stays_within_half_a_quantum(void **state)
{
    (void)state;
    enum { N = 512 };
    static float w[N], x[N], wd[N];
    static uint8_t xq[N + N / 4 + 16];
    fill(w, N, 0.1f);
    fill(x, N, 1.0f);
    x[37] = 25.0f; /* one block with a large outlier: a coarse quantum there */
    assert_true(krn_x8_row_bytes(N) <= sizeof xq);
    krn_x8_quantize_host(xq, x, 1, N);
    const int types[] = {KRN_Q4_0, KRN_Q4_1, KRN_Q8_0};
    for (int k = 0; k < 3; k++) {
        const int t = types[k];
        uint8_t *q = malloc(krn_row_bytes(t, N));
        krn_quant_row(t, w, q, N);
        krn_dequant_row(t, q, wd, N);
        const float got = krn_dot_row_x8(t, q, xq, N);
        for (int p = 0; p < KRN_X8_PATH_COUNT; p++)
            if (krn_x8_path_available(p) && fbits(krn_dot_row_x8_path(p, t, q, xq, N)) != fbits(got))
                fail_msg("%s: path %d differs from the default path", krn_type_name(t), p);
        double ref = 0.0, mag = 0.0, bound = 0.0;
        for (int j = 0; j < N / 32; j++) {
            float ds[2];
            memcpy(ds, xq + N + 8 * j, sizeof ds);
            double sw = 0.0;
            for (int i = 32 * j; i < 32 * j + 32; i++) {
                ref += (double)wd[i] * ds[0] * ((const int8_t *)xq)[i]; /* the dequantized w times the x quant */
                mag += fabs((double)wd[i] * ds[0] * ((const int8_t *)xq)[i]);
                sw += fabs((double)wd[i]);
            }
            bound += sw * ds[0] / 2.0;
        }
        double exact = 0.0;
        for (int i = 0; i < N; i++)
            exact += (double)wd[i] * x[i];
        if (fabs(got - ref) > 1e-5 * mag + 1e-6)
            fail_msg("%s: %g, the defined sums give %g", krn_type_name(t), got, ref);
        if (fabs(got - exact) > bound * 1.001 + 1e-5 * mag)
            fail_msg("%s: %g is %g from the f32 dot %g, more than half a quantum per element (%g)", krn_type_name(t),
                     got, fabs(got - exact), exact, bound);
        assert_true(fabs(got - exact) > 0.0); /* x is rounded: not the exact mode's value */
        free(q);
    }
    assert_true(isnan(krn_dot_row_x8(KRN_Q4_K, w, xq, 256)));
    assert_true(isnan(krn_dot_row_x8(KRN_Q4_1, w, xq, 48)));
}

/* The fast mode's GEMM: for shapes whose rows and x rows are not multiples of the 8 x 4 tile, every path gives
 * every (weight row, x row) pair the bits of krn_dot_row_x8 for that pair alone (so B and the tiling do not
 * change a row), in GGUF blocks and in rows of 8 (2 groups and 3 GGUF rows after them), and acc = 1 adds the result
 * to y. */
static void test_int8_x_gemm_gives_each_pair_the_bits_of_its_lone_dot_on_every_path(void **state)
{
    (void)state;
    enum { N = 32 * 11, NO = 19, B = 7 }; /* 2 groups and 3 rows; x tiles of 4 and 3 */
    static float w[NO * N], x[B * N], y[B * NO], y2[B * NO];
    fill(w, NO * N, 0.2f);
    fill(x, B * N, 1.5f);
    const size_t xrb = krn_x8_row_bytes(N);
    uint8_t *xq = malloc(B * xrb);
    assert_non_null(xq);
    krn_x8_quantize_host(xq, x, B, N);
    const int types[] = {KRN_Q4_0, KRN_Q4_1, KRN_Q8_0};
    int checked = 0;
    for (int k = 0; k < 3; k++) {
        const int t = types[k];
        const size_t rb = krn_row_bytes(t, N);
        uint8_t *q = malloc(NO * rb), *q8 = malloc(NO * rb);
        assert_non_null(q);
        assert_non_null(q8);
        for (int o = 0; o < NO; o++)
            krn_quant_row(t, w + o * N, q + o * rb, N);
        for (int g = 0; g < NO / 8; g++)
            krn_rows8_pack_group(t, N, q + 8 * g * rb, 8, rb, q8 + 8 * g * rb);
        memcpy(q8 + NO / 8 * 8 * rb, q + NO / 8 * 8 * rb, NO % 8 * rb);
        for (int p = 0; p < KRN_X8_PATH_COUNT; p++) {
            if (!krn_x8_path_available(p))
                continue;
            for (int lay = 0; lay < 2; lay++) {
                const int no = NO;
                assert_int_equal(krn_x8_gemm_path(p, t, lay ? KRN_LAYOUT_ROWS8 : KRN_LAYOUT_BLOCKS, lay ? q8 : q, rb,
                                                  no, xq, B, N, y, no, 0), 0);
                for (int b = 0; b < B; b++)
                    for (int o = 0; o < no; o++) {
                        const float one = krn_dot_row_x8_path(KRN_X8_GENERIC, t, q + o * rb, xq + b * xrb, N);
                        if (fbits(y[b * no + o]) != fbits(one))
                            fail_msg("%s path %d layout %d: y[%d][%d] = %a, its lone dot %a", krn_type_name(t), p,
                                     lay, b, o, y[b * no + o], one);
                        y2[b * no + o] = 1.0f;
                        checked++;
                    }
                assert_int_equal(krn_x8_gemm_path(p, t, lay ? KRN_LAYOUT_ROWS8 : KRN_LAYOUT_BLOCKS, lay ? q8 : q, rb,
                                                  no, xq, B, N, y2, no, 1), 0);
                for (int i = 0; i < B * no; i++)
                    assert_int_equal(fbits(y2[i]), fbits(1.0f + y[i]));
            }
        }
        /* rows of 8 need a group and the GGUF row size */
        assert_int_equal(krn_x8_gemm(t, KRN_LAYOUT_ROWS8, q8, rb, 7, xq, B, N, y, 7, 0), -1);
        assert_int_equal(krn_x8_gemm(t, KRN_LAYOUT_ROWS8, q8, rb + 1, NO, xq, B, N, y, NO, 0), -1);
        assert_int_equal(krn_x8_gemm(t, KRN_LAYOUT_PLANES, q, rb, NO, xq, B, N, y, NO, 0), -1);
        free(q);
        free(q8);
    }
    assert_true(checked >= 3 * B * 2 * NO);
    assert_int_equal(krn_x8_gemm(KRN_Q4_K, KRN_LAYOUT_BLOCKS, w, 0, NO, xq, B, 256, y, NO, 0), -1);
    free(xq);
}

/* Rows of 8: pack then unpack gives back the GGUF bytes (a partial group too, its missing rows zero bytes), and
 * the exact mode over a repacked weight (2 groups, 5 GGUF rows after them) gives the bits of the GGUF tensor (acc
 * = 0 and 1). */
static void test_rows_of_8_round_trip_and_the_exact_mode_reads_them_as_blocks(void **state)
{
    (void)state;
    enum { N = 96, NO = 21, B = 3 };
    static float w[NO * N], x[B * N], y[B * NO], y8[B * NO];
    fill(w, NO * N, 0.3f);
    fill(x, B * N, 1.0f);
    const int types[] = {KRN_Q4_0, KRN_Q4_1, KRN_Q8_0};
    for (int k = 0; k < 3; k++) {
        const int t = types[k];
        const size_t rb = krn_row_bytes(t, N);
        uint8_t *q = malloc(NO * rb), *q8 = malloc(NO * rb), *back = malloc(NO * rb);
        assert_true(q && q8 && back);
        for (int o = 0; o < NO; o++)
            krn_quant_row(t, w + o * N, q + o * rb, N);
        assert_true(krn_rows8_supported(t, NO, N));
        for (int g = 0; g < NO / 8; g++)
            krn_rows8_pack_group(t, N, q + 8 * g * rb, 8, rb, q8 + 8 * g * rb);
        assert_memory_not_equal(q, q8, NO * rb);
        /* every byte where kernels/krn.h puts it (a whole group takes the AVX2 transpose where the CPU has it):
         * block j of the group, d of row r at 2r (q4_1's m at 16 + 2r), then chunk c's dword r = the row's quant
         * bytes 4c .. 4c + 3 */
        const int hb = t == KRN_Q4_1 ? 4 : 2, qb = t == KRN_Q8_0 ? 32 : 16;
        const size_t bb = krn_row_bytes(t, 32);
        for (int g = 0; g < NO / 8; g++)
            for (int j = 0; j < N / 32; j++)
                for (int r = 0; r < 8; r++) {
                    const uint8_t *row = q + (size_t)(8 * g + r) * rb + j * bb, *gb = q8 + 8 * g * rb + j * 8 * bb;
                    for (int h = 0; h < hb; h++)
                        assert_int_equal(gb[8 * (h & ~1) + 2 * r + (h & 1)], row[h]);
                    for (int i = 0; i < qb; i++)
                        assert_int_equal(gb[8 * hb + 32 * (i / 4) + 4 * r + i % 4], row[hb + i]);
                }
        for (int g = 0; g < NO / 8; g++)
            krn_rows8_unpack_group(t, N, q8 + 8 * g * rb, 8, rb, back + 8 * g * rb);
        assert_memory_equal(q, back, NO / 8 * 8 * rb);
        krn_rows8_pack_group(t, N, q, 3, rb, q8); /* 3 rows: rows 3..7 of the group are zero bytes */
        for (int j = 0; j < N / 32; j++) {
            const uint8_t *gb = q8 + j * 8 * krn_row_bytes(t, 32);
            for (int r = 3; r < 8; r++)
                assert_int_equal(gb[2 * r] | gb[2 * r + 1], 0);
        }
        krn_rows8_unpack_group(t, N, q8, 3, rb, back);
        assert_memory_equal(q, back, 3 * rb);
        for (int g = 0; g < NO / 8; g++)
            krn_rows8_pack_group(t, N, q + 8 * g * rb, 8, rb, q8 + 8 * g * rb);
        memcpy(q8 + NO / 8 * 8 * rb, q + NO / 8 * 8 * rb, NO % 8 * rb);
        for (int acc = 0; acc < 2; acc++) {
            for (int i = 0; i < B * NO; i++)
                y[i] = y8[i] = 0.5f;
            krn_cpu_matmul(&(krn_cpu_matmul_args){ y, q, x, t, NO, N, B, rb, acc, KRN_F32, 0, KRN_LAYOUT_BLOCKS, 1 });
            krn_cpu_matmul(&(krn_cpu_matmul_args){ y8, q8, x, t, NO, N, B, rb, acc, KRN_F32, 0, KRN_LAYOUT_ROWS8, 1 });
            for (int i = 0; i < B * NO; i++)
                assert_int_equal(fbits(y8[i]), fbits(y[i]));
        }
        free(q);
        free(q8);
        free(back);
    }
    assert_true(krn_rows8_supported(KRN_Q4_1, 12, 64));
    assert_false(krn_rows8_supported(KRN_Q4_1, 7, 64));
    assert_false(krn_rows8_supported(KRN_Q4_K, 16, 256));
    assert_false(krn_rows8_supported(KRN_Q8_0, 16, 48));
    dev_err err = { 0 };
    const krn_weight bad = { KRN_Q4_1, 7, 64, w, KRN_LAYOUT_ROWS8 }, ok = { KRN_Q4_1, 13, 64, w, KRN_LAYOUT_ROWS8 };
    assert_int_equal(krn_layout_check(&ok, 0, &err), 0);
    assert_int_equal(krn_layout_check(&ok, 1, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "CPU format"));
    err = (dev_err){ 0 };
    assert_int_equal(krn_layout_check(&bad, 0, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "n_out >= 8"));
}

/* The exact mode's 8-row kernel (krn_rows8_exact) gives every (row, x row) pair the bits of its lone krn_dot_row:
 * q4_0, q4_1, q8_0, B = 1 .. 9 (every tile of x rows and a remainder), acc = 0 and 1, x spread over 2^-102 ..
 * 2^100 with zeros, every nibble and byte value, block scales from f16 subnormals to 2^15; in AVX2 vectors and,
 * where the CPU has AVX-512F, in pairs of groups (3 groups: a pair and a last group alone). A q4 call whose x holds
 * a value below 2^-102 in magnitude (other than 0), an infinity or a NaN returns 0 and leaves y as it was; a q8_0
 * call takes any finite x. Without the AVX2 path it returns 0. */
static void test_exact_rows_of_8_give_each_pair_the_bits_of_its_lone_dot(void **state)
{
    (void)state;
    enum { N = 128, NO = 24, BMAX = 9 };
    static float w[NO * N], x[BMAX * N], y[BMAX * NO], want[BMAX * NO];
    fill(w, NO * N, 1.0f);
    const int types[] = {KRN_Q4_0, KRN_Q4_1, KRN_Q8_0};
    const int avx2 = krn_quant_path() == KRN_PATH_AVX2;
    for (int k = 0; k < 3; k++) {
        const int t = types[k];
        const size_t rb = krn_row_bytes(t, N), bb = krn_row_bytes(t, 32);
        uint8_t *q = malloc(NO * rb), *q8 = malloc(NO * rb);
        assert_true(q && q8);
        for (int o = 0; o < NO; o++)
            krn_quant_row(t, w + o * N, q + o * rb, N);
        for (int o = 0; o < NO; o++) /* block scales from an f16 subnormal to 2^15, positive and negative */
            for (int j = 0; j < N / 32; j++) {
                const uint16_t d = (uint16_t)((o * 4 + j) % 5 == 0 ? 0x0003 : (o * 4 + j) % 5 == 1 ? 0x7800 : 0x2c00 + 97 * o + j);
                uint8_t *b = q + o * rb + j * bb;
                memcpy(b, &d, 2);
                if (j == 1)
                    b[1] |= 0x80;
            }
        for (int g = 0; g < NO / 8; g++)
            krn_rows8_pack_group(t, N, q + 8 * g * rb, 8, rb, q8 + 8 * g * rb);
        const int paths = 1 + krn_rows8_exact_wide_available(); /* AVX2 vectors; pairs of groups in AVX-512 */
        for (int B = 1; B <= BMAX; B++)
            for (int k = 0; k < 2 * paths; k++) {
                const int acc = k % 2, wide = k / 2;
                for (int i = 0; i < B * N; i++) { /* magnitudes 2^-102 .. 2^100, zeros, both signs */
                    const int e = (int)((i * 37 + B) % 203) - 102;
                    x[i] = i % 11 == 0 ? 0.0f : (i % 2 ? -1.0f : 1.0f) * ldexpf(1.0f + 0.5f * fabsf(frand()), e);
                }
                x[3] = 0x1p-102f;
                for (int i = 0; i < B * NO; i++)
                    y[i] = want[i] = 0.25f * (float)(i % 3);
                for (int b = 0; b < B; b++)
                    for (int o = 0; o < NO; o++) {
                        const float v = krn_dot_row(t, q + o * rb, x + b * N, N);
                        want[b * NO + o] = acc ? want[b * NO + o] + v : v;
                    }
                assert_int_equal(krn_rows8_exact_path(wide, t, q8, rb, NO / 8, N, x, N, B, y, NO, acc), avx2);
                if (!avx2)
                    continue;
                for (int i = 0; i < B * NO; i++)
                    assert_int_equal(fbits(y[i]), fbits(want[i]));
            }
        const float outside[] = {0x1p-103f, 0x1p-140f, INFINITY, NAN}; /* q4: out of the kernel's range */
        for (int i = 0; i < 4; i++) {
            for (int v = 0; v < 2 * N; v++)
                x[v] = 0.5f;
            x[N + 77] = outside[i];
            for (int v = 0; v < 2 * NO; v++)
                y[v] = 7.0f;
            const int ran = krn_rows8_exact(t, q8, rb, NO / 8, N, x, N, 2, y, NO, 0);
            assert_int_equal(ran, avx2 && t == KRN_Q8_0 && i < 2);
            if (!ran)
                for (int v = 0; v < 2 * NO; v++)
                    assert_int_equal(fbits(y[v]), fbits(7.0f));
        }
        assert_int_equal(krn_rows8_exact(KRN_Q4_K, q8, rb, NO / 8, N, x, N, 1, y, NO, 0), 0);
        assert_int_equal(krn_rows8_exact(t, q8, rb, NO / 8, N - 16, x, N, 1, y, NO, 0), 0);
        free(q);
        free(q8);
    }
}

/* The integer sums at the ends of their ranges, where the paths compute them differently (the 512-bit VNNI
 * path moves the q4_0 and q8_0 offsets into a correction term): weight bytes of -128 and 127 (q8_0), nibbles 0
 * and 15, against x quants of -127 and 127, give every path the generic path's bits, which equal the exact sum
 * (powers of two for d, so every float step is exact). Rows: 8 (two row pairs of the 4-row tile) + 1. */
static void test_int8_x_gemm_is_exact_at_the_ends_of_the_quant_ranges_on_every_path(void **state)
{
    (void)state;
    enum { N = 64, NO = 9, B = 3 };
    const size_t xrb = krn_x8_row_bytes(N);
    static uint8_t xq[B * 128];
    static float y[B * NO];
    assert_true(xrb <= 128);
    memset(xq, 0, sizeof xq);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < N; i++) {
            ((int8_t *)xq)[b * xrb + i] = (int8_t)((i + b) % 3 == 0 ? -127 : 127);
            const float ds[2] = {0.5f, 0.0f}; /* s = d * sum q is only read for q4_1 */
            if (i % 32 == 0)
                memcpy(xq + b * xrb + N + 8 * (i / 32), ds, sizeof ds);
        }
    const int types[] = {KRN_Q4_0, KRN_Q4_1, KRN_Q8_0};
    int checked = 0;
    for (int k = 0; k < 3; k++) {
        const int t = types[k];
        const size_t rb = krn_row_bytes(t, N), bb = rb / (N / 32), qo = t == KRN_Q4_1 ? 4 : 2;
        uint8_t *w = calloc(NO, rb);
        assert_non_null(w);
        for (int o = 0; o < NO; o++)
            for (int j = 0; j < N / 32; j++) {
                uint8_t *blk = w + o * rb + j * bb;
                blk[0] = 0x00, blk[1] = 0x3C; /* d = 1.0 (f16) */
                if (t == KRN_Q4_1)
                    blk[2] = 0x00, blk[3] = 0x00; /* m = 0 */
                for (size_t i = 0; i < bb - qo; i++)
                    blk[qo + i] = t == KRN_Q8_0 ? (uint8_t)((i + o) % 2 ? 0x80 : 0x7F)  /* -128, 127 */
                                                : (uint8_t)((i + o) % 2 ? 0x0F : 0xF0); /* nibbles 15/0, 0/15 */
            }
        for (int p = 0; p < KRN_X8_PATH_COUNT; p++) {
            if (!krn_x8_path_available(p))
                continue;
            assert_int_equal(krn_x8_gemm_path(p, t, KRN_LAYOUT_BLOCKS, w, rb, NO, xq, B, N, y, NO, 0), 0);
            for (int b = 0; b < B; b++)
                for (int o = 0; o < NO; o++) {
                    double want = 0.0;
                    for (int i = 0; i < N; i++) {
                        const uint8_t *q = w + o * rb + (i / 32) * bb + qo;
                        const int e = i % 32;
                        const int wi = t == KRN_Q8_0 ? ((const int8_t *)q)[e]
                                                     : (e < 16 ? q[e] & 0xF : q[e - 16] >> 4) - (t == KRN_Q4_0 ? 8 : 0);
                        want += (double)wi * ((const int8_t *)xq)[b * xrb + i] * 0.5;
                    }
                    if (y[b * NO + o] != (float)want)
                        fail_msg("%s path %d: y[%d][%d] = %g, the exact sum %g", krn_type_name(t), p, b, o,
                                 y[b * NO + o], want);
                    checked++;
                }
        }
        free(w);
    }
    assert_true(checked >= 3 * B * NO * 2); /* the generic path and at least one SIMD path on x86 */
}

/* The stage balancer's cost models: the exact CPU dot makes a q8_0 element cheaper than a q4_1 one, the fast
 * mode's int8 GEMM the reverse (q4 rows of 8 take one product per 2 elements, q8_0 a sign and a widening per 4);
 * CUDA counts bytes; types the fast mode does not multiply cost the same in both CPU modes; a model the table
 * does not know costs 0. */
static void test_weight_cost_models_rank_q8_0_against_q4_1_by_the_matmul_mode(void **state)
{
    (void)state;
    assert_true(krn_weight_cost(KRN_Q8_0, 8, 64, KRN_COST_CPU) < krn_weight_cost(KRN_Q4_1, 8, 64, KRN_COST_CPU));
    assert_true(krn_weight_cost(KRN_Q8_0, 8, 64, KRN_COST_CPU_X8) > krn_weight_cost(KRN_Q4_1, 8, 64, KRN_COST_CPU_X8));
    assert_true(krn_weight_cost(KRN_Q8_0, 8, 64, KRN_COST_CUDA) == 8.0 * krn_row_bytes(KRN_Q8_0, 64));
    assert_true(krn_weight_cost(KRN_Q6_K, 8, 256, KRN_COST_CPU_X8) == krn_weight_cost(KRN_Q6_K, 8, 256, KRN_COST_CPU));
    assert_true(krn_weight_cost(KRN_Q4_1, 8, 64, 7) == 0.0);
}

/* q5_K's CPU cost lies between q4_K's and q6_K's (kernels/krn.c); on CUDA it is its bytes, 176 per 256. */
static void test_q5_K_costs_between_q4_K_and_q6_K(void **state)
{
    (void)state;
    const double c4 = krn_weight_cost(KRN_Q4_K, 8, 256, KRN_COST_CPU);
    const double c5 = krn_weight_cost(KRN_Q5_K, 8, 256, KRN_COST_CPU);
    assert_true(c4 < c5 && c5 < krn_weight_cost(KRN_Q6_K, 8, 256, KRN_COST_CPU));
    assert_true(krn_weight_cost(KRN_Q5_K, 8, 512, KRN_COST_CUDA) == 8.0 * 2 * 176);
}

typedef struct dot_job {
    const void *row;
    const float *x;
    int type;
    uint32_t bits[64];
} dot_job;

static void *dot_thread(void *arg)
{
    dot_job *j = arg;
    for (int i = 0; i < 64; i++)
        j->bits[i] = fbits(krn_dot_row(j->type, j->row, j->x, 512));
    return NULL;
}

/* The path is picked on first use; threads racing to that first use must agree (TSan checks the pick). */
static void test_concurrent_dots_from_many_threads_agree(void **state)
{
    (void)state;
    enum { N = 512, T = 4 };
    static float w[N], x[N];
    static uint8_t q[1024];
    fill(w, N, 0.1f);
    fill(x, N, 1.0f);
    krn_quant_row(KRN_Q4_K, w, q, N);
    dot_job jobs[T];
    pthread_t th[T];
    for (int i = 0; i < T; i++) {
        jobs[i] = (dot_job){.row = q, .x = x, .type = KRN_Q4_K};
        assert_int_equal(pthread_create(&th[i], NULL, dot_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < T; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    const uint32_t want = fbits(krn_dot_row(KRN_Q4_K, q, x, N));
    for (int i = 0; i < T; i++)
        for (int k = 0; k < 64; k++)
            assert_int_equal(jobs[i].bits[k], want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_dots_from_many_threads_agree), /* first: races the path pick */
        cmocka_unit_test(test_type_table_sizes_match_ggml),
        cmocka_unit_test(test_int8_x_dot_gives_the_same_bits_on_every_path_and_stays_within_half_a_quantum),
        cmocka_unit_test(test_f16_and_bf16_convert_exactly_and_round_to_nearest_even),
        cmocka_unit_test(test_every_type_round_trips_within_its_tolerance),
        cmocka_unit_test(test_legacy_quantizers_match_ggml_bytes),
        cmocka_unit_test(test_hand_made_legacy_blocks_dequantize_exactly),
        cmocka_unit_test(test_hand_made_q4_K_block_dequantizes_exactly),
        cmocka_unit_test(test_hand_made_q5_K_block_dequantizes_exactly),
        cmocka_unit_test(test_q5_K_round_trip_error_is_about_half_of_q4_K),
        cmocka_unit_test(test_q5_K_dot_is_the_lane_sum_on_every_path_at_the_ends_of_its_range),
        cmocka_unit_test(test_hand_made_q6_K_block_dequantizes_exactly),
        cmocka_unit_test(test_dot_equals_the_documented_lane_sum_and_the_double_sum),
        cmocka_unit_test(test_dot_is_bit_identical_across_calls_and_buffer_alignments),
        cmocka_unit_test(test_bad_length_or_type_gives_nan_not_a_crash),
        cmocka_unit_test(test_k_quant_blocks_of_any_bytes_agree_on_every_path),
        cmocka_unit_test(test_batched_dot_gives_the_bits_of_single_dots),
        cmocka_unit_test(test_int8_x_gemm_is_exact_at_the_ends_of_the_quant_ranges_on_every_path),
        cmocka_unit_test(test_rows_of_8_round_trip_and_the_exact_mode_reads_them_as_blocks),
        cmocka_unit_test(test_exact_rows_of_8_give_each_pair_the_bits_of_its_lone_dot),
        cmocka_unit_test(test_weight_cost_models_rank_q8_0_against_q4_1_by_the_matmul_mode),
        cmocka_unit_test(test_q5_K_costs_between_q4_K_and_q6_K),
        cmocka_unit_test(test_int8_x_gemm_gives_each_pair_the_bits_of_its_lone_dot_on_every_path), /* last: draws from the shared generator */
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
