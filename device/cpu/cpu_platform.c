/* CPU backend: platform, emulated devices, their memory (one jemalloc arena per device) and the registry of
 * live allocations (address range -> owner + checker state). Shared state: see device/cpu/cpu.h. */
#include "device/cpu/cpu.h"

#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#ifdef MEMRA_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

static void cpu_platform_close(dev_platform *bp);

/* MEMRA_CPU_SLOW=ORD:FACTOR[,ORD:FACTOR...]: emulated device ORD runs each kernel FACTOR (1..64) times as long
 * (a test hook for uneven placements: memra-tune, docs/tuning.md). Read once here; digits only. */
static int read_slow_door(cpu_platform *p, int n, dev_err *err)
{
    const char *v = getenv("MEMRA_CPU_SLOW");
    if (!v)
        return 0;
    const char *c = v;
    do {
        long ord = 0, f = 0;
        int nd = 0, nf = 0;
        for (; *c >= '0' && *c <= '9' && nd < 4; c++, nd++)
            ord = ord * 10 + (*c - '0');
        if (*c == ':')
            for (c++; *c >= '0' && *c <= '9' && nf < 4; c++, nf++)
                f = f * 10 + (*c - '0');
        if (!nd || !nf || (*c && *c != ',') || ord >= n || f < 1 || f > 64)
            return dev_err_set(err, MEMRA_E_INVAL, "MEMRA_CPU_SLOW=%s: expected ORD:FACTOR[,ORD:FACTOR...], each ORD "
                               "a device 0..%d and FACTOR in 1..64, digits only", v, n - 1);
        p->devs[ord].slow = (int)f;
    } while (*c++ == ',');
    return 0;
}

/* ---- arenas ---- */

static int arena_create(unsigned *ind, int *has, dev_err *err, const char *what)
{
    *has = 0;
#ifdef MEMRA_JEMALLOC
    size_t sz = sizeof *ind;
    int rc = mallctl("arenas.create", ind, &sz, NULL, 0);
    if (rc)
        return dev_err_set(err, MEMRA_E_NOMEM, "%s: jemalloc mallctl(\"arenas.create\") failed (%d)", what, rc);
    *has = 1;
#else
    (void)ind; (void)err; (void)what;
#endif
    return 0;
}

static void arena_destroy(unsigned ind, int has)
{
#ifdef MEMRA_JEMALLOC
    if (has) {
        char name[64];
        snprintf(name, sizeof name, "arena.%u.destroy", ind);
        mallctl(name, NULL, NULL, NULL, 0);
    }
#else
    (void)ind; (void)has;
#endif
}

static void *arena_alloc(unsigned ind, int has, size_t bytes, int zero)
{
    if (bytes > SIZE_MAX - CPU_ALIGN) /* the round-up below would wrap */
        return NULL;
    size_t sz = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
#ifdef MEMRA_JEMALLOC
    if (has)
        return mallocx(sz, MALLOCX_ARENA(ind) | MALLOCX_TCACHE_NONE | MALLOCX_ALIGN(CPU_ALIGN) |
                               (zero ? MALLOCX_ZERO : 0));
#else
    (void)ind; (void)has;
#endif
    void *p = aligned_alloc(CPU_ALIGN, sz);
    if (p && zero)
        memset(p, 0, sz);
    return p;
}

static void arena_free(int has, void *p)
{
#ifdef MEMRA_JEMALLOC
    if (has) {
        dallocx(p, MALLOCX_TCACHE_NONE);
        return;
    }
#else
    (void)has;
#endif
    free(p);
}

/* ---- registry (reg_lock held) ---- */

