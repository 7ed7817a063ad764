/* The model engine on tiny random GGUF models (one per tensor type, plus qwen2 with biases and neox rope)
 * against a plain double-precision reference forward written here over dequantized weights (full causal
 * recompute per position: no KV cache, no kernels), and the bitwise properties the pipeline relies on:
 * a layer walk split at any cut equals the whole walk, a batch of B sequences equals B single runs, a
 * prefill in one chunk equals token-by-token, and a two-device stage split with events equals one device.
 *
 * Tolerance vs the reference: |ours - ref| <= 1e-5 * (1 + max|ref|) per logit (logits are O(2) here).
 * The same dequantized weights are used on both sides, so quantization error does not enter; what is
 * left is f32 accumulation over rows of <= 512 terms through 3 layers: measured <= 8e-7 in every type,
 * so the bound leaves ~40x margin. A wrong rope pair, head mapping, norm or bias moves logits by >= 0.1
 * (checked by mutation: flipping the rope layout gives 0.3-0.5). */
#include <math.h>
#include <semaphore.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kernels/krn.h"
#include "model/gguf.h"
#include "model/llama.h"
#include "model/gguf_write.h"
#include "support/gguf_tiny.h"
#include "support/model_rig.h"

/* ---- tiny models ---- */

enum { E = 256, FF = 512, NH = 4, NKV = 2, HD = 64, V = 300, L = 3, CTX = 16 };

typedef struct tiny { char path[256]; } tiny;

/* Write a tiny random model (gguf_tiny: synthetic byte-level vocab of V tokens, f32 norms) of arch "llama"
 * or "qwen2" (+ attn biases) whose matrices and token_embd have type t; tied: no output.weight. */
static void make_tiny(tiny *tm, const char *arch, int t, int tied, unsigned seed)
{
    gguf_tiny_params p;
    gguf_tiny_defaults(&p);
    p.arch = arch;
    p.type = t;
    p.embd_type = t;
    p.n_vocab = V;
    p.n_embd = E;
    p.n_ff = FF;
    p.n_head = NH;
    p.n_head_kv = NKV;
    p.n_layer = L;
    p.n_ctx = 64;
    p.tied = tied;
    p.seed = seed;
    dev_err err = { 0 };
    if (gguf_tiny_write_temp(tm->path, sizeof tm->path, &p, &err))
        fail_msg("gguf_tiny_write_temp: %s", err.msg);
}

/* ---- the double-precision reference ---- */

typedef struct ref_layer { double *an, *wq, *wk, *wv, *bq, *bk, *bv, *wo, *fn, *wg, *wu, *wd; } ref_layer;
typedef struct ref_model {
    int neox;
    double eps, base;
    double *embd, *out_norm, *lm; /* (V, E), (E,), (V, E) */
    ref_layer layer[L];
} ref_model;

static double *deq(const mdl_gguf *g, const char *name, int64_t n_elems)
{
    const mdl_gguf_tensor *t = mdl_gguf_tensor_find(g, name);
    if (!t)
        return NULL;
    const int64_t n_in = t->ne[0], rows = n_elems / n_in;
    assert_int_equal(rows * n_in, n_elems);
    const size_t rb = krn_row_bytes(t->type, n_in);
    float *row = malloc(sizeof *row * n_in);
    double *out = malloc(sizeof *out * n_elems);
    for (int64_t r = 0; r < rows; r++) {
        krn_dequant_row(t->type, (const unsigned char *)t->data + r * rb, row, n_in);
        for (int64_t i = 0; i < n_in; i++)
            out[r * n_in + i] = row[i];
    }
    free(row);
    return out;
}

static void ref_load(ref_model *r, const char *path, const mdl_hparams *hp)
{
    dev_err err = { 0 };
    mdl_gguf *g = mdl_gguf_open(path, &err);
    assert_non_null(g);
    r->neox = hp->rope_neox;
    r->eps = hp->rms_eps;
    r->base = hp->rope_freq_base;
    r->embd = deq(g, "token_embd.weight", (int64_t)V * E);
    r->out_norm = deq(g, "output_norm.weight", E);
    r->lm = deq(g, "output.weight", (int64_t)V * E);
    if (!r->lm)
        r->lm = deq(g, "token_embd.weight", (int64_t)V * E);
    for (int il = 0; il < L; il++) {
        char n[64];
#define LOAD(field, suffix, count) (snprintf(n, sizeof n, "blk.%d.%s", il, suffix), r->layer[il].field = deq(g, n, count))
        LOAD(an, "attn_norm.weight", E);
        LOAD(wq, "attn_q.weight", (int64_t)NH * HD * E);
        LOAD(wk, "attn_k.weight", (int64_t)NKV * HD * E);
        LOAD(wv, "attn_v.weight", (int64_t)NKV * HD * E);
        LOAD(bq, "attn_q.bias", NH * HD);
        LOAD(bk, "attn_k.bias", NKV * HD);
        LOAD(bv, "attn_v.bias", NKV * HD);
        LOAD(wo, "attn_output.weight", (int64_t)E * NH * HD);
        LOAD(fn, "ffn_norm.weight", E);
        LOAD(wg, "ffn_gate.weight", (int64_t)FF * E);
        LOAD(wu, "ffn_up.weight", (int64_t)FF * E);
        LOAD(wd, "ffn_down.weight", (int64_t)E * FF);
#undef LOAD
    }
    mdl_gguf_close(g);
}

