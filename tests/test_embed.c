/* krn_embed_rows_async on the CPU backend: for every type, the rows it gathers on a stream have the bytes of
 * krn_dequant_row (the host gather, mdl_embed_rows) of the row each token picks, and a token outside
 * [0, n_out) gives a row of zeros (y is filled with 0xFF bytes first, so a row the op never wrote fails);
 * the op declares the whole table (a table on another device is refused without a peer grant and counted
 * as exactly n_out * row_bytes remote bytes with one); bad arguments are refused before anything is enqueued. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "support/test_rand.h"
#include "kernels/cpu/krn_cpu.h"
#include "kernels/krn.h"
#include "kernels/quant.h"

static const int k_types[] = { KRN_F32, KRN_F16, KRN_BF16, KRN_Q8_0, KRN_Q4_0, KRN_Q4_1, KRN_Q4_K, KRN_Q5_K, KRN_Q6_K };
#define N_TYPES ((int)(sizeof k_types / sizeof k_types[0]))

static uint64_t rng_state;
static float frand(void) { return test_frand(&rng_state); } /* uniform in [-1, 1) */

/* A host table of n_out random rows of type t (krn_quant_row of random floats); *rb = its row bytes. */
static unsigned char *rand_table(int t, int n_out, int n_in, size_t *rb)
{
    *rb = krn_row_bytes(t, n_in);
    assert_true(*rb > 0);
    unsigned char *tab = malloc(*rb * (size_t)n_out);
    float *src = malloc(sizeof(float) * (size_t)n_in);
    assert_true(tab && src);
    for (int r = 0; r < n_out; r++) {
        for (int i = 0; i < n_in; i++)
            src[i] = frand() * (1.0f + (float)(r % 5)); /* rows of different ranges */
        krn_quant_row(t, src, tab + (size_t)r * *rb, n_in);
    }
    free(src);
    return tab;
}

/* got (B, n_in) against the host gather: krn_dequant_row's bytes for a token in range, zeros otherwise. */
static void check_rows(int t, const unsigned char *tab, size_t rb, int n_out, int n_in, const int32_t *tok, int B,
                       const float *got)
{
    float *want = malloc(sizeof(float) * (size_t)n_in);
    assert_non_null(want);
    for (int b = 0; b < B; b++) {
        if (tok[b] >= 0 && tok[b] < n_out)
            krn_dequant_row(t, tab + (size_t)tok[b] * rb, want, n_in);
        else
            memset(want, 0, sizeof(float) * (size_t)n_in);
        if (memcmp(got + (size_t)b * n_in, want, sizeof(float) * (size_t)n_in) != 0)
            fail_msg("embed_rows %s: row %d (token %d) differs from %s", krn_type_name(t), b, tok[b],
                     tok[b] >= 0 && tok[b] < n_out ? "krn_dequant_row" : "zeros");
    }
    free(want);
}

