/* The device layer: one API over backends, shaped like ggml-backend / the CUDA runtime.
 *   platform -> device (cpu:0.., cuda:0..) -> stream (in-order op queue) -> event (a point in a stream)
 * Verbs: ops are ENQUEUED on a stream and return at once (`_async`); the host waits only in `_sync`
 * calls. Every op on one stream runs in enqueue order; ops on different streams are unordered unless an
 * event orders them (dev_event_record_async on the producer, dev_stream_wait_event_async on the consumer).
 *
 * CPU backend (the one CI exercises; docs/device.md "CPU backend"): every stream is a worker thread draining an op queue;
 * every emulated device owns its memory (its own jemalloc arena); kernels declare the buffers they touch
 * (dev_access) so the backend can (1) refuse an access to another device's memory without a peer grant and
 * count granted remote reads, and (2) check the multi-stream law: an access from stream B to a buffer last
 * written/read by stream A at point p, with no event ordering B after p, is reported as a race,
 * deterministically (vector clocks carried by events, not wall-clock luck).
 * CUDA backend: the runtime API, non-blocking streams, cudaEventDisableTiming events, cudaMemcpyPeerAsync.
 *
 * Errors are sticky per stream, as in CUDA: after a failed op the stream skips its remaining kernels and
 * copies (events still complete so nobody hangs), and every later _sync on it returns the first error. */
#ifndef DEV_DEV_H
#define DEV_DEV_H

#include <stddef.h>
#include <stdint.h>
#include "device/err.h"

typedef enum dev_kind { DEV_KIND_CPU = 0, DEV_KIND_CUDA = 1 } dev_kind;

typedef struct dev_platform dev_platform; /* all devices of one backend; owns them */
typedef struct dev_device dev_device;     /* one device: memory + streams; owned by its platform */
typedef struct dev_stream dev_stream;     /* in-order queue of ops on one device */
typedef struct dev_event dev_event;       /* a recorded point in a stream */
typedef struct dev_graph dev_graph;       /* a replayable capture of a stream's ops (cudaGraphExec_t) */

#define DEV_CPU_DEVICES_DEFAULT 8
#define DEV_CPU_DEVICES_MAX 64
#define DEV_MAX_DEVICES 64

/* ---- platform and devices ---- */

/* Open a backend. n_cpu_devices (1..DEV_CPU_DEVICES_MAX) is the number of emulated CPU devices and is
 * ignored for CUDA (which opens every visible GPU). Returns NULL and fills err on failure (CUDA absent,
 * no GPU, bad count). The platform owns its devices; close it after every stream/event is destroyed. */
dev_platform *dev_platform_open(dev_kind kind, int n_cpu_devices, dev_err *err);

/* Open the backend the environment asks for: MEMRA_BACKEND=cpu|cuda (default: cuda when the library was
 * built with CUDA and a GPU is visible, else cpu) and MEMRA_CPU_DEVICES=1..64 (default 8). An invalid value
 * is an error naming the variable, the value and what is allowed. Call from the host thread that creates
 * the runtime (reads the environment once). */
dev_platform *dev_platform_open_env(dev_err *err);

/* Apply MEMRA_BACKEND (cpu|cuda) and MEMRA_CPU_DEVICES (1..64) when set on top of *kind (a dev_kind, or -1 =
 * automatic) and *n_cpu; unset variables leave them. Returns 0, or MEMRA_E_INVAL naming the variable, the
 * value and what is allowed (nothing changed then). The one parser of these doors. */
int dev_backend_doors(int *kind, int *n_cpu, dev_err *err);

/* The CPU matmul's mode on p (MEMRA_CPU_X8): 1 = fast (x quantized once per matmul to int8 blocks; q4_0, q4_1
 * and q8_0 weights take int8 products, kernels/x8_gemm.c), 0 = exact (f32 x, fixed lanes; the float64 oracle's
 * and the bit-identity gates' mode). Both are deterministic per shape. Read by every CPU matmul launch; set it
 * after open, before the first launch (a later change applies to later launches). CUDA ignores it. The
 * platforms dev_platform_open gives start exact; dev_platform_open_env applies the door. */
void dev_platform_set_matmul_x8(dev_platform *p, int on);
int dev_platform_matmul_x8(const dev_platform *p);
/* The MEMRA_CPU_X8 door: unset leaves *on; "1" or "0" sets it and returns 1; anything else MEMRA_E_INVAL
 * naming the variable and the allowed values. Returns 0 when unset. */
int dev_cpu_x8_door(int *on, dev_err *err);

