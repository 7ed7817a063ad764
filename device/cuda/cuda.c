/* CUDA backend (MEMRA_HAVE_CUDA builds): the runtime API behind device/dev.h. Non-blocking streams,
 * cudaEventDisableTiming events, cudaMemcpyPeerAsync, peer access both ways on a grant. Every CUDA call is
 * checked and a failure names the call. CPU-only features (checker, op hook, kernels_run) are absent.
 * No call changes the calling thread's current device (a guard restores it): code that launches kernels
 * on a stream makes the stream's device current itself.
 * Shared mutable state: cuda_stream.err (sticky enqueue/sync error; guarded by cuda_stream.lock),
 * cuda_event.ev[]/latest (guarded by cuda_event.lock), dev_device.granted[] (atomics). */
#include "device/dev_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

typedef struct cuda_platform {
    dev_platform base;
    dev_device devs[DEV_MAX_DEVICES];
} cuda_platform;

typedef struct cuda_stream {
    dev_stream base;
    cudaStream_t st;
    pthread_mutex_t lock;
    dev_err err;               /* sticky: first failure seen on this stream */
} cuda_stream;

/* One CUDA event per device the event was recorded on (cudaEventRecord needs the stream's device);
 * `latest` names the device of the most recent record, which waits and syncs bind to. */
typedef struct cuda_event {
    dev_event base;
    pthread_mutex_t lock;
    cudaEvent_t ev[DEV_MAX_DEVICES];
    int latest;                /* -1: never recorded */
} cuda_event;

/* An instantiated graph (device/dev.h dev_graph); exec is launched on any stream of dev. */
typedef struct cuda_graph {
    dev_graph base;
    cudaGraphExec_t exec;
} cuda_graph;

#define CU_FAIL(err, rc, fmt, ...)                                                                           \
    dev_err_set(err, MEMRA_E_DEVICE, fmt ": %s (%s)", __VA_ARGS__, cudaGetErrorName(rc), cudaGetErrorString(rc))

/* Device guard: device/ calls never change the calling thread's current device. push makes d current
 * (remembering the old one in *prev); pop restores it. */
static int push_device(dev_device *d, int *prev, dev_err *err)
{
    cudaError_t rc = cudaGetDevice(prev);
    if (rc != cudaSuccess)
        return CU_FAIL(err, rc, "cudaGetDevice (before using %s)", d->name);
    if (*prev == d->ordinal)
        return 0;
    rc = cudaSetDevice(d->ordinal);
    return rc == cudaSuccess ? 0 : CU_FAIL(err, rc, "cudaSetDevice(%d)", d->ordinal);
}

static void pop_device(int prev)
{
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != prev)
        cudaSetDevice(prev);
}

/* Record a failure on s (sticky) and return its code. */
static int stream_fail(cuda_stream *s, cudaError_t rc, const char *call)
{
    pthread_mutex_lock(&s->lock);
    if (!s->err.code)
        CU_FAIL(&s->err, rc, "%s on stream '%s' (%s)", call, s->base.name, s->base.dev->name);
    pthread_mutex_unlock(&s->lock);
    return MEMRA_E_DEVICE;
}

int dev_cuda_visible_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

/* ---- grants, memory ---- */

static int cu_peer_grant(dev_device *a, dev_device *o, dev_err *err)
{
    int can = 0;
    cudaError_t rc = cudaDeviceCanAccessPeer(&can, a->ordinal, o->ordinal);
    if (rc != cudaSuccess)
        return CU_FAIL(err, rc, "cudaDeviceCanAccessPeer(%s, %s)", a->name, o->name);
    if (!can)
        return dev_err_set(err, MEMRA_E_UNSUPPORTED, "dev_peer_grant(%s, %s): the GPUs cannot access each other "
                           "(cudaDeviceCanAccessPeer = 0)", a->name, o->name);
    dev_device *pair[2][2] = { { a, o }, { o, a } };
    int prev, code = 0;
    for (int i = 0; i < 2 && !code; i++) { /* peer access both ways, and each default pool open to the other */
        dev_device *acc = pair[i][0], *own = pair[i][1];
        if (push_device(acc, &prev, err))
            return MEMRA_E_DEVICE;
        rc = cudaDeviceEnablePeerAccess(own->ordinal, 0);
        if (rc == cudaErrorPeerAccessAlreadyEnabled)
            (void)cudaGetLastError();
        else if (rc != cudaSuccess)
            code = CU_FAIL(err, rc, "cudaDeviceEnablePeerAccess(%s -> %s)", acc->name, own->name);
        pop_device(prev);
        cudaMemPool_t mp;
        if (!code && (rc = cudaDeviceGetDefaultMemPool(&mp, own->ordinal)) != cudaSuccess)
            code = CU_FAIL(err, rc, "cudaDeviceGetDefaultMemPool(%s)", own->name);
        if (!code) {
            struct cudaMemAccessDesc desc;
            memset(&desc, 0, sizeof desc);
            desc.location.type = cudaMemLocationTypeDevice;
            desc.location.id = acc->ordinal;
            desc.flags = cudaMemAccessFlagsProtReadWrite;
            rc = cudaMemPoolSetAccess(mp, &desc, 1);
            if (rc != cudaSuccess)
                code = CU_FAIL(err, rc, "cudaMemPoolSetAccess(pool of %s, for %s)", own->name, acc->name);
        }
    }
    if (code)
        return code;
    atomic_store_explicit(&a->granted[o->ordinal], 1, memory_order_release);
    return 0;
}

