/* Causal GQA decode/prefill attention on CUDA, caches (n_seq, n_ctx, kv_dim) of f32, f16 or bf16 (the
 * kernel is instantiated per cache type; a 16-bit element is widened to f32 as it is loaded, exactly, so
 * the arithmetic below is the same for every type).
 *
 * Split-K flash decoding with a fixed split size: keys [0, pos] of row b are cut into chunks of ck keys
 * (MEMRA_CUDA_ATT_CHUNK, fixed per process); block (chunk c, head h, row b) computes the chunk's scores into
 * shared memory (one warp per key, lanes over head_dim, butterfly sum), its max m_c, p = exp(s - m_c),
 * l_c = sum p (fixed tree) and o_c = sum_t p_t v_t (one thread per output dim, keys in order). A combine
 * kernel then merges the chunks of each (b, h) in chunk order: M = max m_c,
 * out = sum o_c e^(m_c-M) / sum l_c e^(m_c-M).
 * When a row's keys fit one chunk (n_ctx <= ck, or pos < ck at run time: short decode contexts) the first
 * kernel writes o/l directly and the combine skips that row; that is the same arithmetic as the combine of
 * one chunk (e^0 = 1 exactly), so every path gives the same bits.
 * Chunk boundaries depend only on key positions, never on the GPU or on n_ctx: deterministic.
 * Workspace (split path only): the caller's (a stage's scratch, krn_attention_ws_async), else one
 * cudaMallocAsync/cudaFreeAsync per call on the caller's stream, ordered by it.
 * out is of an activation type OT (f32, f16, bf16): both stores of a result (the chunk kernel's for a row of
 * one chunk, the combine's) round the f32 value o / l to OT (krn_act_of); the workspace stays f32. So a 16-bit
 * out holds the f32 out's values rounded to nearest even.
 * Shared mutable state: none. */
#include <math.h>
#include "kernels/cuda/krn_cuda_util.cuh"

#define ATT_THREADS 128 /* v1: 4 warps */
#define ATT_WARPS (ATT_THREADS / KRN_WARP)
#define ATT2_THREADS 256 /* 8 warps */
#define ATT2_WARPS (ATT2_THREADS / KRN_WARP)
#define ATT2_KB 8 /* keys a warp loads at once (scores and values) */
#define ATT_DPL (KRN_CUDA_ATT_MAX_HEAD_DIM / (4 * KRN_WARP)) /* float4s of q per lane */

/* Four consecutive cache elements (16-byte aligned for f32, 8-byte for 16-bit types) and one, as f32. */
static __device__ __forceinline__ float4 kv_ld4(const float *p) { return __ldg((const float4 *)p); }
static __device__ __forceinline__ float4 kv_ld4(const __half *p) {
    const uint2 u = __ldg((const uint2 *)p);
    const float2 a = __half22float2(*(const __half2 *)&u.x), b = __half22float2(*(const __half2 *)&u.y);
    return make_float4(a.x, a.y, b.x, b.y);
}
static __device__ __forceinline__ float4 kv_ld4(const __nv_bfloat16 *p) {
    const uint2 u = __ldg((const uint2 *)p);
    const float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&u.x),
                 b = __bfloat1622float2(*(const __nv_bfloat162 *)&u.y);
    return make_float4(a.x, a.y, b.x, b.y);
}
static __device__ __forceinline__ float kv_ld1(const float *p) { return __ldg(p); }
static __device__ __forceinline__ float kv_ld1(const __half *p) { return __half2float(__ldg(p)); }
static __device__ __forceinline__ float kv_ld1(const __nv_bfloat16 *p) { return __bfloat162float(__ldg(p)); }

/* Row b's position clamped into [0, n_ctx) (the contract: attention clamps pos, kv_store drops the row). */
static __device__ __forceinline__ int att_pos(const int32_t *pos, int b, int n_ctx) {
    const int p = pos[b];
    return p < 0 ? 0 : (p >= n_ctx ? n_ctx - 1 : p);
}

/* Before the PDL wait: the keys [t0, min(t0 + ck, p)) of chunk c of row b, K and V, pulled into L2 with
 * prefetch.global.L2 (a hint: no registers, no effect on any value read later), so the scores' and the
 * values' loads after the wait hit L2 instead of HBM. pos and seq are final here (the stage's frame copy
 * wrote them before the walk's first kernel); rows before p were written by earlier steps or by the
 * predecessor (a prime chunk's own rows): a prefetch of a line being written reads nothing into a result.
 * Key row p, written right now by rope_store, is skipped. */
template <typename KV>
static __device__ __forceinline__ void att_prefetch(const KV *kc, const KV *vc, const int32_t *seq,
                                                    const int32_t *pos, int n_head, int n_head_kv, int hd,
                                                    int n_ctx, int ck, int c, int h, int b) {
    const int p = att_pos(pos, b, n_ctx);
    const int t0 = c * ck, t1 = min(t0 + ck, p);
    if (t0 >= t1)
        return;
    const int per_line = 128 / (int)sizeof(KV), kv_dim = n_head_kv * hd;
    const int lines = (hd + per_line - 1) / per_line; /* 128-byte lines per key row */
    const size_t cache0 = (size_t)seq[b] * n_ctx * kv_dim + (size_t)(h / (n_head / n_head_kv)) * hd;
    const int n = (t1 - t0) * lines;
    for (int i = threadIdx.x; i < 2 * n; i += blockDim.x) {
        const int j = i < n ? i : i - n;
        const KV *a = (i < n ? kc : vc) + cache0 + (size_t)(t0 + j / lines) * kv_dim + (j % lines) * per_line;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
    }
}

