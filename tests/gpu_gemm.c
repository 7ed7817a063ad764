/* cuBLAS for large B (kernels/cuda/krn_cuda_gemm.cuh): the cuBLAS path matches a double-precision host
 * reference for bf16, f16 and f32 weights; it gives the same bits on two runs and on two streams; the
 * threshold routes B >= min_b of krn_matmul_async through it (the liveness counter moves) and 0 turns it
 * off (krn_matmul_async then has the fused GEMV's bits); a CUDA graph that captured it replays with the
 * eager bits, on a prepared stream and on one whose cuBLAS state is created inside the capture, and still
 * does after the eager conversion buffer grew; a second GPU's stream gets its own state and the same bits.
 *
 * Tolerance: the reference is sum_i w_i * r(x_i) in double, r = x rounded to W's type (bf16, f16: round to
 * nearest even, as the conversion kernel does; f32: x itself). cuBLAS accumulates in fp32 (products of
 * 16-bit values are exact in fp32), so |y - ref| <= 1e-4 * sum_i |w_i * r(x_i)| + 1e-6 (n_in = 1024: about
 * n_in * 2^-24 * 6 of headroom over a worst-case sequential fp32 sum).
 * Exits 77 (skipped) with a reason when the build has no CUDA or no GPU is visible. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
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
#include "kernels/quant.h"
#include "kernels/cuda/krn_cuda.h"
#include "kernels/cuda/krn_cuda_gemm.cuh"

static dev_platform *g_p;

enum { N_OUT = 1000, N_IN = 1024, BIG = 64 };

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((int)(rng % 20001) - 10000) / 10000.0f;
}

/* A weight of type t (f32, f16, bf16) on the device, and its values in double on the host. */
typedef struct wt {
    krn_weight W;
    double *w; /* (N_OUT, N_IN) */
} wt;

static void *up(dev_device *d, const void *h, size_t bytes)
{
    dev_err err = {0};
    void *p = dev_malloc(d, bytes, &err);
    assert_non_null(p);
    assert_int_equal(dev_copy_h2d_sync(d, p, h, bytes, &err), 0);
    return p;
}

static wt make_weight(dev_device *d, int type)
{
    wt r;
    const size_t n = (size_t)N_OUT * N_IN, esz = type == KRN_F32 ? 4 : 2;
    uint8_t *h = malloc(n * esz);
    r.w = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        const float f = frand();
        if (type == KRN_F32) {
            memcpy(h + 4 * i, &f, 4);
            r.w[i] = f;
        } else {
            const uint16_t u = type == KRN_BF16 ? krn_f32_to_bf16(f) : krn_f32_to_f16(f);
            memcpy(h + 2 * i, &u, 2);
            r.w[i] = type == KRN_BF16 ? krn_bf16_to_f32(u) : krn_f16_to_f32(u);
        }
    }
    r.W = (krn_weight){type, N_OUT, N_IN, up(d, h, n * esz), KRN_LAYOUT_BLOCKS};
    free(h);
    return r;
}

static void free_weight(dev_device *d, wt *r)
{
    dev_free(d, (void *)r->W.data);
    free(r->w);
}

static float *rand_x(int B)
{
    float *x = malloc(sizeof(float) * (size_t)B * N_IN);
    for (size_t i = 0; i < (size_t)B * N_IN; i++)
        x[i] = frand();
    return x;
}

static double round_x(int type, float f)
{
    if (type == KRN_BF16)
        return krn_bf16_to_f32(krn_f32_to_bf16(f));
    if (type == KRN_F16)
        return krn_f16_to_f32(krn_f32_to_f16(f));
    return f;
}

