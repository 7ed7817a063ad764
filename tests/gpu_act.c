/* Activation types on the GPU (kernels/krn.h "activation types", docs/cuda-kernels.md "Activation types"), for f16
 * and bf16, every comparison bit for bit:
 *   - producers: rmsnorm (both kernels), swiglu and attention (the one-kernel path, and the split-K path's two
 *     stores: a row within one chunk and rows over several) with a 16-bit output hold the f32 op's output rounded
 *     to nearest even (the host's krn_f32_to_f16 / krn_f32_to_bf16);
 *   - consumers: the GEMV over a 16-bit x gives the f32 GEMV's bits over the widened x, for every weight type in
 *     GGUF blocks (float types on both the vec and the scalar path) and for the planes of q8_0 / q4_0 / q4_1 /
 *     q4_K / q6_K, at B = 1, 3, 8, 11; the fused forms too (3 parts in one launch, a mixed list launched per part, acc);
 *     quantize_x8 over a 16-bit x writes krn_x8_quantize_host's bytes for the widened rows (zero, NaN, inf blocks);
 *   - cuBLAS (B >= 16): bf16 x with a bf16 W is passed in place (a captured GEMM has no conversion buffer, the
 *     f32-x one has), lies within tests/gpu_gemm.c's tolerance of a double reference, and has the f32-x path's
 *     bits when that x holds the same (bf16-representable) values; f16 and f32 weights over bf16 x convert and
 *     have the f32-x bits too;
 *   - the op table on a CUDA dev_stream reaches these kernels (the dev_stream adapters), x8 going to PLANES parts
 *     only; bad types, misaligned 16-bit x and a 16-bit swiglu output over its input are refused with a message.
 * Outputs are poisoned with different bytes before each of two compared runs, so a path that writes nothing
 * cannot pass. Exits 77 (skipped) without a GPU. */
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
#include "kernels/quant.h"
#include "kernels/cuda/krn_cuda.h"
#include "kernels/cuda/krn_cuda_gemm.cuh"
#include "kernels/cuda/krn_cuda_planes.h"
#include "support/cuda_fix.h"
#include "support/cuda_ref.h"

static const int ACT16[2] = {KRN_F16, KRN_BF16};

/* f rounded to the 16-bit type t (nearest even), as bits, and back (exact). */
static uint16_t to16(int t, float f) { return t == KRN_F16 ? krn_f32_to_f16(f) : krn_f32_to_bf16(f); }
static float from16(int t, uint16_t h) { return t == KRN_F16 ? krn_f16_to_f32(h) : krn_bf16_to_f32(h); }

/* A random x (n values in [-scale, scale)) of the 16-bit type t: h16 its bits, hw the widened values (the f32 x
 * the 16-bit one must match). */
static void rand_x16(int t, size_t n, float scale, uint16_t *h16, float *hw) {
    for (size_t i = 0; i < n; i++) {
        h16[i] = to16(t, cuda_ref_rand_unit() * scale);
        hw[i] = from16(t, h16[i]);
    }
}

/* Fails unless the n 16-bit values got are the f32 values want rounded to t. */
static void expect_rounded(const char *what, int t, const uint16_t *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != to16(t, want[i]))
            fail_msg("%s %s: [%zu] = 0x%04x, the f32 op's %.9g rounds to 0x%04x", what, krn_type_name(t), i, got[i],
                     (double)want[i], to16(t, want[i]));
}

/* Fails unless the n floats at a and b have the same bits. */
static void expect_same(const char *what, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
            fail_msg("%s: [%zu] = %.9g (16-bit x), %.9g (widened f32 x)", what, i, (double)a[i], (double)b[i]);
}

/* ---- producers ---- */

/* n 576, 8192: the vec kernel (16-bit y 8-byte aligned); 4099, 8196: the loop kernel. */
static void test_rmsnorm_with_a_16_bit_y_holds_the_f32_output_rounded(void **state) {
    (void)state;
    static const int ns[] = {576, 4099, 8192, 8196};
    for (int k = 0; k < 4; k++) {
        const int B = 3, n = ns[k];
        const size_t t = (size_t)B * n;
        float *x = malloc(sizeof(float) * t), *w = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * t);
        uint16_t *y16 = malloc(2 * t);
        assert_true(x && w && y && y16);
        cuda_ref_rand_floats(x, t);
        cuda_ref_rand_floats(w, n);
        float *dx = dupload(x, sizeof(float) * t), *dw = dupload(w, sizeof(float) * n), *dy = dalloc(sizeof(float) * t);
        void *dy16 = dalloc(2 * t);
        dev_err err = {0};
        dfill(dy, 0xFF, sizeof(float) * t);
        assert_int_equal(krn_cuda_rmsnorm_async(g_s1, dy, KRN_F32, dx, dw, B, n, 1e-5f, &err), 0);
        CK(cudaStreamSynchronize(g_s1));
        download(y, dy, sizeof(float) * t);
        for (int ti = 0; ti < 2; ti++) {
            dfill(dy16, 0xFE, 2 * t);
            assert_int_equal(krn_cuda_rmsnorm_async(g_s2, dy16, ACT16[ti], dx, dw, B, n, 1e-5f, &err), 0);
            CK(cudaStreamSynchronize(g_s2));
            download(y16, dy16, 2 * t);
            expect_rounded(n % 4 ? "rmsnorm (loop)" : "rmsnorm", ACT16[ti], y16, y, t);
        }
        cudaFree(dx), cudaFree(dw), cudaFree(dy), cudaFree(dy16);
        free(x), free(w), free(y), free(y16);
    }
}

