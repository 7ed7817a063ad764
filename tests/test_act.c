/* Activation types (kernels/krn.h "activation types", MEMRA_ACT_TYPE) on the CPU backend, through the op table
 * on a stream (so the launch wrappers' declared byte ranges face the backend's checker):
 *   - rmsnorm, swiglu and attention with a 16-bit output store the f32 op's results rounded to nearest even;
 *   - every weight type's matmul (plain parts, acc) over 16-bit x gives the f32 matmul's bits over the widened
 *     rows, and quantize_x8 over them the bytes of quantizing the widened rows;
 *   - bad types and a 16-bit output overlapping its f32 input are refused before anything is enqueued. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "support/test_rand.h"
#include "kernels/krn.h"
#include "kernels/quant.h"

static uint64_t rng = 4242;
static float frand(void) { return test_frand(&rng); } /* uniform in [-1, 1) */

static const int act16[2] = { KRN_F16, KRN_BF16 };

typedef struct rig {
    dev_platform *p;
    dev_device *d;
    dev_stream *s;
} rig;

static rig rig_open(void)
{
    dev_err err = { 0 };
    rig r = { .p = dev_platform_open(DEV_KIND_CPU, 1, &err) };
    assert_non_null(r.p);
    r.d = dev_platform_device(r.p, 0);
    assert_non_null(r.s = dev_stream_create(r.d, "act", &err));
    return r;
}

static void rig_close(rig *r)
{
    dev_stream_destroy(r->s);
    dev_platform_close(r->p);
}

/* A device buffer holding n random values in [-scale, scale). */
static float *rand_dev(rig *r, size_t n, float scale)
{
    dev_err err = { 0 };
    float *h = malloc(n * sizeof(float)), *d = dev_malloc(r->d, n * sizeof(float), &err);
    assert_non_null(h);
    assert_non_null(d);
    for (size_t i = 0; i < n; i++)
        h[i] = frand() * scale;
    assert_int_equal(dev_copy_h2d_sync(r->d, d, h, n * sizeof(float), &err), 0);
    free(h);
    return d;
}

/* got (n elements of type t, device) == want (n floats, device) rounded, byte for byte. */
static void assert_rounded(rig *r, const void *got, const float *want, int t, size_t n, const char *what)
{
    dev_err err = { 0 };
    assert_int_equal(dev_stream_sync(r->s, &err), 0);
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
    krn_quant_row(t, want, b, (int64_t)n); /* CPU device memory is host memory */
    memcpy(a, got, n * 2);
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            fail_msg("%s %s: element %zu is 0x%04x, the f32 result rounded is 0x%04x", what, krn_type_name(t), i,
                     a[i], b[i]);
    free(a);
    free(b);
}

static void test_16bit_outputs_are_the_f32_results_rounded(void **state)
{
    (void)state;
    enum { B = 3, N = 96, NH = 4, NKV = 2, HD = 16, NCTX = 8 };
    rig r = rig_open();
    dev_err err = { 0 };
    float *x = rand_dev(&r, B * N, 3.0f), *w = rand_dev(&r, N, 1.0f), *g = rand_dev(&r, B * N, 4.0f),
          *u = rand_dev(&r, B * N, 2.0f), *q = rand_dev(&r, B * NH * HD, 1.0f),
          *kc = rand_dev(&r, 2 * NCTX * NKV * HD, 1.0f), *vc = rand_dev(&r, 2 * NCTX * NKV * HD, 1.0f);
    float *y32 = dev_malloc(r.d, sizeof(float) * B * N, &err), *o32 = dev_malloc(r.d, sizeof(float) * B * NH * HD, &err);
    void *y16 = dev_malloc(r.d, 2 * B * N, &err), *o16 = dev_malloc(r.d, 2 * B * NH * HD, &err);
    int32_t *seq = dev_malloc(r.d, sizeof(int32_t) * B, &err), *pos = dev_malloc(r.d, sizeof(int32_t) * B, &err);
    memcpy(seq, (int32_t[B]){ 0, 1, 1 }, sizeof(int32_t) * B);
    memcpy(pos, (int32_t[B]){ 7, 2, 5 }, sizeof(int32_t) * B);
    const krn_kv_cache kv = { kc, vc, KRN_F32 };
    for (int i = 0; i < 2; i++) {
        const int t = act16[i];
        assert_int_equal(krn_rmsnorm_async(r.s, y32, x, w, B, N, 1e-5f), 0);
        assert_int_equal(krn_rmsnorm_t_async(r.s, y16, t, x, w, B, N, 1e-5f), 0);
        assert_rounded(&r, y16, y32, t, B * N, "rmsnorm");
        assert_int_equal(krn_swiglu_async(r.s, y32, g, u, B, N), 0);
        assert_int_equal(krn_swiglu_t_async(r.s, y16, t, g, u, B, N), 0);
        assert_rounded(&r, y16, y32, t, B * N, "swiglu");
        assert_int_equal(krn_attention_async(r.s, o32, q, &kv, seq, pos, B, NH, NKV, HD, NCTX), 0);
        assert_int_equal(krn_attention_t_async(r.s, o16, t, q, &kv, seq, pos, B, NH, NKV, HD, NCTX, NULL, 0), 0);
        assert_rounded(&r, o16, o32, t, B * NH * HD, "attention");
    }
    void *bufs[] = { x, w, g, u, q, kc, vc, y32, o32, y16, o16, seq, pos };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        dev_free(r.d, bufs[i]);
    rig_close(&r);
}

