/* The embedding API running a tiny synthetic model: chunked prime, decode, batch, pipelined stages and
 * many-sequence generation give the same logits / tokens as their plain counterparts; the abort callback
 * stops between chunks and steps; several threads submitting their own sequences at once get what a serial
 * run gets (the TSan leg checks the runtime's serialization). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "memra/memra.h"
#include "support/api_tiny.h"
#include "support/gguf_tiny.h"

#define NV API_TINY_NV

static memra_runtime *make_rt(int stages, int n_seq, int max_rows, memra_abort_fn abort_cb, void *abort_user)
{
    memra_runtime_params p = api_tiny_params(stages);
    p.n_seq = n_seq;
    p.max_rows = max_rows;
    p.abort_cb = abort_cb;
    p.abort_user = abort_user;
    memra_runtime *rt = memra_runtime_create(api_tiny_model, &p);
    if (!rt)
        fprintf(stderr, "runtime: %s\n", memra_last_error());
    assert_non_null(rt);
    return rt;
}

/* Prime n tokens in chunks of chunk; copy the last token's logits into out. */
static void prime_logits(memra_runtime *rt, const memra_token *t, int n, int chunk, float *out)
{
    memra_seq *s = memra_seq_open(rt);
    assert_non_null(s);
    memra_pending *p = NULL;
    assert_int_equal(memra_seq_prime(s, t, n, chunk, &p), MEMRA_OK);
    const float *l;
    int rows = 0;
    assert_int_equal(memra_pending_wait(p, &l, &rows), MEMRA_OK);
    assert_int_equal(rows, 1);
    memcpy(out, l, NV * sizeof(float));
    assert_int_equal(memra_pending_poll(p), 1);
    memra_pending_free(p);
    assert_int_equal(memra_seq_pos(s), n);
    memra_seq_close(s);
}

static void test_chunked_prime_gives_the_logits_of_a_one_chunk_prime(void **state)
{
    memra_runtime *rt = make_rt(1, 2, 16, NULL, NULL);
    memra_token t[13];
    api_tiny_prompt(t, 13, 1);
    float whole[NV], chunked[NV];
    prime_logits(rt, t, 13, 0, whole);
    prime_logits(rt, t, 13, 3, chunked); /* 5 chunks, submitted back to back */
    assert_memory_equal(whole, chunked, sizeof whole);
    memra_counters c;
    memra_runtime_counters(rt, &c);
    assert_int_equal(c.tokens_primed, 26);
    memra_runtime_free(rt);
}

static void test_decode_after_prime_matches_priming_one_more_token(void **state)
{
    memra_runtime *rt = make_rt(1, 2, 16, NULL, NULL);
    memra_token t[9];
    api_tiny_prompt(t, 9, 2);
    float ref[NV];
    prime_logits(rt, t, 9, 0, ref);
    memra_seq *s = memra_seq_open(rt);
    assert_int_equal(memra_seq_prime(s, t, 8, 4, NULL), MEMRA_OK); /* out NULL: waits */
    memra_pending *p;
    assert_int_equal(memra_seq_decode(s, t[8], &p), MEMRA_OK);
    const float *l;
    assert_int_equal(memra_pending_wait(p, &l, NULL), MEMRA_OK);
    assert_memory_equal(l, ref, sizeof ref);
    assert_int_equal(memra_pending_wait(p, &l, NULL), MEMRA_OK); /* waiting twice is fine */
    memra_pending_free(p);
    memra_runtime_free(rt);
}

static void test_a_slot_closed_with_steps_in_flight_serves_its_next_user_cleanly(void **state)
{
    memra_runtime *rt = make_rt(2, 1, 4, NULL, NULL);
    memra_token a[30], b[7];
    api_tiny_prompt(a, 30, 40);
    api_tiny_prompt(b, 7, 41);
    float ref[NV];
    prime_logits(rt, b, 7, 2, ref);
    memra_seq *s = memra_seq_open(rt);
    memra_pending *pa;
    assert_int_equal(memra_seq_prime(s, a, 30, 3, &pa), MEMRA_OK); /* 10 chunks in flight */
    assert_int_equal(memra_seq_close(s), MEMRA_OK);                 /* not waited */
    float got[NV];
    prime_logits(rt, b, 7, 2, got); /* the same slot, a new user, positions from 0 */
    assert_memory_equal(got, ref, sizeof ref);
    assert_int_equal(memra_pending_wait(pa, NULL, NULL), MEMRA_OK); /* the old pending is still valid */
    memra_pending_free(pa);
    memra_runtime_free(rt);
}

