/* Internal to the CPU backend: structs shared by cpu_platform.c (devices, memory, registry), cpu_stream.c
 * (workers, ops, events) and cpu_race.c (vector clocks, the stream-order checker).
 *
 * Shared mutable state and who touches it:
 *   cpu_platform.reg_lock guards: the allocation registry (allocs[]), every allocation's checker state,
 *     the race reports. Taken by host threads (malloc/free/h2d_sync) and by stream workers (access checks).
 *   cpu_platform.vc_lock guards: host_vc, slots[] (stream clock slots), every stream's vc. Taken at enqueue
 *     (after the stream's lock: order stream.lock -> vc_lock -> reg_lock) and by host-synchronous calls.
 *   cpu_stream.lock guards: the op queue, enq/done counts, the sticky error, stop.
 *   cpu_mark.m guards: done/err of one event record. cpu_event.lock guards: latest.
 *   race_on, hook/hook_ctx: atomics / set while no stream runs (see dev_set_op_hook). */
#ifndef DEV_CPU_CPU_H
#define DEV_CPU_CPU_H

#include <pthread.h>
#include <stdalign.h>
#include <stddef.h>
#include <string.h>
#include "device/dev_impl.h"

#define CPU_MAX_SLOTS 1024  /* clock slots: slot 0 is the host, one per live stream */
#define CPU_NAME 32
#define CPU_ALIGN 256       /* device allocation alignment (cudaMalloc's) */
#define CPU_RECS_MAX 64     /* checker records per allocation before same-stream records merge */

typedef struct cpu_platform cpu_platform;

typedef struct cpu_device {
    dev_device base;
    unsigned arena;      /* jemalloc arena owning this device's memory (MEMRA_JEMALLOC builds) */
    int has_arena;
    int slow;            /* MEMRA_CPU_SLOW: each kernel takes this many times its time (1 = as fast as the host);
                          * set at platform open, read-only after */
} cpu_device;

/* A vector clock: t[i] for i < n, 0 beyond. */
typedef struct cpu_vc {
    uint32_t n;
    uint64_t *t;
} cpu_vc;

/* One recorded access (a byte range of an allocation) in the checker state. */
typedef struct cpu_acc_rec {
    size_t off, end;     /* [off, end) bytes from the allocation's base */
    int write;           /* 1: a write (or read/write), 0: a read */
    uint32_t slot;
    uint64_t tick;
    char stream[CPU_NAME];
    char op[CPU_NAME];
} cpu_acc_rec;

/* A live device allocation. */
typedef struct cpu_alloc {
    uintptr_t base;
    size_t size;
    cpu_device *owner;
    cpu_acc_rec *recs;   /* accesses not yet superseded (see cpu_race.c) */
    int n_recs, cap_recs;
} cpu_alloc;

struct cpu_platform {
    dev_platform base;
    cpu_device devs[DEV_CPU_DEVICES_MAX];
    unsigned host_arena;
    int has_host_arena;

    pthread_mutex_t reg_lock;
    cpu_alloc **allocs;  /* sorted by base */
    int n_allocs, cap_allocs;
    uint64_t race_count;
    char race_first[DEV_ERR_MSG];
    atomic_int race_on;

    pthread_mutex_t vc_lock;
    uint64_t host_vc[CPU_MAX_SLOTS];
    uint32_t n_slots;                 /* highest slot ever used + 1 */
    uint64_t slot_tick[CPU_MAX_SLOTS]; /* last tick handed out per slot (survives slot reuse) */
    unsigned char slot_used[CPU_MAX_SLOTS];

    _Atomic(dev_op_hook) hook;
    _Atomic(void *) hook_ctx;
};

/* An event record point; refcounted (the event's `latest`, the record op, waits, syncs). */
typedef struct cpu_mark {
    atomic_int refs;
    pthread_mutex_t m;
    pthread_cond_t c;
    int done;
    dev_err err;       /* the recording stream's sticky error when it passed the record */
    cpu_vc vc;         /* the recording stream's clock at the record */
    char stream[CPU_NAME];
} cpu_mark;

typedef struct cpu_event {
    dev_event base;
    pthread_mutex_t lock;
    cpu_mark *latest;  /* NULL until first recorded */
} cpu_event;