static void ref_free(ref_model *r)
{
    free(r->embd);
    free(r->out_norm);
    free(r->lm);
    for (int il = 0; il < L; il++) {
        ref_layer *l = &r->layer[il];
        double *ps[] = { l->an, l->wq, l->wk, l->wv, l->bq, l->bk, l->bv, l->wo, l->fn, l->wg, l->wu, l->wd };
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
            free(ps[i]);
    }
}

/* y (n_out) = W (n_out, n_in) x (n_in) [+ b] */
static void ref_mv(double *y, const double *W, const double *x, int n_out, int n_in, const double *b)
{
    for (int o = 0; o < n_out; o++) {
        double s = b ? b[o] : 0.0;
        for (int i = 0; i < n_in; i++)
            s += W[(size_t)o * n_in + i] * x[i];
        y[o] = s;
    }
}

static void ref_norm(double *y, const double *x, const double *w, double eps)
{
    double ss = 0;
    for (int i = 0; i < E; i++)
        ss += x[i] * x[i];
    const double inv = 1.0 / sqrt(ss / E + eps);
    for (int i = 0; i < E; i++)
        y[i] = x[i] * inv * w[i];
}

static void ref_rope(const ref_model *r, double *x, int heads, int pos)
{
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < HD / 2; i++) {
            const double th = pos * pow(r->base, -2.0 * i / HD);
            const int a = r->neox ? i : 2 * i, b = r->neox ? i + HD / 2 : 2 * i + 1;
            const double x0 = x[h * HD + a], x1 = x[h * HD + b];
            x[h * HD + a] = x0 * cos(th) - x1 * sin(th);
            x[h * HD + b] = x0 * sin(th) + x1 * cos(th);
        }
}

/* logits (T, V) for every position of tokens[0..T), by full causal recompute. */
static void ref_forward(const ref_model *r, const int32_t *tokens, int T, double *logits)
{
    double(*x)[E] = malloc(sizeof(double[E]) * T), (*k)[NKV * HD] = malloc(sizeof(double[NKV * HD]) * T),
    (*v)[NKV * HD] = malloc(sizeof(double[NKV * HD]) * T);
    double h[E], q[NH * HD], att[NH * HD], o[E], g[FF], u[FF];
    for (int t = 0; t < T; t++)
        for (int i = 0; i < E; i++)
            x[t][i] = r->embd[(size_t)tokens[t] * E + i];
    for (int il = 0; il < L; il++) {
        const ref_layer *ly = &r->layer[il];
        for (int t = 0; t < T; t++) { /* K, V of every position first */
            ref_norm(h, x[t], ly->an, r->eps);
            ref_mv(k[t], ly->wk, h, NKV * HD, E, ly->bk);
            ref_mv(v[t], ly->wv, h, NKV * HD, E, ly->bv);
            ref_rope(r, k[t], NKV, t);
        }
        for (int t = 0; t < T; t++) {
            ref_norm(h, x[t], ly->an, r->eps);
            ref_mv(q, ly->wq, h, NH * HD, E, ly->bq);
            ref_rope(r, q, NH, t);
            for (int hh = 0; hh < NH; hh++) {
                const int kh = hh / (NH / NKV);
                double sc[CTX], mx = -INFINITY, sum = 0;
                for (int s = 0; s <= t; s++) {
                    double d = 0;
                    for (int i = 0; i < HD; i++)
                        d += q[hh * HD + i] * k[s][kh * HD + i];
                    sc[s] = d / sqrt((double)HD);
                    mx = fmax(mx, sc[s]);
                }
                for (int s = 0; s <= t; s++)
                    sum += sc[s] = exp(sc[s] - mx);
                for (int i = 0; i < HD; i++) {
                    double a = 0;
                    for (int s = 0; s <= t; s++)
                        a += sc[s] / sum * v[s][kh * HD + i];
                    att[hh * HD + i] = a;
                }
            }
            ref_mv(o, ly->wo, att, E, NH * HD, NULL);
            for (int i = 0; i < E; i++)
                x[t][i] += o[i];
            ref_norm(h, x[t], ly->fn, r->eps);
            ref_mv(g, ly->wg, h, FF, E, NULL);
            ref_mv(u, ly->wu, h, FF, E, NULL);
            for (int i = 0; i < FF; i++)
                g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
            ref_mv(o, ly->wd, g, E, FF, NULL);
            /* x[t] is read again by later positions' K/V only through this layer's k/v, already computed */
            for (int i = 0; i < E; i++)
                x[t][i] += o[i];
        }
    }
    for (int t = 0; t < T; t++) {
        ref_norm(h, x[t], r->out_norm, r->eps);
        ref_mv(logits + (size_t)t * V, r->lm, h, V, E, NULL);
    }
    free(x);
    free(k);
    free(v);
}

/* ---- running our engine (tests/support/model_rig) ---- */

typedef struct rig {
    dev_platform *p;
    model_rig r;
    mdl_model *m; /* = r.m */
} rig;

static void rig_open(rig *r, const char *path, int n_seq, dev_device *const *layer_dev, int n_dev)
{
    dev_err err = { 0 };
    r->p = dev_platform_open(DEV_KIND_CPU, n_dev, &err);
    assert_non_null(r->p);
    if (model_rig_open(&r->r, r->p, path, layer_dev, n_seq, CTX, CTX * n_seq, &err))
        fail_msg("rig %s: %s", path, err.msg);
    r->m = r->r.m;
}

static void rig_close(rig *r)
{
    model_rig_close(&r->r);
    dev_platform_close(r->p);
}

