/* The real SmolLM2 vocab (read from $MEMRA_MODEL by a private test reader) against HF oracles committed
 * in tests/data (tools/ref/make_tokenizer_oracle.py): token ids for every corpus case, round trips,
 * special tokens, and the chat template rendering of HF apply_chat_template. Skips (77) without the model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "model/chat.h"
#include "model/tokenizer.h"
#include "support/tok_gguf_vocab.h"
#include "support/tok_testdata.h"

static tok_gguf_vocab g_vocab;
static mdl_tokenizer *g_tok;

static int setup(void **state)
{
    dev_err err = {0};
    const char *path = getenv("MEMRA_MODEL");
    if (tok_gguf_vocab_load(path, &g_vocab, &err) != 0) {
        fprintf(stderr, "load: %s\n", err.msg);
        return -1;
    }
    g_tok = mdl_tokenizer_create(&g_vocab.src, &err);
    if (!g_tok)
        fprintf(stderr, "create: %s\n", err.msg);
    return g_tok ? 0 : -1;
}

static int teardown(void **state)
{
    mdl_tokenizer_destroy(g_tok);
    tok_gguf_vocab_free(&g_vocab);
    return 0;
}

static char **corpus(int *n)
{
    char **c = tok_corpus_load(n);
    assert_non_null(c);
    return c;
}

static void test_smollm2_ids_match_the_hf_oracle_for_every_corpus_case(void **state)
{
    int nc, no, checked = 0, bad = 0;
    char **cases = corpus(&nc);
    char p[4096];
    char **oracle = tok_read_lines(tok_data_path("tokenizer_oracle_smollm2.txt", p, sizeof p), &no);
    assert_non_null(oracle);
    assert_int_equal(nc, no);
    static int32_t got[8192];
    static int want[8192];
    for (int i = 0; i < nc; i++) {
        size_t len;
        char *text = tok_unescape(cases[i], &len);
        int n = mdl_tokenize(g_tok, text, len, 0, 1, got, 8192);
        int nw = tok_parse_ids(oracle[i], want, 8192);
        int same = n == nw;
        for (int k = 0; same && k < n; k++)
            same = got[k] == want[k];
        if (!same) {
            bad++;
            fprintf(stderr, "case %d '%s': got %d ids [", i, cases[i], n);
            for (int k = 0; k < n && k < 40; k++)
                fprintf(stderr, " %d", got[k]);
            fprintf(stderr, " ] want %d [ %s ]\n", nw, oracle[i]);
        }
        checked++;
        free(text);
    }
    tok_lines_free(cases, nc);
    tok_lines_free(oracle, no);
    assert_true(checked >= 300);
    assert_int_equal(bad, 0);
}

static void test_smollm2_detokenize_round_trips_every_corpus_case(void **state)
{
    int nc;
    char **cases = corpus(&nc);
    static int32_t ids[8192];
    static char back[65536];
    for (int i = 0; i < nc; i++) {
        size_t len;
        char *text = tok_unescape(cases[i], &len);
        int n = mdl_tokenize(g_tok, text, len, 0, 1, ids, 8192);
        assert_true(n >= 0);
        int m = mdl_detokenize(g_tok, ids, n, back, sizeof back, 1);
        assert_int_equal(m, (int)len);
        assert_memory_equal(back, text, len);
        free(text);
    }
    tok_lines_free(cases, nc);
}

static void test_smollm2_special_ids_eog_and_add_bos_follow_the_gguf(void **state)
{
    assert_int_equal(mdl_tokenizer_n_vocab(g_tok), 49152);
    assert_int_equal(mdl_tokenizer_bos(g_tok), 1);
    assert_int_equal(mdl_tokenizer_eos(g_tok), 2);
    assert_true(mdl_tokenizer_is_eog(g_tok, 2));   /* <|im_end|> = eos */
    assert_true(mdl_tokenizer_is_eog(g_tok, 0));   /* <|endoftext|> */
    assert_false(mdl_tokenizer_is_eog(g_tok, 1));  /* <|im_start|> */
    assert_false(mdl_tokenizer_is_eog(g_tok, 19556));
    assert_int_equal(mdl_tokenizer_add_bos(g_tok), 0); /* tokenizer.ggml.add_bos_token = false */
    int32_t ids[8];
    assert_int_equal(mdl_tokenize(g_tok, "Hello", 5, 1, 1, ids, 8), 1);
    assert_int_equal(ids[0], 19556);
    char piece[32];
    assert_int_equal(mdl_token_to_piece(g_tok, 1, piece, sizeof piece, 0), 0);
    assert_int_equal(mdl_token_to_piece(g_tok, 1, piece, sizeof piece, 1), 12);
    assert_memory_equal(piece, "<|im_start|>", 12);
}

