/* memra-bench gpu-kernels: bandwidth of the CUDA fused dequant GEMV (krn_cuda_matmul_async) on the three
 * matrix shapes of an 8B Llama layer (4096x4096 attention projections, 14336x4096 gate/up, 4096x14336
 * down), per weight type, at batch B (default 1). Bytes per launch = weights + x + y; GB/s = bytes / time;
 * "% HBM" is against --hbm (default 4575 GB/s, an H200's copy bandwidth, docs/bench/gpu.md "How the figures are made"). Each
 * configuration rotates over enough copies of the weights (>= 400 MB in all) that L2 (50 MB) cannot hold
 * them, and is timed with CUDA events around many back-to-back launches on one stream. Weight bytes are
 * random (GEMV time does not depend on the values). With --gemm: the fused GEMV against the cuBLAS path
 * (krn_cuda_gemm_async) for bf16/f16/f32 at B = 1..512 on 4096x4096 and 14336x4096, to choose
 * MEMRA_CUDA_GEMM_MIN_B. After the block-type rows, the planar layouts of q8_0,
 * q4_1, q4_0, q4_K, q6_K ("q8_0/p" rows: repacked on the device, read through krn_cuda_matmul_async), each followed by
 * its int8-x row ("q8_0/x8": x quantized once, untimed, then krn_cuda_matmul_parts_async with the x8 rows,
 * MEMRA_CUDA_X8's path) and, per shape, the quantize kernel's own time ("x8 quantize"). With --x-type bf16
 * (or f16): every GEMV (and the x8 quantize, and both --gemm paths) reads x of that activation type, widened on
 * load (kernels/krn.h "activation types"): the rows keep their format, MB/launch counts 2 bytes per x element,
 * so the rows against a default (f32 x) run show what 16-bit activations save (at B = 1, mostly nothing next
 * to the weights). With --attention: the decode attention kernel (krn_cuda_attention_ws_async) instead, on the
 * 8B shape (32 / 8 heads, head_dim 128) per KV cache type (f32, bf16), B (1, 4) and context (64 .. 16384 keys):
 * KV bytes per call, us, GB/s and % HBM (bench_gpu_att.c; honours --iters, --hbm, --device, --pdl). With --read:
 * what this GPU's HBM streams now, a read-only kernel and a device-to-device copy over 4 GiB (cuda/hbm.cu), the
 * denominator P2 can be quoted against within one run. Reports only; asserts nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#ifdef MEMRA_HAVE_CUDA

#include <stdint.h>
#include <cuda_runtime_api.h>
#include "device/dev.h"
#include "kernels/fill.h"
#include "kernels/quant.h"
#include "kernels/cuda/krn_cuda.h"
#include "cuda/hbm.h"
#include "kernels/cuda/krn_cuda_gemm.cuh"
#include "kernels/cuda/krn_cuda_planes.h"

typedef struct gk_type {
    int type;
    const char *name;
    int be, bb; /* elements, bytes per block */
} gk_type;

static const gk_type GK_TYPES[] = {
    {KRN_F32, "f32", 1, 4},       {KRN_F16, "f16", 1, 2},     {KRN_BF16, "bf16", 1, 2},   {KRN_Q8_0, "q8_0", 32, 34},
    {KRN_Q6_K, "q6_k", 256, 210}, {KRN_Q4_1, "q4_1", 32, 20}, {KRN_Q4_0, "q4_0", 32, 18}, {KRN_Q4_K, "q4_k", 256, 144},
    {KRN_Q5_K, "q5_k", 256, 176},
};
static const int GK_SHAPES[][2] = {{4096, 4096}, {1024, 4096}, {14336, 4096}, {4096, 14336}}; /* n_out, n_in */

