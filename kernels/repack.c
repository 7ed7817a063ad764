/* The planar layout of q8_0 / q4_0 / q4_1 / q4_K / q6_K weights (KRN_LAYOUT_PLANES, kernels/krn.h): byte offsets, the
 * host reference of the repack (GGUF blocks -> planes) and its inverse, the CPU's rows of 8 (KRN_LAYOUT_ROWS8)
 * group by group (a whole group's pack transposed on AVX2 where the CPU has it, the same bytes), and the layout check
 * the op table runs before a matmul. The CUDA repack (kernels/cuda/krn_cuda_repack.cu) produces the same bytes.
 * No shared state. */
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/krn.h"
#include "kernels/quant_impl.h"

int krn_planes_supported(int type)
{
    return type == KRN_Q8_0 || type == KRN_Q4_0 || type == KRN_Q4_1 || type == KRN_Q4_K || type == KRN_Q6_K;
}

size_t krn_planes_qrow(int type, int64_t n_in)
{
    if (!krn_planes_supported(type) || n_in <= 0 || n_in % krn_type_block_elems(type))
        return 0;
    if (type == KRN_Q6_K) /* 4 low bits + 2 high bits per element: 192 bytes per super-block */
        return (size_t)n_in / 4 * 3;
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
    return type == KRN_Q6_K ? 18 : type == KRN_Q4_K ? 16 : type == KRN_Q4_1 ? 4 : 2;
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

/* q4_K: element e (0..255) of a super-block's GGUF quant bytes qs[128] (64-element chunk c = e / 64 in
 * qs[32c .. 32c+32): its first 32 elements in the low nibbles, the next 32 in the high ones). */
static unsigned k_nib(const uint8_t *qs, int e)
{
    const int c = e / 64, l = e % 32;
    return (e % 64) < 32 ? qs[32 * c + l] & 0xF : qs[32 * c + l] >> 4;
}

/* q4_K quants qs[128] -> 8 planar sub-blocks p[8][16] (sub-block s = elements 32s .. 32s+32, laid out as a
 * q4 planar block), and back. */
static void q4k_to_planar(const uint8_t *qs, uint8_t *p)
{
    for (int s = 0; s < 8; s++)
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < 4; i++)
                p[16 * s + 4 * k + i] =
                    (uint8_t)(k_nib(qs, 32 * s + 8 * k + i) | k_nib(qs, 32 * s + 8 * k + 4 + i) << 4);
}

static void q4k_from_planar(const uint8_t *p, uint8_t *qs)
{
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            qs[32 * c + l] = (uint8_t)(p_nib(p + 16 * (2 * c), l) | p_nib(p + 16 * (2 * c + 1), l) << 4);
}

/* q6_K: element e (0..255) of a super-block's GGUF quant bytes (ql[128], then qh[64]) has its low 4 bits in
 * a nibble of ql and its high 2 bits in qh: half h = e / 128 (ql + 64h, qh + 32h), in it run k = (e % 128) / 32
 * and l = e % 32: the low (k < 2) or high nibble of ql[l + 32 (k & 1)], bits 2k, 2k+1 of qh[l]. The byte
 * and the shift of each part: */
static void q6_at(int e, size_t *lo_byte, int *lo_shift, size_t *hi_byte, int *hi_shift)
{
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    *lo_byte = (size_t)(64 * h + l + 32 * (k & 1));
    *lo_shift = k < 2 ? 0 : 4;
    *hi_byte = (size_t)(128 + 32 * h + l);
    *hi_shift = 2 * k;
}

/* Where element 32s + e (e in 0..31) of a q6_K super-block lies in its 192 planar quant bytes p: the low 4
 * bits in the q4 planar sub-block at p + 16s (byte 4(e/8) + e%4, high nibble when e%8 >= 4), the high 2 bits
 * in the 8 bytes at p + 128 + 8s: byte 4(e/16) + e%4, bits 2f, 2f+1 with f = (e%16)/4. */
