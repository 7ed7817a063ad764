/* Submitting steps (prime, decode and its greedy twin, verify, batch) and the pendings. Every act_pp_submit
 * runs under rt->mu (the pipeline takes one submitting thread at a time); waits take no runtime lock (the
 * act_pending's own lock orders the logits handoff from the readback actor to the waiting thread). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

int api_should_abort(memra_runtime *rt)
{
    if (rt->abort_cb && rt->abort_cb(rt->abort_user)) {
        api_fail(&rt->err, MEMRA_E_ABORTED, "the abort callback asked to stop");
        return 1;
    }
    return 0;
}

/* act_pp_submit under rt->mu (held by the caller). Where the pipeline would refuse a second step in flight
 * (stage streams sharing one CUDA device, MEMRA_PP_SAME_DEVICE_PIPE unset), wait for the steps in flight
 * first: the API then runs one step at a time there instead of failing. */
static int submit_locked(memra_runtime *rt, const act_pp_step *st, act_pending **out, dev_err *err)
{
    if (act_pp_pipelining_refused(rt->pp)) { /* the runtime's seams as the submit will take them */
        int r = act_pp_drain(rt->pp, err);
        if (r)
            return r;
    }
    return act_pp_submit(rt->pp, st, out, err);
}

/* api_submit with the rows counted as n_decoded decode tokens and n_primed prompt tokens. */
static int submit_counted(memra_runtime *rt, const act_pp_step *st, act_pending **deps, int n_deps, int n_decoded,
                          int n_primed, memra_pending **out)
{
    dev_err err = {0};
    memra_pending *p = calloc(1, sizeof *p);
    if (!p)
        return api_fail(&rt->err, MEMRA_E_NOMEM, "submit: out of host memory");
    pthread_mutex_lock(&rt->mu);
    int r = submit_locked(rt, st, &p->ap, &err);
    if (r == 0) {
        p->rt = rt;
        p->deps = deps;
        p->n_deps = n_deps;
        p->greedy = st->logits == ACT_LOGITS_ARGMAX;
        p->next = rt->pendings;
        if (rt->pendings)
            rt->pendings->prev = p;
        rt->pendings = p;
        rt->tokens_primed += (uint64_t)n_primed;
        rt->tokens_decoded += (uint64_t)n_decoded;
        if (p->greedy)
            rt->greedy_steps++;
    }
    pthread_mutex_unlock(&rt->mu);
    if (r) {
        free(p);
        return api_fail_err(&rt->err, &err);
    }
    *out = p;
    return MEMRA_OK;
}

int api_submit(memra_runtime *rt, const act_pp_step *st, act_pending **deps, int n_deps, memra_pending **out)
{
    const int prime = st->kind == ACT_STEP_PRIME || st->kind == ACT_STEP_PRIME_BATCH;
    return submit_counted(rt, st, deps, n_deps, prime ? 0 : st->B, prime ? st->B : 0, out);
}

int api_submit_counted(memra_runtime *rt, const act_pp_step *st, int n_decoded, int n_primed, memra_pending **out)
{
    return submit_counted(rt, st, NULL, 0, n_decoded, n_primed, out);
}

/* Submit a chunk that produces no logits; the act_pending is kept to be waited before the last chunk's. */
static int submit_bare(memra_runtime *rt, const act_pp_step *st, act_pending **out)
{
    dev_err err = {0};
    pthread_mutex_lock(&rt->mu);
    int r = submit_locked(rt, st, out, &err);
    if (r == 0)
        rt->tokens_primed += (uint64_t)st->B;
    pthread_mutex_unlock(&rt->mu);
    return r ? api_fail_err(&rt->err, &err) : MEMRA_OK;
}

static int check_tokens(memra_runtime *rt, const memra_token *t, int n, const char *fn)
{
    for (int i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= rt->n_vocab)
            return api_fail(&rt->err, MEMRA_E_INVAL, "%s: token[%d] = %d is outside the vocabulary 0..%d", fn, i,
                            t[i], rt->n_vocab - 1);
    return 0;
}

