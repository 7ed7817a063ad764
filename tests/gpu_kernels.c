/* The CUDA op table (kernels/cuda/krn_cuda.h) against plain C references on random inputs: every weight
 * type of the fused GEMV (several shapes, odd n_out, B = 1, 3, 8, 11, an unaligned tensor), rmsnorm, rope
 * (normal and neox), kv_store, attention (one-kernel and split-K paths, GQA, rows of many chunks, a head's bits whatever heads
 * share its block), swiglu, add, add_bias and argmax (ties). Determinism: every op runs twice on two streams and the bits must match; matmul rows must
 * also match bit for bit between a batch and the row alone. References are computed in double from the
 * same inputs; the dequantizers (tests/support/cuda_ref.c) are written from the GGUF block layouts,
 * independently of kernels/quant.c. Tolerances are stated at each check. Exits 77 (skipped) without a GPU. */
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
#include "support/cuda_fix.h"
#include "support/cuda_ref.h"

/* ---- fixtures: two streams, device buffer helpers (generator and references: support/cuda_ref.h) ---- */


/* ---- matmul ---- */

/* One (type, shape): y for B rows vs the double reference, the same call on the other stream bit for
 * bit, and every row alone (B = 1) bit for bit. misalign: the tensor starts 2 bytes past a 16-byte
 * boundary, between guard bytes of 0xFF (NaN patterns if ever decoded). */
static void check_matmul(const cuda_ref_type *t, int n_out, int n_in, int B, int misalign) {
    const size_t rb = (size_t)(n_in / t->be) * t->bb, wbytes = rb * (size_t)n_out;
    uint8_t *hw = malloc(wbytes + 64);
    float *hx = malloc(sizeof(float) * (size_t)B * n_in);
    float *hy = malloc(sizeof(float) * (size_t)B * n_out), *hy2 = malloc(sizeof(float) * (size_t)B * n_out);
    double *w = malloc(sizeof(double) * n_in), *wa = malloc(sizeof(double) * n_in);
    assert_non_null(hw);
    /* 16 + 2 (f32: 16 + 4, its alignment): not 16-byte aligned, so the first and last vectors straddle */
    const size_t off = !misalign ? 0 : (t->type == KRN_F32 ? 20 : 18);
    memset(hw, 0xFF, wbytes + 64);
    for (int r = 0; r < n_out; r++)
        cuda_ref_rand_row(t, hw + off + (size_t)r * rb, n_in);
    cuda_ref_rand_floats(hx, (size_t)B * n_in);
    uint8_t *dw = dupload(hw, wbytes + 64);
    float *dx = dupload(hx, sizeof(float) * (size_t)B * n_in);
    float *dy = dalloc(sizeof(float) * (size_t)B * n_out), *dy2 = dalloc(sizeof(float) * (size_t)B * n_out);
    float *d1 = dalloc(sizeof(float) * n_out);
    krn_weight W = {t->type, n_out, n_in, dw + off, KRN_LAYOUT_BLOCKS};
    dev_err err = {0};
    assert_int_equal(krn_cuda_matmul_async(g_s1, dy, &W, dx, B, &err), 0);
    assert_int_equal(krn_cuda_matmul_async(g_s2, dy2, &W, dx, B, &err), 0);
    sync_both();
    download(hy, dy, sizeof(float) * (size_t)B * n_out);
    download(hy2, dy2, sizeof(float) * (size_t)B * n_out);
    if (memcmp(hy, hy2, sizeof(float) * (size_t)B * n_out) != 0)
        fail_msg("matmul %s %dx%d B=%d: two runs on two streams differ", t->name, n_out, n_in, B);

    /* |y - ref| <= 2^-22 * (n_in/32 + 40) * sum |w_i||x_i|: fp32 chains of at most n_in/32 + 40 adds
     * (per-lane sums, then the 5-step butterfly), with room for the fused-multiply-add rounding. */
    const double kappa = ldexp(1.0, -22) * (n_in / 32.0 + 40.0);
    for (int r = 0; r < n_out; r++) {
        cuda_ref_dequant(t, hw + off + (size_t)r * rb, n_in, w, wa);
        for (int b = 0; b < B; b++) {
            double ref = 0.0, mag = 0.0;
            for (int i = 0; i < n_in; i++) {
                ref += w[i] * hx[(size_t)b * n_in + i];
                mag += wa[i] * fabs(hx[(size_t)b * n_in + i]);
            }
            const double got = hy[(size_t)b * n_out + r], tol = kappa * mag + 1e-30;
            if (!(fabs(got - ref) <= tol))
                fail_msg("matmul %s %dx%d B=%d misalign=%d: y[%d][%d] = %.9g, reference %.9g (|diff| %.3g > tol %.3g)",
                         t->name, n_out, n_in, B, misalign, b, r, got, ref, fabs(got - ref), tol);
        }
    }
    /* each row alone gives the bits it has in the batch */
    for (int b = 0; b < B; b++) {
        assert_int_equal(krn_cuda_matmul_async(g_s1, d1, &W, dx + (size_t)b * n_in, 1, &err), 0);
        sync_both();
        download(hy2, d1, sizeof(float) * n_out);
        if (memcmp(hy2, hy + (size_t)b * n_out, sizeof(float) * n_out) != 0)
            fail_msg("matmul %s %dx%d: row %d alone differs from row %d of a batch of %d", t->name, n_out, n_in, b,
                     b, B);
    }
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dy2);
    cudaFree(d1);
    free(hw);
    free(hx);
    free(hy);
    free(hy2);
    free(w);
    free(wa);
}

static void test_matmul_matches_reference_for_every_type_shape_and_batch(void **state) {
    (void)state;
    static const int Bs[] = {1, 3, 8, 11};
    for (size_t ti = 0; ti < CUDA_REF_N_TYPES; ti++) {
        const cuda_ref_type *t = &CUDA_REF_TYPES[ti];
        int shapes[7][2];
        int ns = 0;
        if (t->be == 1) {
            /* 97: scalar path; 2144 = 8*268: vector path with a tail; 4096: vector path; 9001 x 1032: more
             * row groups than resident blocks (blocks walk several rows) and a second batch with one step;
             * 3000 x 2144: at B = 1 the 8-loads-per-batch walk (MEMRA_CUDA_MM_DEEP) over several rows per warp,
             * its last batch partial, against the rows of a batch (4 loads per batch) bit for bit; 12000 x 264:
             * 3000 groups, 4 rounds or more of every form's resident grid, so the walk takes the whole cap and
             * blocks walk unequal numbers of groups (9001 x 1032 does so only at B > 1: its rows alone walk an
             * even grid, against the batch's uneven one, bit for bit) */
            int s[][2] = {{1, 8}, {7, 97}, {33, 2144}, {5, 4096}, {9001, 1032}, {3000, 2144}, {12000, 264}};
            ns = 7;
            memcpy(shapes, s, sizeof s);
        } else if (t->be == 32) {
            /* 67 blocks: staged chunks of 32 + 32 + 3 (one warp each); rows not 16-byte aligned */
            /* 3001 rows: more row groups than resident blocks, so blocks walk several groups */
            int s[][2] = {{1, 32}, {7, 96}, {33, 32 * 67}, {5, 4096}, {3001, 64}};
            ns = 5;
            memcpy(shapes, s, sizeof s);
        } else {
            /* 11 super-blocks: staged chunks of 4 + 4 + 3 */
            int s[][2] = {{1, 256}, {7, 768}, {33, 256 * 11}, {5, 4096}, {3001, 256}};
            ns = 5;
            memcpy(shapes, s, sizeof s);
        }
        for (int si = 0; si < ns; si++)
            for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++)
                check_matmul(t, shapes[si][0], shapes[si][1], Bs[bi], 0);
    }
}

/* The fused forms: 3 parts in one call give the bits of 3 plain calls (one launch when they share a float
 * type, one per part otherwise: both tried), and acc gives the bits of matmul then add. Per type, B = 1, 5,
 * 9 (two x chunks); part shapes 6144/1024/1024-like, scaled down, with odd row counts. */
