/* Experiment for P2 (issue [CUDA]; not used by the forward): how fast can the GEMVs of a decode step stream
 * when no kernel boundary separates them? One 8B-shaped layer is 4 bf16 GEMVs at B = 1 (q/k/v 6144x4096,
 * o 4096x4096, gate/up 28672x4096, down 4096x14336: 436 MB); a step is n_layer of them in a chain. Modes:
 *   0  the production GEMV (krn_cuda_matmul_async), one launch per matrix, back to back with PDL;
 *   1  ONE persistent cooperative kernel walking every matrix with no barrier (the streaming ceiling: no
 *      dependency is honoured);
 *   2  the same with a grid barrier between matrices (each matrix's x is ready only after the previous one),
 *      the next matrix's first weights issued BEFORE the barrier (weights depend on nothing);
 *   3  barrier, next weights issued after it (what a barrier costs without that overlap);
 *   4  barrier, loads CH_RING units ahead through shared memory (cp.async), across matrix boundaries;
 *   5  as 4 without the barriers (that ring's ceiling).
 * Measured and removed: units handed out dynamically (a counter per matrix, 4 units per grab): 66-68 %, the
 * grab's atomic round trip sat before every issue (run 37).
 * A warp's work units (a row's batch of CH_U 16-byte loads per lane, see ch_kernel) are software pipelined:
 * the next unit's loads are in flight while the current one is multiplied (as mm_float_vec_kernel).
 * Weights are random bytes filled on the device (GEMV time does not depend on values); results unused.
 * Shared mutable state: none (the barrier counter is the call's own allocation). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chain.h"
#include "bench_cuda.cuh"

#define CH_WARPS 4
#define CH_U 4
#define CH_CHUNK (8 * KRN_WARP)
#define CH_RING 4 /* units per warp in flight in modes 4, 5: 4 x 2 KB per warp, 32 KB per block */

typedef struct ch_mat {
    const uint8_t *W;
    int n_out, n_in;
} ch_mat;

/* A warp's walk over (matrix, unit): units g, g + G, ... of matrix 0, then of matrix 1, ... Unit u of a
 * matrix is row u / nb, batch u % nb (nb = batches of CH_U loads per row). */
typedef struct ch_it {
    int m, u, nb;
    ch_mat mat;
} ch_it;
static __device__ __forceinline__ int ch_nb(const ch_mat &m) {
    return (m.n_in + CH_U * CH_CHUNK - 1) / (CH_U * CH_CHUNK);
}
static __device__ __forceinline__ ch_it ch_start(const ch_mat *mats, int g) {
    ch_it it = {0, g, ch_nb(mats[0]), mats[0]};
    return it;
}
/* Advance; returns 1 when the walk entered a new matrix (it->m == n_mats: the end). */
static __device__ __forceinline__ int ch_next(ch_it *it, const ch_mat *mats, int n_mats, int G, int g) {
    it->u += G;
    if (it->u < it->mat.n_out * it->nb)
        return 0;
    it->u = g;
    if (++it->m < n_mats) {
        it->mat = mats[it->m];
        it->nb = ch_nb(it->mat);
    }
    return 1;
}
/* Lane's 16 bytes of load v of unit it->u (a step past n_in re-reads the row's last 8 weights, unused). */
static __device__ __forceinline__ const uint8_t *ch_addr(const ch_it &it, int v, int lane) {
    const int e = min(((it.u % it.nb) * CH_U + v) * CH_CHUNK + 8 * lane, it.mat.n_in - 8);
    return it.mat.W + ((size_t)(it.u / it.nb) * it.mat.n_in + e) * 2;
}
static __device__ __forceinline__ void ch_issue(uint4 (&r)[CH_U], const ch_it &it, int lane) {
#pragma unroll
    for (int v = 0; v < CH_U; v++)
        r[v] = krn_ld_stream16(ch_addr(it, v, lane));
}
/* acc + the 8 bf16 weights of q times x[e .. e+8) (a, b), in order. */
static __device__ __forceinline__ float ch_dot8(uint4 q, float4 a, float4 b, float acc) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
    const float xs[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        acc = fmaf(krn_bf2f((uint16_t)w[i]), xs[2 * i], acc);
        acc = fmaf(krn_bf2f((uint16_t)(w[i] >> 16)), xs[2 * i + 1], acc);
    }
    return acc;
}
/* The unit's partial dot product (lane sums, then the warp's butterfly); x read through ld (X = 0: plain,
 * L1-cached, coherent after a barrier's fences) or ldg (1: the read-only path, only for an x nobody writes). */
