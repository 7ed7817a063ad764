/* The doors: every valid spelling, and a table of invalid ones each with its exact error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "actors/doors.h"
#include "device/dev.h"

static const char *all_doors[] = {"MEMRA_PP_STAGES", "MEMRA_PP_SPLITS", "MEMRA_PP_SPLIT", "MEMRA_PP_DEVICES",
                                  "MEMRA_PP_SHARD", "MEMRA_PP_SLOTS", "MEMRA_PP_STREAMS", "MEMRA_PP_OVERLAP",
                                  "MEMRA_BATCH_PP", "MEMRA_PP_ALLOW_UNSPLIT_BATCH", "MEMRA_SPEC_PP",
                                  "MEMRA_PRIME_PP", "MEMRA_PRIME_PIPE", "MEMRA_PDL", "MEMRA_PP_GRAPH",
                                  "MEMRA_PP_SAME_DEVICE_PIPE", "MEMRA_PP_MARKERS", "MEMRA_PP_KEYS",
                                  "MEMRA_PP_HEAD_RING", "MEMRA_BACKEND", "MEMRA_CPU_DEVICES", "MEMRA_PP_NCCL"};

static int clear_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof all_doors / sizeof all_doors[0]; i++)
        unsetenv(all_doors[i]);
    return 0;
}

/* Reads the structural doors and the fence for a 30-layer model on 8 devices. Returns N, 0 or an error. */
static int fence_of(int *fence, dev_err *err)
{
    act_pp_config c = act_pp_config_default();
    int r = act_doors_read_structural(&c, err);
    if (r < 0)
        return r;
    return act_pp_cuts(&c, 30, 8, NULL, fence, err);
}

static void test_unset_zero_and_one_keep_the_door_shut(void **state)
{
    int fence[65];
    dev_err e = {0};
    assert_int_equal(fence_of(fence, &e), 0);
    setenv("MEMRA_PP_STAGES", "0", 1);
    assert_int_equal(fence_of(fence, &e), 0);
    setenv("MEMRA_PP_STAGES", "1", 1);
    assert_int_equal(fence_of(fence, &e), 0);
    assert_int_equal(e.code, MEMRA_OK);
}

static void test_default_cuts_split_evenly(void **state)
{
    int fence[65];
    dev_err e = {0};
    setenv("MEMRA_PP_STAGES", "4", 1);
    assert_int_equal(fence_of(fence, &e), 4);
    int want[] = {0, 7, 15, 22, 30}; /* cut s = s*30/4 */
    assert_memory_equal(fence, want, sizeof want);
    assert_int_equal(act_stage_of(fence, 4, 0), 0);
    assert_int_equal(act_stage_of(fence, 4, 7), 1);
    assert_int_equal(act_stage_of(fence, 4, 29), 3);
    assert_int_equal(act_stage_of(fence, 4, 31), 3); /* trailing blocks map to the last stage */
}

static void test_explicit_splits_and_the_n2_spelling(void **state)
{
    int fence[65];
    dev_err e = {0};
    setenv("MEMRA_PP_STAGES", "3", 1);
    setenv("MEMRA_PP_SPLITS", "5,20", 1);
    assert_int_equal(fence_of(fence, &e), 3);
    int want[] = {0, 5, 20, 30};
    assert_memory_equal(fence, want, sizeof want);
    clear_env(NULL);
    setenv("MEMRA_PP_SPLIT", "12", 1); /* opens the N=2 door by itself */
    assert_int_equal(fence_of(fence, &e), 2);
    assert_int_equal(fence[1], 12);
    act_pp_config c = act_pp_config_default();
    assert_int_equal(act_doors_read_structural(&c, &e), 0);
    assert_int_equal(act_pp2_split(&c, 30), 12);
    setenv("MEMRA_PP_STAGES", "2", 1);
    assert_int_equal(fence_of(fence, &e), 2);
}

