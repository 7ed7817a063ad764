/* The CPU op table against a plain double-precision reference written here (not the kernels' code), plus
 * the launch wrappers on a real CPU stream: same bits as the pure kernel, declared accesses seen by the
 * backend (remote-read counter, peer-grant refusal), and shape validation in krn.c. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "support/test_rand.h"
#include "kernels/cpu/krn_cpu.h"
#include "kernels/krn.h"

/* ---- deterministic data ---- */

static uint64_t rng_state;
static float frand(void) { return test_frand(&rng_state); } /* uniform in [-1, 1) */
static float *rand_vec(size_t n, float scale)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = frand() * scale;
    return v;
}

/* ---- reference (double) ---- */

static void ref_rmsnorm(double *y, const float *x, const float *w, int n, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    double inv = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        y[i] = x[i] * inv * w[i];
}

static void test_rmsnorm_matches_the_double_reference(void **state)
{
    (void)state;
    enum { B = 3, N = 96 };
    rng_state = 1;
    float *x = rand_vec(B * N, 3.0f), *w = rand_vec(N, 1.0f), y[B * N];
    krn_cpu_rmsnorm(&(krn_cpu_rmsnorm_args){ y, x, w, B, N, 1e-5f, KRN_F32 });
    for (int b = 0; b < B; b++) {
        double r[N];
        ref_rmsnorm(r, x + b * N, w, N, 1e-5);
        for (int i = 0; i < N; i++)
            assert_true(fabs(y[b * N + i] - r[i]) <= 1e-6 * (1 + fabs(r[i])));
    }
    free(x);
    free(w);
}

/* Every supported type: y[b][o] vs sum_i dequant(W[o])[i] * x[b][i] in double. The bound is relative to
 * sum |w x| (f32 accumulation over n_in terms: ~n_in * 2^-24, far below 1e-5 for n_in = 512). */
static void test_matmul_matches_the_double_reference_for_every_type(void **state)
{
    (void)state;
    static const int types[] = { KRN_F32, KRN_F16, KRN_BF16, KRN_Q8_0, KRN_Q4_0, KRN_Q4_1, KRN_Q4_K,
                                 KRN_Q5_K, KRN_Q6_K };
    enum { B = 3, NOUT = 7, NIN = 512 };
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const int t = types[ti];
        rng_state = 100 + ti;
        const size_t rb = krn_row_bytes(t, NIN);
        assert_true(rb > 0);
        unsigned char *W = malloc(rb * NOUT);
        float *src = rand_vec(NIN, 1.0f), *x = rand_vec(B * NIN, 1.0f), y[B * NOUT], deq[NIN];
        for (int o = 0; o < NOUT; o++) {
            for (int i = 0; i < NIN; i++)
                src[i] = frand();
            krn_quant_row(t, src, W + o * rb, NIN);
        }
        krn_cpu_matmul(&(krn_cpu_matmul_args){ y, W, x, t, NOUT, NIN, B, rb, 0, KRN_F32, 0, KRN_LAYOUT_BLOCKS, 1 });
        for (int o = 0; o < NOUT; o++) {
            krn_dequant_row(t, W + o * rb, deq, NIN);
            for (int b = 0; b < B; b++) {
                double r = 0, mag = 0;
                for (int i = 0; i < NIN; i++) {
                    r += (double)deq[i] * x[b * NIN + i];
                    mag += fabs((double)deq[i] * x[b * NIN + i]);
                }
                if (fabs(y[b * NOUT + o] - r) > 1e-5 * mag)
                    fail_msg("type %s o %d b %d: %g vs reference %g", krn_type_name(t), o, b, y[b * NOUT + o], r);
            }
        }
        free(W);
        free(src);
        free(x);
    }
}

static void ref_rope(double *x, int pos, int n_heads, int hd, int n_rot, double base, double scale, int neox)
{
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < n_rot / 2; i++) {
            double th = pos * scale * pow(base, -2.0 * i / n_rot);
            int i0 = neox ? i : 2 * i, i1 = neox ? i + n_rot / 2 : 2 * i + 1;
            double a = x[h * hd + i0], b = x[h * hd + i1];
            x[h * hd + i0] = a * cos(th) - b * sin(th);
            x[h * hd + i1] = a * sin(th) + b * cos(th);
        }
}

