/* Causal GQA decode/prefill attention on CUDA, caches (n_seq, n_ctx, kv_dim) of f32, f16 or bf16 (the
 * kernel is instantiated per cache type; a 16-bit element is widened to f32 as it is loaded, exactly, so
 * the arithmetic below is the same for every type).
 *
 * Split-K flash decoding with a fixed split size: keys [0, pos] of row b are cut into chunks of ck keys
 * (MEMRA_CUDA_ATT_CHUNK, fixed per process). Block (group, chunk c, row b) takes up to ATT_G query heads that
 * share one kv head, so each K row and V element is loaded once for all of them (GQA: 8B has 4 heads per kv
 * head). Its 8 warps own keys t0 + w + 8i and load ATT_KB of them at once, so each phase waits one round trip:
 * scores s = q.k * scale (lanes over head_dim, float4 loads; the heads' butterflies done four at a time, for
 * ATT_KI keys at once) into
 * shared memory; per head m_c = max s, l_c = sum exp(s - m_c) (lane partials over keys in order, butterfly), and
 * o_c = sum_t exp(s_t - m_c) v_t (each warp its keys in order, the 8 warp partials added in a fixed tree; an f32
 * cache's V rows come through shared memory by cp.async, issued with K's loads, so their round trip overlaps the
 * scores and the softmax). A combine kernel then merges the chunks of each (b, h): M = max m_c,
 * out = sum o_c e^(m_c-M) / sum l_c e^(m_c-M).
 * A head's arithmetic does not depend on which heads share its block.
 * When a row's keys fit one chunk (n_ctx <= ck, or pos < ck at run time: short decode contexts) the first
 * kernel writes o/l directly and the combine skips that row; that is the same arithmetic as the combine of
 * one chunk (e^0 = 1 exactly), so every path gives the same bits.
 * Fused merge (a given workspace whose tickets fit, n_split <= MEMRA_CUDA_ATT_FUSE): no combine kernel; each
 * chunk block takes a ticket for its (row, head group) after its partials, and the block that takes the last
 * one merges its heads (att_merge_group: the combine's arithmetic in fewer round trips) and zeroes the ticket.
 * Same operations in the same order: the combine kernel's bits. It saves the combine's launch at every position,
 * but its merge, one block per head group instead of one per head, costs more once rows span chunks (measured:
 * 5 / 19 / 26 us a step slower at 200 / 500 / 900 keys: the merge's reads go through one SM a head group, and more
 * loads in flight made it slower, docs/cuda-kernels.md). Where rows fit one chunk the caller's keys bound (below)
 * skips the merge anyway, so by default the combine kernel merges (MEMRA_CUDA_ATT_FUSE).
 * Keys bound (krn_rope_store.keys, from the pipeline's host positions): the chunks are cut from [0, keys), not
 * [0, n_ctx), so the grid and the workspace's stride shrink and a step whose rows all sit in chunk 0 takes the
 * one-chunk path (no workspace, no merge). Chunk boundaries are the same, and so are the bits. A row at or past
 * the bound (the caller's breach) attends to the chunks below it only: the merge's chunk count is clamped to the
 * grid, so it reads no partial that was not written and every ticket still comes back to zero.
 * Chunk boundaries depend only on key positions, never on the GPU or on n_ctx: deterministic.
 * Workspace (split path only): the caller's (a stage's scratch, krn_attention_ws_async), else one
 * cudaMallocAsync/cudaFreeAsync per call on the caller's stream, ordered by it. Its first KRN_ATT_WS_TICKETS
 * words are the fused merge's tickets (zero between calls: a given workspace comes zeroed, each call leaves them
 * zero); the partials follow.
 * out is of an activation type OT (f32, f16, bf16): both stores of a result (the chunk kernel's for a row of
 * one chunk, the combine's) round the f32 value o / l to OT (krn_act_of); the workspace stays f32. So a 16-bit
 * out holds the f32 out's values rounded to nearest even.
 * Rope inside (krn_cuda_rope_attention_async, B = 1, MEMRA_CUDA_ATT_ROPE): the chunk kernel takes q and the row's
 * k and v as the q/k/v GEMV wrote them. Before its PDL wait each block takes rope's angles, one per thread into
 * shared memory; after it, each warp turns its q heads (and, in the chunk holding the row's position p, the row's
 * k) once its first K loads are issued, takes key p's K and V from registers, and warp 0 of that chunk's first
 * head group stores them into the cache for later steps. Rope's angle and rotation are rope_store's
 * (krn_cuda_rope.cuh), and key p's K and V are rounded to the cache's type as kv_store rounds them, so the bits
 * are those of rope_store then attention. It saves rope_store's launch and its round trip through q and the cache.
 * Shared mutable state: att_fused_calls, att_rope_calls (process-wide, relaxed atomics: counts, ordering
 * nothing). */
#include <math.h>
#include "kernels/cuda/krn_cuda_util.cuh"
#include "kernels/cuda/krn_cuda_rope.cuh"

#define ATT_THREADS 256 /* 8 warps */
#define ATT_WARPS (ATT_THREADS / KRN_WARP)
#define ATT_KB 8 /* keys a warp loads at once (scores and values) */
#define ATT_KI 4 /* keys of a batch whose score butterflies run interleaved (a divisor of ATT_KB; 8 costs the 16-bit
                    * kernel its fourth block an SM) */
#define ATT_G 4  /* query heads per block, at most (att_chunk_kernel's selects and att_warp_sum4_kb take 4) */

/* Four consecutive cache elements as loaded (16-byte aligned for f32, 8-byte for 16-bit types): a float4, or the
 * four 16-bit elements in a uint2, half the registers while a batch of rows is in flight; kv_wide turns them into
 * f32 exactly where they are used. */
template <typename KV> struct kv_raw { typedef uint2 T; };
template <> struct kv_raw<float> { typedef float4 T; };
template <typename KV> static __device__ __forceinline__ typename kv_raw<KV>::T kv_ld4(const KV *p) {
    return __ldg((const typename kv_raw<KV>::T *)p);
}
/* Zero bits: +0.0 in every element, whatever the type. */
template <typename KV> static __device__ __forceinline__ typename kv_raw<KV>::T kv_zero4() {
    return typename kv_raw<KV>::T{};
}
template <typename KV> static __device__ __forceinline__ float4 kv_wide(float4 r) { return r; }
template <typename KV> static __device__ __forceinline__ float4 kv_wide(uint2 u);
template <> __device__ __forceinline__ float4 kv_wide<__half>(uint2 u) {
    const float2 a = __half22float2(*(const __half2 *)&u.x), b = __half22float2(*(const __half2 *)&u.y);
    return make_float4(a.x, a.y, b.x, b.y);
}
template <> __device__ __forceinline__ float4 kv_wide<__nv_bfloat16>(uint2 u) {
    const float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&u.x),
                 b = __bfloat1622float2(*(const __nv_bfloat162 *)&u.y);
    return make_float4(a.x, a.y, b.x, b.y);
}
/* Four f32 values rounded to the cache's type and packed as a load of kv_ld4 gives them (kv_put's rounding: to
 * nearest even), so kv_wide of the result is what attention reads back once they are stored. */
template <typename KV> static __device__ __forceinline__ typename kv_raw<KV>::T kv_pack4(float4 v);
template <> __device__ __forceinline__ float4 kv_pack4<float>(float4 v) { return v; }
template <> __device__ __forceinline__ uint2 kv_pack4<__half>(float4 v) {
    const __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
    return make_uint2(*(const unsigned *)&a, *(const unsigned *)&b);
}
template <> __device__ __forceinline__ uint2 kv_pack4<__nv_bfloat16>(float4 v) {
    const __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
    return make_uint2(*(const unsigned *)&a, *(const unsigned *)&b);
}

/* Rope inside attention (krn_cuda_rope_attention_async, B = 1): the q/k/v GEMV's raw k
 * and v rows and rope's parameters. The chunk kernel then rotates its own q heads and the row's k in registers,
 * uses the row's k and v for key p instead of loading them from the cache, and the chunk holding p (head group 0)
 * stores them there: rope_store's work, without its launch. */
typedef struct att_rope {
    const float *k, *v; /* (kv_dim) each: the row's k and v as the GEMV wrote them */
    int n_rot, neox;
    float freq_base, freq_scale;
} att_rope;