static void test_a_batch_row_equals_the_same_sequence_decoded_alone(void **state)
{
    memra_runtime *rt = make_rt(2, 4, 8, NULL, NULL); /* 3 batch sequences + 1 for the reference */
    memra_seq *s[3];
    memra_token t[3][6];
    for (int i = 0; i < 3; i++) {
        api_tiny_prompt(t[i], 6, 10 + i);
        s[i] = memra_seq_open(rt);
        assert_int_equal(memra_seq_prime(s[i], t[i], 5, 0, NULL), MEMRA_OK);
    }
    memra_token next[3] = {t[0][5], t[1][5], t[2][5]};
    memra_pending *p;
    assert_int_equal(memra_decode_batch(rt, s, next, 3, &p), MEMRA_OK);
    const float *rows;
    int n = 0;
    assert_int_equal(memra_pending_wait(p, &rows, &n), MEMRA_OK);
    assert_int_equal(n, 3);
    for (int i = 0; i < 3; i++) {
        float alone[NV];
        prime_logits(rt, t[i], 6, 0, alone);
        assert_memory_equal(rows + (size_t)i * NV, alone, sizeof alone);
        assert_int_equal(memra_seq_pos(s[i]), 6);
    }
    memra_pending_free(p);
    memra_runtime_free(rt);
}

static void test_a_three_stage_pipeline_gives_the_one_stage_logits_and_counts_its_walks(void **state)
{
    memra_token t[11];
    api_tiny_prompt(t, 11, 3);
    float one[NV], three[NV];
    memra_runtime *rt1 = make_rt(1, 1, 4, NULL, NULL);
    prime_logits(rt1, t, 11, 4, one);
    memra_runtime_free(rt1);
    memra_runtime *rt3 = make_rt(3, 1, 4, NULL, NULL);
    assert_int_equal(memra_runtime_n_stages(rt3), 3);
    assert_string_equal(memra_runtime_backend(rt3), "cpu");
    prime_logits(rt3, t, 11, 4, three);
    assert_memory_equal(one, three, sizeof one);
    memra_counters c;
    memra_runtime_counters(rt3, &c);
    assert_true(c.split_steps + c.prime_split_chunks >= 3);
    assert_int_equal(c.steps_done, 3);
    int layers = 0;
    for (int s = 0; s < 3; s++) {
        memra_stage_stats st;
        assert_int_equal(memra_runtime_stage_stats(rt3, s, &st), MEMRA_OK);
        assert_int_equal(st.walks, 3);
        assert_true(st.busy_frac >= 0.0 && st.busy_frac <= 1.0);
        layers += st.end_layer - st.first_layer;
    }
    assert_int_equal(layers, 4);
    memra_stage_stats st;
    assert_int_equal(memra_runtime_stage_stats(rt3, 3, &st), MEMRA_E_INVAL);
    memra_runtime_reset_stats(rt3);
    assert_int_equal(memra_runtime_drain(rt3), MEMRA_OK);
    memra_runtime_free(rt3);
}

typedef struct seen {
    int count[8];
    memra_token first[8];
    int stop_after; /* stop request 0 after this many tokens (0 = never) */
} seen;

static int on_token(void *user, int req, memra_token tok, const char *piece, int n_piece)
{
    seen *s = user;
    if (s->count[req]++ == 0)
        s->first[req] = tok;
    assert_non_null(piece);
    return req == 0 && s->stop_after && s->count[0] >= s->stop_after;
}

/* Greedy tokens of one prompt by hand: prime, then argmax + decode. */
static void manual_greedy(memra_runtime *rt, const memra_token *t, int n, int n_gen, memra_token *out)
{
    memra_seq *s = memra_seq_open(rt);
    memra_pending *p;
    assert_int_equal(memra_seq_prime(s, t, n, 0, &p), MEMRA_OK);
    for (int i = 0; i < n_gen; i++) {
        const float *l;
        assert_int_equal(memra_pending_wait(p, &l, NULL), MEMRA_OK);
        out[i] = memra_argmax(l, NV);
        memra_pending_free(p);
        p = NULL;
        if (i + 1 < n_gen)
            assert_int_equal(memra_seq_decode(s, out[i], &p), MEMRA_OK);
    }
    memra_seq_close(s);
}

