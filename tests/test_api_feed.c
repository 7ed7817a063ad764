/* Device feed in the embedding API: memra_seq_decode_greedy_next (a greedy step fed on the device from the
 * one before it, submitted before that one is waited) gives the tokens of memra_seq_decode_greedy on 1 and 2
 * stages with two sequences in flight; memra_generate with device feed gives the outputs it gives without,
 * for greedy and sampled requests, n_predict 1, 2 and longer, and a callback that stops a request while its
 * next step is already in flight (the scheduler feeds a micro-batch of greedy requests once nobody waits to
 * join), and leaves its slots clean for the next call; the misuses are refused by name
 * with MEMRA_E_STATE / MEMRA_E_INVAL. CPU backend, every leg. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "memra/memra.h"
#include "support/api_tiny.h"

#define NV API_TINY_NV
#define GEN 12

static memra_runtime *make_rt(int stages, memra_feed_mode feed)
{
    memra_runtime_params p = api_tiny_params(stages);
    p.n_seq = 4;
    p.max_rows = 8;
    p.device_feed = feed;
    memra_runtime *rt = memra_runtime_create(api_tiny_model, &p);
    if (!rt)
        fail_msg("runtime: %s", memra_last_error());
    return rt;
}

static memra_token wait_token(memra_pending *p)
{
    memra_token t = -1;
    if (memra_pending_wait_token(p, &t) != MEMRA_OK)
        fail_msg("wait: %s", memra_last_error());
    memra_pending_free(p);
    return t;
}

/* GEN tokens of two sequences: the first from the prime's logits, the rest greedy on the device; fed = 1:
 * each sequence keeps its next step in flight, fed from the current one (memra_seq_decode_greedy_next). */
static void decode_two(memra_runtime *rt, int fed, memra_token out[2][GEN])
{
    memra_seq *s[2];
    memra_pending *cur[2], *next[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        memra_token pr[9];
        api_tiny_prompt(pr, 9, 70 + k);
        assert_non_null(s[k] = memra_seq_open(rt));
        memra_pending *p;
        const float *l;
        assert_int_equal(memra_seq_prime(s[k], pr, 9, 4, &p), MEMRA_OK);
        assert_int_equal(memra_pending_wait(p, &l, NULL), MEMRA_OK);
        out[k][0] = memra_argmax(l, NV);
        memra_pending_free(p);
        assert_int_equal(memra_seq_decode_greedy(s[k], out[k][0], &cur[k]), MEMRA_OK);
        if (fed)
            assert_int_equal(memra_seq_decode_greedy_next(s[k], &next[k]), MEMRA_OK);
    }
    for (int i = 1; i < GEN; i++)
        for (int k = 0; k < 2; k++) {
            out[k][i] = wait_token(cur[k]);
            cur[k] = NULL;
            if (fed) {
                cur[k] = next[k];
                next[k] = NULL;
                if (i + 2 < GEN)
                    assert_int_equal(memra_seq_decode_greedy_next(s[k], &next[k]), MEMRA_OK);
            } else if (i + 1 < GEN) {
                assert_int_equal(memra_seq_decode_greedy(s[k], out[k][i], &cur[k]), MEMRA_OK);
            }
        }
    for (int k = 0; k < 2; k++) {
        assert_int_equal(memra_seq_pos(s[k]), 9 + GEN - 1);
        memra_seq_close(s[k]);
    }
}

static void test_fed_greedy_steps_give_the_tokens_of_host_fed_ones(void **state)
{
    (void)state;
    for (int stages = 1; stages <= 2; stages++) {
        memra_runtime *rt = make_rt(stages, MEMRA_FEED_ON);
        memra_token ref[2][GEN], got[2][GEN];
        decode_two(rt, 0, ref);
        memra_counters c;
        assert_int_equal(memra_runtime_counters(rt, &c), MEMRA_OK);
        assert_int_equal(c.fed_steps, 0);
        decode_two(rt, 1, got);
        assert_int_equal(memra_runtime_counters(rt, &c), MEMRA_OK);
        assert_int_equal(c.fed_steps, 2 * (GEN - 2)); /* every greedy step but each sequence's first */
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < GEN; i++)
                if (got[k][i] != ref[k][i])
                    fail_msg("%d stage(s), sequence %d, token %d: fed %d, host-fed %d", stages, k, i, got[k][i],
                             ref[k][i]);
        memra_runtime_free(rt);
    }
}

