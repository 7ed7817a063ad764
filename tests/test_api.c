/* The embedding API's contract on misuse: NULL handles, closed sequences, wrong sizes, bad params and bad
 * doors each return the documented code and leave a message (thread-local and on the handle). Runs on a
 * tiny synthetic model (tests/support/gguf_tiny). Using a handle after its runtime is freed is documented
 * undefined behaviour and is not tested. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "memra/memra.h"
#include "support/api_tiny.h"
#include "support/gguf_tiny.h"

static memra_runtime *rt_small(int n_seq, int max_rows)
{
    memra_runtime_params p = memra_runtime_default_params();
    p.backend = MEMRA_BACKEND_CPU;
    p.cpu_devices = 2;
    p.n_seq = n_seq;
    p.n_ctx = 32;
    p.max_rows = max_rows;
    memra_runtime *rt = memra_runtime_create(api_tiny_model, &p);
    if (!rt)
        fprintf(stderr, "runtime: %s\n", memra_last_error());
    assert_non_null(rt);
    return rt;
}

static void test_version_macros_match_the_linked_library(void **state)
{
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", MEMRA_VERSION_MAJOR, MEMRA_VERSION_MINOR, MEMRA_VERSION_PATCH);
    assert_string_equal(v, MEMRA_VERSION_STRING);
    assert_string_equal(memra_version(), MEMRA_VERSION_STRING);
}

static void test_status_str_names_every_code_and_unknown_ones(void **state)
{
    assert_string_equal(memra_status_str(MEMRA_OK), "MEMRA_OK");
    assert_string_equal(memra_status_str(MEMRA_E_STATE), "MEMRA_E_STATE");
    assert_string_equal(memra_status_str(MEMRA_E_ABORTED), "MEMRA_E_ABORTED");
    assert_string_equal(memra_status_str(MEMRA_E_FULL), "MEMRA_E_FULL");
    assert_non_null(memra_status_str(-999));
}

static void test_model_load_of_null_path_is_inval_and_of_a_missing_file_is_io(void **state)
{
    assert_null(memra_model_load(NULL, NULL));
    assert_int_equal(memra_last_status(), MEMRA_E_INVAL);
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "path");
    assert_null(memra_model_load("/nonexistent/memra-model.gguf", NULL));
    assert_int_equal(memra_last_status(), MEMRA_E_IO);
    api_tiny_assert_error(memra_last_error(), MEMRA_E_IO, "/nonexistent/memra-model.gguf");
}

static void progress_record(float frac, void *user)
{
    float *seen = user;
    if (frac < seen[0])
        seen[0] = frac;
    if (frac > seen[1])
        seen[1] = frac;
}

static void test_model_load_reports_progress_and_reads_the_hparams(void **state)
{
    float seen[2] = {2.0f, -1.0f};
    memra_model_params mp = memra_model_default_params();
    mp.progress = progress_record;
    mp.progress_user = seen;
    memra_model *m = memra_model_load(api_tiny_path, &mp);
    assert_non_null(m);
    assert_true(seen[0] == 0.0f && seen[1] == 1.0f);
    assert_string_equal(memra_model_arch(m), "llama");
    assert_int_equal(memra_model_n_layer(m), 4);
    assert_int_equal(memra_model_n_embd(m), 64);
    assert_int_equal(memra_model_n_head(m), 4);
    assert_int_equal(memra_model_n_head_kv(m), 2);
    assert_int_equal(memra_model_n_vocab(m), 300);
    assert_int_equal(memra_model_n_ctx_train(m), 256);
    assert_int_equal(memra_model_has_tokenizer(m), 1);
    memra_model_free(m);
}

static void test_null_model_getters_are_zero_and_text_calls_are_inval(void **state)
{
    memra_token t[4];
    int n = -1;
    char buf[16];
    assert_int_equal(memra_model_n_vocab(NULL), 0);
    assert_null(memra_model_arch(NULL));
    assert_int_equal(memra_tokenize(NULL, "a", 1, 0, 0, t, 4, &n), MEMRA_E_INVAL);
    assert_int_equal(memra_token_to_piece(NULL, 1, buf, 16, 0, &n), MEMRA_E_INVAL);
    assert_int_equal(memra_detokenize(NULL, t, 0, buf, 16, 0, &n), MEMRA_E_INVAL);
    assert_int_equal(memra_token_bos(NULL), -1);
    assert_string_equal(memra_model_last_error(NULL), "(null model)");
    memra_model_free(NULL);
}

static void test_tokenize_says_how_many_are_needed_when_cap_is_too_small(void **state)
{
    const char *text = "the quick brown fox jumps over the lazy dog";
    memra_token t[128];
    int n = 0, need = 0;
    assert_int_equal(memra_tokenize(api_tiny_model, text, (int)strlen(text), 0, 0, t, 128, &n), MEMRA_OK);
    assert_true(n > 2);
    assert_int_equal(memra_tokenize(api_tiny_model, text, (int)strlen(text), 0, 0, t, 2, &need), MEMRA_E_FULL);
    assert_int_equal(need, 3); /* cap > 0: tokenizing stops at the first id past cap */
    api_tiny_assert_error(memra_model_last_error(api_tiny_model), MEMRA_E_FULL, "cap 2");
    assert_int_equal(memra_tokenize(api_tiny_model, text, (int)strlen(text), 0, 0, NULL, 0, &need), MEMRA_E_FULL);
    assert_int_equal(need, n); /* cap 0: the exact count */
    assert_int_equal(memra_tokenize(api_tiny_model, text, (int)strlen(text), 0, 0, t, 1, &need), MEMRA_E_FULL);
    assert_int_equal(need, 2);
    assert_int_equal(memra_tokenize(api_tiny_model, "t", 1, 0, 0, t, 1, &need), MEMRA_OK);
    assert_int_equal(need, 1);
    assert_int_equal(memra_tokenize(api_tiny_model, "t", 1, 0, 0, NULL, 0, &need), MEMRA_E_FULL);
    assert_int_equal(need, 1);
    assert_int_equal(memra_tokenize(api_tiny_model, text, -1, 0, 0, t, 128, &n), MEMRA_E_INVAL);
    assert_int_equal(memra_tokenize(api_tiny_model, text, 3, 0, 0, NULL, 5, &n), MEMRA_E_INVAL);
    char buf[256];
    int len = 0;
    assert_int_equal(memra_tokenize(api_tiny_model, text, (int)strlen(text), 0, 0, t, 128, &n), MEMRA_OK);
    assert_int_equal(memra_detokenize(api_tiny_model, t, n, buf, sizeof buf, 0, &len), MEMRA_OK);
    assert_string_equal(buf, text);
    assert_int_equal(len, (int)strlen(text));
    assert_int_equal(memra_detokenize(api_tiny_model, t, n, buf, 4, 0, &len), MEMRA_E_FULL);
    assert_int_equal(len, (int)strlen(text));
}

