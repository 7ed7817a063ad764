/* The gate arms. Every arm: split arm through act_pp_submit, reference through act_pp_run_unsplit, same
 * loaded model, bitwise comparison per logit row, the arm's counter must advance. */
#include "tools/memra-gate/gate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/llama.h"
#include "model/sampler.h"

act_gate_params act_gate_default_params(act_gate_arm arm)
{
    act_gate_params p = {.arm = arm, .steps = 8, .seqs = 3, .prompt = 24, .chunk = 8, .draft = 4, .runs = 20,
                         .jitter_us = 200, .rendezvous_ms = 1000, .seed = 0x5eed, .log = NULL};
    return p;
}

static const char *arm_names[] = {"eager", "replay", "batch", "prime", "prime-batch", "spec", "soak"};

int act_gate_arm_parse(const char *name)
{
    for (int i = 0; i < (int)(sizeof arm_names / sizeof arm_names[0]); i++)
        if (strcmp(name, arm_names[i]) == 0)
            return i;
    return -1;
}

const char *act_gate_arm_name(act_gate_arm arm) { return arm_names[arm]; }

/* ---- shared pieces ---- */

typedef struct gate {
    act_pp *rt;
    const act_gate_params *p;
    act_gate_report *rep;
    int n_vocab;
    uint64_t rng;
    float *ref, *got; /* scratch rows */
} gate;

static int32_t draw_token(gate *g)
{
    g->rng ^= g->rng << 13;
    g->rng ^= g->rng >> 7;
    g->rng ^= g->rng << 17;
    return (int32_t)(g->rng % (uint64_t)g->n_vocab);
}


static uint64_t remote_bytes(act_pp *rt)
{
    dev_platform *plat = dev_device_platform(act_pp_stage_device(rt, 0));
    uint64_t sum = 0;
    for (int d = 0; d < dev_platform_count(plat); d++) {
        dev_counters c;
        dev_device_counters(dev_platform_device(plat, d), &c);
        sum += c.remote_read_bytes + c.remote_write_bytes;
    }
    return sum;
}

/* Compare rows of logits bit for bit; record the worst difference. */
static void compare_rows(gate *g, const float *ref, const float *got, int rows, const char *what, int step)
{
    for (int r = 0; r < rows; r++) {
        const float *a = ref + (size_t)r * (size_t)g->n_vocab, *b = got + (size_t)r * (size_t)g->n_vocab;
        int same = memcmp(a, b, (size_t)g->n_vocab * sizeof(float)) == 0;
        float worst = 0;
        for (int i = 0; i < g->n_vocab; i++) {
            float d = fabsf(a[i] - b[i]);
            if (d > worst || d != d)
                worst = d;
        }
        if (worst > g->rep->max_abs_diff || worst != worst)
            g->rep->max_abs_diff = worst;
        g->rep->compared++;
        if (!same) {
            if (g->rep->mismatches == 0)
                snprintf(g->rep->msg, sizeof g->rep->msg, "%s step %d row %d: logits differ (max |diff| %g)", what,
                         step, r, worst);
            g->rep->mismatches++;
        }
        if (g->p->log)
            fprintf(g->p->log, "  %-7s step %3d row %2d: %s (top-1 %d)\n", what, step, r,
                    same ? "bit-identical" : "DIFFERENT", mdl_argmax(b, g->n_vocab));
    }
}

/* Split arm: submit + wait, rows copied to out; remote bytes of the split arm accumulated. */
static int split_sync(gate *g, const act_pp_step *st, float *out, dev_err *err)
{
    act_pending *pd;
    uint64_t r0 = remote_bytes(g->rt);
    int r = act_pp_submit(g->rt, st, &pd, err);
    if (r != 0)
        return r;
    const float *l;
    int rows;
    r = act_pending_wait(pd, &l, &rows, err);
    if (r == 0 && rows > 0)
        memcpy(out, l, (size_t)rows * (size_t)g->n_vocab * sizeof(float));
    act_pending_release(pd);
    g->rep->split_remote_bytes += remote_bytes(g->rt) - r0;
    return r;
}

static act_pp_step one_row(act_step_kind kind, const int32_t *tok, const int32_t *seq, const int32_t *pos)
{
    act_pp_step s = {.kind = kind, .B = 1, .tokens = tok, .seq = seq, .pos = pos, .logits = ACT_LOGITS_ALL};
    return s;
}

/* ---- arms ---- */