enum { CPU_OP_KERNEL, CPU_OP_HOSTFN, CPU_OP_COPY, CPU_OP_RECORD, CPU_OP_WAIT };

typedef struct cpu_op {
    struct cpu_op *next;
    int kind;
    char name[CPU_NAME];
    union {
        struct {
            dev_cpu_fn fn;
            int n_acc;
            dev_access acc[DEV_ACCESS_MAX];
            alignas(max_align_t) unsigned char args[DEV_ARGS_MAX];
        } k;
        struct { void (*fn)(void *); void *arg; } h;
        struct { int kind; void *dst; const void *src; size_t bytes; dev_device *dst_dev, *src_dev; } c;
        struct { cpu_mark *mark; } ev;
    } u;
    uint32_t slot;
    cpu_vc vc;         /* this op's clock (t points into the same allocation) */
} cpu_op;

typedef struct cpu_stream {
    dev_stream base;
    pthread_t th;
    pthread_mutex_t lock;
    pthread_cond_t cv_work, cv_done;
    cpu_op *head, *tail;
    uint64_t enq, done;
    uint64_t wake_at;             /* the smallest `done` a cpu_stream_sync waits for; UINT64_MAX: none waits */
    int stop;
    dev_err err;                  /* sticky: first failure */
    uint32_t slot;                /* clock slot */
    uint64_t vc[CPU_MAX_SLOTS];   /* clock after the last enqueued op (guarded by vc_lock) */
} cpu_stream;

static inline cpu_platform *cpu_plat(dev_platform *p) { return (cpu_platform *)p; }
static inline cpu_device *cpu_dev(dev_device *d) { return (cpu_device *)d; }

/* dst (cap bytes) = src, cut to cap - 1 and NUL-terminated: the per-op name copies (op names, the race
 * checker's records). snprintf("%s") cost ~10 % of a small model's CPU profile doing this. */
static inline void cpu_name_copy(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* cpu_platform.c */
cpu_alloc *cpu_alloc_find__(cpu_platform *p, const void *ptr); /* reg_lock held; NULL if not in a live alloc */

/* cpu_stream.c (vtable entries) */
dev_stream *cpu_stream_create(dev_device *d, const char *name, dev_err *err);
void cpu_stream_destroy(dev_stream *s);
int cpu_stream_sync(dev_stream *s, dev_err *err);
dev_event *cpu_event_create(dev_device *d, dev_err *err);
void cpu_event_destroy(dev_event *e);
int cpu_event_record(dev_event *e, dev_stream *s);
int cpu_stream_wait_event(dev_stream *s, dev_event *e);
int cpu_event_sync(dev_event *e, dev_err *err);
int cpu_event_query(dev_event *e);
int cpu_copy_async(dev_stream *s, int kind, void *dst, dev_device *dst_dev, const void *src, dev_device *src_dev,
                   size_t bytes);
int cpu_launch(dev_stream *s, const char *name, dev_cpu_fn fn, const void *args, size_t args_bytes,
               const dev_access *acc, int n_acc);
int cpu_host_fn(dev_stream *s, void (*fn)(void *), void *arg);

/* cpu_race.c: clocks (vc_lock held where marked __) and the checker (reg_lock held where marked __) */
int cpu_slot_acquire__(cpu_platform *p, const char *name, uint32_t *slot);
void cpu_slot_release__(cpu_platform *p, uint32_t slot);
void cpu_vc_join(uint64_t *dst, const uint64_t *src, uint32_t n);
/* Check one access [ptr, ptr+bytes) of mode by (slot, vc), named stream/op, to allocation a against its
 * state; report a race if it is not ordered after a conflicting previous access; then record it. */
void cpu_race_access__(cpu_platform *p, cpu_alloc *a, const void *ptr, size_t bytes, int mode, uint32_t slot,
                       const cpu_vc *vc, const char *stream, const char *op);
void cpu_alloc_state_free(cpu_alloc *a);
void cpu_race_enable(dev_platform *p, int on);
uint64_t cpu_race_count(const dev_platform *p);
uint64_t cpu_race_first(const dev_platform *p, char *buf, size_t len);
void cpu_race_reset(dev_platform *p);

#endif
