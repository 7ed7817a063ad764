/* int8 x on the GPU (kernels/krn.h "x quantized to int8", kernels/cuda/krn_cuda_matmul_x8.cu): the CUDA
 * quantize writes krn_x8_quantize_host's bytes (zero, NaN and inf blocks included); the planes GEMV with int8
 * x matches a double reference over the dequantized weights and the dequantized x8 rows, for q8_0 / q4_0 /
 * q4_1 / q4_K, B = 1..8 and 13, short and long rows; it gives the same bits on two streams, a row of a batch
 * has the bits it has alone, acc adds in the store; it lies within 2 % of max |y| of the f32-x GEMV; through
 * the op table a mix of parts sends only the PLANES one to int8 x. References: tests/support/cuda_ref.c.
 * Exits 77 (skipped) without a GPU. */
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
#include "support/cuda_fix.h"
#include "support/cuda_ref.h"

#define NPT 4 /* q8_0, q4_0, q4_1, q4_k in CUDA_REF_TYPES */
static const cuda_ref_type *ptype(int i) { return &CUDA_REF_TYPES[3 + i]; }

/* x8 of x (B, n) on the device through the CUDA kernel. */
static void *quantize_on_device(const float *dx, int B, int n) {
    void *xq = dalloc((size_t)B * krn_x8_row_bytes(n));
    dev_err err = {0};
    if (krn_cuda_quantize_x8_async(g_s1, xq, dx, KRN_F32, B, n, &err) != 0)
        fail_msg("quantize B=%d n=%d: %s", B, n, err.msg);
    CK(cudaStreamSynchronize(g_s1));
    return xq;
}

static void test_cuda_quantize_writes_the_host_bytes(void **state) {
    (void)state;
    static const int shapes[][2] = {{1, 32}, {3, 96}, {2, 4096}, {5, 14336}, {13, 160}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const int B = shapes[k][0], n = shapes[k][1];
        const size_t xb = sizeof(float) * (size_t)B * n, qb = (size_t)B * krn_x8_row_bytes(n);
        float *hx = malloc(xb);
        uint8_t *want = malloc(qb), *got = malloc(qb);
        assert_true(hx && want && got);
        cuda_ref_rand_floats(hx, (size_t)B * n);
        for (size_t i = 0; i < (size_t)B * n; i++)
            hx[i] *= (float)(1 + i % 13) * 3.0f;
        for (int i = 0; i < 32 && n >= 64; i++) /* block 1 of row 0 all zero */
            hx[32 + i] = 0.0f;
        if (B > 1) {
            hx[n + 3] = NAN;       /* row 1, block 0 */
            hx[n + n - 1] = INFINITY; /* row 1, last block */
        }
        float *dx = dupload(hx, xb);
        void *xq = quantize_on_device(dx, B, n);
        download(got, xq, qb);
        krn_x8_quantize_host(want, hx, B, n);
        if (memcmp(got, want, qb) != 0)
            fail_msg("CUDA quantize of (%d, %d) differs from krn_x8_quantize_host", B, n);
        cudaFree(dx), cudaFree(xq);
        free(hx), free(want), free(got);
    }
    dev_err err = {0};
    assert_int_equal(krn_cuda_quantize_x8_async(g_s1, NULL, NULL, KRN_F32, 1, 48, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "multiple of 32"));
}

/* One (type, shape, B): x8 GEMV vs the double reference over the x8 rows and vs the f32-x GEMV; two streams;
 * batch invariance; acc. */
