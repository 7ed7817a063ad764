/* Where a decode step's device time goes, kernel by kernel, on the GPU's own clock (CUPTI activity records of
 * every kernel, graph nodes included, overlap kept: no nsys needed). See ktrace.cu. */
#ifndef MEMRA_BENCH_CUDA_KTRACE_H
#define MEMRA_BENCH_CUDA_KTRACE_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdio.h>
#include "device/err.h"

/* 1 when this build can trace (CUDA 13's CUPTI linked), else 0: callers refuse the option up front. */
int bench_ktrace_available(void);

/* Start recording every kernel that runs from now on (any device, any stream). One recording at a time per
 * process: 0, MEMRA_E_STATE when one is already on, MEMRA_E_DEVICE when CUPTI refuses (err says which call),
 * MEMRA_E_UNSUPPORTED in a build without CUPTI. */
int bench_ktrace_start(dev_err *err);

/* Stop, after the traced work was drained (every device is synchronized here too): print to `report` the
 * kernels grouped by (kernel, grid, block), each with its count and, per unit (units >= 1: e.g. the tokens
 * traced), its time running, its increment (the time it ran past every kernel that ended before it) and its
 * share of the span, and its mean lead (start minus the previous kernel's end: negative when PDL started it
 * early); a "(no kernel running)" row takes the gaps, so the increments add up to the span. A summary line
 * says when records were dropped or had no timestamps. csv_path (or NULL): one line per kernel. 0, or
 * MEMRA_E_STATE (nothing recorded), MEMRA_E_DEVICE / MEMRA_E_IO / MEMRA_E_NOMEM with err; the recording is
 * off afterwards either way. */
int bench_ktrace_stop(FILE *report, const char *csv_path, int units, dev_err *err);

#ifdef __cplusplus
}
#endif

#endif
