/* Hostile model files and runtime sizes: each case is a tiny GGUF the test writes (gguf_tiny with one or
 * two header values changed), and each must be refused with a message naming the key, field or file, or
 * handled as documented (docs/reliability.md, "Model files"): hyper-parameter products bounded in 64
 * bits, n_ctx whose cache does not fit, a file changed or truncated under a loaded model, inconsistent
 * tokenizer metadata. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "device/dev.h"
#include "kernels/krn.h"
#include "memra/memra.h"
#include "model/gguf.h"
#include "model/gguf_synth.h"
#include "model/gguf_write.h"
#include "model/llama.h"
#include "model/tokenizer.h"
#include "model/vocab_gguf.h"
#include "support/gguf_tiny.h"

static char tmp[256];

static int setup(void **state)
{
    (void)state;
    dev_err err = {0};
    return gguf_tiny_temp_path(tmp, sizeof tmp, "hardening", &err);
}

static int teardown(void **state)
{
    (void)state;
    unlink(tmp);
    return 0;
}

/* One header change: key set to a u32 (added when the synthetic model has no such key). */
typedef struct hkey {
    const char *key;
    uint32_t v;
} hkey;

/* Offset of the value of u32 key `key` in an encoded GGUF (u64 length, the key, u32 type 4, then the value),
 * or 0 when the buffer has no such key. */
static size_t u32_value_at(const uint8_t *buf, size_t n, const char *key)
{
    const size_t kl = strlen(key);
    for (size_t i = 0; i + 8 + kl + 8 <= n; i++) {
        uint64_t len;
        uint32_t type;
        memcpy(&len, buf + i, 8);
        if (len != kl || memcmp(buf + i + 8, key, kl) != 0)
            continue;
        memcpy(&type, buf + i + 8 + kl, 4);
        if (type == MDL_GGUF_U32)
            return i + 8 + kl + 4;
    }
    return 0;
}

/* Write gguf_tiny's model of params p to path with the n changes applied. */
static void write_hostile(const char *path, const gguf_tiny_params *p, const hkey *keys, int n)
{
    dev_err err = {0};
    gguf_tiny_params d;
    if (!p) {
        gguf_tiny_defaults(&d);
        p = &d;
    }
    mdl_gguf_writer *w = mdl_gguf_writer_create(&err);
    assert_non_null(w);
    assert_int_equal(mdl_gguf_synth_fill(w, p, &err), 0);
    void *probe;
    size_t pn;
    assert_int_equal(mdl_gguf_writer_to_mem(w, &probe, &pn, &err), 0);
    for (int i = 0; i < n; i++)
        if (!u32_value_at(probe, pn, keys[i].key))
            assert_int_equal(mdl_gguf_writer_u32(w, keys[i].key, keys[i].v), 0);
    free(probe);
    uint8_t *buf;
    size_t len;
    assert_int_equal(mdl_gguf_writer_to_mem(w, (void **)&buf, &len, &err), 0);
    mdl_gguf_writer_destroy(w);
    for (int i = 0; i < n; i++) {
        const size_t at = u32_value_at(buf, len, keys[i].key);
        assert_true(at > 0);
        memcpy(buf + at, &keys[i].v, 4);
    }
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    free(buf);
}

/* One metadata override for write_variant: key replaced (or added) by a string, a u32, an i32, a string
 * array (strs, n), an i32 array (i32s, n) or an f32 (f); drop = 1 removes the key. */
typedef struct kov {
    const char *key;
    int type;                 /* MDL_GGUF_STRING, _U32, _I32, or _ARRAY with arr_type */
    int arr_type;             /* MDL_GGUF_STRING or MDL_GGUF_I32 */
    const char *str;
    int64_t i;
    float f;                  /* MDL_GGUF_F32 */
    const char *const *strs;
    const int32_t *i32s;
    uint64_t n;
    int drop;
} kov;

