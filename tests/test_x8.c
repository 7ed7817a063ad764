/* x quantized to int8 per 32-block (kernels/krn.h, kernels/x8.c): the row layout, the rounding checked
 * against a definition written here (|x - d q| <= d/2, the block's largest |x| at +-127), zero and NaN
 * blocks, the CPU op's bytes on a stream, the refusals, the x8 matmul forms on the CPU (which reads x: it
 * has no planar weights), and the MEMRA_CUDA_X8 door at scratch creation. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "support/test_rand.h"
#include "kernels/krn.h"
#include "model/llama.h"
#include "support/gguf_tiny.h"

static uint64_t rng = 77;
static float frand(void) { return test_frand(&rng); } /* uniform in [-1, 1) */

static void test_row_bytes_hold_quants_and_scales_rounded_to_16(void **state)
{
    (void)state;
    assert_int_equal(krn_x8_row_bytes(32), 48);     /* 32 + 8 -> 48 */
    assert_int_equal(krn_x8_row_bytes(64), 80);     /* 64 + 16 */
    assert_int_equal(krn_x8_row_bytes(4096), 5120); /* 4096 + 1024 */
    assert_int_equal(krn_x8_row_bytes(96), 128);    /* 96 + 24 = 120 -> 128 */
    assert_int_equal(krn_x8_row_bytes(0), 0);
    assert_int_equal(krn_x8_row_bytes(48), 0);
    assert_int_equal(krn_x8_row_bytes(-32), 0);
}

/* Every block of every row: q within half a step of x / d, the largest |x| at +-127, s = d * sum q, padding 0;
 * a block with a NaN or an infinity: q = 0, d = s = NaN (its products must not come out finite). */
static void test_quantize_rounds_each_block_to_its_own_scale(void **state)
{
    (void)state;
    enum { B = 3, N = 96 };
    float x[B * N];
    for (int i = 0; i < B * N; i++)
        x[i] = frand() * (float)(1 + i % 7) * 10.0f;
    for (int i = 32; i < 64; i++) /* row 0, block 1: all zero */
        x[i] = 0.0f;
    x[N + 5] = NAN;           /* row 1, block 0 */
    x[2 * N + 70] = INFINITY; /* row 2, block 2 */
    const size_t rb = krn_x8_row_bytes(N);
    uint8_t *xq = malloc(B * rb);
    memset(xq, 0xAB, B * rb);
    krn_x8_quantize_host(xq, x, B, N);
    for (int b = 0; b < B; b++) {
        const uint8_t *row = xq + b * rb;
        for (int j = 0; j < N / 32; j++) {
            const float *xb = x + b * N + 32 * j;
            const int8_t *q = (const int8_t *)row + 32 * j;
            float ds[2];
            memcpy(ds, row + N + 8 * j, sizeof ds);
            double amax = 0.0;
            int finite = 1;
            for (int i = 0; i < 32; i++) {
                amax = fmax(amax, fabs(xb[i]));
                finite &= isfinite(xb[i]) != 0;
            }
            if (!finite) {
                assert_true(isnan(ds[0]) && isnan(ds[1]));
                for (int i = 0; i < 32; i++)
                    assert_int_equal(q[i], 0);
                continue;
            }
            assert_float_equal(ds[0], (float)(amax / 127.0), 0.0f);
            int sum = 0, hit = 0;
            for (int i = 0; i < 32; i++) {
                sum += q[i];
                if (amax == 0.0) {
                    assert_int_equal(q[i], 0);
                    continue;
                }
                assert_true(q[i] >= -127 && q[i] <= 127);
                /* the defined rounding, element by element (the AVX2 block code gives the scalar code's bytes) */
                assert_int_equal(q[i], (int)fminf(fmaxf(rintf(xb[i] / ds[0]), -127.0f), 127.0f));
                assert_true(fabs((double)xb[i] - (double)ds[0] * q[i]) <= 0.5 * ds[0] * (1.0 + 1e-6));
                hit |= fabs(xb[i]) == amax && abs(q[i]) == 127;
            }
            assert_true(amax == 0.0 || hit);
            assert_float_equal(ds[1], ds[0] * (float)sum, 0.0f);
        }
        for (size_t k = N + N / 4; k < rb; k++)
            assert_int_equal(row[k], 0);
    }
    free(xq);
}

