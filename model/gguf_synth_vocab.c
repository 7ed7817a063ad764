/* The synthetic model's byte-level BPE vocabulary: 3 control tokens, the 256 GPT-2 byte tokens, then merges
 * learned by plain BPE training on a built-in English text (most frequent adjacent pair first; ties broken
 * by the lower pair of token ids), then unused placeholders up to n_vocab. No shared mutable state. */
#include "model/gguf_synth_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Original text written for this file (no third-party content). */
static const char train_text[] =
    "The pipeline keeps every stage busy. When the first stage has finished its layers for one token, it "
    "hands the hidden state to the next stage and starts on the next token at once. The stages run at the "
    "same time, each on its own device, and the tokens move through them like water through a row of "
    "pipes. A stage that waits for work is a bubble in the pipe; the runtime counts the bubbles and the "
    "busy time of every stage, so the reader can see where the time goes. The model is small, but the "
    "shape is the same as a large one: an embedding table, a stack of blocks with attention and a feed "
    "forward network, a final norm and the head that turns the hidden state into the logits of the next "
    "token. The test writes this model, reads it back, and checks that the split run and the whole run give "
    "the same bits. If they do not, the test names the first token and the first stage where the two runs "
    "part ways. There is no magic in it: the same inputs, the same order of additions, the same results. "
    "The reader of this text should find that the tokens for the, and, stage, token, state and pipe come "
    "out as single pieces, while the rarer words still split into their letters and bytes. 0123456789 "
    "10 20 30 40 50 60 70 80 90 100 200 300 400 500 1000 2000! Hello, world? Yes: it works; it works.\n";

int mdl_gguf_synth_byte_token(uint8_t b, char out[4])
{
    /* bytes_to_unicode: printable '!'..'~', 0xA1..0xAC, 0xAE..0xFF map to themselves, the other 68 bytes
     * to U+0100.. in byte order. */
    unsigned cp;
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) {
        cp = b;
    } else {
        unsigned n = 0;
        for (unsigned c = 0; c < b; c++)
            if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE))
                n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = '\0';
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    out[2] = '\0';
    return 2;
}

typedef struct word {
    int *sym;   /* token ids */
    int n;      /* symbols */
    int count;  /* occurrences in the text */
} word;

typedef struct pair_ct {
    int a, b, count;
} pair_ct;

static int cmp_pair(const void *x, const void *y)
{
    const pair_ct *p = x, *q = y;
    return p->a != q->a ? (p->a < q->a ? -1 : 1) : p->b != q->b ? (p->b < q->b ? -1 : 1) : 0;
}

static int char_class(char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return 1;
    if (c >= '0' && c <= '9')
        return 2;
    return c == ' ' || c == '\n' ? 0 : 3;
}

/* Split the text GPT-2 style: an optional leading space, then a run of one class (letters, digits,
 * other); newlines stand alone. Identical words are merged with a count. */
static int split_words(const char *text, word **out, int *n_out, int byte_id0)
{
    const size_t len = strlen(text);
    word *w = calloc(len + 1, sizeof *w);
    int n = 0;
    *out = w; /* the caller frees what was built, also on failure */
    *n_out = 0;
    if (!w)
        return -1;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        if (text[j] == ' ' && j + 1 < len && char_class(text[j + 1]) != 0)
            j++;
        const int cls = char_class(text[j]);
        j++;
        while (cls != 0 && j < len && char_class(text[j]) == cls)
            j++;
        int found = -1;
        for (int k = 0; k < n && found < 0; k++) {
            if (w[k].n == (int)(j - i)) {
                int same = 1;
                for (size_t m = i; m < j && same; m++)
                    same = w[k].sym[m - i] == byte_id0 + (uint8_t)text[m];
                if (same)
                    found = k;
            }
        }
        if (found >= 0) {
            w[found].count++;
        } else {
            w[n].sym = malloc(sizeof(int) * (j - i));
            if (!w[n].sym)
                return -1;
            *n_out = n + 1;
            for (size_t m = i; m < j; m++)
                w[n].sym[m - i] = byte_id0 + (uint8_t)text[m];
            w[n].n = (int)(j - i);
            w[n].count = 1;
            n++;
        }
        i = j;
    }
    return 0;
}