/* The angles rope turns a head's dims by, (sine, cosine) in ang[s * 32 + l] for dim slot s = 4 j + u of lane l
 * (dim 4 l + 128 j + u): normal rope's pair (2i, 2i + 1) in the even slot, neox's pair of each dim (its index below
 * half) in every slot; krn_rope_angle's (rope_store's) bits. One per thread of the block, not per lane, head and
 * pair: each is a precise powf and sincosf, about 700 instructions (taken per head after the wait, they
 * made the call 14 us longer). No loads: taken before the PDL wait. Ends with a barrier. Requires att_rope_fits. */
template <int DPL>
static __device__ __forceinline__ void att_rope_angles(float2 *ang, int hd, int p, const att_rope &r) {
    const int half = r.n_rot / 2;
    for (int t = threadIdx.x; t < 4 * DPL * KRN_WARP; t += ATT_THREADS) {
        const int s = t / KRN_WARP, l = t % KRN_WARP, d0 = 4 * l + 4 * KRN_WARP * (s / 4), d = d0 + s % 4;
        float sn = 0.f, cs = 1.f;
        if ((r.neox || s % 2 == 0) && d < r.n_rot && d0 < hd)
            krn_rope_angle(r.neox ? (d < half ? d : d - half) : d / 2, p, r.n_rot, r.freq_base, r.freq_scale, &sn,
                           &cs);
        ang[t] = make_float2(sn, cs);
    }
    __syncthreads();
}

/* The lane's 4 dims at d0 (a multiple of 4) of a head rotated by att_rope_angles' angles, in place: normal rope
 * pairs (2i, 2i + 1) lie inside the float4; neox pairs (i, i + half) lie in the lane xor half / 4 (DPL 1) or in
 * the lane's other float4 (DPL 2, half = 128). The rotation is krn_rope_rot's: rope_store's bits. Requires
 * att_rope_fits. All lanes must call it (shuffles). */
template <int DPL>
static __device__ __forceinline__ void att_rope4(float4 (&x)[DPL], const float2 *ang, int lane, int hd,
                                                 const att_rope &r) {
    const int half = r.n_rot / 2;
    float4 y[DPL];
#pragma unroll
    for (int j = 0; j < DPL; j++) {
        const int d0 = 4 * lane + 4 * KRN_WARP * j;
        float v[4] = {x[j].x, x[j].y, x[j].z, x[j].w}, o[4] = {v[0], v[1], v[2], v[3]};
        if (!r.neox) {
#pragma unroll
            for (int u = 0; u < 4; u += 2)
                if (d0 + u < r.n_rot && d0 < hd) {
                    const float2 a = ang[(4 * j + u) * KRN_WARP + lane];
                    krn_rope_rot(v[u], v[u + 1], a.x, a.y, &o[u], &o[u + 1]);
                }
        } else {
            float w[4]; /* the partners' values: dims d0 + u +- half */
            if constexpr (DPL == 1) {
                const int nx = half / 4; /* a power of two (att_rope_fits) */
                w[0] = __shfl_xor_sync(0xffffffffu, v[0], nx);
                w[1] = __shfl_xor_sync(0xffffffffu, v[1], nx);
                w[2] = __shfl_xor_sync(0xffffffffu, v[2], nx);
                w[3] = __shfl_xor_sync(0xffffffffu, v[3], nx);
            } else {
                const float4 ot = x[j ^ 1];
                w[0] = ot.x, w[1] = ot.y, w[2] = ot.z, w[3] = ot.w;
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int d = d0 + u;
                if (d < r.n_rot && d0 < hd) {
                    const bool first = d < half;
                    const float2 a = ang[(4 * j + u) * KRN_WARP + lane];
                    float x0, x1;
                    krn_rope_rot(first ? v[u] : w[u], first ? w[u] : v[u], a.x, a.y, &x0, &x1);
                    o[u] = first ? x0 : x1;
                }
            }
        }
        y[j] = make_float4(o[0], o[1], o[2], o[3]);
    }
#pragma unroll
    for (int j = 0; j < DPL; j++)
        x[j] = y[j];
}

/* Rope inside: the batch of rows i0 + 8k (k < ATT_KB) with key p, the chunk's last (L - 1), taken from sub (its
 * K or V as the cache will hold it) where the chunk holds p (own_p), not from the cache it is not yet in. */
template <typename R, int DPL>
static __device__ __forceinline__ void att_put_p(R (&rows)[ATT_KB][DPL], const R (&sub)[DPL], bool own_p, int i0,
                                                 int L) {
#pragma unroll
    for (int k = 0; k < ATT_KB; k++)
        if (own_p && i0 + ATT_WARPS * k == L - 1)
#pragma unroll
            for (int j = 0; j < DPL; j++)
                rows[k][j] = sub[j];
}

/* Row b's position clamped into [0, n_ctx) (the contract: attention clamps pos, kv_store drops the row). */
static __device__ __forceinline__ int att_pos(const int32_t *pos, int b, int n_ctx) {
    const int p = pos[b];
    return p < 0 ? 0 : (p >= n_ctx ? n_ctx - 1 : p);
}

/* Before the PDL wait: the keys [t0, min(t0 + ck, p)) of chunk c of row b (at position p, of sequence sb), K and V,
 * pulled into L2 with prefetch.global.L2 (a hint: no registers, no effect on any value read later), so the scores'
 * and the values' loads after the wait hit L2 instead of HBM. pos and seq are final before the wait (the stage's
 * frame copy wrote them before the walk's first kernel, and no kernel writes them), so the chunk kernel reads them
 * there; rows before p were written by earlier steps or by the predecessor (a prime chunk's own rows): a prefetch
 * of a line being written reads nothing into a result. Key row p, written right now by rope_store (or, rope
 * inside, by this kernel), is skipped. */
template <typename KV>
static __device__ __forceinline__ void att_prefetch(const KV *kc, const KV *vc, int p, int sb, int n_head_kv, int hd,
                                                    int n_ctx, int ck, int c, int kvh) {
    const int t0 = c * ck, t1 = min(t0 + ck, p);
    if (t0 >= t1)
        return;
    const int per_line = 128 / (int)sizeof(KV), kv_dim = n_head_kv * hd;
    const int lines = (hd + per_line - 1) / per_line; /* 128-byte lines per key row */
    const size_t cache0 = (size_t)sb * n_ctx * kv_dim + (size_t)kvh * hd;
    const int n = (t1 - t0) * lines;
    for (int i = threadIdx.x; i < 2 * n; i += blockDim.x) {
        const int j = i < n ? i : i - n;
        const KV *a = (i < n ? kc : vc) + cache0 + (size_t)(t0 + j / lines) * kv_dim + (j % lines) * per_line;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
    }
}

/* Rows i0 + 8k (k < ATT_KB) of a chunk starting at key t0, of L keys, as DPL raw 4-element groups per lane (lane's
 * dims 4*lane + 128*j); rows past L and dims past hd read as zeros. All loads are issued before any is used. */
template <typename KV, int DPL>
static __device__ __forceinline__ void att_load_rows(typename kv_raw<KV>::T (&r)[ATT_KB][DPL], const KV *base, int t0,
                                                     int i0, int L, int kv_dim, int hd, int lane) {
#pragma unroll
    for (int k = 0; k < ATT_KB; k++)
#pragma unroll
        for (int j = 0; j < DPL; j++) {
            const int d = 4 * lane + 4 * KRN_WARP * j, i = i0 + ATT_WARPS * k;
            r[k][j] = i < L && d < hd ? kv_ld4(base + (size_t)(t0 + i) * kv_dim + d) : kv_zero4<KV>();
        }
}

/* att_load_rows of an f32 cache into shared memory instead of registers: the lane's slots
 * st[(k * DPL + j) * 32 + lane] get the same float4s (zeros past L and hd) through cp.async, committed as one group
 * (the caller waits with att_stage_wait). Nothing is held in registers while the rows are in flight, and the lane
 * later reads back only its own slots, so no barrier is needed. */