/* Threads per CPU matmul on p (MEMRA_CPU_THREADS, 1..DEV_CPU_THREADS_MAX): 1 (the default) keeps each stage on
 * its one stream worker, so pipeline scaling stays visible; n > 1 splits each matmul's output rows over a team of
 * n OpenMP threads (when cores outnumber stages). The bits do not change: every output row is computed alone
 * (kernels/cpu/cpu_matmul.c). Read by every CPU matmul launch; set it after open, before the first launch. The
 * platforms dev_platform_open gives start at 1; dev_platform_open_env applies the door. CUDA ignores it. */
#define DEV_CPU_THREADS_MAX 256
void dev_platform_set_cpu_threads(dev_platform *p, int n);
int dev_platform_cpu_threads(const dev_platform *p);
/* The MEMRA_CPU_THREADS door: unset leaves *n (returns 0); an integer in 1..DEV_CPU_THREADS_MAX sets it (returns
 * 1); anything else, or a value above 1 in a build without OpenMP, MEMRA_E_INVAL naming the variable and what is
 * allowed. dev_cpu_threads_check applies the same rule to a value from elsewhere (an API field): 0 or the error. */
int dev_cpu_threads_door(int *n, dev_err *err);
int dev_cpu_threads_check(int n, const char *what, dev_err *err);

void dev_platform_close(dev_platform *p);
dev_kind dev_platform_kind(const dev_platform *p);
int dev_platform_count(const dev_platform *p);              /* number of devices */
dev_device *dev_platform_device(dev_platform *p, int ordinal); /* NULL when out of range */

dev_platform *dev_device_platform(const dev_device *d);
int dev_device_ordinal(const dev_device *d);
const char *dev_device_name(const dev_device *d); /* "cpu:1", "cuda:0" */
/* The device's address on this host's bus into buf (cap bytes, NUL-terminated): the PCI bus id on CUDA
 * ("0000:1b:00.0", cudaDeviceGetPCIBusId), "cpu:<ordinal>" on the CPU backend (each process emulates its own).
 * Two processes of one host name one GPU alike whatever CUDA_VISIBLE_DEVICES renumbers, so it tells whether two
 * ranks' devices are one (NCCL refuses two ranks on one GPU). Returns 0, or MEMRA_E_DEVICE + err (the call). */
int dev_device_bus_id(const dev_device *d, char *buf, size_t cap, dev_err *err);

/* Let `accessor`'s kernels read/write `owner`'s memory (cudaDeviceEnablePeerAccess + the default mempool's
 * access). Idempotent; granting a device to itself is a no-op. Host-synchronous. */
int dev_peer_grant(dev_device *accessor, dev_device *owner, dev_err *err);
int dev_peer_granted(const dev_device *accessor, const dev_device *owner);

/* ---- memory ---- */

/* Persistent device memory (weights, KV caches, boundary slots). Host-synchronous; the caller guarantees
 * no stream still uses p when freeing. Returns NULL + err on failure. Zero-filled. */
void *dev_malloc(dev_device *d, size_t bytes, dev_err *err);
void dev_free(dev_device *d, void *p);

/* Page-locked host memory usable as the source/target of async copies (cudaMallocHost on CUDA). */
void *dev_host_alloc(dev_platform *p, size_t bytes, dev_err *err);
void dev_host_free(dev_platform *p, void *ptr);

/* Bytes from p to the end of the live allocation that holds it; 0 when p is in none or the backend does
 * not track allocations (CUDA). Lets a kernel declare a whole buffer it indexes at run time (a KV cache
 * read at device-side positions) to the CPU backend's checker. Cost: one registry look-up (a lock). */
size_t dev_alloc_extent(dev_platform *p, const void *ptr);

/* Bytes d can allocate now (*free_b) and its total memory (*total_b): cudaMemGetInfo on CUDA; on the CPU
 * backend the host's available memory (MemAvailable) and its physical memory, shared by every emulated
 * device. Returns 0, or MEMRA_E_UNSUPPORTED / MEMRA_E_DEVICE (err says why; *free_b = *total_b = 0). A snapshot:
 * another allocator may take the bytes before the caller does. */
int dev_device_mem_info(dev_device *d, size_t *free_b, size_t *total_b, dev_err *err);

/* Host-synchronous copy into device memory (weight upload at load time). */
int dev_copy_h2d_sync(dev_device *d, void *dst, const void *src_host, size_t bytes, dev_err *err);

/* ---- streams ---- */

