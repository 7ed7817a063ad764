/* The device-greedy decode path of the embedding API: memra_seq_decode_greedy + memra_pending_wait_token give
 * the tokens of memra_seq_decode + memra_pending_wait + memra_argmax (1 and 2 stages, two sequences in flight);
 * each reader refuses the other kind of pending by name and leaves it usable; decode_greedy refuses what
 * decode refuses; memra_generate decodes greedy requests through it and samples the others as before; a row
 * with no logit above -inf is refused on the device path as the host sampler refuses it. The liveness gate is
 * the runtime's count of steps submitted in argmax mode (api/api_internal.h: greedy_steps). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "api/api_internal.h"
#include "kernels/quant.h"
#include "memra/memra.h"
#include "model/gguf.h"
#include "support/api_tiny.h"
#include "support/gguf_tiny.h"

#define NV API_TINY_NV
#define GEN 12 /* tokens generated per loop */

static int g_stop; /* the abort callback's answer */

static int abort_when_told(void *user)
{
    (void)user;
    return g_stop;
}

static memra_runtime *make_rt_of(const memra_model *m, int stages, int n_seq, int n_ctx)
{
    memra_runtime_params p = api_tiny_params(stages);
    p.n_seq = n_seq;
    p.n_ctx = n_ctx;
    p.max_rows = 8;
    p.abort_cb = abort_when_told;
    memra_runtime *rt = memra_runtime_create(m, &p);
    if (!rt)
        fprintf(stderr, "runtime: %s\n", memra_last_error());
    assert_non_null(rt);
    assert_int_equal(memra_runtime_n_stages(rt), stages > 1 ? stages : 1);
    return rt;
}

static memra_runtime *make_rt(int stages, int n_seq)
{
    return make_rt_of(api_tiny_model, stages, n_seq, 64);
}

static uint64_t greedy_steps(memra_runtime *rt)
{
    pthread_mutex_lock(&rt->mu);
    uint64_t n = rt->greedy_steps;
    pthread_mutex_unlock(&rt->mu);
    return n;
}

/* The last error names `what` and carries the code's name. */

/* The first token of a primed prompt, from its logits (as memra_generate takes it). */
static memra_token prime_argmax(memra_seq *s, const memra_token *t, int n)
{
    memra_pending *p;
    const float *l;
    assert_int_equal(memra_seq_prime(s, t, n, 3, &p), MEMRA_OK);
    assert_int_equal(memra_pending_wait(p, &l, NULL), MEMRA_OK);
    memra_token tok = memra_argmax(l, NV);
    memra_pending_free(p);
    return tok;
}

/* GEN greedy tokens of each of n_seq prompts, the sequences decoded in lock step (n_seq steps in flight):
 * through the logits (memra_seq_decode + memra_pending_wait + memra_argmax) or the device argmax. */
static void greedy_lockstep(memra_runtime *rt, int n_seq, int device, memra_token out[][GEN])
{
    memra_seq *s[2];
    memra_pending *p[2];
    memra_token t[2][9];
    for (int k = 0; k < n_seq; k++) {
        api_tiny_prompt(t[k], 9, 50 + k);
        assert_non_null(s[k] = memra_seq_open(rt));
        out[k][0] = prime_argmax(s[k], t[k], 9);
    }
    for (int i = 1; i < GEN; i++) {
        for (int k = 0; k < n_seq; k++)
            assert_int_equal((device ? memra_seq_decode_greedy : memra_seq_decode)(s[k], out[k][i - 1], &p[k]),
                             MEMRA_OK);
        for (int k = 0; k < n_seq; k++) {
            if (device) {
                assert_int_equal(memra_pending_wait_token(p[k], &out[k][i]), MEMRA_OK);
            } else {
                const float *l;
                int rows = 0;
                assert_int_equal(memra_pending_wait(p[k], &l, &rows), MEMRA_OK);
                assert_int_equal(rows, 1);
                out[k][i] = memra_argmax(l, NV);
            }
            memra_pending_free(p[k]);
        }
    }
    for (int k = 0; k < n_seq; k++) {
        assert_int_equal(memra_seq_pos(s[k]), 9 + GEN - 1);
        memra_seq_close(s[k]);
    }
}

