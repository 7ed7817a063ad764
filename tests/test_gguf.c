/* model/gguf (reader), model/gguf_write (writer), model/gguf_synth (tiny models): round trips of every
 * metadata and tensor type, and each validation rule with the error it must give. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

static void test_tiny_model_has_every_llama_key_and_tensor(void **state)
{
    (void)state;
    dev_err err = {0};
    assert_int_equal(gguf_tiny_write(tmp, NULL, &err), 0);
    mdl_gguf *g = mdl_gguf_open(tmp, &err);
    assert_non_null(g);
    assert_int_equal(mdl_gguf_version(g), 3);
    assert_int_equal(mdl_gguf_alignment(g), 32);
    assert_int_equal(mdl_gguf_data_offset(g) % 32, 0);
    const char *s;
    size_t n;
    assert_int_equal(mdl_gguf_get_str(g, "general.architecture", &s, &n, &err), 0);
    assert_true(n == 5 && memcmp(s, "llama", 5) == 0);
    static const struct { const char *key; uint32_t want; } u[] = {
        {"llama.block_count", 4}, {"llama.embedding_length", 64}, {"llama.feed_forward_length", 128},
        {"llama.attention.head_count", 4}, {"llama.attention.head_count_kv", 2}, {"llama.context_length", 256},
        {"llama.rope.dimension_count", 16}, {"tokenizer.ggml.bos_token_id", 1}, {"tokenizer.ggml.eos_token_id", 2}};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
        uint32_t v = 0;
        assert_int_equal(mdl_gguf_get_u32(g, u[i].key, &v, &err), 0);
        assert_int_equal(v, u[i].want);
    }
    float f;
    assert_int_equal(mdl_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f, &err), 0);
    assert_true(f == 1e-5f);
    assert_int_equal(mdl_gguf_get_f32(g, "llama.rope.freq_base", &f, &err), 0);
    assert_true(f == 10000.0f);
    assert_int_equal(mdl_gguf_get_str(g, "tokenizer.ggml.model", &s, &n, &err), 0);
    assert_true(n == 4 && memcmp(s, "gpt2", 4) == 0);
    assert_int_equal(mdl_gguf_tensor_count(g), 1 + 4 * 9 + 2);
    static const char *const per_layer[] = {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
                                            "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight",
                                            "ffn_up.weight", "ffn_down.weight"};
    for (int l = 0; l < 4; l++)
        for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s", l, per_layer[i]);
            const mdl_gguf_tensor *t = mdl_gguf_tensor_find(g, name);
            if (!t)
                fail_msg("missing %s", name);
            assert_int_equal((uintptr_t)t->data % 32, 0);
        }
    const mdl_gguf_tensor *t = mdl_gguf_tensor_find(g, "blk.0.attn_k.weight");
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 64);
    assert_int_equal(t->ne[1], 32); /* 2 kv heads x head_dim 16 */
    assert_int_equal(t->type, KRN_Q4_1);
    assert_int_equal(t->bytes, krn_row_bytes(KRN_Q4_1, 64) * 32);
    t = mdl_gguf_tensor_find(g, "blk.3.ffn_down.weight");
    assert_true(t->ne[0] == 128 && t->ne[1] == 64);
    t = mdl_gguf_tensor_find(g, "token_embd.weight");
    assert_true(t->type == KRN_Q8_0 && t->ne[0] == 64 && t->ne[1] == 300);
    t = mdl_gguf_tensor_find(g, "output_norm.weight");
    assert_true(t->type == KRN_F32 && t->n_dims == 1 && t->ne[0] == 64 && t->ne[1] == 1);
    const float *norm = t->data;
    for (int i = 0; i < 64; i++)
        assert_true(norm[i] > 0.89f && norm[i] < 1.11f);
    assert_non_null(mdl_gguf_tensor_find(g, "output.weight"));
    assert_null(mdl_gguf_tensor_find(g, "blk.0.attn_q.bias"));
    assert_null(mdl_gguf_tensor_find(g, "blk.4.attn_q.weight"));
    assert_null(mdl_gguf_tensor_at(g, 39));
    assert_string_equal(mdl_gguf_tensor_at(g, 0)->name, "token_embd.weight");
    mdl_gguf_close(g);
}

