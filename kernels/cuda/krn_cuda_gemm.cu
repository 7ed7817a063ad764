/* cuBLAS GEMM for large B: the per-stream cuBLAS state, the activation conversion (x of any activation type to
 * W's type; none when x already is W's 16-bit type) and the entry krn_cuda_matmul tries first. API and rules in
 * krn_cuda_gemm.cuh; design in docs/cuda-kernels.md "cuBLAS for large B".
 *
 * Layout: W row-major (n_out, n_in) is column-major (n_in, n_out) with ld n_in, x (B, n_in) is column-major
 * (n_in, B), y (B, n_out) is column-major (n_out, B). So y = op(W)^T x is
 *   cublasGemmEx(OP_T, OP_N, m = n_out, n = B, k = n_in, A = W (lda n_in), B = x (ldb n_in), C = y (ldc n_out)).
 *
 * Graph capture: the handle has a user workspace (cublasSetWorkspace after cublasSetStream), so cuBLAS
 * allocates nothing while capturing. The conversion buffer of a captured GEMM is a stream-ordered
 * allocation made inside the capture (cudaMallocAsync/cudaFreeAsync: memory nodes owned by the graph);
 * eager GEMMs use the state's grow-only buffer, which no graph ever references, so growing it (free +
 * allocate, both stream-ordered on the stream) can never pull memory from under a graph. A graph that
 * captured a GEMM does reference the capturing stream's workspace: replay it on that stream (or ordered
 * with it) and destroy it before the stream.
 *
 * Shared mutable state: gemm_min_b_env / gemm_min_b_forced / gemm_calls / gemm_warned (process-wide, relaxed
 * atomics); each gemm_state is touched only by the thread that enqueues on its stream, and by
 * dev_stream_destroy after the stream is synced. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "kernels/cuda/krn_cuda_util.cuh"
#include "kernels/cuda/krn_cuda_gemm.cuh"

/* ---- the threshold ---- */

static int gemm_min_b_env = -1000;  /* parsed MEMRA_CUDA_GEMM_MIN_B, -1000 = not read yet */
static int gemm_min_b_forced = -1;  /* krn_cuda_gemm_set_min_b; < 0 = none */
static uint64_t gemm_calls = 0;     /* krn_cuda_gemm_count */
static int gemm_warned = 0;         /* the invalid-value warning was printed */

static int gemm_clamp(long v) {
    if (v == 0)
        return 0;
    if (v < KRN_CUDA_GEMM_MIN_B_FLOOR)
        return KRN_CUDA_GEMM_MIN_B_FLOOR;
    return v > 1000000 ? 1000000 : (int)v;
}

/* Read once; a racing first read parses the same string to the same value. */
static int gemm_env(void) {
    int v = __atomic_load_n(&gemm_min_b_env, __ATOMIC_RELAXED);
    if (v == -1000) {
        const char *e = getenv("MEMRA_CUDA_GEMM_MIN_B");
        v = KRN_CUDA_GEMM_MIN_B_DEFAULT;
        if (e && e[0]) {
            char *end = NULL;
            errno = 0;
            const long l = strtol(e, &end, 10);
            if (!errno && end != e && *end == '\0' && l >= 0)
                v = gemm_clamp(l);
            else if (!__atomic_exchange_n(&gemm_warned, 1, __ATOMIC_RELAXED))
                fprintf(stderr, "memra: MEMRA_CUDA_GEMM_MIN_B=%s: must be an integer >= 0 (0 = never use cuBLAS, "
                                "1..%d are raised to %d); using the default %d\n", e, KRN_CUDA_GEMM_MIN_B_FLOOR - 1,
                        KRN_CUDA_GEMM_MIN_B_FLOOR, KRN_CUDA_GEMM_MIN_B_DEFAULT);
        }
        __atomic_store_n(&gemm_min_b_env, v, __ATOMIC_RELAXED);
    }
    return v;
}

extern "C" int krn_cuda_gemm_min_b(void) {
    const int f = __atomic_load_n(&gemm_min_b_forced, __ATOMIC_RELAXED);
    return f >= 0 ? f : gemm_env();
}

extern "C" int krn_cuda_gemm_set_min_b(int min_b) {
    const int prev = krn_cuda_gemm_min_b();
    __atomic_store_n(&gemm_min_b_forced, min_b < 0 ? -1 : gemm_clamp(min_b), __ATOMIC_RELAXED);
    return prev;
}

extern "C" uint64_t krn_cuda_gemm_count(void) { return __atomic_load_n(&gemm_calls, __ATOMIC_RELAXED); }

extern "C" int krn_cuda_gemm_eligible(const krn_weight *W, float *y, const float *x) {
    return krn_cuda_gemm_eligible_x(W, y, x, KRN_F32);
}

