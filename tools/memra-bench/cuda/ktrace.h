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

/* Stop, after the traced work was drained (every device is synchronized here too): print to `report` the table
 * of ktrace_report.h's bench_kt_print (units >= 1: e.g. the tokens traced) and a line when records were dropped or
 * had no timestamps; path (or NULL): the kernels as a CSV, or as a Perfetto / Chrome trace when it ends in
 * ".json" (bench_kt_write). 0, or MEMRA_E_STATE (nothing recorded), MEMRA_E_DEVICE / MEMRA_E_IO /
 * MEMRA_E_NOMEM with err; the recording is off afterwards either way. into_trace: the kernels also go into the
 * runtime trace recording now (act_trace_start), on its host clock, when that trace is written
 * (bench_kt_merge_into_trace; call bench_kt_merge_release after stopping it). */
int bench_ktrace_stop(FILE *report, const char *path, int units, int into_trace, dev_err *err);

#ifdef __cplusplus
}
#endif

#endif