static void test_matmul_parts_and_acc_have_the_bits_of_the_plain_ops(void **state) {
    (void)state;
    static const int Bs[] = {1, 5, 9};
    for (size_t ti = 0; ti < CUDA_REF_N_TYPES; ti++) {
        const cuda_ref_type *t = &CUDA_REF_TYPES[ti];
        const int n_in = t->be == 256 ? 512 : 1024, n_out[3] = {613, 130, 77};
        const size_t rb = (size_t)(n_in / t->be) * t->bb;
        krn_weight W[3];
        for (int i = 0; i < 3; i++) {
            uint8_t *hw = malloc(rb * (size_t)n_out[i]);
            for (int r = 0; r < n_out[i]; r++)
                cuda_ref_rand_row(t, hw + (size_t)r * rb, n_in);
            W[i] = (krn_weight){t->type, n_out[i], n_in, dupload(hw, rb * (size_t)n_out[i]), KRN_LAYOUT_BLOCKS};
            free(hw);
        }
        /* the mixed-type list: part 1 as f32 (its own launch next to the others' one) */
        const cuda_ref_type *f32 = cuda_ref_type_of(KRN_F32);
        uint8_t *hm = malloc(sizeof(float) * (size_t)n_in * n_out[1]);
        for (int r = 0; r < n_out[1]; r++)
            cuda_ref_rand_row(f32, hm + (size_t)r * n_in * sizeof(float), n_in);
        krn_weight Wm = {KRN_F32, n_out[1], n_in, dupload(hm, sizeof(float) * (size_t)n_in * n_out[1]), KRN_LAYOUT_BLOCKS};
        free(hm);
        for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++) {
            const int B = Bs[bi];
            float *hx = malloc(sizeof(float) * (size_t)B * n_in);
            cuda_ref_rand_floats(hx, (size_t)B * n_in);
            float *dx = dupload(hx, sizeof(float) * (size_t)B * n_in);
            dev_err err = {0};
            for (int mixed = 0; mixed < 2; mixed++) {
                const krn_weight *w1 = mixed ? &Wm : &W[1];
                float *y[3], *yr[3];
                const size_t yb[3] = {sizeof(float) * B * n_out[0], sizeof(float) * B * n_out[1],
                                      sizeof(float) * B * n_out[2]};
                for (int i = 0; i < 3; i++)
                    y[i] = dalloc(yb[i]), yr[i] = dalloc(yb[i]);
                const krn_mm_part parts[3] = {{y[0], &W[0]}, {y[1], w1}, {y[2], &W[2]}};
                const krn_mm_x xx = {.x = dx}; /* f32 x, no x8 */
                assert_int_equal(krn_cuda_matmul_parts_async(g_s1, parts, 3, &xx, B, 0, &err), 0);
                assert_int_equal(krn_cuda_matmul_async(g_s2, yr[0], &W[0], dx, B, &err), 0);
                assert_int_equal(krn_cuda_matmul_async(g_s2, yr[1], w1, dx, B, &err), 0);
                assert_int_equal(krn_cuda_matmul_async(g_s2, yr[2], &W[2], dx, B, &err), 0);
                sync_both();
                for (int i = 0; i < 3; i++) {
                    float *a = malloc(yb[i]), *b = malloc(yb[i]);
                    download(a, y[i], yb[i]);
                    download(b, yr[i], yb[i]);
                    if (memcmp(a, b, yb[i]) != 0)
                        fail_msg("matmul parts %s (mixed=%d) B=%d: part %d differs from its plain matmul", t->name,
                                 mixed, B, i);
                    free(a);
                    free(b);
                }
                /* acc on part 0: y[0] (holding x @ W0^T) += x @ W0^T, vs add(yr[0], y-copy) */
                float *t0 = dalloc(yb[0]);
                dcopy(t0, y[0], yb[0]);
                const krn_mm_part acc = {y[0], &W[0]};
                assert_int_equal(krn_cuda_matmul_parts_async(g_s1, &acc, 1, &xx, B, 1, &err), 0);
                assert_int_equal(krn_cuda_add_async(g_s2, yr[0], t0, B, n_out[0], &err), 0);
                sync_both();
                float *a = malloc(yb[0]), *b = malloc(yb[0]);
                download(a, y[0], yb[0]);
                download(b, yr[0], yb[0]);
                if (memcmp(a, b, yb[0]) != 0)
                    fail_msg("matmul acc %s B=%d: differs from matmul then add", t->name, B);
                free(a);
                free(b);
                CK(cudaFree(t0));
                for (int i = 0; i < 3; i++)
                    CK(cudaFree(y[i])), CK(cudaFree(yr[i]));
            }
            CK(cudaFree(dx));
            free(hx);
        }
        for (int i = 0; i < 3; i++)
            CK(cudaFree((void *)W[i].data));
        CK(cudaFree((void *)Wm.data));
    }
}

static void test_matmul_reads_a_misaligned_tensor_without_its_neighbours(void **state) {
    (void)state;
    for (size_t ti = 0; ti < CUDA_REF_N_TYPES; ti++) {
        const cuda_ref_type *t = &CUDA_REF_TYPES[ti];
        const int n_in = t->be == 256 ? 256 * 3 : (t->be == 32 ? 32 * 67 : 2144);
        check_matmul(t, 9, n_in, 3, 1);
    }
}

static void test_matmul_rejects_bad_types_and_shapes_with_a_message(void **state) {
    (void)state;
    float *d = dalloc(4096);
    dev_err err = {0};
    krn_weight W = {7 /* q5_1: unsupported */, 4, 32, d, KRN_LAYOUT_BLOCKS};
    assert_int_equal(krn_cuda_matmul_async(g_s1, d, &W, d, 1, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "unsupported"));
    krn_weight W2 = {KRN_Q4_0, 4, 48, d, KRN_LAYOUT_BLOCKS}; /* 48 is not a multiple of 32 */
    dev_err err2 = {0};
    assert_int_equal(krn_cuda_matmul_async(g_s1, d, &W2, d, 1, &err2), MEMRA_E_INVAL);
    assert_non_null(strstr(err2.msg, "multiple of 32"));
    krn_weight W3 = {KRN_Q4_0, 4, 64, d, KRN_LAYOUT_BLOCKS};
    dev_err err3 = {0};
    assert_int_equal(krn_cuda_matmul_async(g_s1, d, &W3, d, 0, &err3), 0); /* B = 0: nothing to do */
    assert_int_equal(err3.code, 0);
    cudaFree(d);
}

/* ---- row and element ops ---- */

/* Run op on both streams into two outputs initialised from init (n floats), compare the bits. */
#define TWICE_CHECK(name, h1, h2, n)                                                                            \
    do {                                                                                                       \
        if (memcmp((h1), (h2), sizeof(*(h1)) * (n)) != 0)                                                      \
            fail_msg("%s: two runs on two streams differ", name);                                              \
    } while (0)

static void test_rmsnorm_matches_reference_and_is_deterministic(void **state) {
    (void)state;
    /* 576, 8192: the register path (every load in flight; 8192 its largest n); 4099, 8196: the loop path */
    static const int ns[] = {576, 4099, 8192, 8196};
    for (int k = 0; k < 4; k++) {
        const int B = 3, n = ns[k];
        float *x = malloc(sizeof(float) * B * n), *w = malloc(sizeof(float) * n);
        float *y1 = malloc(sizeof(float) * B * n), *y2 = malloc(sizeof(float) * B * n);
        cuda_ref_rand_floats(x, (size_t)B * n);
        cuda_ref_rand_floats(w, n);
        float *dx = dupload(x, sizeof(float) * B * n), *dw = dupload(w, sizeof(float) * n);
        float *dy1 = dalloc(sizeof(float) * B * n), *dy2 = dalloc(sizeof(float) * B * n);
        dev_err err = {0};
        assert_int_equal(krn_cuda_rmsnorm_async(g_s1, dy1, KRN_F32, dx, dw, B, n, 1e-5f, &err), 0);
        assert_int_equal(krn_cuda_rmsnorm_async(g_s2, dy2, KRN_F32, dx, dw, B, n, 1e-5f, &err), 0);
        sync_both();
        download(y1, dy1, sizeof(float) * B * n);
        download(y2, dy2, sizeof(float) * B * n);
        TWICE_CHECK("rmsnorm", y1, y2, (size_t)B * n);
        for (int b = 0; b < B; b++) {
            double ss = 0.0;
            for (int i = 0; i < n; i++)
                ss += (double)x[b * n + i] * x[b * n + i];
            const double sc = 1.0 / sqrt(ss / n + 1e-5);
            for (int i = 0; i < n; i++) {
                const double ref = x[b * n + i] * sc * w[i];
                /* relative 1e-5 of the row scale: fp32 sum of n squares + three roundings */
                if (!(fabs(y1[b * n + i] - ref) <= 1e-5 * sc + 1e-5 * fabs(ref)))
                    fail_msg("rmsnorm n=%d y[%d][%d] = %.9g, reference %.9g", n, b, i, y1[b * n + i], ref);
            }
        }
        cudaFree(dx); cudaFree(dw); cudaFree(dy1); cudaFree(dy2);
        free(x); free(w); free(y1); free(y2);
    }
}

