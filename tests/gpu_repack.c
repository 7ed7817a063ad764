/* The planar layout on the GPU (kernels/cuda/krn_cuda_planes.h): the device repack writes the bytes of the
 * host repack (kernels/repack.c); the planes GEMV of q8_0 / q4_0 / q4_1 / q4_K / q6_K matches a double reference
 * and the GGUF-block GEMV on the same tensor (shapes with n_out not a multiple of the row group, n_in 32 (256 for
 * the super-block types), 4096 and 14336, B = 1..8, 11 and 13); it gives the same bits on two streams and on a
 * second run, and a row of a batch has the bits it has alone (batch invariance). The op table routes a PLANES
 * weight on a CUDA dev_stream to it, and model/repack.c repacks on the weight's own device (q4_1, and q6_K:
 * every planar type is chosen by krn_planes_qrow). References: tests/support/cuda_ref.c
 * (written from the GGUF layouts, independently of kernels/quant.c). Exits 77 (skipped) without a GPU. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#ifdef MEMRA_HAVE_CUDA

#include <cuda_runtime_api.h>
#include "device/dev.h"
#include "kernels/krn.h"
#include "kernels/cuda/krn_cuda.h"
#include "kernels/cuda/krn_cuda_planes.h"
#include "model/repack.h"
#include "support/cuda_fix.h"
#include "support/cuda_ref.h"


/* q8_0, q4_0, q4_1, q4_k, q6_k in CUDA_REF_TYPES */
#define NPT 5
static const cuda_ref_type *ptype(int i) { return &CUDA_REF_TYPES[3 + i]; }

static void test_device_repack_writes_the_host_repack_bytes(void **state) {
    (void)state;
    static const int shapes[][2] = {{1, 32}, {3001, 32}, {7, 4096}, {5, 14336}, {33, 160}};
    static const int kshapes[][2] = {{1, 256}, {3001, 256}, {7, 4096}, {5, 14336}, {33, 1280}}; /* q4_k, q6_k */
    for (int ti = 0; ti < NPT; ti++)
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            const cuda_ref_type *t = ptype(ti);
            const int n_out = (t->be == 256 ? kshapes : shapes)[k][0], n_in = (t->be == 256 ? kshapes : shapes)[k][1];
            size_t bytes;
            uint8_t *h = cuda_fix_rand_blocks(t, n_out, n_in, &bytes), *want = malloc(bytes), *got = malloc(bytes);
            assert_true(want && got);
            krn_repack_host(t->type, n_out, n_in, h, want);
            void *db = dupload(h, bytes);
            krn_weight P = cuda_fix_planes(t, n_out, n_in, db, bytes);
            download(got, P.data, bytes);
            if (memcmp(got, want, bytes) != 0)
                fail_msg("device repack of %s %dx%d differs from krn_repack_host", t->name, n_out, n_in);
            cudaFree(db);
            cudaFree((void *)P.data);
            free(h), free(want), free(got);
        }
}

/* One (type, shape, B): planes y vs the double reference and vs the blocks GEMV; two streams and a second
 * run give the same bits; each row alone (B = 1) gives the bits of the batch. */