static void test_swiglu_with_a_16_bit_y_holds_the_f32_output_rounded(void **state) {
    (void)state;
    const int B = 3, n = 1000;
    const size_t t = (size_t)B * n;
    float *g = malloc(sizeof(float) * t), *u = malloc(sizeof(float) * t), *y = malloc(sizeof(float) * t);
    uint16_t *y16 = malloc(2 * t);
    assert_true(g && u && y && y16);
    cuda_ref_rand_floats(g, t);
    cuda_ref_rand_floats(u, t);
    for (size_t i = 0; i < t; i++)
        g[i] *= 8.0f;
    float *dg = dupload(g, sizeof(float) * t), *du = dupload(u, sizeof(float) * t), *dy = dalloc(sizeof(float) * t);
    void *dy16 = dalloc(2 * t);
    dev_err err = {0};
    assert_int_equal(krn_cuda_swiglu_async(g_s1, dy, KRN_F32, dg, du, B, n, &err), 0);
    CK(cudaStreamSynchronize(g_s1));
    download(y, dy, sizeof(float) * t);
    for (int ti = 0; ti < 2; ti++) {
        dfill(dy16, 0xFE, 2 * t);
        assert_int_equal(krn_cuda_swiglu_async(g_s2, dy16, ACT16[ti], dg, du, B, n, &err), 0);
        CK(cudaStreamSynchronize(g_s2));
        download(y16, dy16, 2 * t);
        expect_rounded("swiglu", ACT16[ti], y16, y, t);
    }
    /* a 16-bit y over its input would overwrite values other threads still read: refused; f32 in place is not */
    dev_err e2 = {0};
    assert_int_equal(krn_cuda_swiglu_async(g_s1, (char *)dg + 4, KRN_BF16, dg, du, B, n, &e2), MEMRA_E_INVAL);
    assert_non_null(strstr(e2.msg, "must not overlap"));
    assert_int_equal(krn_cuda_swiglu_async(g_s1, dg, KRN_F32, dg, du, B, n, &err), 0);
    CK(cudaStreamSynchronize(g_s1));
    download(g, dg, sizeof(float) * t); /* in place: the out-of-place f32 result's bits */
    assert_memory_equal(g, y, sizeof(float) * t);
    cudaFree(dg), cudaFree(du), cudaFree(dy), cudaFree(dy16);
    free(g), free(u), free(y), free(y16);
}

/* out (host, n_out bytes of out_t) of attention over caches of cache_t holding kc/vc (rounded for 16 bits). */
static void run_attention(void *out, int out_t, int cache_t, const float *q, const float *kc, const float *vc,
                          const int32_t *seq, const int32_t *pos, int B, int nh, int nkv, int hd, int n_seq,
                          int n_ctx, int given_ws) {
    const size_t nq = (size_t)B * nh * hd, nc = (size_t)n_seq * n_ctx * nkv * hd, ob = nq * krn_act_bytes(out_t);
    const size_t eb = krn_kv_elem_bytes(cache_t);
    uint8_t *hk = malloc(nc * eb), *hv = malloc(nc * eb);
    assert_true(hk && hv);
    for (size_t i = 0; i < nc; i++) {
        if (cache_t == KRN_F32) {
            memcpy(hk + 4 * i, &kc[i], 4);
            memcpy(hv + 4 * i, &vc[i], 4);
        } else {
            const uint16_t a = to16(cache_t, kc[i]), b = to16(cache_t, vc[i]);
            memcpy(hk + 2 * i, &a, 2);
            memcpy(hv + 2 * i, &b, 2);
        }
    }
    float *dq = dupload(q, sizeof(float) * nq);
    void *dk = dupload(hk, nc * eb), *dv = dupload(hv, nc * eb), *dout = dalloc(ob);
    int32_t *ds = dupload(seq, sizeof(int32_t) * B), *dp = dupload(pos, sizeof(int32_t) * B);
    const krn_kv_cache c = {dk, dv, cache_t};
    const size_t wb = krn_attention_ws_bytes(B, nh, hd, n_ctx);
    float *ws = given_ws && wb ? dalloc(wb) : NULL;
    if (ws)
        dfill(ws, 0, wb); /* its tickets start at zero (krn.h) */
    dfill(dout, out_t == KRN_F32 ? 0xFF : 0xFE, ob);
    dev_err err = {0};
    if (krn_cuda_attention_ws_async(g_s1, dout, out_t, dq, &c, ds, dp, B, nh, nkv, hd, n_ctx, ws, ws ? wb : 0, &err))
        fail_msg("attention out %s: %s", krn_type_name(out_t), err.msg);
    CK(cudaStreamSynchronize(g_s1));
    download(out, dout, ob);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout), cudaFree(ds), cudaFree(dp);
    if (ws)
        cudaFree(ws);
    free(hk), free(hv);
}

/* n_ctx 64: one chunk whatever MEMRA_CUDA_ATT_CHUNK is (the one-kernel path); 1024: split-K, where row 1 (pos
 * 63 < any chunk) is stored by the chunk kernel and rows 2, 3 by the combine. f32 and bf16 caches. */
