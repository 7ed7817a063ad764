/* What memra-bench's CUDA sources (hbm.cu) share: a checked runtime call and the hash their
 * random fills draw from. Private to tools/memra-bench/cuda. */
#ifndef MEMRA_BENCH_CUDA_BENCH_CUDA_CUH
#define MEMRA_BENCH_CUDA_BENCH_CUDA_CUH

#include "kernels/cuda/krn_cuda_util.cuh"

/* A CUDA runtime call in a function with `int rc`, `dev_err *err` and an `out:` cleanup label: on failure rc =
 * MEMRA_E_DEVICE with err naming the call (krn_cuda_call_check), then goto out. */
#define BENCH_CK(call)                                                                                         \
    do {                                                                                                       \
        if ((rc = krn_cuda_call_check(err, (call), #call)) != 0)                                               \
            goto out;                                                                                          \
    } while (0)

/* 32 pseudo-random bits of element i under seed (a multiplicative hash; values only need to be finite and
 * varied: GEMV time does not depend on them). */
static __device__ __forceinline__ uint32_t bench_hash(size_t i, uint32_t seed) {
    uint32_t v = (uint32_t)i * 2654435761u ^ seed;
    v ^= v >> 15;
    return v * 2246822519u;
}

#endif
