/* Internal to device/: the backend vtable and the base structs every backend embeds as its FIRST member
 * (so a backend casts dev_device * to its own cpu_device * / cuda_device *). Not for layers above device/.
 * Shared mutable state here: dev_device.granted[] (written by dev_peer_grant on the host, read by CPU
 * stream workers: atomics) and dev_device counters (bumped by workers / enqueuers: relaxed atomics). */
#ifndef DEV_DEV_IMPL_H
#define DEV_DEV_IMPL_H

#include <stdatomic.h>
#include "device/dev.h"

enum { DEV_COPY_H2D = 0, DEV_COPY_D2H, DEV_COPY_D2D, DEV_COPY_PEER };

/* What a backend implements. Optional entries (checker, hook) may be NULL: the dispatcher then no-ops. */
typedef struct dev_backend {
    const char *name;                                   /* "cpu", "cuda" */
    void (*platform_close)(dev_platform *p);
    int (*peer_grant)(dev_device *accessor, dev_device *owner, dev_err *err);
    void *(*malloc)(dev_device *d, size_t bytes, dev_err *err);
    void (*free)(dev_device *d, void *p);
    /* bytes free for allocations on d now, and its total; may be NULL: unknown */
    int (*mem_info)(dev_device *d, size_t *free_b, size_t *total_b, dev_err *err);
    void *(*host_alloc)(dev_platform *p, size_t bytes, dev_err *err);
    void (*host_free)(dev_platform *p, void *ptr);
    int (*copy_h2d_sync)(dev_device *d, void *dst, const void *src, size_t bytes, dev_err *err);
    dev_stream *(*stream_create)(dev_device *d, const char *name, dev_err *err);
    void (*stream_destroy)(dev_stream *s);
    int (*stream_sync)(dev_stream *s, dev_err *err);
    void *(*stream_native)(dev_stream *s);
    dev_event *(*event_create)(dev_device *d, dev_err *err);
    void (*event_destroy)(dev_event *e);
    int (*event_record)(dev_event *e, dev_stream *s);
    int (*stream_wait_event)(dev_stream *s, dev_event *e);
    int (*event_sync)(dev_event *e, dev_err *err);
    int (*event_query)(dev_event *e);
    /* kind: DEV_COPY_*; dst_dev/src_dev are the devices of dst/src (NULL for host memory). */
    int (*copy_async)(dev_stream *s, int kind, void *dst, dev_device *dst_dev, const void *src,
                      dev_device *src_dev, size_t bytes);
    int (*launch_cpu)(dev_stream *s, const char *name, dev_cpu_fn fn, const void *args, size_t args_bytes,
                      const dev_access *acc, int n_acc);
    int (*host_fn)(dev_stream *s, void (*fn)(void *), void *arg);
    int (*stamp)(dev_stream *s, uint64_t *host_dst); /* may be NULL: a host function stands in */
    void (*race_enable)(dev_platform *p, int on);
    uint64_t (*race_count)(const dev_platform *p);
    uint64_t (*race_first)(const dev_platform *p, char *buf, size_t len);
    size_t (*alloc_extent)(dev_platform *p, const void *ptr); /* may be NULL: extent unknown */
    void (*race_reset)(dev_platform *p);
    void (*set_op_hook)(dev_platform *p, dev_op_hook hook, void *ctx);
    /* graphs: all four NULL on backends without them (the dispatcher answers MEMRA_E_UNSUPPORTED) */
    int (*capture_begin)(dev_stream *s, dev_err *err);
    int (*capture_end)(dev_stream *s, dev_graph **out, dev_err *err);
    int (*graph_launch)(dev_graph *g, dev_stream *s);
    void (*graph_destroy)(dev_graph *g);
    /* the device's bus address (dev_device_bus_id); may be NULL: "<name>" stands in */
    int (*bus_id)(const dev_device *d, char *buf, size_t cap, dev_err *err);
} dev_backend;

struct dev_platform {
    dev_kind kind;
    const dev_backend *be;
    int n_dev;
    dev_device *dev[DEV_MAX_DEVICES]; /* owned; set at open, read-only after */
    atomic_int matmul_x8;             /* dev_platform_set_matmul_x8; set by the opener before any launch */
    atomic_int cpu_threads;           /* dev_platform_set_cpu_threads; the same */
};

struct dev_device {
    dev_platform *plat;
    int ordinal;                              /* index in the platform (= CUDA device id on CUDA) */
    char name[16];                            /* "cpu:1", "cuda:0" */
    atomic_int granted[DEV_MAX_DEVICES];      /* granted[o]: this device may touch device o's memory */
    _Atomic uint64_t remote_read_bytes, remote_write_bytes, peer_copy_bytes, access_denied, kernels_run;
};

struct dev_stream {
    dev_device *dev;
    char name[32];                            /* copied at create; shows in reports */
    void *attach[DEV_STREAM_SLOTS];           /* dev_stream_attach; owner thread only (see dev.h) */
    void (*attach_destroy[DEV_STREAM_SLOTS])(void *p); /* run by dev_stream_destroy, may be NULL */
};

struct dev_event {
    dev_device *dev;
};

struct dev_graph {
    dev_device *dev;                          /* the device its ops run on */
};

/* Fill the base fields of a device (name "<prefix>:<ordinal>", counters zero, no grants). */
void dev_device_base_init(dev_device *d, dev_platform *p, int ordinal, const char *prefix);
void dev_stream_base_init(dev_stream *s, dev_device *d, const char *name);

/* Backend doors. */
dev_platform *dev_cpu_open(int n_devices, dev_err *err);
#ifdef MEMRA_HAVE_CUDA
dev_platform *dev_cuda_open(dev_err *err);
int dev_cuda_visible_count(void); /* cudaGetDeviceCount, 0 on any error */
#endif

#endif