static void *cu_malloc(dev_device *d, size_t bytes, dev_err *err)
{
    int prev;
    if (push_device(d, &prev, err))
        return NULL;
    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, bytes);
    if (rc != cudaSuccess) {
        dev_err_set(err, rc == cudaErrorMemoryAllocation ? MEMRA_E_NOMEM : MEMRA_E_DEVICE,
                    "cudaMalloc(%zu B) on %s: %s (%s)", bytes, d->name, cudaGetErrorName(rc), cudaGetErrorString(rc));
        p = NULL;
    } else if ((rc = cudaMemset(p, 0, bytes)) != cudaSuccess ||
               (rc = cudaStreamSynchronize(0)) != cudaSuccess) { /* the memset may be asynchronous to the host */
        CU_FAIL(err, rc, "cudaMemset(%zu B) on %s", bytes, d->name);
        cudaFree(p);
        p = NULL;
    }
    pop_device(prev);
    return p;
}

static void cu_free(dev_device *d, void *p)
{
    int prev;
    dev_err e = { 0, "" };
    if (push_device(d, &prev, &e)) {
        fprintf(stderr, "memra: dev_free on %s: %s\n", d->name, e.msg);
        return;
    }
    cudaError_t rc = cudaFree(p);
    if (rc != cudaSuccess)
        fprintf(stderr, "memra: cudaFree(%p) on %s failed: %s\n", p, d->name, cudaGetErrorString(rc));
    pop_device(prev);
}

static void *cu_host_alloc(dev_platform *p, size_t bytes, dev_err *err)
{
    void *m = NULL;
    cudaError_t rc = cudaHostAlloc(&m, bytes ? bytes : 1, cudaHostAllocPortable);
    if (rc != cudaSuccess) {
        CU_FAIL(err, rc, "cudaHostAlloc(%zu B)", bytes);
        return NULL;
    }
    return m;
}

static void cu_host_free(dev_platform *p, void *ptr)
{
    cudaError_t rc = cudaFreeHost(ptr);
    if (rc != cudaSuccess)
        fprintf(stderr, "memra: cudaFreeHost(%p) failed: %s\n", ptr, cudaGetErrorString(rc));
}

static int cu_copy_h2d_sync(dev_device *d, void *dst, const void *src, size_t bytes, dev_err *err)
{
    int prev;
    if (push_device(d, &prev, err))
        return MEMRA_E_DEVICE;
    cudaError_t rc = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    if (rc == cudaSuccess) /* from pageable memory it may return before the DMA lands: host-synchronous means done */
        rc = cudaStreamSynchronize(0);
    pop_device(prev);
    return rc == cudaSuccess ? 0 : CU_FAIL(err, rc, "cudaMemcpy(H2D, %zu B) on %s", bytes, d->name);
}

/* ---- streams ---- */

static dev_stream *cu_stream_create(dev_device *d, const char *name, dev_err *err)
{
    cuda_stream *s = calloc(1, sizeof *s);
    if (!s) {
        dev_err_set(err, MEMRA_E_NOMEM, "dev_stream_create on %s: out of memory", d->name);
        return NULL;
    }
    dev_stream_base_init(&s->base, d, name);
    int prev;
    if (push_device(d, &prev, err))
        goto fail;
    cudaError_t rc = cudaStreamCreateWithFlags(&s->st, cudaStreamNonBlocking);
    pop_device(prev);
    if (rc != cudaSuccess) {
        CU_FAIL(err, rc, "cudaStreamCreateWithFlags(NonBlocking) on %s", d->name);
        goto fail;
    }
    pthread_mutex_init(&s->lock, NULL);
    return &s->base;
fail:
    free(s);
    return NULL;
}