static void q6p_at(int s, int e, size_t *lo_byte, int *lo_shift, size_t *hi_byte, int *hi_shift)
{
    *lo_byte = (size_t)(16 * s + 4 * (e / 8) + e % 4);
    *lo_shift = (e % 8) < 4 ? 0 : 4;
    *hi_byte = (size_t)(128 + 8 * s + 4 * (e / 16) + e % 4);
    *hi_shift = 2 * ((e % 16) / 4);
}

/* q6_K quants (ql, qh: 192 bytes) -> planar (192 bytes), or back (to_planar = 0): every bit of an element
 * moves to its place in the other form, so each direction is a bit permutation and one undoes the other. */
static void q6k_move(const uint8_t *src, uint8_t *dst, int to_planar)
{
    memset(dst, 0, 192);
    for (int e = 0; e < 256; e++) {
        size_t gl, gh, pl, ph;
        int gls, ghs, pls, phs;
        q6_at(e, &gl, &gls, &gh, &ghs);
        q6p_at(e / 32, e % 32, &pl, &pls, &ph, &phs);
        if (to_planar) {
            dst[pl] |= (uint8_t)(((src[gl] >> gls) & 0xF) << pls);
            dst[ph] |= (uint8_t)(((src[gh] >> ghs) & 3) << phs);
        } else {
            dst[gl] |= (uint8_t)(((src[pl] >> pls) & 0xF) << gls);
            dst[gh] |= (uint8_t)(((src[ph] >> phs) & 3) << ghs);
        }
    }
}

/* Quant bytes of one GGUF block into planes, and back. */
static void quants_to_planar(int type, const uint8_t *g, uint8_t *p, size_t qb)
{
    if (type == KRN_Q8_0)
        memcpy(p, g, qb);
    else if (type == KRN_Q4_K)
        q4k_to_planar(g, p);
    else if (type == KRN_Q6_K)
        q6k_move(g, p, 1);
    else
        q4_to_planar(g, p);
}

static void quants_from_planar(int type, const uint8_t *p, uint8_t *g, size_t qb)
{
    if (type == KRN_Q8_0)
        memcpy(g, p, qb);
    else if (type == KRN_Q4_K)
        q4k_from_planar(p, g);
    else if (type == KRN_Q6_K)
        q6k_move(p, g, 0);
    else
        q4_from_planar(p, g);
}

/* Offset of the sb scale bytes in a GGUF block of bb bytes: first (q8_0, q4_*: d, m; q4_K: d, dmin,
 * scales[12]), except q6_K, whose scales[16] and d end the block. The qb quant bytes fill the rest. */
static size_t scales_at(int type, size_t bb, size_t sb) { return type == KRN_Q6_K ? bb - sb : 0; }
static size_t quants_at(int type, size_t sb) { return type == KRN_Q6_K ? 0 : sb; }

/* Block j of row r: GGUF block (r*nb + j) of bb bytes = sb scale bytes and qb quant bytes (scales_at,
 * quants_at); planes: quant bytes at r*qrow + j*qb, scale bytes at scale_off + (r*nb + j)*sb. */
void krn_repack_host(int type, int n_out, int n_in, const void *src_blocks, void *dst_planes)
{
    if (n_out <= 0 || !krn_planes_qrow(type, n_in))
        return;
    const size_t bb = krn_type_block_bytes(type), sb = krn_planes_scale_bytes(type), qb = bb - sb;
    const size_t nb = (size_t)n_in / (size_t)krn_type_block_elems(type), qrow = krn_planes_qrow(type, n_in);
    const uint8_t *src = src_blocks;
    uint8_t *dst = dst_planes, *scales = dst + krn_planes_scale_off(type, n_out, n_in);
    for (size_t r = 0; r < (size_t)n_out; r++)
        for (size_t j = 0; j < nb; j++) {
            const uint8_t *blk = src + (r * nb + j) * bb;
            uint8_t *q = dst + r * qrow + j * qb;
            memcpy(scales + (r * nb + j) * sb, blk + scales_at(type, bb, sb), sb);
            quants_to_planar(type, blk + quants_at(type, sb), q, qb);
        }
}