static void test_rope_rotates_pairs_in_both_layouts(void **state) {
    (void)state;
    const int B = 3, nh = 4, hd = 64;
    const int32_t pos[3] = {0, 17, 4000};
    static const int rots[] = {64, 32};
    for (int neox = 0; neox < 2; neox++) {
        for (int ri = 0; ri < 2; ri++) {
            const int n_rot = rots[ri];
            const float base = 10000.0f, fscale = ri ? 0.5f : 1.0f;
            const size_t n = (size_t)B * nh * hd;
            float *x = malloc(sizeof(float) * n), *y1 = malloc(sizeof(float) * n), *y2 = malloc(sizeof(float) * n);
            cuda_ref_rand_floats(x, n);
            float *dx1 = dupload(x, sizeof(float) * n), *dx2 = dupload(x, sizeof(float) * n);
            int32_t *dp = dupload(pos, sizeof pos);
            dev_err err = {0};
            assert_int_equal(krn_cuda_rope_async(g_s1, dx1, dp, B, nh, hd, n_rot, base, fscale, neox, &err), 0);
            assert_int_equal(krn_cuda_rope_async(g_s2, dx2, dp, B, nh, hd, n_rot, base, fscale, neox, &err), 0);
            sync_both();
            download(y1, dx1, sizeof(float) * n);
            download(y2, dx2, sizeof(float) * n);
            TWICE_CHECK("rope", y1, y2, n);
            for (int b = 0; b < B; b++)
                for (int h = 0; h < nh; h++) {
                    const float *xh = x + ((size_t)b * nh + h) * hd;
                    const float *yh = y1 + ((size_t)b * nh + h) * hd;
                    double ref[256];
                    for (int d = 0; d < hd; d++)
                        ref[d] = xh[d];
                    for (int i = 0; i < n_rot / 2; i++) {
                        const double th = (double)pos[b] * fscale * pow(base, -2.0 * i / n_rot);
                        const int i0 = neox ? i : 2 * i, i1 = neox ? i + n_rot / 2 : 2 * i + 1;
                        ref[i0] = xh[i0] * cos(th) - xh[i1] * sin(th);
                        ref[i1] = xh[i0] * sin(th) + xh[i1] * cos(th);
                    }
                    for (int d = 0; d < hd; d++) {
                        /* theta = pos * scale * powf(..) in fp32 on the GPU: a few ulps of theta (up to
                         * ~6e-7 * theta relative) times |x| <= sqrt(2) dominate */
                        const double tol = 1e-5 + 1e-6 * (double)pos[b] * fscale;
                        if (!(fabs(yh[d] - ref[d]) <= tol))
                            fail_msg("rope neox=%d n_rot=%d pos=%d: x[%d][%d][%d] = %.9g, reference %.9g", neox,
                                     n_rot, pos[b], b, h, d, yh[d], ref[d]);
                    }
                }
            cudaFree(dx1); cudaFree(dx2); cudaFree(dp);
            free(x); free(y1); free(y2);
        }
    }
}

/* rope_store = rope(q), rope(k), kv_store, bit for bit: both layouts, full and partial rotation, GQA, a row
 * whose pos is outside [0, n_ctx) (rotated, not stored), every cache type, every cache byte compared. */
static void test_rope_store_has_the_bits_of_rope_rope_and_kv_store(void **state) {
    (void)state;
    const int B = 4, nh = 8, nkv = 2, hd = 64, n_seq = 2, n_ctx = 32;
    const int32_t seq[4] = {1, 0, 1, 0}, pos[4] = {3, 0, 31, 40};
    const size_t nq = (size_t)B * nh * hd, nk = (size_t)B * nkv * hd, nc = (size_t)n_seq * n_ctx * nkv * hd;
    float *hq = malloc(sizeof(float) * nq), *hk = malloc(sizeof(float) * nk), *hv = malloc(sizeof(float) * nk);
    float *hc = malloc(sizeof(float) * nc), *a = malloc(sizeof(float) * nc), *b = malloc(sizeof(float) * nc);
    cuda_ref_rand_floats(hq, nq);
    cuda_ref_rand_floats(hk, nk);
    cuda_ref_rand_floats(hv, nk);
    cuda_ref_rand_floats(hc, nc);
    int32_t *dseq = dupload(seq, sizeof seq), *dpos = dupload(pos, sizeof pos);
    for (int cfg = 0; cfg < 6; cfg++) { /* 0..3: f32 cache, both layouts x partial/full rotation; 4 f16; 5 bf16 */
        const int neox = cfg % 2, n_rot = cfg / 2 % 2 ? hd : 32;
        const int ctype = cfg < 4 ? KRN_F32 : cfg == 4 ? KRN_F16 : KRN_BF16;
        const size_t cb = nc * krn_kv_elem_bytes(ctype);
        float *q1 = dupload(hq, sizeof(float) * nq), *k1 = dupload(hk, sizeof(float) * nk);
        float *q2 = dupload(hq, sizeof(float) * nq), *k2 = dupload(hk, sizeof(float) * nk);
        float *v = dupload(hv, sizeof(float) * nk);
        float *kc1 = dupload(hc, cb), *vc1 = dupload(hc, cb);
        float *kc2 = dupload(hc, cb), *vc2 = dupload(hc, cb);
        const krn_kv_cache c1 = {kc1, vc1, ctype}, c2 = {kc2, vc2, ctype};
        dev_err err = {0};
        const krn_rope_store rs = {.q = q1, .k = k1, .v = v, .cache = c1, .seq = dseq,
                                   .pos = dpos, .B = B, .n_head = nh, .n_head_kv = nkv, .head_dim = hd,
                                   .n_rot = n_rot, .neox = neox, .n_ctx = n_ctx, .freq_base = 10000.0f,
                                   .freq_scale = 1.0f};
        assert_int_equal(krn_cuda_rope_store_async(g_s1, &rs, &err), 0);
        assert_int_equal(krn_cuda_rope_async(g_s2, q2, dpos, B, nh, hd, n_rot, 10000.0f, 1.0f, neox, &err), 0);
        assert_int_equal(krn_cuda_rope_async(g_s2, k2, dpos, B, nkv, hd, n_rot, 10000.0f, 1.0f, neox, &err), 0);
        assert_int_equal(krn_cuda_kv_store_async(g_s2, &c2, k2, v, dseq, dpos, B, nkv * hd, n_ctx, &err), 0);
        sync_both();
        float *pairs[4][2] = {{q1, q2}, {k1, k2}, {kc1, kc2}, {vc1, vc2}};
        const size_t sizes[4] = {sizeof(float) * nq, sizeof(float) * nk, cb, cb};
        const char *what[4] = {"q", "k", "k cache", "v cache"};
        for (int i = 0; i < 4; i++) {
            download(a, pairs[i][0], sizes[i]);
            download(b, pairs[i][1], sizes[i]);
            if (memcmp(a, b, sizes[i]) != 0)
                fail_msg("rope_store neox=%d n_rot=%d cache %s: %s differs from rope + rope + kv_store", neox,
                         n_rot, krn_type_name(ctype), what[i]);
        }
        float *all[9] = {q1, k1, q2, k2, v, kc1, vc1, kc2, vc2};
        for (int i = 0; i < 9; i++)
            CK(cudaFree(all[i]));
    }
    CK(cudaFree(dseq));
    CK(cudaFree(dpos));
    free(hq); free(hk); free(hv); free(hc); free(a); free(b);
}

/* A cache element of `type` at index i, widened to f32 (the host's conversions: CUDA must round the same). */
static float cache_at(const void *c, int type, size_t i) {
    if (type == KRN_F32)
        return ((const float *)c)[i];
    const uint16_t h = ((const uint16_t *)c)[i];
    return type == KRN_F16 ? krn_f16_to_f32(h) : krn_bf16_to_f32(h);
}
static float cache_round(int type, float x) {
    return type == KRN_F32 ? x : type == KRN_F16 ? krn_f16_to_f32(krn_f32_to_f16(x)) : krn_bf16_to_f32(krn_f32_to_bf16(x));
}

