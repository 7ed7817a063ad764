/* Synthetic weights and models (kernels/fill.h, mdl_model_synthesize) on the CPU backend. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "tools/memra-gate/gate.h"
#include "kernels/fill.h"
#include "kernels/quant.h"
#include "model/gguf_synth.h"
#include "model/llama.h"
#include "support/gguf_tiny.h"

static const int types[] = {KRN_F32, KRN_F16, KRN_BF16, KRN_Q8_0, KRN_Q4_0, KRN_Q4_1, KRN_Q4_K, KRN_Q5_K, KRN_Q6_K};

static void test_fill_is_deterministic_and_any_split_gives_the_same_bytes(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        krn_fill_plan p;
        assert_int_equal(krn_fill_plan_make(&p, types[i], 7, 512, 42, 0.05f, 0.0f), 0);
        size_t bytes = 7 * p.row_bytes;
        unsigned char *a = malloc(bytes), *b = malloc(bytes);
        int64_t n = krn_fill_units(&p);
        krn_fill_host_range(&p, a, 0, n);
        krn_fill_host_range(&p, b, n / 3, n); /* two pieces, other order */
        krn_fill_host_range(&p, b, 0, n / 3);
        assert_memory_equal(a, b, bytes);
        p.seed = 43;
        krn_fill_host_range(&p, b, 0, n);
        assert_true(memcmp(a, b, bytes) != 0);
        /* every value finite and of the asked size */
        float *row = malloc(512 * sizeof(float));
        double sum2 = 0;
        for (int r = 0; r < 7; r++) {
            krn_dequant_row(types[i], a + (size_t)r * p.row_bytes, row, 512);
            for (int k = 0; k < 512; k++) {
                assert_true(isfinite(row[k]));
                sum2 += (double)row[k] * row[k];
            }
        }
        double rms = sqrt(sum2 / (7 * 512));
        if (!(rms > 0.005 && rms < 0.5))
            fail_msg("%s: rms %g is not of the order of 0.05", krn_type_name(types[i]), rms);
        free(a), free(b), free(row);
    }
}

static void test_fill_on_a_cpu_stream_writes_the_host_bytes(void **state)
{
    (void)state;
    dev_err e = {0};
    dev_platform *plat = dev_platform_open(DEV_KIND_CPU, 2, &e);
    assert_non_null(plat);
    dev_device *d = dev_platform_device(plat, 1);
    dev_stream *s = dev_stream_create(d, "fill", &e);
    krn_fill_plan p;
    assert_int_equal(krn_fill_plan_make(&p, KRN_Q4_K, 3, 256, 7, 0.1f, 0.0f), 0);
    void *dev = dev_malloc(d, 3 * p.row_bytes, &e), *host = malloc(3 * p.row_bytes), *back = malloc(3 * p.row_bytes);
    assert_int_equal(krn_fill_async(s, dev, &p), 0);
    assert_int_equal(dev_copy_d2h_async(s, back, dev, 3 * p.row_bytes), 0);
    assert_int_equal(dev_stream_sync(s, &e), 0);
    krn_fill_host_range(&p, host, 0, krn_fill_units(&p));
    assert_memory_equal(back, host, 3 * p.row_bytes);
    assert_int_equal(krn_fill_plan_make(&p, KRN_Q4_K, 3, 100, 7, 0.1f, 0.0f), MEMRA_E_INVAL); /* 100 % 256 */
    free(host), free(back);
    dev_free(d, dev);
    dev_stream_destroy(s);
    dev_platform_close(plat);
}