static void test_qwen2_has_biases_and_tied_has_no_output(void **state)
{
    (void)state;
    dev_err err = {0};
    gguf_tiny_params p;
    gguf_tiny_defaults(&p);
    p.arch = "qwen2";
    p.tied = 1;
    p.n_layer = 2;
    assert_int_equal(gguf_tiny_write(tmp, &p, &err), 0);
    mdl_gguf *g = mdl_gguf_open(tmp, &err);
    assert_non_null(g);
    uint32_t v;
    assert_int_equal(mdl_gguf_get_u32(g, "qwen2.block_count", &v, &err), 0);
    assert_int_equal(v, 2);
    assert_int_equal(mdl_gguf_find(g, "llama.block_count"), -1);
    const mdl_gguf_tensor *b = mdl_gguf_tensor_find(g, "blk.1.attn_k.bias");
    assert_non_null(b);
    assert_true(b->type == KRN_F32 && b->n_dims == 1 && b->ne[0] == 32);
    assert_null(mdl_gguf_tensor_find(g, "output.weight"));
    assert_int_equal(mdl_gguf_tensor_count(g), 1 + 2 * 12 + 1);
    mdl_gguf_close(g);
}

static void test_bad_synth_params_are_refused_with_what_is_allowed(void **state)
{
    (void)state;
    gguf_tiny_params p;
    dev_err err = {0};
    gguf_tiny_defaults(&p);
    p.type = KRN_Q4_K; /* embd 64 is not a multiple of 256 */
    assert_int_equal(gguf_tiny_write(tmp, &p, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "q4_K block (256)"));
    gguf_tiny_defaults(&p);
    p.arch = "gemma";
    dev_err_clear(&err);
    assert_int_equal(gguf_tiny_write(tmp, &p, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "allowed llama, qwen2"));
    gguf_tiny_defaults(&p);
    p.n_head_kv = 3;
    dev_err_clear(&err);
    assert_int_equal(gguf_tiny_write(tmp, &p, &err), MEMRA_E_INVAL);
    gguf_tiny_defaults(&p);
    p.n_vocab = 100;
    dev_err_clear(&err);
    assert_int_equal(gguf_tiny_write(tmp, &p, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, ">= 259"));
}

static void test_vocab_has_byte_tokens_and_merges_of_existing_tokens(void **state)
{
    (void)state;
    dev_err err = {0};
    assert_int_equal(gguf_tiny_write(tmp, NULL, &err), 0);
    mdl_gguf *g = mdl_gguf_open(tmp, &err);
    assert_non_null(g);
    const char *s;
    size_t n;
    int et;
    uint64_t nt, nm;
    assert_int_equal(mdl_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &nt, &err), 0);
    assert_true(et == MDL_GGUF_STRING && nt == 300);
    assert_int_equal(mdl_gguf_arr_str(g, "tokenizer.ggml.tokens", 3 + 'a', &s, &n), 0);
    assert_true(n == 1 && s[0] == 'a');
    assert_int_equal(mdl_gguf_arr_str(g, "tokenizer.ggml.tokens", 3 + ' ', &s, &n), 0);
    assert_true(n == 2 && memcmp(s, "\xc4\xa0", 2) == 0); /* U+0120 'Ġ' */
    assert_int_equal(mdl_gguf_arr_str(g, "tokenizer.ggml.tokens", 2, &s, &n), 0);
    assert_true(n == 10 && memcmp(s, "<|im_end|>", 10) == 0);
    assert_int_equal(mdl_gguf_arr_str(g, "tokenizer.ggml.tokens", 300, &s, &n), MEMRA_E_INVAL);
    assert_int_equal(mdl_gguf_arr_str(g, "tokenizer.ggml.token_type", 0, &s, &n), MEMRA_E_INVAL);
    const int32_t *tt = mdl_gguf_arr_data(g, "tokenizer.ggml.token_type");
    assert_non_null(tt);
    assert_int_equal((uintptr_t)tt % 4, 0);
    assert_true(tt[0] == 3 && tt[1] == 3 && tt[2] == 3 && tt[3] == 1 && tt[258] == 1);
    assert_null(mdl_gguf_arr_data(g, "tokenizer.ggml.tokens"));
    assert_int_equal(mdl_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &nm, &err), 0);
    assert_true(nm > 0 && 259 + nm <= 300);
    for (uint64_t i = 0; i < nm; i++) { /* "a b": a, b and ab are tokens, ab is token 259 + i */
        assert_int_equal(mdl_gguf_arr_str(g, "tokenizer.ggml.merges", i, &s, &n), 0);
        const char *sp = memchr(s, ' ', n);
        assert_non_null(sp);
        char joined[64];
        const size_t la = (size_t)(sp - s), lb = n - la - 1;
        assert_true(la + lb < sizeof joined);
        memcpy(joined, s, la);
        memcpy(joined + la, sp + 1, lb);
        const char *t;
        size_t tn;
        assert_int_equal(mdl_gguf_arr_str(g, "tokenizer.ggml.tokens", 259 + i, &t, &tn), 0);
        assert_true(tn == la + lb && memcmp(t, joined, tn) == 0);
    }
    mdl_gguf_close(g);
}

