/* Tiny synthetic models against the independent python oracle (tools/ref/ref_logits.py: the `gguf`
 * package's dequantizer + a numpy float64 forward), committed as tests/data/ref_logits_tiny_{llama,qwen2}.txt.
 * The models are rebuilt here byte for byte by gguf_tiny (the synthetic writer is deterministic); the
 * oracle was run on the same bytes written by:
 *   memra-mkgguf -o tiny_llama.gguf --arch llama --layers 3 --embd 256 --heads 4 --kv-heads 2 --ff 512 \
 *       --vocab 300 --ctx 64 --type q4_K --embd-type q6_K --seed 6
 *   memra-mkgguf -o tiny_qwen2.gguf --arch qwen2 --layers 3 --embd 256 --heads 4 --kv-heads 2 --ff 512 \
 *       --vocab 300 --ctx 64 --type q8_0 --embd-type q8_0 --seed 5 --tied
 *   tools/ref/ref_logits.py tiny_<arch>.gguf tests/data/ref_logits_tiny_<arch>.txt --ids 5,17,42,3,88,61,9
 * Covers what the llama-only real model cannot: qwen2's NeoX rope and q/k/v biases, tied embeddings, and
 * k-quant weights, checked by a second implementation. Teacher-forced 8 greedy steps; tolerance 2e-5
 * absolute (logits O(1-5), printed to 1e-6; f32 vs float64 arithmetic differs by <= 1e-6 here: 20x margin).
 * If the synthetic writer ever changes its bytes this test fails: regenerate the two files as above. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kernels/quant.h"
#include "model/llama.h"
#include "support/gguf_tiny.h"
#include "support/model_ref.h"
#include "support/model_rig.h"

#define TOL 2e-5

static void check(const char *arch, int type, int embd_type, unsigned seed, int tied, const char *oracle)
{
    model_ref ref;
    assert_int_equal(model_ref_load(oracle, &ref), 0);
    gguf_tiny_params p;
    gguf_tiny_defaults(&p);
    p.arch = arch;
    p.n_layer = 3;
    p.n_embd = 256;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.n_ff = 512;
    p.n_vocab = 300;
    p.n_ctx = 64;
    p.type = type;
    p.embd_type = embd_type;
    p.seed = seed;
    p.tied = tied;
    char path[256];
    dev_err err = { 0 };
    if (gguf_tiny_write_temp(path, sizeof path, &p, &err))
        fail_msg("gguf_tiny_write_temp: %s", err.msg);
    dev_platform *pf = dev_platform_open(DEV_KIND_CPU, 1, &err);
    model_rig r;
    if (model_rig_open(&r, pf, path, NULL, 1, 32, 16, &err))
        fail_msg("open: %s", err.msg);
    assert_int_equal(ref.n_prompt, 1);
    assert_int_equal(ref.prompt[0].n_steps, 8);
    model_ref_outcome o;
    if (model_ref_teacher_force(&r, &ref, TOL, &o, &err))
        fail_msg("rows: %s", err.msg);
    if (o.fail[0])
        fail_msg("%s: %s", arch, o.fail);
    assert_int_equal(o.steps, 8);
    printf("  %s %s: worst max |ours - oracle| = %.3g over %d steps\n", arch, krn_type_name(type), o.worst, o.steps);
    model_rig_close(&r);
    dev_platform_close(pf);
    unlink(path);
}

static void test_tiny_llama_q4_k_matches_the_python_oracle(void **state)
{
    (void)state;
    check("llama", KRN_Q4_K, KRN_Q6_K, 6, 0, "tests/data/ref_logits_tiny_llama.txt");
}

static void test_tiny_qwen2_q8_0_tied_matches_the_python_oracle(void **state)
{
    (void)state;
    check("qwen2", KRN_Q8_0, KRN_Q8_0, 5, 1, "tests/data/ref_logits_tiny_qwen2.txt");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_llama_q4_k_matches_the_python_oracle),
        cmocka_unit_test(test_tiny_qwen2_q8_0_tied_matches_the_python_oracle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
