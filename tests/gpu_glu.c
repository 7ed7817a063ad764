/* krn_matmul_swiglu_x_async on the GPU (kernels/krn.h; docs/cuda-kernels.md "gate/up + swiglu in one GEMV"):
 *   - at B = 1 with float weights the fused GEMV runs (krn_cuda_glu_fits) and its y has, byte for byte, the bits
 *     of the two ops it replaces (the parts GEMV into gate and up, then swiglu), for every float weight type and
 *     every activation type (y of x's type), over shapes that give a warp one unit, several units and a clamped
 *     last batch;
 *   - where it cannot run (B = 3, a block-type weight, y of another type than x) the op composes the two ops and
 *     still has their bits;
 *   - y over x (the forward's 16-bit activation buffer holds xb and h alike): krn_cuda_glu_fits refuses any
 *     shared byte, and the op, composing the two ops, gives the bits of the fused GEMV over a separate copy of x;
 *   - bad arguments (gate and up of different shapes, a 16-bit y over its scratch, B = 0, no x) are refused by the
 *     op, and arguments outside the fused GEMV (a misaligned x) by its CUDA entry, with a message.
 * tests/gpu.cmake runs it again with MEMRA_CUDA_MM_DEEP=0 (the fused GEMV walking 4 loads per batch, not 8).
 * Outputs are poisoned with different bytes before each compared run, so a path that writes nothing cannot pass.
 * Exits 77 (skipped) without a GPU. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#ifdef MEMRA_HAVE_CUDA

#include <cuda_runtime_api.h>
#include "device/dev.h"
#include "kernels/krn.h"
#include "kernels/quant.h"
#include "kernels/cuda/krn_cuda.h"
#include "support/cuda_fix.h"
#include "support/cuda_ref.h"

static dev_platform *g_p;
static dev_stream *g_s; /* the op table's stream (device 0) */

static int setup(void **state) {
    dev_err err = {0};
    if (two_streams_setup(state))
        return -1;
    g_p = dev_platform_open(DEV_KIND_CUDA, 0, &err);
    g_s = g_p ? dev_stream_create(dev_platform_device(g_p, 0), "glu", &err) : NULL;
    if (g_s && krn_stream_set_batch_invariant(g_s, &err) != 0) /* the ops against the GEMV at any B */
        g_s = NULL;
    if (!g_s)
        fprintf(stderr, "gpu_glu: %s\n", err.msg);
    return g_s ? 0 : -1;
}

static int teardown(void **state) {
    dev_stream_destroy(g_s);
    dev_platform_close(g_p);
    return two_streams_teardown(state);
}

/* A random x (B, n_in) of activation type xt on the device (16-bit: random values rounded). */
static void *rand_x(int xt, int B, int n_in) {
    const size_t n = (size_t)B * n_in;
    float *h = malloc(sizeof(float) * n);
    uint16_t *h16 = malloc(2 * n);
    assert_true(h && h16);
    cuda_ref_rand_floats(h, n);
    for (size_t i = 0; i < n; i++)
        h16[i] = xt == KRN_F16 ? krn_f32_to_f16(h[i]) : krn_f32_to_bf16(h[i]);
    void *d = xt == KRN_F32 ? dupload(h, sizeof(float) * n) : dupload(h16, 2 * n);
    free(h), free(h16);
    return d;
}

/* A random (n, n_in) weight of type t on the device. */
static krn_weight rand_w(int t, int n, int n_in) {
    size_t bytes;
    uint8_t *h = cuda_fix_rand_blocks(cuda_ref_type_of(t), n, n_in, &bytes);
    krn_weight w = {.type = t, .n_out = n, .n_in = n_in, .data = dupload(h, bytes)};
    free(h);
    return w;
}

/* The op through the op table (y poisoned 0xFE) and the two ops on g_s1 (y poisoned 0xFF): the same bytes.
 * fused: what krn_cuda_glu_fits must say of these arguments. */
