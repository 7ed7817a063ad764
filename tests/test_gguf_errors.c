/* model/gguf: each validation rule of the reader, with the error code and message it must give. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "kernels/quant.h"
#include "model/gguf.h"
#include "model/gguf_write.h"
#include "support/gguf_check.h"
#include "support/gguf_tiny.h"

static char tmp[256];

static int setup(void **state)
{
    (void)state;
    dev_err err = {0};
    return gguf_tiny_temp_path(tmp, sizeof tmp, "test-gguf", &err);
}

static int teardown(void **state)
{
    (void)state;
    unlink(tmp);
    return 0;
}

/* A small valid file with two f32 tensors "a.weight" (64) and "b.weight" (32 x 2) and keys k.a, k.b. */
static void small_file(void **buf, size_t *n)
{
    dev_err err = {0};
    static float z[64];
    mdl_gguf_writer *w = mdl_gguf_writer_create(&err);
    mdl_gguf_writer_u32(w, "k.a", 1);
    mdl_gguf_writer_u32(w, "k.b", 2);
    mdl_gguf_writer_tensor_f32(w, "a.weight", KRN_F32, 1, (const int64_t[]){64}, z);
    mdl_gguf_writer_tensor_f32(w, "b.weight", KRN_F32, 2, (const int64_t[]){32, 2}, z);
    gguf_check_finish(w, buf, n);
}

static void test_header_errors_name_the_problem(void **state)
{
    (void)state;
    uint8_t *buf;
    size_t n;
    small_file((void **)&buf, &n);
    mdl_gguf *g = gguf_check_open_buf(tmp, buf, n);
    mdl_gguf_close(g);
    uint8_t *m = malloc(n);
    memcpy(m, buf, n);
    m[0] = 'X';
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "not a GGUF file");
    memcpy(m, buf, n);
    gguf_check_put_u32(m + 4, 1);
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "GGUF version 1 is not supported (versions 2 and 3 are)");
    gguf_check_put_u32(m + 4, 4);
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "version 4");
    gguf_check_put_u32(m + 4, 0x03000000);
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "big-endian");
    memcpy(m, buf, n);
    gguf_check_put_u64(m + 8, UINT64_MAX);
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "tensor count 18446744073709551615 is impossible");
    memcpy(m, buf, n);
    gguf_check_put_u64(m + 16, 1ull << 40);
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "metadata count");
    memcpy(m, buf, n);
    gguf_check_put_u64(m + 24, 1ull << 62); /* the first key's length */
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "runs past the end of the file");
    memcpy(m, buf, n);
    gguf_check_put_u64(m + 24, 0);
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "key 0 is empty");
    memcpy(m, buf, n);
    gguf_check_put_u32(m + 24 + 8 + 3, 13); /* k.a's value type */
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "value type 13 is invalid");
    memcpy(m, buf, n);
    m[24 + 8 + 3 + 4 + 4 + 8 + 2] = 'a'; /* k.b -> k.a */
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "duplicate key 'k.a'");
    gguf_check_open_fails(tmp, m, 10, MEMRA_E_FORMAT, "truncated");
    gguf_check_open_fails(tmp, m, 0, MEMRA_E_FORMAT, "truncated");
    free(m);
    free(buf);
}

