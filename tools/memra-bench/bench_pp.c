/* memra-bench pp-scaling: PP-1 and PP-N in ONE process on the same model file, S sequences in flight
 * (each sequence is one micro-batch of one row; the scheduler keeps all S submitted), T decode tokens per
 * sequence. Prints tokens/s, per-stage busy % and bubble %, and a last line with ratio=<PP-N / PP-1>. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/pp.h"
#include "actors/trace.h"
#include "bench.h"
#include "model/gguf_synth.h"
#include "model/llama.h"
#include "model/sampler.h"
#include "cuda/ktrace.h"

/* The host turn of one sequence's token, in order (act_pending_times between the caller's submit and
 * the caller's next submit). */
enum { HT_TO_STAGE0, HT_ENQUEUE, HT_TO_READBACK, HT_WAIT, HT_TO_DONE, HT_TO_CALLER, HT_CALLER, HT_N };
static const char *const HT_NAMES[HT_N] = {"submit->stage actor", "enqueue (walk, head)", "->readback actor",
                                           "device + D2H wait", "->pending done", "->caller awake",
                                           "caller (argmax, submit)"};

typedef struct run_result {
    double tok_s, wall_s, weight_bytes;
    int N;
    double busy[64];
    double step_us[64]; /* device time per walk (busy / walks) */
    double enq_us[64]; /* host us per step spent enqueuing the stage's layers */
    int fence[65];     /* stage s runs layers [fence[s], fence[s+1]) */
    uint64_t graph_replays, graph_captures; /* MEMRA_PP_GRAPH */
    uint64_t head_ring_steps; /* MEMRA_PP_HEAD_RING: steps whose head wrote a fixed logits buffer */
    /* one sequence only: where each token's turn goes (us per token, summed then divided; HT_* below) */
    double turn_us[HT_N];
    int turns;
    uint64_t tokens_fnv; /* FNV-1a over every sequence's decoded tokens in order: PP-1 and PP-N must agree */
} run_result;

static uint64_t bench_now_ns(void) { return (uint64_t)(bench_now_s() * 1e9); }

/* FNV-1a of the token streams, sequence by sequence (h[s] per sequence, folded at the end, so the order in
 * which sequences finish does not matter). */
static uint64_t fnv_add(uint64_t h, int32_t v)
{
    for (int i = 0; i < 4; i++)
        h = (h ^ (uint8_t)((uint32_t)v >> (8 * i))) * 1099511628211ull;
    return h;
}


/* Bytes of weights one token's decode step reads (every layer matrix and the head; the embedding row is
 * noise), for the effective-bandwidth column. */
static double model_weight_bytes(const mdl_model *m) { return (double)mdl_model_weight_bytes(m); }

/* The greedy token of a decode step: the host's argmax over its logits, or (dev_argmax) the one the device
 * computed (ACT_LOGITS_ARGMAX). *woke: the clock when the wait returned. */
static int greedy_token(act_pending *p, int dev_argmax, int n_vocab, int32_t *tok, uint64_t *woke, dev_err *err)
{
    int rc;
    if (dev_argmax) {
        const int32_t *t;
        rc = act_pending_wait_tokens(p, &t, NULL, err);
        *woke = bench_now_ns();
        if (rc == 0)
            *tok = t[0];
    } else {
        const float *l;
        rc = act_pending_wait(p, &l, NULL, err);
        *woke = bench_now_ns();
        if (rc == 0)
            *tok = mdl_argmax(l, n_vocab);
    }
    return rc;
}

/* Submit one decode row: token *tok of sequence *seq at *pos, with the run's logits mode. */
static int submit_token(act_pp *rt, int32_t *tok, int32_t *seq, int32_t *pos, act_logits_mode mode, act_pending **p,
                        dev_err *err)
{
    act_pp_step st = {.kind = ACT_STEP_EAGER, .B = 1, .tokens = tok, .seq = seq, .pos = pos, .logits = mode};
    return act_pp_submit(rt, &st, p, err);
}

/* Submit one fed decode row of sequence *seq at position pos (act_pp_step.feed: its token is the one the
 * sequence's previous ARGMAX step picks, read on the device). */
static int submit_fed(act_pp *rt, int32_t *seq, int32_t pos, act_pending **p, dev_err *err)
{
    act_pp_step st = {.kind = ACT_STEP_EAGER, .B = 1, .seq = seq, .pos = &pos, .logits = ACT_LOGITS_ARGMAX,
                      .feed = 1};
    return act_pp_submit(rt, &st, p, err);
}