static void test_attention_with_a_16_bit_out_holds_the_f32_output_rounded_on_both_paths(void **state) {
    (void)state;
    const int B = 4, nh = 8, nkv = 2, hd = 128, n_seq = 2;
    const int32_t seq[4] = {0, 1, 1, 0};
    static const int ctxs[2] = {64, 1024};
    const int32_t pos_one[4] = {0, 37, 63, 12}, pos_split[4] = {0, 63, 300, 1023};
    for (int ci = 0; ci < 2; ci++)
        for (int cache_t = KRN_F32; cache_t != -1; cache_t = cache_t == KRN_F32 ? KRN_BF16 : -1) {
            const int n_ctx = ctxs[ci];
            const size_t nq = (size_t)B * nh * hd, nc = (size_t)n_seq * n_ctx * nkv * hd;
            float *q = malloc(sizeof(float) * nq), *kc = malloc(sizeof(float) * nc), *vc = malloc(sizeof(float) * nc);
            float *o32 = malloc(sizeof(float) * nq);
            uint16_t *o16 = malloc(2 * nq);
            assert_true(q && kc && vc && o32 && o16);
            cuda_ref_rand_floats(q, nq);
            cuda_ref_rand_floats(kc, nc);
            cuda_ref_rand_floats(vc, nc);
            const int32_t *pos = ci ? pos_split : pos_one;
            run_attention(o32, KRN_F32, cache_t, q, kc, vc, seq, pos, B, nh, nkv, hd, n_seq, n_ctx, 0);
            for (int ti = 0; ti < 2; ti++) {
                run_attention(o16, ACT16[ti], cache_t, q, kc, vc, seq, pos, B, nh, nkv, hd, n_seq, n_ctx, ti);
                expect_rounded(ci ? "attention (split-K)" : "attention (one kernel)", ACT16[ti], o16, o32, nq);
            }
            free(q), free(kc), free(vc), free(o32), free(o16);
        }
}

/* ---- consumers: the GEMV ---- */

/* x (B, n_in) on the device twice: 16-bit (t) and its widened f32 copy, both from cudaMalloc (256-byte
 * aligned: the same path, vec or scalar, for both). */
typedef struct x_pair {
    void *x16;
    float *x32;
    float *hw; /* host widened values */
} x_pair;

static x_pair make_x(int t, int B, int n_in) {
    const size_t n = (size_t)B * n_in;
    uint16_t *h16 = malloc(2 * n);
    x_pair p = {NULL, NULL, malloc(sizeof(float) * n)};
    assert_true(h16 && p.hw);
    rand_x16(t, n, 1.0f, h16, p.hw);
    p.x16 = dupload(h16, 2 * n);
    p.x32 = dupload(p.hw, sizeof(float) * n);
    free(h16);
    return p;
}

static void free_x(x_pair *p) {
    cudaFree(p->x16), cudaFree(p->x32);
    free(p->hw);
}

/* y (B, W->n_out) of the parts call over x of type xt (x8 none), on s; poisoned first with `poison`. */
static void mm_run(cudaStream_t s, float *dy, const krn_weight *W, const void *x, int xt, int B, int poison,
                   float *hy) {
    const size_t yb = sizeof(float) * (size_t)B * W->n_out;
    const krn_mm_part p = {dy, W};
    const krn_mm_x xx = {x, xt, NULL};
    dev_err err = {0};
    dfill(dy, poison, yb);
    if (krn_cuda_matmul_parts_async(s, &p, 1, &xx, B, 0, &err) != 0)
        fail_msg("matmul %s %dx%d x %s B=%d: %s", krn_type_name(W->type), W->n_out, W->n_in, krn_type_name(xt), B,
                 err.msg);
    CK(cudaStreamSynchronize(s));
    download(hy, dy, yb);
}

/* One weight (blocks or planes) at B = 1, 3, 8, 11 (two 8-row launches): 16-bit x vs widened f32 x. */
static void check_x16(const krn_weight *W, const char *what) {
    static const int Bs[] = {1, 3, 8, 11};
    const int n_out = W->n_out, n_in = W->n_in;
    for (int ti = 0; ti < 2; ti++)
        for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++) {
            const int B = Bs[bi];
            const size_t yb = sizeof(float) * (size_t)B * n_out;
            x_pair x = make_x(ACT16[ti], B, n_in);
            float *dy = dalloc(yb), *a = malloc(yb), *b = malloc(yb);
            assert_true(a && b);
            mm_run(g_s1, dy, W, x.x16, ACT16[ti], B, 0xFE, a);
            mm_run(g_s2, dy, W, x.x32, KRN_F32, B, 0xFF, b);
            char msg[160];
            snprintf(msg, sizeof msg, "matmul %s %s %dx%d B=%d x %s", what, krn_type_name(W->type), n_out, n_in, B,
                     krn_type_name(ACT16[ti]));
            expect_same(msg, a, b, (size_t)B * n_out);
            cudaFree(dy);
            free(a), free(b);
            free_x(&x);
        }
}

static void test_gemv_over_16_bit_x_has_the_bits_of_the_widened_f32_x_for_every_type(void **state) {
    (void)state;
    for (size_t ti = 0; ti < CUDA_REF_N_TYPES; ti++) {
        const cuda_ref_type *t = &CUDA_REF_TYPES[ti];
        /* float types: 97 the scalar kernel, 2144 and 4096 the vec kernel; blocks: partial and full chunks */
        int shapes[3][2] = {{33, 2144}, {300, 4096}, {7, 97}};
        if (t->be == 32)
            shapes[0][1] = 32 * 67, shapes[2][1] = 96;
        else if (t->be == 256)
            shapes[0][1] = 256 * 11, shapes[2][1] = 768;
        for (int si = 0; si < 3; si++) {
            size_t bytes;
            uint8_t *h = cuda_fix_rand_blocks(t, shapes[si][0], shapes[si][1], &bytes);
            const krn_weight W = {t->type, shapes[si][0], shapes[si][1], dupload(h, bytes), KRN_LAYOUT_BLOCKS};
            check_x16(&W, "blocks");
            cudaFree((void *)W.data);
            free(h);
        }
    }
}