int mdl_synth_vocab_build(mdl_synth_vocab *v, int n_vocab, dev_err *err)
{
    memset(v, 0, sizeof *v);
    word *words = NULL;
    pair_ct *pairs = NULL;
    int n_words = 0, rc = MEMRA_E_NOMEM;
    if (n_vocab < MDL_SYNTH_N_SPECIAL + 256)
        return dev_err_set(err, MEMRA_E_INVAL, "n_vocab %d: must be >= %d (3 control + 256 byte tokens)", n_vocab,
                           MDL_SYNTH_N_SPECIAL + 256);
    v->n = n_vocab;
    v->tokens = calloc((size_t)n_vocab, sizeof *v->tokens);
    v->types = calloc((size_t)n_vocab, sizeof *v->types);
    v->merges = calloc((size_t)n_vocab, sizeof *v->merges);
    if (!v->tokens || !v->types || !v->merges)
        goto fail;
    static const char *const special[MDL_SYNTH_N_SPECIAL] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    int id = 0;
    for (; id < MDL_SYNTH_N_SPECIAL; id++) {
        if (!(v->tokens[id] = strdup(special[id])))
            goto fail;
        v->types[id] = 3; /* CONTROL */
    }
    for (int b = 0; b < 256; b++, id++) {
        char s[4];
        mdl_gguf_synth_byte_token((uint8_t)b, s);
        if (!(v->tokens[id] = strdup(s)))
            goto fail;
        v->types[id] = 1; /* NORMAL */
    }
    if (split_words(train_text, &words, &n_words, MDL_SYNTH_N_SPECIAL))
        goto fail;
    size_t n_sym = 0;
    for (int k = 0; k < n_words; k++)
        n_sym += (size_t)words[k].n;
    pairs = malloc(sizeof *pairs * (n_sym + 1));
    if (!pairs)
        goto fail;
    while (id < n_vocab) {
        size_t np = 0;
        for (int k = 0; k < n_words; k++)
            for (int m = 0; m + 1 < words[k].n; m++)
                pairs[np++] = (pair_ct){words[k].sym[m], words[k].sym[m + 1], words[k].count};
        qsort(pairs, np, sizeof *pairs, cmp_pair);
        pair_ct best = {0, 0, 0};
        for (size_t i = 0; i < np;) {
            pair_ct cur = pairs[i++];
            while (i < np && pairs[i].a == cur.a && pairs[i].b == cur.b)
                cur.count += pairs[i++].count;
            if (cur.count > best.count) /* strictly greater: the first (lowest ids) wins ties */
                best = cur;
        }
        if (best.count < 2)
            break;
        const char *sa = v->tokens[best.a], *sb = v->tokens[best.b];
        const size_t la = strlen(sa), lb = strlen(sb);
        char *tok = malloc(la + lb + 1), *mrg = malloc(la + lb + 2);
        if (!tok || !mrg) {
            free(tok);
            free(mrg);
            goto fail;
        }
        memcpy(tok, sa, la);
        memcpy(tok + la, sb, lb + 1);
        memcpy(mrg, sa, la);
        mrg[la] = ' ';
        memcpy(mrg + la + 1, sb, lb + 1);
        v->tokens[id] = tok;
        v->types[id] = 1;
        v->merges[v->n_merges++] = mrg;
        for (int k = 0; k < n_words; k++) { /* apply the merge */
            int o = 0;
            for (int m = 0; m < words[k].n; m++) {
                if (m + 1 < words[k].n && words[k].sym[m] == best.a && words[k].sym[m + 1] == best.b) {
                    words[k].sym[o++] = id;
                    m++;
                } else {
                    words[k].sym[o++] = words[k].sym[m];
                }
            }
            words[k].n = o;
        }
        id++;
    }
    for (; id < n_vocab; id++) {
        char s[32];
        snprintf(s, sizeof s, "[UNUSED_%d]", id);
        if (!(v->tokens[id] = strdup(s)))
            goto fail;
        v->types[id] = 5; /* UNUSED */
    }
    rc = 0;
fail:
    for (int k = 0; words && k < n_words; k++)
        free(words[k].sym);
    free(words);
    free(pairs);
    if (rc) {
        mdl_synth_vocab_free(v);
        dev_err_set(err, rc, "synthetic vocab: out of memory");
    }
    return rc;
}

void mdl_synth_vocab_free(mdl_synth_vocab *v)
{
    for (int i = 0; v->tokens && i < v->n; i++)
        free(v->tokens[i]);
    for (int i = 0; v->merges && i < v->n_merges; i++)
        free(v->merges[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
    memset(v, 0, sizeof *v);
}