/* What every run of one pp-scaling invocation shares (its flags). */
typedef struct pp_args {
    const char *model;         /* a GGUF path, or NULL with syn */
    const mdl_gguf_synth *syn; /* a synthetic shape, or NULL */
    int S, T, prompt;          /* --seqs, --tokens, --prompt */
    int ctx;                   /* --ctx: positions per sequence (0: the runtime's default) */
    int dev_argmax;            /* --device-argmax */
    const char *trace;         /* --trace FILE: run_one of PP-N records the timed steps (actors/trace), or NULL */
} pp_args;

/* Decode a->T tokens for each of a->S sequences with all in flight, on one runtime of `stages` stages; greedy (on
 * the host, or dev_argmax: on the device; dev_argmax 2: and each sequence's next step submitted fed, before its
 * current one is waited). ktrace (or NULL): --kernel-trace FILE, every kernel of the timed steps recorded with
 * CUPTI (cuda/ktrace.h): a table, and FILE as a CSV or, named *.json, a Perfetto trace. */
static int run_one(dev_platform *plat, const pp_args *a, int stages, const char *ktrace, run_result *out)
{
    const int S = a->S, T = a->T, prompt = a->prompt, dev_argmax = a->dev_argmax;
    const act_logits_mode mode = dev_argmax ? ACT_LOGITS_ARGMAX : ACT_LOGITS_ALL;
    const int feed = dev_argmax == 2;
    act_pp_params p = act_pp_default_params();
    p.feed = feed ? ACT_FEED_ON : ACT_FEED_OFF;
    p.synth = a->syn;
    p.config.stages = stages;
    p.apply_env = stages > 1; /* PP-1 is the door shut whatever the environment says */
    p.n_seq = S;
    p.n_ctx = a->ctx;
    p.max_rows = prompt > S ? prompt : S;
    dev_err err = {0};
    act_pp *rt = act_pp_create(plat, a->model, &p, &err);
    if (!rt) {
        fprintf(stderr, "memra-bench pp-scaling: %s\n", err.msg);
        return 2;
    }
    const int need = prompt + 2 + T; /* positions 0 .. the last timed token's */
    if (need > act_pp_n_ctx(rt)) {
        fprintf(stderr, "memra-bench pp-scaling: --prompt %d and --tokens %d need %d positions per sequence (2 warm-up "
                        "steps); the KV cache holds %d (--ctx N sets it)\n", prompt, T, need,
                act_pp_n_ctx(rt));
        act_pp_destroy(rt);
        return 2;
    }
    int n_vocab = mdl_model_hparams(act_pp_model(rt))->n_vocab;
    int32_t *tok = calloc((size_t)S, sizeof *tok), *pos = calloc((size_t)S, sizeof *pos);
    int32_t *ptok = calloc((size_t)prompt, sizeof *ptok), *pseq = calloc((size_t)prompt, sizeof *pseq),
            *ppos = calloc((size_t)prompt, sizeof *ppos);
    act_pending **pd = calloc((size_t)S, sizeof *pd), *ahead[64] = {NULL}; /* feed: each sequence's next step */
    uint64_t fnv[64]; /* S <= 64 (--seqs) */
    for (int s = 0; s < S; s++)
        fnv[s] = 14695981039346656037ull;
    int rc = 0;
    /* prime every sequence with the same short prompt (one chunk each) */
    for (int s = 0; s < S && rc == 0; s++) {
        for (int i = 0; i < prompt; i++)
            ptok[i] = (int32_t)((i * 7919 + 13) % n_vocab), pseq[i] = s, ppos[i] = i;
        act_pp_step st = {.kind = ACT_STEP_PRIME, .B = prompt, .tokens = ptok, .seq = pseq, .pos = ppos,
                          .logits = ACT_LOGITS_LAST};
        const float *l;
        if ((rc = act_pp_submit(rt, &st, &pd[s], &err)) == 0 && (rc = act_pending_wait(pd[s], &l, NULL, &err)) == 0)
            tok[s] = mdl_argmax(l, n_vocab);
        act_pending_release(pd[s]);
        pd[s] = NULL;
        pos[s] = prompt;
    }
    int32_t seq_ids[64];
    for (int s = 0; s < S; s++)
        seq_ids[s] = s;
    /* warm-up, untimed: two decode steps per sequence, the second fed with feed, so the timed loop sees steady
     * state (with MEMRA_PP_GRAPH the first B = 1 step of each kind captures and instantiates each stage's graph:
     * milliseconds that are not a step's cost; pools grow to their working size). Two in every mode, so the timed
     * window is the same positions and the token hash can be compared across --device-argmax 0, 1 and 2. */
    for (int s = 0; s < S && rc == 0; s++) {
        for (int w = 0; w < 2 && rc == 0; w++) {
            const int fed = feed && w == 1;
            if ((rc = fed ? submit_fed(rt, &seq_ids[s], pos[s], &pd[s], &err)
                          : submit_token(rt, &tok[s], &seq_ids[s], &pos[s], mode, &pd[s], &err)) == 0)
                rc = greedy_token(pd[s], dev_argmax, n_vocab, &tok[s], &(uint64_t){0}, &err);
            act_pending_release(pd[s]);
            pd[s] = NULL;
            pos[s]++;
        }
    }
    const int start = prompt + 2; /* the first timed position */
    act_pp_drain(rt, NULL);
    act_pp_reset_stats(rt);
    const int traced = rc == 0 && ktrace && (rc = bench_ktrace_start(&err)) == 0;
    const int rt_traced = rc == 0 && a->trace && stages > 1 && (rc = act_trace_start(rt, a->trace, stages, &err)) == 0;
    double t0 = bench_now_s();
    uint64_t t_sub = bench_now_ns(), t_woke = 0; /* S == 1: the turn breakdown (the first submit is next) */
    int done = 0, total = S * T;
    /* keep every sequence in flight: one pending per sequence, resubmitted as soon as it is drained (feed: two,
     * the second fed on the device from the first, so the host's turn is off the device's critical path) */
    for (int s = 0; s < S && rc == 0; s++) {
        rc = submit_token(rt, &tok[s], &seq_ids[s], &pos[s], mode, &pd[s], &err);
        if (rc == 0 && feed && T > 1)
            rc = submit_fed(rt, &seq_ids[s], pos[s] + 1, &ahead[s], &err);
    }
    act_pending_times pt = {0};
    for (int k = 0; rc == 0 && done < total; k = (k + 1) % S) {
        if (!pd[k])
            continue;
        if ((rc = greedy_token(pd[k], dev_argmax, n_vocab, &tok[k], &t_woke, &err)) != 0)
            break;
        fnv[k] = fnv_add(fnv[k], tok[k]);
        if (S == 1)
            act_pending_get_times(pd[k], &pt);
        act_pending_release(pd[k]);
        pd[k] = NULL;
        pos[k]++;
        done++;
        if (feed) {
            pd[k] = ahead[k];
            ahead[k] = NULL;
            /* timed steps of k submitted so far: pos[k] - start done and pd[k] in flight */
            if (pd[k] && pos[k] + 1 - start < T)
                rc = submit_fed(rt, &seq_ids[k], pos[k] + 1, &ahead[k], &err);
        } else if (pos[k] - start < T) {
            const uint64_t t_next = bench_now_ns();
            if (S == 1 && pt.stage0_ns && pt.enqueued_ns && pt.done_ns) {
                const uint64_t pts[HT_N + 1] = {t_sub, pt.stage0_ns, pt.enqueued_ns, pt.readback_ns, pt.synced_ns,
                                                pt.done_ns, t_woke, t_next};
                for (int h = 0; h < HT_N; h++)
                    out->turn_us[h] += (double)(int64_t)(pts[h + 1] - pts[h]) / 1e3;
                out->turns++;
            }
            t_sub = t_next;
            rc = submit_token(rt, &tok[k], &seq_ids[k], &pos[k], mode, &pd[k], &err);
        }
    }
    double wall = bench_now_s() - t0;
    out->weight_bytes = model_weight_bytes(act_pp_model(rt));
    if (rc != 0)
        fprintf(stderr, "memra-bench pp-scaling: %s\n", err.msg);
    out->N = act_pp_stages(rt);
    out->tokens_fnv = 14695981039346656037ull;
    for (int s = 0; s < S; s++)
        out->tokens_fnv = fnv_add(fnv_add(out->tokens_fnv, (int32_t)fnv[s]), (int32_t)(fnv[s] >> 32));
    for (int s = 0; s <= out->N && s < 65; s++)
        out->fence[s] = act_pp_fence(rt)[s];
    out->wall_s = wall;
    out->tok_s = done / wall;
    for (int s = 0; s < out->N && s < 64; s++) {
        act_pp_stage_stats ss;
        act_pp_get_stage_stats(rt, s, &ss);
        out->busy[s] = 100.0 * (double)ss.busy_ns / (wall * 1e9);
        out->step_us[s] = ss.walks ? (double)ss.busy_ns / 1e3 / (double)ss.walks : 0.0;
        out->enq_us[s] = ss.enqueues ? (double)ss.enqueue_ns / 1e3 / (double)ss.enqueues : 0.0;
    }
    act_pp_counters c;
    act_pp_get_counters(rt, &c);
    out->graph_replays = c.graph_replays;
    out->graph_captures = c.graph_captures;
    out->head_ring_steps = c.head_ring_steps;
    for (int s = 0; s < S; s++)
        for (act_pending **q = &pd[s]; q; q = q == &pd[s] ? &ahead[s] : NULL)
            if (*q) {
                if (dev_argmax)
                    act_pending_wait_tokens(*q, NULL, NULL, NULL);
                else
                    act_pending_wait(*q, NULL, NULL, NULL);
                act_pending_release(*q);
            }
    if (rt_traced && (act_pp_drain(rt, NULL), act_trace_stop(rt, NULL, &err)) != 0) {
        fprintf(stderr, "memra-bench pp-scaling: --trace: %s\n", err.msg);
        rc = rc ? rc : 2;
    }
    dev_err kerr = {0}; /* after every step was waited and the runtime drained: each kernel has its end time */
    if (traced && (act_pp_drain(rt, NULL), bench_ktrace_stop(stdout, ktrace, S * T, 0, &kerr)) != 0) {
        fprintf(stderr, "memra-bench pp-scaling: %s\n", kerr.msg);
        rc = rc ? rc : 2;
    }
    act_pp_destroy(rt);
    free(tok), free(pos), free(ptok), free(pseq), free(ppos), free(pd);
    return rc ? 2 : 0;
}

