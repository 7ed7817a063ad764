/* Internal to mem/: the CUDA side of mem/pool.c, implemented in mem/cuda/pool_cuda.c (MEMRA_HAVE_CUDA
 * builds only). `ordinal` is the CUDA device id, `stream` a cudaStream_t (dev_stream_native). */
#ifndef MEM_POOL_CUDA_H
#define MEM_POOL_CUDA_H

#include <stddef.h>
#include "device/err.h"

/* Set the device's default mempool policy (no opportunistic reuse, internal dependencies, keep memory). */
int mem_pool_cuda_setup(int ordinal, dev_err *err);
void *mem_pool_cuda_alloc(int ordinal, void *stream, size_t bytes, dev_err *err);
int mem_pool_cuda_free(void *stream, void *ptr, dev_err *err);
/* cudaMemPoolSetAccess(owner's default pool, peer, read/write). */
int mem_pool_cuda_grant(int owner, int peer, dev_err *err);

#endif
