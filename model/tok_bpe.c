/* GPT-2 byte-level BPE: each byte of a pre-tokenized word maps to a printable codepoint (the
 * bytes_to_unicode table), the word starts as one symbol per byte and the merges are applied lowest rank
 * first (leftmost on ties) until none applies. Symbols are token ids and the merge table is keyed by the
 * id pair, so a merge is one hash lookup; a binary heap of candidate pairs keeps long words O(n log n).
 * No shared mutable state: per-call scratch lives in bpe_ctx. */
#include <stdlib.h>
#include <string.h>

#include "model/tok_internal.h"

void tok_bpe_byte_cps(uint32_t cp_of_byte[256])
{
    uint32_t extra = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        cp_of_byte[b] = printable ? (uint32_t)b : extra++;
    }
}

static int utf8_put(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2; /* byte-level codepoints are all < 0x800 */
}

/* Decode one UTF-8 codepoint from s[0..n); returns its length (1 for an invalid byte, *cp = 0xFFFFFFFF). */
static int utf8_get(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned c = s[0];
    int l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (l == 0 || (size_t)l > n) {
        *cp = 0xFFFFFFFFu;
        return 1;
    }
    uint32_t v = l == 1 ? c : l == 2 ? (c & 0x1F) : l == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < l; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *cp = 0xFFFFFFFFu;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return l;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static int merge_find(const tok_mergemap *m, int32_t l, int32_t r, int32_t *rank, int32_t *result)
{
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    for (uint32_t i = (uint32_t)mix64(key) & m->mask;; i = (i + 1) & m->mask) {
        const tok_merge_slot *s = &m->slots[i];
        if (s->key == UINT64_MAX)
            return 0;
        if (s->key == key) {
            *rank = s->rank;
            *result = s->result;
            return 1;
        }
    }
}

int tok_fffd_init(mdl_tokenizer *t, dev_err *err)
{
    int32_t whole = t->kind == TOK_KIND_SPM ? tok_strmap_get(t, "\xEF\xBF\xBD", 3) : -1;
    int32_t ef = t->byte_tok[0xEF], bf = t->byte_tok[0xBF], bd = t->byte_tok[0xBD];
    t->n_fffd = 0;
    if (whole >= 0)
        t->fffd[t->n_fffd++] = whole;
    else if (ef >= 0 && bf >= 0 && bd >= 0)
        t->fffd[0] = ef, t->fffd[1] = bf, t->fffd[2] = bd, t->n_fffd = 3;
    else if (t->unk >= 0)
        t->fffd[t->n_fffd++] = t->unk;
    t->no_byte_tok = 1;
    for (int b = 0; b < 256; b++)
        t->no_byte_tok &= t->byte_tok[b] < 0;
    for (int b = 0; b < 256 && t->n_fffd == 0; b++)
        if (t->byte_tok[b] < 0)
            return dev_err_set(err, MEMRA_E_FORMAT,
                               "tokenizer: no byte token for 0x%02X, and neither U+FFFD (its token or the byte tokens "
                               "of EF BF BD) nor an unknown token to stand for it: such text could not be tokenized",
                               b);
    return MEMRA_OK;
}

int tok_bpe_init(mdl_tokenizer *t, const mdl_vocab_src *src, dev_err *err)
{
    uint32_t cps[256];
    tok_bpe_byte_cps(cps);
    memset(t->cp_to_byte, 0xFF, sizeof t->cp_to_byte);
    for (int b = 0; b < 256; b++) {
        char s[2];
        int n = utf8_put(cps[b], s);
        t->byte_tok[b] = tok_strmap_get(t, s, (size_t)n);
        t->cp_to_byte[cps[b]] = (int16_t)b;
    }
    if (src->n_merges && !src->merges)
        return dev_err_set(err, MEMRA_E_FORMAT, "tokenizer.ggml.merges: n_merges=%u but no array", src->n_merges);
    int rc = tok_fffd_init(t, err);
    if (rc)
        return rc;

    uint32_t cap = 1;
    while (cap < 2u * src->n_merges + 2)
        cap <<= 1;
    t->merges.slots = malloc((size_t)cap * sizeof *t->merges.slots);
    if (!t->merges.slots)
        return dev_err_set(err, MEMRA_E_NOMEM, "tokenizer: merge table of %u slots", cap);
    t->merges.mask = cap - 1;
    for (uint32_t i = 0; i < cap; i++)
        t->merges.slots[i].key = UINT64_MAX;

    char *buf = NULL;
    size_t bufcap = 0;
    for (uint32_t r = 0; r < src->n_merges; r++) {
        const char *m = src->merges[r];
        size_t n = src->merge_lens ? src->merge_lens[r] : strlen(m);
        const char *sp = n > 1 ? memchr(m + 1, ' ', n - 1) : NULL; /* split at the first space after byte 0 */
        if (!sp)
            continue;
        size_t nl = (size_t)(sp - m), nr = n - nl - 1;
        int32_t l = tok_strmap_get(t, m, nl), rr = tok_strmap_get(t, sp + 1, nr);
        if (nl + nr > bufcap) {
            bufcap = (nl + nr) * 2;
            char *nb = realloc(buf, bufcap);
            if (!nb) {
                free(buf);
                return dev_err_set(err, MEMRA_E_NOMEM, "tokenizer: merge scratch");
            }
            buf = nb;
        }
        memcpy(buf, m, nl);
        memcpy(buf + nl, sp + 1, nr);
        int32_t res = tok_strmap_get(t, buf, nl + nr);
        if (l < 0 || rr < 0 || res < 0)
            continue; /* a merge over tokens the vocab lacks can never apply */
        uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)rr;
        for (uint32_t i = (uint32_t)mix64(key) & t->merges.mask;; i = (i + 1) & t->merges.mask) {
            tok_merge_slot *s = &t->merges.slots[i];
            if (s->key == key)
                break; /* duplicate merge: the first (lower rank) wins */
            if (s->key == UINT64_MAX) {
                s->key = key;
                s->rank = (int32_t)r;
                s->result = res;
                break;
            }
        }
    }
    free(buf);
    return MEMRA_OK;
}

