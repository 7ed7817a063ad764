/* Fed steps (act_pp_step.feed, act_pp_params.feed): greedy decoding with each sequence's next step submitted
 * before its current one is waited, the token read on the device. The token streams equal those of steps
 * fed by the host, at N = 1..3 stages on one CPU device and across devices, with two sequences interleaved,
 * and the stream-order race checker sees no race; a fed step behind a failed producer completes (its result
 * means nothing) and the pipeline keeps serving; the misuses are refused with a message. Every leg. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "actors/pp.h"
#include "model/gguf_synth.h"
#include "model/llama.h"
#include "support/gguf_tiny.h"

enum { S = 2, T = 10 }; /* sequences, tokens each */
static char model_path[256];
static dev_platform *plat;
static const char *doors[] = {"MEMRA_PP_STAGES", "MEMRA_PP_DEVICES", "MEMRA_PP_OVERLAP", "MEMRA_BATCH_PP",
                              "MEMRA_PP_STREAMS", "MEMRA_PP_SPLITS", "MEMRA_PP_SPLIT"};

static void clear_doors(void)
{
    for (size_t i = 0; i < sizeof doors / sizeof doors[0]; i++)
        unsetenv(doors[i]);
}

static int setup(void **state)
{
    (void)state;
    clear_doors();
    dev_err e = {0};
    if (!(plat = dev_platform_open(DEV_KIND_CPU, 4, &e)))
        return -1;
    mdl_gguf_synth p;
    mdl_gguf_synth_defaults(&p);
    p.n_layer = 6;
    return gguf_tiny_write_temp(model_path, sizeof model_path, &p, &e) ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(model_path);
    dev_platform_close(plat);
    return 0;
}

static act_pp *create(int feed, dev_err *e)
{
    act_pp_params p = act_pp_default_params();
    p.feed = feed;
    return act_pp_create(plat, model_path, &p, e);
}

/* One ARGMAX decode row of sequence s at pos: with the host's token, or fed (tok < 0). */
static act_pending *submit(act_pp *rt, int32_t tok, int32_t s, int32_t pos)
{
    act_pp_step st = {.kind = ACT_STEP_EAGER, .B = 1, .tokens = tok >= 0 ? &tok : NULL, .seq = &s, .pos = &pos,
                      .logits = ACT_LOGITS_ARGMAX, .feed = tok < 0};
    act_pending *p = NULL;
    dev_err e = {0};
    if (act_pp_submit(rt, &st, &p, &e) != 0)
        fail_msg("submit (seq %d pos %d%s): %s", s, pos, tok < 0 ? ", fed" : "", e.msg);
    return p;
}

/* A feeding runtime of 2 stages (the doors cleared, then MEMRA_PP_STAGES=2). */
static act_pp *two_stage_feeding(dev_err *e)
{
    clear_doors();
    setenv("MEMRA_PP_STAGES", "2", 1);
    act_pp *rt = create(ACT_FEED_ON, e);
    if (!rt)
        fail_msg("create: %s", e->msg);
    return rt;
}

static int32_t token_of(act_pending *p)
{
    const int32_t *t;
    dev_err e = {0};
    if (act_pending_wait_tokens(p, &t, NULL, &e) != 0)
        fail_msg("wait: %s", e.msg);
    const int32_t v = t[0];
    act_pending_release(p);
    return v;
}

/* out[s][i]: S sequences, T greedy tokens each from token 7 + s at position 0, lanes interleaved. fed = 0:
 * each step carries the token the host read; 1: the first step of each sequence does, every later one is
 * fed and submitted while the step before it is in flight. */
