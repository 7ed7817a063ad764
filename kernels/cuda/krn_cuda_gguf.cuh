/* GGUF block decoding shared by the CUDA kernels that read blocks element by element (the embedding gather,
 * the repack to planes) and the block GEMV's q4_K / q5_K scales: integer fields only, so every user applies its own
 * arithmetic order (kernels/quant.h's formulas). Device-only, header-only. */
#ifndef MEMRA_KRN_CUDA_GGUF_CUH
#define MEMRA_KRN_CUDA_GGUF_CUH

#include <stdint.h>

/* Element e (0..31) of the 16 quant bytes q of a q4_0 / q4_1 block: low nibbles are elements 0..15, high 16..31. */
static __device__ __forceinline__ uint32_t gguf_q4_nib(const uint8_t *q, int e) {
    return e < 16 ? (q[e] & 0xFu) : (uint32_t)(q[e - 16] >> 4);
}

/* Element e (0..255) of a q4_K super-block's quant bytes qs (chunk c = e / 64: the low nibbles of qs[32c ..]
 * are sub-block 2c, their high nibbles sub-block 2c + 1). */
static __device__ __forceinline__ uint32_t gguf_q4k_nib(const uint8_t *qs, int e) {
    const uint8_t b = qs[32 * (e / 64) + e % 32];
    return (e % 64) < 32 ? (b & 0xFu) : (uint32_t)(b >> 4);
}

/* Element e (0..255) of a q5_K super-block p (qh[32] at byte 16, qs[128] at 48): q4_K's nibble of qs plus bit 4
 * from bit e / 32 of qh[e % 32]. */
static __device__ __forceinline__ uint32_t gguf_q5k_q(const uint8_t *p, int e) {
    return gguf_q4k_nib(p + 48, e) | (((uint32_t)p[16 + e % 32] >> (e / 32)) & 1u) << 4;
}

/* q4_K's (and q5_K's) 6-bit scale *sc and min *mn of sub-block j (0..7) from the 12 packed bytes s (GGUF's
 * get_scale_min_k4). */
static __device__ __forceinline__ void gguf_q4k_scale_min(int j, const uint8_t *s, uint32_t *sc, uint32_t *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* q6_K: the low 4 bits (hi = 0) or the high 2 bits (hi = 1) of element e (0..255) of a super-block's quant
 * bytes ql[128], qh[64] at b: half h = e / 128, run k = (e % 128) / 32, l = e % 32: a nibble of
 * ql[64h + l + 32 (k & 1)] (low for k < 2), bits 2k, 2k+1 of qh[32h + l]. */
static __device__ __forceinline__ uint32_t gguf_q6_bits(const uint8_t *b, int e, int hi) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    if (hi)
        return (uint32_t)(b[128 + 32 * h + l] >> (2 * k)) & 3u;
    const uint8_t lo = b[64 * h + l + 32 * (k & 1)];
    return k < 2 ? (lo & 0xFu) : (uint32_t)(lo >> 4);
}

#endif