static void put_override(mdl_gguf_writer *w, const kov *o)
{
    if (o->drop)
        return;
    int rc = o->type == MDL_GGUF_STRING ? mdl_gguf_writer_str(w, o->key, o->str)
           : o->type == MDL_GGUF_U32    ? mdl_gguf_writer_u32(w, o->key, (uint32_t)o->i)
           : o->type == MDL_GGUF_I32    ? mdl_gguf_writer_i32(w, o->key, (int32_t)o->i)
           : o->type == MDL_GGUF_F32    ? mdl_gguf_writer_f32(w, o->key, o->f)
           : o->arr_type == MDL_GGUF_STRING ? mdl_gguf_writer_arr_str(w, o->key, o->strs, o->n)
                                            : mdl_gguf_writer_arr(w, o->key, MDL_GGUF_I32, o->i32s, o->n);
    assert_int_equal(rc, 0);
}

/* Write gguf_tiny's model of params p (NULL: defaults) to path, its metadata copied key by key through the
 * reader with the n overrides applied (an override of a key the model lacks is added at the end). */
static void write_variant(const char *path, const gguf_tiny_params *p, const kov *ovs, int n)
{
    dev_err err = {0};
    write_hostile(path, p, NULL, 0);
    mdl_gguf *g = mdl_gguf_open(path, &err);
    assert_non_null(g);
    mdl_gguf_writer *w = mdl_gguf_writer_create(&err);
    assert_non_null(w);
    int used[16] = {0};
    assert_true(n <= 16);
    for (int i = 0; i < mdl_gguf_kv_count(g); i++) {
        const char *key = mdl_gguf_kv_key(g, i);
        int o = -1;
        for (int k = 0; k < n; k++)
            if (strcmp(ovs[k].key, key) == 0)
                o = k;
        if (o >= 0) {
            put_override(w, &ovs[o]);
            used[o] = 1;
            continue;
        }
        const int type = mdl_gguf_kv_type(g, i);
        if (type == MDL_GGUF_U32) {
            uint32_t v;
            assert_int_equal(mdl_gguf_get_u32(g, key, &v, &err), 0);
            mdl_gguf_writer_u32(w, key, v);
        } else if (type == MDL_GGUF_F32) {
            float v;
            assert_int_equal(mdl_gguf_get_f32(g, key, &v, &err), 0);
            mdl_gguf_writer_f32(w, key, v);
        } else if (type == MDL_GGUF_BOOL) {
            int v;
            assert_int_equal(mdl_gguf_get_bool(g, key, &v, &err), 0);
            mdl_gguf_writer_bool(w, key, v);
        } else if (type == MDL_GGUF_STRING) {
            const char *v;
            size_t len;
            assert_int_equal(mdl_gguf_get_str(g, key, &v, &len, &err), 0);
            char *c = strndup(v, len);
            mdl_gguf_writer_str(w, key, c);
            free(c);
        } else {
            int et;
            uint64_t cnt;
            assert_int_equal(type, MDL_GGUF_ARRAY);
            assert_int_equal(mdl_gguf_get_arr(g, key, &et, &cnt, &err), 0);
            if (et == MDL_GGUF_STRING) {
                char **v = calloc(cnt + 1, sizeof *v);
                assert_non_null(v);
                for (uint64_t j = 0; j < cnt; j++) {
                    const char *sj;
                    size_t lj;
                    assert_int_equal(mdl_gguf_arr_str(g, key, j, &sj, &lj), 0);
                    v[j] = strndup(sj, lj);
                }
                mdl_gguf_writer_arr_str(w, key, (const char *const *)v, cnt);
                for (uint64_t j = 0; j < cnt; j++)
                    free(v[j]);
                free(v);
            } else {
                mdl_gguf_writer_arr(w, key, et, mdl_gguf_arr_data(g, key), cnt);
            }
        }
    }
    for (int k = 0; k < n; k++)
        if (!used[k])
            put_override(w, &ovs[k]);
    for (int i = 0; i < mdl_gguf_tensor_count(g); i++) {
        const mdl_gguf_tensor *t = mdl_gguf_tensor_at(g, i);
        mdl_gguf_writer_tensor_raw(w, t->name, t->type, t->n_dims, t->ne, t->data);
    }
    mdl_gguf_close(g);
    if (mdl_gguf_writer_save(w, path, &err))
        fail_msg("write_variant: %s", err.msg);
    mdl_gguf_writer_destroy(w);
}

