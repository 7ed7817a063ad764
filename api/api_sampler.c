/* Sampling helpers over model/sampler.h. A memra_sampler is used by one thread at a time (its owner). */
#include <stdlib.h>

#include "api/api_internal.h"
#include "model/sampler.h"

struct memra_sampler {
    mdl_sampler *s;
    int n_vocab;
};

memra_sampler_params memra_sampler_default_params(void)
{
    mdl_sampler_params d = mdl_sampler_default_params();
    memra_sampler_params p = {.temperature = d.temperature, .top_k = d.top_k, .top_p = d.top_p, .min_p = d.min_p,
                              .repeat_penalty = d.repeat_penalty, .freq_penalty = d.freq_penalty,
                              .presence_penalty = d.presence_penalty, .repeat_last_n = d.repeat_last_n,
                              .min_keep = d.min_keep, .seed = d.seed};
    return p;
}

memra_sampler_params memra_sampler_greedy_params(void)
{
    memra_sampler_params p = memra_sampler_default_params();
    p.temperature = 0.0f;
    return p;
}

memra_sampler *memra_sampler_create(const memra_sampler_params *params, int n_vocab)
{
    memra_sampler_params p = params ? *params : memra_sampler_default_params();
    mdl_sampler_params m = {.temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p, .min_p = p.min_p,
                            .repeat_penalty = p.repeat_penalty, .freq_penalty = p.freq_penalty,
                            .presence_penalty = p.presence_penalty, .repeat_last_n = p.repeat_last_n,
                            .min_keep = p.min_keep, .seed = p.seed};
    dev_err err = {0};
    if (n_vocab < 1) {
        api_fail(NULL, MEMRA_E_INVAL, "memra_sampler_create: n_vocab = %d (need >= 1)", n_vocab);
        return NULL;
    }
    memra_sampler *s = malloc(sizeof *s);
    if (!s) {
        api_fail(NULL, MEMRA_E_NOMEM, "memra_sampler_create: out of host memory");
        return NULL;
    }
    if (!(s->s = mdl_sampler_create(&m, n_vocab, &err))) {
        free(s);
        api_fail_err(NULL, &err);
        return NULL;
    }
    s->n_vocab = n_vocab;
    return s;
}

void memra_sampler_free(memra_sampler *s)
{
    if (!s)
        return;
    mdl_sampler_destroy(s->s);
    free(s);
}

memra_token memra_sampler_sample(memra_sampler *s, const float *logits)
{
    if (!s || !logits)
        return api_fail(NULL, MEMRA_E_INVAL, "memra_sampler_sample: NULL sampler or logits");
    int32_t t = mdl_sampler_sample(s->s, logits);
    if (t < 0)
        return api_fail(NULL, MEMRA_E_INVAL, "memra_sampler_sample: no candidate (every logit is -inf or NaN)");
    return t;
}

void memra_sampler_accept(memra_sampler *s, memra_token token)
{
    if (s && token >= 0 && token < s->n_vocab)
        mdl_sampler_accept(s->s, token);
}

void memra_sampler_reset(memra_sampler *s)
{
    if (s)
        mdl_sampler_reset(s->s);
}

memra_token memra_argmax(const float *logits, int n)
{
    return logits ? mdl_argmax(logits, n) : -1;
}