template <int DPL>
static __device__ __forceinline__ void att_stage_rows(float4 *st, const float *base, int t0, int i0, int L,
                                                      int kv_dim, int hd, int lane) {
#pragma unroll
    for (int k = 0; k < ATT_KB; k++)
#pragma unroll
        for (int j = 0; j < DPL; j++) {
            const int d = 4 * lane + 4 * KRN_WARP * j, i = i0 + ATT_WARPS * k;
            const bool ok = i < L && d < hd;
            const float *src = ok ? base + (size_t)(t0 + i) * kv_dim + d : base; /* size 0: nothing read, zeros */
            const unsigned dst = (unsigned)__cvta_generic_to_shared(st + (k * DPL + j) * KRN_WARP + lane);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0)
                         : "memory");
        }
    asm volatile("cp.async.commit_group;" ::: "memory");
}
/* Waits for the calling thread's cp.async groups: its staged slots are then readable by it. */
static __device__ __forceinline__ void att_stage_wait(void) { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

/* Four butterfly sums for each of KI keys at once: lane l's t[k] is the total of v[k][(l >> 3) & 3] (head 0 in lanes
 * 0-7, 1 in 8-15, 2 in 16-23, 3 in 24-31), 6 shuffles a key instead of 20. Each value's additions are krn_warp_sum's,
 * operand for operand (own + partner's at xor 16, 8, 4, 2, 1), so a head's score has the same bits in any group; the
 * shuffles go level by level across the KI keys, so their dependent chains overlap instead of running key after key
 * (all 8 keys of a batch interleaved: the scores phase of the 8B step's attention 4260 -> 3100 cycles, the
 * same bits; ATT_KI 4 keeps the 16-bit kernel at 64 registers). */
template <int KI>
static __device__ __forceinline__ void att_warp_sum4_kb(const float (&v)[KI][ATT_G], float (&t)[KI], int lane) {
    static_assert(ATT_G == 4, "four heads per butterfly");
    const bool h16 = lane & 16, h8 = lane & 8;
    float k0[KI], k1[KI];
#pragma unroll
    for (int k = 0; k < KI; k++) {
        k0[k] = (h16 ? v[k][2] : v[k][0]) + __shfl_xor_sync(0xffffffffu, h16 ? v[k][0] : v[k][2], 16);
        k1[k] = (h16 ? v[k][3] : v[k][1]) + __shfl_xor_sync(0xffffffffu, h16 ? v[k][1] : v[k][3], 16);
    }
#pragma unroll
    for (int k = 0; k < KI; k++)
        t[k] = (h8 ? k1[k] : k0[k]) + __shfl_xor_sync(0xffffffffu, h8 ? k0[k] : k1[k], 8);
#pragma unroll
    for (int o = 4; o > 0; o >>= 1)
#pragma unroll
        for (int k = 0; k < KI; k++)
            t[k] += __shfl_xor_sync(0xffffffffu, t[k], o);
}

/* The workspace's partials of row b, head h (the chunk kernel writes them, the merge reads them): chunk c's o_c
 * (hd floats), m_c and l_c at att_ws_head(...) + c * (hd + 2). */
template <typename F>
static __device__ __forceinline__ F *att_ws_head(F *ws, int b, int h, int n_head, int n_split, int hd) {
    return ws + ((size_t)b * n_head + h) * n_split * (size_t)(hd + 2);
}

/* The fused merge (att_chunk_kernel's last block of row b's head group h0 .. h0 + gn - 1): the combine kernel's
 * arithmetic, operand for operand, in fewer round trips. Warp g (head g) loads every chunk's m_c and l_c at once
 * (nc <= ATT_FUSE_MAX_NC: eight a lane): M = max m_c (exact in any order); e_c = e^(m_c - M) into es[g][c]; Ls as
 * krn_block_sum forms it in the combine (thread c's fmaf(l_c, e_c, 0), each 32 chunks' butterfly, those added in
 * order from 0; its empty warps add zeros, exactly). Then each (head, dim) pair sums o_c[d] e_c over c in order
 * (the combine's tile walk), NP pairs a thread, NP x MB loads in flight. ws through L2 (ld.global.cg): other blocks
 * of this grid wrote it. */
#define ATT_FUSE_MAX_NC 256 /* chunks the fused merge takes (es is the chunk kernel's sc: ATT_G x 256) */
template <int OT, int NP, int MB>
static __device__ __forceinline__ void att_merge_group(krn_act_e<OT> *__restrict__ out, const float *ws, int p, int b,
                                                       int h0, int gn, int n_head, int hd, int n_split, int ck,
                                                       float (*es)[KRN_CUDA_ATT_CHUNK], float *ls) {
    static_assert(KRN_CUDA_ATT_CHUNK >= ATT_FUSE_MAX_NC && ATT_FUSE_MAX_NC == 8 * KRN_WARP, "es and the lanes' 8");
    const int nc = min(p / ck + 1, n_split), stride = hd + 2; /* n_split: a row past the caller's keys bound */
    const int lane = threadIdx.x % KRN_WARP, g = threadIdx.x / KRN_WARP;
    if (g < gn) {
        const float *w0 = att_ws_head(ws, b, h0 + g, n_head, n_split, hd);
        float mv[8], lv[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int c = lane + KRN_WARP * k;
            mv[k] = c < nc ? __ldcg(w0 + (size_t)c * stride + hd) : -INFINITY;
            lv[k] = c < nc ? __ldcg(w0 + (size_t)c * stride + hd + 1) : 0.0f;
        }
        float M = mv[0];
#pragma unroll
        for (int k = 1; k < 8; k++)
            M = fmaxf(M, mv[k]);
        M = krn_warp_max(M);
        float Ls = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int c = lane + KRN_WARP * k;
            float v = 0.0f;
            if (c < nc) {
                const float e = expf(mv[k] - M);
                es[g][c] = e;
                v = fmaf(lv[k], e, 0.0f);
            }
            Ls += krn_warp_sum(v);
        }
        if (lane == 0)
            ls[g] = Ls;
    }
    __syncthreads(); /* publishes es[][] and ls[] */
    /* NP (head, dim) pairs a thread at once, MB chunks of each per round trip. With rope inside (128 registers):
     * 2 x 16, so the 8B's 4 x 128 pairs at 16 chunks take one round trip, not four (measured: four cost the
     * fused path 27 us a step at 960 keys); the other kernels, held to 64-80 registers, keep 1 x 8 (no spills) */
    const int ne = gn * hd;
    for (int e0 = threadIdx.x; e0 < ne; e0 += NP * ATT_THREADS) {
        const float *w[NP];
        int gg[NP], ee[NP];
#pragma unroll
        for (int i = 0; i < NP; i++) { /* a pair past ne repeats the first's loads and is not stored */
            ee[i] = e0 + i * ATT_THREADS < ne ? e0 + i * ATT_THREADS : e0;
            gg[i] = ee[i] / hd;
            w[i] = att_ws_head(ws, b, h0 + gg[i], n_head, n_split, hd) + (ee[i] - gg[i] * hd);
        }
        float o[NP];
#pragma unroll
        for (int i = 0; i < NP; i++)
            o[i] = 0.0f;
        int c = 0;
        for (; c + MB <= nc; c += MB) {
            float v[NP][MB];
#pragma unroll
            for (int k = 0; k < MB; k++) /* all loads first: one round trip */
#pragma unroll
                for (int i = 0; i < NP; i++)
                    v[i][k] = __ldcg(w[i] + (size_t)(c + k) * stride);
#pragma unroll
            for (int k = 0; k < MB; k++) /* each pair's chunks in order, as the combine adds them */
#pragma unroll
                for (int i = 0; i < NP; i++)
                    o[i] = fmaf(v[i][k], es[gg[i]][c + k], o[i]);
        }
        for (; c < nc; c++)
#pragma unroll
            for (int i = 0; i < NP; i++)
                o[i] = fmaf(__ldcg(w[i] + (size_t)c * stride), es[gg[i]][c], o[i]);
#pragma unroll
        for (int i = 0; i < NP; i++)
            if (i == 0 || e0 + i * ATT_THREADS < ne)
                out[((size_t)b * n_head + h0 + gg[i]) * hd + (ee[i] - gg[i] * hd)] = krn_act_of<OT>(o[i] / ls[gg[i]]);
    }
}