static int arm_eager(gate *g, dev_err *err)
{
    int32_t tok = draw_token(g), seq = 0;
    for (int t = 0; t < g->p->steps; t++) {
        int32_t pos = t;
        act_pp_step st = one_row(ACT_STEP_EAGER, &tok, &seq, &pos);
        int r;
        if ((r = split_sync(g, &st, g->got, err)) != 0 || (r = act_pp_run_unsplit(g->rt, &st, g->ref, err)) != 0)
            return r;
        compare_rows(g, g->ref, g->got, 1, "eager", t);
        tok = mdl_argmax(g->got, g->n_vocab); /* greedy: a real continuation */
    }
    return 0;
}

/* The serial reference of a greedy sequence: tokens[0..T) and their logits, from the unsplit arm. */
static int serial_reference(gate *g, int32_t *tokens, float *logits, dev_err *err)
{
    int32_t seq = 0;
    tokens[0] = draw_token(g);
    for (int t = 0; t < g->p->steps; t++) {
        int32_t pos = t;
        act_pp_step st = one_row(ACT_STEP_EAGER, &tokens[t], &seq, &pos);
        float *row = logits + (size_t)t * (size_t)g->n_vocab;
        int r = act_pp_run_unsplit(g->rt, &st, row, err);
        if (r != 0)
            return r;
        if (t + 1 < g->p->steps)
            tokens[t + 1] = mdl_argmax(row, g->n_vocab);
    }
    return 0;
}

/* Pipelined replay: every known token submitted back to back, then drained and compared. Returns the
 * number of mismatching steps in *bad. */
static int replay_once(gate *g, const int32_t *tokens, const float *ref, int *bad, dev_err *err)
{
    int T = g->p->steps, r = 0;
    act_pending **pd = calloc((size_t)T, sizeof *pd);
    int32_t *pos = malloc((size_t)T * sizeof *pos), seq = 0;
    if (!pd || !pos) {
        free(pd);
        free(pos);
        return dev_err_set(err, MEMRA_E_NOMEM, "gate: out of memory");
    }
    uint64_t r0 = remote_bytes(g->rt);
    int submitted = 0;
    act_pp_hold_start(g->rt, g->p->rendezvous_ms > 0); /* every step is posted before the first walk */
    for (int t = 0; t < T && r == 0; t++) {
        pos[t] = t;
        act_pp_step st = one_row(ACT_STEP_EAGER, &tokens[t], &seq, &pos[t]);
        if ((r = act_pp_submit(g->rt, &st, &pd[t], err)) == 0)
            submitted++;
    }
    act_pp_hold_start(g->rt, 0);
    int before = g->rep->mismatches;
    for (int t = 0; t < submitted; t++) {
        const float *l;
        int rows, w = act_pending_wait(pd[t], &l, &rows, err);
        if (w == 0 && r == 0)
            compare_rows(g, ref + (size_t)t * (size_t)g->n_vocab, l, 1, "replay", t);
        else if (r == 0)
            r = w;
        act_pending_release(pd[t]);
    }
    g->rep->split_remote_bytes += remote_bytes(g->rt) - r0;
    *bad = g->rep->mismatches - before;
    free(pd);
    free(pos);
    return r;
}

static int arm_replay(gate *g, int runs, dev_err *err)
{
    int T = g->p->steps;
    int32_t *tokens = malloc((size_t)T * sizeof *tokens);
    float *ref = malloc((size_t)T * (size_t)g->n_vocab * sizeof(float));
    int r = (!tokens || !ref) ? dev_err_set(err, MEMRA_E_NOMEM, "gate: out of memory") : 0;
    if (r == 0)
        r = serial_reference(g, tokens, ref, err);
    act_pp_set_rendezvous(g->rt, g->p->rendezvous_ms > 0, g->p->rendezvous_ms);
    for (int run = 0; run < runs && r == 0; run++) {
        if (g->p->arm == ACT_GATE_SOAK)
            act_pp_set_jitter(g->rt, g->p->jitter_us, g->p->seed + (uint64_t)run * 7919u);
        int bad = 0;
        r = replay_once(g, tokens, ref, &bad, err);
        act_pp_set_jitter(g->rt, 0, 0);
        if (r == 0 && bad == 0)
            g->rep->runs_ok++;
        if (g->p->log && g->p->arm == ACT_GATE_SOAK)
            fprintf(g->p->log, "soak run %d/%d: %s\n", run + 1, runs, bad ? "DIFFERENT" : "bit-identical");
    }
    act_pp_set_rendezvous(g->rt, 0, 0);
    free(tokens);
    free(ref);
    return r;
}

