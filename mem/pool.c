/* Stream-ordered device pool (mem/pool.h).
 * Shared mutable state: everything in mem_pool below `lock` is guarded by it (any host thread may
 * alloc/free). Cross-stream handoff of a block: ordered by blk->ev, recorded on the freeing stream at the
 * free point and waited by the allocating stream before the block is returned. */
#include "mem/pool.h"
#include "mem/pool_cuda.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_CLASSES 48

typedef struct blk {
    void *ptr;
    int cls;                 /* size = MEM_POOL_MIN_CLASS << cls */
    int live;                /* handed out (not in a free list) */
    dev_event *ev;           /* recorded at the last free point */
    const dev_stream *freed_on; /* the stream of the last free (identity only) */
    struct blk *next;        /* free list link */
} blk;

struct mem_pool {
    dev_device *dev;
    int cuda;                /* 1: CUDA default mempool path */
    pthread_mutex_t lock;
    blk **blocks;            /* every block, sorted by ptr (CPU) */
    int n_blocks, cap_blocks;
    blk *free_list[N_CLASSES];
    mem_pool_counters c;
};

static int class_of(size_t bytes)
{
    int c = 0;
    while (c < N_CLASSES && ((size_t)MEM_POOL_MIN_CLASS << c) < bytes)
        c++;
    return c;
}

mem_pool *mem_pool_create(dev_device *d, dev_err *err)
{
    mem_pool *p = calloc(1, sizeof *p);
    if (!p) {
        dev_err_set(err, MEMRA_E_NOMEM, "mem_pool_create on %s: out of memory", dev_device_name(d));
        return NULL;
    }
    p->dev = d;
    p->cuda = dev_platform_kind(dev_device_platform(d)) == DEV_KIND_CUDA;
    if (p->cuda) {
#ifdef MEMRA_HAVE_CUDA
        if (mem_pool_cuda_setup(dev_device_ordinal(d), err)) {
            free(p);
            return NULL;
        }
#else
        dev_err_set(err, MEMRA_E_UNSUPPORTED, "mem_pool_create on %s: built without CUDA", dev_device_name(d));
        free(p);
        return NULL;
#endif
    }
    pthread_mutex_init(&p->lock, NULL);
    return p;
}

void mem_pool_destroy(mem_pool *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_blocks; i++) {
        dev_event_destroy(p->blocks[i]->ev);
        dev_free(p->dev, p->blocks[i]->ptr);
        free(p->blocks[i]);
    }
    free(p->blocks);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

dev_device *mem_pool_device(const mem_pool *p) { return p->dev; }