static void test_token_to_piece_rejects_ids_outside_the_vocab(void **state)
{
    char buf[32];
    int n = 0;
    assert_int_equal(memra_token_to_piece(api_tiny_model, 300, buf, 32, 0, &n), MEMRA_E_INVAL);
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "token 300");
    assert_int_equal(memra_token_to_piece(api_tiny_model, -1, buf, 32, 0, &n), MEMRA_E_INVAL);
    assert_int_equal(memra_token_to_piece(api_tiny_model, 100, buf, 32, 0, &n), MEMRA_OK);
    assert_true(n >= 1);
    memra_token bad[2] = {5, 999};
    assert_int_equal(memra_detokenize(api_tiny_model, bad, 2, buf, 32, 0, &n), MEMRA_E_INVAL);
}

static void test_chat_apply_without_a_template_is_unsupported_and_a_named_one_renders(void **state)
{
    memra_chat_message msgs[2] = {{"system", "be brief"}, {"user", "hi"}};
    char buf[256];
    size_t n = 0;
    assert_int_equal(memra_chat_apply(api_tiny_model, NULL, msgs, 2, 1, buf, sizeof buf, &n), MEMRA_E_UNSUPPORTED);
    assert_int_equal(memra_chat_apply(api_tiny_model, "chatml", msgs, 2, 1, buf, sizeof buf, &n), MEMRA_OK);
    assert_string_equal(buf, "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                             "<|im_start|>assistant\n");
    assert_int_equal(n, strlen(buf));
    size_t need = 0;
    assert_int_equal(memra_chat_apply(NULL, "chatml", msgs, 2, 1, buf, 8, &need), MEMRA_E_FULL);
    assert_int_equal(need, n);
    assert_int_equal(memra_chat_apply(NULL, "no-such-format", msgs, 2, 1, buf, sizeof buf, &n), MEMRA_E_UNSUPPORTED);
    memra_chat_message bad = {"user", NULL};
    assert_int_equal(memra_chat_apply(NULL, "chatml", &bad, 1, 1, buf, sizeof buf, &n), MEMRA_E_INVAL);
    assert_int_equal(memra_chat_apply(NULL, NULL, msgs, 2, 1, buf, sizeof buf, &n), MEMRA_E_INVAL);
}

static void test_runtime_create_refuses_null_model_and_bad_params_naming_the_field(void **state)
{
    assert_null(memra_runtime_create(NULL, NULL));
    assert_int_equal(memra_last_status(), MEMRA_E_INVAL);
    struct { const char *field; memra_runtime_params p; } cases[9];
    for (int i = 0; i < 9; i++)
        cases[i].p = memra_runtime_default_params();
    cases[0].field = "n_seq", cases[0].p.n_seq = 0;
    cases[1].field = "slots", cases[1].p.slots = 17;
    cases[2].field = "backend", cases[2].p.backend = (memra_backend)7;
    cases[3].field = "max_rows", cases[3].p.max_rows = 0;
    cases[4].field = "cpu_devices", cases[4].p.cpu_devices = 65;
    cases[5].field = "overlap", cases[5].p.overlap = 2;
    cases[6].field = "kv_type", cases[6].p.kv_type = (memra_kv_type)9;
    cases[7].field = "act_type", cases[7].p.act_type = (memra_kv_type)-1;
    cases[8].field = "cpu_threads", cases[8].p.cpu_threads = 0;
    for (int i = 0; i < 9; i++) {
        assert_null(memra_runtime_create(api_tiny_model, &cases[i].p));
        assert_int_equal(memra_last_status(), MEMRA_E_INVAL);
        api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, cases[i].field);
        api_tiny_assert_error(memra_model_last_error(api_tiny_model), MEMRA_E_INVAL, cases[i].field);
    }
    memra_runtime_params p = memra_runtime_default_params(); /* more stages than the model's 4 layers */
    p.backend = MEMRA_BACKEND_CPU, p.apply_env = 0, p.stages = 5;
    assert_null(memra_runtime_create(api_tiny_model, &p));
    assert_int_equal(memra_last_status(), MEMRA_E_INVAL);
}