/* The CPU op on a stream writes the host form's bytes; bad shapes are refused before anything is enqueued. */
static void test_the_cpu_op_gives_the_host_bytes_and_refuses_bad_shapes(void **state)
{
    (void)state;
    enum { B = 2, N = 64 };
    dev_err err = { 0 };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    assert_non_null(p);
    dev_device *d = dev_platform_device(p, 0);
    dev_stream *s = dev_stream_create(d, "x8", &err);
    const size_t rb = krn_x8_row_bytes(N);
    float xh[B * N];
    for (int i = 0; i < B * N; i++)
        xh[i] = frand();
    float *x = dev_malloc(d, sizeof xh, &err);
    uint8_t *xq = dev_malloc(d, B * rb, &err), want[B * 80], got[B * 80];
    assert_true(s && x && xq && rb == 80);
    assert_int_equal(dev_copy_h2d_sync(d, x, xh, sizeof xh, &err), 0);
    assert_int_equal(krn_quantize_x8_async(s, xq, x, B, N), 0);
    assert_int_equal(dev_copy_d2h_async(s, got, xq, B * rb), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    krn_x8_quantize_host(want, xh, B, N);
    assert_memory_equal(got, want, B * rb);
    assert_int_equal(krn_quantize_x8_async(s, xq, x, B, 48), MEMRA_E_INVAL); /* n % 32 */
    assert_int_equal(krn_quantize_x8_async(s, xq, x, 0, N), MEMRA_E_INVAL);
    assert_int_equal(krn_quantize_x8_async(s, NULL, x, B, N), MEMRA_E_INVAL);
    assert_int_equal(krn_quantize_x8_async(NULL, xq, x, B, N), MEMRA_E_INVAL);
    dev_stream_destroy(s);
    dev_free(d, x);
    dev_free(d, xq);
    dev_platform_close(p);
}

/* On the CPU the x8 forms read x (no PLANES weight exists there): the plain ops' bits; an x8 for an n_in
 * that cannot be quantized is refused. */
static void test_x8_matmuls_on_the_cpu_give_the_plain_bits(void **state)
{
    (void)state;
    enum { B = 2, NIN = 64, NOUT = 5 };
    dev_err err = { 0 };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    dev_device *d = dev_platform_device(p, 0);
    dev_stream *s = dev_stream_create(d, "x8mm", &err);
    const size_t rb = krn_row_bytes(KRN_Q4_1, NIN);
    uint8_t wh[NOUT * 48];
    float src[NIN], xh[B * NIN];
    assert_true(rb * NOUT <= sizeof wh);
    for (int o = 0; o < NOUT; o++) {
        for (int k = 0; k < NIN; k++)
            src[k] = frand();
        krn_quant_row(KRN_Q4_1, src, wh + o * rb, NIN);
    }
    for (int i = 0; i < B * NIN; i++)
        xh[i] = frand();
    void *w = dev_malloc(d, rb * NOUT, &err), *xq = dev_malloc(d, B * krn_x8_row_bytes(NIN), &err);
    float *x = dev_malloc(d, sizeof xh, &err), *y0 = dev_malloc(d, sizeof(float) * B * NOUT, &err),
          *y1 = dev_malloc(d, sizeof(float) * B * NOUT, &err);
    assert_int_equal(dev_copy_h2d_sync(d, w, wh, rb * NOUT, &err), 0);
    assert_int_equal(dev_copy_h2d_sync(d, x, xh, sizeof xh, &err), 0);
    assert_int_equal(dev_copy_h2d_sync(d, y0, xh, sizeof(float) * B * NOUT, &err), 0);
    assert_int_equal(dev_copy_h2d_sync(d, y1, xh, sizeof(float) * B * NOUT, &err), 0);
    const krn_weight W = { KRN_Q4_1, NOUT, NIN, w, KRN_LAYOUT_BLOCKS };
    assert_int_equal(krn_quantize_x8_async(s, xq, x, B, NIN), 0);
    assert_int_equal(krn_matmul_acc_async(s, y0, &W, x, B), 0);
    const krn_mm_x in = { .x = x, .type = KRN_F32, .x8 = xq };
    assert_int_equal(krn_matmul_acc_x_async(s, y1, &W, &in, B), 0);
    float a[B * NOUT], b[B * NOUT];
    assert_int_equal(dev_copy_d2h_async(s, a, y0, sizeof a), 0);
    assert_int_equal(dev_copy_d2h_async(s, b, y1, sizeof b), 0);
    const krn_mm_part part = { y1, &W };
    assert_int_equal(krn_matmul_parts_x_async(s, &part, 1, &in, B), 0);
    assert_int_equal(krn_matmul_async(s, y0, &W, x, B), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(dev_copy_d2h_async(s, a, y0, sizeof a), 0);
    assert_int_equal(dev_copy_d2h_async(s, b, y1, sizeof b), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    assert_memory_equal(a, b, sizeof a);
    const krn_weight odd = { KRN_F32, NOUT, 40, w, KRN_LAYOUT_BLOCKS }; /* 40 % 32 != 0: no x8 for it */
    assert_int_equal(krn_matmul_acc_x_async(s, y1, &odd, &in, B), MEMRA_E_INVAL);
    dev_stream_destroy(s);
    dev_free(d, w), dev_free(d, xq), dev_free(d, x), dev_free(d, y0), dev_free(d, y1);
    dev_platform_close(p);
}

/* MEMRA_CUDA_X8 is read when a stage's scratch is created: a bad value fails it naming the variable and the
 * allowed values; 1 on the CPU backend (no planar weights) creates it as before. */
static void test_the_door_is_checked_at_scratch_creation(void **state)
{
    (void)state;
    char path[256];
    dev_err err = { 0 };
    assert_int_equal(gguf_tiny_write_temp(path, sizeof path, NULL, &err), 0);
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    mdl_model *m = mdl_model_load(path, &(mdl_load_params){ .platform = p }, &err);
    assert_non_null(m);
    setenv("MEMRA_CUDA_X8", "yes", 1);
    dev_err e1 = { 0 };
    assert_null(mdl_scratch_create(m, dev_platform_device(p, 0), 4, &e1));
    assert_int_equal(e1.code, MEMRA_E_INVAL);
    assert_non_null(strstr(e1.msg, "MEMRA_CUDA_X8=\"yes\""));
    assert_non_null(strstr(e1.msg, "allowed 0"));
    setenv("MEMRA_CUDA_X8", "1", 1);
    mdl_scratch *sc = mdl_scratch_create(m, dev_platform_device(p, 0), 4, &err);
    assert_non_null(sc);
    mdl_scratch_destroy(sc);
    unsetenv("MEMRA_CUDA_X8");
    mdl_model_free(m);
    dev_platform_close(p);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_bytes_hold_quants_and_scales_rounded_to_16),
        cmocka_unit_test(test_quantize_rounds_each_block_to_its_own_scale),
        cmocka_unit_test(test_the_cpu_op_gives_the_host_bytes_and_refuses_bad_shapes),
        cmocka_unit_test(test_x8_matmuls_on_the_cpu_give_the_plain_bits),
        cmocka_unit_test(test_the_door_is_checked_at_scratch_creation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
