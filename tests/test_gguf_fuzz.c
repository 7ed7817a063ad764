/* model/gguf against damaged files: truncations, flipped header bytes, huge counts and lengths, random
 * byte damage. Each open must return an error (or, where the damage leaves a structurally valid file, a
 * file whose every tensor lies inside the map) and never crash; run under ASan+UBSan too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kernels/quant.h"
#include "model/gguf.h"
#include "support/gguf_tiny.h"

static char tmp[256];
static uint8_t *good;   /* the valid tiny model */
static size_t good_n;
static size_t data_off; /* its data section offset */

static int setup(void **state)
{
    (void)state;
    dev_err err = {0};
    gguf_tiny_params p;
    gguf_tiny_defaults(&p);
    p.n_layer = 2;
    if (gguf_tiny_temp_path(tmp, sizeof tmp, "fuzz", &err) || gguf_tiny_write(tmp, &p, &err))
        return -1;
    FILE *f = fopen(tmp, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    good_n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    good = malloc(good_n);
    const size_t got = fread(good, 1, good_n, f);
    fclose(f);
    mdl_gguf *g = mdl_gguf_open(tmp, &err);
    if (got != good_n || !g)
        return -1;
    data_off = mdl_gguf_data_offset(g);
    mdl_gguf_close(g);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(tmp);
    free(good);
    return 0;
}

/* Write buf to the temp file and open it. Returns 1 if it opened (after checking every tensor lies in the
 * map and dequantizing the first row of each), 0 if it failed with a FORMAT/UNSUPPORTED error naming the
 * file. Anything else fails the test. */
static int try_open(const uint8_t *buf, size_t n)
{
    FILE *f = fopen(tmp, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
    dev_err err = {0};
    mdl_gguf *g = mdl_gguf_open(tmp, &err);
    if (!g) {
        if ((err.code != MEMRA_E_FORMAT && err.code != MEMRA_E_UNSUPPORTED) || !strstr(err.msg, tmp))
            fail_msg("unexpected error %s: %s", memra_status_str(err.code), err.msg);
        return 0;
    }
    static float row[1 << 16];
    const size_t size = mdl_gguf_file_size(g);
    for (int i = 0; i < mdl_gguf_tensor_count(g); i++) {
        const mdl_gguf_tensor *t = mdl_gguf_tensor_at(g, i);
        const size_t at = mdl_gguf_data_offset(g) + t->offset;
        assert_true(at <= size && t->bytes <= size - at);
        if (t->ne[0] <= (int64_t)(sizeof row / sizeof row[0]) && t->bytes > 0)
            krn_dequant_row(t->type, t->data, row, t->ne[0]); /* touches the bytes: ASan checks them */
    }
    for (int i = 0; i < mdl_gguf_kv_count(g); i++) { /* every getter on every key: no crash */
        const char *k = mdl_gguf_kv_key(g, i), *s;
        size_t len;
        uint32_t u;
        float fl;
        int b, et;
        uint64_t an;
        dev_err e = {0};
        mdl_gguf_get_u32(g, k, &u, &e);
        mdl_gguf_get_f32(g, k, &fl, &e);
        mdl_gguf_get_bool(g, k, &b, &e);
        mdl_gguf_get_str(g, k, &s, &len, &e);
        if (mdl_gguf_get_arr(g, k, &et, &an, &e) == 0 && an > 0) {
            mdl_gguf_arr_str(g, k, an - 1, &s, &len);
            mdl_gguf_arr_data(g, k);
        }
    }
    mdl_gguf_close(g);
    return 1;
}

static void test_every_truncation_is_an_error(void **state)
{
    (void)state;
    assert_int_equal(try_open(good, good_n), 1);
    int errors = 0;
    for (int k = 0; k < 64; k++)
        errors += try_open(good, good_n * (size_t)k / 64) == 0;
    assert_int_equal(errors, 64); /* every cut drops at least the last tensor's last byte */
    for (size_t cut = 1; cut < 200; cut++) /* and byte by byte through the header start */
        assert_int_equal(try_open(good, cut), 0);
}

static void test_flipped_header_bytes_never_crash(void **state)
{
    (void)state;
    uint8_t *m = malloc(good_n);
    int opened = 0, failed = 0;
    for (int i = 0; i < 64; i++) {
        const uint8_t vals[] = {0x00, 0xFF, (uint8_t)(good[i] ^ 0x01), (uint8_t)(good[i] ^ 0x80),
                                (uint8_t)(good[i] ^ 0x10)};
        for (size_t v = 0; v < sizeof vals; v++) {
            if (vals[v] == good[i])
                continue;
            memcpy(m, good, good_n);
            m[i] = vals[v];
            const int ok = try_open(m, good_n);
            opened += ok;
            failed += !ok;
            if (i < 4)
                assert_int_equal(ok, 0); /* magic */
            if (i >= 4 && i < 8 && !(i == 4 && vals[v] == 2))
                assert_int_equal(ok, 0); /* version: only 3 -> 2 stays valid */
            if (i >= 8 && i < 24 && (i % 8) >= 4)
                assert_int_equal(ok, 0); /* high halves of the counts: impossible counts */
        }
    }
    assert_true(failed > 100); /* liveness: the loop really ran damaged files */
    assert_true(opened > 0);   /* and a flip that keeps the file valid opens it (version 3 -> 2) */
    free(m);
}

static void test_huge_counts_and_lengths_are_errors(void **state)
{
    (void)state;
    uint8_t *m = malloc(good_n);
    static const uint64_t huge[] = {UINT64_MAX, 1ull << 63, 1ull << 32, 1ull << 31, 1000000, 0x7fffffff};
    for (size_t h = 0; h < sizeof huge / sizeof huge[0]; h++) {
        for (int field = 0; field < 2; field++) { /* n_tensors, n_kv */
            memcpy(m, good, good_n);
            memcpy(m + 8 + 8 * field, &huge[h], 8);
            assert_int_equal(try_open(m, good_n), 0);
        }
        memcpy(m, good, good_n);
        memcpy(m + 24, &huge[h], 8); /* first key's length */
        assert_int_equal(try_open(m, good_n), 0);
    }
    /* every string/array length and tensor dim inside the header: find u64 fields by scanning for the
     * known values and blowing each up */
    int hits = 0;
    for (size_t i = 24; i + 8 <= data_off; i++) {
        uint64_t v;
        memcpy(&v, good + i, 8);
        if (v == 300 || v == 41 || v == 64 || v == 128) { /* vocab, merges?, embd, ff: array counts, dims */
            for (size_t h = 0; h < 3; h++) {
                memcpy(m, good, good_n);
                memcpy(m + i, &huge[h], 8);
                try_open(m, good_n); /* may open when the field was not a length: it must not crash */
            }
            hits++;
        }
    }
    assert_true(hits > 10);
    /* the token array's count specifically */
    const char key[] = "tokenizer.ggml.tokens";
    uint8_t *at = memmem(good, data_off, key, sizeof key - 1);
    assert_non_null(at);
    const size_t cnt = (size_t)(at - good) + sizeof key - 1 + 4 + 4; /* after the key: type, elem type */
    for (size_t h = 0; h < sizeof huge / sizeof huge[0]; h++) {
        memcpy(m, good, good_n);
        memcpy(m + cnt, &huge[h], 8);
        assert_int_equal(try_open(m, good_n), 0);
    }
    /* a tensor's dims: blk.0.ffn_up.weight is (n_dims u32, ne0 u64, ne1 u64, ...) after its name */
    const char tname[] = "blk.0.ffn_up.weight";
    uint8_t *ti = memmem(good, data_off, tname, sizeof tname - 1);
    assert_non_null(ti);
    const size_t dims = (size_t)(ti - good) + sizeof tname - 1 + 4;
    for (size_t h = 0; h < sizeof huge / sizeof huge[0]; h++)
        for (int d = 0; d < 2; d++) {
            memcpy(m, good, good_n);
            memcpy(m + dims + 8 * (size_t)d, &huge[h], 8);
            assert_int_equal(try_open(m, good_n), 0);
        }
    free(m);
}

static void test_random_damage_in_the_header_never_crashes(void **state)
{
    (void)state;
    uint8_t *m = malloc(good_n);
    uint64_t s = 12345;
    int failed = 0;
    for (int it = 0; it < 300; it++) {
        memcpy(m, good, good_n);
        const int nflip = 1 + it % 4;
        for (int j = 0; j < nflip; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const size_t pos = (size_t)((s >> 33) % data_off);
            m[pos] = (uint8_t)(s >> 13);
        }
        failed += try_open(m, good_n) == 0;
    }
    assert_true(failed > 0);
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_truncation_is_an_error),
        cmocka_unit_test(test_flipped_header_bytes_never_crash),
        cmocka_unit_test(test_huge_counts_and_lengths_are_errors),
        cmocka_unit_test(test_random_damage_in_the_header_never_crashes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