static void test_env_overrides_the_config_field_by_field(void **state)
{
    act_pp_config c = act_pp_config_default();
    c.stages = 3;
    c.slots = 4;
    dev_err e = {0};
    setenv("MEMRA_PP_SLOTS", "3", 1);
    assert_int_equal(act_doors_read_structural(&c, &e), 0);
    assert_int_equal(c.stages, 3);
    assert_int_equal(c.slots, 3);
    setenv("MEMRA_PP_DEVICES", "0,1,1", 1);
    assert_int_equal(act_doors_read_structural(&c, &e), 0);
    assert_int_equal(c.n_devices, 3);
    assert_int_equal(act_stage_device(&c, 2), 1);
    assert_true(act_pp_multi_stream_same_device(&c));
    assert_true(act_pp_sharded_cross_device(&c));
    c.shard = 0;
    assert_false(act_pp_sharded_cross_device(&c));
}

/* Under mpirun each rank is its own process: stages of different ranks on one ordinal share no stream's device
 * state, stages of one rank on one ordinal do. */
static void test_stages_share_a_device_only_within_one_process(void **state)
{
    (void)state;
    act_pp_config c = act_pp_config_default();
    c.stages = 4;
    const int one_per_rank[4] = {0, 1, 2, 3}, two_per_rank[4] = {0, 0, 1, 1};
    assert_true(act_pp_streams_share_device(&c, 4, NULL)); /* no placement, one process: all on the primary */
    assert_false(act_pp_streams_share_device(&c, 4, one_per_rank)); /* each rank's device 0 */
    assert_true(act_pp_streams_share_device(&c, 4, two_per_rank));
    c.n_devices = 4, c.devices[0] = 0, c.devices[1] = 1, c.devices[2] = 0, c.devices[3] = 1;
    assert_false(act_pp_streams_share_device(&c, 4, two_per_rank)); /* each rank: its devices 0 and 1 */
    assert_true(act_pp_streams_share_device(&c, 4, NULL)); /* one process: stages 0 and 2 share device 0 */
    c.devices[1] = 0;
    assert_true(act_pp_streams_share_device(&c, 4, two_per_rank)); /* rank 0: stages 0 and 1 on its device 0 */
}

static void test_seams_read_per_call_with_defaults(void **state)
{
    act_pp_seams s = act_pp_seams_default();
    dev_err e = {0};
    assert_int_equal(act_doors_read_seams(&s, &e), 0);
    assert_int_equal(s.overlap, 0);
    assert_int_equal(s.batch_pp, 1);
    assert_int_equal(s.keys, 1);
    assert_int_equal(s.head_ring, 1);
    setenv("MEMRA_PP_OVERLAP", "1", 1);
    setenv("MEMRA_PP_HEAD_RING", "0", 1);
    setenv("MEMRA_BATCH_PP", "0", 1);
    setenv("MEMRA_PP_KEYS", "0", 1);
    assert_int_equal(act_doors_read_seams(&s, &e), 0);
    assert_int_equal(s.overlap, 1);
    assert_int_equal(s.batch_pp, 0);
    assert_int_equal(s.keys, 0);
    assert_int_equal(s.head_ring, 0);
    setenv("MEMRA_PP_HEAD_RING", "-1", 1);
    assert_int_equal(act_doors_read_seams(&s, &e), MEMRA_E_INVAL);
    assert_string_equal(e.msg, "MEMRA_PP_HEAD_RING=-1: not allowed; expected 0 (off) or 1 (on)");
    unsetenv("MEMRA_PP_HEAD_RING");
    e = (dev_err){0};
    setenv("MEMRA_PP_KEYS", "2", 1);
    assert_int_equal(act_doors_read_seams(&s, &e), MEMRA_E_INVAL);
    assert_string_equal(e.msg, "MEMRA_PP_KEYS=2: not allowed; expected 0 (off) or 1 (on)");
    unsetenv("MEMRA_PP_KEYS");
    e = (dev_err){0}; /* an error keeps its first message */
    setenv("MEMRA_PDL", "yes", 1);
    s = act_pp_seams_default();
    assert_int_equal(act_doors_read_seams(&s, &e), MEMRA_E_INVAL);
    assert_string_equal(e.msg, "MEMRA_PDL=yes: not allowed; expected 0 (off) or 1 (on)");
    assert_int_equal(s.overlap, 0); /* unchanged on failure */
}

