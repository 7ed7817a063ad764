/* kernels/x8_kquant.c: the fast mode's K-quant matmul (q4_K, q5_K, q6_K in GGUF blocks against int8 x blocks). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/cpu/krn_cpu.h"
#include "kernels/krn.h"
#include "kernels/quant.h"
#include "kernels/quant_batch.h"
#include "kernels/quant_impl.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void) /* [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static const int ktypes[] = {KRN_Q4_K, KRN_Q5_K, KRN_Q6_K};
#define N_KTYPES 3

/* Weights (n_out, n) of type t, quantized from uneven values; row 0 at the ends of the quant range: q4_K nibbles
 * 15 and q5_K quants 31 (scales and mins at 63), q6_K quants 63 (and 0 in the second half) with scales of -128
 * and 127. */
static uint8_t *weights(int t, int n_out, int n)
{
    const size_t rb = krn_row_bytes(t, n);
    uint8_t *q = malloc(rb * (size_t)n_out);
    float *row = malloc(sizeof(float) * (size_t)n);
    assert_true(q && row);
    for (int o = 0; o < n_out; o++) {
        for (int i = 0; i < n; i++)
            row[i] = frand() * (1.0f + (float)((o + i / 32) % 5));
        krn_quant_row(t, row, q + (size_t)o * rb, n);
    }
    for (int s = 0; s < n / 256; s++) {
        uint8_t *sb = q + (size_t)s * krn_type_block_bytes(t);
        if (t != KRN_Q6_K) {
            memset(sb + 4, 0xFF, krn_type_block_bytes(t) - 4); /* every 6-bit scale and min 63, every quant 15 / 31 */
        } else {
            memset(sb, 0xFF, 128 + 32); /* half 0: every quant 63 */
            memset(sb + 64, 0x00, 64);  /* half 1: low bits 0 ... */
            memset(sb + 128 + 32, 0x00, 32); /* ... high bits 0: quants 0 */
            for (int k = 0; k < 16; k++)
                sb[offsetof(blk_q6_K, scales) + k] = (uint8_t)(k % 2 ? 127 : 0x80);
        }
    }
    free(row);
    return q;
}

/* x rows (B, n) with magnitudes spread by block; row 0 all +1 (every quant 127) */
static void xrows(float *x, int B, int n)
{
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++)
            x[(size_t)b * n + i] = b == 0 ? 1.0f : frand() * ldexpf(1.0f, (i / 32 + b) % 9 - 4);
}

/* The double-precision sum of the dequantized weights times the dequantized x8 (dx_j * q): the value the
 * defined result rounds; bound: 2^-20 of the sum of magnitudes. */
static void near_the_double_sum(int t, const uint8_t *q, size_t rb, const uint8_t *xq, size_t xrb, int n, float y,
                                int o, int b)
{
    float *w = malloc(sizeof(float) * (size_t)n);
    assert_non_null(w);
    krn_dequant_row(t, q + (size_t)o * rb, w, n);
    const int8_t *xr = (const int8_t *)(xq + (size_t)b * xrb);
    double sum = 0.0, mag = 0.0;
    for (int i = 0; i < n; i++) {
        float dx;
        memcpy(&dx, xq + (size_t)b * xrb + (size_t)n + 8 * (size_t)(i / 32), 4);
        const double v = (double)w[i] * (double)dx * (double)xr[i];
        sum += v;
        mag += fabs(v);
    }
    assert_true(fabs((double)y - sum) <= ldexp(mag, -20) + 1e-30);
    free(w);
}

/* Every pair of a K-quant GEMM: the portable and AVX2 paths give the same bits, each (row, x row) the bits of its
 * lone dot whatever B and the tile (n_out 11: two 4-row tiles and a 3-row rest), acc = 1 adds to y, and each value
 * is the double sum of its dequantized factors within 2^-20 of their magnitudes (the ends of the quant ranges in
 * row 0 and x row 0: the AVX2 byte products stay exact). */
