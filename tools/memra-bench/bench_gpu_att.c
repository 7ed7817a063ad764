/* memra-bench gpu-kernels --attention: the decode attention kernel (krn_cuda_attention_ws_async) on the
 * Llama-3-8B shape (32 query heads, 8 kv heads, head_dim 128, out f32), per cache type (f32, bf16), batch B
 * (1, 4: rows of distinct sequences 0..B-1) and context (64 .. 16384 keys attended: n_ctx = the context,
 * pos = n_ctx - 1 on every row). The split-K workspace is the caller's, allocated once for the largest row
 * (as a stage's scratch is), so no call allocates. Bytes per call = the K and V the rows attend to:
 * B x context x 2 x n_head_kv x head_dim x element bytes (q, out and the workspace are not counted); GB/s =
 * bytes / time, "% HBM" against --hbm. Each row rotates over enough copies of its caches (>= 256 MB in all)
 * that L2 (50 MB) cannot hold them, and is timed with CUDA events around --iters back-to-back calls on one
 * non-blocking stream after an untimed pass over every copy. Caches and q hold small random finite values (the
 * softmax's expf must see ordinary numbers). MEMRA_CUDA_ATT_CHUNK (keys per split, read by the kernel) is
 * printed in the header line. Reports only; asserts nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#ifdef MEMRA_HAVE_CUDA

#include <stdint.h>
#include <cuda_runtime_api.h>
#include "kernels/quant.h"
#include "kernels/cuda/krn_cuda.h"

enum {
    GA_HEAD = 32,    /* query heads (Llama-3-8B) */
    GA_HEAD_KV = 8,  /* kv heads */
    GA_HD = 128,     /* head_dim */
    GA_MAX_B = 4,    /* largest batch of the table */
    GA_TILE = 1 << 20, /* random elements uploaded once per row; the device copies them over the rest */
    GA_MAX_COPIES = 1024,
};
#define GA_KV_DIM (GA_HEAD_KV * GA_HD)
#define GA_WANT ((size_t)256 << 20) /* cache bytes rotated over per row, at least */

static const int GA_B[] = {1, 4};
static const int GA_CTX[] = {64, 256, 1024, 4096, 16384};
static const struct {
    int type;
    const char *name;
} GA_TYPES[] = {{KRN_F32, "f32"}, {KRN_BF16, "bf16"}};

static uint64_t ga_rng = 0x13198A2E03707344ull;
/* A small random value in [-0.5, 0.5]. */
static float ga_val(void) { return 0.5f * bench_rand_unit(&ga_rng); }

#define GA_CK(call, what) BENCH_CUDA_CK("gpu-kernels --attention", call, what)

/* Buffers shared by every row (allocated once by bench_gpu_att). */
typedef struct ga_ctx {
    cudaStream_t st;
    cudaEvent_t e0, e1;
    float *q, *out, *ws; /* (GA_MAX_B, GA_HEAD*GA_HD) each; ws: the split-K workspace of the largest row */
    size_t ws_bytes;
    int32_t *seq, *pos;  /* (GA_MAX_B,): seq = 0..GA_MAX_B-1; pos rewritten per row */
    const void *tile[2]; /* GA_TILE random values as f32 (tile[0]) and bf16 (tile[1]), host */
} ga_ctx;