/* A runtime publishes its seams as one word: every 0/1 combination survives pack and unpack, a value other than
 * 0 or 1 is refused naming its field and door, and the defaults pack to the documented bits. */
static void test_seams_pack_into_one_word_and_only_zero_or_one_is_allowed(void **state)
{
    (void)state;
    for (uint32_t bits = 0; bits < (1u << ACT_PP_N_SEAMS); bits += 37) {
        act_pp_seams s = act_pp_seams_unpack(bits);
        assert_int_equal(act_pp_seams_check(&s, NULL), 0);
        assert_int_equal(act_pp_seams_pack(&s), bits);
    }
    act_pp_seams d = act_pp_seams_default(), u = act_pp_seams_unpack(act_pp_seams_pack(&d));
    assert_memory_equal(&d, &u, sizeof d);
    assert_int_equal(act_pp_seams_unpack(1u).overlap, 1); /* bit 0: the first field */
    d.keys = 2;
    dev_err e = {0};
    assert_int_equal(act_pp_seams_check(&d, &e), MEMRA_E_INVAL);
    assert_string_equal(e.msg, "pipeline seams: keys = 2 (the seam MEMRA_PP_KEYS; allowed 0 or 1)");
}

/* What a reload compares: the pipeline two configs build, naming the first difference. */
static void test_config_same_names_the_first_structural_difference(void **state)
{
    (void)state;
    act_pp_config a = act_pp_config_default(), b = act_pp_config_default();
    char what[160] = "";
    b.stages = 1; /* 0 and 1 both shut the door, and then nothing else shapes it */
    b.slots = 5;
    assert_true(act_pp_config_same(&a, &b, what, sizeof what));
    a.stages = b.stages = 3;
    a.slots = b.slots = 2;
    assert_true(act_pp_config_same(&a, &b, what, sizeof what));
    b.stages = 2;
    assert_false(act_pp_config_same(&a, &b, what, sizeof what));
    assert_string_equal(what, "MEMRA_PP_STAGES / stages: 3, the runtime has 2");
    b.stages = 3;
    a.n_devices = 3, a.devices[0] = 0, a.devices[1] = 0, a.devices[2] = 0; /* the same as no placement */
    assert_true(act_pp_config_same(&a, &b, what, sizeof what));
    a.devices[2] = 1;
    assert_false(act_pp_config_same(&a, &b, what, sizeof what));
    assert_string_equal(what, "MEMRA_PP_DEVICES / devices: stage 2 on device 1, the runtime has it on 0");
    a.n_devices = 0;
    a.n_cuts = b.n_cuts = 2, a.cuts[0] = b.cuts[0] = 4, a.cuts[1] = 9, b.cuts[1] = 10;
    assert_false(act_pp_config_same(&a, &b, what, sizeof what));
    assert_non_null(strstr(what, "MEMRA_PP_SPLITS"));
    a.cuts[1] = 10;
    a.streams = 0;
    assert_false(act_pp_config_same(&a, &b, what, sizeof what));
    assert_string_equal(what, "MEMRA_PP_STREAMS / streams: 0, the runtime has 1");
    a.streams = 1;
    a.nccl = ACT_NCCL_OFF;
    assert_false(act_pp_config_same(&a, &b, what, sizeof what));
    assert_string_equal(what, "MEMRA_PP_NCCL / nccl: 0, the runtime has auto");
}

