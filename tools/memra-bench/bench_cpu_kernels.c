/* memra-bench cpu-kernels: microseconds per CPU matmul call on SmolLM2-135M's shapes, for the fast mode's int8
 * GEMM in GGUF blocks and in rows of 8 (krn_x8_gemm, kernels/x8_gemm.c) and for the exact mode's f32 dot in GGUF
 * blocks and in rows of 8 (krn_cpu_matmul with x8 = 0; kernels/exact_rows8.c), with B rows of x. The weights are
 * `copies` distinct matrices cycled call after call, so that (with the default) they come from memory or L3 as in
 * decode, not from L2. Random weights and x, fixed seed; one thread. Median of 5 runs of `reps` calls. Three
 * K-quant rows of Llama-3-8B's ffn shape (n_in 4096) time the exact dot against the fast mode's K-quant GEMM
 * (kernels/x8_kquant.c); K-quants have no rows of 8.
 *
 * The last column, "f32 ceiling", bounds any exact mode: every product of an f32 activation with a weight takes at
 * least one FMA lane, so no f32 matmul of the shape runs faster than its products at the core's FMA rate (measured
 * here: independent FMAs in registers, the widest vectors the CPU has). The column is the fast mode's time (its
 * faster layout) over that FMA time: the largest exact / fast speed ratio an f32 kernel could reach. */
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "kernels/cpu/krn_cpu.h"
#include "kernels/krn.h"
#include "kernels/quant.h"
#include "kernels/quant_batch.h"

typedef struct shape { const char *name; int type, n_out, n_in; } shape;

#if defined(__x86_64__)
/* 12 independent chains of FMAs (more than the FMA latency times its ports on the cores we know), written out and
 * kept in registers by the empty asm; returns a sum so that nothing folds away. FMA_CHAINS is each arm's body. */
#define FMA_CHAINS(V, SET1, FMADD, ADD)                                                                             \
    const V m = SET1(1.0000001f), c = SET1(1e-7f);                                                               \
    V a0 = SET1(0), a1 = SET1(1), a2 = SET1(2), a3 = SET1(3), a4 = SET1(4), a5 = SET1(5);                        \
    V a6 = SET1(6), a7 = SET1(7), a8 = SET1(8), a9 = SET1(9), a10 = SET1(10), a11 = SET1(11);                    \
    for (long k = 0; k < n; k++) {                                                                               \
        a0 = FMADD(a0, m, c), a1 = FMADD(a1, m, c), a2 = FMADD(a2, m, c), a3 = FMADD(a3, m, c);                  \
        a4 = FMADD(a4, m, c), a5 = FMADD(a5, m, c), a6 = FMADD(a6, m, c), a7 = FMADD(a7, m, c);                  \
        a8 = FMADD(a8, m, c), a9 = FMADD(a9, m, c), a10 = FMADD(a10, m, c), a11 = FMADD(a11, m, c);              \
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7),   \
                         "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));                                              \
    }                                                                                                            \
    a0 = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));                                      \
    a0 = ADD(a0, ADD(ADD(a8, a9), ADD(a10, a11)));                                                               \
    float r[16];                                                                                                 \
    memcpy(r, &a0, sizeof a0);                                                                                   \
    return r[0];
__attribute__((target("avx2,fma"), noinline)) static float fma_chains_avx2(long n)
{
    FMA_CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps)
}
__attribute__((target("avx512f"), noinline)) static float fma_chains_avx512(long n)
{
    FMA_CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps)
}
#endif

/* The core's f32 FMA rate in products per microsecond (the best of 5 runs of about 20 ms, the widest vectors the CPU
 * has), and the width's name in *isa; 0 where there is no vector FMA to measure. */