static void test_planes_gemv_over_16_bit_x_has_the_bits_of_the_widened_f32_x(void **state) {
    (void)state;
    for (int ti = 3; ti <= 7; ti++) { /* q8_0, q4_0, q4_1, q4_k, q6_k */
        const cuda_ref_type *t = &CUDA_REF_TYPES[ti];
        const int k = t->be == 256 ? 8 : 1;
        static const int shapes[2][2] = {{257, 4096}, {33, 160}};
        for (int si = 0; si < 2; si++) {
            const int n_out = shapes[si][0], n_in = si ? shapes[si][1] * k : shapes[si][1];
            size_t bytes;
            uint8_t *h = cuda_fix_rand_blocks(t, n_out, n_in, &bytes);
            void *db = dupload(h, bytes);
            const krn_weight P = cuda_fix_planes(t, n_out, n_in, db, bytes);
            check_x16(&P, "planes");
            cudaFree(db), cudaFree((void *)P.data);
            free(h);
        }
    }
}

/* 3 parts of one type (one launch for the float types), a mixed list (part 1 f32: one launch per part) and acc
 * on part 0, each over 16-bit x vs the same call over the widened f32 x; B = 1, 5, 9. */
static void test_parts_and_acc_over_16_bit_x_have_the_bits_of_the_widened_f32_x(void **state) {
    (void)state;
    static const int Bs[] = {1, 5, 9};
    for (size_t ti = 0; ti < CUDA_REF_N_TYPES; ti++) {
        const cuda_ref_type *t = &CUDA_REF_TYPES[ti];
        const int n_in = t->be == 256 ? 512 : 1024, n_out[3] = {613, 130, 77};
        krn_weight W[3], Wm;
        for (int i = 0; i < 3; i++) {
            size_t bytes;
            uint8_t *h = cuda_fix_rand_blocks(t, n_out[i], n_in, &bytes);
            W[i] = (krn_weight){t->type, n_out[i], n_in, dupload(h, bytes), KRN_LAYOUT_BLOCKS};
            free(h);
        }
        size_t mb;
        uint8_t *hm = cuda_fix_rand_blocks(cuda_ref_type_of(KRN_F32), n_out[1], n_in, &mb);
        Wm = (krn_weight){KRN_F32, n_out[1], n_in, dupload(hm, mb), KRN_LAYOUT_BLOCKS};
        free(hm);
        for (int xi = 0; xi < 2; xi++)
            for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++) {
                const int B = Bs[bi], xt = ACT16[xi];
                x_pair x = make_x(xt, B, n_in);
                for (int mixed = 0; mixed < 2; mixed++) {
                    float *y[2][3], *h[2];
                    for (int r = 0; r < 2; r++) {
                        for (int i = 0; i < 3; i++) {
                            y[r][i] = dalloc(sizeof(float) * (size_t)B * n_out[i]);
                            dfill(y[r][i], r ? 0xFF : 0xFE, sizeof(float) * (size_t)B * n_out[i]);
                        }
                        const krn_mm_part parts[3] = {{y[r][0], &W[0]}, {y[r][1], mixed ? &Wm : &W[1]},
                                                      {y[r][2], &W[2]}};
                        const krn_mm_x xx = {r ? (const void *)x.x32 : x.x16, r ? KRN_F32 : xt, NULL};
                        dev_err err = {0};
                        if (krn_cuda_matmul_parts_async(r ? g_s2 : g_s1, parts, 3, &xx, B, 0, &err) != 0)
                            fail_msg("parts %s B=%d: %s", t->name, B, err.msg);
                        /* acc on part 0: y0 += x @ W0^T */
                        if (krn_cuda_matmul_parts_async(r ? g_s2 : g_s1, parts, 1, &xx, B, 1, &err) != 0)
                            fail_msg("acc %s B=%d: %s", t->name, B, err.msg);
                    }
                    sync_both();
                    for (int i = 0; i < 3; i++) {
                        const size_t yb = sizeof(float) * (size_t)B * n_out[i];
                        h[0] = malloc(yb), h[1] = malloc(yb);
                        assert_true(h[0] && h[1]);
                        download(h[0], y[0][i], yb);
                        download(h[1], y[1][i], yb);
                        char msg[160];
                        snprintf(msg, sizeof msg, "%s %s (mixed=%d) B=%d x %s part %d", i ? "parts" : "parts + acc",
                                 t->name, mixed, B, krn_type_name(xt), i);
                        expect_same(msg, h[0], h[1], yb / sizeof(float));
                        free(h[0]), free(h[1]);
                        cudaFree(y[0][i]), cudaFree(y[1][i]);
                    }
                }
                free_x(&x);
            }
        for (int i = 0; i < 3; i++)
            cudaFree((void *)W[i].data);
        cudaFree((void *)Wm.data);
    }
}

