/* Experiment (issue [CUDA], not used by the forward): what the planar q4_1 GEMV at B = 1 would stream at if
 * x were quantized to int8 per 32-block (llama.cpp's q8_1: d = max|x| / 127, q = round(x / d), s = d * sum q)
 * and the products taken with __dp4a: per 8 weights, 3 logic ops to split the nibbles and 2 dp4a, instead
 * of the ~6.4 instructions per weight of the f32 planes GEMV (krn_cuda_matmul_p.cu), which leaves q4 planes
 * at 36-48 % of HBM. The price is numerics: x rounded to 8 bits per block (~0.4 % of a block's largest
 * |x|), so a row no longer has the f32 GEMV's value and the CPU backend would have to quantize x the same way
 * to stay within the GPU-vs-CPU tolerance. bench_q8x_run measures both kernels on the same random
 * planes and reports the relative difference of their outputs. Measured (docs/bench/gpu.md runs 43-45, no
 * PDL either side): 14336x4096 39.8 -> 62.7 % of HBM, 4096x14336 34.1 -> 57.4 %, 4096^2 27.4 -> 38.2 %;
 * outputs 3.6e-3 to 4.2e-3 of the largest |y| apart; 2 rows per warp (one x load for both) changed nothing.
 * Shared mutable state: none. */
#include <math.h>
#include <stdlib.h>
#include "bench_cuda.cuh"
#include "kernels/cuda/krn_cuda_planes.h"
#include "q8x.h"

#define QX_WARPS 4
#define QX_BPL 4 /* 32-element blocks per lane per batch (16 quant bytes each): 4 loads in flight */

/* x (n) f32 -> xq (n int8) and per 32-block (d, s = d * sum q); one warp per block, lane i: element i. */
__global__ void qx_quantize(const float *__restrict__ x, int8_t *__restrict__ xq, float2 *__restrict__ ds, int n) {
    const int blk = blockIdx.x * (blockDim.x / KRN_WARP) + threadIdx.x / KRN_WARP, lane = threadIdx.x % KRN_WARP;
    if (blk * 32 >= n)
        return;
    const float v = x[blk * 32 + lane];
    float a = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    const float d = a / 127.0f;
    const int q = d > 0.0f ? __float2int_rn(v / d) : 0;
    xq[blk * 32 + lane] = (int8_t)q;
    int sq = q;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        sq += __shfl_xor_sync(0xffffffffu, sq, o);
    if (lane == 0)
        ds[blk] = make_float2(d, d * (float)sq);
}

/* y[r] = sum over blocks b of (d_w d_x) * dot(q_w, q_x) + m_w * s_x. A warp takes R consecutive rows at a
 * time (row groups g, g + G, ...); lane l takes blocks l, l + 32, ... (QX_BPL per batch) of each of the R
 * rows, so one x load serves R rows; the next batch's (or group's) weight loads are issued before the
 * current batch is used. Quant plane: row r at r * n_in/2, block b's 16 bytes at 16 b (byte 4k+i: element
 * 8k+i low, 8k+4+i high); scales plane at n_out * n_in/2: row r, block b at (r * nb + b) * 4 bytes (fp16 d,
 * m). n_out % R == 0. */
template <int R>
__global__ void __launch_bounds__(QX_WARPS *KRN_WARP)
    qx_gemv(float *__restrict__ y, const uint8_t *__restrict__ W, const int8_t *__restrict__ xq,
            const float2 *__restrict__ ds, int n_out, int n_in) {
    const int lane = threadIdx.x % KRN_WARP, G = gridDim.x * QX_WARPS;
    const int nb = n_in / 32, nbatch = (nb + KRN_WARP * QX_BPL - 1) / (KRN_WARP * QX_BPL), ng = n_out / R;
    const size_t qrow = (size_t)n_in / 2;
    const uint32_t *sc = (const uint32_t *)(W + (size_t)n_out * qrow);
    int grp = blockIdx.x * QX_WARPS + threadIdx.x / KRN_WARP, t = 0;
    uint4 cur[R][QX_BPL], nxt[R][QX_BPL];
    uint32_t cs[R][QX_BPL], ns[R][QX_BPL];
    auto issue = [&](uint4 (&q)[R][QX_BPL], uint32_t (&s)[R][QX_BPL], int g, int tt) {
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int u = 0; u < QX_BPL; u++) {
                const int b = min((tt * QX_BPL + u) * KRN_WARP + lane, nb - 1);
                const size_t row = (size_t)g * R + r;
                q[r][u] = krn_ld_stream16(W + row * qrow + (size_t)b * 16);
                s[r][u] = __ldg(sc + row * nb + b);
            }
    };
    if (grp >= ng)
        return;
    issue(cur, cs, grp, 0);
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        acc[r] = 0.0f;
    while (grp < ng) {
        const int ngrp = t + 1 < nbatch ? grp : grp + G, nt = t + 1 < nbatch ? t + 1 : 0;
        if (ngrp < ng)
            issue(nxt, ns, ngrp, nt);
#pragma unroll
        for (int u = 0; u < QX_BPL; u++) {
            const int b = (t * QX_BPL + u) * KRN_WARP + lane;
            if (b < nb) {
                const int4 x0 = __ldg((const int4 *)(xq + (size_t)b * 32));
                const int4 x1 = __ldg((const int4 *)(xq + (size_t)b * 32 + 16));
                const int xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
                const float2 dx = __ldg(ds + b);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const uint32_t w[4] = {cur[r][u].x, cur[r][u].y, cur[r][u].z, cur[r][u].w};
                    int isum = 0;
#pragma unroll
                    for (int k = 0; k < 4; k++) { /* word k: elements 8k..8k+3 (low nibbles), 8k+4..8k+7 */
                        isum = __dp4a((int)(w[k] & 0x0F0F0F0Fu), xs[2 * k], isum);
                        isum = __dp4a((int)((w[k] >> 4) & 0x0F0F0F0Fu), xs[2 * k + 1], isum);
                    }
                    const float dw = krn_h2f((uint16_t)(cs[r][u] & 0xFFFFu));
                    const float mw = krn_h2f((uint16_t)(cs[r][u] >> 16));
                    acc[r] = fmaf(dw * dx.x, (float)isum, fmaf(mw, dx.y, acc[r]));
                }
            }
        }
        if (nt == 0) {
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float v = krn_warp_sum(acc[r]);
                if (lane == 0)
                    y[(size_t)grp * R + r] = v;
                acc[r] = 0.0f;
            }
        }
        grp = ngrp, t = nt;
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int u = 0; u < QX_BPL; u++)
                cur[r][u] = nxt[r][u], cs[r][u] = ns[r][u];
    }
}