static void check_planes(const cuda_ref_type *t, int n_out, int n_in, int B) {
    size_t bytes;
    uint8_t *h = cuda_fix_rand_blocks(t, n_out, n_in, &bytes);
    const size_t rb = bytes / (size_t)n_out, xb = sizeof(float) * (size_t)B * n_in;
    const size_t yb = sizeof(float) * (size_t)B * n_out;
    float *hx = malloc(xb), *hy = malloc(yb), *hy2 = malloc(yb), *hblk = malloc(yb);
    double *w = malloc(sizeof(double) * n_in), *wa = malloc(sizeof(double) * n_in);
    assert_true(hx && hy && hy2 && hblk && w && wa);
    cuda_ref_rand_floats(hx, (size_t)B * n_in);
    void *db = dupload(h, bytes);
    float *dx = dupload(hx, xb), *dy = dalloc(yb), *dy2 = dalloc(yb), *d1 = dalloc(sizeof(float) * n_out);
    krn_weight P = cuda_fix_planes(t, n_out, n_in, db, bytes);
    krn_weight Bk = {.type = t->type, .n_out = n_out, .n_in = n_in, .data = db};
    dev_err err = {0};
    assert_int_equal(krn_cuda_matmul_planes_async(g_s1, dy, &P, dx, B, &err), 0);
    assert_int_equal(krn_cuda_matmul_planes_async(g_s2, dy2, &P, dx, B, &err), 0);
    sync_both();
    download(hy, dy, yb);
    download(hy2, dy2, yb);
    if (memcmp(hy, hy2, yb) != 0)
        fail_msg("planes %s %dx%d B=%d: two streams differ", t->name, n_out, n_in, B);
    assert_int_equal(krn_cuda_matmul_planes_async(g_s1, dy2, &P, dx, B, &err), 0); /* a second run */
    sync_both();
    download(hy2, dy2, yb);
    if (memcmp(hy, hy2, yb) != 0)
        fail_msg("planes %s %dx%d B=%d: a second run differs", t->name, n_out, n_in, B);
    assert_int_equal(krn_cuda_matmul_async(g_s1, dy2, &Bk, dx, B, &err), 0);
    sync_both();
    download(hblk, dy2, yb);

    /* |y - ref| <= 2^-22 * (n_in/32 + 40) * sum |w_i||x_i| (the bound of tests/gpu_kernels.c: fp32 chains of
     * at most n_in/32 + 40 adds); planes vs blocks within twice that. */
    const double kappa = ldexp(1.0, -22) * (n_in / 32.0 + 40.0);
    for (int r = 0; r < n_out; r++) {
        cuda_ref_dequant(t, h + (size_t)r * rb, n_in, w, wa);
        for (int b = 0; b < B; b++) {
            double ref = 0.0, mag = 0.0;
            for (int i = 0; i < n_in; i++) {
                ref += w[i] * hx[(size_t)b * n_in + i];
                mag += wa[i] * fabs(hx[(size_t)b * n_in + i]);
            }
            const double got = hy[(size_t)b * n_out + r], blk = hblk[(size_t)b * n_out + r];
            const double tol = kappa * mag + 1e-30;
            if (!(fabs(got - ref) <= tol))
                fail_msg("planes %s %dx%d B=%d: y[%d][%d] = %.9g, reference %.9g (|diff| %.3g > tol %.3g)", t->name,
                         n_out, n_in, B, b, r, got, ref, fabs(got - ref), tol);
            if (!(fabs(got - blk) <= 2 * tol))
                fail_msg("planes %s %dx%d B=%d: y[%d][%d] = %.9g, blocks GEMV %.9g (> 2 tol %.3g)", t->name, n_out,
                         n_in, B, b, r, got, blk, 2 * tol);
        }
    }
    for (int b = 0; b < B; b++) { /* batch invariance */
        assert_int_equal(krn_cuda_matmul_planes_async(g_s1, d1, &P, dx + (size_t)b * n_in, 1, &err), 0);
        sync_both();
        download(hy2, d1, sizeof(float) * n_out);
        if (memcmp(hy2, hy + (size_t)b * n_out, sizeof(float) * n_out) != 0)
            fail_msg("planes %s %dx%d: row %d alone differs from row %d of a batch of %d", t->name, n_out, n_in, b, b,
                     B);
    }
    cudaFree(db), cudaFree((void *)P.data), cudaFree(dx), cudaFree(dy), cudaFree(dy2), cudaFree(d1);
    free(h), free(hx), free(hy), free(hy2), free(hblk), free(w), free(wa);
}

static void test_planes_gemv_matches_reference_and_blocks_for_every_batch(void **state) {
    (void)state;
    for (int ti = 0; ti < NPT; ti++) {
        const int k = ptype(ti)->be == 256 ? 8 : 1; /* q4_k, q6_k: the short rows in whole super-blocks */
        for (int B = 1; B <= 8; B++)
            check_planes(ptype(ti), 3001, 4096, B);
        check_planes(ptype(ti), 3001, 4096, 11);
        check_planes(ptype(ti), 3001, 4096, 13);
        check_planes(ptype(ti), 3001, 32 * k, 13);
        check_planes(ptype(ti), 1, 32 * k, 3);
        check_planes(ptype(ti), 257, 14336, 13);
        check_planes(ptype(ti), 33, 160 * k, 5);
    }
}