static void test_a_device_greedy_loop_gives_the_tokens_of_the_logits_loop_on_one_and_two_stages(void **state)
{
    (void)state;
    for (int stages = 1; stages <= 2; stages++) {
        memra_runtime *rt = make_rt(stages, 2);
        memra_token ref[2][GEN], got[2][GEN];
        greedy_lockstep(rt, 2, 0, ref);
        assert_int_equal(greedy_steps(rt), 0);
        greedy_lockstep(rt, 2, 1, got);
        assert_int_equal(greedy_steps(rt), 2 * (GEN - 1)); /* every later token came from the device argmax */
        for (int k = 0; k < 2; k++) {
            int distinct = 0; /* a loop stuck on one token would make the comparison weak */
            for (int i = 1; i < GEN; i++)
                distinct += ref[k][i] != ref[k][0];
            assert_true(distinct > 0);
            for (int i = 0; i < GEN; i++)
                if (got[k][i] != ref[k][i])
                    fail_msg("%d stage(s), sequence %d, token %d: device greedy %d, logits argmax %d", stages, k, i,
                             got[k][i], ref[k][i]);
        }
        memra_counters c;
        assert_int_equal(memra_runtime_counters(rt, &c), MEMRA_OK);
        assert_int_equal(c.tokens_decoded, 2 * 2 * (GEN - 1));
        assert_int_equal(c.steps_done, 2 * 2 * (GEN - 1) + 2 * 2 * 3); /* + the 9-token primes, 3 chunks each */
        memra_runtime_free(rt);
    }
}

static void test_each_reader_refuses_the_other_kind_of_pending_by_name_and_leaves_it_usable(void **state)
{
    (void)state;
    memra_runtime *rt = make_rt(2, 1);
    memra_seq *s = memra_seq_open(rt);
    memra_token t[7];
    api_tiny_prompt(t, 7, 3);
    memra_pending *lp[2], *gp;
    assert_int_equal(memra_seq_prime(s, t, 6, 2, &lp[0]), MEMRA_OK); /* 3 chunks: a pending with deps */
    assert_int_equal(memra_seq_decode(s, t[6], &lp[1]), MEMRA_OK);
    for (int k = 0; k < 2; k++) { /* logits pendings: wait_token refuses, naming memra_pending_wait */
        memra_token tok = 7;
        assert_int_equal(memra_pending_wait_token(lp[k], &tok), MEMRA_E_INVAL);
        assert_int_equal(tok, -1);
        const char *msg = memra_runtime_last_error(rt);
        api_tiny_assert_error(msg, MEMRA_E_INVAL, "read it with memra_pending_wait");
        assert_null(strstr(msg, "read it with memra_pending_wait_token"));
        api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "logits");
        const float *l;
        int rows = 0;
        assert_int_equal(memra_pending_wait(lp[k], &l, &rows), MEMRA_OK); /* still usable */
        assert_int_equal(rows, 1);
        assert_non_null(l);
    }
    const float *ref;
    assert_int_equal(memra_pending_wait(lp[1], &ref, NULL), MEMRA_OK);
    memra_token want = memra_argmax(ref, NV);
    memra_pending_free(lp[0]);
    memra_pending_free(lp[1]);

    assert_int_equal(memra_seq_rewind(s, 6), MEMRA_OK); /* the same step again, greedy */
    assert_int_equal(memra_seq_decode_greedy(s, t[6], &gp), MEMRA_OK);
    const float *l = (const float *)&l;
    int rows = 5;
    assert_int_equal(memra_pending_wait(gp, &l, &rows), MEMRA_E_INVAL);
    assert_null(l);
    assert_int_equal(rows, 0);
    api_tiny_assert_error(memra_runtime_last_error(rt), MEMRA_E_INVAL, "memra_pending_wait_token");
    assert_int_equal(memra_pending_wait(gp, NULL, NULL), MEMRA_E_INVAL);
    memra_token a = -5, b = -5;
    assert_int_equal(memra_pending_wait_token(gp, &a), MEMRA_OK); /* still usable */
    assert_int_equal(a, want);
    assert_int_equal(memra_pending_wait_token(gp, &b), MEMRA_OK); /* waiting twice: the same token */
    assert_int_equal(b, a);
    assert_int_equal(memra_pending_poll(gp), 1);
    assert_int_equal(memra_pending_wait(gp, &l, &rows), MEMRA_E_INVAL); /* and still refused after */
    assert_int_equal(memra_pending_wait_token(gp, NULL), MEMRA_E_INVAL);
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "token is NULL");
    memra_pending_free(gp);

    memra_token tok = 3;
    assert_int_equal(memra_pending_wait_token(NULL, &tok), MEMRA_E_INVAL);
    assert_int_equal(tok, -1);
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "pending is NULL");
    memra_runtime_free(rt);
}

typedef int (*decode_fn)(memra_seq *, memra_token, memra_pending **);

