/* model/gguf on the real SmolLM2-135M-Instruct Q4_1 GGUF ($MEMRA_MODEL): its header, vocab and tensor
 * types as the file has them, and a few dequantized values checked against the gguf python package. */
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
#include "model/gguf.h"

static mdl_gguf *g;

static int setup(void **state)
{
    (void)state;
    dev_err err = {0};
    g = mdl_gguf_open(getenv("MEMRA_MODEL"), &err);
    if (!g)
        fprintf(stderr, "open: %s\n", err.msg);
    return g ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    mdl_gguf_close(g);
    return 0;
}

static void test_smollm2_header_is_llama_with_30_blocks(void **state)
{
    (void)state;
    dev_err err = {0};
    const char *s;
    size_t n;
    uint32_t u;
    assert_int_equal(mdl_gguf_version(g), 3);
    assert_int_equal(mdl_gguf_kv_count(g), 33);
    assert_int_equal(mdl_gguf_data_offset(g), 1785664);
    assert_int_equal(mdl_gguf_get_str(g, "general.architecture", &s, &n, &err), 0);
    assert_true(n == 5 && memcmp(s, "llama", 5) == 0);
    static const struct { const char *k; uint32_t v; } want[] = {
        {"llama.block_count", 30}, {"llama.embedding_length", 576}, {"llama.feed_forward_length", 1536},
        {"llama.attention.head_count", 9}, {"llama.attention.head_count_kv", 3}, {"llama.context_length", 8192},
        {"llama.vocab_size", 49152}, {"tokenizer.ggml.bos_token_id", 1}, {"tokenizer.ggml.eos_token_id", 2}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_int_equal(mdl_gguf_get_u32(g, want[i].k, &u, &err), 0);
        assert_int_equal(u, want[i].v);
    }
    float f;
    assert_int_equal(mdl_gguf_get_f32(g, "llama.rope.freq_base", &f, &err), 0);
    assert_true(f == 100000.0f);
    int b = 1;
    assert_int_equal(mdl_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b, &err), 0);
    assert_int_equal(b, 0);
}

static void test_smollm2_vocab_has_49152_tokens_and_48900_merges(void **state)
{
    (void)state;
    dev_err err = {0};
    int et;
    uint64_t n;
    const char *s;
    size_t len;
    assert_int_equal(mdl_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &err), 0);
    assert_true(et == MDL_GGUF_STRING && n == 49152);
    assert_int_equal(mdl_gguf_arr_str(g, "tokenizer.ggml.tokens", 0, &s, &len), 0);
    assert_true(len == 13 && memcmp(s, "<|endoftext|>", 13) == 0);
    assert_int_equal(mdl_gguf_arr_str(g, "tokenizer.ggml.tokens", 49151, &s, &len), 0);
    assert_true(len == 7 && memcmp(s, "ectable", 7) == 0);
    assert_int_equal(mdl_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, &err), 0);
    assert_true(et == MDL_GGUF_STRING && n == 48900);
    assert_int_equal(mdl_gguf_arr_str(g, "tokenizer.ggml.merges", 0, &s, &len), 0);
    assert_true(len == 4 && memcmp(s, "\xc4\xa0 t", 4) == 0);
    const int32_t *tt = mdl_gguf_arr_data(g, "tokenizer.ggml.token_type");
    assert_non_null(tt);
    assert_true(tt[0] == 3 && tt[100] == 1);
}

static void test_smollm2_tensor_types_are_q4_1_q8_0_and_f32(void **state)
{
    (void)state;
    assert_int_equal(mdl_gguf_tensor_count(g), 272);
    int n_q4_1 = 0, n_f32 = 0, n_q8_0 = 0;
    for (int i = 0; i < mdl_gguf_tensor_count(g); i++) {
        const mdl_gguf_tensor *t = mdl_gguf_tensor_at(g, i);
        n_q4_1 += t->type == KRN_Q4_1;
        n_f32 += t->type == KRN_F32;
        n_q8_0 += t->type == KRN_Q8_0;
    }
    assert_true(n_q4_1 == 210 && n_f32 == 61 && n_q8_0 == 1);
    const mdl_gguf_tensor *t = mdl_gguf_tensor_find(g, "token_embd.weight");
    assert_true(t && t->type == KRN_Q8_0 && t->ne[0] == 576 && t->ne[1] == 49152);
    assert_null(mdl_gguf_tensor_find(g, "output.weight")); /* tied head */
    t = mdl_gguf_tensor_find(g, "blk.29.ffn_down.weight");
    assert_true(t && t->type == KRN_Q4_1 && t->ne[0] == 1536 && t->ne[1] == 576);
    t = mdl_gguf_tensor_find(g, "blk.0.attn_k.weight");
    assert_true(t && t->ne[0] == 576 && t->ne[1] == 192);
}

static void test_smollm2_values_match_the_gguf_python_package(void **state)
{
    (void)state;
    float row[576];
    const mdl_gguf_tensor *t = mdl_gguf_tensor_find(g, "token_embd.weight");
    const size_t rb = krn_row_bytes(t->type, 576);
    krn_dequant_row(t->type, (const uint8_t *)t->data + 5 * rb, row, 576);
    assert_true(row[0] == -0.0079956055f && row[575] == -0.12983704f);
    t = mdl_gguf_tensor_find(g, "blk.0.attn_q.weight");
    krn_dequant_row(t->type, t->data, row, 576);
    assert_true(row[0] == -0.09631348f && row[1] == 0.15734863f);
    krn_dequant_row(t->type, (const uint8_t *)t->data + 575 * krn_row_bytes(t->type, 576), row, 576);
    assert_true(row[575] == -0.25585938f);
    t = mdl_gguf_tensor_find(g, "output_norm.weight");
    assert_true(((const float *)t->data)[0] == 1.7578125f);
}

int main(void)
{
    const char *path = getenv("MEMRA_MODEL");
    if (!path || access(path, R_OK) != 0) {
        printf("skipped: MEMRA_MODEL (%s) is not a readable file; set it to SmolLM2-135M-Instruct.Q4_1.gguf\n",
               path ? path : "unset");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smollm2_header_is_llama_with_30_blocks),
        cmocka_unit_test(test_smollm2_vocab_has_49152_tokens_and_48900_merges),
        cmocka_unit_test(test_smollm2_tensor_types_are_q4_1_q8_0_and_f32),
        cmocka_unit_test(test_smollm2_values_match_the_gguf_python_package),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