int memra_seq_prime(memra_seq *seq, const memra_token *tokens, int n, int chunk, memra_pending **out)
{
    int r = api_seq_check(seq, "memra_seq_prime");
    if (out)
        *out = NULL;
    if (r)
        return r;
    memra_runtime *rt = seq->rt;
    if (!tokens || n < 1 || chunk < 0 || chunk > rt->max_rows)
        return api_fail(&rt->err, MEMRA_E_INVAL, "memra_seq_prime: tokens=%p n=%d chunk=%d (need tokens, n >= 1, "
                        "chunk in 0..%d with 0 = max_rows)", (const void *)tokens, n, chunk, rt->max_rows);
    if ((r = check_tokens(rt, tokens, n, "memra_seq_prime")) != 0)
        return r;
    if (n > rt->n_ctx - seq->pos)
        return api_fail(&rt->err, MEMRA_E_FULL, "memra_seq_prime: %d tokens after %d do not fit in n_ctx %d", n,
                        seq->pos, rt->n_ctx);
    if (chunk == 0)
        chunk = rt->max_rows;
    int n_chunks = (n + chunk - 1) / chunk, n_deps = 0;
    int32_t *sp = malloc(2 * (size_t)chunk * sizeof *sp);
    act_pending **deps = n_chunks > 1 ? calloc((size_t)n_chunks - 1, sizeof *deps) : NULL;
    memra_pending *last = NULL;
    if (!sp || (n_chunks > 1 && !deps)) {
        r = api_fail(&rt->err, MEMRA_E_NOMEM, "memra_seq_prime: out of host memory");
        goto out;
    }
    seq->greedy_tail = 0; /* a prompt follows the last greedy token: nothing to feed from (even if a chunk fails) */
    for (int c = 0; c < n_chunks; c++) {
        if (api_should_abort(rt)) {
            r = MEMRA_E_ABORTED;
            goto out;
        }
        int off = c * chunk, B = n - off < chunk ? n - off : chunk;
        for (int i = 0; i < B; i++)
            sp[i] = seq->slot, sp[chunk + i] = seq->pos + i;
        act_pp_step st = {.kind = ACT_STEP_PRIME, .B = B, .tokens = tokens + off, .seq = sp, .pos = sp + chunk,
                          .logits = c == n_chunks - 1 ? ACT_LOGITS_LAST : ACT_LOGITS_NONE};
        if (c < n_chunks - 1)
            r = submit_bare(rt, &st, &deps[n_deps]);
        else
            r = api_submit(rt, &st, deps, n_deps, &last);
        if (r)
            goto out;
        if (c < n_chunks - 1)
            n_deps++;
        else
            deps = NULL; /* adopted by the last pending */
        seq->pos += B;
    }
    if (out) {
        *out = last;
        last = NULL;
    } else {
        r = memra_pending_wait(last, NULL, NULL);
    }
out:
    for (int i = 0; deps && i < n_deps; i++)
        act_pending_release(deps[i]); /* safe unwaited: the step still runs, its buffers free after */
    free(deps);
    free(sp);
    memra_pending_free(last);
    return r;
}

/* One decode step of seq: token at position memra_seq_pos(), its result as `mode` asks (ACT_LOGITS_ALL: the
 * row's logits; ACT_LOGITS_ARGMAX: its greedy token, picked on the device); fed: the token is the one the
 * sequence's previous greedy step picks, read on the device (token unused). fn names the public call. */
static int seq_decode(memra_seq *seq, memra_token token, int fed, act_logits_mode mode, memra_pending **out,
                      const char *fn)
{
    if (out)
        *out = NULL;
    int r = api_seq_check(seq, fn);
    if (r)
        return r;
    memra_runtime *rt = seq->rt;
    if (!out)
        return api_fail(&rt->err, MEMRA_E_INVAL, "%s: out is NULL", fn);
    if (fed && !rt->feed)
        return api_fail(&rt->err, MEMRA_E_STATE, "%s: the runtime was created without device feed "
                        "(memra_runtime_params.device_feed)", fn);
    if (fed && !seq->greedy_tail)
        return api_fail(&rt->err, MEMRA_E_STATE, "%s: the sequence's last step is not a greedy decode "
                        "(memra_seq_decode_greedy or this call, not rewound since): there is no token to feed", fn);
    if (!fed && (r = check_tokens(rt, &token, 1, fn)) != 0)
        return r;
    if (seq->pos >= rt->n_ctx)
        return api_fail(&rt->err, MEMRA_E_FULL, "%s: the sequence holds n_ctx = %d tokens", fn, rt->n_ctx);
    if (api_should_abort(rt))
        return MEMRA_E_ABORTED;
    int32_t slot = seq->slot, pos = seq->pos;
    act_pp_step st = {.kind = ACT_STEP_EAGER, .B = 1, .tokens = &token, .seq = &slot, .pos = &pos, .logits = mode,
                      .feed = fed};
    if ((r = api_submit(rt, &st, NULL, 0, out)) == 0) {
        seq->pos++;
        seq->greedy_tail = mode == ACT_LOGITS_ARGMAX;
    }
    return r;
}

int memra_seq_decode(memra_seq *seq, memra_token token, memra_pending **out)
{
    return seq_decode(seq, token, 0, ACT_LOGITS_ALL, out, "memra_seq_decode");
}

int memra_seq_decode_greedy(memra_seq *seq, memra_token token, memra_pending **out)
{
    return seq_decode(seq, token, 0, ACT_LOGITS_ARGMAX, out, "memra_seq_decode_greedy");
}