static void test_rope_rotates_normal_and_neox_pairs_and_leaves_unrotated_dims(void **state)
{
    (void)state;
    enum { B = 3, H = 2, HD = 16, NROT = 12 };
    const int32_t pos[B] = { 0, 5, 3000 };
    for (int neox = 0; neox <= 1; neox++) {
        rng_state = 7 + neox;
        float *x = rand_vec(B * H * HD, 1.0f), orig[B * H * HD];
        memcpy(orig, x, sizeof orig);
        krn_cpu_rope(&(krn_cpu_rope_args){ x, pos, B, H, HD, NROT, 10000.0f, 0.5f, neox });
        for (int b = 0; b < B; b++) {
            double r[H * HD];
            for (int i = 0; i < H * HD; i++)
                r[i] = orig[b * H * HD + i];
            ref_rope(r, pos[b], H, HD, NROT, 10000.0, 0.5, neox);
            for (int i = 0; i < H * HD; i++)
                assert_true(fabs(x[b * H * HD + i] - r[i]) <= 2e-6);
            for (int h = 0; h < H; h++) /* dims >= n_rot pass through bit for bit */
                for (int i = NROT; i < HD; i++)
                    assert_true(x[(b * H + h) * HD + i] == orig[(b * H + h) * HD + i]);
        }
        free(x);
    }
}

/* A 16-bit copy of an f32 cache (rounded to nearest even), and the f32 values it holds. */
static void cache_round(int type, const float *x, uint16_t *h, float *widened, int n)
{
    for (int i = 0; i < n; i++) {
        h[i] = type == KRN_F16 ? krn_f32_to_f16(x[i]) : krn_f32_to_bf16(x[i]);
        widened[i] = type == KRN_F16 ? krn_f16_to_f32(h[i]) : krn_bf16_to_f32(h[i]);
    }
}

/* Causal GQA attention: 2 sequences, rows at different positions, reference softmax in double. A 16-bit
 * cache gives exactly the bits of the f32 cache holding the same (widened) values. */
static void test_attention_matches_the_double_reference_with_gqa_and_two_sequences(void **state)
{
    (void)state;
    enum { NSEQ = 2, NCTX = 9, NH = 4, NKV = 2, HD = 8, B = 3, KVD = NKV * HD, NC = NSEQ * NCTX * KVD };
    rng_state = 11;
    float *kc = rand_vec(NC, 1.0f), *vc = rand_vec(NC, 1.0f);
    float *q = rand_vec(B * NH * HD, 2.0f), out[B * NH * HD], out16[B * NH * HD];
    const int32_t seq[B] = { 1, 0, 1 }, pos[B] = { 0, 8, 4 };
    for (int type = KRN_F16; type != -1; type = type == KRN_F16 ? KRN_BF16 : -1) {
        uint16_t kh[NC], vh[NC];
        float kw[NC], vw[NC];
        cache_round(type, kc, kh, kw, NC);
        cache_round(type, vc, vh, vw, NC);
        krn_cpu_attention(&(krn_cpu_attention_args){ out16, q, { kh, vh, type }, seq, pos, B, NH, NKV, HD, NCTX, KRN_F32 });
        krn_cpu_attention(&(krn_cpu_attention_args){ out, q, { kw, vw, KRN_F32 }, seq, pos, B, NH, NKV, HD, NCTX, KRN_F32 });
        assert_memory_equal(out16, out, sizeof out);
    }
    krn_cpu_attention(&(krn_cpu_attention_args){ out, q, { kc, vc, KRN_F32 }, seq, pos, B, NH, NKV, HD, NCTX, KRN_F32 });
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int kvh = h / (NH / NKV);
            double sc[NCTX], mx = -INFINITY, sum = 0;
            for (int t = 0; t <= pos[b]; t++) {
                double d = 0;
                for (int i = 0; i < HD; i++)
                    d += (double)q[(b * NH + h) * HD + i] * kc[(seq[b] * NCTX + t) * KVD + kvh * HD + i];
                sc[t] = d / sqrt((double)HD);
                mx = fmax(mx, sc[t]);
            }
            for (int t = 0; t <= pos[b]; t++)
                sum += sc[t] = exp(sc[t] - mx);
            for (int i = 0; i < HD; i++) {
                double r = 0;
                for (int t = 0; t <= pos[b]; t++)
                    r += sc[t] / sum * vc[(seq[b] * NCTX + t) * KVD + kvh * HD + i];
                assert_true(fabs(out[(b * NH + h) * HD + i] - r) <= 1e-5);
            }
        }
    free(kc);
    free(vc);
    free(q);
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The defined sums of krn_cpu_attention (kernels/cpu/cpu_attention.c) written out in float, one position and one
 * dim at a time: the kernel's tiles (256 positions), its 8-position K^T scores (AVX2) and its tails give these
 * bits exactly, at positions below, at and past a tile and a vector of 8. */
