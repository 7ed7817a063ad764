/* Hostile inputs at the API's edges: a model whose head is all NaN (every step's logits NaN) ends each
 * request with the reason on the runtime's error and the thread's, not a bare status. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kernels/krn.h"
#include "memra/memra.h"
#include "model/gguf.h"
#include "support/api_tiny.h"
#include "support/gguf_tiny.h"

/* Overwrite every element of the f32 tensor `name` of the model at path with NaN. */
static void poison_tensor(const char *path, const char *name)
{
    dev_err err = {0};
    mdl_gguf *g = mdl_gguf_open(path, &err);
    assert_non_null(g);
    const mdl_gguf_tensor *te = mdl_gguf_tensor_find(g, name);
    assert_non_null(te);
    assert_int_equal(te->type, KRN_F32);
    size_t n = 1;
    for (int d = 0; d < te->n_dims; d++)
        n *= (size_t)te->ne[d];
    const long off = (long)(mdl_gguf_data_offset(g) + te->offset);
    mdl_gguf_close(g);
    float *nan = malloc(n * sizeof *nan);
    assert_non_null(nan);
    for (size_t i = 0; i < n; i++)
        nan[i] = NAN;
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    assert_int_equal(fwrite(nan, sizeof *nan, n, f), n);
    assert_int_equal(fclose(f), 0);
    free(nan);
}

static void test_a_step_whose_logits_are_all_nan_ends_the_request_with_the_reason_on_the_runtime(void **state)
{
    (void)state;
    char path[256];
    gguf_tiny_params gp;
    gguf_tiny_defaults(&gp);
    gp.type = KRN_F32; /* output.weight in f32, so it can be written as NaN */
    dev_err err = {0};
    assert_int_equal(gguf_tiny_write_temp(path, sizeof path, &gp, &err), 0);
    poison_tensor(path, "output.weight");
    memra_model *m = memra_model_load(path, NULL);
    assert_non_null(m);
    memra_runtime_params p = api_tiny_params(1);
    p.n_seq = 2;
    memra_runtime *rt = memra_runtime_create(m, &p);
    assert_non_null(rt);

    memra_token prompt[4];
    api_tiny_prompt(prompt, 4, 3);
    memra_token out[2][4];
    memra_request r[2];
    for (int i = 0; i < 2; i++)
        r[i] = (memra_request){.prompt = prompt, .n_prompt = 4, .n_predict = 4,
                               .sampling = memra_sampler_default_params(), .out = out[i], .out_cap = 4};
    r[1].sampling = memra_sampler_greedy_params();
    assert_int_equal(memra_generate(rt, r, 2, 0, NULL, NULL), MEMRA_OK);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r[i].status, MEMRA_E_INVAL);
        assert_int_equal(r[i].n_out, 0);
    }
    const char *why = memra_runtime_last_error(rt);
    if (!strstr(why, "no logit is above -inf") || !strstr(why, "NaN"))
        fail_msg("the runtime's error does not say why: '%s'", why);
    api_tiny_assert_error(why, MEMRA_E_INVAL, "step row ");
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "-inf or NaN");

    /* by hand: the wait succeeds (the caller decides), and the runtime says why no token can be picked */
    memra_runtime_free(rt);
    assert_non_null(rt = memra_runtime_create(m, &p));
    assert_int_equal(memra_runtime_last_error(rt)[0], '\0');
    memra_seq *s = memra_seq_open(rt);
    memra_pending *pd;
    const float *l;
    assert_int_equal(memra_seq_prime(s, prompt, 4, 0, &pd), MEMRA_OK);
    assert_int_equal(memra_pending_wait(pd, &l, NULL), MEMRA_OK);
    assert_true(isnan(l[0]));
    api_tiny_assert_error(memra_runtime_last_error(rt), MEMRA_E_INVAL, "no logit is above -inf");
    memra_pending_free(pd);
    memra_seq_close(s);
    memra_runtime_free(rt);
    memra_model_free(m);
    unlink(path);
}

int main(void)
{
    setenv("MEMRA_BACKEND", "cpu", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_step_whose_logits_are_all_nan_ends_the_request_with_the_reason_on_the_runtime),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