/* A new stream on d. name shows up in race reports and traces ("stage1", "readback"). */
dev_stream *dev_stream_create(dev_device *d, const char *name, dev_err *err);
/* Waits until every op enqueued so far has run, then frees the stream. */
void dev_stream_destroy(dev_stream *s);
dev_device *dev_stream_device(const dev_stream *s);
const char *dev_stream_name(const dev_stream *s);
/* Host waits until s has run every op enqueued so far; returns the stream's sticky error (and fills err). */
int dev_stream_sync(dev_stream *s, dev_err *err);
/* The backend's native handle (cudaStream_t on CUDA, NULL on CPU) for kernels/cuda launches. */
void *dev_stream_native(dev_stream *s);

/* Per-stream attachments: state a layer above device/ keeps per stream without device/ knowing what it is
 * (kernels/cuda hangs its cuBLAS handle + workspace here, so two streams never share one). Slots are
 * assigned by convention, one owner each: DEV_SLOT_KRN_GEMM = kernels/cuda/krn_cuda_gemm.cu, DEV_SLOT_KRN_INVARIANT =
 * kernels/krn_stream.c (batch invariance).
 * Threading: not synchronized. Attach and look up only from the thread that enqueues on s (the stream's
 * one owner, e.g. its stage actor); dev_stream_destroy runs the destructors on the destroying thread, so
 * hand the stream over (thread join, mailbox) before destroying it from another thread. */
#define DEV_STREAM_SLOTS 4
enum { DEV_SLOT_KRN_GEMM = 0, DEV_SLOT_KRN_INVARIANT = 1 };

/* The pointer attached to slot (0..DEV_STREAM_SLOTS-1) of s; NULL when none or the slot is out of range.
 * Cost: two loads. */
void *dev_stream_attachment(const dev_stream *s, int slot);
/* Attach p to an empty slot of s; s owns it from now on: dev_stream_destroy calls destroy(p) (when
 * destroy is non-NULL) after every op enqueued on s has run and before the stream itself is freed (so a
 * destructor may still use dev_stream_native(s) and must not enqueue work it does not wait for).
 * Destructors run in descending slot order. p == NULL empties the slot WITHOUT calling its destroy (the
 * caller takes the old pointer back). Returns 0, or MEMRA_E_INVAL (slot out of range, slot already taken
 * by another pointer, s NULL) with err naming which. */
int dev_stream_attach(dev_stream *s, int slot, void *p, void (*destroy)(void *p), dev_err *err);

/* ---- events ---- */

dev_event *dev_event_create(dev_device *d, dev_err *err);
void dev_event_destroy(dev_event *e); /* the caller guarantees no pending wait still names it */
/* Capture the current end of s: the event completes when s has run every op enqueued before this call.
 * Re-recording moves the event to the new point (waits enqueued earlier keep the old point). */
int dev_event_record_async(dev_event *e, dev_stream *s);
/* Ops enqueued on s after this call run only after e's most recent record (as of this call) completes.
 * The host does not wait. Waiting a never-recorded event is a no-op (CUDA semantics). */
int dev_stream_wait_event_async(dev_stream *s, dev_event *e);
/* Host waits for e's most recent record; returns the recording stream's error if it failed before it. */
int dev_event_sync(dev_event *e, dev_err *err);
/* 1 = complete (or never recorded), 0 = pending, <0 = the recording stream failed. Never blocks. */
int dev_event_query(dev_event *e);

/* ---- copies (enqueued; host buffers must stay valid until the stream passes the op) ---- */

int dev_copy_h2d_async(dev_stream *s, void *dst, const void *src_host, size_t bytes);
int dev_copy_d2h_async(dev_stream *s, void *dst_host, const void *src, size_t bytes);
/* dst and src on the same device (the stream's). */
int dev_copy_d2d_async(dev_stream *s, void *dst, const void *src, size_t bytes);
/* Cross-device copy (cudaMemcpyPeerAsync). Counted as peer-copy bytes, not as remote reads. */
int dev_copy_peer_async(dev_stream *s, void *dst, dev_device *dst_dev, const void *src, dev_device *src_dev,
                        size_t bytes);

/* ---- kernels and host callbacks ---- */

enum { DEV_READ = 1, DEV_WRITE = 2, DEV_RW = 3 };

/* One buffer a kernel touches: ptr may point inside a dev_malloc/pool block; bytes from ptr. */
typedef struct dev_access {
    const void *ptr;
    size_t bytes;
    int mode; /* DEV_READ, DEV_WRITE or DEV_RW */
} dev_access;

#define DEV_ARGS_MAX 256  /* bytes of kernel arguments copied into the op at enqueue */
#define DEV_ACCESS_MAX 16 /* buffers one kernel may declare */