static void test_rows_on_a_cpu_stream_have_the_host_dequant_bits_and_zeros_outside_the_table(void **state)
{
    (void)state;
    enum { NOUT = 11, B = 8 };
    static const int n_ins[] = { 256, 512 };
    dev_err err = { 0 };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    assert_non_null(p);
    dev_device *d = dev_platform_device(p, 0);
    dev_stream *s = dev_stream_create(d, "embed", &err);
    assert_non_null(s);
    const int32_t tok[B] = { 3, -1, 0, NOUT - 1, NOUT, 3, INT32_MIN, 7 };
    int32_t *dtok = dev_malloc(d, sizeof tok, &err);
    assert_non_null(dtok);
    assert_int_equal(dev_copy_h2d_sync(d, dtok, tok, sizeof tok, &err), 0);
    for (int k = 0; k < 2; k++)
        for (int ti = 0; ti < N_TYPES; ti++) {
            const int t = k_types[ti], n_in = n_ins[k];
            rng_state = 1000 + 10 * ti + k;
            size_t rb;
            unsigned char *tab = rand_table(t, NOUT, n_in, &rb);
            const size_t yb = sizeof(float) * (size_t)B * n_in;
            float *got = malloc(yb);
            assert_non_null(got);
            memset(got, 0xFF, yb);
            void *dtab = dev_malloc(d, rb * NOUT, &err);
            float *dy = dev_malloc(d, yb, &err);
            assert_true(dtab && dy);
            assert_int_equal(dev_copy_h2d_sync(d, dtab, tab, rb * NOUT, &err), 0);
            assert_int_equal(dev_copy_h2d_sync(d, dy, got, yb, &err), 0); /* 0xFF: NaN rows until written */
            const krn_weight T = { .type = t, .n_out = NOUT, .n_in = n_in, .data = dtab };
            dev_counters c0, c1;
            dev_device_counters(d, &c0);
            assert_int_equal(krn_embed_rows_async(s, dy, &T, dtok, B), 0);
            assert_int_equal(dev_copy_d2h_async(s, got, dy, yb), 0);
            assert_int_equal(dev_stream_sync(s, &err), 0);
            dev_device_counters(d, &c1);
            assert_true(c1.kernels_run > c0.kernels_run); /* the op ran on the stream */
            check_rows(t, tab, rb, NOUT, n_in, tok, B, got);
            /* the pure kernel, without a stream: the same bytes */
            float *direct = malloc(yb);
            assert_non_null(direct);
            krn_cpu_embed_rows(&(krn_cpu_embed_rows_args){ direct, tab, tok, t, NOUT, n_in, B, rb });
            assert_memory_equal(direct, got, yb);
            free(direct);
            dev_free(d, dtab);
            dev_free(d, dy);
            free(tab);
            free(got);
        }
    dev_free(d, dtok);
    dev_stream_destroy(s);
    dev_platform_close(p);
}

/* The table's rows are picked by device values, so the op declares the whole table: read from another
 * device it needs a peer grant, and then counts exactly n_out * row_bytes remote bytes. */
static void test_a_table_on_another_device_needs_a_grant_and_counts_the_whole_table(void **state)
{
    (void)state;
    enum { NOUT = 5, NIN = 256, B = 2 };
    dev_err err = { 0 };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 2, &err);
    assert_non_null(p);
    dev_device *d0 = dev_platform_device(p, 0), *d1 = dev_platform_device(p, 1);
    rng_state = 77;
    size_t rb;
    unsigned char *tab = rand_table(KRN_Q4_K, NOUT, NIN, &rb);
    const int32_t tok[B] = { 4, 1 };
    float got[B * NIN];
    void *dtab = dev_malloc(d0, rb * NOUT, &err); /* the table on device 0 */
    int32_t *dtok = dev_malloc(d1, sizeof tok, &err);
    float *dy = dev_malloc(d1, sizeof got, &err);
    assert_true(dtab && dtok && dy);
    assert_int_equal(dev_copy_h2d_sync(d0, dtab, tab, rb * NOUT, &err), 0);
    assert_int_equal(dev_copy_h2d_sync(d1, dtok, tok, sizeof tok, &err), 0);
    const krn_weight T = { .type = KRN_Q4_K, .n_out = NOUT, .n_in = NIN, .data = dtab };

    dev_stream *s = dev_stream_create(d1, "no-grant", &err);
    assert_non_null(s);
    assert_int_equal(krn_embed_rows_async(s, dy, &T, dtok, B), 0);
    assert_int_not_equal(dev_stream_sync(s, &err), 0); /* refused: no grant */
    dev_stream_destroy(s);
    dev_counters c;
    dev_device_counters(d1, &c);
    assert_true(c.access_denied >= 1);

    dev_err_clear(&err);
    assert_int_equal(dev_peer_grant(d1, d0, &err), 0);
    s = dev_stream_create(d1, "granted", &err);
    assert_non_null(s);
    dev_device_counters_reset(d1);
    assert_int_equal(krn_embed_rows_async(s, dy, &T, dtok, B), 0);
    assert_int_equal(dev_copy_d2h_async(s, got, dy, sizeof got), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    dev_device_counters(d1, &c);
    assert_int_equal(c.remote_read_bytes, rb * NOUT); /* the whole table, whatever the tokens */
    check_rows(KRN_Q4_K, tab, rb, NOUT, NIN, tok, B, got);
    dev_stream_destroy(s);
    dev_free(d0, dtab);
    dev_free(d1, dtok);
    dev_free(d1, dy);
    dev_platform_close(p);
    free(tab);
}