/* Chunk c of row b for the gn (1..ATT_G) query heads of group grp of one kv head (block x = kv head * ngrp +
 * grp; att_chunk_launch's grouping leaves no group empty): every K row and V element is loaded once for the
 * group. Each head's lane partials, butterflies, key order per warp and warp-order sums are those of the head
 * alone, so a head's bits do not depend on the grouping (tests/gpu_kernels.c). */
template <typename KV, int OT, int DPL, bool FUSE, bool ROPE>
__global__ void __launch_bounds__(ATT_THREADS, DPL != 1 ? 0 : ROPE ? 2 : sizeof(KV) == 4 ? (FUSE ? 3 : 0) : 4)
    att_chunk_kernel(krn_act_e<OT> *__restrict__ out, float *__restrict__ ws, const float *__restrict__ q,
                     const KV *__restrict__ kc, const KV *__restrict__ vc, const int32_t *__restrict__ seq,
                     const int32_t *__restrict__ pos, int n_head, int n_head_kv, int hd, int n_ctx, int n_split,
                     float scale, int ck, int pf, int ngrp, int early, unsigned *__restrict__ tk, att_rope r) {
    const int G = n_head / n_head_kv, kvh = blockIdx.x / ngrp, grp = blockIdx.x % ngrp;
    const int gsz = (G + ngrp - 1) / ngrp, h0 = kvh * G + grp * gsz, gn = min(gsz, G - grp * gsz);
    const int c = blockIdx.y, b = blockIdx.z;
    /* p and seq[b] before the wait: step inputs, final here (att_prefetch says why), so the wait is followed by the
     * loads of q and K at once, not by two dependent loads first */
    const int p = att_pos(pos, b, n_ctx), sb = seq[b], t0 = c * ck;
    if (t0 > p)
        return; /* a chunk past the row's position: its slot is free at once, not after the wait (the grid completes
                 * only after chunk 0's blocks, which wait) */
    /* ROPE (B = 1): rope turns q and k by the row's position as given (rope_store's rule), and the row's k and v go
     * into the cache only at a position inside it; the chunk holding that position then takes key p from the
     * registers (own_p), not from the cache, which this kernel is writing */
    const int p_raw = ROPE ? pos[b] : 0;
    const bool own_p = ROPE && p_raw >= 0 && p_raw < n_ctx && c == p_raw / ck;
    if (pf)
        att_prefetch(kc, vc, p, sb, n_head_kv, hd, n_ctx, ck, c, kvh);
    __shared__ float2 ang[ROPE ? 4 * DPL * KRN_WARP : 1]; /* ROPE: rope's angles, before the wait */
    if constexpr (ROPE)
        att_rope_angles<DPL>(ang, hd, p_raw, r);
    krn_pdl_enter_early(early);
    typedef typename kv_raw<KV>::T R;
    /* VST: V's rows go through shared memory (cp.async), their first batch issued with K's loads; f32 at DPL 1 only
     * (16-bit caches are 4-10 % slower with it; at DPL 2 an f32 stage would pass 48 KB of static shared memory).
     * Per warp: its staged V rows (ATT_KB * DPL * 32 R, 4 KB), and over them, once they are used, its value partials
     * (ATT_G x PW float4, 2 KB); without VST the partials only, laid out as before VST (SASS unchanged). */
    constexpr bool VST = DPL == 1 && sizeof(KV) == 4;
    constexpr int PW = VST ? KRN_WARP * DPL : KRN_CUDA_ATT_MAX_HEAD_DIM / 4; /* float4s per head in the partials */
    constexpr int WB = VST ? ATT_KB * DPL * KRN_WARP * (int)sizeof(R) : ATT_G * PW * 16;
    static_assert(!VST || (ATT_G <= ATT_KB && sizeof(R) == 16), "with VST, part[g][d4] is the lane's own V slot k = g");
    __shared__ float sc[ATT_G][KRN_CUDA_ATT_CHUNK], ex[ATT_G][KRN_CUDA_ATT_CHUNK];
    __shared__ __align__(16) unsigned char wbuf[ATT_WARPS][WB];
    __shared__ float l_sh[ATT_G], m_sh[ATT_G];
    const int t1 = min(t0 + ck, p + 1), L = t1 - t0;
    const int Lc = own_p ? L - 1 : L; /* keys read from the cache: key p (the last, L - 1) comes from registers */
    const int kv_dim = n_head_kv * hd;
    const size_t cache0 = (size_t)sb * n_ctx * kv_dim + (size_t)kvh * hd;
    const KV *kb = kc + cache0, *vb = vc + cache0;
    const int lane = threadIdx.x % KRN_WARP, warp = threadIdx.x / KRN_WARP;

    float4 qv[ATT_G][DPL];
#pragma unroll
    for (int g = 0; g < ATT_G; g++)
#pragma unroll
        for (int j = 0; j < DPL; j++) {
            const int d = 4 * lane + 4 * KRN_WARP * j;
            qv[g][j] = g < gn && d < hd ? *(const float4 *)(q + ((size_t)b * n_head + h0 + g) * hd + d)
                                        : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    R ksub[DPL], vsub[DPL]; /* own_p: key p's K and V as the cache will hold them */
    float4 kn[ROPE ? DPL : 1], vn[ROPE ? DPL : 1]; /* own_p: the row's k and v, loaded with q */
    if constexpr (ROPE)
#pragma unroll
        for (int j = 0; j < DPL; j++) {
            const int d = 4 * lane + 4 * KRN_WARP * j;
            kn[j] = own_p && d < hd ? *(const float4 *)(r.k + (size_t)kvh * hd + d) : make_float4(0.f, 0.f, 0.f, 0.f);
            vn[j] = own_p && d < hd ? *(const float4 *)(r.v + (size_t)kvh * hd + d) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    for (int i0 = warp; i0 < L; i0 += ATT_WARPS * ATT_KB) {
        R kr[ATT_KB][DPL];
        att_load_rows<KV, DPL>(kr, kb, t0, i0, Lc, kv_dim, hd, lane);
        if constexpr (VST) /* V's first batch now, into shared memory: its round trip overlaps the scores */
            if (i0 == warp)
                att_stage_rows<DPL>((float4 *)wbuf[warp], vb, t0, i0, Lc, kv_dim, hd, lane);
        if constexpr (ROPE)
            if (i0 == warp) { /* rope once, after the first batch's loads are issued: its arithmetic waits on q's
                               * round trip while theirs runs (before the loop, it and the cache store below would
                               * keep the K loads behind that round trip) */
#pragma unroll
                for (int g = 0; g < ATT_G; g++)
                    att_rope4<DPL>(qv[g], ang, lane, hd, r);
                if (own_p) { /* block-uniform */
                    att_rope4<DPL>(kn, ang, lane, hd, r);
#pragma unroll
                    for (int j = 0; j < DPL; j++) {
                        ksub[j] = kv_pack4<KV>(kn[j]);
                        vsub[j] = kv_pack4<KV>(vn[j]);
                    }
                    if (grp == 0 && warp == 0) /* the cache's row p: read by later steps only (this grid's own K/V
                                                * loads skip it: Lc) */
#pragma unroll
                        for (int j = 0; j < DPL; j++) {
                            const int d = 4 * lane + 4 * KRN_WARP * j;
                            if (d < hd) {
                                *(R *)((KV *)kc + cache0 + (size_t)p * kv_dim + d) = ksub[j];
                                *(R *)((KV *)vc + cache0 + (size_t)p * kv_dim + d) = vsub[j];
                            }
                        }
                }
            }
        if constexpr (ROPE)
            att_put_p<R, DPL>(kr, ksub, own_p, i0, L);
#pragma unroll
        for (int k0 = 0; k0 < ATT_KB; k0 += ATT_KI) { /* ATT_KI keys' butterflies interleaved */
            float s[ATT_KI][ATT_G], t[ATT_KI];
#pragma unroll
            for (int kk = 0; kk < ATT_KI; kk++) {
                const int k = k0 + kk;
                float4 kw[DPL];
#pragma unroll
                for (int j = 0; j < DPL; j++)
                    kw[j] = kv_wide<KV>(kr[k][j]);
#pragma unroll
                for (int g = 0; g < ATT_G; g++) {
                    s[kk][g] = 0.0f;
#pragma unroll
                    for (int j = 0; j < DPL; j++) {
                        s[kk][g] = fmaf(qv[g][j].x, kw[j].x, s[kk][g]);
                        s[kk][g] = fmaf(qv[g][j].y, kw[j].y, s[kk][g]);
                        s[kk][g] = fmaf(qv[g][j].z, kw[j].z, s[kk][g]);
                        s[kk][g] = fmaf(qv[g][j].w, kw[j].w, s[kk][g]);
                    }
                }
            }
            att_warp_sum4_kb<ATT_KI>(s, t, lane);
#pragma unroll
            for (int kk = 0; kk < ATT_KI; kk++) {
                const int i = i0 + ATT_WARPS * (k0 + kk), g = lane >> 3;
                if ((lane & 7) == 0 && g < gn && i < L)
                    sc[g][i] = t[kk] * scale;
            }
        }
    }
    __syncthreads();

    float m[ATT_G]; /* every warp: the heads' maxima (the same lane partials and butterfly in each warp) */
#pragma unroll
    for (int g = 0; g < ATT_G; g++) {
        m[g] = -INFINITY;
        if (g < gn)
            for (int i = lane; i < L; i += KRN_WARP)
                m[g] = fmaxf(m[g], sc[g][i]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) /* krn_warp_max level by level over the heads (-inf for g >= gn stays -inf) */
#pragma unroll
        for (int g = 0; g < ATT_G; g++)
            m[g] = fmaxf(m[g], __shfl_xor_sync(0xffffffffu, m[g], o));
    /* e = exp(s - m) once per (head, key) for the whole block, instead of once per lane in the values' loop:
     * the sums below read the same floats they computed before, so the bits do not change. */
    const int lck = __ffs(ck) - 1; /* ck is 64, 128 or 256: (g, i) by shifts, no division */
    for (int e = threadIdx.x; e < gn << lck; e += ATT_THREADS) {
        const int g = e >> lck, i = e & (ck - 1);
        static_assert(ATT_G == 4, "m is picked among 4 heads");
        if (i < L)
            ex[g][i] = expf(sc[g][i] - (g == 0 ? m[0] : g == 1 ? m[1] : g == 2 ? m[2] : m[3])); /* no local copy of m */
    }
    __syncthreads(); /* publishes ex[][] */
#pragma unroll
    for (int g = 0; g < ATT_G; g++)
        if (warp == g && g < gn) { /* warp g: l of head g, the same lane partials and butterfly as one head */
            float l = 0.0f;
            for (int i = lane; i < L; i += KRN_WARP)
                l += ex[g][i];
            l = krn_warp_sum(l);
            if (lane == 0) {
                l_sh[g] = l;
                m_sh[g] = m[g];
            }
        }
    float4 acc[ATT_G][DPL];
#pragma unroll
    for (int g = 0; g < ATT_G; g++)
#pragma unroll
        for (int j = 0; j < DPL; j++)
            acc[g][j] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int i0 = warp; i0 < L; i0 += ATT_WARPS * ATT_KB) {
        const R *vst = (const R *)wbuf[warp];
        R vr[VST ? 1 : ATT_KB][DPL];
        if constexpr (VST) {
            if (i0 != warp) /* later batches (chunks of more than ATT_WARPS * ATT_KB keys): staged now */
                att_stage_rows<DPL>((float4 *)wbuf[warp], vb, t0, i0, Lc, kv_dim, hd, lane);
            att_stage_wait();
            if constexpr (ROPE) /* key p's V into the lane's own slot (it reads back only its own: no barrier) */
#pragma unroll
                for (int k = 0; k < ATT_KB; k++)
                    if (own_p && i0 + ATT_WARPS * k == L - 1)
#pragma unroll
                        for (int j = 0; j < DPL; j++)
                            ((R *)wbuf[warp])[(k * DPL + j) * KRN_WARP + lane] = vsub[j];
        } else {
            att_load_rows<KV, DPL>(vr, vb, t0, i0, Lc, kv_dim, hd, lane);
            if constexpr (ROPE)
                att_put_p<R, DPL>(vr, vsub, own_p, i0, L);
        }
#pragma unroll
        for (int k = 0; k < ATT_KB; k++) {
            const int i = i0 + ATT_WARPS * k;
            if (i < L) {
                float4 vw[DPL];
#pragma unroll
                for (int j = 0; j < DPL; j++)
                    vw[j] = kv_wide<KV>(VST ? vst[(k * DPL + j) * KRN_WARP + lane] : vr[VST ? 0 : k][j]);
#pragma unroll
                for (int g = 0; g < ATT_G; g++)
                    if (g < gn) {
                        const float e = ex[g][i];
#pragma unroll
                        for (int j = 0; j < DPL; j++) {
                            acc[g][j].x = fmaf(e, vw[j].x, acc[g][j].x);
                            acc[g][j].y = fmaf(e, vw[j].y, acc[g][j].y);
                            acc[g][j].z = fmaf(e, vw[j].z, acc[g][j].z);
                            acc[g][j].w = fmaf(e, vw[j].w, acc[g][j].w);
                        }
                    }
            }
        }
    }
    float4(*part)[PW] = (float4(*)[PW])wbuf[warp]; /* [ATT_G][PW]: with VST, part[g][d4] is the lane's V slot k = g */
#pragma unroll
    for (int g = 0; g < ATT_G; g++)
#pragma unroll
        for (int j = 0; j < DPL; j++) {
            const int d4 = lane + KRN_WARP * j;
            if (g < gn && 4 * d4 < hd)
                part[g][d4] = acc[g][j]; /* over the lane's own V slots only, read above (program order) */
        }
    __syncthreads(); /* publishes every warp's part, l_sh[] and m_sh[] */
    /* ceil(2^32 / hd): e * hd_inv / 2^32 = e / hd + e * (hd_inv * hd - 2^32) / (hd * 2^32), an excess below 1 / hd
     * while e * (hd_inv * hd - 2^32) < 2^32 (here < 2^10 * 2^8), so __umulhi(e, hd_inv) == e / hd */
    const unsigned hd_inv = 0xffffffffu / (unsigned)hd + 1u;
#pragma unroll 2 /* two (head, dim) pairs a thread at head_dim 128: their loads and stores overlap */
    for (int e = threadIdx.x; e < gn * hd; e += ATT_THREADS) {
        const int g = (int)__umulhi((unsigned)e, hd_inv), d = e - g * hd, h = h0 + g; /* e / hd (e < 2^10) */
        const float *pw = (const float *)wbuf[0] + g * 4 * PW + d;
        const int st = WB / 4; /* one warp's buffer in floats */
        const float o = ((pw[0] + pw[st]) + (pw[2 * st] + pw[3 * st])) +
                        ((pw[4 * st] + pw[5 * st]) + (pw[6 * st] + pw[7 * st]));
        const float l = l_sh[g];
        if (ws == NULL || p < ck) {
            out[((size_t)b * n_head + h) * hd + d] = krn_act_of<OT>(o / l);
        } else {
            float *w = att_ws_head(ws, b, h, n_head, n_split, hd) + (size_t)c * (hd + 2);
            w[d] = o;
            if (d == 0) {
                w[hd] = m_sh[g];
                w[hd + 1] = l;
            }
        }
    }
    if (!FUSE || p < ck)
        return; /* the combine kernel merges (or this block wrote out itself) */
    /* Fused merge: the ticket of (row b, this head group) counts the row's p / ck + 1 chunk blocks (at most the
     * grid's n_split: a row past the caller's keys bound still takes every ticket, so the last one zeroes it) */
    __shared__ unsigned last;
    __shared__ float ls[ATT_G];
    __syncthreads(); /* every thread's partial stores are issued before thread 0's fence */
    if (threadIdx.x == 0) {
        unsigned *t = tk + (size_t)b * gridDim.x + blockIdx.x;
        krn_fence_acq_rel_gpu(); /* release: this block's partials are visible device-wide before its ticket */
        last = atomicAdd(t, 1u) == (unsigned)min(p / ck, n_split - 1);
        if (last) {
            *t = 0; /* all the row's chunk blocks have taken theirs; the next call's come after this grid (stream
                     * order, or the PDL wait of every kernel in between) */
            krn_fence_acq_rel_gpu(); /* acquire: the other blocks' partials are read after their tickets */
        }
    }
    __syncthreads(); /* publishes last; sc is free (its last reads were above) */
    if (!last)
        return;
    att_merge_group<OT, ROPE ? 2 : 1, ROPE ? 16 : 8>(out, ws, p, b, h0, gn, n_head, hd, n_split, ck, sc, ls);
}

/* Merge the chunks 0 .. pos[b]/ck of (b = blockIdx.y, h = blockIdx.x): M = max m_c (block max, exact);
 * Ls = sum_c l_c e^(m_c - M) as thread partials over c = tid, tid + 256, ... in order, then krn_block_sum's
 * fixed order; out[d] = sum_c o_c[d] e^(m_c - M) / Ls, chunks in order, thread d owning dim d. The o_c come
 * through shared memory a tile of ATT_TILE floats at a time (every thread's ATT_TILE / 256 loads in flight
 * at once: one round trip per tile, not one per 8 chunks), with e^(m_c - M) computed once per chunk; the
 * floats and their order are those of the one-thread walk, so the bits do not depend on the tiling. */
#define ATT_TILE 4096 /* floats of o_c per combine tile (16 KB): 32 chunks of head_dim 128 */
template <int OT>
__global__ void __launch_bounds__(ATT_THREADS)
    att_combine_kernel(krn_act_e<OT> *__restrict__ out, const float *__restrict__ ws, const int32_t *__restrict__ pos,
                       int n_head, int hd, int n_ctx, int n_split, int ck, int early) {
    static_assert(KRN_CUDA_ATT_MAX_HEAD_DIM <= ATT_THREADS, "one dim per thread");
    const int h = blockIdx.x, b = blockIdx.y;
    const int p = att_pos(pos, b, n_ctx); /* a step input, final before the wait (att_prefetch) */
    krn_pdl_enter_early(early); /* even a row of one chunk waits: o's wait covers attention through this grid's */
    __shared__ float red[32], tile[ATT_TILE], es[ATT_THREADS];
    const int nc = min(p / ck + 1, n_split); /* n_split: a row past the caller's keys bound */
    if (nc == 1)
        return; /* the chunk kernel wrote out itself (same bits: e^0 = 1, M = m, Ls = l) */
    const int stride = hd + 2;
    const float *w0 = att_ws_head(ws, b, h, n_head, n_split, hd);
    float M = -INFINITY;
    for (int c = threadIdx.x; c < nc; c += ATT_THREADS)
        M = fmaxf(M, w0[(size_t)c * stride + hd]);
    M = krn_block_max(M, red);
    float Ls = 0.0f;
    for (int c = threadIdx.x; c < nc; c += ATT_THREADS)
        Ls = fmaf(w0[(size_t)c * stride + hd + 1], expf(w0[(size_t)c * stride + hd] - M), Ls);
    Ls = krn_block_sum(Ls, red);
    const int ct = min(ATT_TILE / hd, ATT_THREADS); /* chunks per tile */
    int tc[ATT_TILE / ATT_THREADS], toff[ATT_TILE / ATT_THREADS]; /* tile float e: its chunk, its offset in ws */
#pragma unroll
    for (int k = 0; k < ATT_TILE / ATT_THREADS; k++) {
        const int e = threadIdx.x + k * ATT_THREADS;
        tc[k] = e / hd;
        toff[k] = tc[k] * stride + (e - tc[k] * hd);
    }
    float o = 0.0f;
    for (int c0 = 0; c0 < nc; c0 += ct) {
        const int n = min(ct, nc - c0);
        const float *wt = w0 + (size_t)c0 * stride;
        float v[ATT_TILE / ATT_THREADS];
#pragma unroll
        for (int k = 0; k < ATT_TILE / ATT_THREADS; k++) /* all loads first: one round trip */
            v[k] = tc[k] < n ? wt[toff[k]] : 0.0f;
        const float ec = threadIdx.x < n ? expf(w0[(size_t)(c0 + threadIdx.x) * stride + hd] - M) : 0.0f;
        __syncthreads(); /* the previous tile's reads of tile[] and es[] are done */
#pragma unroll
        for (int k = 0; k < ATT_TILE / ATT_THREADS; k++)
            tile[threadIdx.x + k * ATT_THREADS] = v[k];
        es[threadIdx.x] = ec;
        __syncthreads(); /* publishes tile[] and es[] */
        if (threadIdx.x < hd)
            for (int cc = 0; cc < n; cc++)
                o = fmaf(tile[cc * hd + threadIdx.x], es[cc], o);
    }
    if (threadIdx.x < hd)
        out[((size_t)b * n_head + h) * hd + threadIdx.x] = krn_act_of<OT>(o / Ls);
}

static uint64_t att_fused_calls = 0; /* krn_cuda_attention_fused_count */
extern "C" uint64_t krn_cuda_attention_fused_count(void) {
    return __atomic_load_n(&att_fused_calls, __ATOMIC_RELAXED);
}

/* MEMRA_CUDA_NO_ATT_PREFETCH=1: no L2 prefetch before the PDL wait (the A/B knob; same bits either way). */
static int att_pf(void) {
    static int off = KRN_TUNE_UNREAD;
    static const int allowed[] = {0, 1};
    return !krn_cuda_tune("MEMRA_CUDA_NO_ATT_PREFETCH", allowed, 2, &off);
}

/* MEMRA_CUDA_ATT_FUSE: the fused merge (no combine kernel) when the call's chunk count n_split (of its keys bound,
 * else of n_ctx) is at most this (0: never); unset: KRN_CUDA_ATT_FUSE_DEFAULT (0), with rope inside the chunk kernel
 * or not. A merge in one block per (row, head group) reads all of its heads' partials alone, so once rows span
 * chunks the combine kernel's wider grid (a block per head, not per group of up to 4) wins (docs/cuda-kernels.md). */
static int att_fuse(void) {
    static int cache = KRN_TUNE_UNREAD;
    static const int allowed[] = {0, 16, 64, 256};
    return krn_cuda_tune_or("MEMRA_CUDA_ATT_FUSE", allowed, 4, KRN_CUDA_ATT_FUSE_DEFAULT, &cache);
}

static_assert(KRN_ATT_WS_TICKETS % 4 == 0, "the partials after the tickets stay 16-byte aligned");
static_assert(KRN_CUDA_ATT_MIN_CHUNK == 64, "krn_attention_ws_bytes (kernels/krn.c) sizes for 64-key chunks");

/* MEMRA_CUDA_ATT_CHUNK: keys per split (64, 128, 256; unset: KRN_CUDA_ATT_CHUNK_DEFAULT). Fixed for the
 * process, so a row's bits depend on neither the GPU, n_ctx nor the stage, only on this setting. */
static int att_chunk(void) {
    static int cache = KRN_TUNE_UNREAD;
    static const int allowed[] = {64, 128, 256};
    const int v = krn_cuda_tune("MEMRA_CUDA_ATT_CHUNK", allowed, 3, &cache);
    return v ? v : KRN_CUDA_ATT_CHUNK_DEFAULT;
}

extern "C" int krn_cuda_attention_async(void *cuda_stream, float *out, const float *q, const krn_kv_cache *c,
                                        const int32_t *seq, const int32_t *pos, int B, int n_head, int n_head_kv,
                                        int head_dim, int n_ctx, dev_err *err) {
    return krn_cuda_attention_ws_async(cuda_stream, out, KRN_F32, q, c, seq, pos, B, n_head, n_head_kv, head_dim,
                                       n_ctx, NULL, 0, err);
}

/* att_chunk_kernel for the cache's element type, out of type OT, DPL float4s of head_dim per lane, the merge fused
 * (tk: the tickets) or not (NULL). Two instantiations, so the merge's registers never cost the unfused kernel
 * occupancy; the fused one at DPL 1 is held to the unfused one's registers by its __launch_bounds__ (3 blocks an SM
 * over an f32 cache, 4 over 16-bit: 80 and 64 registers, and 2 and 8 spill instructions, sm_90 ptxas of CUDA 13).
 * With rope inside (ROPE) both are held to 2 blocks an SM at DPL 1, up to 128 registers and no spills (the fused
 * one held to 80 spills and costs 74 us a step); the 8B grid has 128 blocks, one an SM anyway. */
template <int OT, int DPL, bool FUSE, bool ROPE>
static void att_chunk_launch_r(const krn_kv_cache *c, dim3 grid, cudaStream_t st, void *out, float *ws,
                               const float *q, const int32_t *seq, const int32_t *pos, int n_head, int n_head_kv,
                               int hd, int n_ctx, int n_split, float scale, int ck, int ngrp, unsigned *tk,
                               const att_rope &r) {
    /* fused: this kernel is attention's last, so it takes the combine's early trigger (the o GEMV's blocks in);
     * with rope inside it waits on the q/k/v GEMV as rope_store did, so it takes rope_store's (an early trigger
     * there would let the next kernel's blocks in during that GEMV: for the fused merge, the o GEMV's, taking its
     * SM slots and HBM: the fused merge is 39 us a step slower with rope_store's early bit on) */
    const int early = krn_cuda_pdl_early(ROPE ? KRN_EARLY_ROPE : FUSE ? KRN_EARLY_ATT_COMBINE : KRN_EARLY_ATT_CHUNK);
    if (c->type == KRN_F16)
        krn_launch(att_chunk_kernel<__half, OT, DPL, FUSE, ROPE>, grid, ATT_THREADS, 0, st, out, ws, q,
            (const __half *)c->k, (const __half *)c->v, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale, ck,
            att_pf(), ngrp, early, tk, r);
    else if (c->type == KRN_BF16)
        krn_launch(att_chunk_kernel<__nv_bfloat16, OT, DPL, FUSE, ROPE>, grid, ATT_THREADS, 0, st, out, ws, q,
            (const __nv_bfloat16 *)c->k, (const __nv_bfloat16 *)c->v, seq, pos, n_head, n_head_kv, hd, n_ctx,
            n_split, scale, ck, att_pf(), ngrp, early, tk, r);
    else
        krn_launch(att_chunk_kernel<float, OT, DPL, FUSE, ROPE>, grid, ATT_THREADS, 0, st, out, ws, q,
            (const float *)c->k, (const float *)c->v, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale, ck,
            att_pf(), ngrp, early, tk, r);
}
template <int OT, int DPL, bool FUSE>
static void att_chunk_launch_f(const krn_kv_cache *c, dim3 grid, cudaStream_t st, void *out, float *ws,
                               const float *q, const int32_t *seq, const int32_t *pos, int n_head, int n_head_kv,
                               int hd, int n_ctx, int n_split, float scale, int ck, int ngrp, unsigned *tk,
                               const att_rope *r) {
    if (r)
        att_chunk_launch_r<OT, DPL, FUSE, true>(c, grid, st, out, ws, q, seq, pos, n_head, n_head_kv, hd, n_ctx,
                                                n_split, scale, ck, ngrp, tk, *r);
    else
        att_chunk_launch_r<OT, DPL, FUSE, false>(c, grid, st, out, ws, q, seq, pos, n_head, n_head_kv, hd, n_ctx,
                                                 n_split, scale, ck, ngrp, tk, att_rope{});
}
template <int OT, int DPL>
static void att_chunk_launch_d(const krn_kv_cache *c, dim3 grid, cudaStream_t st, void *out, float *ws,
                               const float *q, const int32_t *seq, const int32_t *pos, int n_head, int n_head_kv,
                               int hd, int n_ctx, int n_split, float scale, int ck, int ngrp, unsigned *tk,
                               const att_rope *r) {
    if (tk)
        att_chunk_launch_f<OT, DPL, true>(c, grid, st, out, ws, q, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split,
                                          scale, ck, ngrp, tk, r);
    else
        att_chunk_launch_f<OT, DPL, false>(c, grid, st, out, ws, q, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split,
                                           scale, ck, ngrp, NULL, r);
}

/* att_chunk_kernel for the cache's element type, out of type OT */
template <int OT>
static void att_chunk_launch_t(const krn_kv_cache *c, dim3 grid, cudaStream_t st, void *out, float *ws,
                               const float *q, const int32_t *seq, const int32_t *pos, int n_head, int n_head_kv,
                               int hd, int n_ctx, int n_split, float scale, int ck, int ngrp, unsigned *tk,
                               const att_rope *r) {
    if (hd <= 4 * KRN_WARP)
        att_chunk_launch_d<OT, 1>(c, grid, st, out, ws, q, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale, ck,
                                  ngrp, tk, r);
    else
        att_chunk_launch_d<OT, 2>(c, grid, st, out, ws, q, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale, ck,
                                  ngrp, tk, r);
}

/* att_chunk_kernel for out's type over the grid (kv head x group, chunk, row): ceil(G / ATT_G) groups of a kv
 * head's G query heads, as even as they come (8B: G = 4, one group; 70B: G = 8, two of 4; G = 6: two of 3). */
static void att_chunk_launch(const krn_kv_cache *c, int B, cudaStream_t st, void *out, int out_t, float *ws,
                             const float *q, const int32_t *seq, const int32_t *pos, int n_head, int n_head_kv,
                             int hd, int n_ctx, int n_split, float scale, int ck, unsigned *tk,
                             const att_rope *r) {
    const int G = n_head / n_head_kv, ngrp = (G + ATT_G - 1) / ATT_G;
    const dim3 grid((unsigned)(n_head_kv * ngrp), (unsigned)n_split, (unsigned)B);
    if (out_t == KRN_F16)
        att_chunk_launch_t<KRN_F16>(c, grid, st, out, ws, q, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale,
                                    ck, ngrp, tk, r);
    else if (out_t == KRN_BF16)
        att_chunk_launch_t<KRN_BF16>(c, grid, st, out, ws, q, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale,
                                     ck, ngrp, tk, r);
    else
        att_chunk_launch_t<KRN_F32>(c, grid, st, out, ws, q, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale,
                                    ck, ngrp, tk, r);
}

/* att_combine_kernel for out's type */
static void att_combine_launch(int out_t, dim3 grid, cudaStream_t st, void *out, const float *ws, const int32_t *pos,
                               int n_head, int hd, int n_ctx, int n_split, int ck) {
    const int early = krn_cuda_pdl_early(KRN_EARLY_ATT_COMBINE);
    if (out_t == KRN_F16)
        krn_launch(att_combine_kernel<KRN_F16>, grid, ATT_THREADS, 0, st, out, ws, pos, n_head, hd, n_ctx, n_split,
                   ck, early);
    else if (out_t == KRN_BF16)
        krn_launch(att_combine_kernel<KRN_BF16>, grid, ATT_THREADS, 0, st, out, ws, pos, n_head, hd, n_ctx, n_split,
                   ck, early);
    else
        krn_launch(att_combine_kernel<KRN_F32>, grid, ATT_THREADS, 0, st, out, ws, pos, n_head, hd, n_ctx, n_split,
                   ck, early);
}

/* krn_cuda_attention_ws_async, with rope's work fused in when r is given (krn_cuda_rope_attention_async). */
static int att_run(void *cuda_stream, void *out, int out_t, const float *q, const krn_kv_cache *c, const int32_t *seq,
                   const int32_t *pos, int B, int n_head, int n_head_kv, int head_dim, int n_ctx, int keys,
                   float *given, size_t given_bytes, const att_rope *r, dev_err *err) {
    if (B < 0 || n_head <= 0 || n_head_kv <= 0 || n_head % n_head_kv != 0 || n_ctx <= 0)
        return dev_err_set(err, MEMRA_E_INVAL,
                           "krn_cuda_attention: B=%d n_head=%d n_head_kv=%d n_ctx=%d (need B >= 0, n_ctx > 0, "
                           "n_head a positive multiple of n_head_kv)", B, n_head, n_head_kv, n_ctx);
    if (head_dim <= 0 || head_dim % 4 != 0 || head_dim > KRN_CUDA_ATT_MAX_HEAD_DIM)
        return dev_err_set(err, MEMRA_E_INVAL,
                           "krn_cuda_attention: head_dim=%d (allowed: a multiple of 4 in 4..%d)", head_dim,
                           KRN_CUDA_ATT_MAX_HEAD_DIM);
    if (B == 0)
        return 0;
    if (!out || !q || !c || !c->k || !c->v || !seq || !pos)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_attention: NULL pointer argument");
    if (!krn_kv_type_ok(c->type))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_attention: cache type %d (allowed: f32, f16, bf16)",
                           c->type);
    if (!krn_act_type_ok(out_t) || !krn_cuda_aligned(out, (unsigned)krn_act_bytes(out_t)))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_attention: out type %d at %p (allowed: f32, f16, bf16, out "
                           "aligned to its element)", out_t, out);
    if (!krn_act_out_ok(out, out_t, q, (size_t)B * n_head * head_dim)) /* out is written while other blocks read q */
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_attention: a 16-bit out must not overlap q (an f32 out may be "
                           "q)");
    if (!krn_cuda_aligned(q, 16) || !krn_cuda_aligned(c->k, 16) || !krn_cuda_aligned(c->v, 16))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_attention: q and the caches must be 16-byte aligned");
    if (B > 65535 || n_head > 65535)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_attention: B=%d n_head=%d (at most 65535 each)", B, n_head);
    cudaStream_t st = (cudaStream_t)cuda_stream;
    const float scale = 1.0f / sqrtf((float)head_dim);
    if (keys < 0 || keys > n_ctx)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_attention: keys=%d (allowed: 0, or a bound on the rows' "
                           "positions in 1..n_ctx=%d)", keys, n_ctx);
    /* the chunks a row can reach: of the caller's bound on the positions, else of the cache (the layout's n_ctx
     * stays the cache's either way; only the grid and the workspace's stride shrink) */
    const int ck = att_chunk(), span = keys > 0 ? keys : n_ctx, n_split = (span + ck - 1) / ck;
    if (n_split > 65535) /* the chunk is a grid dimension of at most 65535 */
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_attention: %d keys (n_ctx %d, keys %d) are %d chunks of %d "
                           "(at most 65535)", span, n_ctx, keys, n_split, ck);
    if (n_split == 1) {
        att_chunk_launch(c, B, st, out, out_t, NULL, q, seq, pos, n_head, n_head_kv, head_dim, n_ctx, 1, scale, ck,
                         NULL, r);
        return krn_cuda_launch_check(err, "krn_cuda_attention (att_chunk_kernel)");
    }
    float *ws = NULL;
    const size_t ws_bytes = krn_attention_ws_split_bytes(B, n_head, head_dim, n_split);
    const int own = !(given && given_bytes >= ws_bytes); /* the caller's (a stage's scratch), or one per call */
    /* fused merge: only with a given workspace (its tickets come zeroed); one ticket per (row, head group) */
    const int fuse = !own && (size_t)B * n_head <= KRN_ATT_WS_TICKETS && n_split <= att_fuse() &&
                     n_split <= ATT_FUSE_MAX_NC;
    const cudaError_t ce = own ? cudaMallocAsync((void **)&ws, ws_bytes, st) : (ws = given, cudaSuccess);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it so the next launch check does not see it */
        return dev_err_set(err, ce == cudaErrorMemoryAllocation ? MEMRA_E_NOMEM : MEMRA_E_DEVICE,
                           "krn_cuda_attention: cudaMallocAsync(%zu B workspace): %s: %s", ws_bytes,
                           cudaGetErrorName(ce), cudaGetErrorString(ce));
    }
    int rc;
    float *part = ws + KRN_ATT_WS_TICKETS; /* the partials, after the tickets */
    att_chunk_launch(c, B, st, out, out_t, part, q, seq, pos, n_head, n_head_kv, head_dim, n_ctx, n_split, scale,
                     ck, fuse ? (unsigned *)ws : NULL, r);
    rc = krn_cuda_launch_check(err, "krn_cuda_attention (att_chunk_kernel, split)");
    if (rc == 0 && fuse)
        __atomic_fetch_add(&att_fused_calls, 1, __ATOMIC_RELAXED);
    if (rc == 0 && !fuse) {
        att_combine_launch(out_t, dim3((unsigned)n_head, (unsigned)B), st, out, part, pos, n_head, head_dim, n_ctx,
                           n_split, ck);
        rc = krn_cuda_launch_check(err, "krn_cuda_attention (att_combine_kernel)");
    }
    /* ordered by st: the free runs after both kernels (a given workspace is reused by the next call on st,
     * which st orders after these kernels too) */
    const int frc = own ? krn_cuda_call_check(err, cudaFreeAsync(ws, st), "krn_cuda_attention: cudaFreeAsync") : 0;
    return rc ? rc : frc;
}

