/* The CUDA side of the stream-ordered pool (mem/pool_cuda.h): each device's default mempool with the seed's
 * policy. No shared mutable state of its own (the CUDA driver's pools are thread-safe). */
#include "mem/pool_cuda.h"

#include <stdint.h>
#include <string.h>
#include <cuda_runtime_api.h>

#define CU_FAIL(err, rc, fmt, ...)                                                                           \
    dev_err_set(err, MEMRA_E_DEVICE, fmt ": %s (%s)", __VA_ARGS__, cudaGetErrorName(rc), cudaGetErrorString(rc))

int mem_pool_cuda_setup(int ordinal, dev_err *err)
{
    cudaMemPool_t mp;
    cudaError_t rc = cudaDeviceGetDefaultMemPool(&mp, ordinal);
    if (rc != cudaSuccess)
        return CU_FAIL(err, rc, "cudaDeviceGetDefaultMemPool(cuda:%d)", ordinal);
    int off = 0, on = 1;
    uint64_t keep = UINT64_MAX;
    if ((rc = cudaMemPoolSetAttribute(mp, cudaMemPoolReuseAllowOpportunistic, &off)) != cudaSuccess)
        return CU_FAIL(err, rc, "cudaMemPoolSetAttribute(cuda:%d, ReuseAllowOpportunistic=0)", ordinal);
    if ((rc = cudaMemPoolSetAttribute(mp, cudaMemPoolReuseAllowInternalDependencies, &on)) != cudaSuccess)
        return CU_FAIL(err, rc, "cudaMemPoolSetAttribute(cuda:%d, ReuseAllowInternalDependencies=1)", ordinal);
    if ((rc = cudaMemPoolSetAttribute(mp, cudaMemPoolAttrReleaseThreshold, &keep)) != cudaSuccess)
        return CU_FAIL(err, rc, "cudaMemPoolSetAttribute(cuda:%d, ReleaseThreshold=UINT64_MAX)", ordinal);
    return 0;
}

void *mem_pool_cuda_alloc(int ordinal, void *stream, size_t bytes, dev_err *err)
{
    cudaMemPool_t mp;
    cudaError_t rc = cudaDeviceGetDefaultMemPool(&mp, ordinal);
    if (rc != cudaSuccess) {
        CU_FAIL(err, rc, "cudaDeviceGetDefaultMemPool(cuda:%d)", ordinal);
        return NULL;
    }
    void *p = NULL;
    rc = cudaMallocFromPoolAsync(&p, bytes, mp, (cudaStream_t)stream);
    if (rc != cudaSuccess) {
        dev_err_set(err, rc == cudaErrorMemoryAllocation ? MEMRA_E_NOMEM : MEMRA_E_DEVICE,
                    "cudaMallocFromPoolAsync(%zu B, cuda:%d): %s (%s)", bytes, ordinal, cudaGetErrorName(rc),
                    cudaGetErrorString(rc));
        return NULL;
    }
    return p;
}

int mem_pool_cuda_free(void *stream, void *ptr, dev_err *err)
{
    cudaError_t rc = cudaFreeAsync(ptr, (cudaStream_t)stream);
    return rc == cudaSuccess ? 0 : CU_FAIL(err, rc, "cudaFreeAsync(%p)", ptr);
}

int mem_pool_cuda_grant(int owner, int peer, dev_err *err)
{
    cudaMemPool_t mp;
    cudaError_t rc = cudaDeviceGetDefaultMemPool(&mp, owner);
    if (rc != cudaSuccess)
        return CU_FAIL(err, rc, "cudaDeviceGetDefaultMemPool(cuda:%d)", owner);
    struct cudaMemAccessDesc desc;
    memset(&desc, 0, sizeof desc);
    desc.location.type = cudaMemLocationTypeDevice;
    desc.location.id = peer;
    desc.flags = cudaMemAccessFlagsProtReadWrite;
    rc = cudaMemPoolSetAccess(mp, &desc, 1);
    return rc == cudaSuccess ? 0 : CU_FAIL(err, rc, "cudaMemPoolSetAccess(pool of cuda:%d, for cuda:%d)", owner, peer);
}