/* mdl_model_load of path on a one-device CPU platform; NULL + err on failure. */
static mdl_model *load_cpu(const char *path, dev_platform **plat, dev_err *err)
{
    *plat = dev_platform_open(DEV_KIND_CPU, 1, err);
    assert_non_null(*plat);
    mdl_load_params lp = {.platform = *plat};
    return mdl_model_load(path, &lp, err);
}

/* Both loaders (the engine's mdl_model_load and the API's memra_model_load) refuse path with code and a
 * message containing each of the NULL-terminated wants. */
static void both_refuse(const char *path, int code, const char *const *wants)
{
    dev_platform *plat;
    dev_err err = {0};
    mdl_model *m = load_cpu(path, &plat, &err);
    if (m)
        fail_msg("mdl_model_load accepted a hostile file (wanted: %s)", wants[0]);
    dev_platform_close(plat);
    if (err.code != code)
        fail_msg("mdl_model_load: code %s, wanted %s: %s", memra_status_str(err.code), memra_status_str(code), err.msg);
    for (int i = 0; wants[i]; i++)
        if (!strstr(err.msg, wants[i]))
            fail_msg("mdl_model_load's message lacks '%s': %s", wants[i], err.msg);
    memra_model *am = memra_model_load(path, NULL);
    if (am) {
        memra_model_free(am);
        fail_msg("memra_model_load accepted a hostile file (wanted: %s)", wants[0]);
    }
    const char *msg = memra_last_error();
    for (int i = 0; wants[i]; i++)
        if (!strstr(msg, wants[i]))
            fail_msg("memra_model_load's message lacks '%s': %s", wants[i], msg);
}

/* ---- hyper-parameter products ---- */

static void test_a_key_length_of_2_31_minus_1_is_refused_naming_the_key(void **state)
{
    (void)state;
    const hkey k[] = {{"llama.attention.key_length", 2147483647u}, {"llama.rope.dimension_count", 64}};
    write_hostile(tmp, NULL, k, 2);
    both_refuse(tmp, MEMRA_E_FORMAT, (const char *const[]){"llama.attention.key_length", "2147483647", NULL});
}

static void test_nine_heads_of_2_28_overflow_q_dim_and_are_refused_naming_both_keys(void **state)
{
    (void)state;
    const hkey k[] = {{"llama.attention.head_count", 9},
                      {"llama.attention.head_count_kv", 3},
                      {"llama.attention.key_length", 1u << 18},
                      {"llama.rope.dimension_count", 64}};
    write_hostile(tmp, NULL, k, 4);
    both_refuse(tmp, MEMRA_E_FORMAT,
                (const char *const[]){"llama.attention.head_count (9) x llama.attention.key_length (262144)",
                                      "2359296", NULL});
    const hkey k2[] = {{"llama.attention.head_count", 9},
                       {"llama.attention.head_count_kv", 3},
                       {"llama.attention.key_length", 1u << 28},
                       {"llama.rope.dimension_count", 64}};
    write_hostile(tmp, NULL, k2, 4);
    both_refuse(tmp, MEMRA_E_FORMAT, (const char *const[]){"llama.attention.key_length", "268435456", NULL});
}

static void test_sizes_beyond_their_bounds_are_refused_naming_the_key(void **state)
{
    (void)state;
    static const char *const keys[] = {"llama.block_count", "llama.embedding_length", "llama.feed_forward_length",
                                       "llama.attention.head_count"};
    for (int i = 0; i < 4; i++) {
        const hkey k[] = {{keys[i], 0x7FFFFFFFu}};
        write_hostile(tmp, NULL, k, 1);
        both_refuse(tmp, MEMRA_E_FORMAT, (const char *const[]){keys[i], "2147483647", "out of range", NULL});
    }
}

static void test_a_negative_or_nan_rope_scaling_factor_is_refused_naming_the_key(void **state)
{
    (void)state;
    const float bad[] = {-2.0f, __builtin_nanf(""), 1e30f};
    for (int i = 0; i < 3; i++) {
        const kov o[] = {{.key = "llama.rope.scaling.type", .type = MDL_GGUF_STRING, .str = "linear"},
                         {.key = "llama.rope.scaling.factor", .type = MDL_GGUF_F32, .f = bad[i]}};
        write_variant(tmp, NULL, o, 2);
        both_refuse(tmp, MEMRA_E_FORMAT, (const char *const[]){"llama.rope.scaling.factor", "out of range", NULL});
    }
}