int memra_seq_decode_greedy_next(memra_seq *seq, memra_pending **out)
{
    return seq_decode(seq, 0, 1, ACT_LOGITS_ARGMAX, out, "memra_seq_decode_greedy_next");
}

int memra_seq_verify(memra_seq *seq, const memra_token *tokens, int n, memra_pending **out)
{
    if (out)
        *out = NULL;
    int r = api_seq_check(seq, "memra_seq_verify");
    if (r)
        return r;
    memra_runtime *rt = seq->rt;
    if (!out || !tokens || n < 1 || n > rt->max_rows)
        return api_fail(&rt->err, MEMRA_E_INVAL, "memra_seq_verify: n=%d (allowed 1..%d) with tokens and out", n,
                        rt->max_rows);
    if ((r = check_tokens(rt, tokens, n, "memra_seq_verify")) != 0)
        return r;
    if (n > rt->n_ctx - seq->pos)
        return api_fail(&rt->err, MEMRA_E_FULL, "memra_seq_verify: %d tokens after %d do not fit in n_ctx %d", n,
                        seq->pos, rt->n_ctx);
    if (api_should_abort(rt))
        return MEMRA_E_ABORTED;
    int32_t *sp = malloc(2 * (size_t)n * sizeof *sp);
    if (!sp)
        return api_fail(&rt->err, MEMRA_E_NOMEM, "memra_seq_verify: out of host memory");
    for (int i = 0; i < n; i++)
        sp[i] = seq->slot, sp[n + i] = seq->pos + i;
    act_pp_step st = {.kind = ACT_STEP_SPEC, .B = n, .tokens = tokens, .seq = sp, .pos = sp + n,
                      .logits = ACT_LOGITS_ALL};
    if ((r = api_submit(rt, &st, NULL, 0, out)) == 0)
        seq->pos += n, seq->greedy_tail = 0;
    free(sp);
    return r;
}

int memra_decode_batch(memra_runtime *rt, memra_seq *const *seqs, const memra_token *tokens, int n,
                       memra_pending **out)
{
    if (out)
        *out = NULL;
    if (!rt)
        return api_fail(NULL, MEMRA_E_INVAL, "memra_decode_batch: runtime is NULL");
    if (!seqs || !tokens || !out || n < 1 || n > rt->max_rows)
        return api_fail(&rt->err, MEMRA_E_INVAL, "memra_decode_batch: n=%d (allowed 1..%d) with seqs, tokens "
                        "and out", n, rt->max_rows);
    for (int i = 0; i < n; i++) {
        if (!seqs[i] || seqs[i]->rt != rt)
            return api_fail(&rt->err, MEMRA_E_INVAL, "memra_decode_batch: seqs[%d] is %s", i,
                            seqs[i] ? "a sequence of another runtime" : "NULL");
        if (seqs[i]->slot < 0)
            return api_fail(&rt->err, MEMRA_E_STATE, "memra_decode_batch: seqs[%d] is closed", i);
        for (int j = 0; j < i; j++)
            if (seqs[j] == seqs[i])
                return api_fail(&rt->err, MEMRA_E_INVAL, "memra_decode_batch: seqs[%d] repeats seqs[%d] (one "
                                "row per sequence per step)", i, j);
        if (seqs[i]->pos >= rt->n_ctx)
            return api_fail(&rt->err, MEMRA_E_FULL, "memra_decode_batch: seqs[%d] holds n_ctx = %d tokens", i,
                            rt->n_ctx);
    }
    int r = check_tokens(rt, tokens, n, "memra_decode_batch");
    if (r)
        return r;
    if (api_should_abort(rt))
        return MEMRA_E_ABORTED;
    int32_t *sp = malloc(2 * (size_t)n * sizeof *sp);
    if (!sp)
        return api_fail(&rt->err, MEMRA_E_NOMEM, "memra_decode_batch: out of host memory");
    for (int i = 0; i < n; i++)
        sp[i] = seqs[i]->slot, sp[n + i] = seqs[i]->pos;
    act_pp_step st = {.kind = n > 1 ? ACT_STEP_BATCH : ACT_STEP_EAGER, .B = n, .tokens = tokens, .seq = sp,
                      .pos = sp + n, .logits = ACT_LOGITS_ALL};
    r = api_submit(rt, &st, NULL, 0, out);
    free(sp);
    if (r == 0)
        for (int i = 0; i < n; i++)
            seqs[i]->pos++, seqs[i]->greedy_tail = 0;
    return r;
}

/* ---- pendings ---- */

static const char *const wait_fn[2] = {"memra_pending_wait", "memra_pending_wait_token"};

/* A row whose logits are all -inf or NaN (NaN or -inf in the weights or activations) leaves no token to pick:
 * the wait succeeds (its caller decides what to do with the row), but the runtime's error (and this thread's)
 * says why the pick that follows fails. The scan stops at a row's first logit above -inf: one compare for a
 * usable row. */