/* Index of the first alloc with base > addr. */
static int upper__(cpu_platform *p, uintptr_t addr)
{
    int lo = 0, hi = p->n_allocs;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (p->allocs[mid]->base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

cpu_alloc *cpu_alloc_find__(cpu_platform *p, const void *ptr)
{
    uintptr_t a = (uintptr_t)ptr;
    int i = upper__(p, a) - 1;
    if (i < 0)
        return NULL;
    cpu_alloc *al = p->allocs[i];
    return (a >= al->base && a < al->base + al->size) ? al : NULL;
}

static int reg_insert__(cpu_platform *p, cpu_alloc *al)
{
    if (p->n_allocs == p->cap_allocs) {
        int cap = p->cap_allocs ? p->cap_allocs * 2 : 64;
        cpu_alloc **n = realloc(p->allocs, (size_t)cap * sizeof *n);
        if (!n)
            return MEMRA_E_NOMEM;
        p->allocs = n;
        p->cap_allocs = cap;
    }
    int i = upper__(p, al->base);
    memmove(&p->allocs[i + 1], &p->allocs[i], (size_t)(p->n_allocs - i) * sizeof *p->allocs);
    p->allocs[i] = al;
    p->n_allocs++;
    return 0;
}

static cpu_alloc *reg_remove__(cpu_platform *p, const void *ptr)
{
    int i = upper__(p, (uintptr_t)ptr) - 1;
    if (i < 0 || p->allocs[i]->base != (uintptr_t)ptr)
        return NULL;
    cpu_alloc *al = p->allocs[i];
    memmove(&p->allocs[i], &p->allocs[i + 1], (size_t)(p->n_allocs - i - 1) * sizeof *p->allocs);
    p->n_allocs--;
    return al;
}

/* ---- memory ---- */

static void *cpu_malloc(dev_device *d, size_t bytes, dev_err *err)
{
    cpu_platform *p = cpu_plat(d->plat);
    cpu_device *cd = cpu_dev(d);
    if (bytes == 0) {
        dev_err_set(err, MEMRA_E_INVAL, "dev_malloc on %s: 0 bytes requested (allowed: >= 1)", d->name);
        return NULL;
    }
    cpu_alloc *al = calloc(1, sizeof *al);
    void *mem = arena_alloc(cd->arena, cd->has_arena, bytes, 1);
    if (!al || !mem)
        goto fail;
    al->base = (uintptr_t)mem;
    al->size = bytes;
    al->owner = cd;
    pthread_mutex_lock(&p->reg_lock);
    int rc = reg_insert__(p, al);
    pthread_mutex_unlock(&p->reg_lock);
    if (rc)
        goto fail;
    return mem;
fail:
    dev_err_set(err, MEMRA_E_NOMEM, "dev_malloc on %s: out of memory allocating %zu bytes", d->name, bytes);
    if (mem)
        arena_free(cd->has_arena, mem);
    free(al);
    return NULL;
}

static void cpu_free(dev_device *d, void *ptr)
{
    cpu_platform *p = cpu_plat(d->plat);
    pthread_mutex_lock(&p->reg_lock);
    cpu_alloc *al = reg_remove__(p, ptr);
    pthread_mutex_unlock(&p->reg_lock);
    if (!al) {
        fprintf(stderr, "memra: dev_free on %s: %p is not a live device allocation (ignored)\n", d->name, ptr);
        return;
    }
    cpu_alloc_state_free(al);
    arena_free(al->owner->has_arena, ptr);
    free(al);
}

static void *cpu_host_alloc(dev_platform *bp, size_t bytes, dev_err *err)
{
    cpu_platform *p = cpu_plat(bp);
    void *m = arena_alloc(p->host_arena, p->has_host_arena, bytes ? bytes : 1, 0);
    if (!m)
        dev_err_set(err, MEMRA_E_NOMEM, "dev_host_alloc: out of memory allocating %zu bytes", bytes);
    return m;
}

static void cpu_host_free(dev_platform *bp, void *ptr)
{
    arena_free(cpu_plat(bp)->has_host_arena, ptr);
}

/* The host writes device memory: checked as a host-slot write ordered by the host clock. */
static int cpu_copy_h2d_sync(dev_device *d, void *dst, const void *src, size_t bytes, dev_err *err)
{
    cpu_platform *p = cpu_plat(d->plat);
    pthread_mutex_lock(&p->vc_lock);
    uint64_t vc[CPU_MAX_SLOTS];
    p->host_vc[0] = ++p->slot_tick[0];
    uint32_t n = p->n_slots;
    memcpy(vc, p->host_vc, n * sizeof *vc);
    pthread_mutex_unlock(&p->vc_lock);
    cpu_vc hv = { n, vc };

    pthread_mutex_lock(&p->reg_lock);
    cpu_alloc *a = cpu_alloc_find__(p, dst);
    if (!a || (uintptr_t)dst + bytes > a->base + a->size || a->owner != cpu_dev(d)) {
        pthread_mutex_unlock(&p->reg_lock);
        return dev_err_set(err, MEMRA_E_INVAL, "dev_copy_h2d_sync on %s: dst %p (+%zu B) is not inside a live "
                           "allocation of %s", d->name, dst, bytes, d->name);
    }
    if (atomic_load_explicit(&p->race_on, memory_order_relaxed))
        cpu_race_access__(p, a, dst, bytes, DEV_WRITE, 0, &hv, "host", "copy_h2d_sync");
    pthread_mutex_unlock(&p->reg_lock);
    memcpy(dst, src, bytes);
    return 0;
}

/* ---- grants, hooks ---- */

static int cpu_peer_grant(dev_device *accessor, dev_device *owner, dev_err *err)
{
    /* release: a worker that sees the grant (acquire) runs after this call */
    atomic_store_explicit(&accessor->granted[owner->ordinal], 1, memory_order_release);
    return 0;
}

static void cpu_set_op_hook(dev_platform *bp, dev_op_hook hook, void *ctx)
{
    cpu_platform *p = cpu_plat(bp);
    atomic_store(&p->hook_ctx, ctx);
    atomic_store(&p->hook, hook);
}

static void *cpu_stream_native(dev_stream *s) { return NULL; }

/* Bytes from ptr to the end of its live allocation (0 if none). */
static size_t cpu_alloc_extent(dev_platform *bp, const void *ptr)
{
    cpu_platform *p = cpu_plat(bp);
    pthread_mutex_lock(&p->reg_lock);
    cpu_alloc *a = cpu_alloc_find__(p, ptr);
    size_t n = a ? (size_t)(a->base + a->size - (uintptr_t)ptr) : 0;
    pthread_mutex_unlock(&p->reg_lock);
    return n;
}

/* The host's available memory (/proc/meminfo's MemAvailable: free plus reclaimable cache), else free pages. */
static int cpu_mem_info(dev_device *d, size_t *free_b, size_t *total_b, dev_err *err)
{
    (void)d;
    const long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0)
        return dev_err_set(err, MEMRA_E_UNSUPPORTED, "cpu: the host's memory size is unknown (sysconf)");
    *total_b = (size_t)pages * (size_t)page;
    *free_b = avail > 0 ? (size_t)avail * (size_t)page : 0;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    unsigned long long kb;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            *free_b = (size_t)kb * 1024u;
            break;
        }
    if (f)
        fclose(f);
    return 0;
}

