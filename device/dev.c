/* Backend dispatch: every public dev_* call forwards to the platform's vtable (device/dev_impl.h), plus
 * the environment door (MEMRA_BACKEND, MEMRA_CPU_DEVICES). No shared mutable state of its own. */
#include "device/dev_impl.h"

#include "actors/doors.h" /* act_door_parse_int: the doors' one integer syntax */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BE(x) ((x)->plat->be)

void dev_device_base_init(dev_device *d, dev_platform *p, int ordinal, const char *prefix)
{
    d->plat = p;
    d->ordinal = ordinal;
    snprintf(d->name, sizeof d->name, "%s:%d", prefix, ordinal);
    for (int i = 0; i < DEV_MAX_DEVICES; i++)
        atomic_init(&d->granted[i], i == ordinal);
    atomic_init(&d->remote_read_bytes, 0);
    atomic_init(&d->remote_write_bytes, 0);
    atomic_init(&d->peer_copy_bytes, 0);
    atomic_init(&d->access_denied, 0);
    atomic_init(&d->kernels_run, 0);
}

void dev_stream_base_init(dev_stream *s, dev_device *d, const char *name)
{
    s->dev = d;
    snprintf(s->name, sizeof s->name, "%s", name && name[0] ? name : "stream");
    for (int i = 0; i < DEV_STREAM_SLOTS; i++) {
        s->attach[i] = NULL;
        s->attach_destroy[i] = NULL;
    }
}

/* ---- platform ---- */

dev_platform *dev_platform_open(dev_kind kind, int n_cpu_devices, dev_err *err)
{
    if (kind == DEV_KIND_CPU) {
        dev_platform *p = dev_cpu_open(n_cpu_devices, err);
        if (p) {
            dev_platform_set_matmul_x8(p, 0); /* exact until the opener says otherwise */
            dev_platform_set_cpu_threads(p, 1);
        }
        return p;
    }
    if (kind == DEV_KIND_CUDA) {
#ifdef MEMRA_HAVE_CUDA
        dev_platform *p = dev_cuda_open(err);
        if (p) {
            dev_platform_set_matmul_x8(p, 0);
            dev_platform_set_cpu_threads(p, 1);
        }
        return p;
#else
        dev_err_set(err, MEMRA_E_UNSUPPORTED,
                    "backend cuda: this build has no CUDA backend (configure with MEMRA_CUDA=ON/AUTO and nvcc)");
        return NULL;
#endif
    }
    dev_err_set(err, MEMRA_E_INVAL, "dev_platform_open: kind %d unknown (allowed: DEV_KIND_CPU, DEV_KIND_CUDA)",
                (int)kind);
    return NULL;
}

int dev_backend_doors(int *kind, int *n_cpu, dev_err *err)
{
    const char *be = getenv("MEMRA_BACKEND");
    const char *nd = getenv("MEMRA_CPU_DEVICES");
    long v;
    if (nd) { /* set means set: an empty value is refused, not read as unset */
        if (act_door_parse_int(nd, strlen(nd), 1, DEV_CPU_DEVICES_MAX, &v) != 0)
            return dev_err_set(err, MEMRA_E_INVAL,
                               "MEMRA_CPU_DEVICES=%s: must be an integer in 1..%d, digits only (default %d)", nd,
                               DEV_CPU_DEVICES_MAX, DEV_CPU_DEVICES_DEFAULT);
        *n_cpu = (int)v;
    }
    if (be) {
        if (strcmp(be, "cpu") == 0)
            *kind = DEV_KIND_CPU;
        else if (strcmp(be, "cuda") == 0)
#ifdef MEMRA_HAVE_CUDA
            *kind = DEV_KIND_CUDA;
#else
            return dev_err_set(err, MEMRA_E_UNSUPPORTED, "MEMRA_BACKEND=cuda: this build has no CUDA backend "
                                                         "(configure with MEMRA_CUDA=ON/AUTO and nvcc); allowed: cpu");
#endif
        else
            return dev_err_set(err, MEMRA_E_INVAL, "MEMRA_BACKEND=%s: allowed values are cpu, cuda (default: cuda "
                                                   "when built with CUDA and a GPU is visible, else cpu)", be);
    }
    return 0;
}