static void test_nccl_door_is_auto_by_default_and_reads_auto_or_0(void **state)
{
    (void)state;
    act_pp_config c = act_pp_config_default();
    dev_err e = {0};
    assert_int_equal(c.nccl, ACT_NCCL_AUTO);
    assert_int_equal(act_doors_read_structural(&c, &e), 0);
    assert_int_equal(c.nccl, ACT_NCCL_AUTO); /* unset keeps the config's value */
    setenv("MEMRA_PP_NCCL", "0", 1);
    assert_int_equal(act_doors_read_structural(&c, &e), 0);
    assert_int_equal(c.nccl, ACT_NCCL_OFF);
    setenv("MEMRA_PP_NCCL", "auto", 1); /* the door overrides a config that says off */
    assert_int_equal(act_doors_read_structural(&c, &e), 0);
    assert_int_equal(c.nccl, ACT_NCCL_AUTO);
    c.nccl = 7; /* an API config outside the two values */
    assert_int_equal(act_pp_config_check(&c, &e), MEMRA_E_INVAL);
    assert_string_equal(e.msg, "pipeline config: nccl=7, allowed 0 (auto) or 1 (off)");
}

struct bad {
    const char *env[3][2];
    const char *msg;
};

static const struct bad bad_table[] = {
    {{{"MEMRA_PP_STAGES", "two"}}, "MEMRA_PP_STAGES=two: not allowed; expected an integer 0..64 (0/1 = door shut)"},
    {{{"MEMRA_PP_STAGES", ""}}, "MEMRA_PP_STAGES=: not allowed; expected an integer 0..64 (0/1 = door shut)"},
    {{{"MEMRA_PP_STAGES", "-2"}}, "MEMRA_PP_STAGES=-2: not allowed; expected an integer 0..64 (0/1 = door shut)"},
    {{{"MEMRA_PP_STAGES", "65"}}, "MEMRA_PP_STAGES=65: not allowed; expected an integer 0..64 (0/1 = door shut)"},
    {{{"MEMRA_PP_STAGES", "31"}}, "MEMRA_PP_STAGES=31: more stages than the model's 30 layers"},
    {{{"MEMRA_PP_STAGES", "3"}, {"MEMRA_PP_SPLITS", "20,10"}},
     "MEMRA_PP_SPLITS=20,10: cuts must be strictly increasing"},
    {{{"MEMRA_PP_STAGES", "3"}, {"MEMRA_PP_SPLITS", "10,10"}},
     "MEMRA_PP_SPLITS=10,10: cuts must be strictly increasing"},
    {{{"MEMRA_PP_STAGES", "3"}, {"MEMRA_PP_SPLITS", "10,30"}},
     "MEMRA_PP_SPLITS: cut 30 is outside (0, 30) for this model"},
    {{{"MEMRA_PP_STAGES", "3"}, {"MEMRA_PP_SPLITS", "0,10"}},
     "MEMRA_PP_SPLITS=0,10: element '0' is not a layer index > 0"},
    {{{"MEMRA_PP_STAGES", "3"}, {"MEMRA_PP_SPLITS", "10,,20"}},
     "MEMRA_PP_SPLITS=10,,20: empty element; expected a comma list of a layer index > 0"},
    {{{"MEMRA_PP_STAGES", "3"}, {"MEMRA_PP_SPLITS", "10,x"}},
     "MEMRA_PP_SPLITS=10,x: element 'x' is not a layer index > 0"},
    {{{"MEMRA_PP_STAGES", "3"}, {"MEMRA_PP_SPLITS", "10"}}, "MEMRA_PP_SPLITS=10: 1 cuts given, MEMRA_PP_STAGES=3 needs 2"},
    {{{"MEMRA_PP_SPLITS", "10"}}, "MEMRA_PP_SPLITS=10 is set but the pipeline door is shut: set MEMRA_PP_STAGES=2"},
    {{{"MEMRA_PP_SPLITS", "weights"}},
     "MEMRA_PP_SPLITS=weights is set but the pipeline door is shut: set MEMRA_PP_STAGES"},
    {{{"MEMRA_PP_STAGES", "2"}, {"MEMRA_PP_SPLITS", "weights"}}, /* fence_of passes no weight sizes */
     "MEMRA_PP_SPLITS=weights needs the model's weight cost per layer"},
    {{{"MEMRA_PP_STAGES", "2"}, {"MEMRA_PP_SPLITS", "Weights"}},
     "MEMRA_PP_SPLITS=Weights: element 'Weights' is not a layer index > 0"},
    {{{"MEMRA_PP_SPLIT", "10"}, {"MEMRA_PP_SPLITS", "10"}},
     "MEMRA_PP_SPLITS=10 and MEMRA_PP_SPLIT=10 are both set: use one (SPLIT is the N=2 spelling)"},
    {{{"MEMRA_PP_STAGES", "3"}, {"MEMRA_PP_SPLIT", "10"}},
     "MEMRA_PP_SPLIT=10 is the N=2 spelling but MEMRA_PP_STAGES=3: use MEMRA_PP_SPLITS with 2 cuts"},
    {{{"MEMRA_PP_STAGES", "2"}, {"MEMRA_PP_DEVICES", "0,9"}},
     "MEMRA_PP_DEVICES: stage 1 on device 9, but the backend has devices 0..7"},
    {{{"MEMRA_PP_STAGES", "2"}, {"MEMRA_PP_DEVICES", "0"}},
     "MEMRA_PP_DEVICES=0: 1 devices given, MEMRA_PP_STAGES=2 needs 2"},
    {{{"MEMRA_PP_STAGES", "2"}, {"MEMRA_PP_DEVICES", "0,-1"}},
     "MEMRA_PP_DEVICES=0,-1: element '-1' is not a device ordinal >= 0"},
    {{{"MEMRA_PP_STAGES", "2"}, {"MEMRA_PP_SLOTS", "0"}},
     "MEMRA_PP_SLOTS=0: not allowed; expected 1..16 slots per boundary"},
    {{{"MEMRA_PP_STAGES", "2"}, {"MEMRA_PP_SHARD", "2"}},
     "MEMRA_PP_SHARD=2: not allowed; expected 0 (all weights on the primary) or 1 (per-stage)"},
    {{{"MEMRA_PP_STAGES", "02"}}, "MEMRA_PP_STAGES=02: not allowed; expected an integer 0..64 (0/1 = door shut)"},
    {{{"MEMRA_PP_STAGES", " 2"}}, "MEMRA_PP_STAGES= 2: not allowed; expected an integer 0..64 (0/1 = door shut)"},
    {{{"MEMRA_PP_STAGES", "+2"}}, "MEMRA_PP_STAGES=+2: not allowed; expected an integer 0..64 (0/1 = door shut)"},
    {{{"MEMRA_PP_STAGES", "3"}, {"MEMRA_PP_SPLITS", "010,20"}},
     "MEMRA_PP_SPLITS=010,20: element '010' is not a layer index > 0"},
    {{{"MEMRA_PP_STAGES", "0"}, {"MEMRA_PP_SPLIT", "10"}},
     "MEMRA_PP_SPLIT=10 opens the 2-stage door but MEMRA_PP_STAGES=0 shuts it: unset one, or set MEMRA_PP_STAGES=2"},
    {{{"MEMRA_PP_STAGES", "1"}, {"MEMRA_PP_SPLIT", "10"}},
     "MEMRA_PP_SPLIT=10 opens the 2-stage door but MEMRA_PP_STAGES=1 shuts it: unset one, or set MEMRA_PP_STAGES=2"},
    {{{"MEMRA_PP_STAGES", "2"}, {"MEMRA_PP_OVERLAP", "2"}}, /* a seam, refused at create too */
     "MEMRA_PP_OVERLAP=2: not allowed; expected 0 (off) or 1 (on)"},
    {{{"MEMRA_PRIME_PIPE", "01"}}, "MEMRA_PRIME_PIPE=01: not allowed; expected 0 (off) or 1 (on)"},
    {{{"MEMRA_PP_NCCL", "1"}},
     "MEMRA_PP_NCCL=1: not allowed; expected auto (NCCL between two ranks' GPUs when it can, the default) or 0 "
     "(host-staged MPI)"},
    {{{"MEMRA_PP_STAGES", "2"}, {"MEMRA_PP_NCCL", "AUTO"}},
     "MEMRA_PP_NCCL=AUTO: not allowed; expected auto (NCCL between two ranks' GPUs when it can, the default) or 0 "
     "(host-staged MPI)"},
    {{{"MEMRA_PP_NCCL", ""}},
     "MEMRA_PP_NCCL=: not allowed; expected auto (NCCL between two ranks' GPUs when it can, the default) or 0 "
     "(host-staged MPI)"},
    {{{"MEMRA_PP_STAGES", "2"}, {"MEMRA_PP_STREAMS", "0"}, {"MEMRA_PP_DEVICES", "0,1"}},
     "MEMRA_PP_STREAMS=0 is the one-stream, one-device seam but MEMRA_PP_DEVICES places stages on several devices: "
     "unset one of them"},
};

