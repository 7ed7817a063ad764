/* The real model (SmolLM2-135M-Instruct Q4_1) on the CUDA backend against the float64 oracle: the check of
 * tests/model_logits.c (3 prompts x 8 teacher-forced greedy steps, tests/data/ref_logits_smollm2.txt) on device 0.
 * Tolerance 1e-3 absolute and top-1 agreement outside near ties, as on the CPU: the GPU's f32 reductions run in
 * another fixed order than the CPU's, both far closer to float64 than 1e-3 (a layout or rounding bug moves logits by
 * >= 1e-2). tests/gpu_forward.c holds CUDA to the CPU on tiny models in every type; this test holds it to an
 * independent implementation on real weights.
 * Skips (77) with the reason when no CUDA device is usable or MEMRA_MODEL is not a readable file (a GPU machine
 * gets the file from scripts/gpu-check's `model` step). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "support/model_ref.h"

#define TOL 1e-3

static model_ref g_ref;
static const char *g_model;
static dev_platform *g_cuda;

static void test_cuda_logits_match_the_float64_oracle_at_every_step(void **state)
{
    (void)state;
    dev_err err = { 0 };
    model_ref_outcome o;
    if (model_ref_run(g_cuda, g_model, &g_ref, TOL, &o, &err))
        fail_msg("%s", err.msg);
    printf("gpu_model_logits: worst max |ours - oracle| = %.3g over %d steps (tolerance %g); near-tie top-1 flips: "
           "%d\n", o.worst, o.steps, TOL, o.near_ties);
    if (o.fail[0])
        fail_msg("%s", o.fail);
    assert_int_equal(o.steps, 24);
}

int main(void)
{
    if (!(g_model = model_ref_model_or_skip("gpu_model_logits")))
        return 77;
    if (model_ref_load("tests/data/ref_logits_smollm2.txt", &g_ref))
        return 1;
    dev_err err = { 0 };
    g_cuda = dev_platform_open(DEV_KIND_CUDA, 0, &err);
    if (!g_cuda) {
        printf("gpu_model_logits: skipped: no CUDA device (%s)\n", err.msg);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_logits_match_the_float64_oracle_at_every_step),
    };
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    dev_platform_close(g_cuda);
    return rc;
}
