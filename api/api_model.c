/* The host-side model: GGUF header, hyper-parameters, tokenizer and chat template (no weights), and the
 * text calls over it. A memra_model is immutable after load except its errbox (own mutex). */
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "model/gguf.h"
#include "model/llama.h"
#include "model/vocab_gguf.h"

memra_model_params memra_model_default_params(void)
{
    memra_model_params p = {0};
    return p;
}

static int get_int(const mdl_gguf *g, const char *arch, const char *key, int dflt, int *out, dev_err *err)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (dflt >= 0 && mdl_gguf_find(g, full) < 0) {
        *out = dflt;
        return 0;
    }
    uint32_t v;
    int r = mdl_gguf_get_u32(g, full, &v, err);
    if (r == 0 && (v < 1 || v > (1u << 30)))
        r = dev_err_set(err, MEMRA_E_FORMAT, "%s = %u is outside 1..2^30", full, v);
    *out = (int)v;
    return r;
}

static int read_hparams(memra_model *m, const mdl_gguf *g, dev_err *err)
{
    const char *s;
    size_t len;
    mdl_hparams hp; /* the loader's checks (every size and product bounded), so a model loads here only if the
                     * runtime can load it */
    int r = mdl_hparams_read(g, &hp, err);
    if (r || (r = mdl_gguf_get_str(g, "general.architecture", &s, &len, err)))
        return r;
    m->head_dim = hp.head_dim;
    if (len >= sizeof m->arch)
        len = sizeof m->arch - 1;
    memcpy(m->arch, s, len);
    m->arch[len] = '\0';
    if (strcmp(m->arch, "llama") && strcmp(m->arch, "qwen2"))
        return dev_err_set(err, MEMRA_E_UNSUPPORTED, "architecture '%s' (supported: llama, qwen2)", m->arch);
    if ((r = get_int(g, m->arch, "block_count", -1, &m->n_layer, err)) ||
        (r = get_int(g, m->arch, "embedding_length", -1, &m->n_embd, err)) ||
        (r = get_int(g, m->arch, "attention.head_count", -1, &m->n_head, err)) ||
        (r = get_int(g, m->arch, "attention.head_count_kv", m->n_head, &m->n_head_kv, err)) ||
        (r = get_int(g, m->arch, "context_length", -1, &m->n_ctx_train, err)))
        return r;
    const mdl_gguf_tensor *te = mdl_gguf_tensor_find(g, "token_embd.weight");
    if (!te || te->n_dims != 2 || te->ne[0] != m->n_embd || te->ne[1] > INT32_MAX)
        return dev_err_set(err, MEMRA_E_FORMAT, "token_embd.weight is missing or not (n_vocab <= 2^31-1, %d)",
                           m->n_embd);
    m->n_vocab = (int)te->ne[1];
    return 0;
}

memra_model *memra_model_load(const char *path, const memra_model_params *params)
{
    memra_model_params p = params ? *params : memra_model_default_params();
    dev_err err = {0};
    mdl_gguf *g = NULL;
    memra_model *m = NULL;
    if (!path) {
        api_fail(NULL, MEMRA_E_INVAL, "memra_model_load: path is NULL");
        return NULL;
    }
    if (p.progress)
        p.progress(0.0f, p.progress_user);
    if (!(m = calloc(1, sizeof *m)) || !(m->path = strdup(path))) {
        dev_err_set(&err, MEMRA_E_NOMEM, "memra_model_load: out of host memory");
        goto fail;
    }
    api_errbox_init(&m->err);
    if (!(g = mdl_gguf_open(path, &err)) || read_hparams(m, g, &err))
        goto fail;
    m->file_id = *mdl_gguf_identity(g);
    if (p.progress)
        p.progress(0.5f, p.progress_user);
    if (mdl_gguf_find(g, "tokenizer.ggml.model") >= 0) {
        if (!(m->tok = mdl_tokenizer_from_gguf(g, &err)))
            goto fail;
        if (mdl_tokenizer_n_vocab(m->tok) > m->n_vocab) { /* the loader's rule (model/loader.c) */
            dev_err_set(&err, MEMRA_E_FORMAT, "tokenizer.ggml.tokens has %d entries, more than the %d rows of "
                        "token_embd.weight", mdl_tokenizer_n_vocab(m->tok), m->n_vocab);
            goto fail;
        }
        const char *tmpl = mdl_tokenizer_chat_template(m->tok);
        if (tmpl) {
            dev_err cerr = {0};
            m->chat = mdl_chat_create(tmpl, &cerr); /* an unknown format is not fatal: chat_apply says so */
        }
    }
    mdl_gguf_close(g);
    if (p.progress)
        p.progress(1.0f, p.progress_user);
    return m;
fail:
    dev_err_wrap(&err, "memra_model_load(%s)", path);
    api_fail_err(NULL, &err);
    mdl_gguf_close(g);
    memra_model_free(m);
    return NULL;
}