static void note_rows_without_candidate(memra_pending *p, const float *l, int rows)
{
    const int n = p->rt->n_vocab;
    for (int r = 0; r < rows; r++) {
        const float *x = l + (size_t)r * (size_t)n;
        int k = 0;
        while (k < n && !(x[k] > -INFINITY))
            k++;
        if (k == n) {
            api_fail(&p->rt->err, MEMRA_E_INVAL, "step row %d: no logit is above -inf (all %d are -inf or NaN): no "
                     "token to pick; the model's weights or activations hold NaN or infinities", r, n);
            return;
        }
    }
}

/* Wait for p's earlier prompt chunks, then its own step, and read the step's result as `greedy` says (0: logits
 * into *logits, 1: argmax tokens into *tokens). A pending of the other kind is refused at once, nothing
 * waited, naming the reader that fits; it stays usable. */
static int pending_wait_as(memra_pending *p, int greedy, const float **logits, const int32_t **tokens, int *rows)
{
    if (!p)
        return api_fail(NULL, MEMRA_E_INVAL, "%s: pending is NULL", wait_fn[greedy]);
    if (p->greedy != greedy)
        return api_fail(&p->rt->err, MEMRA_E_INVAL, "%s: the pending holds %s: read it with %s", wait_fn[greedy],
                        p->greedy ? "a greedy token (memra_seq_decode_greedy), not logits" : "logits, not a token",
                        wait_fn[p->greedy]);
    dev_err err = {0};
    int r = 0;
    for (int i = 0; i < p->n_deps && r == 0; i++)
        r = act_pending_wait(p->deps[i], NULL, NULL, &err);
    int n_rows = 0;
    if (r == 0)
        r = greedy ? act_pending_wait_tokens(p->ap, tokens, &n_rows, &err)
                   : act_pending_wait(p->ap, logits, &n_rows, &err);
    if (rows)
        *rows = n_rows;
    if (r == 0 && !greedy && logits && *logits)
        note_rows_without_candidate(p, *logits, n_rows);
    return r ? api_fail_err(&p->rt->err, &err) : MEMRA_OK;
}

int memra_pending_wait(memra_pending *p, const float **logits, int *rows)
{
    if (logits)
        *logits = NULL;
    if (rows)
        *rows = 0;
    return pending_wait_as(p, 0, logits, NULL, rows);
}

int api_pending_wait_argmax(memra_pending *p, memra_token *token)
{
    const int32_t *t = NULL;
    int r = pending_wait_as(p, 1, NULL, &t, NULL);
    *token = r == 0 ? t[0] : -1; /* one row: a greedy pending is one decode step (memra_seq_decode_greedy) */
    if (r == 0 && *token < 0)
        api_fail(&p->rt->err, MEMRA_E_INVAL, "step row 0: no logit is above -inf (every one -inf or NaN): no token "
                 "to pick; the model's weights or activations hold NaN or infinities");
    return r;
}

int api_pending_wait_tokens(memra_pending *p, const int32_t **tokens, int *rows)
{
    return pending_wait_as(p, 1, NULL, tokens, rows);
}

int api_pending_wait_plain(memra_pending *p)
{
    const int32_t *t = NULL;
    return pending_wait_as(p, p->greedy, NULL, &t, NULL);
}

int memra_pending_wait_token(memra_pending *p, memra_token *token)
{
    if (!token)
        return api_fail(p ? &p->rt->err : NULL, MEMRA_E_INVAL, "memra_pending_wait_token: token is NULL");
    int r = api_pending_wait_argmax(p, token);
    if (r == 0 && *token < 0)
        r = api_fail(&p->rt->err, MEMRA_E_INVAL, "memra_pending_wait_token: no logit of the step's row is above -inf "
                     "(every one -inf or NaN): no token to pick, the row the greedy memra_sampler_sample refuses too");
    return r;
}

int memra_pending_poll(memra_pending *p)
{
    if (!p)
        return api_fail(NULL, MEMRA_E_INVAL, "memra_pending_poll: pending is NULL");
    for (int i = 0; i < p->n_deps; i++)
        if (!act_pending_ready(p->deps[i]))
            return 0;
    return act_pending_ready(p->ap);
}

void memra_pending_free(memra_pending *p)
{
    if (!p)
        return;
    memra_runtime *rt = p->rt;
    pthread_mutex_lock(&rt->mu);
    if (p->prev)
        p->prev->next = p->next;
    else
        rt->pendings = p->next;
    if (p->next)
        p->next->prev = p->prev;
    pthread_mutex_unlock(&rt->mu);
    for (int i = 0; i < p->n_deps; i++)
        act_pending_release(p->deps[i]);
    free(p->deps);
    act_pending_release(p->ap);
    free(p);
}
