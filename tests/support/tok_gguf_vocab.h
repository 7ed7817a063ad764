/* Test-only: read just the tokenizer.* keys of a GGUF into an mdl_vocab_src, so tokenizer tests do not
 * depend on the model's GGUF reader. Minimal (GGUF v2/v3, little-endian), mmap-based. */
#ifndef TESTS_TOK_GGUF_VOCAB_H
#define TESTS_TOK_GGUF_VOCAB_H

#include <stddef.h>
#include "model/tokenizer.h"

typedef struct tok_gguf_vocab {
    mdl_vocab_src src;   /* filled by load; its pointers live until tok_gguf_vocab_free */
    void *map;           /* the mapped file */
    size_t map_len;
    void *owned[12];      /* arrays and strings this struct allocated */
} tok_gguf_vocab;

/* Map path and fill v->src from its tokenizer.* keys. Returns 0 or MEMRA_E_IO / MEMRA_E_FORMAT / NOMEM. */
/* (call tok_gguf_vocab_free also after a failed load) */
int tok_gguf_vocab_load(const char *path, tok_gguf_vocab *v, dev_err *err);
void tok_gguf_vocab_free(tok_gguf_vocab *v);

#endif
