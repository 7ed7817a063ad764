/* Private to model/tok_*.c and model/tokenizer.c: the tokenizer's tables and the per-call scratch.
 * Everything in mdl_tokenizer is written once by mdl_tokenizer_create and only read afterwards, so any
 * number of threads may tokenize concurrently (each call owns its tok_out and scratch). */
#ifndef MDL_TOK_INTERNAL_H
#define MDL_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "device/err.h"
#include "model/tokenizer.h"

enum { TOK_KIND_BPE = 1, TOK_KIND_SPM = 2 };

#define TOK_MAX_REGEX 4

/* Open-addressing hash map, string (a token's text) -> token id. Keys point into mdl_tokenizer.text. */
typedef struct tok_strmap {
    uint32_t mask;    /* capacity - 1 (capacity is a power of two) */
    int32_t *slots;   /* token id or -1 (empty) */
    uint32_t *hashes; /* full hash of the slot's key (skips most string compares) */
} tok_strmap;

/* Open-addressing hash map, (left id, right id) -> (rank, merged id): the BPE merge table. */
typedef struct tok_merge_slot {
    uint64_t key;     /* (uint64)left << 32 | right; UINT64_MAX = empty */
    int32_t rank;     /* merge priority: lower merges first (its line number in tokenizer.ggml.merges) */
    int32_t result;   /* id of left+right */
} tok_merge_slot;

typedef struct tok_mergemap {
    uint32_t mask;
    tok_merge_slot *slots;
} tok_mergemap;

/* The special-token trie: node 0 is the root; edges map (node, byte) -> child. */
typedef struct tok_trie_edge {
    uint64_t key;     /* (uint64)node << 8 | byte */
    int32_t child;    /* -1 = empty slot */
} tok_trie_edge;

typedef struct tok_trie {
    uint32_t mask;          /* edge capacity - 1 (a power of two, at least twice the edges) */
    tok_trie_edge *edges;
    int32_t *id_any;        /* per node: lowest special id whose text ends here, or -1 */
    int32_t *id_user;       /* per node: lowest user-defined id whose text ends here, or -1 */
} tok_trie;

/* The pre-tokenizer: a sequence of regexes, each splitting every fragment left by the previous one
 * (matches and the gaps between them both stay fragments, as llama.cpp and HF's Split(Isolated) do). */
typedef struct tok_pretok {
    int n;                              /* number of regexes (0 = the whole text is one word) */
    void *code[TOK_MAX_REGEX];          /* pcre2_code_8 *, compiled with UTF | UCP */
    int ignore_merges;                  /* llama3: a word that is a whole token is emitted without merging */
} tok_pretok;

struct mdl_tokenizer {
    int kind;                /* TOK_KIND_BPE or TOK_KIND_SPM */
    int32_t n_vocab;
    char **text;             /* text[id]: token text as stored in the vocab (byte-level encoded for BPE), NUL-ended */
    uint32_t *len;           /* byte length of text[id] */
    uint32_t max_len;        /* longest token text (a piece is never longer) */
    int8_t *type;            /* MDL_TOKEN_* per id */
    float *score;            /* SPM scores (0 when the vocab has none) */
    tok_strmap vocab;        /* text -> id */
    tok_mergemap merges;     /* BPE only */
    tok_pretok pre;          /* BPE only */
    int32_t byte_tok[256];   /* BPE: id of the byte-level symbol of byte b; SPM: id of <0xXX> or -1 */
    int32_t fffd[3];         /* what stands for a byte with no byte token (U+FFFD): see tok_fffd_init */
    int n_fffd;              /* 1..3 ids in fffd (BPE: the byte tokens of EF BF BD, merged as words are) */
    int no_byte_tok;         /* the vocab has no byte token at all (SPM: one stand-in per unknown character) */
    int16_t cp_to_byte[324]; /* BPE: byte-level codepoint -> byte (-1 when not a byte symbol) */
    int32_t *special;        /* ids matched in raw text (control, user-defined, unknown), ascending */
    int n_special;
    uint8_t special_first[256]; /* special_first[b]: some special token starts with byte b */
    tok_trie trie;           /* the texts of special[], for leftmost-longest matching */
    uint8_t *eog;            /* eog[id] != 0: ends generation */
    int32_t bos, eos, unk, pad;
    int add_bos, add_eos, add_space_prefix;
    char *chat_template;
};