/* f32 W with f32 x: x is cuBLAS's operand, 16-byte aligned as before; every other pair goes through the
 * conversion kernel (aligned buffer) or is 16-bit x of W's type, passed only when 16-byte aligned. */
extern "C" int krn_cuda_gemm_eligible_x(const krn_weight *W, float *y, const void *x, int xt) {
    if (!W || !W->data || !y || !x || W->n_out <= 0 || W->n_in <= 0 || W->n_in % 8 != 0)
        return 0;
    if (W->type != KRN_F32 && W->type != KRN_F16 && W->type != KRN_BF16)
        return 0;
    if (!krn_cuda_aligned(W->data, 16) || !krn_cuda_aligned(y, 16))
        return 0;
    if (!krn_act_type_ok(xt) || !krn_cuda_aligned(x, (unsigned)krn_act_bytes(xt)))
        return 0;
    return W->type != KRN_F32 || xt != KRN_F32 || krn_cuda_aligned(x, 16);
}

/* ---- per-stream state ---- */

typedef struct gemm_state {
    int device;          /* ordinal the handle and buffers belong to */
    cudaStream_t st;     /* the dev_stream's native stream (fixed for the handle's life) */
    cublasHandle_t h;    /* bound to st; workspace = ws */
    void *ws;            /* KRN_CUDA_GEMM_WORKSPACE bytes (cudaMalloc) */
    void *xbuf;          /* eager conversion buffer (cudaMallocAsync on st), grow-only */
    size_t xbuf_bytes;
} gemm_state;

static int blas_check(dev_err *err, cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    return dev_err_set(err, s == CUBLAS_STATUS_ALLOC_FAILED ? MEMRA_E_NOMEM : MEMRA_E_DEVICE, "%s: %s: %s", what,
                       cublasGetStatusName(s), cublasGetStatusString(s));
}

/* dev_stream_destroy's destructor: the stream is synced and still alive. */
static void gemm_state_destroy(void *p) {
    gemm_state *g = (gemm_state *)p;
    int prev = -1;
    const int have_prev = cudaGetDevice(&prev) == cudaSuccess;
    if (!have_prev || prev != g->device)
        cudaSetDevice(g->device);
    if (g->xbuf)
        cudaFreeAsync(g->xbuf, g->st);
    cudaStreamSynchronize(g->st); /* orders the free before the buffer's memory goes back */
    if (g->h)
        cublasDestroy(g->h);
    if (g->ws)
        cudaFree(g->ws);
    (void)cudaGetLastError();
    if (have_prev && prev != g->device)
        cudaSetDevice(prev);
    free(g);
}