static void test_quantize_x8_over_16_bit_x_writes_the_host_bytes_of_the_widened_rows(void **state) {
    (void)state;
    static const int shapes[][2] = {{1, 32}, {3, 96}, {2, 4096}, {5, 14336}, {13, 160}};
    for (int ti = 0; ti < 2; ti++) {
        const int t = ACT16[ti];
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            const int B = shapes[k][0], n = shapes[k][1];
            const size_t ne = (size_t)B * n, qb = (size_t)B * krn_x8_row_bytes(n);
            uint16_t *h16 = malloc(2 * ne);
            float *hw = malloc(sizeof(float) * ne);
            uint8_t *want = malloc(qb), *got = malloc(qb);
            assert_true(h16 && hw && want && got);
            rand_x16(t, ne, 20.0f, h16, hw);
            for (int i = 0; i < 32 && n >= 64; i++) /* block 1 of row 0 all zero */
                h16[32 + i] = 0;
            if (B > 1) {
                h16[n + 3] = t == KRN_F16 ? 0x7E00 : 0x7FC0;         /* row 1, block 0: NaN */
                h16[n + n - 1] = t == KRN_F16 ? 0xFC00 : 0xFF80;     /* row 1, last block: -inf */
            }
            for (size_t i = 0; i < ne; i++)
                hw[i] = from16(t, h16[i]);
            void *dx = dupload(h16, 2 * ne), *xq = dalloc(qb);
            dfill(xq, 0xA5, qb);
            dev_err err = {0};
            if (krn_cuda_quantize_x8_async(g_s1, xq, dx, t, B, n, &err) != 0)
                fail_msg("quantize_x8 %s (%d, %d): %s", krn_type_name(t), B, n, err.msg);
            CK(cudaStreamSynchronize(g_s1));
            download(got, xq, qb);
            krn_x8_quantize_host(want, hw, B, n);
            if (memcmp(got, want, qb) != 0)
                fail_msg("quantize_x8 of %s (%d, %d) differs from krn_x8_quantize_host of the widened rows",
                         krn_type_name(t), B, n);
            cudaFree(dx), cudaFree(xq);
            free(h16), free(hw), free(want), free(got);
        }
    }
}

/* ---- cuBLAS (B >= 16) ---- */

enum { G_OUT = 1000, G_IN = 1024, G_B = 64 };

/* MemAlloc nodes of a capture of krn_cuda_gemm_x_async on s: 1 when x went through the conversion buffer (a
 * graph's own, allocated in the capture), 0 when cuBLAS read x in place. */
static int gemm_alloc_nodes(dev_stream *s, float *dy, const krn_weight *W, const void *x, int xt, int B) {
    cudaStream_t st = (cudaStream_t)dev_stream_native(s);
    dev_err err = {0};
    cudaGraph_t g = NULL;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed)); /* as dev_stream_capture_begin */
    const int rc = krn_cuda_gemm_x_async(s, dy, W, x, xt, B, &err);
    CK(cudaStreamEndCapture(st, &g));
    if (rc)
        fail_msg("captured gemm: %s", err.msg);
    size_t n = 0;
    CK(cudaGraphGetNodes(g, NULL, &n));
    cudaGraphNode_t *nodes = calloc(n ? n : 1, sizeof *nodes);
    assert_non_null(nodes);
    CK(cudaGraphGetNodes(g, nodes, &n));
    int allocs = 0;
    for (size_t i = 0; i < n; i++) {
        enum cudaGraphNodeType ty;
        CK(cudaGraphNodeGetType(nodes[i], &ty));
        allocs += ty == cudaGraphNodeTypeMemAlloc;
    }
    free(nodes);
    CK(cudaGraphDestroy(g));
    return allocs;
}

/* y (host) of krn_cuda_gemm_x_async on s; poisoned first. */
static void gemm_run(dev_stream *s, float *dy, const krn_weight *W, const void *x, int xt, int B, int poison,
                     float *hy) {
    dev_err err = {0};
    dfill(dy, poison, sizeof(float) * (size_t)B * W->n_out);
    const uint64_t n0 = krn_cuda_gemm_count();
    if (krn_cuda_gemm_x_async(s, dy, W, x, xt, B, &err) != 0)
        fail_msg("gemm W %s x %s B=%d: %s", krn_type_name(W->type), krn_type_name(xt), B, err.msg);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    assert_int_equal(krn_cuda_gemm_count(), n0 + 1); /* cuBLAS ran */
    download(hy, dy, sizeof(float) * (size_t)B * W->n_out);
}

/* bf16 x with bf16 W: within gpu_gemm's tolerance (1e-4 * sum |w x| + 1e-6) of a double reference, and the
 * bits of the f32-x path, whose conversion rounds the (bf16-representable) widened values back to the same bf16
 * bytes; in place (no conversion buffer in a capture). f16 W (bf16 -> f16) and f32 W (widened) over bf16 x
 * convert and have the f32-x bits. B = 64 and 17. */