static const dev_backend cpu_backend = {
    .name = "cpu",
    .platform_close = cpu_platform_close,
    .peer_grant = cpu_peer_grant,
    .malloc = cpu_malloc,
    .free = cpu_free,
    .mem_info = cpu_mem_info,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .copy_h2d_sync = cpu_copy_h2d_sync,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_sync = cpu_stream_sync,
    .stream_native = cpu_stream_native,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait_event = cpu_stream_wait_event,
    .event_sync = cpu_event_sync,
    .event_query = cpu_event_query,
    .copy_async = cpu_copy_async,
    .launch_cpu = cpu_launch,
    .host_fn = cpu_host_fn,
    .race_enable = cpu_race_enable,
    .race_count = cpu_race_count,
    .race_first = cpu_race_first,
    .alloc_extent = cpu_alloc_extent,
    .race_reset = cpu_race_reset,
    .set_op_hook = cpu_set_op_hook,
};

/* ---- platform ---- */

dev_platform *dev_cpu_open(int n, dev_err *err)
{
    if (n < 1 || n > DEV_CPU_DEVICES_MAX) {
        dev_err_set(err, MEMRA_E_INVAL, "cpu backend: %d devices requested (allowed: 1..%d)", n,
                    DEV_CPU_DEVICES_MAX);
        return NULL;
    }
    cpu_platform *p = calloc(1, sizeof *p);
    if (!p) {
        dev_err_set(err, MEMRA_E_NOMEM, "cpu backend: out of memory");
        return NULL;
    }
    p->base.kind = DEV_KIND_CPU;
    p->base.be = &cpu_backend;
    pthread_mutex_init(&p->reg_lock, NULL);
    pthread_mutex_init(&p->vc_lock, NULL);
    atomic_init(&p->race_on, 1);
    atomic_init(&p->hook, NULL);
    atomic_init(&p->hook_ctx, NULL);
    p->slot_used[0] = 1; /* the host */
    p->n_slots = 1;
    for (int i = 0; i < n; i++) {
        cpu_device *d = &p->devs[i];
        dev_device_base_init(&d->base, &p->base, i, "cpu");
        p->base.dev[i] = &d->base;
        p->base.n_dev = i + 1;
        d->slow = 1;
        if (arena_create(&d->arena, &d->has_arena, err, d->base.name))
            goto fail;
    }
    if (read_slow_door(p, n, err))
        goto fail;
    if (arena_create(&p->host_arena, &p->has_host_arena, err, "cpu host memory"))
        goto fail;
    return &p->base;
fail:
    cpu_platform_close(&p->base);
    return NULL;
}

static void cpu_platform_close(dev_platform *bp)
{
    cpu_platform *p = cpu_plat(bp);
    for (int i = 0; i < p->n_allocs; i++) { /* leaked device memory dies with its arena */
        cpu_alloc_state_free(p->allocs[i]);
        if (!p->allocs[i]->owner->has_arena)
            free((void *)p->allocs[i]->base);
        free(p->allocs[i]);
    }
    free(p->allocs);
    for (int i = 0; i < p->base.n_dev; i++)
        arena_destroy(p->devs[i].arena, p->devs[i].has_arena);
    arena_destroy(p->host_arena, p->has_host_arena);
    pthread_mutex_destroy(&p->reg_lock);
    pthread_mutex_destroy(&p->vc_lock);
    free(p);
}