static void check_x8(const cuda_ref_type *t, int n_out, int n_in, int B) {
    size_t bytes;
    uint8_t *h = cuda_fix_rand_blocks(t, n_out, n_in, &bytes);
    const size_t rb = bytes / (size_t)n_out, xb = sizeof(float) * (size_t)B * n_in;
    const size_t yb = sizeof(float) * (size_t)B * n_out;
    const size_t qrow = krn_x8_row_bytes(n_in);
    float *hx = malloc(xb), *hy = malloc(yb), *hy2 = malloc(yb), *hf = malloc(yb), *y0 = malloc(yb);
    uint8_t *hq = malloc((size_t)B * qrow);
    double *w = malloc(sizeof(double) * n_in), *wa = malloc(sizeof(double) * n_in), *xd = malloc(sizeof(double) * n_in);
    assert_true(hx && hy && hy2 && hf && y0 && hq && w && wa && xd);
    cuda_ref_rand_floats(hx, (size_t)B * n_in);
    cuda_ref_rand_floats(y0, (size_t)B * n_out);
    krn_x8_quantize_host(hq, hx, B, n_in);
    void *db = dupload(h, bytes);
    float *dx = dupload(hx, xb), *dy = dalloc(yb), *dy2 = dalloc(yb), *d1 = dalloc(sizeof(float) * n_out);
    void *xq = quantize_on_device(dx, B, n_in);
    krn_weight P = cuda_fix_planes(t, n_out, n_in, db, bytes);
    const krn_mm_part part = {dy, &P}, part2 = {dy2, &P};
    const krn_mm_x xx = {dx, KRN_F32, xq}; /* f32 x and its x8 rows */
    dev_err err = {0};
    assert_int_equal(krn_cuda_matmul_parts_async(g_s1, &part, 1, &xx, B, 0, &err), 0);
    assert_int_equal(krn_cuda_matmul_parts_async(g_s2, &part2, 1, &xx, B, 0, &err), 0);
    sync_both();
    download(hy, dy, yb);
    download(hy2, dy2, yb);
    if (memcmp(hy, hy2, yb) != 0)
        fail_msg("x8 %s %dx%d B=%d: two streams differ", t->name, n_out, n_in, B);
    assert_int_equal(krn_cuda_matmul_planes_async(g_s1, dy2, &P, dx, B, &err), 0); /* f32 x */
    sync_both();
    download(hf, dy2, yb);

    /* reference: sum of w_i * (d_x q_i) in double; |y - ref| <= 2^-22 (n_in/32 + 40) * mag, where mag adds
     * |w_i| + 2 max|w| of its block (the offset terms of q4_0 / q4_1 / q4_K are applied apart) times |d_x q_i| */
    const double kappa = ldexp(1.0, -22) * (n_in / 32.0 + 40.0);
    double ymax = 0.0, dmax = 0.0;
    for (int r = 0; r < n_out; r++) {
        cuda_ref_dequant(t, h + (size_t)r * rb, n_in, w, wa);
        for (int b = 0; b < B; b++) {
            const uint8_t *row = hq + (size_t)b * qrow;
            for (int j = 0; j < n_in / 32; j++) {
                float d;
                memcpy(&d, row + n_in + 8 * j, sizeof d);
                for (int i = 0; i < 32; i++)
                    xd[32 * j + i] = (double)d * (int8_t)row[32 * j + i];
            }
            double ref = 0.0, mag = 0.0;
            for (int j = 0; j < n_in / 32; j++) {
                double bm = 0.0;
                for (int i = 0; i < 32; i++)
                    bm = fmax(bm, wa[32 * j + i]);
                for (int i = 32 * j; i < 32 * j + 32; i++) {
                    ref += w[i] * xd[i];
                    mag += (wa[i] + 2.0 * bm) * fabs(xd[i]);
                }
            }
            const double got = hy[(size_t)b * n_out + r], tol = kappa * mag + 1e-30;
            if (!(fabs(got - ref) <= tol))
                fail_msg("x8 %s %dx%d B=%d: y[%d][%d] = %.9g, reference %.9g (|diff| %.3g > tol %.3g)", t->name, n_out,
                         n_in, B, b, r, got, ref, fabs(got - ref), tol);
            ymax = fmax(ymax, fabs(hf[(size_t)b * n_out + r]));
            dmax = fmax(dmax, fabs(got - hf[(size_t)b * n_out + r]));
        }
    }
    if (!(dmax <= 0.02 * ymax))
        fail_msg("x8 %s %dx%d B=%d: %.3g of max |y| from the f32-x GEMV (allowed 0.02)", t->name, n_out, n_in, B,
                 dmax / ymax);
    for (int b = 0; b < B; b++) { /* batch invariance: row b quantized alone, multiplied alone */
        void *xq1 = quantize_on_device(dx + (size_t)b * n_in, 1, n_in);
        const krn_mm_part one = {d1, &P};
        const krn_mm_x x1 = {dx + (size_t)b * n_in, KRN_F32, xq1};
        assert_int_equal(krn_cuda_matmul_parts_async(g_s1, &one, 1, &x1, 1, 0, &err), 0);
        sync_both();
        download(hy2, d1, sizeof(float) * n_out);
        if (memcmp(hy2, hy + (size_t)b * n_out, sizeof(float) * n_out) != 0)
            fail_msg("x8 %s %dx%d: row %d alone differs from row %d of a batch of %d", t->name, n_out, n_in, b, b, B);
        cudaFree(xq1);
    }
    upload(dy2, y0, yb); /* acc: y0 + the product, one add in the store */
    assert_int_equal(krn_cuda_matmul_parts_async(g_s1, &part2, 1, &xx, B, 1, &err), 0);
    sync_both();
    download(hy2, dy2, yb);
    for (size_t i = 0; i < (size_t)B * n_out; i++)
        if (hy2[i] != y0[i] + hy[i])
            fail_msg("x8 %s %dx%d B=%d acc: y[%zu] = %.9g, not %.9g + %.9g", t->name, n_out, n_in, B, i, hy2[i], y0[i],
                     hy[i]);
    cudaFree(db), cudaFree((void *)P.data), cudaFree(dx), cudaFree(dy), cudaFree(dy2), cudaFree(d1), cudaFree(xq);
    free(h), free(hx), free(hy), free(hy2), free(hf), free(y0), free(hq), free(w), free(wa), free(xd);
}

