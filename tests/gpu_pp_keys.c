/* On a GPU: the keys bound (MEMRA_PP_KEYS) and the head's logits ring (MEMRA_PP_HEAD_RING) under graphs. One
 * sequence decoded through positions 0..T-1 of a 256-position cache on 2 stages crosses the bounds 64 and 128,
 * then has none (256 reaches the cache): its logits are those of the same steps with no bound, no graphs and pool
 * memory for the head, bit for bit, and each stage captures one graph per bound (3; the last stage's with the head
 * and its ring buffer: one step at a time always finds buffer 0 free), replaying it for every step under that
 * bound. Exits 77 (skipped) with the reason when there is no
 * CUDA device. */
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

/* Decode T steps of sequence 0 with the given seams; every step's logits into out (T x n_vocab). */
static void decode(const mdl_gguf_synth *shape, const char *keys, const char *graph, float *out,
                   act_pp_counters *c)
{
    setenv("MEMRA_PP_KEYS", keys, 1); /* seams: read by act_pp_submit on every step */
    setenv("MEMRA_PP_GRAPH", graph, 1);
    setenv("MEMRA_PP_HEAD_RING", graph, 1);
    dev_err e = {0};
    act_pp_params pp = act_pp_default_params();
    pp.apply_env = 0;
    pp.synth = shape;
    pp.n_ctx = N_CTX;
    pp.config.stages = STAGES; /* both on the primary device */
    act_pp *rt = act_pp_create(gpu, NULL, &pp, &e);
    if (!rt)
        fail_msg("runtime: %s", e.msg);
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
    unsetenv("MEMRA_PP_KEYS");
    unsetenv("MEMRA_PP_GRAPH");
    unsetenv("MEMRA_PP_HEAD_RING");
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
    /* the bounds 64, 128 and none, one graph each a stage; every step a replay on each stage */
    printf("  graphs: %llu captured, %llu replays\n", (unsigned long long)ca.graph_captures,
           (unsigned long long)ca.graph_replays);
    assert_int_equal(ca.graph_captures, 3 * STAGES);
    assert_int_equal(ca.graph_replays, (uint64_t)T * STAGES);
    assert_int_equal(cb.graph_captures, 0);
    assert_int_equal(ca.head_ring_steps, T); /* every step's head in the last stage's graph */
    assert_int_equal(cb.head_ring_steps, 0);
    free(a);
    free(b);
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
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    dev_platform_close(gpu);
    return r;
}
