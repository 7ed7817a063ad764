/* HBM bandwidth of this GPU now (memra-bench gpu-kernels --read): the same-run denominator for P2 and the GEMV
 * tables, which otherwise quote a fixed 4575 GB/s (an H200's copy bandwidth). Each pass streams the whole buffer (far larger
 * than L2) once: the read kernels XOR every word into a per-thread value that a never-true test keeps live (no
 * store per load, so the pass is reads only); the copy is the runtime's. Each pass is timed by its own events;
 * best and median are reported (machines are noisy: quote a ratio only against a row of the same run).
 * Shared mutable state: none (the buffer and the events are the call's own). */
#include <stdlib.h>
#include "hbm.h"
#include "bench_cuda.cuh"
extern "C" {
#include "../bench.h" /* bench_sort */
}

#define HBM_THREADS 256
#define HBM_KEY 0x9e3779b9u /* not the XOR of the buffer's words (0x5a bytes: 0) */

/* Thread t of the grid reads 16-byte words t, t + S, t + 2S, ... (S = the grid's threads), U of them issued
 * together before any is used. */
template <int U>
__global__ void __launch_bounds__(HBM_THREADS)
    hbm_read_kernel(const uint4 *__restrict__ p, size_t n, uint32_t key, uint32_t *sink) {
    const size_t S = (size_t)gridDim.x * HBM_THREADS;
    size_t i = (size_t)blockIdx.x * HBM_THREADS + threadIdx.x;
    uint32_t acc = 0;
    for (; i + (U - 1) * S < n; i += U * S) {
        uint4 v[U];
#pragma unroll
        for (int k = 0; k < U; k++)
            v[k] = __ldcs(p + i + k * S); /* streaming: evict-first, nothing kept for later passes */
#pragma unroll
        for (int k = 0; k < U; k++)
            acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    }
    for (; i < n; i += S) {
        const uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == key) /* never true (the buffer's words XOR to 0, key is not 0), but the compiler cannot know: */
        *sink = acc; /* every load stays */
}

extern "C" int bench_hbm_run(int kind, size_t bytes, int passes, bench_hbm_result *res, dev_err *err) {
    if (kind < 0 || kind > 2 || bytes < ((size_t)64 << 20) || bytes % 16 || passes < 3 || !res)
        return dev_err_set(err, MEMRA_E_INVAL, "bench_hbm_run: kind %d, %zu bytes, %d passes (allowed: kind 0..2, "
                           ">= 64 MB in 16-byte words, >= 3 passes)", kind, bytes, passes);
    int rc = 0, dev = 0, sms = 0, occ = 0;
    uint8_t *buf = NULL;
    uint32_t *sink = NULL;
    cudaEvent_t ev[2] = {NULL, NULL};
    cudaStream_t st = NULL;
    double *gbs = (double *)calloc((size_t)passes, sizeof *gbs);
    if (!gbs)
        return dev_err_set(err, MEMRA_E_NOMEM, "bench_hbm_run: out of host memory");
    BENCH_CK(cudaGetDevice(&dev));
    BENCH_CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    BENCH_CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    BENCH_CK(cudaEventCreate(&ev[0]));
    BENCH_CK(cudaEventCreate(&ev[1]));
    BENCH_CK(cudaMalloc((void **)&buf, bytes));
    BENCH_CK(cudaMalloc((void **)&sink, sizeof *sink));
    BENCH_CK(cudaMemsetAsync(buf, 0x5a, bytes, st));
    if (kind < 2)
        BENCH_CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kind ? hbm_read_kernel<8> : hbm_read_kernel<4>,
                                                               HBM_THREADS, 0));
    res->grid = kind < 2 ? sms * (occ > 0 ? occ : 1) : 0;
    for (int i = -1; i < passes; i++) { /* i = -1: the warm-up, untimed */
        BENCH_CK(cudaEventRecord(ev[0], st));
        if (kind == 2)
            BENCH_CK(cudaMemcpyAsync(buf + bytes / 2, buf, bytes / 2, cudaMemcpyDeviceToDevice, st));
        else if (kind == 1)
            hbm_read_kernel<8><<<res->grid, HBM_THREADS, 0, st>>>((const uint4 *)buf, bytes / 16, HBM_KEY, sink);
        else
            hbm_read_kernel<4><<<res->grid, HBM_THREADS, 0, st>>>((const uint4 *)buf, bytes / 16, HBM_KEY, sink);
        BENCH_CK(cudaGetLastError());
        BENCH_CK(cudaEventRecord(ev[1], st));
        BENCH_CK(cudaEventSynchronize(ev[1]));
        float ms = 0.0f;
        BENCH_CK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
        if (i >= 0)
            gbs[i] = (double)bytes / (ms * 1e6); /* a copy moves bytes / 2 each way: bytes in all */
    }
    bench_sort(gbs, passes);
    res->best_gbs = gbs[passes - 1];
    res->median_gbs = gbs[passes / 2];
out:
    if (st)
        (void)cudaStreamSynchronize(st); /* ordered: nothing on st reads buf once this returns */
    cudaFree(buf);
    cudaFree(sink);
    for (int k = 0; k < 2; k++)
        if (ev[k])
            cudaEventDestroy(ev[k]);
    if (st)
        cudaStreamDestroy(st);
    free(gbs);
    return rc;
}