static void test_generate_keeps_more_requests_than_slots_going_and_matches_a_manual_loop(void **state)
{
    memra_runtime *rt = make_rt(2, 2, 8, NULL, NULL);
    memra_token prompts[5][6], out[5][8], ref[5][8];
    memra_request r[5];
    for (int i = 0; i < 5; i++) {
        api_tiny_prompt(prompts[i], 6, 20 + i);
        r[i] = (memra_request){.prompt = prompts[i], .n_prompt = 6, .n_predict = 8 - (i % 2),
                               .sampling = memra_sampler_greedy_params(), .out = out[i], .out_cap = 8};
    }
    seen s = {0};
    assert_int_equal(memra_generate(rt, r, 5, 4, on_token, &s), MEMRA_OK);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(r[i].status, MEMRA_OK);
        assert_int_equal(r[i].n_out, r[i].n_predict);
        assert_int_equal(s.count[i], r[i].n_predict);
        assert_int_equal(s.first[i], out[i][0]);
        manual_greedy(rt, prompts[i], 6, r[i].n_predict, ref[i]);
        assert_memory_equal(out[i], ref[i], (size_t)r[i].n_predict * sizeof(memra_token));
    }
    memra_seq *a = memra_seq_open(rt), *b = memra_seq_open(rt); /* generate closed every slot it used */
    assert_non_null(a);
    assert_non_null(b);
    memra_runtime_free(rt);
}

static void test_the_token_callback_stops_its_request_only(void **state)
{
    memra_runtime *rt = make_rt(1, 2, 8, NULL, NULL);
    memra_token pr[4] = {3, 4, 5, 6};
    memra_request r[2];
    for (int i = 0; i < 2; i++)
        r[i] = (memra_request){.prompt = pr, .n_prompt = 4, .n_predict = 6, .sampling = memra_sampler_greedy_params()};
    seen s = {.stop_after = 2};
    assert_int_equal(memra_generate(rt, r, 2, 0, on_token, &s), MEMRA_OK);
    assert_int_equal(r[0].n_out, 2);
    assert_int_equal(r[1].n_out, 6);
    memra_runtime_free(rt);
}

static int abort_after(void *user)
{
    atomic_int *calls = user;
    return atomic_fetch_add(calls, 1) >= 2; /* the first two checks pass, the third stops */
}

static void test_the_abort_callback_stops_a_prime_between_chunks(void **state)
{
    atomic_int calls = 0;
    memra_runtime *rt = make_rt(2, 1, 4, abort_after, &calls);
    memra_seq *s = memra_seq_open(rt);
    memra_token t[20];
    api_tiny_prompt(t, 20, 4);
    memra_pending *p = (memra_pending *)&p;
    assert_int_equal(memra_seq_prime(s, t, 20, 4, &p), MEMRA_E_ABORTED);
    assert_null(p);
    assert_int_equal(memra_seq_pos(s), 8); /* two chunks went in before the stop */
    assert_true(strstr(memra_runtime_last_error(rt), "MEMRA_E_ABORTED") != NULL);
    assert_int_equal(memra_seq_decode(s, 1, &p), MEMRA_E_ABORTED);
    memra_runtime_free(rt);
}

static void test_the_abort_callback_stops_generate(void **state)
{
    atomic_int calls = 0;
    memra_runtime *rt = make_rt(1, 2, 8, abort_after, &calls);
    memra_token pr[3] = {7, 8, 9};
    memra_request r[3];
    for (int i = 0; i < 3; i++)
        r[i] = (memra_request){.prompt = pr, .n_prompt = 3, .n_predict = 20, .sampling = memra_sampler_greedy_params()};
    assert_int_equal(memra_generate(rt, r, 3, 0, NULL, NULL), MEMRA_E_ABORTED);
    for (int i = 0; i < 3; i++)
        assert_true(r[i].status == MEMRA_E_ABORTED && r[i].n_out < 20);
    memra_runtime_free(rt);
}

/* ---- threads ---- */

#define CLIENTS 4
#define GEN 6

typedef struct client {
    memra_runtime *rt;
    int id;
    memra_token out[GEN];
    int status;
} client;