int dev_cpu_x8_door(int *on, dev_err *err)
{
    const char *v = getenv("MEMRA_CPU_X8");
    if (!v)
        return 0;
    if (strcmp(v, "0") && strcmp(v, "1"))
        return dev_err_set(err, MEMRA_E_INVAL, "MEMRA_CPU_X8=\"%s\": allowed values are 1 (the fast CPU matmul: x "
                                               "quantized to int8 blocks) and 0 (the exact one: f32 x)", v);
    *on = v[0] == '1';
    return 1;
}

void dev_platform_set_matmul_x8(dev_platform *p, int on)
{
    atomic_store_explicit(&p->matmul_x8, on ? 1 : 0, memory_order_relaxed); /* launches read it on the host */
}

int dev_platform_matmul_x8(const dev_platform *p)
{
    return atomic_load_explicit(&((dev_platform *)p)->matmul_x8, memory_order_relaxed);
}

int dev_cpu_threads_check(int n, const char *what, dev_err *err)
{
    if (n < 1 || n > DEV_CPU_THREADS_MAX)
        return dev_err_set(err, MEMRA_E_INVAL, "%s = %d: allowed 1..%d threads per CPU matmul (1, the default: the "
                           "stage's stream worker alone)", what, n, DEV_CPU_THREADS_MAX);
#ifndef MEMRA_HAVE_OPENMP
    if (n > 1)
        return dev_err_set(err, MEMRA_E_INVAL, "%s = %d: this build has no OpenMP (the team that splits a CPU "
                           "matmul); allowed 1", what, n);
#endif
    return 0;
}

int dev_cpu_threads_door(int *n, dev_err *err)
{
    const char *v = getenv("MEMRA_CPU_THREADS");
    long t;
    if (!v)
        return 0;
    if (act_door_parse_int(v, strlen(v), 1, DEV_CPU_THREADS_MAX, &t) != 0)
        return dev_err_set(err, MEMRA_E_INVAL, "MEMRA_CPU_THREADS=\"%s\": must be an integer in 1..%d, digits only "
                           "(default 1: the stage's stream worker alone)", v, DEV_CPU_THREADS_MAX);
    if (dev_cpu_threads_check((int)t, "MEMRA_CPU_THREADS", err) != 0)
        return MEMRA_E_INVAL;
    *n = (int)t;
    return 1;
}

void dev_platform_set_cpu_threads(dev_platform *p, int n)
{
    atomic_store_explicit(&p->cpu_threads, n < 1 ? 1 : n, memory_order_relaxed); /* launches read it on the host */
}

int dev_platform_cpu_threads(const dev_platform *p)
{
    return atomic_load_explicit(&((dev_platform *)p)->cpu_threads, memory_order_relaxed);
}

dev_platform *dev_platform_open_env(dev_err *err)
{
    int x8 = 0, threads = 1;
    if (dev_cpu_x8_door(&x8, err) < 0 || dev_cpu_threads_door(&threads, err) < 0)
        return NULL;
    int kind = -1, n = DEV_CPU_DEVICES_DEFAULT;
    if (dev_backend_doors(&kind, &n, err) != 0)
        return NULL;
    if (kind < 0) {
        kind = DEV_KIND_CPU;
#ifdef MEMRA_HAVE_CUDA
        if (dev_cuda_visible_count() > 0)
            kind = DEV_KIND_CUDA;
#endif
    }
    dev_platform *p = dev_platform_open((dev_kind)kind, n, err);
    if (!p) {
        const char *be = getenv("MEMRA_BACKEND");
        dev_err_wrap(err, "MEMRA_BACKEND=%s", be && be[0] ? be : "(unset)");
    } else {
        dev_platform_set_matmul_x8(p, x8);
        dev_platform_set_cpu_threads(p, threads);
    }
    return p;
}

void dev_platform_close(dev_platform *p)
{
    if (p)
        p->be->platform_close(p);
}

dev_kind dev_platform_kind(const dev_platform *p) { return p->kind; }
int dev_platform_count(const dev_platform *p) { return p->n_dev; }