static void test_16bit_x_gives_the_f32_bits_over_the_widened_rows(void **state)
{
    (void)state;
    static const int wtypes[] = { KRN_F32, KRN_F16, KRN_BF16, KRN_Q8_0, KRN_Q4_0, KRN_Q4_1, KRN_Q4_K,
                                  KRN_Q5_K, KRN_Q6_K };
    enum { B = 3, NOUT = 5, NIN = 256 };
    rig r = rig_open();
    dev_err err = { 0 };
    float *xf = rand_dev(&r, B * NIN, 2.0f), *xw = dev_malloc(r.d, sizeof(float) * B * NIN, &err);
    void *x16 = dev_malloc(r.d, 2 * B * NIN, &err);
    const size_t xr = krn_x8_row_bytes(NIN);
    uint8_t *q_a = dev_malloc(r.d, B * xr, &err), *q_b = dev_malloc(r.d, B * xr, &err);
    float *ya = dev_malloc(r.d, sizeof(float) * B * NOUT, &err), *yb = dev_malloc(r.d, sizeof(float) * B * NOUT, &err);
    for (int i = 0; i < 2; i++) {
        const int t = act16[i];
        krn_quant_row(t, xf, x16, B * NIN);  /* the 16-bit rows */
        krn_dequant_row(t, x16, xw, B * NIN); /* and their values, widened */
        assert_int_equal(krn_quantize_x8_async(r.s, q_a, xw, B, NIN), 0);
        assert_int_equal(krn_quantize_x8_t_async(r.s, q_b, x16, t, B, NIN), 0);
        assert_int_equal(dev_stream_sync(r.s, &err), 0);
        assert_memory_equal(q_a, q_b, B * xr);
        for (size_t k = 0; k < sizeof wtypes / sizeof wtypes[0]; k++) {
            const size_t rb = krn_row_bytes(wtypes[k], NIN);
            uint8_t *wd = dev_malloc(r.d, rb * NOUT, &err);
            float src[NIN];
            for (int o = 0; o < NOUT; o++) {
                for (int j = 0; j < NIN; j++)
                    src[j] = frand();
                krn_quant_row(wtypes[k], src, wd + o * rb, NIN);
            }
            const krn_weight W = { wtypes[k], NOUT, NIN, wd, KRN_LAYOUT_BLOCKS };
            const krn_mm_x in = { .x = x16, .type = t };
            const krn_mm_part pa = { ya, &W }, pb = { yb, &W };
            assert_int_equal(krn_matmul_parts_async(r.s, &pa, 1, xw, B), 0);
            assert_int_equal(krn_matmul_parts_x_async(r.s, &pb, 1, &in, B), 0);
            assert_int_equal(dev_stream_sync(r.s, &err), 0);
            if (memcmp(ya, yb, sizeof(float) * B * NOUT))
                fail_msg("matmul %s x %s: not the bits of f32 x widened", krn_type_name(wtypes[k]), krn_type_name(t));
            assert_int_equal(krn_matmul_acc_async(r.s, ya, &W, xw, B), 0); /* ya == yb: both add the same */
            assert_int_equal(krn_matmul_acc_x_async(r.s, yb, &W, &in, B), 0);
            assert_int_equal(dev_stream_sync(r.s, &err), 0);
            if (memcmp(ya, yb, sizeof(float) * B * NOUT))
                fail_msg("matmul_acc %s x %s: not the bits of f32 x widened", krn_type_name(wtypes[k]),
                         krn_type_name(t));
            dev_free(r.d, wd);
        }
    }
    void *bufs[] = { xf, xw, x16, q_a, q_b, ya, yb };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        dev_free(r.d, bufs[i]);
    rig_close(&r);
}