static void decode(int fed, int32_t out[S][T])
{
    dev_err e = {0};
    act_pp *rt = create(fed ? ACT_FEED_ON : ACT_FEED_OFF, &e);
    if (!rt)
        fail_msg("create: %s", e.msg);
    act_pending *cur[S], *next[S] = {NULL};
    for (int s = 0; s < S; s++) {
        cur[s] = submit(rt, 7 + s, s, 0);
        if (fed)
            next[s] = submit(rt, -1, s, 1);
    }
    for (int i = 0; i < T; i++)
        for (int s = 0; s < S; s++) {
            out[s][i] = token_of(cur[s]);
            if (fed) {
                cur[s] = next[s];
                next[s] = i + 2 < T ? submit(rt, -1, s, i + 2) : NULL;
            } else {
                cur[s] = i + 1 < T ? submit(rt, out[s][i], s, i + 1) : NULL;
            }
        }
    act_pp_destroy(rt);
}

static void test_fed_steps_give_the_host_fed_tokens_at_every_placement(void **state)
{
    (void)state;
    static const char *stages[] = {NULL, "2", "3", "2", "3"};
    static const char *devices[] = {NULL, NULL, NULL, "0,1", "0,1,2"};
    for (size_t c = 0; c < sizeof stages / sizeof stages[0]; c++) {
        clear_doors();
        if (stages[c]) {
            setenv("MEMRA_PP_STAGES", stages[c], 1);
            setenv("MEMRA_PP_OVERLAP", "1", 1);
        }
        if (devices[c])
            setenv("MEMRA_PP_DEVICES", devices[c], 1);
        int32_t host[S][T], fed[S][T];
        dev_race_check_enable(plat, 1);
        const uint64_t races = dev_race_count(plat);
        decode(0, host);
        decode(1, fed);
        if (dev_race_count(plat) != races) {
            char msg[512];
            dev_race_first(plat, msg, sizeof msg);
            fail_msg("N=%s devices %s: %s", stages[c] ? stages[c] : "1", devices[c] ? devices[c] : "0", msg);
        }
        for (int s = 0; s < S; s++)
            for (int i = 0; i < T; i++)
                if (host[s][i] != fed[s][i])
                    fail_msg("N=%s devices %s: sequence %d token %d: %d fed by the host, %d fed on the device",
                             stages[c] ? stages[c] : "1", devices[c] ? devices[c] : "0", s, i, host[s][i], fed[s][i]);
    }
    clear_doors();
}

/* Steps of 3 rows, one per sequence, the rows' sequences in a new order each step: {2, 0, 1} (two runs of
 * consecutive sequences, embedded from their slots separately), {0, 1, 2} (one run), {1, 0, 2} and {2, 1, 0}
 * (three). out[i][b]: step i's token of row b. fed = 0: every step carries the host's tokens; 1: the first
 * does, every later one is fed. */
enum { BR = 3 };
static void decode_rows(int fed, int32_t out[T][BR])
{
    static const int32_t order[4][BR] = {{2, 0, 1}, {0, 1, 2}, {1, 0, 2}, {2, 1, 0}};
    dev_err e = {0};
    act_pp *rt = create(fed ? ACT_FEED_ON : ACT_FEED_OFF, &e);
    if (!rt)
        fail_msg("create: %s", e.msg);
    int32_t last[BR] = {7, 8, 9}; /* by sequence: the token its next row carries */
    for (int i = 0; i < T; i++) {
        const int32_t *sq = order[i % 4];
        int32_t tok[BR], pos[BR] = {i, i, i};
        for (int b = 0; b < BR; b++)
            tok[b] = last[sq[b]];
        const int feed = fed && i > 0;
        act_pp_step st = {.kind = ACT_STEP_EAGER, .B = BR, .tokens = feed ? NULL : tok, .seq = sq, .pos = pos,
                          .logits = ACT_LOGITS_ARGMAX, .feed = feed};
        act_pending *p = NULL;
        const int32_t *t;
        if (act_pp_submit(rt, &st, &p, &e) != 0 || act_pending_wait_tokens(p, &t, NULL, &e) != 0)
            fail_msg("step %d%s: %s", i, feed ? " (fed)" : "", e.msg);
        for (int b = 0; b < BR; b++)
            last[sq[b]] = out[i][b] = t[b];
        act_pending_release(p);
    }
    act_pp_counters c;
    act_pp_get_counters(rt, &c);
    assert_int_equal(c.fed_steps, fed ? T - 1 : 0); /* liveness: the fed arm's steps did embed on the device */
    act_pp_destroy(rt);
}

