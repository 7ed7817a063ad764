/* Host arenas (mem/host.h). No shared mutable state beyond jemalloc's own (thread-safe). */
#include "mem/host.h"

#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef MEMRA_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

struct mem_arena {
    unsigned ind;   /* jemalloc arena index */
    int has;        /* 0 in sanitizer builds */
    char name[32];
};

mem_arena *mem_arena_create(const char *name, dev_err *err)
{
    mem_arena *a = calloc(1, sizeof *a);
    if (!a) {
        dev_err_set(err, MEMRA_E_NOMEM, "mem_arena_create(%s): out of memory", name ? name : "");
        return NULL;
    }
    snprintf(a->name, sizeof a->name, "%s", name ? name : "arena");
#ifdef MEMRA_JEMALLOC
    size_t sz = sizeof a->ind;
    int rc = mallctl("arenas.create", &a->ind, &sz, NULL, 0);
    if (rc) {
        dev_err_set(err, MEMRA_E_NOMEM, "mem_arena_create(%s): jemalloc mallctl(\"arenas.create\") failed (%d)",
                    a->name, rc);
        free(a);
        return NULL;
    }
    a->has = 1;
#endif
    return a;
}

void mem_arena_destroy(mem_arena *a)
{
    if (!a)
        return;
#ifdef MEMRA_JEMALLOC
    if (a->has) {
        char k[64];
        snprintf(k, sizeof k, "arena.%u.destroy", a->ind);
        mallctl(k, NULL, NULL, NULL, 0);
    }
#endif
    free(a);
}

static void *alloc_flags(mem_arena *a, size_t bytes, int zero, dev_err *err)
{
    if (bytes == 0) {
        dev_err_set(err, MEMRA_E_INVAL, "mem_host_alloc(%s): 0 bytes requested (allowed: >= 1)",
                    a ? a->name : "default");
        return NULL;
    }
    if (bytes > SIZE_MAX - MEM_HOST_ALIGN) {
        dev_err_set(err, MEMRA_E_NOMEM, "mem_host_alloc(%s): %zu bytes is more than any host can give",
                    a ? a->name : "default", bytes);
        return NULL;
    }
    size_t sz = (bytes + MEM_HOST_ALIGN - 1) / MEM_HOST_ALIGN * MEM_HOST_ALIGN;
    void *p = NULL;
#ifdef MEMRA_JEMALLOC
    if (a && a->has)
        p = mallocx(sz, MALLOCX_ARENA(a->ind) | MALLOCX_TCACHE_NONE | MALLOCX_ALIGN(MEM_HOST_ALIGN) |
                            (zero ? MALLOCX_ZERO : 0));
    else
#endif
    {
        p = aligned_alloc(MEM_HOST_ALIGN, sz);
        if (p && zero)
            memset(p, 0, sz);
    }
    if (!p)
        dev_err_set(err, MEMRA_E_NOMEM, "mem_host_alloc(%s): out of memory allocating %zu bytes",
                    a ? a->name : "default", bytes);
    return p;
}

void *mem_host_alloc(mem_arena *a, size_t bytes, dev_err *err) { return alloc_flags(a, bytes, 0, err); }
void *mem_host_calloc(mem_arena *a, size_t bytes, dev_err *err) { return alloc_flags(a, bytes, 1, err); }

void mem_host_free(mem_arena *a, void *p)
{
    if (!p)
        return;
#ifdef MEMRA_JEMALLOC
    if (a && a->has) {
        dallocx(p, MALLOCX_TCACHE_NONE);
        return;
    }
#endif
    free(p);
}