static void test_an_infinite_norm_epsilon_or_rope_base_and_a_bad_old_style_factor_are_refused_naming_the_key(
    void **state)
{
    (void)state;
    const float inf = __builtin_inff();
    const kov cases[] = {{.key = "llama.attention.layer_norm_rms_epsilon", .type = MDL_GGUF_F32, .f = inf},
                         {.key = "llama.rope.freq_base", .type = MDL_GGUF_F32, .f = inf},
                         {.key = "llama.rope.scale_linear", .type = MDL_GGUF_F32, .f = -4.0f}};
    for (int i = 0; i < 3; i++) {
        write_variant(tmp, NULL, &cases[i], 1);
        both_refuse(tmp, MEMRA_E_FORMAT, (const char *const[]){cases[i].key, NULL});
    }
}

/* ---- runtime sizes ---- */

static void test_attention_workspace_bytes_near_int_max_are_exact_and_overflow_gives_size_max(void **state)
{
    (void)state;
    for (int64_t n_ctx = INT32_MAX - 70; n_ctx <= INT32_MAX; n_ctx++) {
        const uint64_t split = (uint64_t)(n_ctx + 63) / 64; /* in 64 bits: no overflow here */
        const uint64_t want = KRN_ATT_WS_TICKETS * 4 + 3 * 5 * split * (16 + 2) * 4;
        assert_int_equal(krn_attention_ws_bytes(3, 5, 16, (int)n_ctx), want);
    }
    assert_int_equal(krn_attention_ws_split_bytes(INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX), SIZE_MAX);
    assert_int_equal(krn_attention_ws_split_bytes(1, 1, 1, -1), SIZE_MAX);
}

static memra_runtime_params cpu_params(int n_ctx, int n_seq)
{
    memra_runtime_params p = memra_runtime_default_params();
    p.backend = MEMRA_BACKEND_CPU;
    p.cpu_devices = 1;
    p.apply_env = 0;
    p.n_ctx = n_ctx;
    p.n_seq = n_seq;
    return p;
}

static void test_an_n_ctx_whose_kv_cache_does_not_fit_is_refused_naming_the_bytes(void **state)
{
    (void)state;
    write_hostile(tmp, NULL, NULL, 0);
    memra_model *m = memra_model_load(tmp, NULL);
    assert_non_null(m);
    static const int cases[][2] = {{INT32_MAX, 4}, {INT32_MAX - 1, 4096}, {1 << 30, 1}};
    for (int i = 0; i < 3; i++) {
        memra_runtime_params p = cpu_params(cases[i][0], cases[i][1]);
        memra_runtime *rt = memra_runtime_create(m, &p);
        if (rt) {
            memra_runtime_free(rt);
            fail_msg("n_ctx %d x n_seq %d: the runtime was created", cases[i][0], cases[i][1]);
        }
        const char *msg = memra_last_error();
        char want[64];
        snprintf(want, sizeof want, "memra_runtime_params.n_ctx = %d", cases[i][0]);
        if (!strstr(msg, want) || !strstr(msg, "bytes") || !strstr(msg, "allowed n_ctx") ||
            !strstr(msg, memra_status_str(MEMRA_E_INVAL)))
            fail_msg("n_ctx %d x n_seq %d: %s", cases[i][0], cases[i][1], msg);
    }
    memra_runtime_params p = cpu_params(4096, 2); /* 4096 positions of the tiny model: 16 MB, fits */
    memra_runtime *rt = memra_runtime_create(m, &p);
    if (!rt)
        fail_msg("n_ctx 4096: %s", memra_last_error());
    assert_int_equal(memra_runtime_n_ctx(rt), 4096);
    memra_runtime_free(rt);
    memra_model_free(m);
}

/* ---- the file under a loaded model ---- */

/* Overwrite path in place with zeros (same size, same inode: a private map sees untouched pages change). */
static void zero_file_in_place(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    char *z = calloc(1, (size_t)st.st_size);
    assert_non_null(z);
    assert_int_equal(fwrite(z, 1, (size_t)st.st_size, f), (size_t)st.st_size);
    assert_int_equal(fclose(f), 0);
    free(z);
}

