/* Token sampler over a host logits vector (n_vocab floats). Steps, in llama.cpp's default chain order:
 *   1. penalties over the last repeat_last_n accepted tokens: repetition (logit > 0 ? l / r : l * r),
 *      then frequency (- count * f) and presence (- p when seen);
 *   2. temperature <= 0: greedy, the argmax (lowest id on ties) — steps 3..6 are skipped;
 *   3. top-k: keep the k highest logits;
 *   4. top-p: softmax (temperature 1), keep the smallest prefix of the sorted tokens whose probability
 *      sum reaches top_p;
 *   5. min-p: keep tokens with p >= min_p * p_max;
 *   6. temperature: logits / temperature, softmax, draw one token with the sampler's own RNG
 *      (xoshiro256**, seeded by splitmix64 from seed: same seed + same logits -> same tokens).
 * Every filter keeps at least min_keep tokens. Ties are broken by the lower id, so results never depend on
 * the sort implementation. One sampler per sequence; not thread-safe (one thread calls it at a time). */
#ifndef MDL_SAMPLER_H
#define MDL_SAMPLER_H

#include <stddef.h>
#include <stdint.h>
#include "device/err.h"

typedef struct mdl_sampler_params {
    float temperature;      /* <= 0: greedy; default 0.8 */
    int32_t top_k;          /* <= 0: off; default 40 */
    float top_p;            /* >= 1: off; (0, 1); default 0.95 */
    float min_p;            /* <= 0: off; [0, 1]; default 0.05 */
    float repeat_penalty;   /* 1: off; > 0; default 1.0 */
    float freq_penalty;     /* 0: off; default 0 */
    float presence_penalty; /* 0: off; default 0 */
    int32_t repeat_last_n;  /* penalty window in accepted tokens; 0: off; default 64 */
    int32_t min_keep;       /* >= 1; default 1 */
    uint64_t seed;          /* default 0x6d656d7261 ("memra") */
} mdl_sampler_params;

typedef struct mdl_sampler mdl_sampler;

/* llama.cpp's defaults (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, no penalties, window 64). */
mdl_sampler_params mdl_sampler_default_params(void);

/* Check params (the message names the field and its allowed range) and allocate work space for n_vocab
 * candidates (~12 bytes each). NULL + err on a bad field or no memory. */
mdl_sampler *mdl_sampler_create(const mdl_sampler_params *p, int32_t n_vocab, dev_err *err);
void mdl_sampler_destroy(mdl_sampler *s);

/* Pick one token from logits (n_vocab floats, read only; NaN counts as -inf). Does not record it:
 * call mdl_sampler_accept with the token the caller keeps. Returns the id, or MEMRA_E_INVAL (NULL
 * logits, all -inf/NaN). Cost: O(n_vocab) + O(k log k) with top-k, O(n log n) sort when top-p runs
 * without top-k. */
int32_t mdl_sampler_sample(mdl_sampler *s, const float *logits);

/* Append a token (prompt or generated) to the penalty history (a ring of repeat_last_n). */
void mdl_sampler_accept(mdl_sampler *s, int32_t token);

/* Forget the history and restart the RNG from the seed. */
void mdl_sampler_reset(mdl_sampler *s);

/* Index of the largest of n values (lowest index on ties; NaN never wins); -1 when n <= 0. */
int32_t mdl_argmax(const float *x, int32_t n);

#endif
