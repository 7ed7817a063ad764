#include "gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/draft.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct sink {
    gen_out *outs;
    int stream;
    double t0;      /* when generation started */
    gen_stats *st;  /* first_s is set at the first token */
} sink;

/* Print outs[req]'s complete lines not yet printed, each prefixed with the prompt's number; with all, the
 * last partial line too (ended with a newline). */
static void print_lines(gen_out *o, int req, int all)
{
    while (o->printed < o->len) {
        const char *from = o->text + o->printed, *nl = memchr(from, '\n', o->len - o->printed);
        if (!nl && !all)
            break;
        size_t n = nl ? (size_t)(nl - from) + 1 : o->len - o->printed;
        printf("[%d] %.*s%s", req + 1, (int)n, from, nl ? "" : "\n");
        o->printed += n;
    }
    fflush(stdout);
}

static void put(sink *k, int req, const char *piece, int n)
{
    if (k->st->first_s == 0.0)
        k->st->first_s = now_s() - k->t0;
    if (n <= 0)
        return;
    if (k->stream) {
        fwrite(piece, 1, (size_t)n, stdout);
        fflush(stdout);
        return;
    }
    gen_out *o = &k->outs[req];
    if (o->len + (size_t)n + 1 > o->cap) {
        size_t cap = (o->cap + (size_t)n + 1) * 2;
        char *t = realloc(o->text, cap);
        if (!t)
            return;
        o->text = t, o->cap = cap;
    }
    memcpy(o->text + o->len, piece, (size_t)n);
    o->len += (size_t)n;
    o->text[o->len] = '\0';
    if (memchr(piece, '\n', (size_t)n))
        print_lines(o, req, 0);
}

static int on_token(void *user, int request, memra_token token, const char *piece, int n_piece)
{
    (void)token;
    put(user, request, piece, n_piece);
    return 0;
}

/* Emit one accepted token; returns 1 when generation must stop (end of generation). */
static int emit(const memra_model *m, sink *k, memra_token t)
{
    if (memra_token_is_eog(m, t))
        return 1;
    char piece[256];
    int n = 0;
    if (memra_token_to_piece(m, t, piece, sizeof piece, 0, &n) == MEMRA_OK)
        put(k, 0, piece, n);
    return 0;
}

/* Greedy speculative decoding: verify [last, d1..dk] in one step; keep the drafts the model agrees with
 * plus its own next token, then rewind the sequence past the rejected drafts. Output = plain greedy's. */
static int run_spec(memra_runtime *rt, const memra_model *m, const memra_token *prompt, int n_prompt, int n_predict,
                    int chunk, int K, sink *k, gen_stats *st)
{
    int n_ctx = memra_runtime_n_ctx(rt), n_vocab = memra_runtime_n_vocab(rt), r;
    memra_token *hist = malloc(sizeof *hist * (size_t)(n_ctx + 1)), rows[65];
    memra_seq *seq = memra_seq_open(rt);
    memra_pending *pd = NULL;
    const float *l;
    if (!hist || !seq) {
        r = !hist ? MEMRA_E_NOMEM : memra_last_status();
        goto done;
    }
    memcpy(hist, prompt, sizeof *hist * (size_t)n_prompt);
    int n = n_prompt, produced = 0, stop = 0;
    if ((r = memra_seq_prime(seq, prompt, n_prompt, chunk, &pd)) || (r = memra_pending_wait(pd, &l, NULL)))
        goto done;
    hist[n] = memra_argmax(l, n_vocab); /* the first generated token: not in the cache yet */
    memra_pending_free(pd);
    pd = NULL;
    stop = emit(m, k, hist[n]);
    n++, produced++;
    /* hist holds n tokens, the cache the first n - 1 (the last one is the next row): n - 1 < n_ctx leaves room for
     * it and for n_ctx - n drafts after it, so the last token comes from the cache's last position, as in plain
     * greedy */
    while (!stop && produced < n_predict && n <= n_ctx) {
        int room = n_ctx - n, draft = mdl_draft_lookup(hist, n, 1, 3, 1024, rows + 1, K < room ? K : room);
        rows[0] = hist[n - 1];
        int p = memra_seq_pos(seq); /* == n - 1 */
        if ((r = memra_seq_verify(seq, rows, draft + 1, &pd)) || (r = memra_pending_wait(pd, &l, NULL)))
            goto done;
        st->steps++;
        st->drafted += draft;
        int kept = 0; /* rows whose input token the model agreed with (row 0 always) */
        for (int i = 0; i <= draft && !stop && produced < n_predict && n <= n_ctx; i++) {
            memra_token want = memra_argmax(l + (size_t)i * (size_t)n_vocab, n_vocab);
            kept = i + 1;
            hist[n++] = want;
            produced++;
            stop = emit(m, k, want);
            if (i == draft || want != rows[i + 1])
                break;
            st->accepted++;
        }
        memra_pending_free(pd);
        pd = NULL;
        /* the cache holds rows 0..kept-1 correctly; rows after them were rejected drafts */
        if ((r = memra_seq_rewind(seq, p + kept)))
            goto done;
    }
    st->gen_tokens = produced;
    k->outs[0].n_tokens = produced;
    k->outs[0].ctx_full = !stop && produced < n_predict && n > n_ctx;
done:
    memra_pending_free(pd);
    if (seq)
        memra_seq_close(seq);
    free(hist);
    return r;
}

int gen_run(memra_runtime *rt, const memra_model *m, memra_token **prompts, const int *n_prompt, int n,
            int n_predict, int chunk, const memra_sampler_params *sp, int spec, int stream, gen_out *outs,
            gen_stats *st)
{
    memset(st, 0, sizeof *st);
    sink k = {.outs = outs, .stream = stream, .st = st};
    for (int i = 0; i < n; i++)
        st->prompt_tokens += n_prompt[i];
    double t0 = now_s();
    k.t0 = t0;
    int r;
    if (spec > 0) {
        r = run_spec(rt, m, prompts[0], n_prompt[0], n_predict, chunk, spec, &k, st);
    } else {
        memra_request reqs[64];
        memset(reqs, 0, sizeof reqs);
        for (int i = 0; i < n; i++) {
            reqs[i].prompt = prompts[i];
            reqs[i].n_prompt = n_prompt[i];
            reqs[i].n_predict = n_predict;
            reqs[i].sampling = *sp;
            reqs[i].sampling.seed = sp->seed + (uint64_t)i;
            reqs[i].stop_at_eog = 1;
        }
        r = memra_generate(rt, reqs, n, chunk, on_token, &k);
        for (int i = 0; i < n; i++) {
            st->gen_tokens += reqs[i].n_out;
            outs[i].n_tokens = reqs[i].n_out;
            if (reqs[i].status == MEMRA_E_FULL && reqs[i].n_out > 0) { /* its context filled: an end */
                outs[i].ctx_full = 1;
                continue;
            }
            if (!st->failed && reqs[i].status != MEMRA_OK && (r == MEMRA_OK || r == reqs[i].status))
                st->failed = i + 1;
            if (r == MEMRA_OK && reqs[i].status != MEMRA_OK)
                r = reqs[i].status;
        }
    }
    for (int i = 0; !stream && i < n; i++)
        print_lines(&outs[i], i, 1);
    st->seconds = now_s() - t0;
    return r;
}