static void test_planes_gemv_rejects_blocks_types_and_misalignment_with_a_message(void **state) {
    (void)state;
    void *d = dalloc(4096);
    dev_err e1 = {0}, e2 = {0}, e3 = {0}, e4 = {0};
    krn_weight W = {.type = KRN_Q8_0, .n_out = 4, .n_in = 64, .data = d};
    assert_int_equal(krn_cuda_matmul_planes_async(g_s1, d, &W, d, 1, &e1), MEMRA_E_INVAL); /* layout blocks */
    assert_non_null(strstr(e1.msg, "layout planes"));
    W.layout = KRN_LAYOUT_PLANES, W.type = KRN_BF16, W.n_in = 256;
    assert_int_equal(krn_cuda_matmul_planes_async(g_s1, d, &W, d, 1, &e2), MEMRA_E_INVAL);
    assert_non_null(strstr(e2.msg, "q8_0, q4_0, q4_1, q4_K, q6_K"));
    W.type = KRN_Q4_0, W.n_in = 64, W.data = (uint8_t *)d + 2;
    assert_int_equal(krn_cuda_matmul_planes_async(g_s1, (float *)d + 512, &W, (float *)d + 256, 1, &e3),
                     MEMRA_E_INVAL);
    assert_non_null(strstr(e3.msg, "16-byte aligned"));
    krn_weight S = {.type = KRN_Q4_0, .n_out = 4, .n_in = 64, .data = d}, D = S; /* same buffer */
    assert_int_equal(krn_cuda_repack_async(g_s1, &D, &S, &e4), MEMRA_E_INVAL);
    assert_non_null(strstr(e4.msg, "overlap"));
    cudaFree(d);
}

/* kernels/krn.c routes a PLANES weight of type t on a CUDA dev_stream to the planes GEMV, and model/repack.c
 * repacks in place on the device that owns the weight (every visible GPU), with the bits of the raw path. */
static void check_model_repack(const cuda_ref_type *t) {
    const int n_out = 301, n_in = 4096, B = 3;
    size_t bytes;
    uint8_t *h = cuda_fix_rand_blocks(t, n_out, n_in, &bytes);
    const size_t xb = sizeof(float) * (size_t)B * n_in, yb = sizeof(float) * (size_t)B * n_out;
    float *hx = malloc(xb), *ref = malloc(yb), *got = malloc(yb);
    uint8_t *planes = malloc(bytes), *back = malloc(bytes);
    assert_true(hx && ref && got && planes && back);
    cuda_ref_rand_floats(hx, (size_t)B * n_in);
    krn_repack_host(t->type, n_out, n_in, h, planes);
    void *db = dupload(h, bytes);
    float *dx = dupload(hx, xb), *dy = dalloc(yb);
    krn_weight P = cuda_fix_planes(t, n_out, n_in, db, bytes);
    dev_err err = {0};
    assert_int_equal(krn_cuda_matmul_planes_async(g_s1, dy, &P, dx, B, &err), 0);
    sync_both();
    download(ref, dy, yb);

    unsetenv("MEMRA_CUDA_REPACK");
    dev_platform *p = dev_platform_open(DEV_KIND_CUDA, 0, &err);
    if (!p)
        fail_msg("dev_platform_open(cuda): %s", err.msg);
    for (int o = 0; o < dev_platform_count(p); o++) {
        dev_device *d = dev_platform_device(p, o);
        dev_stream *s = dev_stream_create(d, "krn", &err);
        assert_non_null(s);
        void *w = dev_malloc(d, bytes, &err), *x = dev_malloc(d, xb, &err), *y = dev_malloc(d, yb, &err);
        assert_true(w && x && y);
        assert_int_equal(dev_copy_h2d_sync(d, w, h, bytes, &err), 0);
        assert_int_equal(dev_copy_h2d_sync(d, x, hx, xb, &err), 0);
        krn_weight Wd = {.type = t->type, .n_out = n_out, .n_in = n_in, .data = w};
        krn_weight *const ws[] = {&Wd};
        CK(cudaSetDevice(0));
        if (mdl_repack_weights(d, ws, 1, &err) != 0)
            fail_msg("mdl_repack_weights of %s on %s: %s", t->name, dev_device_name(d), err.msg);
        assert_int_equal(Wd.layout, KRN_LAYOUT_PLANES);
        assert_ptr_equal(Wd.data, w); /* in place */
        assert_int_equal(dev_copy_d2h_async(s, back, w, bytes), 0);
        assert_int_equal(krn_matmul_async(s, y, &Wd, x, B), 0);
        assert_int_equal(dev_copy_d2h_async(s, got, y, yb), 0);
        assert_int_equal(dev_stream_sync(s, &err), 0);
        if (memcmp(back, planes, bytes) != 0)
            fail_msg("mdl_repack_weights of %s on %s did not write the host repack", t->name, dev_device_name(d));
        if (memcmp(got, ref, yb) != 0)
            fail_msg("krn_matmul_async (%s planes) on %s differs from the raw call", t->name, dev_device_name(d));
        dev_free(d, w), dev_free(d, x), dev_free(d, y);
        dev_stream_destroy(s);
    }
    /* the door at 0 keeps the blocks */
    setenv("MEMRA_CUDA_REPACK", "0", 1);
    dev_device *d0 = dev_platform_device(p, 0);
    void *w = dev_malloc(d0, bytes, &err);
    assert_non_null(w);
    krn_weight Wd = {.type = t->type, .n_out = n_out, .n_in = n_in, .data = w};
    krn_weight *const ws[] = {&Wd};
    assert_int_equal(mdl_repack_weights(d0, ws, 1, &err), 0);
    assert_int_equal(Wd.layout, KRN_LAYOUT_BLOCKS);
    unsetenv("MEMRA_CUDA_REPACK");
    dev_free(d0, w);
    dev_platform_close(p);
    CK(cudaSetDevice(0));
    cudaFree(db), cudaFree((void *)P.data), cudaFree(dx), cudaFree(dy);
    free(h), free(hx), free(ref), free(got), free(planes), free(back);
}