static void test_a_bad_door_is_refused_and_a_good_door_overrides_the_params(void **state)
{
    memra_runtime_params p = memra_runtime_default_params();
    p.backend = MEMRA_BACKEND_CPU, p.n_ctx = 16;
    setenv("MEMRA_PP_STAGES", "two", 1);
    assert_null(memra_runtime_create(api_tiny_model, &p));
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "MEMRA_PP_STAGES=two");
    setenv("MEMRA_PP_STAGES", "2", 1);
    memra_runtime *rt = memra_runtime_create(api_tiny_model, &p); /* params say 1 stage, the door says 2 */
    assert_non_null(rt);
    assert_int_equal(memra_runtime_n_stages(rt), 2);
    int a, b;
    assert_int_equal(memra_runtime_stage_layers(rt, 1, &a, &b), MEMRA_OK);
    assert_int_equal(a, 2);
    assert_int_equal(b, 4);
    assert_int_equal(memra_runtime_stage_layers(rt, 2, &a, &b), MEMRA_E_INVAL);
    assert_int_equal(memra_runtime_check(rt), MEMRA_OK); /* one process: no rank to lose */
    assert_int_equal(memra_runtime_check(NULL), MEMRA_E_INVAL);
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "NULL runtime");
    memra_runtime_free(rt);
    p.apply_env = 0; /* doors ignored */
    rt = memra_runtime_create(api_tiny_model, &p);
    assert_non_null(rt);
    assert_int_equal(memra_runtime_n_stages(rt), 1);
    memra_runtime_free(rt);
    unsetenv("MEMRA_PP_STAGES");
    setenv("MEMRA_BACKEND", "tpu", 1);
    p.apply_env = 1;
    assert_null(memra_runtime_create(api_tiny_model, &p));
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "MEMRA_BACKEND=tpu");
    setenv("MEMRA_BACKEND", "cpu", 1);
}

/* Primes 8 tokens in chunks of 4 on a new sequence of rt (2 stages) and tells how they ran: 1 = through the
 * stages (PRIME_SPLIT_CHUNKS advanced by 2), 0 = the unsplit body (MEMRA_PRIME_PP=0: unsplit_steps did). */
static int prime_ran_split(memra_runtime *rt)
{
    memra_counters c0, c1;
    assert_int_equal(memra_runtime_counters(rt, &c0), MEMRA_OK);
    memra_seq *s = memra_seq_open(rt);
    assert_non_null(s);
    memra_token t[8];
    api_tiny_prompt(t, 8, 3);
    memra_pending *p = NULL;
    assert_int_equal(memra_seq_prime(s, t, 8, 4, &p), MEMRA_OK);
    assert_int_equal(memra_pending_wait(p, NULL, NULL), MEMRA_OK);
    memra_pending_free(p);
    assert_int_equal(memra_seq_close(s), MEMRA_OK);
    assert_int_equal(memra_runtime_counters(rt, &c1), MEMRA_OK);
    const uint64_t split = c1.prime_split_chunks - c0.prime_split_chunks, whole = c1.unsplit_steps - c0.unsplit_steps;
    assert_true((split == 2 && whole == 0) || (split == 0 && whole == 2)); /* one or the other, never vacuous */
    return split == 2;
}

/* The configuration's precedence, both ways, on a per-step seam (MEMRA_PRIME_PP): the params' value (the seam's
 * default, on); with apply_env = 0 a set door changes nothing, not even by a reload (refused); with apply_env = 1
 * the door set at create wins; a setenv after create changes nothing until memra_runtime_reload_doors, which takes
 * the environment as it is then; and a reload that would change a structural door is refused, naming it, with
 * the seams as they were. */
