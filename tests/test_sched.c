/* The serving scheduler (memra_generate, memra_server): requests packed into micro-batches give every request
 * the tokens it gets alone (CPU kernels are batch-invariant: each row's bits do not depend on the others), on
 * 1, 2 and 4 stages; requests that arrive while others decode, one cancelled mid-way and one whose prompt is
 * longer than a step all end once, with nothing lost or repeated, and every slot comes back; bad requests,
 * ids and settings are refused by name. CPU backend, every leg. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "memra/memra.h"
#include "support/api_tiny.h"

#define NV API_TINY_NV
#define NREQ 256
#define GEN 10

static memra_runtime *make_rt(int stages, int n_seq, int max_rows)
{
    memra_runtime_params p = api_tiny_params(stages);
    p.n_seq = n_seq;
    p.max_rows = max_rows;
    memra_runtime *rt = memra_runtime_create(api_tiny_model, &p);
    if (!rt)
        fail_msg("runtime: %s", memra_last_error());
    return rt;
}

/* Request i of the suite: a prompt of 3..20 tokens, 1..GEN tokens to make; every third one sampled (seeded),
 * every fifth one greedy over penalized logits (the host path), the others greedy on the device. */
typedef struct req_set {
    memra_token prompt[NREQ][24];
    memra_token out[NREQ][GEN];
    memra_request r[NREQ];
} req_set;

static void make_requests(req_set *q, int n)
{
    for (int i = 0; i < n; i++) {
        const int np = 3 + (i * 7) % 18;
        api_tiny_prompt(q->prompt[i], np, 200 + i);
        q->r[i] = (memra_request){.prompt = q->prompt[i], .n_prompt = np, .n_predict = 1 + (i * 5) % GEN,
                                  .sampling = memra_sampler_greedy_params(), .out = q->out[i], .out_cap = GEN};
        if (i % 3 == 1) {
            q->r[i].sampling = memra_sampler_default_params();
            q->r[i].sampling.seed = 1000 + (uint64_t)i;
        } else if (i % 5 == 2) {
            q->r[i].sampling.repeat_penalty = 1.2f;
        }
    }
}

/* Each request alone, through memra_generate on a one-stage runtime: the reference. */
static void run_alone(req_set *ref, int n)
{
    memra_runtime *rt = make_rt(1, 1, 8);
    for (int i = 0; i < n; i++)
        if (memra_generate(rt, &ref->r[i], 1, 0, NULL, NULL) != MEMRA_OK || ref->r[i].status != MEMRA_OK)
            fail_msg("request %d alone: %s", i, memra_last_error());
    memra_runtime_free(rt);
}

static void assert_same_outputs(const req_set *got, const req_set *ref, int n, const char *what)
{
    for (int i = 0; i < n; i++) {
        if (got->r[i].status != ref->r[i].status || got->r[i].n_out != ref->r[i].n_out)
            fail_msg("%s: request %d: status %d, %d tokens; alone: status %d, %d tokens", what, i, got->r[i].status,
                     got->r[i].n_out, ref->r[i].status, ref->r[i].n_out);
        for (int k = 0; k < ref->r[i].n_out; k++)
            if (got->out[i][k] != ref->out[i][k])
                fail_msg("%s: request %d token %d: %d, alone %d", what, i, k, got->out[i][k], ref->out[i][k]);
    }
}

static void test_64_requests_through_the_scheduler_equal_each_run_alone_on_1_2_and_4_stages(void **state)
{
    (void)state;
    enum { N64 = 64 };
    static req_set ref, got;
    make_requests(&ref, N64);
    run_alone(&ref, N64);
    static const int stages[] = {1, 2, 4};
    for (int k = 0; k < 3; k++) {
        /* 16 slots for 64 requests: requests wait for slots, join as others end, share steps with prompts */
        memra_runtime *rt = make_rt(stages[k], 16, 24);
        make_requests(&got, N64);
        assert_int_equal(memra_generate(rt, got.r, N64, 0, NULL, NULL), MEMRA_OK);
        char what[64];
        snprintf(what, sizeof what, "generate, %d stages", stages[k]);
        assert_same_outputs(&got, &ref, N64, what);
        memra_counters c;
        assert_int_equal(memra_runtime_counters(rt, &c), MEMRA_OK);
        uint64_t rows = 0;
        for (int i = 0; i < N64; i++)
            rows += (uint64_t)got.r[i].n_prompt + (uint64_t)got.r[i].n_out - 1;
        assert_int_equal(c.tokens_primed + c.tokens_decoded, rows); /* every row once: none lost, none again */
        assert_true(c.steps_done < rows / 4); /* packed: far fewer steps than rows */
        if (stages[k] > 1)
            assert_int_equal(c.split_steps, c.steps_done); /* every step walked the stages */
        memra_runtime_free(rt);
    }
}