static int arm_batch(gate *g, dev_err *err)
{
    int S = g->p->seqs;
    int32_t tok[64], seq[64], pos[64];
    if (S < 1 || S > 64)
        return dev_err_set(err, MEMRA_E_INVAL, "gate batch: seqs=%d (allowed 1..64)", S);
    for (int b = 0; b < S; b++)
        tok[b] = draw_token(g), seq[b] = b;
    for (int t = 0; t < g->p->steps; t++) {
        for (int b = 0; b < S; b++)
            pos[b] = t;
        act_pp_step st = {.kind = ACT_STEP_BATCH, .B = S, .tokens = tok, .seq = seq, .pos = pos,
                          .logits = ACT_LOGITS_ALL};
        int r;
        if ((r = split_sync(g, &st, g->got, err)) != 0 || (r = act_pp_run_unsplit(g->rt, &st, g->ref, err)) != 0)
            return r;
        compare_rows(g, g->ref, g->got, S, "batch", t);
        for (int b = 0; b < S; b++)
            tok[b] = mdl_argmax(g->got + (size_t)b * (size_t)g->n_vocab, g->n_vocab);
    }
    return 0;
}

/* Prime S prompts of P tokens in chunks of C rows (S=1: PRIME steps; S>1: PRIME_BATCH steps with every
 * sequence's chunk in one step), split arm pipelined when MEMRA_PRIME_PIPE=1, then compare the last chunk's
 * logits and `steps` eager decode steps (which read the primed KV). */
static int arm_prime(gate *g, int S, dev_err *err)
{
    int P = g->p->prompt, C = g->p->chunk, n_chunks = (P + C - 1) / C, r = 0;
    act_pp_seams seams;
    act_pp_get_seams(g->rt, &seams);
    int32_t *prompt = malloc((size_t)S * (size_t)P * sizeof *prompt);
    int32_t *tok = malloc((size_t)S * (size_t)C * 3 * sizeof *tok);
    act_pending **pd = calloc((size_t)n_chunks, sizeof *pd);
    if (!prompt || !tok || !pd) {
        r = dev_err_set(err, MEMRA_E_NOMEM, "gate: out of memory");
        goto done;
    }
    for (int i = 0; i < S * P; i++)
        prompt[i] = draw_token(g);
    int32_t *seq = tok + S * C, *pos = seq + S * C;
    act_step_kind kind = S > 1 ? ACT_STEP_PRIME_BATCH : ACT_STEP_PRIME;
    act_pp_set_rendezvous(g->rt, g->p->rendezvous_ms > 0, g->p->rendezvous_ms);
    uint64_t r0 = remote_bytes(g->rt);
    for (int arm = 0; arm < 2 && r == 0; arm++) { /* arm 0: split, arm 1: unsplit reference */
        if (arm == 0 && seams.prime_pipe) /* every chunk is posted before the first walk */
            act_pp_hold_start(g->rt, g->p->rendezvous_ms > 0);
        for (int c = 0; c < n_chunks && r == 0; c++) {
            int c0 = c * C, n = P - c0 < C ? P - c0 : C, B = 0;
            for (int s = 0; s < S; s++)
                for (int i = 0; i < n; i++, B++)
                    tok[B] = prompt[s * P + c0 + i], seq[B] = s, pos[B] = c0 + i;
            int last = c == n_chunks - 1;
            act_pp_step st = {.kind = kind, .B = B, .tokens = tok, .seq = seq, .pos = pos,
                              .logits = !last ? ACT_LOGITS_NONE : S > 1 ? ACT_LOGITS_ALL : ACT_LOGITS_LAST};
            if (arm == 1) {
                r = act_pp_run_unsplit(g->rt, &st, g->ref, err);
                continue;
            }
            if ((r = act_pp_submit(g->rt, &st, &pd[c], err)) != 0) {
                act_pp_hold_start(g->rt, 0);
                break;
            }
            if (!seams.prime_pipe || last) { /* serial chunk walk, or the end of the pipelined prime */
                act_pp_hold_start(g->rt, 0);
                for (int w = 0; w <= c && r == 0; w++) {
                    if (!pd[w])
                        continue;
                    const float *l;
                    int rows;
                    r = act_pending_wait(pd[w], &l, &rows, err);
                    if (r == 0 && w == n_chunks - 1)
                        memcpy(g->got, l, (size_t)rows * (size_t)g->n_vocab * sizeof(float));
                    act_pending_release(pd[w]);
                    pd[w] = NULL;
                }
            }
        }
        if (arm == 0)
            g->rep->split_remote_bytes += remote_bytes(g->rt) - r0;
    }
    act_pp_set_rendezvous(g->rt, 0, 0);
    if (r == 0) {
        int last_rows = S > 1 ? S * (P - (n_chunks - 1) * C) : 1;
        compare_rows(g, g->ref, g->got, last_rows, "prime", n_chunks - 1);
    }
    /* decode on top of the primed caches: the KV written by the chunks must match too */
    for (int t = 0; t < g->p->steps && r == 0; t++) {
        int32_t tk = mdl_argmax(g->got, g->n_vocab), sq = 0, ps = P + t;
        act_pp_step st = one_row(ACT_STEP_EAGER, &tk, &sq, &ps);
        if ((r = split_sync(g, &st, g->got, err)) == 0 && (r = act_pp_run_unsplit(g->rt, &st, g->ref, err)) == 0)
            compare_rows(g, g->ref, g->got, 1, "decode", t);
    }
done:
    for (int c = 0; pd && c < n_chunks; c++)
        if (pd[c]) {
            act_pending_wait(pd[c], NULL, NULL, NULL);
            act_pending_release(pd[c]);
        }
    free(prompt);
    free(tok);
    free(pd);
    return r;
}

