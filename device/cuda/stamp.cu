/* The GPU side of dev_stamp_async: one thread writes the global nanosecond timer into page-locked host
 * memory (reachable from the device through unified addressing), so a stream is stamped without a host
 * callback holding it. Shared mutable state: none. */
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void dev_stamp_kernel(uint64_t *dst)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    *(volatile uint64_t *)dst = t;
}

extern "C" int dev_cuda_stamp_launch(void *cuda_stream, uint64_t *host_dst)
{
    dev_stamp_kernel<<<1, 1, 0, (cudaStream_t)cuda_stream>>>(host_dst);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
