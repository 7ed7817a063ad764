/* Throughput of krn_dot_row per type and path (reports, never asserts). Not part of the CMake build:
 *   gcc -std=c17 -O2 -D_GNU_SOURCE -I. -Iinclude tools/ref/bench_quant.c kernels/quant.c kernels/quant_dot.c \
 *       -lm -o /tmp/bench_quant && /tmp/bench_quant
 * Rows of 1536 (SmolLM2's ffn_down) x 576 rows, x f32, 50 passes; one thread. B=4 counts the elements of
 * all 4 vectors (krn_dot_row_batch). */
#include "kernels/quant_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void)
{
    static const int types[] = {KRN_F32, KRN_F16, KRN_BF16, KRN_Q4_0, KRN_Q4_1, KRN_Q8_0, KRN_Q4_K, KRN_Q5_K,
                                KRN_Q6_K};
    const int n = 1536, rows = 576, passes = 50;
    float *src = malloc(sizeof(float) * (size_t)n * rows), *x = malloc(sizeof(float) * (size_t)n);
    srand(1);
    for (int i = 0; i < n * rows; i++)
        src[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (int i = 0; i < n; i++)
        x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    float *xb = malloc(sizeof(float) * (size_t)n * 4), out[4];
    for (int i = 0; i < 4 * n; i++)
        xb[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    printf("%-5s %14s %14s %16s\n", "type", "generic Gel/s", "avx2 Gel/s", "avx2 B=4 Gel/s");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const int t = types[ti];
        const size_t rb = krn_row_bytes(t, n);
        char *w = malloc(rb * (size_t)rows);
        for (int r = 0; r < rows; r++)
            krn_quant_row(t, src + (size_t)r * n, w + rb * (size_t)r, n);
        printf("%-5s", krn_type_name(t));
        for (int p = 0; p < KRN_PATH_COUNT; p++) {
            if (!krn_quant_path_available(p)) {
                printf(" %14s", "n/a");
                continue;
            }
            volatile float sink = 0;
            const double t0 = now();
            for (int k = 0; k < passes; k++)
                for (int r = 0; r < rows; r++)
                    sink += krn_dot_row_path(p, t, w + rb * (size_t)r, x, n);
            printf(" %14.2f", (double)passes * rows * n / (now() - t0) * 1e-9);
        }
        if (krn_quant_path_available(KRN_PATH_AVX2)) { /* krn_dot_row_batch, 4 vectors per row pass */
            volatile float sink = 0;
            const double t0 = now();
            for (int k = 0; k < passes; k++)
                for (int r = 0; r < rows; r++) {
                    krn_dot_row_batch_path(KRN_PATH_AVX2, t, w + rb * (size_t)r, xb, n, 4, out, n);
                    sink += out[0];
                }
            printf(" %16.2f", 4.0 * passes * rows * n / (now() - t0) * 1e-9);
        }
        printf("\n");
        free(w);
    }
    free(src);
    free(x);
    free(xb);
    return 0;
}
