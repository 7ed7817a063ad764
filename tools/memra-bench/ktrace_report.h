/* The arithmetic of memra-bench's kernel timeline (pp-scaling --kernel-trace; the records come from CUPTI in
 * cuda/ktrace.cu): records in, groups per kernel, a table, a CSV or a Chrome / Perfetto trace out. Plain C with no
 * CUDA, so tests/test_ktrace.c checks it on made-up records in every CI leg. */
#ifndef MEMRA_BENCH_KTRACE_REPORT_H
#define MEMRA_BENCH_KTRACE_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "device/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bench_kt_rec {
    uint64_t start, end; /* ns on one clock, end >= start */
    const char *name;    /* the kernel's name (mangled is fine); not owned, outlives the report */
    int grid, block, regs;
    uint32_t stream, device;
} bench_kt_rec;

typedef struct bench_kt_group {
    const char *name; /* NULL: the row of the time when no kernel ran */
    int grid, block, regs;
    size_t count;
    double run_ns;  /* sum of end - start */
    double inc_ns;  /* sum of the increments (bench_kt_analyse) */
    double lead_ns; /* sum of start - the previous kernel's end (negative: started before it ended) */
} bench_kt_group;

typedef struct bench_kt_summary {
    uint64_t t0;     /* the earliest start */
    double span_ns;  /* the last end - t0 */
    double busy_ns;  /* the union of the kernels' intervals */
    size_t n_groups; /* rows of g, the idle row included */
    /* the longest stretch when no kernel ran (0 when none): where it starts (ns after t0), the kernel that ended
     * it began after and the one that ended it (names as in the records): a one-time stall (the first steps
     * after CUPTI is enabled wait milliseconds) is told apart from gaps every step has */
    double gap_ns, gap_at_ns;
    const char *gap_after, *gap_before;
} bench_kt_summary;

/* Sorts r by end and groups it by (name, grid, block) into g (room for n + 1 rows), sorted by inc_ns, largest
 * first. The increment of kernel i (in end order) is end_i - end_{i-1} less the time in between when no kernel
 * ran, which goes to the idle row: the increments and the idle row add up to the span, and time when several
 * kernels overlap (PDL, other streams) is counted once, for the kernel that ends first. 0, or MEMRA_E_INVAL
 * with err (n == 0, a record with end < start); r and g are unspecified after a failure. */
int bench_kt_analyse(bench_kt_rec *r, size_t n, bench_kt_group *g, bench_kt_summary *s, dev_err *err);

/* The table: a summary line, then one row per group with its count, time running and increment per unit
 * (units >= 1: e.g. the tokens traced), its share of the span and its mean lead; then the longest idle gap and the
 * span per unit without it (the steady state when that gap is a one-time stall). */
void bench_kt_print(FILE *f, const bench_kt_group *g, const bench_kt_summary *s, size_t n_kernels, int units);

/* r (as analysed) into path: a name ending in ".json" gets Chrome trace events (Perfetto and chrome://tracing
 * open it: one complete event per kernel, pid = device, tid = stream, microseconds from t0), any other a CSV with
 * one line per kernel. 0 or MEMRA_E_IO with err. */
int bench_kt_write(const char *path, const bench_kt_rec *r, size_t n, uint64_t t0, dev_err *err);

/* First track id (Chrome "tid") of the kernel lanes bench_kt_write_events adds to a runtime trace: one per device
 * and stream, after the runtime's own tracks (actors/trace.h). */
#define BENCH_KT_TRACK0 400

/* r as events of a runtime trace (docs/trace.md), for act_trace_set_extra: a lane per (device, stream) named
 * "gpu D stream S kernels", a complete event per kernel, each preceded by ",\n". r's times are on the host clock
 * (CLOCK_MONOTONIC ns; ktrace.cu maps CUPTI's onto it); "ts" is us from t_start_ns, and kernels that ended before
 * t_start_ns are left out. 0, or MEMRA_E_IO when a write failed. */
int bench_kt_write_events(FILE *f, const bench_kt_rec *r, size_t n, uint64_t t_start_ns);

/* CUPTI's clock minus the host's (CLOCK_MONOTONIC), in ns, sampled at the start and the stop of a recording:
 * at0 / at1 are CUPTI times of the samples, off0 / off1 the differences (ktrace.cu: the cuptiGetTimestamp read
 * bracketed most tightly by two host reads, of 16). */
typedef struct bench_kt_clock {
    uint64_t at0, at1;
    int64_t off0, off1;
} bench_kt_clock;

/* t (CUPTI ns) on the host clock: t minus the offset interpolated linearly between the two samples (drift). */
uint64_t bench_kt_to_host(const bench_kt_clock *c, uint64_t t);

/* With a runtime trace recording (act_trace_start): a copy of r mapped onto the host clock by c goes into that
 * trace's file when it is written (act_trace_set_extra, bench_kt_write_events). The copy lives until
 * bench_kt_merge_release, which the caller calls after stopping the trace. 0, MEMRA_E_STATE (no trace records, or
 * it has another source of extra events) or MEMRA_E_NOMEM, with err. */
int bench_kt_merge_into_trace(const bench_kt_rec *r, size_t n, const bench_kt_clock *c, dev_err *err);
void bench_kt_merge_release(void);

/* The identifier inside a mangled name (_Z<len><id>...: *len bytes from the pointer returned), else the name. */
const char *bench_kt_short(const char *name, int *len);

#ifdef __cplusplus
}
#endif

#endif
