/* Tokenizer front end: vocab tables, special-token partition, add BOS/EOS, pieces and detokenize.
 * The model-specific encoders live in tok_bpe.c (byte-level BPE) and tok_spm.c (SentencePiece BPE).
 * No shared mutable state: the tokenizer is read-only after create. */
#include <stdlib.h>
#include <string.h>

#include "model/tok_internal.h"

/* ---- string -> id map ---- */

uint32_t tok_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

int32_t tok_strmap_get(const mdl_tokenizer *t, const char *s, size_t n)
{
    uint32_t h = tok_hash(s, n);
    for (uint32_t i = h & t->vocab.mask;; i = (i + 1) & t->vocab.mask) {
        int32_t id = t->vocab.slots[i];
        if (id < 0)
            return -1;
        if (t->vocab.hashes[i] == h && t->len[id] == n && memcmp(t->text[id], s, n) == 0)
            return id;
    }
}

static void strmap_put(mdl_tokenizer *t, int32_t id)
{
    uint32_t h = tok_hash(t->text[id], t->len[id]);
    for (uint32_t i = h & t->vocab.mask;; i = (i + 1) & t->vocab.mask) {
        int32_t cur = t->vocab.slots[i];
        if (cur < 0 || (t->vocab.hashes[i] == h && t->len[cur] == t->len[id] &&
                        memcmp(t->text[cur], t->text[id], t->len[id]) == 0)) {
            t->vocab.slots[i] = id; /* a duplicate text maps to its last id, as HF and llama.cpp do */
            t->vocab.hashes[i] = h;
            return;
        }
    }
}

void mdl_vocab_src_init(mdl_vocab_src *src)
{
    memset(src, 0, sizeof *src);
    src->bos = src->eos = src->unk = src->pad = -1;
    src->add_bos = src->add_eos = src->add_space_prefix = -1;
}

/* ---- create / destroy ---- */

static const char *const EOG_TEXTS[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>",
                                        "<end_of_turn>", "<|end|>", "</s>", "<|end_of_text|>"};

static int check_id(int32_t id, uint32_t n, const char *what, dev_err *err)
{
    if (id < -1 || (id >= 0 && (uint32_t)id >= n))
        return dev_err_set(err, MEMRA_E_FORMAT, "tokenizer.ggml.%s_token_id=%d is outside the vocab [0, %u) (or -1 = absent)",
                           what, id, n);
    return 0;
}

