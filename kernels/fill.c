/* Synthetic weights (fill.h). The unit functions below are mirrored line for line in
 * kernels/cuda/krn_cuda_fill.cu: keep them identical (integer operations only). */
#include "kernels/fill.h"

#include <math.h>
#include <string.h>

#include "kernels/quant.h"

static inline uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

int krn_fill_plan_make(krn_fill_plan *p, int type, int64_t n_out, int64_t n_in, uint64_t seed, float scale,
                       float center)
{
    memset(p, 0, sizeof *p);
    size_t rb = krn_row_bytes(type, n_in);
    if (!krn_type_supported(type) || rb == 0 || n_out < 1 || !(scale > 0))
        return MEMRA_E_INVAL;
    p->type = type;
    p->n_out = n_out;
    p->n_in = n_in;
    p->seed = seed;
    p->row_bytes = rb;
    p->center = type == KRN_F32 ? center : 0.0f;
    int e;
    frexpf(scale, &e); /* scale = f * 2^e, f in [0.5, 1): the largest |v| is below 2^e */
    p->exp = e - 1;
    /* the bit-assembled exponents exp - 0..3 must stay normal numbers of the type */
    int lo = type == KRN_F16 ? -11 : -123, hi = type == KRN_F16 ? 15 : 127;
    if ((type == KRN_F32 || type == KRN_F16 || type == KRN_BF16) && (p->exp - 3 < lo || p->exp > hi))
        return MEMRA_E_INVAL;
    switch (type) {
    case KRN_Q8_0: p->d = krn_f32_to_f16(scale / 127.0f); break;
    case KRN_Q4_0: p->d = krn_f32_to_f16(scale / 8.0f); break;
    case KRN_Q4_1: p->d = krn_f32_to_f16(scale / 7.5f), p->dmin = krn_f32_to_f16(-scale); break;
    case KRN_Q4_K: p->d = krn_f32_to_f16(scale / 256.0f), p->dmin = krn_f32_to_f16(scale / 32.0f); break;
    case KRN_Q5_K: p->d = krn_f32_to_f16(scale / 512.0f), p->dmin = krn_f32_to_f16(scale / 32.0f); break; /* q to 31 */
    case KRN_Q6_K: p->d = krn_f32_to_f16(scale / 4096.0f); break;
    default: break;
    }
    return 0;
}

int64_t krn_fill_units(const krn_fill_plan *p)
{
    int be = krn_type_block_elems(p->type);
    return p->n_out * (p->n_in / be);
}

/* One float element u, as bits: sign, exponent exp - (0..3), random mantissa. */
static inline uint32_t f32_bits(const krn_fill_plan *p, uint64_t h)
{
    uint32_t sign = (uint32_t)(h & 1u), r = (uint32_t)((h >> 1) & 3u);
    return sign << 31 | (uint32_t)(p->exp - (int)r + 127) << 23 | (uint32_t)((h >> 3) & 0x7FFFFFu);
}

void krn_fill_host_range(const krn_fill_plan *p, void *dst, int64_t u0, int64_t u1)
{
    unsigned char *out = dst;
    size_t bb = krn_type_block_bytes(p->type);
    for (int64_t u = u0; u < u1; u++) {
        uint64_t h = mix64(p->seed ^ mix64((uint64_t)u));
        switch (p->type) {
        case KRN_F32: {
            uint32_t b = f32_bits(p, h);
            float v;
            memcpy(&v, &b, 4);
            v = v + p->center; /* one IEEE add: the same on every backend */
            memcpy(out + (size_t)u * 4, &v, 4);
            break;
        }
        case KRN_F16: {
            uint16_t b = (uint16_t)((h & 1u) << 15 | (uint32_t)(p->exp - (int)((h >> 1) & 3u) + 15) << 10 |
                                    ((h >> 3) & 0x3FFu));
            memcpy(out + (size_t)u * 2, &b, 2);
            break;
        }
        case KRN_BF16: {
            uint16_t b = (uint16_t)(f32_bits(p, h) >> 16);
            memcpy(out + (size_t)u * 2, &b, 2);
            break;
        }
        default: { /* a block: random bytes, then the host-computed scales */
            unsigned char *blk = out + (size_t)u * bb;
            for (size_t w = 0; w < bb; w += 8) {
                uint64_t r = mix64(h + w);
                size_t n = bb - w < 8 ? bb - w : 8;
                memcpy(blk + w, &r, n);
            }
            if (p->type == KRN_Q6_K) {
                memcpy(blk + bb - 2, &p->d, 2); /* d is the last field */
            } else {
                memcpy(blk, &p->d, 2);
                if (p->type == KRN_Q4_1 || p->type == KRN_Q4_K || p->type == KRN_Q5_K)
                    memcpy(blk + 2, &p->dmin, 2);
            }
        }
        }
    }
}

/* ---- enqueue ---- */

#if defined(MEMRA_HAVE_CUDA)
int krn_cuda_fill(dev_stream *s, void *dst, const krn_fill_plan *p); /* kernels/cuda/krn_cuda_fill.cu */
#endif

typedef struct fill_args {
    krn_fill_plan plan;
    void *dst;
} fill_args;

static void run_fill(void *arg)
{
    fill_args *a = arg;
    krn_fill_host_range(&a->plan, a->dst, 0, krn_fill_units(&a->plan));
}

int krn_fill_async(dev_stream *s, void *dst, const krn_fill_plan *p)
{
    if (!s || !dst || !p || !p->row_bytes)
        return MEMRA_E_INVAL;
    if (dev_platform_kind(dev_device_platform(dev_stream_device(s))) == DEV_KIND_CUDA) {
#if defined(MEMRA_HAVE_CUDA)
        return krn_cuda_fill(s, dst, p);
#else
        return MEMRA_E_UNSUPPORTED;
#endif
    }
    fill_args a = {*p, dst};
    dev_access acc = {dst, (size_t)p->n_out * p->row_bytes, DEV_WRITE};
    return dev_launch_cpu_async(s, "fill", run_fill, &a, sizeof a, &acc, 1);
}
