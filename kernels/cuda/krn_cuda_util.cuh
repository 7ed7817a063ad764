/* Private helpers of the kernels/cuda .cu files: launch-error checks, half/bf16 conversion, streaming loads and the
 * fixed-order warp reductions every kernel uses. Not part of the API (krn_cuda.h is). */
#ifndef KRN_CUDA_UTIL_CUH
#define KRN_CUDA_UTIL_CUH

#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "kernels/cuda/krn_cuda.h"

#define KRN_WARP 32

/* After a launch: 0, or MEMRA_E_DEVICE with "<what>: cudaErrorX: text" in err. cudaGetLastError also
 * clears the thread's last error, so an older error of this thread may surface here (it is still real). */
static inline int krn_cuda_launch_check(dev_err *err, const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        return 0;
    return dev_err_set(err, MEMRA_E_DEVICE, "%s: launch failed: %s: %s", what, cudaGetErrorName(e),
                       cudaGetErrorString(e));
}

/* A CUDA runtime call's result -> 0 or MEMRA_E_DEVICE naming the call. */
static inline int krn_cuda_call_check(dev_err *err, cudaError_t e, const char *what) {
    if (e == cudaSuccess)
        return 0;
    return dev_err_set(err, MEMRA_E_DEVICE, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Multiprocessors of the current device (0 when unknown). Asked of the driver once per device ordinal (< 64)
 * and kept: the GEMV launchers size their grids with it on every launch. A racing first call stores the
 * same value (relaxed atomics). */
static inline int krn_cuda_sm_count(void) {
    static int cache[64];
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (dev >= 0 && dev < 64 && (n = __atomic_load_n(&cache[dev], __ATOMIC_RELAXED)) > 0)
        return n;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (dev >= 0 && dev < 64)
        __atomic_store_n(&cache[dev], n, __ATOMIC_RELAXED);
    return n;
}

static inline int krn_cuda_aligned(const void *p, unsigned a) { return ((uintptr_t)p % a) == 0; }

static __device__ __forceinline__ float krn_h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
static __device__ __forceinline__ float krn_bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* 16 bytes of weights, read once: non-coherent path, no L1 allocation (keeps L1 for the activations). */
static __device__ __forceinline__ uint4 krn_ld_stream16(const void *p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

/* 8 bytes read once (krn_ld_stream16's path). */
static __device__ __forceinline__ uint2 krn_ld_stream8(const void *p) {
    uint2 r;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
    return r;
}

static __device__ __forceinline__ float4 krn_ld_f4(const float *p) { return __ldg((const float4 *)p); }

/* ---- activation rows of type XT (kernels/krn.h "activation types": KRN_F32, KRN_F16, KRN_BF16) ----
 * A row of XT is an array of krn_act_e<XT>: float, or the 16 bits of an f16/bf16. Loads widen each 16-bit
 * element to f32 exactly (f16: cvt, bf16: the 16 bits become the float's top half), so a kernel templated on
 * XT does, after the load, the arithmetic of its f32 instantiation on the same values. For XT = KRN_F32 every
 * helper is the plain float access it replaces (krn_ld_f4, __ldg, a float store), so an f32 instantiation
 * compiles to the code the kernel had before activation types. Stores round to nearest even
 * (__float2half_rn / __float2bfloat16_rn, as the KV cache's kv_put). */
template <int XT> struct krn_act_elem { typedef uint16_t E; };
template <> struct krn_act_elem<KRN_F32> { typedef float E; };
template <int XT> using krn_act_e = typename krn_act_elem<XT>::E;

/* One element as f32 (widened exactly). */
template <int XT> static __device__ __forceinline__ float krn_act_f(krn_act_e<XT> v) {
    if constexpr (XT == KRN_F32)
        return v;
    else if constexpr (XT == KRN_F16)
        return krn_h2f(v);
    else
        return krn_bf2f(v);
}

/* f32 v as an element of YT (16-bit: rounded to nearest even). */
template <int YT> static __device__ __forceinline__ krn_act_e<YT> krn_act_of(float v) {
    if constexpr (YT == KRN_F32)
        return v;
    else if constexpr (YT == KRN_F16)
        return __half_as_ushort(__float2half_rn(v));
    else
        return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

/* The 4 16-bit elements of u (element 0 in u.x's low half) widened. */
template <int XT> static __device__ __forceinline__ float4 krn_act_f4(uint2 u) {
    return make_float4(krn_act_f<XT>((uint16_t)(u.x & 0xFFFFu)), krn_act_f<XT>((uint16_t)(u.x >> 16)),
                       krn_act_f<XT>((uint16_t)(u.y & 0xFFFFu)), krn_act_f<XT>((uint16_t)(u.y >> 16)));
}

/* p[0 .. 4) as f32: one 16-byte load for f32 (p 16-byte aligned), one 8-byte load for 16-bit (p 8-byte
 * aligned). Read-only path (__ldg), as krn_ld_f4. */
template <int XT> static __device__ __forceinline__ float4 krn_ldx4(const krn_act_e<XT> *p) {
    if constexpr (XT == KRN_F32)
        return krn_ld_f4(p);
    else
        return krn_act_f4<XT>(__ldg((const uint2 *)p));
}

/* p[0 .. 8) of a 16-bit XT as f32 into a (0 .. 3) and c (4 .. 7): one 16-byte load (p 16-byte aligned). */
template <int XT> static __device__ __forceinline__ void krn_ldx8_16(const krn_act_e<XT> *p, float4 &a, float4 &c) {
    const uint4 u = __ldg((const uint4 *)p);
    a = krn_act_f4<XT>(make_uint2(u.x, u.y));
    c = krn_act_f4<XT>(make_uint2(u.z, u.w));
}

/* p[0 .. 8) as f32 into the float4 lvalues a (0 .. 3) and c (4 .. 7): f32 two 16-byte loads, 16-bit one (p
 * 16-byte aligned either way). A macro, not a function taking a and c by reference: that form changed the
 * register allocation and schedule of the f32 GEMVs (cuobjdump -sass, block and planar q8_0 / q4_K), and the
 * f32 instantiations must stay the code they were; this one expands to the two krn_ld_f4 assignments they had. */
#define KRN_LDX8(XT, p, a, c)                                                                                  \
    do {                                                                                                       \
        if constexpr ((XT) == KRN_F32) {                                                                       \
            (a) = krn_ld_f4((const float *)(p));                                                               \
            (c) = krn_ld_f4((const float *)(p) + 4);                                                           \
        } else {                                                                                               \
            krn_ldx8_16<XT>((const uint16_t *)(p), (a), (c));                                                  \
        }                                                                                                      \
    } while (0)

/* *p as f32 through the read-only path (element alignment only). */
template <int XT> static __device__ __forceinline__ float krn_ldx1(const krn_act_e<XT> *p) {
    return krn_act_f<XT>(__ldg(p));
}

/* p[4i .. 4i+4) = v as YT: one 16-byte store for f32 (p 16-byte aligned), one 8-byte store for 16-bit (8-byte
 * aligned). */
template <int YT, typename I> static __device__ __forceinline__ void krn_stx4(krn_act_e<YT> *p, I i, float4 v) {
    if constexpr (YT == KRN_F32) {
        ((float4 *)p)[i] = v;
    } else {
        uint2 u;
        u.x = (uint32_t)krn_act_of<YT>(v.x) | ((uint32_t)krn_act_of<YT>(v.y) << 16);
        u.y = (uint32_t)krn_act_of<YT>(v.z) | ((uint32_t)krn_act_of<YT>(v.w) << 16);
        ((uint2 *)p)[i] = u;
    }
}

/* Butterfly sum over the 32 lanes: every lane ends with the same bits (each step adds the same two
 * values, and float addition is commutative), in an order that depends only on lane numbers. */
static __device__ __forceinline__ float krn_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float krn_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Block sum for blockDim.x = nwarps*32 (nwarps <= 32): warp butterflies, then every thread adds the warp
 * totals in warp order. red has room for 32 floats. Ends with a barrier so red can be reused at once. */
static __device__ __forceinline__ float krn_block_sum(float v, float *red) {
    const int lane = threadIdx.x % KRN_WARP, warp = threadIdx.x / KRN_WARP, nw = blockDim.x / KRN_WARP;
    v = krn_warp_sum(v);
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    float t = 0.0f;
    for (int i = 0; i < nw; i++)
        t += red[i];
    __syncthreads();
    return t;
}

static __device__ __forceinline__ float krn_block_max(float v, float *red) {
    const int lane = threadIdx.x % KRN_WARP, warp = threadIdx.x / KRN_WARP, nw = blockDim.x / KRN_WARP;
    v = krn_warp_max(v);
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    float t = red[0];
    for (int i = 1; i < nw; i++)
        t = fmaxf(t, red[i]);
    __syncthreads();
    return t;
}

/* MEMRA_PDL, device side: the first statement of every kernel of the table. Waits until the kernel this one
 * depends on (its predecessor on the stream, when launched with programmatic stream serialization) has
 * completed and its writes are visible, then lets the next kernel's blocks be scheduled (they wait the
 * same way). Without the launch attribute both are no-ops. */
static __device__ __forceinline__ void krn_pdl_enter(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* krn_pdl_enter with the trigger first when `early` (uniform over the grid): the next kernel's blocks may be
 * scheduled while this one still waits on its predecessor, one kernel more of lookahead. This kernel's wait is
 * unchanged and the next one's wait returns only once this grid has completed and flushed, so the bits are the
 * same; what it costs is the SM slots the next kernel's waiting blocks hold. krn_cuda_pdl_early picks the
 * kernels (MEMRA_CUDA_PDL_EARLY). */
static __device__ __forceinline__ void krn_pdl_enter_early(int early) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (early) {
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
        asm volatile("griddepcontrol.wait;" ::: "memory");
    } else {
        krn_pdl_enter();
    }
#else
    (void)early;
#endif
}

/* fence.acq_rel.gpu: before a relaxed atomic, a release of the thread's (and, through a barrier before it, its
 * block's) earlier writes; after an atomic, an acquire for the reads that follow (the PTX memory model's
 * fence-atomic patterns). Lighter than __threadfence's fence.sc.gpu. */
static __device__ __forceinline__ void krn_fence_acq_rel_gpu(void) { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

/* krn_pdl_enter_early for a kernel that has issued loads of immutable data (weights) first, to overlap them with
 * its predecessor's tail: the CTA fence keeps ptxas from hoisting the wait above those loads (it does so in a
 * single basic block, SASS checked with cuobjdump on sm_90). Costs one MEMBAR.CTA per thread. */
static __device__ __forceinline__ void krn_pdl_enter_early_after_loads(int early) {
    __threadfence_block();
    krn_pdl_enter_early(early);
}
static __device__ __forceinline__ void krn_pdl_enter_after_loads(void) { krn_pdl_enter_early_after_loads(0); }

/* A kernel tuning variable (MEMRA_CUDA_MM_ROWS and the like: benchmark knobs, listed in docs/doors.md),
 * read once per process into *cache (initialize it to KRN_TUNE_UNREAD): its value when it is one of the
 * n allowed integers, 0 when unset. Any other value prints one line on stderr naming the variable and the
 * allowed values, and gives 0 (the default). Thread-safe: a racing first read stores the same value. */
#define KRN_TUNE_UNREAD (-1000000)
int krn_cuda_tune(const char *name, const int *allowed, int n, int *cache);
/* krn_cuda_tune with the default def instead of 0 (unset, or any other value, with its line on stderr). */
int krn_cuda_tune_or(const char *name, const int *allowed, int n, int def, int *cache);

/* Make s's device current on the calling thread for host-side CUDA work on s: *st = its native stream,
 * *prev = the caller's device, to give back with krn_cuda_leave(*prev) once done (kernels/cuda_dispatch.cu).
 * 0, MEMRA_E_INVAL (s is not a CUDA stream) or MEMRA_E_DEVICE, err (may be NULL) saying which; after a
 * failure the caller's device is still current and nothing is to be given back. */
int krn_cuda_enter(dev_stream *s, cudaStream_t *st, int *prev, dev_err *err);
void krn_cuda_leave(int prev);

/* The small kernels that may trigger their successor before their own PDL wait (krn_pdl_enter_early): bits of
 * MEMRA_CUDA_PDL_EARLY (a benchmark knob, 0..31; unset or invalid: KRN_EARLY_DEFAULT, an invalid value with a
 * line on stderr). krn_cuda_pdl_early(bit) is 1 when bit is set. Measured on the 8B bf16 step (docs/cuda-kernels.md,
 * "MEMRA_PDL"): only the combine's gains; the others lose, swiglu's most. */
enum {
    KRN_EARLY_ATT_COMBINE = 1, /* lets the o GEMV's blocks in during attention */
    KRN_EARLY_ROPE = 2,        /* rope_store, or attention with rope inside: the next kernel's blocks during the
                                * q/k/v GEMV */
    KRN_EARLY_NORM = 4,        /* rmsnorm: the q/k/v or gate/up GEMV's blocks during the o or down GEMV */
    KRN_EARLY_SWIGLU = 8,      /* the down GEMV's blocks during gate/up */
    KRN_EARLY_ATT_CHUNK = 16,  /* the combine's blocks during rope_store */
    KRN_EARLY_DEFAULT = KRN_EARLY_ATT_COMBINE
};
int krn_cuda_pdl_early(int bit);

/* Whether the calling thread's next launch gets the PDL attribute: MEMRA_PDL is on for it (krn_cuda_set_pdl) and
 * its previous launch was not a foreign one (krn_cuda_pdl_foreign_launched, called after cuBLAS: those kernels
 * never trigger a successor). Consumes that mark. */
int krn_cuda_pdl_take(void);
void krn_cuda_pdl_foreign_launched(void);

/* Launch k<<<grid, block, smem, st>>>(args) in clusters of `cluster` blocks along x (1: none; else grid.x a
 * multiple of it, sm_90), with the programmatic-stream-serialization attribute when krn_cuda_pdl_take says so.
 * Without either attribute, a plain launch. Errors surface through cudaGetLastError (krn_cuda_launch_check). */
template <typename... KArgs, typename... Args>
static inline void krn_launch_ex(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                                 unsigned cluster, Args... args) {
    cudaLaunchAttribute at[2];
    unsigned na = 0;
    if (cluster > 1) {
        at[na].id = cudaLaunchAttributeClusterDimension;
        at[na].val.clusterDim.x = cluster;
        at[na].val.clusterDim.y = 1;
        at[na].val.clusterDim.z = 1;
        na++;
    }
    if (krn_cuda_pdl_take()) {
        at[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[na].val.programmaticStreamSerializationAllowed = 1;
        na++;
    }
    if (na == 0) {
        k<<<grid, block, smem, st>>>((KArgs)args...);
        return;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = at;
    cfg.numAttrs = na;
    (void)cudaLaunchKernelEx(&cfg, k, (KArgs)args...);
}

/* krn_launch_ex without clusters: every kernel but argmax's. */
template <typename... KArgs, typename... Args>
static inline void krn_launch(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                              Args... args) {
    krn_launch_ex(k, grid, block, smem, st, 1, args...);
}

#endif