mdl_tokenizer *mdl_tokenizer_create(const mdl_vocab_src *src, dev_err *err)
{
    if (!src || !src->model || !src->tokens || src->n_tokens == 0 || src->n_tokens > INT32_MAX / 4) {
        dev_err_set(err, MEMRA_E_INVAL, "tokenizer: need tokenizer.ggml.model and a non-empty tokenizer.ggml.tokens");
        return NULL;
    }
    int kind = strcmp(src->model, "gpt2") == 0 ? TOK_KIND_BPE : strcmp(src->model, "llama") == 0 ? TOK_KIND_SPM : 0;
    if (!kind) {
        dev_err_set(err, MEMRA_E_UNSUPPORTED,
                    "tokenizer.ggml.model='%s' is not supported; supported: gpt2 (byte-level BPE), llama (SentencePiece)",
                    src->model);
        return NULL;
    }
    uint32_t n = src->n_tokens;
    if (check_id(src->bos, n, "bos", err) || check_id(src->eos, n, "eos", err) || check_id(src->unk, n, "unknown", err) ||
        check_id(src->pad, n, "padding", err))
        return NULL;

    mdl_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        dev_err_set(err, MEMRA_E_NOMEM, "tokenizer: struct");
        return NULL;
    }
    t->kind = kind;
    t->n_vocab = (int32_t)n;
    t->bos = src->bos, t->eos = src->eos, t->unk = src->unk, t->pad = src->pad;
    t->text = calloc(n, sizeof *t->text);
    t->len = calloc(n, sizeof *t->len);
    t->type = calloc(n, 1);
    t->score = calloc(n, sizeof *t->score);
    t->eog = calloc(n, 1);
    t->special = calloc(n, sizeof *t->special);
    uint32_t cap = 1;
    while (cap < 2 * n + 2)
        cap <<= 1;
    t->vocab.mask = cap - 1;
    t->vocab.slots = malloc((size_t)cap * sizeof *t->vocab.slots);
    t->vocab.hashes = malloc((size_t)cap * sizeof *t->vocab.hashes);
    if (!t->text || !t->len || !t->type || !t->score || !t->eog || !t->special || !t->vocab.slots || !t->vocab.hashes) {
        dev_err_set(err, MEMRA_E_NOMEM, "tokenizer: tables for %u tokens", n);
        goto fail;
    }
    memset(t->vocab.slots, 0xFF, (size_t)cap * sizeof *t->vocab.slots);
    for (uint32_t i = 0; i < n; i++) {
        const char *s = src->tokens[i];
        size_t l = src->token_lens ? src->token_lens[i] : (s ? strlen(s) : 0);
        if (!s && l) {
            dev_err_set(err, MEMRA_E_FORMAT, "tokenizer.ggml.tokens[%u] is NULL", i);
            goto fail;
        }
        if (l > UINT32_MAX / 2) {
            dev_err_set(err, MEMRA_E_FORMAT, "tokenizer.ggml.tokens[%u] is %zu bytes long", i, l);
            goto fail;
        }
        t->text[i] = malloc(l + 1);
        if (!t->text[i]) {
            dev_err_set(err, MEMRA_E_NOMEM, "tokenizer: token text");
            goto fail;
        }
        if (l)
            memcpy(t->text[i], s, l);
        t->text[i][l] = '\0';
        t->len[i] = (uint32_t)l;
        if (l > t->max_len)
            t->max_len = (uint32_t)l;
        int ty = src->token_types ? src->token_types[i] : MDL_TOKEN_NORMAL;
        t->type[i] = (int8_t)(ty >= MDL_TOKEN_NORMAL && ty <= MDL_TOKEN_BYTE ? ty : MDL_TOKEN_NORMAL);
        t->score[i] = src->scores ? src->scores[i] : 0.0f;
        strmap_put(t, (int32_t)i);
    }

    if (kind == TOK_KIND_BPE) {
        if (tok_pretok_init(&t->pre, src->pre, err) || tok_bpe_init(t, src, err))
            goto fail;
    } else if (tok_spm_init(t, err)) {
        goto fail;
    }
    t->add_bos = src->add_bos >= 0 ? !!src->add_bos : (kind == TOK_KIND_SPM || t->pre.ignore_merges) && t->bos >= 0;
    t->add_eos = src->add_eos >= 0 ? !!src->add_eos : 0;
    t->add_space_prefix = kind == TOK_KIND_SPM && (src->add_space_prefix >= 0 ? !!src->add_space_prefix : 1);
    if (t->add_bos && t->bos < 0) {
        dev_err_set(err, MEMRA_E_FORMAT, "tokenizer: add_bos_token is set but there is no bos_token_id");
        goto fail;
    }
    if (t->add_eos && t->eos < 0) {
        dev_err_set(err, MEMRA_E_FORMAT, "tokenizer: add_eos_token is set but there is no eos_token_id");
        goto fail;
    }

    for (uint32_t i = 0; i < n; i++) {
        int ty = t->type[i];
        if ((ty == MDL_TOKEN_CONTROL || ty == MDL_TOKEN_USER_DEFINED || ty == MDL_TOKEN_UNKNOWN) && t->len[i] > 0) {
            t->special[t->n_special++] = (int32_t)i;
            t->special_first[(unsigned char)t->text[i][0]] = 1;
        }
        if (ty == MDL_TOKEN_CONTROL || ty == MDL_TOKEN_USER_DEFINED)
            for (size_t k = 0; k < sizeof EOG_TEXTS / sizeof EOG_TEXTS[0]; k++)
                if (strcmp(t->text[i], EOG_TEXTS[k]) == 0)
                    t->eog[i] = 1;
    }
    if (tok_special_init(t, err))
        goto fail;
    if (t->eos >= 0)
        t->eog[t->eos] = 1;
    if (src->chat_template && !(t->chat_template = strdup(src->chat_template))) {
        dev_err_set(err, MEMRA_E_NOMEM, "tokenizer: chat template");
        goto fail;
    }
    return t;
fail:
    mdl_tokenizer_destroy(t);
    return NULL;
}

void mdl_tokenizer_destroy(mdl_tokenizer *t)
{
    if (!t)
        return;
    if (t->text)
        for (int32_t i = 0; i < t->n_vocab; i++)
            free(t->text[i]);
    free(t->text);
    free(t->len);
    free(t->type);
    free(t->score);
    free(t->eog);
    free(t->special);
    tok_special_free(t);
    free(t->vocab.slots);
    free(t->vocab.hashes);
    free(t->merges.slots);
    tok_pretok_free(&t->pre);
    free(t->chat_template);
    free(t);
}

/* ---- tokenize ---- */

/* The longest special token that starts at s (leftmost-longest, as HF's added-token matcher), or -1. */
static int32_t match_special(const mdl_tokenizer *t, const char *s, size_t n, int parse_special)
{
    if (!t->special_first[(unsigned char)s[0]])
        return -1;
    return tok_special_match(t, s, n, parse_special);
}