/* Every metadata type, in this order (19 keys): the scalars, two strings, arrays of f32, bool, f64, str, an
 * empty i32 array and [[1, 2], [3]] as an array of u16 arrays. */
static void add_every_type(mdl_gguf_writer *w)
{
    mdl_gguf_writer_u8(w, "t.u8", 200);
    mdl_gguf_writer_i8(w, "t.i8", -5);
    mdl_gguf_writer_u16(w, "t.u16", 60000);
    mdl_gguf_writer_i16(w, "t.i16", 300);
    mdl_gguf_writer_u32(w, "t.u32", 4000000000u);
    mdl_gguf_writer_i32(w, "t.i32", -7);
    mdl_gguf_writer_u64(w, "t.u64", 1ull << 40);
    mdl_gguf_writer_i64(w, "t.i64", 12345);
    mdl_gguf_writer_f32(w, "t.f32", 0.25f);
    mdl_gguf_writer_f64(w, "t.f64", 1.5);
    mdl_gguf_writer_bool(w, "t.bool", 1);
    mdl_gguf_writer_str(w, "t.str", "hello");
    mdl_gguf_writer_str(w, "t.empty", "");
    const float scores[3] = {-1.0f, 0.5f, 2.0f};
    mdl_gguf_writer_arr(w, "t.arr_f32", MDL_GGUF_F32, scores, 3);
    const uint8_t bools[2] = {1, 0};
    mdl_gguf_writer_arr(w, "t.arr_bool", MDL_GGUF_BOOL, bools, 2);
    const double dd[2] = {3.0, -4.0};
    mdl_gguf_writer_arr(w, "t.arr_f64", MDL_GGUF_F64, dd, 2);
    const char *strs[3] = {"a", "", "ccc"};
    mdl_gguf_writer_arr_str(w, "t.arr_str", strs, 3);
    mdl_gguf_writer_arr(w, "t.arr_empty", MDL_GGUF_I32, NULL, 0);
    /* an array of 2 arrays of u16: [[1, 2], [3]] */
    uint8_t nested[4 + 8 + 2 * (4 + 8) + 3 * 2], *p = nested;
    gguf_check_put_u32(p, MDL_GGUF_ARRAY), p += 4, gguf_check_put_u64(p, 2), p += 8;
    gguf_check_put_u32(p, MDL_GGUF_U16), p += 4, gguf_check_put_u64(p, 2), p += 8;
    memcpy(p, (uint16_t[]){1, 2}, 4), p += 4;
    gguf_check_put_u32(p, MDL_GGUF_U16), p += 4, gguf_check_put_u64(p, 1), p += 8;
    memcpy(p, (uint16_t[]){3}, 2), p += 2;
    mdl_gguf_writer_raw(w, "t.nested", MDL_GGUF_ARRAY, nested, (size_t)(p - nested));
}