/* s's state, created and attached on first use. The stream's device is current. */
static int gemm_state_get(dev_stream *s, cudaStream_t st, gemm_state **out, dev_err *err) {
    gemm_state *g = (gemm_state *)dev_stream_attachment(s, DEV_SLOT_KRN_GEMM);
    if (g) {
        *out = g;
        return 0;
    }
    int rc;
    g = (gemm_state *)calloc(1, sizeof *g);
    if (!g)
        return dev_err_set(err, MEMRA_E_NOMEM, "krn_cuda_gemm on '%s': out of host memory", dev_stream_name(s));
    g->device = dev_device_ordinal(dev_stream_device(s));
    g->st = st;
    if ((rc = blas_check(err, cublasCreate(&g->h), "cublasCreate")))
        goto fail;
    if ((rc = krn_cuda_call_check(err, cudaMalloc(&g->ws, KRN_CUDA_GEMM_WORKSPACE), "cudaMalloc(cuBLAS workspace)")))
        goto fail;
    /* cublasSetStream resets the workspace to cuBLAS's pool: the workspace must be set after it */
    if ((rc = blas_check(err, cublasSetStream(g->h, st), "cublasSetStream")) ||
        (rc = blas_check(err, cublasSetWorkspace(g->h, g->ws, KRN_CUDA_GEMM_WORKSPACE), "cublasSetWorkspace")) ||
        (rc = blas_check(err, cublasSetMathMode(g->h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode")) ||
        (rc = blas_check(err, cublasSetAtomicsMode(g->h, CUBLAS_ATOMICS_NOT_ALLOWED), "cublasSetAtomicsMode")) ||
        (rc = blas_check(err, cublasSetPointerMode(g->h, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode")))
        goto fail;
    if ((rc = dev_stream_attach(s, DEV_SLOT_KRN_GEMM, g, gemm_state_destroy, err)))
        goto fail;
    *out = g;
    return 0;
fail:
    if (g->h)
        cublasDestroy(g->h);
    if (g->ws)
        cudaFree(g->ws);
    (void)cudaGetLastError();
    free(g);
    dev_err_wrap(err, "krn_cuda_gemm: creating the cuBLAS state of stream '%s' (%s)", dev_stream_name(s),
                 dev_device_name(dev_stream_device(s)));
    return rc;
}

/* ---- activation conversion ---- */

/* xo (n,) of type T (bf16, f16: rounded to nearest even; f32) = x (n,) of activation type XT (16-bit: widened
 * exactly first, so a 16-bit x gives the bytes of its widened f32 values converted); 4 elements per thread when
 * vec (x 16-byte aligned for f32, 8-byte for 16-bit). XT = f32 to 16-bit T is the conversion of the f32 path. */
template <int XT, int T, bool VEC>
__global__ void gemm_cvt_kernel(krn_act_e<T> *__restrict__ xo, const krn_act_e<XT> *__restrict__ x, size_t n) {
    krn_pdl_enter();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (VEC) {
        if (4 * i >= n)
            return;
        krn_stx4<T>(xo + 4 * i, 0, krn_ldx4<XT>(x + 4 * i));
    } else {
        if (i >= n)
            return;
        xo[i] = krn_act_of<T>(krn_ldx1<XT>(x + i));
    }
}

template <int XT, int T>
static void gemm_cvt_go(bool vec, dim3 grid, dim3 block, cudaStream_t st, void *xo, const void *x, size_t n) {
    if (vec)
        krn_launch(gemm_cvt_kernel<XT, T, true>, grid, block, 0, st, (krn_act_e<T> *)xo, (const krn_act_e<XT> *)x,
                   n);
    else
        krn_launch(gemm_cvt_kernel<XT, T, false>, grid, block, 0, st, (krn_act_e<T> *)xo, (const krn_act_e<XT> *)x,
                   n);
}

template <int XT>
static void gemm_cvt_to(int type, bool vec, dim3 grid, dim3 block, cudaStream_t st, void *xo, const void *x,
                        size_t n) {
    if (type == KRN_BF16)
        gemm_cvt_go<XT, KRN_BF16>(vec, grid, block, st, xo, x, n);
    else if (type == KRN_F16)
        gemm_cvt_go<XT, KRN_F16>(vec, grid, block, st, xo, x, n);
    else
        gemm_cvt_go<XT, KRN_F32>(vec, grid, block, st, xo, x, n);
}

/* xo (n elements of W's type `type`) = x (n elements of activation type xt), converted. */
static void gemm_cvt_launch(int type, void *xo, const void *x, int xt, size_t n, cudaStream_t st) {
    const bool vec = n % 4 == 0 && krn_cuda_aligned(x, 4 * (unsigned)krn_act_bytes(xt));
    const size_t items = vec ? n / 4 : n;
    const dim3 block(256), grid((unsigned)((items + 255) / 256));
    if (xt == KRN_F16)
        gemm_cvt_to<KRN_F16>(type, vec, grid, block, st, xo, x, n);
    else if (xt == KRN_BF16)
        gemm_cvt_to<KRN_BF16>(type, vec, grid, block, st, xo, x, n);
    else
        gemm_cvt_to<KRN_F32>(type, vec, grid, block, st, xo, x, n);
}

/* ---- the GEMM ---- */

/* Enqueue y = x @ W^T through cuBLAS on s (its device current, eligibility checked), x of activation type xt. */
static int gemm_enqueue(dev_stream *s, cudaStream_t st, float *y, const krn_weight *W, const void *x, int xt, int B,
                        int acc, dev_err *err) {
    gemm_state *g = NULL;
    int rc = gemm_state_get(s, st, &g, err);
    if (rc)
        return rc;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if ((rc = krn_cuda_call_check(err, cudaStreamIsCapturing(st, &cap), "krn_cuda_gemm: cudaStreamIsCapturing")))
        return rc;
    const int capturing = cap != cudaStreamCaptureStatusNone;
    const float alpha = 1.0f, beta = acc ? 1.0f : 0.0f; /* acc: y += (the residual add in the epilogue) */
    const void *xb = x;
    void *tmp = NULL; /* capture only: the graph's own conversion buffer */
    const cudaDataType_t wt = W->type == KRN_BF16 ? CUDA_R_16BF : W->type == KRN_F16 ? CUDA_R_16F : CUDA_R_32F;
    /* x already of W's type (f32 x is 16-byte aligned by eligibility): cuBLAS reads it in place */
    const int in_place = xt == W->type && krn_cuda_aligned(x, 16);
    if (!in_place) {
        const size_t n = (size_t)B * (size_t)W->n_in, bytes = n * krn_act_bytes(W->type);
        if (capturing) {
            /* a memory node of the graph: never the eager buffer, which may be freed by a later growth */
            if ((rc = krn_cuda_call_check(err, cudaMallocAsync(&tmp, bytes, st), "krn_cuda_gemm: cudaMallocAsync")))
                return rc;
            xb = tmp;
        } else {
            if (g->xbuf_bytes < bytes) {
                size_t want = g->xbuf_bytes * 2 > bytes ? g->xbuf_bytes * 2 : bytes;
                want = (want + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
                if (g->xbuf) /* stream-ordered: after every GEMM that read it */
                    cudaFreeAsync(g->xbuf, st);
                g->xbuf = NULL;
                g->xbuf_bytes = 0;
                if ((rc = krn_cuda_call_check(err, cudaMallocAsync(&g->xbuf, want, st),
                                              "krn_cuda_gemm: cudaMallocAsync(conversion buffer)")))
                    return rc;
                g->xbuf_bytes = want;
            }
            xb = g->xbuf;
        }
        gemm_cvt_launch(W->type, (void *)xb, x, xt, n, st);
        if ((rc = krn_cuda_launch_check(err, "krn_cuda_gemm: conversion kernel")))
            goto out;
    }
    rc = blas_check(err,
                    cublasGemmEx(g->h, CUBLAS_OP_T, CUBLAS_OP_N, W->n_out, B, W->n_in, &alpha, W->data, wt, W->n_in,
                                 xb, wt, W->n_in, &beta, y, CUDA_R_32F, W->n_out, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT),
                    "cublasGemmEx");
    krn_cuda_pdl_foreign_launched(); /* the kernel after cuBLAS's waits for it in full, not through PDL */
    if (!rc)
        __atomic_fetch_add(&gemm_calls, 1, __ATOMIC_RELAXED);
out:
    if (tmp) {
        int rf = krn_cuda_call_check(err, cudaFreeAsync(tmp, st), "krn_cuda_gemm: cudaFreeAsync");
        rc = rc ? rc : rf;
    }
    if (rc)
        dev_err_wrap(err, "type %d, %dx%d, B=%d, x type %d on stream '%s'", W->type, W->n_out, W->n_in, B, xt,
                     dev_stream_name(s));
    return rc;
}

/* gemm_enqueue with s's device current for the call and the caller's restored. */
static int gemm_run(dev_stream *s, float *y, const krn_weight *W, const void *x, int xt, int B, int acc,
                    dev_err *err) {
    cudaStream_t st;
    int prev, rc = krn_cuda_enter(s, &st, &prev, err);
    if (rc)
        return rc;
    rc = gemm_enqueue(s, st, y, W, x, xt, B, acc, err);
    krn_cuda_leave(prev);
    return rc;
}

extern "C" int krn_cuda_gemm_try(dev_stream *s, float *y, const krn_weight *W, const float *x, int B, int *done,
                                 dev_err *err) {
    return krn_cuda_gemm_try_x(s, y, W, x, KRN_F32, B, 0, done, err);
}

extern "C" int krn_cuda_gemm_try_x(dev_stream *s, float *y, const krn_weight *W, const void *x, int xt, int B,
                                   int acc, int *done, dev_err *err) {
    *done = 0;
    const int min_b = krn_cuda_gemm_min_b();
    if (min_b <= 0 || B < min_b || krn_stream_batch_invariant(s) || !krn_cuda_gemm_eligible_x(W, y, x, xt))
        return 0;
    *done = 1;
    return gemm_run(s, y, W, x, xt, B, acc, err);
}

extern "C" int krn_cuda_gemm_async(dev_stream *s, float *y, const krn_weight *W, const float *x, int B,
                                   dev_err *err) {
    return krn_cuda_gemm_x_async(s, y, W, x, KRN_F32, B, err);
}

extern "C" int krn_cuda_gemm_x_async(dev_stream *s, float *y, const krn_weight *W, const void *x, int xt, int B,
                                     dev_err *err) {
    if (B < 1 || !krn_cuda_gemm_eligible_x(W, y, x, xt))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_gemm_async: B=%d, or W (type %d) / y / x (type %d) not "
                           "eligible (allowed: B >= 1; W f32, f16, bf16; x f32, f16, bf16 aligned to its element; "
                           "n_in %% 8 == 0; W, y 16-byte aligned, f32 x too for f32 W)", B, W ? W->type : -1, xt);
    return gemm_run(s, y, W, x, xt, B, 0, err);
}

extern "C" int krn_cuda_gemm_prepare(dev_stream *s, dev_err *err) {
    if (krn_cuda_gemm_min_b() <= 0)
        return 0;
    cudaStream_t st;
    gemm_state *g = NULL;
    int prev, rc = krn_cuda_enter(s, &st, &prev, err);
    if (rc)
        return rc;
    rc = gemm_state_get(s, st, &g, err);
    krn_cuda_leave(prev);
    return rc;
}