static void test_x8_gemv_matches_reference_for_every_planar_type_and_batch(void **state) {
    (void)state;
    for (int ti = 0; ti < NPT; ti++) {
        const int k = ptype(ti)->be == 256 ? 8 : 1; /* q4_k: rows in whole super-blocks */
        for (int B = 1; B <= 8; B++)
            check_x8(ptype(ti), 3001, 4096, B);
        check_x8(ptype(ti), 3001, 4096, 13);
        check_x8(ptype(ti), 1, 32 * k, 3);
        check_x8(ptype(ti), 257, 14336, 13);
        check_x8(ptype(ti), 33, 160 * k, 5);
    }
}

/* q6_K planes with int8 x: check_x8's reference, f32-x, stream, batch-invariance and acc
 * checks (B = 1..8, 11, 13; rows of one super-block and of 56). Its products have no offset term (the int8
 * sub-block scales weigh exact integer sums of (q - 32) q_x), so the reference bound holds with room. Then a
 * NaN in one block of x row 1 makes every y of row 1 NaN (d = s = NaN for that block) and leaves rows 0 and 2
 * finite. */
static void test_x8_gemv_of_q6_k_planes_matches_reference_and_propagates_nan_blocks(void **state) {
    (void)state;
    const cuda_ref_type *t = cuda_ref_type_of(KRN_Q6_K);
    for (int B = 1; B <= 8; B++)
        check_x8(t, 3001, 4096, B);
    check_x8(t, 3001, 4096, 11);
    check_x8(t, 3001, 4096, 13);
    check_x8(t, 1, 256, 3);
    check_x8(t, 257, 14336, 13);
    check_x8(t, 33, 1280, 5);

    const int n_out = 33, n_in = 1280, B = 3;
    size_t bytes;
    uint8_t *h = cuda_fix_rand_blocks(t, n_out, n_in, &bytes);
    float *hx = malloc(sizeof(float) * B * n_in), *hy = malloc(sizeof(float) * B * n_out);
    assert_true(hx && hy);
    cuda_ref_rand_floats(hx, (size_t)B * n_in);
    hx[n_in + 37] = NAN; /* row 1, block 1 */
    void *db = dupload(h, bytes);
    float *dx = dupload(hx, sizeof(float) * B * n_in), *dy = dalloc(sizeof(float) * B * n_out);
    void *xq = quantize_on_device(dx, B, n_in);
    krn_weight P = cuda_fix_planes(t, n_out, n_in, db, bytes);
    const krn_mm_part part = {dy, &P};
    dev_err err = {0};
    const krn_mm_x xx = {dx, KRN_F32, xq};
    assert_int_equal(krn_cuda_matmul_parts_async(g_s1, &part, 1, &xx, B, 0, &err), 0);
    sync_both();
    download(hy, dy, sizeof(float) * B * n_out);
    for (int b = 0; b < B; b++)
        for (int r = 0; r < n_out; r++)
            if (b == 1 ? !isnan(hy[b * n_out + r]) : !isfinite(hy[b * n_out + r]))
                fail_msg("x8 q6_k with a NaN in x row 1: y[%d][%d] = %g (want %s)", b, r, hy[b * n_out + r],
                         b == 1 ? "NaN" : "finite");
    cudaFree(db), cudaFree((void *)P.data), cudaFree(dx), cudaFree(dy), cudaFree(xq);
    free(h), free(hx), free(hy);
}