static void test_the_params_then_the_doors_at_create_then_a_reload_decide_the_seams(void **state)
{
    (void)state;
    setenv("MEMRA_PRIME_PP", "0", 1);
    memra_runtime_params p = api_tiny_params(2); /* apply_env 0 */
    memra_runtime *rt = memra_runtime_create(api_tiny_model, &p);
    assert_non_null(rt);
    assert_true(prime_ran_split(rt)); /* the door is set, but this runtime ignores the environment */
    assert_int_equal(memra_runtime_reload_doors(rt), MEMRA_E_STATE);
    api_tiny_assert_error(memra_runtime_last_error(rt), MEMRA_E_STATE, "apply_env = 0");
    assert_true(prime_ran_split(rt));
    memra_runtime_free(rt);

    p.apply_env = 1; /* MEMRA_BACKEND=cpu in this suite's environment; the stages come from the params */
    rt = memra_runtime_create(api_tiny_model, &p);
    assert_non_null(rt);
    assert_int_equal(memra_runtime_n_stages(rt), 2);
    assert_false(prime_ran_split(rt)); /* the door, read at create, wins over the params */
    setenv("MEMRA_PRIME_PP", "1", 1);
    assert_false(prime_ran_split(rt)); /* a setenv after create: nothing until a reload */
    assert_int_equal(memra_runtime_reload_doors(rt), MEMRA_OK);
    assert_true(prime_ran_split(rt));
    setenv("MEMRA_PRIME_PP", "0", 1);
    setenv("MEMRA_PP_STAGES", "3", 1); /* structural: read once, at create */
    assert_int_equal(memra_runtime_reload_doors(rt), MEMRA_E_REFUSED);
    api_tiny_assert_error(memra_runtime_last_error(rt), MEMRA_E_REFUSED, "MEMRA_PP_STAGES");
    assert_true(prime_ran_split(rt)); /* refused whole: the seam did not move either */
    unsetenv("MEMRA_PP_STAGES");
    setenv("MEMRA_PRIME_PP", "2", 1);
    assert_int_equal(memra_runtime_reload_doors(rt), MEMRA_E_INVAL);
    api_tiny_assert_error(memra_runtime_last_error(rt), MEMRA_E_INVAL, "MEMRA_PRIME_PP=2");
    unsetenv("MEMRA_PRIME_PP");
    assert_int_equal(memra_runtime_reload_doors(rt), MEMRA_OK); /* unset: back to the params' value */
    assert_true(prime_ran_split(rt));
    memra_runtime_free(rt);
    assert_int_equal(memra_runtime_reload_doors(NULL), MEMRA_E_INVAL);
}

/* Logits of 6 prompt tokens decoded one by one, the last 3 kept, on a CPU runtime with this KV type and
 * activation type. */
static void decode_logits_x8(memra_kv_type kv, memra_kv_type act, int apply_env, int cpu_x8, float out[3][300])
{
    memra_runtime_params p = memra_runtime_default_params();
    p.backend = MEMRA_BACKEND_CPU, p.n_ctx = 16, p.kv_type = kv, p.act_type = act, p.apply_env = apply_env;
    p.cpu_x8 = cpu_x8;
    memra_runtime *rt = memra_runtime_create(api_tiny_model, &p);
    assert_non_null(rt);
    memra_seq *sq = memra_seq_open(rt);
    assert_non_null(sq);
    for (int i = 0; i < 6; i++) {
        memra_pending *pd = NULL;
        const float *l = NULL;
        assert_int_equal(memra_seq_decode(sq, (memra_token)(17 * i + 3), &pd), MEMRA_OK);
        assert_int_equal(memra_pending_wait(pd, &l, NULL), MEMRA_OK);
        if (i >= 3)
            memcpy(out[i - 3], l, sizeof out[0]);
        memra_pending_free(pd);
    }
    memra_seq_close(sq);
    memra_runtime_free(rt);
}

/* The cache and input rounding tests below measure against the exact matmul (f32 x): int8 x would add its own
 * rounding to theirs. */
static void decode_logits_as(memra_kv_type kv, memra_kv_type act, int apply_env, float out[3][300])
{
    decode_logits_x8(kv, act, apply_env, 0, out);
}

static void decode_logits(memra_kv_type kv, int apply_env, float out[3][300])
{
    decode_logits_as(kv, MEMRA_KV_DEFAULT, apply_env, out);
}

/* cpu_x8 = 1 (the default) quantizes the matmul inputs to int8 (logits move, a little) and gives the same bits on
 * every run; 0 is the exact mode; MEMRA_CPU_X8 wins over the field only with apply_env; a bad value is refused. */
