/* memra-bench serve: tokens/s of S greedy requests through the serving scheduler (memra_generate: the requests
 * packed into micro-batches), against one request alone on the same runtime, in one process. Prints a row per
 * arm and a last line with ratio=<S requests / 1 request>. Every arm decodes the same requests: request i's
 * tokens in the S arm are compared with what it decodes alone ("same" column). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "bench.h"
#include "cuda/ktrace.h"
#include "ktrace_report.h"
#include "model/llama.h"

typedef struct serve_arm {
    int S;
    double wall_s, tok_s;
    double steady_tok_s; /* tokens/s while every request decodes: from the last first token to the first last token */
    uint64_t tokens, steps, rows;
} serve_arm;

/* When each request's tokens came (the token callback, on memra_generate's thread). */
typedef struct tok_clock {
    double *t;   /* (S, T) seconds */
    int *n;      /* (S,) tokens seen */
    int T;
} tok_clock;

static int on_token(void *user, int request, memra_token token, const char *piece, int n_piece)
{
    (void)token, (void)piece, (void)n_piece;
    tok_clock *c = user;
    if (c->n[request] < c->T)
        c->t[(size_t)request * c->T + c->n[request]++] = bench_now_s();
    return 0;
}

/* Tokens per second inside [max first token, min last token]: the requests all decoding at once. 0 when the window
 * is empty (one request, or requests that never overlapped). */
static double steady_rate(const tok_clock *c, int S)
{
    double t0 = 0, t1 = 1e300;
    for (int i = 0; i < S; i++) {
        if (c->n[i] < 2)
            return 0;
        const double *t = c->t + (size_t)i * c->T;
        t0 = t[0] > t0 ? t[0] : t0;
        t1 = t[c->n[i] - 1] < t1 ? t[c->n[i] - 1] : t1;
    }
    if (t1 <= t0)
        return 0;
    uint64_t k = 0;
    for (int i = 0; i < S; i++)
        for (int j = 0; j < c->n[i]; j++)
            k += c->t[(size_t)i * c->T + j] > t0 && c->t[(size_t)i * c->T + j] <= t1;
    return (double)k / (t1 - t0);
}

/* Request i's prompt: P tokens from a fixed generator (the same in every arm). */
static void prompt_of(int i, int P, int n_vocab, memra_token *out)
{
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    for (int k = 0; k < P; k++)
        out[k] = (memra_token)(bench_xorshift(&x) % (uint64_t)n_vocab);
}

/* Run S requests (first..first+S-1) to T tokens each; out[i*T..] receives request first+i's tokens. */
static int run_arm(memra_runtime *rt, int first, int S, int P, int T, memra_token *out, serve_arm *a)
{
    const int n_vocab = memra_runtime_n_vocab(rt);
    memra_token *prompts = malloc((size_t)S * (size_t)P * sizeof *prompts);
    memra_request *r = calloc((size_t)S, sizeof *r);
    tok_clock clk = {calloc((size_t)S * (size_t)T, sizeof(double)), calloc((size_t)S, sizeof(int)), T};
    if (!prompts || !r || !clk.t || !clk.n) {
        free(prompts);
        free(r);
        free(clk.t);
        free(clk.n);
        fprintf(stderr, "memra-bench serve: out of host memory\n");
        return 2;
    }
    for (int i = 0; i < S; i++) {
        prompt_of(first + i, P, n_vocab, prompts + (size_t)i * P);
        r[i] = (memra_request){.prompt = prompts + (size_t)i * P, .n_prompt = P, .n_predict = T,
                               .sampling = memra_sampler_greedy_params(), .out = out + (size_t)i * T, .out_cap = T};
    }
    memra_counters c0, c1;
    memra_runtime_counters(rt, &c0);
    const double t0 = bench_now_s();
    int rc = memra_generate(rt, r, S, 0, on_token, &clk);
    a->wall_s = bench_now_s() - t0;
    memra_runtime_counters(rt, &c1);
    a->S = S;
    a->tokens = 0;
    for (int i = 0; i < S && rc == 0; i++) {
        if (r[i].status != MEMRA_OK) {
            fprintf(stderr, "memra-bench serve: request %d: status %d: %s\n", i, r[i].status,
                    memra_runtime_last_error(rt));
            rc = 2;
        }
        a->tokens += (uint64_t)r[i].n_out;
    }
    if (rc && rc != 2)
        fprintf(stderr, "memra-bench serve: memra_generate: %s\n", memra_last_error());
    a->tok_s = a->wall_s > 0 ? (double)a->tokens / a->wall_s : 0;
    a->steady_tok_s = steady_rate(&clk, S);
    free(clk.t);
    free(clk.n);
    a->steps = c1.steps_done - c0.steps_done;
    a->rows = (c1.tokens_decoded - c0.tokens_decoded) + (c1.tokens_primed - c0.tokens_primed);
    free(prompts);
    free(r);
    return rc ? 2 : 0;
}