static void test_a_synthetic_model_runs_and_splits_bit_identically(void **state)
{
    (void)state;
    dev_err e = {0};
    dev_platform *plat = dev_platform_open(DEV_KIND_CPU, 4, &e);
    mdl_gguf_synth shape;
    assert_int_equal(mdl_synth_named("tiny", KRN_Q8_0, &shape), 0);
    assert_int_equal(mdl_synth_named("gpt-9", KRN_Q8_0, &shape), MEMRA_E_INVAL);
    assert_int_equal(mdl_synth_named("tiny", KRN_Q8_0, &shape), 0);
    act_pp_params pp = act_pp_default_params();
    pp.apply_env = 0;
    pp.config.stages = 3;
    pp.config.n_devices = 3;
    pp.config.devices[1] = 1, pp.config.devices[2] = 2;
    pp.synth = &shape;
    act_pp *rt = act_pp_create(plat, NULL, &pp, &e);
    if (!rt)
        fail_msg("runtime: %s", e.msg);
    assert_int_equal(mdl_model_hparams(act_pp_model(rt))->n_layer, 8);
    assert_null(mdl_model_tokenizer(act_pp_model(rt)));
    assert_true(mdl_model_weight_bytes(act_pp_model(rt)) > 0);
    for (int arm = ACT_GATE_EAGER; arm <= ACT_GATE_REPLAY; arm++) {
        act_gate_params gp = act_gate_default_params((act_gate_arm)arm);
        gp.steps = 4;
        act_gate_report rep;
        assert_int_equal(act_gate_run(rt, &gp, &rep, &e), 0);
        if (!rep.pass)
            fail_msg("%s: %s", act_gate_arm_name((act_gate_arm)arm), rep.msg);
        assert_true(rep.max_abs_diff == 0.0f);
    }
    act_pp_destroy(rt);
    dev_platform_close(plat);
}

/* A partial synthetic model holds what it is given a device for, as a partial load does: two halves hold the
 * whole model's weight bytes between them, each strictly fewer; the embedding table only with layer 0; and each
 * half's layers carry the same weights as the whole model's (the same seeds), so the halves' forward walks give
 * the whole model's logits bit for bit. */
static void test_a_partial_synthetic_model_holds_its_layers_and_halves_equal_the_whole(void **state)
{
    (void)state;
    dev_err e = {0};
    dev_platform *plat = dev_platform_open(DEV_KIND_CPU, 1, &e);
    dev_device *d = dev_platform_device(plat, 0);
    mdl_gguf_synth shape;
    assert_int_equal(mdl_synth_named("tiny", KRN_Q8_0, &shape), 0);
    const int L = shape.n_layer, a = 3, B = 2, E = shape.n_embd, V = shape.n_vocab;
    dev_device *la[64] = {0}, *lb[64] = {0};
    for (int il = 0; il < L; il++)
        (il < a ? la : lb)[il] = d;
    mdl_model *whole = mdl_model_synthesize(&shape, &(mdl_load_params){.platform = plat}, &e);
    mdl_model *ma = mdl_model_synthesize(&shape, &(mdl_load_params){.platform = plat, .layer_dev = la, .partial = 1}, &e);
    mdl_model *mb = mdl_model_synthesize(&shape, &(mdl_load_params){.platform = plat, .layer_dev = lb, .head_dev = d,
                                                                     .partial = 1}, &e);
    assert_true(whole && ma && mb);
    assert_int_equal(mdl_model_layers_held(ma), a);
    assert_int_equal(mdl_model_layers_held(mb), L - a);
    assert_null(mdl_model_head_device(ma));
    assert_true(mdl_model_has_embeddings(ma) && !mdl_model_has_embeddings(mb));
    const size_t wa = mdl_model_weight_bytes(ma), wb = mdl_model_weight_bytes(mb), ww = mdl_model_weight_bytes(whole);
    assert_true(wa < ww && wb < ww);
    assert_int_equal(wa + wb, ww);
    mdl_kv *kw = mdl_kv_create(whole, NULL, 1, 8, KRN_F32, &e), *ka = mdl_kv_create(ma, NULL, 1, 8, KRN_F32, &e),
           *kb = mdl_kv_create(mb, NULL, 1, 8, KRN_F32, &e);
    mdl_scratch *sw = mdl_scratch_create(whole, d, B, &e), *sa = mdl_scratch_create(ma, d, B, &e),
                *sb = mdl_scratch_create(mb, d, B, &e);
    dev_stream *s = dev_stream_create(d, "walk", &e);
    float *x = dev_malloc(d, sizeof(float) * B * E, &e), *lg = dev_malloc(d, sizeof(float) * B * V, &e);
    int32_t *ps = dev_malloc(d, sizeof(int32_t) * 2 * B, &e);
    assert_true(kw && ka && kb && sw && sa && sb && s && x && lg && ps);
    assert_true(mdl_kv_has_layer(ka, a - 1) && !mdl_kv_has_layer(ka, a) && mdl_kv_has_layer(kb, a));
    const int32_t tok[2] = {5, 77}, possq[4] = {0, 1, 0, 0};
    float *xh = malloc(sizeof(float) * B * E), *want = malloc(sizeof(float) * B * V), *got = malloc(sizeof(float) * B * V);
    assert_true(xh && want && got);
    assert_int_equal(mdl_embed_rows(ma, tok, B, xh, &e), 0);
    for (int arm = 0; arm < 2; arm++) { /* 0: the whole model, 1: the two halves */
        assert_int_equal(dev_copy_h2d_async(s, x, xh, sizeof(float) * B * E), 0);
        assert_int_equal(dev_copy_h2d_async(s, ps, possq, sizeof possq), 0);
        if (arm == 0) {
            assert_int_equal(mdl_forward_layers_async(whole, kw, sw, s, x, ps, ps + B, B, 0, 0, L, &e), 0);
            assert_int_equal(mdl_forward_head_async(whole, sw, s, x, lg, B, &e), 0);
        } else {
            assert_int_equal(mdl_forward_layers_async(ma, ka, sa, s, x, ps, ps + B, B, 0, 0, a, &e), 0);
            assert_int_equal(mdl_forward_layers_async(mb, kb, sb, s, x, ps, ps + B, B, 0, a, L, &e), 0);
            assert_int_equal(mdl_forward_head_async(mb, sb, s, x, lg, B, &e), 0);
        }
        assert_int_equal(dev_copy_d2h_async(s, arm ? got : want, lg, sizeof(float) * B * V), 0);
        assert_int_equal(dev_stream_sync(s, &e), 0);
    }
    assert_memory_equal(want, got, sizeof(float) * B * V);
    free(xh);
    free(want);
    free(got);
    dev_stream_destroy(s);
    dev_free(d, x);
    dev_free(d, lg);
    dev_free(d, ps);
    mdl_scratch_destroy(sw);
    mdl_scratch_destroy(sa);
    mdl_scratch_destroy(sb);
    mdl_kv_destroy(kw);
    mdl_kv_destroy(ka);
    mdl_kv_destroy(kb);
    mdl_model_free(whole);
    mdl_model_free(ma);
    mdl_model_free(mb);
    dev_platform_close(plat);
}