template <int X>
static __device__ __forceinline__ float ch_unit(const uint4 (&q)[CH_U], const ch_it &it, const float *x, int lane) {
    float acc = 0.0f;
#pragma unroll
    for (int v = 0; v < CH_U; v++) {
        const int e = ((it.u % it.nb) * CH_U + v) * CH_CHUNK + 8 * lane;
        if (e < it.mat.n_in)
            acc = X ? ch_dot8(q[v], krn_ld_f4(x + e), krn_ld_f4(x + e + 4), acc)
                    : ch_dot8(q[v], *(const float4 *)(x + e), *(const float4 *)(x + e + 4), acc);
    }
    return krn_warp_sum(acc);
}

/* Grid barrier: the k-th call returns once every block has made its k-th call (one counter, monotonic:
 * counter == k * gridDim.x). Each costs ~3-4 us at 792 blocks (runs 34-36). Measured and not kept: a flag
 * per block polled by one warp, ~8 us (25 L2 round trips in a row per lane, run 38); 32 arrival counters and
 * a release word, ~4 us (run 39). bar: one word, zeroed before the launch. */
static __device__ __forceinline__ void ch_grid_bar(unsigned *bar, unsigned *k) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned target = ++*k * gridDim.x;
        __threadfence(); /* this block's writes before its arrival */
        atomicAdd(bar, 1u);
        while (*(volatile unsigned *)bar < target) { /* a plain L2 read per spin, not an atomic */
        }
        __threadfence();
    }
    __syncthreads();
}

/* Modes 1-3. Warp g takes units g, g + G, ... of each matrix in turn (ch_it), so every warp gets within one
 * unit of the same work (a row per warp would leave o's 4096 rows at 1.3 rows per warp: most warps idle for
 * a third of it). A unit's dot product is a partial sum of its row (split-K): a consumer would add a row's
 * nb partials in batch order (deterministic). */
__global__ void __launch_bounds__(CH_WARPS *KRN_WARP, 6)
    ch_kernel(const ch_mat *__restrict__ mats, int n_mats, const float *__restrict__ x, float *__restrict__ y,
              unsigned *bar, int mode) {
    const int lane = threadIdx.x % KRN_WARP;
    const int G = gridDim.x * CH_WARPS, g = blockIdx.x * CH_WARPS + threadIdx.x / KRN_WARP;
    unsigned k = 0;
    ch_it cs = ch_start(mats, g), is = cs;
    uint4 cur[CH_U], nxt[CH_U];
    ch_issue(cur, is, lane);
    for (;;) {
        const int cross = ch_next(&is, mats, n_mats, G, g), more = is.m < n_mats;
        if (more && !(cross && mode == 3))
            ch_issue(nxt, is, lane); /* in flight while cur is used */
        const float r = ch_unit<1>(cur, cs, x, lane);
        if (lane == 0)
            y[cs.u % 28672] = r; /* the unit's partial (the bench reads nothing back) */
        if (!more)
            break;
        if (cross && mode >= 2)
            ch_grid_bar(bar, &k);
        if (cross && mode == 3)
            ch_issue(nxt, is, lane);
        cs = is;
#pragma unroll
        for (int v = 0; v < CH_U; v++)
            cur[v] = nxt[v];
    }
}