/* Call decode and decode_greedy the same way: the same status, *out NULL, the position unchanged. */
static void both_refuse(memra_seq *s, memra_token tok, int use_out, int want, const char *what)
{
    static const decode_fn fn[2] = {memra_seq_decode, memra_seq_decode_greedy};
    static const char *const name[2] = {"memra_seq_decode", "memra_seq_decode_greedy"};
    int pos = s ? memra_seq_pos(s) : 0;
    for (int k = 0; k < 2; k++) {
        memra_pending *p = (memra_pending *)&p;
        int r = fn[k](s, tok, use_out ? &p : NULL);
        if (r != want)
            fail_msg("%s (%s): %s, expected %s", name[k], what, memra_status_str(r), memra_status_str(want));
        if (use_out)
            assert_null(p);
        if (want != MEMRA_E_ABORTED) /* the abort callback's message names no call */
            api_tiny_assert_error(memra_last_error(), want, name[k]);
        if (s && want != MEMRA_E_STATE)
            assert_int_equal(memra_seq_pos(s), pos);
    }
}

static void test_decode_greedy_refuses_what_decode_refuses_and_leaves_the_position(void **state)
{
    (void)state;
    memra_runtime *rt = make_rt_of(api_tiny_model, 1, 2, 16);
    memra_seq *s = memra_seq_open(rt), *c = memra_seq_open(rt);
    memra_token t[16];
    api_tiny_prompt(t, 16, 9);
    both_refuse(NULL, 1, 1, MEMRA_E_INVAL, "NULL sequence");
    both_refuse(s, 1, 0, MEMRA_E_INVAL, "NULL out");
    both_refuse(s, NV, 1, MEMRA_E_INVAL, "token = n_vocab");
    both_refuse(s, -1, 1, MEMRA_E_INVAL, "token -1");
    g_stop = 1;
    both_refuse(s, 1, 1, MEMRA_E_ABORTED, "abort callback");
    g_stop = 0;
    assert_int_equal(memra_seq_close(c), MEMRA_OK);
    both_refuse(c, 1, 1, MEMRA_E_STATE, "closed sequence");
    assert_int_equal(memra_seq_prime(s, t, 16, 0, NULL), MEMRA_OK); /* fills n_ctx 16 exactly */
    both_refuse(s, 1, 1, MEMRA_E_FULL, "context full");
    assert_int_equal(memra_seq_rewind(s, 15), MEMRA_OK);
    memra_pending *p;
    memra_token tok;
    uint64_t before = greedy_steps(rt);
    assert_int_equal(memra_seq_decode_greedy(s, t[15], &p), MEMRA_OK);
    assert_int_equal(memra_seq_pos(s), 16);
    assert_int_equal(memra_pending_wait_token(p, &tok), MEMRA_OK);
    assert_true(tok >= 0 && tok < NV);
    assert_int_equal(greedy_steps(rt), before + 1); /* only the step that went in counted */
    memra_pending_free(p);
    memra_runtime_free(rt);
}

/* A request's tokens by hand through the logits: prime, then sample (the request's params) + decode. */
static void manual_sampled(memra_runtime *rt, const memra_request *rq, memra_token *out)
{
    memra_sampler *smp = memra_sampler_create(&rq->sampling, NV);
    assert_non_null(smp);
    for (int k = 0; k < rq->n_prompt; k++)
        memra_sampler_accept(smp, rq->prompt[k]);
    memra_seq *s = memra_seq_open(rt);
    memra_pending *p;
    assert_int_equal(memra_seq_prime(s, rq->prompt, rq->n_prompt, 0, &p), MEMRA_OK);
    for (int i = 0; i < rq->n_predict; i++) {
        const float *l;
        assert_int_equal(memra_pending_wait(p, &l, NULL), MEMRA_OK);
        out[i] = memra_sampler_sample(smp, l);
        assert_true(out[i] >= 0);
        memra_sampler_accept(smp, out[i]);
        memra_pending_free(p);
        p = NULL;
        if (i + 1 < rq->n_predict)
            assert_int_equal(memra_seq_decode(s, out[i], &p), MEMRA_OK);
    }
    memra_seq_close(s);
    memra_sampler_free(smp);
}

/* Greedy by hand through the logits: prime, then memra_argmax + decode. */
static void manual_argmax(memra_runtime *rt, const memra_token *t, int n, int n_gen, memra_token *out)
{
    memra_seq *s = memra_seq_open(rt);
    out[0] = prime_argmax(s, t, n);
    for (int i = 1; i < n_gen; i++) {
        memra_pending *p;
        const float *l;
        assert_int_equal(memra_seq_decode(s, out[i - 1], &p), MEMRA_OK);
        assert_int_equal(memra_pending_wait(p, &l, NULL), MEMRA_OK);
        out[i] = memra_argmax(l, NV);
        memra_pending_free(p);
    }
    memra_seq_close(s);
}

