/* What this GPU's HBM streams right now (memra-bench gpu-kernels --read): the denominator P2 can be quoted
 * against in the same run as its step (issue [CUDA]: "85 % of measured HBM bandwidth"); see hbm.cu. */
#ifndef MEMRA_BENCH_CUDA_HBM_H
#define MEMRA_BENCH_CUDA_HBM_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stddef.h>
#include "device/err.h"

typedef struct bench_hbm_result {
    double best_gbs, median_gbs; /* over the passes: bytes read (a copy: read + written) / pass time */
    int grid;                    /* blocks of the read kernel (0: a copy) */
} bench_hbm_result;

/* One table row on the current device over a buffer of `bytes` (>= 64 MB, a multiple of 16):
 * kind 0, 1: a read-only kernel, every thread 4 (kind 0) or 8 (kind 1) 16-byte loads in flight, a resident grid
 * (blocks per SM from the occupancy) striding the buffer; kind 2: cudaMemcpyAsync device to device of bytes / 2,
 * counted as bytes / 2 read plus bytes / 2 written. `passes` timed passes (>= 3) after one warm-up. 0 or
 * MEMRA_E_INVAL / MEMRA_E_NOMEM / MEMRA_E_DEVICE with err. */
int bench_hbm_run(int kind, size_t bytes, int passes, bench_hbm_result *res, dev_err *err);

#ifdef __cplusplus
}
#endif

#endif