static int g_stop_after; /* on_token: stop request 0 after this many tokens */
static int stop_request0(void *user, int req, memra_token t, const char *piece, int n_piece)
{
    (void)user, (void)t, (void)piece, (void)n_piece;
    static int seen;
    if (req == 0 && ++seen == g_stop_after) {
        seen = 0;
        return 1;
    }
    return 0;
}

/* Requests: greedy with n_predict GEN, 1 and 2, one sampled; request 0 stopped by the callback after 5
 * tokens (its fed step already in flight). Run twice on the runtime: the slots come back clean. */
static void run_requests(memra_runtime *rt, memra_token out[4][GEN], int n_out[4])
{
    memra_token prompts[4][7];
    memra_request r[4];
    static const int n_predict[4] = {GEN, 1, 2, GEN};
    for (int i = 0; i < 4; i++) {
        api_tiny_prompt(prompts[i], 7, 90 + i);
        r[i] = (memra_request){.prompt = prompts[i], .n_prompt = 7, .n_predict = n_predict[i],
                               .sampling = memra_sampler_greedy_params(), .out = out[i], .out_cap = GEN};
    }
    r[3].sampling = memra_sampler_default_params(); /* sampled on the host: no device feed for it */
    r[3].sampling.seed = 11;
    g_stop_after = 5;
    assert_int_equal(memra_generate(rt, r, 4, 3, stop_request0, NULL), MEMRA_OK);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(r[i].status, MEMRA_OK);
        n_out[i] = r[i].n_out;
    }
    assert_int_equal(n_out[0], 5);
}

static void test_generate_with_device_feed_gives_what_it_gives_without(void **state)
{
    (void)state;
    memra_token ref[4][GEN], got[4][GEN], again[4][GEN];
    int n_ref[4], n_got[4], n_again[4];
    /* 4 stages: generate feeds while the requests in flight are no more than the stages (here always) */
    memra_runtime *off = make_rt(4, MEMRA_FEED_OFF), *on = make_rt(4, MEMRA_FEED_ON);
    run_requests(off, ref, n_ref);
    run_requests(on, got, n_got);
    run_requests(on, again, n_again);
    memra_counters c_off, c_on;
    assert_int_equal(memra_runtime_counters(off, &c_off), MEMRA_OK);
    assert_int_equal(memra_runtime_counters(on, &c_on), MEMRA_OK);
    assert_int_equal(c_off.fed_steps, 0);
    /* one request per micro-batch: request 0 is fed once no request waits to join (its token 6 in flight when
     * the callback stops it at 5, a wasted row), request 2 (n_predict 2) from its prompt's last row; request 1
     * (n_predict 1) has nothing to feed and request 3 samples on the host */
    assert_true(c_on.fed_steps >= 2 * 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(n_got[i], n_ref[i]);
        assert_int_equal(n_again[i], n_ref[i]);
        for (int k = 0; k < n_ref[i]; k++)
            if (got[i][k] != ref[i][k] || again[i][k] != ref[i][k])
                fail_msg("request %d token %d: without feed %d, with %d, again %d", i, k, ref[i][k], got[i][k],
                         again[i][k]);
    }
    memra_runtime_free(off);
    memra_runtime_free(on);
    memra_runtime *two = make_rt(2, MEMRA_FEED_ON); /* 4 requests on 2 stages: the host-fed path, same outputs */
    run_requests(two, again, n_again);
    assert_int_equal(memra_runtime_counters(two, &c_on), MEMRA_OK);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(n_again[i], n_ref[i]);
        for (int k = 0; k < n_ref[i]; k++)
            assert_int_equal(again[i][k], ref[i][k]);
    }
    assert_true(c_on.fed_steps > 0); /* micro-batch {0, 1}: once request 1 ends, request 0 is fed */
    memra_runtime_free(two);
}

