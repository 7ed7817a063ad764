/* The embedding gather on the GPU (kernels/cuda/krn_cuda_embed.cu): for every type, the rows it writes have the
 * bytes of krn_dequant_row on the host (the host gather, mdl_embed_rows) for the row each token picks, and a
 * token outside [0, n_out) gives a row of zeros (y is filled with 0xFF bytes first, so a row never written
 * fails); with PDL on, on a second stream and from a table at an odd address (bytes are read one by one) the
 * bits are the same. The op table routes a CUDA dev_stream to it; bad arguments are refused with a message
 * naming the argument. Row lengths of 1 to 16 slices of 256 elements (the kernel's grid.y), and a partial last slice
 * (288) for the types whose blocks allow it. Random rows: tests/support/cuda_ref.c. Exits 77 (skipped) without a GPU. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#ifdef MEMRA_HAVE_CUDA

#include <cuda_runtime_api.h>
#include "device/dev.h"
#include "kernels/krn.h"
#include "kernels/cuda/krn_cuda.h"
#include "support/cuda_fix.h"
#include "support/cuda_ref.h"

/* A random (n_out, n_in) table of type t in GGUF blocks on the host; *rb = its row bytes. */
static uint8_t *rand_table(const cuda_ref_type *t, int n_out, int n_in, size_t *rb) {
    size_t bytes;
    uint8_t *h = cuda_fix_rand_blocks(t, n_out, n_in, &bytes);
    *rb = bytes / (size_t)n_out;
    assert_int_equal(*rb, krn_row_bytes(t->type, n_in));
    return h;
}

/* got (B, n_in) against the host: krn_dequant_row's bytes for a token in range, zeros otherwise. */
static void check_rows(const cuda_ref_type *t, const uint8_t *tab, size_t rb, int n_out, int n_in,
                       const int32_t *tok, int B, const float *got, const char *how) {
    float *want = malloc(sizeof(float) * (size_t)n_in);
    assert_non_null(want);
    for (int b = 0; b < B; b++) {
        const int in = tok[b] >= 0 && tok[b] < n_out;
        if (in)
            krn_dequant_row(t->type, tab + (size_t)tok[b] * rb, want, n_in);
        else
            memset(want, 0, sizeof(float) * (size_t)n_in);
        const float *g = got + (size_t)b * n_in;
        for (int i = 0; i < n_in; i++)
            if (memcmp(&g[i], &want[i], sizeof(float)) != 0)
                fail_msg("embed_rows %s n_in=%d (%s): row %d (token %d) element %d = %.9g, %s %.9g", t->name, n_in,
                         how, b, tok[b], i, g[i], in ? "krn_dequant_row" : "zero", want[i]);
    }
    free(want);
}

/* One type and shape: the table at offset `off` of its buffer, B rows (in range and not), run on g_s1 without
 * PDL and on g_s2 with it; both against the host. */
static void check_type(const cuda_ref_type *t, int n_out, int n_in, size_t off) {
    enum { B = 9 };
    const int32_t tok[B] = {1, -1, 0, n_out - 1, n_out, 1, INT32_MIN, INT32_MAX, n_out / 2};
    size_t rb;
    uint8_t *tab = rand_table(t, n_out, n_in, &rb);
    const size_t tb = rb * (size_t)n_out, yb = sizeof(float) * (size_t)B * n_in;
    float *got = malloc(yb);
    assert_non_null(got);
    uint8_t *dbuf = dalloc(tb + off);
    upload(dbuf + off, tab, tb);
    int32_t *dtok = dupload(tok, sizeof tok);
    float *dy1 = dalloc(yb), *dy2 = dalloc(yb);
    dfill(dy1, 0xFF, yb);
    dfill(dy2, 0xFF, yb);
    const krn_weight T = {.type = t->type, .n_out = n_out, .n_in = n_in, .data = dbuf + off};
    dev_err err = {0};
    if (krn_cuda_embed_rows_async(g_s1, dy1, &T, dtok, B, &err) != 0)
        fail_msg("embed_rows %s: %s", t->name, err.msg);
    const int prev = krn_cuda_set_pdl(1);
    const int rc = krn_cuda_embed_rows_async(g_s2, dy2, &T, dtok, B, &err);
    krn_cuda_set_pdl(prev);
    if (rc != 0)
        fail_msg("embed_rows %s (PDL): %s", t->name, err.msg);
    sync_both();
    char how[64];
    snprintf(how, sizeof how, "table at offset %zu", off);
    download(got, dy1, yb);
    check_rows(t, tab, rb, n_out, n_in, tok, B, got, how);
    snprintf(how, sizeof how, "table at offset %zu, PDL, second stream", off);
    download(got, dy2, yb);
    check_rows(t, tab, rb, n_out, n_in, tok, B, got, how);
    cudaFree(dbuf), cudaFree(dtok), cudaFree(dy1), cudaFree(dy2);
    free(tab), free(got);
}

static void test_device_rows_have_the_host_dequant_bits_for_every_type(void **state) {
    (void)state;
    for (int ti = 0; ti < CUDA_REF_N_TYPES; ti++) {
        const cuda_ref_type *t = &CUDA_REF_TYPES[ti];
        check_type(t, 37, 512, 0);
        check_type(t, 3, 4096, 0);
        check_type(t, 5, 256, 1); /* an odd address: no alignment needed */
        check_type(t, 1, 7 * 256, 2);
        if (t->be <= 32) /* slices of 256 elements, the last one partial: 32 of 288 */
            check_type(t, 4, 288, 0);
    }
}