/* ---- modes 4, 5: the same units through a per-warp shared-memory ring of D units (cp.async, 16 bytes per
 * lane per load). The loads run D units ahead of the math WHATEVER the matrix, so a warp that reaches a
 * barrier early has its next matrix's first D units streaming while the slowest warps finish (mode 4); mode 5
 * skips the barriers (the ring's ceiling). Each lane reads back only the 16-byte pieces it copied itself
 * (wait_group orders them for that thread), so no warp or block sync guards the ring. ---- */
static __device__ __forceinline__ void ch_cp16(void *smem, const void *gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
static __device__ __forceinline__ void ch_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> static __device__ __forceinline__ void ch_cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

template <int D>
__global__ void __launch_bounds__(CH_WARPS *KRN_WARP, 6)
    ch_ring_kernel(const ch_mat *__restrict__ mats, int n_mats, const float *x, float *__restrict__ y,
                   unsigned *bar, int barriers) {
    __shared__ uint4 ring[CH_WARPS][D][CH_U][KRN_WARP];
    const int lane = threadIdx.x % KRN_WARP, w = threadIdx.x / KRN_WARP;
    const int G = gridDim.x * CH_WARPS, g = blockIdx.x * CH_WARPS + w;
    unsigned k = 0;
    ch_it is = ch_start(mats, g), cs = is;
    for (int d = 0; d < D; d++) { /* prologue: D units in flight */
        if (is.m < n_mats) {
#pragma unroll
            for (int v = 0; v < CH_U; v++)
                ch_cp16(&ring[w][d][v][lane], ch_addr(is, v, lane));
            ch_next(&is, mats, n_mats, G, g);
        }
        ch_cp_commit(); /* an empty group past the end keeps the wait count uniform */
    }
    for (int c = 0;; c++) {
        ch_cp_wait<D - 1>(); /* unit c's group is done (this thread's copies) */
        const int slot = c % D;
        uint4 q[CH_U];
#pragma unroll
        for (int v = 0; v < CH_U; v++)
            q[v] = ring[w][slot][v][lane];
        /* plain x loads (L1-cached, coherent after the barrier's fences; __ldg's path is not, and __ldcg's L2
         * round trip per use made x 2x the weights' traffic: 33 % of HBM in run 35) */
        const float r = ch_unit<0>(q, cs, x, lane);
        if (lane == 0)
            y[cs.u % 28672] = r;
        const int crossed = ch_next(&cs, mats, n_mats, G, g);
        if (cs.m >= n_mats)
            break;
        if (is.m < n_mats) { /* refill the slot just read (q holds its values: read before this copy issues) */
#pragma unroll
            for (int v = 0; v < CH_U; v++)
                ch_cp16(&ring[w][slot][v][lane], ch_addr(is, v, lane));
            ch_next(&is, mats, n_mats, G, g);
        }
        ch_cp_commit();
        if (crossed && barriers) /* the next matrix's x is ready only now; its weights are already streaming */
            ch_grid_bar(bar, &k);
    }
    ch_cp_wait<0>();
}

__global__ void ch_fill(uint32_t *p, size_t n, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t v = bench_hash(i, seed);
        p[i] = (v & 0x3FFF3FFFu) | 0x3C003C00u; /* two bf16 values in [0.0078, 2): finite */
    }
}

