/* The planar layout of q8_0 / q4_0 / q4_1 weights (KRN_LAYOUT_PLANES, kernels/krn.h): byte offsets, the
 * host reference of the repack (GGUF blocks -> planes) and its inverse, and the layout check the op table
 * runs before a matmul. The CUDA repack (kernels/cuda/krn_cuda_repack.cu) produces the same bytes.
 * No shared state. */
#include <string.h>

#include "kernels/krn.h"

int krn_planes_supported(int type) { return type == KRN_Q8_0 || type == KRN_Q4_0 || type == KRN_Q4_1; }

size_t krn_planes_qrow(int type, int64_t n_in)
{
    if (!krn_planes_supported(type) || n_in <= 0 || n_in % 32)
        return 0;
    return type == KRN_Q8_0 ? (size_t)n_in : (size_t)n_in / 2;
}

size_t krn_planes_scale_off(int type, int64_t n_out, int64_t n_in)
{
    return (size_t)n_out * krn_planes_qrow(type, n_in);
}

size_t krn_planes_scale_bytes(int type)
{
    if (!krn_planes_supported(type))
        return 0;
    return type == KRN_Q4_1 ? 4 : 2;
}

/* GGUF q4 quant bytes g[16] (g[j]: element j low, j+16 high) -> planar p[16] (byte 4k+i: element 8k+i
 * low, 8k+4+i high). Element e of the block as a nibble of the GGUF bytes. */
static unsigned g_nib(const uint8_t *g, int e) { return e < 16 ? g[e] & 0xF : g[e - 16] >> 4; }

static void q4_to_planar(const uint8_t *g, uint8_t *p)
{
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 4; i++)
            p[4 * k + i] = (uint8_t)(g_nib(g, 8 * k + i) | g_nib(g, 8 * k + 4 + i) << 4);
}

/* Element e of the block from planar bytes p. */
static unsigned p_nib(const uint8_t *p, int e)
{
    const int k = e / 8, j = e % 8;
    return j < 4 ? p[4 * k + j] & 0xF : p[4 * k + j - 4] >> 4;
}

static void q4_from_planar(const uint8_t *p, uint8_t *g)
{
    for (int j = 0; j < 16; j++)
        g[j] = (uint8_t)(p_nib(p, j) | p_nib(p, j + 16) << 4);
}

/* Block j of row r: GGUF block (r*nb + j) of bb bytes = sb scale bytes then qb quant bytes; planes: quant
 * bytes at r*qrow + j*qb, scale bytes at scale_off + (r*nb + j)*sb. */
void krn_repack_host(int type, int n_out, int n_in, const void *src_blocks, void *dst_planes)
{
    if (!krn_planes_supported(type) || n_out <= 0 || n_in <= 0 || n_in % 32)
        return;
    const size_t bb = krn_type_block_bytes(type), sb = krn_planes_scale_bytes(type), qb = bb - sb;
    const size_t nb = (size_t)n_in / 32, qrow = krn_planes_qrow(type, n_in);
    const uint8_t *src = src_blocks;
    uint8_t *dst = dst_planes, *scales = dst + krn_planes_scale_off(type, n_out, n_in);
    for (size_t r = 0; r < (size_t)n_out; r++)
        for (size_t j = 0; j < nb; j++) {
            const uint8_t *blk = src + (r * nb + j) * bb;
            uint8_t *q = dst + r * qrow + j * qb;
            memcpy(scales + (r * nb + j) * sb, blk, sb);
            if (type == KRN_Q8_0)
                memcpy(q, blk + sb, qb);
            else
                q4_to_planar(blk + sb, q);
        }
}

void krn_unpack_host(int type, int n_out, int n_in, const void *src_planes, void *dst_blocks)
{
    if (!krn_planes_supported(type) || n_out <= 0 || n_in <= 0 || n_in % 32)
        return;
    const size_t bb = krn_type_block_bytes(type), sb = krn_planes_scale_bytes(type), qb = bb - sb;
    const size_t nb = (size_t)n_in / 32, qrow = krn_planes_qrow(type, n_in);
    const uint8_t *src = src_planes, *scales = src + krn_planes_scale_off(type, n_out, n_in);
    uint8_t *dst = dst_blocks;
    for (size_t r = 0; r < (size_t)n_out; r++)
        for (size_t j = 0; j < nb; j++) {
            uint8_t *blk = dst + (r * nb + j) * bb;
            const uint8_t *q = src + r * qrow + j * qb;
            memcpy(blk, scales + (r * nb + j) * sb, sb);
            if (type == KRN_Q8_0)
                memcpy(blk + sb, q, qb);
            else
                q4_from_planar(q, blk + sb);
        }
}

int krn_layout_check(const krn_weight *W, int cuda, dev_err *err)
{
    if (!W)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_matmul: W is NULL");
    if (W->layout == KRN_LAYOUT_BLOCKS)
        return 0;
    if (W->layout != KRN_LAYOUT_PLANES)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_matmul: weight layout %d unknown (allowed: %d blocks, %d planes)",
                           W->layout, KRN_LAYOUT_BLOCKS, KRN_LAYOUT_PLANES);
    if (!cuda)
        return dev_err_set(err, MEMRA_E_INVAL,
                           "krn_matmul: layout planes is a CUDA decode format; the CPU kernels read GGUF blocks "
                           "(layout blocks) only");
    if (!krn_planes_supported(W->type))
        return dev_err_set(err, MEMRA_E_INVAL, "krn_matmul: layout planes of type %s (allowed: q8_0, q4_0, q4_1)",
                           krn_type_name(W->type));
    return 0;
}