static void test_bad_arguments_are_refused_before_enqueue(void **state)
{
    (void)state;
    dev_err err = { 0 };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    assert_non_null(p);
    dev_device *d = dev_platform_device(p, 0);
    dev_stream *s = dev_stream_create(d, "refusals", &err);
    float *buf = dev_malloc(d, 8192, &err);
    int32_t *tok = dev_malloc(d, 64, &err);
    assert_true(s && buf && tok);
    const krn_weight ok = { .type = KRN_Q8_0, .n_out = 4, .n_in = 64, .data = buf };
    krn_weight T = ok;
    dev_counters c0, c1;
    dev_device_counters(d, &c0);
    assert_int_equal(krn_embed_rows_async(s, buf, NULL, tok, 1), MEMRA_E_INVAL);  /* no table */
    assert_int_equal(krn_embed_rows_async(s, buf, &T, tok, 0), MEMRA_E_INVAL);    /* B = 0 */
    assert_int_equal(krn_embed_rows_async(s, buf, &T, tok, -1), MEMRA_E_INVAL);   /* B < 0 */
    assert_int_equal(krn_embed_rows_async(s, buf, &T, NULL, 1), MEMRA_E_INVAL);   /* no tokens */
    assert_int_equal(krn_embed_rows_async(s, NULL, &T, tok, 1), MEMRA_E_INVAL);   /* no y */
    assert_int_equal(krn_embed_rows_async(NULL, buf, &T, tok, 1), MEMRA_E_INVAL); /* no stream */
    T.layout = KRN_LAYOUT_PLANES;                                                 /* a matmul format */
    assert_int_equal(krn_embed_rows_async(s, buf, &T, tok, 1), MEMRA_E_INVAL);
    T = ok, T.data = NULL;
    assert_int_equal(krn_embed_rows_async(s, buf, &T, tok, 1), MEMRA_E_INVAL);
    T = ok, T.type = 99;
    assert_int_equal(krn_embed_rows_async(s, buf, &T, tok, 1), MEMRA_E_INVAL);
    T = ok, T.n_in = 48; /* not a multiple of the q8_0 block (32) */
    assert_int_equal(krn_embed_rows_async(s, buf, &T, tok, 1), MEMRA_E_INVAL);
    T = ok, T.n_in = 0;
    assert_int_equal(krn_embed_rows_async(s, buf, &T, tok, 1), MEMRA_E_INVAL);
    T = ok, T.n_out = 0;
    assert_int_equal(krn_embed_rows_async(s, buf, &T, tok, 1), MEMRA_E_INVAL);
    T = ok, T.type = KRN_Q4_K, T.n_in = 128; /* q4_K blocks are 256 */
    assert_int_equal(krn_embed_rows_async(s, buf, &T, tok, 1), MEMRA_E_INVAL);
    assert_int_equal(dev_stream_sync(s, &err), 0); /* nothing was enqueued, nothing failed */
    dev_device_counters(d, &c1);
    assert_int_equal(c1.kernels_run, c0.kernels_run);
    /* and the valid call is accepted (the refusals above are the arguments', not the op's) */
    assert_int_equal(dev_copy_h2d_sync(d, tok, &(int32_t){ 2 }, sizeof(int32_t), &err), 0);
    assert_int_equal(krn_embed_rows_async(s, buf + 1024, &ok, tok, 1), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    dev_stream_destroy(s);
    dev_free(d, buf);
    dev_free(d, tok);
    dev_platform_close(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_on_a_cpu_stream_have_the_host_dequant_bits_and_zeros_outside_the_table),
        cmocka_unit_test(test_a_table_on_another_device_needs_a_grant_and_counts_the_whole_table),
        cmocka_unit_test(test_bad_arguments_are_refused_before_enqueue),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
