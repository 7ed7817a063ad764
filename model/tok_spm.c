/* SentencePiece-style BPE ("llama" vocabularies): spaces become U+2581 (▁), a ▁ is prepended to the
 * first text fragment (add_space_prefix), the text starts as one symbol per UTF-8 character and the
 * adjacent pair whose concatenation is the highest-scoring vocab token merges first (leftmost on ties),
 * as llama.cpp and sentencepiece do. A final symbol missing from the vocab falls back to its bytes
 * (<0xXX> tokens); a byte with no byte token to U+FFFD (tok_fffd_init); with no byte tokens at all, one
 * unk per unknown character.
 * Symbols are spans of one normalized buffer, so a candidate pair is a contiguous substring and a vocab
 * lookup needs no concatenation. No shared mutable state. */
#include <stdlib.h>
#include <string.h>

#include "model/tok_internal.h"

static const char SPACE_MARK[] = "\xE2\x96\x81"; /* U+2581 */

int tok_spm_init(mdl_tokenizer *t, dev_err *err)
{
    for (int b = 0; b < 256; b++) {
        char s[8];
        static const char hex[] = "0123456789ABCDEF";
        s[0] = '<', s[1] = '0', s[2] = 'x', s[3] = hex[b >> 4], s[4] = hex[b & 15], s[5] = '>';
        t->byte_tok[b] = tok_strmap_get(t, s, 6);
    }
    return tok_fffd_init(t, err);
}

typedef struct spm_sym {
    uint32_t off, n;    /* span in the normalized buffer; n == 0: merged away */
    int32_t prev, next;
} spm_sym;

typedef struct spm_pair {
    float score;
    int32_t left, right;
    uint32_t size;      /* n(left) + n(right) when queued; a mismatch marks it stale */
} spm_pair;

static int pair_before(const spm_pair *a, const spm_pair *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct spm_heap {
    spm_pair *v;
    size_t n, cap;
} spm_heap;

static int heap_push(spm_heap *h, spm_pair p)
{
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 64;
        spm_pair *nv = realloc(h->v, nc * sizeof *nv);
        if (!nv)
            return MEMRA_E_NOMEM;
        h->v = nv;
        h->cap = nc;
    }
    size_t i = h->n++;
    while (i > 0 && pair_before(&p, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = p;
    return 0;
}

static spm_pair heap_pop(spm_heap *h)
{
    spm_pair top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const spm_pair *best = &last;
        if (l < h->n && pair_before(&h->v[l], best)) {
            m = l;
            best = &h->v[l];
        }
        if (l + 1 < h->n && pair_before(&h->v[l + 1], best))
            m = l + 1;
        if (m == i)
            break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

static int try_pair(const mdl_tokenizer *t, const char *buf, const spm_sym *s, int32_t l, int32_t r, spm_heap *h)
{
    tok_work++;
    if (l < 0 || r < 0)
        return 0;
    uint32_t n = s[l].n + s[r].n;
    int32_t id = tok_strmap_get(t, buf + s[l].off, n);
    if (id < 0)
        return 0;
    return heap_push(h, (spm_pair){t->score[id], l, r, n});
}

static int utf8_len(unsigned char c)
{
    return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
}

int tok_spm_encode(const mdl_tokenizer *t, const char *text, size_t len, int prefix_space, tok_out *out)
{
    int rc = MEMRA_E_NOMEM;
    char *buf = malloc(3 * len + 4);
    spm_sym *sym = malloc((len + 1) * sizeof *sym);
    spm_heap h = {0};
    if (!buf || !sym)
        goto done;
    size_t bn = 0;
    if (prefix_space) {
        memcpy(buf, SPACE_MARK, 3);
        bn = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + bn, SPACE_MARK, 3);
            bn += 3;
        } else {
            buf[bn++] = text[i];
        }
    }
    int32_t ns = 0;
    for (size_t i = 0; i < bn; ns++) {
        size_t l = (size_t)utf8_len((unsigned char)buf[i]);
        if (l > bn - i)
            l = bn - i;
        for (size_t k = 1; k < l; k++)
            if (((unsigned char)buf[i + k] & 0xC0) != 0x80)
                l = 1; /* invalid sequence: one byte per symbol */
        sym[ns] = (spm_sym){(uint32_t)i, (uint32_t)l, ns - 1, -1};
        if (ns > 0)
            sym[ns - 1].next = ns;
        i += l;
    }
    rc = 0;
    for (int32_t i = 1; i < ns && rc == 0; i++)
        rc = try_pair(t, buf, sym, i - 1, i, &h);
    while (h.n && rc == 0) {
        spm_pair p = heap_pop(&h);
        spm_sym *L = &sym[p.left], *R = &sym[p.right];
        if (L->n == 0 || R->n == 0 || L->n + R->n != p.size || L->next != p.right)
            continue; /* stale */
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0)
            sym[R->next].prev = p.left;
        rc = try_pair(t, buf, sym, L->prev, p.left, &h);
        if (rc == 0)
            rc = try_pair(t, buf, sym, p.left, L->next, &h);
    }
    for (int32_t i = ns ? 0 : -1; i >= 0 && rc == 0; i = sym[i].next) {
        int32_t id = tok_strmap_get(t, buf + sym[i].off, sym[i].n);
        if (id >= 0) {
            tok_emit(out, id);
            continue;
        }
        for (uint32_t k = 0; k < sym[i].n; k++) { /* byte fallback */
            int32_t b = t->byte_tok[(unsigned char)buf[sym[i].off + k]];
            if (b >= 0)
                tok_emit(out, b);
            else if (t->no_byte_tok && k == 0) /* no byte tokens at all: one unk per unknown character */
                tok_emit(out, t->unk >= 0 ? t->unk : t->fffd[0]);
            else if (!t->no_byte_tok)
                for (int f = 0; f < t->n_fffd; f++)
                    tok_emit(out, t->fffd[f]); /* this byte has no token: U+FFFD stands in */
        }
    }
done:
    free(buf);
    free(sym);
    free(h.v);
    return rc;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int tok_spm_piece(const mdl_tokenizer *t, int32_t id, char *buf, int cap)
{
    const char *s = t->text[id];
    uint32_t n = t->len[id];
    if (t->type[id] == MDL_TOKEN_BYTE && n == 6 && hexval(s[3]) >= 0 && hexval(s[4]) >= 0) {
        if (cap >= 1)
            buf[0] = (char)(hexval(s[3]) * 16 + hexval(s[4]));
        return 1;
    }
    int w = 0;
    for (uint32_t i = 0; i < n;) {
        if (i + 3 <= n && memcmp(s + i, SPACE_MARK, 3) == 0) {
            if (w < cap)
                buf[w] = ' ';
            w++;
            i += 3;
        } else {
            if (w < cap)
                buf[w] = s[i];
            w++;
            i++;
        }
    }
    return w;
}
