/* Chat templates: SmolLM2's template text (as its GGUF stores it) rendered against HF
 * apply_chat_template output committed in tests/data/chat_oracle_smollm2.txt; detection of chatml,
 * llama3 and gemma; default system prompts read from template text; refusal of unknown templates;
 * the buffer-size contract. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "model/chat.h"
#include "support/tok_testdata.h"

/* tokenizer.chat_template of SmolLM2-135M-Instruct (GGUF), verbatim. */
static const char SMOLLM2_TEMPLATE[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/* The system branch of a Qwen2.5-style template, Jinja escapes kept as written. */
static const char QWEN_LIKE_TEMPLATE[] =
    "{%- if messages[0]['role'] == 'system' %}\n        {{- '<|im_start|>system\\n' + messages[0]['content'] + "
    "'<|im_end|>\\n' }}\n    {%- else %}\n        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba "
    "Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n    {%- endif %}";

static const char LLAMA3_TEMPLATE[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

static void test_smollm2_template_matches_hf_apply_chat_template(void **state)
{
    dev_err err = {0};
    mdl_chat *c = mdl_chat_create(SMOLLM2_TEMPLATE, &err);
    assert_non_null(c);
    assert_int_equal(mdl_chat_kind_of(c), MDL_CHAT_CHATML);
    assert_string_equal(mdl_chat_default_system(c), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    char p[4096];
    tok_chat_case *cs;
    int n = tok_chat_cases_load(tok_data_path("chat_oracle_smollm2.txt", p, sizeof p), &cs);
    assert_true(n >= 6);
    for (int i = 0; i < n; i++) {
        char got[4096];
        long len = mdl_chat_apply(c, cs[i].msgs, (size_t)cs[i].n_msgs, cs[i].add_generation_prompt, got, sizeof got);
        if (len != (long)cs[i].want_len || memcmp(got, cs[i].want, cs[i].want_len) != 0)
            fprintf(stderr, "case %s:\n got [%s]\nwant [%s]\n", cs[i].name, got, cs[i].want);
        assert_int_equal(len, (long)cs[i].want_len);
        assert_memory_equal(got, cs[i].want, cs[i].want_len + 1); /* NUL included */
    }
    tok_chat_cases_free(cs, n);
    mdl_chat_destroy(c);
}

static void test_default_system_prompt_is_read_from_jinja_escaped_text(void **state)
{
    dev_err err = {0};
    mdl_chat *c = mdl_chat_create(QWEN_LIKE_TEMPLATE, &err);
    assert_non_null(c);
    assert_string_equal(mdl_chat_default_system(c), "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
    mdl_chat_msg m[1] = {{"user", "hi"}};
    char got[512];
    long n = mdl_chat_apply(c, m, 1, 1, got, sizeof got);
    const char *want = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                       "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
    assert_int_equal(n, (long)strlen(want));
    assert_string_equal(got, want);
    mdl_chat_destroy(c);

    c = mdl_chat_create("chatml", &err); /* plain chatml: no default system */
    assert_non_null(c);
    assert_null(mdl_chat_default_system(c));
    n = mdl_chat_apply(c, m, 1, 0, got, sizeof got);
    assert_string_equal(got, "<|im_start|>user\nhi<|im_end|>\n");
    mdl_chat_destroy(c);
}

static void test_llama3_and_gemma_render_their_formats(void **state)
{
    dev_err err = {0};
    mdl_chat_msg m[3] = {{"system", "Be brief."}, {"user", "  Hi there \n"}, {"assistant", "Hello."}};
    char got[1024];
    mdl_chat *c = mdl_chat_create(LLAMA3_TEMPLATE, &err);
    assert_non_null(c);
    assert_int_equal(mdl_chat_kind_of(c), MDL_CHAT_LLAMA3);
    mdl_chat_apply(c, m, 3, 1, got, sizeof got);
    assert_string_equal(got, "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                             "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
                             "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                             "<|start_header_id|>assistant<|end_header_id|>\n\n");
    mdl_chat_destroy(c);

    c = mdl_chat_create("{{ bos_token }}{% for message in messages %}<start_of_turn>...", &err);
    assert_non_null(c);
    assert_int_equal(mdl_chat_kind_of(c), MDL_CHAT_GEMMA);
    mdl_chat_apply(c, m, 3, 1, got, sizeof got);
    assert_string_equal(got, "<start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n"
                             "<start_of_turn>model\nHello.<end_of_turn>\n<start_of_turn>model\n");
    mdl_chat_destroy(c);
}

static void test_unknown_template_is_refused_naming_the_supported_formats(void **state)
{
    dev_err err = {0};
    assert_null(mdl_chat_create("{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}", &err));
    assert_int_equal(err.code, MEMRA_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "chatml"));
    assert_non_null(strstr(err.msg, "llama3"));
    assert_non_null(strstr(err.msg, "[INST]"));
    dev_err_clear(&err);
    assert_null(mdl_chat_create(NULL, &err));
    assert_int_equal(err.code, MEMRA_E_INVAL);
}

static void test_small_buffer_reports_the_needed_size(void **state)
{
    dev_err err = {0};
    mdl_chat *c = mdl_chat_create(SMOLLM2_TEMPLATE, &err);
    mdl_chat_msg m[1] = {{"user", "hello"}};
    long n = mdl_chat_apply(c, m, 1, 1, NULL, 0);
    assert_true(n < 0);
    char big[1024], small[16];
    long full = mdl_chat_apply(c, m, 1, 1, big, sizeof big);
    assert_int_equal(n, -(full + 1));
    assert_int_equal(mdl_chat_apply(c, m, 1, 1, small, sizeof small), -(full + 1));
    assert_int_equal(strlen(small), sizeof small - 1); /* truncated, still NUL-terminated */
    assert_memory_equal(small, big, sizeof small - 1);
    mdl_chat_msg bad[1] = {{"user", NULL}};
    assert_int_equal(mdl_chat_apply(c, bad, 1, 1, big, sizeof big), MEMRA_E_INVAL);
    mdl_chat_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smollm2_template_matches_hf_apply_chat_template),
        cmocka_unit_test(test_default_system_prompt_is_read_from_jinja_escaped_text),
        cmocka_unit_test(test_llama3_and_gemma_render_their_formats),
        cmocka_unit_test(test_unknown_template_is_refused_naming_the_supported_formats),
        cmocka_unit_test(test_small_buffer_reports_the_needed_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