static int cu_stream_sync(dev_stream *bs, dev_err *err)
{
    cuda_stream *s = (cuda_stream *)bs;
    cudaError_t rc = cudaStreamSynchronize(s->st);
    if (rc != cudaSuccess)
        stream_fail(s, rc, "cudaStreamSynchronize");
    pthread_mutex_lock(&s->lock);
    int code = s->err.code;
    if (code)
        dev_err_set(err, code, "%s", s->err.msg);
    pthread_mutex_unlock(&s->lock);
    return code;
}

static void cu_stream_destroy(dev_stream *bs)
{
    cuda_stream *s = (cuda_stream *)bs;
    cudaStreamSynchronize(s->st);
    cudaError_t rc = cudaStreamDestroy(s->st);
    if (rc != cudaSuccess)
        fprintf(stderr, "memra: cudaStreamDestroy('%s') failed: %s\n", bs->name, cudaGetErrorString(rc));
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static void *cu_stream_native(dev_stream *bs) { return (void *)((cuda_stream *)bs)->st; }

/* ---- events ---- */

static dev_event *cu_event_create(dev_device *d, dev_err *err)
{
    cuda_event *e = calloc(1, sizeof *e);
    if (!e) {
        dev_err_set(err, MEMRA_E_NOMEM, "dev_event_create on %s: out of memory", d->name);
        return NULL;
    }
    e->base.dev = d;
    e->latest = -1;
    int prev;
    if (push_device(d, &prev, err))
        goto fail;
    cudaError_t rc = cudaEventCreateWithFlags(&e->ev[d->ordinal], cudaEventDisableTiming);
    pop_device(prev);
    if (rc != cudaSuccess) {
        CU_FAIL(err, rc, "cudaEventCreateWithFlags(DisableTiming) on %s", d->name);
        goto fail;
    }
    pthread_mutex_init(&e->lock, NULL);
    return &e->base;
fail:
    free(e);
    return NULL;
}

static void cu_event_destroy(dev_event *be)
{
    cuda_event *e = (cuda_event *)be;
    for (int i = 0; i < DEV_MAX_DEVICES; i++)
        if (e->ev[i])
            cudaEventDestroy(e->ev[i]);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

static int cu_event_record(dev_event *be, dev_stream *bs)
{
    cuda_event *e = (cuda_event *)be;
    cuda_stream *s = (cuda_stream *)bs;
    int o = bs->dev->ordinal;
    pthread_mutex_lock(&e->lock);
    cudaError_t rc = cudaSuccess;
    if (!e->ev[o]) { /* first record on this device: its own CUDA event */
        int prev = o;
        rc = cudaGetDevice(&prev);
        if (rc == cudaSuccess && prev != o)
            rc = cudaSetDevice(o);
        if (rc == cudaSuccess)
            rc = cudaEventCreateWithFlags(&e->ev[o], cudaEventDisableTiming);
        pop_device(prev);
    }
    if (rc == cudaSuccess)
        rc = cudaEventRecord(e->ev[o], s->st);
    if (rc == cudaSuccess)
        e->latest = o; /* waits enqueued after this bind to this record (ordered by e->lock) */
    pthread_mutex_unlock(&e->lock);
    return rc == cudaSuccess ? 0 : stream_fail(s, rc, "cudaEventRecord");
}

static int cu_stream_wait_event(dev_stream *bs, dev_event *be)
{
    cuda_event *e = (cuda_event *)be;
    cuda_stream *s = (cuda_stream *)bs;
    pthread_mutex_lock(&e->lock);
    cudaError_t rc = e->latest < 0 ? cudaSuccess : cudaStreamWaitEvent(s->st, e->ev[e->latest], 0);
    pthread_mutex_unlock(&e->lock);
    return rc == cudaSuccess ? 0 : stream_fail(s, rc, "cudaStreamWaitEvent");
}

static cudaEvent_t latest_of(cuda_event *e)
{
    pthread_mutex_lock(&e->lock);
    cudaEvent_t ev = e->latest < 0 ? NULL : e->ev[e->latest];
    pthread_mutex_unlock(&e->lock);
    return ev;
}

static int cu_event_sync(dev_event *be, dev_err *err)
{
    cudaEvent_t ev = latest_of((cuda_event *)be);
    if (!ev)
        return 0;
    cudaError_t rc = cudaEventSynchronize(ev);
    return rc == cudaSuccess ? 0 : CU_FAIL(err, rc, "cudaEventSynchronize (event of %s)", be->dev->name);
}

static int cu_event_query(dev_event *be)
{
    cudaEvent_t ev = latest_of((cuda_event *)be);
    if (!ev)
        return 1;
    cudaError_t rc = cudaEventQuery(ev);
    if (rc == cudaSuccess)
        return 1;
    if (rc == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return 0;
    }
    return MEMRA_E_DEVICE;
}

/* ---- copies, host callbacks ---- */

static int cu_copy_async(dev_stream *bs, int kind, void *dst, dev_device *dst_dev, const void *src,
                         dev_device *src_dev, size_t bytes)
{
    cuda_stream *s = (cuda_stream *)bs;
    if (bytes == 0)
        return 0;
    cudaError_t rc;
    switch (kind) {
    case DEV_COPY_H2D:
        rc = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s->st);
        return rc == cudaSuccess ? 0 : stream_fail(s, rc, "cudaMemcpyAsync(H2D)");
    case DEV_COPY_D2H:
        rc = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s->st);
        return rc == cudaSuccess ? 0 : stream_fail(s, rc, "cudaMemcpyAsync(D2H)");
    case DEV_COPY_D2D:
        rc = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s->st);
        return rc == cudaSuccess ? 0 : stream_fail(s, rc, "cudaMemcpyAsync(D2D)");
    default:
        rc = cudaMemcpyPeerAsync(dst, dst_dev->ordinal, src, src_dev->ordinal, bytes, s->st);
        if (rc != cudaSuccess)
            return stream_fail(s, rc, "cudaMemcpyPeerAsync");
        atomic_fetch_add_explicit(&bs->dev->peer_copy_bytes, bytes, memory_order_relaxed);
        return 0;
    }
}