static void test_every_metadata_type_round_trips(void **state)
{
    (void)state;
    dev_err err = {0};
    mdl_gguf_writer *w = mdl_gguf_writer_create(&err);
    add_every_type(w);
    assert_int_equal(mdl_gguf_writer_u8(w, "t.u8", 1), MEMRA_E_INVAL); /* duplicate: sticky error */
    assert_int_equal(mdl_gguf_writer_error(w, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "added twice"));
    mdl_gguf_writer_destroy(w);

    /* again without the duplicate */
    dev_err_clear(&err);
    w = mdl_gguf_writer_create(&err);
    add_every_type(w);
    void *buf;
    size_t n;
    gguf_check_finish(w, &buf, &n);
    mdl_gguf *g = gguf_check_open_buf(tmp, buf, n);
    free(buf);
    assert_int_equal(mdl_gguf_kv_count(g), 19);
    assert_string_equal(mdl_gguf_kv_key(g, 0), "t.u8");
    assert_int_equal(mdl_gguf_kv_type(g, 9), MDL_GGUF_F64);
    assert_null(mdl_gguf_kv_key(g, 19));
    uint32_t u;
    int64_t i64;
    static const struct { const char *key; uint32_t v; } ok[] = {{"t.u8", 200}, {"t.u16", 60000}, {"t.i16", 300},
                                                                 {"t.u32", 4000000000u}, {"t.i64", 12345}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        assert_int_equal(mdl_gguf_get_u32(g, ok[i].key, &u, &err), 0);
        assert_int_equal(u, ok[i].v);
    }
    static const char *const bad_u32[] = {"t.i8", "t.i32", "t.u64"}; /* negative, too big */
    for (size_t i = 0; i < 3; i++) {
        dev_err_clear(&err);
        assert_int_equal(mdl_gguf_get_u32(g, bad_u32[i], &u, &err), MEMRA_E_FORMAT);
        assert_non_null(strstr(err.msg, "does not fit in u32"));
    }
    assert_int_equal(mdl_gguf_get_i64(g, "t.i8", &i64, &err), 0);
    assert_int_equal(i64, -5);
    assert_int_equal(mdl_gguf_get_i64(g, "t.u64", &i64, &err), 0);
    assert_int_equal(i64, 1ll << 40);
    float f;
    assert_int_equal(mdl_gguf_get_f32(g, "t.f32", &f, &err), 0);
    assert_true(f == 0.25f);
    assert_int_equal(mdl_gguf_get_f32(g, "t.f64", &f, &err), 0);
    assert_true(f == 1.5f);
    dev_err_clear(&err);
    assert_int_equal(mdl_gguf_get_f32(g, "t.u8", &f, &err), MEMRA_E_FORMAT);
    assert_non_null(strstr(err.msg, "has type u8, expected f32 or f64"));
    int b = 0;
    assert_int_equal(mdl_gguf_get_bool(g, "t.bool", &b, &err), 0);
    assert_int_equal(b, 1);
    const char *s;
    assert_int_equal(mdl_gguf_get_str(g, "t.str", &s, &n, &err), 0);
    assert_true(n == 5 && memcmp(s, "hello", 5) == 0);
    assert_int_equal(mdl_gguf_get_str(g, "t.empty", &s, &n, &err), 0);
    assert_int_equal(n, 0);
    dev_err_clear(&err);
    assert_int_equal(mdl_gguf_get_str(g, "t.nope", &s, &n, &err), MEMRA_E_FORMAT);
    assert_non_null(strstr(err.msg, "missing key 't.nope'"));
    assert_non_null(strstr(err.msg, tmp));
    int et;
    uint64_t an;
    assert_int_equal(mdl_gguf_get_arr(g, "t.arr_f32", &et, &an, &err), 0);
    assert_true(et == MDL_GGUF_F32 && an == 3);
    const float *sc = mdl_gguf_arr_data(g, "t.arr_f32");
    assert_int_equal((uintptr_t)sc % 4, 0);
    assert_true(sc[0] == -1.0f && sc[1] == 0.5f && sc[2] == 2.0f);
    const double *dp = mdl_gguf_arr_data(g, "t.arr_f64");
    assert_int_equal((uintptr_t)dp % 8, 0);
    assert_true(dp[0] == 3.0 && dp[1] == -4.0);
    const uint8_t *bp = mdl_gguf_arr_data(g, "t.arr_bool");
    assert_true(bp[0] == 1 && bp[1] == 0);
    assert_int_equal(mdl_gguf_arr_str(g, "t.arr_str", 2, &s, &n), 0);
    assert_true(n == 3 && memcmp(s, "ccc", 3) == 0);
    assert_int_equal(mdl_gguf_arr_str(g, "t.arr_str", 1, &s, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(mdl_gguf_get_arr(g, "t.arr_empty", &et, &an, &err), 0);
    assert_true(et == MDL_GGUF_I32 && an == 0);
    assert_int_equal(mdl_gguf_get_arr(g, "t.nested", &et, &an, &err), 0);
    assert_true(et == MDL_GGUF_ARRAY && an == 2);
    assert_null(mdl_gguf_arr_data(g, "t.nested"));
    dev_err_clear(&err);
    assert_int_equal(mdl_gguf_get_arr(g, "t.str", &et, &an, &err), MEMRA_E_FORMAT);
    mdl_gguf_close(g);
}

static void test_tensors_of_every_type_round_trip_through_the_file(void **state)
{
    (void)state;
    static const int types[] = {KRN_F32, KRN_F16, KRN_BF16, KRN_Q4_0, KRN_Q4_1, KRN_Q8_0, KRN_Q4_K, KRN_Q5_K, KRN_Q6_K};
    enum { N_IN = 256, N_OUT = 3, N_TYPES = sizeof types / sizeof types[0] };
    static float src[N_IN * N_OUT], got[N_IN], want[N_IN];
    for (int i = 0; i < N_IN * N_OUT; i++)
        src[i] = sinf((float)i * 0.37f) * 0.1f;
    dev_err err = {0};
    mdl_gguf_writer *w = mdl_gguf_writer_create(&err);
    mdl_gguf_writer_set_version(w, 2);
    mdl_gguf_writer_set_alignment(w, 64);
    const int64_t ne[2] = {N_IN, N_OUT};
    char name[32];
    for (int k = 0; k < N_TYPES; k++) {
        snprintf(name, sizeof name, "t%d.weight", k);
        assert_int_equal(mdl_gguf_writer_tensor_f32(w, name, types[k], 2, ne, src), 0);
    }
    const int64_t ne4[4] = {32, 2, 3, 2};
    assert_int_equal(mdl_gguf_writer_tensor_f32(w, "four_d", KRN_F32, 4, ne4, src), 0);
    uint8_t raw[18] = {0x00, 0x3C}; /* one q4_0 block: d = 1, all nibbles 0 -> -8 */
    assert_int_equal(mdl_gguf_writer_tensor_raw(w, "raw", KRN_Q4_0, 1, (const int64_t[]){32}, raw), 0);
    void *buf;
    size_t n;
    gguf_check_finish(w, &buf, &n);
    mdl_gguf *g = gguf_check_open_buf(tmp, buf, n);
    free(buf);
    assert_int_equal(mdl_gguf_version(g), 2);
    assert_int_equal(mdl_gguf_alignment(g), 64);
    assert_int_equal(mdl_gguf_tensor_count(g), N_TYPES + 2); /* and four_d, raw */
    uint32_t a;
    assert_int_equal(mdl_gguf_get_u32(g, "general.alignment", &a, &err), 0);
    assert_int_equal(a, 64);
    for (int k = 0; k < N_TYPES; k++) {
        snprintf(name, sizeof name, "t%d.weight", k);
        const mdl_gguf_tensor *t = mdl_gguf_tensor_find(g, name);
        assert_non_null(t);
        assert_true(t->type == types[k] && t->ne[0] == N_IN && t->ne[1] == N_OUT && t->n_dims == 2);
        assert_int_equal(t->offset % 64, 0);
        assert_int_equal((uintptr_t)t->data % 64, 0);
        const size_t rb = krn_row_bytes(types[k], N_IN);
        assert_int_equal(t->bytes, rb * N_OUT);
        uint8_t q[1024];
        for (int r = 0; r < N_OUT; r++) {
            krn_quant_row(types[k], src + r * N_IN, q, N_IN);
            krn_dequant_row(types[k], q, want, N_IN);
            krn_dequant_row(types[k], (const uint8_t *)t->data + r * rb, got, N_IN);
            assert_memory_equal(got, want, sizeof got);
        }
    }
    const mdl_gguf_tensor *t = mdl_gguf_tensor_find(g, "four_d");
    assert_true(t->n_dims == 4 && t->ne[3] == 2 && t->bytes == 32 * 12 * 4);
    assert_memory_equal(t->data, src, t->bytes);
    t = mdl_gguf_tensor_find(g, "raw");
    krn_dequant_row(KRN_Q4_0, t->data, got, 32);
    assert_true(got[0] == -8.0f && got[31] == -8.0f);
    mdl_gguf_close(g);
}

static void *reader_thread(void *arg)
{
    const mdl_gguf *g = arg;
    long ok = 0;
    for (int it = 0; it < 200; it++) {
        const char *s;
        size_t n;
        uint32_t u;
        dev_err err = {0};
        ok += mdl_gguf_tensor_find(g, "blk.1.ffn_up.weight") != NULL;
        ok += mdl_gguf_arr_str(g, "tokenizer.ggml.tokens", (uint64_t)(it % 300), &s, &n) == 0;
        ok += mdl_gguf_get_u32(g, "llama.block_count", &u, &err) == 0 && u == 4;
    }
    return (void *)ok;
}

/* An opened file is immutable: any number of threads read it at once (TSan checks there is no write). */
static void test_many_threads_read_one_open_file(void **state)
{
    (void)state;
    dev_err err = {0};
    assert_int_equal(gguf_tiny_write(tmp, NULL, &err), 0);
    mdl_gguf *g = mdl_gguf_open(tmp, &err);
    assert_non_null(g);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, reader_thread, g), 0);
    for (int i = 0; i < 4; i++) {
        void *ok;
        assert_int_equal(pthread_join(th[i], &ok), 0);
        assert_int_equal((long)ok, 600);
    }
    mdl_gguf_close(g);
}