extern "C" int krn_cuda_attention_ws_async(void *cuda_stream, void *out, int out_t, const float *q,
                                           const krn_kv_cache *c, const int32_t *seq, const int32_t *pos, int B,
                                           int n_head, int n_head_kv, int head_dim, int n_ctx, float *given,
                                           size_t given_bytes, dev_err *err) {
    return att_run(cuda_stream, out, out_t, q, c, seq, pos, B, n_head, n_head_kv, head_dim, n_ctx, 0, given,
                   given_bytes, NULL, err);
}

static uint64_t att_rope_calls = 0; /* krn_cuda_rope_attention_fused_count (relaxed: a count, ordering nothing) */

/* MEMRA_CUDA_ATT_ROPE: 1 (the default) rope inside the attention kernel at B = 1 where att_rope_fits; 0 the two
 * ops (rope_store, then attention). 8B bf16 step, PP-1: 22 us a step less at an 8-token prompt, 58 at
 * 960 keys (each with its merge default; 9 at 8 tokens on a slower H200); the same tokens. */
static int att_rope_door(void) {
    static int cache = KRN_TUNE_UNREAD;
    static const int allowed[] = {0, 1};
    return krn_cuda_tune_or("MEMRA_CUDA_ATT_ROPE", allowed, 2, 1, &cache);
}