dev_device *dev_platform_device(dev_platform *p, int ordinal)
{
    return (ordinal >= 0 && ordinal < p->n_dev) ? p->dev[ordinal] : NULL;
}

dev_platform *dev_device_platform(const dev_device *d) { return d->plat; }
int dev_device_ordinal(const dev_device *d) { return d->ordinal; }
const char *dev_device_name(const dev_device *d) { return d->name; }

int dev_device_bus_id(const dev_device *d, char *buf, size_t cap, dev_err *err)
{
    if (!buf || cap == 0)
        return dev_err_set(err, MEMRA_E_INVAL, "dev_device_bus_id: no room for the id");
    if (BE(d)->bus_id)
        return BE(d)->bus_id(d, buf, cap, err);
    snprintf(buf, cap, "%s", d->name);
    return 0;
}

int dev_peer_grant(dev_device *accessor, dev_device *owner, dev_err *err)
{
    if (!accessor || !owner || accessor->plat != owner->plat)
        return dev_err_set(err, MEMRA_E_INVAL, "dev_peer_grant: both devices must be non-NULL and of one platform");
    if (accessor == owner)
        return 0;
    return BE(accessor)->peer_grant(accessor, owner, err);
}

int dev_peer_granted(const dev_device *accessor, const dev_device *owner)
{
    return atomic_load_explicit(&accessor->granted[owner->ordinal], memory_order_acquire);
}

/* ---- memory ---- */

void *dev_malloc(dev_device *d, size_t bytes, dev_err *err) { return BE(d)->malloc(d, bytes, err); }

void dev_free(dev_device *d, void *p)
{
    if (p)
        BE(d)->free(d, p);
}

void *dev_host_alloc(dev_platform *p, size_t bytes, dev_err *err) { return p->be->host_alloc(p, bytes, err); }

void dev_host_free(dev_platform *p, void *ptr)
{
    if (ptr)
        p->be->host_free(p, ptr);
}

int dev_copy_h2d_sync(dev_device *d, void *dst, const void *src_host, size_t bytes, dev_err *err)
{
    if (!dst || !src_host)
        return dev_err_set(err, MEMRA_E_INVAL, "dev_copy_h2d_sync on %s: NULL %s", d->name, dst ? "src" : "dst");
    if (bytes == 0)
        return 0;
    return BE(d)->copy_h2d_sync(d, dst, src_host, bytes, err);
}

/* ---- streams ---- */

dev_stream *dev_stream_create(dev_device *d, const char *name, dev_err *err)
{
    return BE(d)->stream_create(d, name, err);
}

void dev_stream_destroy(dev_stream *s)
{
    if (!s)
        return;
    int any = 0;
    for (int i = 0; i < DEV_STREAM_SLOTS; i++)
        any |= s->attach[i] != NULL;
    if (any) {
        /* the attachments' users are ops of s: every one has run once the sync returns (its error, if
         * any, stays sticky and is not ours to report here) */
        BE(s->dev)->stream_sync(s, NULL);
        for (int i = DEV_STREAM_SLOTS - 1; i >= 0; i--) {
            void *p = s->attach[i];
            void (*fn)(void *) = s->attach_destroy[i];
            s->attach[i] = NULL;
            s->attach_destroy[i] = NULL;
            if (p && fn)
                fn(p);
        }
    }
    BE(s->dev)->stream_destroy(s);
}

void *dev_stream_attachment(const dev_stream *s, int slot)
{
    return (s && slot >= 0 && slot < DEV_STREAM_SLOTS) ? s->attach[slot] : NULL;
}

int dev_stream_attach(dev_stream *s, int slot, void *p, void (*destroy)(void *p), dev_err *err)
{
    if (!s)
        return dev_err_set(err, MEMRA_E_INVAL, "dev_stream_attach: stream is NULL");
    if (slot < 0 || slot >= DEV_STREAM_SLOTS)
        return dev_err_set(err, MEMRA_E_INVAL, "dev_stream_attach on '%s': slot %d out of range (0..%d)", s->name,
                           slot, DEV_STREAM_SLOTS - 1);
    if (p && s->attach[slot] && s->attach[slot] != p)
        return dev_err_set(err, MEMRA_E_INVAL, "dev_stream_attach on '%s': slot %d is taken (empty it first by "
                           "attaching NULL)", s->name, slot);
    s->attach[slot] = p;
    s->attach_destroy[slot] = p ? destroy : NULL;
    return 0;
}