extern "C" int bench_chain_run(int n_layer, int mode, int blocks_per_sm, int iters, bench_chain_result *res,
                                    dev_err *err) {
    static const int shapes[4][2] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
    if (n_layer < 1 || n_layer > 64 || mode < 0 || mode > 5 || iters < 1 || !res)
        return dev_err_set(err, MEMRA_E_INVAL, "gpu chain: n_layer %d (1..64), mode %d (0..5), iters %d (>= 1)",
                           n_layer, mode, iters);
    void *kern = mode < 4 ? (void *)ch_kernel : (void *)ch_ring_kernel<CH_RING>;
    const int n = 4 * n_layer;
    int rc = 0, occ = 0;
    uint8_t *wmem = NULL;
    float *x = NULL, *y = NULL;
    unsigned *bar = NULL;
    ch_mat *hm = (ch_mat *)calloc((size_t)n, sizeof *hm), *dm = NULL;
    krn_weight *kw = (krn_weight *)calloc((size_t)n, sizeof *kw);
    cudaStream_t st = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    size_t bytes = 0;
    for (int i = 0; i < n; i++)
        bytes += (size_t)shapes[i % 4][0] * shapes[i % 4][1] * 2;
    if (!hm || !kw) {
        rc = dev_err_set(err, MEMRA_E_NOMEM, "gpu chain: host memory");
        goto out;
    }
    BENCH_CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    BENCH_CK(cudaMalloc(&wmem, bytes));
    BENCH_CK(cudaMalloc(&x, 14336 * sizeof(float)));
    BENCH_CK(cudaMalloc(&y, 28672 * sizeof(float)));
    BENCH_CK(cudaMalloc(&bar, sizeof(unsigned)));
    BENCH_CK(cudaMalloc(&dm, (size_t)n * sizeof *dm));
    ch_fill<<<1024, 256, 0, st>>>((uint32_t *)wmem, bytes / 4, 7u);
    ch_fill<<<64, 256, 0, st>>>((uint32_t *)x, 14336, 9u);
    BENCH_CK(cudaGetLastError());
    {
        size_t off = 0;
        for (int i = 0; i < n; i++) {
            hm[i] = ch_mat{wmem + off, shapes[i % 4][0], shapes[i % 4][1]};
            kw[i] = krn_weight{KRN_BF16, shapes[i % 4][0], shapes[i % 4][1], wmem + off, KRN_LAYOUT_BLOCKS};
            off += (size_t)shapes[i % 4][0] * shapes[i % 4][1] * 2;
        }
    }
    BENCH_CK(cudaMemcpyAsync(dm, hm, (size_t)n * sizeof *dm, cudaMemcpyHostToDevice, st));
    BENCH_CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, CH_WARPS * KRN_WARP, 0));
    BENCH_CK(cudaEventCreate(&e0));
    BENCH_CK(cudaEventCreate(&e1));
    res->grid = mode ? (blocks_per_sm > 0 && blocks_per_sm < occ ? blocks_per_sm : occ) * krn_cuda_sm_count() : 0;
    for (int it = -1; it < iters; it++) { /* it = -1: warm-up, untimed */
        if (it == 0)
            BENCH_CK(cudaEventRecord(e0, st));
        if (mode == 0) {
            const int prev = krn_cuda_set_pdl(1);
            for (int i = 0; i < n && rc == 0; i++)
                rc = krn_cuda_matmul_async(st, y, &kw[i], x, 1, err);
            krn_cuda_set_pdl(prev);
            if (rc)
                goto out;
        } else {
            BENCH_CK(cudaMemsetAsync(bar, 0, sizeof(unsigned), st));
            int nm = n, md = mode < 4 ? mode : mode == 4;
            void *args[] = {(void *)&dm, (void *)&nm, (void *)&x, (void *)&y, (void *)&bar, (void *)&md};
            BENCH_CK(cudaLaunchCooperativeKernel(kern, dim3((unsigned)res->grid), dim3(CH_WARPS * KRN_WARP), args, 0, st));
        }
    }
    BENCH_CK(cudaEventRecord(e1, st));
    BENCH_CK(cudaEventSynchronize(e1));
    {
        float ms = 0.0f;
        BENCH_CK(cudaEventElapsedTime(&ms, e0, e1));
        res->us_per_pass = 1e3 * ms / iters;
        res->bytes_per_pass = (double)bytes;
    }
out:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaFree(wmem);
    cudaFree(x);
    cudaFree(y);
    cudaFree(bar);
    cudaFree(dm);
    if (st)
        cudaStreamDestroy(st);
    free(hm);
    free(kw);
    return rc;
}