static void test_bad_types_and_overlapping_16bit_outputs_are_refused(void **state)
{
    (void)state;
    rig r = rig_open();
    dev_err err = { 0 };
    float *buf = dev_malloc(r.d, 4096, &err), *w = dev_malloc(r.d, 256, &err);
    int32_t *ib = dev_malloc(r.d, 64, &err);
    memset(buf, 0, 4096);
    memset(w, 0, 256);
    memset(ib, 0, 64);
    assert_int_equal(krn_act_type_ok(KRN_Q8_0), 0);
    assert_int_equal(krn_act_bytes(KRN_Q8_0), 0);
    assert_int_equal(krn_act_bytes(KRN_BF16), 2);
    assert_int_equal(krn_rmsnorm_t_async(r.s, buf + 512, KRN_Q8_0, buf, w, 1, 32, 1e-5f), MEMRA_E_INVAL);
    /* a 16-bit y on its own f32 input: element i would land on x[i/2] before it is read */
    assert_int_equal(krn_rmsnorm_t_async(r.s, buf, KRN_BF16, buf, w, 1, 32, 1e-5f), MEMRA_E_INVAL);
    assert_int_equal(krn_rmsnorm_t_async(r.s, buf + 16, KRN_F16, buf, w, 1, 32, 1e-5f), MEMRA_E_INVAL);
    assert_int_equal(krn_swiglu_t_async(r.s, buf + 100, KRN_BF16, buf, buf + 90, 1, 32), MEMRA_E_INVAL); /* on up */
    assert_int_equal(krn_swiglu_t_async(r.s, buf + 512, 7, buf, buf + 64, 1, 32), MEMRA_E_INVAL);
    krn_kv_cache kv = { buf, buf, KRN_F32 };
    assert_int_equal(krn_attention_t_async(r.s, buf + 512, KRN_Q4_0, buf, &kv, ib, ib, 1, 2, 2, 8, 4, NULL, 0),
                     MEMRA_E_INVAL);
    assert_int_equal(krn_quantize_x8_t_async(r.s, buf + 512, buf, KRN_Q4_K, 1, 32), MEMRA_E_INVAL);
    const krn_weight W = { KRN_F32, 2, 32, w, KRN_LAYOUT_BLOCKS };
    const krn_mm_part part = { buf + 512, &W };
    const krn_mm_x bad = { .x = buf, .type = KRN_Q8_0 }, none = { .type = KRN_F32 };
    assert_int_equal(krn_matmul_parts_x_async(r.s, &part, 1, &bad, 1), MEMRA_E_INVAL);
    assert_int_equal(krn_matmul_acc_x_async(r.s, buf + 512, &W, &none, 1), MEMRA_E_INVAL);
    assert_int_equal(krn_matmul_acc_x_async(r.s, buf + 512, &W, NULL, 1), MEMRA_E_INVAL);
    /* allowed: f32 swiglu in place, 16-bit outputs beside their inputs */
    assert_int_equal(krn_swiglu_t_async(r.s, buf, KRN_F32, buf, buf + 64, 1, 32), 0);
    assert_int_equal(krn_swiglu_t_async(r.s, buf + 128, KRN_BF16, buf, buf + 64, 1, 32), 0);
    assert_int_equal(krn_rmsnorm_t_async(r.s, buf + 32, KRN_F16, buf, w, 1, 32, 1e-5f), 0);
    assert_int_equal(dev_stream_sync(r.s, &err), 0);
    dev_free(r.d, buf);
    dev_free(r.d, w);
    dev_free(r.d, ib);
    rig_close(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_16bit_outputs_are_the_f32_results_rounded),
        cmocka_unit_test(test_16bit_x_gives_the_f32_bits_over_the_widened_rows),
        cmocka_unit_test(test_bad_types_and_overlapping_16bit_outputs_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