/* Resident grid over n_out / R row groups of QX_WARPS warps, groups spread evenly over the rounds. */
template <int R> static int qx_grid(int n_out, int *blocks) {
    int occ = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, qx_gemv<R>, QX_WARPS * KRN_WARP, 0) != cudaSuccess)
        return -1;
    const int groups = (n_out / R + QX_WARPS - 1) / QX_WARPS, cap = occ * krn_cuda_sm_count();
    const int rounds = (groups + cap - 1) / cap;
    *blocks = (groups + rounds - 1) / rounds;
    return 0;
}

/* Random planes: quant bytes anything; scales d in [2^-10, 2^-9), m in (-2^-6, 0]; finite by construction. */
__global__ void qx_fill(uint32_t *p, size_t nq_words, size_t ns_words, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nq_words + ns_words;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t v = bench_hash(i, seed);
        v ^= v >> 13;
        p[i] = i < nq_words ? v : ((0x1400u | (v & 0x3FFu)) | (uint32_t)(0xA000u | ((v >> 16) & 0xFFFu)) << 16);
    }
}

__global__ void qx_fill_x(float *x, int n, uint32_t seed) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        uint32_t v = bench_hash(i, seed);
        x[i] = ((float)(v >> 8) / 16777216.0f - 0.5f) * 4.0f;
    }
}