static void test_model_repack_on_each_device_and_the_op_table_give_the_raw_bits(void **state) {
    (void)state;
    check_model_repack(cuda_ref_type_of(KRN_Q4_1));
    /* q6_k (lm_head and half of ffn_down in Q4_K_M files) is repacked only for the int8-x GEMV: with f32 x its
     * planes are slower than its blocks (docs/cuda-kernels.md "Planar layouts") */
    setenv("MEMRA_CUDA_X8", "1", 1);
    check_model_repack(cuda_ref_type_of(KRN_Q6_K));
    unsetenv("MEMRA_CUDA_X8");
}

/* ... and without MEMRA_CUDA_X8 the model's q6_k tensors stay in GGUF blocks, while a q4_1 beside them in the
 * same call is repacked (so the call did run). */
static void test_q6_k_stays_in_blocks_without_int8_x(void **state) {
    (void)state;
    const char *x8 = getenv("MEMRA_CUDA_X8");
    char saved[16] = "";
    if (x8)
        snprintf(saved, sizeof saved, "%s", x8);
    unsetenv("MEMRA_CUDA_X8");
    size_t bytes, b41;
    uint8_t *h = cuda_fix_rand_blocks(cuda_ref_type_of(KRN_Q6_K), 8, 256, &bytes),
            *h41 = cuda_fix_rand_blocks(cuda_ref_type_of(KRN_Q4_1), 8, 256, &b41);
    void *db = dupload(h, bytes), *d41 = dupload(h41, b41);
    krn_weight W = {.type = KRN_Q6_K, .n_out = 8, .n_in = 256, .data = db};
    krn_weight Q = {.type = KRN_Q4_1, .n_out = 8, .n_in = 256, .data = d41};
    krn_weight *const ws[] = {&W, &Q};
    dev_err err = {0};
    dev_platform *p = dev_platform_open(DEV_KIND_CUDA, 0, &err);
    assert_non_null(p);
    assert_int_equal(mdl_repack_weights(dev_platform_device(p, 0), ws, 2, &err), 0);
    assert_int_equal(W.layout, KRN_LAYOUT_BLOCKS);
    assert_int_equal(Q.layout, KRN_LAYOUT_PLANES);
    if (x8)
        setenv("MEMRA_CUDA_X8", saved, 1);
    dev_platform_close(p);
    CK(cudaFree(db));
    CK(cudaFree(d41)); /* repacked in place: still ours */
    free(h), free(h41);
}

int main(void) {
    if (cuda_fix_no_gpu("gpu_repack"))
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_repack_writes_the_host_repack_bytes),
        cmocka_unit_test(test_planes_gemv_matches_reference_and_blocks_for_every_batch),
        cmocka_unit_test(test_planes_gemv_rejects_blocks_types_and_misalignment_with_a_message),
        cmocka_unit_test(test_model_repack_on_each_device_and_the_op_table_give_the_raw_bits),
        cmocka_unit_test(test_q6_k_stays_in_blocks_without_int8_x),
    };
    return cmocka_run_group_tests(tests, two_streams_setup, two_streams_teardown);
}

#else /* !MEMRA_HAVE_CUDA */

int main(void) {
    printf("gpu_repack: skipped: built without CUDA (MEMRA_HAVE_CUDA off)\n");
    return 77;
}

#endif