static void gk_usage(FILE *f) {
    fprintf(f, "usage: memra-bench gpu-kernels [--batch B] [--iters N] [--hbm GBps] [--device D] [--pdl] [--gemm]\n"
               "                               [--x-type f32|f16|bf16] [--attention] [--read]\n"
               "  --attention instead: decode attention (krn_cuda_attention_ws_async), 8B shape (32/8 heads,\n"
               "              head_dim 128, out f32), f32/bf16 caches, B = 1, 4, context 64..16384 keys: KV MB,\n"
               "              us, GB/s, %% HBM per call (uses --iters, --hbm, --device, --pdl; MEMRA_CUDA_ATT_CHUNK)\n"
               "  --gemm      instead: fused GEMV vs cuBLAS (krn_cuda_gemm) for bf16/f16/f32, B = 1..512\n"
               "  --batch B   rows of x per GEMV, 1..64 (default 1)\n"
               "  --iters N   timed launches per configuration, >= 1 (default 200)\n"
               "  --hbm G     HBM bandwidth the %% column is against, GB/s (default 4575)\n"
               "  --read      instead: this GPU's HBM bandwidth now (a 4 GiB buffer streamed by a read-only kernel\n"
               "              with 4 and 8 loads in flight a thread, and by a device-to-device copy), best and\n"
               "              median of --iters passes: the same-run denominator for P2 (cuda/hbm.cu)\n"
               "  --device D  CUDA device ordinal (default 0)\n"
               "  --pdl       launch with programmatic dependent launch (MEMRA_PDL's path: each GEMV's first\n"
               "              weight loads overlap the previous launch's tail, as in a decode step)\n"
               "  --x-type T  activation type of x the GEMVs read: f32 (default), f16 or bf16 (MEMRA_ACT_TYPE's\n"
               "              path: 16-bit x widened on load; also the x8 quantize's input and --gemm's x)\n");
}

static uint64_t gk_rng = 0x243F6A8885A308D3ull;
static int gk_xt = KRN_F32; /* --x-type: set once while parsing the options, read by the runs (one thread) */

/* The header lines' note of a 16-bit x ("" for f32: the default output is unchanged). */
static const char *gk_xt_note(void) { return gk_xt == KRN_BF16 ? ", x bf16" : gk_xt == KRN_F16 ? ", x f16" : ""; }

/* Bytes of one x element of gk_xt. */
static size_t gk_xbytes(void) { return krn_act_bytes(gk_xt); }