/* ---- encoding one word ---- */

typedef struct bpe_sym {
    int32_t id;        /* token id (-1: a byte the vocab lacks, never merges) */
    int32_t prev, next; /* neighbours in the live chain, -1 at the ends */
    uint8_t dead;      /* merged into its left neighbour */
} bpe_sym;

typedef struct bpe_pair {
    int32_t rank, left, right, lid, rid;
} bpe_pair;

typedef struct bpe_ctx {
    const mdl_tokenizer *t;
    tok_out *out;
    bpe_sym *sym;
    bpe_pair *heap;
    char *enc;
    size_t sym_cap, heap_cap, enc_cap;
    size_t heap_n;
} bpe_ctx;

static int pair_less(const bpe_pair *a, const bpe_pair *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(bpe_ctx *c, bpe_pair p)
{
    size_t i = c->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_less(&p, &c->heap[parent]))
            break;
        c->heap[i] = c->heap[parent];
        i = parent;
    }
    c->heap[i] = p;
}

static bpe_pair heap_pop(bpe_ctx *c)
{
    bpe_pair top = c->heap[0], last = c->heap[--c->heap_n];
    size_t i = 0, n = c->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const bpe_pair *best = &last;
        if (l < n && pair_less(&c->heap[l], best)) {
            m = l;
            best = &c->heap[l];
        }
        if (l + 1 < n && pair_less(&c->heap[l + 1], best))
            m = l + 1;
        if (m == i)
            break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    if (n)
        c->heap[i] = last;
    return top;
}

static void try_pair(bpe_ctx *c, int32_t l, int32_t r)
{
    tok_work++;
    if (l < 0 || r < 0 || c->sym[l].id < 0 || c->sym[r].id < 0)
        return;
    int32_t rank, res;
    if (merge_find(&c->t->merges, c->sym[l].id, c->sym[r].id, &rank, &res))
        heap_push(c, (bpe_pair){rank, l, r, c->sym[l].id, c->sym[r].id});
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need)
        nc *= 2;
    void *np = realloc(*p, nc * elem);
    if (!np)
        return MEMRA_E_NOMEM;
    *p = np;
    *cap = nc;
    return 0;
}

