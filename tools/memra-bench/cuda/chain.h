/* Experiment for P2 (docs/cuda-kernels.md "A persistent chain"): a decode step's bf16 GEMVs (8B shapes, B = 1)
 * streamed as separate launches or as one persistent cooperative kernel; see chain.cu. */
#ifndef MEMRA_BENCH_CUDA_CHAIN_H
#define MEMRA_BENCH_CUDA_CHAIN_H

#ifdef __cplusplus
extern "C" {
#endif

#include "device/err.h"

typedef struct bench_chain_result {
    double us_per_pass;    /* one chain of 4 * n_layer GEMVs */
    double bytes_per_pass; /* weight bytes of that chain */
    int grid;              /* blocks of the persistent kernel (0: mode 0) */
} bench_chain_result;

/* mode 0: production GEMV launches with PDL; 1: persistent, no barrier (ceiling); 2: persistent, a grid
 * barrier between matrices with the next weights issued before it; 3: barrier, weights after it; 4: barrier,
 * weights streamed several units ahead through shared memory (cp.async); 5: 4 without barriers.
 * blocks_per_sm: the persistent grid's blocks per SM (0 = the occupancy). Runs on the current device. */
int bench_chain_run(int n_layer, int mode, int blocks_per_sm, int iters, bench_chain_result *res,
                         dev_err *err);

#ifdef __cplusplus
}
#endif

#endif