static void test_256_slots_hold_256_requests_at_once_each_equal_to_alone(void **state)
{
    (void)state;
    static req_set ref, got;
    make_requests(&ref, NREQ);
    run_alone(&ref, NREQ);
    memra_runtime *rt = make_rt(2, NREQ, 512); /* every request admitted at once: steps of up to 512 rows */
    make_requests(&got, NREQ);
    assert_int_equal(memra_generate(rt, got.r, NREQ, 0, NULL, NULL), MEMRA_OK);
    assert_same_outputs(&got, &ref, NREQ, "256 slots");
    memra_counters c;
    assert_int_equal(memra_runtime_counters(rt, &c), MEMRA_OK);
    assert_true(c.steps_done <= 2 * GEN + 8); /* all 256 in flight together: about GEN steps per micro-batch */
    memra_runtime_free(rt);
}

/* ---- the server: staggered arrivals, a cancel, a long prompt ---- */

typedef struct watch {
    atomic_int tokens[NREQ];  /* callback calls per request index */
    atomic_int cancel_sent;   /* the test has cancelled request `hold` */
    int hold;                 /* this request's callback, at its second token, waits for cancel_sent */
    int64_t ids[NREQ];
} watch;

typedef struct cb_arg {
    watch *w;
    int i;
} cb_arg;

static void sleep_ms(int ms);

