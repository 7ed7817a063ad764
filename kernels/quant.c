/* Tensor types: the type table, f16/bf16 conversion and the reference quantizers (src f32 -> GGML blocks).
 * Dequantization and the dot product live in quant_dot.c. No shared mutable state.
 *
 * Quantizers: q4_0, q4_1 and q8_0 are GGML's quantize_row_*_ref, operation for operation (same bytes).
 * q4_K, q5_K and q6_K are simpler than GGML's (which searches scales with make_qkx2_quants /
 * make_qx_quants): round-to-nearest with a scale from each sub-block's range, the
 * sub-block scales themselves rounded to 6 bits (q4_K, q5_K: the same packed scales and mins, quants of
 * 0..15 and 0..31) or int8 (q6_K) against the super-block scale, then every element re-quantized against
 * the scale it will actually be dequantized with. The bytes are valid GGML blocks; the error is a little above
 * GGML's (tests/test_quant.c bounds it). Inputs must be finite. */
#include "kernels/quant_impl.h"

#include <float.h>
#include <math.h>
#include <string.h>
#include <strings.h>

int krn_type_supported(int t)
{
    switch (t) {
    case KRN_F32: case KRN_F16: case KRN_BF16: case KRN_Q4_0: case KRN_Q4_1: case KRN_Q8_0:
    case KRN_Q4_K: case KRN_Q5_K: case KRN_Q6_K:
        return 1;
    default:
        return 0;
    }
}

const char *krn_type_name(int t)
{
    switch (t) {
    case KRN_F32: return "f32";
    case KRN_F16: return "f16";
    case KRN_BF16: return "bf16";
    case KRN_Q4_0: return "q4_0";
    case KRN_Q4_1: return "q4_1";
    case KRN_Q8_0: return "q8_0";
    case KRN_Q4_K: return "q4_K";
    case KRN_Q5_K: return "q5_K";
    case KRN_Q6_K: return "q6_K";
    default: return "unknown";
    }
}

int krn_type_block_elems(int t)
{
    switch (t) {
    case KRN_F32: case KRN_F16: case KRN_BF16: return 1;
    case KRN_Q4_0: case KRN_Q4_1: case KRN_Q8_0: return 32;
    case KRN_Q4_K: case KRN_Q5_K: case KRN_Q6_K: return QK_K;
    default: return 0;
    }
}

size_t krn_type_block_bytes(int t)
{
    switch (t) {
    case KRN_F32: return 4;
    case KRN_F16: case KRN_BF16: return 2;
    case KRN_Q4_0: return sizeof(blk_q4_0);
    case KRN_Q4_1: return sizeof(blk_q4_1);
    case KRN_Q8_0: return sizeof(blk_q8_0);
    case KRN_Q4_K: return sizeof(blk_q4_K);
    case KRN_Q5_K: return sizeof(blk_q5_K);
    case KRN_Q6_K: return sizeof(blk_q6_K);
    default: return 0;
    }
}

size_t krn_row_bytes(int t, int64_t n)
{
    const int be = krn_type_block_elems(t);
    if (be <= 0 || n < 0 || n % be != 0)
        return 0;
    const uint64_t nb = (uint64_t)(n / be), bb = krn_type_block_bytes(t);
    if (nb > SIZE_MAX / bb)
        return 0;
    return (size_t)(nb * bb);
}

static uint32_t f_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float krn_f16_to_f32(uint16_t h) { return krn_f16_to_f32_inl(h); }

uint16_t krn_f32_to_f16(float f)
{
    uint32_t u = f_bits(f);
    const uint32_t sign = u & 0x80000000u;
    u ^= sign;
    uint32_t o;
    if (u >= (127u + 16u) << 23) {                /* >= 65536, inf, nan (65520..65536 rounds up below) */
        o = u > (255u << 23) ? 0x7e00 : 0x7c00;
    } else if (u < (113u << 23)) {                /* result subnormal or zero: let the FPU round (RNE) */
        const float magic = bits_f(((127u - 15u) + (23u - 10u) + 1u) << 23);
        o = f_bits(bits_f(u) + magic) - f_bits(magic);
    } else {
        const uint32_t odd = (u >> 13) & 1;
        u += ((uint32_t)(15 - 127) << 23) + 0xfff + odd;
        o = u >> 13;                              /* a carry into the exponent gives inf: correct */
    }
    return (uint16_t)(o | (sign >> 16));
}

float krn_bf16_to_f32(uint16_t h) { return bits_f((uint32_t)h << 16); }

uint16_t krn_f32_to_bf16(float f)
{
    const uint32_t u = f_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 64); /* quiet nan */
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

