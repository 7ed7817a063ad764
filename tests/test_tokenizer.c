/* Tokenizer without a model: a tiny hand-made byte-level BPE vocab (merge order, pre-tokenizers,
 * special tokens, invalid UTF-8, long words, threads) and a small SentencePiece vocab checked against
 * HF ids committed in tests/data/tokenizer_oracle_spm.txt. Runs in every leg (sanitizers included). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <unistd.h>

#include "model/gguf_synth.h"
#include "model/tok_internal.h" /* tok_pretok_*: the pre-tokenizer alone, against HF's splits */
#include "model/tokenizer.h"
#include "support/tok_gguf_vocab.h"
#include "support/tok_testdata.h"

/* ---- a tiny byte-level vocab: 256 byte symbols (id = byte), then added tokens ---- */

typedef struct tiny {
    char *tok[512];
    int32_t type[512];
    int n;
    const char *merges[64];
    int n_merges;
} tiny;

static void put_cp(char *o, int *w, unsigned cp)
{
    if (cp < 0x80) {
        o[(*w)++] = (char)cp;
    } else {
        o[(*w)++] = (char)(0xC0 | (cp >> 6));
        o[(*w)++] = (char)(0x80 | (cp & 0x3F));
    }
}

/* GPT-2's bytes_to_unicode, written out independently of the library. */
static unsigned byte_cp(int b)
{
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
        return (unsigned)b;
    unsigned n = 0;
    for (int k = 0; k < b; k++)
        if (!((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF)))
            n++;
    return 256 + n;
}

static int add_tok(tiny *v, const char *text, int32_t type)
{
    v->tok[v->n] = strdup(text);
    v->type[v->n] = type;
    return v->n++;
}

static void tiny_init(tiny *v)
{
    memset(v, 0, sizeof *v);
    for (int b = 0; b < 256; b++) {
        char s[4];
        int w = 0;
        put_cp(s, &w, byte_cp(b));
        s[w] = 0;
        add_tok(v, s, MDL_TOKEN_NORMAL);
    }
}

/* Add merge "l r" (byte-level spelling, space = "\xC4\xA0") and its result token; returns the result id. */
static int add_merge(tiny *v, const char *l, const char *r)
{
    char m[128], res[128];
    snprintf(m, sizeof m, "%s %s", l, r);
    snprintf(res, sizeof res, "%s%s", l, r);
    v->merges[v->n_merges++] = strdup(m);
    return add_tok(v, res, MDL_TOKEN_NORMAL);
}

static void tiny_free(tiny *v)
{
    for (int i = 0; i < v->n; i++)
        free(v->tok[i]);
    for (int i = 0; i < v->n_merges; i++)
        free((char *)v->merges[i]);
}

static mdl_tokenizer *tiny_create(tiny *v, const char *pre, dev_err *err)
{
    mdl_vocab_src src;
    mdl_vocab_src_init(&src);
    src.model = "gpt2";
    src.pre = pre;
    src.n_tokens = (uint32_t)v->n;
    src.tokens = (const char *const *)v->tok;
    src.token_types = v->type;
    src.n_merges = (uint32_t)v->n_merges;
    src.merges = v->merges;
    return mdl_tokenizer_create(&src, err);
}

static int tokenize(const mdl_tokenizer *t, const char *s, int parse_special, int32_t *ids)
{
    return mdl_tokenize(t, s, strlen(s), 0, parse_special, ids, 256);
}

static void test_bpe_merges_apply_by_rank_not_by_position(void **state)
{
    int32_t ids[256];
    for (int order = 0; order < 2; order++) {
        tiny v;
        tiny_init(&v);
        int ab, bc;
        if (order == 0) {
            bc = add_merge(&v, "b", "c");
            ab = add_merge(&v, "a", "b");
        } else {
            ab = add_merge(&v, "a", "b");
            bc = add_merge(&v, "b", "c");
        }
        dev_err err = {0};
        mdl_tokenizer *t = tiny_create(&v, "gpt2", &err);
        assert_non_null(t);
        assert_int_equal(tokenize(t, "abc", 1, ids), 2);
        if (order == 0) { /* "b c" has rank 0: a + bc */
            assert_int_equal(ids[0], 'a');
            assert_int_equal(ids[1], bc);
        } else {
            assert_int_equal(ids[0], ab);
            assert_int_equal(ids[1], 'c');
        }
        mdl_tokenizer_destroy(t);
        tiny_free(&v);
    }
}

