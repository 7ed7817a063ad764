/* memra-run's generation over the public API (include/memra/memra.h): several prompts as requests of
 * memra_generate (all in flight at once), or greedy speculative decoding of one prompt with the
 * prompt-lookup drafter and memra_seq_verify. One thread. */
#ifndef RUN_GEN_H
#define RUN_GEN_H

#include "memra/memra.h"

typedef struct gen_out {
    char *text; /* generated text of one prompt (several prompts: printed at the end) */
    size_t len, cap;
} gen_out;

typedef struct gen_stats {
    double seconds;          /* prime + generation */
    double first_s;          /* start to the first generated token (prime + its sampling); 0 = none came */
    int prompt_tokens, gen_tokens;
    int steps;               /* speculative: verify steps */
    int drafted, accepted;   /* speculative: draft tokens proposed and accepted */
} gen_stats;

/* Generate for n prompts (token arrays). stream: print request 0's pieces to stdout as they come (one
 * prompt); else each request's text lands in outs[i]. spec > 0: speculative greedy, one prompt only.
 * Returns MEMRA_OK or the API's status (memra_runtime_last_error says why). */
int gen_run(memra_runtime *rt, const memra_model *m, memra_token **prompts, const int *n_prompt, int n,
            int n_predict, int chunk, const memra_sampler_params *sp, int spec, int stream, gen_out *outs,
            gen_stats *st);

#endif