/* Every cache type: rows land at [seq, pos] only; f16/bf16 hold the host's round-to-nearest-even value. */
static void test_kv_store_writes_each_row_at_its_sequence_and_position_only(void **state) {
    (void)state;
    const int types[3] = {KRN_F32, KRN_F16, KRN_BF16};
    for (int ti = 0; ti < 3; ti++) {
        const int type = types[ti];
        const int B = 3, kv = 24, n_seq = 2, n_ctx = 16;
        const int32_t seq[3] = {1, 0, 1}, pos[3] = {5, 0, 15};
        const size_t nc = (size_t)n_seq * n_ctx * kv, cb = nc * krn_kv_elem_bytes(type);
        float *k = malloc(sizeof(float) * B * kv), *v = malloc(sizeof(float) * B * kv);
        float *kc = malloc(sizeof(float) * nc), *vc = malloc(sizeof(float) * nc);
        cuda_ref_rand_floats(k, (size_t)B * kv);
        cuda_ref_rand_floats(v, (size_t)B * kv);
        for (size_t i = 0; i < nc; i++)
            kc[i] = vc[i] = -7.0f;
        if (type != KRN_F32) /* the same -7 in 16 bits */
            for (size_t i = 0; i < nc; i++)
                ((uint16_t *)kc)[i] = ((uint16_t *)vc)[i] = type == KRN_F16 ? krn_f32_to_f16(-7.0f) : krn_f32_to_bf16(-7.0f);
        float *dkc = dupload(kc, cb), *dvc = dupload(vc, cb);
        float *dk = dupload(k, sizeof(float) * B * kv), *dv = dupload(v, sizeof(float) * B * kv);
        int32_t *ds = dupload(seq, sizeof seq), *dp = dupload(pos, sizeof pos);
        dev_err err = {0};
        const krn_kv_cache c = {dkc, dvc, type};
        assert_int_equal(krn_cuda_kv_store_async(g_s1, &c, dk, dv, ds, dp, B, kv, n_ctx, &err), 0);
        sync_both();
        download(kc, dkc, cb);
        download(vc, dvc, cb);
        size_t written = 0;
        for (int s = 0; s < n_seq; s++)
            for (int p = 0; p < n_ctx; p++) {
                int row = -1;
                for (int b = 0; b < B; b++)
                    if (seq[b] == s && pos[b] == p)
                        row = b;
                for (int i = 0; i < kv; i++) {
                    const size_t at = ((size_t)s * n_ctx + p) * kv + i;
                    const float ek = cache_round(type, row < 0 ? -7.0f : k[row * kv + i]);
                    const float ev = cache_round(type, row < 0 ? -7.0f : v[row * kv + i]);
                    const float gk = cache_at(kc, type, at), gv = cache_at(vc, type, at);
                    if (memcmp(&gk, &ek, 4) != 0 || memcmp(&gv, &ev, 4) != 0)
                        fail_msg("kv_store %s: cache[%d][%d][%d] = (%g, %g), expected (%g, %g)", krn_type_name(type), s,
                                 p, i, gk, gv, ek, ev);
                    written += row >= 0;
                }
            }
        assert_int_equal(written, (size_t)B * kv); /* liveness: the rows did land */
        cudaFree(dkc); cudaFree(dvc); cudaFree(dk); cudaFree(dv); cudaFree(ds); cudaFree(dp);
        free(k); free(v); free(kc); free(vc);
    }
}

/* Attention over caches with n_ctx slots; q (B, nh*hd); returns out (host, caller frees). */
/* ws_mode: 0 the kernel allocates its split workspace; 1 a given one of exactly krn_attention_ws_bytes;
 * 2 a given one 4 bytes too small (the kernel must allocate its own instead). */
/* kv_type: the caches are uploaded as f32 or rounded to f16/bf16 on the host (g_kv_type; tests set it). */
static int g_kv_type = KRN_F32;
static void *upload_cache(const float *c, size_t n, int type) {
    if (type == KRN_F32)
        return dupload(c, sizeof(float) * n);
    uint16_t *h = malloc(2 * n);
    for (size_t i = 0; i < n; i++)
        h[i] = type == KRN_F16 ? krn_f32_to_f16(c[i]) : krn_f32_to_bf16(c[i]);
    void *d = dupload(h, 2 * n);
    free(h);
    return d;
}
/* Fails unless attention's workspace ws (device memory, its writes complete) has its KRN_ATT_WS_TICKETS tickets at zero. */
static void assert_tickets_zero(const float *ws, const char *what) {
    uint32_t *tk = malloc(KRN_ATT_WS_TICKETS * sizeof(uint32_t));
    download(tk, ws, KRN_ATT_WS_TICKETS * sizeof(uint32_t));
    for (size_t i = 0; i < KRN_ATT_WS_TICKETS; i++)
        if (tk[i] != 0)
            fail_msg("%s: ticket %zu is %u afterwards (want 0)", what, i, tk[i]);
    free(tk);
}
static float *run_attention_ws(cudaStream_t s, const float *q, const float *kc, const float *vc, const int32_t *seq,
                               const int32_t *pos, int B, int nh, int nkv, int hd, int n_seq, int n_ctx, int ws_mode);
static float *run_attention(cudaStream_t s, const float *q, const float *kc, const float *vc, const int32_t *seq,
                            const int32_t *pos, int B, int nh, int nkv, int hd, int n_seq, int n_ctx) {
    return run_attention_ws(s, q, kc, vc, seq, pos, B, nh, nkv, hd, n_seq, n_ctx, 0);
}
static float *run_attention_ws(cudaStream_t s, const float *q, const float *kc, const float *vc, const int32_t *seq,
                               const int32_t *pos, int B, int nh, int nkv, int hd, int n_seq, int n_ctx, int ws_mode) {
    const size_t nq = (size_t)B * nh * hd, nc = (size_t)n_seq * n_ctx * nkv * hd;
    float *dq = dupload(q, sizeof(float) * nq);
    void *dk = upload_cache(kc, nc, g_kv_type), *dv = upload_cache(vc, nc, g_kv_type);
    const krn_kv_cache c = {dk, dv, g_kv_type};
    int32_t *ds = dupload(seq, sizeof(int32_t) * B), *dp = dupload(pos, sizeof(int32_t) * B);
    float *dout = dalloc(sizeof(float) * nq), *out = malloc(sizeof(float) * nq);
    dev_err err = {0};
    const size_t wb = krn_attention_ws_bytes(B, nh, hd, n_ctx) - (ws_mode == 2 ? 4 : 0);
    float *ws = ws_mode && wb > 0 ? dalloc(wb) : NULL;
    const size_t tkb = KRN_ATT_WS_TICKETS * sizeof(uint32_t);
    if (ws) {
        dfill(ws, 0xFF, wb); /* NaN patterns: a read of an unwritten partial would show */
        dfill(ws, 0, tkb);   /* the tickets start at zero (krn.h) */
    }
    dfill(dout, 0xFF, sizeof(float) * nq); /* a row nobody wrote would show */
    const int rc = krn_cuda_attention_ws_async(s, dout, KRN_F32, dq, &c, ds, dp, B, nh, nkv, hd, n_ctx, ws, wb, &err);
    if (rc != 0)
        fail_msg("attention: rc %d: %s", rc, err.msg);
    CK(cudaStreamSynchronize(s));
    download(out, dout, sizeof(float) * nq);
    if (ws) /* the call leaves the tickets zero, used (the fused merge) or not */
        assert_tickets_zero(ws, "attention");
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(ds); cudaFree(dp); cudaFree(dout);
    if (ws)
        cudaFree(ws);
    return out;
}

static void check_attention_ref(const float *out, const float *q, const float *kc, const float *vc,
                                const int32_t *seq, const int32_t *pos, int B, int nh, int nkv, int hd, int n_ctx) {
    const int kvd = nkv * hd;
    double *sc = malloc(sizeof(double) * n_ctx);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < nh; h++) {
            const int g = h / (nh / nkv);
            const float *qh = q + ((size_t)b * nh + h) * hd;
            double mx = -INFINITY, l = 0.0;
            for (int t = 0; t <= pos[b]; t++) {
                const float *kt = kc + ((size_t)seq[b] * n_ctx + t) * kvd + (size_t)g * hd;
                double d = 0.0;
                for (int i = 0; i < hd; i++)
                    d += (double)qh[i] * kt[i];
                sc[t] = d / sqrt((double)hd);
                mx = sc[t] > mx ? sc[t] : mx;
            }
            for (int t = 0; t <= pos[b]; t++)
                l += (sc[t] = exp(sc[t] - mx));
            for (int i = 0; i < hd; i++) {
                double o = 0.0;
                for (int t = 0; t <= pos[b]; t++)
                    o += sc[t] * vc[((size_t)seq[b] * n_ctx + t) * kvd + (size_t)g * hd + i];
                o /= l;
                const double got = out[((size_t)b * nh + h) * hd + i];
                /* values are convex combinations of v in [-1, 1]: fp32 scores, softmax and sums, absolute
                 * 5e-5 (a missing or foreign key moves a value by ~1/(pos+1) >= 1e-3) */
                if (!(fabs(got - o) <= 5e-5))
                    fail_msg("attention b=%d h=%d d=%d (pos %d, n_ctx %d, hd %d): %.9g, reference %.9g", b, h, i,
                             pos[b], n_ctx, hd, got, o);
            }
        }
    free(sc);
}