dev_device *dev_stream_device(const dev_stream *s) { return s->dev; }
const char *dev_stream_name(const dev_stream *s) { return s->name; }
int dev_stream_sync(dev_stream *s, dev_err *err) { return BE(s->dev)->stream_sync(s, err); }
void *dev_stream_native(dev_stream *s) { return BE(s->dev)->stream_native(s); }

/* ---- events ---- */

dev_event *dev_event_create(dev_device *d, dev_err *err) { return BE(d)->event_create(d, err); }

void dev_event_destroy(dev_event *e)
{
    if (e)
        BE(e->dev)->event_destroy(e);
}

int dev_event_record_async(dev_event *e, dev_stream *s)
{
    if (!e || !s || e->dev->plat != s->dev->plat)
        return MEMRA_E_INVAL;
    return BE(s->dev)->event_record(e, s);
}

int dev_stream_wait_event_async(dev_stream *s, dev_event *e)
{
    if (!e || !s || e->dev->plat != s->dev->plat)
        return MEMRA_E_INVAL;
    return BE(s->dev)->stream_wait_event(s, e);
}

int dev_event_sync(dev_event *e, dev_err *err) { return BE(e->dev)->event_sync(e, err); }
int dev_event_query(dev_event *e) { return BE(e->dev)->event_query(e); }

/* ---- copies ---- */

int dev_copy_h2d_async(dev_stream *s, void *dst, const void *src_host, size_t bytes)
{
    return BE(s->dev)->copy_async(s, DEV_COPY_H2D, dst, s->dev, src_host, NULL, bytes);
}

int dev_copy_d2h_async(dev_stream *s, void *dst_host, const void *src, size_t bytes)
{
    return BE(s->dev)->copy_async(s, DEV_COPY_D2H, dst_host, NULL, src, s->dev, bytes);
}

int dev_copy_d2d_async(dev_stream *s, void *dst, const void *src, size_t bytes)
{
    return BE(s->dev)->copy_async(s, DEV_COPY_D2D, dst, s->dev, src, s->dev, bytes);
}

int dev_copy_peer_async(dev_stream *s, void *dst, dev_device *dst_dev, const void *src, dev_device *src_dev,
                        size_t bytes)
{
    if (!dst_dev || !src_dev || dst_dev->plat != s->dev->plat || src_dev->plat != s->dev->plat)
        return MEMRA_E_INVAL;
    return BE(s->dev)->copy_async(s, DEV_COPY_PEER, dst, dst_dev, src, src_dev, bytes);
}

/* ---- kernels and host callbacks ---- */

int dev_launch_cpu_async(dev_stream *s, const char *name, dev_cpu_fn fn, const void *args, size_t args_bytes,
                         const dev_access *acc, int n_acc)
{
    if (!BE(s->dev)->launch_cpu)
        return MEMRA_E_INVAL;
    return BE(s->dev)->launch_cpu(s, name, fn, args, args_bytes, acc, n_acc);
}

int dev_host_fn_async(dev_stream *s, void (*fn)(void *arg), void *arg)
{
    if (!fn)
        return MEMRA_E_INVAL;
    return BE(s->dev)->host_fn(s, fn, arg);
}

static void stamp_now(void *arg)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *(uint64_t *)arg = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int dev_stamp_async(dev_stream *s, uint64_t *host_dst)
{
    if (!s || !host_dst)
        return MEMRA_E_INVAL;
    if (BE(s->dev)->stamp)
        return BE(s->dev)->stamp(s, host_dst);
    /* ordered by the stream: the worker runs this when it reaches the point */
    return BE(s->dev)->host_fn(s, stamp_now, host_dst);
}

/* ---- graphs ---- */

