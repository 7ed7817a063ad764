/* Test-only glue: fill an mdl_vocab_src from a GGUF's tokenizer.* keys through the model's GGUF reader
 * (model/gguf.h). The lead's runtime glue will do the same; this one lives with the tokenizer tests. */
#ifndef TESTS_TOK_GGUF_VOCAB_H
#define TESTS_TOK_GGUF_VOCAB_H

#include <stddef.h>
#include "model/gguf.h"
#include "model/tokenizer.h"

typedef struct tok_gguf_vocab {
    mdl_vocab_src src;        /* filled by load; its pointers live until tok_gguf_vocab_free */
    mdl_gguf *g;              /* the open file (owned when opened by tok_gguf_vocab_load) */
    int own_g;
    const char **tokens, **merges;
    size_t *token_lens, *merge_lens;
    char *model, *pre, *tmpl; /* NUL-terminated copies */
} tok_gguf_vocab;

/* Read the tokenizer keys of an open GGUF (borrowed: keep g open while v is used). Returns 0, or
 * MEMRA_E_FORMAT naming a missing/mistyped key, MEMRA_E_NOMEM. Call tok_gguf_vocab_free also on failure. */
int tok_gguf_vocab_from(mdl_gguf *g, tok_gguf_vocab *v, dev_err *err);
/* Open path with mdl_gguf_open and read its tokenizer keys (v owns the file). */
int tok_gguf_vocab_load(const char *path, tok_gguf_vocab *v, dev_err *err);
void tok_gguf_vocab_free(tok_gguf_vocab *v);

#endif