/* One row: average seconds per call into *sec, the copies used into *copies. Returns 0 or -1 (printed). */
static int ga_row(ga_ctx *g, int ti, int B, int n_ctx, int iters, double *sec, int *copies) {
    const int type = GA_TYPES[ti].type;
    const size_t esz = krn_kv_elem_bytes(type);
    const size_t cache = (size_t)B * n_ctx * GA_KV_DIM * esz; /* K (or V) of the B sequences */
    const size_t pair = 2 * cache;
    int nc = (int)((GA_WANT + pair - 1) / pair);
    nc = nc < 1 ? 1 : nc > GA_MAX_COPIES ? GA_MAX_COPIES : nc;
    const size_t total = (size_t)nc * pair;
    uint8_t *slab = NULL; /* copy c: K at c * pair, V right after it */
    int32_t hpos[GA_MAX_B];
    dev_err err = {0};
    int rc = -1;
    *copies = nc;
    for (int b = 0; b < GA_MAX_B; b++)
        hpos[b] = n_ctx - 1;
    /* ordered by st: pos, the tile and its copies land before the row's first call on st (a pageable source is
     * staged before cudaMemcpyAsync returns, so hpos and the tile may change afterwards) */
    GA_CK(cudaMemcpyAsync(g->pos, hpos, sizeof hpos, cudaMemcpyHostToDevice, g->st), "cudaMemcpyAsync(pos)");
    GA_CK(cudaMalloc((void **)&slab, total), "cudaMalloc(caches)");
    /* the tile, then the filled prefix copied after itself until the slab is full */
    size_t filled = (size_t)GA_TILE * esz < total ? (size_t)GA_TILE * esz : total;
    GA_CK(cudaMemcpyAsync(slab, g->tile[ti], filled, cudaMemcpyHostToDevice, g->st), "cudaMemcpyAsync(cache tile)");
    while (filled < total) {
        const size_t n = filled < total - filled ? filled : total - filled;
        GA_CK(cudaMemcpyAsync(slab + filled, slab, n, cudaMemcpyDeviceToDevice, g->st),
              "cudaMemcpyAsync(caches, device to device)");
        filled += n;
    }
    for (int i = -nc; i < iters; i++) { /* negative i: warm-up, every copy once; then copies 0, 1, ... */
        if (i == 0)
            GA_CK(cudaEventRecord(g->e0, g->st), "cudaEventRecord");
        const size_t c = (size_t)((i + nc) % nc);
        const krn_kv_cache kv = {slab + c * pair, slab + c * pair + cache, type};
        if (krn_cuda_attention_ws_async(g->st, g->out, KRN_F32, g->q, &kv, g->seq, g->pos, B, GA_HEAD, GA_HEAD_KV,
                                        GA_HD, n_ctx, g->ws, g->ws_bytes, &err)) {
            fprintf(stderr, "gpu-kernels --attention: %s\n", err.msg);
            goto fail;
        }
    }
    GA_CK(cudaEventRecord(g->e1, g->st), "cudaEventRecord");
    GA_CK(cudaEventSynchronize(g->e1), "cudaEventSynchronize");
    float ms = 0.0f;
    GA_CK(cudaEventElapsedTime(&ms, g->e0, g->e1), "cudaEventElapsedTime");
    *sec = (double)ms / 1e3 / iters;
    rc = 0;
fail:
    if (slab) {
        (void)cudaStreamSynchronize(g->st); /* ordered: nothing on st reads the caches once this returns */
        cudaFree(slab);
    }
    return rc;
}