static int on_tok(void *user, int64_t id, memra_token t, const char *piece, int n_piece)
{
    (void)id, (void)t, (void)piece, (void)n_piece;
    cb_arg *a = user;
    /* the held request stops here (on the scheduler's thread) until the test has cancelled it: mid-way for sure */
    if (atomic_fetch_add(&a->w->tokens[a->i], 1) == 1 && a->i == a->w->hold)
        for (int spins = 0; !atomic_load(&a->w->cancel_sent) && spins < 20000; spins++)
            sleep_ms(1);
    return 0;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

typedef struct submitter {
    memra_server *srv;
    req_set *q;
    watch *w;
    cb_arg *args;
    int first, n;
} submitter;

/* Submits its requests one by one, a little apart, while the others decode. */
static void *submit_some(void *arg)
{
    submitter *s = arg;
    for (int i = s->first; i < s->first + s->n; i++) {
        if (memra_server_submit(s->srv, &s->q->r[i], on_tok, &s->args[i], &s->w->ids[i]) != MEMRA_OK)
            return (void *)1;
        sleep_ms(i % 3);
    }
    return NULL;
}

static void test_requests_arriving_while_others_decode_one_cancelled_one_long_all_end_once(void **state)
{
    (void)state;
    enum { N = 24, CANCEL = 5, LONG = 9 };
    static req_set ref, got;
    static watch w;
    memset(&w, 0, sizeof w);
    w.hold = -1;
    make_requests(&ref, N);
    memra_token long_prompt[40];
    api_tiny_prompt(long_prompt, 40, 77);
    ref.r[LONG].prompt = long_prompt; /* 40 prompt rows: five steps of 8 at most, beside the others' decode rows */
    ref.r[LONG].n_prompt = 40;
    ref.r[LONG].n_predict = GEN;
    ref.r[CANCEL].n_predict = GEN;
    ref.r[CANCEL].sampling = memra_sampler_greedy_params();
    run_alone(&ref, N);
    make_requests(&got, N);
    got.r[LONG] = ref.r[LONG];
    got.r[LONG].out = got.out[LONG];
    got.r[CANCEL] = ref.r[CANCEL];
    got.r[CANCEL].out = got.out[CANCEL];

    memra_runtime *rt = make_rt(2, 6, 8); /* 6 slots for 24 requests; steps of 8 rows */
    memra_server_params sp = memra_server_default_params();
    sp.prompt_chunk = 4;
    memra_server *srv = memra_server_create(rt, &sp);
    assert_non_null(srv);
    cb_arg args[N];
    for (int i = 0; i < N; i++)
        args[i] = (cb_arg){&w, i};
    /* the cancelled request goes in first; its callback holds it at its second token until it is cancelled */
    w.hold = CANCEL;
    assert_int_equal(memra_server_submit(srv, &got.r[CANCEL], on_tok, &args[CANCEL], &w.ids[CANCEL]), MEMRA_OK);
    for (int spins = 0; atomic_load(&w.tokens[CANCEL]) < 2 && spins < 20000; spins++)
        sleep_ms(1);
    assert_int_equal(atomic_load(&w.tokens[CANCEL]), 2);
    assert_int_equal(memra_server_poll(srv, w.ids[CANCEL]), 0);
    assert_int_equal(memra_server_cancel(srv, w.ids[CANCEL]), MEMRA_OK);
    atomic_store(&w.cancel_sent, 1);
    /* the others arrive from two threads, a little apart, while the earlier ones decode */
    submitter a = {srv, &got, &w, args, 0, CANCEL}, b = {srv, &got, &w, args, CANCEL + 1, N - CANCEL - 1};
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, submit_some, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, submit_some, &b), 0);
    void *ra, *rb;
    pthread_join(ta, &ra);
    pthread_join(tb, &rb);
    assert_null(ra);
    assert_null(rb);
    for (int i = 0; i < N; i++) {
        const int st = memra_server_wait(srv, w.ids[i]);
        assert_int_equal(st, got.r[i].status);
        assert_int_equal(memra_server_wait(srv, w.ids[i]), MEMRA_E_INVAL); /* the id is forgotten */
    }
    /* the cancelled one: aborted, its tokens so far those it gets alone; every other one as alone */
    assert_int_equal(got.r[CANCEL].status, MEMRA_E_ABORTED);
    assert_int_equal(got.r[CANCEL].n_out, 2);
    assert_int_equal(memra_server_cancel(srv, w.ids[CANCEL]), MEMRA_E_INVAL); /* waited for: unknown */
    assert_memory_equal(got.out[CANCEL], ref.out[CANCEL], (size_t)got.r[CANCEL].n_out * sizeof(memra_token));
    got.r[CANCEL] = ref.r[CANCEL];
    memcpy(got.out[CANCEL], ref.out[CANCEL], sizeof got.out[CANCEL]);
    assert_same_outputs(&got, &ref, N, "server");
    for (int i = 0; i < N; i++) /* each token reached its callback once */
        if (i != CANCEL)
            assert_int_equal(atomic_load(&w.tokens[i]), ref.r[i].n_out);
    memra_server_stats st;
    assert_int_equal(memra_server_get_stats(srv, &st), MEMRA_OK);
    assert_int_equal(st.submitted, N);
    assert_int_equal(st.ended, N);
    assert_int_equal(st.cancelled, 1);
    assert_int_equal(st.waiting + st.running, 0);
    assert_true(st.mixed_steps > 0);      /* prompt rows rode beside decode rows */
    assert_true(st.max_step_rows > 1);    /* and rows were packed */
    assert_true(st.max_step_rows <= 8);   /* within the step's budget */
    memra_server_free(srv);
    memra_seq *seqs[6]; /* every slot came back */
    for (int i = 0; i < 6; i++)
        assert_non_null(seqs[i] = memra_seq_open(rt));
    for (int i = 0; i < 6; i++)
        memra_seq_close(seqs[i]);
    memra_runtime_free(rt);
}

static void test_freeing_a_busy_server_ends_every_request_and_frees_every_slot(void **state)
{
    (void)state;
    static req_set q;
    make_requests(&q, 12);
    memra_runtime *rt = make_rt(2, 4, 8);
    memra_server *srv = memra_server_create(rt, NULL);
    assert_non_null(srv);
    int64_t id;
    for (int i = 0; i < 12; i++)
        assert_int_equal(memra_server_submit(srv, &q.r[i], NULL, NULL, &id), MEMRA_OK);
    memra_server_free(srv); /* most are waiting or mid-way: each ends, nothing hangs */
    for (int i = 0; i < 12; i++)
        assert_true(q.r[i].status == MEMRA_OK || q.r[i].status == MEMRA_E_ABORTED);
    memra_seq *seqs[4];
    for (int i = 0; i < 4; i++)
        assert_non_null(seqs[i] = memra_seq_open(rt));
    for (int i = 0; i < 4; i++)
        memra_seq_close(seqs[i]);
    memra_runtime_free(rt);
}

