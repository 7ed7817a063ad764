/* Pre-tokenizer of byte-level BPE vocabularies: the regex sequence the model declares by
 * tokenizer.ggml.pre. The patterns are the ones HF tokenizer.json files use (llama.cpp lists the same
 * per pre type); case-insensitive contractions are spelled with ASCII classes ('[sS]) so Unicode case
 * folding cannot widen them. Matched with PCRE2 (UTF + UCP: \p{L}, \p{N}, \s are Unicode classes; the
 * patterns need lookahead (?!\S) and counted repeats, and PCRE2 is the reference engine for this syntax),
 * compiled once at create; a match_data is made per call, so splitting is thread-safe.
 * No shared mutable state. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdlib.h>
#include <string.h>

#include "model/tok_internal.h"

_Thread_local uint64_t tok_work;

#define RX_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define RX_CONTRACT "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RX_LLAMA3 RX_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" \
                              "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_QWEN2 RX_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" \
                             "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_TEKKEN "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" \
                  "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" \
                  "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct pre_def {
    const char *names;          /* '|'-separated tokenizer.ggml.pre values */
    int ignore_merges;
    const char *rx[TOK_MAX_REGEX];
} pre_def;

static const pre_def PRE_DEFS[] = {
    {"default", 0, {"[\\p{P}\\$\\+<=>\\^~\\|]+", RX_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
    {"gpt-2|gpt2|phi-2|jina-es|jina-de|gigachat|roberta-bpe|mpt|olmo|jais|trillion|granite-docling", 0, {RX_GPT2}},
    {"smollm|starcoder|refact|command-r|codeshell|exaone|minerva-7b", 0, {"\\p{N}", RX_GPT2}},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2", 1, {RX_LLAMA3}},
    {"dbrx|smaug-bpe|chatglm-bpe", 0, {RX_LLAMA3}},
    {"qwen2|qwen2.5|qwen-2.5|deepseek-r1-qwen|megrez|stablelm2|hunyuan", 0, {RX_QWEN2}},
    {"tekken", 0, {RX_TEKKEN}},
};

static int name_in(const char *names, const char *pre)
{
    size_t n = strlen(pre);
    for (const char *p = names; *p;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == n && memcmp(p, pre, n) == 0)
            return 1;
        if (!bar)
            break;
        p = bar + 1;
    }
    return 0;
}

int tok_pretok_init(tok_pretok *p, const char *pre, dev_err *err)
{
    memset(p, 0, sizeof *p);
    if (!pre || !*pre)
        pre = "default";
    const pre_def *d = NULL;
    for (size_t i = 0; i < sizeof PRE_DEFS / sizeof PRE_DEFS[0]; i++)
        if (name_in(PRE_DEFS[i].names, pre))
            d = &PRE_DEFS[i];
    if (!d) {
        char list[512] = "";
        for (size_t i = 0; i < sizeof PRE_DEFS / sizeof PRE_DEFS[0]; i++) {
            strncat(list, i ? "|" : "", sizeof list - strlen(list) - 1);
            strncat(list, PRE_DEFS[i].names, sizeof list - strlen(list) - 1);
        }
        return dev_err_set(err, MEMRA_E_UNSUPPORTED,
                           "tokenizer.ggml.pre='%s' is not supported; supported: %s", pre, list);
    }
    p->ignore_merges = d->ignore_merges;
    for (int i = 0; i < TOK_MAX_REGEX && d->rx[i]; i++) {
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *c = pcre2_compile((PCRE2_SPTR)d->rx[i], PCRE2_ZERO_TERMINATED,
                                      PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
        if (!c) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ec, msg, sizeof msg);
            tok_pretok_free(p);
            return dev_err_set(err, MEMRA_E_UNSUPPORTED, "pre-tokenizer '%s': regex %d does not compile at %zu: %s",
                               pre, i, (size_t)eo, (const char *)msg);
        }
        p->code[p->n++] = c;
    }
    return MEMRA_OK;
}