/* x (n values of hx) as gk_xt in device memory: *dx (cudaMalloc'd; the caller frees it). 0 or -1 (printed). */
static int gk_upload_x(void **dx, const float *hx, size_t n) {
    uint16_t *h16 = NULL;
    const void *src = hx;
    if (gk_xt != KRN_F32) {
        if (!(h16 = malloc(2 * n))) {
            fprintf(stderr, "gpu-kernels: out of host memory\n");
            return -1;
        }
        for (size_t i = 0; i < n; i++)
            h16[i] = gk_xt == KRN_BF16 ? krn_f32_to_bf16(hx[i]) : krn_f32_to_f16(hx[i]);
        src = h16;
    }
    cudaError_t e = cudaMalloc(dx, n * gk_xbytes());
    if (e == cudaSuccess)
        e = cudaMemcpy(*dx, src, n * gk_xbytes(), cudaMemcpyHostToDevice);
    /* ordered: a cudaMemcpy from pageable memory may return before its DMA ends, on the legacy stream, which the
     * timing's non-blocking stream does not wait for; x and every weight uploaded before it land here */
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    free(h16);
    if (e != cudaSuccess) {
        fprintf(stderr, "gpu-kernels: uploading x: %s\n", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}
#define GK_CK(call, what) BENCH_CUDA_CK("gpu-kernels", call, what)

/* Average seconds per matmul over max(iters, copies) launches rotating over the weight copies w[0..copies):
 * every copy once untimed, then the timed launches between two events on st. cublas != NULL: through the
 * cuBLAS path on that dev_stream (krn_cuda_gemm_x_async; its native stream is st); else the GEMV on st, with
 * the int8 rows x8 when not NULL. dx holds x of activation type gk_xt. copies = 0: the x8 quantize of dx alone
 * (into x8), iters times. Returns 0 or -1 (message printed). */
static int gk_time(cudaStream_t st, dev_stream *cublas, const krn_weight *w, int copies, float *dy, const void *dx,
                   void *x8, int n_in, int B, int iters, double *sec) {
    const int xt = gk_xt;
    cudaEvent_t e0 = NULL, e1 = NULL;
    dev_err err = {0};
    int rc = -1;
    GK_CK(cudaEventCreate(&e0), "cudaEventCreate");
    GK_CK(cudaEventCreate(&e1), "cudaEventCreate");
    const int launches = iters > copies ? iters : copies;
    for (int i = -copies; i < launches; i++) { /* negative i: warm-up, every copy once */
        if (i == 0)
            GK_CK(cudaEventRecord(e0, st), "cudaEventRecord");
        if (!copies) {
            if (krn_cuda_quantize_x8_async(st, x8, dx, xt, B, n_in, &err)) {
                fprintf(stderr, "gpu-kernels: %s\n", err.msg);
                goto fail;
            }
            continue;
        }
        const krn_weight *W = &w[(i + copies) % copies];
        const krn_mm_part part = {dy, W};
        const krn_mm_x xx = {dx, xt, x8};
        if ((cublas ? krn_cuda_gemm_x_async(cublas, dy, W, dx, xt, B, &err)
                    : krn_cuda_matmul_parts_async(st, &part, 1, &xx, B, 0, &err))) {
            fprintf(stderr, "gpu-kernels: %s\n", err.msg);
            goto fail;
        }
    }
    GK_CK(cudaEventRecord(e1, st), "cudaEventRecord");
    GK_CK(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0.0f;
    GK_CK(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    *sec = (double)ms / 1e3 / launches;
    rc = 0;
fail:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    return rc;
}

/* n_out x n_in weights of `type` at hw: kernels/fill.h's valid blocks (finite scales for every type), values of
 * order 1 from the bench's seed (GEMV time does not depend on them). 0 or -1 (message printed). */
static int gk_fill_weights(int type, int n_out, int n_in, uint8_t *hw) {
    krn_fill_plan p;
    if (krn_fill_plan_make(&p, type, n_out, n_in, bench_xorshift(&gk_rng), 1.0f, 0.0f) != 0) {
        fprintf(stderr, "gpu-kernels: no fill for %s %dx%d\n", krn_type_name(type), n_out, n_in);
        return -1;
    }
    krn_fill_host_range(&p, hw, 0, krn_fill_units(&p));
    return 0;
}

/* One (type, shape): average seconds per launch into *sec. planes: the copies are a planar type repacked on
 * the device into KRN_LAYOUT_PLANES (krn_cuda_repack_async) from one uploaded block tensor; planes = 2: the GEMV takes x quantized to int8 (once, before timing), and
 * *sec_q = the quantize alone. Returns 0 or -1 (message printed). */
static int gk_run(cudaStream_t st, const gk_type *t, int n_out, int n_in, int B, int iters, int planes, double *sec,
                  double *sec_q, double *bytes) {
    const size_t wbytes = (size_t)n_out * (size_t)(n_in / t->be) * (size_t)t->bb;
    const size_t want = (size_t)400 << 20;
    int copies = (int)((want + wbytes - 1) / wbytes);
    if (copies < 2)
        copies = 2;
    if (copies > 128)
        copies = 128;
    krn_weight *w = calloc((size_t)copies, sizeof *w);
    uint8_t *hw = malloc(wbytes);
    float *hx = malloc(sizeof(float) * (size_t)B * n_in);
    float *dy = NULL;
    void *dx = NULL;
    void *blocks = NULL, *x8 = NULL;
    dev_err err = {0};
    int rc = -1;
    if (!w || !hw || !hx) {
        fprintf(stderr, "gpu-kernels: out of host memory\n");
        goto fail;
    }
    if (gk_fill_weights(t->type, n_out, n_in, hw))
        goto fail;
    for (size_t i = 0; i < (size_t)B * n_in; i++)
        hx[i] = bench_rand_unit(&gk_rng);
    const krn_weight src = {t->type, n_out, n_in, NULL, KRN_LAYOUT_BLOCKS};
    if (planes) {
        GK_CK(cudaMalloc(&blocks, wbytes), "cudaMalloc(blocks)");
        GK_CK(cudaMemcpy(blocks, hw, wbytes, cudaMemcpyHostToDevice), "cudaMemcpy(blocks)");
        /* ordered: the blocks land before the repacks on st read them (see gk_upload_x) */
        GK_CK(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }
    for (int c = 0; c < copies; c++) {
        void *d = NULL;
        GK_CK(cudaMalloc(&d, wbytes), "cudaMalloc(weights)");
        w[c] = src;
        w[c].data = d;
        if (!planes) {
            GK_CK(cudaMemcpy(d, hw, wbytes, cudaMemcpyHostToDevice), "cudaMemcpy(weights)");
            continue;
        }
        krn_weight b = src;
        b.data = blocks;
        if (krn_cuda_repack_async(st, &w[c], &b, &err) != 0) { /* sets w[c].layout = PLANES */
            fprintf(stderr, "gpu-kernels: %s\n", err.msg);
            goto fail;
        }
    }
    if (gk_upload_x(&dx, hx, (size_t)B * n_in))
        goto fail;
    GK_CK(cudaMalloc((void **)&dy, sizeof(float) * (size_t)B * n_out), "cudaMalloc(y)");
    if (planes == 2) {
        GK_CK(cudaMalloc(&x8, (size_t)B * krn_x8_row_bytes(n_in)), "cudaMalloc(x8)");
        if (gk_time(st, NULL, NULL, 0, NULL, dx, x8, n_in, B, iters, sec_q))
            goto fail;
    }
    if (gk_time(st, NULL, w, copies, dy, dx, x8, n_in, B, iters, sec))
        goto fail;
    *bytes = (double)wbytes +
             B * ((planes == 2 ? (double)krn_x8_row_bytes(n_in) : (double)gk_xbytes() * n_in) + 4.0 * n_out);
    rc = 0;
fail:
    cudaFree(x8);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(blocks);
    if (w)
        for (int c = 0; c < copies; c++)
            cudaFree((void *)w[c].data);
    free(w);
    free(hw);
    free(hx);
    return rc;
}

/* The planes rows of every shape; returns 0 or 2 (a row failed, message printed). */
static int gk_planes(cudaStream_t st, int B, int iters, double hbm) {
    static const int types[] = {KRN_Q8_0, KRN_Q4_1, KRN_Q4_0, KRN_Q4_K, KRN_Q6_K};
    int rc = 0;
    for (size_t si = 0; si < sizeof GK_SHAPES / sizeof GK_SHAPES[0]; si++)
        for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
            const gk_type *t = NULL;
            for (size_t ti = 0; ti < sizeof GK_TYPES / sizeof GK_TYPES[0]; ti++)
                if (GK_TYPES[ti].type == types[k])
                    t = &GK_TYPES[ti];
            const int n_out = GK_SHAPES[si][0], n_in = GK_SHAPES[si][1];
            for (int planes = 1; planes <= 2; planes++) {
                double sec = 0.0, sec_q = 0.0, bytes = 0.0;
                char shape[32], name[16];
                snprintf(shape, sizeof shape, "%dx%d", n_out, n_in);
                snprintf(name, sizeof name, "%s/%s", t->name, planes == 2 ? "x8" : "p");
                if (gk_run(st, t, n_out, n_in, B, iters, planes, &sec, &sec_q, &bytes) != 0) {
                    rc = 2;
                    continue;
                }
                const double gbs = bytes / sec / 1e9;
                printf("%-13s %-7s %8.2f %10.2f %10.1f %6.1f%%\n", shape, name, bytes / 1e6, sec * 1e6, gbs,
                       100.0 * gbs / hbm);
                if (planes == 2 && k + 1 == sizeof types / sizeof types[0])
                    printf("%-13s %-7s %8s %10.2f   (B=%d rows of %d %s)\n", shape, "x8 quant", "", sec_q * 1e6, B,
                           n_in, gk_xt == KRN_F32 ? "floats" : krn_type_name(gk_xt));
            }
        }
    return rc;
}

/* ---- --gemm: fused GEMV vs the cuBLAS path (kernels/cuda/krn_cuda_gemm.cuh), to choose the default of
 * MEMRA_CUDA_GEMM_MIN_B by measurement. Per (type, shape, B): microseconds per matmul of each path (the
 * cuBLAS one includes converting x to W's type, none with --x-type equal to a 16-bit W's) and effective
 * TFLOP/s = 2*B*n_out*n_in / time; the weights rotate over >= 400 MB of copies so L2 cannot hold them. ---- */

static const int GG_B[] = {1, 8, 16, 32, 64, 128, 256, 512};
#define GG_NB ((int)(sizeof GG_B / sizeof GG_B[0]))

/* Weights of one (type, shape): copies of gk_fill_weights' values (time does not depend on them). */
static int gg_upload(int type, int esz, int n_out, int n_in, void **w, int copies) {
    const size_t wbytes = (size_t)n_out * n_in * (size_t)esz;
    uint8_t *hw = malloc(wbytes);
    int rc = -1;
    if (!hw) {
        fprintf(stderr, "gpu-kernels --gemm: out of host memory\n");
        return -1;
    }
    if (gk_fill_weights(type, n_out, n_in, hw))
        goto fail;
    for (int c = 0; c < copies; c++) {
        GK_CK(cudaMalloc(&w[c], wbytes), "cudaMalloc(weights)");
        GK_CK(cudaMemcpy(w[c], hw, wbytes, cudaMemcpyHostToDevice), "cudaMemcpy(weights)");
    }
    rc = 0;
fail:
    free(hw);
    return rc;
}

/* One (type, shape) at every B of GG_B: prints a row per B; *first_win = the smallest B from which cuBLAS
 * won at every larger B measured (0 = never). */
static int gg_shape(dev_stream *s, int type, int esz, const char *name, int n_out, int n_in, int iters,
                    int *first_win) {
    const int maxb = GG_B[GG_NB - 1];
    const size_t wbytes = (size_t)n_out * n_in * (size_t)esz;
    int copies = (int)((((size_t)400 << 20) + wbytes - 1) / wbytes), rc = -1;
    copies = copies < 2 ? 2 : copies;
    void **w = calloc((size_t)copies, sizeof *w);
    krn_weight *ws = calloc((size_t)copies, sizeof *ws);
    float *hx = malloc(sizeof(float) * (size_t)maxb * n_in), *dy = NULL;
    void *dx = NULL;
    *first_win = 0;
    if (!w || !ws || !hx) {
        fprintf(stderr, "gpu-kernels --gemm: out of host memory\n");
        goto fail;
    }
    if (gg_upload(type, esz, n_out, n_in, w, copies))
        goto fail;
    for (size_t i = 0; i < (size_t)maxb * n_in; i++)
        hx[i] = bench_rand_unit(&gk_rng);
    if (gk_upload_x(&dx, hx, (size_t)maxb * n_in))
        goto fail;
    GK_CK(cudaMalloc((void **)&dy, sizeof(float) * (size_t)maxb * n_out), "cudaMalloc(y)");
    for (int c = 0; c < copies; c++)
        ws[c] = (krn_weight){type, n_out, n_in, w[c], KRN_LAYOUT_BLOCKS};
    cudaStream_t st = (cudaStream_t)dev_stream_native(s);
    for (int bi = 0; bi < GG_NB; bi++) {
        const int B = GG_B[bi];
        double tg = 0.0, tc = 0.0;
        if (gk_time(st, NULL, ws, copies, dy, dx, NULL, n_in, B, iters, &tg) ||
            gk_time(st, s, ws, copies, dy, dx, NULL, n_in, B, iters, &tc))
            goto fail;
        const double fl = 2.0 * B * (double)n_out * n_in;
        char shape[32];
        snprintf(shape, sizeof shape, "%dx%d", n_out, n_in);
        printf("%-12s %-5s %4d %10.2f %10.2f %9.2f %9.2f %7.2fx\n", shape, name, B, tg * 1e6, tc * 1e6,
               fl / tg / 1e12, fl / tc / 1e12, tg / tc);
        if (tc >= tg)
            *first_win = 0; /* a loss resets it: the threshold must win from there on */
        else if (!*first_win)
            *first_win = B;
    }
    rc = 0;
fail:
    cudaFree(dx);
    cudaFree(dy);
    if (w)
        for (int c = 0; c < copies; c++)
            cudaFree(w[c]);
    free(w);
    free(ws);
    free(hx);
    return rc;
}

static int gk_gemm_table(int dev, int iters) {
    static const int types[3][2] = {{KRN_BF16, 2}, {KRN_F16, 2}, {KRN_F32, 4}}; /* type, bytes per weight */
    static const char *names[3] = {"bf16", "f16", "f32"};
    static const int shapes[2][2] = {{4096, 4096}, {14336, 4096}};
    dev_err err = {0};
    dev_platform *p = dev_platform_open(DEV_KIND_CUDA, 0, &err);
    if (!p) {
        fprintf(stderr, "gpu-kernels --gemm: %s\n", err.msg);
        return 2;
    }
    dev_device *d = dev_platform_device(p, dev);
    dev_stream *s = d ? dev_stream_create(d, "bench-gemm", &err) : NULL;
    if (!s) {
        fprintf(stderr, "gpu-kernels --gemm: device %d: %s\n", dev, d ? err.msg : "no such device");
        dev_platform_close(p);
        return 2;
    }
    int prev = 0, rc = 0, first_win[3][2] = {{0}};
    struct cudaDeviceProp prop;
    if (cudaGetDevice(&prev) != cudaSuccess || cudaSetDevice(dev) != cudaSuccess ||
        cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        fprintf(stderr, "gpu-kernels --gemm: device %d: %s\n", dev, cudaGetErrorString(cudaGetLastError()));
        rc = 2;
        goto out;
    }
    printf("gpu-kernels --gemm: %s (sm_%d%d, %d SMs), %d launches per cell, MEMRA_CUDA_GEMM_MIN_B now %d%s\n",
           prop.name, prop.major, prop.minor, prop.multiProcessorCount, iters, krn_cuda_gemm_min_b(), gk_xt_note());
    printf("%-12s %-5s %4s %10s %10s %9s %9s %8s\n", "shape", "type", "B", "gemv_us", "cublas_us", "gemv_TF/s",
           "cublas_TF", "speedup");
    for (int ti = 0; ti < 3; ti++)
        for (int si = 0; si < 2; si++)
            if (gg_shape(s, types[ti][0], types[ti][1], names[ti], shapes[si][0], shapes[si][1], iters,
                         &first_win[ti][si]))
                rc = 2;
    printf("smallest B from which cuBLAS wins at every larger B measured (0 = never):\n");
    for (int ti = 0; ti < 3; ti++)
        printf("  %-5s 4096x4096: %d   14336x4096: %d\n", names[ti], first_win[ti][0], first_win[ti][1]);
    printf("(the threshold is never below %d: decode and speculative verify need batch-invariant rows)\n",
           KRN_CUDA_GEMM_MIN_B_FLOOR);
out:
    dev_stream_destroy(s);
    dev_platform_close(p);
    cudaSetDevice(prev);
    return rc;
}

/* ---- --read: what HBM streams on this GPU now (cuda/hbm.cu), so P2 and the GEMV rows can be quoted against a
 * number of the same run as well as against --hbm */
static int gk_read_table(int dev, int iters, double hbm) {
    const int passes = iters < 3 ? 3 : iters; /* bench_hbm_run's median needs 3 */
    struct cudaDeviceProp prop;
    if (cudaSetDevice(dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        fprintf(stderr, "gpu-kernels --read: no CUDA device %d\n", dev);
        return 2;
    }
    const size_t bytes = (size_t)4 << 30;
    static const char *names[] = {"read, 4 x 16 B in flight a thread", "read, 8 x 16 B in flight a thread",
                                  "copy d2d (read + written)"};
    printf("gpu-kernels --read: %s (sm_%d%d, %d SMs, L2 %d MB), buffer %zu MB, %d passes a row, HBM ref %.0f GB/s\n",
           prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.l2CacheSize >> 20, bytes >> 20, passes,
           hbm);
    printf("%-36s %6s %10s %12s %8s\n", "how", "grid", "best GB/s", "median GB/s", "% HBM");
    for (int k = 0; k < 3; k++) {
        bench_hbm_result r = {0};
        dev_err err = {0};
        if (bench_hbm_run(k, bytes, passes, &r, &err) != 0) {
            fprintf(stderr, "gpu-kernels --read: %s\n", err.msg);
            return 1;
        }
        printf("%-36s %6d %10.1f %12.1f %7.1f%%\n", names[k], r.grid, r.best_gbs, r.median_gbs,
               100.0 * r.best_gbs / hbm);
        fflush(stdout);
    }
    return 0;
}

int bench_gpu_kernels(int argc, char **argv) {
    int B = 1, iters = 200, dev = 0, pdl = 0, gemm = 0, att = 0, rd = 0;
    int set_b = 0, set_xt = 0, set_hbm = 0; /* options only some tables take */
    double hbm = 4575.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            gk_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--gemm")) {
            gemm = 1;
            continue;
        } else if (!strcmp(a, "--read")) {
            rd = 1;
            continue; /* takes no value */
        } else if (!strcmp(a, "--attention")) {
            att = 1;
            continue; /* takes no value */
        } else if (!strcmp(a, "--pdl")) {
            pdl = 1;
            continue; /* takes no value */
        } else if (!strcmp(a, "--batch")) {
            bad = bench_int("gpu-kernels", a, v, 1, 64, &B), set_b = 1;
        } else if (!strcmp(a, "--iters")) {
            bad = bench_int("gpu-kernels", a, v, 1, 1 << 20, &iters);
        } else if (!strcmp(a, "--device")) {
            bad = bench_int("gpu-kernels", a, v, 0, 1023, &dev);
        } else if (!strcmp(a, "--hbm") && v) {
            char *end;
            hbm = strtod(v, &end);
            set_hbm = 1;
            if (!*v || *end || !(hbm > 0.0)) {
                fprintf(stderr, "gpu-kernels: --hbm %s: expected GB/s > 0\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--x-type") && v) {
            static const int xts[] = {KRN_F32, KRN_F16, KRN_BF16};
            gk_xt = -1;
            for (int k = 0; k < 3; k++)
                gk_xt = strcmp(v, krn_type_name(xts[k])) ? gk_xt : xts[k];
            set_xt = 1;
            if (gk_xt < 0) {
                fprintf(stderr, "gpu-kernels: --x-type %s (allowed: f32, f16, bf16)\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "gpu-kernels: unknown or incomplete option '%s'\n", a);
            gk_usage(stderr);
            return 2;
        }
        if (bad)
            return 2;
        i++;
    }
    if (att + gemm + rd > 1) {
        fprintf(stderr, "gpu-kernels: --attention, --gemm and --read are tables of their own: one at a time\n");
        gk_usage(stderr);
        return 2;
    }
    /* what each table takes: the GEMV rows everything; --attention no --batch / --x-type (it sweeps B, its x is
     * q); --gemm (it sweeps B) none of them, nor --hbm */
    const char *unused = (att || rd) && (set_b || set_xt) ? "--batch and --x-type"
                         : rd && pdl                    ? "--pdl"
                         : gemm && (set_b || set_xt || pdl || set_hbm) ? "--batch, --x-type, --pdl and --hbm"
                                                                         : NULL;
    if (unused) {
        fprintf(stderr, "gpu-kernels: %s %s not apply to the %s table\n", unused, strstr(unused, " and ") ? "do" : "does",
                att ? "--attention" : rd ? "--read" : "--gemm");
        return 2;
    }
    if (att)
        return bench_gpu_att(dev, iters, hbm, pdl);
    if (gemm)
        return gk_gemm_table(dev, iters);
    if (rd)
        return gk_read_table(dev, iters, hbm);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= dev) {
        fprintf(stderr, "gpu-kernels: no CUDA device %d (%s)\n", dev,
                e != cudaSuccess ? cudaGetErrorString(e) : "not that many devices");
        return 2;
    }
    struct cudaDeviceProp prop;
    cudaStream_t st = NULL;
    if (cudaSetDevice(dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess ||
        cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) {
        fprintf(stderr, "gpu-kernels: cannot open device %d: %s\n", dev, cudaGetErrorString(cudaGetLastError()));
        return 2;
    }
    krn_cuda_set_pdl(pdl);
    printf("gpu-kernels: %s (sm_%d%d, %d SMs, L2 %d MB), B=%d, %d launches per row, PDL %s, HBM ref %.0f GB/s%s\n",
           prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.l2CacheSize >> 20, B, iters,
           pdl ? "on" : "off", hbm, gk_xt_note());
    printf("%-13s %-5s %10s %10s %10s %7s\n", "shape", "type", "MB/launch", "us", "GB/s", "% HBM");
    int rc = 0;
    for (size_t si = 0; si < sizeof GK_SHAPES / sizeof GK_SHAPES[0]; si++)
        for (size_t ti = 0; ti < sizeof GK_TYPES / sizeof GK_TYPES[0]; ti++) {
            const int n_out = GK_SHAPES[si][0], n_in = GK_SHAPES[si][1];
            double sec = 0.0, bytes = 0.0;
            char shape[32];
            snprintf(shape, sizeof shape, "%dx%d", n_out, n_in);
            if (gk_run(st, &GK_TYPES[ti], n_out, n_in, B, iters, 0, &sec, NULL, &bytes) != 0) {
                rc = 2;
                continue;
            }
            const double gbs = bytes / sec / 1e9;
            printf("%-13s %-5s %10.2f %10.2f %10.1f %6.1f%%\n", shape, GK_TYPES[ti].name, bytes / 1e6, sec * 1e6,
                   gbs, 100.0 * gbs / hbm);
        }
    if (gk_planes(st, B, iters, hbm) != 0) /* planar layouts, "<type>/p" rows */
        rc = 2;
    cudaStreamDestroy(st);
    return rc;
}

#else /* !MEMRA_HAVE_CUDA */

int bench_gpu_kernels(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("gpu-kernels: built without CUDA\n");
    return 2;
}

#endif