static int encode_raw(const mdl_tokenizer *t, const char *s, size_t n, int prev_special, tok_out *o)
{
    if (n == 0)
        return 0;
    if (t->kind == TOK_KIND_BPE)
        return tok_bpe_encode(t, s, n, o);
    return tok_spm_encode(t, s, n, t->add_space_prefix && prev_special, o);
}

int mdl_tokenize(const mdl_tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
                 int32_t *out, int cap)
{
    if (!t || (!text && len) || cap < 0 || (!out && cap > 0) || len > (size_t)INT32_MAX / 4)
        return MEMRA_E_INVAL;
    tok_out o = {out, cap, 0};
    if (add_special && t->add_bos)
        tok_emit(&o, t->bos);
    int prev_special = 1, rc = 0;
    size_t start = 0;
    for (size_t i = 0; i < len && rc == 0 && !tok_full(&o);) {
        int32_t id = match_special(t, text + i, len - i, parse_special);
        if (id < 0) {
            i++;
            continue;
        }
        if (i > start) {
            rc = encode_raw(t, text + start, i - start, prev_special, &o);
            prev_special = 0;
        }
        tok_emit(&o, id);
        prev_special = 1;
        i += t->len[id];
        start = i;
    }
    if (rc == 0 && start < len && !tok_full(&o))
        rc = encode_raw(t, text + start, len - start, prev_special, &o);
    if (rc)
        return rc;
    if (add_special && t->add_eos)
        tok_emit(&o, t->eos);
    return o.n <= cap ? o.n : cap > 0 ? -(cap + 1) : -o.n; /* cap > 0: stopped at the first id past cap */
}

/* ---- pieces ---- */

int mdl_token_to_piece(const mdl_tokenizer *t, int32_t id, char *buf, int cap, int special)
{
    if (!t || id < 0 || id >= t->n_vocab || cap < 0 || (!buf && cap > 0))
        return MEMRA_E_INVAL;
    int ty = t->type[id], n;
    if (ty == MDL_TOKEN_CONTROL || ty == MDL_TOKEN_UNKNOWN || ty == MDL_TOKEN_USER_DEFINED) {
        if (ty != MDL_TOKEN_USER_DEFINED && !special)
            return 0;
        n = (int)t->len[id];
        if (n <= cap)
            memcpy(buf, t->text[id], (size_t)n);
    } else if (ty == MDL_TOKEN_UNUSED) {
        n = 0;
    } else {
        n = t->kind == TOK_KIND_BPE ? tok_bpe_piece(t, id, buf, cap) : tok_spm_piece(t, id, buf, cap);
    }
    return n <= cap ? n : -n;
}

int mdl_detokenize(const mdl_tokenizer *t, const int32_t *ids, int n, char *buf, int cap, int special)
{
    if (!t || n < 0 || (!ids && n > 0) || cap < 0 || (!buf && cap > 0))
        return MEMRA_E_INVAL;
    char *tmp = malloc((size_t)t->max_len + 8);
    if (!tmp)
        return MEMRA_E_NOMEM;
    long w = 0;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        int pn = mdl_token_to_piece(t, ids[i], tmp, (int)t->max_len + 8, special);
        if (pn < 0) {
            rc = pn;
            break;
        }
        int skip = (i == 0 && t->add_space_prefix && pn > 0 && tmp[0] == ' ');
        for (int k = skip; k < pn; k++, w++)
            if (w < cap)
                buf[w] = tmp[k];
        if (w > INT32_MAX / 2) {
            rc = MEMRA_E_INVAL;
            break;
        }
    }
    free(tmp);
    if (rc)
        return rc;
    return w <= cap ? (int)w : -(int)w;
}

/* ---- accessors ---- */

int32_t mdl_tokenizer_find(const mdl_tokenizer *t, const char *text, size_t len)
{
    return t && (text || !len) ? tok_strmap_get(t, text, len) : -1;
}

int32_t mdl_tokenizer_n_vocab(const mdl_tokenizer *t) { return t->n_vocab; }
int32_t mdl_tokenizer_bos(const mdl_tokenizer *t) { return t->bos; }
int32_t mdl_tokenizer_eos(const mdl_tokenizer *t) { return t->eos; }
int mdl_tokenizer_add_bos(const mdl_tokenizer *t) { return t->add_bos; }
const char *mdl_tokenizer_chat_template(const mdl_tokenizer *t) { return t->chat_template; }

int mdl_tokenizer_token_type(const mdl_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab ? t->type[id] : 0;
}

int mdl_tokenizer_is_eog(const mdl_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && t->eog[id];
}