static void test_attention_gives_the_bits_of_its_defined_sums_past_a_tile(void **state)
{
    (void)state;
    enum { NCTX = 300, NH = 3, NKV = 1, HD = 64, B = 4, KVD = NKV * HD, NC = NCTX * KVD };
    rng_state = 5;
    float *kc = rand_vec(NC, 1.0f), *vc = rand_vec(NC, 1.0f), *q = rand_vec(B * NH * HD, 0.5f);
    float *out = malloc(sizeof(float) * B * NH * HD), *sc = malloc(sizeof(float) * NCTX);
    const int32_t seq[B] = { 0, 0, 0, 0 }, pos[B] = { 6, 23, 255, 299 };
    krn_cpu_attention(&(krn_cpu_attention_args){ out, q, { kc, vc, KRN_F32 }, seq, pos, B, NH, NKV, HD, NCTX, KRN_F32 });
    const float scale = 1.0f / sqrtf((float)HD);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *qh = q + (b * NH + h) * HD;
            float mx = -INFINITY, sum = 0.0f;
            for (int t = 0; t <= pos[b]; t++) {
                float d = 0.0f;
                for (int i = 0; i < HD; i++)
                    d += qh[i] * kc[t * KVD + i];
                sc[t] = d * scale;
                mx = sc[t] > mx ? sc[t] : mx;
            }
            for (int t = 0; t <= pos[b]; t++)
                sc[t] = expf(sc[t] - mx);
            for (int t = 0; t <= pos[b]; t++)
                sum += sc[t];
            const float inv = 1.0f / sum;
            for (int i = 0; i < HD; i++) {
                float o = 0.0f;
                for (int t = 0; t <= pos[b]; t++)
                    o += sc[t] * vc[t * KVD + i];
                if (fbits(out[(b * NH + h) * HD + i]) != fbits(o * inv))
                    fail_msg("row %d (pos %d) head %d dim %d: %a, the defined sums %a", b, pos[b], h, i,
                             out[(b * NH + h) * HD + i], o * inv);
            }
        }
    free(kc);
    free(vc);
    free(q);
    free(out);
    free(sc);
}

/* Every cache type: the row lands at [seq, pos] only, f32 as is, f16/bf16 rounded to nearest even. */
static void test_kv_store_writes_each_row_at_its_sequence_and_position_only(void **state)
{
    (void)state;
    enum { NSEQ = 2, NCTX = 4, KVD = 3, B = 2, NC = NSEQ * NCTX * KVD };
    const float k[B * KVD] = { 1, 2, 3.14159f, 4, 5, 1e-3f }, v[B * KVD] = { -1, -2, -3, -4, -5.5f, 70000.0f };
    const int32_t seq[B] = { 1, 0 }, pos[B] = { 2, 3 };
    const int types[3] = { KRN_F32, KRN_F16, KRN_BF16 };
    for (int ti = 0; ti < 3; ti++) {
        const int type = types[ti];
        union { float f[NC]; uint16_t h[NC]; } kc = { { 0 } }, vc = { { 0 } }; /* f32 or 16-bit elements */
        krn_cpu_kv_store(&(krn_cpu_kv_store_args){ { kc.f, vc.f, type }, k, v, seq, pos, B, KVD, NCTX });
        for (int s = 0; s < NSEQ; s++)
            for (int t = 0; t < NCTX; t++)
                for (int i = 0; i < KVD; i++) {
                    const int at = (s * NCTX + t) * KVD + i;
                    const int row = (s == 1 && t == 2) ? 0 : (s == 0 && t == 3) ? 1 : -1;
                    const float kx = row < 0 ? 0.0f : k[row * KVD + i], vx = row < 0 ? 0.0f : v[row * KVD + i];
                    if (type == KRN_F32) {
                        assert_true(kc.f[at] == kx && vc.f[at] == vx);
                    } else {
                        const uint16_t kh = kc.h[at], vh = vc.h[at];
                        const uint16_t ke = type == KRN_F16 ? krn_f32_to_f16(kx) : krn_f32_to_bf16(kx);
                        const uint16_t ve = type == KRN_F16 ? krn_f32_to_f16(vx) : krn_f32_to_bf16(vx);
                        assert_int_equal(kh, ke);
                        assert_int_equal(vh, ve);
                    }
                }
    }
}