static void rig_rows(rig *r, const int32_t *tokens, const int32_t *seq, const int32_t *pos, int B, const int *cuts,
                     float *logits)
{
    dev_err err = { 0 };
    if (model_rig_rows(&r->r, tokens, seq, pos, B, cuts, logits, &err))
        fail_msg("rows: %s", err.msg);
}

static const int32_t k_prompt[] = { 5, 17, 42, 3, 88, 61, 9, 30, 77, 1 };
#define T ((int)(sizeof k_prompt / sizeof k_prompt[0]))
static const int k_whole[] = { L };

/* A prompt of T tokens of sequence 0 in one chunk: logits (T, V). */
static void run_prompt(rig *r, const int *cuts, float *logits)
{
    int32_t seq[T], pos[T];
    for (int t = 0; t < T; t++) {
        seq[t] = 0;
        pos[t] = t;
    }
    rig_rows(r, k_prompt, seq, pos, T, cuts, logits);
}

static void check_against_reference(const char *arch, int type, int tied)
{
    tiny tm;
    make_tiny(&tm, arch, type, tied, 1000u + (unsigned)type);
    rig r;
    rig_open(&r, tm.path, 1, NULL, 1);
    const mdl_hparams *hp = mdl_model_hparams(r.m);
    assert_int_equal(hp->n_layer, L);
    assert_int_equal(hp->tied_embeddings, tied);
    ref_model ref;
    ref_load(&ref, tm.path, hp);
    float got[T * V];
    double want[T * V];
    run_prompt(&r, k_whole, got);
    ref_forward(&ref, k_prompt, T, want);
    double max_ref = 0, max_diff = 0;
    for (int i = 0; i < T * V; i++) {
        max_ref = fmax(max_ref, fabs(want[i]));
        max_diff = fmax(max_diff, fabs(got[i] - want[i]));
    }
    if (!(max_diff <= 1e-5 * (1 + max_ref)))
        fail_msg("%s %s tied=%d: max |ours - reference| = %g (max |ref| %g)", arch, krn_type_name(type), tied,
                 max_diff, max_ref);
    assert_true(max_ref > 0.1); /* the model is not degenerate */
    printf("  %s %-4s tied=%d: max |ours - reference| = %.3g (max |ref| %.3g)\n", arch, krn_type_name(type), tied,
           max_diff, max_ref);
    ref_free(&ref);
    rig_close(&r);
    unlink(tm.path);
}

static const int k_types[] = { KRN_F32, KRN_F16, KRN_BF16, KRN_Q8_0, KRN_Q4_0, KRN_Q4_1, KRN_Q4_K, KRN_Q5_K, KRN_Q6_K };

static void test_llama_in_every_tensor_type_matches_the_double_reference(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        check_against_reference("llama", k_types[i], 0);
}

static void test_qwen2_with_biases_and_neox_rope_matches_the_double_reference(void **state)
{
    (void)state;
    check_against_reference("qwen2", KRN_Q8_0, 1);
}

static void test_tied_embeddings_use_token_embd_as_lm_head(void **state)
{
    (void)state;
    check_against_reference("llama", KRN_F16, 1);
}

static void test_unknown_architecture_is_refused_naming_the_supported_ones(void **state)
{
    (void)state;
    tiny tm;
    dev_err err = { 0 };
    assert_int_equal(gguf_tiny_temp_path(tm.path, sizeof tm.path, "mamba", &err), 0);
    mdl_gguf_writer *w = mdl_gguf_writer_create(&err);
    assert_non_null(w);
    mdl_gguf_writer_str(w, "general.architecture", "mamba");
    mdl_gguf_writer_u32(w, "mamba.block_count", 2);
    assert_int_equal(mdl_gguf_writer_save(w, tm.path, &err), 0);
    mdl_gguf_writer_destroy(w);
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    assert_null(mdl_model_load(tm.path, &(mdl_load_params){ .platform = p }, &err));
    assert_int_equal(err.code, MEMRA_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "mamba"));
    assert_non_null(strstr(err.msg, "llama"));
    assert_non_null(strstr(err.msg, "qwen2"));
    dev_platform_close(p);
    unlink(tm.path);
}

/* A hand-written 1-layer llama (f32, no tokenizer): every tensor present and well shaped except `omit`
 * (left out) and `bad` (written as (3, 32) instead of its shape). Loads, or fails with err. */
static mdl_model *load_manual(const char *omit, const char *bad, dev_platform *p, dev_err *err)
{
    enum { ME = 32, MFF = 64, MV = 16 };
    char path[256];
    assert_int_equal(gguf_tiny_temp_path(path, sizeof path, "manual", err), 0);
    mdl_gguf_writer *w = mdl_gguf_writer_create(err);
    mdl_gguf_writer_str(w, "general.architecture", "llama");
    mdl_gguf_writer_u32(w, "llama.block_count", 1);
    mdl_gguf_writer_u32(w, "llama.embedding_length", ME);
    mdl_gguf_writer_u32(w, "llama.feed_forward_length", MFF);
    mdl_gguf_writer_u32(w, "llama.attention.head_count", 2);
    static const struct { const char *name; int n_out, n_in; } ts[] = {
        { "token_embd.weight", MV, ME },       { "output_norm.weight", 1, ME },
        { "blk.0.attn_norm.weight", 1, ME },   { "blk.0.attn_q.weight", ME, ME },
        { "blk.0.attn_k.weight", ME, ME },     { "blk.0.attn_v.weight", ME, ME },
        { "blk.0.attn_output.weight", ME, ME }, { "blk.0.ffn_norm.weight", 1, ME },
        { "blk.0.ffn_gate.weight", MFF, ME },  { "blk.0.ffn_up.weight", MFF, ME },
        { "blk.0.ffn_down.weight", ME, MFF },
    };
    static float ones[MFF * MFF];
    for (size_t i = 0; i < sizeof ones / sizeof ones[0]; i++)
        ones[i] = 0.01f;
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        if (omit && !strcmp(omit, ts[i].name))
            continue;
        const int is_bad = bad && !strcmp(bad, ts[i].name);
        const int64_t ne[2] = { is_bad ? 32 : ts[i].n_in, is_bad ? 3 : ts[i].n_out };
        mdl_gguf_writer_tensor_f32(w, ts[i].name, KRN_F32, ne[1] == 1 ? 1 : 2, ne, ones);
    }
    assert_int_equal(mdl_gguf_writer_save(w, path, err), 0);
    mdl_gguf_writer_destroy(w);
    mdl_model *m = mdl_model_load(path, &(mdl_load_params){ .platform = p }, err);
    unlink(path);
    return m;
}