static void put16(void *p, uint16_t v) { memcpy(p, &v, 2); }

/* Round to nearest, ties to even, of a finite v already clamped to int range. */
static int nearest(float v) { return (int)lrintf(v); }

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

static void quant_q4_0(const float *x, uint8_t *out, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32, out += sizeof(blk_q4_0)) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        const float d = max / -8, id = d != 0.0f ? 1.0f / d : 0.0f;
        put16(out, krn_f32_to_f16(d));
        for (int j = 0; j < 16; j++) { /* GGML: MIN(15, (int8_t)(x*id + 8.5f)); the value is >= 0.5 */
            const int lo = (int)clampf(x[j] * id + 8.5f, 0.0f, 15.0f);
            const int hi = (int)clampf(x[j + 16] * id + 8.5f, 0.0f, 15.0f);
            out[2 + j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

static void quant_q4_1(const float *x, uint8_t *out, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32, out += sizeof(blk_q4_1)) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < 32; j++) {
            min = x[j] < min ? x[j] : min;
            max = x[j] > max ? x[j] : max;
        }
        const float d = (max - min) / 15, id = d != 0.0f ? 1.0f / d : 0.0f;
        put16(out, krn_f32_to_f16(d));
        put16(out + 2, krn_f32_to_f16(min));
        for (int j = 0; j < 16; j++) {
            const int lo = (int)clampf((x[j] - min) * id + 0.5f, 0.0f, 15.0f);
            const int hi = (int)clampf((x[j + 16] - min) * id + 0.5f, 0.0f, 15.0f);
            out[4 + j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

static void quant_q8_0(const float *x, uint8_t *out, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32, out += sizeof(blk_q8_0)) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        const float d = amax / 127, id = d != 0.0f ? 1.0f / d : 0.0f;
        put16(out, krn_f32_to_f16(d));
        for (int j = 0; j < 32; j++)
            out[2 + j] = (uint8_t)(int8_t)roundf(clampf(x[j] * id, -127.0f, 127.0f));
    }
}

/* q4_K / q5_K (same scales, quants of 0..qmax): the packed 6-bit scales and mins, d and dmin of one super-block
 * x[0..256), then each element's level L[i] (0..qmax) against the scale it will be dequantized with. */
static void quant_k_levels(const float *x, float qmax, uint8_t scales[K_SCALE_SIZE], uint16_t *d16,
                           uint16_t *dmin16, uint8_t L[QK_K])
{
    float scale[8], mn[8], max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; j++) { /* sub-block j: x ~ scale*q - mn, q in 0..qmax, mn >= 0 */
        float lo = 0.0f, hi = -FLT_MAX;
        for (int l = 0; l < 32; l++) {
            lo = x[32 * j + l] < lo ? x[32 * j + l] : lo;
            hi = x[32 * j + l] > hi ? x[32 * j + l] : hi;
        }
        scale[j] = (hi - lo) / qmax;
        mn[j] = -lo;
        max_scale = scale[j] > max_scale ? scale[j] : max_scale;
        max_min = mn[j] > max_min ? mn[j] : max_min;
    }
    const float is = max_scale > 0 ? 63 / max_scale : 0, im = max_min > 0 ? 63 / max_min : 0;
    memset(scales, 0, K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        const uint8_t ls = (uint8_t)nearest(clampf(is * scale[j], 0.0f, 63.0f));
        const uint8_t lm = (uint8_t)nearest(clampf(im * mn[j], 0.0f, 63.0f));
        if (j < 4) {
            scales[j] = ls;
            scales[j + 4] = lm;
        } else {
            scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales[j - 0] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d16 = krn_f32_to_f16(max_scale / 63);
    *dmin16 = krn_f32_to_f16(max_min / 63);
    const float d = krn_f16_to_f32(*d16), dmin = krn_f16_to_f32(*dmin16);
    for (int j = 0; j < 8; j++) { /* re-quantize against the scale dequantization will use */
        uint8_t sc, m;
        krn_q4k_scale_min(j, scales, &sc, &m);
        const float dd = d * (float)sc, dm = dmin * (float)m;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = dd != 0.0f ? (uint8_t)nearest(clampf((x[32 * j + l] + dm) / dd, 0.0f, qmax)) : 0;
    }
}

static void quant_q4_K(const float *x, uint8_t *out, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K, out += sizeof(blk_q4_K)) {
        blk_q4_K b;
        uint8_t L[QK_K];
        quant_k_levels(x, 15.0f, b.scales, &b.d, &b.dmin, L);
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++)
                b.qs[32 * j + l] = (uint8_t)(L[64 * j + l] | (L[64 * j + 32 + l] << 4));
        memcpy(out, &b, sizeof b);
    }
}

