/* memra-bench tokenize: host time to tokenize long texts, the work a caller pays before a prompt's first
 * step. Two inputs: K KiB of mixed English/digits/punctuation over a model's vocab (MODEL defaults to
 * $MEMRA_MODEL), and K/16 KiB of near-miss text ("<user_token_" repeated) over a synthetic byte-level vocab
 * with U user-defined tokens, each at K/2 and K so the growth shows (linear: time doubles with the text). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "memra/memra.h"
#include "model/tokenizer.h"

static char *fill(size_t len, const char *base)
{
    char *s = malloc(len ? len : 1);
    size_t bl = strlen(base);
    for (size_t i = 0; s && i < len; i++)
        s[i] = base[i % bl];
    return s;
}

static void put_cp(char *o, int *w, unsigned cp)
{
    if (cp < 0x80) {
        o[(*w)++] = (char)cp;
    } else {
        o[(*w)++] = (char)(0xC0 | (cp >> 6));
        o[(*w)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static int printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

/* 256 byte symbols (GPT-2's bytes_to_unicode) and n_user user-defined tokens "<user_token_%d>". */
static mdl_tokenizer *user_vocab(int n_user, char ***tok_out, int32_t **type_out, dev_err *err)
{
    int n = 256 + n_user;
    char **tok = calloc((size_t)n, sizeof *tok);
    int32_t *type = calloc((size_t)n, sizeof *type);
    unsigned extra = 256;
    for (int b = 0; tok && type && b < 256; b++) {
        char s[4];
        int w = 0;
        put_cp(s, &w, printable(b) ? (unsigned)b : extra++);
        s[w] = 0;
        tok[b] = strdup(s);
        type[b] = MDL_TOKEN_NORMAL;
    }
    for (int i = 0; tok && type && i < n_user; i++) {
        char s[32];
        snprintf(s, sizeof s, "<user_token_%d>", i);
        tok[256 + i] = strdup(s);
        type[256 + i] = MDL_TOKEN_USER_DEFINED;
    }
    *tok_out = tok;
    *type_out = type;
    if (!tok || !type)
        return NULL;
    mdl_vocab_src src;
    mdl_vocab_src_init(&src);
    src.model = "gpt2";
    src.pre = "gpt2";
    src.n_tokens = (uint32_t)n;
    src.tokens = (const char *const *)tok;
    src.token_types = type;
    return mdl_tokenizer_create(&src, err);
}

int bench_tokenize(int argc, char **argv)
{
    int kib = 256, n_user = 100000;
    const char *path = getenv("MEMRA_MODEL");
    const bench_flag flags[] = {{"-m", NULL, &path, 0, 0}, {"--kib", &kib, NULL, 2, 1 << 16},
                                {"--user", &n_user, NULL, 1, 1 << 20}};
    int rc = bench_parse("tokenize", argc, argv, flags, 3,
                         "[-m MODEL] [--kib K=256] [--user U=100000]\n  MODEL defaults to $MEMRA_MODEL");
    if (rc)
        return rc;
    if (!path)
        return fprintf(stderr, "memra-bench tokenize: no model: pass -m MODEL.gguf or set MEMRA_MODEL\n"), 2;
    memra_model *m = memra_model_load(path, NULL);
    if (!m)
        return fprintf(stderr, "memra-bench tokenize: %s\n", memra_last_error()), 2;
    const char *text = "The quick brown fox jumps over the lazy dog, 12345 times; <b>bold</b> and 'quotes' -- ok?\n";
    printf("%-34s %8s %9s %10s\n", "input", "KiB", "ids", "seconds");
    rc = 0;
    for (int half = 1; half >= 0 && !rc; half--) {
        size_t len = (size_t)kib * 1024 >> half;
        char *s = fill(len, text);
        memra_token *ids = malloc((len + 16) * sizeof *ids);
        int n = 0;
        double t0 = bench_now_s();
        int r = s && ids ? memra_tokenize(m, s, (int)len, 0, 1, ids, (int)len + 16, &n) : MEMRA_E_NOMEM;
        double dt = bench_now_s() - t0;
        if (r != MEMRA_OK) {
            fprintf(stderr, "memra-bench tokenize: %s\n", memra_last_error());
            rc = 2;
        } else
            printf("%-34s %8zu %9d %10.3f\n", "model vocab, mixed text", len / 1024, n, dt);
        free(s);
        free(ids);
    }
    memra_model_free(m);
    char **tok = NULL;
    int32_t *type = NULL;
    dev_err err = {0};
    mdl_tokenizer *t = rc ? NULL : user_vocab(n_user, &tok, &type, &err);
    if (!rc && !t) {
        fprintf(stderr, "memra-bench tokenize: user-defined vocab: %s\n", err.msg);
        rc = 2;
    }
    for (int half = 1; half >= 0 && t; half--) {
        size_t len = (size_t)kib * 1024 / 16 >> half;
        char *s = fill(len, "<user_token_");
        int32_t *ids = malloc((len + 16) * sizeof *ids);
        double t0 = bench_now_s();
        int n = s && ids ? mdl_tokenize(t, s, len, 0, 1, ids, (int)len + 16) : MEMRA_E_NOMEM;
        double dt = bench_now_s() - t0;
        char what[64];
        snprintf(what, sizeof what, "%d user-defined tokens", n_user);
        printf("%-34s %8zu %9d %10.3f\n", what, len / 1024, n, dt);
        free(s);
        free(ids);
    }
    mdl_tokenizer_destroy(t);
    for (int i = 0; tok && i < 256 + n_user; i++)
        free(tok[i]);
    free(tok);
    free(type);
    return rc;
}