static void test_bad_requests_ids_and_settings_are_refused_by_name(void **state)
{
    (void)state;
    memra_runtime *rt = make_rt(2, 4, 8);
    memra_server_params sp = memra_server_default_params();
    sp.micro_batches = 5; /* more than the 4 slots */
    assert_null(memra_server_create(rt, &sp));
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "micro_batches = 5");
    sp = memra_server_default_params();
    sp.step_rows = 9;
    assert_null(memra_server_create(rt, &sp));
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "step_rows = 9");
    assert_null(memra_server_create(NULL, NULL));
    memra_server *srv = memra_server_create(rt, NULL);
    assert_non_null(srv);
    memra_token pr[3] = {1, 2, NV};
    memra_request r = {.prompt = pr, .n_prompt = 3, .n_predict = 2, .sampling = memra_sampler_greedy_params()};
    int64_t id = 7;
    assert_int_equal(memra_server_submit(srv, &r, NULL, NULL, &id), MEMRA_E_INVAL);
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "prompt");
    assert_int_equal(id, 0);
    pr[2] = 3;
    r.sampling.top_p = -1.0f;
    assert_int_equal(memra_server_submit(srv, &r, NULL, NULL, &id), MEMRA_E_INVAL);
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "top_p");
    r.sampling = memra_sampler_greedy_params();
    r.n_predict = -1;
    assert_int_equal(memra_server_submit(srv, &r, NULL, NULL, &id), MEMRA_E_INVAL);
    assert_int_equal(memra_server_submit(srv, NULL, NULL, NULL, &id), MEMRA_E_INVAL);
    r.n_predict = 2;
    assert_int_equal(memra_server_submit(srv, &r, NULL, NULL, NULL), MEMRA_E_INVAL);
    assert_int_equal(memra_server_wait(srv, 12345), MEMRA_E_INVAL);
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "no request 12345");
    assert_int_equal(memra_server_cancel(srv, 12345), MEMRA_E_INVAL);
    assert_int_equal(memra_server_poll(srv, 12345), MEMRA_E_INVAL);
    /* a prompt that does not fit in n_ctx (64) ends with MEMRA_E_FULL; a good one then runs */
    memra_token big[70];
    api_tiny_prompt(big, 70, 3);
    memra_request rb = {.prompt = big, .n_prompt = 70, .n_predict = 2, .sampling = memra_sampler_greedy_params()};
    assert_int_equal(memra_server_submit(srv, &rb, NULL, NULL, &id), MEMRA_OK);
    assert_int_equal(memra_server_wait(srv, id), MEMRA_E_FULL);
    assert_int_equal(memra_server_submit(srv, &r, NULL, NULL, &id), MEMRA_OK);
    assert_int_equal(memra_server_wait(srv, id), MEMRA_OK);
    assert_int_equal(r.n_out, 2);
    memra_server_free(srv);
    memra_runtime_free(rt);

    memra_runtime_params p = api_tiny_params(2);
    p.micro_batches = 9; /* more than n_seq (4) */
    assert_null(memra_runtime_create(api_tiny_model, &p));
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "micro_batches = 9");
    p = api_tiny_params(2);
    p.apply_env = 1;
    setenv("MEMRA_PP_MICRO_BATCHES", "0", 1);
    assert_null(memra_runtime_create(api_tiny_model, &p));
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "MEMRA_PP_MICRO_BATCHES=\"0\"");
    unsetenv("MEMRA_PP_MICRO_BATCHES");
    setenv("MEMRA_BATCH_INVARIANT", "yes", 1);
    assert_null(memra_runtime_create(api_tiny_model, &p));
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "MEMRA_BATCH_INVARIANT=\"yes\"");
    unsetenv("MEMRA_BATCH_INVARIANT");
    p.batch_invariant = 2;
    assert_null(memra_runtime_create(api_tiny_model, &p));
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "batch_invariant = 2");
    p.batch_invariant = 0;
    setenv("MEMRA_PP_MICRO_BATCHES", "2", 1);
    memra_runtime *door = memra_runtime_create(api_tiny_model, &p);
    unsetenv("MEMRA_PP_MICRO_BATCHES");
    assert_non_null(door);
    memra_server *s2 = memra_server_create(door, NULL);
    memra_server_stats st;
    assert_int_equal(memra_server_get_stats(s2, &st), MEMRA_OK);
    assert_int_equal(st.micro_batches, 2);
    memra_server_free(s2);
    memra_runtime_free(door);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_64_requests_through_the_scheduler_equal_each_run_alone_on_1_2_and_4_stages),
        cmocka_unit_test(test_256_slots_hold_256_requests_at_once_each_equal_to_alone),
        cmocka_unit_test(test_requests_arriving_while_others_decode_one_cancelled_one_long_all_end_once),
        cmocka_unit_test(test_freeing_a_busy_server_ends_every_request_and_frees_every_slot),
        cmocka_unit_test(test_bad_requests_ids_and_settings_are_refused_by_name),
    };
    return cmocka_run_group_tests(tests, api_tiny_setup, api_tiny_teardown);
}
