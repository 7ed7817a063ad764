/* memra-run's generation over the public API (include/memra/memra.h): several prompts as requests of
 * memra_generate (all in flight at once), or greedy speculative decoding of one prompt with the
 * prompt-lookup drafter and memra_seq_verify. One thread. */
#ifndef RUN_GEN_H
#define RUN_GEN_H

#include "memra/memra.h"

typedef struct gen_out {
    char *text;     /* generated text of one prompt, NUL-terminated */
    size_t len, cap;
    size_t printed; /* bytes of text already on stdout (several prompts: whole lines, as they complete) */
    int n_tokens;   /* tokens generated */
    int ctx_full;   /* 1: generation stopped where the context filled (an end, as at n_predict) */
} gen_out;

typedef struct gen_stats {
    double seconds;          /* prime + generation */
    double first_s;          /* start to the first generated token (prime + its sampling); 0 = none came */
    int prompt_tokens, gen_tokens;
    int steps;               /* speculative: verify steps */
    int drafted, accepted;   /* speculative: draft tokens proposed and accepted */
    int failed;              /* 1-based prompt whose request failed first (its status is gen_run's), 0: none */
} gen_stats;

/* Generate for n prompts (token arrays), text to stdout as it comes. stream (one prompt): request 0's
 * pieces as they come, unprefixed. Else each request's text collects in outs[i] and every line of it goes
 * out as soon as it is complete, prefixed "[i] " (i = the prompt's 1-based number), so interleaved requests
 * stay readable; each request's last partial line follows when the run ends, however it ends (done,
 * failed, or stopped by the runtime's abort callback). spec > 0: speculative greedy, one prompt only.
 * A request whose context fills ends there, as at n_predict (outs[i].ctx_full says which did).
 * Returns MEMRA_OK or the API's status (memra_runtime_last_error says why; st->failed which prompt). */
int gen_run(memra_runtime *rt, const memra_model *m, memra_token **prompts, const int *n_prompt, int n,
            int n_predict, int chunk, const memra_sampler_params *sp, int spec, int stream, gen_out *outs,
            gen_stats *st);

#endif
