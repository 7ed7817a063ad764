/* memra_seq_verify: n tokens verified in one step give, row by row, the bits of decoding them one at a
 * time; rewinding past rejected drafts continues exactly like a sequence that never saw them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "memra/memra.h"
#include "support/api_tiny.h"
#include "support/gguf_tiny.h"

static int g_nv;

static int setup(void **state)
{
    const int r = api_tiny_setup(state);
    g_nv = r == 0 ? memra_model_n_vocab(api_tiny_model) : 0;
    return r;
}

static memra_runtime *make_rt(int stages)
{
    memra_runtime_params p = api_tiny_params(stages);
    p.n_seq = 2;
    p.max_rows = 16;
    memra_runtime *rt = memra_runtime_create(api_tiny_model, &p);
    assert_non_null(rt);
    return rt;
}

/* logits rows of `toks` fed one decode step at a time after a 6-token prompt */
static void decode_each(memra_seq *seq, const memra_token *prompt, const memra_token *toks, int n, float *rows)
{
    memra_pending *p;
    assert_int_equal(memra_seq_prime(seq, prompt, 6, 0, NULL), MEMRA_OK);
    for (int i = 0; i < n; i++) {
        const float *l;
        assert_int_equal(memra_seq_decode(seq, toks[i], &p), MEMRA_OK);
        assert_int_equal(memra_pending_wait(p, &l, NULL), MEMRA_OK);
        memcpy(rows + (size_t)i * (size_t)g_nv, l, sizeof(float) * (size_t)g_nv);
        memra_pending_free(p);
    }
}

static void test_verify_rows_equal_single_decode_steps_at_two_stages(void **state)
{
    (void)state;
    memra_runtime *rt = make_rt(2);
    memra_token prompt[6] = {3, 17, 42, 9, 100, 7}, toks[5] = {11, 12, 250, 4, 99};
    static float want[5 * 512], got[5 * 512];
    assert_true(g_nv <= 512);
    memra_seq *a = memra_seq_open(rt), *b = memra_seq_open(rt);
    decode_each(a, prompt, toks, 5, want);
    memra_pending *p;
    const float *l;
    int rows = 0;
    assert_int_equal(memra_seq_prime(b, prompt, 6, 0, NULL), MEMRA_OK);
    assert_int_equal(memra_seq_verify(b, toks, 5, &p), MEMRA_OK);
    assert_int_equal(memra_pending_wait(p, &l, &rows), MEMRA_OK);
    assert_int_equal(rows, 5);
    memcpy(got, l, sizeof(float) * 5 * (size_t)g_nv);
    memra_pending_free(p);
    assert_memory_equal(got, want, sizeof(float) * 5 * (size_t)g_nv);
    assert_int_equal(memra_seq_pos(b), 11);

    /* reject the last 3 drafts: rewind, then decode a different token; must match a clean sequence */
    assert_int_equal(memra_seq_rewind(b, 8), MEMRA_OK);
    assert_int_equal(memra_seq_decode(b, 77, &p), MEMRA_OK);
    assert_int_equal(memra_pending_wait(p, &l, NULL), MEMRA_OK);
    memcpy(got, l, sizeof(float) * (size_t)g_nv);
    memra_pending_free(p);
    assert_int_equal(memra_seq_rewind(a, 8), MEMRA_OK);
    assert_int_equal(memra_seq_decode(a, 77, &p), MEMRA_OK);
    assert_int_equal(memra_pending_wait(p, &l, NULL), MEMRA_OK);
    assert_memory_equal(got, l, sizeof(float) * (size_t)g_nv);
    memra_pending_free(p);
    memra_seq_close(a);
    memra_seq_close(b);
    memra_runtime_free(rt);
}

static void test_verify_refuses_bad_arguments_without_moving_the_sequence(void **state)
{
    (void)state;
    memra_runtime *rt = make_rt(1);
    memra_seq *s = memra_seq_open(rt);
    memra_token toks[20] = {0};
    memra_pending *p = (memra_pending *)1;
    assert_int_equal(memra_seq_verify(s, toks, 0, &p), MEMRA_E_INVAL);
    assert_null(p);
    assert_int_equal(memra_seq_verify(s, toks, 17, &p), MEMRA_E_INVAL); /* > max_rows */
    toks[1] = g_nv;
    assert_int_equal(memra_seq_verify(s, toks, 2, &p), MEMRA_E_INVAL);
    assert_non_null(strstr(memra_runtime_last_error(rt), "memra_seq_verify"));
    assert_int_equal(memra_seq_pos(s), 0);
    assert_int_equal(memra_seq_verify(NULL, toks, 1, &p), MEMRA_E_INVAL);
    memra_seq_close(s);
    memra_runtime_free(rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verify_rows_equal_single_decode_steps_at_two_stages),
        cmocka_unit_test(test_verify_refuses_bad_arguments_without_moving_the_sequence),
    };
    return cmocka_run_group_tests(tests, setup, api_tiny_teardown);
}