static void test_tensor_info_errors_name_the_tensor(void **state)
{
    (void)state;
    uint8_t *buf, *m;
    size_t n;
    small_file((void **)&buf, &n);
    m = malloc(n);
    const size_t a = gguf_check_tensor_info_at(buf, n, "a.weight"), b = gguf_check_tensor_info_at(buf, n, "b.weight");
    /* a: n_dims u32 @a, dim u64 @a+4, type u32 @a+12, offset u64 @a+16; b: n_dims @b, dims @b+4, @b+12,
     * type @b+20, offset @b+24 */
    memcpy(m, buf, n);
    gguf_check_put_u32(m + a, 5);
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "tensor 'a.weight': n_dims 5 (allowed 1..4)");
    gguf_check_put_u32(m + a, 0);
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "n_dims 0");
    memcpy(m, buf, n);
    gguf_check_put_u64(m + a + 4, 0);
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "tensor 'a.weight': dim 0 is 0");
    memcpy(m, buf, n);
    gguf_check_put_u64(m + b + 4, 1ull << 62);
    gguf_check_put_u64(m + b + 12, 1ull << 62);
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "tensor 'b.weight': element count overflows");
    memcpy(m, buf, n);
    gguf_check_put_u64(m + b + 4, 1ull << 40);
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "tensor 'b.weight': data");
    memcpy(m, buf, n);
    gguf_check_put_u32(m + a + 12, 6);
    gguf_check_open_fails(tmp, m, n, MEMRA_E_UNSUPPORTED, "tensor 'a.weight' has type 6 (q5_0)");
    gguf_check_put_u32(m + a + 12, 1000);
    gguf_check_open_fails(tmp, m, n, MEMRA_E_UNSUPPORTED, "type 1000 (unknown)");
    memcpy(m, buf, n);
    gguf_check_put_u32(m + a + 12, KRN_Q4_0); /* 64 elems is fine for q4_0: make the row ragged instead */
    gguf_check_put_u64(m + a + 4, 48);
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "row length 48 is not a multiple of the q4_0 block (32)");
    memcpy(m, buf, n);
    gguf_check_put_u64(m + a + 16, 8);
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "tensor 'a.weight': offset 8 is not a multiple of the alignment 32");
    gguf_check_put_u64(m + a + 16, 1ull << 60);
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "runs past the end of the data section");
    memcpy(m, buf, n);
    memcpy(m + b - 8, "a", 1); /* b.weight -> a.weight */
    gguf_check_open_fails(tmp, m, n, MEMRA_E_FORMAT, "duplicate tensor name 'a.weight'");
    memcpy(m, buf, n);
    gguf_check_open_fails(tmp, m, n - 1, MEMRA_E_FORMAT, "tensor 'b.weight': data");
    free(m);
    free(buf);
}

static void test_nested_arrays_too_deep_and_bad_bools_are_refused(void **state)
{
    (void)state;
    uint8_t deep[(MDL_GGUF_MAX_DEPTH + 1) * 12 + 4];
    size_t len = 0;
    for (int d = 0; d <= MDL_GGUF_MAX_DEPTH; d++) { /* MAX_DEPTH + 1 levels of arrays of one array */
        gguf_check_put_u32(deep + len, d < MDL_GGUF_MAX_DEPTH ? MDL_GGUF_ARRAY : MDL_GGUF_U8);
        gguf_check_put_u64(deep + len + 4, d < MDL_GGUF_MAX_DEPTH ? 1 : 0);
        len += 12;
    }
    dev_err err = {0};
    mdl_gguf_writer *w = mdl_gguf_writer_create(&err);
    mdl_gguf_writer_raw(w, "deep", MDL_GGUF_ARRAY, deep, len);
    void *buf;
    size_t n;
    gguf_check_finish(w, &buf, &n);
    gguf_check_open_fails(tmp, buf, n, MEMRA_E_FORMAT, "nested deeper than 8");
    free(buf);
    w = mdl_gguf_writer_create(&err);
    mdl_gguf_writer_raw(w, "flag", MDL_GGUF_BOOL, (const uint8_t[]){2}, 1);
    gguf_check_finish(w, &buf, &n);
    gguf_check_open_fails(tmp, buf, n, MEMRA_E_FORMAT, "key 'flag': bool value 2 (allowed 0 or 1)");
    free(buf);
    w = mdl_gguf_writer_create(&err); /* exactly MAX_DEPTH levels is fine */
    mdl_gguf_writer_raw(w, "ok", MDL_GGUF_ARRAY, deep + 12, len - 12);
    gguf_check_finish(w, &buf, &n);
    mdl_gguf_close(gguf_check_open_buf(tmp, buf, n));
    free(buf);
}

static void test_missing_file_and_directory_are_io_errors(void **state)
{
    (void)state;
    dev_err err = {0};
    assert_null(mdl_gguf_open("/nonexistent/memra.gguf", &err));
    assert_int_equal(err.code, MEMRA_E_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/memra.gguf"));
    dev_err_clear(&err);
    assert_null(mdl_gguf_open("/tmp", &err));
    assert_int_equal(err.code, MEMRA_E_IO);
    char fifo[300];
    snprintf(fifo, sizeof fifo, "%s.fifo", tmp);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    dev_err_clear(&err);
    assert_null(mdl_gguf_open(fifo, &err)); /* refused at once, not blocked waiting for a writer */
    assert_int_equal(err.code, MEMRA_E_IO);
    assert_non_null(strstr(err.msg, "not a regular file"));
    unlink(fifo);
    mdl_gguf_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_header_errors_name_the_problem, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tensor_info_errors_name_the_tensor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nested_arrays_too_deep_and_bad_bools_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_file_and_directory_are_io_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
