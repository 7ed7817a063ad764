/* memra-gate: split vs unsplit (or pipelined vs serial) bit-identity gates, in one process, one load.
 * Exit status: 0 = the arm passed, 1 = it failed (logits differ, counter did not advance, remote reads),
 * 2 = it could not run (usage, model, door error). Doors come from the environment, read once when the runtime
 * is created. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/pp_rank.h"
#include "tools/memra-gate/gate.h"
#include "model/gguf_synth.h"
#include "model/llama.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: memra-gate <arm> -m MODEL [options]\n"
            "arms: eager, replay, batch, prime, prime-batch, spec, soak\n"
            "  -m, --model PATH     GGUF model (or --synthetic)\n"
            "  --synthetic NAME     a model of a real shape generated on the stage devices: llama3-8b,\n"
            "                       llama3-70b, mid, tiny; --type T picks its weights (default bf16)\n"
            "  --stages N           pipeline stages (MEMRA_PP_STAGES overrides)\n"
            "  --steps T            decode steps compared (default 8)\n"
            "  --seqs S             sequences for batch / prime-batch (default 3)\n"
            "  --prompt P --chunk C prime: prompt tokens and chunk rows (default 24, 8)\n"
            "  --draft T            spec: draft tokens per verify (default 4)\n"
            "  --runs R             soak runs (default 20)\n"
            "  --jitter US          soak: max random delay per actor message / stream op (default 200)\n"
            "  --no-rendezvous      do not force the stage overlap with the rendezvous test hook\n"
            "  --seed X             token seed\n"
            "  -v                   print every compared row\n"
            "doors: MEMRA_PP_STAGES, MEMRA_PP_SPLITS, MEMRA_PP_DEVICES, MEMRA_PP_SHARD, MEMRA_PP_SLOTS,\n"
            "       MEMRA_PP_OVERLAP, MEMRA_PP_STREAMS, MEMRA_BATCH_PP, MEMRA_PRIME_PP, MEMRA_PRIME_PIPE, ...\n"
            "       (docs/doors.md); MEMRA_BACKEND=cpu|cuda, MEMRA_CPU_DEVICES=N\n");
}

static int int_arg(const char *flag, const char *v, int lo, int hi, int *out)
{
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || x < lo || x > hi) {
        fprintf(stderr, "memra-gate: %s %s: expected an integer %d..%d\n", flag, v ? v : "(missing)", lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int gate_main(int argc, char **argv);

/* Under mpirun: rank 0 runs the gate, every other rank serves its stages (docs/scale-out.md). */
int main(int argc, char **argv)
{
    dev_err err = {0};
    if (act_rank_init(&argc, &argv, &err) != 0) {
        fprintf(stderr, "memra-gate: %s\n", err.msg);
        return 2;
    }
    if (act_rank_self() > 0) {
        int r = act_rank_serve(&err);
        if (r)
            fprintf(stderr, "memra-gate (rank %d): %s\n", act_rank_self(), err.msg);
        act_rank_finish(r);
        return r ? 2 : 0;
    }
    int status = gate_main(argc, argv);
    act_rank_finish(status); /* 1 or 2 ends every rank with that status */
    return status;
}