static void test_kquant_gemm_gives_each_pair_the_bits_of_its_lone_dot_on_every_path(void **state)
{
    (void)state;
    enum { NO = 11, BMAX = 5 };
    const int ns[] = {256, 768};
    for (int k = 0; k < N_KTYPES; k++)
        for (int in = 0; in < 2; in++) {
            const int t = ktypes[k], n = ns[in];
            const size_t rb = krn_row_bytes(t, n), xrb = krn_x8_row_bytes(n);
            uint8_t *q = weights(t, NO, n), *xq = malloc(xrb * BMAX);
            float *x = malloc(sizeof(float) * (size_t)BMAX * n), y[BMAX * NO], y2[BMAX * NO];
            assert_true(xq && x);
            xrows(x, BMAX, n);
            krn_x8_quantize_host(xq, x, BMAX, n);
            for (int B = 1; B <= BMAX; B++)
                for (int acc = 0; acc < 2; acc++) {
                    for (int i = 0; i < B * NO; i++)
                        y[i] = y2[i] = 0.5f * (float)(i % 3);
                    assert_int_equal(krn_x8_gemm_path(KRN_X8_GENERIC, t, KRN_LAYOUT_BLOCKS, q, rb, NO, xq, B, n, y,
                                                      NO, acc), 0);
                    if (krn_x8_path_available(KRN_X8_AVX2)) {
                        assert_int_equal(krn_x8_gemm_path(KRN_X8_AVX2, t, KRN_LAYOUT_BLOCKS, q, rb, NO, xq, B, n, y2,
                                                          NO, acc), 0);
                        for (int i = 0; i < B * NO; i++)
                            assert_int_equal(fbits(y2[i]), fbits(y[i]));
                    }
                    for (int b = 0; b < B; b++)
                        for (int o = 0; o < NO; o++) {
                            const float lone = krn_dot_row_x8(t, q + (size_t)o * rb, xq + (size_t)b * xrb, n);
                            const float want = acc ? 0.5f * (float)((b * NO + o) % 3) + lone : lone;
                            assert_int_equal(fbits(y[b * NO + o]), fbits(want));
                            if (!acc)
                                near_the_double_sum(t, q, rb, xq, xrb, n, y[b * NO + o], o, b);
                        }
                }
            free(q);
            free(xq);
            free(x);
        }
}

/* The CPU matmul in the fast mode (x8 = 1) takes K-quants through the int8 GEMM: its outputs are those of
 * quantizing x and calling krn_x8_gemm; the exact mode (x8 = 0) stays the f32 dot. A K-quant weight in rows of
 * 8, a row length that is not a whole super-block, or row bytes that do not match are refused (-1). */
static void test_fast_mode_matmul_takes_k_quants_through_the_int8_gemm(void **state)
{
    (void)state;
    enum { N = 512, NO = 9, B = 3 };
    for (int k = 0; k < N_KTYPES; k++) {
        const int t = ktypes[k];
        assert_true(krn_x8_type_ok(t));
        const size_t rb = krn_row_bytes(t, N), xrb = krn_x8_row_bytes(N);
        uint8_t *q = weights(t, NO, N), *xq = malloc(xrb * B);
        float x[B * N], y[B * NO], want[B * NO];
        assert_non_null(xq);
        xrows(x, B, N);
        krn_cpu_matmul(&(krn_cpu_matmul_args){ y, q, x, t, NO, N, B, rb, 0, KRN_F32, 1, KRN_LAYOUT_BLOCKS, 1 });
        krn_x8_quantize_host(xq, x, B, N);
        assert_int_equal(krn_x8_gemm(t, KRN_LAYOUT_BLOCKS, q, rb, NO, xq, B, N, want, NO, 0), 0);
        for (int i = 0; i < B * NO; i++)
            assert_int_equal(fbits(y[i]), fbits(want[i]));
        krn_cpu_matmul(&(krn_cpu_matmul_args){ y, q, x, t, NO, N, B, rb, 0, KRN_F32, 0, KRN_LAYOUT_BLOCKS, 1 });
        for (int b = 0; b < B; b++)
            for (int o = 0; o < NO; o++)
                assert_int_equal(fbits(y[b * NO + o]), fbits(krn_dot_row(t, q + (size_t)o * rb, x + b * N, N)));
        assert_int_equal(krn_x8_gemm(t, KRN_LAYOUT_ROWS8, q, rb, NO, xq, B, N, y, NO, 0), -1);
        assert_int_equal(krn_x8_gemm(t, KRN_LAYOUT_BLOCKS, q, rb + 1, NO, xq, B, N, y, NO, 0), -1);
        assert_int_equal(krn_x8_gemm(t, KRN_LAYOUT_BLOCKS, q, krn_row_bytes(t, 256), NO, xq, B, N - 224, y, NO, 0),
                         -1);
        assert_true(isnan(krn_dot_row_x8(t, q, xq, N - 224)));
        free(q);
        free(xq);
    }
    assert_false(krn_x8_type_ok(KRN_F16));
    assert_false(krn_x8_kquant_type_ok(KRN_Q4_1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kquant_gemm_gives_each_pair_the_bits_of_its_lone_dot_on_every_path),
        cmocka_unit_test(test_fast_mode_matmul_takes_k_quants_through_the_int8_gemm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