static void test_swiglu_add_bias_add_and_argmax_match_their_definitions(void **state)
{
    (void)state;
    enum { B = 2, N = 5 };
    rng_state = 5;
    float *g = rand_vec(B * N, 4.0f), *u = rand_vec(B * N, 1.0f), *bias = rand_vec(N, 1.0f), y[B * N], z[B * N];
    krn_cpu_swiglu(&(krn_cpu_swiglu_args){ y, g, u, B, N, KRN_F32 });
    for (int i = 0; i < B * N; i++)
        assert_true(fabs(y[i] - g[i] / (1 + exp(-(double)g[i])) * u[i]) <= 1e-6);
    memcpy(z, y, sizeof z);
    krn_cpu_add_bias(&(krn_cpu_add_bias_args){ z, bias, B, N });
    for (int i = 0; i < B * N; i++)
        assert_true(z[i] == y[i] + bias[i % N]);
    krn_cpu_add(&(krn_cpu_add_args){ z, u, B, N });
    for (int i = 0; i < B * N; i++)
        assert_true(z[i] == (y[i] + bias[i % N]) + u[i]);
    const float x[4 * 4] = { 1, 3, 3, 2, -5, NAN, -1, -1, NAN, -INFINITY, NAN, -INFINITY, NAN, NAN, -INFINITY, -3 };
    int32_t am[4], dup[4] = { 9, 9, 9, 9 };
    krn_cpu_argmax(&(krn_cpu_argmax_args){ .out = am, .x = x, .B = 4, .n = 4 });
    assert_int_equal(am[0], 1); /* ties -> lowest index */
    assert_int_equal(am[1], 2); /* NaN never wins */
    assert_int_equal(am[2], -1); /* nothing above -inf */
    assert_int_equal(am[3], 3);
    krn_cpu_argmax(&(krn_cpu_argmax_args){ .out = am, .dup = dup, .n_dup = 4, .x = x, .B = 4, .n = 4 });
    assert_memory_equal(dup, am, sizeof am); /* a second destination: the same indices */
    /* slots named by index (the fed-token slots of the rows' sequences): rows 0..3 to slots 5, 1, 7 (outside 0..5:
     * nothing) and 0 */
    const int32_t at[4] = { 5, 1, 7, 0 };
    int32_t slots[6] = { 9, 9, 9, 9, 9, 9 };
    krn_cpu_argmax(&(krn_cpu_argmax_args){ .out = am, .dup = slots, .dup_at = at, .n_dup = 6, .x = x, .B = 4, .n = 4 });
    const int32_t want[6] = { am[3], am[1], 9, 9, 9, am[0] };
    assert_memory_equal(slots, want, sizeof want);
    free(g);
    free(u);
    free(bias);
}

/* ---- launch wrappers on the CPU backend ---- */