int dev_stream_capture_begin(dev_stream *s, dev_err *err)
{
    if (!s)
        return dev_err_set(err, MEMRA_E_INVAL, "dev_stream_capture_begin: stream is NULL");
    if (!BE(s->dev)->capture_begin)
        return dev_err_set(err, MEMRA_E_UNSUPPORTED, "dev_stream_capture_begin on '%s': the %s backend has no "
                           "graphs (CUDA only)", s->name, BE(s->dev)->name);
    return BE(s->dev)->capture_begin(s, err);
}

int dev_stream_capture_end(dev_stream *s, dev_graph **out, dev_err *err)
{
    if (out)
        *out = NULL;
    if (!s || !out)
        return dev_err_set(err, MEMRA_E_INVAL, "dev_stream_capture_end: stream and out are required");
    if (!BE(s->dev)->capture_end)
        return dev_err_set(err, MEMRA_E_UNSUPPORTED, "dev_stream_capture_end on '%s': the %s backend has no "
                           "graphs (CUDA only)", s->name, BE(s->dev)->name);
    return BE(s->dev)->capture_end(s, out, err);
}

int dev_graph_launch_async(dev_graph *g, dev_stream *s)
{
    if (!g || !s || g->dev != s->dev)
        return MEMRA_E_INVAL;
    if (!BE(s->dev)->graph_launch)
        return MEMRA_E_UNSUPPORTED;
    return BE(s->dev)->graph_launch(g, s);
}

void dev_graph_destroy(dev_graph *g)
{
    if (g && BE(g->dev)->graph_destroy)
        BE(g->dev)->graph_destroy(g);
}

/* ---- counters, checker, hooks ---- */

void dev_device_counters(const dev_device *d, dev_counters *out)
{
    out->remote_read_bytes = atomic_load_explicit(&d->remote_read_bytes, memory_order_relaxed);
    out->remote_write_bytes = atomic_load_explicit(&d->remote_write_bytes, memory_order_relaxed);
    out->peer_copy_bytes = atomic_load_explicit(&d->peer_copy_bytes, memory_order_relaxed);
    out->access_denied = atomic_load_explicit(&d->access_denied, memory_order_relaxed);
    out->kernels_run = atomic_load_explicit(&d->kernels_run, memory_order_relaxed);
}

void dev_device_counters_reset(dev_device *d)
{
    atomic_store_explicit(&d->remote_read_bytes, 0, memory_order_relaxed);
    atomic_store_explicit(&d->remote_write_bytes, 0, memory_order_relaxed);
    atomic_store_explicit(&d->peer_copy_bytes, 0, memory_order_relaxed);
    atomic_store_explicit(&d->access_denied, 0, memory_order_relaxed);
    atomic_store_explicit(&d->kernels_run, 0, memory_order_relaxed);
}

void dev_race_check_enable(dev_platform *p, int on)
{
    if (p->be->race_enable)
        p->be->race_enable(p, on);
}

uint64_t dev_race_count(const dev_platform *p) { return p->be->race_count ? p->be->race_count(p) : 0; }

uint64_t dev_race_first(const dev_platform *p, char *buf, size_t len)
{
    if (p->be->race_first)
        return p->be->race_first(p, buf, len);
    if (buf && len)
        buf[0] = '\0';
    return 0;
}

size_t dev_alloc_extent(dev_platform *p, const void *ptr)
{
    return (p && p->be->alloc_extent) ? p->be->alloc_extent(p, ptr) : 0;
}

void dev_race_reset(dev_platform *p)
{
    if (p->be->race_reset)
        p->be->race_reset(p);
}

void dev_set_op_hook(dev_platform *p, dev_op_hook hook, void *ctx)
{
    if (p->be->set_op_hook)
        p->be->set_op_hook(p, hook, ctx);
}

int dev_device_mem_info(dev_device *d, size_t *free_b, size_t *total_b, dev_err *err)
{
    *free_b = *total_b = 0;
    if (!d->plat->be->mem_info)
        return dev_err_set(err, MEMRA_E_UNSUPPORTED, "dev_device_mem_info: the %s backend does not report memory",
                           d->plat->be->name);
    return d->plat->be->mem_info(d, free_b, total_b, err);
}
