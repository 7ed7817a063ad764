/* The planar layout of q8_0 / q4_0 / q4_1 / q4_K / q6_K (KRN_LAYOUT_PLANES): offsets, the host repack and its inverse
 * (round trip, and the planes decoded from the layout's own description give the GGUF values), the op
 * table's refusal of planes on the CPU backend (with its message), krn_repack_async on a CPU stream, and
 * the MEMRA_CUDA_REPACK door of model/repack.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "device/dev.h"
#include "kernels/krn.h"
#include "kernels/quant_impl.h"
#include "model/repack.h"

#define NTYPES 5
static const int TYPES[NTYPES] = { KRN_Q8_0, KRN_Q4_0, KRN_Q4_1, KRN_Q4_K, KRN_Q6_K };
/* odd shapes: one row, odd row counts, one block, blocks not a multiple of anything (q4_K, q6_K: of 256) */
#define NSHAPES 5
static const int SHAPES[NSHAPES][2] = { { 1, 32 }, { 3, 32 }, { 7, 96 }, { 5, 4128 }, { 33, 160 } };
static const int KSHAPES[NSHAPES][2] = { { 1, 256 }, { 3, 256 }, { 7, 768 }, { 5, 4352 }, { 33, 1280 } };
static const int *shape_of(int type, size_t k) { return krn_type_block_elems(type) == 256 ? KSHAPES[k] : SHAPES[k]; }
/* fp16 bytes of a block: d (q8_0, q4_0), d and m (q4_1), d and dmin (q4_K) at its start; d at 208 (q6_K) */
static size_t f16_bytes(int type) { return type == KRN_Q4_1 || type == KRN_Q4_K ? 4 : 2; }
static size_t f16_at(int type) { return type == KRN_Q6_K ? 208 : 0; }

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint8_t rnd8(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint8_t)(rng >> 24);
}

/* A random valid tensor: random quant bytes, finite fp16 scales (exponent never all ones). */
static void *rand_tensor(int type, int n_out, int n_in, size_t *bytes)
{
    const size_t bb = krn_type_block_bytes(type), sb = f16_bytes(type), at = f16_at(type);
    *bytes = (size_t)n_out * krn_row_bytes(type, n_in);
    uint8_t *p = malloc(*bytes);
    assert_non_null(p);
    for (size_t i = 0; i < *bytes; i++)
        p[i] = rnd8();
    for (size_t b = 0; b < *bytes / bb; b++)
        for (size_t s = 0; s < sb; s += 2)
            p[b * bb + at + s + 1] &= 0x3B; /* |scale| < 1, finite */
    return p;
}