static void test_cublas_over_bf16_x_is_in_place_for_bf16_w_and_has_the_f32_x_bits(void **state) {
    (void)state;
    dev_err err = {0};
    dev_platform *p = dev_platform_open(DEV_KIND_CUDA, 0, &err);
    if (!p)
        fail_msg("dev_platform_open(cuda): %s", err.msg);
    dev_stream *s = dev_stream_create(dev_platform_device(p, 0), "act-gemm", &err);
    assert_non_null(s);
    CK(cudaSetDevice(0));
    assert_int_equal(krn_cuda_gemm_prepare(s, &err), 0);
    const size_t nw = (size_t)G_OUT * G_IN;
    x_pair x = make_x(KRN_BF16, G_B, G_IN);
    float *dy = dalloc(sizeof(float) * G_B * G_OUT), *a = malloc(sizeof(float) * G_B * G_OUT);
    float *b = malloc(sizeof(float) * G_B * G_OUT), *fw = malloc(sizeof(float) * nw);
    uint16_t *hw16 = malloc(2 * nw);
    assert_true(a && b && fw && hw16);
    static const int wtypes[3] = {KRN_BF16, KRN_F16, KRN_F32};
    static const int Bs[2] = {G_B, 17};
    for (int wi = 0; wi < 3; wi++) {
        const int wt = wtypes[wi];
        for (size_t i = 0; i < nw; i++) { /* values of W's type, kept widened for the reference */
            const float f = cuda_ref_rand_unit();
            if (wt == KRN_F32) {
                fw[i] = f;
            } else {
                hw16[i] = to16(wt, f);
                fw[i] = from16(wt, hw16[i]);
            }
        }
        const krn_weight W = {wt, G_OUT, G_IN, wt == KRN_F32 ? dupload(fw, 4 * nw) : dupload(hw16, 2 * nw),
                              KRN_LAYOUT_BLOCKS};
        assert_int_equal(krn_cuda_gemm_eligible_x(&W, dy, x.x16, KRN_BF16), 1);
        for (int bi = 0; bi < 2; bi++) {
            const int B = Bs[bi];
            gemm_run(s, dy, &W, x.x16, KRN_BF16, B, 0xFE, a);
            gemm_run(s, dy, &W, x.x32, KRN_F32, B, 0xFF, b);
            char msg[96];
            snprintf(msg, sizeof msg, "cuBLAS W %s B=%d, bf16 x vs its f32 copy", krn_type_name(wt), B);
            expect_same(msg, a, b, (size_t)B * G_OUT);
            if (wt != KRN_BF16)
                continue;
            /* the f32-x path's reference: x rounded to W's type is x itself here */
            double worst = 0.0;
            for (int r = 0; r < B; r++)
                for (int o = 0; o < G_OUT; o++) {
                    double ref = 0.0, mass = 0.0;
                    for (int i = 0; i < G_IN; i++) {
                        const double tm = (double)fw[(size_t)o * G_IN + i] * x.hw[(size_t)r * G_IN + i];
                        ref += tm;
                        mass += fabs(tm);
                    }
                    const double got = a[(size_t)r * G_OUT + o], tol = 1e-4 * mass + 1e-6;
                    if (!(fabs(got - ref) <= tol))
                        fail_msg("cuBLAS bf16 x B=%d y[%d][%d] = %.9g, reference %.9g (tol %.3g)", B, r, o, got, ref,
                                 tol);
                    worst = fmax(worst, fabs(got - ref) / tol);
                }
            printf("cuBLAS bf16 W, bf16 x, B=%d: worst error %.3f of the tolerance\n", B, worst);
        }
        /* the conversion kernel: skipped for x of W's own 16-bit type, run otherwise */
        assert_int_equal(gemm_alloc_nodes(s, dy, &W, x.x16, KRN_BF16, G_B), wt == KRN_BF16 ? 0 : 1);
        assert_int_equal(gemm_alloc_nodes(s, dy, &W, x.x32, KRN_F32, G_B), wt == KRN_F32 ? 0 : 1);
        cudaFree((void *)W.data);
    }
    dev_stream_destroy(s);
    dev_platform_close(p);
    CK(cudaSetDevice(0));
    cudaFree(dy);
    free_x(&x);
    free(a), free(b), free(fw), free(hw16);
}

/* ---- the op table on a CUDA dev_stream ---- */

/* rmsnorm_t, swiglu_t, attention_t, quantize_x8_t and the parts / acc forms over bf16 x (with an x8 for a PLANES
 * part) through kernels/krn.c give the bits of the raw calls; with the cuBLAS threshold at 16 a B = 32 parts call
 * over bf16 x goes to cuBLAS (the counter moves) with the raw cuBLAS call's bits. */