static void test_a_missing_or_misshaped_tensor_is_refused_naming_it(void **state)
{
    (void)state;
    dev_err err = { 0 };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    mdl_model *m = load_manual(NULL, NULL, p, &err); /* the control: complete, tied, no tokenizer */
    if (!m)
        fail_msg("complete model: %s", err.msg);
    assert_int_equal(mdl_model_hparams(m)->tied_embeddings, 1);
    assert_int_equal(mdl_model_hparams(m)->head_dim, 16);
    assert_null(mdl_model_tokenizer(m));
    mdl_model_free(m);
    assert_null(load_manual("blk.0.ffn_up.weight", NULL, p, &err));
    assert_int_equal(err.code, MEMRA_E_FORMAT);
    assert_non_null(strstr(err.msg, "blk.0.ffn_up.weight is missing"));
    dev_err_clear(&err);
    assert_null(load_manual(NULL, "blk.0.attn_k.weight", p, &err));
    assert_int_equal(err.code, MEMRA_E_FORMAT);
    assert_non_null(strstr(err.msg, "blk.0.attn_k.weight is (3, 32)"));
    dev_platform_close(p);
}

/* Every cut [0,a) + [a,L) gives the same bits as [0,L). */
static void test_layer_walk_split_at_any_cut_is_bit_identical_to_the_whole_walk(void **state)
{
    (void)state;
    tiny tm;
    make_tiny(&tm, "llama", KRN_Q4_K, 0, 11);
    rig r;
    rig_open(&r, tm.path, 1, NULL, 1);
    float whole[T * V], split[T * V];
    run_prompt(&r, k_whole, whole);
    for (int a = 1; a < L; a++) {
        const int cuts[] = { a, L };
        run_prompt(&r, cuts, split);
        assert_memory_equal(whole, split, sizeof whole);
    }
    const int each[] = { 1, 2, 3 };
    run_prompt(&r, each, split);
    assert_memory_equal(whole, split, sizeof whole);
    rig_close(&r);
    unlink(tm.path);
}

/* The keys bound outside 0..n_ctx is refused, naming the value and the range, before anything is enqueued. */
static void test_a_keys_bound_outside_the_cache_is_refused_naming_the_range(void **state)
{
    (void)state;
    tiny tm;
    make_tiny(&tm, "llama", KRN_Q8_0, 0, 31);
    rig r;
    rig_open(&r, tm.path, 1, NULL, 1);
    model_rig *g = &r.r;
    const int bad[] = { -1, CTX + 1 };
    for (int i = 0; i < 2; i++) {
        dev_err err = { 0 };
        assert_int_equal(mdl_forward_layers_async(g->m, g->kv, g->sc, g->s, g->x_d, g->pos_d, g->seq_d, 1, bad[i],
                                                  0, L, &err), MEMRA_E_INVAL);
        char want[96];
        snprintf(want, sizeof want, "keys = %d; allowed 0 (no bound) or a bound on the rows' positions in 1..%d",
                 bad[i], CTX);
        if (!strstr(err.msg, want))
            fail_msg("got \"%s\", want it to contain \"%s\"", err.msg, want);
    }
    assert_int_equal(dev_stream_sync(g->s, NULL), 0); /* nothing was enqueued, nothing failed */
    rig_close(&r);
    unlink(tm.path);
}

/* Prefill of T tokens in one chunk == T single-token steps, bit for bit (each row's ops never depend on the
 * other rows: matmul is a per-row dot, attention a per-row loop over its own cache prefix). */
static void test_prefill_in_one_chunk_equals_token_by_token_bitwise(void **state)
{
    (void)state;
    tiny tm;
    make_tiny(&tm, "llama", KRN_Q6_K, 0, 13);
    rig r;
    rig_open(&r, tm.path, 1, NULL, 1);
    float chunk[T * V], step[T * V];
    run_prompt(&r, k_whole, chunk);
    for (int t = 0; t < T; t++) {
        const int32_t seq = 0, pos = t;
        rig_rows(&r, &k_prompt[t], &seq, &pos, 1, k_whole, step + t * V);
    }
    assert_memory_equal(chunk, step, sizeof chunk);
    rig_close(&r);
    unlink(tm.path);
}