int bench_gpu_att(int dev, int iters, double hbm, int pdl) {
    const int maxctx = GA_CTX[sizeof GA_CTX / sizeof GA_CTX[0] - 1];
    ga_ctx g = {0};
    float *hf = malloc(sizeof(float) * GA_TILE), *hq = malloc(sizeof(float) * GA_MAX_B * GA_HEAD * GA_HD);
    uint16_t *hb = malloc(sizeof(uint16_t) * GA_TILE);
    int rc = 2, n = 0, prev_pdl = -1;
    if (!hf || !hq || !hb) {
        fprintf(stderr, "gpu-kernels --attention: out of host memory\n");
        goto fail;
    }
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= dev) {
        fprintf(stderr, "gpu-kernels --attention: no CUDA device %d (%s)\n", dev,
                e != cudaSuccess ? cudaGetErrorString(e) : "not that many devices");
        goto fail;
    }
    struct cudaDeviceProp prop;
    GA_CK(cudaSetDevice(dev), "cudaSetDevice");
    GA_CK(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    GA_CK(cudaStreamCreateWithFlags(&g.st, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    GA_CK(cudaEventCreate(&g.e0), "cudaEventCreate");
    GA_CK(cudaEventCreate(&g.e1), "cudaEventCreate");
    for (int i = 0; i < GA_TILE; i++) {
        hf[i] = ga_val();
        hb[i] = krn_f32_to_bf16(hf[i]);
    }
    g.tile[0] = hf;
    g.tile[1] = hb;
    for (int i = 0; i < GA_MAX_B * GA_HEAD * GA_HD; i++)
        hq[i] = 2.0f * ga_val();
    const size_t qbytes = sizeof(float) * GA_MAX_B * GA_HEAD * GA_HD;
    int32_t hseq[GA_MAX_B]; /* row b reads sequence b */
    for (int b = 0; b < GA_MAX_B; b++)
        hseq[b] = b;
    g.ws_bytes = krn_attention_ws_bytes(GA_MAX_B, GA_HEAD, GA_HD, maxctx);
    GA_CK(cudaMalloc((void **)&g.q, qbytes), "cudaMalloc(q)");
    GA_CK(cudaMalloc((void **)&g.out, qbytes), "cudaMalloc(out)");
    GA_CK(cudaMalloc((void **)&g.ws, g.ws_bytes), "cudaMalloc(workspace)");
    GA_CK(cudaMemsetAsync(g.ws, 0, g.ws_bytes, g.st), "cudaMemsetAsync(workspace)"); /* its tickets (krn.h); st orders */
    GA_CK(cudaMalloc((void **)&g.seq, sizeof hseq), "cudaMalloc(seq)");
    GA_CK(cudaMalloc((void **)&g.pos, sizeof hseq), "cudaMalloc(pos)");
    /* ordered by st: q and seq land before the first call on st (pageable sources, staged before return) */
    GA_CK(cudaMemcpyAsync(g.q, hq, qbytes, cudaMemcpyHostToDevice, g.st), "cudaMemcpyAsync(q)");
    GA_CK(cudaMemcpyAsync(g.seq, hseq, sizeof hseq, cudaMemcpyHostToDevice, g.st), "cudaMemcpyAsync(seq)");
    prev_pdl = krn_cuda_set_pdl(pdl);
    const char *ck = getenv("MEMRA_CUDA_ATT_CHUNK"), *npf = getenv("MEMRA_CUDA_NO_ATT_PREFETCH");
    const char *fuse = getenv("MEMRA_CUDA_ATT_FUSE");
    const int has_npf = npf && *npf; /* the prefetch A/B knob: named only when set */
    printf("gpu-kernels --attention: %s (sm_%d%d, %d SMs, L2 %d MB), %d q / %d kv heads, head_dim %d, out f32, "
           "%d calls per row, PDL %s, MEMRA_CUDA_ATT_CHUNK=%s, MEMRA_CUDA_ATT_FUSE=%s%s%s, HBM ref %.0f GB/s\n",
           prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.l2CacheSize >> 20, GA_HEAD, GA_HEAD_KV,
           GA_HD, iters, pdl ? "on" : "off", ck && *ck ? ck : "default", fuse && *fuse ? fuse : "default",
           has_npf ? ", MEMRA_CUDA_NO_ATT_PREFETCH=" : "", has_npf ? npf : "", hbm);
    printf("%-5s %2s %8s %7s %9s %10s %9s %7s\n", "cache", "B", "context", "copies", "KV MB", "us/call", "GB/s",
           "% HBM");
    fflush(stdout);
    for (size_t ti = 0; ti < sizeof GA_TYPES / sizeof GA_TYPES[0]; ti++)
        for (size_t bi = 0; bi < sizeof GA_B / sizeof GA_B[0]; bi++)
            for (size_t ci = 0; ci < sizeof GA_CTX / sizeof GA_CTX[0]; ci++) {
                const int B = GA_B[bi], ctx = GA_CTX[ci];
                double sec = 0.0;
                int copies = 0;
                if (ga_row(&g, (int)ti, B, ctx, iters, &sec, &copies))
                    goto fail;
                const double bytes = (double)B * ctx * 2.0 * GA_KV_DIM * (double)krn_kv_elem_bytes(GA_TYPES[ti].type);
                const double gbs = bytes / sec / 1e9;
                printf("%-5s %2d %8d %7d %9.2f %10.2f %9.1f %6.1f%%\n", GA_TYPES[ti].name, B, ctx, copies, bytes / 1e6,
                       sec * 1e6, gbs, 100.0 * gbs / hbm);
                fflush(stdout);
            }
    rc = 0;
fail:
    if (prev_pdl >= 0)
        krn_cuda_set_pdl(prev_pdl);
    if (g.st)
        (void)cudaStreamSynchronize(g.st); /* ordered: the buffers below are freed after every call on st */
    cudaFree(g.q);
    cudaFree(g.out);
    cudaFree(g.ws);
    cudaFree(g.seq);
    cudaFree(g.pos);
    if (g.e0)
        cudaEventDestroy(g.e0);
    if (g.e1)
        cudaEventDestroy(g.e1);
    if (g.st)
        cudaStreamDestroy(g.st);
    free(hf);
    free(hq);
    free(hb);
    return rc;
}

#else /* !MEMRA_HAVE_CUDA */

int bench_gpu_att(int dev, int iters, double hbm, int pdl) {
    (void)dev;
    (void)iters;
    (void)hbm;
    (void)pdl;
    printf("gpu-kernels --attention: built without CUDA\n");
    return 2;
}

#endif
