/* Private to model/gguf_synth*.c: the synthetic vocabulary. */
#ifndef MDL_GGUF_SYNTH_IMPL_H
#define MDL_GGUF_SYNTH_IMPL_H

#include "model/gguf_synth.h"

#define MDL_SYNTH_N_SPECIAL 3 /* <|endoftext|> (0, unknown), <|im_start|> (1, bos), <|im_end|> (2, eos) */

typedef struct mdl_synth_vocab {
    int n;            /* tokens */
    char **tokens;    /* n owned UTF-8 strings */
    int32_t *types;   /* n llama token types: 1 normal, 3 control, 5 unused */
    char **merges;    /* n_merges owned "left right" strings, rank order */
    int n_merges;
} mdl_synth_vocab;

/* Build the vocabulary of n_vocab tokens. Returns 0 or MEMRA_E_INVAL / MEMRA_E_NOMEM. */
int mdl_synth_vocab_build(mdl_synth_vocab *v, int n_vocab, dev_err *err);
void mdl_synth_vocab_free(mdl_synth_vocab *v);

#endif