/* Three sequences decoded together (B = 3, different positions) == each decoded alone, bit for bit. */
static void test_a_batch_of_sequences_equals_each_sequence_run_alone_bitwise(void **state)
{
    (void)state;
    enum { NS = 3 };
    tiny tm;
    make_tiny(&tm, "qwen2", KRN_Q4_0, 1, 17);
    const int len[NS] = { 4, 7, 2 };
    /* sequence s's tokens: k_prompt rotated by s */
    float alone[NS][CTX][V], batched[NS][CTX][V];
    {
        rig r;
        rig_open(&r, tm.path, NS, NULL, 1);
        for (int s = 0; s < NS; s++)
            for (int t = 0; t < len[s]; t++) {
                const int32_t tok = k_prompt[(t + s) % T], seq = s, pos = t;
                rig_rows(&r, &tok, &seq, &pos, 1, k_whole, alone[s][t]);
            }
        rig_close(&r);
    }
    {
        rig r;
        rig_open(&r, tm.path, NS, NULL, 1);
        for (int t = 0; t < 7; t++) { /* step t: every sequence still running adds its token t */
            int32_t tok[NS], seq[NS], pos[NS];
            int B = 0;
            for (int s = NS - 1; s >= 0; s--) /* rows in reverse sequence order, to shuffle the batch */
                if (t < len[s]) {
                    tok[B] = k_prompt[(t + s) % T];
                    seq[B] = s;
                    pos[B] = t;
                    B++;
                }
            float lg[NS * V];
            rig_rows(&r, tok, seq, pos, B, k_whole, lg);
            for (int b = 0; b < B; b++)
                memcpy(batched[seq[b]][t], lg + b * V, sizeof(float) * V);
        }
        rig_close(&r);
    }
    for (int s = 0; s < NS; s++)
        assert_memory_equal(alone[s], batched[s], sizeof(float) * V * len[s]);
    unlink(tm.path);
}

/* Two stages on two CPU devices: stage 0 walks [0,a) on device 0's stream, the hidden state is peer-copied
 * to device 1 (ordered by an event), stage 1 walks [a,L) + head with its own KV on device 1. Same bits as
 * the one-device walk, no race reported, and no weight read remotely (each stage's weights are local). */
static void test_two_stages_on_two_devices_equal_one_device_with_no_race_and_no_remote_reads(void **state)
{
    (void)state;
    tiny tm;
    make_tiny(&tm, "llama", KRN_Q8_0, 0, 19);
    float want[T * V], got[T * V];
    {
        rig r;
        rig_open(&r, tm.path, 1, NULL, 1);
        run_prompt(&r, k_whole, want);
        rig_close(&r);
    }
    dev_err err = { 0 };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 2, &err);
    dev_device *d0 = dev_platform_device(p, 0), *d1 = dev_platform_device(p, 1);
    dev_device *ld[L] = { d0, d1, d1 };
    const int a = 1;
    mdl_model *m = mdl_model_load(tm.path, &(mdl_load_params){ .platform = p, .layer_dev = ld }, &err);
    assert_non_null(m);
    assert_ptr_equal(mdl_model_head_device(m), d1);
    mdl_kv *kv = mdl_kv_create(m, NULL, 1, CTX, KRN_F32, &err);
    mdl_scratch *sc0 = mdl_scratch_create(m, d0, T, &err), *sc1 = mdl_scratch_create(m, d1, T, &err);
    dev_stream *s0 = dev_stream_create(d0, "stage0", &err), *s1 = dev_stream_create(d1, "stage1", &err);
    dev_event *ev = dev_event_create(d0, &err);
    float *x0 = dev_malloc(d0, sizeof(float) * T * E, &err), *x1 = dev_malloc(d1, sizeof(float) * T * E, &err);
    float *lg = dev_malloc(d1, sizeof(float) * T * V, &err);
    int32_t *ps0 = dev_malloc(d0, sizeof(int32_t) * 2 * T, &err), *ps1 = dev_malloc(d1, sizeof(int32_t) * 2 * T, &err);
    assert_true(kv && sc0 && sc1 && s0 && s1 && ev && x0 && x1 && lg && ps0 && ps1);
    assert_int_equal(dev_peer_grant(d1, d0, &err), 0); /* the boundary copy reads device 0 */
    int32_t possq[2 * T];
    for (int t = 0; t < T; t++) {
        possq[t] = t;     /* pos */
        possq[T + t] = 0; /* seq */
    }
    float x_h[T * E];
    assert_int_equal(mdl_embed_rows(m, k_prompt, T, x_h, &err), 0);
    dev_device_counters_reset(d0);
    dev_device_counters_reset(d1);
    /* each stage has its own pos/seq copy, filled on its own stream */
    assert_int_equal(dev_copy_h2d_async(s0, x0, x_h, sizeof x_h), 0);
    assert_int_equal(dev_copy_h2d_async(s0, ps0, possq, sizeof possq), 0);
    assert_int_equal(dev_copy_h2d_async(s1, ps1, possq, sizeof possq), 0);
    assert_int_equal(mdl_forward_layers_async(m, kv, sc0, s0, x0, ps0, ps0 + T, T, 0, 0, a, &err), 0);
    assert_int_equal(dev_event_record_async(ev, s0), 0);
    assert_int_equal(dev_stream_wait_event_async(s1, ev), 0); /* ordered by ev: stage 0 wrote x0 before it */
    assert_int_equal(dev_copy_peer_async(s1, x1, d1, x0, d0, sizeof x_h), 0);
    assert_int_equal(mdl_forward_layers_async(m, kv, sc1, s1, x1, ps1, ps1 + T, T, 0, a, L, &err), 0);
    assert_int_equal(mdl_forward_head_async(m, sc1, s1, x1, lg, T, &err), 0);
    assert_int_equal(dev_copy_d2h_async(s1, got, lg, sizeof got), 0);
    assert_int_equal(dev_stream_sync(s1, &err), 0);
    assert_int_equal(dev_stream_sync(s0, &err), 0);
    assert_memory_equal(want, got, sizeof got);
    char why[256];
    if (dev_race_count(p)) {
        dev_race_first(p, why, sizeof why);
        fail_msg("race reported: %s", why);
    }
    dev_counters c0, c1;
    dev_device_counters(d0, &c0);
    dev_device_counters(d1, &c1);
    assert_int_equal(c0.remote_read_bytes, 0);
    assert_int_equal(c1.remote_read_bytes, 0);
    assert_true(c0.kernels_run > 0 && c1.kernels_run > 0); /* both stages really ran */
    dev_stream_destroy(s0);
    dev_stream_destroy(s1);
    dev_event_destroy(ev);
    dev_free(d0, x0);
    dev_free(d1, x1);
    dev_free(d1, lg);
    dev_free(d0, ps0);
    dev_free(d1, ps1);
    mdl_scratch_destroy(sc0);
    mdl_scratch_destroy(sc1);
    mdl_kv_destroy(kv);
    mdl_model_free(m);
    dev_platform_close(p);
    unlink(tm.path);
}