/* The op table on a CUDA dev_stream: parts [PLANES q4_1, BLOCKS q4_1, f16] with an x8 give the PLANES part
 * the raw x8 call's bits and the others the bits they have without x8. */
static void test_the_op_table_sends_only_planes_parts_to_int8_x(void **state) {
    (void)state;
    const int n_out = 301, n_in = 4096, B = 3;
    dev_err err = {0};
    dev_platform *p = dev_platform_open(DEV_KIND_CUDA, 0, &err);
    if (!p)
        fail_msg("dev_platform_open(cuda): %s", err.msg);
    dev_device *d = dev_platform_device(p, 0);
    dev_stream *s = dev_stream_create(d, "x8", &err);
    assert_non_null(s);
    assert_int_equal(krn_stream_set_batch_invariant(s, &err), 0); /* the op table against its direct calls */
    const cuda_ref_type *q41 = cuda_ref_type_of(KRN_Q4_1), *f16 = cuda_ref_type_of(KRN_F16);
    size_t bq, bf;
    uint8_t *hq = cuda_fix_rand_blocks(q41, n_out, n_in, &bq), *hf = cuda_fix_rand_blocks(f16, n_out, n_in, &bf);
    const size_t xb = sizeof(float) * (size_t)B * n_in, yb = sizeof(float) * (size_t)B * n_out;
    float *hx = malloc(xb), *got = malloc(yb), *want = malloc(yb);
    assert_true(hx && got && want);
    cuda_ref_rand_floats(hx, (size_t)B * n_in);
    CK(cudaSetDevice(0));
    void *wq = dupload(hq, bq), *wf = dupload(hf, bf);
    float *x = dupload(hx, xb), *y[3], *r[3];
    for (int i = 0; i < 3; i++)
        y[i] = dalloc(yb), r[i] = dalloc(yb);
    krn_weight P = cuda_fix_planes(q41, n_out, n_in, wq, bq);
    const krn_weight Bk = {.type = KRN_Q4_1, .n_out = n_out, .n_in = n_in, .data = wq};
    const krn_weight F = {.type = KRN_F16, .n_out = n_out, .n_in = n_in, .data = wf};
    void *xq = dalloc((size_t)B * krn_x8_row_bytes(n_in));
    const krn_mm_part parts[3] = {{y[0], &P}, {y[1], &Bk}, {y[2], &F}};
    const krn_mm_part raw = {r[0], &P};
    const krn_mm_x xx = {x, KRN_F32, xq};
    assert_int_equal(krn_quantize_x8_async(s, xq, x, B, n_in), 0);
    assert_int_equal(krn_matmul_parts_x_async(s, parts, 3, &xx, B), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    assert_int_equal(krn_cuda_matmul_parts_async(g_s1, &raw, 1, &xx, B, 0, &err), 0);
    assert_int_equal(krn_cuda_matmul_async(g_s1, r[1], &Bk, x, B, &err), 0);
    assert_int_equal(krn_cuda_matmul_async(g_s1, r[2], &F, x, B, &err), 0);
    sync_both();
    for (int i = 0; i < 3; i++) {
        download(got, y[i], yb);
        download(want, r[i], yb);
        if (memcmp(got, want, yb) != 0)
            fail_msg("op table part %d (%s) differs from its direct call", i, i == 0 ? "planes, x8" : "no x8");
    }
    dev_stream_destroy(s);
    dev_platform_close(p);
    CK(cudaSetDevice(0));
    for (int i = 0; i < 3; i++)
        cudaFree(y[i]), cudaFree(r[i]);
    cudaFree(wq), cudaFree(wf), cudaFree(x), cudaFree(xq), cudaFree((void *)P.data);
    free(hq), free(hf), free(hx), free(got), free(want);
}

int main(void) {
    if (cuda_fix_no_gpu("gpu_x8"))
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_quantize_writes_the_host_bytes),
        cmocka_unit_test(test_x8_gemv_matches_reference_for_every_planar_type_and_batch),
        cmocka_unit_test(test_x8_gemv_of_q6_k_planes_matches_reference_and_propagates_nan_blocks),
        cmocka_unit_test(test_the_op_table_sends_only_planes_parts_to_int8_x),
    };
    return cmocka_run_group_tests(tests, two_streams_setup, two_streams_teardown);
}

#else /* !MEMRA_HAVE_CUDA */

int main(void) {
    printf("gpu_x8: skipped: built without CUDA (MEMRA_HAVE_CUDA off)\n");
    return 77;
}

#endif