static void test_attention_matches_reference_on_both_paths_with_gqa(void **state) {
    (void)state;
    static const int hds[] = {64, 96, 128};
    for (int hi = 0; hi < 3; hi++) {
        const int B = 3, nh = 8, nkv = 2, hd = hds[hi], n_seq = 2;
        /* 4500: the combine takes the chunks' partials a tile at a time (4096 floats: 32 chunks at hd 128, 42 at
         * hd 96 with 64 floats of the tile unused, 64 at hd 64), so rows of 33 and 71 chunks cross one and two
         * tile boundaries at hd 128, one and one at hd 96, none and one at hd 64; a chunk dropped or counted twice
         * moves a value by ~64 / pos, far above the reference's bound */
        static const int ctxs[] = {256, 1024, 4500};
        static const int32_t poss[3][3] = {{0, 100, 255}, {0, 300, 1023}, {0, 2048, 4499}};
        for (int ci = 0; ci < 3; ci++) {
            const int n_ctx = ctxs[ci];
            const int32_t seq[3] = {0, 1, 1};
            const int32_t *pos = poss[ci];
            const size_t nq = (size_t)B * nh * hd, nc = (size_t)n_seq * n_ctx * nkv * hd;
            float *q = malloc(sizeof(float) * nq), *kc = malloc(sizeof(float) * nc), *vc = malloc(sizeof(float) * nc);
            cuda_ref_rand_floats(q, nq);
            cuda_ref_rand_floats(kc, nc);
            cuda_ref_rand_floats(vc, nc);
            float *o1 = run_attention(g_s1, q, kc, vc, seq, pos, B, nh, nkv, hd, n_seq, n_ctx);
            float *o2 = run_attention(g_s2, q, kc, vc, seq, pos, B, nh, nkv, hd, n_seq, n_ctx);
            TWICE_CHECK("attention", o1, o2, nq);
            check_attention_ref(o1, q, kc, vc, seq, pos, B, nh, nkv, hd, n_ctx);
            /* a 16-bit cache: the bits of the f32 cache holding the rounded values (split and one-kernel
             * paths both), on every (b, h, d) */
            for (int type = KRN_F16; type != -1; type = type == KRN_F16 ? KRN_BF16 : -1) {
                float *kr = malloc(sizeof(float) * nc), *vr = malloc(sizeof(float) * nc);
                for (size_t i = 0; i < nc; i++)
                    kr[i] = cache_round(type, kc[i]), vr[i] = cache_round(type, vc[i]);
                g_kv_type = type;
                float *o16 = run_attention(g_s1, q, kc, vc, seq, pos, B, nh, nkv, hd, n_seq, n_ctx);
                g_kv_type = KRN_F32;
                float *o32 = run_attention(g_s2, q, kr, vr, seq, pos, B, nh, nkv, hd, n_seq, n_ctx);
                TWICE_CHECK(type == KRN_F16 ? "attention f16 cache vs f32 of its values" :
                            "attention bf16 cache vs f32 of its values", o16, o32, nq);
                free(o16); free(o32); free(kr); free(vr);
            }
            free(o1); free(o2); free(q); free(kc); free(vc);
        }
    }
}

/* The one-kernel path (n_ctx <= the chunk) and the split path (n_ctx > the chunk) give the same bits for
 * keys below one chunk (the default chunk: this process sets no MEMRA_CUDA_ATT_CHUNK). */
static void test_attention_split_path_has_the_bits_of_the_one_kernel_path(void **state) {
    (void)state;
    const int B = 2, nh = 4, nkv = 4, hd = 64, n_seq = 1, small = KRN_CUDA_ATT_CHUNK_DEFAULT, big = 2048;
    const int32_t seq[2] = {0, 0}, pos[2] = {37, small - 1};
    const size_t nq = (size_t)B * nh * hd, kvd = (size_t)nkv * hd;
    float *q = malloc(sizeof(float) * nq), *ks = malloc(sizeof(float) * small * kvd), *vs = malloc(sizeof(float) * small * kvd);
    float *kb = calloc((size_t)big * kvd, sizeof(float)), *vb = calloc((size_t)big * kvd, sizeof(float));
    cuda_ref_rand_floats(q, nq);
    cuda_ref_rand_floats(ks, small * kvd);
    cuda_ref_rand_floats(vs, small * kvd);
    memcpy(kb, ks, sizeof(float) * small * kvd);
    memcpy(vb, vs, sizeof(float) * small * kvd);
    float *o1 = run_attention(g_s1, q, ks, vs, seq, pos, B, nh, nkv, hd, n_seq, small);
    float *o2 = run_attention(g_s1, q, kb, vb, seq, pos, B, nh, nkv, hd, n_seq, big);
    TWICE_CHECK("attention one-kernel vs split", o1, o2, nq);
    /* rows over several chunks: a given workspace (exact size) and a too-small one (the kernel allocates)
     * give the bits of the allocating path */
    cuda_ref_rand_floats(kb, (size_t)big * kvd);
    cuda_ref_rand_floats(vb, (size_t)big * kvd);
    const int32_t far[2] = {300, 1500};
    float *a0 = run_attention_ws(g_s1, q, kb, vb, seq, far, B, nh, nkv, hd, n_seq, big, 0);
    float *a1 = run_attention_ws(g_s1, q, kb, vb, seq, far, B, nh, nkv, hd, n_seq, big, 1);
    float *a2 = run_attention_ws(g_s1, q, kb, vb, seq, far, B, nh, nkv, hd, n_seq, big, 2);
    TWICE_CHECK("attention given workspace vs allocated", a0, a1, nq);
    TWICE_CHECK("attention too-small workspace vs allocated", a0, a2, nq);
    check_attention_ref(a1, q, kb, vb, seq, far, B, nh, nkv, hd, big);
    free(a0); free(a1); free(a2);
    free(o1); free(o2); free(q); free(ks); free(vs); free(kb); free(vb);
}

/* The fused merge (a given workspace, its tickets zeroed: no combine kernel) gives the combine kernel's bits (an
 * allocated workspace), call after call on one workspace: five calls queued back to back, rows moving between one
 * chunk and many (tickets of rows of one chunk untouched, of others counted up to 63 and reset; 32 and 33 chunks:
 * Ls's butterflies over one and two groups of 32, as the combine's warps), GQA 12 / 2 (two head groups of 3, a
 * ticket each), hd 128; the tickets are zero after them. The merge is fused when the call's chunk count is at most
 * MEMRA_CUDA_ATT_FUSE: at 64-key chunks (63 here) only under ctest gpu_kernels_att_fuse (=64), at 256-key chunks (16)
 * by default too (gpu_kernels_att_chunk256); otherwise both sides take the combine kernel. The fused-call counter
 * says which ran. */
