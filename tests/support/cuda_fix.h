/* Device buffer helpers shared by the tests/gpu_*.c files. Each call checks its CUDA result with cmocka
 * (CK), so a failed allocation or copy fails the running test where it happened. Include after <cmocka.h>
 * and <cuda_runtime_api.h>, in CUDA builds only. */
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

#endif