static void check(int wt, int xt, int yt, int n, int n_in, int B, int fused) {
    const size_t ne = (size_t)B * n, yb = ne * krn_act_bytes(yt);
    krn_weight Wg = rand_w(wt, n, n_in), Wu = rand_w(wt, n, n_in);
    void *dx = rand_x(xt, B, n_in), *y1 = dalloc(yb), *y2 = dalloc(yb);
    float *g = dalloc(sizeof(float) * ne), *u = dalloc(sizeof(float) * ne);
    const krn_mm_x xx = {.x = dx, .type = xt};
    char what[160];
    snprintf(what, sizeof what, "gate/up + swiglu, W %s %dx%d, x %s, y %s, B=%d", krn_type_name(wt), n, n_in,
             krn_type_name(xt), krn_type_name(yt), B);
    if (krn_cuda_glu_fits(y1, yt, &Wg, &Wu, &xx, B) != fused)
        fail_msg("%s: krn_cuda_glu_fits says %d, want %d", what, !fused, fused);
    dev_err err = {0};
    dfill(y1, 0xFE, yb), dfill(y2, 0xFF, yb);
    if (krn_matmul_swiglu_x_async(g_s, y1, yt, g, u, &Wg, &Wu, &xx, B) != 0 || dev_stream_sync(g_s, &err) != 0)
        fail_msg("%s: the op failed: %s", what, err.msg);
    const krn_mm_part parts[2] = {{g, &Wg}, {u, &Wu}};
    if (krn_cuda_matmul_parts_async(g_s1, parts, 2, &xx, B, 0, &err) != 0 ||
        krn_cuda_swiglu_async(g_s1, y2, yt, g, u, B, n, &err) != 0)
        fail_msg("%s: the two ops failed: %s", what, err.msg);
    CK(cudaStreamSynchronize(g_s1));
    uint8_t *a = malloc(yb), *b = malloc(yb);
    assert_true(a && b);
    download(a, y1, yb), download(b, y2, yb);
    for (size_t i = 0; i < yb; i++)
        if (a[i] != b[i])
            fail_msg("%s: byte %zu of y (element %zu) is 0x%02x, the two ops' 0x%02x", what, i,
                     i / krn_act_bytes(yt), a[i], b[i]);
    free(a), free(b);
    cudaFree((void *)Wg.data), cudaFree((void *)Wu.data), cudaFree(dx), cudaFree(y1), cudaFree(y2), cudaFree(g),
        cudaFree(u);
}

/* n 70: a unit per warp, 18 blocks, the last one's last 2 warps without a unit; 1030 x 1032: two batches of 4 loads
 * (one of 8), the second clamped; 5000 x 264: one clamped batch per row and more units than one H200 round of warps
 * (blocks per SM x 4 warps x 132 SMs: 3168 with 4 loads per batch, 2112 with 8); 14336 x 264 (the 8B's n_ff): 4
 * rounds or more, so the grid takes every resident slot and warps walk unequal numbers of units. */
static void test_fused_gemv_has_the_bits_of_parts_then_swiglu_for_every_float_type(void **state) {
    (void)state;
    static const int wts[] = {KRN_F32, KRN_F16, KRN_BF16}, xts[] = {KRN_F32, KRN_F16, KRN_BF16};
    static const int shapes[][2] = {{70, 4096}, {1030, 1032}, {5000, 264}, {14336, 264}};
    for (int w = 0; w < 3; w++)
        for (int x = 0; x < 3; x++)
            for (int s = 0; s < 4; s++)
                check(wts[w], xts[x], xts[x], shapes[s][0], shapes[s][1], 1, 1);
}

static void test_outside_the_fused_gemv_the_op_composes_the_two_ops(void **state) {
    (void)state;
    check(KRN_BF16, KRN_F32, KRN_F32, 301, 4096, 3, 0);   /* B = 3 */
    check(KRN_Q8_0, KRN_F32, KRN_F32, 301, 4096, 1, 0);   /* a block type */
    check(KRN_BF16, KRN_BF16, KRN_F32, 301, 4096, 1, 0);  /* y of another type than x */
    check(KRN_F16, KRN_F32, KRN_F32, 301, 4100, 1, 0);    /* n_in % 8 != 0: the scalar GEMV */
}

/* 5000 x 4096: more units than one round of warps, so a fused run over its own x would read units already
 * stored (the race the pipelined gates on a 16-bit activation type caught). */
