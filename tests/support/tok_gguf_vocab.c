/* Test-only GGUF -> mdl_vocab_src glue (see tok_gguf_vocab.h). */
#include "support/tok_gguf_vocab.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int get_strdup(const mdl_gguf *g, const char *key, char **out, int required, dev_err *err)
{
    const char *s;
    size_t n;
    if (mdl_gguf_find(g, key) < 0) {
        if (required)
            return dev_err_set(err, MEMRA_E_FORMAT, "%s: missing", key);
        return 0;
    }
    int rc = mdl_gguf_get_str(g, key, &s, &n, err);
    if (rc)
        return rc;
    *out = strndup(s, n);
    return *out ? 0 : dev_err_set(err, MEMRA_E_NOMEM, "%s", key);
}

static int get_id(const mdl_gguf *g, const char *key, int32_t *out, dev_err *err)
{
    int64_t v;
    if (mdl_gguf_find(g, key) < 0)
        return 0;
    int rc = mdl_gguf_get_i64(g, key, &v, err);
    if (rc == 0)
        *out = v >= INT32_MIN && v <= INT32_MAX ? (int32_t)v : -2;
    return rc;
}

static int get_flag(const mdl_gguf *g, const char *key, int *out, dev_err *err)
{
    return mdl_gguf_find(g, key) < 0 ? 0 : mdl_gguf_get_bool(g, key, out, err);
}

static int get_strs(const mdl_gguf *g, const char *key, uint32_t *n_out, const char ***s, size_t **l, int required,
                    dev_err *err)
{
    int et;
    uint64_t n;
    if (mdl_gguf_find(g, key) < 0)
        return required ? dev_err_set(err, MEMRA_E_FORMAT, "%s: missing", key) : 0;
    int rc = mdl_gguf_get_arr(g, key, &et, &n, err);
    if (rc)
        return rc;
    if (et != MDL_GGUF_STRING || n > UINT32_MAX / 2)
        return dev_err_set(err, MEMRA_E_FORMAT, "%s: want a string array", key);
    *s = malloc((size_t)n * sizeof **s + 1);
    *l = malloc((size_t)n * sizeof **l + 1);
    if (!*s || !*l)
        return dev_err_set(err, MEMRA_E_NOMEM, "%s", key);
    for (uint64_t i = 0; i < n; i++)
        if (mdl_gguf_arr_str(g, key, i, &(*s)[i], &(*l)[i]))
            return dev_err_set(err, MEMRA_E_FORMAT, "%s[%llu] unreadable", key, (unsigned long long)i);
    *n_out = (uint32_t)n;
    return 0;
}

static const void *get_nums(const mdl_gguf *g, const char *key, int want_type, uint32_t n, dev_err *err, int *rc)
{
    int et;
    uint64_t cnt;
    if (mdl_gguf_find(g, key) < 0)
        return NULL;
    *rc = mdl_gguf_get_arr(g, key, &et, &cnt, err);
    if (*rc == 0 && (et != want_type || cnt != n))
        *rc = dev_err_set(err, MEMRA_E_FORMAT, "%s: want %u elements of type %s", key, n, mdl_gguf_type_name(want_type));
    return *rc ? NULL : mdl_gguf_arr_data(g, key);
}

int tok_gguf_vocab_from(mdl_gguf *g, tok_gguf_vocab *v, dev_err *err)
{
    memset(v, 0, sizeof *v);
    v->g = g;
    mdl_vocab_src *s = &v->src;
    mdl_vocab_src_init(s);
    int rc = get_strdup(g, "tokenizer.ggml.model", &v->model, 1, err);
    if (!rc)
        rc = get_strdup(g, "tokenizer.ggml.pre", &v->pre, 0, err);
    if (!rc)
        rc = get_strdup(g, "tokenizer.chat_template", &v->tmpl, 0, err);
    if (!rc)
        rc = get_strs(g, "tokenizer.ggml.tokens", &s->n_tokens, &v->tokens, &v->token_lens, 1, err);
    if (!rc)
        rc = get_strs(g, "tokenizer.ggml.merges", &s->n_merges, &v->merges, &v->merge_lens, 0, err);
    if (!rc)
        s->token_types = get_nums(g, "tokenizer.ggml.token_type", MDL_GGUF_I32, s->n_tokens, err, &rc);
    if (!rc)
        s->scores = get_nums(g, "tokenizer.ggml.scores", MDL_GGUF_F32, s->n_tokens, err, &rc);
    if (!rc)
        rc = get_id(g, "tokenizer.ggml.bos_token_id", &s->bos, err);
    if (!rc)
        rc = get_id(g, "tokenizer.ggml.eos_token_id", &s->eos, err);
    if (!rc)
        rc = get_id(g, "tokenizer.ggml.unknown_token_id", &s->unk, err);
    if (!rc)
        rc = get_id(g, "tokenizer.ggml.padding_token_id", &s->pad, err);
    if (!rc)
        rc = get_flag(g, "tokenizer.ggml.add_bos_token", &s->add_bos, err);
    if (!rc)
        rc = get_flag(g, "tokenizer.ggml.add_eos_token", &s->add_eos, err);
    if (!rc)
        rc = get_flag(g, "tokenizer.ggml.add_space_prefix", &s->add_space_prefix, err);
    s->model = v->model;
    s->pre = v->pre;
    s->chat_template = v->tmpl;
    s->tokens = v->tokens;
    s->token_lens = v->token_lens;
    s->merges = v->merges;
    s->merge_lens = v->merge_lens;
    return rc;
}

int tok_gguf_vocab_load(const char *path, tok_gguf_vocab *v, dev_err *err)
{
    memset(v, 0, sizeof *v);
    mdl_gguf *g = mdl_gguf_open(path, err);
    if (!g)
        return err && err->code ? err->code : MEMRA_E_IO;
    int rc = tok_gguf_vocab_from(g, v, err);
    v->own_g = 1;
    return rc;
}

void tok_gguf_vocab_free(tok_gguf_vocab *v)
{
    free(v->tokens);
    free(v->token_lens);
    free(v->merges);
    free(v->merge_lens);
    free(v->model);
    free(v->pre);
    free(v->tmpl);
    if (v->own_g)
        mdl_gguf_close(v->g);
    memset(v, 0, sizeof *v);
}