/* Greedy tokens of a short run on rt (8 steps from token 5). */
static void greedy_run(memra_runtime *rt, memra_token out[8])
{
    memra_seq *seq = memra_seq_open(rt);
    assert_non_null(seq);
    memra_token tok = 5;
    for (int i = 0; i < 8; i++) {
        memra_pending *pd = NULL;
        if (memra_seq_decode_greedy(seq, tok, &pd) != MEMRA_OK || memra_pending_wait_token(pd, &tok) != MEMRA_OK)
            fail_msg("greedy step %d: %s", i, memra_last_error());
        memra_pending_free(pd);
        out[i] = tok;
    }
    assert_int_equal(memra_seq_close(seq), MEMRA_OK);
}

static void test_a_model_file_overwritten_then_truncated_after_load_changes_nothing(void **state)
{
    (void)state;
    write_hostile(tmp, NULL, NULL, 0);
    dev_platform *plat;
    dev_err err = {0};
    mdl_model *m = load_cpu(tmp, &plat, &err);
    if (!m)
        fail_msg("%s", err.msg);
    const int32_t toks[3] = {0, 5, 299};
    const int E = mdl_model_hparams(m)->n_embd;
    float *a = malloc(sizeof(float) * 3 * (size_t)E), *b = malloc(sizeof(float) * 3 * (size_t)E);
    assert_true(a && b);
    assert_int_equal(mdl_embed_rows(m, toks, 3, a, &err), 0);
    zero_file_in_place(tmp);
    assert_int_equal(mdl_embed_rows(m, toks, 3, b, &err), 0);
    assert_memory_equal(a, b, sizeof(float) * 3 * (size_t)E); /* a mapped table would read the zeros */
    assert_int_equal(truncate(tmp, 0), 0);
    assert_int_equal(mdl_embed_rows(m, toks, 3, b, &err), 0); /* a mapped table: SIGBUS */
    assert_memory_equal(a, b, sizeof(float) * 3 * (size_t)E);
    free(a);
    free(b);
    mdl_model_free(m);
    dev_platform_close(plat);

    /* the same through the API: the greedy text of a runtime does not change when its file does */
    write_hostile(tmp, NULL, NULL, 0);
    memra_model *am = memra_model_load(tmp, NULL);
    assert_non_null(am);
    memra_runtime_params p = cpu_params(64, 1);
    memra_runtime *rt = memra_runtime_create(am, &p);
    if (!rt)
        fail_msg("%s", memra_last_error());
    memra_token before[8], after[8];
    greedy_run(rt, before);
    zero_file_in_place(tmp);
    assert_int_equal(truncate(tmp, 0), 0);
    greedy_run(rt, after);
    assert_memory_equal(before, after, sizeof before);
    memra_runtime_free(rt);
    memra_model_free(am);
}

/* progress callback: the first call appends a byte to the model file (it changes while being read) */
static void append_once(float frac, void *ctx)
{
    int *done = ctx;
    if (frac <= 0.0f || *done)
        return;
    *done = 1;
    FILE *f = fopen(tmp, "ab");
    assert_non_null(f);
    fputc(0, f);
    fclose(f);
}

static void test_a_model_file_changed_while_loading_is_refused(void **state)
{
    (void)state;
    write_hostile(tmp, NULL, NULL, 0);
    dev_err err = {0};
    dev_platform *plat = dev_platform_open(DEV_KIND_CPU, 1, &err);
    assert_non_null(plat);
    int done = 0;
    mdl_load_params lp = {.platform = plat, .progress = append_once, .progress_ctx = &done};
    mdl_model *m = mdl_model_load(tmp, &lp, &err);
    assert_true(done);
    if (m) {
        mdl_model_free(m);
        fail_msg("a file that grew while loading was accepted");
    }
    assert_int_equal(err.code, MEMRA_E_STATE);
    assert_non_null(strstr(err.msg, "changed since it was opened"));
    assert_non_null(strstr(err.msg, tmp));
    dev_platform_close(plat);
}