static void test_attention_fused_merge_reuses_its_tickets(void **state) {
    (void)state;
    enum { B = 3, NCALL = 5 };
    const int nh = 12, nkv = 2, hd = 128, n_seq = 3, n_ctx = 4000;
    const int32_t seq[B] = {0, 1, 2};
    static const int32_t poss[NCALL][B] = {{10, 700, 3999}, {64, 2047, 2048}, {63, 3999, 128}, {3999, 0, 64},
                                           {200, 200, 200}};
    const size_t nq = (size_t)B * nh * hd, nc = (size_t)n_seq * n_ctx * nkv * hd;
    float *q = malloc(sizeof(float) * nq), *kc = malloc(sizeof(float) * nc), *vc = malloc(sizeof(float) * nc);
    float *got = malloc(sizeof(float) * nq);
    cuda_ref_rand_floats(q, nq);
    cuda_ref_rand_floats(kc, nc);
    cuda_ref_rand_floats(vc, nc);
    float *dq = dupload(q, sizeof(float) * nq), *dk = dupload(kc, sizeof(float) * nc);
    float *dv = dupload(vc, sizeof(float) * nc);
    int32_t *ds = dupload(seq, sizeof seq), *dp[NCALL];
    float *dout[NCALL];
    const krn_kv_cache c = {dk, dv, KRN_F32};
    const size_t wb = krn_attention_ws_bytes(B, nh, hd, n_ctx), tkb = KRN_ATT_WS_TICKETS * sizeof(uint32_t);
    float *ws = dalloc(wb);
    dfill(ws, 0xFF, wb);
    dfill(ws, 0, tkb);
    for (int i = 0; i < NCALL; i++) {
        dp[i] = dupload(poss[i], sizeof poss[i]);
        dout[i] = dalloc(sizeof(float) * nq);
        dfill(dout[i], 0xFF, sizeof(float) * nq);
    }
    dev_err err = {0};
    const uint64_t fused0 = krn_cuda_attention_fused_count();
    for (int i = 0; i < NCALL; i++) /* ordered by g_s1: each call's tickets are back to zero before the next's */
        if (krn_cuda_attention_ws_async(g_s1, dout[i], KRN_F32, dq, &c, ds, dp[i], B, nh, nkv, hd, n_ctx, ws, wb,
                                        &err))
            fail_msg("attention call %d: %s", i, err.msg);
    CK(cudaStreamSynchronize(g_s1));
    /* liveness: every call fused its merge when the chunk count (63 at 64-key chunks, 16 at 256) is at most
     * MEMRA_CUDA_ATT_FUSE (its default when unset), else none did */
    const char *fz = getenv("MEMRA_CUDA_ATT_FUSE"), *cz = getenv("MEMRA_CUDA_ATT_CHUNK");
    const int fuse_max = fz && *fz ? atoi(fz) : KRN_CUDA_ATT_FUSE_DEFAULT;
    const int ck = cz && *cz ? atoi(cz) : KRN_CUDA_ATT_CHUNK_DEFAULT;
    const int fusing = (n_ctx + ck - 1) / ck <= fuse_max;
    assert_int_equal(krn_cuda_attention_fused_count() - fused0, fusing ? NCALL : 0);
    for (int i = 0; i < NCALL; i++) {
        download(got, dout[i], sizeof(float) * nq);
        float *want = run_attention(g_s1, q, kc, vc, seq, poss[i], B, nh, nkv, hd, n_seq, n_ctx);
        TWICE_CHECK("attention fused merge vs the combine kernel", got, want, nq);
        free(want);
        cudaFree(dp[i]);
        cudaFree(dout[i]);
    }
    assert_tickets_zero(ws, "attention fused merge");
    cudaFree(ws); cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(ds);
    free(q); free(kc); free(vc); free(got);
}

/* One case of the test below: the output and both caches of the two ops and of the one op, byte for byte. */
struct rope_att_cfg { int hd, nh, nkv, n_rot, neox, fused; };
static void rope_attention_case(const struct rope_att_cfg *c, int type, int n_ctx, int p) {
    const int n_seq = 2;
    const int hd = c->hd, nh = c->nh, nkv = c->nkv, kvd = nkv * hd;
    const size_t nq = (size_t)nh * hd, nc = (size_t)n_seq * n_ctx * kvd, eb = krn_kv_elem_bytes(type);
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * kvd);
    float *v = malloc(sizeof(float) * kvd), *kc = malloc(sizeof(float) * nc);
    float *vc = malloc(sizeof(float) * nc);
    cuda_ref_rand_floats(q, nq);
    cuda_ref_rand_floats(k, kvd);
    cuda_ref_rand_floats(v, kvd);
    cuda_ref_rand_floats(kc, nc);
    cuda_ref_rand_floats(vc, nc);
    const int32_t seq[1] = {1}, pos[1] = {p};
    float *out[3];
    unsigned char *caches[3][2];
    const size_t wb = krn_attention_ws_bytes(1, nh, hd, n_ctx);
    const uint64_t f0 = krn_cuda_rope_attention_fused_count();
    for (int arm = 0; arm < 3; arm++) { /* 0: the two ops, 1: the one op, 2: the one op with the bound keys = p + 1 */
        float *dq = dupload(q, sizeof(float) * nq), *dk = dupload(k, sizeof(float) * kvd);
        float *dv = dupload(v, sizeof(float) * kvd);
        void *dkc = upload_cache(kc, nc, type), *dvc = upload_cache(vc, nc, type);
        int32_t *ds = dupload(seq, sizeof seq), *dp = dupload(pos, sizeof pos);
        float *dout = dalloc(sizeof(float) * nq), *ws = dalloc(wb);
        dfill(dout, 0xFF, sizeof(float) * nq);
        dfill(ws, 0xFF, wb);
        dfill(ws, 0, KRN_ATT_WS_TICKETS * sizeof(uint32_t));
        krn_rope_store rs = {.q = dq, .k = dk, .v = dv, .cache = {dkc, dvc, type}, .seq = ds,
                             .pos = dp, .B = 1, .n_head = nh, .n_head_kv = nkv, .head_dim = hd,
                             .n_rot = c->n_rot, .neox = c->neox, .n_ctx = n_ctx,
                             .freq_base = 10000.0f, .freq_scale = 1.0f};
        dev_err err = {0};
        int rc;
        if (arm == 0) {
            rc = krn_cuda_rope_store_async(g_s1, &rs, &err);
            if (rc == 0)
                rc = krn_cuda_attention_ws_async(g_s1, dout, KRN_F32, dq, &rs.cache, ds, dp, 1, nh, nkv,
                                                 hd, n_ctx, ws, wb, &err);
        } else {
            rs.keys = arm == 2 && p < n_ctx ? p + 1 : 0; /* a grid of the row's chunks only (one past: none) */
            rc = krn_cuda_rope_attention_async(g_s1, dout, KRN_F32, &rs, ws, wb, &err);
        }
        if (rc != 0)
            fail_msg("rope + attention arm %d: rc %d: %s", arm, rc, err.msg);
        CK(cudaStreamSynchronize(g_s1));
        out[arm] = malloc(sizeof(float) * nq);
        download(out[arm], dout, sizeof(float) * nq);
        for (int w = 0; w < 2; w++) {
            caches[arm][w] = malloc(nc * eb);
            download(caches[arm][w], w ? dvc : dkc, nc * eb);
        }
        assert_tickets_zero(ws, "rope + attention");
        cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dkc); cudaFree(dvc); cudaFree(ds);
        cudaFree(dp); cudaFree(dout); cudaFree(ws);
    }
    assert_int_equal(krn_cuda_rope_attention_fused_count() - f0, 2 * (uint64_t)c->fused);
    for (int arm = 1; arm < 3; arm++) {
        if (memcmp(out[0], out[arm], sizeof(float) * nq) != 0)
            fail_msg("rope + attention arm %d: hd %d n_rot %d neox %d type %d n_ctx %d pos %d: out differs", arm, hd,
                     c->n_rot, c->neox, type, n_ctx, p);
        for (int w = 0; w < 2; w++)
            if (memcmp(caches[0][w], caches[arm][w], nc * eb) != 0)
                fail_msg("rope + attention arm %d: hd %d n_rot %d neox %d type %d n_ctx %d pos %d: the %s cache "
                         "differs", arm, hd, c->n_rot, c->neox, type, n_ctx, p, w ? "V" : "K");
    }
    for (int arm = 0; arm < 3; arm++) {
        free(out[arm]);
        free(caches[arm][0]);
        free(caches[arm][1]);
    }
    free(q); free(k); free(v); free(kc); free(vc);
}

/* krn_cuda_rope_attention_async (rope inside the attention kernel at B = 1) gives the bits of rope_store then
 * attention: the output and both whole caches, byte for byte, over f32/f16/bf16 caches, normal and neox rope, full
 * and partial rotation, head_dim 64 / 128 / 256 (DPL 1 and 2), positions at chunk edges, the last and one past the
 * cache (rotated, not stored, attention clamped), in caches of 4 and of 18 chunks (ctest gpu_kernels_att_fuse,
 * MEMRA_CUDA_ATT_FUSE=64, merges those 18 in the chunk kernel: with rope inside 16 a round trip and a tail, without
 * 8). A shape att_rope_fits refuses (neox at n_rot / 8 = 10) takes the two ops; the liveness counter says which
 * ran. A third arm gives the one op the bound keys = pos + 1 (krn_rope_store.keys: a grid of the row's chunks, one
 * chunk needing no merge): the same bits again. */