static int bpe_word(void *vctx, const char *w, size_t n)
{
    bpe_ctx *c = vctx;
    const mdl_tokenizer *t = c->t;
    if (tok_full(c->out))
        return TOK_STOP;
    if (t->pre.ignore_merges) {
        if (grow((void **)&c->enc, &c->enc_cap, 2 * n, 1))
            return MEMRA_E_NOMEM;
        uint32_t cps[256];
        tok_bpe_byte_cps(cps);
        size_t el = 0;
        for (size_t i = 0; i < n; i++)
            el += (size_t)utf8_put(cps[(unsigned char)w[i]], c->enc + el);
        int32_t id = tok_strmap_get(t, c->enc, el);
        if (id >= 0) {
            tok_emit(c->out, id);
            return tok_full(c->out) ? TOK_STOP : 0;
        }
    }
    if (grow((void **)&c->sym, &c->sym_cap, 3 * n, sizeof *c->sym) ||
        grow((void **)&c->heap, &c->heap_cap, 6 * n + 2, sizeof *c->heap))
        return MEMRA_E_NOMEM;
    size_t ns = 0; /* a byte with no byte token becomes U+FFFD's symbols (tok_fffd_init) */
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_tok[(unsigned char)w[i]];
        for (int k = 0, m = id >= 0 ? 1 : t->n_fffd; k < m; k++, ns++)
            c->sym[ns] = (bpe_sym){id >= 0 ? id : t->fffd[k], (int32_t)ns - 1, (int32_t)ns + 1, 0};
    }
    if (ns)
        c->sym[ns - 1].next = -1;
    n = ns;
    c->heap_n = 0;
    for (size_t i = 1; i < n; i++)
        try_pair(c, (int32_t)i - 1, (int32_t)i);
    while (c->heap_n) {
        bpe_pair p = heap_pop(c);
        bpe_sym *L = &c->sym[p.left], *R = &c->sym[p.right];
        if (L->dead || R->dead || L->next != p.right || L->id != p.lid || R->id != p.rid)
            continue; /* stale: one side merged since this pair was queued */
        int32_t rank, res;
        merge_find(&t->merges, p.lid, p.rid, &rank, &res);
        L->id = res;
        L->next = R->next;
        if (R->next >= 0)
            c->sym[R->next].prev = p.left;
        R->dead = 1;
        if (grow((void **)&c->heap, &c->heap_cap, c->heap_n + 2, sizeof *c->heap))
            return MEMRA_E_NOMEM;
        try_pair(c, L->prev, p.left);
        try_pair(c, p.left, L->next);
    }
    for (int32_t i = 0; i >= 0 && (size_t)i < n; i = c->sym[i].next)
        if (c->sym[i].id >= 0)
            tok_emit(c->out, c->sym[i].id);
    return tok_full(c->out) ? TOK_STOP : 0;
}

int tok_bpe_encode(const mdl_tokenizer *t, const char *text, size_t len, tok_out *out)
{
    bpe_ctx c = {.t = t, .out = out};
    int rc = tok_pretok_split(&t->pre, text, len, bpe_word, &c);
    free(c.sym);
    free(c.heap);
    free(c.enc);
    return rc == TOK_STOP ? 0 : rc;
}

int tok_bpe_piece(const mdl_tokenizer *t, int32_t id, char *buf, int cap)
{
    const unsigned char *s = (const unsigned char *)t->text[id];
    size_t n = t->len[id];
    int w = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = utf8_get(s + i, n - i, &cp);
        if (cp < 324 && t->cp_to_byte[cp] >= 0) {
            if (w < cap)
                buf[w] = (char)t->cp_to_byte[cp];
            w++;
        } else { /* not a byte symbol: copy as written */
            for (int k = 0; k < l; k++, w++)
                if (w < cap)
                    buf[w] = (char)s[i + k];
        }
        i += (size_t)l;
    }
    return w;
}
