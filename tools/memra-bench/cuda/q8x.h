/* Experiment (docs/cuda-kernels.md "q4 with int8 x"): the planar q4_1 GEMV at B = 1 with x quantized to int8
 * per 32-block and __dp4a products, against the production f32 planes GEMV; see q8x.cu. */
#ifndef MEMRA_BENCH_CUDA_Q8X_H
#define MEMRA_BENCH_CUDA_Q8X_H

#ifdef __cplusplus
extern "C" {
#endif

#include "device/err.h"

typedef struct bench_q8x_result {
    double us_f32, us_q8x;  /* per GEMV: the production planes GEMV; the dp4a GEMV (x quantized once, untimed) */
    double us_q8x_r2;       /* the same with 2 rows per warp (one x load serves both) */
    int r2_same_bits;       /* 1: both dp4a forms gave every row the same bits */
    double weight_bytes;    /* quant + scale planes of one matrix */
    double max_rel_diff;    /* max |y_q8x - y_f32| / max |y_f32| over the rows */
    int grid;               /* blocks of the dp4a GEMV */
} bench_q8x_result;

/* Random q4_1 planes (n_out, n_in), n_in % 256 == 0, rotated over >= 400 MB; iters launches per kernel on the
 * current device. 0, MEMRA_E_INVAL, MEMRA_E_NOMEM or MEMRA_E_DEVICE (err says which call). */
int bench_q8x_run(int n_out, int n_in, int iters, bench_q8x_result *res, dev_err *err);

#ifdef __cplusplus
}
#endif

#endif
