/* mdl_tokenizer_from_gguf: read the tokenizer.* keys into a mdl_vocab_src of borrowed pointers (into the
 * mmapped GGUF) and hand it to mdl_tokenizer_create, which copies what it keeps. No shared state. */
#include <stdlib.h>
#include <string.h>

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

/* Optional u32 id -> int32 (-1 when absent); optional bool -> int (-1 when absent). */
static int opt_id(const mdl_gguf *g, const char *key, int32_t *out, dev_err *err)
{
    *out = -1;
    if (mdl_gguf_find(g, key) < 0)
        return 0;
    uint32_t v;
    int rc = mdl_gguf_get_u32(g, key, &v, err);
    if (!rc)
        *out = v > INT32_MAX ? -1 : (int32_t)v;
    return rc;
}

static int opt_bool(const mdl_gguf *g, const char *key, int *out, dev_err *err)
{
    *out = -1;
    return mdl_gguf_find(g, key) < 0 ? 0 : mdl_gguf_get_bool(g, key, out, err);
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
        opt_id(g, "tokenizer.ggml.bos_token_id", &src.bos, err) ||
        opt_id(g, "tokenizer.ggml.eos_token_id", &src.eos, err) ||
        opt_id(g, "tokenizer.ggml.unknown_token_id", &src.unk, err) ||
        opt_id(g, "tokenizer.ggml.padding_token_id", &src.pad, err) ||
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
    t = mdl_tokenizer_create(&src, err);
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
