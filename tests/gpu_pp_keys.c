/* On a GPU: the keys bound (MEMRA_PP_KEYS) and the head's logits ring (MEMRA_PP_HEAD_RING) under graphs. One
 * sequence decoded through positions 0..T-1 of a 256-position cache on 2 stages crosses the bounds 64 and 128,
 * then has none (256 reaches the cache): its logits are those of the same steps with no bound, no graphs and pool
 * memory for the head, bit for bit; stage 0 captures one graph per bound (3) and the last stage one per bound and
 * logits buffer (6: its head goes into the ring's 2 buffers in turn), each replayed for every step under that
 * bound. And greedy steps fed on the device under graphs, three sequences sharing each graph (the argmax finds each
 * row's token slot through the frame's seq), give the tokens the host feeds without graphs or the ring. Exits 77
 * (skipped) with the reason when there is no CUDA device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "actors/pp.h"
#include "model/gguf_synth.h"
#include "model/llama.h"

enum { T = 200, N_CTX = 256, STAGES = 2 };

static dev_platform *gpu;

/* A runtime of STAGES stages, both on the primary device, over the synthetic model: n_seq sequences, feed, the
 * seams keys, graph and head_ring (0 or 1; no environment: apply_env 0). */
static act_pp *runtime(const mdl_gguf_synth *shape, int n_seq, int feed, int keys, int graph, int head_ring)
{
    dev_err e = {0};
    act_pp_params pp = act_pp_default_params();
    pp.apply_env = 0;
    pp.seams.keys = keys;
    pp.seams.graph = graph;
    pp.seams.head_ring = head_ring;
    pp.synth = shape;
    pp.n_ctx = N_CTX;
    pp.n_seq = n_seq;
    pp.feed = feed;
    pp.config.stages = STAGES;
    act_pp *rt = act_pp_create(gpu, NULL, &pp, &e);
    if (!rt)
        fail_msg("runtime (feed %d): %s", feed, e.msg);
    return rt;
}

/* Decode T steps of sequence 0 with the given seams; every step's logits into out (T x n_vocab). */
static void decode(const mdl_gguf_synth *shape, const char *keys, const char *graph, float *out,
                   act_pp_counters *c)
{
    dev_err e = {0};
    act_pp *rt = runtime(shape, 1, ACT_FEED_OFF, keys[0] == '1', graph[0] == '1', graph[0] == '1');
    for (int t = 0; t < T; t++) {
        int32_t tok = 3 + (t * 7) % 500, seq = 0, pos = t;
        act_pp_step st = {.kind = ACT_STEP_EAGER, .B = 1, .tokens = &tok, .seq = &seq, .pos = &pos};
        act_pending *p = NULL;
        const float *l = NULL;
        if (act_pp_submit(rt, &st, &p, &e) != 0 || act_pending_wait(p, &l, NULL, &e) != 0)
            fail_msg("step %d (keys %s, graph %s): %s", t, keys, graph, e.msg);
        memcpy(out + (size_t)t * shape->n_vocab, l, sizeof(float) * shape->n_vocab);
        act_pending_release(p);
    }
    act_pp_get_counters(rt, c);
    act_pp_destroy(rt);
}

static void test_the_keys_bound_under_graphs_gives_the_unbounded_eager_bits(void **state)
{
    (void)state;
    mdl_gguf_synth shape;
    assert_int_equal(mdl_synth_named("tiny", KRN_BF16, &shape), 0);
    const size_t n = (size_t)T * shape.n_vocab;
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    assert_non_null(a);
    assert_non_null(b);
    act_pp_counters ca, cb;
    decode(&shape, "1", "1", a, &ca);
    decode(&shape, "0", "0", b, &cb);
    for (int t = 0; t < T; t++)
        if (memcmp(a + (size_t)t * shape.n_vocab, b + (size_t)t * shape.n_vocab, sizeof(float) * shape.n_vocab))
            fail_msg("step %d (position %d, bound %d): the logits differ from the unbounded eager pool step's", t, t,
                     act_pp_keys_bound(&(int32_t){t}, 1, N_CTX));
    /* the bounds 64, 128 and none: one graph each on stage 0, one each per logits buffer (2, taken in turn) on the
     * last stage, captured at each key's second step; every other step a replay on each stage */
    printf("  graphs: %llu captured, %llu replays\n", (unsigned long long)ca.graph_captures,
           (unsigned long long)ca.graph_replays);
    assert_int_equal(ca.graph_captures, 3 * (STAGES - 1) + 3 * 2);
    assert_int_equal(ca.graph_replays, (uint64_t)T * STAGES - ca.graph_captures);
    assert_int_equal(cb.graph_captures, 0);
    assert_int_equal(ca.head_ring_steps, T); /* every step's head in the last stage's graph */
    assert_int_equal(cb.head_ring_steps, 0);
    free(a);
    free(b);
}