extern "C" int bench_q8x_run(int n_out, int n_in, int iters, bench_q8x_result *res, dev_err *err) {
    if (n_out < 1 || n_in < 256 || n_in % 256 || iters < 1 || !res)
        return dev_err_set(err, MEMRA_E_INVAL, "q8x bench: n_out %d (>= 1), n_in %d (a multiple of 256), iters %d",
                           n_out, n_in, iters);
    const size_t wbytes = (size_t)n_out * n_in / 2 + (size_t)n_out * (n_in / 32) * 4;
    const int copies = (int)(400e6 / (double)wbytes) + 1; /* >= 400 MB rotated: L2 (50 MB) holds none */
    int rc = 0;
    uint8_t *w = NULL;
    float *x = NULL, *y0 = NULL, *y1 = NULL, *h0 = NULL, *h1 = NULL;
    int8_t *xq = NULL;
    float2 *ds = NULL;
    cudaStream_t st = NULL;
    cudaEvent_t e[4] = {NULL, NULL, NULL, NULL};
    int blocks1 = 0, blocks2 = 0;
    float *y2 = NULL, *h2 = NULL;
    BENCH_CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    BENCH_CK(cudaMalloc(&w, wbytes * copies));
    BENCH_CK(cudaMalloc(&x, n_in * sizeof(float)));
    BENCH_CK(cudaMalloc(&xq, n_in));
    BENCH_CK(cudaMalloc(&ds, (n_in / 32) * sizeof(float2)));
    BENCH_CK(cudaMalloc(&y0, n_out * sizeof(float)));
    BENCH_CK(cudaMalloc(&y1, n_out * sizeof(float)));
    BENCH_CK(cudaMalloc(&y2, n_out * sizeof(float)));
    for (int c = 0; c < copies; c++)
        qx_fill<<<1024, 256, 0, st>>>((uint32_t *)(w + wbytes * c), (size_t)n_out * n_in / 8,
                                      (size_t)n_out * (n_in / 32), 11u);
    qx_fill_x<<<16, 256, 0, st>>>(x, n_in, 5u);
    BENCH_CK(cudaGetLastError());
    for (int i = 0; i < 4; i++)
        BENCH_CK(cudaEventCreate(&e[i]));
    if (qx_grid<1>(n_out, &blocks1) != 0 || qx_grid<2>(n_out, &blocks2) != 0)
        BENCH_CK(cudaGetLastError());
    /* 0: production f32 planes GEMV; 1: quantize x + dp4a GEMV, a row per warp; 2: the same, 2 rows per warp */
    for (int pass = 0; pass < 3; pass++) {
        for (int it = -1; it < iters; it++) {
            if (it == 0)
                BENCH_CK(cudaEventRecord(e[pass], st));
            const uint8_t *wc = w + wbytes * (size_t)((it + copies) % copies);
            if (pass == 0) {
                const krn_weight W = {KRN_Q4_1, n_out, n_in, wc, KRN_LAYOUT_PLANES};
                if ((rc = krn_cuda_matmul_planes_async(st, y0, &W, x, 1, err)) != 0)
                    goto out;
            } else { /* x quantized once, before the loop: a decode step would fold it into rmsnorm's store */
                if (it == -1)
                    qx_quantize<<<(n_in / 32 + 3) / 4, 128, 0, st>>>(x, xq, ds, n_in);
                if (pass == 1)
                    qx_gemv<1><<<blocks1, QX_WARPS * KRN_WARP, 0, st>>>(y1, wc, xq, ds, n_out, n_in);
                else
                    qx_gemv<2><<<blocks2, QX_WARPS * KRN_WARP, 0, st>>>(y2, wc, xq, ds, n_out, n_in);
            }
        }
        BENCH_CK(cudaEventRecord(e[pass + 1], st));
    }
    BENCH_CK(cudaEventSynchronize(e[3]));
    {
        float ms0 = 0.0f, ms1 = 0.0f, ms2 = 0.0f;
        BENCH_CK(cudaEventElapsedTime(&ms0, e[0], e[1]));
        BENCH_CK(cudaEventElapsedTime(&ms1, e[1], e[2]));
        BENCH_CK(cudaEventElapsedTime(&ms2, e[2], e[3]));
        res->us_f32 = 1e3 * ms0 / iters;
        res->us_q8x = 1e3 * ms1 / iters;
        res->us_q8x_r2 = 1e3 * ms2 / iters;
        res->weight_bytes = (double)wbytes;
        /* the last pass of each read copy (iters - 1) % copies: compare y0 and y1 of the same weights */
        const uint8_t *wc = w + wbytes * (size_t)((iters - 1 + copies) % copies);
        const krn_weight W = {KRN_Q4_1, n_out, n_in, wc, KRN_LAYOUT_PLANES};
        if ((rc = krn_cuda_matmul_planes_async(st, y0, &W, x, 1, err)) != 0)
            goto out;
        qx_quantize<<<(n_in / 32 + 3) / 4, 128, 0, st>>>(x, xq, ds, n_in);
        qx_gemv<1><<<blocks1, QX_WARPS * KRN_WARP, 0, st>>>(y1, wc, xq, ds, n_out, n_in);
        qx_gemv<2><<<blocks2, QX_WARPS * KRN_WARP, 0, st>>>(y2, wc, xq, ds, n_out, n_in);
        h0 = (float *)malloc(n_out * sizeof(float));
        h1 = (float *)malloc(n_out * sizeof(float));
        h2 = (float *)malloc(n_out * sizeof(float));
        if (!h0 || !h1 || !h2) {
            rc = dev_err_set(err, MEMRA_E_NOMEM, "q8x bench: host memory");
            goto out;
        }
        BENCH_CK(cudaMemcpyAsync(h0, y0, n_out * sizeof(float), cudaMemcpyDeviceToHost, st));
        BENCH_CK(cudaMemcpyAsync(h1, y1, n_out * sizeof(float), cudaMemcpyDeviceToHost, st));
        BENCH_CK(cudaMemcpyAsync(h2, y2, n_out * sizeof(float), cudaMemcpyDeviceToHost, st));
        BENCH_CK(cudaStreamSynchronize(st));
        double mx = 0.0, md = 0.0;
        int same = 1;
        for (int i = 0; i < n_out; i++) {
            mx = fmax(mx, fabs((double)h0[i]));
            md = fmax(md, fabs((double)h0[i] - (double)h1[i]));
            same &= h1[i] == h2[i]; /* R changes no row's arithmetic */
        }
        res->max_rel_diff = mx > 0.0 ? md / mx : md;
        res->r2_same_bits = same;
        res->grid = blocks1;
    }
out:
    for (int i = 0; i < 4; i++)
        if (e[i])
            cudaEventDestroy(e[i]);
    cudaFree(w);
    cudaFree(x);
    cudaFree(xq);
    cudaFree(ds);
    cudaFree(y0);
    cudaFree(y1);
    cudaFree(y2);
    if (st)
        cudaStreamDestroy(st);
    free(h0);
    free(h1);
    free(h2);
    return rc;
}