static void test_the_op_table_reaches_the_typed_kernels(void **state) {
    (void)state;
    dev_err err = {0};
    dev_platform *p = dev_platform_open(DEV_KIND_CUDA, 0, &err);
    if (!p)
        fail_msg("dev_platform_open(cuda): %s", err.msg);
    dev_stream *s = dev_stream_create(dev_platform_device(p, 0), "act", &err);
    assert_non_null(s);
    assert_int_equal(krn_stream_set_batch_invariant(s, &err), 0); /* the op table against the GEMV at any B */
    CK(cudaSetDevice(0));
    const int t = KRN_BF16, B = 3, n = 4096, n_out = 301;
    const size_t ne = (size_t)B * n;
    float *hx = malloc(sizeof(float) * ne), *hw = malloc(sizeof(float) * n);
    uint8_t *got = malloc(sizeof(float) * ne * 2), *want = malloc(sizeof(float) * ne * 2);
    assert_true(hx && hw && got && want);
    cuda_ref_rand_floats(hx, ne);
    cuda_ref_rand_floats(hw, n);
    float *dx = dupload(hx, sizeof(float) * ne), *dw = dupload(hw, sizeof(float) * n);
    void *o1 = dalloc(2 * ne), *o2 = dalloc(2 * ne);
    /* rmsnorm_t and swiglu_t (each pair's outputs poisoned apart first: an element one side skips shows) */
    dfill(o1, 0xFE, 2 * ne), dfill(o2, 0xFF, 2 * ne);
    assert_int_equal(krn_rmsnorm_t_async(s, o1, t, dx, dw, B, n, 1e-5f), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    assert_int_equal(krn_cuda_rmsnorm_async(g_s1, o2, t, dx, dw, B, n, 1e-5f, &err), 0);
    CK(cudaStreamSynchronize(g_s1));
    download(got, o1, 2 * ne), download(want, o2, 2 * ne);
    assert_memory_equal(got, want, 2 * ne);
    dfill(o1, 0xFE, 2 * ne), dfill(o2, 0xFF, 2 * ne);
    assert_int_equal(krn_swiglu_t_async(s, o1, t, dx, dx, B, n), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    assert_int_equal(krn_cuda_swiglu_async(g_s1, o2, t, dx, dx, B, n, &err), 0);
    CK(cudaStreamSynchronize(g_s1));
    download(got, o1, 2 * ne), download(want, o2, 2 * ne);
    assert_memory_equal(got, want, 2 * ne);
    /* attention_t: 4 heads of 128 over an f32 cache of 300 keys (split-K), pos 299 */
    {
        const int nh = 4, hd = 128, n_ctx = 300;
        const size_t nq = (size_t)nh * hd, nc = (size_t)n_ctx * nq;
        float *c = malloc(sizeof(float) * nc);
        assert_non_null(c);
        cuda_ref_rand_floats(c, nc);
        void *dk = dupload(c, sizeof(float) * nc);
        const krn_kv_cache kv = {dk, dk, KRN_F32};
        const int32_t zero = 0, last = n_ctx - 1;
        int32_t *dseq = dupload(&zero, 4), *dpos = dupload(&last, 4);
        dfill(o1, 0xFE, 2 * nq), dfill(o2, 0xFF, 2 * nq);
        assert_int_equal(krn_attention_t_async(s, o1, t, dx, &kv, dseq, dpos, 1, nh, nh, hd, n_ctx, NULL, 0), 0);
        assert_int_equal(dev_stream_sync(s, &err), 0);
        assert_int_equal(krn_cuda_attention_ws_async(g_s1, o2, t, dx, &kv, dseq, dpos, 1, nh, nh, hd, n_ctx, NULL, 0,
                                                     &err), 0);
        CK(cudaStreamSynchronize(g_s1));
        download(got, o1, 2 * nq), download(want, o2, 2 * nq);
        assert_memory_equal(got, want, 2 * nq);
        cudaFree(dk), cudaFree(dseq), cudaFree(dpos);
        free(c);
    }
    /* parts [PLANES q4_1 with x8, BLOCKS q4_1, f16] and acc over bf16 x: the PLANES part reads the x8 of the bf16
     * rows, the others the bf16 rows */
    {
        const cuda_ref_type *q41 = cuda_ref_type_of(KRN_Q4_1), *f16 = cuda_ref_type_of(KRN_F16);
        size_t bq, bf;
        uint8_t *hq = cuda_fix_rand_blocks(q41, n_out, n, &bq), *hf = cuda_fix_rand_blocks(f16, n_out, n, &bf);
        void *wq = dupload(hq, bq), *wf = dupload(hf, bf);
        const krn_weight P = cuda_fix_planes(q41, n_out, n, wq, bq);
        const krn_weight Bk = {KRN_Q4_1, n_out, n, wq, KRN_LAYOUT_BLOCKS}, F = {KRN_F16, n_out, n, wf, 0};
        x_pair x = make_x(t, B, n);
        const size_t yb = sizeof(float) * (size_t)B * n_out;
        void *xq = dalloc((size_t)B * krn_x8_row_bytes(n)), *xq2 = dalloc((size_t)B * krn_x8_row_bytes(n));
        float *y[3], *r[3];
        for (int i = 0; i < 3; i++)
            y[i] = dalloc(yb), r[i] = dalloc(yb), dfill(y[i], 0xFE, yb), dfill(r[i], 0xFF, yb);
        assert_int_equal(krn_quantize_x8_t_async(s, xq, x.x16, t, B, n), 0);
        const krn_mm_x xx = {x.x16, t, xq};
        const krn_mm_part parts[3] = {{y[0], &P}, {y[1], &Bk}, {y[2], &F}};
        assert_int_equal(krn_matmul_parts_x_async(s, parts, 3, &xx, B), 0);
        assert_int_equal(krn_matmul_acc_x_async(s, y[1], &Bk, &xx, B), 0); /* y1 = 2 (x @ Bk^T), one add */
        assert_int_equal(dev_stream_sync(s, &err), 0);
        assert_int_equal(krn_cuda_quantize_x8_async(g_s1, xq2, x.x16, t, B, n, &err), 0);
        const krn_mm_x raw_x8 = {x.x16, t, xq2}, raw = {x.x16, t, NULL};
        const krn_mm_part rp = {r[0], &P}, rb = {r[1], &Bk}, rf = {r[2], &F};
        assert_int_equal(krn_cuda_matmul_parts_async(g_s1, &rp, 1, &raw_x8, B, 0, &err), 0);
        assert_int_equal(krn_cuda_matmul_parts_async(g_s1, &rb, 1, &raw, B, 0, &err), 0);
        assert_int_equal(krn_cuda_matmul_parts_async(g_s1, &rb, 1, &raw, B, 1, &err), 0);
        assert_int_equal(krn_cuda_matmul_parts_async(g_s1, &rf, 1, &raw, B, 0, &err), 0);
        CK(cudaStreamSynchronize(g_s1));
        const size_t qb = (size_t)B * krn_x8_row_bytes(n);
        uint8_t *qa = malloc(qb), *qr = malloc(qb);
        assert_true(qa && qr);
        download(qa, xq, qb), download(qr, xq2, qb);
        assert_memory_equal(qa, qr, qb);
        for (int i = 0; i < 3; i++) {
            download(got, y[i], yb), download(want, r[i], yb);
            if (memcmp(got, want, yb) != 0)
                fail_msg("op table part %d (%s) over bf16 x differs from the raw call", i,
                         i == 0 ? "planes, x8" : i == 1 ? "blocks, + acc" : "f16");
        }
        /* cuBLAS through the op table: B = 32 >= the threshold, on a stream that is not batch-invariant */
        dev_stream *sb = dev_stream_create(dev_platform_device(p, 0), "act-blas", &err);
        assert_non_null(sb);
        const int BB = 32;
        x_pair xb = make_x(t, BB, n);
        float *yc = dalloc(sizeof(float) * BB * n_out), *rc = dalloc(sizeof(float) * BB * n_out);
        float *hc = malloc(sizeof(float) * BB * n_out), *hr = malloc(sizeof(float) * BB * n_out);
        assert_true(hc && hr);
        krn_cuda_gemm_set_min_b(16);
        const uint64_t n0 = krn_cuda_gemm_count();
        const krn_mm_x xbx = {xb.x16, t, NULL};
        const krn_mm_part pc = {yc, &F};
        assert_int_equal(krn_matmul_parts_x_async(sb, &pc, 1, &xbx, BB), 0);
        assert_int_equal(dev_stream_sync(sb, &err), 0);
        assert_int_equal(krn_cuda_gemm_count(), n0 + 1);
        assert_int_equal(krn_cuda_gemm_x_async(sb, rc, &F, xb.x16, t, BB, &err), 0);
        assert_int_equal(dev_stream_sync(sb, &err), 0);
        krn_cuda_gemm_set_min_b(-1);
        dev_stream_destroy(sb);
        download(hc, yc, sizeof(float) * BB * n_out), download(hr, rc, sizeof(float) * BB * n_out);
        assert_memory_equal(hc, hr, sizeof(float) * BB * n_out);
        cudaFree(yc), cudaFree(rc);
        free(hc), free(hr);
        free_x(&xb);
        for (int i = 0; i < 3; i++)
            cudaFree(y[i]), cudaFree(r[i]);
        cudaFree(wq), cudaFree(wf), cudaFree((void *)P.data), cudaFree(xq), cudaFree(xq2);
        free_x(&x);
        free(hq), free(hf), free(qa), free(qr);
    }
    dev_stream_destroy(s);
    dev_platform_close(p);
    CK(cudaSetDevice(0));
    cudaFree(dx), cudaFree(dw), cudaFree(o1), cudaFree(o2);
    free(hx), free(hw), free(got), free(want);
}

/* ---- refusals ---- */

static void test_bad_activation_types_and_misaligned_16_bit_x_are_refused_with_a_message(void **state) {
    (void)state;
    uint8_t *d = dalloc(1 << 16);
    dev_err e1 = {0}, e2 = {0}, e3 = {0}, e4 = {0}, e5 = {0}, e6 = {0};
    assert_int_equal(krn_cuda_rmsnorm_async(g_s1, d, KRN_Q8_0, (float *)d, (float *)d, 1, 64, 1e-5f, &e1),
                     MEMRA_E_INVAL);
    assert_non_null(strstr(e1.msg, "allowed: f32, f16, bf16"));
    const krn_weight W = {KRN_Q4_0, 4, 64, d + 4096, KRN_LAYOUT_BLOCKS};
    const krn_mm_part part = {(float *)(d + 8192), &W};
    const krn_mm_x bad_type = {d, KRN_Q4_0, NULL}, odd = {d + 2, KRN_BF16, NULL};
    assert_int_equal(krn_cuda_matmul_parts_async(g_s1, &part, 1, &bad_type, 1, 0, &e2), MEMRA_E_INVAL);
    assert_non_null(strstr(e2.msg, "allowed x types: f32, f16, bf16"));
    assert_int_equal(krn_cuda_matmul_parts_async(g_s1, &part, 1, &odd, 1, 0, &e3), MEMRA_E_INVAL);
    assert_non_null(strstr(e3.msg, "16-byte aligned"));
    assert_int_equal(krn_cuda_quantize_x8_async(g_s1, d, d + 1, KRN_F16, 1, 32, &e4), MEMRA_E_INVAL);
    assert_non_null(strstr(e4.msg, "aligned to its element"));
    const krn_kv_cache c = {d, d, KRN_F32};
    assert_int_equal(krn_cuda_attention_ws_async(g_s1, d, 5, (float *)d, &c, (int32_t *)d, (int32_t *)d, 1, 2, 1, 8,
                                                 8, NULL, 0, &e5), MEMRA_E_INVAL);
    assert_non_null(strstr(e5.msg, "allowed: f32, f16, bf16"));
    assert_int_equal(krn_cuda_quantize_x8_async(g_s1, d, d, 3, 1, 32, &e6), MEMRA_E_INVAL);
    assert_non_null(strstr(e6.msg, "allowed: f32, f16, bf16"));
    CK(cudaStreamSynchronize(g_s1));
    cudaFree(d);
}

int main(void) {
    if (cuda_fix_no_gpu("gpu_act"))
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm_with_a_16_bit_y_holds_the_f32_output_rounded),
        cmocka_unit_test(test_swiglu_with_a_16_bit_y_holds_the_f32_output_rounded),
        cmocka_unit_test(test_attention_with_a_16_bit_out_holds_the_f32_output_rounded_on_both_paths),
        cmocka_unit_test(test_gemv_over_16_bit_x_has_the_bits_of_the_widened_f32_x_for_every_type),
        cmocka_unit_test(test_planes_gemv_over_16_bit_x_has_the_bits_of_the_widened_f32_x),
        cmocka_unit_test(test_parts_and_acc_over_16_bit_x_have_the_bits_of_the_widened_f32_x),
        cmocka_unit_test(test_quantize_x8_over_16_bit_x_writes_the_host_bytes_of_the_widened_rows),
        cmocka_unit_test(test_cublas_over_bf16_x_is_in_place_for_bf16_w_and_has_the_f32_x_bits),
        cmocka_unit_test(test_the_op_table_reaches_the_typed_kernels),
        cmocka_unit_test(test_bad_activation_types_and_misaligned_16_bit_x_are_refused_with_a_message),
    };
    return cmocka_run_group_tests(tests, two_streams_setup, two_streams_teardown);
}

#else /* !MEMRA_HAVE_CUDA */

int main(void) {
    printf("gpu_act: skipped: built without CUDA (MEMRA_HAVE_CUDA off)\n");
    return 77;
}

#endif
