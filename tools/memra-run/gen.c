#include "gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/draft.h"
#include "model/llama.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void emit(const mdl_tokenizer *tk, gen_seq *s, int32_t tok, int stream)
{
    char piece[256];
    int n = mdl_token_to_piece(tk, tok, piece, sizeof piece, 0);
    if (n <= 0)
        return;
    if (stream) {
        fwrite(piece, 1, (size_t)n, stdout);
        fflush(stdout);
        return;
    }
    if (s->out_len + (size_t)n + 1 > s->out_cap) {
        size_t cap = (s->out_cap + (size_t)n + 1) * 2;
        char *o = realloc(s->out, cap);
        if (!o)
            return;
        s->out = o, s->out_cap = cap;
    }
    memcpy(s->out + s->out_len, piece, (size_t)n);
    s->out_len += (size_t)n;
    s->out[s->out_len] = '\0';
}

/* Append tok to s; stop on end of generation, the -n budget or a full context. */
static void accept_token(const mdl_tokenizer *tk, gen_seq *s, int32_t tok, int n_ctx, const gen_params *gp,
                         int stream)
{
    if (s->done)
        return;
    if (mdl_tokenizer_is_eog(tk, tok)) {
        s->done = 1;
        return;
    }
    s->toks[s->n++] = tok;
    mdl_sampler_accept(s->smp, tok);
    emit(tk, s, tok, stream);
    if (s->n - s->n_prompt >= gp->n_predict || s->n >= n_ctx)
        s->done = 1;
}

/* Prime all prompts: every chunk of every sequence submitted back to back (the chunk pipeline), then the
 * last chunk's logits of each sequence sampled into its first generated token. */
static int prime_all(act_pp *rt, const mdl_tokenizer *tk, gen_seq *seqs, int n_seqs, int n_ctx,
                     const gen_params *gp, gen_stats *st, dev_err *err)
{
    int C = gp->chunk, r = 0, total = 0;
    for (int i = 0; i < n_seqs; i++)
        total += (seqs[i].n_prompt + C - 1) / C;
    act_pending **pd = calloc((size_t)total, sizeof *pd);
    int *owner = calloc((size_t)total, sizeof *owner);
    int32_t *seq = malloc((size_t)C * sizeof *seq), *pos = malloc((size_t)C * sizeof *pos);
    if (!pd || !owner || !seq || !pos) {
        r = dev_err_set(err, MEMRA_E_NOMEM, "out of memory");
        goto done;
    }
    int k = 0;
    for (int i = 0; i < n_seqs && r == 0; i++)
        for (int c0 = 0; c0 < seqs[i].n_prompt && r == 0; c0 += C, k++) {
            int n = seqs[i].n_prompt - c0 < C ? seqs[i].n_prompt - c0 : C;
            for (int j = 0; j < n; j++)
                seq[j] = i, pos[j] = c0 + j;
            act_pp_step s = {.kind = ACT_STEP_PRIME, .B = n, .tokens = seqs[i].toks + c0, .seq = seq, .pos = pos,
                             .logits = c0 + n == seqs[i].n_prompt ? ACT_LOGITS_LAST : ACT_LOGITS_NONE};
            owner[k] = i;
            r = act_pp_submit(rt, &s, &pd[k], err);
        }
    for (int j = 0; j < total; j++) {
        if (!pd[j])
            continue;
        const float *l;
        int rows, w = act_pending_wait(pd[j], &l, &rows, err);
        if (w == 0 && rows == 1 && r == 0) {
            gen_seq *s = &seqs[owner[j]];
            accept_token(tk, s, mdl_sampler_sample(s->smp, l), n_ctx, gp, gp->stream && owner[j] == 0);
        }
        r = r ? r : w;
        act_pending_release(pd[j]);
    }
    for (int i = 0; i < n_seqs; i++)
        st->prompt_tokens += seqs[i].n_prompt;
done:
    free(pd), free(owner), free(seq), free(pos);
    return r;
}