static void test_matmul_on_a_stream_gives_the_pure_kernel_bits_and_counts_remote_weight_reads(void **state)
{
    (void)state;
    enum { B = 2, NOUT = 6, NIN = 64 };
    dev_err err = { 0 };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 2, &err);
    assert_non_null(p);
    dev_device *d0 = dev_platform_device(p, 0), *d1 = dev_platform_device(p, 1);
    rng_state = 21;
    float *w_host = rand_vec(NOUT * NIN, 1.0f), *x_host = rand_vec(B * NIN, 1.0f), want[B * NOUT], got[B * NOUT];
    const size_t rb = krn_row_bytes(KRN_Q8_0, NIN);
    unsigned char wq[NOUT * 68];
    assert_true(rb * NOUT <= sizeof wq);
    for (int o = 0; o < NOUT; o++)
        krn_quant_row(KRN_Q8_0, w_host + o * NIN, wq + o * rb, NIN);
    krn_cpu_matmul(&(krn_cpu_matmul_args){ want, wq, x_host, KRN_Q8_0, NOUT, NIN, B, rb, 0, KRN_F32, 0, KRN_LAYOUT_BLOCKS, 1 });

    void *w0 = dev_malloc(d0, rb * NOUT, &err);               /* weight on device 0 */
    float *x1 = dev_malloc(d1, sizeof(float) * B * NIN, &err);  /* activations on device 1 */
    float *y1 = dev_malloc(d1, sizeof want, &err);
    assert_int_equal(dev_copy_h2d_sync(d0, w0, wq, rb * NOUT, &err), 0);
    assert_int_equal(dev_copy_h2d_sync(d1, x1, x_host, sizeof(float) * B * NIN, &err), 0);
    dev_stream *s1 = dev_stream_create(d1, "test", &err);
    assert_non_null(s1);
    krn_weight W = { KRN_Q8_0, NOUT, NIN, w0, KRN_LAYOUT_BLOCKS };

    /* without a grant, device 1's kernel may not read device 0's weight */
    assert_int_equal(krn_matmul_async(s1, y1, &W, x1, B), 0);
    assert_int_not_equal(dev_stream_sync(s1, &err), 0);
    dev_stream_destroy(s1);
    dev_counters c;
    dev_device_counters(d1, &c);
    assert_true(c.access_denied >= 1);

    dev_err_clear(&err);
    s1 = dev_stream_create(d1, "test2", &err);
    assert_int_equal(dev_peer_grant(d1, d0, &err), 0);
    dev_device_counters_reset(d1);
    assert_int_equal(krn_matmul_async(s1, y1, &W, x1, B), 0);
    assert_int_equal(dev_stream_sync(s1, &err), 0);
    dev_copy_d2h_async(s1, got, y1, sizeof got);
    assert_int_equal(dev_stream_sync(s1, &err), 0);
    assert_memory_equal(got, want, sizeof got);
    dev_device_counters(d1, &c);
    assert_int_equal(c.remote_read_bytes, rb * NOUT); /* exactly the weight: n_out * row_bytes */
    assert_true(c.kernels_run >= 1);

    dev_stream_destroy(s1);
    dev_free(d0, w0);
    dev_free(d1, x1);
    dev_free(d1, y1);
    dev_platform_close(p);
    free(w_host);
    free(x_host);
}