static void test_y_over_x_composes_the_two_ops(void **state) {
    (void)state;
    static const int xts[] = {KRN_F16, KRN_BF16};
    const int n = 5000, n_in = 4096;
    krn_weight Wg = rand_w(KRN_BF16, n, n_in), Wu = rand_w(KRN_BF16, n, n_in);
    float *g = dalloc(sizeof(float) * n), *u = dalloc(sizeof(float) * n);
    for (int i = 0; i < 2; i++) {
        const int xt = xts[i];
        const size_t xb = (size_t)n_in * 2, yb = (size_t)n * 2;
        uint8_t *buf = rand_x(xt, 1, n); /* x: its first n_in elements; y: all n, over x */
        uint8_t *h = malloc(yb), *a = malloc(yb);
        assert_true(h && a);
        download(h, buf, xb);
        void *x2 = dupload(h, xb), *y2 = dalloc(yb);
        const krn_mm_x xx = {.x = buf, .type = xt}, xx2 = {.x = x2, .type = xt};
        assert_int_equal(krn_cuda_glu_fits(buf, xt, &Wg, &Wu, &xx, 1), 0);
        assert_int_equal(krn_cuda_glu_fits(buf + xb - 2, xt, &Wg, &Wu, &xx, 1), 0); /* x's last element */
        assert_int_equal(krn_cuda_glu_fits(buf + xb, xt, &Wg, &Wu, &xx, 1), 1); /* just past x (only asked) */
        assert_int_equal(krn_cuda_glu_fits(y2, xt, &Wg, &Wu, &xx2, 1), 1);
        dev_err err = {0};
        dfill(y2, 0xFF, yb);
        if (krn_matmul_swiglu_x_async(g_s, buf, xt, g, u, &Wg, &Wu, &xx, 1) != 0 ||
            krn_matmul_swiglu_x_async(g_s, y2, xt, g, u, &Wg, &Wu, &xx2, 1) != 0 || dev_stream_sync(g_s, &err) != 0)
            fail_msg("y over x, x %s: the op failed: %s", krn_type_name(xt), err.msg);
        download(h, buf, yb), download(a, y2, yb);
        for (size_t b = 0; b < yb; b++)
            if (h[b] != a[b])
                fail_msg("y over x, x %s: byte %zu of y is 0x%02x, the fused GEMV's over a copy of x 0x%02x",
                         krn_type_name(xt), b, h[b], a[b]);
        free(h), free(a), cudaFree(buf), cudaFree(x2), cudaFree(y2);
    }
    cudaFree((void *)Wg.data), cudaFree((void *)Wu.data), cudaFree(g), cudaFree(u);
}

static void test_bad_arguments_are_refused(void **state) {
    (void)state;
    krn_weight Wg = rand_w(KRN_BF16, 64, 256), Wu = rand_w(KRN_BF16, 65, 256);
    void *dx = rand_x(KRN_F32, 1, 256);
    float *g = dalloc(sizeof(float) * 65), *u = dalloc(sizeof(float) * 65);
    const krn_mm_x xx = {.x = dx, .type = KRN_F32};
    assert_int_equal(krn_matmul_swiglu_x_async(g_s, g, KRN_F32, g, u, &Wg, &Wu, &xx, 1), MEMRA_E_INVAL);
    Wu.n_out = 64;
    assert_int_equal(krn_matmul_swiglu_x_async(g_s, g, KRN_BF16, g, u, &Wg, &Wu, &xx, 1), MEMRA_E_INVAL);
    assert_int_equal(krn_matmul_swiglu_x_async(g_s, g, KRN_F32, g, u, &Wg, &Wu, &xx, 0), MEMRA_E_INVAL);
    assert_int_equal(krn_matmul_swiglu_x_async(g_s, g, KRN_F32, g, u, &Wg, &Wu, NULL, 1), MEMRA_E_INVAL);
    dev_err err = {0};
    assert_int_equal(krn_cuda_matmul_swiglu_async(g_s1, g, &Wg, &Wu, &xx, &err) == 0, 1); /* f32 y in place: fine */
    CK(cudaStreamSynchronize(g_s1));
    const krn_mm_x xm = {.x = (const char *)dx + 4, .type = KRN_F32}; /* x not 16-byte aligned */
    assert_int_equal(krn_cuda_matmul_swiglu_async(g_s1, g, &Wg, &Wu, &xm, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "krn_cuda_matmul_swiglu"));
    cudaFree((void *)Wg.data), cudaFree((void *)Wu.data), cudaFree(dx), cudaFree(g), cudaFree(u);
}

int main(void) {
    if (cuda_fix_no_gpu("gpu_glu"))
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fused_gemv_has_the_bits_of_parts_then_swiglu_for_every_float_type),
        cmocka_unit_test(test_outside_the_fused_gemv_the_op_composes_the_two_ops),
        cmocka_unit_test(test_y_over_x_composes_the_two_ops),
        cmocka_unit_test(test_bad_arguments_are_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

#else /* !MEMRA_HAVE_CUDA */

int main(void) {
    printf("gpu_glu: skipped: built without CUDA (MEMRA_HAVE_CUDA off)\n");
    return 77;
}

#endif