static void test_smollm2_markers_are_plain_text_without_parse_special(void **state)
{
    int32_t ids[64];
    int n = mdl_tokenize(g_tok, "<|im_start|>", 12, 0, 0, ids, 64);
    assert_true(n > 1);
    for (int i = 0; i < n; i++)
        assert_int_not_equal(ids[i], 1);
    char back[64];
    assert_int_equal(mdl_detokenize(g_tok, ids, n, back, sizeof back, 0), 12);
    assert_memory_equal(back, "<|im_start|>", 12);
    assert_int_equal(mdl_tokenize(g_tok, "<|im_start|>", 12, 0, 1, ids, 64), 1);
    assert_int_equal(ids[0], 1);
}

static void test_smollm2_too_small_cap_reports_the_needed_count(void **state)
{
    const char *s = "The quick brown fox jumps over the lazy dog";
    int32_t ids[64];
    int n = mdl_tokenize(g_tok, s, strlen(s), 0, 1, ids, 64);
    assert_true(n > 3);
    assert_int_equal(mdl_tokenize(g_tok, s, strlen(s), 0, 1, ids, 3), -(3 + 1)); /* stops past cap */
    assert_int_equal(mdl_tokenize(g_tok, s, strlen(s), 0, 1, NULL, 0), -n);
    char buf[8];
    assert_int_equal(mdl_detokenize(g_tok, ids, n, buf, sizeof buf, 0), -(int)strlen(s));
}

static void test_smollm2_a_long_word_tokenizes_and_round_trips(void **state)
{
    size_t len = 200000;
    char *s = malloc(len);
    for (size_t i = 0; i < len; i++)
        s[i] = "abcdefghij"[(i * 7 + i / 13) % 10];
    int32_t *ids = malloc(len * sizeof *ids);
    clock_t t0 = clock();
    int n = mdl_tokenize(g_tok, s, len, 0, 1, ids, (int)len);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    fprintf(stderr, "200 kB single word: %d ids in %.3f s\n", n, secs);
    assert_true(n > 0 && n < (int)len);
    char *back = malloc(len);
    assert_int_equal(mdl_detokenize(g_tok, ids, n, back, (int)len, 0), (int)len);
    assert_memory_equal(back, s, len);
    free(back);
    free(ids);
    free(s);
}

static void test_smollm2_chat_template_matches_hf_apply_chat_template(void **state)
{
    dev_err err = {0};
    mdl_chat *c = mdl_chat_create(mdl_tokenizer_chat_template(g_tok), &err);
    assert_non_null(c);
    assert_int_equal(mdl_chat_kind_of(c), MDL_CHAT_CHATML);
    assert_string_equal(mdl_chat_default_system(c), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    char p[4096];
    tok_chat_case *cs;
    int cases = tok_chat_cases_load(tok_data_path("chat_oracle_smollm2.txt", p, sizeof p), &cs);
    for (int i = 0; i < cases; i++) {
        char got[4096];
        long n = mdl_chat_apply(c, cs[i].msgs, (size_t)cs[i].n_msgs, cs[i].add_generation_prompt, got, sizeof got);
        if (n != (long)cs[i].want_len || memcmp(got, cs[i].want, cs[i].want_len) != 0)
            fprintf(stderr, "chat case %s:\n got [%s]\nwant [%s]\n", cs[i].name, got, cs[i].want);
        assert_int_equal(n, (long)cs[i].want_len);
        assert_memory_equal(got, cs[i].want, cs[i].want_len);
        /* the rendered prompt tokenizes with the markers as single ids */
        int32_t ids[1024];
        int nt = mdl_tokenize(g_tok, got, (size_t)n, 1, 1, ids, 1024);
        assert_true(nt > 0);
        assert_int_equal(ids[0], 1);
    }
    assert_true(cases >= 6);
    tok_chat_cases_free(cs, cases);
    mdl_chat_destroy(c);
}

int main(void)
{
    const char *path = getenv("MEMRA_MODEL");
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        printf("SKIP: model_tokenizer needs the SmolLM2 GGUF at $MEMRA_MODEL (%s)\n", path ? path : "unset");
        return 77;
    }
    fclose(f);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smollm2_ids_match_the_hf_oracle_for_every_corpus_case),
        cmocka_unit_test(test_smollm2_detokenize_round_trips_every_corpus_case),
        cmocka_unit_test(test_smollm2_special_ids_eog_and_add_bos_follow_the_gguf),
        cmocka_unit_test(test_smollm2_markers_are_plain_text_without_parse_special),
        cmocka_unit_test(test_smollm2_too_small_cap_reports_the_needed_count),
        cmocka_unit_test(test_smollm2_a_long_word_tokenizes_and_round_trips),
        cmocka_unit_test(test_smollm2_chat_template_matches_hf_apply_chat_template),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