static int arm_spec(gate *g, dev_err *err)
{
    int T = g->p->draft, rounds = (g->p->steps + T - 1) / T;
    int32_t tok[64], seq[64], pos[64];
    if (T < 1 || T > 64)
        return dev_err_set(err, MEMRA_E_INVAL, "gate spec: draft=%d (allowed 1..64)", T);
    int at = 0;
    for (int k = 0; k < rounds; k++) {
        for (int i = 0; i < T; i++)
            tok[i] = draw_token(g), seq[i] = 0, pos[i] = at + i;
        act_pp_step st = {.kind = ACT_STEP_SPEC, .B = T, .tokens = tok, .seq = seq, .pos = pos,
                          .logits = ACT_LOGITS_ALL};
        int r;
        if ((r = split_sync(g, &st, g->got, err)) != 0 || (r = act_pp_run_unsplit(g->rt, &st, g->ref, err)) != 0)
            return r;
        compare_rows(g, g->ref, g->got, T, "spec", k);
        at += T; /* accept every draft: the next round continues after them */
    }
    return 0;
}

/* ---- driver ---- */

static uint64_t counter_of(act_pp *rt, act_gate_arm arm, const char **name)
{
    act_pp_counters c;
    act_pp_get_counters(rt, &c);
    switch (arm) {
    case ACT_GATE_BATCH: *name = "BATCH_SPLIT_STEPS"; return c.batch_split_steps;
    case ACT_GATE_PRIME: *name = "PRIME_SPLIT_CHUNKS"; return c.prime_split_chunks;
    case ACT_GATE_PRIME_BATCH: *name = "STEP35_PRIME_BATCH_SPLITS"; return c.prime_batch_splits;
    case ACT_GATE_SPEC: *name = "SPEC_SPLIT_STEPS"; return c.spec_split_steps;
    default: *name = "PP_SPLIT_STEPS"; return c.split_steps;
    }
}