/* Greedy decode of sequences 0..2: a one-row step per sequence in turn, and every fourth step one row of each
 * (sequences 0, 1, 2: one run of token slots). fed = 0: the host carries every token, no graphs, pool memory for
 * the head; 1: every step after a sequence's first is fed on the device, with graphs and the head's ring. */
enum { FS = 3, FT = 40 };
static void decode_fed(const mdl_gguf_synth *shape, int fed, int32_t out[FT][FS], act_pp_counters *c)
{
    dev_err e = {0};
    act_pp *rt = runtime(shape, FS, fed ? ACT_FEED_ON : ACT_FEED_OFF, 1, fed, fed);
    int32_t last[FS] = {11, 12, 13}, pos[FS] = {0, 0, 0};
    for (int i = 0; i < FT; i++) {
        const int B = i % 4 == 3 ? FS : 1;
        int32_t sq[FS], ps[FS], tok[FS];
        for (int b = 0; b < B; b++) {
            sq[b] = B == 1 ? i % FS : b;
            ps[b] = pos[sq[b]];
            tok[b] = last[sq[b]];
        }
        int feed = fed;
        for (int b = 0; b < B; b++)
            feed = feed && ps[b] > 0; /* a sequence's first step carries its token */
        act_pp_step st = {.kind = ACT_STEP_EAGER, .B = B, .tokens = feed ? NULL : tok, .seq = sq, .pos = ps,
                          .logits = ACT_LOGITS_ARGMAX, .feed = feed};
        act_pending *p = NULL;
        const int32_t *t;
        if (act_pp_submit(rt, &st, &p, &e) != 0 || act_pending_wait_tokens(p, &t, NULL, &e) != 0)
            fail_msg("step %d (fed %d): %s", i, fed, e.msg);
        for (int b = 0; b < B; b++) {
            last[sq[b]] = out[i][b] = t[b];
            pos[sq[b]]++;
        }
        act_pending_release(p);
    }
    act_pp_get_counters(rt, c);
    act_pp_destroy(rt);
}

static void test_fed_steps_under_graphs_give_the_host_fed_tokens(void **state)
{
    (void)state;
    mdl_gguf_synth shape;
    assert_int_equal(mdl_synth_named("tiny", KRN_BF16, &shape), 0);
    static int32_t host[FT][FS], dev[FT][FS];
    act_pp_counters ch, cd;
    decode_fed(&shape, 0, host, &ch);
    decode_fed(&shape, 1, dev, &cd);
    for (int i = 0; i < FT; i++)
        for (int b = 0; b < (i % 4 == 3 ? FS : 1); b++)
            if (host[i][b] != dev[i][b])
                fail_msg("step %d row %d: token %d fed by the host, %d fed on the device under graphs", i, b,
                         host[i][b], dev[i][b]);
    printf("  fed: %llu steps, graphs %llu captured, %llu replays, head ring %llu steps\n",
           (unsigned long long)cd.fed_steps, (unsigned long long)cd.graph_captures,
           (unsigned long long)cd.graph_replays, (unsigned long long)cd.head_ring_steps);
    assert_int_equal(cd.fed_steps, FT - FS); /* liveness: all but each sequence's first step were fed */
    assert_int_equal(cd.head_ring_steps, FT); /* every step's head (1 or 3 rows) in a ring buffer */
    assert_true(cd.graph_captures > 0);
    assert_int_equal(cd.graph_replays, (uint64_t)FT * STAGES - cd.graph_captures); /* each key's first step eager */
    assert_int_equal(ch.graph_captures, 0);
}

int main(void)
{
    dev_err e = {0};
    if (!(gpu = dev_platform_open(DEV_KIND_CUDA, 0, &e))) {
        printf("gpu_pp_keys: skipped: no CUDA device (%s)\n", e.msg);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_keys_bound_under_graphs_gives_the_unbounded_eager_bits),
        cmocka_unit_test(test_fed_steps_under_graphs_give_the_host_fed_tokens),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    dev_platform_close(gpu);
    return r;
}