/* Whether PP-N (b) decoded PP-1's (a) tokens; when not, a line on stderr naming the pair (1 = the table's). */
static int same_tokens(const run_result *a, const run_result *b, int pair)
{
    if (a->tokens_fnv == b->tokens_fnv)
        return 1;
    fprintf(stderr, "memra-bench pp-scaling: pair %d: PP-%d decoded other tokens than PP-1\n", pair, b->N);
    return 0;
}

/* R - 1 more (PP-1, PP-N) pairs after the first (ratio0); prints every pair's PP-N / PP-1 tokens/s and the
 * median of the R ratios. */
static int repeat_pairs(dev_platform *plat, const pp_args *args, int N, int R, double ratio0)
{
    double ratio[64] = {ratio0};
    int rc = 0, n = 1;
    for (; n < R && rc == 0; n++) {
        run_result a = {0}, b = {0};
        if ((rc = run_one(plat, args, 1, NULL, &a)) == 0 && (rc = run_one(plat, args, N, NULL, &b)) == 0)
            ratio[n] = b.tok_s / a.tok_s;
        if (rc == 0 && !same_tokens(&a, &b, n + 1))
            rc = 1;
    }
    if (rc)
        return rc;
    printf("ratio per pair (PP-%d over PP-1):", N);
    for (int i = 0; i < R; i++)
        printf(" %.3f", ratio[i]);
    bench_sort(ratio, R);
    printf("  median=%.3f\n", R % 2 ? ratio[R / 2] : 0.5 * (ratio[R / 2 - 1] + ratio[R / 2]));
    return 0;
}

