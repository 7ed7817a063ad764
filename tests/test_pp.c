/* The N-stage pipeline on tiny synthetic models (every leg, sanitizers included): gates at N = 2..8 over
 * cut lists and placements, every tensor type, remote-read accounting, the A/B seams and their refusals,
 * the one-stream seam, the soak, and pending logits dropped without a wait. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "tools/memra-gate/gate.h"
#include "kernels/quant.h"
#include "model/gguf_synth.h"
#include "model/llama.h"

static const char *doors[] = {"MEMRA_PP_STAGES", "MEMRA_PP_SPLITS", "MEMRA_PP_SPLIT", "MEMRA_PP_DEVICES",
                              "MEMRA_PP_SHARD", "MEMRA_PP_SLOTS", "MEMRA_PP_STREAMS", "MEMRA_PP_OVERLAP",
                              "MEMRA_BATCH_PP", "MEMRA_PP_ALLOW_UNSPLIT_BATCH", "MEMRA_SPEC_PP",
                              "MEMRA_PRIME_PP", "MEMRA_PRIME_PIPE", "MEMRA_KV_TYPE", "MEMRA_ACT_TYPE",
                              "MEMRA_PP_HEAD_RING"};

static char model_path[256];
static dev_platform *plat;

static void clear_doors(void)
{
    for (size_t i = 0; i < sizeof doors / sizeof doors[0]; i++)
        unsetenv(doors[i]);
}

/* Writes a tiny model of weight type `type` with n_layer layers into a temp file. */
static void write_model(char *path, size_t cap, int type, int n_layer, const char *tag)
{
    mdl_gguf_synth p;
    mdl_gguf_synth_defaults(&p);
    p.n_layer = n_layer;
    p.type = type;
    p.pre = "smollm";
    if (krn_type_block_elems(type) == 256) /* K-quants need rows that are multiples of 256 */
        p.n_embd = 256, p.n_ff = 256, p.n_head = 4, p.n_head_kv = 2;
    snprintf(path, cap, "%s/memra-test-pp-%d-%s-%s.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid(), tag, krn_type_name(type));
    dev_err e = {0};
    if (mdl_gguf_synth_write(path, &p, &e) != 0)
        fail_msg("writing the tiny model: %s", e.msg);
}

static int setup(void **state)
{
    (void)state;
    clear_doors();
    setenv("MEMRA_CPU_DEVICES", "8", 1);
    dev_err e = {0};
    plat = dev_platform_open(DEV_KIND_CPU, 8, &e);
    if (!plat)
        return -1;
    write_model(model_path, sizeof model_path, KRN_Q4_1, 8, "main");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(model_path);
    dev_platform_close(plat);
    return 0;
}

/* Creates a runtime with the doors currently set, runs one gate, returns the report (asserts it ran). */
static act_gate_report gate_on(const char *path, act_gate_arm arm, int steps)
{
    dev_err e = {0};
    act_pp_params pp = act_pp_default_params();
    pp.max_rows = 32;
    act_pp *rt = act_pp_create(plat, path, &pp, &e);
    if (!rt)
        fail_msg("runtime: %s", e.msg);
    act_gate_params gp = act_gate_default_params(arm);
    gp.steps = steps;
    gp.prompt = 12;
    gp.chunk = 4;
    gp.runs = 20;
    act_gate_report rep;
    if (act_gate_run(rt, &gp, &rep, &e) != 0)
        fail_msg("gate %s could not run: %s", act_gate_arm_name(arm), e.msg);
    act_pp_destroy(rt);
    return rep;
}

static void expect_pass(const char *what, act_gate_arm arm, int steps)
{
    act_gate_report r = gate_on(model_path, arm, steps);
    if (!r.pass)
        fail_msg("%s: %s gate failed: %s", what, act_gate_arm_name(arm), r.msg);
}

/* The keys bound each step's walk passes to attention (MEMRA_PP_KEYS): a power of two from 64 above every row's
 * position, none (0) once it would reach the cache. */
static void test_keys_bound_is_a_power_of_two_above_every_position(void **state)
{
    (void)state;
    const struct {
        int32_t pos[3];
        int B, n_ctx, want;
    } t[] = {
        {{0}, 1, 1024, 64},          {{63}, 1, 1024, 64},       {{64}, 1, 1024, 128},
        {{5, 200, 17}, 3, 1024, 256}, {{511}, 1, 1024, 512},    {{512}, 1, 1024, 0},
        {{1000}, 1, 1024, 0},         {{511}, 1, 513, 512},      {{10}, 1, 64, 0},
        {{3, 9}, 2, 100, 64},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (act_pp_keys_bound(t[i].pos, t[i].B, t[i].n_ctx) != t[i].want)
            fail_msg("case %zu: act_pp_keys_bound = %d, want %d", i,
                     act_pp_keys_bound(t[i].pos, t[i].B, t[i].n_ctx), t[i].want);
}

static void test_door_shut_stages_one_and_unsplit_arm_give_identical_logits(void **state)
{
    (void)state;
    dev_err e = {0};
    float ref[3][512], got[2][3][512];
    int n_vocab = 0;
    for (int v = 0; v < 3; v++) { /* v0: door shut, v1: MEMRA_PP_STAGES=1, v2: the unsplit reference arm */
        clear_doors();
        if (v == 1)
            setenv("MEMRA_PP_STAGES", "1", 1);
        act_pp *rt = act_pp_create(plat, model_path, NULL, &e);
        assert_non_null(rt);
        assert_int_equal(act_pp_stages(rt), 1);
        n_vocab = mdl_model_hparams(act_pp_model(rt))->n_vocab;
        assert_true(n_vocab <= 512);
        int32_t tok = 7, seq = 0;
        for (int32_t pos = 0; pos < 3; pos++) {
            act_pp_step st = {.kind = ACT_STEP_EAGER, .B = 1, .tokens = &tok, .seq = &seq, .pos = &pos};
            if (v == 2) {
                assert_int_equal(act_pp_run_unsplit(rt, &st, ref[pos], &e), 0);
                continue;
            }
            act_pending *p;
            const float *l;
            assert_int_equal(act_pp_submit(rt, &st, &p, &e), 0);
            assert_int_equal(act_pending_wait(p, &l, NULL, &e), 0);
            memcpy(got[v][pos], l, (size_t)n_vocab * sizeof(float));
            act_pending_release(p);
        }
        act_pp_counters c;
        act_pp_get_counters(rt, &c);
        assert_int_equal(c.split_steps, 0); /* N=1 is the door shut, not a split */
        act_pp_destroy(rt);
    }
    for (int pos = 0; pos < 3; pos++) {
        assert_memory_equal(got[0][pos], ref[pos], (size_t)n_vocab * sizeof(float));
        assert_memory_equal(got[1][pos], ref[pos], (size_t)n_vocab * sizeof(float));
    }
}

static void test_a_gate_with_the_door_shut_fails_as_vacuous(void **state)
{
    (void)state;
    clear_doors();
    act_gate_report r = gate_on(model_path, ACT_GATE_EAGER, 2);
    assert_false(r.pass);
    assert_non_null(strstr(r.msg, "door is shut"));
}

/* N = 2..8 over the 8-layer model: default cuts and an explicit uneven list, placements shared (all on
 * cpu:0), one device per stage, and mixed; eager and pipelined replay. */
static void test_eager_and_replay_gates_pass_for_two_to_eight_stages(void **state)
{
    (void)state;
    static const char *uneven[] = {NULL, NULL, "7", "1,6", "1,2,7", "2,3,4,6", "1,2,3,4,7", "1,2,3,4,5,7", "1,2,3,4,5,6,7"};
    for (int N = 2; N <= 8; N++)
        for (int place = 0; place < 3; place++)
            for (int cuts = 0; cuts < 2; cuts++) {
                clear_doors();
                char n[8], devs[64] = "", what[160];
                snprintf(n, sizeof n, "%d", N);
                setenv("MEMRA_PP_STAGES", n, 1);
                setenv("MEMRA_PP_OVERLAP", N % 2 ? "1" : "0", 1);
                if (cuts)
                    setenv("MEMRA_PP_SPLITS", uneven[N], 1);
                for (int s = 0; s < N && place; s++) /* 1: one device per stage; 2: mixed pairs */
                    snprintf(devs + strlen(devs), sizeof devs - strlen(devs), "%s%d", s ? "," : "",
                             place == 1 ? s : s / 2);
                if (place)
                    setenv("MEMRA_PP_DEVICES", devs, 1);
                snprintf(what, sizeof what, "N=%d devices=%s cuts=%s", N, place ? devs : "(shared)",
                         cuts ? uneven[N] : "(even)");
                expect_pass(what, ACT_GATE_EAGER, 3);
                expect_pass(what, ACT_GATE_REPLAY, 6);
            }
}

static void test_every_tensor_type_splits_bit_identically(void **state)
{
    (void)state;
    static const int types[] = {KRN_F32, KRN_F16, KRN_BF16, KRN_Q8_0, KRN_Q4_0, KRN_Q4_1, KRN_Q4_K, KRN_Q5_K, KRN_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char path[256];
        write_model(path, sizeof path, types[i], 3, "type");
        clear_doors();
        setenv("MEMRA_PP_STAGES", "3", 1);
        setenv("MEMRA_PP_DEVICES", "0,1,2", 1);
        setenv("MEMRA_PP_OVERLAP", "1", 1);
        act_gate_report a = gate_on(path, ACT_GATE_EAGER, 3), b = gate_on(path, ACT_GATE_REPLAY, 5);
        unlink(path);
        if (!a.pass || !b.pass)
            fail_msg("%s: eager %s / replay %s", krn_type_name(types[i]), a.msg, b.msg);
    }
}

static void test_sharded_split_reads_nothing_remote_and_shard_off_does(void **state)
{
    (void)state;
    clear_doors();
    setenv("MEMRA_PP_STAGES", "2", 1);
    setenv("MEMRA_PP_DEVICES", "0,1", 1);
    act_gate_report r = gate_on(model_path, ACT_GATE_EAGER, 2);
    assert_true(r.pass);
    assert_int_equal(r.split_remote_bytes, 0);
    setenv("MEMRA_PP_SHARD", "0", 1); /* the M1 bring-up placement: stage 1 reads cpu:0's weights */
    r = gate_on(model_path, ACT_GATE_EAGER, 2);
    assert_true(r.pass);
    assert_true(r.split_remote_bytes > 0);
}

static void test_arms_batch_prime_prime_batch_and_spec_pass(void **state)
{
    (void)state;
    static const char *place[] = {NULL, NULL, "0,1", "0,1,2", "0,1,1,2", "4,3,2,1,0", "0,0,1,1,2,2",
                                  "0,1,2,3,4,5,6", "7,6,5,4,3,2,1,0"};
    for (int N = 2; N <= 8; N++) {
        clear_doors();
        char n[8];
        snprintf(n, sizeof n, "%d", N);
        setenv("MEMRA_PP_STAGES", n, 1);
        setenv("MEMRA_PP_DEVICES", place[N], 1);
        expect_pass(n, ACT_GATE_BATCH, 3);
        expect_pass(n, ACT_GATE_PRIME, 2);
        expect_pass(n, ACT_GATE_PRIME_BATCH, 2);
        expect_pass(n, ACT_GATE_SPEC, 8);
        setenv("MEMRA_PRIME_PIPE", "0", 1); /* serial chunk walk: still split, no overlap required */
        expect_pass(n, ACT_GATE_PRIME, 2);
    }
}

static void test_seams_off_make_the_gates_red_and_batch_is_refused_when_sharded(void **state)
{
    (void)state;
    clear_doors();
    setenv("MEMRA_PP_STAGES", "2", 1);
    setenv("MEMRA_PRIME_PP", "0", 1); /* prime goes unsplit: no refusal, but the gate's counter stays */
    act_gate_report r = gate_on(model_path, ACT_GATE_PRIME, 1);
    assert_false(r.pass);
    assert_non_null(strstr(r.msg, "PRIME_SPLIT_CHUNKS did not advance"));

    clear_doors();
    setenv("MEMRA_PP_STAGES", "2", 1);
    setenv("MEMRA_PP_DEVICES", "0,1", 1);
    setenv("MEMRA_BATCH_PP", "0", 1);
    dev_err e = {0};
    act_pp *rt = act_pp_create(plat, model_path, NULL, &e);
    assert_non_null(rt);
    int32_t tok[2] = {3, 4}, seq[2] = {0, 1}, pos[2] = {0, 0};
    act_pp_step st = {.kind = ACT_STEP_BATCH, .B = 2, .tokens = tok, .seq = seq, .pos = pos};
    act_pending *p = NULL;
    assert_int_equal(act_pp_submit(rt, &st, &p, &e), MEMRA_E_REFUSED);
    assert_null(p);
    assert_non_null(strstr(e.msg, "decode_step_batch (MEMRA_BATCH_PP=0) refused"));
    assert_non_null(strstr(e.msg, "Use MEMRA_BATCH_PP=1"));
    setenv("MEMRA_PP_ALLOW_UNSPLIT_BATCH", "1", 1); /* the measurement override runs it, reading remotely */
    dev_err e2 = {0};
    assert_int_equal(act_pp_submit(rt, &st, &p, &e2), MEMRA_E_REFUSED); /* seams are read at create... */
    assert_int_equal(act_pp_reload_doors(rt, &e2), 0);                  /* ...and by a reload */
    dev_counters c0, c1;
    dev_device_counters(dev_platform_device(plat, 0), &c0);
    assert_int_equal(act_pp_submit(rt, &st, &p, &e2), 0);
    assert_int_equal(act_pending_wait(p, NULL, NULL, &e2), 0);
    act_pending_release(p);
    dev_device_counters(dev_platform_device(plat, 0), &c1);
    assert_true(c1.remote_read_bytes > c0.remote_read_bytes);
    act_pp_destroy(rt);
}

static void test_one_stream_seam_is_bit_identical_and_refuses_cross_device(void **state)
{
    (void)state;
    clear_doors();
    setenv("MEMRA_PP_STAGES", "3", 1);
    setenv("MEMRA_PP_STREAMS", "0", 1);
    expect_pass("streams=0", ACT_GATE_EAGER, 3);
    setenv("MEMRA_PP_DEVICES", "0,1,2", 1);
    dev_err e = {0};
    assert_null(act_pp_create(plat, model_path, NULL, &e));
    assert_int_equal(e.code, MEMRA_E_INVAL);
    assert_non_null(strstr(e.msg, "MEMRA_PP_STREAMS=0"));
}

static void test_soak_twenty_runs_with_random_delays_are_bit_identical(void **state)
{
    (void)state;
    clear_doors();
    setenv("MEMRA_PP_STAGES", "3", 1);
    setenv("MEMRA_PP_DEVICES", "0,1,1", 1); /* a cross-device and a same-device boundary */
    setenv("MEMRA_PP_OVERLAP", "1", 1);
    act_gate_report r = gate_on(model_path, ACT_GATE_SOAK, 6);
    if (!r.pass)
        fail_msg("soak: %s", r.msg);
    assert_int_equal(r.runs_ok, 20);
}

static void test_pending_logits_dropped_without_wait_are_safe(void **state)
{
    (void)state;
    clear_doors();
    setenv("MEMRA_PP_STAGES", "2", 1);
    setenv("MEMRA_PP_OVERLAP", "1", 1);
    dev_err e = {0};
    act_pp *rt = act_pp_create(plat, model_path, NULL, &e);
    assert_non_null(rt);
    int32_t tok = 5, seq = 1;
    for (int32_t pos = 0; pos < 6; pos++) {
        act_pp_step st = {.kind = ACT_STEP_EAGER, .B = 1, .tokens = &tok, .seq = &seq, .pos = &pos};
        act_pending *p;
        assert_int_equal(act_pp_submit(rt, &st, &p, &e), 0);
        act_pending_release(p); /* never waited */
    }
    assert_int_equal(act_pp_drain(rt, &e), 0);
    act_pp_counters c;
    act_pp_get_counters(rt, &c);
    assert_int_equal(c.steps_done, 6);
    act_pp_destroy(rt);
}

/* One step of `mode` (ALL or ARGMAX) at position pos for rows of sequences 0..B-1, token 5 + row. */
static act_pending *submit_rows(act_pp *rt, act_logits_mode mode, int B, int32_t pos)
{
    int32_t tok[4], seq[4], ps[4];
    for (int b = 0; b < B; b++)
        tok[b] = 5 + b, seq[b] = b, ps[b] = pos;
    act_pp_step st = {.kind = ACT_STEP_EAGER, .B = B, .tokens = tok, .seq = seq, .pos = ps, .logits = mode};
    act_pending *p = NULL;
    dev_err e = {0};
    if (act_pp_submit(rt, &st, &p, &e) != 0)
        fail_msg("submit (mode %d): %s", (int)mode, e.msg);
    return p;
}

/* ACT_LOGITS_ARGMAX gives each row the index of its largest logit (ties: the lowest) of the same step in
 * mode ALL — pipelined over 2 stages and on the one-stream seam; the other reader is refused with a message,
 * the pending still usable; the unsplit reference arm refuses the mode. */
static void test_argmax_mode_reads_back_each_rows_greedy_token(void **state)
{
    (void)state;
    for (int seam = 0; seam < 2; seam++) {
        clear_doors();
        setenv("MEMRA_PP_STAGES", "2", 1);
        setenv("MEMRA_PP_OVERLAP", "1", 1);
        if (seam)
            setenv("MEMRA_PP_STREAMS", "0", 1);
        dev_err e = {0};
        act_pp *rt = act_pp_create(plat, model_path, NULL, &e);
        assert_non_null(rt);
        const int B = 3, n_vocab = mdl_model_hparams(act_pp_model(rt))->n_vocab;
        for (int32_t pos = 0; pos < 4; pos++) {
            /* the same step twice (its KV rows are rewritten with the same bits): logits, then argmax */
            act_pending *pa = submit_rows(rt, ACT_LOGITS_ALL, B, pos);
            const float *l;
            int rows = 0;
            assert_int_equal(act_pending_wait(pa, &l, &rows, &e), 0);
            assert_int_equal(rows, B);
            act_pending *pm = submit_rows(rt, ACT_LOGITS_ARGMAX, B, pos);
            const int32_t *tk;
            assert_int_equal(act_pending_wait_tokens(pm, &tk, &rows, &e), 0);
            assert_int_equal(rows, B);
            for (int b = 0; b < B; b++) {
                int best = 0;
                for (int i = 1; i < n_vocab; i++)
                    if (l[(size_t)b * n_vocab + i] > l[(size_t)b * n_vocab + best])
                        best = i;
                if (tk[b] != best)
                    fail_msg("seam %d pos %d row %d: argmax mode %d, argmax of the logits %d", seam, (int)pos, b,
                             tk[b], best);
            }
            const float *none = l;
            assert_int_equal(act_pending_wait(pm, &none, NULL, &e), MEMRA_E_INVAL);
            assert_null(none);
            assert_non_null(strstr(e.msg, "act_pending_wait_tokens"));
            assert_int_equal(act_pending_wait_tokens(pa, &tk, NULL, &e), MEMRA_E_INVAL);
            assert_int_equal(act_pending_wait_tokens(pm, &tk, NULL, &e), 0); /* still usable */
            act_pending_release(pa);
            act_pending_release(pm);
        }
        int32_t tok = 1, seq = 0, pos = 0;
        act_pp_step st = {.kind = ACT_STEP_EAGER, .B = 1, .tokens = &tok, .seq = &seq, .pos = &pos,
                          .logits = ACT_LOGITS_ARGMAX};
        float out[1];
        assert_int_equal(act_pp_run_unsplit(rt, &st, out, &e), MEMRA_E_INVAL);
        assert_non_null(strstr(e.msg, "ARGMAX"));
        act_pp_destroy(rt);
    }
}

/* MEMRA_PP_HEAD_RING: steps of up to 4 output rows write one of the last stage's 2 fixed logits buffers (pool
 * memory while both are out), and larger ones pool memory. 12 steps of 1, 3 and 6 rows, logits and argmax
 * alternating, all in flight at once over 2 stages on 2 devices with jittered actors and stream ops: every result
 * has the bytes of the ring-off run (pool memory for all), the stream-order checker reports no race between a
 * buffer's readback and the next head that writes it, and the counter says which steps used the ring. */
static void test_the_head_ring_serves_steps_in_flight_with_the_bits_of_pool_memory(void **state)
{
    (void)state;
    enum { STEPS = 12 };
    static float out[2][STEPS][6 * 512];
    uint64_t ring_steps[2];
    for (int ring = 0; ring < 2; ring++) {
        clear_doors();
        setenv("MEMRA_PP_STAGES", "2", 1);
        setenv("MEMRA_PP_DEVICES", "0,1", 1);
        setenv("MEMRA_PP_OVERLAP", "1", 1);
        setenv("MEMRA_PP_HEAD_RING", ring ? "1" : "0", 1);
        act_pp_params prm = act_pp_default_params();
        prm.n_seq = 8;
        dev_err e = {0};
        act_pp *rt = act_pp_create(plat, model_path, &prm, &e);
        if (!rt)
            fail_msg("create (ring %d): %s", ring, e.msg);
        const int n_vocab = mdl_model_hparams(act_pp_model(rt))->n_vocab;
        assert_true(n_vocab <= 512);
        act_pp_set_jitter(rt, 200, 7 + (uint64_t)ring);
        const uint64_t races0 = dev_race_count(plat);
        act_pending *p[STEPS];
        for (int i = 0; i < STEPS; i++) {
            static const int rows[3] = {1, 3, 6};
            int32_t tok[6], seq[6], pos[6];
            const int B = rows[i % 3];
            for (int b = 0; b < B; b++)
                tok[b] = 3 + i + b, seq[b] = (b + i) % 8, pos[b] = i / 3;
            act_pp_step st = {.kind = ACT_STEP_EAGER, .B = B, .tokens = tok, .seq = seq, .pos = pos,
                              .logits = i % 2 ? ACT_LOGITS_ARGMAX : ACT_LOGITS_ALL};
            if (act_pp_submit(rt, &st, &p[i], &e) != 0)
                fail_msg("submit %d (ring %d): %s", i, ring, e.msg);
        }
        for (int i = 0; i < STEPS; i++) {
            int n = 0;
            if (i % 2) {
                const int32_t *tk;
                assert_int_equal(act_pending_wait_tokens(p[i], &tk, &n, &e), 0);
                memcpy(out[ring][i], tk, (size_t)n * sizeof(int32_t));
            } else {
                const float *l;
                assert_int_equal(act_pending_wait(p[i], &l, &n, &e), 0);
                memcpy(out[ring][i], l, (size_t)n * (size_t)n_vocab * sizeof(float));
            }
            act_pending_release(p[i]);
        }
        act_pp_set_jitter(rt, 0, 0);
        unsetenv("MEMRA_PP_HEAD_RING"); /* read at create: the next loop's runtime sets its own */
        assert_int_equal(dev_race_count(plat), races0);
        act_pp_counters c;
        act_pp_get_counters(rt, &c);
        ring_steps[ring] = c.head_ring_steps;
        act_pp_destroy(rt);
    }
    assert_int_equal(ring_steps[0], 0);
    assert_true(ring_steps[1] >= 1); /* liveness: the ring arm did write a fixed buffer */
    assert_true(ring_steps[1] <= 8); /* never the 6-row steps (more rows than a buffer holds) */
    assert_memory_equal(out[0], out[1], sizeof out[0]);
}

static void test_a_failed_stage_fails_its_step_and_the_pipeline_keeps_serving(void **state)
{
    (void)state;
    clear_doors();
    setenv("MEMRA_PP_STAGES", "3", 1);
    setenv("MEMRA_PP_DEVICES", "0,1,2", 1);
    setenv("MEMRA_PP_SLOTS", "1", 1); /* one slot: a lost credit would stall every later step */
    dev_err e = {0};
    act_pp *rt = act_pp_create(plat, model_path, NULL, &e);
    assert_non_null(rt);
    int n_vocab = mdl_model_hparams(act_pp_model(rt))->n_vocab;
    static float ref[512];
    int32_t tok = 9, seq = 0;
    for (int32_t pos = 0; pos < 5; pos++) {
        act_pp_step st = {.kind = ACT_STEP_EAGER, .B = 1, .tokens = &tok, .seq = &seq, .pos = &pos};
        act_pending *p[2];
        const float *l;
        if (pos == 2)
            act_pp_inject_stage_failure(rt, 1); /* stage 1 gives up on this step */
        assert_int_equal(act_pp_submit(rt, &st, &p[0], &e), 0);
        dev_err we = {0};
        int r = act_pending_wait(p[0], &l, NULL, &we);
        if (pos == 2) {
            assert_int_equal(r, MEMRA_E_DEVICE);
            assert_non_null(strstr(we.msg, "injected failure"));
            act_pending_release(p[0]);
            /* redo the step: the failed one wrote stage 0's cache rows, the redo overwrites them */
            assert_int_equal(act_pp_submit(rt, &st, &p[0], &e), 0);
            assert_int_equal(act_pending_wait(p[0], &l, NULL, &we), 0);
        } else {
            assert_int_equal(r, 0);
        }
        assert_int_equal(act_pp_run_unsplit(rt, &st, ref, &e), 0);
        assert_memory_equal(l, ref, (size_t)n_vocab * sizeof(float));
        act_pending_release(p[0]);
    }
    act_pp_destroy(rt);
}

/* Failures on the last stage after it took a logits buffer (MEMRA_PP_HEAD_RING) give the buffer back: three in a
 * row, more than the ring holds, and every later step still runs, with the unsplit arm's logits, and still finds
 * a buffer (one step at a time: HEAD for a step reaches the last stage before the next step does). */
static void test_late_failures_on_the_last_stage_give_its_logits_buffer_back(void **state)
{
    (void)state;
    clear_doors();
    setenv("MEMRA_PP_STAGES", "2", 1);
    setenv("MEMRA_PP_DEVICES", "0,1", 1);
    dev_err e = {0};
    act_pp *rt = act_pp_create(plat, model_path, NULL, &e);
    assert_non_null(rt);
    const int n_vocab = mdl_model_hparams(act_pp_model(rt))->n_vocab;
    static float ref[512];
    int32_t tok = 4, seq = 0;
    for (int32_t pos = 0; pos < 4; pos++) {
        act_pp_step st = {.kind = ACT_STEP_EAGER, .B = 1, .tokens = &tok, .seq = &seq, .pos = &pos};
        act_pending *p;
        const float *l;
        for (int f = 0; pos == 1 && f < 3; f++) {
            act_pp_inject_stage_failure_late(rt, 1);
            assert_int_equal(act_pp_submit(rt, &st, &p, &e), 0);
            dev_err we = {0};
            assert_int_equal(act_pending_wait(p, &l, NULL, &we), MEMRA_E_DEVICE);
            assert_non_null(strstr(we.msg, "injected failure, late"));
            act_pending_release(p);
        }
        assert_int_equal(act_pp_submit(rt, &st, &p, &e), 0);
        assert_int_equal(act_pending_wait(p, &l, NULL, &e), 0);
        assert_int_equal(act_pp_run_unsplit(rt, &st, ref, &e), 0);
        assert_memory_equal(l, ref, (size_t)n_vocab * sizeof(float));
        act_pending_release(p);
    }
    act_pp_counters c;
    act_pp_get_counters(rt, &c);
    assert_int_equal(c.head_ring_steps, 4 + 3); /* the failed steps took one; no buffer was lost */
    act_pp_destroy(rt);
}

static void test_timestamp_liveness_counts_every_walk_without_host_markers(void **state)
{
    (void)state;
    clear_doors();
    setenv("MEMRA_PP_STAGES", "3", 1);
    setenv("MEMRA_PP_DEVICES", "0,1,2", 1);
    dev_err e = {0};
    act_pp_params pp = act_pp_default_params();
    pp.stamps = 1; /* the CUDA default, forced on the CPU backend */
    act_pp *rt = act_pp_create(plat, model_path, &pp, &e);
    assert_non_null(rt);
    act_gate_params gp = act_gate_default_params(ACT_GATE_EAGER);
    gp.steps = 5;
    act_gate_report rep;
    assert_int_equal(act_gate_run(rt, &gp, &rep, &e), 0);
    if (!rep.pass)
        fail_msg("eager gate with stamps: %s", rep.msg);
    assert_int_equal(rep.counter_after - rep.counter_before, 5);
    for (int s = 0; s < 3; s++) {
        act_pp_stage_stats ss;
        act_pp_get_stage_stats(rt, s, &ss);
        assert_int_equal(ss.walks, 5);
        assert_true(ss.busy_ns > 0);
    }
    act_pp_seams seams;
    act_pp_get_seams(rt, &seams);
    seams.markers = 0; /* measurement mode: nothing counted, still bit-identical */
    assert_int_equal(act_pp_set_seams(rt, &seams, &e), 0);
    assert_int_equal(act_gate_run(rt, &gp, &rep, &e), 0);
    assert_false(rep.pass);
    assert_int_equal(rep.mismatches, 0);
    assert_non_null(strstr(rep.msg, "did not advance"));
    act_pp_destroy(rt);
}

/* Decode logits of 12 prompt tokens then 3 steps, door shut, KV cache of `kv_type`, matmul inputs of
 * `act_type`, into out[3][n_vocab]. */
static int decode_logits(int kv_type, int act_type, float out[3][512])
{
    dev_err e = {0};
    act_pp_params pp = act_pp_default_params();
    pp.kv_type = kv_type;
    pp.act_type = act_type;
    act_pp *rt = act_pp_create(plat, model_path, &pp, &e);
    if (!rt)
        fail_msg("runtime (kv %d): %s", kv_type, e.msg);
    const int n_vocab = mdl_model_hparams(act_pp_model(rt))->n_vocab;
    assert_true(n_vocab <= 512);
    int32_t seq = 0;
    for (int32_t pos = 0; pos < 15; pos++) {
        int32_t tok = (pos * 37 + 5) % n_vocab;
        act_pp_step st = {.kind = ACT_STEP_EAGER, .B = 1, .tokens = &tok, .seq = &seq, .pos = &pos};
        act_pending *p;
        const float *l;
        assert_int_equal(act_pp_submit(rt, &st, &p, &e), 0);
        assert_int_equal(act_pending_wait(p, &l, NULL, &e), 0);
        if (pos >= 12)
            memcpy(out[pos - 12], l, (size_t)n_vocab * sizeof(float));
        act_pending_release(p);
    }
    act_pp_destroy(rt);
    return n_vocab;
}

/* A 16-bit element type behind a door (MEMRA_KV_TYPE: the KV cache, act = 0; MEMRA_ACT_TYPE: the matmul inputs,
 * act = 1), f16 then bf16: the split gates stay bit-identical over 3 stages on 3 devices (every arm for the
 * activations); the logits move off f32's (the rounding is real) by less than tol[t] of the largest |logit|; a
 * bad door value and a bad act_pp_params field are refused naming what is allowed. */
static void check_16bit_type(const char *door, int act, const float tol[2])
{
    static const char *names[2] = {"f16", "bf16"};
    static const int types[2] = {KRN_F16, KRN_BF16};
    float ref[3][512], got[3][512];
    clear_doors();
    const int n_vocab = decode_logits(KRN_F32, KRN_F32, ref);
    float mx = 0.0f;
    for (int i = 0; i < 3 * n_vocab; i++)
        mx = fmaxf(mx, fabsf(ref[i / n_vocab][i % n_vocab]));
    for (int t = 0; t < 2; t++) {
        clear_doors();
        setenv(door, names[t], 1);
        setenv("MEMRA_PP_STAGES", "3", 1);
        setenv("MEMRA_PP_DEVICES", "0,1,2", 1);
        setenv("MEMRA_PP_OVERLAP", "1", 1);
        expect_pass(names[t], ACT_GATE_EAGER, 3);
        expect_pass(names[t], ACT_GATE_REPLAY, 5);
        expect_pass(names[t], ACT_GATE_PRIME, 3);
        if (act) {
            expect_pass(names[t], ACT_GATE_BATCH, 3);
            expect_pass(names[t], ACT_GATE_SPEC, 8);
        }
        clear_doors();
        decode_logits(act ? KRN_F32 : types[t], act ? types[t] : KRN_F32, got);
        float d = 0.0f;
        for (int r = 0; r < 3; r++)
            for (int i = 0; i < n_vocab; i++)
                d = fmaxf(d, fabsf(got[r][i] - ref[r][i]));
        if (!(d > 0.0f) || !(d <= tol[t] * mx))
            fail_msg("%s=%s: max |logit - f32's| = %g (max |logit| %g): want > 0 and <= %g", door, names[t], d, mx,
                     tol[t] * mx);
    }
    clear_doors();
    setenv(door, "f8", 1);
    dev_err e = {0};
    char want[96];
    snprintf(want, sizeof want, "%s=f8: allowed f32 (default), f16, bf16", door);
    assert_null(act_pp_create(plat, model_path, NULL, &e));
    assert_string_equal(e.msg, want);
    clear_doors();
    act_pp_params pp = act_pp_default_params();
    *(act ? &pp.act_type : &pp.kv_type) = KRN_Q8_0;
    dev_err e2 = {0};
    assert_null(act_pp_create(plat, model_path, &pp, &e2));
    assert_non_null(strstr(e2.msg, act ? "act_type=8" : "kv_type=8"));
    assert_non_null(strstr(e2.msg, door));
}

static void test_kv_cache_types_split_bit_identically_and_stay_near_f32(void **state)
{
    (void)state;
    static const float tol[2] = {2e-3f, 2e-2f}; /* of the largest |logit|: 2^-11 and 2^-8 per cached value */
    check_16bit_type("MEMRA_KV_TYPE", 0, tol);
}

static void test_activation_types_split_bit_identically_and_stay_near_f32(void **state)
{
    (void)state;
    static const float tol[2] = {5e-3f, 5e-2f}; /* of the largest |logit|: 2^-11 and 2^-8 per input value */
    check_16bit_type("MEMRA_ACT_TYPE", 1, tol);
}

static void test_bad_rows_and_doors_are_refused_with_a_message(void **state)
{
    (void)state;
    clear_doors();
    setenv("MEMRA_PP_STAGES", "9", 1); /* 8-layer model */
    dev_err e = {0};
    assert_null(act_pp_create(plat, model_path, NULL, &e));
    assert_string_equal(e.msg, "MEMRA_PP_STAGES=9: more stages than the model's 8 layers");
    clear_doors();
    setenv("MEMRA_PP_STAGES", "2", 1);
    dev_err e2 = {0};
    act_pp *rt = act_pp_create(plat, model_path, NULL, &e2);
    assert_non_null(rt);
    int32_t tok = 100000, seq = 0, pos = 0;
    act_pp_step st = {.kind = ACT_STEP_EAGER, .B = 1, .tokens = &tok, .seq = &seq, .pos = &pos};
    act_pending *p;
    assert_int_equal(act_pp_submit(rt, &st, &p, &e2), MEMRA_E_INVAL);
    assert_non_null(strstr(e2.msg, "outside the vocabulary"));
    act_pp_destroy(rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_bound_is_a_power_of_two_above_every_position),
        cmocka_unit_test(test_door_shut_stages_one_and_unsplit_arm_give_identical_logits),
        cmocka_unit_test(test_a_gate_with_the_door_shut_fails_as_vacuous),
        cmocka_unit_test(test_eager_and_replay_gates_pass_for_two_to_eight_stages),
        cmocka_unit_test(test_every_tensor_type_splits_bit_identically),
        cmocka_unit_test(test_sharded_split_reads_nothing_remote_and_shard_off_does),
        cmocka_unit_test(test_arms_batch_prime_prime_batch_and_spec_pass),
        cmocka_unit_test(test_seams_off_make_the_gates_red_and_batch_is_refused_when_sharded),
        cmocka_unit_test(test_one_stream_seam_is_bit_identical_and_refuses_cross_device),
        cmocka_unit_test(test_soak_twenty_runs_with_random_delays_are_bit_identical),
        cmocka_unit_test(test_pending_logits_dropped_without_wait_are_safe),
        cmocka_unit_test(test_argmax_mode_reads_back_each_rows_greedy_token),
        cmocka_unit_test(test_the_head_ring_serves_steps_in_flight_with_the_bits_of_pool_memory),
        cmocka_unit_test(test_a_failed_stage_fails_its_step_and_the_pipeline_keeps_serving),
        cmocka_unit_test(test_late_failures_on_the_last_stage_give_its_logits_buffer_back),
        cmocka_unit_test(test_timestamp_liveness_counts_every_walk_without_host_markers),
        cmocka_unit_test(test_kv_cache_types_split_bit_identically_and_stay_near_f32),
        cmocka_unit_test(test_activation_types_split_bit_identically_and_stay_near_f32),
        cmocka_unit_test(test_bad_rows_and_doors_are_refused_with_a_message),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
