/* Special-token matching in raw text: a trie over the texts of the special tokens (control, user-defined,
 * unknown), so the leftmost-longest match at a position costs one step per byte of the longest special
 * text that starts there, whatever the number of special tokens. Edges are an open-addressing map
 * (node, byte) -> child; each node knows the special ids whose text ends there. Built once by
 * mdl_tokenizer_create, read-only afterwards: no shared mutable state. */
#include <stdlib.h>
#include <string.h>

#include "model/tok_internal.h"

static uint32_t edge_slot(const tok_trie *tr, uint64_t key)
{
    uint64_t h = key * 0x9E3779B97F4A7C15ULL;
    return (uint32_t)(h >> 32) & tr->mask;
}

static int32_t trie_child(const tok_trie *tr, int32_t node, unsigned char b)
{
    uint64_t key = (uint64_t)(uint32_t)node << 8 | b;
    for (uint32_t i = edge_slot(tr, key);; i = (i + 1) & tr->mask) {
        if (tr->edges[i].child < 0)
            return -1;
        if (tr->edges[i].key == key)
            return tr->edges[i].child;
    }
}

int tok_special_init(mdl_tokenizer *t, dev_err *err)
{
    tok_trie *tr = &t->trie;
    size_t bytes = 0;
    for (int k = 0; k < t->n_special; k++)
        bytes += t->len[t->special[k]];
    if (bytes >= INT32_MAX / 4)
        return dev_err_set(err, MEMRA_E_FORMAT, "tokenizer: special tokens hold %zu bytes of text (at most %d)",
                           bytes, INT32_MAX / 4);
    uint32_t cap = 1;
    while (cap < 2 * bytes + 2)
        cap <<= 1;
    tr->mask = cap - 1;
    tr->edges = malloc((size_t)cap * sizeof *tr->edges);
    tr->id_any = malloc((bytes + 1) * sizeof *tr->id_any);
    tr->id_user = malloc((bytes + 1) * sizeof *tr->id_user);
    if (!tr->edges || !tr->id_any || !tr->id_user)
        return dev_err_set(err, MEMRA_E_NOMEM, "tokenizer: special-token trie of %zu nodes", bytes + 1);
    for (uint32_t i = 0; i < cap; i++)
        tr->edges[i].child = -1;
    tr->id_any[0] = tr->id_user[0] = -1;
    int32_t n_nodes = 1;
    for (int k = 0; k < t->n_special; k++) { /* ids ascend, so the first id of a text is the lowest */
        int32_t id = t->special[k], node = 0;
        const unsigned char *s = (const unsigned char *)t->text[id];
        for (uint32_t j = 0; j < t->len[id]; j++) {
            int32_t c = trie_child(tr, node, s[j]);
            if (c < 0) {
                uint64_t key = (uint64_t)(uint32_t)node << 8 | s[j];
                uint32_t i = edge_slot(tr, key);
                while (tr->edges[i].child >= 0)
                    i = (i + 1) & tr->mask;
                c = n_nodes++;
                tr->edges[i].key = key;
                tr->edges[i].child = c;
                tr->id_any[c] = tr->id_user[c] = -1;
            }
            node = c;
        }
        if (tr->id_any[node] < 0)
            tr->id_any[node] = id;
        if (t->type[id] == MDL_TOKEN_USER_DEFINED && tr->id_user[node] < 0)
            tr->id_user[node] = id;
    }
    return MEMRA_OK;
}

void tok_special_free(mdl_tokenizer *t)
{
    free(t->trie.edges);
    free(t->trie.id_any);
    free(t->trie.id_user);
    memset(&t->trie, 0, sizeof t->trie);
}

int32_t tok_special_match(const mdl_tokenizer *t, const char *s, size_t n, int parse_special)
{
    const tok_trie *tr = &t->trie;
    if (!tr->edges)
        return -1;
    const int32_t *ids = parse_special ? tr->id_any : tr->id_user;
    int32_t node = 0, best = -1;
    for (size_t j = 0; j < n; j++) {
        tok_work++;
        if ((node = trie_child(tr, node, (unsigned char)s[j])) < 0)
            break;
        if (ids[node] >= 0)
            best = ids[node];
    }
    return best;
}