/* memra_runtime_create on m must fail with MEMRA_E_STATE and a message naming the file and `what`. */
static void runtime_refused(memra_model *m, const char *what)
{
    memra_runtime_params p = cpu_params(64, 1);
    memra_runtime *rt = memra_runtime_create(m, &p);
    if (rt) {
        memra_runtime_free(rt);
        fail_msg("the runtime was created over a changed file (wanted: %s)", what);
    }
    const char *msg = memra_last_error();
    if (!strstr(msg, memra_status_str(MEMRA_E_STATE)) || !strstr(msg, tmp) ||
        !strstr(msg, "changed since memra_model_load") || !strstr(msg, what))
        fail_msg("wanted MEMRA_E_STATE, the path and '%s': %s", what, msg);
}

static void test_a_model_file_replaced_after_memra_model_load_is_refused_by_runtime_create(void **state)
{
    (void)state;
    gguf_tiny_params big;
    gguf_tiny_defaults(&big);
    big.n_vocab = 1000;
    write_hostile(tmp, NULL, NULL, 0);
    memra_model *m = memra_model_load(tmp, NULL);
    assert_non_null(m);
    assert_int_equal(memra_model_n_vocab(m), 300);
    write_hostile(tmp, &big, NULL, 0); /* n_vocab 1000 under the same name */
    runtime_refused(m, "bytes, then");

    /* the same size and mtime, another header (rms epsilon): the mapped file's header hash tells them apart */
    write_hostile(tmp, NULL, NULL, 0);
    struct stat st;
    assert_int_equal(stat(tmp, &st), 0);
    memra_model_free(m);
    m = memra_model_load(tmp, NULL);
    assert_non_null(m);
    gguf_tiny_params eps;
    gguf_tiny_defaults(&eps);
    eps.rms_eps = 1e-6f;
    write_hostile(tmp, &eps, NULL, 0);
    const struct timespec ts[2] = {st.st_atim, st.st_mtim};
    assert_int_equal(utimensat(AT_FDCWD, tmp, ts, 0), 0);
    runtime_refused(m, "its header");

    /* the file as loaded: the runtime is created */
    write_hostile(tmp, NULL, NULL, 0);
    assert_int_equal(utimensat(AT_FDCWD, tmp, ts, 0), 0);
    memra_runtime_params p = cpu_params(64, 1);
    memra_runtime *rt = memra_runtime_create(m, &p);
    if (!rt)
        fail_msg("the unchanged file was refused: %s", memra_last_error());
    assert_int_equal(memra_runtime_n_vocab(rt), 300);
    memra_runtime_free(rt);
    memra_model_free(m);
}

/* ---- tokenizer metadata ---- */