/* kernels/krn.c routes a CUDA dev_stream to the kernel: the same bits as the raw call (checked against the host). */
static void test_the_op_table_on_a_cuda_dev_stream_gives_the_host_bits(void **state) {
    (void)state;
    enum { NOUT = 19, NIN = 2048, B = 4 };
    const cuda_ref_type *t = cuda_ref_type_of(KRN_Q6_K);
    assert_int_equal(t->type, KRN_Q6_K);
    const int32_t tok[B] = {18, NOUT, 0, 7};
    size_t rb;
    uint8_t *tab = rand_table(t, NOUT, NIN, &rb);
    float *got = malloc(sizeof(float) * B * NIN), *ff = malloc(sizeof(float) * B * NIN);
    assert_true(got && ff);
    memset(ff, 0xFF, sizeof(float) * B * NIN);
    dev_err err = {0};
    dev_platform *p = dev_platform_open(DEV_KIND_CUDA, 0, &err);
    if (!p)
        fail_msg("dev_platform_open(cuda): %s", err.msg);
    dev_device *d = dev_platform_device(p, 0);
    dev_stream *s = dev_stream_create(d, "embed", &err);
    assert_non_null(s);
    void *w = dev_malloc(d, rb * NOUT, &err), *dt = dev_malloc(d, sizeof tok, &err);
    float *y = dev_malloc(d, sizeof(float) * B * NIN, &err);
    assert_true(w && dt && y);
    assert_int_equal(dev_copy_h2d_sync(d, w, tab, rb * NOUT, &err), 0);
    assert_int_equal(dev_copy_h2d_sync(d, dt, tok, sizeof tok, &err), 0);
    assert_int_equal(dev_copy_h2d_sync(d, y, ff, sizeof(float) * B * NIN, &err), 0);
    krn_weight T = {.type = t->type, .n_out = NOUT, .n_in = NIN, .data = w};
    assert_int_equal(krn_embed_rows_async(s, y, &T, dt, B), 0);
    assert_int_equal(dev_copy_d2h_async(s, got, y, sizeof(float) * B * NIN), 0);
    assert_int_equal(dev_stream_sync(s, &err), 0);
    check_rows(t, tab, rb, NOUT, NIN, tok, B, got, "op table");
    T.layout = KRN_LAYOUT_PLANES; /* refused before the CUDA code */
    assert_int_equal(krn_embed_rows_async(s, y, &T, dt, B), MEMRA_E_INVAL);
    dev_free(d, w), dev_free(d, dt), dev_free(d, y);
    dev_stream_destroy(s);
    dev_platform_close(p);
    CK(cudaSetDevice(0));
    free(tab), free(got), free(ff);
}

/* Each refusal names what is wrong; B = 0 is a no-op. */
static void test_bad_arguments_are_refused_with_a_message_naming_them(void **state) {
    (void)state;
    void *d = dalloc(4096);
    const krn_weight ok = {.type = KRN_Q8_0, .n_out = 4, .n_in = 64, .data = d};
    float *y = (float *)d + 512;
    const int32_t *tok = (const int32_t *)d + 1000;
    static const struct {
        const char *want; /* in the message */
    } cases[] = {{"T is NULL"}, {"layout"}, {"allowed: f32"}, {"n_in=48"}, {"tokens is NULL"}, {"n_out=0"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        krn_weight T = ok;
        const krn_weight *tp = &T;
        const int32_t *tk = tok;
        switch (k) {
        case 0: tp = NULL; break;
        case 1: T.layout = KRN_LAYOUT_PLANES; break;
        case 2: T.type = 99; break;
        case 3: T.n_in = 48; break;
        case 4: tk = NULL; break;
        case 5: T.n_out = 0; break;
        }
        dev_err err = {0};
        assert_int_equal(krn_cuda_embed_rows_async(g_s1, y, tp, tk, 2, &err), MEMRA_E_INVAL);
        if (!strstr(err.msg, cases[k].want))
            fail_msg("refusal %zu: message '%s' does not contain '%s'", k, err.msg, cases[k].want);
    }
    dev_err err = {0};
    assert_int_equal(krn_cuda_embed_rows_async(g_s1, NULL, &ok, NULL, 0, &err), 0); /* B = 0: nothing to do */
    CK(cudaStreamSynchronize(g_s1));
    cudaFree(d);
}

int main(void) {
    if (cuda_fix_no_gpu("gpu_embed"))
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_rows_have_the_host_dequant_bits_for_every_type),
        cmocka_unit_test(test_the_op_table_on_a_cuda_dev_stream_gives_the_host_bits),
        cmocka_unit_test(test_bad_arguments_are_refused_with_a_message_naming_them),
    };
    return cmocka_run_group_tests(tests, two_streams_setup, two_streams_teardown);
}

#else /* !MEMRA_HAVE_CUDA */

int main(void) {
    printf("gpu_embed: skipped: built without CUDA (MEMRA_HAVE_CUDA off)\n");
    return 77;
}

#endif