static void test_misuses_of_the_fed_step_are_refused_by_name(void **state)
{
    (void)state;
    memra_runtime *off = make_rt(1, MEMRA_FEED_OFF), *rt = make_rt(1, MEMRA_FEED_ON);
    memra_pending *p = (memra_pending *)&p; /* must be cleared on failure */
    memra_seq *s = memra_seq_open(off);
    assert_int_equal(memra_seq_decode_greedy_next(s, &p), MEMRA_E_STATE);
    api_tiny_assert_error(memra_last_error(), MEMRA_E_STATE, "device_feed");
    assert_null(p);
    memra_seq_close(s);
    s = memra_seq_open(rt);
    memra_token pr[5];
    api_tiny_prompt(pr, 5, 3);
    assert_int_equal(memra_seq_prime(s, pr, 5, 5, &p), MEMRA_OK);
    memra_pending_free(p);
    assert_int_equal(memra_seq_decode_greedy_next(s, &p), MEMRA_E_STATE); /* the last step was a prime */
    api_tiny_assert_error(memra_last_error(), MEMRA_E_STATE, "not a greedy decode");
    assert_int_equal(memra_seq_pos(s), 5);
    assert_int_equal(memra_seq_decode_greedy(s, pr[4], &p), MEMRA_OK);
    (void)wait_token(p);
    assert_int_equal(memra_seq_prime(s, pr, 3, 3, &p), MEMRA_OK); /* a prompt after the greedy token */
    memra_pending_free(p);
    assert_int_equal(memra_seq_decode_greedy_next(s, &p), MEMRA_E_STATE);
    api_tiny_assert_error(memra_last_error(), MEMRA_E_STATE, "not a greedy decode");
    assert_int_equal(memra_seq_decode_greedy(s, pr[2], &p), MEMRA_OK);
    (void)wait_token(p);
    assert_int_equal(memra_seq_decode_greedy_next(s, NULL), MEMRA_E_INVAL);
    assert_int_equal(memra_seq_rewind(s, 9), MEMRA_OK); /* the fed token belongs to the dropped position */
    assert_int_equal(memra_seq_decode_greedy_next(s, &p), MEMRA_E_STATE);
    api_tiny_assert_error(memra_last_error(), MEMRA_E_STATE, "rewound");
    memra_seq_close(s);
    assert_int_equal(memra_seq_decode_greedy_next(s, &p), MEMRA_E_STATE); /* closed */
    memra_runtime_params bad = memra_runtime_default_params();
    bad.backend = MEMRA_BACKEND_CPU;
    bad.device_feed = (memra_feed_mode)7;
    assert_null(memra_runtime_create(api_tiny_model, &bad));
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "device_feed = 7");
    /* the door (apply_env): a bad value is named; 1 turns device feed on over the field */
    bad.device_feed = MEMRA_FEED_OFF;
    bad.apply_env = 1;
    setenv("MEMRA_DEVICE_FEED", "on", 1);
    assert_null(memra_runtime_create(api_tiny_model, &bad));
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "MEMRA_DEVICE_FEED=\"on\"");
    setenv("MEMRA_DEVICE_FEED", "1", 1);
    memra_runtime *door = memra_runtime_create(api_tiny_model, &bad);
    unsetenv("MEMRA_DEVICE_FEED");
    assert_non_null(door);
    s = memra_seq_open(door);
    assert_int_equal(memra_seq_decode_greedy(s, pr[0], &p), MEMRA_OK);
    memra_pending *q = NULL;
    assert_int_equal(memra_seq_decode_greedy_next(s, &q), MEMRA_OK);
    (void)wait_token(p);
    (void)wait_token(q);
    memra_seq_close(s);
    memra_runtime_free(door);
    memra_runtime_free(off);
    memra_runtime_free(rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fed_greedy_steps_give_the_tokens_of_host_fed_ones),
        cmocka_unit_test(test_generate_with_device_feed_gives_what_it_gives_without),
        cmocka_unit_test(test_misuses_of_the_fed_step_are_refused_by_name),
    };
    return cmocka_run_group_tests(tests, api_tiny_setup, api_tiny_teardown);
}