/* GGUF's 6-bit scale and min of sub-block j (0..7) of a q4_K super-block from its 12 packed bytes q. */
static void k_scale_min(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Element e of row r decoded from planes by the layout as krn.h describes it (independent of repack.c). */
static float planes_elem(int type, const uint8_t *pl, int n_out, int n_in, int r, int e)
{
    const int nb = n_in / 32, j = e / 32, i = e % 32;
    if (type == KRN_Q6_K) { /* 192 quant bytes and 18 scale bytes (scales[16], d) per 256 elements */
        const size_t qrow6 = (size_t)n_in / 4 * 3;
        const int s = j % 8; /* sub-block of the super-block */
        const uint8_t *q = pl + (size_t)r * qrow6 + (size_t)(e / 256) * 192;
        const uint8_t *h = pl + (size_t)n_out * qrow6 + ((size_t)r * (n_in / 256) + e / 256) * 18;
        const uint8_t lo = q[16 * s + 4 * (i / 8) + i % 4], hi = q[128 + 8 * s + 4 * (i / 16) + i % 4];
        const int q6 = ((i % 8) < 4 ? lo & 0xF : lo >> 4) | ((hi >> (2 * ((i % 16) / 4))) & 3) << 4;
        const float ds = krn_f16_to_f32((uint16_t)(h[16] | h[17] << 8)) * (float)(int8_t)h[(e % 256) / 16];
        return (float)(q6 - 32) * ds; /* krn_dequant_row's order: (q - 32) * (d * scale) */
    }
    const size_t qrow = type == KRN_Q8_0 ? (size_t)n_in : (size_t)n_in / 2;
    const uint8_t *sc = pl + (size_t)n_out * qrow, *q = pl + (size_t)r * qrow;
    if (type == KRN_Q4_K) { /* 16 header bytes per 256 elements; sub-block j % 8 of super-block e / 256 */
        const uint8_t *h = sc + ((size_t)r * (n_in / 256) + e / 256) * 16;
        const float d = krn_f16_to_f32((uint16_t)(h[0] | h[1] << 8)), dmin = krn_f16_to_f32((uint16_t)(h[2] | h[3] << 8));
        int s6, m6;
        k_scale_min(j % 8, h + 4, &s6, &m6);
        const uint8_t byte = q[(size_t)j * 16 + 4 * (i / 8) + i % 4];
        const int nib = (i % 8) < 4 ? byte & 0xF : byte >> 4;
        const float d1 = d * (float)s6, m1 = dmin * (float)m6;
        return d1 * (float)nib - m1;
    }
    const size_t sbytes = type == KRN_Q4_1 ? 4 : 2;
    const uint8_t *s = sc + ((size_t)r * nb + j) * sbytes;
    const float d = krn_f16_to_f32((uint16_t)(s[0] | s[1] << 8));
    if (type == KRN_Q8_0)
        return d * (float)(int8_t)q[(size_t)j * 32 + i];
    const uint8_t byte = q[(size_t)j * 16 + 4 * (i / 8) + i % 4];
    const int nib = (i % 8) < 4 ? byte & 0xF : byte >> 4;
    if (type == KRN_Q4_0)
        return d * (float)(nib - 8);
    return d * (float)nib + krn_f16_to_f32((uint16_t)(s[2] | s[3] << 8));
}

static void test_planes_have_the_gguf_size_and_aligned_planes(void **state)
{
    (void)state;
    for (int t = 0; t < NTYPES; t++)
        for (size_t k = 0; k < NSHAPES; k++) {
            const int ty = TYPES[t], n_out = shape_of(ty, k)[0], n_in = shape_of(ty, k)[1];
            const size_t q = krn_planes_qrow(ty, n_in);
            assert_int_equal(q % 16, 0);
            assert_int_equal(krn_planes_scale_off(ty, n_out, n_in), (size_t)n_out * q);
            assert_int_equal(krn_planes_scale_off(ty, n_out, n_in) +
                                 (size_t)n_out * (n_in / krn_type_block_elems(ty)) * krn_planes_scale_bytes(ty),
                             (size_t)n_out * krn_row_bytes(ty, n_in));
        }
    assert_int_equal(krn_planes_qrow(KRN_Q8_0, 48), 0);
    assert_int_equal(krn_planes_qrow(KRN_Q4_K, 96), 0); /* not a whole super-block */
    assert_int_equal(krn_planes_qrow(KRN_Q6_K, 128), 0);
    assert_int_equal(krn_planes_qrow(KRN_Q6_K, 512), 384); /* 6 bits per element */
    assert_int_equal(krn_planes_scale_bytes(KRN_Q6_K), 18);
    assert_int_equal(krn_planes_qrow(KRN_F16, 256), 0);
    assert_int_equal(krn_planes_scale_bytes(KRN_F16), 0);
    assert_false(krn_planes_supported(KRN_F16));
    assert_false(krn_planes_supported(KRN_Q5_K)); /* q5_K stays in GGUF blocks everywhere */
    assert_int_equal(krn_planes_qrow(KRN_Q5_K, 256), 0);
}

static void test_repack_then_unpack_gives_back_the_gguf_bytes(void **state)
{
    (void)state;
    for (int t = 0; t < NTYPES; t++)
        for (size_t k = 0; k < NSHAPES; k++) {
            const int ty = TYPES[t], n_out = shape_of(ty, k)[0], n_in = shape_of(ty, k)[1];
            size_t bytes;
            uint8_t *g = rand_tensor(ty, n_out, n_in, &bytes), *p = malloc(bytes), *back = malloc(bytes);
            assert_non_null(p);
            assert_non_null(back);
            krn_repack_host(ty, n_out, n_in, g, p);
            assert_memory_not_equal(g, p, bytes);
            krn_unpack_host(ty, n_out, n_in, p, back);
            assert_memory_equal(g, back, bytes);
            free(g), free(p), free(back);
        }
}

static void test_planes_decode_to_the_values_of_the_gguf_blocks(void **state)
{
    (void)state;
    for (int t = 0; t < NTYPES; t++)
        for (size_t k = 0; k < NSHAPES; k++) {
            const int ty = TYPES[t], n_out = shape_of(ty, k)[0], n_in = shape_of(ty, k)[1];
            size_t bytes;
            uint8_t *g = rand_tensor(ty, n_out, n_in, &bytes), *p = malloc(bytes);
            float *ref = malloc(sizeof(float) * (size_t)n_in);
            assert_non_null(p);
            assert_non_null(ref);
            krn_repack_host(ty, n_out, n_in, g, p);
            for (int r = 0; r < n_out; r++) {
                krn_dequant_row(ty, g + (size_t)r * krn_row_bytes(ty, n_in), ref, n_in);
                for (int e = 0; e < n_in; e++)
                    if (planes_elem(ty, p, n_out, n_in, r, e) != ref[e])
                        fail_msg("%s %dx%d: row %d element %d: planes %g, blocks %g", krn_type_name(ty), n_out,
                                 n_in, r, e, (double)planes_elem(ty, p, n_out, n_in, r, e), (double)ref[e]);
            }
            free(g), free(p), free(ref);
        }
}

static void test_cpu_matmul_refuses_planes_with_a_message(void **state)
{
    (void)state;
    dev_err err = { 0 };
    dev_platform *pl = dev_platform_open(DEV_KIND_CPU, 1, &err);
    assert_non_null(pl);
    dev_device *d = dev_platform_device(pl, 0);
    dev_stream *s = dev_stream_create(d, "t", &err);
    assert_non_null(s);
    float *x = dev_malloc(d, sizeof(float) * 64, &err), *y = dev_malloc(d, sizeof(float) * 4, &err);
    void *w = dev_malloc(d, 4 * krn_row_bytes(KRN_Q8_0, 64), &err);
    assert_non_null(x), assert_non_null(y), assert_non_null(w);
    memset(w, 0, 4 * krn_row_bytes(KRN_Q8_0, 64));
    memset(x, 0, sizeof(float) * 64);
    krn_weight W = { .type = KRN_Q8_0, .n_out = 4, .n_in = 64, .data = w, .layout = KRN_LAYOUT_PLANES };
    assert_int_equal(krn_matmul_async(s, y, &W, x, 1), MEMRA_E_INVAL);
    assert_int_equal(krn_layout_check(&W, 0, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "CUDA decode format"));
    assert_int_equal(krn_layout_check(&W, 1, NULL), 0);
    W.layout = 7;
    dev_err e2 = { 0 };
    assert_int_equal(krn_layout_check(&W, 1, &e2), MEMRA_E_INVAL);
    assert_non_null(strstr(e2.msg, "layout 7 unknown"));
    W.layout = KRN_LAYOUT_PLANES, W.type = KRN_Q6_K, W.n_in = 256;
    assert_int_equal(krn_layout_check(&W, 1, NULL), 0);
    W.type = KRN_BF16;
    dev_err e3 = { 0 };
    assert_int_equal(krn_layout_check(&W, 1, &e3), MEMRA_E_INVAL);
    assert_non_null(strstr(e3.msg, "type bf16"));
    assert_non_null(strstr(e3.msg, "q8_0, q4_0, q4_1, q4_K, q6_K"));
    W.type = KRN_Q5_K;
    dev_err e4 = { 0 };
    assert_int_equal(krn_layout_check(&W, 1, &e4), MEMRA_E_INVAL);
    assert_non_null(strstr(e4.msg, "type q5_K"));
    W = (krn_weight){ .type = KRN_Q8_0, .n_out = 4, .n_in = 64, .data = w, .layout = KRN_LAYOUT_BLOCKS };
    assert_int_equal(krn_matmul_async(s, y, &W, x, 1), 0); /* blocks still run */
    assert_int_equal(dev_stream_sync(s, &err), 0);
    dev_free(d, w), dev_free(d, x), dev_free(d, y);
    dev_stream_destroy(s);
    dev_platform_close(pl);
}

static void test_repack_on_a_cpu_stream_writes_the_host_repack(void **state)
{
    (void)state;
    dev_err err = { 0 };
    dev_platform *pl = dev_platform_open(DEV_KIND_CPU, 1, &err);
    assert_non_null(pl);
    dev_device *d = dev_platform_device(pl, 0);
    dev_stream *s = dev_stream_create(d, "t", &err);
    assert_non_null(s);
    for (int t = 0; t < NTYPES; t++) {
        const int n_in = shape_of(TYPES[t], 2)[1]; /* 96, q4_K and q6_K 768 */
        size_t bytes;
        uint8_t *g = rand_tensor(TYPES[t], 7, n_in, &bytes), *want = malloc(bytes);
        assert_non_null(want);
        krn_repack_host(TYPES[t], 7, n_in, g, want);
        void *src = dev_malloc(d, bytes, &err), *dst = dev_malloc(d, bytes, &err);
        assert_non_null(src), assert_non_null(dst);
        memcpy(src, g, bytes);
        krn_weight S = { .type = TYPES[t], .n_out = 7, .n_in = n_in, .data = src };
        krn_weight D = S;
        D.data = dst;
        assert_int_equal(krn_repack_async(s, &D, &S), 0);
        assert_int_equal(D.layout, KRN_LAYOUT_PLANES);
        assert_int_equal(dev_stream_sync(s, &err), 0);
        assert_memory_equal(dst, want, bytes);
        krn_weight bad = S; /* same buffer, or a shape that differs: refused */
        assert_int_equal(krn_repack_async(s, &bad, &S), MEMRA_E_INVAL);
        D.layout = KRN_LAYOUT_BLOCKS, D.n_out = 6;
        assert_int_equal(krn_repack_async(s, &D, &S), MEMRA_E_INVAL);
        dev_free(d, src), dev_free(d, dst);
        free(g), free(want);
    }
    dev_stream_destroy(s);
    dev_platform_close(pl);
}

static void test_repack_door_is_strict_and_cpu_devices_keep_blocks_in_the_exact_mode(void **state)
{
    (void)state;
    int on = -1;
    dev_err err = { 0 };
    unsetenv("MEMRA_CUDA_REPACK");
    assert_int_equal(mdl_repack_door(&on, &err), 0);
    assert_int_equal(on, 1);
    setenv("MEMRA_CUDA_REPACK", "0", 1);
    assert_int_equal(mdl_repack_door(&on, &err), 0);
    assert_int_equal(on, 0);
    setenv("MEMRA_CUDA_REPACK", "1", 1);
    assert_int_equal(mdl_repack_door(&on, &err), 0);
    assert_int_equal(on, 1);
    setenv("MEMRA_CUDA_REPACK", "yes", 1);
    assert_int_equal(mdl_repack_door(&on, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "MEMRA_CUDA_REPACK"));
    assert_non_null(strstr(err.msg, "allowed 1"));
    /* a bad door fails the repack (and so the load) on any device */
    dev_platform *pl = dev_platform_open(DEV_KIND_CPU, 1, &err);
    assert_non_null(pl);
    dev_device *d = dev_platform_device(pl, 0);
    size_t bytes;
    uint8_t *g = rand_tensor(KRN_Q4_0, 3, 64, &bytes);
    void *w = dev_malloc(d, bytes, &err);
    assert_non_null(w);
    memcpy(w, g, bytes);
    krn_weight W = { .type = KRN_Q4_0, .n_out = 3, .n_in = 64, .data = w };
    krn_weight *const ws[] = { &W, NULL };
    dev_err e2 = { 0 };
    assert_int_equal(mdl_repack_weights(d, ws, 2, &e2), MEMRA_E_INVAL);
    unsetenv("MEMRA_CUDA_REPACK");
    assert_int_equal(mdl_repack_weights(d, ws, 2, &e2), 0); /* CPU device: nothing changes */
    assert_int_equal(W.layout, KRN_LAYOUT_BLOCKS);
    assert_memory_equal(w, g, bytes);
    dev_free(d, w);
    free(g);
    dev_platform_close(pl);
}

/* A CPU device in the fast mode takes rows of 8 for q4_0 / q4_1 / q8_0 weights (the bytes of krn_rows8_pack_group
 * for each whole group, the last n_out % 8 rows as they are) and keeps blocks for the rest; the exact mode takes
 * them where the AVX2 path runs; MEMRA_CPU_REPACK=0 keeps blocks, and a bad
 * MEMRA_CPU_REPACK fails the repack naming the variable. */
static void test_cpu_repacks_to_rows_of_8_by_mode_behind_its_door(void **state)
{
    (void)state;
    dev_err err = { 0 };
    dev_platform *pl = dev_platform_open(DEV_KIND_CPU, 1, &err);
    assert_non_null(pl);
    dev_device *d = dev_platform_device(pl, 0);
    size_t bytes, bytes_k, bytes_8;
    uint8_t *g = rand_tensor(KRN_Q4_1, 19, 64, &bytes), *gk = rand_tensor(KRN_Q4_K, 8, 256, &bytes_k);
    uint8_t *g8 = rand_tensor(KRN_Q8_0, 16, 64, &bytes_8);
    uint8_t *want = malloc(bytes), *want8 = malloc(bytes_8);
    assert_true(want && want8);
    const size_t rb = krn_row_bytes(KRN_Q4_1, 64), rb8 = krn_row_bytes(KRN_Q8_0, 64);
    for (int o = 0; o < 16; o += 8) {
        krn_rows8_pack_group(KRN_Q4_1, 64, g + o * rb, 8, rb, want + o * rb);
        krn_rows8_pack_group(KRN_Q8_0, 64, g8 + o * rb8, 8, rb8, want8 + o * rb8);
    }
    memcpy(want + 16 * rb, g + 16 * rb, 3 * rb);
    const int exact_rows8 = krn_quant_path() == KRN_PATH_AVX2; /* the exact mode's 8-row kernel runs */
    void *w = dev_malloc(d, bytes, &err), *wk = dev_malloc(d, bytes_k, &err), *w8 = dev_malloc(d, bytes_8, &err);
    assert_true(w && wk && w8);
    for (int arm = 0; arm < 5; arm++) { /* exact mode; fast, door 0; door "yes"; fast, door unset; exact, door 0 */
        memcpy(w, g, bytes);
        memcpy(wk, gk, bytes_k);
        memcpy(w8, g8, bytes_8);
        krn_weight W = { .type = KRN_Q4_1, .n_out = 19, .n_in = 64, .data = w };
        krn_weight K = { .type = KRN_Q4_K, .n_out = 8, .n_in = 256, .data = wk };
        krn_weight Q = { .type = KRN_Q8_0, .n_out = 16, .n_in = 64, .data = w8 };
        krn_weight *const ws[] = { &W, &K, &Q };
        const int fast = arm == 1 || arm == 2 || arm == 3;
        dev_platform_set_matmul_x8(pl, fast);
        if (arm == 1 || arm == 4)
            setenv("MEMRA_CPU_REPACK", "0", 1);
        else if (arm == 2)
            setenv("MEMRA_CPU_REPACK", "yes", 1);
        else
            unsetenv("MEMRA_CPU_REPACK");
        dev_err e2 = { 0 };
        const int rc = mdl_repack_weights(d, ws, 3, &e2);
        if (arm == 2) {
            assert_int_equal(rc, MEMRA_E_INVAL);
            assert_non_null(strstr(e2.msg, "MEMRA_CPU_REPACK"));
            continue;
        }
        assert_int_equal(rc, 0);
        assert_int_equal(K.layout, KRN_LAYOUT_BLOCKS);
        assert_memory_equal(wk, gk, bytes_k);
        const int w_rows8 = arm == 3 || (arm == 0 && exact_rows8), q_rows8 = w_rows8;
        assert_int_equal(W.layout, w_rows8 ? KRN_LAYOUT_ROWS8 : KRN_LAYOUT_BLOCKS);
        assert_memory_equal(w, w_rows8 ? want : g, bytes);
        assert_int_equal(Q.layout, q_rows8 ? KRN_LAYOUT_ROWS8 : KRN_LAYOUT_BLOCKS);
        assert_memory_equal(w8, q_rows8 ? want8 : g8, bytes_8);
    }
    unsetenv("MEMRA_CPU_REPACK");
    dev_free(d, w);
    dev_free(d, wk);
    dev_free(d, w8);
    free(g);
    free(gk);
    free(g8);
    free(want);
    free(want8);
    dev_platform_close(pl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_planes_have_the_gguf_size_and_aligned_planes),
        cmocka_unit_test(test_repack_then_unpack_gives_back_the_gguf_bytes),
        cmocka_unit_test(test_planes_decode_to_the_values_of_the_gguf_blocks),
        cmocka_unit_test(test_cpu_matmul_refuses_planes_with_a_message),
        cmocka_unit_test(test_repack_on_a_cpu_stream_writes_the_host_repack),
        cmocka_unit_test(test_repack_door_is_strict_and_cpu_devices_keep_blocks_in_the_exact_mode),
        cmocka_unit_test(test_cpu_repacks_to_rows_of_8_by_mode_behind_its_door),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