static void test_attention_rope_has_the_bits_of_the_two_ops(void **state) {
    (void)state;
    static const struct rope_att_cfg cfg[] = {
        {128, 8, 2, 128, 0, 1}, {128, 8, 2, 128, 1, 1}, {64, 4, 2, 64, 1, 1}, {64, 4, 2, 32, 0, 1},
        {256, 4, 1, 256, 1, 1}, {128, 12, 2, 64, 1, 1}, {80, 6, 2, 80, 1, 0}};
    static const int types[] = {KRN_F32, KRN_F16, KRN_BF16};
    static const struct { int n_ctx, n_pos, pos[7]; } ctxs[] = {{200, 7, {0, 5, 63, 64, 100, 199, 200}},
                                                               {1100, 3, {1023, 1024, 1099}}};
    for (size_t xi = 0; xi < sizeof ctxs / sizeof ctxs[0]; xi++)
        for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++)
            for (int ti = 0; ti < 3; ti++)
                for (int pi = 0; pi < ctxs[xi].n_pos; pi++)
                    rope_attention_case(&cfg[ci], types[ti], ctxs[xi].n_ctx, ctxs[xi].pos[pi]);
}

/* A block takes up to 4 query heads of one kv head (GQA groups of G = 4, 6 -> two of 3, 13 -> 4+4+4+1); a head's
 * bits must not depend on which heads share its block: every head of a G-head run equals, bit for bit, the same
 * head run alone (G = 1 over its kv head), on the one-kernel path and on the split-K path, for hd 64 and 128
 * (a lane's one or two float4s). */
static void test_attention_head_bits_do_not_depend_on_its_group(void **state) {
    (void)state;
    static const int Gs[] = {4, 6, 13};
    static const int hds[] = {64, 128};
    for (int gi = 0; gi < 3; gi++)
        for (int hi = 0; hi < 2; hi++) {
            const int G = Gs[gi], nkv = 2, nh = G * nkv, hd = hds[hi], B = 2, n_seq = 2, n_ctx = 300;
            const int32_t seq[2] = {0, 1}, pos[2] = {40, 299}; /* one chunk; five chunks of 64 */
            const size_t nq = (size_t)B * nh * hd, nc = (size_t)n_seq * n_ctx * nkv * hd;
            float *q = malloc(sizeof(float) * nq), *kc = malloc(sizeof(float) * nc), *vc = malloc(sizeof(float) * nc);
            float *q1 = malloc(sizeof(float) * B * nkv * hd);
            cuda_ref_rand_floats(q, nq);
            cuda_ref_rand_floats(kc, nc);
            cuda_ref_rand_floats(vc, nc);
            float *og = run_attention(g_s1, q, kc, vc, seq, pos, B, nh, nkv, hd, n_seq, n_ctx);
            check_attention_ref(og, q, kc, vc, seq, pos, B, nh, nkv, hd, n_ctx); /* the grouping is right, too */
            for (int h = 0; h < G; h++) { /* head h of each kv group, alone: nh = nkv, q = those heads */
                for (int b = 0; b < B; b++)
                    for (int k = 0; k < nkv; k++)
                        memcpy(q1 + ((size_t)b * nkv + k) * hd, q + ((size_t)b * nh + k * G + h) * hd,
                               sizeof(float) * hd);
                float *o1 = run_attention(g_s2, q1, kc, vc, seq, pos, B, nkv, nkv, hd, n_seq, n_ctx);
                for (int b = 0; b < B; b++)
                    for (int k = 0; k < nkv; k++)
                        if (memcmp(o1 + ((size_t)b * nkv + k) * hd, og + ((size_t)b * nh + k * G + h) * hd,
                                   sizeof(float) * hd))
                            fail_msg("attention G=%d hd=%d: head %d of kv head %d (row %d, pos %d) differs from the "
                                     "head alone", G, hd, h, k, b, pos[b]);
                free(o1);
            }
            free(og); free(q); free(q1); free(kc); free(vc);
        }
}

static void test_attention_rejects_an_unsupported_head_dim(void **state) {
    (void)state;
    float *d = dalloc(4096);
    dev_err err = {0};
    krn_kv_cache c = {d, d, KRN_F32};
    assert_int_equal(krn_cuda_attention_async(g_s1, d, d, &c, (int32_t *)d, (int32_t *)d, 1, 2, 1, 6, 8, &err),
                     MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "head_dim=6"));
    c.type = KRN_Q8_0;
    dev_err err2 = {0}; /* a dev_err keeps its first message */
    assert_int_equal(krn_cuda_attention_async(g_s1, d, d, &c, (int32_t *)d, (int32_t *)d, 1, 2, 1, 8, 8, &err2),
                     MEMRA_E_INVAL);
    assert_non_null(strstr(err2.msg, "allowed: f32, f16, bf16"));
    cudaFree(d);
}

static void test_swiglu_add_and_add_bias_match_reference(void **state) {
    (void)state;
    const int B = 3, n = 1000;
    const size_t t = (size_t)B * n;
    float *g = malloc(sizeof(float) * t), *u = malloc(sizeof(float) * t), *bias = malloc(sizeof(float) * n);
    float *y = malloc(sizeof(float) * t), *y2 = malloc(sizeof(float) * t);
    cuda_ref_rand_floats(g, t);
    cuda_ref_rand_floats(u, t);
    cuda_ref_rand_floats(bias, n);
    for (size_t i = 0; i < t; i++)
        g[i] *= 8.0f;
    float *dg = dupload(g, sizeof(float) * t), *du = dupload(u, sizeof(float) * t), *db = dupload(bias, sizeof(float) * n);
    float *dy = dalloc(sizeof(float) * t), *dy2 = dalloc(sizeof(float) * t);
    dev_err err = {0};
    assert_int_equal(krn_cuda_swiglu_async(g_s1, dy, KRN_F32, dg, du, B, n, &err), 0);
    assert_int_equal(krn_cuda_swiglu_async(g_s2, dy2, KRN_F32, dg, du, B, n, &err), 0);
    sync_both();
    download(y, dy, sizeof(float) * t);
    download(y2, dy2, sizeof(float) * t);
    TWICE_CHECK("swiglu", y, y2, t);
    for (size_t i = 0; i < t; i++) {
        const double ref = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        /* expf and one division: relative 1e-6, absolute 1e-7 */
        if (!(fabs(y[i] - ref) <= 1e-6 * fabs(ref) + 1e-7))
            fail_msg("swiglu [%zu] = %.9g, reference %.9g", i, y[i], ref);
    }
    /* y += u (exact in fp32), then y += bias (exact) */
    assert_int_equal(krn_cuda_add_async(g_s1, dy, du, B, n, &err), 0);
    assert_int_equal(krn_cuda_add_bias_async(g_s1, dy, db, B, n, &err), 0);
    sync_both();
    download(y2, dy, sizeof(float) * t);
    for (size_t i = 0; i < t; i++) {
        const float ref = (y[i] + u[i]) + bias[i % n];
        if (y2[i] != ref)
            fail_msg("add/add_bias [%zu] = %.9g, expected %.9g", i, y2[i], ref);
    }
    cudaFree(dg); cudaFree(du); cudaFree(db); cudaFree(dy); cudaFree(dy2);
    free(g); free(u); free(bias); free(y); free(y2);
}