static void test_every_invalid_spelling_is_refused_with_its_exact_error(void **state)
{
    for (size_t i = 0; i < sizeof bad_table / sizeof bad_table[0]; i++) {
        clear_env(NULL);
        for (int k = 0; k < 3 && bad_table[i].env[k][0]; k++)
            setenv(bad_table[i].env[k][0], bad_table[i].env[k][1], 1);
        int fence[65];
        dev_err e = {0};
        int r = fence_of(fence, &e);
        if (r != MEMRA_E_INVAL || strcmp(e.msg, bad_table[i].msg) != 0)
            fail_msg("case %zu: got %d '%s', want '%s'", i, r, e.msg, bad_table[i].msg);
    }
}

/* MEMRA_PP_SPLITS=weights: the cut that minimizes the largest stage's weight bytes, the head on the last. */
static void test_weight_balanced_cuts_count_the_head_on_the_last_stage(void **state)
{
    (void)state;
    setenv("MEMRA_PP_STAGES", "2", 1);
    setenv("MEMRA_PP_SPLITS", "weights", 1);
    act_pp_config c = act_pp_config_default();
    dev_err e = {0};
    assert_int_equal(act_doors_read_structural(&c, &e), 0);
    assert_int_equal(c.balance, 1);
    assert_int_equal(act_pp2_split(&c, 30), -1); /* the cut needs the weights */
    int fence[65];
    double w[33];
    /* 30 equal layers and a head worth 8 of them: 19 | 11 + head, both 19 */
    for (int i = 0; i < 30; i++)
        w[i] = 1.0;
    w[30] = 8.0;
    assert_int_equal(act_pp_cuts(&c, 30, 8, w, fence, &e), 2);
    assert_int_equal(fence[1], 19);
    /* the Llama-3-8B bf16 sizes: 32 layers of 0.4719 GB, head 1.0508 GB -> 17 | 15 + head (8.02 vs 8.13 GB;
     * the even cut 16 leaves 7.55 vs 8.60) */
    for (int i = 0; i < 32; i++)
        w[i] = 0.4719;
    w[32] = 1.0508;
    assert_int_equal(act_pp_cuts(&c, 32, 8, w, fence, &e), 2);
    assert_int_equal(fence[1], 17);
    /* 4 stages, no head: the largest stage is the smallest possible (ceil(30/4) = 8 layers), each >= 1 layer */
    c.stages = 4;
    for (int i = 0; i < 30; i++)
        w[i] = 1.0;
    w[30] = 0.0;
    assert_int_equal(act_pp_cuts(&c, 30, 8, w, fence, &e), 4);
    assert_int_equal(fence[0], 0);
    assert_int_equal(fence[4], 30);
    for (int s = 0; s < 4; s++)
        assert_true(fence[s + 1] - fence[s] >= 1 && fence[s + 1] - fence[s] <= 8);
    /* one layer heavier than all the others together gets a stage of its own (anything more would exceed it) */
    w[5] = 40.0;
    assert_int_equal(act_pp_cuts(&c, 30, 8, w, fence, &e), 4);
    const int s5 = act_stage_of(fence, 4, 5);
    assert_int_equal(fence[s5], 5);
    assert_int_equal(fence[s5 + 1], 6);
    /* explicit cuts and balance together are refused by the config check */
    c.n_cuts = 3;
    c.cuts[0] = 5, c.cuts[1] = 10, c.cuts[2] = 20;
    assert_int_equal(act_pp_config_check(&c, &e), MEMRA_E_INVAL);
    assert_string_equal(e.msg, "pipeline config: balance and 3 explicit cuts (use one)");
}