void tok_pretok_free(tok_pretok *p)
{
    for (int i = 0; i < p->n; i++)
        pcre2_code_free((pcre2_code *)p->code[i]);
    p->n = 0;
}

/* Length of the valid UTF-8 sequence at s[0..n) (RFC 3629: no overlongs, surrogates or code points past
 * U+10FFFF), or 0 when s[0] does not start one. */
static size_t utf8_valid_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t l = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (l == 0 || l > n)
        return 0;
    for (size_t i = 1; i < l; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) || (c == 0xF0 && s[1] < 0x90) ||
        (c == 0xF4 && s[1] > 0x8F))
        return 0; /* overlong, surrogate, or past U+10FFFF */
    return l;
}

/* The regex sequence of one call: regex `level` splits a fragment into matches and the gaps between them,
 * and each of those goes on to regex level + 1; past the last regex a fragment is a word. Depth first, so
 * words come out in text order as soon as they are found, and a callback that stops (the output is full)
 * stops the splitting too. */
typedef struct split_ctx {
    const tok_pretok *p;
    const char *text;
    pcre2_match_data *md[TOK_MAX_REGEX];
    tok_word_fn fn;
    void *ctx;
} split_ctx;

/* Split the fragment text[off, off+len) by regex `level` and everything after it. A fragment is matched on its
 * own (lookahead does not see past its end), as llama.cpp and HF do. Invalid UTF-8 matches nothing and stays
 * in the gaps (what PCRE2_MATCH_INVALID_UTF does): the fragment is validated once, and the regex runs over
 * each valid run with PCRE2_NO_UTF_CHECK, so no match call re-checks the rest of the text (that check made
 * splitting quadratic in the text's length). */
static int split_rec(split_ctx *c, int level, size_t off, size_t flen)
{
    if (flen == 0)
        return 0;
    if (level >= c->p->n || level >= TOK_MAX_REGEX) /* past the last regex (n <= TOK_MAX_REGEX): a word */
        return c->fn(c->ctx, c->text + off, flen);
    const pcre2_code *code = (const pcre2_code *)c->p->code[level];
    pcre2_match_data *md = c->md[level];
    const unsigned char *subj = (const unsigned char *)c->text + off;
    size_t prev = 0, seg = 0;
    int rc;
    while (seg < flen) {
        size_t end = seg, l;
        while (end < flen && (l = utf8_valid_len(subj + end, flen - end)) > 0)
            end += l;
        tok_work += end - seg;
        size_t pos = seg;
        while (pos < end) { /* the valid run [seg, end) */
            rc = pcre2_match(code, (PCRE2_SPTR)(subj + seg), end - seg, pos - seg, PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) {
                tok_work += end - pos;
                break;
            }
            if (rc < 0)
                return MEMRA_E_INVAL; /* resource limit on a pathological input */
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t s = seg + ov[0], e = seg + ov[1];
            tok_work += e - pos + 1;
            if (e > s) {
                if ((rc = split_rec(c, level + 1, off + prev, s - prev)) != 0 ||
                    (rc = split_rec(c, level + 1, off + s, e - s)) != 0)
                    return rc;
                prev = pos = e;
            } else { /* empty match: step one character */
                pos = s + 1;
                while (pos < end && (subj[pos] & 0xC0) == 0x80)
                    pos++;
            }
        }
        seg = end < flen ? end + 1 : end; /* an invalid byte: part of the gap */
    }
    return split_rec(c, level + 1, off + prev, flen - prev);
}

int tok_pretok_split(const tok_pretok *p, const char *text, size_t len, tok_word_fn fn, void *ctx)
{
    split_ctx c = {.p = p, .text = text, .fn = fn, .ctx = ctx};
    int rc = 0;
    for (int i = 0; i < p->n && rc == 0; i++)
        if (!(c.md[i] = pcre2_match_data_create_from_pattern((const pcre2_code *)p->code[i], NULL)))
            rc = MEMRA_E_NOMEM;
    if (rc == 0)
        rc = split_rec(&c, 0, 0, len);
    for (int i = 0; i < p->n; i++)
        pcre2_match_data_free(c.md[i]);
    return rc;
}