/* The cost a balanced cut reads (MEMRA_PP_SPLITS=weights) is the same whether it comes from a GGUF's tensor
 * table or from the synthetic shape that wrote it, on both backends' cost models; the head is counted. */
static void test_weight_cost_of_a_gguf_equals_that_of_its_synthetic_shape(void **state)
{
    (void)state;
    const int tt[] = {KRN_BF16, KRN_Q4_1, KRN_Q8_0};
    for (size_t k = 0; k < sizeof tt / sizeof tt[0]; k++) {
        gguf_tiny_params p;
        gguf_tiny_defaults(&p);
        p.type = p.embd_type = tt[k];
        p.n_layer = 5;
        char path[256];
        dev_err err = {0};
        assert_int_equal(gguf_tiny_write_temp(path, sizeof path, &p, &err), 0);
        for (int model = 0; model < 3; model++) { /* KRN_COST_CPU, _CUDA, _CPU_X8 */
            double a[6], b[6];
            assert_int_equal(mdl_model_peek_weight_cost(path, model, a, 6, &err), 5);
            assert_int_equal(mdl_synth_weight_cost(&p, model, b, 6, &err), 5);
            for (int i = 0; i < 6; i++)
                if (fabs(a[i] - b[i]) > 1e-9 * b[i])
                    fail_msg("type %s model %d entry %d: GGUF %g, synthetic %g", krn_type_name(tt[k]), model, i,
                             a[i], b[i]);
            assert_true(a[5] > 0.0 && a[0] > 0.0);
            if (model == KRN_COST_CUDA) /* bytes: a layer is its tensors' bytes */
                assert_true(a[0] > (double)krn_row_bytes(tt[k], p.n_embd) * p.n_ff);
        }
        assert_int_equal(mdl_model_peek_weight_cost(path, 0, (double[5]){0}, 5, &err), MEMRA_E_INVAL); /* no room */
        unlink(path);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fill_is_deterministic_and_any_split_gives_the_same_bytes),
        cmocka_unit_test(test_fill_on_a_cpu_stream_writes_the_host_bytes),
        cmocka_unit_test(test_a_synthetic_model_runs_and_splits_bit_identically),
        cmocka_unit_test(test_a_partial_synthetic_model_holds_its_layers_and_halves_equal_the_whole),
        cmocka_unit_test(test_weight_cost_of_a_gguf_equals_that_of_its_synthetic_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