/* Output with the mdl_tokenize contract: ids beyond cap are counted, not written; with cap > 0 the
 * encoders stop once more than cap ids are out (tok_full), so the work is bounded by cap. */
typedef struct tok_out {
    int32_t *ids;
    int cap;
    int n;
} tok_out;

static inline void tok_emit(tok_out *o, int32_t id)
{
    if (o->n < o->cap)
        o->ids[o->n] = id;
    o->n++;
}

/* The calling thread's tokenizer work counter: bytes the pre-tokenizer validates and hands to the regex
 * engine up to each match, BPE/SPM merge candidates evaluated, and bytes stepped by special-token matching.
 * Every step of a call is one of those, so the counter is the cost model that tests check for linear
 * growth (a 2x text costs at most ~2x). Thread-local: tokenizing threads never share it. */
extern _Thread_local uint64_t tok_work;

/* Whether tokenizing stops here: cap > 0 and more than cap ids are out (cap 0 asks for the whole count). */
static inline int tok_full(const tok_out *o)
{
    return o->cap > 0 && o->n > o->cap;
}

/* What a word callback returns to stop tok_pretok_split once the output is full (not an error). */
#define TOK_STOP 1

/* hashing and maps (tokenizer.c) */
uint32_t tok_hash(const char *s, size_t n);
int32_t tok_strmap_get(const mdl_tokenizer *t, const char *s, size_t n);

/* The stand-in of a byte the vocab has no byte token for: U+FFFD's text as one token when the vocab has
 * it (SPM), else the byte tokens of EF BF BD, else unk. Returns MEMRA_E_FORMAT naming the byte when some
 * byte lacks a token and the vocab has none of these (no text may be dropped). (tok_bpe.c) */
int tok_fffd_init(mdl_tokenizer *t, dev_err *err);

/* byte-level BPE (tok_bpe.c) */
void tok_bpe_byte_cps(uint32_t cp_of_byte[256]);
int tok_bpe_init(mdl_tokenizer *t, const mdl_vocab_src *src, dev_err *err);
int tok_bpe_encode(const mdl_tokenizer *t, const char *text, size_t len, tok_out *out);
int tok_bpe_piece(const mdl_tokenizer *t, int32_t id, char *buf, int cap);

/* SentencePiece-style BPE (tok_spm.c) */
int tok_spm_init(mdl_tokenizer *t, dev_err *err);
int tok_spm_encode(const mdl_tokenizer *t, const char *text, size_t len, int prefix_space, tok_out *out);
int tok_spm_piece(const mdl_tokenizer *t, int32_t id, char *buf, int cap);

/* special tokens (tok_special.c) */
int tok_special_init(mdl_tokenizer *t, dev_err *err); /* the trie of special[0..n_special) */
void tok_special_free(mdl_tokenizer *t);
/* The longest special token whose text starts s[0..n) (among user-defined ones only unless parse_special;
 * the lowest id among equal texts), or -1. Cost: one trie step per byte matched. */
int32_t tok_special_match(const mdl_tokenizer *t, const char *s, size_t n, int parse_special);

/* pre-tokenizer (tok_pretok.c) */
int tok_pretok_init(tok_pretok *p, const char *pre, dev_err *err);
void tok_pretok_free(tok_pretok *p);
/* Split text into words; calls fn(ctx, word, word_len) in order as each is found; stops at the first
 * non-zero return and returns it (or MEMRA_E_NOMEM / MEMRA_E_INVAL). */
typedef int (*tok_word_fn)(void *ctx, const char *word, size_t len);
int tok_pretok_split(const tok_pretok *p, const char *text, size_t len, tok_word_fn fn, void *ctx);

#endif