int act_gate_run(act_pp *rt, const act_gate_params *p, act_gate_report *rep, dev_err *err)
{
    memset(rep, 0, sizeof *rep);
    const mdl_hparams *hp = mdl_model_hparams(act_pp_model(rt));
    gate g = {.rt = rt, .p = p, .rep = rep, .n_vocab = hp->n_vocab, .rng = p->seed | 1};
    int rows = 64; /* the most logit rows any arm compares at once */
    if (p->seqs * p->chunk > rows)
        rows = p->seqs * p->chunk;
    if (p->seqs > rows)
        rows = p->seqs;
    if (p->draft > rows)
        rows = p->draft;
    g.ref = malloc((size_t)rows * (size_t)g.n_vocab * sizeof(float));
    g.got = malloc((size_t)rows * (size_t)g.n_vocab * sizeof(float));
    if (!g.ref || !g.got) {
        free(g.ref);
        free(g.got);
        return dev_err_set(err, MEMRA_E_NOMEM, "gate: out of memory");
    }
    act_pp_counters c0, c1;
    act_pp_get_counters(rt, &c0);
    dev_platform *plat = dev_device_platform(act_pp_stage_device(rt, 0));
    uint64_t races0 = dev_race_count(plat);
    rep->counter_before = counter_of(rt, p->arm, &rep->counter_name);
    uint64_t pb0 = c0.prime_batches;
    int r;
    switch (p->arm) {
    case ACT_GATE_EAGER: r = arm_eager(&g, err); break;
    case ACT_GATE_REPLAY: r = arm_replay(&g, 1, err); break;
    case ACT_GATE_SOAK: r = arm_replay(&g, p->runs, err); break;
    case ACT_GATE_BATCH: r = arm_batch(&g, err); break;
    case ACT_GATE_PRIME: r = arm_prime(&g, 1, err); break;
    case ACT_GATE_PRIME_BATCH: r = arm_prime(&g, p->seqs, err); break;
    case ACT_GATE_SPEC: r = arm_spec(&g, err); break;
    default: r = dev_err_set(err, MEMRA_E_INVAL, "gate: unknown arm %d", (int)p->arm);
    }
    free(g.ref);
    free(g.got);
    if (r != 0)
        return r;
    rep->counter_after = counter_of(rt, p->arm, &rep->counter_name);
    act_pp_get_counters(rt, &c1);
    rep->pipe_overlaps = c1.pipe_overlaps - c0.pipe_overlaps;
    if (p->arm == ACT_GATE_PRIME || p->arm == ACT_GATE_PRIME_BATCH)
        rep->pipe_overlaps = c1.prime_pipe_overlaps - c0.prime_pipe_overlaps; /* PRIME_PIPE_OVERLAPS */

    /* verdict: bits, the liveness counter, overlap in the pipelined arms, no remote bytes when sharded */
    int N = act_pp_stages(rt);
    const act_pp_config *cfg = act_pp_get_config(rt);
    int pipelined = p->arm == ACT_GATE_REPLAY || p->arm == ACT_GATE_SOAK ||
                    ((p->arm == ACT_GATE_PRIME || p->arm == ACT_GATE_PRIME_BATCH) && cfg->streams);
    act_pp_seams seams;
    act_pp_get_seams(rt, &seams);
    if (p->arm == ACT_GATE_PRIME || p->arm == ACT_GATE_PRIME_BATCH)
        pipelined = pipelined && seams.prime_pipe;
    rep->pass = 0;
    if (rep->mismatches > 0)
        return 0; /* msg names the first differing step */
    if (dev_race_count(plat) > races0) {
        char first[256];
        dev_race_first(plat, first, sizeof first);
        snprintf(rep->msg, sizeof rep->msg, "the stream-order checker reported %llu race(s); first: %s",
                 (unsigned long long)(dev_race_count(plat) - races0), first);
        return 0;
    }
    if (N < 2) {
        snprintf(rep->msg, sizeof rep->msg, "the pipeline door is shut (N=1): nothing was split, the comparison is "
                                            "vacuous; set MEMRA_PP_STAGES>=2");
        return 0;
    }
    if (rep->counter_after <= rep->counter_before) {
        snprintf(rep->msg, sizeof rep->msg, "%s did not advance (%llu): the split arm never ran its per-stage walk",
                 rep->counter_name, (unsigned long long)rep->counter_after);
        return 0;
    }
    if (p->arm == ACT_GATE_PRIME_BATCH && c1.prime_batches <= pb0) {
        snprintf(rep->msg, sizeof rep->msg, "STEP35_PRIME_BATCHES did not advance");
        return 0;
    }
    if (pipelined && cfg->streams && rep->pipe_overlaps == 0) {
        snprintf(rep->msg, sizeof rep->msg, "%s did not advance: no two stages were ever busy at once",
                 p->arm == ACT_GATE_PRIME || p->arm == ACT_GATE_PRIME_BATCH ? "PRIME_PIPE_OVERLAPS" : "PP_PIPE_OVERLAPS");
        return 0;
    }
    if (act_pp_sharded_cross_device(cfg) && rep->split_remote_bytes > 0) {
        snprintf(rep->msg, sizeof rep->msg, "split arm read %llu remote bytes under a sharded cross-device placement",
                 (unsigned long long)rep->split_remote_bytes);
        return 0;
    }
    if (p->arm == ACT_GATE_SOAK && rep->runs_ok != p->runs) {
        snprintf(rep->msg, sizeof rep->msg, "soak: %d/%d runs bit-identical", rep->runs_ok, p->runs);
        return 0;
    }
    rep->pass = 1;
    snprintf(rep->msg, sizeof rep->msg, "%d rows bit-identical; %s %llu -> %llu; overlaps +%llu; remote bytes %llu",
             rep->compared, rep->counter_name, (unsigned long long)rep->counter_before,
             (unsigned long long)rep->counter_after, (unsigned long long)rep->pipe_overlaps,
             (unsigned long long)rep->split_remote_bytes);
    return 0;
}