static void test_fed_steps_of_several_rows_embed_each_row_from_its_sequence(void **state)
{
    (void)state;
    for (int n = 1; n <= 2; n++) {
        clear_doors();
        setenv("MEMRA_PP_STAGES", n == 1 ? "1" : "2", 1);
        int32_t host[T][BR], fed[T][BR];
        decode_rows(0, host);
        decode_rows(1, fed);
        for (int i = 0; i < T; i++)
            for (int b = 0; b < BR; b++)
                if (host[i][b] != fed[i][b])
                    fail_msg("N=%d step %d row %d: %d fed by the host, %d fed on the device", n, i, b, host[i][b],
                             fed[i][b]);
    }
    clear_doors();
}

/* A producer that fails: its pending says why; the fed step behind it completes (it embedded whatever the
 * slot held) and a host-fed redo puts the sequence back on track. */
static void test_a_failed_producer_does_not_stall_the_fed_step(void **state)
{
    (void)state;
    dev_err e = {0};
    act_pp *rt = two_stage_feeding(&e);
    const int32_t t0 = token_of(submit(rt, 7, 0, 0));
    act_pp_inject_stage_failure(rt, 1);
    act_pending *bad = submit(rt, t0, 0, 1), *fed = submit(rt, -1, 0, 2);
    const int32_t *t;
    dev_err we = {0};
    assert_int_equal(act_pending_wait_tokens(bad, &t, NULL, &we), MEMRA_E_DEVICE);
    assert_non_null(strstr(we.msg, "injected failure"));
    act_pending_release(bad);
    assert_int_equal(act_pending_wait_tokens(fed, &t, NULL, &e), 0); /* done, meaningless */
    act_pending_release(fed);
    const int32_t t1 = token_of(submit(rt, t0, 0, 1)); /* the redo, then fed again from it */
    const int32_t t2 = token_of(submit(rt, -1, 0, 2));
    act_pp_destroy(rt);
    int32_t ref[S][T];
    clear_doors();
    decode(0, ref);
    assert_int_equal(t0, ref[0][0]);
    assert_int_equal(t1, ref[0][1]);
    assert_int_equal(t2, ref[0][2]);
}

/* The device holds the token of a sequence's latest ARGMAX step only: after a step with other logits (the host
 * samples its token) a fed step of that sequence is refused; after the next ARGMAX step it is fed again. */
static void test_a_fed_step_after_a_step_with_other_logits_is_refused(void **state)
{
    (void)state;
    dev_err e = {0};
    act_pp *rt = two_stage_feeding(&e);
    const int32_t t0 = token_of(submit(rt, 7, 0, 0));
    int32_t s = 0, pos = 1, tok = t0;
    act_pp_step all = {.kind = ACT_STEP_EAGER, .B = 1, .tokens = &tok, .seq = &s, .pos = &pos,
                       .logits = ACT_LOGITS_ALL};
    act_pending *p = NULL;
    assert_int_equal(act_pp_submit(rt, &all, &p, &e), 0);
    assert_int_equal(act_pending_wait(p, NULL, NULL, &e), 0);
    act_pending_release(p);
    act_pp_step fed = {.kind = ACT_STEP_EAGER, .B = 1, .seq = &s, .pos = &(int32_t){2}, .logits = ACT_LOGITS_ARGMAX,
                       .feed = 1};
    dev_err e1 = {0};
    assert_int_equal(act_pp_submit(rt, &fed, &p, &e1), MEMRA_E_INVAL);
    assert_non_null(strstr(e1.msg, "sequence 0 has no ARGMAX step"));
    (void)token_of(submit(rt, t0, 0, 1)); /* greedy again: the next step may be fed */
    (void)token_of(submit(rt, -1, 0, 2));
    act_pp_destroy(rt);
    clear_doors();
}

