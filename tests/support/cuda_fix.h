/* Device buffer helpers shared by the tests/gpu_*.c files. Each call checks its CUDA result with cmocka
 * (CK), so a failed allocation or copy fails the running test where it happened. Include after <cmocka.h>
 * <stdio.h> and <cuda_runtime_api.h>, in CUDA builds only. */
#ifndef TESTS_SUPPORT_CUDA_FIX_H
#define TESTS_SUPPORT_CUDA_FIX_H

#include "kernels/cuda/krn_cuda_planes.h"
#include "support/cuda_ref.h"

#define CK(call) assert_int_equal((int)(call), (int)cudaSuccess)

static inline void *dalloc(size_t bytes) { /* cudaMalloc, at least 1 byte */
    void *p = NULL;
    CK(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}
/* The tests' copies and fills run on the legacy default stream, which the non-blocking streams below (the
 * production streams' kind) do not wait for, and return early: cudaMemcpy from pageable memory may return
 * before its DMA lands, cudaMemset and device-to-device cudaMemcpy do not wait at all. So each one syncs the
 * legacy stream before it returns, and the next op on g_s1 / g_s2 sees its bytes. */
static inline void upload(void *d, const void *h, size_t bytes) { /* h's bytes at d, complete on return */
    CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    CK(cudaStreamSynchronize(0));
}
static inline void dfill(void *d, int byte, size_t bytes) { /* cudaMemset, complete on return */
    CK(cudaMemset(d, byte, bytes));
    CK(cudaStreamSynchronize(0));
}
static inline void dcopy(void *d, const void *s, size_t bytes) { /* device to device, complete on return */
    CK(cudaMemcpy(d, s, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaStreamSynchronize(0));
}
static inline void *dupload(const void *h, size_t bytes) { /* a new device copy of h, complete on return */
    void *p = dalloc(bytes);
    upload(p, h, bytes);
    return p;
}
static inline void download(void *h, const void *d, size_t bytes) {
    CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

/* Two non-blocking streams (the determinism checks run every op on both) and their cmocka group fixtures. */
static cudaStream_t g_s1, g_s2;
static inline void sync_both(void) {
    CK(cudaStreamSynchronize(g_s1));
    CK(cudaStreamSynchronize(g_s2));
}
static inline int two_streams_setup(void **state) {
    (void)state;
    if (cudaStreamCreateWithFlags(&g_s1, cudaStreamNonBlocking) != cudaSuccess)
        return -1;
    return cudaStreamCreateWithFlags(&g_s2, cudaStreamNonBlocking) == cudaSuccess ? 0 : -1;
}
static inline int two_streams_teardown(void **state) {
    (void)state;
    cudaStreamDestroy(g_s1);
    cudaStreamDestroy(g_s2);
    return 0;
}

/* A random (n_out, n_in) tensor of type t in GGUF blocks on the host (cuda_ref_rand_blocks, asserted). */
static inline uint8_t *cuda_fix_rand_blocks(const cuda_ref_type *t, int n_out, int n_in, size_t *bytes) {
    uint8_t *h = cuda_ref_rand_blocks(t, n_out, n_in, bytes);
    assert_non_null(h);
    return h;
}

/* Device planes (a new allocation) of the GGUF blocks at dblocks, repacked on g_s1 and synced. */
static inline krn_weight cuda_fix_planes(const cuda_ref_type *t, int n_out, int n_in, const void *dblocks,
                                         size_t bytes) {
    krn_weight src = {.type = t->type, .n_out = n_out, .n_in = n_in, .data = dblocks};
    krn_weight dst = src;
    dst.data = dalloc(bytes);
    dev_err err = {0};
    if (krn_cuda_repack_async(g_s1, &dst, &src, &err) != 0)
        fail_msg("repack %s %dx%d: %s", t->name, n_out, n_in, err.msg);
    assert_int_equal(dst.layout, KRN_LAYOUT_PLANES);
    CK(cudaStreamSynchronize(g_s1));
    return dst;
}

/* 1 (after printing "<test>: skipped: ..." for ctest's exit code 77) when no CUDA device is visible. */
static inline int cuda_fix_no_gpu(const char *test) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n > 0)
        return 0;
    printf("%s: skipped: no CUDA device (%s)\n", test, e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 1;
}

#endif