static void test_special_ids_outside_the_vocab_are_refused_by_one_rule_naming_the_key(void **state)
{
    (void)state;
    static const struct { const char *key; int type; int64_t v; const char *want; } cases[] = {
        {"tokenizer.ggml.bos_token_id", MDL_GGUF_U32, 300, "tokenizer.ggml.bos_token_id = 300 is outside the vocab [0, 300)"},
        {"tokenizer.ggml.bos_token_id", MDL_GGUF_U32, 0xFFFFFFFFll, "tokenizer.ggml.bos_token_id = 4294967295 is outside"},
        {"tokenizer.ggml.eos_token_id", MDL_GGUF_U32, 0x80000000ll, "tokenizer.ggml.eos_token_id = 2147483648 is outside"},
        {"tokenizer.ggml.eos_token_id", MDL_GGUF_I32, -1, "tokenizer.ggml.eos_token_id = -1 is outside the vocab"},
        {"tokenizer.ggml.padding_token_id", MDL_GGUF_I32, -7, "tokenizer.ggml.padding_token_id = -7 is outside"},
        {"tokenizer.ggml.unknown_token_id", MDL_GGUF_U32, 1000, "tokenizer.ggml.unknown_token_id = 1000 is outside"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const kov o = {.key = cases[i].key, .type = cases[i].type, .i = cases[i].v};
        write_variant(tmp, NULL, &o, 1);
        both_refuse(tmp, MEMRA_E_FORMAT, (const char *const[]){cases[i].want, NULL});
    }
}

static void test_a_llama_model_kind_over_a_byte_level_bpe_vocab_is_refused(void **state)
{
    (void)state;
    const kov o = {.key = "tokenizer.ggml.model", .type = MDL_GGUF_STRING, .str = "llama"};
    write_variant(tmp, NULL, &o, 1);
    both_refuse(tmp, MEMRA_E_FORMAT, (const char *const[]){"tokenizer.ggml.model='llama' (SentencePiece) contradicts "
                                                           "the vocab, which is byte-level BPE", NULL});
}

static void test_a_gpt2_model_kind_over_a_sentencepiece_vocab_is_refused_and_llama_accepted(void **state)
{
    (void)state;
    enum { NV = 300 };
    static char texts[NV][16];
    static const char *toks[NV];
    static int32_t types[NV];
    for (int i = 0; i < NV; i++) {
        if (i < 3)
            snprintf(texts[i], sizeof texts[i], "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
        else
            snprintf(texts[i], sizeof texts[i], "\xE2\x96\x81w%d", i); /* U+2581 then a word */
        toks[i] = texts[i];
        types[i] = i == 0 ? MDL_TOKEN_UNKNOWN : i < 3 ? MDL_TOKEN_CONTROL : MDL_TOKEN_NORMAL;
    }
    kov o[] = {{.key = "tokenizer.ggml.model", .type = MDL_GGUF_STRING, .str = "gpt2"},
               {.key = "tokenizer.ggml.tokens", .type = MDL_GGUF_ARRAY, .arr_type = MDL_GGUF_STRING, .strs = toks, .n = NV},
               {.key = "tokenizer.ggml.token_type", .type = MDL_GGUF_ARRAY, .arr_type = MDL_GGUF_I32, .i32s = types,
                .n = NV},
               {.key = "tokenizer.ggml.merges", .drop = 1},
               {.key = "tokenizer.ggml.pre", .drop = 1}};
    write_variant(tmp, NULL, o, 5);
    both_refuse(tmp, MEMRA_E_FORMAT, (const char *const[]){"tokenizer.ggml.model='gpt2' (byte-level BPE) contradicts "
                                                           "the vocab, which is SentencePiece (297 tokens", NULL});
    o[0].str = "llama";
    write_variant(tmp, NULL, o, 5);
    memra_model *m = memra_model_load(tmp, NULL);
    if (!m)
        fail_msg("a SentencePiece vocab under 'llama' was refused: %s", memra_last_error());
    memra_model_free(m);
}

static void test_malformed_merges_are_refused_naming_the_index(void **state)
{
    (void)state;
    dev_err err = {0};
    write_hostile(tmp, NULL, NULL, 0);
    mdl_gguf *g = mdl_gguf_open(tmp, &err);
    assert_non_null(g);
    int et;
    uint64_t n;
    assert_int_equal(mdl_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, &err), 0);
    assert_true(n > 8);
    char **m = calloc(n, sizeof *m);
    assert_non_null(m);
    for (uint64_t j = 0; j < n; j++) {
        const char *sj;
        size_t lj;
        assert_int_equal(mdl_gguf_arr_str(g, "tokenizer.ggml.merges", j, &sj, &lj), 0);
        m[j] = strndup(sj, lj);
    }
    mdl_gguf_close(g);
    static const struct { const char *merge; const char *want; } cases[] = {
        {"nospace", "tokenizer.ggml.merges[7] = 'nospace' is not two tokens separated by a space"},
        {"a ", "tokenizer.ggml.merges[7] = 'a ' is not two tokens separated by a space"},
        {"", "tokenizer.ggml.merges[7] = '' is not two tokens"},
        {"q ZZZZZ", "tokenizer.ggml.merges[7] = 'q ZZZZZ': 'ZZZZZ' is not a token of tokenizer.ggml.tokens"},
        {"\x01\x02 x", "tokenizer.ggml.merges[7] = '?\? x': '?\?' is not a token"},
    };
    char *keep = m[7];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        m[7] = (char *)cases[i].merge;
        const kov o = {.key = "tokenizer.ggml.merges", .type = MDL_GGUF_ARRAY, .arr_type = MDL_GGUF_STRING,
                       .strs = (const char *const *)m, .n = n};
        write_variant(tmp, NULL, &o, 1);
        both_refuse(tmp, MEMRA_E_FORMAT, (const char *const[]){cases[i].want, NULL});
    }
    m[7] = keep;
    for (uint64_t j = 0; j < n; j++)
        free(m[j]);
    free(m);
}

