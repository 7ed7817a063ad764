/* memra-bench's kernel timeline (ktrace.h): CUPTI activity records of kind CONCURRENT_KERNEL (the GPU's start and
 * end timestamps of each kernel, graph nodes included, concurrent and PDL-overlapped kernels kept as they ran),
 * summarised per (kernel, grid). Why CUPTI: these machines have ncu (which serializes kernels, so PDL overlap
 * disappears) but no nsys; CUPTI is the library nsys itself records with, and ships in the CUDA toolkit.
 * Plain C in a .cu file (the tool's CUDA folder); not part of the library.
 * Shared mutable state: the one recording (g_kt), its record array guarded by g_kt.mu (CUPTI delivers buffers
 * on its own thread). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "ktrace.h"
#include "kernels/cuda/krn_cuda_util.cuh"

#ifdef MEMRA_HAVE_CUPTI
#include <cupti.h>
#endif
/* The kernel records are read as CUpti_ActivityKernel10, the layout of CUDA 13's CUPTI (API version 130001 here);
 * an older CUPTI gets the refusal below instead of a misread record. */
#if defined(MEMRA_HAVE_CUPTI) && CUPTI_API_VERSION >= 130000

typedef struct kt_rec {
    uint64_t start, end; /* ns, the GPU's clock */
    int name;            /* index into g_kt.names (the full mangled name: template instances stay apart) */
    int grid, block, regs;
    uint32_t stream, device;
} kt_rec;

static struct {
    pthread_mutex_t mu;
    int on;
    kt_rec *r;
    size_t n, cap;
    char **names;
    int n_names;
    int oom;          /* a record, a name or a buffer could not be kept */
    size_t dropped;   /* records CUPTI dropped (cuptiActivityGetNumDroppedRecords) */
    size_t untimed;   /* kernel records without timestamps (start 0 or end < start), left out */
} g_kt = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, 0, 0, NULL, 0, 0, 0, 0};

#define KT_BUF (8u << 20)

/* The name interned (the full mangled one). Under mu. */
static int kt_name(const char *name) {
    const char *s = name ? name : "?";
    for (int i = 0; i < g_kt.n_names; i++)
        if (!strcmp(g_kt.names[i], s))
            return i;
    char **nn = (char **)realloc(g_kt.names, sizeof *nn * (size_t)(g_kt.n_names + 1));
    char *copy = strdup(s);
    if (!nn || !copy) {
        if (nn)
            g_kt.names = nn;
        free(copy);
        g_kt.oom = 1;
        return -1;
    }
    g_kt.names = nn;
    g_kt.names[g_kt.n_names] = copy;
    return g_kt.n_names++;
}

/* The identifier out of a mangled name (_Z<len><id>...: its length via *len), else the name itself. */
static const char *kt_short(int name, int *len) {
    const char *s = name >= 0 ? g_kt.names[name] : "?";
    *len = (int)strlen(s);
    if (s[0] == '_' && s[1] == 'Z') {
        char *e;
        const long n = strtol(s + 2, &e, 10);
        if (n > 0 && (size_t)n <= strlen(e)) {
            *len = (int)n;
            return e;
        }
    }
    return s;
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

/* CUPTI's thread (or the flushing one): keep every kernel record of the buffer, then free it. */
static void CUPTIAPI kt_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
    (void)size;
    CUpti_Activity *a = NULL;
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) != CUPTI_SUCCESS)
        dropped = 0;
    pthread_mutex_lock(&g_kt.mu);
    g_kt.dropped += dropped;
    while (buf && cuptiActivityGetNextRecord(buf, valid, &a) == CUPTI_SUCCESS) {
        if (a->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && a->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)a;
        if (k->start == 0 || k->end < k->start) { /* no timestamps were collected for it */
            g_kt.untimed++;
            continue;
        }
        if (g_kt.n == g_kt.cap) {
            const size_t cap = g_kt.cap ? 2 * g_kt.cap : 1u << 16;
            kt_rec *r = (kt_rec *)realloc(g_kt.r, sizeof *r * cap);
            if (!r) {
                g_kt.oom = 1;
                continue;
            }
            g_kt.r = r, g_kt.cap = cap;
        }
        const kt_rec rec = {k->start, k->end, kt_name(k->name), k->gridX * k->gridY * k->gridZ,
                            k->blockX * k->blockY * k->blockZ, k->registersPerThread, k->streamId, k->deviceId};
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
    if (rc != 0) {
        pthread_mutex_lock(&g_kt.mu);
        g_kt.on = 0;
        pthread_mutex_unlock(&g_kt.mu);
    }
    return rc;
}