static void test_generate_decodes_greedy_requests_on_the_device_and_samples_the_others_as_before(void **state)
{
    (void)state;
    memra_runtime *rt = make_rt(2, 4);
    enum { N = 4 };
    memra_token prompts[N][7], out[N][GEN], ref[N][GEN];
    memra_request r[N];
    for (int i = 0; i < N; i++) {
        api_tiny_prompt(prompts[i], 7, 60 + i);
        r[i] = (memra_request){.prompt = prompts[i], .n_prompt = 7, .n_predict = GEN - (i % 2),
                               .sampling = memra_sampler_greedy_params(), .out = out[i], .out_cap = GEN};
    }
    r[1].sampling = memra_sampler_default_params(); /* sampling: the host path, as before */
    r[1].sampling.seed = 7;
    r[2].sampling.repeat_penalty = 1.3f; /* greedy over penalized logits: the host path */
    r[3].sampling.repeat_penalty = 1.3f; /* ... but with no history window nothing is penalized: device */
    r[3].sampling.repeat_last_n = 0;
    /* 2 micro-batches: {0, 1} and {2, 3}, each with a host-path request, so their steps read logits back, but
     * for request 0's last one: request 1 (one token fewer) has ended and the micro-batch is all greedy */
    assert_int_equal(memra_generate(rt, r, N, 3, NULL, NULL), MEMRA_OK);
    assert_int_equal(greedy_steps(rt), 1);
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].status, MEMRA_OK);
        assert_int_equal(r[i].n_out, r[i].n_predict);
        if (i == 0 || i == 3)
            manual_argmax(rt, prompts[i], 7, r[i].n_predict, ref[i]);
        else
            manual_sampled(rt, &r[i], ref[i]);
        for (int k = 0; k < r[i].n_predict; k++)
            if (out[i][k] != ref[i][k])
                fail_msg("request %d token %d: generate %d, by hand %d", i, k, out[i][k], ref[i][k]);
    }
    /* the two device-path requests alone: one per micro-batch, every step (the prompt's last row included)
     * picked on the device, the same tokens */
    memra_request dev[2] = {r[0], r[3]};
    memra_token dout[2][GEN];
    for (int i = 0; i < 2; i++)
        dev[i].out = dout[i];
    const uint64_t before = greedy_steps(rt);
    assert_int_equal(memra_generate(rt, dev, 2, 3, NULL, NULL), MEMRA_OK);
    assert_int_equal(greedy_steps(rt) - before, (uint64_t)(dev[0].n_predict + dev[1].n_predict));
    for (int i = 0; i < 2; i++) {
        assert_int_equal(dev[i].status, MEMRA_OK);
        assert_int_equal(dev[i].n_out, dev[i].n_predict);
        assert_memory_equal(dout[i], ref[i == 0 ? 0 : 3], (size_t)dev[i].n_out * sizeof(memra_token));
    }
    memra_runtime_free(rt);
}

/* ---- a row with no logit above -inf ---- */

/* Overwrite token_embd row `tok` of the f32-embedding model at path with NaN: a step fed that token has only
 * NaN logits (no candidate: nothing above -inf), while the steps of other tokens stay finite. */
static void poison_embedding_row(const char *path, memra_token tok)
{
    dev_err err = {0};
    mdl_gguf *g = mdl_gguf_open(path, &err);
    assert_non_null(g);
    const mdl_gguf_tensor *te = mdl_gguf_tensor_find(g, "token_embd.weight");
    assert_non_null(te);
    assert_int_equal(te->type, KRN_F32);
    const long n_embd = (long)te->ne[0];
    const long off = (long)(mdl_gguf_data_offset(g) + te->offset) + (long)tok * n_embd * (long)sizeof(float);
    mdl_gguf_close(g);
    float *nan_row = malloc((size_t)n_embd * sizeof *nan_row);
    assert_non_null(nan_row);
    for (long i = 0; i < n_embd; i++)
        nan_row[i] = NAN;
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    assert_int_equal(fwrite(nan_row, sizeof *nan_row, (size_t)n_embd, f), (size_t)n_embd);
    assert_int_equal(fclose(f), 0);
    free(nan_row);
}

