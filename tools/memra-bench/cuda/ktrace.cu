/* memra-bench's kernel timeline (ktrace.h): CUPTI activity records of kind CONCURRENT_KERNEL (the GPU's start and
 * end timestamps of each kernel, graph nodes included, concurrent and PDL-overlapped kernels kept as they ran),
 * handed to ktrace_report.c for the table and the file. Why CUPTI: these machines have ncu (which serializes
 * kernels, so PDL overlap disappears) but no nsys; CUPTI is the library nsys itself records with, and ships in
 * the CUDA toolkit. Plain C in a .cu file (the tool's CUDA folder); not part of the library.
 * Shared mutable state: the one recording (g_kt), guarded by g_kt.mu (CUPTI delivers buffers on its own thread). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ktrace.h"
#include "../ktrace_report.h"
#include "kernels/cuda/krn_cuda_util.cuh"

#ifdef MEMRA_HAVE_CUPTI /* else ktrace_report.c refuses the option */
#include <cupti.h>
/* The kernel records are read as CUpti_ActivityKernel10, the layout of CUDA 13's CUPTI (CMake links CUPTI only from
 * CUDA 13 on). */
#if CUPTI_API_VERSION < 130000
#error "ktrace.cu reads CUpti_ActivityKernel10 records: CUDA 13's CUPTI or later"
#endif

static struct {
    pthread_mutex_t mu;
    int on;
    bench_kt_rec *r;
    size_t n, cap;
    char **names; /* interned full names: the records point at them */
    int n_names;
    int oom;        /* a record, a name or a buffer could not be kept */
    size_t dropped; /* records CUPTI dropped (cuptiActivityGetNumDroppedRecords) */
    size_t untimed; /* kernel records without timestamps (start 0 or end < start), left out */
    bench_kt_clock clk; /* CUPTI's clock against the host's, at start and stop */
} g_kt = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, 0, 0, NULL, 0, 0, 0, 0, {0, 0, 0, 0}};

/* CUPTI's clock minus CLOCK_MONOTONIC now (ns), and the CUPTI time of the sample: of 16 reads of cuptiGetTimestamp,
 * the one two host reads bracket most tightly, against their midpoint. */
static int kt_clock_sample(uint64_t *at, int64_t *off) {
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 16; i++) {
        struct timespec a, b;
        uint64_t c = 0;
        clock_gettime(CLOCK_MONOTONIC, &a);
        if (cuptiGetTimestamp(&c) != CUPTI_SUCCESS)
            return -1;
        clock_gettime(CLOCK_MONOTONIC, &b);
        const uint64_t h0 = (uint64_t)a.tv_sec * 1000000000u + (uint64_t)a.tv_nsec;
        const uint64_t h1 = (uint64_t)b.tv_sec * 1000000000u + (uint64_t)b.tv_nsec;
        if (h1 - h0 < best) {
            best = h1 - h0;
            *at = c;
            *off = (int64_t)(c - (h0 + (h1 - h0) / 2));
        }
    }
    return 0;
}

#define KT_BUF (8u << 20)

/* The name interned (a pointer that lives until the process ends). Under mu. */
static const char *kt_name(const char *name) {
    const char *s = name ? name : "?";
    for (int i = 0; i < g_kt.n_names; i++)
        if (!strcmp(g_kt.names[i], s))
            return g_kt.names[i];
    char **nn = (char **)realloc(g_kt.names, sizeof *nn * (size_t)(g_kt.n_names + 1));
    char *copy = strdup(s);
    if (!nn || !copy) {
        if (nn)
            g_kt.names = nn;
        free(copy);
        g_kt.oom = 1;
        return "?";
    }
    g_kt.names = nn;
    g_kt.names[g_kt.n_names++] = copy;
    return copy;
}

static void CUPTIAPI kt_buffer_requested(uint8_t **buf, size_t *size, size_t *max_records) {
    *buf = (uint8_t *)aligned_alloc(8, KT_BUF);
    *size = *buf ? KT_BUF : 0;
    *max_records = 0; /* as many as fit */
    if (!*buf) { /* CUPTI drops the records it had no buffer for: say so in the report */
        pthread_mutex_lock(&g_kt.mu);
        g_kt.oom = 1;
        pthread_mutex_unlock(&g_kt.mu);
    }
}

/* CUPTI's thread (or the flushing one): keep every timed kernel record of the buffer, then free it. */
static void CUPTIAPI kt_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
    (void)size;
    CUpti_Activity *a = NULL;
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) != CUPTI_SUCCESS)
        dropped = 0;
    pthread_mutex_lock(&g_kt.mu);
    g_kt.dropped += dropped;
    while (buf && cuptiActivityGetNextRecord(buf, valid, &a) == CUPTI_SUCCESS) {
        if (a->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) /* the only kind enabled */
            continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)a;
        if (k->start == 0 || k->end < k->start) { /* no timestamps were collected for it */
            g_kt.untimed++;
            continue;
        }
        if (g_kt.n == g_kt.cap) {
            const size_t cap = g_kt.cap ? 2 * g_kt.cap : 1u << 16;
            bench_kt_rec *r = (bench_kt_rec *)realloc(g_kt.r, sizeof *r * cap);
            if (!r) {
                g_kt.oom = 1;
                continue;
            }
            g_kt.r = r, g_kt.cap = cap;
        }
        const bench_kt_rec rec = {k->start, k->end, kt_name(k->name), k->gridX * k->gridY * k->gridZ,
                                  k->blockX * k->blockY * k->blockZ, k->registersPerThread, k->streamId,
                                  k->deviceId};
        g_kt.r[g_kt.n++] = rec;
    }
    pthread_mutex_unlock(&g_kt.mu);
    free(buf);
}