/* tools/memra-mkgguf as a user runs it (needs MEMRA_BIN_DIR, which ctest sets). */
static void test_mkgguf_cli_writes_a_model_the_reader_opens(void **state)
{
    (void)state;
    const char *bin = getenv("MEMRA_BIN_DIR");
    if (!bin) {
        printf("MEMRA_BIN_DIR unset: run through ctest to test the CLI\n");
        skip();
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/memra-mkgguf -o %s --arch qwen2 --layers 3 --embd 128 --heads 4 --kv-heads 2 "
             "--ff 256 --vocab 400 --ctx 64 --type q8_0 --seed 7 --tied", bin, tmp);
    assert_int_equal(system(cmd), 0);
    dev_err err = {0};
    mdl_gguf *g = mdl_gguf_open(tmp, &err);
    assert_non_null(g);
    uint32_t u;
    assert_int_equal(mdl_gguf_get_u32(g, "qwen2.block_count", &u, &err), 0);
    assert_int_equal(u, 3);
    assert_int_equal(mdl_gguf_get_u32(g, "qwen2.embedding_length", &u, &err), 0);
    assert_int_equal(u, 128);
    assert_non_null(mdl_gguf_tensor_find(g, "blk.2.attn_v.bias"));
    assert_null(mdl_gguf_tensor_find(g, "output.weight"));
    assert_int_equal(mdl_gguf_tensor_find(g, "blk.0.attn_q.weight")->type, KRN_Q8_0);
    mdl_gguf_close(g);
    snprintf(cmd, sizeof cmd, "%s/memra-mkgguf -o %s --type q5_0 2>/dev/null", bin, tmp);
    const int rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
    snprintf(cmd, sizeof cmd, "%s/memra-mkgguf -o %s --type q4_K 2>/dev/null", bin, tmp); /* embd 64 */
    const int rc2 = system(cmd);
    assert_true(WIFEXITED(rc2) && WEXITSTATUS(rc2) == 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tiny_model_has_every_llama_key_and_tensor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_qwen2_has_biases_and_tied_has_no_output, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_synth_params_are_refused_with_what_is_allowed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vocab_has_byte_tokens_and_merges_of_existing_tokens, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_metadata_type_round_trips, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tensors_of_every_type_round_trip_through_the_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_threads_read_one_open_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mkgguf_cli_writes_a_model_the_reader_opens, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