/* A partial load (mdl_load_params.partial) holds only its layers, and the head only when asked: rank A holds
 * [0, a) and the embedding table, rank B [a, L) and the head. Each holds strictly fewer weight bytes, the two sum
 * to the full model's, the KV cache has only the held layers, what is absent is refused by name, and walking A
 * then B gives the full model's logits bit for bit (tied: B's lm_head comes from the file, not a table copy). */
static void test_a_partial_load_holds_only_its_layers_and_two_halves_equal_the_whole_model(void **state)
{
    (void)state;
    for (int tied = 0; tied <= 1; tied++) {
        tiny tm;
        make_tiny(&tm, "llama", KRN_Q8_0, tied, 43 + (unsigned)tied);
        float want[T * V], got[T * V];
        dev_err err = { 0 };
        dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
        assert_non_null(p);
        dev_device *d = dev_platform_device(p, 0);
        mdl_model *whole = mdl_model_load(tm.path, &(mdl_load_params){ .platform = p }, &err);
        assert_non_null(whole);
        {
            rig r;
            rig_open(&r, tm.path, 1, NULL, 1);
            run_prompt(&r, k_whole, want);
            rig_close(&r);
        }
        const int a = 1;
        dev_device *la[L] = { d, NULL, NULL }, *lb[L] = { NULL, d, d };
        /* without partial a NULL layer device is refused, naming it */
        assert_null(mdl_model_load(tm.path, &(mdl_load_params){ .platform = p, .layer_dev = la }, &err));
        assert_int_equal(err.code, MEMRA_E_INVAL);
        if (!strstr(err.msg, "layer_dev[1] is NULL"))
            fail_msg("the refusal does not name the layer: %s", err.msg);
        dev_err_clear(&err);
        mdl_model *ma = mdl_model_load(tm.path, &(mdl_load_params){ .platform = p, .layer_dev = la, .partial = 1 },
                                       &err);
        mdl_model *mb = mdl_model_load(tm.path, &(mdl_load_params){ .platform = p, .layer_dev = lb, .head_dev = d,
                                                                     .partial = 1 }, &err);
        assert_non_null(ma);
        assert_non_null(mb);
        assert_int_equal(mdl_model_layers_held(whole), L);
        assert_int_equal(mdl_model_layers_held(ma), a);
        assert_int_equal(mdl_model_layers_held(mb), L - a);
        assert_ptr_equal(mdl_model_layer_device(ma, 0), d);
        assert_null(mdl_model_layer_device(ma, a));
        assert_null(mdl_model_layer_device(mb, 0));
        assert_null(mdl_model_head_device(ma));
        assert_ptr_equal(mdl_model_head_device(mb), d);
        assert_true(mdl_model_has_embeddings(ma) && !mdl_model_has_embeddings(mb));
        assert_int_equal(mdl_model_hparams(mb)->tied_embeddings, tied);
        assert_int_equal(mdl_model_hparams(ma)->tied_embeddings, tied);
        const size_t wa = mdl_model_weight_bytes(ma), wb = mdl_model_weight_bytes(mb), ww = mdl_model_weight_bytes(whole);
        assert_true(wa > 0 && wb > 0 && wa < ww && wb < ww);
        assert_int_equal(wa + wb, ww);
        /* the KV cache: only the held layers, even when layer_dev names a device for every layer */
        dev_device *all[L] = { d, d, d };
        mdl_kv *ka = mdl_kv_create(ma, all, 1, CTX, KRN_F32, &err), *kb = mdl_kv_create(mb, NULL, 1, CTX, KRN_F32, &err);
        assert_true(ka && kb);
        for (int il = 0; il < L; il++) {
            assert_int_equal(mdl_kv_has_layer(ka, il), il < a);
            assert_int_equal(mdl_kv_has_layer(kb, il), il >= a);
        }
        mdl_scratch *sa = mdl_scratch_create(ma, d, T, &err), *sb = mdl_scratch_create(mb, d, T, &err);
        dev_stream *s = dev_stream_create(d, "stages", &err);
        float *x = dev_malloc(d, sizeof(float) * T * E, &err), *lg = dev_malloc(d, sizeof(float) * T * V, &err);
        int32_t *ps = dev_malloc(d, sizeof(int32_t) * 2 * T, &err);
        assert_true(sa && sb && s && x && lg && ps);
        int32_t possq[2 * T];
        for (int t = 0; t < T; t++) {
            possq[t] = t;     /* pos */
            possq[T + t] = 0; /* seq */
        }
        float x_h[T * E];
        assert_int_equal(mdl_embed_rows(mb, k_prompt, T, x_h, &err), MEMRA_E_STATE);
        assert_int_equal(mdl_embed_rows(ma, k_prompt, T, x_h, &err), 0);
        /* what a process does not hold is refused by name, before anything is enqueued */
        dev_err_clear(&err);
        assert_int_equal(mdl_forward_layers_async(ma, ka, sa, s, x, ps, ps + T, T, 0, 0, L, &err), MEMRA_E_INVAL);
        if (!strstr(err.msg, "layer 1 of [0, 3) is not in this process"))
            fail_msg("the refusal does not name the layer: %s", err.msg);
        assert_int_equal(mdl_forward_head_async(ma, sa, s, x, lg, T, &err), MEMRA_E_INVAL);
        assert_int_equal(dev_copy_h2d_async(s, x, x_h, sizeof x_h), 0);
        assert_int_equal(dev_copy_h2d_async(s, ps, possq, sizeof possq), 0);
        assert_int_equal(mdl_forward_layers_async(ma, ka, sa, s, x, ps, ps + T, T, 0, 0, a, &err), 0);
        assert_int_equal(mdl_forward_layers_async(mb, kb, sb, s, x, ps, ps + T, T, 0, a, L, &err), 0);
        assert_int_equal(mdl_forward_head_async(mb, sb, s, x, lg, T, &err), 0);
        assert_int_equal(dev_copy_d2h_async(s, got, lg, sizeof got), 0);
        assert_int_equal(dev_stream_sync(s, &err), 0);
        assert_memory_equal(want, got, sizeof got);
        dev_stream_destroy(s);
        dev_free(d, x);
        dev_free(d, lg);
        dev_free(d, ps);
        mdl_scratch_destroy(sa);
        mdl_scratch_destroy(sb);
        mdl_kv_destroy(ka);
        mdl_kv_destroy(kb);
        mdl_model_free(ma);
        mdl_model_free(mb);
        mdl_model_free(whole);
        dev_platform_close(p);
        unlink(tm.path);
    }
}