void krn_unpack_host(int type, int n_out, int n_in, const void *src_planes, void *dst_blocks)
{
    if (n_out <= 0 || !krn_planes_qrow(type, n_in))
        return;
    const size_t bb = krn_type_block_bytes(type), sb = krn_planes_scale_bytes(type), qb = bb - sb;
    const size_t nb = (size_t)n_in / (size_t)krn_type_block_elems(type), qrow = krn_planes_qrow(type, n_in);
    const uint8_t *src = src_planes, *scales = src + krn_planes_scale_off(type, n_out, n_in);
    uint8_t *dst = dst_blocks;
    for (size_t r = 0; r < (size_t)n_out; r++)
        for (size_t j = 0; j < nb; j++) {
            uint8_t *blk = dst + (r * nb + j) * bb;
            const uint8_t *q = src + r * qrow + j * qb;
            memcpy(blk + scales_at(type, bb, sb), scales + (r * nb + j) * sb, sb);
            quants_from_planar(type, q, blk + quants_at(type, sb), qb);
        }
}

int krn_rows8_supported(int type, int64_t n_out, int64_t n_in)
{
    return (type == KRN_Q4_0 || type == KRN_Q4_1 || type == KRN_Q8_0) && n_out >= 8 && n_in > 0 &&
           n_in % 32 == 0;
}

/* Rows of 8: a GGUF block's d (and m) and quant bytes <-> block j of a group (kernels/krn.h). dir = 1 packs the
 * 8 blocks at rows[r] into g, 0 unpacks g into them; quants move in dwords (4 bytes of one row per chunk). */
static void rows8_block(int type, uint8_t *g, uint8_t *const rows[8], int nr, int dir)
{
    const int hb = type == KRN_Q4_1 ? 4 : 2, qb = type == KRN_Q8_0 ? 32 : 16; /* header, quant bytes per block */
    for (int r = 0; r < 8; r++) {
        uint8_t *b = r < nr ? rows[r] : NULL;
        for (int h = 0; h < hb; h += 2) /* d at 2r, m at 16 + 2r */
            if (dir)
                b ? memcpy(g + 8 * h + 2 * r, b + h, 2) : memset(g + 8 * h + 2 * r, 0, 2);
            else if (b)
                memcpy(b + h, g + 8 * h + 2 * r, 2);
        for (int k = 0; k < qb / 4; k++) {
            uint8_t *c = g + 8 * hb + 32 * k + 4 * r;
            if (dir)
                b ? memcpy(c, b + hb + 4 * k, 4) : memset(c, 0, 4);
            else if (b)
                memcpy(b + hb + 4 * k, c, 4);
        }
    }
}

#if defined(__x86_64__)
/* A whole group's pack (8 rows) on AVX2: per block, the quant dwords of the 8 rows transposed in registers (4 x 4
 * dword transposes in both 128-bit halves, rows r and r + 4 sharing a vector), the d (and m) copied; the bytes of
 * rows8_block. */
__attribute__((target("avx2"))) static void rows8_pack8_avx2(int type, int64_t n_in, uint8_t *g, const uint8_t *rows,
                                                              size_t rb)
{
    const int hb = type == KRN_Q4_1 ? 4 : 2, qb = type == KRN_Q8_0 ? 32 : 16;
    const size_t bb = krn_row_bytes(type, 32);
    for (int64_t j = 0; j < n_in / 32; j++, g += 8 * bb) {
        const uint8_t *b = rows + (size_t)j * bb;
        for (int r = 0; r < 8; r++)
            for (int h = 0; h < hb; h += 2)
                memcpy(g + 8 * h + 2 * r, b + (size_t)r * rb + h, 2);
        for (int q = 0; q < qb; q += 16) { /* 16 quant bytes (4 dwords) of each row -> chunks q / 4 .. q / 4 + 3 */
            __m256i R[4], t[4];
            for (int r = 0; r < 4; r++)
                R[r] = _mm256_inserti128_si256(
                    _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(b + (size_t)r * rb + hb + q))),
                    _mm_loadu_si128((const __m128i *)(b + (size_t)(r + 4) * rb + hb + q)), 1);
            t[0] = _mm256_unpacklo_epi32(R[0], R[1]); /* r0.0 r1.0 r0.1 r1.1 | r4.0 r5.0 r4.1 r5.1 */
            t[1] = _mm256_unpackhi_epi32(R[0], R[1]); /* dwords 2, 3 */
            t[2] = _mm256_unpacklo_epi32(R[2], R[3]);
            t[3] = _mm256_unpackhi_epi32(R[2], R[3]);
            uint8_t *c = g + 8 * hb + 8 * q; /* chunk q / 4: 32 bytes */
            _mm256_storeu_si256((__m256i *)c, _mm256_unpacklo_epi64(t[0], t[2]));
            _mm256_storeu_si256((__m256i *)(c + 32), _mm256_unpackhi_epi64(t[0], t[2]));
            _mm256_storeu_si256((__m256i *)(c + 64), _mm256_unpacklo_epi64(t[1], t[3]));
            _mm256_storeu_si256((__m256i *)(c + 96), _mm256_unpackhi_epi64(t[1], t[3]));
        }
    }
}
#endif