static void test_a_row_with_no_logit_above_minus_inf_is_refused_on_the_device_as_by_the_sampler(void **state)
{
    (void)state;
    char path[256];
    gguf_tiny_params gp;
    gguf_tiny_defaults(&gp);
    gp.embd_type = KRN_F32;
    dev_err err = {0};
    assert_int_equal(gguf_tiny_write_temp(path, sizeof path, &gp, &err), 0);
    /* the prompt's first greedy token t1, not itself in the prompt */
    memra_token pr[5], t1 = -1;
    memra_model *m = memra_model_load(path, NULL);
    assert_non_null(m);
    memra_runtime *rt = make_rt_of(m, 2, 2, 64);
    for (int salt = 0; salt < 50 && t1 < 0; salt++) {
        api_tiny_prompt(pr, 5, 70 + salt);
        memra_seq *s = memra_seq_open(rt);
        t1 = prime_argmax(s, pr, 5);
        memra_seq_close(s);
        for (int i = 0; i < 5; i++)
            if (pr[i] == t1)
                t1 = -1;
    }
    assert_true(t1 >= 0);
    memra_runtime_free(rt);
    memra_model_free(m);
    poison_embedding_row(path, t1);
    assert_non_null(m = memra_model_load(path, NULL));
    rt = make_rt_of(m, 2, 2, 64);

    /* by hand: the prompt's logits still give t1; the step fed t1 has no candidate on either path */
    memra_seq *s = memra_seq_open(rt);
    assert_int_equal(prime_argmax(s, pr, 5), t1);
    memra_pending *p;
    const float *l;
    assert_int_equal(memra_seq_decode(s, t1, &p), MEMRA_OK);
    assert_int_equal(memra_pending_wait(p, &l, NULL), MEMRA_OK);
    memra_sampler_params sp = memra_sampler_greedy_params();
    memra_sampler *smp = memra_sampler_create(&sp, NV);
    assert_int_equal(memra_sampler_sample(smp, l), MEMRA_E_INVAL); /* the host sampler's greedy refuses it */
    assert_int_equal(memra_argmax(l, NV), -1);
    memra_sampler_free(smp);
    memra_pending_free(p);
    assert_int_equal(memra_seq_rewind(s, 5), MEMRA_OK);
    assert_int_equal(memra_seq_decode_greedy(s, t1, &p), MEMRA_OK);
    for (int k = 0; k < 2; k++) { /* twice: the same refusal */
        memra_token tok = 0;
        assert_int_equal(memra_pending_wait_token(p, &tok), MEMRA_E_INVAL);
        assert_int_equal(tok, -1);
        api_tiny_assert_error(memra_runtime_last_error(rt), MEMRA_E_INVAL, "above -inf");
        api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "memra_sampler_sample");
    }
    memra_pending_free(p);
    memra_seq_close(s);

    /* memra_generate: the device-greedy request and a host-path one end alike, after t1 */
    memra_token out[2][4];
    memra_request r[2];
    for (int i = 0; i < 2; i++)
        r[i] = (memra_request){.prompt = pr, .n_prompt = 5, .n_predict = 4, .sampling = memra_sampler_greedy_params(),
                               .out = out[i], .out_cap = 4};
    r[1].sampling.repeat_penalty = 1.1f; /* greedy over penalized logits: the host sampler */
    uint64_t before = greedy_steps(rt);
    assert_int_equal(memra_generate(rt, r, 2, 0, NULL, NULL), MEMRA_OK);
    /* request 0's steps went the device way: the prompt's last row, then the step fed t1 */
    assert_int_equal(greedy_steps(rt), before + 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r[i].status, MEMRA_E_INVAL);
        assert_int_equal(r[i].n_out, 1);
        assert_int_equal(out[i][0], t1);
    }
    memra_runtime_free(rt);
    memra_model_free(m);
    unlink(path);
}

int main(void)
{
    setenv("MEMRA_BACKEND", "cpu", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_device_greedy_loop_gives_the_tokens_of_the_logits_loop_on_one_and_two_stages),
        cmocka_unit_test(test_each_reader_refuses_the_other_kind_of_pending_by_name_and_leaves_it_usable),
        cmocka_unit_test(test_decode_greedy_refuses_what_decode_refuses_and_leaves_the_position),
        cmocka_unit_test(test_generate_decodes_greedy_requests_on_the_device_and_samples_the_others_as_before),
        cmocka_unit_test(test_a_row_with_no_logit_above_minus_inf_is_refused_on_the_device_as_by_the_sampler),
    };
    return cmocka_run_group_tests(tests, api_tiny_setup, api_tiny_teardown);
}
