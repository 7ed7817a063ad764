/* mdl_tokenizer_from_gguf: read the tokenizer.* keys into a mdl_vocab_src of borrowed pointers (into the
 * mmapped GGUF) and hand it to mdl_tokenizer_create, which copies what it keeps. No shared state. */
#include <stdlib.h>
#include <string.h>

#include "model/gguf_synth.h"
#include "model/vocab_gguf.h"

/* NUL-terminated malloc'd copy of string key, or NULL when absent (*rc < 0 on a wrong type). */
static char *dup_str(const mdl_gguf *g, const char *key, int *rc, dev_err *err)
{
    *rc = 0;
    if (mdl_gguf_find(g, key) < 0)
        return NULL;
    const char *s;
    size_t len;
    if ((*rc = mdl_gguf_get_str(g, key, &s, &len, err)))
        return NULL;
    char *c = malloc(len + 1);
    if (!c) {
        *rc = dev_err_set(err, MEMRA_E_NOMEM, "no memory for %s", key);
        return NULL;
    }
    memcpy(c, s, len);
    c[len] = '\0';
    return c;
}

/* A string array as pointer + length arrays (borrowed strings); n = 0 and 0 when absent. */
static int str_arr(const mdl_gguf *g, const char *key, const char ***ptrs, size_t **lens, uint32_t *n,
                   dev_err *err)
{
    *ptrs = NULL;
    *lens = NULL;
    *n = 0;
    if (mdl_gguf_find(g, key) < 0)
        return 0;
    int et;
    uint64_t cnt;
    int rc = mdl_gguf_get_arr(g, key, &et, &cnt, err);
    if (rc)
        return rc;
    if (et != MDL_GGUF_STRING || cnt > UINT32_MAX)
        return dev_err_set(err, MEMRA_E_FORMAT, "%s must be an array of strings (got %s x %llu)", key,
                           mdl_gguf_type_name(et), (unsigned long long)cnt);
    if (!(*ptrs = malloc(sizeof **ptrs * (cnt + 1))) || !(*lens = malloc(sizeof **lens * (cnt + 1))))
        return dev_err_set(err, MEMRA_E_NOMEM, "no memory for %s", key);
    for (uint64_t i = 0; i < cnt; i++)
        if (mdl_gguf_arr_str(g, key, i, &(*ptrs)[i], &(*lens)[i]))
            return dev_err_set(err, MEMRA_E_FORMAT, "%s[%llu] is unreadable", key, (unsigned long long)i);
    *n = (uint32_t)cnt;
    return 0;
}

/* A numeric array of exactly n elements of type et, or NULL when absent. */
static int num_arr(const mdl_gguf *g, const char *key, int want_et, uint32_t n, const void **out, dev_err *err)
{
    *out = NULL;
    if (mdl_gguf_find(g, key) < 0)
        return 0;
    int et;
    uint64_t cnt;
    int rc = mdl_gguf_get_arr(g, key, &et, &cnt, err);
    if (rc)
        return rc;
    if (et != want_et || cnt != n)
        return dev_err_set(err, MEMRA_E_FORMAT, "%s must be %u x %s (got %llu x %s)", key, n,
                           mdl_gguf_type_name(want_et), (unsigned long long)cnt, mdl_gguf_type_name(et));
    *out = mdl_gguf_arr_data(g, key);
    return 0;
}

/* Optional id key -> int32 (-1 when absent). A present id of any integer type must name a token: one rule
 * for every value outside [0, n) (negative, past the vocab, past int32), refused naming the key. */
static int opt_id(const mdl_gguf *g, const char *key, uint32_t n, int32_t *out, dev_err *err)
{
    *out = -1;
    if (mdl_gguf_find(g, key) < 0)
        return 0;
    int64_t v;
    int rc = mdl_gguf_get_i64(g, key, &v, err);
    if (rc)
        return rc;
    if (v < 0 || v >= (int64_t)n)
        return dev_err_set(err, MEMRA_E_FORMAT, "%s = %lld is outside the vocab [0, %u) (absent key: no such token)",
                           key, (long long)v, n);
    *out = (int32_t)v;
    return 0;
}

static int opt_bool(const mdl_gguf *g, const char *key, int *out, dev_err *err)
{
    *out = -1;
    return mdl_gguf_find(g, key) < 0 ? 0 : mdl_gguf_get_bool(g, key, out, err);
}