/* The fused forms the forward uses: parts = one matmul per part, acc = matmul then add, bit for bit. */
static void test_matmul_parts_and_acc_give_the_bits_of_the_plain_ops(void **state)
{
    (void)state;
    enum { B = 3, NIN = 64, N0 = 5, N1 = 3, N2 = 2 };
    dev_err err = { 0 };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    assert_non_null(p);
    dev_device *d = dev_platform_device(p, 0);
    dev_stream *s = dev_stream_create(d, "parts", &err);
    assert_non_null(s);
    rng_state = 33;
    const int n_out[3] = { N0, N1, N2 }, types[3] = { KRN_Q8_0, KRN_F16, KRN_Q4_0 };
    krn_weight W[3];
    float *y[3], *yref[3];
    float *x = dev_malloc(d, sizeof(float) * B * NIN, &err), *xh = rand_vec(B * NIN, 1.0f);
    assert_int_equal(dev_copy_h2d_sync(d, x, xh, sizeof(float) * B * NIN, &err), 0);
    for (int i = 0; i < 3; i++) {
        const size_t rb = krn_row_bytes(types[i], NIN);
        unsigned char *wh = malloc(rb * n_out[i]);
        float *src = rand_vec(NIN, 1.0f);
        for (int o = 0; o < n_out[i]; o++) {
            for (int k = 0; k < NIN; k++)
                src[k] = frand();
            krn_quant_row(types[i], src, wh + o * rb, NIN);
        }
        void *wd = dev_malloc(d, rb * n_out[i], &err);
        assert_int_equal(dev_copy_h2d_sync(d, wd, wh, rb * n_out[i], &err), 0);
        W[i] = (krn_weight){ types[i], n_out[i], NIN, wd, KRN_LAYOUT_BLOCKS };
        y[i] = dev_malloc(d, sizeof(float) * B * n_out[i], &err);
        yref[i] = dev_malloc(d, sizeof(float) * B * n_out[i], &err);
        assert_int_equal(krn_matmul_async(s, yref[i], &W[i], x, B), 0);
        free(wh);
        free(src);
    }
    const krn_mm_part parts[3] = { { y[0], &W[0] }, { y[1], &W[1] }, { y[2], &W[2] } };
    assert_int_equal(krn_matmul_parts_async(s, parts, 3, x, B), 0);
    /* acc: y[0] += x @ W0^T must equal yref[0] + (x @ W0^T) computed by matmul + add */
    float *t = dev_malloc(d, sizeof(float) * B * N0, &err), *z = dev_malloc(d, sizeof(float) * B * N0, &err);
    assert_int_equal(dev_copy_h2d_sync(d, z, xh, sizeof(float) * B * N0, &err), 0); /* any start values */
    assert_int_equal(krn_matmul_async(s, t, &W[0], x, B), 0);
    float *zref = dev_malloc(d, sizeof(float) * B * N0, &err);
    assert_int_equal(dev_copy_h2d_sync(d, zref, xh, sizeof(float) * B * N0, &err), 0);
    assert_int_equal(krn_add_async(s, zref, t, B, N0), 0);
    assert_int_equal(krn_matmul_acc_async(s, z, &W[0], x, B), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    for (int i = 0; i < 3; i++)
        assert_memory_equal(y[i], yref[i], sizeof(float) * B * n_out[i]);
    assert_memory_equal(z, zref, sizeof(float) * B * N0);
    /* refused: no parts, too many, n_in that differ */
    assert_int_equal(krn_matmul_parts_async(s, parts, 0, x, B), MEMRA_E_INVAL);
    assert_int_equal(krn_matmul_parts_async(s, parts, KRN_MM_PARTS + 1, x, B), MEMRA_E_INVAL);
    krn_weight bad = W[1];
    bad.n_in = 32;
    const krn_mm_part mixed[2] = { { y[0], &W[0] }, { y[1], &bad } };
    assert_int_equal(krn_matmul_parts_async(s, mixed, 2, x, B), MEMRA_E_INVAL);
    dev_stream_destroy(s);
    for (int i = 0; i < 3; i++) {
        dev_free(d, (void *)W[i].data);
        dev_free(d, y[i]);
        dev_free(d, yref[i]);
    }
    dev_free(d, x);
    dev_free(d, t);
    dev_free(d, z);
    dev_free(d, zref);
    dev_platform_close(p);
    free(xh);
}

/* krn_matmul_swiglu_x_async (the forward's gate/up + swiglu): on the CPU the two ops it names, bit for bit, for
 * f32 y (in place over gate, or over x) and bf16 y; mismatched weights and a 16-bit y over its scratch are
 * refused. */
static void test_matmul_swiglu_gives_the_bits_of_parts_then_swiglu(void **state)
{
    (void)state;
    enum { B = 2, NIN = 64, N = 7 };
    dev_err err = { 0 };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    assert_non_null(p);
    dev_device *d = dev_platform_device(p, 0);
    dev_stream *s = dev_stream_create(d, "glu", &err);
    assert_non_null(s);
    rng_state = 41;
    const size_t rb = krn_row_bytes(KRN_BF16, NIN), ne = (size_t)B * N;
    unsigned char *wh = malloc(2 * rb * N);
    float *src = rand_vec(NIN, 1.0f), *xh = rand_vec(B * NIN, 1.0f);
    for (int o = 0; o < 2 * N; o++) {
        for (int k = 0; k < NIN; k++)
            src[k] = frand();
        krn_quant_row(KRN_BF16, src, wh + o * rb, NIN);
    }
    unsigned char *wd = dev_malloc(d, 2 * rb * N, &err);
    float *x = dev_malloc(d, sizeof(float) * B * NIN, &err), *g = dev_malloc(d, sizeof(float) * ne, &err),
          *u = dev_malloc(d, sizeof(float) * ne, &err), *g2 = dev_malloc(d, sizeof(float) * ne, &err),
          *u2 = dev_malloc(d, sizeof(float) * ne, &err), *y = dev_malloc(d, sizeof(float) * ne, &err);
    assert_int_equal(dev_copy_h2d_sync(d, wd, wh, 2 * rb * N, &err), 0);
    assert_int_equal(dev_copy_h2d_sync(d, x, xh, sizeof(float) * B * NIN, &err), 0);
    const krn_weight Wg = { KRN_BF16, N, NIN, wd, KRN_LAYOUT_BLOCKS }, Wu = { KRN_BF16, N, NIN, wd + rb * N, 0 };
    const krn_mm_x in = { .x = x, .type = KRN_F32 };
    const krn_mm_part parts[2] = { { g2, &Wg }, { u2, &Wu } };
    uint16_t *y16 = dev_malloc(d, 2 * ne, &err), *want16 = dev_malloc(d, 2 * ne, &err);
    void *bufs[] = { wd, x, g, u, g2, u2, y, y16, want16 };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        assert_non_null(bufs[i]);
    assert_int_equal(krn_matmul_parts_x_async(s, parts, 2, &in, B), 0);
    assert_int_equal(krn_swiglu_async(s, y, g2, u2, B, N), 0);
    assert_int_equal(krn_matmul_swiglu_x_async(s, g, KRN_F32, g, u, &Wg, &Wu, &in, B), 0); /* f32: in place */
    assert_int_equal(dev_stream_sync(s, &err), 0);
    assert_memory_equal(g, y, sizeof(float) * ne);
    assert_int_equal(krn_swiglu_t_async(s, want16, KRN_BF16, g2, u2, B, N), 0);
    assert_int_equal(krn_matmul_swiglu_x_async(s, y16, KRN_BF16, g, u, &Wg, &Wu, &in, B), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    assert_memory_equal(y16, want16, 2 * ne);
    /* y over x (as the forward's 16-bit activation buffer holds xb and h): the same bits */
    assert_int_equal(krn_matmul_swiglu_x_async(s, x, KRN_F32, g, u, &Wg, &Wu, &in, B), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    assert_memory_equal(x, y, sizeof(float) * ne);
    /* refused: a 16-bit y over gate, weights of different shapes, B = 0 */
    assert_int_equal(krn_matmul_swiglu_x_async(s, g, KRN_BF16, g, u, &Wg, &Wu, &in, B), MEMRA_E_INVAL);
    krn_weight bad = Wu;
    bad.n_out = N - 1;
    assert_int_equal(krn_matmul_swiglu_x_async(s, y, KRN_F32, g, u, &Wg, &bad, &in, B), MEMRA_E_INVAL);
    assert_int_equal(krn_matmul_swiglu_x_async(s, y, KRN_F32, g, u, &Wg, &Wu, &in, 0), MEMRA_E_INVAL);
    dev_stream_destroy(s);
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        dev_free(d, bufs[i]);
    dev_platform_close(p);
    free(wh);
    free(src);
    free(xh);
}

/* Attention's split workspace: the tickets, then B * n_head * ceil(n_ctx / 64) * (head_dim + 2) floats; none up to
 * 64 keys. */
static void test_attention_workspace_size(void **state)
{
    (void)state;
    assert_int_equal(krn_attention_ws_bytes(1, 32, 128, 64), 0);
    assert_int_equal(krn_attention_ws_bytes(1, 32, 128, 65), 4 * KRN_ATT_WS_TICKETS + (size_t)32 * 2 * 130 * 4);
    assert_int_equal(krn_attention_ws_bytes(3, 32, 128, 1024), 4 * KRN_ATT_WS_TICKETS + (size_t)3 * 32 * 16 * 130 * 4);
    assert_int_equal(krn_attention_ws_bytes(0, 32, 128, 1024), 0);
}

static void test_bad_shapes_are_refused_before_enqueue(void **state)
{
    (void)state;
    dev_err err = { 0 };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    assert_non_null(p);
    dev_device *d = dev_platform_device(p, 0);
    dev_stream *s = dev_stream_create(d, "shapes", &err);
    float *buf = dev_malloc(d, 4096, &err);
    int32_t *ib = dev_malloc(d, 64, &err);
    krn_weight W = { KRN_Q4_0, 4, 48, buf, KRN_LAYOUT_BLOCKS }; /* 48 is not a multiple of the q4_0 block (32) */
    assert_int_equal(krn_matmul_async(s, buf, &W, buf, 1), MEMRA_E_INVAL);
    W.type = 99;
    W.n_in = 64;
    assert_int_equal(krn_matmul_async(s, buf, &W, buf, 1), MEMRA_E_INVAL);
    assert_int_equal(krn_rmsnorm_async(s, buf, buf, buf, 0, 8, 1e-5f), MEMRA_E_INVAL);
    assert_int_equal(krn_rope_async(s, buf, ib, 1, 2, 8, 9, 1e4f, 1.0f, 0), MEMRA_E_INVAL); /* odd n_rot */
    assert_int_equal(krn_rope_async(s, buf, ib, 1, 2, 8, 10, 1e4f, 1.0f, 0), MEMRA_E_INVAL); /* > head_dim */
    krn_kv_cache kv = { buf, buf, KRN_F32 };
    assert_int_equal(krn_attention_async(s, buf, buf, &kv, ib, ib, 1, 6, 4, 8, 4), MEMRA_E_INVAL); /* 6 % 4 */
    kv.type = KRN_Q8_0; /* not a cache type */
    assert_int_equal(krn_attention_async(s, buf, buf, &kv, ib, ib, 1, 4, 2, 8, 4), MEMRA_E_INVAL);
    assert_int_equal(krn_kv_store_async(s, &kv, buf, buf, ib, ib, 1, 16, 4), MEMRA_E_INVAL);
    assert_int_equal(krn_argmax_async(NULL, ib, buf, 1, 4), MEMRA_E_INVAL);
    assert_int_equal(krn_argmax_dup_async(s, ib, ib, NULL, 2, buf, 2, 4), MEMRA_E_INVAL); /* dup over out */
    assert_int_equal(krn_argmax_dup_async(s, ib + 2, (int32_t *)buf + 4, NULL, 2, buf, 2, 4), MEMRA_E_INVAL); /* in x */
    assert_int_equal(krn_argmax_dup_async(s, ib, ib + 2, NULL, 1, buf, 2, 4), MEMRA_E_INVAL); /* 1 slot, 2 rows */
    assert_int_equal(krn_argmax_dup_async(s, ib, ib + 2, ib + 8, 0, buf, 2, 4), MEMRA_E_INVAL); /* no slot */
    assert_int_equal(krn_argmax_dup_async(s, ib, ib + 2, ib + 3, 4, buf, 2, 4), MEMRA_E_INVAL); /* at in dup */
    assert_int_equal(krn_argmax_dup_async(s, ib, NULL, ib + 8, 4, buf, 2, 4), MEMRA_E_INVAL); /* at, no slots */
    assert_int_equal(dev_stream_sync(s, &err), 0); /* nothing was enqueued, nothing failed */
    dev_stream_destroy(s);
    dev_free(d, buf);
    dev_free(d, ib);
    dev_platform_close(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm_matches_the_double_reference),
        cmocka_unit_test(test_matmul_matches_the_double_reference_for_every_type),
        cmocka_unit_test(test_rope_rotates_normal_and_neox_pairs_and_leaves_unrotated_dims),
        cmocka_unit_test(test_attention_matches_the_double_reference_with_gqa_and_two_sequences),
        cmocka_unit_test(test_attention_gives_the_bits_of_its_defined_sums_past_a_tile),
        cmocka_unit_test(test_kv_store_writes_each_row_at_its_sequence_and_position_only),
        cmocka_unit_test(test_swiglu_add_bias_add_and_argmax_match_their_definitions),
        cmocka_unit_test(test_matmul_on_a_stream_gives_the_pure_kernel_bits_and_counts_remote_weight_reads),
        cmocka_unit_test(test_matmul_parts_and_acc_give_the_bits_of_the_plain_ops),
        cmocka_unit_test(test_matmul_swiglu_gives_the_bits_of_parts_then_swiglu),
        cmocka_unit_test(test_attention_workspace_size),
        cmocka_unit_test(test_bad_shapes_are_refused_before_enqueue),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