/* Two stage streams on one device sharing the hidden state x: with the event wait the checker is silent;
 * without it, stage 1's first kernel (rmsnorm reading x) is reported against stage 0's last write of x:
 * the kernels' access lists are what make the missing wait visible. In the no-wait round a semaphore
 * (host functions on the streams, invisible to the checker's vector clocks) still makes stage 1 run after
 * stage 0 in real time, so the program never races for real and stays clean under TSan. */
static void post_sem(void *sem) { sem_post(sem); }
static void wait_sem(void *sem) { sem_wait(sem); }

/* A KV cache that cannot fit in the free memory is refused before any allocation, naming the bytes. */
static void test_a_kv_cache_larger_than_the_free_memory_is_refused_naming_bytes_wanted_and_free(void **state)
{
    (void)state;
    tiny tm;
    make_tiny(&tm, "llama", KRN_Q8_0, 0, 29);
    dev_err err = { 0 };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 2, &err);
    mdl_model *m = mdl_model_load(tm.path, &(mdl_load_params){ .platform = p }, &err);
    assert_non_null(m);
    size_t free_b = 0, total_b = 0;
    assert_int_equal(dev_device_mem_info(dev_platform_device(p, 0), &free_b, &total_b, &err), 0);
    assert_true(free_b > 0 && total_b >= free_b);
    /* n_seq x n_ctx sized to want about twice the host's total: refused before any allocation */
    const mdl_hparams *hp = mdl_model_hparams(m);
    const double per = 2.0 * hp->n_layer * hp->n_head_kv * hp->head_dim * 4.0; /* f32 K and V, per position */
    const int n_seq = 4096, n_ctx = (int)(2.0 * (double)total_b / per / n_seq) + 1;
    dev_device *ld[64];
    for (int il = 0; il < hp->n_layer; il++)
        ld[il] = dev_platform_device(p, il % 2); /* two emulated devices: one host's memory */
    assert_null(mdl_kv_create(m, ld, n_seq, n_ctx, KRN_F32, &err));
    assert_int_equal(err.code, MEMRA_E_NOMEM);
    if (!strstr(err.msg, "bytes wanted on the host") || !strstr(err.msg, "free of"))
        fail_msg("the refusal does not name the bytes: %s", err.msg);
    mdl_kv *kv = mdl_kv_create(m, ld, 2, 64, KRN_F32, &err); /* a small one fits */
    assert_non_null(kv);
    mdl_kv_destroy(kv);
    mdl_model_free(m);
    dev_platform_close(p);
    unlink(tm.path);
}

/* A scratch reserves attention's workspace once (CPU: the forward ignores it; the bits do not change). */
static void test_scratch_reserves_the_attention_workspace_once(void **state)
{
    (void)state;
    tiny tm;
    make_tiny(&tm, "llama", KRN_Q8_0, 0, 29);
    dev_err err = { 0 };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    dev_device *d = dev_platform_device(p, 0);
    mdl_model *m = mdl_model_load(tm.path, &(mdl_load_params){ .platform = p }, &err);
    assert_non_null(m);
    mdl_scratch *sc = mdl_scratch_create(m, d, 4, &err);
    assert_non_null(sc);
    assert_int_equal(mdl_scratch_reserve_attention(sc, 64, &err), 0); /* one chunk: nothing to reserve */
    assert_int_equal(mdl_scratch_reserve_attention(sc, 1024, &err), 0);
    assert_int_equal(mdl_scratch_reserve_attention(sc, 1024, &err), MEMRA_E_INVAL); /* once */
    assert_non_null(strstr(err.msg, "without a workspace"));
    assert_int_equal(mdl_scratch_reserve_attention(NULL, 1024, &err), MEMRA_E_INVAL);
    mdl_scratch_destroy(sc);
    mdl_model_free(m);
    dev_platform_close(p);
    unlink(tm.path);
}

