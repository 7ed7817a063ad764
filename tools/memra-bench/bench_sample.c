/* memra-bench sample: host time to pick one token from a vocabulary of logits, the work a caller does
 * between one decode step and the next (single-sequence latency pays it every token): mdl_argmax, the
 * one-pass scan it replaced (baseline, kept here only), and mdl_sampler_sample greedy and with llama.cpp's
 * defaults (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05). Random logits in [-10, 10), fixed seed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "model/sampler.h"

static int32_t scan_argmax(const float *x, int32_t n) /* the one-pass scan, for comparison */
{
    int32_t best = -1;
    for (int32_t i = 0; i < n; i++)
        if (x[i] == x[i] && (best < 0 || x[i] > x[best]))
            best = i;
    return best;
}

int bench_sample(int argc, char **argv)
{
    int n = 128256, reps = 2000;
    const bench_flag flags[] = {{"--vocab", &n, NULL, 1, 1 << 24}, {"--reps", &reps, NULL, 1, 1 << 24}};
    int rc = bench_parse("sample", argc, argv, flags, 2, "[--vocab N=128256] [--reps R=2000]");
    if (rc)
        return rc;
    float *x = malloc(sizeof(float) * (size_t)n);
    if (!x)
        return fprintf(stderr, "memra-bench sample: no memory for %d logits\n", n), 2;
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        x[i] = (float)(bench_xorshift(&r) >> 40) / (float)(1 << 24) * 20.0f - 10.0f;
    }
    mdl_sampler_params pg = mdl_sampler_default_params(), pd = mdl_sampler_default_params();
    pg.temperature = 0.0f;
    dev_err err = {0};
    mdl_sampler *sg = mdl_sampler_create(&pg, n, &err), *sd = sg ? mdl_sampler_create(&pd, n, &err) : NULL;
    if (!sd) {
        fprintf(stderr, "memra-bench sample: %s\n", err.msg);
        mdl_sampler_destroy(sg);
        free(x);
        return 2;
    }
    printf("sample: vocabulary %d, %d repetitions, us per call (median of 5 runs)\n", n, reps);
    const char *names[4] = {"mdl_argmax", "one-pass scan (old argmax)", "sampler greedy", "sampler defaults"};
    volatile int64_t sink = 0;
    for (int k = 0; k < 4; k++) {
        double t[5];
        for (int run = 0; run < 5; run++) {
            double t0 = bench_now_s();
            for (int i = 0; i < reps; i++)
                sink += k == 0 ? mdl_argmax(x, n) : k == 1 ? scan_argmax(x, n) : mdl_sampler_sample(k == 2 ? sg : sd, x);
            t[run] = (bench_now_s() - t0) * 1e6 / reps;
        }
        bench_sort(t, 5);
        printf("%-28s %8.2f\n", names[k], t[2]);
    }
    mdl_sampler_destroy(sg);
    mdl_sampler_destroy(sd);
    free(x);
    return sink == -1 ? 1 : 0;
}