static void read_y(dev_stream *s, float *h, const float *dy, int B)
{
    dev_err err = {0};
    assert_int_equal(dev_copy_d2h_async(s, h, dy, sizeof(float) * (size_t)B * N_OUT), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
}

static void fill_y(dev_device *d, float *dy, int B, float v)
{
    dev_err err = {0};
    float *h = malloc(sizeof(float) * (size_t)B * N_OUT);
    for (size_t i = 0; i < (size_t)B * N_OUT; i++)
        h[i] = v;
    assert_int_equal(dev_copy_h2d_sync(d, dy, h, sizeof(float) * (size_t)B * N_OUT, &err), 0);
    free(h);
}

static void test_cublas_path_matches_a_double_reference_for_each_float_type(void **state)
{
    (void)state;
    dev_device *d = dev_platform_device(g_p, 0);
    dev_err err = {0};
    dev_stream *s = dev_stream_create(d, "ref", &err);
    assert_non_null(s);
    const int types[] = {KRN_BF16, KRN_F16, KRN_F32};
    const int Bs[] = {BIG, 17};
    float *hx = rand_x(BIG);
    float *dx = up(d, hx, sizeof(float) * BIG * N_IN);
    float *dy = dev_malloc(d, sizeof(float) * BIG * N_OUT, &err);
    float *hy = malloc(sizeof(float) * BIG * N_OUT);
    for (int ti = 0; ti < 3; ti++) {
        wt w = make_weight(d, types[ti]);
        for (int bi = 0; bi < 2; bi++) {
            const int B = Bs[bi];
            fill_y(d, dy, B, NAN);
            const uint64_t n0 = krn_cuda_gemm_count();
            assert_int_equal(krn_cuda_gemm_async(s, dy, &w.W, dx, B, &err), 0);
            read_y(s, hy, dy, B);
            assert_int_equal(krn_cuda_gemm_count(), n0 + 1);
            double worst = 0.0;
            for (int b = 0; b < B; b++)
                for (int r = 0; r < N_OUT; r++) {
                    double ref = 0.0, mass = 0.0;
                    for (int i = 0; i < N_IN; i++) {
                        const double t = w.w[(size_t)r * N_IN + i] * round_x(types[ti], hx[(size_t)b * N_IN + i]);
                        ref += t;
                        mass += fabs(t);
                    }
                    const double got = hy[(size_t)b * N_OUT + r], tol = 1e-4 * mass + 1e-6;
                    if (!(fabs(got - ref) <= tol))
                        fail_msg("type %d B=%d row %d col %d: got %.9g, reference %.9g, tolerance %.3g", types[ti], B,
                                 b, r, got, ref, tol);
                    if (fabs(got - ref) / tol > worst)
                        worst = fabs(got - ref) / tol;
                }
            printf("type %d B=%d: worst error %.3f of the tolerance\n", types[ti], B, worst);
        }
        free_weight(d, &w);
    }
    dev_free(d, dx);
    dev_free(d, dy);
    free(hx);
    free(hy);
    dev_stream_destroy(s);
}

static void test_same_bits_on_two_runs_and_on_two_streams(void **state)
{
    (void)state;
    dev_device *d = dev_platform_device(g_p, 0);
    dev_err err = {0};
    dev_stream *s1 = dev_stream_create(d, "s1", &err), *s2 = dev_stream_create(d, "s2", &err);
    assert_non_null(s1);
    assert_non_null(s2);
    wt w = make_weight(d, KRN_BF16);
    float *hx = rand_x(BIG);
    float *dx = up(d, hx, sizeof(float) * BIG * N_IN);
    float *dy1 = dev_malloc(d, sizeof(float) * BIG * N_OUT, &err), *dy2 = dev_malloc(d, sizeof(float) * BIG * N_OUT, &err);
    static float a[BIG * N_OUT], b[BIG * N_OUT], c[BIG * N_OUT];
    assert_int_equal(krn_cuda_gemm_async(s1, dy1, &w.W, dx, BIG, &err), 0);
    read_y(s1, a, dy1, BIG);
    fill_y(d, dy1, BIG, 0.0f);
    assert_int_equal(krn_cuda_gemm_async(s1, dy1, &w.W, dx, BIG, &err), 0);
    read_y(s1, b, dy1, BIG);
    assert_int_equal(krn_cuda_gemm_async(s2, dy2, &w.W, dx, BIG, &err), 0);
    read_y(s2, c, dy2, BIG);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_equal(a, c, sizeof a);
    /* each stream has its own state */
    assert_non_null(dev_stream_attachment(s1, DEV_SLOT_KRN_GEMM));
    assert_non_null(dev_stream_attachment(s2, DEV_SLOT_KRN_GEMM));
    assert_ptr_not_equal(dev_stream_attachment(s1, DEV_SLOT_KRN_GEMM), dev_stream_attachment(s2, DEV_SLOT_KRN_GEMM));
    dev_free(d, dx);
    dev_free(d, dy1);
    dev_free(d, dy2);
    free(hx);
    free_weight(d, &w);
    dev_stream_destroy(s1);
    dev_stream_destroy(s2);
}

static void test_threshold_routes_large_batches_through_cublas_and_zero_turns_it_off(void **state)
{
    (void)state;
    dev_device *d = dev_platform_device(g_p, 0);
    dev_err err = {0};
    dev_stream *s = dev_stream_create(d, "thr", &err);
    assert_non_null(s);
    wt w = make_weight(d, KRN_BF16);
    float *hx = rand_x(BIG);
    float *dx = up(d, hx, sizeof(float) * BIG * N_IN);
    float *dy = dev_malloc(d, sizeof(float) * BIG * N_OUT, &err);
    static float gemv[BIG * N_OUT], blas[BIG * N_OUT], got[BIG * N_OUT];
    /* the two references: the fused GEMV and the forced cuBLAS path */
    assert_int_equal(krn_cuda_matmul_async(dev_stream_native(s), dy, &w.W, dx, BIG, &err), 0);
    read_y(s, gemv, dy, BIG);
    assert_int_equal(krn_cuda_gemm_async(s, dy, &w.W, dx, BIG, &err), 0);
    read_y(s, blas, dy, BIG);
    assert_true(memcmp(gemv, blas, sizeof gemv) != 0); /* x is rounded to bf16 on one path only */

    krn_cuda_gemm_set_min_b(16);
    assert_int_equal(krn_cuda_gemm_min_b(), 16);
    uint64_t n0 = krn_cuda_gemm_count();
    assert_int_equal(krn_matmul_async(s, dy, &w.W, dx, BIG), 0);
    read_y(s, got, dy, BIG);
    assert_int_equal(krn_cuda_gemm_count(), n0 + 1);
    assert_memory_equal(got, blas, sizeof got);
    /* below the threshold: the GEMV (its rows have the same bits at any B) */
    n0 = krn_cuda_gemm_count();
    assert_int_equal(krn_matmul_async(s, dy, &w.W, dx, 8), 0);
    read_y(s, got, dy, 8);
    assert_int_equal(krn_cuda_gemm_count(), n0);
    assert_memory_equal(got, gemv, sizeof(float) * 8 * N_OUT);
    /* an unaligned y is not eligible: the GEMV runs even at large B */
    assert_int_equal(krn_cuda_gemm_eligible(&w.W, dy + 1, dx), 0);
    /* 0 turns it off */
    krn_cuda_gemm_set_min_b(0);
    assert_int_equal(krn_cuda_gemm_min_b(), 0);
    n0 = krn_cuda_gemm_count();
    assert_int_equal(krn_matmul_async(s, dy, &w.W, dx, BIG), 0);
    read_y(s, got, dy, BIG);
    assert_int_equal(krn_cuda_gemm_count(), n0);
    assert_memory_equal(got, gemv, sizeof got);
    /* 1 is raised to the floor (one row stays on the GEMV) */
    krn_cuda_gemm_set_min_b(1);
    assert_int_equal(krn_cuda_gemm_min_b(), KRN_CUDA_GEMM_MIN_B_FLOOR);
    /* a batch-invariant stream never takes cuBLAS: the GEMV's bits at any B */
    krn_cuda_gemm_set_min_b(16);
    dev_stream *inv = dev_stream_create(d, "invariant", &err);
    assert_non_null(inv);
    assert_int_equal(krn_stream_set_batch_invariant(inv, &err), 0);
    assert_int_equal(krn_stream_batch_invariant(inv), 1);
    assert_int_equal(krn_stream_batch_invariant(s), 0);
    n0 = krn_cuda_gemm_count();
    assert_int_equal(krn_matmul_async(inv, dy, &w.W, dx, BIG), 0);
    read_y(inv, got, dy, BIG);
    assert_int_equal(krn_cuda_gemm_count(), n0);
    assert_memory_equal(got, gemv, sizeof got);
    dev_stream_destroy(inv);
    krn_cuda_gemm_set_min_b(-1);
    dev_free(d, dx);
    dev_free(d, dy);
    free(hx);
    free_weight(d, &w);
    dev_stream_destroy(s);
}

/* Eager bits (another stream), then a capture (nothing runs: y stays poisoned) replayed twice, then an
 * eager call with a larger B on the capturing stream (grows its eager buffer past the 1 MiB it had when
 * prepared) and one more replay: every replay has the eager bits. */
static void capture_case(int prepare)
{
    dev_device *d = dev_platform_device(g_p, 0);
    dev_err err = {0};
    dev_stream *s = dev_stream_create(d, prepare ? "cap-prepared" : "cap-fresh", &err);
    dev_stream *e = dev_stream_create(d, "eager", &err);
    assert_non_null(s);
    assert_non_null(e);
    krn_cuda_gemm_set_min_b(16);
    wt w = make_weight(d, KRN_BF16);
    enum { BB = 1024 }; /* BB * N_IN * 2 bytes > the 1 MiB a B = 64 conversion buffer is rounded to */
    float *hx = rand_x(BB);
    float *dx = up(d, hx, sizeof(float) * BB * N_IN);
    float *dy = dev_malloc(d, sizeof(float) * BB * N_OUT, &err);
    static float eager[BIG * N_OUT], got[BIG * N_OUT];
    assert_non_null(dy);
    assert_int_equal(krn_matmul_async(e, dy, &w.W, dx, BIG), 0);
    read_y(e, eager, dy, BIG);
    if (prepare) {
        assert_int_equal(krn_cuda_gemm_prepare(s, &err), 0);
        assert_non_null(dev_stream_attachment(s, DEV_SLOT_KRN_GEMM));
        assert_int_equal(krn_matmul_async(s, dy, &w.W, dx, BIG), 0); /* sizes the eager buffer for B = 64 */
        assert_int_equal(dev_stream_sync(s, &err), 0);
    } else {
        assert_null(dev_stream_attachment(s, DEV_SLOT_KRN_GEMM));
    }
    fill_y(d, dy, BIG, -12345.0f);
    const uint64_t n0 = krn_cuda_gemm_count();
    assert_int_equal(dev_stream_capture_begin(s, &err), 0);
    assert_int_equal(krn_matmul_async(s, dy, &w.W, dx, BIG), 0);
    dev_graph *g = NULL;
    assert_int_equal(dev_stream_capture_end(s, &g, &err), 0);
    assert_non_null(g);
    assert_int_equal(krn_cuda_gemm_count(), n0 + 1); /* the cuBLAS path was captured, not the GEMV */
    read_y(s, got, dy, BIG);
    for (int i = 0; i < BIG * N_OUT; i++)
        assert_true(got[i] == -12345.0f);
    for (int rep = 0; rep < 2; rep++) {
        fill_y(d, dy, BIG, 0.0f);
        assert_int_equal(dev_graph_launch_async(g, s), 0);
        read_y(s, got, dy, BIG);
        assert_memory_equal(got, eager, sizeof got);
    }
    assert_int_equal(krn_matmul_async(s, dy, &w.W, dx, BB), 0); /* grows s's eager buffer */
    assert_int_equal(dev_stream_sync(s, &err), 0);
    fill_y(d, dy, BIG, 0.0f);
    assert_int_equal(dev_graph_launch_async(g, s), 0);
    read_y(s, got, dy, BIG);
    assert_memory_equal(got, eager, sizeof got);
    dev_graph_destroy(g);
    krn_cuda_gemm_set_min_b(-1);
    dev_free(d, dx);
    dev_free(d, dy);
    free(hx);
    free_weight(d, &w);
    dev_stream_destroy(s);
    dev_stream_destroy(e);
}

static void test_graph_capture_on_a_prepared_stream_replays_the_eager_bits(void **state)
{
    (void)state;
    capture_case(1);
}

static void test_graph_capture_creating_the_cublas_state_replays_the_eager_bits(void **state)
{
    (void)state;
    capture_case(0);
}

/* A stream of GPU 1 enqueued while GPU 0 is current: the state is created on GPU 1, the caller's device
 * is restored, and the bits equal GPU 0's (same model, same shape). */
static void test_second_gpu_gets_its_own_state_and_the_same_bits(void **state)
{
    (void)state;
    if (dev_platform_count(g_p) < 2) {
        printf("skipped: needs >= 2 GPUs, %d visible\n", dev_platform_count(g_p));
        skip();
    }
    dev_err err = {0};
    static float y0[BIG * N_OUT], y1[BIG * N_OUT];
    float *hx = rand_x(BIG);
    const uint64_t seed = rng;
    for (int o = 0; o < 2; o++) {
        dev_device *d = dev_platform_device(g_p, o);
        dev_stream *s = dev_stream_create(d, "gpu-n", &err);
        assert_non_null(s);
        rng = seed; /* the same weights on both GPUs */
        wt w = make_weight(d, KRN_BF16);
        float *dx = up(d, hx, sizeof(float) * BIG * N_IN);
        float *dy = dev_malloc(d, sizeof(float) * BIG * N_OUT, &err);
        assert_int_equal(cudaSetDevice(0), cudaSuccess);
        assert_int_equal(krn_cuda_gemm_async(s, dy, &w.W, dx, BIG, &err), 0);
        int cur = -1;
        assert_int_equal(cudaGetDevice(&cur), cudaSuccess);
        assert_int_equal(cur, 0);
        read_y(s, o ? y1 : y0, dy, BIG);
        dev_free(d, dx);
        dev_free(d, dy);
        free_weight(d, &w);
        dev_stream_destroy(s);
    }
    assert_memory_equal(y0, y1, sizeof y0);
    free(hx);
}

int main(void)
{
    dev_err err = {0};
    g_p = dev_platform_open(DEV_KIND_CUDA, 0, &err);
    if (!g_p) {
        printf("gpu_gemm: skipped: no CUDA device to test on: %s\n", err.msg);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cublas_path_matches_a_double_reference_for_each_float_type),
        cmocka_unit_test(test_same_bits_on_two_runs_and_on_two_streams),
        cmocka_unit_test(test_threshold_routes_large_batches_through_cublas_and_zero_turns_it_off),
        cmocka_unit_test(test_graph_capture_on_a_prepared_stream_replays_the_eager_bits),
        cmocka_unit_test(test_graph_capture_creating_the_cublas_state_replays_the_eager_bits),
        cmocka_unit_test(test_second_gpu_gets_its_own_state_and_the_same_bits),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    dev_platform_close(g_p);
    return rc;
}

#else /* !MEMRA_HAVE_CUDA */

int main(void)
{
    printf("gpu_gemm: skipped: built without CUDA (MEMRA_HAVE_CUDA off)\n");
    return 77;
}

#endif