static int kt_by_start(const void *a, const void *b) {
    const kt_rec *x = (const kt_rec *)a, *y = (const kt_rec *)b;
    return x->start < y->start ? -1 : x->start > y->start;
}
static int kt_by_end(const void *a, const void *b) {
    const kt_rec *x = (const kt_rec *)a, *y = (const kt_rec *)b;
    return x->end < y->end ? -1 : x->end > y->end ? 1 : (x->start < y->start ? -1 : x->start > y->start);
}

typedef struct kt_group {
    int name, grid, block, regs;
    size_t count;
    double run_ns, inc_ns, lead_ns;
} kt_group;
#define KT_IDLE (-2) /* the group of the gaps when no kernel ran */

static int kt_by_inc(const void *a, const void *b) {
    const kt_group *x = (const kt_group *)a, *y = (const kt_group *)b;
    return x->inc_ns > y->inc_ns ? -1 : x->inc_ns < y->inc_ns;
}

/* The report. Records sorted by end; kernel i "moves the frontier" by end_i - max(end_{i-1}, start_i) (its
 * increment: the time it ran past every kernel that ended before it), and a gap start_i - end_{i-1} > 0 is time
 * no kernel ran (the idle row). Increments plus idle add up to the span. Busy = the union of the intervals. */
static int kt_report(FILE *f, const char *csv_path, int units, dev_err *err) {
    kt_rec *r = g_kt.r;
    const size_t n = g_kt.n;
    if (n == 0)
        return dev_err_set(err, MEMRA_E_STATE, "kernel trace: no kernel was recorded (%zu dropped, %zu untimed)",
                           g_kt.dropped, g_kt.untimed);
    qsort(r, n, sizeof *r, kt_by_start); /* the union of the kernels' intervals: time anything ran */
    const uint64_t t0 = r[0].start;
    double busy = 0.0;
    for (size_t i = 0, j; i < n; i = j) {
        uint64_t to = r[i].end;
        for (j = i + 1; j < n && r[j].start <= to; j++)
            to = r[j].end > to ? r[j].end : to;
        busy += (double)(to - r[i].start);
    }
    qsort(r, n, sizeof *r, kt_by_end);
    const double span = (double)(r[n - 1].end - t0);
    kt_group *g = (kt_group *)calloc(n + 1, sizeof *g);
    if (!g)
        return dev_err_set(err, MEMRA_E_NOMEM, "kernel trace: no memory for %zu groups", n + 1);
    g[0] = (kt_group){KT_IDLE, 0, 0, 0, 0, 0.0, 0.0, 0.0};
    size_t ng = 1;
    for (size_t i = 0; i < n; i++) {
        const uint64_t prev_end = i ? r[i - 1].end : t0, from = r[i].start > prev_end ? r[i].start : prev_end;
        if (r[i].start > prev_end) {
            g[0].count++;
            g[0].inc_ns += (double)(r[i].start - prev_end);
        }
        size_t k = 1;
        while (k < ng && !(g[k].name == r[i].name && g[k].grid == r[i].grid && g[k].block == r[i].block))
            k++;
        if (k == ng)
            g[ng++] = (kt_group){r[i].name, r[i].grid, r[i].block, r[i].regs, 0, 0.0, 0.0, 0.0};
        g[k].count++;
        g[k].run_ns += (double)(r[i].end - r[i].start);
        g[k].inc_ns += (double)(r[i].end - from);
        g[k].lead_ns += (double)(int64_t)(r[i].start - prev_end);
    }
    qsort(g, ng, sizeof *g, kt_by_inc);
    const double u = units > 0 ? units : 1;
    fprintf(f, "kernel trace: %zu kernels, span %.1f us per unit (%d units), kernels running %.1f %% of it", n,
            span / 1e3 / u, units, 100.0 * busy / span);
    if (g_kt.oom || g_kt.dropped || g_kt.untimed)
        fprintf(f, "; INCOMPLETE: %zu records dropped by CUPTI, %zu without timestamps%s", g_kt.dropped,
                g_kt.untimed, g_kt.oom ? ", some lost for want of memory" : "");
    fprintf(f, "\n%-34s %8s %5s %4s %8s %10s %10s %8s %9s\n", "kernel", "grid", "block", "regs", "per unit",
            "run us/u", "incr us/u", "% span", "lead us");
    for (size_t k = 0; k < ng; k++) {
        int len = 0;
        const char *nm = g[k].name == KT_IDLE ? "(no kernel running)" : kt_short(g[k].name, &len);
        if (g[k].name == KT_IDLE)
            len = (int)strlen(nm);
        fprintf(f, "%-34.*s %8d %5d %4d %8.1f %10.1f %10.1f %8.1f %9.2f\n", len < 34 ? len : 34, nm, g[k].grid,
                g[k].block, g[k].regs, (double)g[k].count / u, g[k].run_ns / 1e3 / u, g[k].inc_ns / 1e3 / u,
                100.0 * g[k].inc_ns / span, g[k].count ? g[k].lead_ns / 1e3 / (double)g[k].count : 0.0);
    }
    free(g);
    if (!csv_path)
        return 0;
    FILE *c = fopen(csv_path, "w");
    if (!c)
        return dev_err_set(err, MEMRA_E_IO, "kernel trace: cannot write %s", csv_path);
    fprintf(c, "start_us,end_us,kernel,grid,block,regs,stream,device\n");
    for (size_t i = 0; i < n; i++)
        fprintf(c, "%.3f,%.3f,%s,%d,%d,%d,%u,%u\n", (double)(r[i].start - t0) / 1e3, (double)(r[i].end - t0) / 1e3,
                r[i].name >= 0 ? g_kt.names[r[i].name] : "?", r[i].grid, r[i].block, r[i].regs, r[i].stream,
                r[i].device);
    return fclose(c) == 0 ? 0 : dev_err_set(err, MEMRA_E_IO, "kernel trace: cannot write %s", csv_path);
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

extern "C" int bench_ktrace_stop(FILE *report, const char *csv_path, int units, dev_err *err) {
    pthread_mutex_lock(&g_kt.mu);
    const int was = g_kt.on;
    pthread_mutex_unlock(&g_kt.mu);
    if (!was)
        return dev_err_set(err, MEMRA_E_STATE, "kernel trace: no recording is on");
    /* the caller drained the work it traced; a device sync makes sure every kernel has its end time before the
     * forced flush (which does not synchronize and also delivers records still incomplete) */
    int rc = kt_sync_all(err);
    if (rc == 0)
        rc = kt_check(err, cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    const int rc2 = kt_check(err, cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityDisable");
    pthread_mutex_lock(&g_kt.mu);
    if (rc == 0 && rc2 == 0)
        rc = kt_report(report, csv_path, units, err);
    g_kt.on = 0;
    g_kt.n = 0;
    pthread_mutex_unlock(&g_kt.mu);
    return rc ? rc : rc2;
}

#else /* built without CUPTI, or with one older than CUDA 13's */

extern "C" int bench_ktrace_available(void) { return 0; }

extern "C" int bench_ktrace_start(dev_err *err) {
    return dev_err_set(err, MEMRA_E_UNSUPPORTED, "kernel trace: this memra-bench was built without CUPTI "
                                                 "(CMake found no CUDA::cupti) or with one older than CUDA 13's");
}
extern "C" int bench_ktrace_stop(FILE *report, const char *csv_path, int units, dev_err *err) {
    (void)report, (void)csv_path, (void)units;
    return dev_err_set(err, MEMRA_E_UNSUPPORTED, "kernel trace: built without CUPTI");
}

#endif