static void test_refuse_unsplit_names_path_and_alternative(void **state)
{
    act_pp_config c = act_pp_config_default();
    c.stages = 2;
    c.n_devices = 2;
    c.devices[1] = 1;
    dev_err e = {0};
    assert_int_equal(act_refuse_unsplit_if_remote(&c, "decode_step_batch", "MEMRA_BATCH_PP=1", &e), MEMRA_E_REFUSED);
    assert_non_null(strstr(e.msg, "decode_step_batch refused"));
    assert_non_null(strstr(e.msg, "Use MEMRA_BATCH_PP=1"));
    c.devices[1] = 0;
    dev_err ok = {0};
    assert_int_equal(act_refuse_unsplit_if_remote(&c, "x", "y", &ok), 0);
}

static void test_warn_unwired_fires_once_per_path(void **state)
{
    act_warn_unwired_reset();
    assert_int_equal(act_warn_unwired_once("dc_loop"), 1);
    assert_int_equal(act_warn_unwired_once("dc_loop"), 0);
    assert_int_equal(act_warn_unwired_once("graph_loop"), 1);
    assert_int_equal(act_warn_unwired_count("dc_loop"), 1);
    assert_int_equal(act_warn_unwired_count("spec_loop"), 0);
}

static void test_the_door_integer_syntax_is_digits_only_without_sign_space_or_leading_zero(void **state)
{
    static const char *const bad[] = {"", " 1", "1 ", "+1", "-1", "01", "00", "00000000001", "1x", "0x10", "1e3",
                                      "1,", "9999999999999999999999", "65"};
    long v = -7;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (act_door_parse_int(bad[i], strlen(bad[i]), 0, 64, &v) == 0)
            fail_msg("'%s' parsed as %ld", bad[i], v);
    assert_int_equal(v, -7); /* untouched on refusal */
    assert_int_equal(act_door_parse_int("0", 1, 0, 64, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(act_door_parse_int("64", 2, 0, 64, &v), 0);
    assert_int_equal(v, 64);
    assert_int_equal(act_door_parse_int("100000000000000000", 18, 0, 1L << 62, &v), 0);
    assert_int_equal(act_door_parse_int("12", 1, 0, 64, &v), 0); /* only len bytes are read */
    assert_int_equal(v, 1);
}

static void test_backend_doors_refuse_empty_signed_spaced_and_padded_values_naming_the_variable(void **state)
{
    static const char *const bad_n[] = {"", " 1", "+1", "00000000001", "1 ", "0", "65"};
    for (size_t i = 0; i < sizeof bad_n / sizeof bad_n[0]; i++) {
        setenv("MEMRA_CPU_DEVICES", bad_n[i], 1);
        int kind = -1, n = 2;
        dev_err e = {0};
        char want[64];
        snprintf(want, sizeof want, "MEMRA_CPU_DEVICES=%s: must be an integer in 1..", bad_n[i]);
        if (dev_backend_doors(&kind, &n, &e) != MEMRA_E_INVAL || strncmp(e.msg, want, strlen(want)) != 0 || n != 2)
            fail_msg("MEMRA_CPU_DEVICES='%s': got '%s' n=%d", bad_n[i], e.msg, n);
    }
    setenv("MEMRA_CPU_DEVICES", "3", 1);
    int kind = -1, n = 2;
    dev_err e = {0};
    assert_int_equal(dev_backend_doors(&kind, &n, &e), 0);
    assert_int_equal(n, 3);
    unsetenv("MEMRA_CPU_DEVICES");

    setenv("MEMRA_BACKEND", "", 1);
    assert_int_equal(dev_backend_doors(&kind, &n, &e), MEMRA_E_INVAL);
    assert_non_null(strstr(e.msg, "MEMRA_BACKEND=: allowed values are cpu, cuda"));
    e = (dev_err){0};
    setenv("MEMRA_BACKEND", "cuda", 1);
    kind = -1;
#ifdef MEMRA_HAVE_CUDA
    assert_int_equal(dev_backend_doors(&kind, &n, &e), 0);
    assert_int_equal(kind, DEV_KIND_CUDA);
#else
    assert_int_equal(dev_backend_doors(&kind, &n, &e), MEMRA_E_UNSUPPORTED);
    assert_string_equal(e.msg, "MEMRA_BACKEND=cuda: this build has no CUDA backend (configure with MEMRA_CUDA=ON/AUTO "
                               "and nvcc); allowed: cpu");
#endif
    unsetenv("MEMRA_BACKEND");
}

static void test_too_many_stages_blame_the_source_they_came_from(void **state)
{
    act_pp_config c = act_pp_config_default();
    c.stages = 64; /* memra_runtime_params.stages, as memra-run --stages 64 sets it; no door set */
    dev_err e = {0};
    int fence[65];
    assert_int_equal(act_doors_read_structural(&c, &e), 0);
    assert_int_equal(act_pp_cuts(&c, 30, 8, NULL, fence, &e), MEMRA_E_INVAL);
    assert_string_equal(e.msg, "memra_runtime_params.stages=64 (memra-run --stages): more stages than the model's 30 "
                               "layers");
    assert_null(strstr(e.msg, "MEMRA_PP_STAGES"));
    c = act_pp_config_default();
    c.stages = 3, c.n_cuts = 2, c.cuts[0] = 10, c.cuts[1] = 40;
    e = (dev_err){0};
    assert_int_equal(act_pp_cuts(&c, 30, 8, NULL, fence, &e), MEMRA_E_INVAL);
    assert_string_equal(e.msg, "memra_runtime_params.cuts: cut 40 is outside (0, 30) for this model");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_unset_zero_and_one_keep_the_door_shut, clear_env),
        cmocka_unit_test_setup(test_default_cuts_split_evenly, clear_env),
        cmocka_unit_test_setup(test_explicit_splits_and_the_n2_spelling, clear_env),
        cmocka_unit_test_setup(test_env_overrides_the_config_field_by_field, clear_env),
        cmocka_unit_test_setup(test_seams_read_per_call_with_defaults, clear_env),
        cmocka_unit_test_setup(test_seams_pack_into_one_word_and_only_zero_or_one_is_allowed, clear_env),
        cmocka_unit_test_setup(test_config_same_names_the_first_structural_difference, clear_env),
        cmocka_unit_test_setup(test_nccl_door_is_auto_by_default_and_reads_auto_or_0, clear_env),
        cmocka_unit_test_setup(test_stages_share_a_device_only_within_one_process, clear_env),
        cmocka_unit_test_setup(test_every_invalid_spelling_is_refused_with_its_exact_error, clear_env),
        cmocka_unit_test_setup(test_weight_balanced_cuts_count_the_head_on_the_last_stage, clear_env),
        cmocka_unit_test_setup(test_refuse_unsplit_names_path_and_alternative, clear_env),
        cmocka_unit_test_setup(test_warn_unwired_fires_once_per_path, clear_env),
        cmocka_unit_test_setup(test_the_door_integer_syntax_is_digits_only_without_sign_space_or_leading_zero, clear_env),
        cmocka_unit_test_setup(test_backend_doors_refuse_empty_signed_spaced_and_padded_values_naming_the_variable,
                               clear_env),
        cmocka_unit_test_setup(test_too_many_stages_blame_the_source_they_came_from, clear_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