/* Chunk c of (b, h): see the file comment. ws == NULL, or the row's only chunk (pos < ck): write out (type OT).
 * Otherwise write o (head_dim floats), m, l at ws + ((b*n_head + h)*n_split + c) * (head_dim + 2). */
template <typename KV, int OT>
__global__ void __launch_bounds__(ATT_THREADS)
    att_chunk_kernel_v1(krn_act_e<OT> *__restrict__ out, float *__restrict__ ws, const float *__restrict__ q,
                     const KV *__restrict__ kc, const KV *__restrict__ vc, const int32_t *__restrict__ seq,
                     const int32_t *__restrict__ pos, int n_head, int n_head_kv, int hd, int n_ctx, int n_split,
                     float scale, int ck, int pf) {
    if (pf)
        att_prefetch(kc, vc, seq, pos, n_head, n_head_kv, hd, n_ctx, ck, blockIdx.x, blockIdx.y, blockIdx.z);
    krn_pdl_enter();
    __shared__ float sc[KRN_CUDA_ATT_CHUNK];
    __shared__ float red[32];
    const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int p = att_pos(pos, b, n_ctx);
    const int t0 = c * ck;
    if (t0 > p)
        return; /* the combine reads only chunks 0 .. p / ck */
    const int t1 = min(t0 + ck, p + 1), L = t1 - t0;
    const int kvh = h / (n_head / n_head_kv), kv_dim = n_head_kv * hd;
    const size_t cache0 = (size_t)seq[b] * n_ctx * kv_dim + (size_t)kvh * hd;
    const KV *kb = kc + cache0, *vb = vc + cache0;
    const float *qh = q + ((size_t)b * n_head + h) * hd;
    const int lane = threadIdx.x % KRN_WARP, warp = threadIdx.x / KRN_WARP;

    /* scores: warp w takes keys t0 + w, t0 + w + 4, ...; lane holds q[4*lane + 128*j ..] */
    float4 qv[ATT_DPL];
#pragma unroll
    for (int j = 0; j < ATT_DPL; j++) {
        const int d = 4 * lane + 4 * KRN_WARP * j;
        qv[j] = d < hd ? *(const float4 *)(qh + d) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll 4 /* 8 keys' loads per warp in flight before the first butterfly (same scores) */
    for (int t = t0 + warp; t < t1; t += 2 * ATT_WARPS) { /* two keys per warp step: loads in flight */
        const int u = t + ATT_WARPS;
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int j = 0; j < ATT_DPL; j++) {
            const int d = 4 * lane + 4 * KRN_WARP * j;
            if (d < hd) {
                const float4 k0 = kv_ld4(kb + (size_t)t * kv_dim + d);
                s0 = fmaf(qv[j].x, k0.x, s0);
                s0 = fmaf(qv[j].y, k0.y, s0);
                s0 = fmaf(qv[j].z, k0.z, s0);
                s0 = fmaf(qv[j].w, k0.w, s0);
                if (u < t1) {
                    const float4 k1 = kv_ld4(kb + (size_t)u * kv_dim + d);
                    s1 = fmaf(qv[j].x, k1.x, s1);
                    s1 = fmaf(qv[j].y, k1.y, s1);
                    s1 = fmaf(qv[j].z, k1.z, s1);
                    s1 = fmaf(qv[j].w, k1.w, s1);
                }
            }
        }
        s0 = krn_warp_sum(s0);
        s1 = krn_warp_sum(s1);
        if (lane == 0) {
            sc[t - t0] = s0 * scale;
            if (u < t1)
                sc[u - t0] = s1 * scale;
        }
    }
    __syncthreads();

    /* softmax pieces: max, p = exp(s - m) in place, l = sum p (fixed order) */
    float m = -INFINITY;
    for (int i = threadIdx.x; i < L; i += ATT_THREADS)
        m = fmaxf(m, sc[i]);
    m = krn_block_max(m, red);
    float l = 0.0f;
    for (int i = threadIdx.x; i < L; i += ATT_THREADS) {
        const float e = expf(sc[i] - m);
        sc[i] = e;
        l += e;
    }
    l = krn_block_sum(l, red); /* its barriers also publish the sc[] writes */

    /* o[d] = sum_t p_t v[t][d], keys in order, 4 independent partial sums merged in a fixed order */
    for (int d = threadIdx.x; d < hd; d += ATT_THREADS) {
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
        int i = 0;
#pragma unroll 4 /* 16 value loads in flight: one L2 round trip per 16 keys, not per 4 (same sums) */
        for (; i + 3 < L; i += 4) {
            const KV *vr = vb + (size_t)(t0 + i) * kv_dim + d;
            const float v0 = kv_ld1(vr), v1 = kv_ld1(vr + kv_dim), v2 = kv_ld1(vr + 2 * (size_t)kv_dim),
                        v3 = kv_ld1(vr + 3 * (size_t)kv_dim);
            a0 = fmaf(sc[i], v0, a0);
            a1 = fmaf(sc[i + 1], v1, a1);
            a2 = fmaf(sc[i + 2], v2, a2);
            a3 = fmaf(sc[i + 3], v3, a3);
        }
        for (; i < L; i++)
            a0 = fmaf(sc[i], kv_ld1(vb + (size_t)(t0 + i) * kv_dim + d), a0);
        const float o = (a0 + a1) + (a2 + a3);
        if (ws == NULL || p < ck) { /* the only chunk: the combine of one chunk, done here */
            out[((size_t)b * n_head + h) * hd + d] = krn_act_of<OT>(o / l);
        } else {
            float *w = ws + (((size_t)b * n_head + h) * n_split + c) * (size_t)(hd + 2);
            w[d] = o;
            if (d == 0) {
                w[hd] = m;
                w[hd + 1] = l;
            }
        }
    }
}

