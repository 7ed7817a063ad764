/* Device buffer helpers shared by the tests/gpu_*.c files. Each call checks its CUDA result with cmocka
 * (CK), so a failed allocation or copy fails the running test where it happened. Include after <cmocka.h>
 * <stdio.h> and <cuda_runtime_api.h>, in CUDA builds only. */
#ifndef TESTS_SUPPORT_CUDA_FIX_H
#define TESTS_SUPPORT_CUDA_FIX_H

#define CK(call) assert_int_equal((int)(call), (int)cudaSuccess)

static inline void *dalloc(size_t bytes) { /* cudaMalloc, at least 1 byte */
    void *p = NULL;
    CK(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}
static inline void *dupload(const void *h, size_t bytes) { /* a new device copy of h */
    void *p = dalloc(bytes);
    CK(cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice));
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
