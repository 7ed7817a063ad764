/* Tensor element types (GGML numbering, as stored in GGUF) and the CPU reference of each block format:
 * sizes, dequantization, quantization and the dot product used by the CPU matmul. The block layouts are
 * exactly GGUF's (ggml-common.h), so a GGUF tensor's bytes are used as they are. */
#ifndef KRN_QUANT_H
#define KRN_QUANT_H

#include <stddef.h>
#include <stdint.h>

typedef enum krn_type {
    KRN_F32 = 0,
    KRN_F16 = 1,
    KRN_Q4_0 = 2,  /* 32 elems: f16 d, 16 B of nibbles;            x = d * (q - 8)        */
    KRN_Q4_1 = 3,  /* 32 elems: f16 d, f16 m, 16 B of nibbles;     x = d * q + m          */
    KRN_Q8_0 = 8,  /* 32 elems: f16 d, 32 int8;                    x = d * q              */
    KRN_Q4_K = 12, /* 256 elems: super-block of 8 x 32, 6-bit scales/mins                  */
    KRN_Q5_K = 13, /* 256 elems: as q4_K, each quant 5 bits (a nibble + 1 bit of qh)        */
    KRN_Q6_K = 14, /* 256 elems: 16 x 16, int8 scales, 6-bit quants                        */
    KRN_BF16 = 30,
} krn_type;

/* 1 when t is one of the types above (the GGUF loader rejects others with a clear error). */
int krn_type_supported(int t);
const char *krn_type_name(int t);      /* "q4_1"; "unknown" for unsupported values */
int krn_type_parse(const char *name);  /* the type named (case-insensitive: "q4_k", "BF16"); -1 if none */
int krn_type_block_elems(int t);       /* elements per block (1 for f32/f16/bf16); 0 if unsupported */
size_t krn_type_block_bytes(int t);    /* bytes per block; 0 if unsupported */
/* Bytes of a row of n elements; 0 when n is not a multiple of the block size or t unsupported. */
size_t krn_row_bytes(int t, int64_t n);

float krn_f16_to_f32(uint16_t h);
uint16_t krn_f32_to_f16(float f);      /* round to nearest even */
float krn_bf16_to_f32(uint16_t h);
uint16_t krn_f32_to_bf16(float f);     /* round to nearest even */

/* dst[0..n) = the values of a row of type t (n a multiple of the block size). */
void krn_dequant_row(int t, const void *src, float *dst, int64_t n);
/* Reference quantizer (tests, the tiny-GGUF writer): src[0..n) -> a row of type t. */
void krn_quant_row(int t, const float *src, void *dst, int64_t n);
/* sum_i row[i] * x[i] for a row of type t, in a FIXED order (block by block, fixed lanes), so the same
 * inputs give the same bits on every stream, device and stage: split vs unsplit stays bit-identical. */
float krn_dot_row(int t, const void *row, const float *x, int64_t n);

#endif