void memra_model_free(memra_model *m)
{
    if (!m)
        return;
    mdl_chat_destroy(m->chat);
    if (m->tok)
        mdl_tokenizer_destroy(m->tok);
    if (m->path)
        api_errbox_destroy(&m->err);
    free(m->path);
    free(m->synth);
    free(m);
}

const char *memra_model_last_error(const memra_model *m)
{
    return m ? api_errbox_read((api_errbox *)&m->err) : "(null model)";
}

const char *memra_model_arch(const memra_model *m) { return m ? m->arch : NULL; }
int memra_model_n_vocab(const memra_model *m) { return m ? m->n_vocab : 0; }
int memra_model_n_embd(const memra_model *m) { return m ? m->n_embd : 0; }
int memra_model_n_layer(const memra_model *m) { return m ? m->n_layer : 0; }
int memra_model_n_head(const memra_model *m) { return m ? m->n_head : 0; }
int memra_model_n_head_kv(const memra_model *m) { return m ? m->n_head_kv : 0; }
int memra_model_n_ctx_train(const memra_model *m) { return m ? m->n_ctx_train : 0; }
int memra_model_has_tokenizer(const memra_model *m) { return m && m->tok; }

/* NULL model or no tokenizer: records and returns the code (box may be NULL). */
static int need_tok(const memra_model *m, const char *fn)
{
    if (!m)
        return api_fail(NULL, MEMRA_E_INVAL, "%s: model is NULL", fn);
    if (!m->tok)
        return api_fail((api_errbox *)&m->err, MEMRA_E_UNSUPPORTED,
                        "%s: the model has no tokenizer (its GGUF has no tokenizer.* keys)", fn);
    return 0;
}

/* Map mdl_tokenize's result (a count, -(more than cap) or -(needed) with cap 0, or a MEMRA_E_* code) to a
 * status + *n_out. Codes and "needed" overlap for small counts, so each call below is made so they cannot. */
int memra_tokenize(const memra_model *m, const char *text, int len, int add_special, int parse_special,
                   memra_token *out, int cap, int *n_out)
{
    int r = need_tok(m, "memra_tokenize");
    if (r)
        return r;
    api_errbox *box = (api_errbox *)&m->err;
    if (!text || !n_out || len < 0 || cap < 0 || (!out && cap > 0))
        return api_fail(box, MEMRA_E_INVAL, "memra_tokenize: text=%p len=%d out=%p cap=%d n_out=%p (need text, "
                        "len >= 0, cap >= 0, out when cap > 0, n_out)", (const void *)text, len, (void *)out, cap,
                        (void *)n_out);
    if (cap > 0) { /* mdl_tokenize stops at the first id past cap: the work is bounded by cap */
        int32_t two[2];
        const int c = cap >= 2 ? cap : 2; /* its "more than c" answer, -(c + 1) <= -3, is then no MEMRA_E_* code */
        int n = mdl_tokenize(m->tok, text, (size_t)len, add_special, parse_special, cap >= 2 ? out : two, c);
        if (n >= 0 && n <= cap) {
            if (cap < 2)
                memcpy(out, two, (size_t)n * sizeof *out);
            *n_out = n;
            return MEMRA_OK;
        }
        if (n > cap || n <= -(c + 1)) {
            *n_out = cap + 1;
            return api_fail(box, MEMRA_E_FULL, "memra_tokenize: more than cap %d tokens (tokenizing stops at the "
                            "first one past cap; cap 0 counts them all)", cap);
        }
        return api_fail(box, n == MEMRA_E_NOMEM ? MEMRA_E_NOMEM : MEMRA_E_INVAL, "memra_tokenize: tokenizer failed");
    }
    /* cap 0, a size query: the whole text is counted. -(count) and the codes MEMRA_E_INVAL (-1) / NOMEM (-2)
     * overlap for counts 1 and 2, which a 3-id buffer tells apart. */
    int n = mdl_tokenize(m->tok, text, (size_t)len, add_special, parse_special, NULL, 0);
    if (n == MEMRA_E_INVAL || n == MEMRA_E_NOMEM) {
        int32_t three[3];
        n = mdl_tokenize(m->tok, text, (size_t)len, add_special, parse_special, three, 3);
        if (n < 0)
            return api_fail(box, n == MEMRA_E_NOMEM ? MEMRA_E_NOMEM : MEMRA_E_INVAL, "memra_tokenize: tokenizer failed");
    } else {
        n = -n;
    }
    *n_out = n;
    if (n == 0)
        return MEMRA_OK;
    return api_fail(box, MEMRA_E_FULL, "memra_tokenize: %d tokens do not fit in cap 0", n);
}