static void test_misused_fed_steps_are_refused_with_a_message(void **state)
{
    (void)state;
    clear_doors();
    setenv("MEMRA_PP_STAGES", "2", 1);
    dev_err e = {0};
    act_pp *plain = create(ACT_FEED_OFF, &e), *rt = create(ACT_FEED_ON, &e);
    assert_true(plain && rt);
    int32_t s = 0, pos = 0, tok = 3;
    act_pp_step st = {.kind = ACT_STEP_EAGER, .B = 1, .seq = &s, .pos = &pos, .logits = ACT_LOGITS_ARGMAX,
                      .feed = 1};
    act_pending *p = NULL;
    dev_err e1 = {0}, e2 = {0}, e3 = {0}, e4 = {0}, e5 = {0};
    assert_int_equal(act_pp_submit(plain, &st, &p, &e1), MEMRA_E_INVAL);
    assert_non_null(strstr(e1.msg, "act_pp_params.feed"));
    assert_int_equal(act_pp_submit(rt, &st, &p, &e2), MEMRA_E_INVAL); /* nothing decoded greedily yet */
    assert_non_null(strstr(e2.msg, "sequence 0 has no ARGMAX step"));
    (void)token_of(submit(rt, tok, 0, 0));
    st.kind = ACT_STEP_PRIME;
    assert_int_equal(act_pp_submit(rt, &st, &p, &e3), MEMRA_E_INVAL);
    assert_non_null(strstr(e3.msg, "EAGER or BATCH"));
    st.kind = ACT_STEP_BATCH;
    act_pp_seams seams, batch_off;
    act_pp_get_seams(rt, &seams);
    batch_off = seams;
    batch_off.batch_pp = 0; /* the batch seam's unsplit body has no fed tokens */
    assert_int_equal(act_pp_set_seams(rt, &batch_off, &e4), 0);
    assert_int_equal(act_pp_submit(rt, &st, &p, &e4), MEMRA_E_INVAL);
    assert_non_null(strstr(e4.msg, "stage actors only"));
    assert_int_equal(act_pp_set_seams(rt, &seams, &e4), 0);
    st.kind = ACT_STEP_EAGER;
    mdl_gguf_synth shape; /* room for a row of logits: a refusal that broke would write, not smash the stack */
    mdl_gguf_synth_defaults(&shape);
    float *out = calloc((size_t)shape.n_vocab, sizeof *out);
    assert_non_null(out);
    assert_int_equal(act_pp_run_unsplit(rt, &st, out, &e5), MEMRA_E_INVAL);
    assert_non_null(strstr(e5.msg, "fed step"));
    free(out);
    assert_null(p);
    act_pp_destroy(plain);
    act_pp_destroy(rt);
    /* the one-stream seam runs steps on the host's clock: ON is refused at create, AUTO turns feeding off */
    setenv("MEMRA_PP_STREAMS", "0", 1);
    act_pp_params pp = act_pp_default_params();
    pp.feed = ACT_FEED_ON;
    dev_err e6 = {0};
    assert_null(act_pp_create(plat, model_path, &pp, &e6));
    assert_non_null(strstr(e6.msg, "MEMRA_PP_STREAMS=0"));
    pp.feed = ACT_FEED_AUTO;
    act_pp *seam = act_pp_create(plat, model_path, &pp, &e);
    assert_non_null(seam);
    assert_int_equal(act_pp_feeds(seam), 0);
    act_pp_destroy(seam);
    pp.feed = 7;
    dev_err e7 = {0};
    assert_null(act_pp_create(plat, model_path, &pp, &e7));
    assert_non_null(strstr(e7.msg, "feed = 7"));
    clear_doors();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fed_steps_give_the_host_fed_tokens_at_every_placement),
        cmocka_unit_test(test_fed_steps_of_several_rows_embed_each_row_from_its_sequence),
        cmocka_unit_test(test_a_failed_producer_does_not_stall_the_fed_step),
        cmocka_unit_test(test_a_fed_step_after_a_step_with_other_logits_is_refused),
        cmocka_unit_test(test_misused_fed_steps_are_refused_with_a_message),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
