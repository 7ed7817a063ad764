/* Sampler: greedy/argmax, filters (top-k, top-p, min-p), penalties with their window, seeded
 * determinism, and draw frequencies against the softmax (chi-square, bounded). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "model/sampler.h"

static void fill_logits(float *x, int n, uint32_t seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) % 20000) / 1000.0f - 10.0f;
    }
}

static mdl_sampler *make(mdl_sampler_params p, int n)
{
    dev_err err = {0};
    mdl_sampler *s = mdl_sampler_create(&p, n, &err);
    if (!s)
        fprintf(stderr, "%s\n", err.msg);
    assert_non_null(s);
    return s;
}

static mdl_sampler_params plain(float temp)
{
    mdl_sampler_params p = mdl_sampler_default_params();
    p.temperature = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

static void test_greedy_returns_the_argmax(void **state)
{
    enum { N = 49152 };
    static float x[N];
    mdl_sampler *s = make(plain(0.0f), N);
    for (uint32_t k = 0; k < 20; k++) {
        fill_logits(x, N, k + 1);
        int32_t a = mdl_argmax(x, N);
        assert_true(a >= 0);
        for (int i = 0; i < N; i++)
            assert_true(x[i] <= x[a]);
        assert_int_equal(mdl_sampler_sample(s, x), a);
    }
    mdl_sampler_destroy(s);
}

static void test_top_k_of_one_equals_greedy_at_any_temperature(void **state)
{
    enum { N = 4096 };
    static float x[N];
    mdl_sampler_params p = plain(1.5f);
    p.top_k = 1;
    for (uint64_t seed = 1; seed <= 10; seed++) {
        p.seed = seed;
        mdl_sampler *s = make(p, N);
        fill_logits(x, N, (uint32_t)seed * 77u);
        for (int d = 0; d < 20; d++)
            assert_int_equal(mdl_sampler_sample(s, x), mdl_argmax(x, N));
        mdl_sampler_destroy(s);
    }
}

static void draw_seq(uint64_t seed, int32_t *out, int n)
{
    enum { N = 1000 };
    static float x[N];
    mdl_sampler_params p = mdl_sampler_default_params();
    p.seed = seed;
    p.top_k = 0;
    p.min_p = 0.0f;
    p.temperature = 1.0f;
    mdl_sampler *s = make(p, N);
    for (int i = 0; i < n; i++) {
        fill_logits(x, N, 1234u + (uint32_t)i);
        for (int k = 0; k < N; k++)
            x[k] *= 0.2f; /* flat enough that many tokens are live */
        out[i] = mdl_sampler_sample(s, x);
        assert_true(out[i] >= 0 && out[i] < N);
        mdl_sampler_accept(s, out[i]);
    }
    mdl_sampler_destroy(s);
}

static void test_same_seed_gives_the_same_tokens(void **state)
{
    int32_t a[200], b[200];
    draw_seq(42, a, 200);
    draw_seq(42, b, 200);
    assert_memory_equal(a, b, sizeof a);
}

static void test_different_seeds_give_different_tokens(void **state)
{
    int32_t a[200], b[200];
    draw_seq(42, a, 200);
    draw_seq(43, b, 200);
    int diff = 0;
    for (int i = 0; i < 200; i++)
        diff += a[i] != b[i];
    assert_true(diff > 100);
}

static void test_reset_restarts_the_same_sequence(void **state)
{
    float x[16];
    fill_logits(x, 16, 5);
    mdl_sampler_params p = plain(1.0f);
    mdl_sampler *s = make(p, 16);
    int32_t a[50], b[50];
    for (int i = 0; i < 50; i++)
        a[i] = mdl_sampler_sample(s, x);
    mdl_sampler_reset(s);
    for (int i = 0; i < 50; i++)
        b[i] = mdl_sampler_sample(s, x);
    assert_memory_equal(a, b, sizeof a);
    mdl_sampler_destroy(s);
}