static void test_cpu_x8_rounds_x_deterministically_and_the_door_wins(void **state)
{
    (void)state;
    static float exact[3][300], fast[3][300], again[3][300];
    unsetenv("MEMRA_CPU_X8");
    assert_int_equal(memra_runtime_default_params().cpu_x8, 1);
    decode_logits_x8(MEMRA_KV_DEFAULT, MEMRA_KV_DEFAULT, 1, 0, exact);
    decode_logits_x8(MEMRA_KV_DEFAULT, MEMRA_KV_DEFAULT, 1, 1, fast);
    decode_logits_x8(MEMRA_KV_DEFAULT, MEMRA_KV_DEFAULT, 1, 1, again);
    assert_memory_equal(fast, again, sizeof fast);
    float d = 0.0f, mx = 0.0f;
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 300; i++)
            d = fmaxf(d, fabsf(fast[r][i] - exact[r][i])), mx = fmaxf(mx, fabsf(exact[r][i]));
    if (!(d > 0.0f && d <= 1e-1f * mx))
        fail_msg("cpu_x8: max |logit - exact's| %g (max |logit| %g)", d, mx);
    setenv("MEMRA_CPU_X8", "0", 1);
    decode_logits_x8(MEMRA_KV_DEFAULT, MEMRA_KV_DEFAULT, 1, 1, again); /* the door wins */
    assert_memory_equal(again, exact, sizeof exact);
    decode_logits_x8(MEMRA_KV_DEFAULT, MEMRA_KV_DEFAULT, 0, 1, again); /* apply_env 0: the field */
    assert_memory_equal(again, fast, sizeof fast);
    setenv("MEMRA_CPU_X8", "2", 1);
    memra_runtime_params p = memra_runtime_default_params();
    p.backend = MEMRA_BACKEND_CPU, p.n_ctx = 16;
    assert_null(memra_runtime_create(api_tiny_model, &p));
    assert_non_null(strstr(memra_model_last_error(api_tiny_model), "MEMRA_CPU_X8=\"2\""));
    unsetenv("MEMRA_CPU_X8");
    p.cpu_x8 = 2;
    assert_null(memra_runtime_create(api_tiny_model, &p));
    assert_non_null(strstr(memra_model_last_error(api_tiny_model), "cpu_x8 = 2"));
}

/* act_type F16 / BF16 round the matmul inputs (logits move, a little); DEFAULT follows MEMRA_ACT_TYPE only when
 * apply_env, and a set field wins over the door. */
static void test_act_type_rounds_the_matmul_inputs_and_default_follows_the_door(void **state)
{
    (void)state;
    static float f32[3][300], got[3][300], door[3][300];
    unsetenv("MEMRA_ACT_TYPE"); /* both doors: a failed test before this one may have left either set */
    unsetenv("MEMRA_KV_TYPE");
    decode_logits_as(MEMRA_KV_DEFAULT, MEMRA_KV_DEFAULT, 1, f32);
    const memra_kv_type types[2] = {MEMRA_KV_F16, MEMRA_KV_BF16};
    for (int t = 0; t < 2; t++) {
        decode_logits_as(MEMRA_KV_DEFAULT, types[t], 1, got);
        float d = 0.0f, mx = 0.0f;
        for (int r = 0; r < 3; r++)
            for (int i = 0; i < 300; i++)
                d = fmaxf(d, fabsf(got[r][i] - f32[r][i])), mx = fmaxf(mx, fabsf(f32[r][i]));
        if (!(d > 0.0f && d <= 5e-2f * mx))
            fail_msg("act_type %d: max |logit - f32 inputs'| %g (max |logit| %g)", (int)types[t], d, mx);
    }
    setenv("MEMRA_ACT_TYPE", "bf16", 1);
    decode_logits_as(MEMRA_KV_DEFAULT, MEMRA_KV_DEFAULT, 1, door); /* the door: bf16's logits */
    assert_memory_equal(door, got, sizeof got);
    decode_logits_as(MEMRA_KV_DEFAULT, MEMRA_KV_DEFAULT, 0, door); /* apply_env 0: f32 */
    assert_memory_equal(door, f32, sizeof f32);
    decode_logits_as(MEMRA_KV_DEFAULT, MEMRA_KV_F32, 1, door); /* a set field wins */
    assert_memory_equal(door, f32, sizeof f32);
    unsetenv("MEMRA_ACT_TYPE");
}

/* kv_type F16 / BF16 round the cache (logits move, a little); DEFAULT follows MEMRA_KV_TYPE only when
 * apply_env; F32 is the default. */