/* n = 49159 (scalar loop) and 128256 (the 8B vocabulary: float4 loads, unrolled part and remainder) */
static void test_argmax_takes_the_lowest_index_on_ties(void **state) {
    (void)state;
    /* the argmax kernel cuts a row into 8 slices, one a block of its cluster: 7 and 12 leave some empty */
    const int ns[4] = {49152 + 7, 128256, 7, 12};
    for (int k = 0; k < 4; k++) {
        const int B = 6, n = ns[k];
        const size_t t = (size_t)B * n;
        float *x = malloc(sizeof(float) * t);
        cuda_ref_rand_floats(x, t);
        /* row 0: max 5.0 at far and at 5 -> 5; row 1: all equal -> 0; row 2: NaN first, max at n-1;
         * row 3: random, max found on the host; row 4: -inf everywhere but NaNs, a tie of 7.0 in the last
         * float4s (remainder) -> the lower one; row 5: only -inf and NaN -> -1 */
        const int far = n > 1000 ? n - 900 : n - 1; /* in another slice than 5's */
        x[0 * (size_t)n + far] = 5.0f;
        x[0 * (size_t)n + 5] = 5.0f;
        for (int i = 0; i < n; i++)
            x[1 * (size_t)n + i] = 0.25f, x[4 * (size_t)n + i] = x[5 * (size_t)n + i] = i % 3 ? -INFINITY : NAN;
        x[2 * (size_t)n + 0] = NAN;
        x[2 * (size_t)n + n - 1] = 3.0f;
        x[4 * (size_t)n + n - 3] = 7.0f;
        x[4 * (size_t)n + n - 6] = 7.0f;
        int32_t expect[6] = {5, 0, n - 1, 0, n - 6, -1};
        for (int i = 1; i < n; i++)
            if (x[3 * (size_t)n + i] > x[3 * (size_t)n + expect[3]])
                expect[3] = i;
        float *dx = dupload(x, sizeof(float) * t);
        int32_t *d1 = dalloc(sizeof(int32_t) * B), *d2 = dalloc(sizeof(int32_t) * B);
        int32_t *d3 = dalloc(sizeof(int32_t) * B), *d4 = dalloc(sizeof(int32_t) * 8);
        const int32_t at[6] = {7, 2, -1, 0, 8, 5}; /* row 2 and row 4 name no slot of the 8 */
        int32_t *dat = dupload(at, sizeof at);
        int32_t h1[6], h2[6], h3[6], h4[8];
        dev_err err = {0};
        dfill(d3, 0x7F, sizeof(int32_t) * B);
        dfill(d4, 0x7F, sizeof(int32_t) * 8);
        assert_int_equal(krn_cuda_argmax_async(g_s1, d1, NULL, NULL, 0, dx, B, n, &err), 0);
        assert_int_equal(krn_cuda_argmax_async(g_s2, d2, d3, NULL, 0, dx, B, n, &err), 0); /* d3: a second destination */
        assert_int_equal(krn_cuda_argmax_async(g_s2, d2, d4, dat, 8, dx, B, n, &err), 0); /* d4: slots by index */
        sync_both();
        download(h1, d1, sizeof h1);
        download(h2, d2, sizeof h2);
        download(h3, d3, sizeof h3);
        download(h4, d4, sizeof h4);
        TWICE_CHECK("argmax", h1, h2, 6);
        TWICE_CHECK("argmax's second destination", h2, h3, 6);
        const int32_t fill = 0x7F7F7F7F, want4[8] = {h1[3], fill, h1[1], fill, fill, h1[5], fill, h1[0]};
        if (memcmp(h4, want4, sizeof want4) != 0)
            fail_msg("argmax n=%d: the slots by index are not rows 3, 1, 5 and 0's indices at 0, 2, 5 and 7", n);
        for (int b = 0; b < B; b++)
            if (h1[b] != expect[b])
                fail_msg("argmax n=%d row %d = %d, expected %d", n, b, h1[b], expect[b]);
        cudaFree(dx); cudaFree(d1); cudaFree(d2); cudaFree(d3); cudaFree(d4); cudaFree(dat);
        free(x);
    }
}

/* The op table (kernels/krn.c) sends a CUDA dev_stream to these kernels: krn_matmul_async on every visible
 * GPU, each launched while GPU 0 is the thread's current device (the adapter switches and restores),
 * gives the bits of the raw call. */
static void test_op_table_runs_these_kernels_on_each_devices_stream(void **state) {
    (void)state;
    const cuda_ref_type *t = cuda_ref_type_of(KRN_Q4_0);
    const int n_out = 37, n_in = 32 * 67, B = 3;
    const size_t wbytes = (size_t)n_out * (n_in / 32) * 18, xb = sizeof(float) * (size_t)B * n_in;
    const size_t yb = sizeof(float) * (size_t)B * n_out;
    uint8_t *hw = malloc(wbytes);
    float *hx = malloc(xb), *ref = malloc(yb), *got = malloc(yb);
    for (int r = 0; r < n_out; r++)
        cuda_ref_rand_row(t, hw + (size_t)r * (wbytes / n_out), n_in);
    cuda_ref_rand_floats(hx, (size_t)B * n_in);
    uint8_t *dw = dupload(hw, wbytes);
    float *dx = dupload(hx, xb), *dy = dalloc(yb);
    krn_weight W = {t->type, n_out, n_in, dw, KRN_LAYOUT_BLOCKS};
    dev_err err = {0};
    assert_int_equal(krn_cuda_matmul_async(g_s1, dy, &W, dx, B, &err), 0);
    sync_both();
    download(ref, dy, yb);

    dev_platform *p = dev_platform_open(DEV_KIND_CUDA, 0, &err);
    if (!p)
        fail_msg("dev_platform_open(cuda): %s", err.msg);
    int ran = 0;
    for (int o = 0; o < dev_platform_count(p); o++) {
        dev_device *d = dev_platform_device(p, o);
        dev_stream *s = dev_stream_create(d, "krn", &err);
        assert_non_null(s);
        void *w = dev_malloc(d, wbytes, &err), *x = dev_malloc(d, xb, &err), *y = dev_malloc(d, yb, &err);
        assert_true(w && x && y);
        assert_int_equal(dev_copy_h2d_sync(d, w, hw, wbytes, &err), 0);
        assert_int_equal(dev_copy_h2d_sync(d, x, hx, xb, &err), 0);
        CK(cudaSetDevice(0));
        krn_weight Wd = {t->type, n_out, n_in, w, KRN_LAYOUT_BLOCKS};
        assert_int_equal(krn_matmul_async(s, y, &Wd, x, B), 0);
        int cur = -1;
        CK(cudaGetDevice(&cur));
        assert_int_equal(cur, 0); /* the adapter restored the caller's device */
        assert_int_equal(dev_copy_d2h_async(s, got, y, yb), 0);
        assert_int_equal(dev_stream_sync(s, &err), 0);
        if (memcmp(got, ref, yb) != 0)
            fail_msg("krn_matmul_async on %s differs from the raw call", dev_device_name(d));
        ran++;
        dev_free(d, w);
        dev_free(d, x);
        dev_free(d, y);
        dev_stream_destroy(s);
    }
    assert_true(ran >= 1);
    dev_platform_close(p);
    CK(cudaSetDevice(0));
    cudaFree(dw); cudaFree(dx); cudaFree(dy);
    free(hw); free(hx); free(ref); free(got);
}

int main(void) {
    if (cuda_fix_no_gpu("gpu_kernels"))
        return 77;
    const char *only = getenv("GPU_KERNELS_ONLY"); /* a test name pattern (tests/gpu.cmake, sanitizer runs) */
    if (only && *only)
        cmocka_set_test_filter(only);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_matches_reference_for_every_type_shape_and_batch),
        cmocka_unit_test(test_matmul_parts_and_acc_have_the_bits_of_the_plain_ops),
        cmocka_unit_test(test_matmul_reads_a_misaligned_tensor_without_its_neighbours),
        cmocka_unit_test(test_matmul_rejects_bad_types_and_shapes_with_a_message),
        cmocka_unit_test(test_rmsnorm_matches_reference_and_is_deterministic),
        cmocka_unit_test(test_rope_rotates_pairs_in_both_layouts),
        cmocka_unit_test(test_kv_store_writes_each_row_at_its_sequence_and_position_only),
        cmocka_unit_test(test_rope_store_has_the_bits_of_rope_rope_and_kv_store),
        cmocka_unit_test(test_attention_matches_reference_on_both_paths_with_gqa),
        cmocka_unit_test(test_attention_split_path_has_the_bits_of_the_one_kernel_path),
        cmocka_unit_test(test_attention_fused_merge_reuses_its_tickets),
        cmocka_unit_test(test_attention_head_bits_do_not_depend_on_its_group),
        cmocka_unit_test(test_attention_rejects_an_unsupported_head_dim),
        cmocka_unit_test(test_attention_rope_has_the_bits_of_the_two_ops),
        cmocka_unit_test(test_swiglu_add_and_add_bias_match_reference),
        cmocka_unit_test(test_argmax_takes_the_lowest_index_on_ties),
        cmocka_unit_test(test_op_table_runs_these_kernels_on_each_devices_stream),
    };
    return cmocka_run_group_tests(tests, two_streams_setup, two_streams_teardown);
}

#else /* !MEMRA_HAVE_CUDA */

int main(void) {
    printf("gpu_kernels: skipped: built without CUDA (MEMRA_HAVE_CUDA off)\n");
    return 77;
}

#endif
