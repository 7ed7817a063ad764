/* Prompt-lookup drafter for speculative decoding: propose the tokens that followed the most recent earlier
 * occurrence of the sequence's last n tokens (n from max_ngram down to 1). Cheap (a backwards scan), needs
 * no draft model, and wins on text that repeats its context (code, quotes, lists, chat with the prompt's
 * words). The verifier decides: a draft never changes the output, only how many steps it takes. */
#ifndef MDL_DRAFT_H
#define MDL_DRAFT_H

#include <stdint.h>

/* Writes up to max_draft proposed tokens that would follow hist[0..n_hist) into out; returns how many (0
 * when no n-gram of length >= min_ngram recurs). Looks back at most `window` tokens (0 = the whole history).
 * Cost: O(window * max_ngram). */
int mdl_draft_lookup(const int32_t *hist, int n_hist, int min_ngram, int max_ngram, int window, int32_t *out,
                     int max_draft);

#endif