/* Up to 48 bytes of s for a message, control bytes as '?'. */
static const char *shown(const char *s, size_t n, char out[52])
{
    size_t k = 0;
    for (; k < n && k < 48; k++)
        out[k] = (unsigned char)s[k] < 0x20 || s[k] == 0x7f ? '?' : s[k];
    if (n > 48)
        out[k++] = '.', out[k++] = '.', out[k++] = '.';
    out[k] = '\0';
    return out;
}

/* Token types in 0..6 (0 = undefined, read as normal), scores finite. */
static int check_values(const mdl_vocab_src *src, dev_err *err)
{
    for (uint32_t i = 0; src->token_types && i < src->n_tokens; i++)
        if (src->token_types[i] < 0 || src->token_types[i] > MDL_TOKEN_BYTE)
            return dev_err_set(err, MEMRA_E_FORMAT, "tokenizer.ggml.token_type[%u] = %d (allowed 0..6: undefined, normal, "
                               "unknown, control, user-defined, unused, byte)", i, src->token_types[i]);
    for (uint32_t i = 0; src->scores && i < src->n_tokens; i++)
        if (!(src->scores[i] == src->scores[i]) || src->scores[i] > 3.4e38f || src->scores[i] < -3.4e38f)
            return dev_err_set(err, MEMRA_E_FORMAT, "tokenizer.ggml.scores[%u] = %g is not finite", i,
                               (double)src->scores[i]);
    return 0;
}

/* The model kind must not contradict what the vocab evidently is. A byte-level BPE vocab (gpt2) has a token for
 * each of the 256 byte symbols (U+0120 'G-dot' for a space, ...) and no SentencePiece word marker U+2581; a
 * SentencePiece vocab (llama) marks word starts with U+2581 and lacks most byte symbols. */
static int check_kind(const mdl_tokenizer *t, const mdl_vocab_src *src, dev_err *err)
{
    int bytesyms = 0;
    uint32_t markers = 0;
    for (int b = 0; b < 256; b++) {
        char s[4];
        const int n = mdl_gguf_synth_byte_token((uint8_t)b, s);
        bytesyms += mdl_tokenizer_find(t, s, (size_t)n) >= 0;
    }
    for (uint32_t i = 0; i < src->n_tokens; i++) {
        const size_t n = src->token_lens ? src->token_lens[i] : strlen(src->tokens[i]);
        const int ty = src->token_types ? src->token_types[i] : MDL_TOKEN_NORMAL;
        markers += (ty == MDL_TOKEN_NORMAL || ty == 0) && memmem(src->tokens[i], n, "\xE2\x96\x81", 3) != NULL;
    }
    const int spm = strcmp(src->model, "llama") == 0;
    if (spm && bytesyms == 256 && markers == 0)
        return dev_err_set(err, MEMRA_E_FORMAT, "tokenizer.ggml.model='llama' (SentencePiece) contradicts the vocab, "
                           "which is byte-level BPE (all 256 byte symbols, no U+2581 word marker): 'gpt2' fits it");
    if (!spm && markers > 0 && bytesyms < 256)
        return dev_err_set(err, MEMRA_E_FORMAT, "tokenizer.ggml.model='%s' (byte-level BPE) contradicts the vocab, which "
                           "is SentencePiece (%u tokens with the U+2581 word marker, %d of 256 byte symbols): 'llama' "
                           "fits it", src->model, markers, bytesyms);
    return 0;
}

/* Each merge is "left right" (split at the first space after byte 0, as the encoder splits it) with left, right
 * and left+right tokens of the vocab (the rule HF tokenizers apply); else refused naming its index. */