static void test_kv_type_rounds_the_cache_and_default_follows_the_door(void **state)
{
    assert_int_equal(memra_model_n_vocab(api_tiny_model), 300);
    static float f32[3][300], got[3][300], bf16[3][300];
    unsetenv("MEMRA_KV_TYPE"); /* both doors: a failed test before this one may have left either set */
    unsetenv("MEMRA_ACT_TYPE");
    decode_logits(MEMRA_KV_DEFAULT, 1, f32);
    const memra_kv_type types[2] = {MEMRA_KV_F16, MEMRA_KV_BF16};
    for (int t = 0; t < 2; t++) {
        decode_logits(types[t], 1, got);
        float d = 0.0f, mx = 0.0f;
        for (int r = 0; r < 3; r++)
            for (int i = 0; i < 300; i++)
                d = fmaxf(d, fabsf(got[r][i] - f32[r][i])), mx = fmaxf(mx, fabsf(f32[r][i]));
        if (!(d > 0.0f && d <= 2e-2f * mx))
            fail_msg("kv_type %d: max |logit - f32 cache's| %g (max |logit| %g)", (int)types[t], d, mx);
    }
    memcpy(bf16, got, sizeof got); /* the last type's: BF16 */
    setenv("MEMRA_KV_TYPE", "bf16", 1);
    decode_logits(MEMRA_KV_DEFAULT, 0, got); /* doors ignored: f32 */
    assert_memory_equal(got, f32, sizeof got);
    decode_logits(MEMRA_KV_DEFAULT, 1, got); /* the door: bf16's logits */
    assert_memory_equal(got, bf16, sizeof got);
    decode_logits(MEMRA_KV_F32, 1, got); /* a field that says F32 wins over the door */
    assert_memory_equal(got, f32, sizeof got);
    unsetenv("MEMRA_KV_TYPE");
}

static void test_opening_more_sequences_than_slots_is_full(void **state)
{
    memra_runtime *rt = rt_small(2, 8);
    memra_seq *a = memra_seq_open(rt), *b = memra_seq_open(rt);
    assert_non_null(a);
    assert_non_null(b);
    assert_null(memra_seq_open(rt));
    assert_int_equal(memra_last_status(), MEMRA_E_FULL);
    api_tiny_assert_error(memra_runtime_last_error(rt), MEMRA_E_FULL, "n_seq");
    assert_int_equal(memra_seq_close(a), MEMRA_OK);
    memra_seq *c = memra_seq_open(rt); /* the slot came back */
    assert_non_null(c);
    assert_null(memra_seq_open(NULL));
    assert_int_equal(memra_last_status(), MEMRA_E_INVAL);
    memra_runtime_free(rt); /* frees b and c too */
}

static void test_a_closed_handle_stays_detectable_for_4096_more_closes_and_memory_stays_bounded(void **state)
{
    memra_runtime *rt = rt_small(1, 2);
    memra_seq *first = memra_seq_open(rt);
    assert_int_equal(memra_seq_close(first), MEMRA_OK);
    for (int i = 0; i < 4096; i++) { /* fresh handles: the first is still retired, still caught */
        memra_seq *s = memra_seq_open(rt);
        assert_non_null(s);
        assert_ptr_not_equal(s, first);
        assert_int_equal(memra_seq_close(s), MEMRA_OK);
    }
    assert_int_equal(memra_seq_decode(first, 1, &(memra_pending *){NULL}), MEMRA_E_STATE);
    memra_seq *s = memra_seq_open(rt); /* 4097 retired: the oldest (first) is recycled now */
    assert_ptr_equal(s, first);
    assert_int_equal(memra_seq_pos(s), 0);
    memra_runtime_free(rt);
}

static void test_a_closed_sequence_is_state_and_a_null_one_is_inval(void **state)
{
    memra_runtime *rt = rt_small(2, 8);
    memra_seq *s = memra_seq_open(rt);
    memra_token t[3] = {1, 2, 3};
    memra_pending *p = (memra_pending *)&p;
    assert_int_equal(memra_seq_close(s), MEMRA_OK);
    assert_int_equal(memra_seq_close(s), MEMRA_E_STATE);
    assert_int_equal(memra_seq_decode(s, 1, &p), MEMRA_E_STATE);
    assert_null(p);
    assert_int_equal(memra_seq_prime(s, t, 3, 0, NULL), MEMRA_E_STATE);
    assert_int_equal(memra_seq_pos(s), MEMRA_E_STATE);
    assert_int_equal(memra_seq_rewind(s, 0), MEMRA_E_STATE);
    api_tiny_assert_error(memra_runtime_last_error(rt), MEMRA_E_STATE, "closed");
    assert_int_equal(memra_seq_close(NULL), MEMRA_E_INVAL);
    assert_int_equal(memra_seq_decode(NULL, 1, &p), MEMRA_E_INVAL);
    assert_int_equal(memra_seq_prime(NULL, t, 3, 0, NULL), MEMRA_E_INVAL);
    assert_int_equal(memra_seq_pos(NULL), MEMRA_E_INVAL);
    memra_runtime_free(rt);
}