static void test_bpe_builds_words_and_the_space_symbol_joins_the_next_word(void **state)
{
    tiny v;
    tiny_init(&v);
    add_merge(&v, "h", "e");
    add_merge(&v, "l", "l");
    add_merge(&v, "he", "ll");
    int hello = add_merge(&v, "hell", "o");
    add_merge(&v, "\xC4\xA0", "w");
    add_merge(&v, "o", "r");
    add_merge(&v, "\xC4\xA0w", "or");
    add_merge(&v, "\xC4\xA0wor", "l");
    int world = add_merge(&v, "\xC4\xA0worl", "d");
    dev_err err = {0};
    mdl_tokenizer *t = tiny_create(&v, "gpt2", &err);
    assert_non_null(t);
    int32_t ids[256];
    assert_int_equal(tokenize(t, "hello world", 1, ids), 2);
    assert_int_equal(ids[0], hello);
    assert_int_equal(ids[1], world);
    /* "world" without the space cannot use the Ġ merges; "  world": the regex leaves " " + " world" */
    assert_int_equal(tokenize(t, "  world", 1, ids), 2);
    assert_int_equal(ids[0], ' '); /* the byte symbol of 0x20 has id 32 */
    assert_int_equal(ids[1], world);
    mdl_tokenizer_destroy(t);
    tiny_free(&v);
}

static void test_pretokenizer_is_chosen_by_the_pre_type(void **state)
{
    tiny v;
    tiny_init(&v);
    int d12 = add_merge(&v, "1", "2");
    int d123 = add_merge(&v, "12", "3");
    int d45 = add_merge(&v, "4", "5");
    int xyz = add_tok(&v, "xyz", MDL_TOKEN_NORMAL); /* reachable only by ignore_merges */
    dev_err err = {0};
    int32_t ids[256];

    mdl_tokenizer *t = tiny_create(&v, "gpt2", &err); /* \p{N}+ keeps the run whole */
    assert_int_equal(tokenize(t, "12345", 1, ids), 2);
    assert_int_equal(ids[0], d123);
    assert_int_equal(ids[1], d45);
    assert_int_equal(tokenize(t, "xyz", 1, ids), 3);
    mdl_tokenizer_destroy(t);

    t = tiny_create(&v, "smollm", &err); /* every digit is its own word */
    assert_int_equal(tokenize(t, "12345", 1, ids), 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(ids[i], '1' + i);
    mdl_tokenizer_destroy(t);

    t = tiny_create(&v, "llama-bpe", &err); /* \p{N}{1,3}, and whole-word vocab hits skip merging */
    assert_int_equal(tokenize(t, "12345", 1, ids), 2);
    assert_int_equal(ids[0], d123);
    assert_int_equal(ids[1], d45);
    assert_int_equal(tokenize(t, "xyz", 1, ids), 1);
    assert_int_equal(ids[0], xyz);
    assert_int_equal(mdl_tokenizer_add_bos(t), 0); /* llama3 defaults to BOS, but this vocab has no bos id */
    mdl_tokenizer_destroy(t);

    t = tiny_create(&v, "qwen2", &err); /* \p{N}: single digits */
    assert_int_equal(tokenize(t, "123", 1, ids), 3);
    mdl_tokenizer_destroy(t);
    (void)d12;
    tiny_free(&v);
}

static void test_special_tokens_split_out_only_when_asked_and_user_defined_always(void **state)
{
    tiny v;
    tiny_init(&v);
    int im = add_tok(&v, "<|im_start|>", MDL_TOKEN_CONTROL);
    int im_long = add_tok(&v, "<|im_start|>x", MDL_TOKEN_CONTROL);
    int think = add_tok(&v, "<think>", MDL_TOKEN_USER_DEFINED);
    dev_err err = {0};
    mdl_tokenizer *t = tiny_create(&v, "gpt2", &err);
    assert_non_null(t);
    int32_t ids[256];
    int n = tokenize(t, "a<|im_start|>b", 1, ids);
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], im);
    n = tokenize(t, "<|im_start|>x", 1, ids); /* leftmost-longest */
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], im_long);
    n = tokenize(t, "a<|im_start|>b", 0, ids);
    assert_true(n > 3);
    for (int i = 0; i < n; i++)
        assert_int_not_equal(ids[i], im);
    n = tokenize(t, "<think>hi", 0, ids);
    assert_int_equal(ids[0], think);
    char buf[64];
    assert_int_equal(mdl_token_to_piece(t, im, buf, sizeof buf, 0), 0);
    assert_int_equal(mdl_token_to_piece(t, think, buf, sizeof buf, 0), 7);
    mdl_tokenizer_destroy(t);
    tiny_free(&v);
}