static int gate_main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    int arm = act_gate_arm_parse(argv[1]);
    if (arm < 0) {
        fprintf(stderr, "memra-gate: unknown arm '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    act_gate_params gp = act_gate_default_params((act_gate_arm)arm);
    act_pp_params pp = act_pp_default_params();
    const char *model = NULL, *synth = NULL, *type = "bf16";
    int verbose = 0, seed = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            model = v, i++, bad = !v;
        else if (!strcmp(a, "--stages"))
            bad = int_arg(a, v, 0, ACT_PP_MAX_STAGES, &pp.config.stages), i++;
        else if (!strcmp(a, "--steps"))
            bad = int_arg(a, v, 1, 100000, &gp.steps), i++;
        else if (!strcmp(a, "--seqs"))
            bad = int_arg(a, v, 1, 64, &gp.seqs), i++;
        else if (!strcmp(a, "--prompt"))
            bad = int_arg(a, v, 1, 100000, &gp.prompt), i++;
        else if (!strcmp(a, "--chunk"))
            bad = int_arg(a, v, 1, 4096, &gp.chunk), i++;
        else if (!strcmp(a, "--draft"))
            bad = int_arg(a, v, 1, 64, &gp.draft), i++;
        else if (!strcmp(a, "--runs"))
            bad = int_arg(a, v, 1, 100000, &gp.runs), i++;
        else if (!strcmp(a, "--jitter"))
            bad = int_arg(a, v, 0, 1000000, &gp.jitter_us), i++;
        else if (!strcmp(a, "--seed"))
            bad = int_arg(a, v, 0, 1 << 30, &seed), i++, gp.seed = (uint64_t)seed;
        else if (!strcmp(a, "--synthetic"))
            synth = v, i++, bad = !v;
        else if (!strcmp(a, "--type"))
            type = v, i++, bad = !v;
        else if (!strcmp(a, "--no-rendezvous"))
            gp.rendezvous_ms = 0;
        else if (!strcmp(a, "-v"))
            verbose = 1;
        else {
            fprintf(stderr, "memra-gate: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (bad)
            return 2;
    }
    mdl_gguf_synth shape;
    if (synth) {
        dev_err se = {0};
        if (mdl_synth_parse(synth, type, &shape, &se) != 0) {
            fprintf(stderr, "memra-gate: %s\n", se.msg);
            return 2;
        }
        pp.synth = &shape;
        model = synth;
    }
    if (!model) {
        fprintf(stderr, "memra-gate: -m MODEL (or --synthetic NAME) is required\n");
        return 2;
    }
    int rows = gp.arm == ACT_GATE_PRIME_BATCH ? gp.seqs * gp.chunk : gp.arm == ACT_GATE_PRIME ? gp.chunk : 0;
    if (gp.arm == ACT_GATE_BATCH)
        rows = gp.seqs;
    if (gp.arm == ACT_GATE_SPEC)
        rows = gp.draft;
    if (rows > pp.max_rows)
        pp.max_rows = rows;
    if (pp.n_seq < gp.seqs)
        pp.n_seq = gp.seqs;
    pp.whole_model = 1; /* under mpirun the reference arm walks every layer on rank 0 */
    gp.log = verbose ? stdout : NULL;

    dev_err err = {0};
    dev_platform *plat = dev_platform_open_env(&err);
    if (!plat) {
        fprintf(stderr, "memra-gate: %s\n", err.msg);
        return 2;
    }
    act_pp *rt = act_pp_create(plat, synth ? NULL : model, &pp, &err);
    if (!rt) {
        fprintf(stderr, "memra-gate: %s\n", err.msg);
        dev_platform_close(plat);
        return 2;
    }
    const act_pp_config *cfg = act_pp_get_config(rt);
    int N = act_pp_stages(rt);
    const int *fence = act_pp_fence(rt);
    act_pp_seams seams;
    act_pp_get_seams(rt, &seams);
    printf("memra-gate %s: model %s, backend %s, N=%d, fence [", argv[1], model,
           dev_platform_kind(plat) == DEV_KIND_CUDA ? "cuda" : "cpu", N);
    for (int s = 0; s <= N; s++)
        printf("%s%d", s ? "," : "", fence[s]);
    printf("], devices [");
    for (int s = 0; s < N; s++)
        printf("%s%s", s ? "," : "", dev_device_name(act_pp_stage_device(rt, s)));
    printf("], slots %d, overlap %d, shard %d, streams %d", cfg->slots, seams.overlap, cfg->shard, cfg->streams);
    if (act_rank_count() > 1) /* under mpirun: stage s runs in rank s (docs/scale-out.md) */
        printf(", ranks %d", act_rank_count());
    printf("\n");
    act_gate_report rep;
    int r = act_gate_run(rt, &gp, &rep, &err);
    int status;
    if (r != 0) {
        fprintf(stderr, "memra-gate: %s: could not run: %s\n", argv[1], err.msg);
        status = 2;
    } else {
        printf("compared %d logit rows split vs unsplit: %d differ, max |diff| %g\n", rep.compared, rep.mismatches,
               rep.max_abs_diff);
        printf("%s %llu -> %llu, overlaps +%llu, split-arm remote bytes %llu", rep.counter_name,
               (unsigned long long)rep.counter_before, (unsigned long long)rep.counter_after,
               (unsigned long long)rep.pipe_overlaps, (unsigned long long)rep.split_remote_bytes);
        if (gp.arm == ACT_GATE_SOAK)
            printf(", soak %d/%d runs bit-identical", rep.runs_ok, gp.runs);
        printf("\n%s: %s\n", rep.pass ? "PASS" : "FAIL", rep.msg);
        status = rep.pass ? 0 : 1;
    }
    act_pp_destroy(rt);
    dev_platform_close(plat);
    return status;
}