/* Merge the chunks 0 .. pos[b]/ck of (b = blockIdx.y, h = blockIdx.x) in chunk order; out of type OT. */
template <int OT>
__global__ void __launch_bounds__(ATT_THREADS)
    att_combine_kernel_v1(krn_act_e<OT> *__restrict__ out, const float *__restrict__ ws, const int32_t *__restrict__ pos,
                       int n_head, int hd, int n_ctx, int n_split, int ck) {
    krn_pdl_enter();
    const int h = blockIdx.x, b = blockIdx.y;
    const int p = att_pos(pos, b, n_ctx);
    const int nc = p / ck + 1;
    if (nc == 1)
        return; /* the chunk kernel wrote out itself (same bits: e^0 = 1, M = m, Ls = l) */
    const size_t stride = (size_t)(hd + 2);
    const float *w0 = ws + ((size_t)b * n_head + h) * n_split * stride;
    float M = -INFINITY;
    for (int c = 0; c < nc; c++)
        M = fmaxf(M, w0[c * stride + hd]);
    float Ls = 0.0f;
    for (int c = 0; c < nc; c++)
        Ls = fmaf(w0[c * stride + hd + 1], expf(w0[c * stride + hd] - M), Ls);
    for (int d = threadIdx.x; d < hd; d += ATT_THREADS) {
        float o = 0.0f;
        for (int c = 0; c < nc; c++)
            o = fmaf(w0[c * stride + d], expf(w0[c * stride + hd] - M), o);
        out[((size_t)b * n_head + h) * hd + d] = krn_act_of<OT>(o / Ls);
    }
}

/* Chunk c of (b, h), 8 warps, every load phase one round trip: warp w owns keys t0 + w + 8i.
 * 1. scores: the warp loads ATT2_KB of its keys' K rows at once (lanes over head_dim, float4), then one
 *    butterfly per key; s_t = dot * scale into shared memory. Barrier.
 * 2. every warp takes m = max s_t itself (exact: max has no order) and p_t = expf(s_t - m) for its own keys
 *    as it needs them; warp 0 also l = sum p_t (lane partials over t0 + lane + 32i in order, then a
 *    butterfly), the same p_t bits every warp uses.
 * 3. values: the warp loads ATT2_KB of its keys' V rows at once and adds p_t v_t per dim (its keys in
 *    order); the 8 warp partials meet in shared memory and are added as ((w0+w1)+(w2+w3))+((w4+w5)+(w6+w7)).
 * ws == NULL or the row's only chunk: out = o / l (type OT); else o, m, l into the workspace as before.
 * DPL: float4s of head_dim per lane (1: head_dim <= 128, 2: <= 256), so short heads keep half the registers
 * (4 blocks per SM instead of 2). */