static void test_a_stage_that_skips_its_event_wait_is_reported_as_a_race(void **state)
{
    (void)state;
    tiny tm;
    make_tiny(&tm, "llama", KRN_Q8_0, 0, 23);
    dev_err err = { 0 };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    dev_device *d = dev_platform_device(p, 0);
    mdl_model *m = mdl_model_load(tm.path, &(mdl_load_params){ .platform = p }, &err);
    assert_non_null(m);
    mdl_kv *kv = mdl_kv_create(m, NULL, 1, CTX, KRN_F32, &err);
    mdl_scratch *sc0 = mdl_scratch_create(m, d, T, &err), *sc1 = mdl_scratch_create(m, d, T, &err);
    dev_stream *s0 = dev_stream_create(d, "stage0", &err), *s1 = dev_stream_create(d, "stage1", &err);
    dev_event *ev = dev_event_create(d, &err);
    float *x = dev_malloc(d, sizeof(float) * T * E, &err);
    int32_t *ps = dev_malloc(d, sizeof(int32_t) * 2 * T, &err);
    assert_true(kv && sc0 && sc1 && s0 && s1 && ev && x && ps);
    int32_t ps_h[2 * T] = { 0 };
    for (int t = 0; t < T; t++)
        ps_h[t] = t;
    float x_h[T * E];
    assert_int_equal(mdl_embed_rows(m, k_prompt, T, x_h, &err), 0);
    sem_t sem;
    sem_init(&sem, 0, 0);
    for (int wait = 1; wait >= 0; wait--) {
        dev_race_reset(p);
        assert_int_equal(dev_copy_h2d_async(s0, x, x_h, sizeof x_h), 0);
        assert_int_equal(dev_copy_h2d_async(s0, ps, ps_h, sizeof ps_h), 0);
        assert_int_equal(mdl_forward_layers_async(m, kv, sc0, s0, x, ps, ps + T, T, 0, 0, 1, &err), 0);
        assert_int_equal(dev_event_record_async(ev, s0), 0);
        if (wait) { /* ordered by ev: stage 0 wrote x (and the layer-0 cache) before it */
            assert_int_equal(dev_stream_wait_event_async(s1, ev), 0);
        } else {    /* real-time order only: stage 1 starts after stage 0 posted */
            assert_int_equal(dev_host_fn_async(s0, post_sem, &sem), 0);
            assert_int_equal(dev_host_fn_async(s1, wait_sem, &sem), 0);
        }
        assert_int_equal(mdl_forward_layers_async(m, kv, sc1, s1, x, ps, ps + T, T, 0, 1, L, &err), 0);
        dev_stream_sync(s1, NULL);
        dev_stream_sync(s0, NULL);
        if (wait)
            assert_int_equal(dev_race_count(p), 0);
        else {
            char why[512];
            assert_true(dev_race_first(p, why, sizeof why) > 0);
            printf("  reported: %s\n", why);
            assert_non_null(strstr(why, "stage1")); /* the stream that skipped its wait */
        }
        /* the streams' sticky errors are not what this test is about: start the next round clean */
        dev_stream_destroy(s0);
        dev_stream_destroy(s1);
        s0 = dev_stream_create(d, "stage0", &err);
        s1 = dev_stream_create(d, "stage1", &err);
    }
    dev_stream_destroy(s0);
    dev_stream_destroy(s1);
    sem_destroy(&sem);
    dev_event_destroy(ev);
    dev_free(d, x);
    dev_free(d, ps);
    mdl_scratch_destroy(sc0);
    mdl_scratch_destroy(sc1);
    mdl_kv_destroy(kv);
    mdl_model_free(m);
    dev_platform_close(p);
    unlink(tm.path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_in_every_tensor_type_matches_the_double_reference),
        cmocka_unit_test(test_qwen2_with_biases_and_neox_rope_matches_the_double_reference),
        cmocka_unit_test(test_tied_embeddings_use_token_embd_as_lm_head),
        cmocka_unit_test(test_unknown_architecture_is_refused_naming_the_supported_ones),
        cmocka_unit_test(test_a_missing_or_misshaped_tensor_is_refused_naming_it),
        cmocka_unit_test(test_layer_walk_split_at_any_cut_is_bit_identical_to_the_whole_walk),
        cmocka_unit_test(test_a_keys_bound_outside_the_cache_is_refused_naming_the_range),
        cmocka_unit_test(test_prefill_in_one_chunk_equals_token_by_token_bitwise),
        cmocka_unit_test(test_a_batch_of_sequences_equals_each_sequence_run_alone_bitwise),
        cmocka_unit_test(test_two_stages_on_two_devices_equal_one_device_with_no_race_and_no_remote_reads),
        cmocka_unit_test(test_a_partial_load_holds_only_its_layers_and_two_halves_equal_the_whole_model),
        cmocka_unit_test(test_a_stage_that_skips_its_event_wait_is_reported_as_a_race),
        cmocka_unit_test(test_scratch_reserves_the_attention_workspace_once),
        cmocka_unit_test(test_a_kv_cache_larger_than_the_free_memory_is_refused_naming_bytes_wanted_and_free),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