/* Whether the chunk kernel can do rs's rope itself: one row (rows of one call may share a sequence, and a row
 * reads the keys the earlier rows store), and pairs att_rope4 reaches: normal rope always (its pairs lie in a
 * lane's float4); neox when a pair's two dims sit in lanes xor n_rot / 8 (a power of two, DPL 1 dims) or in the
 * lane's two float4s (n_rot = head_dim = 256). */
static int att_rope_fits(const krn_rope_store *rs) {
    if (!att_rope_door() || rs->B != 1 || rs->n_rot <= 0 || rs->n_rot % 2 || rs->n_rot > rs->head_dim)
        return 0;
    if (!rs->neox)
        return 1;
    const int nx = rs->n_rot / 8;
    return (rs->head_dim <= 4 * KRN_WARP && rs->n_rot % 8 == 0 && (nx & (nx - 1)) == 0) ||
           (rs->head_dim == 8 * KRN_WARP && rs->n_rot == rs->head_dim);
}

extern "C" int krn_cuda_rope_attention_async(void *cuda_stream, void *out, int out_t, const krn_rope_store *rs,
                                             float *ws, size_t ws_bytes, dev_err *err) {
    if (!rs)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_rope_attention: NULL rope arguments");
    if (!att_rope_fits(rs)) { /* the two ops (a shape att_rope_fits refuses may be one rope_store refuses too) */
        const int rc = krn_cuda_rope_store_async(cuda_stream, rs, err);
        return rc ? rc
                  : att_run(cuda_stream, out, out_t, rs->q, &rs->cache, rs->seq, rs->pos, rs->B, rs->n_head,
                            rs->n_head_kv, rs->head_dim, rs->n_ctx, rs->keys, ws, ws_bytes, NULL, err);
    }
    int rc = krn_cuda_rope_store_check(rs, err); /* rope_store's arguments, rope_store's answers */
    if (rc != 0)
        return rc;
    if (!krn_cuda_aligned(rs->k, 16) || !krn_cuda_aligned(rs->v, 16))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_rope_attention: k and v must be 16-byte aligned");
    const att_rope r = {rs->k, rs->v, rs->n_rot, rs->neox != 0, rs->freq_base, rs->freq_scale}; /* neox: any nonzero */
    rc = att_run(cuda_stream, out, out_t, rs->q, &rs->cache, rs->seq, rs->pos, rs->B, rs->n_head, rs->n_head_kv,
                 rs->head_dim, rs->n_ctx, rs->keys, ws, ws_bytes, &r, err);
    if (rc == 0)
        __atomic_fetch_add(&att_rope_calls, 1, __ATOMIC_RELAXED);
    return rc;
}

extern "C" uint64_t krn_cuda_rope_attention_fused_count(void) {
    return __atomic_load_n(&att_rope_calls, __ATOMIC_RELAXED);
}