template <typename KV, int OT, int DPL>
__global__ void __launch_bounds__(ATT2_THREADS)
    att_chunk_kernel(krn_act_e<OT> *__restrict__ out, float *__restrict__ ws, const float *__restrict__ q,
                     const KV *__restrict__ kc, const KV *__restrict__ vc, const int32_t *__restrict__ seq,
                     const int32_t *__restrict__ pos, int n_head, int n_head_kv, int hd, int n_ctx, int n_split,
                     float scale, int ck, int pf) {
    const int h = blockIdx.x, c = blockIdx.y, b = blockIdx.z; /* heads fastest: a kv head's G blocks run together */
    if (pf)
        att_prefetch(kc, vc, seq, pos, n_head, n_head_kv, hd, n_ctx, ck, c, h, b);
    krn_pdl_enter();
    __shared__ float sc[KRN_CUDA_ATT_CHUNK];
    __shared__ float4 part[ATT2_WARPS][KRN_CUDA_ATT_MAX_HEAD_DIM / 4];
    __shared__ float l_sh;
    const int p = att_pos(pos, b, n_ctx);
    const int t0 = c * ck;
    if (t0 > p)
        return; /* the combine reads only chunks 0 .. p / ck */
    const int t1 = min(t0 + ck, p + 1), L = t1 - t0;
    const int kvh = h / (n_head / n_head_kv), kv_dim = n_head_kv * hd;
    const size_t cache0 = (size_t)seq[b] * n_ctx * kv_dim + (size_t)kvh * hd;
    const KV *kb = kc + cache0, *vb = vc + cache0;
    const float *qh = q + ((size_t)b * n_head + h) * hd;
    const int lane = threadIdx.x % KRN_WARP, warp = threadIdx.x / KRN_WARP;

    float4 qv[DPL]; /* lane holds q[4*lane + 128*j ..] */
#pragma unroll
    for (int j = 0; j < DPL; j++) {
        const int d = 4 * lane + 4 * KRN_WARP * j;
        qv[j] = d < hd ? *(const float4 *)(qh + d) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    for (int i0 = warp; i0 < L; i0 += ATT2_WARPS * ATT2_KB) { /* key offsets i0 + 8k, k < ATT2_KB */
        float4 kr[ATT2_KB][DPL];
#pragma unroll
        for (int k = 0; k < ATT2_KB; k++)
#pragma unroll
            for (int j = 0; j < DPL; j++) {
                const int d = 4 * lane + 4 * KRN_WARP * j, i = i0 + ATT2_WARPS * k;
                kr[k][j] = i < L && d < hd ? kv_ld4(kb + (size_t)(t0 + i) * kv_dim + d) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
        for (int k = 0; k < ATT2_KB; k++) {
            float s = 0.0f;
#pragma unroll
            for (int j = 0; j < DPL; j++) {
                s = fmaf(qv[j].x, kr[k][j].x, s);
                s = fmaf(qv[j].y, kr[k][j].y, s);
                s = fmaf(qv[j].z, kr[k][j].z, s);
                s = fmaf(qv[j].w, kr[k][j].w, s);
            }
            s = krn_warp_sum(s);
            const int i = i0 + ATT2_WARPS * k;
            if (lane == 0 && i < L)
                sc[i] = s * scale;
        }
    }
    __syncthreads();

    float m = -INFINITY;
    for (int i = lane; i < L; i += KRN_WARP)
        m = fmaxf(m, sc[i]);
    m = krn_warp_max(m);
    if (warp == 0) {
        float l = 0.0f;
        for (int i = lane; i < L; i += KRN_WARP)
            l += expf(sc[i] - m);
        l = krn_warp_sum(l);
        if (lane == 0)
            l_sh = l;
    }
    float4 acc[DPL];
#pragma unroll
    for (int j = 0; j < DPL; j++)
        acc[j] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int i0 = warp; i0 < L; i0 += ATT2_WARPS * ATT2_KB) {
        float4 vr[ATT2_KB][DPL];
#pragma unroll
        for (int k = 0; k < ATT2_KB; k++)
#pragma unroll
            for (int j = 0; j < DPL; j++) {
                const int d = 4 * lane + 4 * KRN_WARP * j, i = i0 + ATT2_WARPS * k;
                vr[k][j] = i < L && d < hd ? kv_ld4(vb + (size_t)(t0 + i) * kv_dim + d) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
        for (int k = 0; k < ATT2_KB; k++) {
            const int i = i0 + ATT2_WARPS * k;
            if (i < L) {
                const float e = expf(sc[i] - m);
#pragma unroll
                for (int j = 0; j < DPL; j++) {
                    acc[j].x = fmaf(e, vr[k][j].x, acc[j].x);
                    acc[j].y = fmaf(e, vr[k][j].y, acc[j].y);
                    acc[j].z = fmaf(e, vr[k][j].z, acc[j].z);
                    acc[j].w = fmaf(e, vr[k][j].w, acc[j].w);
                }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < DPL; j++) {
        const int d4 = lane + KRN_WARP * j;
        if (4 * d4 < hd)
            part[warp][d4] = acc[j];
    }
    __syncthreads(); /* publishes part[][] and l_sh */
    const float l = l_sh;
    for (int d = threadIdx.x; d < hd; d += ATT2_THREADS) {
        const float *pw = (const float *)part + d; /* warp w's value for d at pw[w * MAX_HEAD_DIM] */
        const int st = KRN_CUDA_ATT_MAX_HEAD_DIM;
        const float o = ((pw[0] + pw[st]) + (pw[2 * st] + pw[3 * st])) +
                        ((pw[4 * st] + pw[5 * st]) + (pw[6 * st] + pw[7 * st]));
        if (ws == NULL || p < ck) { /* the only chunk: the combine of one chunk, done here */
            out[((size_t)b * n_head + h) * hd + d] = krn_act_of<OT>(o / l);
        } else {
            float *w = ws + (((size_t)b * n_head + h) * n_split + c) * (size_t)(hd + 2);
            w[d] = o;
            if (d == 0) {
                w[hd] = m;
                w[hd + 1] = l;
            }
        }
    }
}

#define ATT3_G 4 /* query heads per block at most (grouped kernel) */

/* Four butterfly sums at once: lane l returns the total of value (l >> 3) & 3 (v0 in lanes 0-7, v1 in 8-15, v2 in
 * 16-23, v3 in 24-31) after 6 shuffles instead of 20. Each value's additions are krn_warp_sum's, operand for
 * operand (own + partner's at xor 16, 8, 4, 2, 1), so a head's score has the same bits in any group. */
static __device__ __forceinline__ float att_warp_sum4(float v0, float v1, float v2, float v3, int lane) {
    const bool h16 = lane & 16, h8 = lane & 8;
    float k0 = h16 ? v2 : v0, k1 = h16 ? v3 : v1;
    k0 += __shfl_xor_sync(0xffffffffu, h16 ? v0 : v2, 16);
    k1 += __shfl_xor_sync(0xffffffffu, h16 ? v1 : v3, 16);
    float k = h8 ? k1 : k0;
    k += __shfl_xor_sync(0xffffffffu, h8 ? k0 : k1, 8);
    k += __shfl_xor_sync(0xffffffffu, k, 4);
    k += __shfl_xor_sync(0xffffffffu, k, 2);
    k += __shfl_xor_sync(0xffffffffu, k, 1);
    return k;
}

/* Chunk c of row b for up to ATT3_G query heads that share one kv head (block x = kv head * ngrp + group):
 * every K row and V element is loaded once for the group. Per head the arithmetic is att_chunk_kernel's (the
 * same lane partials, butterflies, key order per warp and warp-order sums), so a head's bits do not depend on
 * the grouping. */
template <typename KV, int OT, int DPL>
__global__ void __launch_bounds__(ATT2_THREADS)
    att_group_kernel(krn_act_e<OT> *__restrict__ out, float *__restrict__ ws, const float *__restrict__ q,
                     const KV *__restrict__ kc, const KV *__restrict__ vc, const int32_t *__restrict__ seq,
                     const int32_t *__restrict__ pos, int n_head, int n_head_kv, int hd, int n_ctx, int n_split,
                     float scale, int ck, int pf, int ngrp) {
    const int G = n_head / n_head_kv, kvh = blockIdx.x / ngrp, grp = blockIdx.x % ngrp;
    const int gsz = (G + ngrp - 1) / ngrp, h0 = kvh * G + grp * gsz, gn = min(gsz, G - grp * gsz);
    const int c = blockIdx.y, b = blockIdx.z;
    if (pf)
        att_prefetch(kc, vc, seq, pos, n_head, n_head_kv, hd, n_ctx, ck, c, h0, b);
    krn_pdl_enter();
    __shared__ float sc[ATT3_G][KRN_CUDA_ATT_CHUNK];
    __shared__ float4 part[ATT2_WARPS][ATT3_G][KRN_CUDA_ATT_MAX_HEAD_DIM / 4];
    __shared__ float l_sh[ATT3_G], m_sh[ATT3_G];
    const int p = att_pos(pos, b, n_ctx);
    const int t0 = c * ck;
    if (t0 > p || gn <= 0)
        return;
    const int t1 = min(t0 + ck, p + 1), L = t1 - t0;
    const int kv_dim = n_head_kv * hd;
    const size_t cache0 = (size_t)seq[b] * n_ctx * kv_dim + (size_t)kvh * hd;
    const KV *kb = kc + cache0, *vb = vc + cache0;
    const int lane = threadIdx.x % KRN_WARP, warp = threadIdx.x / KRN_WARP;

    float4 qv[ATT3_G][DPL];
#pragma unroll
    for (int g = 0; g < ATT3_G; g++)
#pragma unroll
        for (int j = 0; j < DPL; j++) {
            const int d = 4 * lane + 4 * KRN_WARP * j;
            qv[g][j] = g < gn && d < hd ? *(const float4 *)(q + ((size_t)b * n_head + h0 + g) * hd + d)
                                        : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    for (int i0 = warp; i0 < L; i0 += ATT2_WARPS * ATT2_KB) {
        float4 kr[ATT2_KB][DPL];
#pragma unroll
        for (int k = 0; k < ATT2_KB; k++)
#pragma unroll
            for (int j = 0; j < DPL; j++) {
                const int d = 4 * lane + 4 * KRN_WARP * j, i = i0 + ATT2_WARPS * k;
                kr[k][j] = i < L && d < hd ? kv_ld4(kb + (size_t)(t0 + i) * kv_dim + d) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
        for (int k = 0; k < ATT2_KB; k++) {
            float s[ATT3_G];
#pragma unroll
            for (int g = 0; g < ATT3_G; g++) {
                s[g] = 0.0f;
#pragma unroll
                for (int j = 0; j < DPL; j++) {
                    s[g] = fmaf(qv[g][j].x, kr[k][j].x, s[g]);
                    s[g] = fmaf(qv[g][j].y, kr[k][j].y, s[g]);
                    s[g] = fmaf(qv[g][j].z, kr[k][j].z, s[g]);
                    s[g] = fmaf(qv[g][j].w, kr[k][j].w, s[g]);
                }
            }
            const float t = att_warp_sum4(s[0], s[1], s[2], s[3], lane);
            const int i = i0 + ATT2_WARPS * k, g = lane >> 3;
            if ((lane & 7) == 0 && g < gn && i < L)
                sc[g][i] = t * scale;
        }
    }
    __syncthreads();

    float m[ATT3_G];
#pragma unroll
    for (int g = 0; g < ATT3_G; g++) {
        m[g] = -INFINITY;
        if (g < gn) {
            for (int i = lane; i < L; i += KRN_WARP)
                m[g] = fmaxf(m[g], sc[g][i]);
            m[g] = krn_warp_max(m[g]);
        }
    }
#pragma unroll
    for (int g = 0; g < ATT3_G; g++)
        if (warp == g && g < gn) { /* warp g: l of head g, the same lane partials and butterfly as one head */
            float l = 0.0f;
            for (int i = lane; i < L; i += KRN_WARP)
                l += expf(sc[g][i] - m[g]);
            l = krn_warp_sum(l);
            if (lane == 0) {
                l_sh[g] = l;
                m_sh[g] = m[g];
            }
        }
    float4 acc[ATT3_G][DPL];
#pragma unroll
    for (int g = 0; g < ATT3_G; g++)
#pragma unroll
        for (int j = 0; j < DPL; j++)
            acc[g][j] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int i0 = warp; i0 < L; i0 += ATT2_WARPS * ATT2_KB) {
        float4 vr[ATT2_KB][DPL];
#pragma unroll
        for (int k = 0; k < ATT2_KB; k++)
#pragma unroll
            for (int j = 0; j < DPL; j++) {
                const int d = 4 * lane + 4 * KRN_WARP * j, i = i0 + ATT2_WARPS * k;
                vr[k][j] = i < L && d < hd ? kv_ld4(vb + (size_t)(t0 + i) * kv_dim + d) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
        for (int k = 0; k < ATT2_KB; k++) {
            const int i = i0 + ATT2_WARPS * k;
            if (i < L) {
#pragma unroll
                for (int g = 0; g < ATT3_G; g++)
                    if (g < gn) {
                        const float e = expf(sc[g][i] - m[g]);
#pragma unroll
                        for (int j = 0; j < DPL; j++) {
                            acc[g][j].x = fmaf(e, vr[k][j].x, acc[g][j].x);
                            acc[g][j].y = fmaf(e, vr[k][j].y, acc[g][j].y);
                            acc[g][j].z = fmaf(e, vr[k][j].z, acc[g][j].z);
                            acc[g][j].w = fmaf(e, vr[k][j].w, acc[g][j].w);
                        }
                    }
            }
        }
    }
#pragma unroll
    for (int g = 0; g < ATT3_G; g++)
#pragma unroll
        for (int j = 0; j < DPL; j++) {
            const int d4 = lane + KRN_WARP * j;
            if (g < gn && 4 * d4 < hd)
                part[warp][g][d4] = acc[g][j];
        }
    __syncthreads(); /* publishes part[][][], l_sh[] and m_sh[] */
    for (int e = threadIdx.x; e < gn * hd; e += ATT2_THREADS) {
        const int g = e / hd, d = e - g * hd, h = h0 + g;
        const float *pw = (const float *)part + g * KRN_CUDA_ATT_MAX_HEAD_DIM + d;
        const int st = ATT3_G * KRN_CUDA_ATT_MAX_HEAD_DIM; /* one warp's part[] in floats */
        const float o = ((pw[0] + pw[st]) + (pw[2 * st] + pw[3 * st])) +
                        ((pw[4 * st] + pw[5 * st]) + (pw[6 * st] + pw[7 * st]));
        const float l = l_sh[g];
        if (ws == NULL || p < ck) {
            out[((size_t)b * n_head + h) * hd + d] = krn_act_of<OT>(o / l);
        } else {
            float *w = ws + (((size_t)b * n_head + h) * n_split + c) * (size_t)(hd + 2);
            w[d] = o;
            if (d == 0) {
                w[hd] = m_sh[g];
                w[hd + 1] = l;
            }
        }
    }
}

/* MEMRA_CUDA_ATT_GROUP=1: the grouped kernel (temporary A/B knob; same bits per head as att_chunk_kernel). */
static int att_group(void) {
    static int v = KRN_TUNE_UNREAD;
    static const int allowed[] = {0, 1};
    return krn_cuda_tune("MEMRA_CUDA_ATT_GROUP", allowed, 2, &v);
}

/* Merge the chunks 0 .. pos[b]/ck of (b = blockIdx.y, h = blockIdx.x): M = max m_c (block max, exact);
 * Ls = sum_c l_c e^(m_c - M) as thread partials over c = tid, tid + 256, ... in order, then krn_block_sum's
 * fixed order; out[d] = sum_c o_c[d] e^(m_c - M) / Ls, chunks in order, one thread per d (loads of 8 chunks
 * in flight). Out of type OT. */
template <int OT>
__global__ void __launch_bounds__(ATT2_THREADS)
    att_combine_kernel(krn_act_e<OT> *__restrict__ out, const float *__restrict__ ws, const int32_t *__restrict__ pos,
                       int n_head, int hd, int n_ctx, int n_split, int ck) {
    krn_pdl_enter();
    __shared__ float red[32];
    const int h = blockIdx.x, b = blockIdx.y;
    const int p = att_pos(pos, b, n_ctx);
    const int nc = p / ck + 1;
    if (nc == 1)
        return; /* the chunk kernel wrote out itself (same bits: e^0 = 1, M = m, Ls = l) */
    const size_t stride = (size_t)(hd + 2);
    const float *w0 = ws + ((size_t)b * n_head + h) * n_split * stride;
    float M = -INFINITY;
    for (int c = threadIdx.x; c < nc; c += ATT2_THREADS)
        M = fmaxf(M, w0[c * stride + hd]);
    M = krn_block_max(M, red);
    float Ls = 0.0f;
    for (int c = threadIdx.x; c < nc; c += ATT2_THREADS)
        Ls = fmaf(w0[c * stride + hd + 1], expf(w0[c * stride + hd] - M), Ls);
    Ls = krn_block_sum(Ls, red);
    for (int d = threadIdx.x; d < hd; d += ATT2_THREADS) {
        float o = 0.0f;
#pragma unroll 8
        for (int c = 0; c < nc; c++)
            o = fmaf(w0[c * stride + d], expf(w0[c * stride + hd] - M), o);
        out[((size_t)b * n_head + h) * hd + d] = krn_act_of<OT>(o / Ls);
    }
}

/* MEMRA_CUDA_ATT_V1=1: the previous kernels (temporary A/B knob; same contract, other bits). */
static int att_v1(void) {
    static int v = KRN_TUNE_UNREAD;
    static const int allowed[] = {0, 1};
    return krn_cuda_tune("MEMRA_CUDA_ATT_V1", allowed, 2, &v);
}

/* MEMRA_CUDA_NO_ATT_PREFETCH=1: no L2 prefetch before the PDL wait (the A/B knob; same bits either way). */
static int att_pf(void) {
    static int off = KRN_TUNE_UNREAD;
    static const int allowed[] = {0, 1};
    return !krn_cuda_tune("MEMRA_CUDA_NO_ATT_PREFETCH", allowed, 2, &off);
}

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

/* att_chunk_kernel for the cache's element type, out of type OT, DPL float4s of head_dim per lane */
template <int OT, int DPL>
static void att_chunk_launch_d(const krn_kv_cache *c, dim3 grid, cudaStream_t st, void *out, float *ws,
                               const float *q, const int32_t *seq, const int32_t *pos, int n_head, int n_head_kv,
                               int hd, int n_ctx, int n_split, float scale, int ck) {
    if (c->type == KRN_F16)
        krn_launch(att_chunk_kernel<__half, OT, DPL>, grid, ATT2_THREADS, 0, st, out, ws, q, (const __half *)c->k,
            (const __half *)c->v, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale, ck, att_pf());
    else if (c->type == KRN_BF16)
        krn_launch(att_chunk_kernel<__nv_bfloat16, OT, DPL>, grid, ATT2_THREADS, 0, st, out, ws, q,
            (const __nv_bfloat16 *)c->k, (const __nv_bfloat16 *)c->v, seq, pos, n_head, n_head_kv, hd, n_ctx,
            n_split, scale, ck, att_pf());
    else
        krn_launch(att_chunk_kernel<float, OT, DPL>, grid, ATT2_THREADS, 0, st, out, ws, q, (const float *)c->k,
            (const float *)c->v, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale, ck, att_pf());
}

/* att_group_kernel for the cache's element type, out of type OT, DPL float4s of head_dim per lane */
template <int OT, int DPL>
static void att_group_launch_d(const krn_kv_cache *c, dim3 grid, cudaStream_t st, void *out, float *ws,
                               const float *q, const int32_t *seq, const int32_t *pos, int n_head, int n_head_kv,
                               int hd, int n_ctx, int n_split, float scale, int ck, int ngrp) {
    if (c->type == KRN_F16)
        krn_launch(att_group_kernel<__half, OT, DPL>, grid, ATT2_THREADS, 0, st, out, ws, q, (const __half *)c->k,
            (const __half *)c->v, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale, ck, att_pf(), ngrp);
    else if (c->type == KRN_BF16)
        krn_launch(att_group_kernel<__nv_bfloat16, OT, DPL>, grid, ATT2_THREADS, 0, st, out, ws, q,
            (const __nv_bfloat16 *)c->k, (const __nv_bfloat16 *)c->v, seq, pos, n_head, n_head_kv, hd, n_ctx,
            n_split, scale, ck, att_pf(), ngrp);
    else
        krn_launch(att_group_kernel<float, OT, DPL>, grid, ATT2_THREADS, 0, st, out, ws, q, (const float *)c->k,
            (const float *)c->v, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale, ck, att_pf(), ngrp);
}

/* att_chunk_kernel for the cache's element type, out of type OT */
template <int OT>
static void att_chunk_launch_t(const krn_kv_cache *c, dim3 grid, cudaStream_t st, void *out, float *ws,
                               const float *q, const int32_t *seq, const int32_t *pos, int n_head, int n_head_kv,
                               int hd, int n_ctx, int n_split, float scale, int ck) {
    if (att_v1()) {
        if (c->type == KRN_F16)
            krn_launch(att_chunk_kernel_v1<__half, OT>, grid, ATT_THREADS, 0, st, out, ws, q, (const __half *)c->k,
                (const __half *)c->v, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale, ck, att_pf());
        else if (c->type == KRN_BF16)
            krn_launch(att_chunk_kernel_v1<__nv_bfloat16, OT>, grid, ATT_THREADS, 0, st, out, ws, q,
                (const __nv_bfloat16 *)c->k, (const __nv_bfloat16 *)c->v, seq, pos, n_head, n_head_kv, hd, n_ctx,
                n_split, scale, ck, att_pf());
        else
            krn_launch(att_chunk_kernel_v1<float, OT>, grid, ATT_THREADS, 0, st, out, ws, q, (const float *)c->k,
                (const float *)c->v, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale, ck, att_pf());
        return;
    }
    if (att_group()) {
        const int G = n_head / n_head_kv, ngrp = (G + ATT3_G - 1) / ATT3_G;
        const dim3 g3((unsigned)(n_head_kv * ngrp), grid.x, grid.z); /* (kv head x group, chunk, row) */
        if (hd <= 4 * KRN_WARP)
            att_group_launch_d<OT, 1>(c, g3, st, out, ws, q, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale, ck, ngrp);
        else
            att_group_launch_d<OT, 2>(c, g3, st, out, ws, q, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale, ck, ngrp);
        return;
    }
    const dim3 g2(grid.y, grid.x, grid.z); /* (head, chunk, row) */
    if (hd <= 4 * KRN_WARP)
        att_chunk_launch_d<OT, 1>(c, g2, st, out, ws, q, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale, ck);
    else
        att_chunk_launch_d<OT, 2>(c, g2, st, out, ws, q, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale, ck);
}

/* att_chunk_launch_t for out's type */
static void att_chunk_launch(const krn_kv_cache *c, dim3 grid, cudaStream_t st, void *out, int out_t, float *ws,
                             const float *q, const int32_t *seq, const int32_t *pos, int n_head, int n_head_kv,
                             int hd, int n_ctx, int n_split, float scale, int ck) {
    if (out_t == KRN_F16)
        att_chunk_launch_t<KRN_F16>(c, grid, st, out, ws, q, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale,
                                    ck);
    else if (out_t == KRN_BF16)
        att_chunk_launch_t<KRN_BF16>(c, grid, st, out, ws, q, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale,
                                     ck);
    else
        att_chunk_launch_t<KRN_F32>(c, grid, st, out, ws, q, seq, pos, n_head, n_head_kv, hd, n_ctx, n_split, scale,
                                    ck);
}

/* att_combine_kernel for out's type */
static void att_combine_launch(int out_t, dim3 grid, cudaStream_t st, void *out, const float *ws, const int32_t *pos,
                               int n_head, int hd, int n_ctx, int n_split, int ck) {
    if (out_t == KRN_F16)
        krn_launch(att_v1() ? att_combine_kernel_v1<KRN_F16> : att_combine_kernel<KRN_F16>, grid, att_v1() ? ATT_THREADS : ATT2_THREADS, 0, st, out, ws, pos, n_head, hd, n_ctx, n_split,
                   ck);
    else if (out_t == KRN_BF16)
        krn_launch(att_v1() ? att_combine_kernel_v1<KRN_BF16> : att_combine_kernel<KRN_BF16>, grid, att_v1() ? ATT_THREADS : ATT2_THREADS, 0, st, out, ws, pos, n_head, hd, n_ctx, n_split,
                   ck);
    else
        krn_launch(att_v1() ? att_combine_kernel_v1<KRN_F32> : att_combine_kernel<KRN_F32>, grid, att_v1() ? ATT_THREADS : ATT2_THREADS, 0, st, out, ws, pos, n_head, hd, n_ctx, n_split,
                   ck);
}

extern "C" int krn_cuda_attention_ws_async(void *cuda_stream, void *out, int out_t, const float *q,
                                           const krn_kv_cache *c, const int32_t *seq, const int32_t *pos, int B,
                                           int n_head, int n_head_kv, int head_dim, int n_ctx, float *given,
                                           size_t given_bytes, dev_err *err) {
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
    if (!krn_cuda_aligned(q, 16) || !krn_cuda_aligned(c->k, 16) || !krn_cuda_aligned(c->v, 16))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_attention: q and the caches must be 16-byte aligned");
    if (B > 65535 || n_head > 65535)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_attention: B=%d n_head=%d (at most 65535 each)", B, n_head);
    cudaStream_t st = (cudaStream_t)cuda_stream;
    const float scale = 1.0f / sqrtf((float)head_dim);
    const int ck = att_chunk(), n_split = (n_ctx + ck - 1) / ck;
    if (n_split > 65535) /* the chunk is a grid dimension of at most 65535 */
        return dev_err_set(err, MEMRA_E_INVAL, "krn_cuda_attention: n_ctx=%d is %d chunks of %d keys (at most 65535)",
                           n_ctx, n_split, ck);
    const dim3 grid((unsigned)n_split, (unsigned)n_head, (unsigned)B);
    if (n_split == 1) {
        att_chunk_launch(c, grid, st, out, out_t, NULL, q, seq, pos, n_head, n_head_kv, head_dim, n_ctx, 1, scale, ck);
        return krn_cuda_launch_check(err, "krn_cuda_attention (att_chunk_kernel)");
    }
    float *ws = NULL;
    const size_t ws_bytes = (size_t)B * n_head * n_split * (size_t)(head_dim + 2) * sizeof(float);
    const int own = !(given && given_bytes >= ws_bytes); /* the caller's (a stage's scratch), or one per call */
    const cudaError_t ce = own ? cudaMallocAsync((void **)&ws, ws_bytes, st) : (ws = given, cudaSuccess);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it so the next launch check does not see it */
        return dev_err_set(err, ce == cudaErrorMemoryAllocation ? MEMRA_E_NOMEM : MEMRA_E_DEVICE,
                           "krn_cuda_attention: cudaMallocAsync(%zu B workspace): %s: %s", ws_bytes,
                           cudaGetErrorName(ce), cudaGetErrorString(ce));
    }
    int rc;
    att_chunk_launch(c, grid, st, out, out_t, ws, q, seq, pos, n_head, n_head_kv, head_dim, n_ctx, n_split, scale,
                     ck);
    rc = krn_cuda_launch_check(err, "krn_cuda_attention (att_chunk_kernel, split)");
    if (rc == 0) {
        att_combine_launch(out_t, dim3((unsigned)n_head, (unsigned)B), st, out, ws, pos, n_head, head_dim, n_ctx,
                           n_split, ck);
        rc = krn_cuda_launch_check(err, "krn_cuda_attention (att_combine_kernel)");
    }
    /* ordered by st: the free runs after both kernels (a given workspace is reused by the next call on st,
     * which st orders after these kernels too) */
    const int frc = own ? krn_cuda_call_check(err, cudaFreeAsync(ws, st), "krn_cuda_attention: cudaFreeAsync") : 0;
    return rc ? rc : frc;
}