/* Several sequences in flight: one pending per live sequence, resubmitted as soon as it is drained. */
static int decode_all(act_pp *rt, const mdl_tokenizer *tk, gen_seq *seqs, int n_seqs, int n_ctx,
                      const gen_params *gp, gen_stats *st, dev_err *err)
{
    act_pending *pd[64] = {0};
    int32_t seq_id[64], pos[64];
    int r = 0, live = 0;
    for (int i = 0; i < n_seqs && r == 0; i++) {
        seq_id[i] = i;
        if (seqs[i].done)
            continue;
        pos[i] = seqs[i].n - 1;
        act_pp_step s = {.kind = ACT_STEP_EAGER, .B = 1, .tokens = &seqs[i].toks[pos[i]], .seq = &seq_id[i],
                         .pos = &pos[i], .logits = ACT_LOGITS_ALL};
        if ((r = act_pp_submit(rt, &s, &pd[i], err)) == 0)
            live++, st->steps++;
    }
    for (int i = 0; live > 0; i = (i + 1) % n_seqs) {
        if (!pd[i])
            continue;
        const float *l;
        int w = act_pending_wait(pd[i], &l, NULL, err);
        if (w == 0 && r == 0)
            accept_token(tk, &seqs[i], mdl_sampler_sample(seqs[i].smp, l), n_ctx, gp, gp->stream && i == 0);
        act_pending_release(pd[i]);
        pd[i] = NULL;
        live--;
        r = r ? r : w;
        if (r == 0 && !seqs[i].done) {
            pos[i] = seqs[i].n - 1;
            act_pp_step s = {.kind = ACT_STEP_EAGER, .B = 1, .tokens = &seqs[i].toks[pos[i]], .seq = &seq_id[i],
                             .pos = &pos[i], .logits = ACT_LOGITS_ALL};
            if ((r = act_pp_submit(rt, &s, &pd[i], err)) == 0)
                live++, st->steps++;
        }
    }
    return r;
}

static int32_t argmax_row(const float *x, int n)
{
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

/* Greedy speculative decoding of sequence 0: verify [last token, d1..dk] in one SPEC step, keep the drafts
 * the model agrees with plus its own next token. The output is exactly plain greedy's. */
static int decode_spec(act_pp *rt, const mdl_tokenizer *tk, gen_seq *s, int n_ctx, const gen_params *gp,
                       gen_stats *st, dev_err *err)
{
    int K = gp->spec, n_vocab = mdl_model_hparams(act_pp_model(rt))->n_vocab, r = 0;
    int32_t rows[65], seq[65] = {0}, pos[65];
    while (!s->done && r == 0) {
        int p = s->n - 1; /* position of the last token, not yet in the cache */
        int room = n_ctx - 1 - p;
        int k = mdl_draft_lookup(s->toks, s->n, 1, 3, 1024, rows + 1, K < room ? K : room);
        rows[0] = s->toks[p];
        for (int i = 0; i <= k; i++)
            pos[i] = p + i;
        act_pp_step step = {.kind = ACT_STEP_SPEC, .B = k + 1, .tokens = rows, .seq = seq, .pos = pos,
                            .logits = ACT_LOGITS_ALL};
        act_pending *pd;
        const float *l;
        if ((r = act_pp_submit(rt, &step, &pd, err)) != 0)
            break;
        st->steps++;
        st->drafted += k;
        if ((r = act_pending_wait(pd, &l, NULL, err)) == 0)
            for (int i = 0; i <= k && !s->done; i++) {
                int32_t want = argmax_row(l + (size_t)i * (size_t)n_vocab, n_vocab);
                accept_token(tk, s, want, n_ctx, gp, gp->stream);
                if (i == k || want != rows[i + 1])
                    break;
                st->accepted++;
            }
        act_pending_release(pd);
    }
    return r;
}

int gen_run(act_pp *rt, const mdl_tokenizer *tk, gen_seq *seqs, int n_seqs, int n_ctx, const gen_params *gp,
            gen_stats *st, dev_err *err)
{
    memset(st, 0, sizeof *st);
    double t0 = now_s();
    int r = prime_all(rt, tk, seqs, n_seqs, n_ctx, gp, st, err);
    double t1 = now_s();
    int before = 0;
    for (int i = 0; i < n_seqs; i++)
        before += seqs[i].n - seqs[i].n_prompt;
    if (r == 0)
        r = gp->spec > 0 ? decode_spec(rt, tk, &seqs[0], n_ctx, gp, st, err)
                         : decode_all(rt, tk, seqs, n_seqs, n_ctx, gp, st, err);
    st->prime_s = t1 - t0;
    st->decode_s = now_s() - t1;
    for (int i = 0; i < n_seqs; i++)
        st->gen_tokens += seqs[i].n - seqs[i].n_prompt;
    st->gen_tokens -= before; /* the first token of each sequence came from the prime */
    return r;
}