static void test_wrong_sizes_and_tokens_are_refused_and_leave_the_sequence_unchanged(void **state)
{
    memra_runtime *rt = rt_small(2, 4);
    memra_seq *s = memra_seq_open(rt);
    memra_token t[40];
    for (int i = 0; i < 40; i++)
        t[i] = 10 + i;
    memra_pending *p = NULL;
    assert_int_equal(memra_seq_prime(s, t, 0, 0, NULL), MEMRA_E_INVAL);
    assert_int_equal(memra_seq_prime(s, NULL, 3, 0, NULL), MEMRA_E_INVAL);
    assert_int_equal(memra_seq_prime(s, t, 3, 5, NULL), MEMRA_E_INVAL); /* chunk > max_rows 4 */
    api_tiny_assert_error(memra_runtime_last_error(rt), MEMRA_E_INVAL, "chunk");
    assert_int_equal(memra_seq_prime(s, t, 33, 0, NULL), MEMRA_E_FULL); /* n_ctx 32 */
    memra_token bad[2] = {5, 300};
    assert_int_equal(memra_seq_prime(s, bad, 2, 0, NULL), MEMRA_E_INVAL);
    assert_int_equal(memra_seq_decode(s, 300, &p), MEMRA_E_INVAL);
    assert_int_equal(memra_seq_decode(s, -1, &p), MEMRA_E_INVAL);
    assert_int_equal(memra_seq_decode(s, 1, NULL), MEMRA_E_INVAL);
    assert_int_equal(memra_seq_pos(s), 0);
    assert_int_equal(memra_seq_prime(s, t, 32, 0, NULL), MEMRA_OK); /* fills n_ctx exactly */
    assert_int_equal(memra_seq_pos(s), 32);
    assert_int_equal(memra_seq_decode(s, 1, &p), MEMRA_E_FULL);
    assert_int_equal(memra_seq_rewind(s, 33), MEMRA_E_INVAL);
    assert_int_equal(memra_seq_rewind(s, 31), MEMRA_OK);
    assert_int_equal(memra_seq_decode(s, 1, &p), MEMRA_OK);
    assert_int_equal(memra_pending_wait(p, NULL, NULL), MEMRA_OK);
    memra_pending_free(p);
    memra_runtime_free(rt);
}

static void test_decode_batch_refuses_repeated_foreign_closed_and_oversized_lists(void **state)
{
    memra_runtime *rt = rt_small(3, 2), *other = rt_small(1, 2);
    memra_seq *a = memra_seq_open(rt), *b = memra_seq_open(rt), *c = memra_seq_open(rt);
    memra_seq *x = memra_seq_open(other);
    memra_token t[3] = {1, 2, 3};
    memra_pending *p = NULL;
    memra_seq *rep[2] = {a, a}, *foreign[2] = {a, x}, *three[3] = {a, b, c}, *withnull[2] = {a, NULL};
    assert_int_equal(memra_decode_batch(rt, rep, t, 2, &p), MEMRA_E_INVAL);
    api_tiny_assert_error(memra_runtime_last_error(rt), MEMRA_E_INVAL, "repeats");
    assert_int_equal(memra_decode_batch(rt, foreign, t, 2, &p), MEMRA_E_INVAL);
    api_tiny_assert_error(memra_runtime_last_error(rt), MEMRA_E_INVAL, "another runtime");
    assert_int_equal(memra_decode_batch(rt, three, t, 3, &p), MEMRA_E_INVAL); /* max_rows 2 */
    assert_int_equal(memra_decode_batch(rt, withnull, t, 2, &p), MEMRA_E_INVAL);
    assert_int_equal(memra_decode_batch(NULL, three, t, 2, &p), MEMRA_E_INVAL);
    memra_seq_close(b);
    memra_seq *closed[2] = {a, b};
    assert_int_equal(memra_decode_batch(rt, closed, t, 2, &p), MEMRA_E_STATE);
    assert_null(p);
    assert_int_equal(memra_seq_pos(a), 0);
    memra_runtime_free(other);
    memra_runtime_free(rt);
}

static void test_null_pendings_and_samplers_are_inval(void **state)
{
    assert_int_equal(memra_pending_wait(NULL, NULL, NULL), MEMRA_E_INVAL);
    assert_int_equal(memra_pending_poll(NULL), MEMRA_E_INVAL);
    memra_pending_free(NULL);
    assert_int_equal(memra_sampler_sample(NULL, NULL), MEMRA_E_INVAL);
    memra_sampler_params sp = memra_sampler_default_params();
    sp.repeat_penalty = 0.0f;
    assert_null(memra_sampler_create(&sp, 300));
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "repeat_penalty");
    sp = memra_sampler_default_params();
    assert_null(memra_sampler_create(&sp, 0));
    assert_int_equal(memra_last_status(), MEMRA_E_INVAL);
    assert_int_equal(memra_argmax(NULL, 3), -1);
}

