/* Host memory through jemalloc arenas: one arena per pipeline stage (or per actor) so stage threads never
 * contend on an allocator lock and each stage's memory stays together. In sanitizer builds (no jemalloc)
 * an arena is a plain malloc wrapper. Thread-safe: any thread may allocate/free from any arena. */
#ifndef MEM_HOST_H
#define MEM_HOST_H

#include <stddef.h>
#include "device/err.h"

#define MEM_HOST_ALIGN 64 /* every block is aligned to a cache line */

typedef struct mem_arena mem_arena; /* owned by its creator */

/* A new arena; name labels errors ("stage2"). Returns NULL + err. Cost: one mallctl. */
mem_arena *mem_arena_create(const char *name, dev_err *err);
/* Free the arena. Every block must be freed first (jemalloc releases leftovers with the arena; sanitizer
 * builds would report them as leaks). NULL is a no-op. */
void mem_arena_destroy(mem_arena *a);
/* bytes (>= 1) from arena a (NULL = the process default allocator), MEM_HOST_ALIGN-aligned, not zeroed.
 * Returns NULL + err (MEMRA_E_NOMEM, MEMRA_E_INVAL for 0 bytes). */
void *mem_host_alloc(mem_arena *a, size_t bytes, dev_err *err);
/* Same, zero-filled. */
void *mem_host_calloc(mem_arena *a, size_t bytes, dev_err *err);
/* Free a block of arena a (the same arena it came from). NULL is a no-op. */
void mem_host_free(mem_arena *a, void *p);

#endif
