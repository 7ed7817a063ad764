/* memra-run's generation loops over the pipeline runtime (actors/pp.h): chunked prime with the chunk
 * pipeline, plain decode, several sequences in flight at once, and greedy speculative decoding with the
 * prompt-lookup drafter. One submitting thread (main). */
#ifndef RUN_GEN_H
#define RUN_GEN_H

#include <stdint.h>
#include "actors/pp.h"
#include "model/sampler.h"
#include "model/tokenizer.h"

typedef struct gen_seq {
    int32_t *toks;     /* prompt then generated tokens (cap n_ctx) */
    int n_prompt, n;   /* prompt length, tokens so far */
    int done;          /* stopped: end of generation, -n reached or context full */
    mdl_sampler *smp;
    char *out;         /* generated text, for several prompts (printed at the end) */
    size_t out_len, out_cap;
} gen_seq;

typedef struct gen_stats {
    double prime_s, decode_s;
    int prompt_tokens, gen_tokens;
    int steps;               /* decode/verify steps submitted */
    int drafted, accepted;   /* speculative: draft tokens proposed and accepted */
} gen_stats;

typedef struct gen_params {
    int n_predict;   /* tokens to generate per sequence */
    int chunk;       /* prime chunk rows */
    int spec;        /* draft tokens per verify (0 = off; greedy only) */
    int stream;      /* 1: print each sequence-0 piece to stdout as it comes */
} gen_params;

/* Prime every sequence's prompt (slot i = sequence i), then generate until each is done. seqs[i].toks
 * holds the prompt on entry. Returns 0 or MEMRA_E_* with err. */
int gen_run(act_pp *rt, const mdl_tokenizer *tk, gen_seq *seqs, int n_seqs, int n_ctx, const gen_params *gp,
            gen_stats *st, dev_err *err);

#endif