static void *client_main(void *arg)
{
    client *c = arg;
    memra_token t[7];
    api_tiny_prompt(t, 7, 30 + c->id);
    memra_seq *s = memra_seq_open(c->rt);
    memra_pending *p = NULL;
    int r = s ? memra_seq_prime(s, t, 7, 3, &p) : memra_last_status();
    for (int i = 0; r == 0 && i < GEN; i++) {
        const float *l;
        if ((r = memra_pending_wait(p, &l, NULL)) != 0)
            break;
        c->out[i] = memra_argmax(l, NV);
        memra_pending_free(p);
        p = NULL;
        if (i + 1 < GEN)
            r = memra_seq_decode(s, c->out[i], &p);
    }
    memra_pending_free(p);
    if (s)
        memra_seq_close(s);
    c->status = r;
    return NULL;
}

static void test_threads_submitting_their_own_sequences_at_once_get_the_serial_tokens(void **state)
{
    memra_runtime *rt = make_rt(2, CLIENTS, 4, NULL, NULL);
    client serial[CLIENTS], par[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        serial[i] = (client){.rt = rt, .id = i};
        client_main(&serial[i]);
        assert_int_equal(serial[i].status, MEMRA_OK);
    }
    pthread_t th[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        par[i] = (client){.rt = rt, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, client_main, &par[i]), 0);
    }
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(par[i].status, MEMRA_OK);
        assert_memory_equal(par[i].out, serial[i].out, sizeof par[i].out);
    }
    memra_counters c;
    memra_runtime_counters(rt, &c);
    assert_int_equal(c.tokens_decoded, 2 * CLIENTS * (GEN - 1));
    memra_runtime_free(rt);
}

typedef struct gen_job {
    memra_runtime *rt;
    int salt, status;
    memra_token out[2][5];
    memra_request r[2];
} gen_job;

static void *gen_main(void *arg)
{
    gen_job *j = arg;
    static const memra_token base[2][4] = {{21, 22, 23, 24}, {31, 32, 33, 34}};
    for (int i = 0; i < 2; i++)
        j->r[i] = (memra_request){.prompt = base[(i + j->salt) % 2], .n_prompt = 4 - j->salt, .n_predict = 5,
                                  .sampling = memra_sampler_greedy_params(), .out = j->out[i], .out_cap = 5};
    j->status = memra_generate(j->rt, j->r, 2, 2, NULL, NULL);
    return NULL;
}

static void test_two_threads_generating_at_once_get_what_each_gets_alone(void **state)
{
    memra_runtime *rt = make_rt(2, 4, 4, NULL, NULL);
    gen_job alone[2] = {{.rt = rt, .salt = 0}, {.rt = rt, .salt = 1}}, both[2] = {{.rt = rt, .salt = 0}, {.rt = rt, .salt = 1}};
    pthread_t th[2];
    for (int k = 0; k < 2; k++) {
        gen_main(&alone[k]);
        assert_int_equal(alone[k].status, MEMRA_OK);
    }
    for (int k = 0; k < 2; k++)
        assert_int_equal(pthread_create(&th[k], NULL, gen_main, &both[k]), 0);
    for (int k = 0; k < 2; k++) {
        pthread_join(th[k], NULL);
        assert_int_equal(both[k].status, MEMRA_OK);
        for (int i = 0; i < 2; i++) {
            assert_int_equal(both[k].r[i].n_out, 5);
            assert_memory_equal(both[k].out[i], alone[k].out[i], sizeof alone[k].out[i]);
        }
    }
    memra_runtime_free(rt);
}

typedef struct waiter {
    memra_pending *p;
    float first;
    int status;
} waiter;

static void *wait_main(void *arg)
{
    waiter *w = arg;
    const float *l;
    w->status = memra_pending_wait(w->p, &l, NULL);
    if (w->status == 0)
        w->first = l[0];
    return NULL;
}

static void test_a_pending_can_be_waited_on_another_thread(void **state)
{
    memra_runtime *rt = make_rt(2, 1, 4, NULL, NULL);
    memra_seq *s = memra_seq_open(rt);
    memra_token t[5] = {11, 12, 13, 14, 15};
    waiter w = {0};
    assert_int_equal(memra_seq_prime(s, t, 5, 2, &w.p), MEMRA_OK);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, wait_main, &w), 0);
    pthread_join(th, NULL);
    assert_int_equal(w.status, MEMRA_OK);
    const float *l;
    assert_int_equal(memra_pending_wait(w.p, &l, NULL), MEMRA_OK);
    assert_true(l[0] == w.first);
    memra_pending_free(w.p);
    memra_runtime_free(rt);
}