static double fma_rate_per_us(const char **isa)
{
    *isa = "none";
#if defined(__x86_64__)
    __builtin_cpu_init();
    const int wide = __builtin_cpu_supports("avx512f");
    if (!wide && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
        return 0;
    *isa = wide ? "AVX-512" : "AVX2";
    const long n = 1 << 20;
    double best = 0;
    volatile float sink = 0;
    for (int run = 0; run < 5; run++) {
        const double t0 = bench_now_s();
        sink += wide ? fma_chains_avx512(n) : fma_chains_avx2(n);
        const double r = 12.0 * n * (wide ? 16 : 8) / ((bench_now_s() - t0) * 1e6);
        best = r > best ? r : best;
    }
    (void)sink;
    return best;
#else
    return 0;
#endif
}

/* us per call of arm a (0 exact blocks, 1 x8 blocks, 2 x8 rows of 8, 3 exact rows of 8) over the `copies` matrices
 * at w / w8 */
static double time_arm(int a, const shape *sh, const uint8_t *w, const uint8_t *w8, int copies, const float *x,
                       const uint8_t *xq, int B, float *y, int reps)
{
    const size_t rb = krn_row_bytes(sh->type, sh->n_in), mb = rb * (size_t)sh->n_out;
    double t[5];
    for (int run = 0; run < 5; run++) {
        const double t0 = bench_now_s();
        for (int i = 0; i < reps; i++) {
            const size_t off = (size_t)(i % copies) * mb;
            if (a == 0 || a == 3)
                krn_cpu_matmul(&(krn_cpu_matmul_args){ y, (a == 0 ? w : w8) + off, x, sh->type, sh->n_out, sh->n_in, B,
                                                       rb, 0, KRN_F32, 0,
                                                       a == 0 ? KRN_LAYOUT_BLOCKS : KRN_LAYOUT_ROWS8, 1 });
            else
                krn_x8_gemm(sh->type, a == 1 ? KRN_LAYOUT_BLOCKS : KRN_LAYOUT_ROWS8, (a == 1 ? w : w8) + off, rb,
                            sh->n_out, xq, B, sh->n_in, y, sh->n_out, 0);
        }
        t[run] = (bench_now_s() - t0) * 1e6 / reps;
    }
    bench_sort(t, 5);
    return t[2];
}

int bench_cpu_kernels(int argc, char **argv)
{
    int mib = 64, reps = 40;
    const bench_flag flags[] = {{"--mib", &mib, NULL, 1, 4096}, {"--reps", &reps, NULL, 1, 1 << 20}};
    int rc = bench_parse("cpu-kernels", argc, argv, flags, 2, "[--mib M=64] [--reps R=40]");
    if (rc)
        return rc;
    const shape shapes[] = {{"ffn up/gate", KRN_Q4_1, 1536, 576}, {"ffn down", KRN_Q4_1, 576, 1536},
                            {"attn q/o", KRN_Q4_1, 576, 576}, {"head (tied)", KRN_Q8_0, 49152, 576},
                            {"Llama-3 ffn rows", KRN_Q4_K, 1024, 4096}, {"Llama-3 ffn rows", KRN_Q5_K, 1024, 4096},
                            {"Llama-3 ffn rows", KRN_Q6_K, 1024, 4096}};
    const int Bs[] = {1, 2, 4, 32};
    const char *isa;
    const double fma_rate = fma_rate_per_us(&isa);
    printf("cpu-kernels: us per call (median of 5 runs of %d calls), weights cycled over %d MiB; x8 path %d; "
           "f32 FMA rate %.0f products per us (%s)\n",
           reps, mib, krn_x8_path(), fma_rate, isa);
    printf("| shape | type | n_out x n_in | B | exact blocks | exact rows8 | x8 blocks | x8 rows8 | "
           "x8 blocks / rows8 | exact rows8 / x8 rows8 | f32 ceiling |\n");
    printf("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const shape *sh = &shapes[s];
        const size_t rb = krn_row_bytes(sh->type, sh->n_in), mb = rb * (size_t)sh->n_out;
        int copies = (int)(((size_t)mib << 20) / mb);
        copies = copies < 1 ? 1 : copies;
        uint8_t *w = malloc(mb * (size_t)copies), *w8 = malloc(mb * (size_t)copies);
        float *row = malloc(sizeof(float) * (size_t)sh->n_in), *x = malloc(sizeof(float) * 32 * (size_t)sh->n_in);
        uint8_t *xq = malloc(32 * krn_x8_row_bytes(sh->n_in));
        float *y = malloc(sizeof(float) * 32 * (size_t)sh->n_out);
        if (!w || !w8 || !row || !x || !xq || !y) {
            fprintf(stderr, "memra-bench cpu-kernels: no memory for %d copies of %s\n", copies, sh->name);
            free(w), free(w8), free(row), free(x), free(xq), free(y);
            return 2;
        }
        for (int o = 0; o < sh->n_out; o++) { /* one matrix, then copied: the bytes do not change the time */
            for (int i = 0; i < sh->n_in; i++)
                row[i] = bench_rand_unit(&seed) * 0.1f;
            krn_quant_row(sh->type, row, w + (size_t)o * rb, sh->n_in);
        }
        const int rows8 = krn_rows8_supported(sh->type, sh->n_out, sh->n_in); /* not for K-quants: "-" */
        for (int o = 0; rows8 && o < sh->n_out; o += 8)
            krn_rows8_pack_group(sh->type, sh->n_in, w + (size_t)o * rb, 8, rb, w8 + (size_t)o * rb);
        for (int c = 1; c < copies; c++) {
            memcpy(w + (size_t)c * mb, w, mb);
            memcpy(w8 + (size_t)c * mb, w8, mb);
        }
        for (size_t i = 0; i < 32 * (size_t)sh->n_in; i++)
            x[i] = bench_rand_unit(&seed);
        krn_x8_quantize_host(xq, x, 32, sh->n_in);
        const int r = sh->n_out > 10000 ? (reps + 9) / 10 : reps; /* the head is 85 times a layer matrix */
        for (size_t b = 0; b < sizeof Bs / sizeof Bs[0]; b++) {
            const int B = Bs[b];
            const double te = time_arm(0, sh, w, w8, copies, x, xq, B, y, B >= 32 ? (r + 3) / 4 : r);
            const double tb = time_arm(1, sh, w, w8, copies, x, xq, B, y, r);
            const double t_fma = fma_rate > 0 ? (double)sh->n_out * sh->n_in * B / fma_rate : 0; /* us */
            char ceiling[32] = "-"; /* the fast mode's time (its faster layout) over t_fma */
            if (!rows8) {
                if (t_fma > 0)
                    snprintf(ceiling, sizeof ceiling, "%.2f", tb / t_fma);
                printf("| %s | %s | %d x %d | %d | %.1f | - | %.1f | - | - | - | %s |\n", sh->name,
                       krn_type_name(sh->type), sh->n_out, sh->n_in, B, te, tb, ceiling);
                continue;
            }
            const double te8 = time_arm(3, sh, w, w8, copies, x, xq, B, y, B >= 32 ? (r + 3) / 4 : r);
            const double t8 = time_arm(2, sh, w, w8, copies, x, xq, B, y, r);
            if (t_fma > 0)
                snprintf(ceiling, sizeof ceiling, "%.2f", t8 / t_fma);
            printf("| %s | %s | %d x %d | %d | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %s |\n", sh->name,
                   krn_type_name(sh->type), sh->n_out, sh->n_in, B, te, te8, tb, t8, tb / t8, te8 / t8, ceiling);
        }
        free(w), free(w8), free(row), free(x), free(xq), free(y);
    }
    return 0;
}