/* Chi-square of draw counts against expected probabilities; draws fixed, seed fixed: bounded time. */
static double chi_square(mdl_sampler *s, const float *x, const double *prob, int n, int draws)
{
    int cnt[16] = {0};
    for (int d = 0; d < draws; d++) {
        int32_t t = mdl_sampler_sample(s, x);
        assert_true(t >= 0 && t < n);
        cnt[t]++;
    }
    double chi = 0.0;
    for (int i = 0; i < n; i++) {
        double e = prob[i] * draws;
        if (e == 0.0)
            assert_int_equal(cnt[i], 0);
        else
            chi += (cnt[i] - e) * (cnt[i] - e) / e;
    }
    return chi;
}

static void softmax(const float *x, int n, float temp, double *p)
{
    double m = -INFINITY, sum = 0.0;
    for (int i = 0; i < n; i++)
        m = fmax(m, x[i]);
    for (int i = 0; i < n; i++)
        sum += p[i] = exp((x[i] - m) / temp);
    for (int i = 0; i < n; i++)
        p[i] /= sum;
}

static void test_draws_follow_the_softmax_at_each_temperature(void **state)
{
    const float x[8] = {0.0f, 1.0f, 2.0f, 0.5f, -1.0f, 1.5f, -0.5f, 0.25f};
    const float temps[3] = {1.0f, 0.5f, 2.0f};
    for (int k = 0; k < 3; k++) {
        double p[8];
        softmax(x, 8, temps[k], p);
        mdl_sampler_params sp = plain(temps[k]);
        sp.seed = 7 + (uint64_t)k;
        mdl_sampler *s = make(sp, 8);
        double chi = chi_square(s, x, p, 8, 40000);
        /* df = 7: P(chi2 > 35) ~ 1e-5; a wrong temperature gives thousands */
        fprintf(stderr, "temperature %.1f: chi2 = %.2f\n", temps[k], chi);
        assert_true(chi < 35.0);
        mdl_sampler_destroy(s);
    }
    /* the statistic can fail: draws at T=1 against the T=2 distribution */
    double p2[8];
    softmax(x, 8, 2.0f, p2);
    mdl_sampler *s = make(plain(1.0f), 8);
    assert_true(chi_square(s, x, p2, 8, 40000) > 100.0);
    mdl_sampler_destroy(s);
}