/* q5_K: q4_K's nibbles hold the low 4 bits; bit 4 of element 64j + l is bit 2j of qh[l], of 64j + 32 + l bit 2j + 1. */
static void quant_q5_K(const float *x, uint8_t *out, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K, out += sizeof(blk_q5_K)) {
        blk_q5_K b;
        uint8_t L[QK_K];
        quant_k_levels(x, 31.0f, b.scales, &b.d, &b.dmin, L);
        memset(b.qh, 0, sizeof b.qh);
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                const uint8_t lo = L[64 * j + l], hi = L[64 * j + 32 + l];
                b.qs[32 * j + l] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
                b.qh[l] |= (uint8_t)(((lo >> 4) << (2 * j)) | ((hi >> 4) << (2 * j + 1)));
            }
        memcpy(out, &b, sizeof b);
    }
}

static void quant_q6_K(const float *x, uint8_t *out, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K, out += sizeof(blk_q6_K)) {
        blk_q6_K b;
        memset(&b, 0, sizeof b);
        float scale[16], max_scale = 0.0f;
        for (int j = 0; j < 16; j++) { /* sub-block j of 16: the largest-magnitude value maps to -32 */
            float amax = 0.0f, max = 0.0f;
            for (int l = 0; l < 16; l++)
                if (fabsf(x[16 * j + l]) > amax) {
                    amax = fabsf(x[16 * j + l]);
                    max = x[16 * j + l];
                }
            scale[j] = max / -32;
            max_scale = fabsf(scale[j]) > fabsf(max_scale) ? scale[j] : max_scale;
        }
        const float iscale = max_scale != 0.0f ? -128 / max_scale : 0.0f;
        b.d = krn_f32_to_f16(iscale != 0.0f ? 1 / iscale : 0.0f);
        for (int j = 0; j < 16; j++)
            b.scales[j] = (int8_t)nearest(clampf(iscale * scale[j], -128.0f, 127.0f));
        const float d = krn_f16_to_f32(b.d);
        uint8_t L[QK_K];
        for (int j = 0; j < 16; j++) {
            const float dd = d * (float)b.scales[j];
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)(32 + (dd != 0.0f ? nearest(clampf(x[16 * j + l] / dd, -32.0f, 31.0f)) : 0));
        }
        uint8_t *ql = b.ql, *qh = b.qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32)
            for (int l = 0; l < 32; l++) {
                const uint8_t *q = L + j + l;
                ql[l] = (uint8_t)((q[0] & 0xF) | ((q[64] & 0xF) << 4));
                ql[l + 32] = (uint8_t)((q[32] & 0xF) | ((q[96] & 0xF) << 4));
                qh[l] = (uint8_t)((q[0] >> 4) | ((q[32] >> 4) << 2) | ((q[64] >> 4) << 4) | ((q[96] >> 4) << 6));
            }
        memcpy(out, &b, sizeof b);
    }
}

void krn_quant_row(int t, const float *src, void *dst, int64_t n)
{
    const int be = krn_type_block_elems(t);
    if (be <= 0 || n < 0 || n % be != 0)
        return;
    uint8_t *o = dst;
    const int64_t nb = n / be;
    switch (t) {
    case KRN_F32: memcpy(dst, src, (size_t)n * 4); break;
    case KRN_F16: for (int64_t i = 0; i < n; i++) put16(o + 2 * i, krn_f32_to_f16(src[i])); break;
    case KRN_BF16: for (int64_t i = 0; i < n; i++) put16(o + 2 * i, krn_f32_to_bf16(src[i])); break;
    case KRN_Q4_0: quant_q4_0(src, o, nb); break;
    case KRN_Q4_1: quant_q4_1(src, o, nb); break;
    case KRN_Q8_0: quant_q8_0(src, o, nb); break;
    case KRN_Q4_K: quant_q4_K(src, o, nb); break;
    case KRN_Q5_K: quant_q5_K(src, o, nb); break;
    case KRN_Q6_K: quant_q6_K(src, o, nb); break;
    default: break;
    }
}

int krn_type_parse(const char *name)
{
    static const int all[] = {KRN_F32, KRN_F16, KRN_BF16, KRN_Q8_0, KRN_Q4_0, KRN_Q4_1, KRN_Q4_K, KRN_Q5_K,
                              KRN_Q6_K};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (!strcasecmp(name, krn_type_name(all[i])))
            return all[i];
    return -1;
}
