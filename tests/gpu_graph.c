/* CUDA graphs through device/dev.h: a captured sequence of forward ops (q4_K matmul, add, rmsnorm, and an
 * attention over n_ctx > 256, whose split-K workspace is a stream-ordered allocation inside the graph)
 * replays with the same bits as the same ops run eagerly, twice, and still does after pos changes in
 * device memory (a graph reads pos, it does not bake it in). Nothing runs during the capture.
 * Exits 77 (skipped) with a reason when the build has no CUDA or no GPU is visible. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "device/dev.h"
#include "kernels/krn.h"
#include "kernels/quant.h"

static dev_platform *g_p;

enum { B = 3, N_IN = 512, N_OUT = 256, NH = 4, NKV = 2, HD = 64, NCTX = 512 };

typedef struct bufs {
    krn_weight W;
    float *x, *y, *y2, *norm_w, *q, *kc, *vc, *att;
    int32_t *pos, *seq;
} bufs;

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((int)(rng % 2001) - 1000) / 1000.0f;
}

static void *up(dev_device *d, const void *h, size_t bytes)
{
    dev_err err = {0};
    void *p = dev_malloc(d, bytes, &err);
    assert_non_null(p);
    assert_int_equal(dev_copy_h2d_sync(d, p, h, bytes, &err), 0);
    return p;
}

static float *up_rand(dev_device *d, size_t n)
{
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        h[i] = frand();
    float *p = up(d, h, n * sizeof(float));
    free(h);
    return p;
}

/* y = W x; y2 = W x; y += y2; y2 = rmsnorm(y) * w; att = attention(q, caches) at pos. */
static void enqueue_ops(dev_stream *s, const bufs *b)
{
    assert_int_equal(krn_matmul_async(s, b->y, &b->W, b->x, B), 0);
    assert_int_equal(krn_matmul_async(s, b->y2, &b->W, b->x, B), 0);
    assert_int_equal(krn_add_async(s, b->y, b->y2, B, N_OUT), 0);
    assert_int_equal(krn_rmsnorm_async(s, b->y2, b->y, b->norm_w, B, N_OUT, 1e-5f), 0);
    const krn_kv_cache c = {b->kc, b->vc, KRN_F32};
    assert_int_equal(krn_attention_async(s, b->att, b->q, &c, b->seq, b->pos, B, NH, NKV, HD, NCTX), 0);
}