static void rows8_group(int type, int64_t n_in, uint8_t *g, uint8_t *rows, int nr, size_t rb, int dir)
{
    const size_t bb = krn_row_bytes(type, 32);
#if defined(__x86_64__)
    if (dir && nr == 8 && krn_quant_path() == KRN_PATH_AVX2) {
        rows8_pack8_avx2(type, n_in, g, rows, rb);
        return;
    }
#endif
    for (int64_t j = 0; j < n_in / 32; j++) {
        uint8_t *at[8] = { 0 };
        for (int r = 0; r < nr && r < 8; r++)
            at[r] = rows + (size_t)r * rb + (size_t)j * bb;
        rows8_block(type, g + (size_t)j * 8 * bb, at, nr, dir);
    }
}

void krn_rows8_pack_group(int type, int64_t n_in, const uint8_t *rows, int nr, size_t rb, uint8_t *dst)
{
    rows8_group(type, n_in, dst, (uint8_t *)rows, nr, rb, 1); /* dir 1 only reads rows */
}

void krn_rows8_unpack_group(int type, int64_t n_in, const uint8_t *src, int nr, size_t rb, uint8_t *rows)
{
    rows8_group(type, n_in, (uint8_t *)src, rows, nr, rb, 0); /* dir 0 only reads the group */
}

int krn_layout_check(const krn_weight *W, int cuda, dev_err *err)
{
    if (!W)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_matmul: W is NULL");
    if (W->layout == KRN_LAYOUT_BLOCKS)
        return 0;
    if (W->layout == KRN_LAYOUT_ROWS8) {
        if (cuda)
            return dev_err_set(err, MEMRA_E_INVAL, "krn_matmul: layout rows8 is a CPU format; the CUDA kernels read "
                                                   "blocks or planes");
        if (!krn_rows8_supported(W->type, W->n_out, W->n_in))
            return dev_err_set(err, MEMRA_E_INVAL, "krn_matmul: layout rows8 of a (%d, %d) %s weight (allowed: q4_0, "
                               "q4_1, q8_0 with n_out >= 8 and n_in %% 32 == 0)", W->n_out, W->n_in,
                               krn_type_name(W->type));
        return 0;
    }
    if (W->layout != KRN_LAYOUT_PLANES)
        return dev_err_set(err, MEMRA_E_INVAL, "krn_matmul: weight layout %d unknown (allowed: %d blocks, %d planes, "
                           "%d rows8)", W->layout, KRN_LAYOUT_BLOCKS, KRN_LAYOUT_PLANES, KRN_LAYOUT_ROWS8);
    if (!cuda)
        return dev_err_set(err, MEMRA_E_INVAL,
                           "krn_matmul: layout planes is a CUDA decode format; the CPU kernels read GGUF blocks "
                           "(layout blocks) only");
    if (!krn_planes_supported(W->type))
        return dev_err_set(err, MEMRA_E_INVAL,
                           "krn_matmul: layout planes of type %s (allowed: q8_0, q4_0, q4_1, q4_K, q6_K)",
                           krn_type_name(W->type));
    return 0;
}
