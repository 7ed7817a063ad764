/* memra-bench subcommands. Each prints a table and returns the process exit status (0 ok, 2 usage/error).
 * Benchmarks report; they never assert speed. */
#ifndef MEMRA_BENCH_H
#define MEMRA_BENCH_H

#include <stdint.h>

int bench_mailbox(int argc, char **argv);     /* hand-off latency between two threads (actors/) */
int bench_decode(int argc, char **argv);      /* single-stage prefill/decode tokens/s (model/) */
int bench_hop(int argc, char **argv);         /* one boundary hop per transport and slot count (transport/) */
int bench_pp_scaling(int argc, char **argv);  /* PP-1 vs PP-N with S sequences in flight (actors/pp) */
int bench_prime(int argc, char **argv);       /* chunked prefill: unsplit vs PP-N chunk pipeline */
int bench_sample(int argc, char **argv);      /* host time to pick one token (model/sampler) */
int bench_serve(int argc, char **argv);       /* S requests through the serving scheduler vs one alone (api/) */
int bench_tokenize(int argc, char **argv);    /* host time to tokenize long texts (model/tok_*) */
int bench_cpu_kernels(int argc, char **argv); /* us per CPU matmul call, fast and exact (kernels/x8_gemm.c) */
int bench_gpu_kernels(int argc, char **argv); /* CUDA GEMV bandwidth per weight type (kernels/cuda) */
/* gpu-kernels --attention (bench_gpu_att.c): krn_cuda_attention_ws_async on the 8B shape per cache type, B and
 * context, on CUDA device dev, iters timed calls per row, "% HBM" against hbm GB/s, pdl = 1 launches with PDL.
 * Prints the table; returns 0, or 2 (no device, a failed CUDA call: message printed; built without CUDA). */
int bench_gpu_att(int dev, int iters, double hbm, int pdl);

/* One flag of a subcommand: a string (sval) or an integer in [lo, hi] (ival). */
typedef struct bench_flag {
    const char *name;
    int *ival;
    const char **sval;
    int lo, hi;
} bench_flag;

/* bench_parse's return after -h or --help (the usage went to stdout): the subcommand returns it as it returns an
 * error, and main exits 0 for it. Above 255, so no exit status of a subcommand is taken for it. */
#define BENCH_HELP 0x100

/* Parse argv[1..) against flags; returns 0, BENCH_HELP, or 2 after printing what was wrong and the usage line.
 * usage: the options after "memra-bench <cmd> ". */
int bench_parse(const char *cmd, int argc, char **argv, const bench_flag *flags, int n, const char *usage);

/* v as an integer in [lo, hi] into *out: 0, or 2 after printing "memra-bench cmd: name v: expected ...". */
int bench_int(const char *cmd, const char *name, const char *v, int lo, int hi, int *out);

/* Seconds on CLOCK_MONOTONIC (the wall clock every subcommand times with). */
double bench_now_s(void);
/* Sort v[0..n) ascending (for medians and percentiles). */
void bench_sort(double *v, int n);
/* The next value of a xorshift64 generator whose state (non-zero) is *s: the random fills of the benchmarks. */
uint64_t bench_xorshift(uint64_t *s);
/* The next bench_xorshift as a value in [-1, 1] in steps of 1/1000 (the benchmarks' inputs). */
float bench_rand_unit(uint64_t *s);

/* A CUDA runtime call in a function with a `fail:` cleanup label: on failure print "who: what: error" and goto
 * fail. (For the files that include cuda_runtime_api.h.) */
#define BENCH_CUDA_CK(who, call, what)                                                                         \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess) {                                                                               \
            fprintf(stderr, "%s: %s: %s\n", who, what, cudaGetErrorString(e_));                                \
            goto fail;                                                                                         \
        }                                                                                                      \
    } while (0)

#endif