static void test_token_types_out_of_range_and_more_tokens_than_embedding_rows_are_refused(void **state)
{
    (void)state;
    enum { NV = 300 };
    static int32_t types[NV];
    for (int i = 0; i < NV; i++)
        types[i] = i < 3 ? MDL_TOKEN_CONTROL : MDL_TOKEN_NORMAL;
    types[10] = 42;
    const kov o = {.key = "tokenizer.ggml.token_type", .type = MDL_GGUF_ARRAY, .arr_type = MDL_GGUF_I32,
                   .i32s = types, .n = NV};
    write_variant(tmp, NULL, &o, 1);
    both_refuse(tmp, MEMRA_E_FORMAT, (const char *const[]){"tokenizer.ggml.token_type[10] = 42 (allowed 0..6", NULL});

    /* the tokenizer of a 1000-token model over the embedding table of a 300-token one */
    gguf_tiny_params big;
    gguf_tiny_defaults(&big);
    big.n_vocab = 1000;
    write_hostile(tmp, &big, NULL, 0);
    dev_err err = {0};
    mdl_gguf *g = mdl_gguf_open(tmp, &err);
    assert_non_null(g);
    static const char *toks[1000];
    static int32_t ty[1000];
    for (int j = 0; j < 1000; j++) {
        const char *sj;
        size_t lj;
        assert_int_equal(mdl_gguf_arr_str(g, "tokenizer.ggml.tokens", (uint64_t)j, &sj, &lj), 0);
        toks[j] = strndup(sj, lj);
        ty[j] = ((const int32_t *)mdl_gguf_arr_data(g, "tokenizer.ggml.token_type"))[j];
    }
    mdl_gguf_close(g);
    const kov o2[] = {{.key = "tokenizer.ggml.tokens", .type = MDL_GGUF_ARRAY, .arr_type = MDL_GGUF_STRING,
                       .strs = toks, .n = 1000},
                      {.key = "tokenizer.ggml.token_type", .type = MDL_GGUF_ARRAY, .arr_type = MDL_GGUF_I32,
                       .i32s = ty, .n = 1000},
                      {.key = "tokenizer.ggml.merges", .drop = 1}};
    write_variant(tmp, NULL, o2, 3);
    both_refuse(tmp, MEMRA_E_FORMAT,
                (const char *const[]){"tokenizer.ggml.tokens has 1000 entries, more than the 300 rows of "
                                      "token_embd.weight", NULL});
    for (int j = 0; j < 1000; j++)
        free((char *)toks[j]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_key_length_of_2_31_minus_1_is_refused_naming_the_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nine_heads_of_2_28_overflow_q_dim_and_are_refused_naming_both_keys,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_sizes_beyond_their_bounds_are_refused_naming_the_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_negative_or_nan_rope_scaling_factor_is_refused_naming_the_key, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_an_infinite_norm_epsilon_or_rope_base_and_a_bad_old_style_factor_are_refused_naming_the_key, setup,
            teardown),
        cmocka_unit_test(test_attention_workspace_bytes_near_int_max_are_exact_and_overflow_gives_size_max),
        cmocka_unit_test_setup_teardown(test_an_n_ctx_whose_kv_cache_does_not_fit_is_refused_naming_the_bytes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_model_file_overwritten_then_truncated_after_load_changes_nothing,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_model_file_changed_while_loading_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_model_file_replaced_after_memra_model_load_is_refused_by_runtime_create, setup, teardown),
        cmocka_unit_test_setup_teardown(test_special_ids_outside_the_vocab_are_refused_by_one_rule_naming_the_key,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_llama_model_kind_over_a_byte_level_bpe_vocab_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_a_gpt2_model_kind_over_a_sentencepiece_vocab_is_refused_and_llama_accepted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_merges_are_refused_naming_the_index, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_token_types_out_of_range_and_more_tokens_than_embedding_rows_are_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