/* CPU backend only: enqueue fn(args) on s. args (args_bytes <= DEV_ARGS_MAX) is copied at enqueue, so
 * the caller's struct may die at once. acc lists every device buffer the kernel touches; the backend
 * checks grants and stream order for each before running fn, and skips fn (stream error) on a violation.
 * name labels the op in reports ("matmul"). Returns MEMRA_E_INVAL on a CUDA stream. */
typedef void (*dev_cpu_fn)(void *args);
int dev_launch_cpu_async(dev_stream *s, const char *name, dev_cpu_fn fn, const void *args, size_t args_bytes,
                         const dev_access *acc, int n_acc);

/* Run fn(arg) when s reaches this point (cudaLaunchHostFunc). Runs on a backend thread, not the caller's;
 * fn must not call stream/event functions. Used for liveness markers and completion notices. */
int dev_host_fn_async(dev_stream *s, void (*fn)(void *arg), void *arg);

/* ---- graphs (CUDA only; the CPU backend answers MEMRA_E_UNSUPPORTED so callers fall back to eager) ---- */

/* Start capturing s: ops enqueued on s from now on (kernels, copies, stream-ordered allocations) are
 * recorded, not run, until dev_stream_capture_end. Relaxed capture mode: other threads' CUDA calls are not
 * restricted. Host callbacks (dev_host_fn_async) and event syncs must stay outside the captured region.
 * Returns 0, MEMRA_E_UNSUPPORTED (CPU backend), or MEMRA_E_DEVICE + err. Cost: one runtime call. */
int dev_stream_capture_begin(dev_stream *s, dev_err *err);
/* End the capture begun on s and instantiate it: *out = a new graph owned by the caller (destroy with
 * dev_graph_destroy). On failure (an op failed to enqueue during the capture, instantiation failed) *out
 * is NULL, the capture is over and s is back to eager mode; the stream's sticky error is NOT set. Cost:
 * instantiation, tens of microseconds per hundred ops. */
int dev_stream_capture_end(dev_stream *s, dev_graph **out, dev_err *err);
/* Enqueue one replay of g on s (any stream of g's device). Ordered like any op of s. A failure is sticky
 * on s. */
int dev_graph_launch_async(dev_graph *g, dev_stream *s);
/* Free g; the caller guarantees no replay of it is still pending (sync its streams first). NULL is a
 * no-op. */
void dev_graph_destroy(dev_graph *g);

/* Write the device's nanosecond clock into *host_dst (page-locked host memory from dev_host_alloc) when s
 * reaches this point, without holding the stream (CUDA: a one-thread kernel reading %globaltimer; CPU: the
 * stream's worker reads CLOCK_MONOTONIC). Stamps of one platform share a clock domain (CUDA: the driver keeps
 * the GPUs' global timers together to within microseconds). The value is readable on the host once an event
 * recorded after it completes. Cost: one kernel launch on CUDA, no host round trip. */
int dev_stamp_async(dev_stream *s, uint64_t *host_dst);

/* ---- counters, checker and test hooks ---- */

typedef struct dev_counters {
    uint64_t remote_read_bytes; /* bytes this device's kernels read from other devices' memory (granted) */
    uint64_t remote_write_bytes;/* bytes this device's kernels wrote into other devices' memory (granted) */
    uint64_t peer_copy_bytes;   /* bytes moved by dev_copy_peer_async on this device's streams */
    uint64_t access_denied;     /* kernel accesses refused for want of a peer grant */
    uint64_t kernels_run;       /* kernels executed on this device's streams */
} dev_counters;

/* Snapshot of d's counters (relaxed reads; exact once the streams are synced). */
void dev_device_counters(const dev_device *d, dev_counters *out);
void dev_device_counters_reset(dev_device *d);

/* Stream-order race checker (CPU backend; on by default). Reports accumulate on the platform. */
void dev_race_check_enable(dev_platform *p, int on);
uint64_t dev_race_count(const dev_platform *p);
/* Copy the first report's text ("race: stage1 read buf 0x.. (cpu:0, 4096 B) last written by stage0 at op
 * 17, no event orders it") into buf; returns the number of reports. */
uint64_t dev_race_first(const dev_platform *p, char *buf, size_t len);
void dev_race_reset(dev_platform *p);

/* Test hook: called on the worker thread before every op of every CPU stream (soak tests inject random
 * delays here). NULL removes it. Must be set while no stream is running ops. */
typedef void (*dev_op_hook)(void *ctx, dev_stream *s, const char *op_name);
void dev_set_op_hook(dev_platform *p, dev_op_hook hook, void *ctx);

#endif