int bench_pp_scaling(int argc, char **argv)
{
    const char *model = NULL, *synth = NULL, *type = "bf16", *ktrace = NULL, *trace = NULL;
    int N = 2, S = 4, T = 32, prompt = 8, ctx = 0, no_pp1 = 0, dev_argmax = 0, repeat = 1;
    const bench_flag flags[] = {{"-m", NULL, &model, 0, 0},          {"--stages", &N, NULL, 2, 64},
                                {"--seqs", &S, NULL, 1, 64},             {"--tokens", &T, NULL, 1, 1 << 20},
                                {"--prompt", &prompt, NULL, 1, 1 << 16}, {"--synthetic", NULL, &synth, 0, 0},
                                {"--type", NULL, &type, 0, 0},           {"--no-pp1", &no_pp1, NULL, 0, 1},
                                {"--device-argmax", &dev_argmax, NULL, 0, 2}, {"--repeat", &repeat, NULL, 1, 64},
                                {"--kernel-trace", NULL, &ktrace, 0, 0}, {"--ctx", &ctx, NULL, 0, 1 << 20},
                                {"--trace", NULL, &trace, 0, 0}};
    const int prc = bench_parse("pp-scaling", argc, argv, flags, (int)(sizeof flags / sizeof flags[0]),
        "-m MODEL | --synthetic llama3-8b|llama3-70b|mid|tiny [--type bf16|f16|q8_0|q4_k|...]\n"
        "    [--stages N=2] [--seqs S=4] [--tokens T=32] [--prompt P=8] [--no-pp1 1] [--device-argmax 1|2]\n"
        "    [--repeat R=1] [--kernel-trace FILE.csv|FILE.json] [--ctx POSITIONS] [--trace FILE.json]\n"
        "(--trace: PP-N once more with its timed steps traced into FILE, docs/trace.md, and tok/s on/off; "
        "--device-argmax: greedy on the device, ACT_LOGITS_ARGMAX; 2: and each next step fed on the device "
        "(act_pp_step.feed) before the current one is waited; --repeat: R pairs of PP-1 then PP-N, "
        "each pair's ratio and their median (the table shows the first pair); placement and "
        "slots from MEMRA_PP_DEVICES, MEMRA_PP_SLOTS; MEMRA_PP_OVERLAP defaults to 1 here; a synthetic "
        "model is generated on the stage devices; --kernel-trace: every kernel of PP-1's timed steps on the GPU's "
        "clock (CUPTI): a table per (kernel, grid) per token, and FILE: a CSV, or a Perfetto trace if *.json; "
        "--ctx: the KV cache's positions per sequence, 0 = the runtime's default, min(1024, the model's context); "
        "exits 1 when PP-N decodes other tokens than PP-1)");
    if (prc)
        return prc;
    mdl_gguf_synth shape, *syn = NULL;
    if (synth) {
        dev_err se = {0};
        if (mdl_synth_parse(synth, type, &shape, &se) != 0) {
            fprintf(stderr, "memra-bench pp-scaling: %s\n", se.msg);
            return 2;
        }
        syn = &shape;
        model = synth;
    }
    if (!model) {
        fprintf(stderr, "memra-bench pp-scaling: -m MODEL or --synthetic NAME is required\n");
        return 2;
    }
    if (no_pp1 && repeat > 1) { /* the repeats are PP-1 / PP-N pairs */
        fprintf(stderr, "memra-bench pp-scaling: --repeat %d needs PP-1 (not with --no-pp1)\n", repeat);
        return 2;
    }
    if (ktrace && !bench_ktrace_available()) {
        fprintf(stderr, "memra-bench pp-scaling: --kernel-trace needs a build with CUDA 13 and its CUPTI "
                        "(MEMRA_CUDA=ON, CMake's CUDA::cupti)\n");
        return 2;
    }
    if (ktrace && repeat > 1) { /* the repeats' ratios would carry the traced run's cost */
        fprintf(stderr, "memra-bench pp-scaling: --kernel-trace traces one PP-1 run (not with --repeat)\n");
        return 2;
    }
    if (no_pp1 && ktrace) {
        fprintf(stderr, "memra-bench pp-scaling: --kernel-trace traces PP-1's steps (not with --no-pp1)\n");
        return 2;
    }
    setenv("MEMRA_PP_OVERLAP", getenv("MEMRA_PP_OVERLAP") ? getenv("MEMRA_PP_OVERLAP") : "1", 1);
    dev_err err = {0};
    dev_platform *plat = dev_platform_open_env(&err);
    if (!plat) {
        fprintf(stderr, "memra-bench pp-scaling: %s\n", err.msg);
        return 2;
    }
    if (ktrace && dev_platform_kind(plat) != DEV_KIND_CUDA) {
        fprintf(stderr, "memra-bench pp-scaling: --kernel-trace traces CUDA kernels; this run's backend is the CPU "
                        "(MEMRA_BACKEND=cuda on a GPU machine)\n");
        dev_platform_close(plat);
        return 2;
    }
    run_result r1 = {0}, rn = {0};
    const pp_args args = {syn ? NULL : model, syn, S, T, prompt, ctx, dev_argmax, NULL};
    int rc = no_pp1 ? 0 : run_one(plat, &args, 1, ktrace, &r1);
    if (rc == 0)
        rc = run_one(plat, &args, N, NULL, &rn);
    run_result rt_on = {0};
    if (rc == 0 && trace) { /* PP-N again, traced: the overhead of tracing against the run above */
        pp_args ta = args;
        ta.trace = trace;
        if ((rc = run_one(plat, &ta, N, NULL, &rt_on)) == 0)
            printf("trace: %s written (PP-%d); tracing on %.2f tok/s, off %.2f tok/s: ratio on/off=%.3f\n", trace,
                   rt_on.N, rt_on.tok_s, rn.tok_s, rt_on.tok_s / rn.tok_s);
    }
    if (rc == 0) {
        printf("pp-scaling: %s, %d sequences in flight, %d tokens each, backend %s\n", model, S, T,
               dev_platform_kind(plat) == DEV_KIND_CUDA ? "cuda" : "cpu");
        printf("%-6s %10s %8s %9s  %s\n", "run", "tokens/s", "wall s", "GB/s eff", "busy % per stage (bubble % = 100 - busy)");
        const run_result *rr[2] = {&r1, &rn};
        for (int i = no_pp1; i < 2; i++) {
            /* effective weight bandwidth: every step of one row reads all the weights once */
            printf("PP-%-3d %10.2f %8.2f %9.1f ", rr[i]->N, rr[i]->tok_s, rr[i]->wall_s,
                   rr[i]->weight_bytes * rr[i]->tok_s / 1e9);
            for (int s = 0; s < rr[i]->N; s++)
                printf(" s%d %5.1f%%", s, rr[i]->busy[s]);
            printf("  layers");
            for (int s = 0; s < rr[i]->N; s++)
                printf("%s%d", s ? "|" : " ", rr[i]->fence[s + 1] - rr[i]->fence[s]);
            printf("\n");
        }
        for (int i = no_pp1; i < 2; i++) { /* one sequence: where the wall time of a token goes */
            if (rr[i]->turns == 0)
                continue;
            printf("host turn us/token PP-%d (%d tokens):", rr[i]->N, rr[i]->turns);
            for (int h = 0; h < HT_N; h++)
                printf(" %s%s %.1f", h ? "| " : "", HT_NAMES[h], rr[i]->turn_us[h] / rr[i]->turns);
            printf("\n");
        }
        /* The stage stream's own time per step (walk-begin to walk-end markers): without the host's turn
         * between steps, so PP-1's weight bytes over it is the weight-streaming rate of one stage (P2). */
        for (int i = no_pp1; i < 2; i++) {
            printf("device us/step PP-%d:", rr[i]->N);
            for (int s = 0; s < rr[i]->N; s++)
                printf(" s%d %.1f", s, rr[i]->step_us[s]);
            if (rr[i]->N == 1 && rr[i]->step_us[0] > 0)
                printf("  (weights / step time: %.1f GB/s)", rr[i]->weight_bytes / (rr[i]->step_us[0] * 1e3));
            printf("\n");
        }
        printf("host enqueue us/step (PP-%d, the walk's layers):", rn.N);
        for (int s = 0; s < rn.N; s++)
            printf(" s%d %.1f", s, rn.enq_us[s]);
        printf("  graphs: %llu captured, %llu replays  head ring: %llu steps\n",
               (unsigned long long)rn.graph_captures, (unsigned long long)rn.graph_replays,
               (unsigned long long)rn.head_ring_steps);
        printf("weights %.2f GB per token step\n", rn.weight_bytes / 1e9);
        if (ktrace) /* CUPTI timestamps every kernel of PP-1's timed steps */
            printf("note: PP-1 ran under --kernel-trace; its tokens/s, device time and the ratio include the "
                   "tracing's cost\n");
        printf("tokens fnv PP-%d %016llx", rn.N, (unsigned long long)rn.tokens_fnv);
        if (!no_pp1)
            printf(" PP-1 %016llx (%s)", (unsigned long long)r1.tokens_fnv,
                   r1.tokens_fnv == rn.tokens_fnv ? "same tokens" : "TOKENS DIFFER");
        printf("\n");
        if (!no_pp1 && !same_tokens(&r1, &rn, 1)) /* splitting must not change a token: a failed run */
            rc = 1;
        if (rc == 0 && !no_pp1 && repeat > 1) /* more pairs, alternating, so drift and noise hit both sides alike */
            rc = repeat_pairs(plat, &args, N, repeat, rn.tok_s / r1.tok_s);
        if (!no_pp1)
            printf("ratio=%.3f (PP-%d over PP-1, tokens/s, same run)\n", rn.tok_s / r1.tok_s, rn.N);
    }
    dev_platform_close(plat);
    return rc;
}