static void test_invalid_utf8_tokenizes_bytewise_and_round_trips(void **state)
{
    tiny v;
    tiny_init(&v);
    dev_err err = {0};
    mdl_tokenizer *t = tiny_create(&v, "smollm", &err);
    const char s[] = "ok \xFF\xFE bad \xC3 half \xE2\x82 cut caf\xC3\xA9";
    int32_t ids[256];
    int n = mdl_tokenize(t, s, sizeof s - 1, 0, 1, ids, 256);
    assert_int_equal(n, (int)sizeof s - 1); /* no merges: one id per byte */
    for (int i = 0; i < n; i++)
        assert_int_equal(ids[i], (unsigned char)s[i]);
    char back[256];
    assert_int_equal(mdl_detokenize(t, ids, n, back, sizeof back, 0), n);
    assert_memory_equal(back, s, (size_t)n);
    mdl_tokenizer_destroy(t);
    tiny_free(&v);
}

static void test_a_long_word_merges_fully(void **state)
{
    tiny v;
    tiny_init(&v);
    int ab = add_merge(&v, "a", "b");
    int abab = add_merge(&v, "ab", "ab");
    dev_err err = {0};
    mdl_tokenizer *t = tiny_create(&v, "gpt2", &err);
    size_t len = 1 << 18;
    char *s = malloc(len);
    for (size_t i = 0; i < len; i++)
        s[i] = i % 2 ? 'b' : 'a';
    int32_t *ids = malloc(len / 4 * sizeof *ids);
    int n = mdl_tokenize(t, s, len, 0, 1, ids, (int)(len / 4));
    assert_int_equal(n, (int)(len / 4));
    for (int i = 0; i < n; i++)
        assert_int_equal(ids[i], abab);
    assert_int_equal(mdl_tokenize(t, "aba", 3, 0, 1, ids, 4), 2);
    assert_int_equal(ids[0], ab);
    free(ids);
    free(s);
    mdl_tokenizer_destroy(t);
    tiny_free(&v);
}

typedef struct thr_arg {
    const mdl_tokenizer *t;
    const char *text;
    int32_t ids[256];
    int n;
} thr_arg;

static void *thr_tokenize(void *p)
{
    thr_arg *a = p;
    for (int k = 0; k < 200; k++)
        a->n = mdl_tokenize(a->t, a->text, strlen(a->text), 0, 1, a->ids, 256);
    return NULL;
}