static int check_merges(const mdl_tokenizer *t, const mdl_vocab_src *src, dev_err *err)
{
    char *cat = NULL, show[52], show2[52];
    size_t cap = 0;
    int rc = 0;
    for (uint32_t r = 0; r < src->n_merges && !rc; r++) {
        const char *m = src->merges[r];
        const size_t n = src->merge_lens ? src->merge_lens[r] : strlen(m);
        const char *sp = n > 1 ? memchr(m + 1, ' ', n - 1) : NULL;
        if (!sp || sp == m + n - 1) {
            rc = dev_err_set(err, MEMRA_E_FORMAT, "tokenizer.ggml.merges[%u] = '%s' is not two tokens separated by a "
                             "space", r, shown(m, n, show));
            break;
        }
        const size_t nl = (size_t)(sp - m), nr = n - nl - 1;
        if (n > cap) {
            char *c = realloc(cat, 2 * n);
            if (!c) {
                rc = dev_err_set(err, MEMRA_E_NOMEM, "no memory to check tokenizer.ggml.merges");
                break;
            }
            cat = c, cap = 2 * n;
        }
        memcpy(cat, m, nl);
        memcpy(cat + nl, sp + 1, nr);
        const char *miss = mdl_tokenizer_find(t, m, nl) < 0 ? m : mdl_tokenizer_find(t, sp + 1, nr) < 0 ? sp + 1
                         : mdl_tokenizer_find(t, cat, nl + nr) < 0 ? cat : NULL;
        if (miss)
            rc = dev_err_set(err, MEMRA_E_FORMAT, "tokenizer.ggml.merges[%u] = '%s': '%s' is not a token of "
                             "tokenizer.ggml.tokens", r, shown(m, n, show),
                             shown(miss, miss == m ? nl : miss == cat ? nl + nr : nr, show2));
    }
    free(cat);
    return rc;
}

mdl_tokenizer *mdl_tokenizer_from_gguf(const mdl_gguf *g, dev_err *err)
{
    mdl_vocab_src src;
    mdl_vocab_src_init(&src);
    mdl_tokenizer *t = NULL;
    const char **tokens = NULL, **merges = NULL;
    size_t *token_lens = NULL, *merge_lens = NULL;
    uint32_t n_merges = 0;
    char *model = NULL, *pre = NULL, *tmpl = NULL;
    int rc;
    if (!(model = dup_str(g, "tokenizer.ggml.model", &rc, err))) {
        if (!rc)
            dev_err_set(err, MEMRA_E_FORMAT, "metadata key tokenizer.ggml.model is missing");
        goto out;
    }
    if (((pre = dup_str(g, "tokenizer.ggml.pre", &rc, err)), rc) ||
        ((tmpl = dup_str(g, "tokenizer.chat_template", &rc, err)), rc))
        goto out;
    if (str_arr(g, "tokenizer.ggml.tokens", &tokens, &token_lens, &src.n_tokens, err) ||
        str_arr(g, "tokenizer.ggml.merges", &merges, &merge_lens, &n_merges, err))
        goto out;
    if (!src.n_tokens) {
        dev_err_set(err, MEMRA_E_FORMAT, "metadata key tokenizer.ggml.tokens is missing or empty");
        goto out;
    }
    const void *scores, *types;
    if (num_arr(g, "tokenizer.ggml.scores", MDL_GGUF_F32, src.n_tokens, &scores, err) ||
        num_arr(g, "tokenizer.ggml.token_type", MDL_GGUF_I32, src.n_tokens, &types, err) ||
        opt_id(g, "tokenizer.ggml.bos_token_id", src.n_tokens, &src.bos, err) ||
        opt_id(g, "tokenizer.ggml.eos_token_id", src.n_tokens, &src.eos, err) ||
        opt_id(g, "tokenizer.ggml.unknown_token_id", src.n_tokens, &src.unk, err) ||
        opt_id(g, "tokenizer.ggml.padding_token_id", src.n_tokens, &src.pad, err) ||
        opt_bool(g, "tokenizer.ggml.add_bos_token", &src.add_bos, err) ||
        opt_bool(g, "tokenizer.ggml.add_eos_token", &src.add_eos, err) ||
        opt_bool(g, "tokenizer.ggml.add_space_prefix", &src.add_space_prefix, err))
        goto out;
    src.model = model;
    src.pre = pre;
    src.tokens = tokens;
    src.token_lens = token_lens;
    src.scores = scores;
    src.token_types = types;
    src.n_merges = n_merges;
    src.merges = merges;
    src.merge_lens = merge_lens;
    src.chat_template = tmpl;
    if (check_values(&src, err) || !(t = mdl_tokenizer_create(&src, err)))
        goto out;
    if (check_kind(t, &src, err) || check_merges(t, &src, err)) {
        mdl_tokenizer_destroy(t);
        t = NULL;
    }
out:
    if (!t)
        dev_err_wrap(err, "tokenizer");
    free(tokens);
    free(token_lens);
    free(merges);
    free(merge_lens);
    free(model);
    free(pre);
    free(tmpl);
    return t;
}
