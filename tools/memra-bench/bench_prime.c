/* memra-bench prime: chunked prefill of one P-token prompt, in one process: the unsplit walk (the reference
 * arm, chunk after chunk on the primary stream) vs PP-N with the chunk pipeline (chunk c+1 in stage 0 while
 * chunk c is in stage 1). Prints both times and ratio=<unsplit time / PP-N time>. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/pp.h"
#include "bench.h"
#include "model/llama.h"

/* Prime the prompt once on rt; unsplit = 1 runs the reference arm. Returns seconds, < 0 on error. */
static double prime_once(act_pp *rt, const int32_t *prompt, int P, int C, int unsplit, float *last, dev_err *err)
{
    int n_chunks = (P + C - 1) / C;
    act_pending **pd = calloc((size_t)n_chunks, sizeof *pd);
    int32_t *seq = calloc((size_t)C, sizeof *seq), *pos = malloc((size_t)C * sizeof *pos);
    double t0 = bench_now_s();
    int r = 0;
    for (int c = 0; c < n_chunks && r == 0; c++) {
        int n = P - c * C < C ? P - c * C : C;
        for (int i = 0; i < n; i++)
            pos[i] = c * C + i;
        act_pp_step st = {.kind = ACT_STEP_PRIME, .B = n, .tokens = prompt + c * C, .seq = seq, .pos = pos,
                          .logits = c == n_chunks - 1 ? ACT_LOGITS_LAST : ACT_LOGITS_NONE};
        r = unsplit ? act_pp_run_unsplit(rt, &st, last, err) : act_pp_submit(rt, &st, &pd[c], err);
    }
    for (int c = 0; c < n_chunks; c++) /* the pipelined chunks drain together */
        if (pd[c]) {
            const float *l;
            int w = act_pending_wait(pd[c], &l, NULL, err);
            if (w == 0 && c == n_chunks - 1)
                memcpy(last, l, (size_t)mdl_model_hparams(act_pp_model(rt))->n_vocab * sizeof(float));
            r = r ? r : w;
            act_pending_release(pd[c]);
        }
    double t = bench_now_s() - t0;
    free(pd), free(seq), free(pos);
    return r ? -1 : t;
}

int bench_prime(int argc, char **argv)
{
    const char *model = NULL;
    int N = 2, P = 512, C = 64, reps = 3;
    const bench_flag flags[] = {{"-m", NULL, &model, 0, 0},     {"--stages", &N, NULL, 2, 64},
                                {"--prompt", &P, NULL, 1, 1 << 20}, {"--chunk", &C, NULL, 1, 4096},
                                {"--reps", &reps, NULL, 1, 100}};
    const int prc = bench_parse("prime", argc, argv, flags, 5,
                                "-m MODEL [--stages N=2] [--prompt P=512] [--chunk C=64] [--reps R=3]");
    if (prc)
        return prc;
    if (!model) {
        fprintf(stderr, "memra-bench prime: -m MODEL is required\n");
        return 2;
    }
    dev_err err = {0};
    dev_platform *plat = dev_platform_open_env(&err);
    act_pp_params p = act_pp_default_params();
    p.config.stages = N;
    p.max_rows = C;
    p.n_seq = 1;
    p.n_ctx = P;
    p.whole_model = 1; /* the unsplit walk needs every layer here (under mpirun: on rank 0) */
    act_pp *rt = plat ? act_pp_create(plat, model, &p, &err) : NULL;
    if (!rt) {
        fprintf(stderr, "memra-bench prime: %s\n", err.msg);
        if (plat)
            dev_platform_close(plat);
        return 2;
    }
    const mdl_hparams *hp = mdl_model_hparams(act_pp_model(rt));
    int32_t *prompt = malloc((size_t)P * sizeof *prompt);
    float *a = malloc((size_t)hp->n_vocab * sizeof(float)), *b = malloc((size_t)hp->n_vocab * sizeof(float));
    for (int i = 0; i < P; i++)
        prompt[i] = (int32_t)((i * 7919 + 11) % hp->n_vocab);
    double best_u = 1e30, best_p = 1e30;
    int same = 1, rc = 0;
    for (int r = 0; r < reps && rc == 0; r++) { /* interleaved, best of R each */
        double tu = prime_once(rt, prompt, P, C, 1, a, &err), tp = prime_once(rt, prompt, P, C, 0, b, &err);
        if (tu < 0 || tp < 0) {
            fprintf(stderr, "memra-bench prime: %s\n", err.msg);
            rc = 2;
            break;
        }
        best_u = tu < best_u ? tu : best_u;
        best_p = tp < best_p ? tp : best_p;
        same &= memcmp(a, b, (size_t)hp->n_vocab * sizeof(float)) == 0;
    }
    if (rc == 0) {
        act_pp_counters c;
        act_pp_get_counters(rt, &c);
        printf("prime: %s, %d-token prompt in chunks of %d, backend %s, best of %d\n", model, P, C,
               dev_platform_kind(plat) == DEV_KIND_CUDA ? "cuda" : "cpu", reps);
        printf("%-22s %9s %10s\n", "arm", "seconds", "tokens/s");
        printf("%-22s %9.3f %10.1f\n", "unsplit (one stream)", best_u, P / best_u);
        printf("PP-%-2d chunk pipeline   %9.3f %10.1f\n", N, best_p, P / best_p);
        printf("last-chunk logits bit-identical: %s; PRIME_PIPE_OVERLAPS %llu\n", same ? "yes" : "NO",
               (unsigned long long)c.prime_pipe_overlaps);
        printf("ratio=%.3f (unsplit time over PP-%d time, same run)\n", best_u / best_p, N);
    }
    free(prompt), free(a), free(b);
    act_pp_destroy(rt);
    dev_platform_close(plat);
    return rc;
}