static int cu_host_fn(dev_stream *bs, void (*fn)(void *), void *arg)
{
    cuda_stream *s = (cuda_stream *)bs;
    cudaError_t rc = cudaLaunchHostFunc(s->st, fn, arg);
    return rc == cudaSuccess ? 0 : stream_fail(s, rc, "cudaLaunchHostFunc");
}

int dev_cuda_stamp_launch(void *cuda_stream, uint64_t *host_dst); /* device/cuda/stamp.cu */

static int cu_stamp(dev_stream *bs, uint64_t *host_dst)
{
    cuda_stream *s = (cuda_stream *)bs;
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess)
        return stream_fail(s, cudaGetLastError(), "cudaGetDevice");
    if (prev != bs->dev->ordinal && cudaSetDevice(bs->dev->ordinal) != cudaSuccess)
        return stream_fail(s, cudaGetLastError(), "cudaSetDevice");
    int r = dev_cuda_stamp_launch(s->st, host_dst);
    if (prev != bs->dev->ordinal)
        cudaSetDevice(prev);
    return r ? stream_fail(s, cudaGetLastError(), "stamp kernel launch") : 0;
}

/* ---- graphs ---- */

static int cu_capture_begin(dev_stream *bs, dev_err *err)
{
    cuda_stream *s = (cuda_stream *)bs;
    /* relaxed: the other stages' threads keep syncing events and allocating while this stream captures */
    cudaError_t rc = cudaStreamBeginCapture(s->st, cudaStreamCaptureModeRelaxed);
    return rc == cudaSuccess ? 0 : CU_FAIL(err, rc, "cudaStreamBeginCapture on stream '%s' (%s)", bs->name,
                                           bs->dev->name);
}