static void read_out(dev_stream *s, const bufs *b, float *y2, float *att)
{
    dev_err err = {0};
    assert_int_equal(dev_copy_d2h_async(s, y2, b->y2, sizeof(float) * B * N_OUT), 0);
    assert_int_equal(dev_copy_d2h_async(s, att, b->att, sizeof(float) * B * NH * HD), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
}

static void set_pos(dev_device *d, const bufs *b, int p0)
{
    dev_err err = {0};
    int32_t pos[B] = {p0, p0 + 1, p0 + 2};
    assert_int_equal(dev_copy_h2d_sync(d, b->pos, pos, sizeof pos, &err), 0);
}

static void test_graph_replays_forward_ops_bit_identically_and_reads_pos_from_memory(void **state)
{
    (void)state;
    dev_device *d = dev_platform_device(g_p, 0);
    dev_err err = {0};
    dev_stream *s = dev_stream_create(d, "graph", &err);
    assert_non_null(s);
    bufs b;
    size_t rb = krn_row_bytes(KRN_Q4_K, N_IN);
    uint8_t *hw = malloc(rb * N_OUT);
    float row[N_IN];
    for (int r = 0; r < N_OUT; r++) {
        for (int i = 0; i < N_IN; i++)
            row[i] = frand();
        krn_quant_row(KRN_Q4_K, row, hw + (size_t)r * rb, N_IN);
    }
    b.W = (krn_weight){KRN_Q4_K, N_OUT, N_IN, up(d, hw, rb * N_OUT), KRN_LAYOUT_BLOCKS};
    free(hw);
    b.x = up_rand(d, (size_t)B * N_IN);
    b.y = up_rand(d, (size_t)B * N_OUT);
    b.y2 = up_rand(d, (size_t)B * N_OUT);
    b.norm_w = up_rand(d, N_OUT);
    b.q = up_rand(d, (size_t)B * NH * HD);
    b.kc = up_rand(d, (size_t)NCTX * NKV * HD);
    b.vc = up_rand(d, (size_t)NCTX * NKV * HD);
    b.att = up_rand(d, (size_t)B * NH * HD);
    int32_t seq[B] = {0, 0, 0};
    b.seq = up(d, seq, sizeof seq);
    b.pos = dev_malloc(d, sizeof(int32_t) * B, &err);
    assert_non_null(b.pos);

    static float ey[B * N_OUT], eatt[B * NH * HD], gy[B * N_OUT], gatt[B * NH * HD];
    static float ey2[B * N_OUT], eatt2[B * NH * HD];
    /* eager at pos 300 and at pos 40 */
    set_pos(d, &b, 300);
    enqueue_ops(s, &b);
    read_out(s, &b, ey, eatt);
    set_pos(d, &b, 40);
    enqueue_ops(s, &b);
    read_out(s, &b, ey2, eatt2);

    /* capture at pos 300; poison the outputs: a capture must not run anything */
    set_pos(d, &b, 300);
    static float poison[B * NH * HD];
    for (int i = 0; i < B * NH * HD; i++)
        poison[i] = -12345.0f;
    assert_int_equal(dev_copy_h2d_sync(d, b.att, poison, sizeof poison, &err), 0);
    assert_int_equal(dev_stream_capture_begin(s, &err), 0);
    enqueue_ops(s, &b);
    dev_graph *g = NULL;
    assert_int_equal(dev_stream_capture_end(s, &g, &err), 0);
    assert_non_null(g);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    assert_int_equal(dev_copy_d2h_async(s, gatt, b.att, sizeof gatt), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    assert_memory_equal(gatt, poison, sizeof gatt);

    for (int rep = 0; rep < 2; rep++) {
        assert_int_equal(dev_graph_launch_async(g, s), 0);
        read_out(s, &b, gy, gatt);
        assert_memory_equal(gy, ey, sizeof gy);
        assert_memory_equal(gatt, eatt, sizeof gatt);
    }
    /* the same graph at other positions gives the eager bits of those positions */
    set_pos(d, &b, 40);
    assert_int_equal(dev_graph_launch_async(g, s), 0);
    read_out(s, &b, gy, gatt);
    assert_memory_equal(gy, ey2, sizeof gy);
    assert_memory_equal(gatt, eatt2, sizeof gatt);
    assert_true(memcmp(eatt, eatt2, sizeof eatt) != 0); /* the positions matter, so the check can fail */

    dev_graph_destroy(g);
    void *ptrs[] = {(void *)b.W.data, b.x, b.y, b.y2, b.norm_w, b.q, b.kc, b.vc, b.att, b.pos, b.seq};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        dev_free(d, ptrs[i]);
    dev_stream_destroy(s);
}

static void test_graph_launch_on_another_device_is_rejected(void **state)
{
    (void)state;
    if (dev_platform_count(g_p) < 2) {
        printf("skipped: needs >= 2 GPUs, %d visible\n", dev_platform_count(g_p));
        skip();
    }
    dev_err err = {0};
    dev_device *d0 = dev_platform_device(g_p, 0), *d1 = dev_platform_device(g_p, 1);
    dev_stream *s0 = dev_stream_create(d0, "g0", &err), *s1 = dev_stream_create(d1, "g1", &err);
    float *a = dev_malloc(d0, 64, &err);
    assert_int_equal(dev_stream_capture_begin(s0, &err), 0);
    assert_int_equal(dev_copy_d2d_async(s0, a + 8, a, 32), 0);
    dev_graph *g = NULL;
    assert_int_equal(dev_stream_capture_end(s0, &g, &err), 0);
    assert_int_equal(dev_graph_launch_async(g, s1), MEMRA_E_INVAL);
    assert_int_equal(dev_graph_launch_async(g, s0), 0);
    assert_int_equal(dev_stream_sync(s0, &err), 0);
    dev_graph_destroy(g);
    dev_free(d0, a);
    dev_stream_destroy(s0);
    dev_stream_destroy(s1);
}

int main(void)
{
    dev_err err = {0};
    g_p = dev_platform_open(DEV_KIND_CUDA, 0, &err);
    if (!g_p) {
        printf("skipped: no CUDA device to test on: %s\n", err.msg);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_replays_forward_ops_bit_identically_and_reads_pos_from_memory),
        cmocka_unit_test(test_graph_launch_on_another_device_is_rejected),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    dev_platform_close(g_p);
    return rc;
}