static void test_runtime_free_releases_open_sequences_and_unfreed_pendings(void **state)
{
    memra_runtime *rt = make_rt(2, 2, 4, NULL, NULL);
    memra_seq *s = memra_seq_open(rt);
    memra_token t[6] = {1, 2, 3, 4, 5, 6};
    memra_pending *p;
    assert_int_equal(memra_seq_prime(s, t, 6, 2, &p), MEMRA_OK);
    assert_int_equal(memra_seq_decode(s, 7, &p), MEMRA_OK); /* two pendings never freed by the caller */
    memra_runtime_free(rt); /* ASan reports a leak if they stay */
}

static void progress_max(float frac, void *user)
{
    float *m = user;
    assert_true(frac >= 0.0f && frac <= 1.0f && frac >= *m);
    *m = frac;
}

static void test_runtime_create_reports_weight_progress_up_to_one(void **state)
{
    float last = 0.0f;
    memra_runtime_params p = memra_runtime_default_params();
    p.backend = MEMRA_BACKEND_CPU, p.apply_env = 0, p.n_ctx = 16;
    p.progress = progress_max;
    p.progress_user = &last;
    memra_runtime *rt = memra_runtime_create(api_tiny_model, &p);
    assert_non_null(rt);
    assert_true(last == 1.0f);
    assert_int_equal(memra_runtime_n_ctx(rt), 16);
    assert_int_equal(memra_runtime_n_vocab(rt), NV);
    memra_runtime_free(rt);
}

static void test_samplers_are_greedy_at_temperature_zero_and_repeatable_with_a_seed(void **state)
{
    float l[NV];
    for (int i = 0; i < NV; i++)
        l[i] = (float)((i * 7919) % 101) / 10.0f;
    memra_sampler_params gp = memra_sampler_greedy_params();
    memra_sampler *g = memra_sampler_create(&gp, NV);
    assert_int_equal(memra_sampler_sample(g, l), memra_argmax(l, NV));
    memra_sampler_params sp = memra_sampler_default_params();
    sp.seed = 42;
    memra_sampler *a = memra_sampler_create(&sp, NV), *b = memra_sampler_create(&sp, NV);
    for (int i = 0; i < 16; i++) {
        memra_token ta = memra_sampler_sample(a, l), tb = memra_sampler_sample(b, l);
        assert_int_equal(ta, tb);
        assert_true(ta >= 0 && ta < NV);
        memra_sampler_accept(a, ta);
        memra_sampler_accept(b, tb);
    }
    memra_sampler_reset(a);
    memra_sampler_free(a);
    memra_sampler_free(b);
    memra_sampler_free(g);
}

int main(void)
{
    setenv("MEMRA_BACKEND", "cpu", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunked_prime_gives_the_logits_of_a_one_chunk_prime),
        cmocka_unit_test(test_decode_after_prime_matches_priming_one_more_token),
        cmocka_unit_test(test_a_slot_closed_with_steps_in_flight_serves_its_next_user_cleanly),
        cmocka_unit_test(test_a_batch_row_equals_the_same_sequence_decoded_alone),
        cmocka_unit_test(test_a_three_stage_pipeline_gives_the_one_stage_logits_and_counts_its_walks),
        cmocka_unit_test(test_generate_keeps_more_requests_than_slots_going_and_matches_a_manual_loop),
        cmocka_unit_test(test_the_token_callback_stops_its_request_only),
        cmocka_unit_test(test_the_abort_callback_stops_a_prime_between_chunks),
        cmocka_unit_test(test_the_abort_callback_stops_generate),
        cmocka_unit_test(test_threads_submitting_their_own_sequences_at_once_get_the_serial_tokens),
        cmocka_unit_test(test_two_threads_generating_at_once_get_what_each_gets_alone),
        cmocka_unit_test(test_a_pending_can_be_waited_on_another_thread),
        cmocka_unit_test(test_runtime_free_releases_open_sequences_and_unfreed_pendings),
        cmocka_unit_test(test_runtime_create_reports_weight_progress_up_to_one),
        cmocka_unit_test(test_samplers_are_greedy_at_temperature_zero_and_repeatable_with_a_seed),
    };
    return cmocka_run_group_tests(tests, api_tiny_setup, api_tiny_teardown);
}
