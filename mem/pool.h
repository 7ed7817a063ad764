/* Stream-ordered device memory pool (the seed's memra-runtime policy; docs/device.md "mem/"):
 *   - free_async(p, s) makes p reusable only once s reaches the free (the free point);
 *   - reuse on the same stream needs nothing (stream order); reuse from another stream first enqueues a
 *     wait on the free point on that stream (internal dependencies ON);
 *   - a block whose free point is unknown is never handed out (opportunistic reuse OFF).
 * CPU: blocks are dev_malloc'd in power-of-two size classes (>= 256 B) and cached per class, each with an
 * event recorded at its free point. CUDA: the device's default mempool with
 * cudaMemPoolReuseAllowOpportunistic=0, cudaMemPoolReuseAllowInternalDependencies=1, release threshold
 * UINT64_MAX, cudaMallocFromPoolAsync / cudaFreeAsync. Thread-safe (one mutex per pool). */
#ifndef MEM_POOL_H
#define MEM_POOL_H

#include <stddef.h>
#include <stdint.h>
#include "device/dev.h"

#define MEM_POOL_MIN_CLASS 256 /* smallest block (bytes); classes are powers of two */

typedef struct mem_pool mem_pool; /* owned by its creator; allocates on one device */

typedef struct mem_pool_counters {
    uint64_t allocs;            /* mem_pool_alloc_async calls that succeeded */
    uint64_t reuses;            /* ... served from a freed block (CPU only) */
    uint64_t cross_stream_deps; /* ... that inserted a wait on another stream's free point (CPU only) */
    uint64_t fresh_blocks;      /* blocks taken from the device (dev_malloc; CPU only) */
    uint64_t bytes_reserved;    /* bytes held by those blocks (CPU only) */
} mem_pool_counters;

/* A pool allocating memory of device d. Returns NULL + err. */
mem_pool *mem_pool_create(dev_device *d, dev_err *err);
/* Return every block to the device. The caller guarantees no stream still uses pool memory (sync first).
 * Blocks never freed are released too. */
void mem_pool_destroy(mem_pool *p);
/* bytes (>= 1) usable by ops enqueued on s after this call (not zeroed). When the block was last freed on
 * another stream, a wait on that free point is enqueued on s first. Host cost: a mutex, maybe one
 * dev_malloc (host-synchronous) when no block of the class is free. Returns NULL + err. */
void *mem_pool_alloc_async(mem_pool *p, dev_stream *s, size_t bytes, dev_err *err);
/* Give ptr back at s's current end: reusable once s passes this point. ptr must come from
 * mem_pool_alloc_async of p (anything else is reported on stderr and ignored). */
void mem_pool_free_async(mem_pool *p, dev_stream *s, void *ptr);
/* Snapshot of p's counters. */
void mem_pool_stats(const mem_pool *p, mem_pool_counters *out);
/* Let peer's kernels touch memory of this pool (cudaMemPoolSetAccess on CUDA; dev_peer_grant(peer, pool's
 * device) on CPU). Host-synchronous, idempotent. */
int mem_pool_grant_access(mem_pool *p, dev_device *peer, dev_err *err);
dev_device *mem_pool_device(const mem_pool *p);

#endif