static void test_threads_tokenize_one_tokenizer_concurrently(void **state)
{
    tiny v;
    tiny_init(&v);
    add_merge(&v, "h", "e");
    add_merge(&v, "\xC4\xA0", "w");
    add_tok(&v, "<|im_start|>", MDL_TOKEN_CONTROL);
    dev_err err = {0};
    mdl_tokenizer *t = tiny_create(&v, "smollm", &err);
    const char *text = "hello world 123 <|im_start|>he we";
    int32_t want[256];
    int nw = tokenize(t, text, 1, want);
    thr_arg a[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (thr_arg){.t = t, .text = text};
        assert_int_equal(pthread_create(&th[i], NULL, thr_tokenize, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(a[i].n, nw);
        assert_memory_equal(a[i].ids, want, (size_t)nw * sizeof *want);
    }
    mdl_tokenizer_destroy(t);
    tiny_free(&v);
}

static void test_unknown_model_pre_and_bad_ids_are_refused_naming_what_is_supported(void **state)
{
    tiny v;
    tiny_init(&v);
    add_merge(&v, "a", "b");
    dev_err err = {0};
    assert_null(tiny_create(&v, "no-such-pre", &err));
    assert_int_equal(err.code, MEMRA_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "no-such-pre"));
    assert_non_null(strstr(err.msg, "smollm"));
    mdl_vocab_src src;
    mdl_vocab_src_init(&src);
    src.model = "t5";
    src.n_tokens = (uint32_t)v.n;
    src.tokens = (const char *const *)v.tok;
    dev_err_clear(&err);
    assert_null(mdl_tokenizer_create(&src, &err));
    assert_non_null(strstr(err.msg, "gpt2"));
    assert_non_null(strstr(err.msg, "llama"));
    src.model = "gpt2";
    src.n_merges = (uint32_t)v.n_merges;
    src.merges = v.merges;
    src.eos = v.n;
    dev_err_clear(&err);
    assert_null(mdl_tokenizer_create(&src, &err));
    assert_int_equal(err.code, MEMRA_E_FORMAT);
    assert_non_null(strstr(err.msg, "eos"));
    tiny_free(&v);
}

/* ---- SentencePiece vocab from the HF oracle file ---- */

static void test_spm_ids_match_the_hf_oracle_and_round_trip(void **state)
{
    char p[4096];
    int nl;
    char **lines = tok_read_lines(tok_data_path("tokenizer_oracle_spm.txt", p, sizeof p), &nl);
    assert_non_null(lines);
    char *tok[1024];
    size_t lens[1024];
    int32_t types[1024];
    float scores[1024];
    int n = 0, cases = 0;
    mdl_tokenizer *t = NULL;
    for (int i = 0; i < nl; i++) {
        if (strncmp(lines[i], "tok ", 4) == 0) {
            int id, ty, off;
            float sc;
            assert_int_equal(sscanf(lines[i], "tok %d %d %f %n", &id, &ty, &sc, &off), 3);
            assert_int_equal(id, n);
            tok[n] = tok_unescape(lines[i] + off, &lens[n]);
            types[n] = ty;
            scores[n] = sc;
            n++;
            continue;
        }
        if (!t) {
            mdl_vocab_src src;
            mdl_vocab_src_init(&src);
            src.model = "llama";
            src.n_tokens = (uint32_t)n;
            src.tokens = (const char *const *)tok;
            src.token_lens = lens;
            src.token_types = types;
            src.scores = scores;
            src.bos = 1, src.eos = 2, src.unk = 0;
            dev_err err = {0};
            t = mdl_tokenizer_create(&src, &err);
            if (!t)
                fprintf(stderr, "%s\n", err.msg);
            assert_non_null(t);
        }
        const char *sep = strstr(lines[i], " :: ");
        assert_non_null(sep);
        char *esc = strndup(lines[i] + 4, (size_t)(sep - lines[i] - 4));
        size_t len;
        char *text = tok_unescape(esc, &len);
        int want[256];
        int nw = tok_parse_ids(sep + 4, want, 256);
        int32_t got[256];
        int ng = mdl_tokenize(t, text, len, 0, 1, got, 256);
        int same = ng == nw;
        for (int k = 0; same && k < ng; k++)
            same = got[k] == want[k];
        if (!same) {
            fprintf(stderr, "spm '%s': got", esc);
            for (int k = 0; k < ng; k++)
                fprintf(stderr, " %d", got[k]);
            fprintf(stderr, " want %s\n", sep + 4);
        }
        assert_true(same);
        if (!strstr(text, "<s>")) { /* control tokens do not render without special */
            char back[512];
            int m = mdl_detokenize(t, got, ng, back, sizeof back, 0);
            assert_int_equal(m, (int)len);
            assert_memory_equal(back, text, len);
        }
        cases++;
        free(text);
        free(esc);
    }
    assert_true(cases >= 10);
    int32_t ids[16];
    assert_int_equal(mdl_tokenize(t, "a", 1, 1, 1, ids, 16), 3); /* SPM adds BOS by default */
    assert_int_equal(ids[0], 1);
    mdl_tokenizer_destroy(t);
    for (int i = 0; i < n; i++)
        free(tok[i]);
    tok_lines_free(lines, nl);
}

typedef struct split_rec {
    size_t lens[4096];
    int n;
} split_rec;

static int record_word(void *ctx, const char *w, size_t len)
{
    split_rec *r = ctx;
    if (r->n < 4096)
        r->lens[r->n] = len;
    r->n++;
    return 0;
}

static void test_pretokenizer_splits_match_hf_for_every_pre_type_and_corpus_case(void **state)
{
    int nc, nl, checked = 0, bad = 0;
    char **cases = tok_corpus_load(&nc);
    assert_non_null(cases);
    char p[4096];
    char **lines = tok_read_lines(tok_data_path("tokenizer_oracle_pretok.txt", p, sizeof p), &nl);
    assert_non_null(lines);
    char cur[32] = "";
    tok_pretok pre = {0};
    static split_rec rec;
    static int want[4096];
    for (int i = 0; i < nl; i++) {
        char name[32];
        int idx, off;
        if (sscanf(lines[i], "pre %31s %d %n", name, &idx, &off) != 2)
            continue;
        if (strcmp(name, cur) != 0) {
            tok_pretok_free(&pre);
            dev_err err = {0};
            assert_int_equal(tok_pretok_init(&pre, name, &err), 0);
            snprintf(cur, sizeof cur, "%s", name);
        }
        assert_true(idx >= 0 && idx < nc);
        size_t len;
        char *text = tok_unescape(cases[idx], &len);
        rec.n = 0;
        assert_int_equal(tok_pretok_split(&pre, text, len, record_word, &rec), 0);
        int nw = tok_parse_ids(lines[i] + off, want, 4096);
        int same = rec.n == nw;
        for (int k = 0; same && k < nw; k++)
            same = rec.lens[k] == (size_t)want[k];
        if (!same && bad++ < 5)
            fprintf(stderr, "pre %s case %d '%s': %d words, want %d (%s)\n", name, idx, cases[idx], rec.n, nw,
                    lines[i] + off);
        checked++;
        free(text);
    }
    tok_pretok_free(&pre);
    tok_lines_free(lines, nl);
    tok_lines_free(cases, nc);
    assert_true(checked >= 5 * 300);
    assert_int_equal(bad, 0);
}

/* The synthetic model GGUF (model/gguf_synth) through the GGUF reader: the vocab the tiny-model tests run. */
static void test_a_synthetic_gguf_vocab_loads_merges_and_round_trips(void **state)
{
    char path[] = "/tmp/memra_tok_synth_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    mdl_gguf_synth p;
    mdl_gguf_synth_defaults(&p);
    p.n_vocab = 600;
    dev_err err = {0};
    assert_int_equal(mdl_gguf_synth_write(path, &p, &err), 0);
    tok_gguf_vocab v;
    int rc = tok_gguf_vocab_load(path, &v, &err);
    if (rc)
        fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
    mdl_tokenizer *t = mdl_tokenizer_create(&v.src, &err);
    assert_non_null(t);
    assert_int_equal(mdl_tokenizer_n_vocab(t), 600);
    const char *text = "The pipeline keeps every stage busy. <|im_start|>Hello, world!<|im_end|>";
    int32_t ids[256];
    int n = mdl_tokenize(t, text, strlen(text), 1, 1, ids, 256);
    assert_true(n > 0 && n < (int)strlen(text) / 2); /* learned merges apply */
    int seen_start = 0;
    for (int i = 0; i < n; i++)
        seen_start += ids[i] == 1;
    assert_int_equal(seen_start, 1);
    assert_true(mdl_tokenizer_is_eog(t, 2));
    assert_true(mdl_tokenizer_is_eog(t, 0));
    char back[256];
    int m = mdl_detokenize(t, ids, n, back, sizeof back, 1);
    assert_int_equal(m, (int)strlen(text));
    assert_memory_equal(back, text, (size_t)m);
    mdl_tokenizer_destroy(t);
    tok_gguf_vocab_free(&v);
    unlink(path);
}

/* tok_work spent by one mdl_tokenize of len bytes of base repeated (this thread's counter). */
static uint64_t work_of(const mdl_tokenizer *t, const char *base, size_t len, int32_t *ids)
{
    char *s = malloc(len);
    assert_non_null(s);
    size_t bl = strlen(base);
    for (size_t i = 0; i < len; i++)
        s[i] = base[i % bl];
    uint64_t w0 = tok_work;
    int n = mdl_tokenize(t, s, len, 0, 1, ids, (int)len + 8);
    uint64_t w = tok_work - w0;
    free(s);
    assert_true(n > 0);
    assert_true(w > 0);
    return w;
}

static void test_tokenizing_work_grows_linearly_with_the_text_for_every_pre_type(void **state)
{
    tiny v;
    tiny_init(&v);
    add_merge(&v, "t", "h");
    add_merge(&v, "th", "e");
    add_merge(&v, "\xC4\xA0", "the");
    add_merge(&v, "1", "2");
    static const char *const pres[] = {"default", "gpt2", "smollm", "llama-bpe", "qwen2", "tekken"};
    const char *text = "the quick brown fox, 12345 times;\n\n  \t<b>bold</b> caf\xC3\xA9 \xFF\xE2\x82 'll end.  ";
    const size_t len = 128 * 1024;
    int32_t *ids = malloc((2 * len + 8) * sizeof *ids);
    for (size_t k = 0; k < sizeof pres / sizeof pres[0]; k++) {
        dev_err err = {0};
        mdl_tokenizer *t = tiny_create(&v, pres[k], &err);
        assert_non_null(t);
        uint64_t w1 = work_of(t, text, len, ids), w2 = work_of(t, text, 2 * len, ids);
        if (w2 * 2 > w1 * 5)
            fail_msg("pre %s: 128 KiB cost %llu steps, 256 KiB %llu (more than 2.5x)", pres[k],
                     (unsigned long long)w1, (unsigned long long)w2);
        assert_true(w1 < 64 * len); /* a bounded number of steps per byte */
        mdl_tokenizer_destroy(t);
    }
    free(ids);
    tiny_free(&v);
}

static void test_special_token_matching_work_does_not_grow_with_the_number_of_special_tokens(void **state)
{
    tiny v;
    tiny_init(&v);
    static char *user[5000];
    char **tok = malloc((256 + 5000) * sizeof *tok);
    int32_t *type = malloc((256 + 5000) * sizeof *type);
    for (int i = 0; i < 256; i++)
        tok[i] = v.tok[i], type[i] = v.type[i];
    for (int i = 0; i < 5000; i++) {
        char s[32];
        snprintf(s, sizeof s, "<user_token_%d>", i);
        tok[256 + i] = user[i] = strdup(s);
        type[256 + i] = MDL_TOKEN_USER_DEFINED;
    }
    mdl_vocab_src src;
    mdl_vocab_src_init(&src);
    src.model = "gpt2";
    src.pre = "gpt2";
    src.n_tokens = 256 + 5000;
    src.tokens = (const char *const *)tok;
    src.token_types = type;
    dev_err err = {0};
    mdl_tokenizer *t = mdl_tokenizer_create(&src, &err);
    assert_non_null(t);
    int32_t ids[16];
    assert_int_equal(tokenize(t, "<user_token_123>", 0, ids), 1); /* leftmost-longest, not <user_token_1 */
    assert_int_equal(ids[0], 256 + 123);
    const size_t len = 16 * 1024;
    int32_t *out = malloc((2 * len + 8) * sizeof *out);
    const char *near = "<user_token_<user_token_9x<<";
    uint64_t w1 = work_of(t, near, len, out), w2 = work_of(t, near, 2 * len, out);
    if (w2 * 2 > w1 * 5 || w1 > 64 * len)
        fail_msg("16 KiB cost %llu steps, 32 KiB %llu (want <= 2.5x and < 64 per byte with 5000 special tokens)",
                 (unsigned long long)w1, (unsigned long long)w2);
    free(out);
    mdl_tokenizer_destroy(t);
    for (int i = 0; i < 5000; i++)
        free(user[i]);
    free(tok);
    free(type);
    tiny_free(&v);
}

/* Replace byte b's symbol in a tiny vocab with a token that is no byte symbol. */
static void drop_byte(tiny *v, int b)
{
    char s[32];
    snprintf(s, sizeof s, "<no_byte_%02X>", b);
    free(v->tok[b]);
    v->tok[b] = strdup(s);
}

static void test_a_byte_without_a_byte_token_becomes_u_fffd_and_is_never_dropped(void **state)
{
    tiny v;
    tiny_init(&v);
    drop_byte(&v, 0xFF);
    drop_byte(&v, 0x04);
    dev_err err = {0};
    int32_t ids[256];
    mdl_tokenizer *t = tiny_create(&v, "smollm", &err); /* no merges: U+FFFD is its three byte tokens */
    assert_non_null(t);
    assert_int_equal(tokenize(t, "a\xFF" "b", 1, ids), 5);
    assert_int_equal(ids[0], 'a');
    assert_int_equal(ids[1], 0xEF);
    assert_int_equal(ids[2], 0xBF);
    assert_int_equal(ids[3], 0xBD);
    assert_int_equal(ids[4], 'b');
    mdl_tokenizer_destroy(t);

    add_merge(&v, "\xC3\xAF", "\xC2\xBF"); /* the byte-level spelling of EF BF */
    int fffd = add_merge(&v, "\xC3\xAF\xC2\xBF", "\xC2\xBD");
    t = tiny_create(&v, "smollm", &err); /* merged: one token per byte that has none */
    assert_non_null(t);
    assert_int_equal(tokenize(t, "a\xFF" "b\x04\xFF", 1, ids), 5);
    assert_int_equal(ids[0], 'a');
    assert_int_equal(ids[1], fffd);
    assert_int_equal(ids[2], 'b');
    assert_int_equal(ids[3], fffd);
    assert_int_equal(ids[4], fffd);
    assert_int_equal(tokenize(t, "\xEF\xBF\xBD", 1, ids), 1); /* as the text U+FFFD itself */
    assert_int_equal(ids[0], fffd);
    mdl_tokenizer_destroy(t);

    drop_byte(&v, 0xEF); /* no U+FFFD bytes and no unk: refused at create, naming a byte */
    t = tiny_create(&v, "smollm", &err);
    assert_null(t);
    assert_non_null(strstr(err.msg, "no byte token for 0x04"));
    assert_non_null(strstr(err.msg, "U+FFFD"));
    tiny_free(&v);
}

static void test_spm_bytes_without_byte_tokens_become_u_fffd(void **state)
{
    /* <unk> <s> </s>, U+FFFD's byte tokens and "a": every other byte lacks a <0xXX> token */
    const char *tok[] = {"<unk>", "<s>", "</s>", "<0xEF>", "<0xBF>", "<0xBD>", "a", "\xE2\x96\x81\x61" /* U+2581 a */};
    int32_t types[] = {MDL_TOKEN_UNKNOWN, MDL_TOKEN_CONTROL, MDL_TOKEN_CONTROL, MDL_TOKEN_BYTE, MDL_TOKEN_BYTE,
                       MDL_TOKEN_BYTE, MDL_TOKEN_NORMAL, MDL_TOKEN_NORMAL};
    float scores[8] = {0};
    mdl_vocab_src src;
    mdl_vocab_src_init(&src);
    src.model = "llama";
    src.n_tokens = 8;
    src.tokens = tok;
    src.token_types = types;
    src.scores = scores;
    src.bos = 1, src.eos = 2, src.unk = 0;
    src.add_space_prefix = 0;
    dev_err err = {0};
    mdl_tokenizer *t = mdl_tokenizer_create(&src, &err);
    assert_non_null(t);
    int32_t ids[16];
    assert_int_equal(tokenize(t, "a\xFF" "a", 1, ids), 5);
    assert_int_equal(ids[0], 6);
    assert_int_equal(ids[1], 3);
    assert_int_equal(ids[2], 4);
    assert_int_equal(ids[3], 5);
    assert_int_equal(ids[4], 6);
    mdl_tokenizer_destroy(t);
}

static void test_a_small_cap_stops_tokenizing_past_it_and_bounds_the_work(void **state)
{
    tiny v;
    tiny_init(&v);
    add_merge(&v, "t", "h");
    add_merge(&v, "th", "e");
    add_merge(&v, "\xC4\xA0", "the");
    dev_err err = {0};
    mdl_tokenizer *t = tiny_create(&v, "smollm", &err);
    assert_non_null(t);
    const size_t len = 256 * 1024;
    char *s = malloc(len);
    for (size_t i = 0; i < len; i++)
        s[i] = "the cat, 42 times; the end\n"[i % 27];
    int32_t *all = malloc((len + 8) * sizeof *all), part[17];
    uint64_t w0 = tok_work;
    int n = mdl_tokenize(t, s, len, 0, 1, all, (int)len + 8);
    uint64_t w_all = tok_work - w0;
    assert_true(n > 1000);
    assert_int_equal(mdl_tokenize(t, s, len, 0, 1, NULL, 0), -n); /* cap 0: the whole count */
    w0 = tok_work;
    assert_int_equal(mdl_tokenize(t, s, len, 0, 1, part, 16), -(16 + 1)); /* stopped past cap */
    uint64_t w_cap = tok_work - w0;
    assert_memory_equal(part, all, 16 * sizeof *part);
    /* what remains is one UTF-8 scan of the text: the splitting and merging stopped */
    if (w_cap > len + 4096 || w_cap * 3 > w_all)
        fail_msg("cap 16 cost %llu steps, the whole text %llu (256 KiB)", (unsigned long long)w_cap,
                 (unsigned long long)w_all);
    free(all);
    free(s);
    mdl_tokenizer_destroy(t);
    tiny_free(&v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bpe_merges_apply_by_rank_not_by_position),
        cmocka_unit_test(test_bpe_builds_words_and_the_space_symbol_joins_the_next_word),
        cmocka_unit_test(test_pretokenizer_is_chosen_by_the_pre_type),
        cmocka_unit_test(test_special_tokens_split_out_only_when_asked_and_user_defined_always),
        cmocka_unit_test(test_invalid_utf8_tokenizes_bytewise_and_round_trips),
        cmocka_unit_test(test_a_long_word_merges_fully),
        cmocka_unit_test(test_threads_tokenize_one_tokenizer_concurrently),
        cmocka_unit_test(test_unknown_model_pre_and_bad_ids_are_refused_naming_what_is_supported),
        cmocka_unit_test(test_spm_ids_match_the_hf_oracle_and_round_trip),
        cmocka_unit_test(test_a_synthetic_gguf_vocab_loads_merges_and_round_trips),
        cmocka_unit_test(test_pretokenizer_splits_match_hf_for_every_pre_type_and_corpus_case),
        cmocka_unit_test(test_tokenizing_work_grows_linearly_with_the_text_for_every_pre_type),
        cmocka_unit_test(test_a_small_cap_stops_tokenizing_past_it_and_bounds_the_work),
        cmocka_unit_test(test_a_byte_without_a_byte_token_becomes_u_fffd_and_is_never_dropped),
        cmocka_unit_test(test_spm_bytes_without_byte_tokens_become_u_fffd),
        cmocka_unit_test(test_special_token_matching_work_does_not_grow_with_the_number_of_special_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