static int cu_capture_end(dev_stream *bs, dev_graph **out, dev_err *err)
{
    cuda_stream *s = (cuda_stream *)bs;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ex = NULL;
    cudaError_t rc = cudaStreamEndCapture(s->st, &g);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError(); /* the invalidated capture's launch error is reported here, not later */
        if (g)
            cudaGraphDestroy(g);
        return CU_FAIL(err, rc, "cudaStreamEndCapture on stream '%s' (%s)", bs->name, bs->dev->name);
    }
    int prev;
    if (push_device(bs->dev, &prev, err)) {
        cudaGraphDestroy(g);
        return err ? err->code : MEMRA_E_DEVICE;
    }
    rc = cudaGraphInstantiate(&ex, g, 0);
    pop_device(prev);
    cudaGraphDestroy(g); /* the exec keeps what it needs */
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        return CU_FAIL(err, rc, "cudaGraphInstantiate (stream '%s', %s)", bs->name, bs->dev->name);
    }
    cuda_graph *cg = calloc(1, sizeof *cg);
    if (!cg) {
        cudaGraphExecDestroy(ex);
        return dev_err_set(err, MEMRA_E_NOMEM, "dev_stream_capture_end on '%s': out of memory", bs->name);
    }
    cg->base.dev = bs->dev;
    cg->exec = ex;
    *out = &cg->base;
    return 0;
}

static int cu_graph_launch(dev_graph *bg, dev_stream *bs)
{
    cuda_stream *s = (cuda_stream *)bs;
    cudaError_t rc = cudaGraphLaunch(((cuda_graph *)bg)->exec, s->st);
    return rc == cudaSuccess ? 0 : stream_fail(s, rc, "cudaGraphLaunch");
}

static void cu_graph_destroy(dev_graph *bg)
{
    cuda_graph *g = (cuda_graph *)bg;
    cudaError_t rc = cudaGraphExecDestroy(g->exec);
    if (rc != cudaSuccess)
        fprintf(stderr, "memra: cudaGraphExecDestroy failed: %s\n", cudaGetErrorString(rc));
    free(g);
}

/* ---- platform ---- */

static void cu_platform_close(dev_platform *p) { free(p); }

static int cu_mem_info(dev_device *d, size_t *free_b, size_t *total_b, dev_err *err)
{
    int prev;
    if (push_device(d, &prev, err))
        return err->code;
    cudaError_t rc = cudaMemGetInfo(free_b, total_b);
    pop_device(prev);
    return rc == cudaSuccess ? 0 : CU_FAIL(err, rc, "cudaMemGetInfo on %s", d->name);
}

static int cu_bus_id(const dev_device *d, char *buf, size_t cap, dev_err *err)
{
    cudaError_t rc = cudaDeviceGetPCIBusId(buf, cap > 64 ? 64 : (int)cap, d->ordinal);
    return rc == cudaSuccess ? 0 : CU_FAIL(err, rc, "cudaDeviceGetPCIBusId(%d)", d->ordinal);
}

static const dev_backend cuda_backend = {
    .name = "cuda",
    .platform_close = cu_platform_close,
    .peer_grant = cu_peer_grant,
    .malloc = cu_malloc,
    .free = cu_free,
    .mem_info = cu_mem_info,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .copy_h2d_sync = cu_copy_h2d_sync,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .stream_sync = cu_stream_sync,
    .stream_native = cu_stream_native,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .stream_wait_event = cu_stream_wait_event,
    .event_sync = cu_event_sync,
    .event_query = cu_event_query,
    .copy_async = cu_copy_async,
    .launch_cpu = NULL, /* dev_launch_cpu_async returns MEMRA_E_INVAL on CUDA streams */
    .host_fn = cu_host_fn,
    .stamp = cu_stamp,
    .capture_begin = cu_capture_begin,
    .capture_end = cu_capture_end,
    .graph_launch = cu_graph_launch,
    .graph_destroy = cu_graph_destroy,
    .bus_id = cu_bus_id,
};

dev_platform *dev_cuda_open(dev_err *err)
{
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        CU_FAIL(err, rc, "%s", "cudaGetDeviceCount");
        return NULL;
    }
    if (n <= 0) {
        dev_err_set(err, MEMRA_E_DEVICE, "cuda backend: no GPU visible (cudaGetDeviceCount = 0)");
        return NULL;
    }
    if (n > DEV_MAX_DEVICES)
        n = DEV_MAX_DEVICES;
    cuda_platform *p = calloc(1, sizeof *p);
    if (!p) {
        dev_err_set(err, MEMRA_E_NOMEM, "cuda backend: out of memory");
        return NULL;
    }
    p->base.kind = DEV_KIND_CUDA;
    p->base.be = &cuda_backend;
    p->base.n_dev = n;
    for (int i = 0; i < n; i++) {
        dev_device_base_init(&p->devs[i], &p->base, i, "cuda");
        p->base.dev[i] = &p->devs[i];
    }
    return &p->base;
}