static int kt_check(dev_err *err, CUptiResult r, const char *call) {
    if (r == CUPTI_SUCCESS)
        return 0;
    const char *s = NULL;
    cuptiGetResultString(r, &s);
    return dev_err_set(err, MEMRA_E_DEVICE, "kernel trace: %s failed: %s", call, s ? s : "?");
}

extern "C" int bench_ktrace_available(void) { return 1; }

extern "C" int bench_ktrace_start(dev_err *err) {
    pthread_mutex_lock(&g_kt.mu);
    const int was = g_kt.on;
    if (!was) {
        g_kt.on = 1;
        g_kt.n = 0;
        g_kt.oom = 0;
        g_kt.dropped = g_kt.untimed = 0;
    }
    pthread_mutex_unlock(&g_kt.mu);
    if (was)
        return dev_err_set(err, MEMRA_E_STATE, "kernel trace: a recording is already on");
    int rc = kt_check(err, cuptiActivityRegisterCallbacks(kt_buffer_requested, kt_buffer_completed),
                      "cuptiActivityRegisterCallbacks");
    if (rc == 0)
        rc = kt_check(err, cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
                      "cuptiActivityEnable(CONCURRENT_KERNEL)");
    if (rc == 0 && kt_clock_sample(&g_kt.clk.at0, &g_kt.clk.off0) != 0)
        rc = dev_err_set(err, MEMRA_E_DEVICE, "kernel trace: cuptiGetTimestamp failed");
    if (rc != 0) {
        pthread_mutex_lock(&g_kt.mu);
        g_kt.on = 0;
        pthread_mutex_unlock(&g_kt.mu);
    }
    return rc;
}

/* Every device idle (the caller's current device restored). */
static int kt_sync_all(dev_err *err) {
    int n = 0, cur = 0, rc = krn_cuda_call_check(err, cudaGetDeviceCount(&n), "cudaGetDeviceCount");
    if (rc == 0)
        rc = krn_cuda_call_check(err, cudaGetDevice(&cur), "cudaGetDevice");
    for (int d = 0; rc == 0 && d < n; d++)
        if ((rc = krn_cuda_call_check(err, cudaSetDevice(d), "cudaSetDevice")) == 0)
            rc = krn_cuda_call_check(err, cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    if (n > 0)
        cudaSetDevice(cur);
    return rc;
}

/* The report of what was recorded (under mu). */
static int kt_report(FILE *f, const char *path, int units, int into_trace, dev_err *err) {
    if (g_kt.n == 0)
        return dev_err_set(err, MEMRA_E_STATE, "kernel trace: no kernel was recorded (%zu dropped, %zu untimed)",
                           g_kt.dropped, g_kt.untimed);
    bench_kt_group *g = (bench_kt_group *)calloc(g_kt.n + 1, sizeof *g);
    if (!g)
        return dev_err_set(err, MEMRA_E_NOMEM, "kernel trace: no memory for %zu groups", g_kt.n + 1);
    bench_kt_summary s;
    int rc = bench_kt_analyse(g_kt.r, g_kt.n, g, &s, err);
    if (rc == 0) {
        bench_kt_print(f, g, &s, g_kt.n, units);
        if (g_kt.oom || g_kt.dropped || g_kt.untimed)
            fprintf(f, "kernel trace INCOMPLETE: %zu records dropped by CUPTI, %zu without timestamps%s\n",
                    g_kt.dropped, g_kt.untimed, g_kt.oom ? ", some lost for want of memory" : "");
        if (path)
            rc = bench_kt_write(path, g_kt.r, g_kt.n, s.t0, err);
        if (rc == 0 && into_trace)
            rc = bench_kt_merge_into_trace(g_kt.r, g_kt.n, &g_kt.clk, err);
    }
    free(g);
    return rc;
}

extern "C" int bench_ktrace_stop(FILE *report, const char *path, int units, int into_trace, dev_err *err) {
    pthread_mutex_lock(&g_kt.mu);
    const int was = g_kt.on;
    pthread_mutex_unlock(&g_kt.mu);
    if (!was)
        return dev_err_set(err, MEMRA_E_STATE, "kernel trace: no recording is on");
    /* the caller drained the work it traced; a device sync makes sure every kernel has its end time before the
     * forced flush (which does not synchronize and also delivers records still incomplete) */
    int rc = kt_sync_all(err);
    if (rc == 0 && kt_clock_sample(&g_kt.clk.at1, &g_kt.clk.off1) != 0)
        rc = dev_err_set(err, MEMRA_E_DEVICE, "kernel trace: cuptiGetTimestamp failed");
    if (rc == 0)
        rc = kt_check(err, cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    dev_err derr = {0}; /* the first failure's message stays in err */
    const int rc2 = kt_check(&derr, cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityDisable");
    pthread_mutex_lock(&g_kt.mu);
    if (rc == 0 && rc2 == 0)
        rc = kt_report(report, path, units, into_trace, err);
    g_kt.on = 0;
    g_kt.n = 0;
    pthread_mutex_unlock(&g_kt.mu);
    if (rc == 0 && rc2 != 0)
        dev_err_set(err, rc2, "%s", derr.msg);
    return rc ? rc : rc2;
}

#endif