static void test_generate_refuses_a_bad_request_before_running_anything(void **state)
{
    memra_runtime *rt = rt_small(2, 8);
    memra_token prompt[2] = {1, 2};
    memra_request r[2] = {{.prompt = prompt, .n_prompt = 2, .n_predict = 3},
                          {.prompt = prompt, .n_prompt = 0, .n_predict = 3}};
    r[0].sampling = r[1].sampling = memra_sampler_greedy_params();
    assert_int_equal(memra_generate(rt, r, 2, 0, NULL, NULL), MEMRA_E_INVAL);
    assert_int_equal(r[1].status, MEMRA_E_INVAL);
    api_tiny_assert_error(memra_runtime_last_error(rt), MEMRA_E_INVAL, "request 1");
    r[1].n_prompt = 2;
    r[1].sampling.min_keep = 0;
    assert_int_equal(memra_generate(rt, r, 2, 0, NULL, NULL), MEMRA_E_INVAL);
    api_tiny_assert_error(memra_runtime_last_error(rt), MEMRA_E_INVAL, "min_keep");
    memra_counters c;
    assert_int_equal(memra_runtime_counters(rt, &c), MEMRA_OK);
    assert_int_equal(c.steps_done, 0);
    assert_int_equal(memra_generate(rt, r, 0, 0, NULL, NULL), MEMRA_E_INVAL);
    assert_int_equal(memra_generate(rt, r, 1, 9, NULL, NULL), MEMRA_E_INVAL); /* chunk > max_rows */
    assert_int_equal(memra_runtime_counters(rt, NULL), MEMRA_E_INVAL);
    memra_runtime_free(rt);
}

static void test_errors_are_kept_per_handle_and_per_thread(void **state)
{
    memra_runtime *a = rt_small(1, 4), *b = rt_small(1, 4);
    memra_seq *s = memra_seq_open(a);
    memra_pending *p;
    assert_int_equal(memra_seq_decode(s, 12345, &p), MEMRA_E_INVAL);
    api_tiny_assert_error(memra_runtime_last_error(a), MEMRA_E_INVAL, "12345");
    assert_string_equal(memra_runtime_last_error(b), "");
    assert_null(memra_seq_open(a));
    api_tiny_assert_error(memra_runtime_last_error(a), MEMRA_E_FULL, "slots");
    assert_int_equal(memra_last_status(), MEMRA_E_FULL);
    assert_string_equal(memra_runtime_last_error(NULL), "(null runtime)");
    memra_runtime_free(a);
    memra_runtime_free(b);
    memra_runtime_free(NULL);
}

int main(void)
{
    setenv("MEMRA_BACKEND", "cpu", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_macros_match_the_linked_library),
        cmocka_unit_test(test_status_str_names_every_code_and_unknown_ones),
        cmocka_unit_test(test_model_load_of_null_path_is_inval_and_of_a_missing_file_is_io),
        cmocka_unit_test(test_model_load_reports_progress_and_reads_the_hparams),
        cmocka_unit_test(test_null_model_getters_are_zero_and_text_calls_are_inval),
        cmocka_unit_test(test_tokenize_says_how_many_are_needed_when_cap_is_too_small),
        cmocka_unit_test(test_token_to_piece_rejects_ids_outside_the_vocab),
        cmocka_unit_test(test_chat_apply_without_a_template_is_unsupported_and_a_named_one_renders),
        cmocka_unit_test(test_runtime_create_refuses_null_model_and_bad_params_naming_the_field),
        cmocka_unit_test(test_a_bad_door_is_refused_and_a_good_door_overrides_the_params),
        cmocka_unit_test(test_kv_type_rounds_the_cache_and_default_follows_the_door),
        cmocka_unit_test(test_act_type_rounds_the_matmul_inputs_and_default_follows_the_door),
        cmocka_unit_test(test_cpu_x8_rounds_x_deterministically_and_the_door_wins),
        cmocka_unit_test(test_opening_more_sequences_than_slots_is_full),
        cmocka_unit_test(test_a_closed_sequence_is_state_and_a_null_one_is_inval),
        cmocka_unit_test(test_a_closed_handle_stays_detectable_for_4096_more_closes_and_memory_stays_bounded),
        cmocka_unit_test(test_wrong_sizes_and_tokens_are_refused_and_leave_the_sequence_unchanged),
        cmocka_unit_test(test_decode_batch_refuses_repeated_foreign_closed_and_oversized_lists),
        cmocka_unit_test(test_null_pendings_and_samplers_are_inval),
        cmocka_unit_test(test_generate_refuses_a_bad_request_before_running_anything),
        cmocka_unit_test(test_errors_are_kept_per_handle_and_per_thread),
        cmocka_unit_test(test_the_params_then_the_doors_at_create_then_a_reload_decide_the_seams),
    };
    return cmocka_run_group_tests(tests, api_tiny_setup, api_tiny_teardown);
}