int memra_token_to_piece(const memra_model *m, memra_token token, char *buf, int cap, int special, int *n_out)
{
    int r = need_tok(m, "memra_token_to_piece");
    if (r)
        return r;
    api_errbox *box = (api_errbox *)&m->err;
    if (!n_out || cap < 0 || (!buf && cap > 0) || token < 0 || token >= mdl_tokenizer_n_vocab(m->tok))
        return api_fail(box, MEMRA_E_INVAL, "memra_token_to_piece: token %d (allowed 0..%d), cap %d, buf and "
                        "n_out required", token, mdl_tokenizer_n_vocab(m->tok) - 1, cap);
    char tmp[1];
    int n = mdl_token_to_piece(m->tok, token, cap > 0 ? buf : tmp, cap, special);
    if (n >= 0) {
        *n_out = n;
        return MEMRA_OK;
    }
    *n_out = -n;
    return api_fail(box, MEMRA_E_FULL, "memra_token_to_piece: %d bytes do not fit in cap %d", -n, cap);
}

int memra_detokenize(const memra_model *m, const memra_token *tokens, int n, char *buf, int cap, int special,
                     int *n_out)
{
    int r = need_tok(m, "memra_detokenize");
    if (r)
        return r;
    api_errbox *box = (api_errbox *)&m->err;
    if (!n_out || n < 0 || (!tokens && n > 0) || cap < 1 || !buf)
        return api_fail(box, MEMRA_E_INVAL, "memra_detokenize: n=%d cap=%d (need tokens when n > 0, buf with "
                        "cap >= 1 for the NUL, n_out)", n, cap);
    int nv = mdl_tokenizer_n_vocab(m->tok);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= nv)
            return api_fail(box, MEMRA_E_INVAL, "memra_detokenize: tokens[%d] = %d is outside 0..%d", i, tokens[i],
                            nv - 1);
    int w = mdl_detokenize(m->tok, tokens, n, buf, cap - 1, special);
    if (w >= 0) {
        buf[w] = '\0';
        *n_out = w;
        return MEMRA_OK;
    }
    *n_out = -w;
    buf[0] = '\0';
    return api_fail(box, MEMRA_E_FULL, "memra_detokenize: %d bytes (+ NUL) do not fit in cap %d", -w, cap);
}

memra_token memra_token_bos(const memra_model *m) { return m && m->tok ? mdl_tokenizer_bos(m->tok) : -1; }
memra_token memra_token_eos(const memra_model *m) { return m && m->tok ? mdl_tokenizer_eos(m->tok) : -1; }
int memra_token_is_eog(const memra_model *m, memra_token t)
{
    return m && m->tok && t >= 0 && t < mdl_tokenizer_n_vocab(m->tok) ? mdl_tokenizer_is_eog(m->tok, t) : 0;
}

int memra_chat_apply(const memra_model *m, const char *tmpl, const memra_chat_message *msgs, size_t n,
                     int add_assistant, char *buf, size_t cap, size_t *n_out)
{
    api_errbox *box = m ? (api_errbox *)&m->err : NULL;
    if ((!m && !tmpl) || (!msgs && n > 0) || !n_out || (!buf && cap > 0))
        return api_fail(box, MEMRA_E_INVAL, "memra_chat_apply: need a model or a template, msgs when n > 0, "
                        "buf when cap > 0, and n_out");
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return api_fail(box, MEMRA_E_INVAL, "memra_chat_apply: message %zu has a NULL role or content", i);
    dev_err err = {0};
    mdl_chat *own = NULL;
    const mdl_chat *c = m ? m->chat : NULL;
    if (tmpl) {
        if (!(own = mdl_chat_create(tmpl, &err)))
            return api_fail_err(box, &err);
        c = own;
    } else if (!c) {
        return api_fail(box, MEMRA_E_UNSUPPORTED, "memra_chat_apply: the model has %s (pass a template name: "
                        "chatml, llama3, gemma)", m->tok && mdl_tokenizer_chat_template(m->tok)
                        ? "a chat template of an unsupported format" : "no chat template");
    }
    mdl_chat_msg *mm = malloc((n ? n : 1) * sizeof *mm);
    if (!mm) {
        mdl_chat_destroy(own);
        return api_fail(box, MEMRA_E_NOMEM, "memra_chat_apply: out of host memory");
    }
    for (size_t i = 0; i < n; i++)
        mm[i] = (mdl_chat_msg){.role = msgs[i].role, .content = msgs[i].content};
    /* the arguments are checked above, so a negative result is -(length + 1), never an error code */
    long len = mdl_chat_apply(c, mm, n, add_assistant, cap > 0 ? buf : NULL, cap);
    free(mm);
    mdl_chat_destroy(own);
    if (len >= 0) {
        *n_out = (size_t)len;
        return MEMRA_OK;
    }
    *n_out = (size_t)(-len - 1);
    return api_fail(box, MEMRA_E_FULL, "memra_chat_apply: %zu bytes (+ NUL) do not fit in cap %zu", *n_out, cap);
}