/* Index of the first block with ptr > x (lock held). */
static int upper__(const mem_pool *p, const void *x)
{
    int lo = 0, hi = p->n_blocks;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if ((uintptr_t)p->blocks[mid]->ptr <= (uintptr_t)x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Take a free block of class cls for stream s (lock held): prefer one freed on s (stream order suffices),
 * else the most recently freed one, after enqueuing on s a wait on its free point. */
static blk *take__(mem_pool *p, dev_stream *s, int cls, dev_err *err)
{
    blk **pp = &p->free_list[cls], **pick = NULL;
    for (; *pp; pp = &(*pp)->next) {
        if ((*pp)->freed_on == s) {
            pick = pp;
            break;
        }
    }
    int cross = !pick;
    if (!pick)
        pick = &p->free_list[cls];
    blk *b = *pick;
    if (!b)
        return NULL;
    if (cross) {
        /* internal dependency: s waits b's free point (ordered by b->ev) */
        int rc = dev_stream_wait_event_async(s, b->ev);
        if (rc) {
            dev_err_set(err, rc, "mem_pool_alloc_async on %s: enqueuing the wait on a free point on stream "
                        "'%s' failed", dev_device_name(p->dev), dev_stream_name(s));
            return NULL;
        }
        p->c.cross_stream_deps++;
    }
    *pick = b->next;
    b->next = NULL;
    p->c.reuses++;
    return b;
}

static blk *fresh(mem_pool *p, int cls, dev_err *err)
{
    blk *b = calloc(1, sizeof *b);
    if (!b)
        goto fail;
    b->cls = cls;
    b->ptr = dev_malloc(p->dev, (size_t)MEM_POOL_MIN_CLASS << cls, err);
    if (!b->ptr)
        goto fail;
    b->ev = dev_event_create(p->dev, err);
    if (!b->ev)
        goto fail;
    pthread_mutex_lock(&p->lock);
    if (p->n_blocks == p->cap_blocks) {
        int cap = p->cap_blocks ? 2 * p->cap_blocks : 32;
        blk **nb = realloc(p->blocks, (size_t)cap * sizeof *nb);
        if (!nb) {
            pthread_mutex_unlock(&p->lock);
            goto fail;
        }
        p->blocks = nb;
        p->cap_blocks = cap;
    }
    int i = upper__(p, b->ptr);
    memmove(&p->blocks[i + 1], &p->blocks[i], (size_t)(p->n_blocks - i) * sizeof *p->blocks);
    p->blocks[i] = b;
    p->n_blocks++;
    p->c.fresh_blocks++;
    p->c.bytes_reserved += (size_t)MEM_POOL_MIN_CLASS << cls;
    pthread_mutex_unlock(&p->lock);
    return b;
fail:
    dev_err_set(err, MEMRA_E_NOMEM, "mem_pool_alloc_async on %s: out of memory for a %zu-byte block",
                dev_device_name(p->dev), (size_t)MEM_POOL_MIN_CLASS << cls);
    if (b) {
        dev_event_destroy(b->ev);
        dev_free(p->dev, b->ptr);
        free(b);
    }
    return NULL;
}

void *mem_pool_alloc_async(mem_pool *p, dev_stream *s, size_t bytes, dev_err *err)
{
    if (bytes == 0) {
        dev_err_set(err, MEMRA_E_INVAL, "mem_pool_alloc_async on %s: 0 bytes requested (allowed: >= 1)",
                    dev_device_name(p->dev));
        return NULL;
    }
    if (p->cuda) {
#ifdef MEMRA_HAVE_CUDA
        void *m = mem_pool_cuda_alloc(dev_device_ordinal(p->dev), dev_stream_native(s), bytes, err);
        if (m) {
            pthread_mutex_lock(&p->lock);
            p->c.allocs++;
            pthread_mutex_unlock(&p->lock);
        }
        return m;
#endif
    }
    int cls = class_of(bytes);
    if (cls >= N_CLASSES) {
        dev_err_set(err, MEMRA_E_NOMEM, "mem_pool_alloc_async on %s: %zu bytes is beyond the largest class",
                    dev_device_name(p->dev), bytes);
        return NULL;
    }
    pthread_mutex_lock(&p->lock);
    dev_err e2 = { 0, "" };
    blk *b = take__(p, s, cls, &e2);
    pthread_mutex_unlock(&p->lock);
    if (e2.code) {
        dev_err_set(err, e2.code, "%s", e2.msg);
        return NULL;
    }
    if (!b && !(b = fresh(p, cls, err)))
        return NULL;
    pthread_mutex_lock(&p->lock);
    b->live = 1;
    p->c.allocs++;
    pthread_mutex_unlock(&p->lock);
    return b->ptr;
}

void mem_pool_free_async(mem_pool *p, dev_stream *s, void *ptr)
{
    if (!ptr)
        return;
    if (p->cuda) {
#ifdef MEMRA_HAVE_CUDA
        dev_err e = { 0, "" };
        if (mem_pool_cuda_free(dev_stream_native(s), ptr, &e))
            fprintf(stderr, "memra: mem_pool_free_async on %s: %s\n", dev_device_name(p->dev), e.msg);
#endif
        return;
    }
    pthread_mutex_lock(&p->lock);
    int i = upper__(p, ptr) - 1;
    blk *b = i >= 0 ? p->blocks[i] : NULL;
    if (!b || b->ptr != ptr || !b->live) {
        pthread_mutex_unlock(&p->lock);
        fprintf(stderr, "memra: mem_pool_free_async on %s: %p is not a live block of this pool (ignored)\n",
                dev_device_name(p->dev), ptr);
        return;
    }
    /* the free point: later users order after it through b->ev */
    if (dev_event_record_async(b->ev, s)) {
        pthread_mutex_unlock(&p->lock);
        fprintf(stderr, "memra: mem_pool_free_async on %s: recording the free point on '%s' failed; block "
                "%p is kept out of the pool\n", dev_device_name(p->dev), dev_stream_name(s), ptr);
        return;
    }
    b->live = 0;
    b->freed_on = s;
    b->next = p->free_list[b->cls];
    p->free_list[b->cls] = b;
    pthread_mutex_unlock(&p->lock);
}

void mem_pool_stats(const mem_pool *p, mem_pool_counters *out)
{
    mem_pool *mp = (mem_pool *)p;
    pthread_mutex_lock(&mp->lock);
    *out = mp->c;
    pthread_mutex_unlock(&mp->lock);
}

int mem_pool_grant_access(mem_pool *p, dev_device *peer, dev_err *err)
{
    if (peer == p->dev)
        return 0;
    if (p->cuda) {
#ifdef MEMRA_HAVE_CUDA
        int rc = dev_peer_grant(peer, p->dev, err);
        return rc ? rc : mem_pool_cuda_grant(dev_device_ordinal(p->dev), dev_device_ordinal(peer), err);
#endif
    }
    return dev_peer_grant(peer, p->dev, err);
}