static void test_top_k_top_p_min_p_restrict_and_renormalize(void **state)
{
    /* probabilities 0.5, 0.3, 0.15, 0.05 */
    const float x[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    {   /* top-k 3: token 3 never, the rest in proportion 0.5:0.3:0.15 */
        mdl_sampler_params p = plain(1.0f);
        p.top_k = 3;
        mdl_sampler *s = make(p, 4);
        const double e[4] = {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0};
        assert_true(chi_square(s, x, e, 4, 20000) < 25.0);
        mdl_sampler_destroy(s);
    }
    {   /* top-p 0.75: nucleus {0, 1} (0.5 < 0.75 <= 0.8) */
        mdl_sampler_params p = plain(1.0f);
        p.top_p = 0.75f;
        mdl_sampler *s = make(p, 4);
        const double e[4] = {0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0};
        assert_true(chi_square(s, x, e, 4, 20000) < 25.0);
        mdl_sampler_destroy(s);
    }
    {   /* min-p 0.2: cut at 0.1 drops token 3 only */
        mdl_sampler_params p = plain(1.0f);
        p.min_p = 0.2f;
        mdl_sampler *s = make(p, 4);
        const double e[4] = {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0};
        assert_true(chi_square(s, x, e, 4, 20000) < 25.0);
        mdl_sampler_destroy(s);
    }
    {   /* min_keep beats a filter that would keep fewer */
        mdl_sampler_params p = plain(1.0f);
        p.top_k = 1;
        p.min_keep = 2;
        mdl_sampler *s = make(p, 4);
        const double e[4] = {0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0};
        assert_true(chi_square(s, x, e, 4, 20000) < 25.0);
        mdl_sampler_destroy(s);
    }
}

static void test_repetition_penalty_demotes_tokens_inside_its_window_only(void **state)
{
    float x[8] = {2.0f, 1.9f, 0.0f, -1.0f, -1.2f, 0.0f, 0.0f, 0.0f};
    mdl_sampler_params p = plain(0.0f);
    p.repeat_penalty = 1.5f;
    p.repeat_last_n = 2;
    mdl_sampler *s = make(p, 8);
    assert_int_equal(mdl_sampler_sample(s, x), 0);
    mdl_sampler_accept(s, 0);
    assert_int_equal(mdl_sampler_sample(s, x), 1);  /* 2.0 / 1.5 < 1.9 */
    mdl_sampler_accept(s, 5);
    mdl_sampler_accept(s, 6);                       /* 0 left the window of 2 */
    assert_int_equal(mdl_sampler_sample(s, x), 0);
    mdl_sampler_destroy(s);

    /* negative logits are multiplied: -1.0 * 1.5 = -1.5 < -1.2 */
    float y[2] = {-1.0f, -1.2f};
    s = make(p, 2);
    mdl_sampler_accept(s, 0);
    assert_int_equal(mdl_sampler_sample(s, y), 1);
    mdl_sampler_destroy(s);

    /* presence penalty on a repeated token, counted once per token */
    mdl_sampler_params q = plain(0.0f);
    q.presence_penalty = 0.5f;
    s = make(q, 8);
    mdl_sampler_accept(s, 0);
    mdl_sampler_accept(s, 0);
    assert_int_equal(mdl_sampler_sample(s, x), 1);
    mdl_sampler_destroy(s);
}

/* Without penalties, top-k is taken straight from the logits (no candidate list of the vocabulary); with a
 * penalty that changes no logit (freq 1e-30 on a token whose logit is 5.0) the candidate path runs. Both must
 * draw the same tokens from the same seed: the defaults, min_keep above top_k, top_k = n - 1; NaN and -inf
 * logits; many ties (logits on a 0.001 grid). */
static void test_top_k_from_the_logits_draws_what_the_candidate_path_draws(void **state)
{
    (void)state;
    enum { N = 5000 };
    static float x[N];
    mdl_sampler_params a = mdl_sampler_default_params();
    for (int variant = 0; variant < 3; variant++) {
        if (variant == 1)
            a.min_keep = 64;
        if (variant == 2)
            a.top_k = N - 1, a.top_p = 1.0f;
        mdl_sampler_params b = a;
        b.freq_penalty = 1e-30f;
        mdl_sampler *sa = make(a, N), *sb = make(b, N);
        mdl_sampler_accept(sa, 7);
        mdl_sampler_accept(sb, 7);
        for (uint32_t k = 0; k < 200; k++) {
            fill_logits(x, N, k + 1);
            x[7] = 5.0f;
            if (k % 3 == 0)
                x[100 + k] = NAN, x[101 + k] = -INFINITY;
            const int32_t ta = mdl_sampler_sample(sa, x), tb = mdl_sampler_sample(sb, x);
            assert_true(ta >= 0);
            assert_int_equal(ta, tb);
        }
        mdl_sampler_destroy(sa);
        mdl_sampler_destroy(sb);
    }
}

static void test_nan_never_wins_and_all_masked_is_an_error(void **state)
{
    float x[4] = {NAN, 1.0f, NAN, 0.5f};
    assert_int_equal(mdl_argmax(x, 4), 1);
    /* the edges of the two-pass argmax: ties (lowest index, -0.0 == +0.0), -infinity only, all NaN, a tail
     * past the 16-wide blocks, the maximum in the tail, n <= 0 */
    float v[37];
    for (int i = 0; i < 37; i++)
        v[i] = (float)(i % 5);
    assert_int_equal(mdl_argmax(v, 37), 4);
    v[36] = 9.0f;
    assert_int_equal(mdl_argmax(v, 37), 36);
    float z[19] = {NAN, -INFINITY, NAN, -0.0f, 0.0f, -0.0f};
    for (int i = 6; i < 19; i++)
        z[i] = -1.0f;
    assert_int_equal(mdl_argmax(z, 19), 3);
    float w[18];
    for (int i = 0; i < 18; i++)
        w[i] = i == 0 ? NAN : -INFINITY;
    assert_int_equal(mdl_argmax(w, 18), 1);
    for (int i = 0; i < 18; i++)
        w[i] = NAN;
    assert_int_equal(mdl_argmax(w, 18), -1);
    assert_int_equal(mdl_argmax(w, 0), -1);
    mdl_sampler *s = make(plain(1.0f), 4);
    for (int i = 0; i < 100; i++) {
        int32_t t = mdl_sampler_sample(s, x);
        assert_true(t == 1 || t == 3);
    }
    float y[4] = {-INFINITY, NAN, -INFINITY, NAN};
    assert_int_equal(mdl_sampler_sample(s, y), MEMRA_E_INVAL);
    assert_int_equal(mdl_sampler_sample(s, NULL), MEMRA_E_INVAL);
    mdl_sampler_destroy(s);
    /* greedy without penalties (the argmax shortcut): the same answers */
    s = make(plain(0.0f), 4);
    assert_int_equal(mdl_sampler_sample(s, x), 1);
    assert_int_equal(mdl_sampler_sample(s, y), MEMRA_E_INVAL);
    assert_int_equal(mdl_sampler_sample(s, NULL), MEMRA_E_INVAL);
    mdl_sampler_destroy(s);
}

static void test_bad_params_are_refused_naming_the_field(void **state)
{
    dev_err err = {0};
    mdl_sampler_params p = mdl_sampler_default_params();
    p.top_p = 0.0f;
    assert_null(mdl_sampler_create(&p, 10, &err));
    assert_int_equal(err.code, MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "top_p"));
    dev_err_clear(&err);
    p = mdl_sampler_default_params();
    p.min_p = 1.5f;
    assert_null(mdl_sampler_create(&p, 10, &err));
    assert_non_null(strstr(err.msg, "min_p"));
    dev_err_clear(&err);
    p = mdl_sampler_default_params();
    p.repeat_penalty = 0.0f;
    assert_null(mdl_sampler_create(&p, 10, &err));
    assert_non_null(strstr(err.msg, "repeat_penalty"));
    dev_err_clear(&err);
    p = mdl_sampler_default_params();
    p.temperature = NAN;
    assert_null(mdl_sampler_create(&p, 10, &err));
    assert_non_null(strstr(err.msg, "temperature"));
    dev_err_clear(&err);
    p = mdl_sampler_default_params();
    assert_null(mdl_sampler_create(&p, 0, &err));
    assert_non_null(strstr(err.msg, "n_vocab"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_returns_the_argmax),
        cmocka_unit_test(test_top_k_from_the_logits_draws_what_the_candidate_path_draws),
        cmocka_unit_test(test_top_k_of_one_equals_greedy_at_any_temperature),
        cmocka_unit_test(test_same_seed_gives_the_same_tokens),
        cmocka_unit_test(test_different_seeds_give_different_tokens),
        cmocka_unit_test(test_reset_restarts_the_same_sequence),
        cmocka_unit_test(test_draws_follow_the_softmax_at_each_temperature),
        cmocka_unit_test(test_top_k_top_p_min_p_restrict_and_renormalize),
        cmocka_unit_test(test_repetition_penalty_demotes_tokens_inside_its_window_only),
        cmocka_unit_test(test_nan_never_wins_and_all_masked_is_an_error),
        cmocka_unit_test(test_bad_params_are_refused_naming_the_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