int bench_serve(int argc, char **argv)
{
    const char *model = NULL, *synth = NULL, *type = "bf16", *ktrace = NULL, *trace = NULL;
    int N = 1, S = 8, T = 32, P = 8, M = 0, ctx = 0, repeat = 1, max_rows = 0, check_all = 0;
    const bench_flag flags[] = {{"-m", NULL, &model, 0, 0},          {"--synthetic", NULL, &synth, 0, 0},
                                {"--type", NULL, &type, 0, 0},       {"--stages", &N, NULL, 1, 64},
                                {"--seqs", &S, NULL, 1, 4096},       {"--tokens", &T, NULL, 1, 1 << 20},
                                {"--prompt", &P, NULL, 1, 1 << 16},  {"--micro-batches", &M, NULL, 0, 4096},
                                {"--ctx", &ctx, NULL, 0, 1 << 20},   {"--repeat", &repeat, NULL, 1, 64},
                                {"--max-rows", &max_rows, NULL, 0, 65536}, {"--check-all", &check_all, NULL, 0, 1},
                                {"--kernel-trace", NULL, &ktrace, 0, 0}, {"--trace", NULL, &trace, 0, 0}};
    const int prc = bench_parse("serve", argc, argv, flags, (int)(sizeof flags / sizeof flags[0]),
        "-m MODEL | --synthetic llama3-8b|llama3-70b|mid|tiny [--type bf16|f16|q8_0|q4_k|...]\n"
        "    [--stages N=1] [--seqs S=8] [--tokens T=32] [--prompt P=8] [--micro-batches M=0]\n"
        "    [--max-rows R=0] [--ctx POSITIONS] [--repeat R=1] [--check-all 1] [--kernel-trace FILE.csv|.json]\n"
        "    [--trace FILE.json]\n"
        "(S greedy requests of P prompt tokens and T generated tokens each through memra_generate, then one "
        "alone, on one runtime: tokens/s of each and their ratio; --micro-batches: 0 = the runtime's "
        "(MEMRA_PP_MICRO_BATCHES, else N); --max-rows: rows a step may hold, 0 = S (P + 1) within 64..4096; "
        "steady tok/s: while every request decodes; --ctx: 0 = "
        "P + T; --check-all: every request also alone (else request 0 only); --kernel-trace: one more S arm "
        "with every kernel recorded (CUPTI), a table per step and FILE; --trace: max(R, 3) more pairs of S arms, "
        "untraced then traced into FILE (docs/trace.md), and tok/s on/off (with --kernel-trace, FILE then "
        "holds the kernel-traced arm, its kernels merged in); backend, devices, seams and "
        "MEMRA_BATCH_INVARIANT from the environment's doors; exits 1 when a request decodes other tokens "
        "in the S arm than alone)");
    if (prc)
        return prc;
    if (ktrace && !bench_ktrace_available()) {
        fprintf(stderr, "memra-bench serve: --kernel-trace needs a build with CUDA 13 and its CUPTI\n");
        return 2;
    }
    memra_model *m = api_model_open(model, synth, type); /* -m or --synthetic/--type: the tools' one parser */
    if (!m) {
        fprintf(stderr, "memra-bench serve: %s\n", memra_last_error());
        return 2;
    }
    memra_runtime_params p = memra_runtime_default_params();
    p.stages = N;
    p.n_seq = S;
    /* the default budget admits every prompt in one step beside the decode rows: S (P + 1) rows, 64 at least */
    const long want_rows = (long)S * (P + 1);
    p.max_rows = max_rows ? max_rows : want_rows < 64 ? 64 : want_rows > 4096 ? 4096 : (int)want_rows;
    p.n_ctx = ctx ? ctx : P + T;
    p.micro_batches = M;
    memra_runtime *rt = memra_runtime_create(m, &p);
    if (!rt) {
        fprintf(stderr, "memra-bench serve: %s\n", memra_last_error());
        memra_model_free(m);
        return 2;
    }
    memra_token *alone = calloc((size_t)S * (size_t)T, sizeof *alone), *many = calloc((size_t)S * (size_t)T, sizeof *many);
    int rc = alone && many ? 0 : 2;
    serve_arm warm, one = {0}, all = {0};
    /* warm-up: the S arm once (captures, pools), then the arms */
    if (rc == 0)
        rc = run_arm(rt, 0, S, P, T < 4 ? T : 4, many, &warm);
    printf("serve: model %s, backend %s, stages %d, micro-batches %d, prompt %d, tokens %d, max_rows %d, "
           "batch-invariant %d\n", synth ? synth : model, memra_runtime_backend(rt), memra_runtime_n_stages(rt),
           rt->micro_batches, P, T, memra_runtime_max_rows(rt), act_pp_batch_invariant(rt->pp));
    printf("%6s %10s %9s %10s %8s %10s %12s\n", "seqs", "tokens", "wall_s", "tok/s", "steps", "rows/step",
           "steady tok/s");
    double best1 = 0, bestS = 0;
    for (int k = 0; k < repeat && rc == 0; k++) {
        if ((rc = run_arm(rt, 0, 1, P, T, alone, &one)) == 0)
            rc = run_arm(rt, 0, S, P, T, many, &all);
        for (int i = 0; i < 2 && rc == 0; i++) {
            const serve_arm *a = i ? &all : &one;
            printf("%6d %10llu %9.3f %10.1f %8llu %10.2f %12.1f\n", a->S, (unsigned long long)a->tokens, a->wall_s,
                   a->tok_s, (unsigned long long)a->steps, a->steps ? (double)a->rows / (double)a->steps : 0.0,
                   a->steady_tok_s);
        }
        if (rc == 0) {
            best1 = one.tok_s > best1 ? one.tok_s : best1;
            bestS = all.tok_s > bestS ? all.tok_s : bestS;
        }
    }
    int same = 1, n_same = 0;
    for (int i = 1; i < (check_all ? S : 1) && rc == 0; i++) /* requests 1..S-1 alone too */
        rc = run_arm(rt, i, 1, P, T, alone + (size_t)i * T, &one);
    for (int i = 0; i < (check_all ? S : 1) && rc == 0; i++)
        n_same += memcmp(alone + (size_t)i * T, many + (size_t)i * T, (size_t)T * sizeof *alone) == 0;
    if (rc == 0) { /* request 0 (--check-all: every request) alone against the same request among S */
        same = n_same == (check_all ? S : 1);
        if (check_all)
            printf("requests with the same tokens alone and among %d: %d of %d\n", S, n_same, S);
        else
            printf("request 0: the same tokens alone and among %d: %s\n", S, same ? "yes" : "no");
        printf("steady=%.1f tok/s (S=%d, the last arm: every request decoding)\n", all.steady_tok_s, S);
        printf("ratio=%.3f (S=%d %.1f tok/s over S=1 %.1f tok/s, best of %d)\n", bestS / best1, S, bestS, best1, repeat);
    }
    if (rc == 0 && trace) { /* tracing's overhead: untraced and traced S arms in turn; each pair's ratio */
        double on = 0, off = 0, ratio[64];
        const int pairs = repeat > 3 ? repeat : 3;
        serve_arm ta, tb;
        for (int k = 0; k < pairs && rc == 0; k++) {
            if ((rc = run_arm(rt, 0, S, P, T, many, &ta)) != 0)
                break;
            if (memra_runtime_trace_start(rt, trace) != MEMRA_OK) {
                fprintf(stderr, "memra-bench serve: --trace %s: %s\n", trace, memra_runtime_last_error(rt));
                rc = 2;
                break;
            }
            rc = run_arm(rt, 0, S, P, T, many, &tb);
            if (memra_runtime_trace_stop(rt) != MEMRA_OK) {
                fprintf(stderr, "memra-bench serve: --trace %s: %s\n", trace, memra_runtime_last_error(rt));
                rc = 2;
            }
            off = ta.tok_s > off ? ta.tok_s : off;
            on = tb.tok_s > on ? tb.tok_s : on;
            ratio[k] = tb.tok_s / ta.tok_s;
            printf("trace pair %d: off %.1f tok/s, on %.1f tok/s, on/off %.3f\n", k, ta.tok_s, tb.tok_s, ratio[k]);
        }
        if (rc == 0) {
            bench_sort(ratio, pairs);
            printf("trace: %s written; tracing on %.1f tok/s, off %.1f tok/s (S=%d, best of %d alternating arms); "
                   "ratio on/off=%.3f (median of the pairs' ratios)\n", trace, on, off, S, pairs, ratio[pairs / 2]);
        }
    }
    if (rc == 0 && ktrace) { /* one more S arm, traced: where a step's device time goes; with --trace, that arm is
                              * also the one FILE holds, the kernels merged in on the host clock (docs/trace.md) */
        dev_err kerr = {0};
        serve_arm tr;
        const int both = trace != NULL;
        if (both && memra_runtime_trace_start(rt, trace) != MEMRA_OK) {
            fprintf(stderr, "memra-bench serve: --trace %s: %s\n", trace, memra_runtime_last_error(rt));
            rc = 2;
        } else if ((rc = bench_ktrace_start(&kerr)) == 0) {
            rc = run_arm(rt, 0, S, P, T, many, &tr);
            memra_runtime_drain(rt);
            if (bench_ktrace_stop(stdout, ktrace, (int)(tr.steps ? tr.steps : 1), both, &kerr) != 0 && rc == 0)
                rc = 2;
        }
        if (rc && kerr.msg[0])
            fprintf(stderr, "memra-bench serve: --kernel-trace: %s\n", kerr.msg);
        if (both && memra_runtime_trace_stop(rt) != MEMRA_OK) {
            fprintf(stderr, "memra-bench serve: --trace %s: %s\n", trace, memra_runtime_last_error(rt));
            rc = 2;
        }
        bench_kt_merge_release();
        if (both && rc == 0)
            printf("trace: %s rewritten with the kernel-traced S arm, its CUPTI kernels merged in\n", trace);
    }
    free(alone);
    free(many);
    memra_runtime_free(rt);
    memra_model_free(m);
    return rc ? rc : same ? 0 : 1;
}
